//! Generated truth from real stacks: each stack runs on the simulated NIC (`mrshim sim`, no shim
//! preloaded) with one cause injected, and `mrshim analyze` reads only the programs' own output
//! (stdout and stderr of every process, no records) — its first finding must be that cause.
//!
//! Causes: relaxed ordering refused by the device (`MRSHIM_SIM_FAULTS=reg:EINVAL:relaxed` and
//! `reg:EFAULT:relaxed`, with `UCX_IB_PCI_RELAXED_ORDERING=on`: UCX's default asks for it only on
//! some CPU models), and the memlock limit (`ulimit -l` lowered in the job, `MRSHIM_SIM_MEMLOCK=enforce`
//! because the tests run as root, whose CAP_IPC_LOCK lifts the limit as in the kernel).
//! Stacks: UCX (ucx_perftest), Open MPI (`mpirun --mca pml ucx`), MPICH (Debian's ch4:ucx,
//! `mpirun.mpich` with `MPIR_CVAR_NOLOCAL=1` so the two ranks on one host talk through UCX, not shared
//! memory), libfabric (fi_pingpong), librdmacm (rping), perftest (ib_write_bw), pyverbs
//! (tests/c/pyverbs_reg.py under Debian's /usr/bin/python3: pyverbs prints the access mask in decimal,
//! `access flags: 1048583`). The cells run in two lanes at once (the MPI jobs, which wait for their
//! timeout once UCX fails, and the rest): about two minutes.

mod shim_util;
use serde_json::Value;
use shim_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

/// UCX settings every case pins (not left to the machine: RO `on`, rc, the rendezvous threshold).
const UCX_ENV: &str = "UCX_TLS=rc UCX_IB_PCI_RELAXED_ORDERING=on UCX_RNDV_THRESH=65536";

struct Case {
    stack: &'static str,
    cause: &'static str,
    faults: &'static str,
    /// `ulimit -l` in KiB for the job (memlock enforced).
    memlock_kib: Option<u32>,
}

const RO_EINVAL: &str = "reg:EINVAL:relaxed";
const RO_EFAULT: &str = "reg:EFAULT:relaxed";

/// tests/c/mpi_datacheck.c built with `mpicc` (Open MPI) or `mpicc.mpich` (MPICH).
fn mpi_prog(mpich: bool) -> &'static PathBuf {
    static OMPI: OnceLock<PathBuf> = OnceLock::new();
    static MPICH: OnceLock<PathBuf> = OnceLock::new();
    let (cell, cc, pkg) =
        if mpich { (&MPICH, "mpicc.mpich", "libmpich-dev") } else { (&OMPI, "mpicc", "libopenmpi-dev") };
    cell.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("mrshim-it-{}-matrix-datacheck-{cc}", std::process::id()));
        let o = run(cmd(cc).args(["-O2", "-o"]).arg(&out).arg(src_c("mpi_datacheck.c")));
        assert!(o.status.success(), "{cc} ({pkg}): {}", stderr(&o));
        out
    })
}

/// The job as a shell script: servers in the background, their output appended after the client's.
fn script(stack: &str, relaxed: bool) -> String {
    let port = mrshim_test_support::free_port();
    match stack {
        "pyverbs" => format!(
            "timeout 30 /usr/bin/python3 {} {}",
            src_c("pyverbs_reg.py").display(),
            if relaxed { "ro" } else { "" }
        ),
        "ucx_perftest" => format!(
            "timeout 30 ucx_perftest -p {port} >srv.out 2>&1 & sleep 2; \
             timeout 30 ucx_perftest 127.0.0.1 -p {port} -t tag_bw -s 1048576 -n 4 -w 1; wait; cat srv.out"
        ),
        "mpirun" => format!(
            "timeout 20 mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ucx --mca osc ucx \
             --mca btl ^openib,uct -x UCX_TLS -x UCX_IB_PCI_RELAXED_ORDERING -x UCX_RNDV_THRESH \
             -x MRSHIM_SIM_FAULTS -x MRSHIM_SIM_MEMLOCK {} --max-size 1048576 --iters 1",
            mpi_prog(false).display()
        ),
        // Hydra passes the whole environment to the ranks; MPICH's UCX netmod registers its
        // buffers at start-up and keeps retrying, so the job ends at its timeout
        "mpirun.mpich" => format!(
            "MPIR_CVAR_NOLOCAL=1 timeout 15 mpirun.mpich -np 2 {} --max-size 1048576 --iters 1",
            mpi_prog(true).display()
        ),
        "fi_pingpong" => format!(
            "timeout 20 fi_pingpong -p verbs -e msg -B {port} -S 65536 -I 2 >srv.out 2>&1 & sleep 2; \
             timeout 20 fi_pingpong -p verbs -e msg -P {port} -S 65536 -I 2 127.0.0.1; wait; cat srv.out"
        ),
        "ib_write_bw" => format!(
            "timeout 15 ib_write_bw -d mlx5_0 -x 3 -s 65536 -n 5 -p {port} >srv.out 2>&1 & sleep 2; \
             timeout 15 ib_write_bw -d mlx5_0 -x 3 -s 65536 -n 5 -p {port} 127.0.0.1; wait; cat srv.out"
        ),
        "rping" => format!(
            "timeout 15 rping -s -a 127.0.0.1 -p {port} -C 2 -V >srv.out 2>&1 & sleep 2; \
             timeout 15 rping -c -a 127.0.0.1 -p {port} -C 2 -V; wait; cat srv.out"
        ),
        _ => unreachable!("{stack}"),
    }
}

