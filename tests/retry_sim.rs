//! Retry policies and shim-side fault injection (issue 6) on the simulated device.
mod shim_util;
use shim_util::*;
use std::path::PathBuf;

/// sim/tests/c programs, compiled once per test binary.
fn sim_c(name: &str, libs: &[&str]) -> PathBuf {
    static M: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut m = M.lock().unwrap();
    if let Some((_, p)) = m.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let out = tmp(&format!("c-{name}")).join(name);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sim/tests/c").join(format!("{name}.c"));
    let lib = format!("-L{}", sim_lib_dir().display());
    let st = std::process::Command::new("cc").args(["-O1", "-o"]).arg(&out).arg(&src).arg(&lib).args(libs).status().unwrap();
    assert!(st.success());
    m.push((name.into(), out.clone()));
    out
}

fn all_records(dir: &std::path::Path) -> Vec<mrshim_record::Reg> {
    files(dir).iter().flat_map(|f| records(f)).collect()
}

const SEED: &str = "reg_mr_iova2:EINVAL:relaxed";

#[test]
fn seed_incident_rescued_by_dropping_relaxed_ordering() {
    let w = SimWorld::new("seed-rescue").with("MRSHIM_SIM_FAULTS", SEED).with("MRSHIM_RETRY", "auto");
    let logs = w.dir.join("logs/");
    let o = run(w.cmd(sim_c("nccl_style", &["-ldl"])).args(["--relaxed", "--size", "300000"]).env("MRSHIM_LOG", &logs));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).matches(": verified").count(), 2, "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("MRSHIM WARN ibv_reg_mr_iova2(") && err.contains("RELAXED_ORDERING") && err.contains("failed: EINVAL (22)"), "{err}");
    assert!(err.contains("rescued by drop-relaxed-ordering") && err.contains("NCCL_IB_PCI_RELAXED_ORDERING=0"), "{err}");
    let recs = all_records(&logs);
    let failed: Vec<_> = recs.iter().filter(|r| r.call == "ibv_reg_mr_iova2" && r.result == "error" && r.attempt == 0).collect();
    assert_eq!(failed.len(), 2, "one failed application call per rank");
    for f in failed {
        assert!(f.relaxed_ordering && f.errno == Some(22));
        let rescue = recs.iter().find(|r| r.parent_seq == Some(f.seq) && r.pid == f.pid && r.attempt == 1).expect("attempt record");
        assert_eq!(rescue.strategy.as_deref(), Some("drop-relaxed-ordering"));
        assert_eq!((rescue.result.as_str(), rescue.access, rescue.relaxed_ordering), ("ok", Some(0xf), false));
        assert!(rescue.change.as_deref().unwrap().contains("0x10000f -> 0xf"));
    }
    assert!(recs.iter().any(|r| r.kind == Some(mrshim_record::Kind::Policy) && r.strategy.as_deref() == Some("drop-relaxed-ordering")));
}

#[test]
fn with_retries_off_it_fails_exactly_as_without_the_shim() {
    let prog = sim_c("nccl_style", &["-ldl"]);
    let w = SimWorld::new("seed-off").with("MRSHIM_SIM_FAULTS", SEED);
    let with = run(w.cmd(&prog).arg("--relaxed"));
    let without = run(w.cmd(&prog).arg("--relaxed").env_remove("LD_PRELOAD"));
    assert_eq!(with.status.code(), Some(1));
    assert_eq!(with.status.code(), without.status.code());
    let nccl = |o: &std::process::Output| {
        let mut l: Vec<String> = stderr(o).lines().filter(|l| l.contains("NCCL WARN")).map(String::from).collect();
        l.sort();
        l
    };
    assert_eq!(nccl(&with), nccl(&without));
    assert!(nccl(&with)[0].ends_with("NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument"));
}

#[test]
fn memlock_enomem_rescued_by_raising_the_soft_limit() {
    let w = SimWorld::new("memlock").with("MRSHIM_SIM_MEMLOCK", "enforce").with("MRSHIM_RETRY", "raise-memlock");
    let logs = w.dir.join("logs/");
    let prog = sim_c("nccl_style", &["-ldl"]);
    let script = format!("ulimit -S -l 64 && exec {} --size 200000", prog.display());
    let o = run(w.cmd("sh").args(["-c", &script]).env("MRSHIM_LOG", &logs));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let recs = all_records(&logs);
    let orig = recs.iter().find(|r| r.errno == Some(libc::ENOMEM) && r.attempt == 0).expect("the ENOMEM");
    assert_eq!(orig.memlock_soft, Some(64 * 1024));
    let a = recs.iter().find(|r| r.parent_seq == Some(orig.seq) && r.pid == orig.pid && r.attempt == 1).unwrap();
    assert_eq!((a.strategy.as_deref(), a.result.as_str()), (Some("raise-memlock"), "ok"));
    assert!(a.change.as_deref().unwrap().contains("soft 65536 -> ") && a.change.as_deref().unwrap().ends_with("(the hard limit)"), "{:?}", a.change);
}

#[test]
fn mismatched_page_offsets_are_refused_with_the_reason() {
    let w = SimWorld::new("iova").with("MRSHIM_RETRY", "auto");
    let logs = w.dir.join("logs/");
    let o = run(w.cmd(sim_c("simcheck", &["-libverbs"])).args(["reg", "iova_page_offset_differs"]).env("MRSHIM_LOG", &logs));
    assert_eq!(stdout(&o), "iova_page_offset_differs errno=22\n", "the caller still gets the original errno");
    let recs = all_records(&logs);
    let r = recs.iter().find(|r| r.strategy.as_deref() == Some("realign-iova")).expect("refusal record");
    assert_eq!(r.result, "refused");
    assert!(r.change.as_deref().unwrap().contains("remote peers"), "{:?}", r.change);
}

