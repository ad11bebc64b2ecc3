//! `mrshim analyze` at cluster scale, on jobs generated here (mrshim_analyze::gen::job, the shim's own
//! record types): 4096 ranks on 512 hosts with 3 failing hosts reads as one screen with host lists, and
//! `--json` has one entry per host; a job in which ranks were killed or never started names them.
use mrshim_analyze::gen::{job, JobSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A path for a generated job (`job` creates it), removed when the test process exits.
fn dir(name: &str) -> PathBuf {
    let d = mrshim_test_support::own_dir(&format!("scale-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn analyze(args: &[&str], logs: &Path) -> (i32, String) {
    let o = Command::new(mrshim_test_support::mrshim_bin()).arg("analyze").args(args).arg(logs).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8(o.stdout).unwrap())
}

#[test]
fn cluster_of_4096_ranks_reads_as_one_screen() {
    let logs = dir("4096");
    // 6 registrations per rank keep the test quick; the shape (files, hosts, failures) is the issue's
    job(&logs, &JobSpec::cluster(6)).unwrap();
    let (code, text) = analyze(&["--color", "never"], &logs);
    assert_eq!(code, 1, "{text}");
    let lines = text.lines().count();
    assert!(lines <= 30, "{lines} lines:\n{text}");
    assert!(text.contains("ENOMEM x") && text.contains("on node[0017,0233,0400] (3 of 512 hosts)"), "{text}");
    assert!(text.contains("509 without failures: node[0000-0016,0018-0232,0234-0399,0401-0511]"), "{text}");
    assert!(text.contains("job 812345: 4096 of 4096 ranks logged"), "{text}");
    assert!(text.contains("first failure: node0017 rank 1"), "{text}");
    for h in ["node0017", "node0233", "node0400"] {
        assert!(text.lines().any(|l| l.trim_start().starts_with(h) && l.contains("memlock 64 KiB")), "{h}: {text}");
    }
    assert!(!text.contains("node0001,"), "no list of healthy hosts one by one: {text}");

    let (_, json) = analyze(&["--json"], &logs);
    let v: Value = serde_json::from_str(&json).unwrap();
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 512, "one entry per host");
    let failing: Vec<&str> =
        hosts.iter().filter(|h| h["failed"].as_u64() > Some(0)).map(|h| h["host"].as_str().unwrap()).collect();
    assert_eq!(failing, ["node0017", "node0233", "node0400"], "failing hosts, first");
    assert_eq!(&hosts[0]["host"], "node0017");
    assert_eq!(hosts[0]["ranks"], serde_json::json!([136, 137, 138, 139, 140, 141, 142, 143]));
    assert_eq!(hosts[0]["memlock"], serde_json::json!([65536]));
    assert!(hosts[0]["failures"]["ibv_reg_mr ENOMEM"].as_u64() > Some(0), "{}", hosts[0]);
    assert_eq!(hosts[3]["failed"], 0);
    assert!(hosts[3]["calls"].as_u64() > Some(0));
    assert_eq!(v["job"]["world_size"], 4096);
    assert_eq!(v["job"]["job_id"], "812345");
    assert_eq!(v["job"]["no_summary"], serde_json::json!([]));
    let _ = std::fs::remove_dir_all(&logs);
}

#[test]
fn every_rank_failing_is_one_host_list() {
    let logs = dir("all");
    let spec = JobSpec { hosts: 64, failing_hosts: (0..64).collect(), ..JobSpec::cluster(6) };
    job(&logs, &spec).unwrap();
    let (_, text) = analyze(&["--color", "never"], &logs);
    assert!(text.contains("on node[0000-0063] (all 64 hosts)"), "{text}");
    assert!(text.lines().count() <= 30 + 8, "{text}");
    let _ = std::fs::remove_dir_all(&logs);
}

/// The job mpirun killed: 4 ranks, rank 1 never wrote a log (it never reached a registration), rank 3's
/// log stops without the exit summary; ranks 0 and 2 exited normally.
#[test]
fn killed_and_missing_ranks_are_named() {
    let logs = dir("killed");
    let spec = JobSpec {
        hosts: 2,
        ranks_per_host: 2,
        failing_hosts: vec![1],
        killed: vec![3],
        absent: vec![1],
        ..JobSpec::cluster(8)
    };
    job(&logs, &spec).unwrap();
    assert_eq!(std::fs::read_dir(&logs).unwrap().count(), 3, "3 of 4 files");
    let (code, text) = analyze(&["--color", "never"], &logs);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("job 812345: 3 of 4 ranks logged"), "{text}");
    assert!(text.contains("1 rank(s) without exit summary (kill, crash or _exit()): node0001 rank 3"), "{text}");
    assert!(!text.contains("killed ("), "a log without a summary is not proof of a kill: {text}");
    assert!(text.contains("1 rank(s) never reached a registration (no log): 1"), "{text}");
    assert!(text.contains("first failure: node0001 rank 2"), "{text}");

    let (_, json) = analyze(&["--json"], &logs);
    let v: Value = serde_json::from_str(&json).unwrap();
    let j = &v["job"];
    assert_eq!(j["world_size"], 4);
    assert_eq!(j["no_log"], serde_json::json!([1]));
    assert_eq!(j["no_summary"], serde_json::json!([{"host": "node0001", "rank": 3}]));
    assert_eq!(j["killed"], j["no_summary"], "the field's first name stays (never renamed within a schema)");
    assert_eq!(j["first_failure"], serde_json::json!({"host": "node0001", "rank": 2}));
    let h1 = v["hosts"].as_array().unwrap().iter().find(|h| h["host"] == "node0001").unwrap();
    assert_eq!(h1["no_summary"], 1);

    // a rank that started (config record) but was killed before its first registration
    let logs2 = dir("stalled");
    job(&logs2, &JobSpec { stalled: vec![0], ..spec.clone() }).unwrap();
    let (_, text) = analyze(&["--color", "never"], &logs2);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("never reached a registration (log without calls or summary): node0000 rank 0"), "{text}");
    let _ = std::fs::remove_dir_all(&logs);
    let _ = std::fs::remove_dir_all(&logs2);
}