/// Runs the case; returns the programs' output and analyze's JSON of it.
fn run_case(c: &Case) -> (String, Value) {
    let w = SimWorld::new(&format!("matrix-{}-{}-{}", c.stack, c.cause, c.faults.replace([':', ';'], "_")));
    let mut env: Vec<String> = UCX_ENV.split(' ').map(String::from).collect();
    if !c.faults.is_empty() {
        env.push(format!("MRSHIM_SIM_FAULTS={}", c.faults));
    }
    let mut body = String::new();
    if let Some(k) = c.memlock_kib {
        env.push("MRSHIM_SIM_MEMLOCK=enforce".into());
        body.push_str(&format!("ulimit -l {k}; "));
    }
    body.push_str(&script(c.stack, c.cause == "relaxed-ordering"));
    let mut sim = cmd("timeout");
    sim.args(["-k", "5", "120"]).arg(mrshim_bin()).args(["sim", "--", "env"]).args(env);
    sim.args(["bash", "-c", body.as_str()]).current_dir(&w.dir).env("MRSHIM_SIM_RUNDIR", w.dir.join("run"));
    sim.env_remove("LD_PRELOAD").env_remove("MRSHIM_LOG");
    let o = run(&mut sim);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    let log = w.dir.join("job.out");
    std::fs::write(&log, &text).unwrap();
    let a = run(cmd(mrshim_bin()).args(["analyze", "--json"]).arg(&log));
    let v: Value = serde_json::from_slice(&a.stdout).unwrap_or(Value::Null);
    let mut text = text;
    if first(&v) != c.cause {
        // keep what analyze read: a wrong cell is diagnosed from it
        let keep = std::env::temp_dir().join(format!("mrshim-matrix-{}-{}.out", c.stack, c.faults.replace(':', "_")));
        if std::fs::copy(&log, &keep).is_ok() {
            text = format!("(output kept at {})\n{text}", keep.display());
        }
    }
    let _ = std::fs::remove_dir_all(&w.dir);
    (text, v)
}

fn first(v: &Value) -> &str {
    v["findings"][0]["category"].as_str().unwrap_or("-")
}

/// Stacks and causes this machine cannot run, each with why: one line each in the output.
const NOT_HERE: &[&str] = &[
    "mpirun.mpich: Debian 12's MPICH is ch4:ucx only (no ofi netmod): its cells are UCX's host registrations; GPU memory, dmabuf and the other request-shape causes are not reachable through it on this machine (below)",
    "fi_pingpong, rping x relaxed-ordering: they do not request IBV_ACCESS_RELAXED_ORDERING; with the fault injected both complete",
    "ib_write_bw x relaxed-ordering: perftest prints `Couldn't allocate MR` with no errno and no access mask, byte for byte what the memlock cell prints: no output-only diagnosis can tell them apart",
    "GPU memory, dmabuf, read-only memory, max_mr_size, access flags, unaligned iova: none of these stacks makes such registrations on the simulator (Debian's UCX, Open MPI and MPICH are built without CUDA)",
];

