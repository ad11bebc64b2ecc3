//! The findings engine: scores each category from the aggregated evidence, most likely root cause first.
//! The errno alone never decides: memory kind, access mask, which calls and runs succeeded, limits,
//! kernel lines and versions all move the scores. Each rule is a few weighted observations.
use crate::collect::{Collector, Evid, Group, GroupKey, Run};
use crate::errno::{self, EACCES, EAGAIN, EFAULT, EINVAL, ENOMEM, EOPNOTSUPP, EPERM};
use crate::event::{Flag, Lib};
use crate::fixes;
use mrshim_record::MemKind;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

pub const CATEGORIES: [&str; 11] = [
    "memlock-limit",
    "gpu-peer-memory",
    "relaxed-ordering",
    "iova-alignment",
    "access-flags",
    "version-mismatch",
    "address-invalid",
    "resource-exhaustion",
    "permissions",
    "dmabuf-unsupported",
    "unknown",
];

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub category: &'static str,
    pub confidence: f64,
    pub call: Option<String>,
    pub calls: Vec<String>,
    pub errno: Option<String>,
    pub errnos: Vec<String>,
    pub hosts: Vec<String>,
    pub ranks: Vec<i64>,
    pub count: u64,
    pub evidence: Vec<Evid>,
    pub explanation: String,
    pub fixes: Vec<String>,
    pub retry: Option<String>,
    /// "evidence" when something in the input points at this cause, "prior" when only the call, errno,
    /// memory kind and library make it likely (a best guess).
    pub basis: &'static str,
    /// The command to run or the line to look for that confirms or rules this out.
    pub check: &'static str,
    /// A known issue (data/known-issues.json) the input matches.
    pub known_issue: Option<KnownRef>,
    #[serde(skip)]
    pub score: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct KnownRef {
    pub id: String,
    pub title: String,
    pub source: String,
    pub fix: String,
}

/// A category the evidence removed, and why.
#[derive(Debug, Clone, Serialize)]
pub struct RuledOut {
    pub category: &'static str,
    pub reason: String,
}

type G<'a> = (&'a GroupKey, &'a Group);

/// What the rules look at, computed once.
pub struct View<'a> {
    pub c: &'a Collector,
    pub fails: Vec<G<'a>>,
    pub oks: Vec<G<'a>>,
    pub runs: Vec<Run>,
    pub prefix: &'static str,
}

fn is_host_mem(m: Option<MemKind>) -> bool {
    matches!(m, Some(MemKind::HostAnon | MemKind::HostStack | MemKind::Hugepage | MemKind::FileWritable))
}
fn unknown_mem(m: Option<MemKind>) -> bool {
    matches!(m, None | Some(MemKind::Unknown))
}
fn sum(gs: &[G]) -> u64 {
    gs.iter().map(|g| g.1.count).sum()
}

impl<'a> View<'a> {
    pub fn new(c: &'a Collector) -> View<'a> {
        let mut fails: Vec<G> = c.groups.iter().filter(|g| !g.0.ok).collect();
        let mut oks: Vec<G> = c.groups.iter().filter(|g| g.0.ok).collect();
        fails.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        oks.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        let mccl = c.hosts.values().any(|h| h.libs.contains(&Lib::Mccl));
        View { c, fails, oks, runs: c.resolved_runs(), prefix: if mccl { "MCCL" } else { "NCCL" } }
    }
    fn flag(&self, f: Flag) -> Option<&'a Evid> {
        self.c.hosts.values().find_map(|h| h.flags.get(&f).map(|x| &x.1))
    }
    fn fail_where(&self, p: impl Fn(&GroupKey, &Group) -> bool) -> Vec<G<'a>> {
        self.fails.iter().copied().filter(|(k, g)| p(k, g)).collect()
    }
    fn ok_where(&self, p: impl Fn(&GroupKey) -> bool) -> u64 {
        self.oks.iter().filter(|(k, _)| p(k)).map(|g| g.1.count).sum()
    }
    fn fail_hosts(&self) -> BTreeSet<&'a str> {
        self.fails.iter().map(|g| g.0.host.as_str()).collect()
    }
    /// Hosts that registered fine and never failed.
    fn good_hosts(&self) -> BTreeSet<&'a str> {
        let f = self.fail_hosts();
        let done = self.c.runs.values().filter(|r| View::completed(r)).filter_map(|r| r.host.as_deref());
        self.oks.iter().map(|g| g.0.host.as_str()).chain(done).filter(|h| !h.is_empty() && !f.contains(h)).collect()
    }
    fn errno_count(&self, e: i32) -> u64 {
        sum(&self.fail_where(|k, _| k.errno == Some(e)))
    }
    /// Soft memlock on a host: smallest finite value seen, or None(unlimited) if only unlimited was seen.
    fn memlock(&self, host: &str) -> Option<Option<u64>> {
        let hf = self.c.hosts.get(host)?;
        if let Some(Some(m)) = hf.memlock.keys().find(|k| k.is_some()) {
            return Some(Some(*m));
        }
        hf.memlock.keys().next().copied()
    }
    fn memlock_evid(&self, host: &str) -> Option<Evid> {
        let hf = self.c.hosts.get(host)?;
        hf.memlock.iter().find(|(k, _)| k.is_some()).or_else(|| hf.memlock.iter().next()).map(|(_, e)| e.clone())
    }
    fn gdr_context(&self) -> bool {
        self.flag(Flag::GdrOn).is_some()
            || self.flag(Flag::GpuContext).is_some()
            || self.runs.iter().any(|r| r.gdr == Some(true))
            || self
                .fails
                .iter()
                .any(|g| matches!(g.0.lib, Lib::Mccl | Lib::Rccl) || g.0.lib.registers_gpu() && g.0.lib != Lib::Nccl)
    }
    /// Strategies the shim tried that never worked (evidence against their category).
    fn failed_strategy(&self, s: &str) -> bool {
        self.c.retries.get(&(s.to_string(), false)).is_some_and(|n| *n > 0)
            && !self.c.retries.contains_key(&(s.to_string(), true))
    }
    fn completed(r: &Run) -> bool {
        r.failed == 0 && (r.done || r.ok_regs > 0)
    }
}

