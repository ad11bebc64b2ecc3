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

mod likelihood;
mod order;
pub(crate) use order::printed_sizes;
mod rules;
mod violation;
use rules::*;
#[cfg(test)]
mod tests;

pub const CATEGORIES: [&str; 12] = [
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
    "odp-unsupported",
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
    /// On the first finding when nothing in the input decides it: `category: check` for each
    /// cause listed, most likely first — what the user runs to decide between them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decide: Vec<String>,
    /// A warning-only finding: no registration failed, a stack warned that registrations will
    /// (`count` 0, no call or errno; the warning lines are the evidence).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warning: bool,
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

/// One group of calls (its key and counts), as the rules pass them around.
type GroupRef<'a> = (&'a GroupKey, &'a Group);

/// What the rules look at, computed once.
pub struct View<'a> {
    pub c: &'a Collector,
    pub fails: Vec<GroupRef<'a>>,
    pub oks: Vec<GroupRef<'a>>,
    pub runs: Vec<Run>,
    pub prefix: &'static str,
}

fn is_host_mem(m: Option<MemKind>) -> bool {
    matches!(m, Some(MemKind::HostAnon | MemKind::HostStack | MemKind::Hugepage | MemKind::FileWritable))
}
fn unknown_mem(m: Option<MemKind>) -> bool {
    matches!(m, None | Some(MemKind::Unknown))
}
fn sum(gs: &[GroupRef]) -> u64 {
    gs.iter().map(|g| g.1.count).sum()
}

