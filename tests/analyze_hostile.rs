//! `mrshim analyze` on inputs laid out by someone else (issue 20): directory links that lead back,
//! and log text meant for the terminal.
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrshim-hostile-analyze-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn analyze(args: &[&str], dir: &Path) -> (i32, String, String) {
    let mut c = Command::new("timeout");
    c.args(["-k", "2", "60"]).arg(mrshim_test_support::mrshim_bin()).arg("analyze").args(args).arg(dir);
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `latest -> run3`, `run3/self -> .` and two directories linking into each other: every file is
/// read once, the walk ends, and each link that leads back is a note.
#[test]
fn directory_links_that_lead_back_are_read_once() {
    let d = tmpdir("links");
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs/memlock-limit/nccl-2.18-two-nodes.log");
    std::fs::create_dir(d.join("run3")).unwrap();
    std::fs::copy(&log, d.join("run3/job.log")).unwrap();
    let link = |to: &str, at: &str| std::os::unix::fs::symlink(to, d.join(at)).unwrap();
    link("run3", "latest");
    link(".", "run3/self");
    std::fs::create_dir(d.join("a")).unwrap();
    std::fs::create_dir(d.join("b")).unwrap();
    link("../b", "a/tob");
    link("../a", "b/toa");
    let (code, out, err) = analyze(&["--json"], &d);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["inputs"].as_array().unwrap().len(), 1, "{}", v["inputs"]);
    assert_eq!(v["findings"][0]["count"], 2, "each failure counted once");
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert_eq!(notes.len(), 4, "{notes:?}");
    assert!(notes.iter().all(|n| n.ends_with(": skipped: already read through another path")), "{notes:?}");
}

/// Text from a log never reaches the terminal as control characters (an escape sequence in a
/// host name or an error text could clear the screen or hide lines): it is shown escaped.
#[test]
fn control_characters_from_logs_are_shown_escaped() {
    let d = tmpdir("ctrl");
    let line = "gpu-b\u{1b}]0;owned\u{7}:5202:5290 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory \u{1b}[2J\u{202e}gnp.exe\n";
    std::fs::write(d.join("job\u{1b}[31m.log"), line.repeat(2)).unwrap();
    let (code, out, err) = analyze(&["--color", "never"], &d);
    assert_eq!(code, 1, "{out}{err}");
    for text in [&out, &err] {
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'), "{text:?}");
    }
    // terminal sequences inside a line (a title, colours) are taken off before it is read: the host
    // is the one the line names; a file's name keeps them, shown escaped
    assert!(out.contains("on gpu-b (ranks 0)") && !out.contains("owned"), "{out}");
    assert!(out.contains("job\\x1b[31m.log"), "{out}");
}
