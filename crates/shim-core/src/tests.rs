use super::*;
use mrshim_record::{Kind, MemKind, Reg, SCHEMA_VERSION};
use std::cell::RefCell;
use std::collections::HashMap;

struct Fake {
    /// errno to fail with when RELAXED_ORDERING is set (like the simulator's fault injection)
    fail_relaxed: Option<i32>,
    invoked: RefCell<Vec<RegArgs>>,
    panic_in_device: bool,
}

impl Fake {
    fn new() -> Self {
        Fake { fail_relaxed: None, invoked: RefCell::new(vec![]), panic_in_device: false }
    }
}

impl Backend for Fake {
    fn invoke(&self, a: &RegArgs) -> Outcome {
        self.invoked.borrow_mut().push(*a);
        if a.is_probe() {
            return Outcome { err: libc::EOPNOTSUPP, errno_after: libc::EOPNOTSUPP, ..Default::default() };
        }
        if a.call() == Call::DeregMr {
            return Outcome::default();
        }
        if let Some(e) = self.fail_relaxed {
            if a.access & mrshim_verbs::access::RELAXED_ORDERING != 0 {
                return Outcome { err: e, errno_after: e, ..Default::default() };
            }
        }
        let n = self.invoked.borrow().len() as u32;
        Outcome { mr: 0x1000 * n as usize, lkey: 100 + n, rkey: 200 + n, err: 0, errno_after: 0 }
    }
    fn device_name(&self, _pd: usize) -> Option<DevName> {
        if self.panic_in_device {
            panic!("boom");
        }
        Some(DevName::new(b"mrsim0\0junk"))
    }
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mrshim-core-t-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn shim_with(vars: &[(&str, &str)]) -> Shim {
    let m: HashMap<String, String> = vars.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    Shim::from_env(|k| m.get(k).cloned())
}

/// The records of a log still being written: a mapped log (a directory destination) reads as its
/// records plus blank lines until the process exits (crate::logmap).
fn lines(p: &std::path::Path) -> Vec<Reg> {
    let text = std::fs::read_to_string(p).unwrap();
    text.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn only_file(d: &std::path::Path) -> std::path::PathBuf {
    let v: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

#[test]
fn every_field_of_a_registration() {
    let d = tmpdir("fields");
    let s = shim_with(&[
        ("MRSHIM_LOG", d.to_str().unwrap()),
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
    ]);
    let buf = vec![0u8; 4 * 4096];
    let addr = ((buf.as_ptr() as u64 + 4095) & !4095) | 0x30;
    let f = Fake::new();
    let a = RegArgs {
        call: Some(Call::RegMrIova2),
        pd: 0xabc0,
        addr,
        length: 8192,
        iova: Some(addr),
        access: 0xf | 0x100000,
        ..Default::default()
    };
    let out = s.call(&a, &f);
    assert!(out.ok());
    assert_eq!(f.invoked.borrow().len(), 1);
    let p = only_file(&d);
    assert!(p.file_name().unwrap().to_str().unwrap().starts_with(&format!("mrshim-{}-r3-p", ident::hostname())));
    let recs = lines(&p);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].kind, Some(Kind::Config));
    let env = recs[0].env.as_ref().unwrap();
    assert_eq!(env.get("OMPI_COMM_WORLD_RANK").map(String::as_str), Some("3"));
    let r = &recs[1];
    assert_eq!(r.v, SCHEMA_VERSION);
    assert_eq!(r.kind, Some(Kind::Reg));
    assert_eq!(r.seq, 1);
    assert_eq!(r.call, "ibv_reg_mr_iova2");
    assert_eq!(r.rank, Some(3));
    assert_eq!(r.local_rank, Some(1));
    assert_eq!(r.pid, std::process::id());
    assert!(r.tid > 0);
    assert_eq!(r.device.as_deref(), Some("mrsim0"));
    assert_eq!(r.pd.as_deref(), Some("0xabc0"));
    assert_eq!(r.addr, Some(format!("{addr:#x}")));
    assert_eq!(r.length, Some(8192));
    assert_eq!(r.addr_page_offset, Some(addr % 4096));
    assert_eq!(r.addr_align, Some(16));
    assert_eq!(r.iova_page_offset, Some(addr % 4096));
    assert_eq!(r.access, Some(0x10000f));
    assert_eq!(r.access_names, ["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "RELAXED_ORDERING"]);
    assert!(r.relaxed_ordering);
    assert_eq!(r.mem_kind, Some(MemKind::HostAnon));
    assert_eq!(r.mem_fully_mapped, Some(true));
    assert_eq!(r.result, "ok");
    assert_eq!(r.mr, Some("0x1000".into()));
    assert_eq!((r.lkey, r.rkey), (Some(101), Some(201)));
    assert_eq!(r.errno, None);
    assert_eq!(r.registered_bytes, 0);
    assert_eq!(r.registered_bytes_after, Some(8192));
    let (soft, hard) = crate::limits::read();
    assert_eq!((r.memlock_soft, r.memlock_hard), (soft, hard));
    assert!(r.time_ns > 1_600_000_000_000_000_000);
    assert!(
        recs[0].time_ns <= r.time_ns,
        "the config record (seq 0) is not later than seq 1: {} > {}",
        recs[0].time_ns,
        r.time_ns
    );

    // dereg links to the registration and gives the bytes back
    let d2 = RegArgs { call: Some(Call::DeregMr), mr: 0x1000, pd: 0xabc0, addr, length: 8192, ..Default::default() };
    assert!(s.call(&d2, &f).ok());
    let recs = lines(&p);
    let r = &recs[2];
    assert_eq!(r.kind, Some(Kind::Dereg));
    assert_eq!(r.reg_seq, Some(1));
    assert_eq!(r.registered_bytes, 8192);
    assert_eq!(r.registered_bytes_after, Some(0));
    assert_eq!(r.seq, 2);

    s.at_exit();
    let recs = lines(&p);
    let sm = recs[3].summary.as_ref().unwrap();
    assert_eq!(recs[3].kind, Some(Kind::Summary));
    assert_eq!(
        (sm.calls, sm.failures, sm.bytes_registered_total, sm.peak_registered_bytes, sm.registered_bytes),
        (2, 0, 8192, 8192, 0)
    );
    assert_eq!(sm.records_written, 3);
    // once only
    s.at_exit();
    assert_eq!(lines(&p).len(), 4);
}

#[test]
fn failure_warn_line_and_failures_level() {
    let d = tmpdir("fail");
    let s = shim_with(&[
        ("MRSHIM_LOG", &format!("{}/%h.%r.log", d.display())),
        ("MRSHIM_LEVEL", "failures"),
        ("PMI_RANK", "5"),
    ]);
    let f = Fake { fail_relaxed: Some(libc::EINVAL), ..Fake::new() };
    let ok = RegArgs {
        call: Some(Call::RegMr),
        pd: 1,
        addr: 0x7f0000001000,
        length: 4096,
        iova: Some(0x7f0000001000),
        access: 7,
        ..Default::default()
    };
    let bad = RegArgs { call: Some(Call::RegMrIova2), access: 0x10000f, ..ok };
    assert!(s.call(&ok, &f).ok());
    let out = s.call(&bad, &f);
    assert_eq!(out.err, libc::EINVAL);
    let recs = lines(&d.join(format!("{}.5.log", ident::hostname())));
    assert_eq!(recs.len(), 2, "config + the failure only");
    let r = &recs[1];
    assert_eq!(r.seq, 2, "seq counts unrecorded calls too");
    assert_eq!(r.result, "error");
    assert_eq!(r.errno, Some(22));
    assert_eq!(r.errno_name.as_deref(), Some("EINVAL"));
    assert_eq!(r.mr, None);
    assert_eq!(r.mem_kind, Some(MemKind::Unmapped));
    let w = s.warn_line(&bad, &out, Some((MemKind::Unmapped, Some(false))));
    let tail = " MRSHIM WARN ibv_reg_mr_iova2(addr=0x7f0000001000, len=4096, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova=0x7f0000001000, mem=unmapped) failed: EINVAL (22)";
    assert!(w.ends_with(tail), "{w}");
    assert!(w.starts_with(&format!("{}:{}:", ident::hostname(), std::process::id())), "{w}");
    assert!(w.contains(" [-] MRSHIM WARN"), "the bracket is the GPU device (none here), not rank 5: {w}");
    let sm = s.summary();
    assert_eq!(sm.failures, 1);
    assert_eq!(sm.by_call["ibv_reg_mr_iova2"].errnos["EINVAL"], 1);
    let line = s.summary_line(&sm);
    assert!(
        line.contains(
            "INFO summary: 2 calls (ibv_reg_mr 1, ibv_reg_mr_iova2 1), 1 failures (ibv_reg_mr_iova2 EINVAL x1)"
        ),
        "{line}"
    );
}

#[test]
fn probe_passes_through_and_is_marked() {
    let d = tmpdir("probe");
    let s = shim_with(&[("MRSHIM_LOG", d.to_str().unwrap())]);
    let f = Fake::new();
    let a = RegArgs {
        call: Some(Call::RegDmabufMr),
        pd: 1,
        dmabuf_fd: Some(-1),
        dmabuf_offset: Some(0),
        iova: Some(0),
        ..Default::default()
    };
    let out = s.call(&a, &f);
    assert_eq!(out.err, libc::EOPNOTSUPP);
    assert_eq!(f.invoked.borrow().as_slice(), &[a]);
    let r = &lines(&only_file(&d))[1];
    assert!(r.probe);
    assert_eq!(r.errno_name.as_deref(), Some("EOPNOTSUPP"));
    assert_eq!(r.dmabuf_fd, Some(-1));
    let sm = s.summary();
    assert_eq!((sm.calls, sm.failures, sm.probes), (1, 0, 1));
}

#[test]
fn bad_config_is_pure_pass_through() {
    let d = tmpdir("bad");
    let s = shim_with(&[("MRSHIM_LOG", d.to_str().unwrap()), ("MRSHIM_LEVEL", "loud")]);
    assert!(s.config().is_none());
    let f = Fake::new();
    let a = RegArgs { call: Some(Call::RegMr), addr: 0x1000, length: 1, ..Default::default() };
    assert!(s.call(&a, &f).ok());
    assert_eq!(f.invoked.borrow().len(), 1);
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    assert_eq!(s.summary().calls, 0);
}

#[test]
fn panic_in_recording_still_returns_the_real_outcome() {
    let d = tmpdir("panic");
    let s = shim_with(&[("MRSHIM_LOG", d.to_str().unwrap()), ("MRSHIM_WARN", "off")]);
    let f = Fake { panic_in_device: true, ..Fake::new() };
    let a = RegArgs { call: Some(Call::RegMr), pd: 1, addr: 0x1000, length: 1, ..Default::default() };
    let out = s.call(&a, &f);
    assert!(out.ok());
    assert_eq!(out.lkey, 101);
    assert_eq!(f.invoked.borrow().len(), 1, "the real function ran exactly once");
}

#[test]
fn many_threads_lose_nothing() {
    let d = tmpdir("threads");
    let s = shim_with(&[("MRSHIM_LOG", &format!("{}/one.jsonl", d.display()))]);
    struct Quick;
    impl Backend for Quick {
        fn invoke(&self, _a: &RegArgs) -> Outcome {
            Outcome { mr: 8, lkey: 1, rkey: 2, ..Default::default() }
        }
        fn device_name(&self, _pd: usize) -> Option<DevName> {
            None
        }
    }
    let buf = vec![0u8; 4096];
    let addr = buf.as_ptr() as u64;
    std::thread::scope(|sc| {
        for _ in 0..8 {
            sc.spawn(|| {
                for _ in 0..500 {
                    let a = RegArgs { call: Some(Call::RegMr), addr, length: 64, ..Default::default() };
                    s.call(&a, &Quick);
                }
            });
        }
    });
    let recs = lines(&d.join("one.jsonl"));
    assert_eq!(recs.len(), 4001);
    let mut seqs: Vec<u64> = recs[1..].iter().map(|r| r.seq).collect();
    seqs.sort();
    assert_eq!(seqs, (1..=4000).collect::<Vec<_>>());
    assert_eq!(s.summary().records_lost, 0);
}

#[test]
fn device_names_stop_at_nul_and_stay_utf8() {
    assert_eq!(DevName::new(b"mlx5_0\0\0\0").as_str(), "mlx5_0");
    assert_eq!(DevName::new(&[b'a'; 80]).as_str().len(), 64);
    assert_eq!(DevName::new(b"ok\xff\xfe").as_str(), "ok");
}

/// Asks for facts are what made a retry policy cost every success ~340 ns: count them.
struct Asking<'a>(&'a Fake, std::cell::Cell<u32>);

impl Backend for Asking<'_> {
    fn invoke(&self, a: &RegArgs) -> Outcome {
        self.0.invoke(a)
    }
    fn device_name(&self, pd: usize) -> Option<DevName> {
        self.0.device_name(pd)
    }
    fn is_device_memory(&self, _addr: u64) -> bool {
        self.1.set(self.1.get() + 1);
        false
    }
}

#[test]
fn a_retry_policy_costs_a_success_nothing_until_something_is_learned() {
    let s = shim_with(&[("MRSHIM_RETRY", "auto"), ("MRSHIM_SUMMARY", "off")]);
    let f = Fake { fail_relaxed: Some(libc::EINVAL), ..Fake::new() };
    let b = Asking(&f, std::cell::Cell::new(0));
    let buf = vec![0u8; 8192];
    let a = |access| RegArgs {
        call: Some(Call::RegMrIova2),
        pd: 0xabc0,
        addr: buf.as_ptr() as u64,
        length: 4096,
        iova: Some(buf.as_ptr() as u64),
        access,
        ..Default::default()
    };
    assert!(s.counts_only(Call::RegMrIova2), "nothing learned: the hook layer may take the fast path");
    for _ in 0..10 {
        assert!(s.call(&a(0xf), &b).ok());
    }
    assert_eq!(b.1.get(), 0, "successes asked nothing about the memory");
    assert_eq!(f.invoked.borrow().len(), 10, "one real call each");
    // The seed's failure, rescued and learned: from now on registrations of this kind start
    // with the learned variant, so they need the slow path.
    assert!(s.call(&a(0xf | mrshim_verbs::access::RELAXED_ORDERING), &b).ok());
    assert!(!s.counts_only(Call::RegMrIova2) && s.counts_only(Call::DeregMr));
    let n = f.invoked.borrow().len();
    assert!(s.call(&a(0xf | mrshim_verbs::access::RELAXED_ORDERING), &b).ok());
    assert_eq!(f.invoked.borrow().len(), n + 1, "learned: no failing first attempt");
    assert_eq!(f.invoked.borrow().last().unwrap().access, 0xf);
}

/// Device memory that only a host shadow can register (like the seed incident with
/// MRSHIM_RETRY=bounce): the fake fails every registration of `device`, and hands out `shadow`.
struct DeviceOnly<'a> {
    fake: &'a Fake,
    device: u64,
    shadow: u64,
}