impl<'a> View<'a> {
    pub fn new(c: &'a Collector) -> View<'a> {
        let mut fails: Vec<GroupRef> = c.groups.iter().filter(|g| !g.0.ok).collect();
        let mut oks: Vec<GroupRef> = c.groups.iter().filter(|g| g.0.ok).collect();
        fails.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        oks.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        let mccl = c.hosts.values().any(|h| h.libs.contains(&Lib::Mccl));
        View { c, fails, oks, runs: c.resolved_runs(), prefix: if mccl { "MCCL" } else { "NCCL" } }
    }
    fn flag(&self, f: Flag) -> Option<&'a Evid> {
        self.c.hosts.values().find_map(|h| h.flags.get(&f).map(|x| &x.1))
    }
    fn fail_where(&self, p: impl Fn(&GroupKey, &Group) -> bool) -> Vec<GroupRef<'a>> {
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
    /// GPU memory is being registered, or a library that mostly registers GPU memory failed.
    fn gdr_context(&self) -> bool {
        self.gdr_evidence() || self.gpu_library()
    }
    /// The input says GPU memory is registered (GPUDirect RDMA on, a GPU context line): evidence.
    fn gdr_evidence(&self) -> bool {
        self.flag(Flag::GdrOn).is_some()
            || self.flag(Flag::GpuContext).is_some()
            || self.runs.iter().any(|r| r.gdr == Some(true))
    }
    /// A failing library that usually registers GPU memory (RCCL, MCCL, NVSHMEM, Mooncake, NIXL...):
    /// a prior only — they register host memory too, and the name does not say which this was.
    fn gpu_library(&self) -> bool {
        self.fails
            .iter()
            .any(|g| matches!(g.0.lib, Lib::Mccl | Lib::Rccl) || g.0.lib.registers_gpu() && g.0.lib != Lib::Nccl)
    }
    /// Failed application calls a retry strategy then registered (or a learned one registered).
    fn rescued_by(&self, s: &str) -> u64 {
        self.c.retries.get(&(s.to_string(), true)).copied().unwrap_or(0)
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
    groups: Vec<GroupRef<'a>>,
    /// Failures this category is a plausible cause of by prior only.
    prior_groups: Vec<GroupRef<'a>>,
    known: Option<KnownRef>,
    facts: Vec<Evid>,
    why: Vec<String>,
    fixes: Vec<String>,
    retry: Option<&'static str>,
    /// Part of `score` that is a reading of the call, errno and memory kind rather than something
    /// the input shows (not counted as evidence).
    hint: f64,
    /// The evidence puts this cause among the first two, whatever the priors say.
    top_two: bool,
    /// A sentence for the end of the explanation (what the stack's defaults mean here).
    note: Option<String>,
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
            hint: 0.0,
            top_two: false,
            note: None,
        }
    }
    /// Like [`Cand::add`], but a reading, not an observation: it ranks, it does not confirm.
    fn guess(&mut self, w: f64, why: impl Into<String>) {
        self.add(w, why, None);
        self.hint += w;
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

fn errnos_of(gs: &[GroupRef]) -> Vec<(i32, u64)> {
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

fn describe_errnos(gs: &[GroupRef]) -> String {
    let v = errnos_of(gs);
    if v.is_empty() {
        return "an unreported errno".into();
    }
    v.iter().map(|(e, _)| format!("{} ({})", errno::name(*e), errno::text(*e))).collect::<Vec<_>>().join(", ")
}

fn calls_of(gs: &[GroupRef]) -> Vec<String> {
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
    let observed_mapped = v.fails.iter().all(|(_, g)| g.mapped == g.count && g.zero_len_or_addr == 0);
    if !v.fails.is_empty() && observed_mapped {
        out.push(RuledOut {
            category: "address-invalid",
            reason: "every failed range was mapped in full when it failed (mem_fully_mapped: true)".into(),
        });
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
    let warned = if v.fails.is_empty() && v.flag(Flag::AbiMismatch).is_none() && v.flag(Flag::NoProvider).is_none() {
        warned_groups(col)
    } else {
        vec![]
    };
    let (mut found, out) = if warned.is_empty() { diagnose_failures(&v, col) } else { diagnose_warnings(col, &warned) };
    if let Some(f) = violation::bounce_violation(col, v.prefix) {
        found.insert(0, f);
    }
    (found, out)
}

/// The call name of a warning-only group: no call failed, a stack warned at start-up.
pub const WARNED_CALL: &str = "(start-up warning)";

/// The stacks' warnings that predict registration failures, and what each says. Open MPI's openib
/// [init-fail-no-mem] / [reg mem limit low] help texts (help-mpi-btl-openib.txt; with their table the
/// parser counts them as the failure they stand for), Ceph's verify_prereq, UCX's mlock warning
/// (`LockedMemWarn`, `RegLimitWarn`); libibverbs' check_memlock_limit (init.c: soft limit <= 32 KiB,
/// not for root) and UCX's uct_ib_memlock_limit_msg after an ENOMEM from any verb — QP, CQ, SRQ
/// creation too (`MemlockWarned`); GASNet-EX's physmem probe report when the nodes' pinnable memory
/// differs (ibv-conduit gasnet_core.c gasnetc_physmem_report: `PinnableShort`).
const WARNINGS: [(Flag, &str); 4] = [
    (Flag::LockedMemWarn, "the locked-memory limit is too small for RDMA"),
    (Flag::MemlockWarned, "the locked-memory limit (RLIMIT_MEMLOCK) will limit memory registrations"),
    (Flag::RegLimitWarn, "the driver lets it register only part of physical memory (the HCA's translation table)"),
    (Flag::PinnableShort, "its probe found some nodes able to pin (register) much less memory than others, and holds every node to the smallest (memlock or the HCA's limits differ between nodes)"),
];

/// One group per host whose stack printed a warning of [`WARNINGS`]: what a warning-only input
/// is diagnosed from, as if it were one failure of unknown errno and memory.
fn warned_groups(col: &Collector) -> Vec<(GroupKey, Group)> {
    let mut out = Vec::new();
    for (h, hf) in &col.hosts {
        let mut g = Group::default();
        for (f, _) in WARNINGS {
            if let Some((_, e)) = hf.flags.get(&f) {
                if !g.evidence.contains(e) {
                    g.evidence.push(e.clone());
                }
            }
        }
        if g.evidence.is_empty() {
            continue;
        }
        g.count = 1;
        let key = GroupKey {
            host: h.clone(),
            call: WARNED_CALL.into(),
            errno: None,
            mem: None,
            lib: Lib::Text,
            ok: false,
            relaxed: None,
            odp: false,
        };
        out.push((key, g));
    }
    out
}

/// The warning-only diagnosis: no registration failed, but a stack warned that they will. The same
/// rules and likelihood table rank the causes (each warning as one failure of unknown errno and
/// memory, whose likelihood row is the warnings' own); the findings say that nothing failed.
fn diagnose_warnings(col: &Collector, warned: &[(GroupKey, Group)]) -> (Vec<Finding>, Vec<RuledOut>) {
    let mut v = View::new(col);
    v.fails = warned.iter().map(|(k, g)| (k, g)).collect();
    let (mut found, out) = diagnose_failures(&v, col);
    // the warnings speak of limits: the causes of their row only (a rule that reads the stand-in as
    // a failure of GPU memory, say, would assert what nothing showed)
    let causes = likelihood::row(&warned[0].0, false);
    found.retain(|f| causes.iter().any(|(c, _)| *c == f.category));
    let said: Vec<&str> =
        WARNINGS.iter().filter(|(f, _)| col.hosts.values().any(|h| h.flags.contains_key(f))).map(|(_, w)| *w).collect();
    let lead = format!("No failed registration seen; the stack warned that {}.", said.join(", and that "));
    for (i, f) in found.iter_mut().enumerate() {
        f.warning = true;
        f.count = 0;
        f.call = None;
        f.calls.clear();
        f.errno = None;
        f.errnos.clear();
        // the failure's "best guess" sentence names a call and errno there were none of
        if let (Some(a), Some(b)) = (f.explanation.find("Best guess from the call"), f.explanation.find(GUESS_END)) {
            f.explanation.replace_range(a..b, "Best guess from the warning alone; ");
        }
        f.explanation = if i == 0 {
            format!("{lead} If registrations fail (or the job hangs or crashes in them), this is the cause it most likely points at. {}", f.explanation)
        } else {
            format!("No failed registration seen (a warning only). {}", f.explanation)
        };
    }
    (found, out)
}

/// The differential diagnosis of failed registrations (see [`diagnose`]).
fn diagnose_failures(v: &View, col: &Collector) -> (Vec<Finding>, Vec<RuledOut>) {
    if v.fails.is_empty() && v.flag(Flag::AbiMismatch).is_none() && v.flag(Flag::NoProvider).is_none() {
        return (vec![], vec![]);
    }
    let mut cands = vec![
        gpu_peer_memory(v),
        memlock_limit(v),
        resource_exhaustion(v),
        relaxed_ordering(v),
        iova_alignment(v),
        access_flags(v),
        version_mismatch(v),
        address_invalid(v),
        permissions(v),
        dmabuf_unsupported(v),
        odp_unsupported(v),
    ];
    rescues(v, &mut cands);
    tried(v, &mut cands);
    // the order between two causes the output both supports (findings/order.rs)
    order::enomem(v, &mut cands);
    order::efault_bar_mapping(v, &mut cands);
    // what the input says counts as evidence; the priors rank what it does not decide
    for c in cands.iter_mut() {
        c.evidence = c.score - c.hint;
    }
    let total = sum(&v.fails).max(1) as f64;
    let gpuish = v.gdr_context();
    for g in &v.fails {
        for (cat, p) in likelihood::row(g.0, gpuish) {
            if let Some(c) = cands.iter_mut().find(|c| c.cat == *cat) {
                c.score += likelihood::PRIOR_SCALE * p * g.1.count as f64 / total;
                if !c.groups.iter().any(|x| x.0 == g.0) {
                    c.prior_groups.push(*g);
                }
            }
        }
    }
    // known issues the input matches
    let matcher = crate::known::Matcher::new(crate::known::table());
    let seen: BTreeSet<usize> = col.known_seen.keys().copied().collect();
    // the versions the input names, any host (a job runs one stack)
    let mut named: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for hf in col.hosts.values() {
        for (k, vs) in &hf.versions {
            named.entry(k.clone()).or_default().extend(vs.iter().cloned());
        }
    }
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
        let w = match crate::known::verdict(k, &named) {
            crate::known::Verdict::OutOfRange(why) => {
                // a version past the fix (or before the regression) rules the issue out
                c.why.push(format!("Not known issue {} ({}): {why}.", k.id, k.title));
                continue;
            }
            crate::known::Verdict::NotNamed if k.requires_version => continue,
            crate::known::Verdict::NotNamed => {
                c.add(3.0, format!("Matches known issue {}: {} ({}).", k.id, k.title, k.source), ev.as_ref());
                3.0
            }
            crate::known::Verdict::InRange(why) => {
                // the input names a version the issue affects: its regression comes first or second
                c.add(
                    4.5,
                    format!(
                        "Matches known issue {}: {} ({}); the version in use is affected: {why}.",
                        k.id, k.title, k.source
                    ),
                    ev.as_ref(),
                );
                c.top_two = true;
                4.5
            }
        };
        c.evidence += w;
        c.fixes.insert(0, k.fix.clone());
        c.known =
            Some(KnownRef { id: k.id.clone(), title: k.title.clone(), source: k.source.clone(), fix: k.fix.clone() });
        if c.groups.is_empty() && c.prior_groups.is_empty() {
            c.prior_groups = v.fails.clone();
        }
    }
    let out = ruled_out(v);
    cands.retain(|c| !out.iter().any(|o| o.category == c.cat));
    if std::env::var_os("MRSHIM_ANALYZE_DEBUG").is_some() {
        for g in &v.fails {
            eprintln!(
                "[debug] group {} x{}: row {:?}",
                likelihood::observed(g.0, gpuish),
                g.1.count,
                likelihood::row(g.0, gpuish)
            );
        }
        for c in &cands {
            eprintln!("[debug] {} score {:.2} (evidence {:.2}): {}", c.cat, c.score, c.evidence, c.why.join(" | "));
        }
        for o in &out {
            eprintln!("[debug] ruled out {}: {}", o.category, o.reason);
        }
    }
    cands.retain(|c| c.score >= 0.3 && (!c.groups.is_empty() || !c.prior_groups.is_empty() || c.evidence >= 1.5));
    cands.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal));
    // a hypothesis held up by priors alone is listed while it is within reach of the best one, and
    // among the first three when the failures were read from a stack's text: evidence read by rules
    // can be wrong about a report nobody here read, so the differential keeps the failure's next most
    // likely causes (mrshim's own records observed the call, the memory and any rescue: not padded)
    let best = cands.first().map_or(0.0, |c| c.score);
    let read = v.fails.iter().any(|g| g.0.lib != Lib::Shim);
    let mut rank = 0;
    cands.retain(|c| {
        rank += 1;
        (read && rank <= 3) || c.evidence >= 1.0 || c.score >= 0.15 * best
    });
    // a cause the evidence puts among the first two stays there
    if let Some(i) = cands.iter().position(|c| c.top_two) {
        if i > 1 {
            let c = cands.remove(i);
            cands.insert(1, c);
        }
    }
    cands.truncate(4);
    for c in cands.iter_mut() {
        if c.groups.is_empty() {
            c.groups = std::mem::take(&mut c.prior_groups);
        }
    }
    let explained: BTreeSet<&GroupKey> = cands.iter().flat_map(|c| c.groups.iter().map(|g| g.0)).collect();
    let rest: Vec<GroupRef> = v.fails.iter().copied().filter(|g| !explained.contains(g.0)).collect();
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
    let mut found: Vec<Finding> = cands.into_iter().map(|c| finish(v, c)).collect();
    undecided(v, &mut found, gpuish, &out);
    if let Some(first) = found.first_mut() {
        for o in &out {
            first.explanation.push_str(&format!(" Ruled out: {} ({}).", o.category, o.reason));
        }
    }
    (found, out)
}