struct Cand<'a> {
    cat: &'static str,
    score: f64,
    /// The part of `score` from evidence in the input (not from priors).
    evidence: f64,
    groups: Vec<G<'a>>,
    /// Failures this category is a plausible cause of by prior only.
    prior_groups: Vec<G<'a>>,
    known: Option<KnownRef>,
    facts: Vec<Evid>,
    why: Vec<String>,
    fixes: Vec<String>,
    retry: Option<&'static str>,
}

impl<'a> Cand<'a> {
    fn new(cat: &'static str) -> Self {
        Cand {
            cat,
            score: 0.0,
            evidence: 0.0,
            groups: vec![],
            prior_groups: vec![],
            known: None,
            facts: vec![],
            why: vec![],
            fixes: vec![],
            retry: None,
        }
    }
    fn add(&mut self, w: f64, why: impl Into<String>, e: Option<&Evid>) {
        self.score += w;
        let why = why.into();
        if !why.is_empty() {
            self.why.push(why);
        }
        if let Some(e) = e {
            if !self.facts.contains(e) && self.facts.len() < 4 {
                self.facts.push(e.clone());
            }
        }
    }
}

fn errnos_of(gs: &[G]) -> Vec<(i32, u64)> {
    let mut m: BTreeMap<i32, u64> = BTreeMap::new();
    for (k, g) in gs {
        if let Some(e) = k.errno {
            *m.entry(e).or_default() += g.count;
        }
    }
    let mut v: Vec<(i32, u64)> = m.into_iter().collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.1));
    v
}

fn describe_errnos(gs: &[G]) -> String {
    let v = errnos_of(gs);
    if v.is_empty() {
        return "an unreported errno".into();
    }
    v.iter().map(|(e, _)| format!("{} ({})", errno::name(*e), errno::text(*e))).collect::<Vec<_>>().join(", ")
}

fn calls_of(gs: &[G]) -> Vec<String> {
    let mut m: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, g) in gs {
        *m.entry(k.call.as_str()).or_default() += g.count;
    }
    let mut v: Vec<(&str, u64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.into_iter().map(|x| x.0.to_string()).collect()
}

fn mem_name(m: Option<MemKind>) -> &'static str {
    m.unwrap_or(MemKind::Unknown).name()
}

