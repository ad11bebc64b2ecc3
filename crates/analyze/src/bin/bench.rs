//! analyze throughput on a generated 1 GiB mixed log, one thread: `cargo run --release -p mrshim-analyze
//! --bin analyze-bench [-- BYTES]`. Prints MB/s; the goal is >= 200 MB/s. Not part of the test suite.
//! `analyze-bench failures`: input made of failure lines only (records, MRSHIM WARN, NCCL WARN, UCX and
//! libfabric lines): MB/s at 20k, 200k and 2M failure lines side by side (the cost per line must not
//! grow with their number), and PASS/FAIL for 100 MB of them in under 2 s, beside the last row
//! docs/perf.md recorded. `failures goal [BYTES]`: the goal's run alone (BYTES for a profiler).
//! `analyze-bench job DIR [REGS]` writes the synthetic 4096-rank job instead (512 hosts x 8 ranks, 3 with a
//! 64 KiB memlock; REGS registrations per rank, default 128 = about 450 MB) to time `mrshim analyze DIR`.
use mrshim_analyze::gen;
use std::io::BufReader;
use std::time::Instant;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("job") {
        let dir = std::env::args().nth(2).expect("analyze-bench job DIR [REGS]");
        let regs = std::env::args().nth(3).and_then(|a| a.parse().ok()).unwrap_or(128);
        let bytes = gen::job(dir.as_ref(), &gen::JobSpec::cluster(regs)).expect("write the job");
        println!("analyze-bench: wrote {:.1} MB in 4096 files to {dir}", bytes as f64 / 1e6);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("failures") {
        // `failures goal [BYTES]`: the goal's run alone (BYTES for instruction counts under a profiler)
        let goal = std::env::args().nth(2).as_deref() == Some("goal");
        failures(goal.then(|| std::env::args().nth(3).and_then(|b| b.parse().ok()).unwrap_or(100_000_000)));
        return;
    }
    let total: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1 << 30);
    let block = gen::block(64 << 20);
    let reader = BufReader::with_capacity(256 << 10, gen::Repeat::new(block, total));
    let cpu0 = cpu_ns();
    let t = Instant::now();
    let a = mrshim_analyze::analyze_readers(vec![("generated".into(), Box::new(reader))]);
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_ns().zip(cpu0).map(|(b, a)| (b - a) as f64 / 1e9);
    let bytes: u64 = a.col.files.iter().map(|f| f.bytes).sum();
    let lines: u64 = a.col.files.iter().map(|f| f.lines).sum();
    println!(
        "analyze-bench: {:.1} MiB, {lines} lines in {secs:.2} s = {:.1} MB/s wall, {} ({} failed, {} ok registrations, top: {})",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / 1e6 / secs,
        cpu.map(|c| format!("{:.1} MB/s per CPU-second", bytes as f64 / 1e6 / c)).unwrap_or_default(),
        a.failed(),
        a.ok(),
        a.findings.first().map(|f| f.category).unwrap_or("-")
    );
}

/// Nanoseconds this process spent on a CPU (first field of /proc/self/schedstat): unaffected by other load.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// One run over `bytes` of failure lines: (failure lines, MB/s per CPU-second, CPU seconds, wall
/// seconds, failures counted). CPU time is what the goal is judged on: on a shared machine wall
/// time is mostly the other processes' (wall is printed beside it).
fn failure_run(block: &[u8], bytes: u64) -> (u64, f64, f64, f64, u64) {
    let reader = BufReader::with_capacity(256 << 10, gen::Repeat::new(block.to_vec(), bytes));
    let cpu0 = cpu_ns();
    let t = Instant::now();
    let a = mrshim_analyze::analyze_readers(vec![("failures".into(), Box::new(reader))]);
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_ns().zip(cpu0).map(|(b, a)| (b - a) as f64 / 1e9).unwrap_or(wall);
    let lines: u64 = a.col.files.iter().map(|f| f.lines).sum();
    (lines, bytes as f64 / 1e6 / cpu, cpu, wall, a.failed())
}

/// The last row of docs/perf.md's table for this run ("analyze on failure lines only"), printed
/// beside this run's figures: the before of a change is the row recorded before it.
fn last_recorded() -> Option<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf.md")).ok()?;
    let sec = doc.split("## analyze on failure lines only").nth(1)?;
    let sec = sec.split("\n## ").next()?;
    // rows of the dated table: `| 2026-12-06 09:10, ...`
    let dated =
        |l: &&str| l.len() > 7 && l.starts_with("| ") && l[2..6].bytes().all(|b| b.is_ascii_digit()) && &l[6..7] == "-";
    let row = sec.lines().rfind(dated)?;
    Some(row.trim().to_string())
}

fn failures(goal_only: Option<u64>) {
    if let Some(row) = last_recorded() {
        println!("analyze-bench failures: last recorded (docs/perf.md): {row}");
        println!("analyze-bench failures: columns: date, host, commit | MB/s at 20k | at 200k | at 2M | 100 MB: CPU s");
    }
    let block = gen::failure_block(8 << 20);
    let per_line = block.len() as f64 / block.iter().filter(|b| **b == b'\n').count() as f64;
    if let Some(bytes) = goal_only {
        return goal(&block, bytes);
    }
    let mut rates = Vec::new();
    for n in [20_000u64, 200_000, 2_000_000] {
        let (lines, mbs, cpu, wall, failed) = failure_run(&block, (n as f64 * per_line) as u64);
        println!(
            "analyze-bench failures: {lines:>9} failure lines: {mbs:7.1} MB/s per CPU-second ({cpu:.2} s CPU, {wall:.2} s wall, {failed} failures counted)"
        );
        rates.push(mbs);
    }
    let ratio = rates[2] / rates[0];
    println!(
        "analyze-bench failures: MB/s at 2M / at 20k = {ratio:.2} (linear cost: >= 0.5) {}",
        if ratio >= 0.5 { "PASS" } else { "FAIL" }
    );
    goal(&block, 100_000_000);
}

/// The goal: 100 MB of failure lines in under 2 s of CPU (judged pro rata for other sizes).
fn goal(block: &[u8], bytes: u64) {
    let (lines, mbs, cpu, wall, _) = failure_run(block, bytes);
    let per_100mb = cpu * 1e8 / bytes as f64;
    println!(
        "analyze-bench failures: {:.0} MB ({lines} failure lines) in {cpu:.2} s CPU ({wall:.2} s wall) = {mbs:.1} MB/s (goal < 2 s per 100 MB) {}",
        bytes as f64 / 1e6,
        if per_100mb < 2.0 { "PASS" } else { "FAIL" }
    );
}
