//! Inputs users really pass: gzip, stdin, directories, empty, binary, truncated and malformed files,
//! missing paths. No panic, a note for whatever was skipped, documented exit codes (docs/analyze.md).
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs").join(p)
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrshim-inputs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&std::ffi::OsStr], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut c = Command::new(mrshim_test_support::mrshim_bin());
    c.arg("analyze").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut sin = child.stdin.take().unwrap();
    if let Some(d) = stdin {
        sin.write_all(d).unwrap();
    }
    drop(sin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&std::ffi::OsStr], stdin: Option<&[u8]>) -> (i32, Value) {
    let mut a: Vec<&std::ffi::OsStr> = vec!["--json".as_ref()];
    a.extend_from_slice(args);
    let (code, out, err) = run(&a, stdin);
    assert!(!err.contains("panicked"), "{err}");
    (code, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}")))
}

#[test]
fn gzip_and_plain_give_the_same_answer() {
    let d = tmpdir("gz");
    let src = fixture("memlock-limit/nccl-2.18-two-nodes.log");
    let gz = d.join("job.log.gz");
    let out = Command::new("gzip").arg("-c").arg(&src).output().expect("gzip is installed (scripts/install-deps)");
    std::fs::write(&gz, out.stdout).unwrap();
    let (c1, a) = json(&[src.as_os_str()], None);
    let (c2, b) = json(&[gz.as_os_str()], None);
    assert_eq!((c1, c2), (1, 1));
    assert_eq!(a["findings"][0]["category"], b["findings"][0]["category"]);
    assert_eq!(a["findings"][0]["ranks"], b["findings"][0]["ranks"]);
    // a gzip cut in the middle: what was read counts, the rest is a note
    let bytes = std::fs::read(&gz).unwrap();
    std::fs::write(d.join("cut.gz"), &bytes[..bytes.len() / 2]).unwrap();
    let (code, v) = json(&[d.join("cut.gz").as_os_str()], None);
    // 2 when the part that could be read holds nothing recognisable
    assert!(matches!(code, 0..=2), "{code}");
    assert!(v["notes"].to_string().contains("read error"), "{}", v["notes"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn stdin_and_directories() {
    let log = std::fs::read(fixture("address-invalid/ucx-1.13-bad-address.log")).unwrap();
    let (code, v) = json(&["-".as_ref()], Some(&log));
    assert_eq!(code, 1);
    assert_eq!(v["findings"][0]["category"], "address-invalid");
    assert_eq!(v["inputs"][0]["path"], "<stdin>");
    let (code, v) = json(&[fixture("relaxed-ordering").as_os_str()], None);
    assert_eq!(code, 1);
    assert_eq!(v["summary"]["inputs"], 2, "both files of the directory");
}

#[test]
fn empty_binary_and_malformed_inputs_are_notes_not_crashes() {
    let d = tmpdir("bad");
    std::fs::write(d.join("empty.log"), b"").unwrap();
    let mut bin = Vec::new();
    for i in 0..200_000u32 {
        bin.extend_from_slice(&i.wrapping_mul(2654435761).to_le_bytes());
    }
    std::fs::write(d.join("core.bin"), &bin).unwrap();
    std::fs::write(d.join("bad.jsonl"), b"{\"v\":1,\"kind\":\"reg\",\"host\":\n{\"kind\":\"reg\"}\n{not json at all\n\xff\xfe\xfd broken utf8 NCCL WARN Call to ibv_reg_mr failed with error Invalid argument\n").unwrap();
    let long = vec![b'x'; 3 << 20];
    std::fs::write(d.join("long.log"), &long).unwrap();
    let (code, v) = json(&[d.as_os_str()], None);
    assert!(code == 0 || code == 1, "{code}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("empty.log: empty"), "{notes}");
    assert!(notes.contains("binary line"), "{notes}");
    assert!(notes.contains("malformed shim record"), "{notes}");
    assert!(notes.contains("not valid UTF-8"), "{notes}");
    assert!(notes.contains("longer than 1 MiB"), "{notes}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn exit_codes() {
    // nothing readable: 2
    let (code, _, err) = run(&["/nonexistent/job.log".as_ref()], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nonexistent"));
    // readable, no failures: 0
    let d = tmpdir("ok");
    std::fs::write(d.join("ok.log"), "n1:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\nn1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 busId 1000 - Init COMPLETE\n").unwrap();
    let (code, out, _) = run(&[d.join("ok.log").as_os_str()], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No failed memory registrations"));
    // a missing path next to a good one: analyzed, with a note
    let (code, v) = json(&[fixture("unknown").as_os_str(), "/nonexistent/x.log".as_ref()], None);
    assert_eq!(code, 1);
    assert!(v["notes"].to_string().contains("/nonexistent/x.log"));
    // usage error (no paths) is clap's 2
    let (code, _, _) = run(&[], None);
    assert_eq!(code, 2);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn colour_only_when_asked_or_on_a_tty() {
    let (_, out, _) = run(&[fixture("unknown").as_os_str()], None);
    assert!(!out.contains('\x1b'));
    let (_, out, _) = run(&["--color=always".as_ref(), fixture("unknown").as_os_str()], None);
    assert!(out.contains('\x1b'));
}

/// A failure whose lines name no host, rank or time (a kernel oops pasted alone, an error line without
/// a frame) tells nothing about who failed first: no "first failure: ? rank ?" in the text, the
/// report or --json.
#[test]
fn a_failure_without_host_or_rank_names_no_first_failure() {
    let d = tmpdir("nofirst");
    let log = d.join("oops.txt");
    std::fs::write(
        &log,
        "BUG: kernel NULL pointer dereference, address: 0000000000000268\n\
         CPU: 0 PID: 310 Comm: ibv_rc_pingpong Not tainted 5.10.19 #1\n\
         RIP: 0010:ib_umem_get+0x1f5/0x3c0 [ib_uverbs]\n\
         Call Trace:\n rxe_mr_init_user+0x5b/0x2d0 [rdma_rxe]\n rxe_reg_user_mr+0x6a/0xa0 [rdma_rxe]\n",
    )
    .unwrap();
    let html = d.join("r.html");
    let (code, out, err) = run(&[log.as_os_str(), "--report".as_ref(), html.as_os_str()], None);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("version-mismatch"), "{out}");
    assert!(!out.contains("rank ?"), "{out}");
    let report = std::fs::read_to_string(&html).unwrap();
    assert!(!report.contains("first failure: <b>?"), "the report names an unknown first failure");
    let (_, j) = json(&[log.as_os_str()], None);
    assert!(j["first_failure"].is_null(), "{}", j["first_failure"]);
    let _ = std::fs::remove_dir_all(&d);
}
