//! Device memory of every GPU runtime the seed incidents name (issue 16): the all-reduce on HIP
//! (ROCm 5 and 6) and MACA device memory, rescued through host bounce buffers and through
//! VA → dmabuf, and the MACA engine's self-test refusing a runtime whose ABI differs from what it
//! assumes — the registration then fails with its original errno, never a wrong byte.
mod shim_util;
use shim_util::*;
use std::path::PathBuf;

fn allreduce() -> PathBuf {
    let p = target_dir().join("examples/allreduce");
    assert!(p.exists(), "{} not built", p.display());
    p
}

/// One simulated GPU runtime: the library the all-reduce dlopens, under its SONAME.
#[derive(Clone, Copy)]
enum Rt {
    Cuda,
    Rocm5,
    Rocm6,
    Maca,
}

impl Rt {
    /// --runtime of the all-reduce.
    fn flag(self) -> &'static str {
        match self {
            Rt::Cuda => "cuda",
            Rt::Rocm5 | Rt::Rocm6 => "hip",
            Rt::Maca => "maca",
        }
    }

    /// A world whose library directory holds the simulated NIC and this runtime only.
    fn world(self, name: &str) -> SimWorld {
        let lib_dir = match self {
            Rt::Cuda => sim_gpu_lib_dir(),
            Rt::Rocm5 => sim_runtime_lib_dir("libamdhip64.so.5", "libamdhip64_5.so", "mrshim-sim-hip5"),
            Rt::Rocm6 => sim_runtime_lib_dir("libamdhip64.so.6", "libamdhip64_6.so", "mrshim-sim-hip6"),
            Rt::Maca => sim_runtime_lib_dir("libmcruntime.so", "libmcruntime.so", "mrshim-sim-maca"),
        };
        SimWorld { lib_dir, ..SimWorld::new(&format!("{name}-{}", self.flag())) }
    }
}

/// The all-reduce on `rt`'s device memory, on the simulator, with the shim.
fn job(w: &SimWorld, rt: Rt, ranks: &str, size: &str, iters: &str) -> std::process::Output {
    run(w.cmd(allreduce()).args(["--runtime", rt.flag(), "--ranks", ranks, "--size", size, "--iters", iters]))
}

fn ok(o: &std::process::Output) -> bool {
    o.status.success() && stdout(o).contains("iterations: OK") && stdout(o).contains("(device memory)")
}

fn bounce(name: &str, rt: Rt) -> SimWorld {
    rt.world(name).with("MRSHIM_SIM_DMABUF", "off").with("MRSHIM_RETRY", "auto")
}

#[test]
fn without_the_shim_hip_and_maca_device_memory_fail_like_the_seed() {
    for (rt, prefix) in [(Rt::Rocm6, "NCCL"), (Rt::Maca, "MCCL")] {
        let w = bounce("noshim", rt);
        let o = job(&w, rt, "2", "64K", "1");
        let o2 = run(w
            .cmd(allreduce())
            .args(["--runtime", rt.flag(), "--ranks", "2", "--size", "64K"])
            .env_remove("LD_PRELOAD"));
        assert!(ok(&o), "{}", stderr(&o));
        assert_eq!(o2.status.code(), Some(1));
        let want = format!("{prefix} WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument");
        assert!(stderr(&o2).contains(&want), "{}", stderr(&o2));
    }
}

