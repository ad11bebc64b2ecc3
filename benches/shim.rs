//! `cargo bench --bench shim`: what libmrshim.so costs, as ratios against direct calls in the
//! same run. Not a test: prints a table (and the goals from issue 5).
//!
//! Runs tests/c/bench_reg.c (ibv_reg_mr + ibv_dereg_mr of one 64 KiB buffer, each call timed)
//! on the simulator in separate processes: direct (no preload), pass-through (preloaded, bad
//! config: the wrapper's floor), MRSHIM_LOG=off (counters, no records), full logging to a file.
//! The simulator's registration parses /proc/self/maps, so merely having more mappings (any
//! preloaded library) makes it slower: the reg overhead is also given against the pass-through
//! run, which has the same mappings. Dereg does not touch /proc and shows the per-call cost best.
//! Throughput: 8 threads registering/deregistering, on the simulator and on the cheap fake
//! library of the hook tests (the shim's own ceiling); records on disk are counted: 0 lost.

use std::path::{Path, PathBuf};
use std::process::Command;

fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mrshim")).parent().unwrap().to_path_buf()
}

fn cc(args: &[&str]) {
    let o = Command::new("cc").args(args).output().expect("cc");
    assert!(o.status.success(), "cc {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

struct Env {
    dir: PathBuf,
    shim: PathBuf,
    sim_lib: PathBuf,
    fake_lib: PathBuf,
    prog: PathBuf,
}

fn setup() -> Env {
    let t = target_dir();
    let shim = t.join("libmrshim.so");
    let sim = [t.join("deps/libibverbs.so"), t.join("libibverbs.so")].into_iter().find(|p| p.exists()).expect("simulator not built");
    let dir = std::env::temp_dir().join(format!("mrshim-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sim_lib = dir.join("sim");
    let fake_lib = dir.join("fake");
    std::fs::create_dir_all(&sim_lib).unwrap();
    std::fs::create_dir_all(&fake_lib).unwrap();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::os::unix::fs::symlink(&sim, sim_lib.join("libibverbs.so.1")).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let map = format!("-Wl,--version-script={}", src.join("fakeverbs.map").display());
    let f = fake_lib.join("libibverbs.so.1");
    cc(&["-shared", "-fPIC", "-O2", "-o", f.to_str().unwrap(), "-Wl,-soname,libibverbs.so.1", &map, src.join("fakeverbs.c").to_str().unwrap()]);
    let prog = dir.join("bench_reg");
    let fl = format!("-L{}", fake_lib.display());
    cc(&["-O2", "-o", prog.to_str().unwrap(), src.join("bench_reg.c").to_str().unwrap(), &fl, "-libverbs", "-lpthread", "-ldl", "-Wl,-z,lazy"]);
    Env { dir, shim, sim_lib, fake_lib, prog }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Direct,
    PassThrough,
    Off,
    Full,
}

impl Env {
    fn run(&self, lib: &Path, mode: Mode, args: &[&str], log: &Path) -> String {
        let mut c = Command::new(&self.prog);
        c.args(args).env("LD_LIBRARY_PATH", lib).env("MRSHIM_SIM_RUNDIR", self.dir.join("run")).env_remove("LD_PRELOAD");
        for (k, _) in std::env::vars() {
            if k.starts_with("MRSHIM_") && k != "MRSHIM_SIM_RUNDIR" {
                c.env_remove(k);
            }
        }
        c.env("MRSHIM_SUMMARY", "off");
        match mode {
            Mode::Direct => {}
            Mode::PassThrough => {
                c.env("LD_PRELOAD", &self.shim).env("MRSHIM_LEVEL", "pass-through-please");
            }
            Mode::Off => {
                c.env("LD_PRELOAD", &self.shim).env("MRSHIM_LOG", "off");
            }
            Mode::Full => {
                let _ = std::fs::remove_file(log);
                c.env("LD_PRELOAD", &self.shim).env("MRSHIM_LOG", log);
            }
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// (median reg ns, median dereg ns): the median over `reps` runs of each run's median.
    fn lat(&self, lib: &Path, mode: Mode, iters: u32, reps: usize) -> (f64, f64) {
        let log = self.dir.join("lat.jsonl");
        let mut r = vec![];
        let mut d = vec![];
        for _ in 0..reps {
            let out = self.run(lib, mode, &["lat", &iters.to_string()], &log);
            let f: Vec<&str> = out.split_whitespace().collect();
            r.push(f[1].parse::<f64>().unwrap());
            d.push(f[3].parse::<f64>().unwrap());
        }
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        d.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (r[reps / 2], d[reps / 2])
    }

    /// (calls per second, records on disk)
    fn thr(&self, lib: &Path, mode: Mode, threads: u32, per: u32) -> (f64, u64, u64) {
        let log = self.dir.join("thr.jsonl");
        let out = self.run(lib, mode, &["thr", &threads.to_string(), &per.to_string()], &log);
        let f: Vec<&str> = out.split_whitespace().collect();
        let calls: u64 = f[1].parse().unwrap();
        let secs: f64 = f[3].parse().unwrap();
        let lines = if mode == Mode::Full {
            let text = std::fs::read_to_string(&log).unwrap();
            text.lines().filter(|l| l.contains("\"kind\":\"reg\"") || l.contains("\"kind\":\"dereg\"")).count() as u64
        } else {
            0
        };
        (calls as f64 / secs, calls, lines)
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let e = setup();
    let iters = 20000;
    let reps = 5;
    println!("libmrshim.so benchmark ({} reg+dereg pairs per run, median of {reps} runs' medians)", iters);
    println!("\n== latency on the simulator ==");
    println!("{:<14} {:>12} {:>12}", "mode", "reg ns", "dereg ns");
    let modes = [("direct", Mode::Direct), ("pass-through", Mode::PassThrough), ("log off", Mode::Off), ("full logging", Mode::Full)];
    let mut res = vec![];
    for (name, m) in modes {
        let (r, d) = e.lat(&e.sim_lib, m, iters, reps);
        println!("{name:<14} {r:>12.0} {d:>12.0}");
        res.push((r, d));
    }
    let (dr, dd) = res[0];
    let (pr, _) = res[1];
    for (name, i, goal) in [("log off", 2, 50.0), ("full logging", 3, 1000.0)] {
        let (r, d) = res[i];
        println!(
            "{name}: reg +{:.0} ns vs direct (x{:.3}), +{:.0} ns vs pass-through; dereg +{:.0} ns (x{:.2}); goal <= {goal:.0} ns added per registration",
            r - dr,
            r / dr,
            r - pr,
            d - dd,
            d / dd
        );
    }
    println!("\n== 8 threads, full logging (records/s, lost) ==");
    for (name, lib, per) in [("simulator", &e.sim_lib, 2000u32), ("fake library", &e.fake_lib, 50000u32)] {
        let (direct, _, _) = e.thr(lib, Mode::Direct, 8, per);
        let (full, calls, lines) = e.thr(lib, Mode::Full, 8, per);
        println!(
            "{name:<13} direct {direct:>10.0} calls/s   full logging {full:>10.0} records/s (x{:.2} of direct)   records on disk {lines}/{calls}, lost {}",
            full / direct,
            calls - lines
        );
    }
    println!("goal: >= 500000 records/s from 8 threads, 0 lost");
    let _ = std::fs::remove_dir_all(&e.dir);
}