/// `--prometheus FILE`: per-host counters node_exporter's textfile collector can read.
#[test]
fn prometheus_textfile_export() {
    let logs = dir("prom");
    let spec = JobSpec { hosts: 4, ranks_per_host: 2, failing_hosts: vec![2], killed: vec![7], ..JobSpec::cluster(8) };
    job(&logs, &spec).unwrap();
    let prom = mrshim_test_support::own_dir("scale-prom-out").join("node.prom");
    let (code, _) = analyze(&["--prometheus", prom.to_str().unwrap()], &logs);
    assert_eq!(code, 1);
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(text.contains("# TYPE mrshim_reg_failures_total counter\n"), "{text}");
    let line = text.lines().find(|l| l.starts_with("mrshim_reg_failures_total{")).unwrap();
    assert!(
        line.starts_with(
            "mrshim_reg_failures_total{host=\"node0002\",call=\"ibv_reg_mr\",errno=\"ENOMEM\",mem_kind=\"host-anon\"} "
        ),
        "{text}"
    );
    assert!(text.contains("mrshim_ranks_without_summary{host=\"node0003\"} 1\n"), "{text}");
    assert!(text.contains("mrshim_memlock_soft_bytes{host=\"node0002\"} 65536\n"), "{text}");
    assert!(text.contains("mrshim_reg_calls_total{host=\"node0000\",call=\"ibv_reg_mr\"} "), "{text}");
    // every sample line is `name{labels} value` with a number, as the exposition format wants
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let v = l.rsplit(' ').next().unwrap();
        assert!(v.parse::<f64>().is_ok() || v == "+Inf", "{l}");
    }
    assert!(!prom.with_extension("prom.tmp").exists(), "written through a temporary file and renamed");
    let _ = std::fs::remove_file(&prom);
    let _ = std::fs::remove_dir_all(&logs);
}

/// CLICOLOR_FORCE colours a pipe; NO_COLOR wins over it.
#[test]
fn colour_follows_clicolor_and_no_color() {
    let logs = dir("colour");
    job(&logs, &JobSpec { hosts: 2, ranks_per_host: 1, failing_hosts: vec![1], ..JobSpec::cluster(8) }).unwrap();
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(mrshim_test_support::mrshim_bin());
        c.arg("analyze").arg(&logs).env_remove("NO_COLOR").env_remove("CLICOLOR").env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            c.env(k, v);
        }
        String::from_utf8(c.output().unwrap().stdout).unwrap()
    };
    assert!(!run(&[]).contains('\x1b'), "no colour into a pipe");
    assert!(run(&[("CLICOLOR_FORCE", "1")]).contains("\x1b[1;31m1. memlock-limit"));
    assert!(!run(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]).contains('\x1b'));
    let _ = std::fs::remove_dir_all(&logs);
}
