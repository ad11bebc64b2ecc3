//! `--report out.html`: one self-contained page (no scripts, no network), rendered by a real headless
//! Chromium (Debian's `chromium`, from scripts/install-deps): the DOM it builds has the findings, the
//! per-rank timeline and the size histogram, and a screenshot is produced.
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs").join(p)
}

fn chromium() -> PathBuf {
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(c).exists() {
            return c.into();
        }
    }
    panic!("chromium not found: run scripts/install-deps");
}

fn browser(args: &[&str], page: &Path, profile: &Path) -> std::process::Output {
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium")
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let dir = std::env::temp_dir().join(format!("mrshim-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let out = Command::new(mrshim_test_support::mrshim_bin())
        .args(["analyze", "--report"])
        .arg(&page)
        .arg(fixture("shim/multirank-memlock.jsonl"))
        .arg(fixture("memlock-limit"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("<script") && !html.contains(" src=") && !html.contains(" href="),
        "self-contained, no scripts or links"
    );
    assert!(!html.replace("http://www.w3.org/2000/svg", "").contains("http"), "no network references");

    let dom = browser(&["--dump-dom"], &page, &dir.join("profile1"));
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(dom.contains("data-category=\"memlock-limit\""), "findings in the DOM: {}", &dom[..dom.len().min(500)]);
    assert!(dom.contains("<svg id=\"timeline\""), "timeline svg");
    assert!(dom.contains("class=\"fail\""), "failures plotted");
    assert!(dom.contains("nodeB r7"), "one row per rank");
    assert!(dom.contains("<svg id=\"histogram\""), "histogram svg");
    assert!(dom.contains("4 MiB"), "size buckets labelled");

    let shot = dir.join("shot.png");
    let _ = browser(
        &[&format!("--screenshot={}", shot.display()), "--window-size=1000,1400"],
        &page,
        &dir.join("profile2"),
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"), "a real rendering ({} bytes)", png.len());
    let _ = std::fs::remove_dir_all(&dir);
}