impl Backend for DeviceOnly<'_> {
    fn invoke(&self, a: &RegArgs) -> Outcome {
        if a.addr == self.device {
            self.fake.invoked.borrow_mut().push(*a);
            return Outcome { err: libc::EINVAL, errno_after: libc::EINVAL, ..Default::default() };
        }
        self.fake.invoke(a)
    }
    fn device_name(&self, pd: usize) -> Option<DevName> {
        self.fake.device_name(pd)
    }
    fn is_device_memory(&self, addr: u64) -> bool {
        addr == self.device
    }
    fn bounce_shadow(&self, _a: &RegArgs) -> Result<Box<dyn crate::StagedShadow>, String> {
        Ok(Box::new(TestShadow(self.shadow)))
    }
}

/// A shadow that is only an address (the fake registers nothing).
struct TestShadow(u64);

impl crate::StagedShadow for TestShadow {
    fn addr(&self) -> u64 {
        self.0
    }
    fn adopt(self: Box<Self>, _mr: usize) {}
    fn abandon(self: Box<Self>) {}
}

/// Issue 13: attempt and learned records describe the application's request; what the shim
/// registered instead is in used_* (present only where it differs).
#[test]
fn retry_records_keep_the_request_and_name_what_was_used() {
    let d = tmpdir("used");
    let s = shim_with(&[
        ("MRSHIM_LOG", d.to_str().unwrap()),
        ("MRSHIM_RETRY", "drop-relaxed-ordering,bounce"),
        ("MRSHIM_BOUNCE_REMOTE", "announced"),
    ]);
    let shadow = vec![0u8; 8192];
    let f = Fake::new();
    let b = DeviceOnly { fake: &f, device: 0x7f00_0000_0000, shadow: shadow.as_ptr() as u64 };
    let access = 0xf | mrshim_verbs::access::RELAXED_ORDERING;
    let a = RegArgs {
        call: Some(Call::RegMrIova2),
        pd: 0xabc0,
        addr: b.device,
        length: 4096,
        iova: Some(b.device),
        access,
        ..Default::default()
    };
    assert!(s.call(&a, &b).ok(), "rescued by the bounce shadow");
    assert!(s.call(&a, &b).ok(), "then, after the same failure, straight to the learned strategy");
    let recs: Vec<Reg> = lines(&only_file(&d)).into_iter().filter(|r| r.kind == Some(Kind::Reg)).collect();
    let by = |strategy: &str, learned: bool| {
        recs.iter()
            .find(|r| r.strategy.as_deref() == Some(strategy) && r.learned == learned)
            .unwrap_or_else(|| panic!("no {strategy} record: {recs:#?}"))
    };
    let asked = format!("{:#x}", b.device);
    for r in &recs {
        assert_eq!(r.addr.as_deref(), Some(asked.as_str()), "{r:?}");
        assert_eq!((r.length, r.access, r.relaxed_ordering), (Some(4096), Some(access), true), "{r:?}");
        assert_eq!(r.mem_kind, Some(MemKind::Device), "{r:?}");
        assert_eq!(r.used_length, None, "same length: {r:?}");
    }
    let own = recs.iter().find(|r| r.attempt == 0 && r.strategy.is_none()).unwrap();
    assert_eq!((own.used_addr.as_ref(), own.used_access, own.used_mem_kind), (None, None, None));
    let dropped = by("drop-relaxed-ordering", false);
    assert_eq!((dropped.result.as_str(), dropped.used_access), ("error", Some(0xf)));
    assert_eq!((dropped.used_addr.as_ref(), dropped.used_mem_kind), (None, None), "same memory");
    let shadow_addr = format!("{:#x}", b.shadow);
    for r in [by("bounce", false), by("bounce", true)] {
        assert_eq!(r.result, "ok");
        assert_eq!(r.used_addr.as_deref(), Some(shadow_addr.as_str()));
        assert_eq!(r.used_access, Some(0x7), "the shadow goes without relaxed ordering and REMOTE_ATOMIC");
        assert_eq!(r.used_mem_kind, Some(MemKind::HostAnon));
    }
}

