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
    /// ROCm 5's HIP runtime and the HSA runtime it loads (libhsa-runtime64.so.1).
    Rocm5,
    /// ROCm 5's HIP runtime alone: no way to export a dmabuf.
    Rocm5NoHsa,
    Rocm6,
    Maca,
}

impl Rt {
    /// --runtime of the all-reduce.
    fn flag(self) -> &'static str {
        match self {
            Rt::Cuda => "cuda",
            Rt::Rocm5 | Rt::Rocm5NoHsa | Rt::Rocm6 => "hip",
            Rt::Maca => "maca",
        }
    }

    /// A world whose library directory holds the simulated NIC and this runtime only.
    fn world(self, name: &str) -> SimWorld {
        let hip5 = ("libamdhip64.so.5", "libamdhip64_5.so", "mrshim-sim-hip5");
        let lib_dir = match self {
            Rt::Cuda => sim_gpu_lib_dir(),
            Rt::Rocm5 => {
                sim_runtime_lib_dir(&[hip5, ("libhsa-runtime64.so.1", "libhsa_runtime64.so", "mrshim-sim-hsa")])
            }
            Rt::Rocm5NoHsa => sim_runtime_lib_dir(&[hip5]),
            Rt::Rocm6 => sim_runtime_lib_dir(&[("libamdhip64.so.6", "libamdhip64_6.so", "mrshim-sim-hip6")]),
            Rt::Maca => sim_runtime_lib_dir(&[("libmcruntime.so", "libmcruntime.so", "mrshim-sim-maca")]),
        };
        // The all-reduce example announces every peer access (docs/bounce.md, "The contract").
        SimWorld { lib_dir, ..SimWorld::new(&format!("{name}-{}", self.flag())) }
            .with("MRSHIM_BOUNCE_REMOTE", "announced")
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
            .map(|f| {
                std::fs::read_to_string(f)
                    .unwrap()
                    .lines()
                    .filter(|l| l.contains("copy_selftest") && !l.contains(r#""kind":"config""#))
                    .count()
            })
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

/// VA → dmabuf: ROCm 6 and MACA export the allocation (base + offset) through the HIP/MACA
/// runtime, ROCm 5 (no hipMemGetHandleForAddressRange) through the HSA runtime HIP loaded.
#[test]
fn va_to_dmabuf_per_runtime() {
    for rt in [Rt::Rocm6, Rt::Maca] {
        let w = rt.world("dmabuf").with("MRSHIM_RETRY", "auto");
        let o = job(&w, rt, "2", "1M", "2");
        assert!(ok(&o), "{}", stderr(&o));
        assert!(stderr(&o).contains("rescued by va-to-dmabuf"), "{}", stderr(&o));
    }
}

/// ROCm 5's device memory, rejected by the NIC's VA path, rescued by va-to-dmabuf through
/// hsa_amd_portable_export_dmabuf — byte-exact (the example checks every element), and the
/// records say which strategy did it, with the fd and offset HSA gave.
#[test]
fn rocm5_device_memory_rescued_through_hsa_dmabuf() {
    let w = Rt::Rocm5.world("hsa-dmabuf");
    let logs = w.dir.join("logs");
    let w = w.with("MRSHIM_RETRY", "va-to-dmabuf").with("MRSHIM_LOG", format!("{}/", logs.display()));
    let o = job(&w, Rt::Rocm5, "2", "1M", "2");
    let err = stderr(&o);
    assert!(ok(&o), "{}\n{err}", stdout(&o));
    assert!(err.contains("rescued by va-to-dmabuf") && !err.contains("rescued by bounce"), "{err}");
    let recs: Vec<_> = files(&logs).iter().flat_map(|f| records(f)).collect();
    // each rank: its first registration rescued (attempt 1), the next ones go straight to it
    let rescues: Vec<_> = recs
        .iter()
        .filter(|r| r.strategy.as_deref() == Some("va-to-dmabuf") && r.call == "ibv_reg_dmabuf_mr" && r.result == "ok")
        .collect();
    assert_eq!(rescues.iter().filter(|r| r.attempt == 1).count(), 2, "{rescues:?}");
    assert!(rescues.iter().filter(|r| r.learned).count() >= 2, "{rescues:?}");
    assert!(rescues.iter().all(|r| r.dmabuf_fd.is_some_and(|fd| fd >= 0)), "{rescues:?}");
    assert!(!recs.iter().any(|r| r.strategy.as_deref() == Some("bounce")), "nothing bounced");
}

/// Without an HSA runtime, ROCm 5 cannot export: the strategy is refused, and the registration
/// falls to bounce.
#[test]
fn rocm5_without_hsa_falls_to_bounce() {
    let w = Rt::Rocm5NoHsa.world("dmabuf").with("MRSHIM_RETRY", "auto");
    let o = job(&w, Rt::Rocm5NoHsa, "2", "64K", "1");
    assert!(ok(&o), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("rescued by bounce") && !err.contains("rescued by va-to-dmabuf"), "{err}");
}

/// The per-runtime dmabuf policy (NEVER once a runtime could not export): with sticky=off every
/// registration walks the chain again, but only the first one asks ROCm 5 without HSA for a
/// dmabuf; the later refusals say the answer was learned, and bounce still rescues each one.
#[test]
fn rocm5_dmabuf_refusal_is_learned_per_runtime() {
    let w = Rt::Rocm5NoHsa.world("dmabuf-never");
    let logs = w.dir.join("logs");
    let w = w.with("MRSHIM_RETRY", "va-to-dmabuf,bounce;sticky=off").with("MRSHIM_LOG", format!("{}/", logs.display()));
    let o = job(&w, Rt::Rocm5NoHsa, "2", "64K", "1");
    assert!(ok(&o), "{}", stderr(&o));
    assert_eq!(files(&logs).len(), 2, "one log per rank in {}", logs.display());
    for f in files(&logs) {
        let refused: Vec<String> = records(&f)
            .into_iter()
            .filter(|r| r.strategy.as_deref() == Some("va-to-dmabuf") && r.result == "refused")
            .map(|r| r.change.unwrap_or_default())
            .collect();
        assert!(refused.len() >= 2, "{}: {refused:?}", f.display());
        assert!(!refused[0].contains("(learned)") && refused[0].contains("libhsa-runtime64"), "{refused:?}");
        assert!(refused[1..].iter().all(|c| c.contains("cannot export dmabufs (learned)")), "{refused:?}");
    }
}

/// mrshim's stderr lines carry what NCCL's do in `host:pid:tid [N]`: the thread's GPU device
/// (asked of the runtime the application loaded), not the rank: both ranks of the job run on
/// device 0, so rank 1's WARN line says `[0]` too, while its record says rank 1.
#[test]
fn warn_lines_show_the_current_device_like_nccl() {
    for rt in [Rt::Cuda, Rt::Rocm6, Rt::Maca] {
        let w = rt.world("device-bracket");
        let logs = w.dir.join("logs");
        let w = w.with("MRSHIM_SIM_DMABUF", "off").with("MRSHIM_LOG", format!("{}/", logs.display()));
        let o = job(&w, rt, "2", "64K", "1");
        assert_eq!(o.status.code(), Some(1), "the registrations fail without a retry: {}", stderr(&o));
        let err = stderr(&o);
        for f in files(&logs) {
            let recs = records(&f);
            let fail = recs.iter().find(|r| r.result == "error" && !r.probe).expect("a failed registration");
            let head = format!("{}:{}:{} [0] MRSHIM WARN {}(", host(), fail.pid, fail.tid, fail.call);
            let kind = format!(", mem={}) failed: ", fail.mem_kind.expect("kind").name());
            assert!(
                err.lines().any(|l| l.starts_with(&head) && l.contains(&kind)),
                "{} rank {:?}: no line {head}...{kind}\n{err}",
                rt.flag(),
                fail.rank
            );
        }
        assert!(
            files(&logs).iter().any(|f| records(f).iter().any(|r| r.rank == Some(1))),
            "rank 1 ran: {}",
            logs.display()
        );
    }
}

/// tests/c/gpu_mix.c, built once per test binary against the simulated NIC.
fn gpu_mix() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let out = tmp("c-gpu-mix").join("gpu_mix");
        let nic = format!("-L{}", sim_lib_dir().display());
        cc(&["-O1", "-o", out.to_str().unwrap(), src_c("gpu_mix.c").to_str().unwrap(), &nic, "-libverbs", "-ldl"]);
        out
    })
    .clone()
}

