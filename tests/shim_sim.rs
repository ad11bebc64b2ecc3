//! libmrshim.so on the simulated verbs device (sim/): Debian's unmodified perftest and
//! ibv_rc_pingpong, a NCCL-style consumer with device-side fault injection, and MPI.

mod shim_util;
use mrshim_record::Kind;
use shim_util::*;

fn tool_records(prog: &str, args: &[&str]) {
    let w = SimWorld::new(prog);
    let logs = w.dir.join("logs");
    let (slog, clog) = (w.dir.join("sim-server.jsonl"), w.dir.join("sim-client.jsonl"));
    let w = w.with("MRSHIM_LOG", format!("{}/", logs.display()));
    let (s, c) = server_client(
        &w,
        prog,
        args,
        &[("MRSHIM_SIM_LOG", slog.display().to_string()), ("RANK", "0".into())],
        &[("MRSHIM_SIM_LOG", clog.display().to_string()), ("RANK", "1".into())],
    );
    assert!(s.status.success(), "{prog} server: {}\n{}", stdout(&s), stderr(&s));
    assert!(c.status.success(), "{prog} client: {}\n{}", stdout(&c), stderr(&c));
    let h = host();
    let fs = files(&logs);
    assert_eq!(fs.len(), 2, "{fs:?}");
    for (rank, dev_log) in [(0, &slog), (1, &clog)] {
        let f = fs
            .iter()
            .find(|f| f.file_name().unwrap().to_str().unwrap().starts_with(&format!("mrshim-{h}-r{rank}-p")))
            .expect("file per rank");
        assert_records_match_device(&records(f), &sim_log(dev_log), &format!("{prog} rank {rank}"));
    }
}

#[test]
fn ibv_rc_pingpong_every_registration_recorded() {
    tool_records("ibv_rc_pingpong", &["-d", "mlx5_0", "-g", "3", "-n", "50", "-s", "8192"]);
}

#[test]
fn ib_write_bw_every_registration_recorded() {
    tool_records("ib_write_bw", &["-d", "mlx5_0", "-x", "3", "-s", "65536", "-n", "50"]);
}

fn nccl_style() -> std::path::PathBuf {
    fake().prog("nccl_style")
}

#[test]
fn nccl_style_consumer_injected_relaxed_ordering_einval_is_recorded_and_warned() {
    let w = SimWorld::new("nccl-sim");
    let dev = w.dir.join("sim.jsonl");
    let log = w.dir.join("r%r.jsonl");
    let w = w
        .with("MRSHIM_SIM_FAULTS", "reg_mr_iova2:EINVAL:relaxed")
        .with("MRSHIM_SIM_LOG", dev.display().to_string())
        .with("MRSHIM_LOG", log.display().to_string())
        .with("OMPI_COMM_WORLD_RANK", "0");
    let o = w.cmd(nccl_style()).output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert_wrapped(&out, &NCCL_REG_SYMS);
    assert!(out.contains("ibv_alloc_pd@IBVERBS_1.1 from libibverbs.so"), "{out}");
    assert!(out.contains("iova2 failed errno=22\n"), "the caller sees the device's errno: {out}");
    let recs = records(&w.dir.join("r0.jsonl"));
    let r = recs.iter().find(|r| r.call == "ibv_reg_mr_iova2").unwrap();
    assert_eq!((r.result.as_str(), r.errno, r.errno_name.as_deref()), ("error", Some(22), Some("EINVAL")));
    assert!(r.relaxed_ordering);
    assert_eq!(r.access_names, ["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "RELAXED_ORDERING"]);
    let probe = recs.iter().find(|r| r.call == "ibv_reg_dmabuf_mr").unwrap();
    assert!(probe.probe);
    let errno_seen: String = out.lines().find(|l| l.starts_with("probe ")).unwrap().to_string();
    assert_eq!(
        errno_seen,
        format!("probe failed errno={}", probe.errno.unwrap()),
        "probe errno passed through untouched"
    );
    let warn: Vec<String> = stderr(&o).lines().filter(|l| l.contains(" MRSHIM WARN ")).map(String::from).collect();
    assert_eq!(warn.len(), 1, "{}", stderr(&o));
    let a = r.addr.as_ref().unwrap();
    assert_eq!(
        warn[0],
        format!("{}:{}:{} [-] MRSHIM WARN ibv_reg_mr_iova2(addr={a}, len=1048576, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova={a}, mem={}) failed: EINVAL (22)", host(), r.pid, r.tid, r.mem_kind.expect("kind").name())
    );
    assert_records_match_device(&recs, &sim_log(&dev), "nccl_style");
}

#[test]
fn mpirun_four_ranks_four_files_by_host_and_rank() {
    if std::process::Command::new("mpirun").arg("--version").output().is_err() {
        panic!("mpirun not installed (scripts/install-deps installs openmpi-bin)");
    }
    for via_exec in [true, false] {
        let w = SimWorld::new("mpi");
        let logs = w.dir.join("logs");
        let mut c = cmd("timeout");
        c.args(["-k", "5", "120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4"]);
        c.args(["--mca", "orte_tmpdir_base", &ompi_session_dir(&w)]);
        c.env("LD_LIBRARY_PATH", sim_lib_dir()).env("MRSHIM_SIM_RUNDIR", w.dir.join("run"));
        c.args(["-x", "LD_LIBRARY_PATH", "-x", "MRSHIM_SIM_RUNDIR"]);
        if via_exec {
            c.arg(mrshim_bin()).arg("exec").arg("--log").arg(format!("{}/", logs.display())).arg("--");
        } else {
            c.arg("-x").arg(format!("LD_PRELOAD={}", shim_lib().display()));
            c.arg("-x").arg(format!("MRSHIM_LOG={}/", logs.display()));
        }
        c.arg(nccl_style());
        let o = c.output().unwrap();
        assert!(o.status.success(), "via_exec={via_exec}: {}\n{}", stdout(&o), stderr(&o));
        let h = host();
        let fs = files(&logs);
        assert_eq!(fs.len(), 4, "{fs:?}");
        for rank in 0..4 {
            let f = fs
                .iter()
                .find(|f| f.file_name().unwrap().to_str().unwrap().starts_with(&format!("mrshim-{h}-r{rank}-p")))
                .unwrap_or_else(|| panic!("no file for rank {rank}: {fs:?}"));
            let recs = records(f);
            assert!(recs.iter().all(|r| r.rank == Some(rank) && r.host == h));
            assert_eq!(recs.iter().filter(|r| r.kind == Some(Kind::Reg)).count(), 3, "{}", f.display());
            assert_eq!(recs[0].settings.as_ref().unwrap()["rank_from"], "OMPI_COMM_WORLD_RANK");
            // the job's context, as Open MPI's mpirun sets it
            let cfg = &recs[0];
            assert_eq!((cfg.world_size, cfg.launcher.as_deref()), (Some(4), Some("openmpi")), "{}", f.display());
            assert!(cfg.job_id.as_deref().is_some_and(|j| !j.is_empty()), "{:?}", cfg.job_id);
            assert_eq!(cfg.settings.as_ref().unwrap()["world_size_from"], "OMPI_COMM_WORLD_SIZE");
        }
        // every registration succeeded: no rank prints anything (MRSHIM_DEBUG=WARN, the default)
        assert!(!stderr(&o).contains("MRSHIM"), "{}", stderr(&o));
    }
}