/// How the "Best guess" sentence of a finding that rests on priors ends.
const GUESS_END: &str = "nothing in the input confirms it.";

/// The statement on the first finding when nothing in the input confirms it.
pub const NOTHING_DECIDES: &str = "Nothing in this output decides it";

/// When the first finding rests on the likelihood table alone, say so, and give the checks that
/// would decide between the causes listed (one per finding, most likely first), and between them
/// and the other causes the kernel's path gives for that failure that were too unlikely to list
/// (EFAULT from a Mooncake process: GPU memory first by the library, but a read-only mapping
/// registered for writing gives the same line — its check is there, the cause not asserted).
fn undecided(v: &View, found: &mut [Finding], gpuish: bool, out: &[RuledOut]) {
    let Some(first) = found.first() else { return };
    if first.basis != "prior" || first.category == "unknown" {
        return;
    }
    let what = v.fails.first().map_or("the failure".to_string(), |g| likelihood::observed(g.0, gpuish));
    let mut cats: Vec<&str> = found.iter().take(3).map(|f| f.category).collect();
    let mut decide: Vec<String> = found.iter().take(3).map(|f| format!("{}: {}", f.category, f.check)).collect();
    if let Some(g) = v.fails.first() {
        for (cat, _) in likelihood::row(g.0, gpuish) {
            if !found.iter().any(|f| f.category == *cat) && !out.iter().any(|o| o.category == *cat) {
                cats.push(cat);
                decide.push(format!("{cat} (less likely, not listed): {}", crate::fixes::check(cat)));
            }
        }
    }
    let text = format!(
        "{NOTHING_DECIDES}: no line confirms or rules out {} for what was observed ({what}), so they are ranked by how likely each cause is to give that failure (the kernel's and the stacks' documented failure modes). The checks below decide.",
        cats.join(", ")
    );
    // after the "Best guess" sentence every finding that rests on priors opens with
    let f = &mut found[0];
    match f.explanation.find(GUESS_END).map(|i| i + GUESS_END.len()) {
        Some(i) => f.explanation.insert_str(i, &format!(" {text}")),
        None => f.explanation = format!("{text} {}", f.explanation),
    }
    f.decide = decide;
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
    if let Some(n) = &c.note {
        why.push(n.clone());
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
        decide: vec![],
        warning: false,
        score: c.score,
    }
}