/// Issue 16 item 4: the dmabuf policy is learned per runtime. One process holds CUDA and ROCm 5
/// (without HSA) device memory and registers them alternately, HIP first, with sticky=off so every
/// registration walks va-to-dmabuf,bounce. HIP's first refusal teaches NEVER for HIP — its later
/// ones say "(learned)" and bounce — while every CUDA registration is still tried through
/// va-to-dmabuf and rescued by it.
#[test]
fn dmabuf_never_learned_for_one_runtime_is_not_applied_to_another() {
    let hip5 = ("libamdhip64.so.5", "libamdhip64_5.so", "mrshim-sim-hip5");
    let cuda = ("libcuda.so.1", "libcuda.so", "mrshim-sim-cuda");
    let w = SimWorld { lib_dir: sim_runtime_lib_dir(&[hip5, cuda]), ..SimWorld::new("two-runtimes") }
        .with("MRSHIM_BOUNCE_REMOTE", "announced");
    let logs = w.dir.join("logs");
    let w = w.with("MRSHIM_RETRY", "va-to-dmabuf,bounce;sticky=off").with("MRSHIM_LOG", format!("{}/", logs.display()));
    let o = run(w.cmd(gpu_mix()).args(["two-runtimes", "3"]));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "ok\n");
    let recs = records(&only_file(&logs));
    let dmabuf: Vec<(&str, &str)> = recs
        .iter()
        .filter(|r| r.strategy.as_deref() == Some("va-to-dmabuf"))
        .map(|r| (r.result.as_str(), r.change.as_deref().unwrap_or("")))
        .collect();
    // per round: HIP refused, CUDA rescued
    assert_eq!(dmabuf.len(), 6, "{dmabuf:#?}");
    for (round, pair) in dmabuf.chunks(2).enumerate() {
        let (hip, cuda) = (pair[0], pair[1]);
        assert_eq!(hip.0, "refused", "round {round}: {dmabuf:#?}");
        assert_eq!(hip.1.contains("(learned)"), round > 0, "round {round}: {dmabuf:#?}");
        assert!(hip.1.starts_with("hipMemGetHandleForAddressRange"), "{dmabuf:#?}");
        assert_eq!(cuda.0, "ok", "round {round}: CUDA still tried and rescued: {dmabuf:#?}");
        assert!(cuda.1.contains("ibv_reg_dmabuf_mr(fd "), "{dmabuf:#?}");
    }
    let bounced = recs.iter().filter(|r| r.strategy.as_deref() == Some("bounce") && r.result == "ok").count();
    assert_eq!(bounced, 3, "each HIP registration bounced");
}