/// HIP on ROCm 6, every size from one byte to 64 MiB, 2 and 4 ranks, byte-exact (the example
/// checks every element), through bounce buffers.
#[test]
fn hip_rocm6_allreduce_through_bounce_all_sizes() {
    let w = bounce("hip6-bounce", Rt::Rocm6);
    for (ranks, size, iters) in [("2", "1", "2"), ("4", "4099", "2"), ("4", "1M", "2"), ("2", "64M", "1")] {
        let o = job(&w, Rt::Rocm6, ranks, size, iters);
        assert!(ok(&o), "{ranks} ranks {size}: {}\n{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains("rescued by bounce"), "{}", stderr(&o));
    }
}

/// ROCm 5 numbers hipMemoryType differently (Device = 1, not 2) and fails the pointer query for
/// host memory: the engine picks the enum by the runtime's major version.
#[test]
fn hip_rocm5_allreduce_through_bounce_two_and_four_ranks() {
    let w = bounce("hip5-bounce", Rt::Rocm5);
    for (ranks, size) in [("2", "64K"), ("4", "1M")] {
        let o = job(&w, Rt::Rocm5, ranks, size, "2");
        assert!(ok(&o), "{ranks} ranks {size}: {}\n{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains("rescued by bounce"), "{}", stderr(&o));
    }
}

/// MACA, with the buffers on device 1 while the application's current device stays 0: the
/// engine copies on device 1's stream and puts the caller's current device back (the example
/// fails if mcGetDevice no longer says 0).
#[test]
fn maca_allreduce_through_bounce_two_and_four_ranks() {
    let w = bounce("maca-bounce", Rt::Maca).with("MRSHIM_SIM_GPUS", "2");
    for (ranks, size) in [("2", "64K"), ("4", "4M")] {
        let o = run(w.cmd(allreduce()).args(["--runtime", "maca", "--device", "1", "--ranks", ranks, "--size", size]));
        assert!(ok(&o), "{ranks} ranks {size}: {}\n{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).contains("rescued by bounce"), "{}", stderr(&o));
    }
}

/// MACA's enum values and struct layout are not public: when the runtime's differ from the
/// engine's assumption, its self-test fails, the engine is disabled with one line and a record,
/// and the registration fails with the original errno — the job stops as it would without the
/// shim instead of moving wrong bytes.
#[test]
fn maca_self_test_refuses_a_runtime_whose_abi_differs() {
    for abi in ["enum", "layout"] {
        let w = bounce(&format!("maca-refuse-{abi}"), Rt::Maca);
        let logs = w.dir.join("logs");
        let w = w.with("MRSHIM_SIM_MACA_ABI", abi).with("MRSHIM_LOG", format!("{}/", logs.display()));
        let o = job(&w, Rt::Maca, "2", "64K", "1");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{abi}: {err}");
        assert!(!stdout(&o).contains("verified"), "{abi}: {}", stdout(&o));
        assert!(err.contains("MCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument"), "{abi}: {err}");
        // one line per process about the disabled engine (2 ranks: 2 lines), naming the check
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("MACA copy engine disabled")).collect();
        assert_eq!(lines.len(), 2, "{abi}: {err}");
        assert!(lines.iter().all(|l| l.contains("self-test")), "{abi}: {lines:?}");
        assert!(!err.contains("rescued by bounce"), "{abi}: {err}");
        // and a record of it in each rank's log
        let notes: usize = files(&logs)
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap().lines().filter(|l| l.contains("copy_selftest")).count())
            .sum();
        assert_eq!(notes, 2, "{abi}");
    }
}

/// MRSHIM_COPY_SELFTEST=on proves the CUDA and HIP engines too before they are trusted.
#[test]
fn forced_self_test_passes_on_cuda_and_hip() {
    for (rt, name) in [(Rt::Cuda, "CUDA"), (Rt::Rocm5, "HIP")] {
        let w = bounce("selftest", rt);
        let o = job(&w.with("MRSHIM_COPY_SELFTEST", "on"), rt, "2", "64K", "1");
        assert!(ok(&o), "{}", stderr(&o));
        let passed = format!("{name} copy engine: self-test passed");
        assert_eq!(stderr(&o).matches(&passed).count(), 2, "one line per rank: {}", stderr(&o));
    }
}

/// VA → dmabuf: ROCm 6 and MACA export the allocation (base + offset), ROCm 5 has no
/// hipMemGetHandleForAddressRange — the chain learns that once and goes to bounce.
#[test]
fn va_to_dmabuf_per_runtime() {
    for rt in [Rt::Rocm6, Rt::Maca] {
        let w = rt.world("dmabuf").with("MRSHIM_RETRY", "auto");
        let o = job(&w, rt, "2", "1M", "2");
        assert!(ok(&o), "{}", stderr(&o));
        assert!(stderr(&o).contains("rescued by va-to-dmabuf"), "{}", stderr(&o));
    }
    let w = Rt::Rocm5.world("dmabuf").with("MRSHIM_RETRY", "auto");
    let o = job(&w, Rt::Rocm5, "2", "64K", "1");
    assert!(ok(&o), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("rescued by bounce") && !err.contains("rescued by va-to-dmabuf"), "{err}");
}
