//! `mrshim analyze` on the corpus of real public failure reports (tests/fixtures/real): each file holds
//! its source link, the machine output exactly as posted, the cause the thread established and the
//! category a maintainer would name first. Prints the per-file table and top-1/top-3 accuracy, and fails
//! below the level reached (documented in docs/analyze.md).
use std::path::{Path, PathBuf};
use std::process::Command;

/// Top-1 over the reports whose output holds the cause, top-3 over all: the levels reached (17/17 and 28/30
/// on the 30 reports of 2026-12-03; the floor is 90 % for both).
const MIN_TOP1_IN_LOG: f64 = 1.00;
const MIN_TOP3_ALL: f64 = 0.93;

struct Case {
    file: PathBuf,
    source: String,
    expected: String,
    in_log: bool,
}

fn header(text: &str, key: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
}

fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).expect("corpus dir").map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let name = file.display().to_string();
            let source = header(&text, "source").unwrap_or_else(|| panic!("{name}: no ## source"));
            let expected = header(&text, "expected").unwrap_or_else(|| panic!("{name}: no ## expected"));
            assert!(header(&text, "cause").is_some_and(|c| !c.is_empty()), "{name}: no ## cause");
            let in_log = match header(&text, "in-log").as_deref() {
                Some("yes") => true,
                Some("no") => false,
                other => panic!("{name}: ## in-log must be yes or no, not {other:?}"),
            };
            Case { file, source, expected, in_log }
        })
        .collect()
}

fn categories(file: &Path) -> (i32, Vec<String>) {
    let out = Command::new(mrshim_test_support::mrshim_bin()).arg("analyze").arg("--json").arg(file).output().unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{}: bad JSON ({e})", file.display()));
    let cats = v["findings"]
        .as_array()
        .map(|a| a.iter().map(|f| f["category"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    (out.status.code().unwrap_or(-1), cats)
}

#[test]
fn real_reports_top1_and_top3() {
    let cases = corpus();
    let sources: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.source.as_str()).collect();
    assert_eq!(sources.len(), cases.len(), "one file per report");
    let (mut top1_in, mut n_in, mut top3, mut top1) = (0, 0, 0, 0);
    let mut bad_exit = Vec::new();
    println!("{:<48} {:<20} {:<5} {:<4} got", "report", "expected", "inlog", "rank");
    for c in &cases {
        let (code, cats) = categories(&c.file);
        if code != 1 {
            bad_exit.push(format!("{}: exit {code}", c.file.display()));
        }
        let rank = cats.iter().position(|x| *x == c.expected);
        let hit1 = rank == Some(0);
        let hit3 = rank.is_some_and(|r| r < 3);
        top1 += hit1 as usize;
        top3 += hit3 as usize;
        if c.in_log {
            n_in += 1;
            top1_in += hit1 as usize;
        }
        println!(
            "{:<48} {:<20} {:<5} {:<4} {}",
            c.file.file_name().unwrap().to_string_lossy(),
            c.expected,
            if c.in_log { "yes" } else { "no" },
            rank.map_or("-".into(), |r| (r + 1).to_string()),
            cats.join(",")
        );
    }
    let n = cases.len();
    let p1_in = top1_in as f64 / n_in.max(1) as f64;
    let p3 = top3 as f64 / n as f64;
    println!(
        "corpus: {n} reports; top-1 {top1}/{n} = {:.1} % overall, {top1_in}/{n_in} = {:.1} % where the log holds the cause; top-3 {top3}/{n} = {:.1} %",
        100.0 * top1 as f64 / n as f64,
        100.0 * p1_in,
        100.0 * p3
    );
    assert!(bad_exit.is_empty(), "failure reports must exit 1 (findings): {bad_exit:?}");
    assert!(p1_in >= MIN_TOP1_IN_LOG, "top-1 where the log holds the cause fell to {:.1} %", 100.0 * p1_in);
    assert!(p3 >= MIN_TOP3_ALL, "top-3 fell to {:.1} %", 100.0 * p3);
}

/// The issue asks for at least 40 reports; the corpus has 30 so far (see docs/analyze.md). Run with
/// `--ignored` to see the gap; it stays ignored until the corpus is complete instead of being called done.
#[test]
#[ignore = "the corpus has 30 of the 40 reports issue 13 asks for"]
fn corpus_has_at_least_40_reports() {
    let n = corpus().len();
    assert!(n >= 40, "the corpus has {n} reports, the issue asks for at least 40");
}