/// Issue 16 item 4 on ROCm 5: hsa_amd_portable_export_dmabuf exports the whole allocation and
/// says where the pointer lies in it. A registration 0x3100 bytes into a HIP allocation must use
/// that offset: an RDMA WRITE out of the MR delivers exactly the allocation's bytes at 0x3100, one
/// into it lands exactly there (read back through hipMemcpyDtoH), nothing around it changes.
#[test]
fn rocm5_dmabuf_through_hsa_at_an_offset_inside_the_allocation_is_byte_exact() {
    let w = Rt::Rocm5.world("hsa-offset");
    let logs = w.dir.join("logs");
    let w = w.with("MRSHIM_RETRY", "va-to-dmabuf").with("MRSHIM_LOG", format!("{}/", logs.display()));
    let o = run(w.cmd(gpu_mix()).args(["hip-offset", "0x3100", "65536"]));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "ok\n");
    let recs = records(&only_file(&logs));
    let rescue: Vec<_> = recs
        .iter()
        .filter(|r| r.strategy.as_deref() == Some("va-to-dmabuf") && r.call == "ibv_reg_dmabuf_mr")
        .collect();
    assert_eq!(rescue.len(), 1, "{rescue:?}");
    assert_eq!(rescue[0].result, "ok");
    assert!(rescue[0].change.as_deref().unwrap_or("").contains("offset 0x3100"), "{rescue:?}");
}
