//! Memory registration on the simulated device: each kernel rule with its exact errno, and the
//! device-side fault injection (MRSHIM_SIM_FAULTS).
mod common;
use common::*;

/// Runs `simcheck reg SCENARIO` and returns its "name result" lines as pairs.
fn reg(sim: &Sim, scenario: &str) -> Vec<(String, String)> {
    let prog = c_program("simcheck", &["-libverbs"]);
    let out = sim.cmd(&prog).args(["reg", scenario]).env("LIBRARY_PATH", lib_dir()).output().unwrap();
    assert!(out.status.success(), "simcheck reg {scenario}: {}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect()
}

fn expect(got: &[(String, String)], want: &[(&str, &str)]) {
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, want);
}

#[test]
fn kernel_rules_give_the_kernels_errno() {
    let sim = Sim::new();
    for (scenario, want) in [
        ("ok", "ok"),
        ("len0", "errno=22"),
        ("remote_write_without_local_write", "errno=22"),
        ("remote_atomic_without_local_write", "errno=22"),
        ("remote_read_only", "ok"),
        ("unknown_mandatory_bit", "errno=22"),
        ("relaxed_ordering", "ok"),
        ("unknown_optional_bit", "ok"),
        ("iova_page_offset_differs", "errno=22"),
        ("iova_same_page_offset", "ok"),
        ("iova_legacy_entry", "errno=22"),
        ("odp", "errno=95"),
        ("unmapped", "errno=14"),
        ("prot_none", "ok"), // a read-only pin of PROT_NONE memory: the kernel pins it (rxe)
        ("runs_into_unmapped", "errno=14"),
    ] {
        expect(&reg(&sim, scenario), &[(scenario, want)]);
    }
    expect(
        &reg(&sim, "readonly_with_write"),
        &[("readonly_with_write", "errno=14"), ("readonly_read_only_access", "ok")],
    );
}

