//! `cargo bench --bench rescue`: what the retry engine and bounce buffers cost, as ratios
//! measured side by side in one run on the simulator. Not a test: prints a table.
//!
//! Registration (ibv_reg_mr_iova2 + ibv_dereg_mr, 64 KiB, median of 2000):
//! direct success vs the shim's success path with MRSHIM_RETRY=auto (goal: same as retries off),
//! and a rescued registration (seed fault: relaxed ordering rejected) without and with sticky.
//! Bandwidth: the all-reduce example on host memory, 2 ranks, direct vs through bounce buffers.

use std::path::{Path, PathBuf};
use std::process::Command;

fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mrshim")).parent().unwrap().to_path_buf()
}

fn lib_dir(t: &Path, dir: &Path) -> PathBuf {
    let sim = [t.join("libibverbs.so"), t.join("deps/libibverbs.so")].into_iter().find(|p| p.exists()).expect("simulator not built");
    let d = dir.join("lib");
    std::fs::create_dir_all(&d).unwrap();
    for n in ["libibverbs.so.1", "libibverbs.so"] {
        let _ = std::os::unix::fs::symlink(&sim, d.join(n));
    }
    d
}

fn run(prog: &Path, args: &[&str], env: &[(&str, &str)], lib: &Path, rundir: &Path, shim: Option<&Path>) -> String {
    let mut c = Command::new(prog);
    c.args(args).env("LD_LIBRARY_PATH", lib).env("MRSHIM_SIM_RUNDIR", rundir).env("MRSHIM_WARN", "off").env("MRSHIM_SUMMARY", "off");
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(s) = shim {
        c.env("LD_PRELOAD", s);
    }
    let o = c.output().expect("run");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn median_ns(out: &str) -> f64 {
    out.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// "rank 0: ... verified, X ms/iter, ...": the mean over ranks.
fn ms_per_iter(out: &str) -> f64 {
    let v: Vec<f64> = out.lines().filter_map(|l| l.split(", ").find(|f| f.ends_with(" ms/iter"))?.split_whitespace().next()?.parse().ok()).collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn main() {
    let t = target_dir();
    let dir = std::env::temp_dir().join(format!("mrshim-bench-rescue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let lib = lib_dir(&t, &dir);
    let prog = dir.join("bench_reg");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/bench_reg.c");
    let st = Command::new("cc").args(["-O2", "-o"]).arg(&prog).arg(&src).arg(format!("-L{}", lib.display())).args(["-libverbs", "-lpthread", "-ldl"]).status().unwrap();
    assert!(st.success());
    let shim = t.join("libmrshim.so");
    let rd = dir.join("run");
    let seed = ("MRSHIM_SIM_FAULTS", "reg_mr_iova2:EINVAL:relaxed");

    println!("registration, 64 KiB, median of 2000 (ns)");
    let direct = median_ns(&run(&prog, &["rescue", "2000", "0"], &[], &lib, &rd, None));
    let off = median_ns(&run(&prog, &["rescue", "2000", "1"], &[("MRSHIM_RETRY", "off")], &lib, &rd, Some(&shim)));
    let auto_ok = median_ns(&run(&prog, &["rescue", "2000", "1"], &[("MRSHIM_RETRY", "auto")], &lib, &rd, Some(&shim)));
    let rescued = median_ns(&run(&prog, &["rescue", "2000", "1"], &[seed, ("MRSHIM_RETRY", "auto;sticky=off")], &lib, &rd, Some(&shim)));
    let sticky = median_ns(&run(&prog, &["rescue", "2000", "1"], &[seed, ("MRSHIM_RETRY", "auto")], &lib, &rd, Some(&shim)));
    println!("  direct success (no shim)             {direct:>10.0}");
    println!("  shim, success, MRSHIM_RETRY=off      {off:>10.0}   x{:.2} of direct", off / direct);
    println!("  shim, success, MRSHIM_RETRY=auto     {auto_ok:>10.0}   x{:.2} of retries off (goal: x1.00)", auto_ok / off);
    println!("  rescued each time (sticky=off)       {rescued:>10.0}   x{:.2} of direct success", rescued / direct);
    println!("  rescued, sticky (learned)            {sticky:>10.0}   x{:.2} of direct success", sticky / direct);

    println!("all-reduce, 2 ranks, host memory: direct vs bounce buffers (ms per iteration; ratio = bandwidth of bounce / direct)");
    let ar = t.join("examples/allreduce");
    for size in ["4K", "64K", "1M", "16M", "64M"] {
        let iters = if size == "64M" { "2" } else { "5" };
        let args = ["--ranks", "2", "--size", size, "--iters", iters, "--host-mem"];
        let d = ms_per_iter(&run(&ar, &args, &[], &lib, &rd, Some(&shim)));
        let b = ms_per_iter(&run(&ar, &args, &[("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed"), ("MRSHIM_RETRY", "bounce")], &lib, &rd, Some(&shim)));
        println!("  {size:>5}  direct {d:>9.3} ms  bounce {b:>9.3} ms  ratio {:>5.1}%  (goals: >= 95% at <= 4 KiB, >= 70% at 1 MiB)", 100.0 * d / b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
