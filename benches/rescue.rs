//! `cargo bench --bench rescue`: what the retry engine and bounce buffers cost, as ratios
//! measured side by side in one run on the simulator. Not a test: prints a table.
//!
//! Registration (ibv_reg_mr_iova2 + ibv_dereg_mr, 64 KiB, median of 2000):
//! direct success vs the shim's success path with MRSHIM_RETRY=auto (goal: same as retries off),
//! and a rescued registration (seed fault: relaxed ordering rejected) without and with sticky.
//! Bounce buffers (issue 7), on host memory the device is told to refuse (RELAXED_ORDERING
//! rejected; the shadows are registered without it):
//! - bandwidth of a stream of RDMA WRITE_WITH_IMM, 64 B..64 MiB, direct vs every buffer
//!   bounce-backed (goals: >= 95 % at <= 4 KiB, >= 70 % at 1 MiB);
//! - per-WR cost of ibv_post_send / ibv_poll_cq that touch no bounce region: without the shim,
//!   with the shim and no bounce region (goal: the same: nothing is wrapped), with one bounce
//!   region elsewhere in the context (goal: <= 20 ns added);
//! - the all-reduce example, 2 ranks, direct vs through bounce buffers.
//!
//! Each configuration runs in its own process, alternating, ROUNDS times; medians are printed.

use mrshim_test_support::{shim_lib, sim_lib_dir, target_dir};
use std::path::Path;
use std::process::Command;

