//! `ibv_rereg_mr` under the shim, on the simulator (tests/c/rereg.c): a plain MR follows its new
//! translation in the records and the data goes there; a bounce region's rereg is refused with
//! rdma-core's answer for a provider without rereg, and the program's dereg+reg fallback works.
mod shim_util;
use mrshim_record::{Kind, Reg};
use shim_util::*;
use std::path::PathBuf;

fn prog() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let out = tmp("c-rereg").join("rereg");
        let lib = format!("-L{}", sim_lib_dir().display());
        cc(&["-O1", "-o", out.to_str().unwrap(), src_c("rereg.c").to_str().unwrap(), &lib, "-libverbs"]);
        out
    })
    .clone()
}

/// Runs `rereg MODE` in `w` with a log directory (`w.dir`/logs); (stdout, stderr, records).
fn run_logged(w: SimWorld, mode: &str) -> (String, String, Vec<Reg>) {
    let logs = w.dir.join("logs");
    let o = run(w.with("MRSHIM_LOG", format!("{}/", logs.display())).cmd(prog()).arg(mode));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    (out, err, records(&only_file(&logs)))
}

/// The two buffers the program printed: `old ADDR new ADDR`.
fn addrs(out: &str) -> (String, String) {
    let l = out.lines().find(|l| l.starts_with("old 0x")).unwrap_or_else(|| panic!("{out}"));
    let v: Vec<&str> = l.split_whitespace().collect();
    (v[1].to_string(), v[3].to_string())
}

fn of_kind(recs: &[Reg], k: Kind) -> Vec<&Reg> {
    recs.iter().filter(|r| r.kind == Some(k)).collect()
}

#[test]
fn a_plain_mr_rereged_to_a_new_address_is_recorded_old_to_new_and_its_data_lands_there() {
    let (out, err, recs) = run_logged(SimWorld::new("rereg-plain"), "plain");
    assert!(out.contains("bad input ret -1 errno 22\nrereg ret 0 errno 0\n"), "{out}\n{err}");
    assert!(out.contains("data equal\nold untouched\n"), "the NIC writes the new buffer, not the old: {out}");
    let (old, new) = addrs(&out);
    let rr = of_kind(&recs, Kind::Rereg);
    assert_eq!(rr.len(), 2, "{rr:?}");
    assert_eq!((rr[0].result.as_str(), rr[0].rereg_ret, rr[0].errno), ("error", Some(-1), Some(22)));
    assert_eq!(rr[0].registered_bytes_after, Some(rr[0].registered_bytes), "ERR_INPUT changes nothing");
    let r = rr[1];
    assert_eq!(
        (r.call.as_str(), r.result.as_str(), r.rereg_ret, r.rereg_flags),
        ("ibv_rereg_mr", "ok", Some(0), Some(1))
    );
    assert_eq!((r.addr.as_deref(), r.length), (Some(old.as_str()), Some(65536)), "the MR before");
    assert_eq!(
        (r.new_addr.as_deref(), r.new_length, r.new_access, r.new_pd.as_ref()),
        (Some(new.as_str()), Some(131072), None, None)
    );
    assert_eq!(r.access, Some(3), "as registered");
    let reg = recs.iter().find(|x| x.kind == Some(Kind::Reg) && x.addr.as_deref() == Some(old.as_str())).unwrap();
    assert_eq!((r.reg_seq, r.mr.as_ref()), (Some(reg.seq), reg.mr.as_ref()));
    assert_ne!(r.lkey, reg.lkey, "the simulated NIC gives a new translation new keys: the record has them");
    assert_eq!((r.registered_bytes, r.registered_bytes_after), (131072 + 65536, Some(131072 + 131072)));
    // the MR's dereg names where it is now, and gives back what it is now
    let d = recs.iter().find(|x| x.kind == Some(Kind::Dereg) && x.mr == r.mr).unwrap();
    assert_eq!((d.addr.as_deref(), d.length, d.reg_seq), (Some(new.as_str()), Some(131072), Some(reg.seq)));
    let s = recs.last().unwrap().summary.as_ref().expect("summary last");
    assert_eq!((s.registered_bytes, s.peak_registered_bytes, s.failures), (0, 262144, 1), "the bad input");
    assert_eq!(s.by_call["ibv_rereg_mr"].calls, 2);
    let warn: Vec<&str> = err.lines().filter(|l| l.contains(" MRSHIM WARN ")).collect();
    assert_eq!(warn.len(), 1, "only the bad input: {err}");
    assert!(warn[0].ends_with(") failed: EINVAL (22), IBV_REREG_MR_ERR_INPUT"), "{err}");
}

