//! `cargo bench --bench shim` (after `scripts/bench` built the release libraries): what
//! libmrshim.so costs, as ratios against direct calls in the same run. Not a test: prints tables
//! and the goals from issue 5.
//!
//! tests/c/bench_reg.c times each ibv_reg_mr / ibv_dereg_mr of one 64 KiB buffer, in separate
//! processes per configuration: direct (no preload), pass-through (preloaded, bad config: the
//! wrapper's floor), MRSHIM_LOG=off (with and without the exit summary's counters), full
//! logging to a file.
//! - On the simulator: the ratios a job sees (its registration parses /proc/self/maps like the
//!   kernel pins pages, so it costs tens of µs and the shim's share is small).
//! - On the cheap fake library of the hook tests (a registration costs ~100 ns): the added ns
//!   per call are measurable there, so the goals are judged on it. Full logging is also run with
//!   the log on tmpfs, and next to it the median of one plain write(2) of a same-size line to
//!   the same file: the part of the cost that is the kernel's, not the shim's.
//!
//! Throughput: 8 threads registering/deregistering with full logging; records on disk are
//! counted: 0 lost.

use mrshim_test_support::{cc, shim_lib, sim_lib_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Env {
    dir: PathBuf,
    shim: PathBuf,
    sim_lib: PathBuf,
    fake_lib: PathBuf,
    prog: PathBuf,
}

fn setup() -> Env {
    let shim = shim_lib();
    let sim_lib = sim_lib_dir().to_path_buf();
    let dir = std::env::temp_dir().join(format!("mrshim-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fake_lib = dir.join("fake");
    std::fs::create_dir_all(&fake_lib).unwrap();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let map = format!("-Wl,--version-script={}", src.join("fakeverbs.map").display());
    let f = fake_lib.join("libibverbs.so.1");
    cc(&[
        "-shared",
        "-fPIC",
        "-O2",
        "-o",
        f.to_str().unwrap(),
        "-Wl,-soname,libibverbs.so.1",
        &map,
        src.join("fakeverbs.c").to_str().unwrap(),
    ]);
    let prog = dir.join("bench_reg");
    let fl = format!("-L{}", fake_lib.display());
    cc(&[
        "-O2",
        "-o",
        prog.to_str().unwrap(),
        src.join("bench_reg.c").to_str().unwrap(),
        &fl,
        "-libverbs",
        "-lpthread",
        "-ldl",
        "-Wl,-z,lazy",
    ]);
    Env { dir, shim, sim_lib, fake_lib, prog }
}

/// A configuration: its name and the shim's environment (None: no preload). `LOG` stands for
/// the log file of the run.
struct Mode {
    name: &'static str,
    env: Option<&'static [(&'static str, &'static str)]>,
}

const DIRECT: Mode = Mode { name: "direct", env: None };
const PASS: Mode = Mode { name: "pass-through", env: Some(&[("MRSHIM_LEVEL", "pass-through-please")]) };
const OFF_QUIET: Mode = Mode { name: "log off", env: Some(&[("MRSHIM_LOG", "off"), ("MRSHIM_SUMMARY", "off")]) };
const OFF: Mode = Mode { name: "log off+summary", env: Some(&[("MRSHIM_LOG", "off")]) };
const FULL: Mode = Mode { name: "full logging", env: Some(&[("MRSHIM_LOG", "LOG")]) };

impl Env {
    fn run(&self, lib: &Path, mode: &Mode, args: &[&str], log: &Path) -> String {
        let mut c = Command::new(&self.prog);
        c.args(args)
            .env("LD_LIBRARY_PATH", lib)
            .env("MRSHIM_SIM_RUNDIR", self.dir.join("run"))
            .env_remove("LD_PRELOAD");
        for (k, _) in std::env::vars() {
            if k.starts_with("MRSHIM_") && k != "MRSHIM_SIM_RUNDIR" {
                c.env_remove(k);
            }
        }
        c.env("MRSHIM_SUMMARY", "off").env("MRSHIM_WARN", "off");
        if let Some(env) = mode.env {
            let _ = std::fs::remove_file(log);
            c.env("LD_PRELOAD", &self.shim);
            if !env.iter().any(|(k, _)| *k == "MRSHIM_SUMMARY") {
                c.env_remove("MRSHIM_SUMMARY");
            }
            for (k, v) in env {
                c.env(k, if *v == "LOG" { log.as_os_str() } else { v.as_ref() });
            }
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// (median reg ns, median dereg ns): the median over `reps` runs of each run's median.
    fn lat(&self, lib: &Path, mode: &Mode, iters: u32, reps: usize, log: &Path) -> (f64, f64) {
        let mut r = vec![];
        let mut d = vec![];
        for _ in 0..reps {
            let out = self.run(lib, mode, &["lat", &iters.to_string()], log);
            let f: Vec<&str> = out.split_whitespace().collect();
            r.push(f[1].parse::<f64>().unwrap());
            d.push(f[3].parse::<f64>().unwrap());
        }
        (median(r), median(d))
    }

    /// Median ns of one write(2) of `bytes` to an O_APPEND file at `path`.
    fn write_floor(&self, path: &Path, bytes: usize, reps: usize) -> f64 {
        let v = (0..reps)
            .map(|_| {
                let out = self.run(
                    &self.fake_lib,
                    &DIRECT,
                    &["write", "20000", path.to_str().unwrap(), &bytes.to_string()],
                    path,
                );
                out.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap()
            })
            .collect();
        median(v)
    }

    /// (calls per second, calls, records on disk)
    fn thr(&self, lib: &Path, mode: &Mode, threads: u32, per: u32) -> (f64, u64, u64) {
        let log = self.dir.join("thr.jsonl");
        let out = self.run(lib, mode, &["thr", &threads.to_string(), &per.to_string()], &log);
        let f: Vec<&str> = out.split_whitespace().collect();
        let calls: u64 = f[1].parse().unwrap();
        let secs: f64 = f[3].parse().unwrap();
        let lines = match std::fs::read_to_string(&log) {
            Ok(text) => {
                text.lines().filter(|l| l.contains("\"kind\":\"reg\"") || l.contains("\"kind\":\"dereg\"")).count()
                    as u64
            }
            Err(_) => 0,
        };
        (calls as f64 / secs, calls, lines)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Bytes of the first reg and dereg record in a log.
fn record_sizes(log: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let size = |k: &str| text.lines().find(|l| l.contains(k)).map_or(700, |l| l.len() + 1);
    (size("\"kind\":\"reg\""), size("\"kind\":\"dereg\""))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let e = setup();
    let iters = 20000;
    let reps = 5;
    let log = e.dir.join("lat.jsonl");
    println!("libmrshim.so benchmark ({iters} reg+dereg pairs per run, median of {reps} runs' medians)");

    println!("\n== on the simulator (what a job sees) ==");
    println!("{:<18} {:>10} {:>10} {:>9} {:>9}", "mode", "reg ns", "dereg ns", "reg x", "dereg x");
    let (dr, dd) = e.lat(&e.sim_lib, &DIRECT, iters, reps, &log);
    println!("{:<18} {dr:>10.0} {dd:>10.0}", DIRECT.name);
    for m in [&PASS, &OFF_QUIET, &OFF, &FULL] {
        let (r, d) = e.lat(&e.sim_lib, m, iters, reps, &log);
        println!("{:<18} {r:>10.0} {d:>10.0} {:>9.3} {:>9.3}", m.name, r / dr, d / dd);
    }

    println!("\n== added ns per call, on the fake library (a registration costs ~100 ns there) ==");
    println!("{:<26} {:>8} {:>9} {:>9} {:>10}  goal", "mode", "reg ns", "dereg ns", "reg +ns", "dereg +ns");
    let (fr, fd) = e.lat(&e.fake_lib, &DIRECT, iters, reps, &log);
    println!("{:<26} {fr:>8.0} {fd:>9.0}", DIRECT.name);
    let shm = Path::new("/dev/shm");
    let shm_log = shm.is_dir().then(|| shm.join(format!("mrshim-bench-{}.jsonl", std::process::id())));
    let mut rows: Vec<(String, &Mode, PathBuf, &str)> = vec![
        (PASS.name.into(), &PASS, log.clone(), ""),
        (OFF_QUIET.name.into(), &OFF_QUIET, log.clone(), "<= 50"),
        (OFF.name.into(), &OFF, log.clone(), "<= 50"),
        (format!("{} ({})", FULL.name, e.dir.parent().unwrap().display()), &FULL, log.clone(), "<= 1000"),
    ];
    if let Some(l) = &shm_log {
        rows.push(("full logging (/dev/shm)".into(), &FULL, l.clone(), "<= 1000"));
    }
    for (name, m, l, goal) in &rows {
        let (r, d) = e.lat(&e.fake_lib, m, iters, reps, l);
        println!("{name:<26} {r:>8.0} {d:>9.0} {:>+9.0} {:>+10.0}  {goal}", r - fr, d - fd);
        if m.name == FULL.name {
            let (rb, db) = record_sizes(l);
            let (wr, wd) = (e.write_floor(l, rb, reps), e.write_floor(l, db, reps));
            println!(
                "{:<26} {wr:>8.0} {wd:>9.0}   (one write(2) of a {rb}/{db}-byte line there: the kernel's part)",
                "  write(2) floor"
            );
            let _ = std::fs::remove_file(l);
        }
    }

    println!(
        "\n== 8 threads, full logging (records/s: median of 5 alternating runs, and the slowest; lost: all runs) =="
    );
    for (name, lib, per) in [("simulator", &e.sim_lib, 2000u32), ("fake library", &e.fake_lib, 50000u32)] {
        let (mut direct, mut full, mut lost, mut calls) = (Vec::new(), Vec::new(), 0, 0);
        for _ in 0..5 {
            direct.push(e.thr(lib, &DIRECT, 8, per).0);
            let (rate, c, lines) = e.thr(lib, &FULL, 8, per);
            full.push(rate);
            calls += c;
            lost += c - lines;
        }
        let slowest = full.iter().copied().fold(f64::MAX, f64::min);
        let (direct, full) = (median(direct), median(full));
        println!(
            "{name:<13} direct {direct:>10.0} calls/s   full logging {full:>10.0} records/s (x{:.2} of direct, slowest {slowest:.0})   lost {lost} of {calls}",
            full / direct
        );
    }
    println!("goal: >= 500000 records/s from 8 threads, 0 lost");
    let _ = std::fs::remove_dir_all(&e.dir);
}
