//! 1 GiB of mixed log streamed through stdin: `mrshim analyze -` must finish, find the failures in it and
//! keep its memory bounded (peak RSS polled from /proc while it runs).
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn one_gib_on_stdin_streams_with_bounded_memory() {
    let total: u64 = std::env::var("MRSHIM_STREAM_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 30);
    let mut child = Command::new(mrshim_test_support::mrshim_bin())
        .args(["analyze", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut src = mrshim_analyze::gen::Repeat::new(mrshim_analyze::gen::block(8 << 20), total);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = src.read(&mut buf).unwrap();
            if n == 0 || stdin.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(r) = rss_kib(pid) {
            peak = peak.max(r);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    writer.join().unwrap();
    let out = reader.join().unwrap();
    let status = child.wait().unwrap();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "streamed {} MiB in {secs:.1} s ({:.0} MB/s), peak RSS {} MiB",
        total >> 20,
        total as f64 / 1e6 / secs,
        peak >> 10
    );
    assert_eq!(status.code(), Some(1), "failures in the stream are findings");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["bytes"].as_u64(), Some(total));
    assert!(v["summary"]["failed"].as_u64().unwrap() > 0);
    assert!(peak < 200 * 1024, "peak RSS {} MiB: memory must not grow with the input", peak >> 10);
}