pub fn human_size(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (n as f64, 0);
    while v >= 1024.0 && i < 4 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn gpu_peer_memory<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("gpu-peer-memory");
    let p = v.prefix;
    // a dmabuf registration the stack refuses as unsupported is dmabuf-unsupported, not a peer-memory problem
    let unsupported_dmabuf =
        |k: &GroupKey| k.call.contains("dmabuf") && matches!(k.errno, Some(EOPNOTSUPP) | Some(errno::EPROTONOSUPPORT));
    let device = v.fail_where(|k, _| k.mem == Some(MemKind::Device) && !unsupported_dmabuf(k));
    let unknown = v.fail_where(|k, _| unknown_mem(k.mem) && !unsupported_dmabuf(k));
    let ok_host = v.ok_where(|k| is_host_mem(k.mem));
    let ok_dev = v.ok_where(|k| k.mem == Some(MemKind::Device));
    let gdr = v.gdr_context();
    let gdr_off_ok = v.runs.iter().filter(|r| r.gdr == Some(false) && View::completed(r)).count();
    if !device.is_empty() {
        c.add(
            3.0,
            format!(
                "{} registration(s) of GPU (device) memory failed with {}.",
                sum(&device),
                describe_errnos(&device)
            ),
            None,
        );
        c.groups.extend(device.iter().copied());
        if ok_host > 0 {
            c.add(1.0, format!("Host memory registered fine ({ok_host} time(s)): the NIC and verbs stack work, GPU memory does not."), None);
        }
        if ok_dev > 0 {
            c.score -= 1.0;
            c.why.push(format!("Note: {ok_dev} device-memory registration(s) did succeed."));
        }
    } else if gdr && !unknown.is_empty() {
        let enomem = errnos_of(&unknown).first().map(|x| x.0) == Some(ENOMEM);
        c.add(if enomem { 0.5 } else { 1.5 }, format!("{} registration(s) failed with {} while GPUDirect RDMA was in use (GPU buffers registered with the NIC).", sum(&unknown), describe_errnos(&unknown)), v.flag(Flag::GdrOn).or(v.flag(Flag::GpuContext)));
        c.groups.extend(unknown.iter().copied());
    } else if let Some(e) = v.flag(Flag::GeforceGpu).or(v.flag(Flag::P2pPinFail)) {
        c.add(0.5, "", Some(e));
        c.groups.extend(v.fails.iter().copied());
    } else {
        return c;
    }
    if let Some(e) = v.flag(Flag::GeforceGpu) {
        c.add(
            2.0,
            "The GPU is a GeForce: GeForce GPUs do not support GPUDirect RDMA, so the NIC cannot pin their memory.",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::P2pPinFail) {
        c.add(
            1.5,
            "The kernel could not pin the GPU pages for the peer (nvidia_p2p_get_pages / gdrdrv failed).",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::GpuDmabufUnavailable) {
        c.add(
            0.5,
            "The GPU cannot export dmabuf here, so GPU memory can only be registered through a peer-memory module.",
            Some(e),
        );
    }
    if gdr_off_ok > 0 {
        c.add(
            2.0,
            "A run with GPUDirect RDMA off completed: registering GPU memory is what fails.",
            v.runs.iter().find(|r| r.gdr == Some(false) && View::completed(r)).and_then(|r| r.evid.as_ref()),
        );
    } else if let Some(e) = v.flag(Flag::GdrOffWorks) {
        c.add(
            2.0,
            "With GDR off (buffers in system memory) the job works: registering GPU memory is what fails.",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::TcpWorks) {
        c.add(
            0.5,
            format!("With {p}_IB_DISABLE=1 (TCP) it works: the network itself is fine, the RDMA registration is not."),
            Some(e),
        );
    }
    let calls: BTreeSet<&str> = c.groups.iter().map(|g| g.0.call.as_str()).collect();
    let both = calls.iter().any(|c| c.contains("iova")) && calls.contains("ibv_reg_mr");
    let ro_off_fail = v.runs.iter().any(|r| r.ro == Some(false) && r.failed > 0)
        || c.groups.iter().any(|g| g.0.relaxed == Some(false));
    let ro_still = v.flag(Flag::RoOffStillFails);
    if both || ro_off_fail || ro_still.is_some() {
        let mut s = String::from("Relaxed ordering is not the cause: ");
        if both {
            s.push_str("ibv_reg_mr_iova2 (used with relaxed ordering) and plain ibv_reg_mr (used without it) fail the same way");
        } else {
            s.push_str("registrations without relaxed ordering fail too");
        }
        if ro_still.is_some() {
            s.push_str(&format!(
                ", and {p}_IB_PCI_RELAXED_ORDERING=0 only moved the failure from one entry point to the other"
            ));
        }
        s.push_str(" — the failure is independent of the access flags and follows the memory.");
        c.add(1.5, s, ro_still);
    }
    if let Some(e) = v.flag(Flag::PeermemMissing) {
        c.add(2.0, "No GPU peer-memory client is loaded (nvidia_peermem / nv_peer_mem / amdgpu peer memory).", Some(e));
    }
    let efault = errnos_of(&c.groups).first().map(|x| x.0) == Some(EFAULT);
    if efault && (v.flag(Flag::PeermemLoaded).is_some() || v.flag(Flag::CudaVmm).is_some()) {
        c.add(1.0, "EFAULT with peer memory loaded is what CUDA VMM (cuMem*) buffers give: they can only be registered through dmabuf.", v.flag(Flag::CudaVmm).or(v.flag(Flag::PeermemLoaded)));
    }
    let top = errnos_of(&c.groups).first().map(|x| x.0);
    if matches!(top, Some(EINVAL) | Some(EFAULT) | Some(EOPNOTSUPP)) {
        c.add(0.5, "", None);
    }
    if let Some(e) = v.flag(Flag::UmemGetFail) {
        c.add(
            0.5,
            "The kernel could not pin the pages (ib_umem_get failed): GPU pages need a peer-memory client or dmabuf.",
            Some(e),
        );
    }
    for (f, why) in [
        (
            Flag::AcsOn,
            "ACS redirect is enabled on the PCIe path between NIC and GPU (known cause of GPUDirect hangs and errors).",
        ),
        (
            Flag::PcieError,
            "PCIe bus errors were reported when GPUDirect P2P was used — check ACS/IOMMU on the NIC-GPU path.",
        ),
        (Flag::IommuFault, "IOMMU faults were logged: P2P DMA between NIC and GPU is being translated or blocked."),
        (Flag::IommuTranslated, "The IOMMU translates DMA (not passthrough): GPUDirect P2P often fails that way."),
    ] {
        if let Some(e) = v.flag(f) {
            c.add(0.5, why, Some(e));
        }
    }
    let libs = |l: Lib| v.c.hosts.values().any(|h| h.libs.contains(&l));
    let vendor = if libs(Lib::Mccl) {
        fixes::GpuVendor::Metax
    } else if libs(Lib::Rccl) {
        fixes::GpuVendor::Amd
    } else {
        fixes::GpuVendor::Nvidia
    };
    c.fixes = fixes::gpu_peer_memory(p, vendor, efault);
    c.retry = Some("va-to-dmabuf,bounce");
    c
}

fn memlock_limit<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("memlock-limit");
    // Over the limit only matters where the kernel's memlock errno came back (ENOMEM, or EPERM
    // for a limit of 0): EINVAL/EFAULT are decided before the pinned-page accounting.
    let memlock_errno = |e: Option<i32>| matches!(e, Some(ENOMEM) | Some(EPERM) | None);
    let over = v.fail_where(|k, g| g.over_memlock > 0 && memlock_errno(k.errno));
    if !over.is_empty() {
        c.add(3.5, format!("{} registration(s) would have exceeded the locked-memory limit (bytes already registered + length > RLIMIT_MEMLOCK).", sum(&over)), None);
    }
    let mut small: Vec<(&str, u64)> = Vec::new();
    let mut unlimited_hosts = 0;
    let hosts = v.fail_hosts();
    let mut check_hosts: Vec<&str> = hosts.iter().copied().collect();
    if !check_hosts.contains(&"") {
        check_hosts.push("");
    }
    for h in check_hosts {
        match v.memlock(h) {
            Some(Some(m)) => small.push((h, m)),
            Some(None) => unlimited_hosts += 1,
            None => {}
        }
    }
    let candidates = v.fail_where(|k, g| {
        (g.over_memlock > 0 && memlock_errno(k.errno))
            || (memlock_errno(k.errno)
                && (small.iter().any(|s| s.0 == k.host || s.0.is_empty()) || v.memlock(&k.host).is_none()))
    });
    if candidates.is_empty() {
        return c;
    }
    c.groups = candidates;
    if let Some(&(h, m)) = small.iter().min_by_key(|s| s.1) {
        let w = if m < 1 << 30 { 2.5 } else { 1.0 };
        let on = if h.is_empty() { String::new() } else { format!(" on {h}") };
        c.add(
            w,
            format!(
                "The soft memlock limit{on} is {} (`ulimit -l`); RDMA pins every registered byte against it.",
                human_size(m)
            ),
            v.memlock_evid(h).as_ref(),
        );
    }
    let enomem = v.errno_count(ENOMEM);
    let total = sum(&v.fails);
    if enomem * 2 >= total {
        c.add(
            1.0,
            "The failures are ENOMEM, which is what the kernel returns when the pinned-memory limit is hit.",
            None,
        );
    }
    if v.errno_count(EPERM) > 0 && small.iter().any(|s| s.1 == 0) {
        c.add(1.0, "EPERM with a memlock limit of 0: the process may not pin memory at all.", None);
    }
    if let Some(e) = v.flag(Flag::LockedMemWarn) {
        c.add(1.5, "Open MPI reported it could not allocate locked memory.", Some(e));
    }
    if small.is_empty() && unlimited_hosts > 0 && over.is_empty() {
        c.score -= 3.0;
    }
    let good = v.good_hosts();
    let min_small = small.iter().map(|s| s.1).min();
    let good_with_unlimited: Vec<&str> = good
        .iter()
        .copied()
        .filter(|h| match (v.memlock(h), min_small) {
            (Some(None), Some(_)) => true,
            (Some(Some(m)), Some(s)) => m > s,
            _ => false,
        })
        .collect();
    if !small.is_empty() && !good_with_unlimited.is_empty() {
        c.add(
            1.0,
            format!("{} registered fine with a larger limit.", mrshim_hostlist::compress(good_with_unlimited)),
            None,
        );
    }
    if c.groups.iter().any(|g| is_host_mem(g.0.mem)) {
        c.add(0.3, "", None);
    }
    c.fixes = fixes::memlock();
    c.retry = Some("raise-memlock,bounce");
    c
}

fn resource_exhaustion<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("resource-exhaustion");
    let mr_size = v.flag(Flag::MrSizeExceeded);
    let gs = v.fail_where(|k, _| {
        matches!(k.errno, Some(ENOMEM) | Some(EAGAIN) | None) || (mr_size.is_some() && k.errno == Some(errno::ENOSPC))
    });
    if gs.is_empty() {
        return c;
    }
    c.groups = gs;
    if let Some(e) = mr_size {
        c.add(3.0, "A buffer was larger than the device's max_mr_size: one memory region cannot cover it; register it in several MRs.", Some(e));
    }
    if let Some(e) = v.flag(Flag::MkeyLimit) {
        c.add(3.0, "The mlx5 firmware refused to create more memory keys (CREATE_MKEY: limits exceeded): the NIC's MR/mkey resources are exhausted.", Some(e));
    }
    if let Some(e) = v.flag(Flag::KernelRegFail) {
        c.add(1.5, "The NIC driver logged registration failures with ENOMEM in the kernel log.", Some(e));
    }
    if let Some(e) = v.flag(Flag::RegLimitWarn) {
        c.add(1.5, "Open MPI warned that the driver only allows registering part of physical memory (MTT/mkey table too small).", Some(e));
    }
    let hosts = v.fail_hosts();
    let unlimited = !hosts.is_empty()
        && hosts.iter().all(|h| v.memlock(h) == Some(None) || (v.memlock(h).is_none() && v.memlock("") == Some(None)));
    if unlimited && v.errno_count(ENOMEM) > 0 {
        c.add(1.5, "ENOMEM although memlock is unlimited: something other than RLIMIT_MEMLOCK ran out.", None);
    }
    for hf in v.c.hosts.values() {
        if let Some((n, e)) = &hf.max_map_count {
            if *n < 262_144 {
                c.add(1.5, format!("vm.max_map_count is {n}: each registration can split VMAs and the process runs out of mappings."), Some(e));
                break;
            }
        }
    }
    if v.errno_count(EAGAIN) > 0 {
        c.add(1.0, "EAGAIN: the device is temporarily out of resources.", None);
    }
    let ok_on_fail_hosts = v.ok_where(|k| hosts.contains(k.host.as_str()));
    if ok_on_fail_hosts > 10_000 {
        c.add(
            0.5,
            format!("{ok_on_fail_hosts} registrations succeeded on the same host(s) before the failures."),
            None,
        );
    }
    c.fixes = fixes::resource();
    c.retry = Some("bounce");
    c
}

fn relaxed_ordering<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("relaxed-ordering");
    let p = v.prefix;
    let ro_fail = v.fail_where(|k, _| k.relaxed == Some(true));
    let noro_fail = v.fail_where(|k, _| k.relaxed == Some(false) || (k.lib.is_ccl() && k.call == "ibv_reg_mr"));
    let noro_ok = v.ok_where(|k| k.relaxed == Some(false));
    if !ro_fail.is_empty() && noro_fail.is_empty() && noro_ok > 0 {
        c.add(
            3.5,
            format!(
                "{} registration(s) with IBV_ACCESS_RELAXED_ORDERING failed while {noro_ok} without it succeeded.",
                sum(&ro_fail)
            ),
            None,
        );
        c.groups = ro_fail.clone();
    }
    let on_fail = v.runs.iter().find(|r| r.ro == Some(true) && r.failed > 0);
    let off_ok = v.runs.iter().find(|r| r.ro == Some(false) && View::completed(r));
    if let (Some(a), Some(b)) = (on_fail, off_ok) {
        c.add(
            3.0,
            format!("A run with relaxed ordering failed and a run with {p}_IB_PCI_RELAXED_ORDERING=0 completed."),
            b.evid.as_ref().or(a.evid.as_ref()),
        );
    }
    let iova_only = v.fail_where(|k, _| k.call.contains("iova"));
    if !iova_only.is_empty() && noro_fail.is_empty() {
        if let Some(e) = v.flag(Flag::RoAdvertised) {
            c.add(
                1.0,
                "Only ibv_reg_mr_iova2 (the relaxed-ordering path) fails, and relaxed ordering is on ([RO]).",
                Some(e),
            );
        }
        if c.groups.is_empty() {
            c.groups = iova_only;
        }
    }
    if !noro_fail.is_empty()
        || v.flag(Flag::RoOffStillFails).is_some()
        || v.runs.iter().any(|r| r.ro == Some(false) && r.failed > 0)
    {
        c.score -= 4.0;
    }
    c.fixes = fixes::relaxed(p);
    c.retry = Some("drop-relaxed-ordering");
    c
}