/// Every (stack, cause) pair; all failures are reported together.
#[test]
fn each_injected_cause_is_the_first_finding() {
    for (p, pkg) in [
        ("ucx_perftest", "ucx-utils"),
        ("mpirun", "openmpi-bin"),
        ("fi_pingpong", "libfabric-bin"),
        ("rping", "rdmacm-utils"),
        ("ib_write_bw", "perftest"),
        ("mpirun.mpich", "mpich"),
    ] {
        require(p, pkg);
    }
    let pyverbs = run(cmd("/usr/bin/python3").args(["-c", "import pyverbs.mr"]));
    assert!(pyverbs.status.success(), "pyverbs not installed (scripts/install-deps installs python3-pyverbs)");
    #[rustfmt::skip]
    let mpi = [
        Case { stack: "mpirun", cause: "relaxed-ordering", faults: RO_EINVAL, memlock_kib: None },
        Case { stack: "mpirun", cause: "relaxed-ordering", faults: RO_EFAULT, memlock_kib: None },
        Case { stack: "mpirun", cause: "memlock-limit", faults: "", memlock_kib: Some(64) },
        Case { stack: "mpirun.mpich", cause: "relaxed-ordering", faults: RO_EINVAL, memlock_kib: None },
        Case { stack: "mpirun.mpich", cause: "relaxed-ordering", faults: RO_EFAULT, memlock_kib: None },
        Case { stack: "mpirun.mpich", cause: "memlock-limit", faults: "", memlock_kib: Some(64) },
    ];
    #[rustfmt::skip]
    let rest = [
        Case { stack: "ucx_perftest", cause: "relaxed-ordering", faults: RO_EINVAL, memlock_kib: None },
        Case { stack: "ucx_perftest", cause: "relaxed-ordering", faults: RO_EFAULT, memlock_kib: None },
        Case { stack: "ucx_perftest", cause: "memlock-limit", faults: "", memlock_kib: Some(64) },
        Case { stack: "fi_pingpong", cause: "memlock-limit", faults: "", memlock_kib: Some(64) },
        Case { stack: "rping", cause: "memlock-limit", faults: "", memlock_kib: Some(0) },
        Case { stack: "ib_write_bw", cause: "memlock-limit", faults: "", memlock_kib: Some(64) },
        Case { stack: "pyverbs", cause: "relaxed-ordering", faults: RO_EINVAL, memlock_kib: None },
        Case { stack: "pyverbs", cause: "relaxed-ordering", faults: RO_EFAULT, memlock_kib: None },
        Case { stack: "pyverbs", cause: "memlock-limit", faults: "", memlock_kib: Some(64) },
    ];
    let lane = |cases: &[Case]| -> Vec<(String, Option<String>)> {
        cases
            .iter()
            .map(|c| {
                let (text, v) = run_case(c);
                let got = first(&v);
                let failed = v["summary"]["failed"].as_u64().unwrap_or(0);
                let row = format!(
                    "{:<13} {:<17} {:<20} -> {got} (basis {}, {failed} failures)",
                    c.stack,
                    c.cause,
                    if c.faults.is_empty() { "ulimit -l" } else { c.faults },
                    v["findings"][0]["basis"].as_str().unwrap_or("-")
                );
                let wrong = (got != c.cause || failed == 0).then(|| {
                    let head: String = text.lines().take(12).collect::<Vec<_>>().join("\n");
                    format!("{} x {} ({}): first finding {got}\n{head}", c.stack, c.cause, c.faults)
                });
                (row, wrong)
            })
            .collect()
    };
    let rows: Vec<(String, Option<String>)> = std::thread::scope(|s| {
        let a = s.spawn(|| lane(&mpi));
        let b = lane(&rest);
        let mut rows = a.join().expect("the MPI lane");
        rows.extend(b);
        rows
    });
    let mut table: String = rows.iter().map(|r| format!("{}\n", r.0)).collect();
    for n in NOT_HERE {
        table.push_str(&format!("not here: {n}\n"));
    }
    let wrong: Vec<&String> = rows.iter().filter_map(|r| r.1.as_ref()).collect();
    eprintln!("{table}");
    assert!(wrong.is_empty(), "{table}\n{}", wrong.iter().map(|w| w.as_str()).collect::<Vec<_>>().join("\n\n"));
}