fn run(prog: &Path, args: &[&str], env: &[(&str, &str)], lib: &Path, rundir: &Path, shim: Option<&Path>) -> String {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", lib)
        .env("MRSHIM_SIM_RUNDIR", rundir)
        .env("MRSHIM_WARN", "off")
        .env("MRSHIM_SUMMARY", "off");
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(s) = shim {
        c.env("LD_PRELOAD", s);
    }
    let o = c.output().expect("run");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// "rank 0: ... verified, X ms/iter, ...": the mean over ranks.
fn ms_per_iter(out: &str) -> f64 {
    let v: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split(", ").find(|f| f.ends_with(" ms/iter"))?.split_whitespace().next()?.parse().ok())
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

const ROUNDS: usize = 5;

/// Environment variables of one configuration.
type Env<'a> = &'a [(&'a str, &'a str)];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The value after `key` in a "key value key value" line.
fn field(out: &str, key: &str) -> f64 {
    let mut w = out.split_whitespace();
    while let Some(k) = w.next() {
        if k == key {
            return w.next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
        }
    }
    f64::NAN
}

fn main() {
    let dir = std::env::temp_dir().join(format!("mrshim-bench-rescue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let lib = sim_lib_dir();
    let cc = |name: &str, src: &str| {
        let prog = dir.join(name);
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
        let st = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&prog)
            .arg(&src)
            .arg(format!("-L{}", lib.display()))
            .args(["-libverbs", "-lpthread", "-ldl"])
            .status()
            .unwrap();
        assert!(st.success());
        prog
    };
    let prog = cc("bench_reg", "tests/c/bench_reg.c");
    let simcheck = cc("simcheck", "sim/tests/c/simcheck.c");
    let shim = shim_lib();
    let rd = dir.join("run");
    let seed = ("MRSHIM_SIM_FAULTS", "reg_mr_iova2:EINVAL:relaxed");

    println!("registration, 64 KiB, median of 2000 (ns)");
    let direct = field(&run(&prog, &["rescue", "2000", "0"], &[], lib, &rd, None), "median_ns");
    let off =
        field(&run(&prog, &["rescue", "2000", "1"], &[("MRSHIM_RETRY", "off")], lib, &rd, Some(&shim)), "median_ns");
    let auto_ok =
        field(&run(&prog, &["rescue", "2000", "1"], &[("MRSHIM_RETRY", "auto")], lib, &rd, Some(&shim)), "median_ns");
    let rescued = field(
        &run(&prog, &["rescue", "2000", "1"], &[seed, ("MRSHIM_RETRY", "auto;sticky=off")], lib, &rd, Some(&shim)),
        "median_ns",
    );
    let sticky = field(
        &run(&prog, &["rescue", "2000", "1"], &[seed, ("MRSHIM_RETRY", "auto")], lib, &rd, Some(&shim)),
        "median_ns",
    );
    println!("  direct success (no shim)             {direct:>10.0}");
    println!("  shim, success, MRSHIM_RETRY=off      {off:>10.0}   x{:.2} of direct", off / direct);
    println!(
        "  shim, success, MRSHIM_RETRY=auto     {auto_ok:>10.0}   x{:.2} of retries off (goal: x1.00)",
        auto_ok / off
    );
    println!("  rescued each time (sticky=off)       {rescued:>10.0}   x{:.2} of direct success", rescued / direct);
    println!("  rescued, sticky (learned)            {sticky:>10.0}   x{:.2} of direct success", sticky / direct);

    let bounce: &[(&str, &str)] = &[
        ("SIMCHECK_EXTRA_ACCESS", "0x100000"),
        ("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed"),
        ("MRSHIM_RETRY", "bounce"),
        ("MRSHIM_BOUNCE_REMOTE", "announced"),
    ];
    println!("RDMA WRITE_WITH_IMM stream, 16 in flight, every byte new each message: direct vs bounce (MB/s, medians; ratio = median of the per-round ratios)");
    for (size, label) in [
        (64usize, "64"),
        (1024, "1K"),
        (4096, "4K"),
        (65536, "64K"),
        (1 << 20, "1M"),
        (16 << 20, "16M"),
        (64 << 20, "64M"),
    ] {
        let iters = ((1usize << 30) / size).clamp(16, 100_000).to_string();
        // Small messages take well under a second a run and swing the most: more rounds.
        let rounds = if size <= 4096 { 3 * ROUNDS } else { ROUNDS };
        let (mut d, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (v, env, shim) in [(&mut d, &[][..], None), (&mut b, bounce, Some(shim.as_path()))] {
                let out = run(&simcheck, &["bench-bw", &size.to_string(), &iters], env, lib, &rd, shim);
                assert!(out.contains("data equal"), "bench-bw {size}: {out}");
                v.push(field(&out, "MB/s"));
            }
        }
        let ratio = median(d.iter().zip(&b).map(|(d, b)| 100.0 * b / d).collect());
        let (lo, hi) = d
            .iter()
            .zip(&b)
            .map(|(d, b)| 100.0 * b / d)
            .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(r), hi.max(r)));
        let (d, b) = (median(d), median(b));
        let goal = match size {
            s if s <= 4096 => "  (goal >= 95%)",
            s if s == 1 << 20 => "  (goal >= 70%)",
            _ => "",
        };
        println!("  {label:>5}  direct {d:>9.1}  bounce {b:>9.1}  ratio {ratio:>5.1}%  ({lo:.0}..{hi:.0}% over {rounds} rounds){goal}");
    }
    println!("post/poll cost of WRs that touch no bounce region (ns, median of {} runs of 2000 batches)", 2 * ROUNDS);
    let one_region: Vec<(&str, &str)> =
        [("SIMCHECK_BOUNCE_REGION", "1")].into_iter().chain(bounce[1..].iter().copied()).collect();
    let no_region = &bounce[1..];
    let configs: [(&str, Env, Option<&Path>); 3] = [
        ("no shim", &[], None),
        ("shim, no bounce region", no_region, Some(&shim)),
        ("shim, one bounce region", &one_region, Some(&shim)),
    ];
    const KEYS: [&str; 4] = ["poll_empty_ns", "post_ns", "post_list_ns", "roundtrip_ns"];
    let mut rows: Vec<[Vec<f64>; 4]> = vec![Default::default(), Default::default(), Default::default()];
    for _ in 0..2 * ROUNDS {
        for (i, (_, env, s)) in configs.iter().enumerate() {
            let out = run(&simcheck, &["bench-post", "2000"], env, lib, &rd, *s);
            for (j, k) in KEYS.iter().enumerate() {
                rows[i][j].push(field(&out, k));
            }
        }
    }
    let m: Vec<[f64; 4]> = rows.into_iter().map(|r| r.map(median)).collect();
    println!(
        "  {:<26} {:>14} {:>14} {:>16} {:>18}",
        "", "empty poll_cq", "post_send", "16-WR list, /WR", "post+complete/WR"
    );
    for (i, (name, _, _)) in configs.iter().enumerate() {
        let d = |j: usize| if i == 0 { String::new() } else { format!(" ({:+.0})", m[i][j] - m[0][j]) };
        println!(
            "  {name:<26} {:>8.0}{:<6} {:>8.0}{:<6} {:>10.0}{:<6} {:>10.0}{:<8}",
            m[i][0],
            d(0),
            m[i][1],
            d(1),
            m[i][2],
            d(2),
            m[i][3],
            d(3)
        );
    }
    println!("  goals: no bounce region = no shim; one bounce region <= +20 ns");

    println!("all-reduce, 2 ranks, host memory: direct vs bounce buffers (ms per iteration, median of 3; ratio = bandwidth of bounce / direct)");
    let ar = target_dir().join("examples/allreduce");
    for (size, iters) in [("4K", "200"), ("64K", "100"), ("1M", "20"), ("16M", "4"), ("64M", "2")] {
        let args = ["--ranks", "2", "--size", size, "--iters", iters, "--host-mem"];
        let (mut d, mut b) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            d.push(ms_per_iter(&run(&ar, &args, &[], lib, &rd, Some(&shim))));
            b.push(ms_per_iter(&run(
                &ar,
                &args,
                &[
                    ("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed"),
                    ("MRSHIM_RETRY", "bounce"),
                    ("MRSHIM_BOUNCE_REMOTE", "announced"),
                ],
                lib,
                &rd,
                Some(&shim),
            )));
        }
        let (d, b) = (median(d), median(b));
        println!("  {size:>5}  direct {d:>9.3} ms  bounce {b:>9.3} ms  ratio {:>5.1}%", 100.0 * d / b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