#[test]
fn dmabuf_failure_rescued_through_the_va_path() {
    let w = SimWorld::new("dmabuf-va").with("MRSHIM_SIM_DMABUF", "off").with("MRSHIM_RETRY", "dmabuf-to-va");
    let logs = w.dir.join("logs/");
    let o = run(w.cmd(sim_c("simcheck", &["-libverbs"])).args(["reg", "dmabuf_va"]).env("MRSHIM_LOG", &logs));
    // The caller sees a dmabuf MR: addr is the dmabuf offset, as rdma-core sets it.
    assert_eq!(stdout(&o), "dmabuf_va ok addr=0 length=65536\n", "{}", stderr(&o));
    let recs = all_records(&logs);
    assert!(recs.iter().any(|r| r.call == "ibv_reg_dmabuf_mr" && r.errno == Some(libc::EOPNOTSUPP)));
    assert!(recs.iter().any(|r| r.call == "ibv_reg_mr_iova2" && r.strategy.as_deref() == Some("dmabuf-to-va") && r.result == "ok"));
    assert!(recs.iter().any(|r| r.call == "ibv_dereg_mr" && r.result == "ok"), "dereg of the patched MR works");
}

#[test]
fn sticky_mode_costs_one_failed_attempt_for_a_thousand_registrations() {
    let w = SimWorld::new("sticky").with("MRSHIM_SIM_FAULTS", SEED).with("MRSHIM_RETRY", "auto");
    let logs = w.dir.join("logs/");
    let o = run(w.cmd(sim_c("simcheck", &["-libverbs"])).args(["reg", "many_relaxed"]).env("MRSHIM_LOG", &logs));
    assert_eq!(stdout(&o), "many_relaxed failures=0\n", "{}", stderr(&o));
    let recs = all_records(&logs);
    let regs: Vec<_> = recs.iter().filter(|r| r.call == "ibv_reg_mr_iova2").collect();
    assert_eq!(regs.iter().filter(|r| r.result == "error").count(), 1);
    assert_eq!(regs.iter().filter(|r| r.learned).count(), 999);
    let s = recs.iter().find_map(|r| r.summary.clone()).expect("summary record");
    assert_eq!(s.rescued.get("drop-relaxed-ordering"), Some(&1000));
    // Without sticky every registration fails first.
    let w = SimWorld::new("nosticky").with("MRSHIM_SIM_FAULTS", SEED).with("MRSHIM_RETRY", "auto;sticky=off");
    let logs = w.dir.join("logs/");
    run(w.cmd(sim_c("simcheck", &["-libverbs"])).args(["reg", "many_relaxed"]).env("MRSHIM_LOG", &logs));
    let errors = all_records(&logs).iter().filter(|r| r.call == "ibv_reg_mr_iova2" && r.result == "error").count();
    assert_eq!(errors, 1000);
}

#[test]
fn shim_injection_on_a_healthy_device_is_marked_injected() {
    let w = SimWorld::new("inject").with("MRSHIM_INJECT", "reg:ENOMEM:nth=2");
    let logs = w.dir.join("logs/");
    let o = run(w.cmd(sim_c("simcheck", &["-libverbs"])).args(["reg", "repeat"]).env("MRSHIM_LOG", &logs));
    let s = stdout(&o);
    let lines: Vec<&str> = s.lines().collect();
    assert!(lines[1] == "repeat_2 errno=12" && lines[0] == "repeat_1 ok" && lines[2] == "repeat_3 ok", "{s}");
    let recs = all_records(&logs);
    let inj: Vec<_> = recs.iter().filter(|r| r.injected).collect();
    assert_eq!(inj.len(), 1);
    assert_eq!(inj[0].errno, Some(libc::ENOMEM));
    // Rehearsing the seed on a healthy device: injected, then rescued.
    let w = SimWorld::new("inject-seed").with("MRSHIM_INJECT", "ibv_reg_mr_iova2:EINVAL:relaxed").with("MRSHIM_RETRY", "auto");
    let o = run(w.cmd(sim_c("nccl_style", &["-ldl"])).arg("--relaxed"));
    assert!(o.status.success() && stderr(&o).contains("rescued by drop-relaxed-ordering"), "{}", stderr(&o));
}

#[test]
fn bad_retry_and_inject_values_name_the_variable_and_pass_through() {
    for (var, val, accepted) in [("MRSHIM_RETRY", "sometimes", "drop-relaxed-ordering"), ("MRSHIM_INJECT", "reg:EWHAT", "CALL:ERRNO")] {
        let w = SimWorld::new(&format!("bad-{var}")).with(var, val).with("MRSHIM_SIM_FAULTS", SEED);
        let o = run(w.cmd(sim_c("nccl_style", &["-ldl"])).arg("--relaxed"));
        let err = stderr(&o);
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("mrshim:")).collect();
        assert_eq!(ours.len(), 2, "one line per process: {}", stderr(&o));
        assert!(ours[0].contains(&format!("{var}=\"{val}\"")) && ours[0].contains(accepted), "{}", ours[0]);
        assert_eq!(o.status.code(), Some(1), "passes through: the seed failure stands");
    }
}