fn iova_alignment<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("iova-alignment");
    let gs = v.fail_where(|_, g| g.iova_misaligned > 0);
    if !gs.is_empty() {
        c.add(3.5, format!("{} ibv_reg_mr_iova2 call(s) passed an iova whose offset within the page differs from the address's; the kernel rejects that with EINVAL.", gs.iter().map(|g| g.1.iova_misaligned).sum::<u64>()), None);
        c.groups = gs;
    }
    c.fixes = fixes::iova();
    c.retry = Some("realign-iova");
    c
}

const WRITE_BITS: u32 = 0x1 | 0x2 | 0x8;

fn access_flags<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("access-flags");
    let ro = v.fail_where(|k, g| {
        k.mem == Some(MemKind::FileReadonly) && (g.access.is_empty() || g.access.iter().any(|a| a & WRITE_BITS != 0))
    });
    if !ro.is_empty() {
        c.add(3.5, format!("{} registration(s) of a read-only file mapping asked for write access ({}); the kernel cannot pin read-only pages for writing.", sum(&ro), describe_errnos(&ro)), None);
        c.groups.extend(ro.iter().copied());
    }
    let bad = v.fail_where(|_, g| g.access.iter().any(|a| a & 0xa != 0 && a & 0x1 == 0));
    if !bad.is_empty() {
        c.add(
            3.0,
            "REMOTE_WRITE or REMOTE_ATOMIC was requested without LOCAL_WRITE, which verbs rejects with EINVAL.",
            None,
        );
        c.groups.extend(bad.iter().copied());
    }
    c.fixes = fixes::access();
    c.retry = Some("bounce");
    c
}