/// A device without the command (rdma-core's dummy op): the call fails as it does without the
/// shim, one NCCL-style WARN line says so, the record has the code and errno.
#[test]
fn a_rereg_the_device_refuses_is_warned_and_recorded_as_a_failure() {
    let w = SimWorld::new("rereg-nocmd").with("MRSHIM_SIM_FAULTS", "rereg_mr:EOPNOTSUPP");
    let dir = w.dir.clone();
    let (out, err, recs) = run_logged(w, "plain");
    assert!(out.contains("rereg ret -4 errno 95\nfallback dereg+reg\ndata equal\n"), "{out}\n{err}");
    let warn: Vec<&str> = err.lines().filter(|l| l.contains(" MRSHIM WARN ibv_rereg_mr(mr=0x")).collect();
    assert_eq!(warn.len(), 2, "{err}");
    assert!(warn[1].contains(", flags=CHANGE_TRANSLATION, addr=0x"), "{err}");
    assert!(warn[1].ends_with(", len=131072) failed: EOPNOTSUPP (95), IBV_REREG_MR_ERR_CMD"), "{err}");
    let r = of_kind(&recs, Kind::Rereg)[1];
    assert_eq!(
        (r.result.as_str(), r.rereg_ret, r.rereg_ret_name.as_deref()),
        ("error", Some(-4), Some("IBV_REREG_MR_ERR_CMD"))
    );
    assert_eq!((r.errno, r.errno_name.as_deref(), r.strategy.as_ref()), (Some(95), Some("EOPNOTSUPP"), None));
    let s = recs.last().unwrap().summary.as_ref().unwrap();
    assert_eq!((s.by_call["ibv_rereg_mr"].failures, s.registered_bytes), (2, 0));
    // analyze: the two failed ibv_rereg_mr (each one's record and WARN line are one failure)
    let a = analyze(&dir, &err);
    assert_eq!(a.col.rereg, [2, 0, 2]);
    let mut failed: Vec<_> =
        a.col.groups.iter().filter(|(k, _)| !k.ok).map(|(k, g)| (k.call.as_str(), k.errno, g.count)).collect();
    failed.sort();
    assert_eq!(failed, [("ibv_rereg_mr", Some(22), 1), ("ibv_rereg_mr", Some(95), 1)], "{:?}", a.col.groups);
}

/// A bounce region (the NIC refuses the application's memory; MRSHIM_RETRY=bounce registers a
/// host shadow): its rereg is refused without reaching the device, with what rdma-core answers
/// for a provider without rereg, and the caller's dereg+reg fallback is byte-exact.
#[test]
fn a_bounce_mr_rereg_is_refused_with_err_cmd_eopnotsupp_and_dereg_reg_works() {
    let w = SimWorld::new("rereg-bounce")
        .with("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed")
        .with("MRSHIM_RETRY", "bounce")
        .with("MRSHIM_BOUNCE_REMOTE", "announced");
    let dir = w.dir.clone();
    let (out, err, recs) = run_logged(w, "bounce");
    // libibverbs' own input check still answers first: not refused, not the shim's ERR_CMD
    assert!(out.contains("bad input ret -1 errno 22\nrereg ret -4 errno 95\n"), "{out}\n{err}");
    assert!(out.contains("fallback dereg+reg\ndata equal\nold untouched\n"), "{out}\n{err}");
    let (old, new) = addrs(&out);
    let rr = of_kind(&recs, Kind::Rereg);
    assert_eq!((rr[0].result.as_str(), rr[0].rereg_ret, rr[0].strategy.as_ref()), ("error", Some(-1), None));
    let r = rr[1];
    assert_eq!((r.result.as_str(), r.strategy.as_deref()), ("refused", Some("bounce")));
    assert_eq!((r.rereg_ret, r.rereg_ret_name.as_deref(), r.errno), (Some(-4), Some("IBV_REREG_MR_ERR_CMD"), Some(95)));
    assert!(r.change.as_deref().is_some_and(|c| c.contains("host shadow")), "{:?}", r.change);
    assert_eq!((r.addr.as_deref(), r.new_addr.as_deref()), (Some(old.as_str()), Some(new.as_str())));
    assert_eq!(r.registered_bytes_after, Some(r.registered_bytes), "nothing changed");
    let info: Vec<&str> = err.lines().filter(|l| l.contains(" MRSHIM INFO ibv_rereg_mr(")).collect();
    assert_eq!(info.len(), 1, "{err}");
    assert!(info[0].contains(") refused: the MR was rescued by bounce"), "{err}");
    let warn = err.lines().filter(|l| l.contains("WARN ibv_rereg_mr")).count();
    assert_eq!(warn, 1, "the bad input only; a refusal is not a failure: {err}");
    // the fallback: the old MR's dereg names the old buffer, the new registration is a bounce
    // region of the new buffer
    let d = recs.iter().find(|x| x.kind == Some(Kind::Dereg) && x.seq > r.seq).unwrap();
    assert_eq!((d.addr.as_deref(), d.length, d.result.as_str()), (Some(old.as_str()), Some(65536), "ok"));
    let rescued = recs.iter().any(|x| {
        x.kind == Some(Kind::Reg)
            && x.seq > d.seq
            && x.addr.as_deref() == Some(new.as_str())
            && x.strategy.as_deref() == Some("bounce")
            && x.result == "ok"
    });
    assert!(rescued, "{recs:?}");
    let s = recs.last().unwrap().summary.as_ref().unwrap();
    assert_eq!((s.by_call["ibv_rereg_mr"].failures, s.registered_bytes), (1, 0), "the bad input only");
    // `mrshim analyze` of the log and the stderr lines: the refusal is counted, shown as such,
    // and is no failure of the application's (those are the bad input and the registration
    // bounce rescued)
    let a = analyze(&dir, &err);
    assert_eq!(a.col.rereg, [2, 1, 1]);
    assert!(a.col.notes.iter().any(|n| n.starts_with("ibv_rereg_mr: 2 calls, 1 failed, 1 refused by mrshim")));
    let mut failed: Vec<_> = a.col.groups.keys().filter(|k| !k.ok).map(|k| (k.call.as_str(), k.errno)).collect();
    failed.sort();
    assert_eq!(failed, [("ibv_reg_mr_iova2", Some(14)), ("ibv_rereg_mr", Some(22))], "{:?}", a.col.groups);
}

/// `mrshim analyze` (the library) of a world's logs and a program's stderr.
fn analyze(dir: &std::path::Path, stderr: &str) -> mrshim_analyze::Analysis {
    let e = dir.join("stderr.txt");
    std::fs::write(&e, stderr).unwrap();
    mrshim_analyze::analyze(&[dir.join("logs").display().to_string(), e.display().to_string()])
}
