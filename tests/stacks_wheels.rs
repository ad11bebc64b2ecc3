//! Python-wheel clients on the simulated NIC under plain `mrshim sim -- CMD`, installed by
//! scripts/install-deps from PyPI into a venv of their own (`$MRSHIM_TOOLS/pyclients`):
//! - the UCX 1.23 (with verbs) that NIXL's wheel vendors, with the wheel's own libibverbs renamed
//!   by auditwheel (`libibverbs-<hash>.so.1`, found through RPATH `$ORIGIN`): UCX >= 1.23 takes
//!   a RoCE port only when it finds the port's network interface (docs/sim.md), so this needs
//!   both the redirection of a vendored libibverbs and the default network namespace;
//! - mpi4py's binary wheel on Debian's Open MPI (pml ucx, osc ucx): every byte of send/recv,
//!   an allreduce and MPI_Put/MPI_Get checked, plain and with the shim rescuing every
//!   registration the device refuses;
//! - Mooncake's Transfer Engine (the non-CUDA wheel, which links the system's libibverbs): a
//!   passive KV-cache target and an initiator that READs and WRITEs it (tests/py/mooncake_kv.py),
//!   byte-exact, and with the device refusing relaxed ordering under the shim: never stale bytes.

mod shim_util;
use shim_util::*;
use std::path::PathBuf;

/// The venv scripts/install-deps makes (scripts/lib/tools.sh: MRSHIM_PYCLIENTS).
fn pyclients() -> PathBuf {
    let d = tools_dir().join("pyclients");
    assert!(
        d.join("bin/python3").exists(),
        "{} missing: scripts/install-deps installs the Python-wheel clients",
        d.display()
    );
    d
}

fn site_packages() -> PathBuf {
    let lib = pyclients().join("lib");
    let py = files(&lib).into_iter().find(|p| p.file_name().unwrap().to_string_lossy().starts_with("python3"));
    py.expect("lib/python3.*").join("site-packages")
}

fn script(name: &str) -> String {
    format!("{}/tests/py/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// UCX 1.23 from NIXL's wheel, loaded from Python with ctypes: an endpoint over rc_verbs on
/// mlx5_0:1 (RoCE) and a 1 MiB PUT and GET, byte-exact — under plain `mrshim sim`, then with
/// the shim (its records equal what the device saw) and with MRSHIM_RETRY=auto. With
/// `--no-netns` the same endpoint fails as UCX fails on a host where the port has no netdev.
#[test]
fn ucx_1_23_from_the_nixl_wheel_puts_and_gets_over_roce_under_plain_mrshim_sim() {
    let libs = site_packages().join("nixl_cu12.libs");
    let vendored =
        files(&libs).into_iter().filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("libibverbs-"));
    assert_eq!(vendored.count(), 1, "NIXL's wheel vendors a renamed libibverbs in {}", libs.display());
    let libs = libs.to_str().unwrap();
    let ucx = ["UCX_TLS=rc_verbs,ud_verbs", "UCX_NET_DEVICES=mlx5_0:1"];
    for mode in MODES {
        let w = SimWorld::new(&format!("wheel-ucx-{mode:?}"));
        let mut c = stack_cmd(&w, mode, 0, "/usr/bin/python3", &[&script("ucp_put_check.py"), libs]);
        // `env` (stack_cmd's program) takes these before the command.
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let at = args.iter().position(|a| a == "/usr/bin/python3").unwrap();
        let mut c2 = cmd("timeout");
        c2.args(&args[..at]).args(ucx).args(&args[at..]).envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))));
        c = c2;
        let o = run(&mut c);
        let who = format!("ucx 1.23 {mode:?}");
        assert!(o.status.success(), "{who}: {}\n{}", stdout(&o), stderr(&o));
        // UCX logs to stdout. The one error it logs here: no NETLINK_RDMA socket (the kernel has
        // no InfiniBand), which UCX gets past.
        let out = stdout(&o);
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| {
                !(l.contains("UCX  ERROR socket create failed: Protocol not supported")
                    || l.contains("UCX  ERROR failed to create netlink socket"))
            })
            .collect();
        assert_eq!(
            lines,
            ["ucx 1.23", "endpoint connected", "put byte-exact", "get byte-exact"],
            "{who}: {out}\n{}",
            stderr(&o)
        );
        assert_stack_records(&w, mode, 1, &who);
    }
    // The interface lookup UCX >= 1.23 does, without the namespace: it is what fails.
    let w = SimWorld::new("wheel-ucx-no-netns");
    let mut c = cmd("timeout");
    c.args(["-k", "5", "60"]).arg(mrshim_bin()).args(["sim", "--no-netns", "--", "env"]).args(ucx);
    c.args(["/usr/bin/python3", &script("ucp_put_check.py"), libs]).env("MRSHIM_SIM_RUNDIR", w.dir.join("run"));
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(3), "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("failed to get interface index for mrsim0"), "{}", stdout(&o));
}

