//! One failure counts once, whatever the order and the stream it was printed to: a process's
//! failure is seen as a MRSHIM WARN line, the library's own line (NCCL's WARN, a transfer engine's
//! glog line) and the application's own error line, which names no process and often goes to
//! stdout — saved to a file of its own, or interleaved in another order. `mrshim analyze` reads
//! the saved files in every arrangement and must give the same failure count and first finding;
//! genuinely separate failures (two ranks, two buffers, the attempts of a retry loop) still count
//! each (docs/analyze.md, "One failure counts once").
//!
//! tests/fixtures/own-lines/mooncake-ro-einval/ is the real output of tests/py/mooncake_kv.py's
//! two processes (Mooncake Transfer Engine 0.3.13.post1 on `mrshim sim`, relaxed ordering refused
//! with EINVAL, `MC_IB_PCI_RELAXED_ORDERING=1`): each `.err` is a process's glog stderr, each
//! `.out` the application's own `register_memory failed` line, as if it printed it to stdout.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrshim-own-lines-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `mrshim analyze --json` of the files, in this order: (exit code, failures, first finding).
fn analyze(files: &[PathBuf]) -> (i32, u64, String, Value) {
    let o = Command::new(mrshim_test_support::mrshim_bin()).arg("analyze").arg("--json").args(files).output().unwrap();
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let first = v["findings"][0]["category"].as_str().unwrap_or("-").to_string();
    (o.status.code().unwrap_or(-1), v["summary"]["failed"].as_u64().unwrap_or(0), first, v)
}

/// The arrangements a user's saved output comes in, for processes each with a stderr and a
/// stdout: per process stderr then stdout and the reverse, each process's two streams in one file
/// (stdout first and stderr first), every stdout in one file and every stderr in another (both
/// orders), and everything in one file (stdouts first).
fn arrangements(dir: &Path, procs: &[(&str, &str)]) -> Vec<(String, Vec<PathBuf>)> {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let mut out = Vec::new();
    let errs: Vec<PathBuf> = procs.iter().enumerate().map(|(i, p)| write(&format!("p{i}.err"), p.0)).collect();
    let outs: Vec<PathBuf> = procs.iter().enumerate().map(|(i, p)| write(&format!("p{i}.out"), p.1)).collect();
    let zip = |a: &[PathBuf], b: &[PathBuf]| -> Vec<PathBuf> {
        a.iter().zip(b).flat_map(|(x, y)| [x.clone(), y.clone()]).collect()
    };
    out.push(("stderr, stdout per process".to_string(), zip(&errs, &outs)));
    out.push(("stdout, stderr per process".to_string(), zip(&outs, &errs)));
    let both = |first_out: bool| -> Vec<PathBuf> {
        procs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let t = if first_out { format!("{}{}", p.1, p.0) } else { format!("{}{}", p.0, p.1) };
                write(&format!("p{i}.{}", if first_out { "out+err" } else { "err+out" }), &t)
            })
            .collect()
    };
    out.push(("stdout then stderr in one file per process".to_string(), both(true)));
    out.push(("stderr then stdout in one file per process".to_string(), both(false)));
    let all_out = write("all.out", &procs.iter().map(|p| p.1).collect::<String>());
    let all_err = write("all.err", &procs.iter().map(|p| p.0).collect::<String>());
    out.push(("all stdout, then all stderr".to_string(), vec![all_out.clone(), all_err.clone()]));
    out.push(("all stderr, then all stdout".to_string(), vec![all_err, all_out]));
    let mut all: String = procs.iter().map(|p| p.1).collect();
    all.extend(procs.iter().map(|p| p.0));
    out.push(("everything in one file, stdout first".to_string(), vec![write("job.log", &all)]));
    out
}

/// Runs every arrangement; each must give `failed` failures and `first` as the first finding.
fn same_everywhere(tag: &str, procs: &[(&str, &str)], failed: u64, first: &str) {
    let d = tmpdir(tag);
    let mut wrong = Vec::new();
    for (how, files) in arrangements(&d, procs) {
        let (code, n, got, v) = analyze(&files);
        if (code, n, got.as_str()) != (1, failed, first) {
            wrong.push(format!("{how}: exit {code}, {n} failures, first {got}\n{}", v["findings"]));
        }
    }
    let _ = std::fs::remove_dir_all(&d);
    assert!(wrong.is_empty(), "{tag}: want {failed} failures, first {first}:\n{}", wrong.join("\n"));
}

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/own-lines/mooncake-ro-einval").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Mooncake's two processes: the engine's glog lines (they carry the thread id, which is the
/// process's for the main thread) and the client's own `register_memory failed: -202` line.
#[test]
fn mooncake_client_line_on_stdout_is_not_a_second_failure() {
    let (te, to, ie, io) =
        (fixture("target.err"), fixture("target.out"), fixture("initiator.err"), fixture("initiator.out"));
    assert!(to.contains("register_memory failed") && !te.contains("register_memory failed"));
    same_everywhere("mooncake", &[(&te, &to), (&ie, &io)], 2, "relaxed-ordering");
}

fn warn(pid: u32, addr: &str) -> String {
    format!(
        "n1:{pid}:{} [0] MRSHIM WARN ibv_reg_mr_iova2(addr={addr}, len=2097152, access=LOCAL_WRITE|REMOTE_WRITE|\
         REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova={addr}, mem=host-anon) failed: EINVAL (22)\n\
         n1:{pid}:{} [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument\n",
        pid + 1,
        pid + 1
    )
}

/// What PyTorch prints for the rank (no host, no pid).
const APP: &str = "RuntimeError: NCCL error: unhandled system error, Last error: Call to ibv_reg_mr_iova2 failed \
                   with error Invalid argument\n";

/// Two ranks of an NCCL job with mrshim preloaded: MRSHIM WARN and NCCL WARN on stderr, the
/// application's error on stdout. Two failures, relaxed ordering first (the WARN line's mask).
#[test]
fn nccl_ranks_warn_lines_and_application_line_count_once() {
    let (e0, e1) = (warn(4242, "0x7f0000200000"), warn(4300, "0x7f0000200000"));
    same_everywhere("nccl", &[(&e0, APP), (&e1, APP)], 2, "relaxed-ordering");
}

/// Genuinely separate failures are not merged: two buffers of one process (each kind of output
/// shows two), a retry loop whose every attempt the library printed (three) while the application
/// printed its error once, application lines beyond what the lines with a pid showed (a rank
/// that printed nothing with a pid), and an application line repeated word for word by a retry
/// loop (a repeat is the next attempt, not another layer of the same failure).
#[test]
fn separate_failures_still_count_each() {
    let two_buffers = format!("{}{}", warn(4242, "0x7f0000200000"), warn(4242, "0x7f0000600000"));
    same_everywhere("buffers", &[(&two_buffers, &format!("{APP}{APP}"))], 2, "relaxed-ordering");
    let retries = warn(4242, "0x7f0000200000").repeat(3);
    same_everywhere("retries", &[(&retries, APP)], 3, "relaxed-ordering");
    // rank 1 printed only its application line: it is not rank 0's failure again (and as it shows
    // no access mask, relaxed ordering is no longer on every failure: NCCL's GPU prior leads)
    same_everywhere("beyond", &[(&warn(4242, "0x7f0000200000"), APP), ("", APP)], 2, "gpu-peer-memory");
    // the same line printed by each attempt of a retry loop, and nothing else
    same_everywhere("app retries", &[("", &APP.repeat(3))], 3, "gpu-peer-memory");
}