fn version_mismatch<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("version-mismatch");
    if let Some(e) = v.flag(Flag::AbiMismatch) {
        c.add(3.5, "libibverbs' provider does not support the kernel's uverbs ABI: user-space rdma-core and the kernel driver are from different releases.", Some(e));
    }
    if let Some(e) = v.flag(Flag::NoProvider) {
        c.add(
            2.0,
            "libibverbs found no user-space provider for the device (missing or mismatched rdma-core providers).",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::VersionMismatchProse) {
        c.add(1.5, "The report says the kernel driver and the user-space RDMA libraries do not match.", Some(e));
    }
    if let Some(e) = v.flag(Flag::DriverLoadFail) {
        c.add(
            0.3,
            "libibverbs could not load some provider drivers (often harmless, but check the one for your NIC).",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::DmabufUnsupported) {
        c.add(0.5, "ibv_reg_dmabuf_mr is not supported: the driver/rdma-core is too old for dmabuf.", Some(e));
    }
    // versions that differ between a failing and a working host
    let fails = v.fail_hosts();
    let good = v.good_hosts();
    for f in &fails {
        for g in &good {
            let (Some(a), Some(b)) = (v.c.hosts.get(*f), v.c.hosts.get(*g)) else {
                continue;
            };
            for (name, va) in &a.versions {
                if let Some(vb) = b.versions.get(name) {
                    if va != vb {
                        c.add(2.0, format!("{name} differs: {f} has {}, {g} has {}.", join(va), join(vb)), None);
                    }
                }
            }
        }
    }
    if c.score > 0.0 {
        c.groups = v.fails.clone();
    }
    c.fixes = fixes::version();
    c
}

fn join(s: &BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join("/")
}

fn address_invalid<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("address-invalid");
    let unm = v.fail_where(|k, _| k.mem == Some(MemKind::Unmapped));
    if !unm.is_empty() {
        c.add(3.5, format!("{} registration(s) of an address that is not mapped in the process.", sum(&unm)), None);
        c.groups.extend(unm.iter().copied());
    }
    let host_efault = v.fail_where(|k, _| k.errno == Some(EFAULT) && is_host_mem(k.mem));
    if !host_efault.is_empty() {
        c.add(
            2.5,
            format!(
                "{} registration(s) of host memory failed with EFAULT (Bad address): the range is not fully mapped.",
                sum(&host_efault)
            ),
            None,
        );
        c.groups.extend(host_efault.iter().copied());
    }
    let zero = v.fail_where(|_, g| g.zero_len_or_addr > 0);
    if !zero.is_empty() {
        c.add(2.0, "A registration with address 0 or length 0.", None);
        c.groups.extend(zero.iter().copied());
    }
    if c.groups.is_empty() && !v.gdr_context() {
        let unk = v.fail_where(|k, _| k.errno == Some(EFAULT) && unknown_mem(k.mem));
        if !unk.is_empty() {
            c.add(
                1.0,
                format!(
                    "{} registration(s) failed with EFAULT (Bad address) and nothing points at GPU memory.",
                    sum(&unk)
                ),
                None,
            );
            c.groups.extend(unk.iter().copied());
            if let Some(e) = v.flag(Flag::UmemGetFail) {
                c.add(0.5, "The kernel could not pin the pages (ib_umem_get failed).", Some(e));
            }
        }
    }
    c.fixes = fixes::address();
    c.retry = Some("bounce");
    c
}

