//! Open MPI 4.1 (Debian) with `--mca pml ucx` / `osc ucx` on the simulated NIC through
//! `mrshim sim`: tests/c/mpi_datacheck.c checks every byte of send/recv from 1 B to 64 MiB,
//! an allreduce and MPI_Put/MPI_Get in a window, with 2 and 4 ranks; again with the shim
//! preloaded in every rank (its records must match what the device saw, process by process)
//! and with MRSHIM_RETRY=auto.

mod shim_util;
use shim_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn datacheck() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("mrshim-it-{}-mpi_datacheck", std::process::id()));
        let o = run(cmd("mpicc").args(["-O2", "-Wall", "-o"]).arg(&out).arg(src_c("mpi_datacheck.c")));
        assert!(o.status.success(), "mpicc (libopenmpi-dev): {}", stderr(&o));
        out
    })
}

/// Every rank's shim log against the device's log lines of the same process.
fn assert_records_per_process(w: &SimWorld, ranks: usize, who: &str) {
    let dev = sim_log(&w.dir.join("sim.jsonl"));
    let fs = files(&w.dir.join("logs"));
    assert_eq!(fs.len(), ranks, "{who}: one log per rank: {fs:?}");
    for f in fs {
        let recs = records(&f);
        let pid = recs[0].pid;
        let mine: Vec<serde_json::Value> =
            dev.iter().filter(|d| d["pid"].as_u64() == Some(pid as u64)).cloned().collect();
        assert_records_match_device(&recs, &mine, &format!("{who} {}", f.display()));
    }
}

fn mpirun(np: usize, max_size: &str) {
    for mode in MODES {
        let w = SimWorld::new(&format!("mpi-{np}-{mode:?}"));
        let npstr = np.to_string();
        let session = ompi_session_dir(&w);
        let mut args = vec![
            "--mca",
            "orte_tmpdir_base",
            &session,
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &npstr,
            "--mca",
            "pml",
            "ucx",
            "--mca",
            "osc",
            "ucx",
            "--mca",
            "btl",
            "^openib",
            "-x",
            "UCX_TLS=rc",
            "-x",
            "MRSHIM_SIM_RUNDIR",
        ];
        let extra = [
            format!("LD_PRELOAD={}", shim_lib().display()),
            format!("MRSHIM_LOG={}/", w.dir.join("logs").display()),
            format!("MRSHIM_SIM_LOG={}", w.dir.join("sim.jsonl").display()),
        ];
        if mode != Mode::Plain {
            for e in &extra {
                args.extend(["-x", e]);
            }
        }
        if mode == Mode::Retry {
            args.extend(["-x", "MRSHIM_RETRY=auto"]);
        }
        let prog = datacheck().to_str().unwrap();
        args.extend([prog, "--max-size", max_size, "--iters", "1"]);
        let o = run(&mut stack_cmd(&w, Mode::Plain, 0, "mpirun", &args));
        let who = format!("mpirun -np {np} {mode:?}");
        assert!(o.status.success(), "{who}: {}\n{}", stdout(&o), stderr(&o));
        let out = stdout(&o);
        let max: u64 = max_size.parse().unwrap();
        let sizes = std::iter::successors(Some(1u64), |s| Some(s * 4)).take_while(|&s| s <= max).count();
        for r in 0..np {
            assert!(out.contains(&format!("mpi_datacheck: rank {r} ok\n")), "{who}: rank {r}:\n{out}");
            let p2p = format!("mpi_datacheck: rank {r} send/recv {sizes} messages up to {max_size} bytes ok");
            assert!(out.contains(&p2p), "{who}: {p2p:?} missing:\n{out}");
        }
        if mode != Mode::Plain {
            assert_records_per_process(&w, np, &who);
        }
    }
}

#[test]
fn mpirun_np2_pml_ucx_send_recv_1b_to_64mib_allreduce_put_get() {
    mpirun(2, "67108864");
}

/// Four ranks on two cores: send/recv up to 16 MiB keeps the test short; 64 MiB runs with -np 2.
#[test]
fn mpirun_np4_pml_ucx_send_recv_allreduce_put_get() {
    mpirun(4, "16777216");
}
