//! The per-host view of a job: for every host its ranks, calls, failures by (call, errno), memlock,
//! memory kinds and versions, failing hosts first. What the text's host lists, `--json`'s `hosts` and the
//! report's matrix and table are made of.
use crate::collect::Collector;
use crate::errno;
use crate::ranks::RankReport;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default, Serialize)]
pub struct HostRow {
    pub host: String,
    /// Ranks seen on the host (capped per group, see collect.rs).
    pub ranks: Vec<i64>,
    /// Application registration calls, and how many failed.
    pub calls: u64,
    pub failed: u64,
    /// "call errno" -> failures, e.g. "ibv_reg_mr ENOMEM".
    pub failures: BTreeMap<String, u64>,
    /// Soft memlock values seen (bytes; null = unlimited).
    pub memlock: Vec<Option<u64>>,
    /// Memory kind -> registrations.
    pub mem_kinds: BTreeMap<String, u64>,
    /// Library/driver/kernel versions from the logs and doctor reports.
    pub versions: BTreeMap<String, Vec<String>>,
    /// Calls a retry strategy of the shim registered after all.
    pub rescued: u64,
    /// Ranks on this host whose log ends without a summary.
    /// Ranks whose log ends without the exit summary.
    pub no_summary: u64,
    /// The same count under its first name (fields are never renamed within a schema version).
    pub killed: u64,
    /// Time of the host's first failure (ns, when the records are timed).
    pub first_failure_ns: Option<u64>,
}

impl HostRow {
    pub fn failing(&self) -> bool {
        self.failed > 0
    }
}

/// "ibv_reg_mr ENOMEM" for a failure column; an unknown errno reads "?".
pub fn failure_key(call: &str, e: Option<i32>) -> String {
    format!("{call} {}", e.map(errno::name).unwrap_or_else(|| "?".into()))
}

/// Rows for every named host: failing hosts first (most failures first, then by name), then the others
/// by name. Evidence without a host (prose, a pasted line) is left out.
pub fn rows(c: &Collector, ranks: &RankReport) -> Vec<HostRow> {
    let mut m: BTreeMap<&str, HostRow> = BTreeMap::new();
    let mut rank_sets: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
    for (k, g) in &c.groups {
        if k.host.is_empty() {
            continue;
        }
        let row = m.entry(k.host.as_str()).or_default();
        row.calls += g.count;
        if !k.ok {
            row.failed += g.count;
            *row.failures.entry(failure_key(&k.call, k.errno)).or_default() += g.count;
        }
        if let Some(mk) = k.mem {
            *row.mem_kinds.entry(mk.name().to_string()).or_default() += g.count;
        }
        rank_sets.entry(k.host.as_str()).or_default().extend(g.ranks.iter().copied());
    }
    for (h, hf) in &c.hosts {
        if h.is_empty() {
            continue;
        }
        let row = m.entry(h.as_str()).or_default();
        row.memlock = hf.memlock.keys().copied().collect();
        row.versions = hf.versions.iter().map(|(k, v)| (k.clone(), v.iter().cloned().collect())).collect();
    }
    for p in c.procs.map.values() {
        if p.host.is_empty() {
            continue;
        }
        let row = m.entry(p.host.as_str()).or_default();
        row.rescued += p.rescued;
        row.calls += p.learned;
        if let Some(r) = p.rank {
            rank_sets.entry(p.host.as_str()).or_default().insert(r);
        }
        if let Some((t, true)) = p.first_fail {
            row.first_failure_ns = Some(row.first_failure_ns.map_or(t, |x| x.min(t)));
        }
    }
    for k in &ranks.no_summary {
        if let Some(row) = m.get_mut(k.host.as_str()) {
            row.no_summary += 1;
            row.killed += 1;
        }
    }
    let mut out: Vec<HostRow> = m
        .into_iter()
        .map(|(h, mut row)| {
            row.host = h.to_string();
            row.ranks = rank_sets.remove(h).unwrap_or_default().into_iter().collect();
            row
        })
        .collect();
    out.sort_by(|a, b| b.failed.min(1).cmp(&a.failed.min(1)).then(b.failed.cmp(&a.failed)).then(a.host.cmp(&b.host)));
    out
}