fn permissions<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("permissions");
    let gs = v.fail_where(|k, _| matches!(k.errno, Some(EPERM) | Some(EACCES)));
    let zero_memlock = v.c.hosts.values().any(|h| h.memlock.contains_key(&Some(0)));
    if !gs.is_empty() && !zero_memlock {
        c.add(2.0, format!("{} registration(s) were refused with {}.", sum(&gs), describe_errnos(&gs)), None);
        c.groups = gs;
    }
    if let Some(e) = v.flag(Flag::DevPermission) {
        c.add(2.0, "Opening /dev/infiniband was not permitted.", Some(e));
    }
    if let (Some(e), Some(_)) = (v.flag(Flag::NoIpcLock), v.flag(Flag::Container)) {
        if c.score > 0.0 {
            c.add(1.0, "The job runs in a container without CAP_IPC_LOCK.", Some(e));
        }
    }
    c.fixes = fixes::permissions();
    c
}

/// The categories an errno, call, memory kind and library make likely, in the order a maintainer would
/// try them, with weights (added per failed registration, scaled by its share of the failures).
fn prior_of(k: &GroupKey, gpuish: bool) -> &'static [(&'static str, f64)] {
    let device = k.mem == Some(MemKind::Device) || (unknown_mem(k.mem) && (gpuish || k.lib.registers_gpu()));
    let host = is_host_mem(k.mem) || k.mem == Some(MemKind::FileReadonly);
    let iova = k.call.contains("iova");
    let dmabuf = k.call.contains("dmabuf");
    match k.errno {
        Some(ENOMEM) => &[("memlock-limit", 1.2), ("resource-exhaustion", 1.0), ("access-flags", 0.4)],
        Some(EAGAIN) => &[("resource-exhaustion", 1.4), ("memlock-limit", 0.6)],
        Some(EPERM) | Some(EACCES) => &[("permissions", 1.4), ("memlock-limit", 0.8)],
        Some(EOPNOTSUPP) | Some(errno::EPROTONOSUPPORT) if dmabuf => {
            &[("dmabuf-unsupported", 1.5), ("version-mismatch", 0.8), ("gpu-peer-memory", 0.5)]
        }
        Some(EOPNOTSUPP) | Some(errno::EPROTONOSUPPORT) if device => {
            &[("gpu-peer-memory", 1.3), ("dmabuf-unsupported", 0.7), ("version-mismatch", 0.5)]
        }
        // host memory the kernel will not pin for DMA (fs-dax files, device/IO mappings) is refused as
        // not supported too
        Some(EOPNOTSUPP) | Some(errno::EPROTONOSUPPORT) => {
            &[("version-mismatch", 1.0), ("address-invalid", 0.7), ("access-flags", 0.5)]
        }
        Some(EFAULT) if device => &[("gpu-peer-memory", 1.4), ("address-invalid", 0.6), ("access-flags", 0.3)],
        Some(EFAULT) if host => &[("address-invalid", 1.4), ("access-flags", 0.8)],
        Some(EFAULT) => &[("address-invalid", 1.2), ("gpu-peer-memory", 1.0), ("access-flags", 0.6)],
        Some(EINVAL) if device && iova => {
            &[("gpu-peer-memory", 1.4), ("relaxed-ordering", 0.6), ("version-mismatch", 0.5)]
        }
        Some(EINVAL) if device => &[("gpu-peer-memory", 1.4), ("version-mismatch", 0.6), ("access-flags", 0.3)],
        Some(EINVAL) if host && iova => &[("iova-alignment", 1.0), ("access-flags", 0.9), ("address-invalid", 0.6)],
        Some(EINVAL) if host => &[("access-flags", 1.0), ("address-invalid", 0.7), ("version-mismatch", 0.4)],
        Some(EINVAL) => &[("gpu-peer-memory", 1.0), ("access-flags", 0.9), ("address-invalid", 0.7)],
        Some(_) if device => &[("gpu-peer-memory", 1.0), ("resource-exhaustion", 0.6), ("version-mismatch", 0.5)],
        Some(_) => &[("resource-exhaustion", 0.8), ("version-mismatch", 0.6), ("memlock-limit", 0.4)],
        None if device => &[("gpu-peer-memory", 1.2), ("memlock-limit", 0.7), ("resource-exhaustion", 0.5)],
        None => &[("memlock-limit", 1.0), ("resource-exhaustion", 0.7), ("address-invalid", 0.5)],
    }
}

