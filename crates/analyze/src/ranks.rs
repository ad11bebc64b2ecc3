//! Who is missing: every process (file, pid) with its host, rank, registrations and whether its shim log
//! ended with the exit summary. From these and the job's world size, the way PyTorch's Flight Recorder
//! tooling names ranks: the first to fail (by time), the ones that never reached a registration, and the
//! ones whose log stops without a summary: killed by a signal, crashed, or ended through `_exit()` (which
//! skips the exit handlers the summary is written from) — a log alone cannot tell which.
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use std::collections::BTreeSet;

#[derive(Debug, Clone, Default)]
pub struct Proc {
    pub host: String,
    pub rank: Option<i64>,
    /// The shim's config record was seen: a shim log, which ends with a summary on a normal exit.
    pub shim: bool,
    pub regs: u64,
    pub summary: Option<u64>,
    /// (time, timed) of the first failed application call.
    pub first_fail: Option<(u64, bool)>,
    /// Timed span of the application's registrations (ns).
    pub span: Option<(u64, u64)>,
    /// Calls mrshim registered: failed ones a retry attempt rescued, and learned ones.
    pub rescued: u64,
    /// Calls registered through a learned strategy up front (not in the collector's groups).
    pub learned: u64,
}

#[derive(Default)]
pub struct Procs {
    pub map: HashMap<(usize, Option<u32>), Proc>,
    pub world_size: BTreeSet<u64>,
    pub job_ids: BTreeSet<String>,
}

impl Procs {
    pub fn get(&mut self, file: usize, pid: Option<u32>, host: &str) -> &mut Proc {
        let p = self.map.entry((file, pid)).or_default();
        if p.host.is_empty() && !host.is_empty() {
            p.host = host.to_string();
        }
        p
    }
    pub fn started(&mut self, file: usize, pid: Option<u32>, host: &str, world: Option<u64>, job: Option<String>) {
        self.get(file, pid, host).shim = true;
        if let Some(w) = world {
            if self.world_size.len() < 8 {
                self.world_size.insert(w);
            }
        }
        if let Some(j) = job {
            if self.job_ids.len() < 8 {
                self.job_ids.insert(j);
            }
        }
    }
    /// One application registration (attempt 0) of process `(file, pid)` with its time (`None`: input
    /// order `order`).
    pub fn reg(&mut self, proc: (usize, Option<u32>), host: &str, rank: Option<i64>, t: (Option<u64>, u64), ok: bool) {
        let (t, order) = t;
        let p = self.get(proc.0, proc.1, host);
        p.regs += 1;
        if p.rank.is_none() {
            p.rank = rank;
        }
        if let Some(t) = t {
            let s = p.span.get_or_insert((t, t));
            *s = (s.0.min(t), s.1.max(t));
        }
        let t = (t.unwrap_or(order), t.is_some());
        if !ok && p.first_fail.is_none_or(|f| t.0 < f.0) {
            p.first_fail = Some(t);
        }
    }
}

/// One rank named in the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RankRef {
    pub host: String,
    pub rank: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RankReport {
    /// World size as the records tell it (several values: a note).
    pub world_size: Option<u64>,
    pub job_id: Option<String>,
    /// Processes seen, and how many of them were shim logs.
    pub processes: usize,
    pub shim_logs: usize,
    /// The first failed application call by time.
    pub first_failure: Option<RankRef>,
    pub first_failure_ns: Option<u64>,
    /// Ranks below the world size of which no log was read: they never reached a registration under
    /// the shim (the shim opens its log at the first call).
    pub no_log: Vec<i64>,
    /// Shim logs without any call: started, never registered, no summary.
    pub no_registration: Vec<RankRef>,
    /// Shim logs that stop without the exit summary: killed by a signal, crashed, or ended through
    /// `_exit()` (a forked child's usual end, which runs no exit handlers). Not "killed": the log
    /// does not say which.
    pub no_summary: Vec<RankRef>,
    /// The same list under its first name (`mrshim_analyze: 1` never renames a field); it never
    /// meant a kill was seen.
    pub killed: Vec<RankRef>,
    pub notes: Vec<String>,
}

impl RankReport {
    pub fn new(p: &Procs) -> RankReport {
        let mut r = RankReport {
            world_size: p.world_size.iter().next_back().copied(),
            job_id: p.job_ids.iter().next().cloned(),
            processes: p.map.len(),
            ..Default::default()
        };
        if p.world_size.len() > 1 {
            r.notes.push(format!("the logs disagree on the world size ({:?}); the largest is used", p.world_size));
        }
        if p.job_ids.len() > 1 {
            r.notes.push(format!(
                "logs of {} jobs were read together ({})",
                p.job_ids.len(),
                p.job_ids.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let mut procs: Vec<&Proc> = p.map.values().collect();
        procs.sort_by(|a, b| (a.rank, &a.host).cmp(&(b.rank, &b.host)));
        let rref = |x: &Proc| RankRef { host: x.host.clone(), rank: x.rank };
        // first failure: timed failures beat input order
        let first = procs
            .iter()
            .filter_map(|x| x.first_fail.map(|f| (!f.1, f.0, *x)))
            .min_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        // a failure that names no host, no rank and no time (a kernel line, a pasted error) says
        // nothing about who failed first: no "? rank ?"
        if let Some((untimed, t, x)) =
            first.filter(|(untimed, _, x)| !x.host.is_empty() || x.rank.is_some() || !untimed)
        {
            r.first_failure = Some(rref(x));
            r.first_failure_ns = (!untimed).then_some(t);
        }
        let mut seen: BTreeSet<i64> = BTreeSet::new();
        for x in &procs {
            if let Some(k) = x.rank {
                seen.insert(k);
            }
            if !x.shim {
                continue;
            }
            r.shim_logs += 1;
            if x.summary.is_some() {
                continue;
            }
            if x.regs == 0 {
                r.no_registration.push(rref(x));
            } else {
                r.no_summary.push(rref(x));
            }
        }
        r.killed = r.no_summary.clone();
        if let Some(w) = r.world_size {
            // only meaningful when the logs are the job's shim logs (ranks known)
            if r.shim_logs > 0 && !seen.is_empty() {
                r.no_log = (0..w as i64).filter(|k| !seen.contains(k)).collect();
            }
        }
        r
    }
    pub fn is_empty(&self) -> bool {
        self.no_log.is_empty() && self.no_registration.is_empty() && self.no_summary.is_empty()
    }
}