/// ibv_rereg_mr: libibverbs' input checks (IBV_REREG_MR_ERR_INPUT, EINVAL; a dmabuf MR too),
/// then the command: access and PD changed in place, a new translation with new keys, a failed
/// one (unmapped memory: IBV_REREG_MR_ERR_CMD, EFAULT) leaving the MR as it was; with the
/// `rereg_mr` fault a provider without the command.
#[test]
fn rereg_checks_input_then_carries_the_command_out() {
    let prog = c_program("simcheck", &["-libverbs"]);
    let run = |sim: Sim| {
        let out = sim.cmd(&prog).args(["reg", "rereg"]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(
        run(Sim::new()),
        "rereg_unknown_flag ret=-1 errno=22\n\
         rereg_access_without_flag ret=-1 errno=22\n\
         rereg_translation_without_length ret=-1 errno=22\n\
         rereg_access ret=0 errno=0\n\
         rereg_bad_access ret=-4 errno=22\n\
         rereg_pd ret=0 errno=0\n\
         rereg_pd_is_new 1\n\
         rereg_translation ret=0 errno=0\n\
         rereg_translation_moved 1 new_keys 1\n\
         rereg_translation_unmapped ret=-4 errno=14\n\
         rereg_unmapped_kept 1\n\
         rereg_dmabuf ret=-1 errno=22\n"
    );
    let without = run(Sim::new().with("MRSHIM_SIM_FAULTS", "rereg_mr:EOPNOTSUPP"));
    assert!(without.contains("rereg_access ret=-4 errno=95\nrereg_bad_access ret=-4 errno=95\nrereg_pd ret=-4 errno=95\nrereg_pd_is_new 0\n"), "{without}");
}

#[test]
fn dmabuf_registration() {
    let want = [
        ("dmabuf_fd_minus_one", "errno=9"),
        ("dmabuf_not_a_dmabuf", "errno=22"),
        ("dmabuf_ok", "ok"),
        ("dmabuf_beyond_end", "errno=22"),
        ("dmabuf_offset_mismatch", "errno=22"),
    ];
    expect(&reg(&Sim::new(), "dmabuf"), &want);
    // Without dmabuf support every call, the fd -1 probe included, says EOPNOTSUPP.
    let off = reg(&Sim::new().with("MRSHIM_SIM_DMABUF", "off"), "dmabuf");
    assert!(off.iter().all(|(_, r)| r == "errno=95"), "{off:?}");
}

#[test]
fn device_memory_needs_peer_memory() {
    let want_fail = [("device_memory", "errno=22"), ("device_memory_iova2", "errno=22")];
    expect(&reg(&Sim::new(), "device_memory"), &want_fail);
    expect(
        &reg(&Sim::new().with("MRSHIM_SIM_PEER_MEMORY", "on"), "device_memory"),
        &[("device_memory", "ok"), ("device_memory_iova2", "ok")],
    );
    let efault = reg(&Sim::new().with("MRSHIM_SIM_DEVICE_MEM_ERRNO", "EFAULT"), "device_memory");
    expect(&efault, &[("device_memory", "errno=14"), ("device_memory_iova2", "errno=14")]);
}

#[test]
fn memlock_limit_counts_pinned_pages_without_cap_ipc_lock() {
    let enforced = Sim::new().with("MRSHIM_SIM_MEMLOCK", "enforce");
    expect(
        &reg(&enforced, "memlock"),
        &[("memlock_first_32k", "ok"), ("memlock_over_limit", "errno=12"), ("memlock_after_dereg", "ok")],
    );
    expect(&reg(&enforced, "memlock_zero"), &[("memlock_zero", "errno=1")]);
    // Tests run as root: with CAP_IPC_LOCK the kernel ignores the limit, so does the simulator.
    let root = reg(&Sim::new().with("MRSHIM_SIM_MEMLOCK", "off"), "memlock");
    assert!(root.iter().all(|(_, r)| r == "ok"), "{root:?}");
}

#[test]
fn fault_injection_every_nth_and_predicates() {
    let all_ok =
        ["repeat_1", "repeat_2", "repeat_3", "repeat_4", "repeat_relaxed", "repeat_relaxed_reg_mr", "repeat_big"];
    let got = reg(&Sim::new(), "repeat");
    assert!(got.iter().zip(all_ok).all(|((n, r), w)| n == w && r == "ok"), "{got:?}");

    let nth = reg(&Sim::new().with("MRSHIM_SIM_FAULTS", "reg:ENOMEM:nth=2"), "repeat");
    let errs: Vec<&str> = nth.iter().filter(|(_, r)| r != "ok").map(|(n, _)| n.as_str()).collect();
    assert_eq!(errs, ["repeat_2"], "{nth:?}");
    assert_eq!(nth[1].1, "errno=12");

    let every = reg(&Sim::new().with("MRSHIM_SIM_FAULTS", "reg_mr:EPERM"), "repeat");
    let errs: Vec<&str> = every.iter().filter(|(_, r)| r == "errno=1").map(|(n, _)| n.as_str()).collect();
    // verbs.h turns ibv_reg_mr(..., constant with RELAXED_ORDERING) into ibv_reg_mr_iova2, so
    // repeat_relaxed_reg_mr never reaches the ibv_reg_mr entry point.
    assert_eq!(
        errs,
        ["repeat_1", "repeat_2", "repeat_3", "repeat_4", "repeat_big"],
        "only ibv_reg_mr entries: {every:?}"
    );

    // The seed incident: ibv_reg_mr_iova2 with relaxed ordering fails, nothing else does.
    let seed = reg(&Sim::new().with("MRSHIM_SIM_FAULTS", "reg_mr_iova2:EINVAL:relaxed"), "repeat");
    let errs: Vec<&str> = seed.iter().filter(|(_, r)| r != "ok").map(|(n, _)| n.as_str()).collect();
    assert_eq!(errs, ["repeat_relaxed", "repeat_relaxed_reg_mr"], "{seed:?}");

    let big = reg(&Sim::new().with("MRSHIM_SIM_FAULTS", "reg:EFAULT:min_len=12K"), "repeat");
    let errs: Vec<&str> = big.iter().filter(|(_, r)| r == "errno=14").map(|(n, _)| n.as_str()).collect();
    assert_eq!(errs, ["repeat_3", "repeat_4", "repeat_big"], "{big:?}");

    let dev = reg(
        &Sim::new().with("MRSHIM_SIM_PEER_MEMORY", "on").with("MRSHIM_SIM_FAULTS", "reg:EIO:device"),
        "device_memory",
    );
    expect(&dev, &[("device_memory", "errno=5"), ("device_memory_iova2", "errno=5")]);
    assert!(reg(&Sim::new().with("MRSHIM_SIM_FAULTS", "reg:EIO:device"), "ok")[0].1 == "ok");
}

#[test]
fn simulator_log_records_every_registration() {
    let sim = Sim::new();
    let log = sim.rundir.path().join("sim.jsonl");
    let sim = sim.with("MRSHIM_SIM_LOG", log.to_str().unwrap()).with("MRSHIM_SIM_FAULTS", "reg:ENOMEM:nth=2");
    reg(&sim, "repeat");
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(String::from).collect();
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert!(
        lines[0].contains("\"entry\":\"ibv_reg_mr\"")
            && lines[0].contains("\"length\":4096")
            && lines[0].contains("\"result\":\"ok\""),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("\"errno\":12"), "{}", lines[1]);
    assert!(
        lines[4].contains("\"entry\":\"ibv_reg_mr_iova2\"") && lines[4].contains("\"access\":1048591"),
        "{}",
        lines[4]
    );
}