fn dmabuf_unsupported<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("dmabuf-unsupported");
    let gs = v.fail_where(|k, _| {
        k.call.contains("dmabuf") && matches!(k.errno, Some(EOPNOTSUPP) | Some(errno::EPROTONOSUPPORT))
    });
    if !gs.is_empty() {
        c.add(2.0, format!("{} ibv_reg_dmabuf_mr call(s) were refused as not supported: the RDMA stack (rdma-core, kernel, NIC driver) or the GPU driver cannot do dmabuf.", sum(&gs)), None);
        c.groups = gs;
        if let Some(e) = v.flag(Flag::DmabufUnsupported) {
            c.add(0.5, "", Some(e));
        }
    }
    c.fixes = fixes::dmabuf(v.prefix);
    c.retry = Some("dmabuf-to-va,bounce");
    c
}

/// Categories the input rules out, with the reason; they are not reported.
fn ruled_out(v: &View) -> Vec<RuledOut> {
    let mut out = Vec::new();
    let p = v.prefix;
    let hosts = v.fail_hosts();
    let unlimited = !hosts.is_empty()
        && hosts.iter().all(|h| v.memlock(h) == Some(None) || (v.memlock(h).is_none() && v.memlock("") == Some(None)));
    if unlimited {
        out.push(RuledOut {
            category: "memlock-limit",
            reason: "memlock is unlimited where the registrations failed".into(),
        });
    } else if v.flag(Flag::IpcLock).is_some() {
        out.push(RuledOut {
            category: "memlock-limit",
            reason: "the process had CAP_IPC_LOCK, which lifts the memlock limit".into(),
        });
    } else if v.failed_strategy("raise-memlock") {
        out.push(RuledOut {
            category: "memlock-limit",
            reason: "mrshim raised the memlock limit (raise-memlock) and the registrations still failed".into(),
        });
    }
    if v.failed_strategy("drop-relaxed-ordering") {
        out.push(RuledOut {
            category: "relaxed-ordering",
            reason: "mrshim retried without relaxed ordering (drop-relaxed-ordering) and every attempt failed".into(),
        });
    } else if v.flag(Flag::RoOffStillFails).is_some() || v.runs.iter().any(|r| r.ro == Some(false) && r.failed > 0) {
        out.push(RuledOut {
            category: "relaxed-ordering",
            reason: format!("with {p}_IB_PCI_RELAXED_ORDERING=0 the registrations still failed"),
        });
    } else {
        let calls: BTreeSet<&str> = v.fails.iter().map(|g| g.0.call.as_str()).collect();
        if calls.iter().any(|c| c.contains("iova"))
            && calls.contains("ibv_reg_mr")
            && v.fails.iter().any(|g| g.0.lib.is_ccl())
        {
            out.push(RuledOut {
                category: "relaxed-ordering",
                reason: "plain ibv_reg_mr (used without relaxed ordering) fails the same way as ibv_reg_mr_iova2"
                    .into(),
            });
        }
    }
    if v.failed_strategy("realign-iova") {
        out.push(RuledOut {
            category: "iova-alignment",
            reason: "mrshim realigned the iova (realign-iova) and the registrations still failed".into(),
        });
    }
    out
}

/// All findings, most likely first. Only categories with enough support are reported; failures nothing
/// explains end up in `unknown`.
pub fn findings(col: &Collector) -> Vec<Finding> {
    diagnose(col).0
}

/// The differential diagnosis: up to four hypotheses ranked by evidence and priors, and what was ruled out.
pub fn diagnose(col: &Collector) -> (Vec<Finding>, Vec<RuledOut>) {
    let v = View::new(col);
    if v.fails.is_empty() && v.flag(Flag::AbiMismatch).is_none() && v.flag(Flag::NoProvider).is_none() {
        return (vec![], vec![]);
    }
    let mut cands = vec![
        gpu_peer_memory(&v),
        memlock_limit(&v),
        resource_exhaustion(&v),
        relaxed_ordering(&v),
        iova_alignment(&v),
        access_flags(&v),
        version_mismatch(&v),
        address_invalid(&v),
        permissions(&v),
        dmabuf_unsupported(&v),
    ];
    // what the input says counts as evidence; the priors rank what it does not decide
    for c in cands.iter_mut() {
        c.evidence = c.score;
    }
    let total = sum(&v.fails).max(1) as f64;
    let gpuish = v.gdr_context();
    for g in &v.fails {
        for (cat, w) in prior_of(g.0, gpuish) {
            if let Some(c) = cands.iter_mut().find(|c| c.cat == *cat) {
                c.score += w * g.1.count as f64 / total;
                if !c.groups.iter().any(|x| x.0 == g.0) {
                    c.prior_groups.push(*g);
                }
            }
        }
    }
    // known issues the input matches
    let matcher = crate::known::Matcher::new(crate::known::table());
    let seen: BTreeSet<usize> = col.known_seen.keys().copied().collect();
    for i in matcher.matched(&seen) {
        let k = &matcher.issues[i];
        let Some(c) = cands.iter_mut().find(|c| c.cat == k.category) else { continue };
        let ev = matcher
            .owners
            .iter()
            .enumerate()
            .filter(|(_, o)| o.0 == i)
            .find_map(|(p, _)| col.known_seen.get(&p))
            .cloned();
        c.add(3.0, format!("Matches known issue {}: {} ({}).", k.id, k.title, k.source), ev.as_ref());
        c.evidence += 3.0;
        c.fixes.insert(0, k.fix.clone());
        c.known =
            Some(KnownRef { id: k.id.clone(), title: k.title.clone(), source: k.source.clone(), fix: k.fix.clone() });
        if c.groups.is_empty() && c.prior_groups.is_empty() {
            c.prior_groups = v.fails.clone();
        }
    }
    let out = ruled_out(&v);
    cands.retain(|c| !out.iter().any(|o| o.category == c.cat));
    if std::env::var_os("MRSHIM_ANALYZE_DEBUG").is_some() {
        for c in &cands {
            eprintln!("[debug] {} score {:.2} (evidence {:.2}): {}", c.cat, c.score, c.evidence, c.why.join(" | "));
        }
        for o in &out {
            eprintln!("[debug] ruled out {}: {}", o.category, o.reason);
        }
    }
    cands.retain(|c| c.score >= 0.3 && (!c.groups.is_empty() || !c.prior_groups.is_empty() || c.evidence >= 1.5));
    cands.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal));
    // a hypothesis held up by priors alone is listed only while it is within reach of the best one
    let best = cands.first().map_or(0.0, |c| c.score);
    cands.retain(|c| c.evidence >= 1.0 || c.score >= 0.15 * best);
    cands.truncate(4);
    for c in cands.iter_mut() {
        if c.groups.is_empty() {
            c.groups = std::mem::take(&mut c.prior_groups);
        }
    }
    let explained: BTreeSet<&GroupKey> = cands.iter().flat_map(|c| c.groups.iter().map(|g| g.0)).collect();
    let rest: Vec<G> = v.fails.iter().copied().filter(|g| !explained.contains(g.0)).collect();
    if !rest.is_empty() && cands.is_empty() {
        let mut u = Cand::new("unknown");
        u.score = 0.5;
        u.why.push(format!(
            "{} failed registration(s) with {} that the evidence does not explain.",
            sum(&rest),
            describe_errnos(&rest)
        ));
        u.groups = rest;
        u.fixes = fixes::unknown(v.prefix);
        cands.push(u);
    }
    let mut found: Vec<Finding> = cands.into_iter().map(|c| finish(&v, c)).collect();
    if let Some(first) = found.first_mut() {
        for o in &out {
            first.explanation.push_str(&format!(" Ruled out: {} ({}).", o.category, o.reason));
        }
    }
    (found, out)
}