/// The real ibv_rereg_mr of the tests: answers `ret`/`errno`, counts its calls, MR keys 7/8.
struct FakeRereg {
    ret: i32,
    errno: i32,
    calls: std::cell::Cell<u32>,
}

impl rereg::ReregBackend for FakeRereg {
    fn invoke(&self) -> (i32, i32) {
        self.calls.set(self.calls.get() + 1);
        (self.ret, self.errno)
    }
    fn keys(&self) -> Option<(u32, u32)> {
        Some((7, 8))
    }
    fn device_name(&self) -> Option<DevName> {
        Some(DevName::new(b"mrsim0"))
    }
}

#[test]
fn a_rereg_is_recorded_old_to_new_and_the_dereg_follows_the_mr() {
    let d = tmpdir("rereg");
    let s = shim_with(&[("MRSHIM_LOG", d.to_str().unwrap())]);
    let f = Fake::new();
    let reg =
        RegArgs { call: Some(Call::RegMr), pd: 0xabc0, addr: 0x10000, length: 4096, access: 7, ..Default::default() };
    let mr = s.call(&reg, &f).mr;
    let a = rereg::ReregArgs {
        mr,
        flags: 5, // CHANGE_TRANSLATION | CHANGE_ACCESS
        pd: 0,
        addr: 0x40000,
        length: 16384,
        access: 3,
        mr_addr: 0x10000,
        mr_length: 4096,
        mr_pd: 0xabc0,
    };
    let real = FakeRereg { ret: 0, errno: 0, calls: Default::default() };
    assert_eq!(s.rereg(&a, None, &real), rereg::ReregOutcome { ret: 0, errno: 0 });
    assert_eq!(real.calls.get(), 1);
    let dereg =
        RegArgs { call: Some(Call::DeregMr), mr, pd: 0xabc0, addr: 0x40000, length: 16384, ..Default::default() };
    assert!(s.call(&dereg, &f).ok());
    let recs = lines(&only_file(&d));
    let r = &recs[2];
    assert_eq!((r.kind, r.call.as_str(), r.result.as_str(), r.seq), (Some(Kind::Rereg), "ibv_rereg_mr", "ok", 2));
    assert_eq!(
        (r.addr.as_deref(), r.length, r.access, r.pd.as_deref()),
        (Some("0x10000"), Some(4096), Some(7), Some("0xabc0"))
    );
    assert_eq!(
        (r.new_addr.as_deref(), r.new_length, r.new_access, r.new_pd.as_deref()),
        (Some("0x40000"), Some(16384), Some(3), None)
    );
    assert_eq!((r.rereg_flags, r.rereg_ret, r.rereg_ret_name.as_deref(), r.errno), (Some(5), Some(0), None, None));
    assert_eq!((r.lkey, r.rkey, r.reg_seq, r.device.as_deref()), (Some(7), Some(8), Some(1), Some("mrsim0")));
    assert_eq!((r.registered_bytes, r.registered_bytes_after), (4096, Some(16384)));
    // the dereg gives back what the MR is now
    let r = &recs[3];
    assert_eq!(
        (r.kind, r.reg_seq, r.registered_bytes, r.registered_bytes_after),
        (Some(Kind::Dereg), Some(1), 16384, Some(0))
    );
}

