//! The job's context in the config record, and log paths built from it (`%j`, missing parent
//! directories), under a Slurm-like environment; the mpirun case is in tests/shim_sim.rs.

mod shim_util;
use shim_util::*;

#[test]
fn slurm_like_job_context_and_a_per_job_log_directory_created_on_demand() {
    let d = tmp("job-slurm");
    let pattern = d.join("shared/mrshim/%j/%h-%r.jsonl");
    let mut c = fake_cmd("fake_linked");
    for (k, v) in [
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_PROCID", "2"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NTASKS", "8"),
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_IB_PCI_RELAXED_ORDERING", "0"),
        ("UCX_TLS", "rc,sm"),
        ("CUDA_VISIBLE_DEVICES", "1"),
    ] {
        c.env(k, v);
    }
    let o = run(c.env("MRSHIM_LOG", &pattern));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("cannot open the log"), "{}", stderr(&o));
    let f = d.join(format!("shared/mrshim/4242/{}-2.jsonl", host()));
    let recs = records(&f);
    let cfg = &recs[0];
    assert_eq!(cfg.job_id.as_deref(), Some("4242"));
    assert_eq!(cfg.world_size, Some(8));
    assert_eq!(cfg.launcher.as_deref(), Some("slurm"));
    let s = cfg.settings.as_ref().unwrap();
    assert_eq!((s["job_id_from"].as_str(), s["world_size_from"].as_str()), ("SLURM_JOB_ID", "SLURM_NTASKS"));
    assert_eq!(s["rank_from"], "SLURM_PROCID");
    let env = cfg.job_env.as_ref().expect("job_env");
    for (k, v) in [
        ("NCCL_IB_HCA", "mlx5_0"),
        ("NCCL_IB_PCI_RELAXED_ORDERING", "0"),
        ("UCX_TLS", "rc,sm"),
        ("CUDA_VISIBLE_DEVICES", "1"),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}: {env:?}");
    }
    assert!(recs.iter().all(|r| r.rank == Some(2)));
}

#[test]
fn other_launchers_rank_variables() {
    for (vars, rank, launcher) in [
        (&[("MV2_COMM_WORLD_RANK", "5"), ("MV2_COMM_WORLD_SIZE", "6")][..], 5, "mvapich"),
        (&[("FLUX_TASK_RANK", "3"), ("FLUX_JOB_SIZE", "4"), ("FLUX_JOB_ID", "f2Xk")][..], 3, "flux"),
        (&[("PALS_RANKID", "7"), ("PBS_JOBID", "99.pbs")][..], 7, "pals"),
    ] {
        let d = tmp(&format!("job-{launcher}"));
        let mut c = fake_cmd("fake_linked");
        for (k, v) in vars {
            c.env(k, v);
        }
        let o = run(c.env("MRSHIM_LOG", d.join("r%r-%j.jsonl")));
        assert!(o.status.success(), "{}", stderr(&o));
        let fs = files(&d);
        assert_eq!(fs.len(), 1, "{fs:?}");
        let name = fs[0].file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with(&format!("r{rank}-")), "{launcher}: {name}");
        let cfg = &records(&fs[0])[0];
        assert_eq!(cfg.launcher.as_deref(), Some(launcher));
        assert_eq!(cfg.rank, Some(rank));
    }
}