/// `mrshim sim -- mpirun -np 2 ... python3 mpi4py_datacheck.py` with pml ucx / osc ucx.
fn mpi4py(w: &SimWorld, env: &[String]) -> std::process::Output {
    let session = ompi_session_dir(w);
    let mut args: Vec<String> =
        ["--mca", "orte_tmpdir_base", &session, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
            .map(String::from)
            .to_vec();
    for a in ["--mca", "pml", "ucx", "--mca", "osc", "ucx", "--mca", "btl", "^openib"] {
        args.push(a.into());
    }
    for e in ["UCX_TLS=rc".to_string(), "MRSHIM_SIM_RUNDIR".into()].iter().chain(env) {
        args.extend(["-x".into(), e.clone()]);
    }
    args.push(pyclients().join("bin/python3").to_string_lossy().into_owned());
    args.extend([script("mpi4py_datacheck.py"), "--max-size".into(), "4194304".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&mut stack_cmd_within(w, Mode::Plain, 0, "mpirun", &args, 300))
}

/// The shim in every rank (one log each, the device's log of the job), the device refusing what
/// `faults` say and the shim rescuing it through bounce buffers (MPI over UCX announces every
/// peer access: MRSHIM_BOUNCE_REMOTE=announced).
fn bounce_env(w: &SimWorld, faults: &str) -> [String; 6] {
    [
        format!("LD_PRELOAD={}", shim_lib().display()),
        format!("MRSHIM_LOG={}/", w.dir.join("logs").display()),
        format!("MRSHIM_SIM_LOG={}", w.dir.join("sim.jsonl").display()),
        "MRSHIM_RETRY=bounce".into(),
        "MRSHIM_BOUNCE_REMOTE=announced".into(),
        format!("MRSHIM_SIM_FAULTS={faults}"),
    ]
}

fn assert_ranks_ok(o: &std::process::Output, who: &str) {
    assert!(o.status.success(), "{who}: {}\n{}", stdout(o), stderr(o));
    let out = stdout(o);
    for r in 0..2 {
        for line in [
            format!("mpi4py_datacheck: rank {r} send/recv 14 messages up to 4194304 bytes ok\n"),
            format!("mpi4py_datacheck: rank {r} ok\n"),
        ] {
            assert!(out.contains(&line), "{who}: {line:?} missing:\n{out}\n{}", stderr(o));
        }
    }
}

/// mpi4py's wheel on Open MPI over the simulated NIC: plain, then with the shim in both ranks
/// and the device refusing every registration UCX makes, which the shim rescues through host
/// bounce buffers (MPI over UCX announces every peer access: MRSHIM_BOUNCE_REMOTE=announced);
/// every byte is checked by the ranks, every registration the device saw has its record.
#[test]
fn mpi4py_wheel_on_open_mpi_pml_ucx_byte_exact_plain_and_rescued_by_the_shim() {
    let w = SimWorld::new("wheel-mpi4py");
    assert_ranks_ok(&mpi4py(&w, &[]), "mpi4py plain");
    let w = SimWorld::new("wheel-mpi4py-rescued");
    let env = bounce_env(&w, refuse_every_ucx_registration());
    let o = mpi4py(&w, &env);
    assert_ranks_ok(&o, "mpi4py rescued");
    let dev = sim_log(&w.dir.join("sim.jsonl"));
    let logs = files(&w.dir.join("logs"));
    assert_eq!(logs.len(), 2, "one log per rank: {logs:?}");
    let mut rescued = 0;
    for f in &logs {
        let recs = records(f);
        let pid = recs[0].pid;
        let mine: Vec<serde_json::Value> =
            dev.iter().filter(|d| d["pid"].as_u64() == Some(pid as u64)).cloned().collect();
        assert_records_match_device(&recs, &mine, &format!("mpi4py rescued {}", f.display()));
        rescued += recs.iter().filter(|r| r.strategy.as_deref() == Some("bounce") && r.result == "ok").count();
    }
    assert!(rescued > 0, "no registration was rescued through bounce");
    // The device did refuse: a rescue, not a pass-through.
    assert!(dev.iter().any(|d| d["errno"].as_i64() == Some(libc::EFAULT as i64)), "the device refused nothing");
}

/// Sticky learning on a job where only some registrations fail (docs/retry.md): the device
/// refuses only the registrations of 1 MiB and more that UCX makes (with relaxed ordering, or
/// remote atomics in the flipped pass), the shim rescues them through bounce buffers, and the
/// registrations the device accepts are not bounced: every bounced registration was refused by
/// the device first, or lies inside memory already bounced (which must share that shadow,
/// docs/bounce.md). Learning keyed by memory kind and entry point alone bounced every later
/// registration: 47 per rank in the job. The figures are printed for docs/perf.md.
#[test]
fn mpi4py_job_where_only_large_registrations_fail_bounces_only_those() {
    let w = SimWorld::new("wheel-mpi4py-some");
    let env = bounce_env(&w, &format!("{},min_len=1M", refuse_every_ucx_registration()));
    let o = mpi4py(&w, &env);
    assert_ranks_ok(&o, "only large registrations fail");
    let logs = files(&w.dir.join("logs"));
    assert_eq!(logs.len(), 2, "one log per rank: {logs:?}");
    for f in &logs {
        let recs: Vec<_> = records(f).into_iter().filter(|r| r.kind == Some(mrshim_record::Kind::Reg)).collect();
        let span = |r: &mrshim_record::Reg| {
            let a = u64::from_str_radix(r.addr.as_deref().unwrap_or("0x0").trim_start_matches("0x"), 16).unwrap();
            (a, a + r.length.unwrap_or(0))
        };
        let (mut refused, mut accepted, mut rescued, mut inside, mut learned) = (0, 0, 0, 0, 0);
        let mut bounced: Vec<(u64, u64)> = vec![];
        for r in &recs {
            let is_bounce = r.strategy.as_deref() == Some("bounce") && r.result == "ok";
            learned += r.learned as usize;
            match (r.parent_seq, r.result.as_str()) {
                (None, "error") => refused += 1,
                (None, "ok") if r.strategy.is_none() => accepted += 1,
                // The app's own call went through an existing shadow: only memory inside it.
                (None, "ok") if is_bounce => {
                    let (a, e) = span(r);
                    assert!(
                        bounced.iter().any(|&(ba, be)| ba <= a && e <= be),
                        "{}: seq {} bounced without a refusal and outside every bounced region",
                        f.display(),
                        r.seq
                    );
                    inside += 1;
                }
                (Some(p), "ok") if is_bounce => {
                    let app = recs.iter().find(|a| a.seq == p).unwrap();
                    assert_eq!(app.result, "error", "{}: seq {} bounced what the device accepted", f.display(), r.seq);
                    bounced.push(span(app));
                    rescued += 1;
                }
                _ => {}
            }
        }
        println!(
            "{}: {} registrations: {accepted} accepted as asked, {refused} refused by the device and {rescued} of \
             them bounced, {inside} inside memory already bounced, {learned} with the learned strategy first",
            f.file_name().unwrap().to_string_lossy(),
            recs.iter().filter(|r| r.parent_seq.is_none()).count()
        );
        assert!(refused > 0 && accepted > 0, "{}: {refused} refused, {accepted} accepted", f.display());
        assert_eq!(rescued, refused, "{}: every refusal rescued once", f.display());
    }
}

/// tests/py/mooncake_kv.py's target and initiator under `mrshim sim` (their stderr: the engine's
/// glog lines and the client's own), with `env` before both. Relaxed ordering is asked for
/// (Mooncake's MC_IB_PCI_RELAXED_ORDERING=1, its default): the faults below refuse exactly it.
fn mooncake_kv(w: &SimWorld, env: &[String]) -> (String, String) {
    std::fs::create_dir_all(w.dir.join("kv")).unwrap();
    std::fs::create_dir_all(w.dir.join("logs")).unwrap();
    let (py, kv) = (pyclients().join("bin/python3"), script("mooncake_kv.py"));
    let (py, kv, size) = (py.display(), kv.as_str(), 16 << 20);
    let job = format!(
        "timeout 60 {py} {kv} target kv {size} 2>target.err & timeout 60 {py} {kv} initiator kv {size} \
         2>initiator.err; echo initiator $?; wait $!; echo target $?"
    );
    let mut c = cmd("timeout");
    c.args(["-k", "5", "150"]).arg(mrshim_bin()).args(["sim", "--", "env", "MC_IB_PCI_RELAXED_ORDERING=1"]);
    c.args(env).args(["bash", "-c", &job]).current_dir(&w.dir).env("MRSHIM_SIM_RUNDIR", w.dir.join("run"));
    c.env_remove("LD_PRELOAD").env_remove("MRSHIM_LOG");
    let o = run(&mut c);
    let err = |f: &str| std::fs::read_to_string(w.dir.join(f)).unwrap_or_default();
    (stdout(&o), format!("{}{}{}", stderr(&o), err("target.err"), err("initiator.err")))
}

fn shim_env(w: &SimWorld, retry: &str) -> Vec<String> {
    vec![
        format!("LD_PRELOAD={}", shim_lib().display()),
        format!("MRSHIM_LOG={}/", w.dir.join("logs").display()),
        "MRSHIM_SIM_FAULTS=reg:EINVAL:relaxed".into(),
        format!("MRSHIM_RETRY={retry}"),
    ]
}

/// The passive one-sided pattern (issue 28) with a real client: Mooncake's target registers its
/// buffer and never posts or polls; the initiator READs it (generation 1), WRITEs generation 2
/// (which the target checks), and READs it again after the target refilled it (generation 3).
/// Plain: byte-exact. With the device refusing relaxed ordering under the shim:
/// `MRSHIM_RETRY=auto` drops relaxed ordering (the device accepts that) and stays byte-exact;
/// `MRSHIM_RETRY=bounce` must not bounce the target's remotely accessible buffer (no completion
/// announces the peer's accesses), so both registrations fail with the device's EINVAL and the
/// engine reports it — never a "rescue" that serves stale bytes.
#[test]
fn mooncake_kv_transfer_byte_exact_and_never_stale_under_the_shim() {
    let w = SimWorld::new("wheel-mooncake");
    let (out, err) = mooncake_kv(&w, &[]);
    assert_eq!(out, "initiator 0\ntarget 0\n", "plain: {err}");
    assert!(err.contains("target: ok") && err.contains("initiator: ok"), "plain: {err}");
    assert!(err.contains("IBV_ACCESS_RELAXED_ORDERING will be requested"), "Mooncake asks for relaxed ordering: {err}");

    let w = SimWorld::new("wheel-mooncake-auto");
    let (out, err) = mooncake_kv(&w, &shim_env(&w, "auto"));
    assert_eq!(out, "initiator 0\ntarget 0\n", "auto: {err}");
    assert!(err.contains("target: ok") && err.contains("initiator: ok"), "auto: {err}");
    assert_eq!(err.matches("rescued by drop-relaxed-ordering").count(), 2, "auto: {err}");

    let w = SimWorld::new("wheel-mooncake-bounce");
    let (out, err) = mooncake_kv(&w, &shim_env(&w, "bounce"));
    assert_eq!(out, "initiator 2\ntarget 2\n", "bounce: {err}");
    assert!(!err.contains(": stale") && !err.contains("rescued by bounce"), "bounce: {err}");
    assert_eq!(err.matches("not bounced, outside the bounce contract").count(), 2, "bounce: {err}");
    assert_eq!(err.matches("Failed to register memory 0x").count(), 2, "bounce: {err}");
    assert_eq!(err.matches(": Invalid argument [22]").count(), 2, "the device's own errno: {err}");
}