fn finish(v: &View, c: Cand) -> Finding {
    let mut hosts: BTreeSet<String> = BTreeSet::new();
    let mut ranks: BTreeSet<i64> = BTreeSet::new();
    let mut count = 0;
    let mut evidence: Vec<Evid> = Vec::new();
    for (k, g) in &c.groups {
        if !k.host.is_empty() {
            hosts.insert(k.host.clone());
        }
        ranks.extend(g.ranks.iter().copied());
        count += g.count;
    }
    for (_, g) in c.groups.iter().take(6) {
        for e in g.evidence.iter().take(if c.groups.len() > 2 { 1 } else { 2 }) {
            let e = v.c.path_of(e);
            if !evidence.contains(&e) {
                evidence.push(e);
            }
        }
    }
    for e in &c.facts {
        let e = v.c.path_of(e);
        if !evidence.contains(&e) {
            evidence.push(e);
        }
    }
    let basis = if c.evidence >= 1.0 { "evidence" } else { "prior" };
    let mut why = c.why.clone();
    if basis == "prior" {
        why.insert(
            0,
            format!(
            "Best guess from the call, errno ({}), memory kind and library alone; nothing in the input confirms it.",
            describe_errnos(&c.groups)
        ),
        );
    }
    // which hosts fail and which do not
    let good = v.good_hosts();
    if !hosts.is_empty() && !good.is_empty() {
        // host lists in Slurm notation: at cluster scale the healthy list is hundreds of names
        let (hl, gl) = (
            mrshim_hostlist::compress(hosts.iter().map(String::as_str)),
            mrshim_hostlist::compress(good.iter().copied()),
        );
        why.push(format!("Only {hl} fail(s); {gl} registered without errors — compare the two (`mrshim doctor` on each, then `mrshim doctor --compare`)."));
    }
    let mems: BTreeSet<&str> = c.groups.iter().map(|g| mem_name(g.0.mem)).filter(|m| *m != "unknown").collect();
    if !mems.is_empty() {
        why.push(format!("Memory kind(s) involved: {}.", mems.into_iter().collect::<Vec<_>>().join(", ")));
    }
    let injected: u64 = c.groups.iter().map(|g| g.1.injected).sum();
    if injected > 0 {
        why.push(format!("{injected} of these failures were injected with MRSHIM_INJECT."));
    }
    let rescued: u64 = v.c.retries.iter().filter(|((_, ok), _)| *ok).map(|(_, n)| n).sum();
    if rescued > 0 && c.cat != "unknown" {
        let strategies: BTreeSet<&str> = v.c.retries.keys().filter(|(_, ok)| *ok).map(|(s, _)| s.as_str()).collect();
        why.push(format!(
            "mrshim rescued {rescued} call(s) with retry strategy {}.",
            strategies.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let mut fixes = c.fixes.clone();
    if let Some(r) = c.retry {
        fixes.push(format!(
            "keep the job running under mrshim: MRSHIM_RETRY={r} (or MRSHIM_RETRY=auto) with `mrshim exec`"
        ));
    }
    let errs = errnos_of(&c.groups);
    let calls = calls_of(&c.groups);
    let conf = (c.score / (c.score + 2.5)).clamp(0.05, 0.97);
    Finding {
        category: c.cat,
        confidence: (conf * 100.0).round() / 100.0,
        call: calls.first().cloned(),
        calls,
        errno: errs.first().map(|e| errno::name(e.0)),
        errnos: errs.iter().map(|e| errno::name(e.0)).collect(),
        hosts: hosts.into_iter().collect(),
        ranks: ranks.into_iter().collect(),
        count,
        evidence,
        explanation: why.join(" "),
        fixes,
        retry: c.retry.map(|r| format!("MRSHIM_RETRY={r}")),
        basis,
        check: fixes::check(c.cat),
        known_issue: c.known,
        score: c.score,
    }
}