#[test]
fn a_rereg_of_an_mr_a_strategy_altered_is_refused_without_calling_the_provider() {
    let d = tmpdir("rereg-refused");
    let s = shim_with(&[("MRSHIM_LOG", d.to_str().unwrap())]);
    let a = rereg::ReregArgs {
        mr: 0x5000,
        flags: 1,
        addr: 0x40000,
        length: 4096,
        mr_addr: 0x10000,
        mr_length: 4096,
        ..Default::default()
    };
    let real = FakeRereg { ret: 0, errno: 0, calls: Default::default() };
    let bounce = Some(rereg::Altered(mrshim_retry::strategy::Strategy::Bounce));
    let out = s.rereg(&a, bounce, &real);
    assert_eq!((out.ret, out.errno, real.calls.get()), (-4, libc::EOPNOTSUPP, 0));
    // CHANGE_PD alone too; input libibverbs rejects itself, and flags 0, go to the real function
    assert_eq!(s.rereg(&rereg::ReregArgs { flags: 2, pd: 0x77, ..a.clone() }, bounce, &real).ret, -4);
    assert_eq!(real.calls.get(), 0);
    s.rereg(&rereg::ReregArgs { flags: 1, addr: 0, ..a.clone() }, bounce, &real);
    s.rereg(&rereg::ReregArgs { flags: 0, ..a.clone() }, bounce, &real);
    assert_eq!(real.calls.get(), 2);
    // a registered dmabuf: rdma-core's own answer for dmabuf MRs
    let dmabuf = Some(rereg::Altered(mrshim_retry::strategy::Strategy::DmabufToVa));
    assert_eq!(s.rereg(&a, dmabuf, &real), rereg::ReregOutcome { ret: -1, errno: libc::EINVAL });
    let recs = lines(&only_file(&d));
    let r = &recs[1];
    assert_eq!((r.kind, r.result.as_str(), r.strategy.as_deref()), (Some(Kind::Rereg), "refused", Some("bounce")));
    assert_eq!((r.rereg_ret, r.rereg_ret_name.as_deref()), (Some(-4), Some("IBV_REREG_MR_ERR_CMD")));
    assert_eq!((r.errno, r.errno_name.as_deref()), (Some(libc::EOPNOTSUPP), Some("EOPNOTSUPP")));
    assert!(r.change.as_deref().unwrap().contains("host shadow"), "{:?}", r.change);
    assert_eq!((r.addr.as_deref(), r.new_addr.as_deref()), (Some("0x10000"), Some("0x40000")));
    // refusals are not failures of the application's calls
    assert_eq!(s.summary().by_call["ibv_rereg_mr"].failures, 0);
}
