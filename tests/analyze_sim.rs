//! End to end: a 4-rank job on the simulated NIC, ranks 0-1 on "nodeA" and 2-3 on "nodeB" (each host is a
//! UTS namespace with its own hostname), the shim recording every registration; nodeB has a problem.
//! `mrshim analyze` on the records of all ranks must name the cause and exactly nodeB's ranks.
#[path = "shim_util/mod.rs"]
mod shim_util;

use serde_json::Value;
use shim_util::*;
use std::path::Path;
use std::process::Command;

fn uts_namespaces_work() -> bool {
    Command::new("unshare").args(["-u", "true"]).status().map(|s| s.success()).unwrap_or(false)
}

/// Runs the NCCL-style consumer as `rank` on `host`, with extra env and an optional `ulimit -l` (KiB).
fn rank(w: &SimWorld, logs: &Path, host: &str, rank: u32, env: &[(&str, &str)], memlock_kib: Option<u64>) {
    let prog = fake().prog("nccl_style");
    let mut script = String::new();
    if let Some(k) = memlock_kib {
        script.push_str(&format!("ulimit -l {k} && "));
    }
    script.push_str(&format!("hostname {host} && exec \"$0\" exec --log \"$1/\" -- \"$2\""));
    let mut c = w.cmd("unshare");
    c.env_remove("LD_PRELOAD"); // mrshim exec preloads the shim itself
    c.args(["-u", "sh", "-c", &script]).arg(mrshim_bin()).arg(logs).arg(&prog);
    c.env("OMPI_COMM_WORLD_RANK", rank.to_string()).env("MRSHIM_WARN", "off");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "rank {rank} on {host}: {}\n{}", stdout(&o), stderr(&o));
}

fn analyze(logs: &Path) -> Value {
    let out = Command::new(mrshim_bin()).args(["analyze", "--json"]).arg(logs).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn job(name: &str, bad_env: &[(&str, &str)], bad_memlock: Option<u64>) -> Value {
    let w = SimWorld::new(name);
    let logs = w.dir.join("logs");
    for r in 0..4 {
        if r < 2 {
            rank(&w, &logs, "nodeA", r, &[], None);
        } else {
            rank(&w, &logs, "nodeB", r, bad_env, bad_memlock);
        }
    }
    assert_eq!(files(&logs).len(), 4, "one record file per rank");
    let v = analyze(&logs);
    let _ = std::fs::remove_dir_all(&w.dir);
    v
}

fn hosts(f: &Value) -> Vec<&str> {
    f["hosts"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect()
}

#[test]
fn injected_relaxed_ordering_einval_on_one_host() {
    if !uts_namespaces_work() {
        panic!("unshare -u failed: this test needs root (as CI has) to give each simulated host its own hostname");
    }
    let v = job("an-sim-ro", &[("MRSHIM_SIM_FAULTS", "reg_mr_iova2:EINVAL:relaxed")], None);
    let f = &v["findings"][0];
    assert_eq!(f["category"], "relaxed-ordering", "{v:#}");
    assert_eq!(hosts(f), ["nodeB"]);
    assert_eq!(f["ranks"], serde_json::json!([2, 3]));
    assert_eq!(f["call"], "ibv_reg_mr_iova2");
    assert_eq!(f["errno"], "EINVAL");
    assert!(f["explanation"].as_str().unwrap().contains("nodeA"), "nodeA is named as the host that works");
}

#[test]
fn memlock_64k_on_one_host() {
    if !uts_namespaces_work() {
        panic!("unshare -u failed: this test needs root (as CI has) to give each simulated host its own hostname");
    }
    let v = job("an-sim-memlock", &[("MRSHIM_SIM_MEMLOCK", "enforce")], Some(64));
    let f = &v["findings"][0];
    assert_eq!(f["category"], "memlock-limit", "{v:#}");
    assert_eq!(hosts(f), ["nodeB"]);
    assert_eq!(f["ranks"], serde_json::json!([2, 3]));
    assert_eq!(f["errno"], "ENOMEM");
    assert!(f["explanation"].as_str().unwrap().contains("64 KiB"));
}
