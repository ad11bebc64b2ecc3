//! Evidence aggregation with bounded memory: registration attempts grouped by host, call, errno, memory
//! kind, library and relaxed-ordering; facts per host; per-process "runs" (what env a process ran with and
//! whether it failed or completed); a bounded timeline sample and a size histogram for the report.
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use mrshim_record::{CallResult, MemKind};
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

const MAX_EVIDENCE: usize = 3;
/// The size histogram's series (see the collector's `hist`).
pub const FAILED: usize = 0;
pub const SUCCEEDED: usize = 1;
pub const RESCUED: usize = 2;
const MAX_POINTS: usize = 20_000;
const MAX_SET: usize = 4096;
/// Failures from lines that name no process held until the end of the input; past it each further
/// one is compared with what the lines with a pid showed so far.
const MAX_PENDING: usize = 4096;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Evid {
    pub file: String,
    pub line: u64,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub host: String,
    pub call: String,
    pub errno: Option<i32>,
    pub mem: Option<MemKind>,
    pub lib: Lib,
    pub ok: bool,
    pub relaxed: Option<bool>,
    /// A failure that asked for On-Demand Paging: a group of its own, so an ODP finding's count
    /// and evidence are those failures only, not every failure sharing its errno.
    pub odp: bool,
}

impl Ord for GroupKey {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (&self.host, &self.call, self.errno, self.mem, self.lib, self.ok, self.relaxed, self.odp)
            .cmp(&(&o.host, &o.call, o.errno, o.mem, o.lib, o.ok, o.relaxed, o.odp))
    }
}
impl PartialOrd for GroupKey {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Debug, Default, Clone)]
pub struct Group {
    pub count: u64,
    pub ranks: BTreeSet<i64>,
    pub access: BTreeSet<u32>,
    pub max_len: u64,
    pub iova_misaligned: u64,
    pub over_memlock: u64,
    pub injected: u64,
    pub zero_len_or_addr: u64,
    /// Failures whose range was observed fully mapped.
    pub mapped: u64,
    /// Failures that asked for IBV_ACCESS_ON_DEMAND.
    pub odp: u64,
    pub evidence: Vec<Evid>,
}

#[derive(Debug, Default, Clone)]
pub struct HostFacts {
    pub flags: BTreeMap<Flag, (u64, Evid)>,
    pub env: BTreeMap<String, (String, Evid)>,
    pub versions: BTreeMap<String, BTreeSet<String>>,
    /// Distinct soft memlock values seen (`None` = unlimited) with where.
    pub memlock: BTreeMap<Option<u64>, Evid>,
    pub max_map_count: Option<(u64, Evid)>,
    pub libs: BTreeSet<Lib>,
}

#[derive(Debug, Default, Clone)]
pub struct Run {
    pub host: Option<String>,
    pub ro: Option<bool>,
    pub gdr: Option<bool>,
    pub ib_disabled: bool,
    pub failed: u64,
    pub ok_regs: u64,
    pub done: bool,
    pub evid: Option<Evid>,
}

/// What a timeline point shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    Ok,
    Failed,
    /// A retry attempt (or a learned strategy) that registered what the application's call could not.
    Rescued,
    Dereg,
}

#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub host: String,
    pub rank: Option<i64>,
    /// Nanoseconds when known, otherwise the event's order in the input.
    pub t: u64,
    pub timed: bool,
    pub length: u64,
    pub mark: Mark,
}

impl Point {
    pub fn failed(&self) -> bool {
        self.mark == Mark::Failed
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct FileStat {
    pub path: String,
    pub lines: u64,
    pub bytes: u64,
    pub recognised: u64,
    pub binary_lines: u64,
    pub lossy_lines: u64,
    pub truncated_lines: u64,
    pub error: Option<String>,
}

/// The part of a group key that is cheap to hash; host and call are the outer map levels so that a
/// lookup needs no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SmallKey {
    errno: Option<i32>,
    mem: Option<MemKind>,
    lib: Lib,
    ok: bool,
    relaxed: Option<bool>,
    odp: bool,
}

/// Per host (by [`Collector::host_id`]): call -> small key -> group.
type Nested = Vec<HashMap<String, HashMap<SmallKey, Group>>>;

/// Bounce coherence violations of one process (docs/bounce.md, Run-time detection).
#[derive(Debug, Default, Clone)]
pub struct Violations {
    /// From WARN lines, from records (the same violation may be in both).
    pub counts: [u64; 2],
    pub kinds: Vec<String>,
    pub evidence: Vec<Evid>,
}

impl Violations {
    /// Violations of the process: its records, or its lines where it left no records.
    pub fn count(&self) -> u64 {
        self.counts[0].max(self.counts[1])
    }
}

#[derive(Default)]
pub struct Collector {
    /// Bounce coherence violations per (host, pid).
    pub violations: BTreeMap<(String, Option<u32>), Violations>,
    pub files: Vec<FileStat>,
    /// Filled by [`Collector::finish`].
    pub groups: HashMap<GroupKey, Group>,
    raw: Nested,
    pub hosts: BTreeMap<String, HostFacts>,
    /// Every host name seen in a registration, numbered once: the per-event maps are keyed by the
    /// number, so one hash of the name per event replaces a lookup per map.
    host_ids: HashMap<String, u32>,
    host_names: Vec<String>,
    /// Per host number: the libraries already put in its [`HostFacts::libs`] (bit = `Lib as u32`).
    host_libs: Vec<u64>,
    /// (host number, pid) -> rank.
    ranks: HashMap<(u32, u32), i64>,
    /// (file, pid) -> run; pid None holds the file-wide defaults (env dumps). Filled by
    /// [`Collector::finish`] from `live_runs` (a hash lookup per event instead of a tree search).
    pub runs: BTreeMap<(usize, Option<u32>), Run>,
    live_runs: HashMap<(usize, Option<u32>), Run>,
    pub retries: BTreeMap<(String, bool), u64>,
    /// Failed application calls a retry attempt then registered (the application saw success).
    pub rescued_failures: u64,
    /// Application calls registered through a learned strategy applied up front.
    pub learned_ok: u64,
    pub points: Vec<Point>,
    point_stride: u64,
    point_seen: u64,
    /// Failed points in `points` (the ones a halving keeps).
    point_fails: usize,
    /// Points not kept because the timeline was full of failures.
    pub points_dropped: u64,
    /// Application calls by power-of-two size bucket and how they ended: [`FAILED`, `SUCCEEDED`,
    /// `RESCUED`] (a call mrshim rescued, or registered through a learned strategy, is a rescue,
    /// not also a failure: the application got its MR).
    pub hist: Vec<[u64; 3]>,
    pub notes: Vec<String>,
    pub order: u64,
    pub doctor_reports: u64,
    pub procs: crate::ranks::Procs,
    /// Earliest and latest record time (ns) of any registration, rescue or deregistration.
    pub time_range: Option<(u64, u64)>,
    /// Known-issue patterns seen (index into the matcher's patterns) and where first.
    pub known_seen: BTreeMap<usize, Evid>,
    /// Per process (host, pid): failures seen in each kind of output ([`Channel`]: a record, a MRSHIM
    /// WARN line, the MRSHIM summary, NCCL's line, UCX's line, a transfer engine's glog line). One
    /// failure shows up in several of them, under different call names and errno wordings; the
    /// channel that saw the most stands for the process.
    seen_by_source: HashMap<(u32, u32), ChannelCounts>,
    /// Failures counted from lines that name their process, per host number (the sum over the
    /// host's processes of their best channel), and over all hosts.
    named_by_host: Vec<u64>,
    named_all: u64,
    /// Failures seen in lines that name no process (an application's own error line), per scope
    /// (the host's number, `None` for lines without a host) and channel. They are the same failures
    /// again as long as there are no more of them than the lines with a pid of their scope showed.
    anon_seen: HashMap<(Option<u32>, Channel), u64>,
    /// Per channel: lines with a host that named no process and were found to be failures the
    /// lines with a pid already showed (those failures are not there for host-less lines again).
    anon_used: HashMap<Channel, u64>,
    /// Failures from lines without a process, held until every input is read (up to
    /// [`MAX_PENDING`]) so that where and in what order the lines with a pid come does not matter:
    /// the event, its file and its place in the input.
    pending: Vec<(RegEv, usize, u64)>,
    /// Failures not counted because another kind of output of the same process already had them.
    pub duplicates: u64,
    /// `ibv_rereg_mr` records: all, refused by mrshim, failed.
    pub rereg: [u64; 3],
}

/// A kind of output a failure was seen in: where the line came from and which library printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Channel(crate::event::Source, Lib);

/// Failures counted per [`Channel`] of one process: the first channel in place (a process's
/// failures mostly come through one kind of output, and the map's entry then holds all there is
/// to read, no second lookup in memory), the others after it.
#[derive(Default)]
struct ChannelCounts {
    first: Option<(Channel, u64)>,
    rest: Vec<(Channel, u64)>,
}

/// Counts one more sighting on `ch`; returns its count.
fn bump(v: &mut ChannelCounts, ch: Channel) -> u64 {
    match &mut v.first {
        None => {
            v.first = Some((ch, 1));
            return 1;
        }
        Some(x) if x.0 == ch => {
            x.1 += 1;
            return x.1;
        }
        Some(_) => {}
    }
    match v.rest.iter_mut().find(|x| x.0 == ch) {
        Some(x) => {
            x.1 += 1;
            x.1
        }
        None => {
            v.rest.push((ch, 1));
            1
        }
    }
}

/// The most sightings on a channel other than `ch`.
fn others(v: &ChannelCounts, ch: Channel) -> u64 {
    v.first.iter().chain(v.rest.iter()).filter(|x| x.0 != ch).map(|x| x.1).max().unwrap_or(0)
}

fn rank_set_insert(s: &mut BTreeSet<i64>, r: Option<i64>) {
    if let Some(r) = r {
        if s.len() < MAX_SET {
            s.insert(r);
        }
    }
}

impl Collector {
    pub fn note(&mut self, n: impl Into<String>) {
        let n = n.into();
        if !self.notes.contains(&n) && self.notes.len() < 200 {
            self.notes.push(n);
        }
    }

    /// The host's number (see `host_ids`), given on first sight.
    fn host_id(&mut self, h: &str) -> u32 {
        if let Some(&i) = self.host_ids.get(h) {
            return i;
        }
        let i = self.host_names.len() as u32;
        self.host_ids.insert(h.to_string(), i);
        self.host_names.push(h.to_string());
        self.host_libs.push(0);
        self.raw.push(HashMap::default());
        i
    }

    /// The rank a rank line named for process `pid` of host `h`.
    pub fn rank_of(&self, h: &str, pid: u32) -> Option<i64> {
        self.ranks.get(&(*self.host_ids.get(h)?, pid)).copied()
    }

    fn host_mut(&mut self, h: &str) -> &mut HostFacts {
        if !self.hosts.contains_key(h) {
            self.hosts.insert(h.to_string(), HostFacts::default());
        }
        self.hosts.get_mut(h).expect("inserted")
    }

    /// Moves the nested groups into [`Collector::groups`]; call once after the last event.
    pub fn finish(&mut self) {
        self.replay_pending();
        self.runs.extend(std::mem::take(&mut self.live_runs));
        for (hid, calls) in std::mem::take(&mut self.raw).into_iter().enumerate() {
            let host = &self.host_names[hid];
            for (call, smalls) in calls {
                for (k, g) in smalls {
                    let key = GroupKey {
                        host: host.clone(),
                        call: call.clone(),
                        errno: k.errno,
                        mem: k.mem,
                        lib: k.lib,
                        ok: k.ok,
                        relaxed: k.relaxed,
                        odp: k.odp,
                    };
                    self.groups.insert(key, g);
                }
            }
        }
        let [n, refused, failed] = self.rereg;
        if n > 0 {
            self.note(format!(
                "ibv_rereg_mr: {n} calls, {failed} failed, {refused} refused by mrshim (MRs a retry strategy \
                 registered another way, e.g. bounce regions: the application gets IBV_REREG_MR_ERR_CMD/EOPNOTSUPP \
                 and registers again; not a registration failure)"
            ));
        }
        // kernel lines stand for failures only when the user-space side of them is not in the input
        if self.groups.iter().any(|(k, _)| !k.ok && k.lib != Lib::Kernel) {
            self.groups.retain(|k, _| k.ok || k.lib != Lib::Kernel);
        }
    }

    /// False if this failure was already counted from another kind of output of the same process
    /// (for a line that names no process: if the lines with a pid of its host, or of every host
    /// when it names none, already showed as many).
    fn first_sighting(&mut self, r: &RegEv, hid: u32) -> bool {
        if r.ok || r.attempt > 0 {
            return true;
        }
        let ch = Channel(r.source, r.lib.unwrap_or(Lib::Text));
        let new = match r.pid {
            Some(pid) => {
                let c = self.seen_by_source.entry((hid, pid)).or_default();
                let mine = bump(c, ch);
                let new = mine > others(c, ch);
                if new {
                    if self.named_by_host.len() <= hid as usize {
                        self.named_by_host.resize(hid as usize + 1, 0);
                    }
                    self.named_by_host[hid as usize] += 1;
                    self.named_all += 1;
                }
                new
            }
            None => {
                let named = |h: Option<u32>| h.and_then(|h| self.named_by_host.get(h as usize).copied()).unwrap_or(0);
                let none = self.host_ids.get("").copied();
                // compared with the lines that name a process only: a pasted report without pids
                // mentions distinct failures in different wordings, so each channel on its own
                match Some(hid).filter(|h| Some(*h) != none) {
                    // a line with a host is that host's (or belongs with lines of its process
                    // that name no host, as glog's do not)
                    Some(h) => {
                        let pool = named(Some(h)) + named(none);
                        let mine = self.anon_seen.entry((Some(h), ch)).or_default();
                        *mine += 1;
                        let new = *mine > pool;
                        if !new {
                            *self.anon_used.entry(ch).or_default() += 1;
                        }
                        new
                    }
                    // a line without a host may be any host's: what lines with a host of this
                    // channel already stood for is not there for it again
                    None => {
                        let pool = self.named_all.saturating_sub(self.anon_used.get(&ch).copied().unwrap_or(0));
                        let mine = self.anon_seen.entry((None, ch)).or_default();
                        *mine += 1;
                        *mine > pool
                    }
                }
            }
        };
        if !new {
            self.duplicates += 1;
        }
        new
    }

    /// Counts the held failures of lines that name no process, now that every line with a pid is
    /// read: those that name a host first, then those that do not (each in input order: the first
    /// ones beyond what the lines with a pid showed are the ones kept), so the count does not
    /// depend on the order of the inputs.
    fn replay_pending(&mut self) {
        let order = self.order;
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| p.0.host.as_deref().unwrap_or("").is_empty());
        for (r, file, at) in pending {
            let hid = self.host_id(r.host.as_deref().unwrap_or(""));
            if self.first_sighting(&r, hid) {
                self.order = at;
                self.count_reg(r, hid, file, 0, "");
            }
        }
        self.order = order;
    }

    pub fn add(&mut self, ev: Event, file: usize, line: u64, text: &str) {
        self.order += 1;
        let evid = |l: u64, t: &str| Evid { file: String::new(), line: l, text: clip(t) };
        match ev {
            Event::Note(n) => self.note(n),
            Event::Known(k) => {
                self.known_seen.entry(k).or_insert_with(|| Evid { file: file.to_string(), ..evid(line, text) });
            }
            Event::Reg(r) => self.add_reg(r, file, line, text),
            Event::Fact { lib, host, pid, fact } => {
                let h = host.unwrap_or_default();
                if !h.is_empty() && !matches!(fact, Fact::Env(..)) {
                    self.live_runs.entry((file, pid)).or_default().host.get_or_insert_with(|| h.clone());
                }
                let e = Evid { file: file.to_string(), ..evid(line, text) };
                match fact {
                    Fact::RankOf(r) => {
                        self.procs.get(file, pid, &h).rank.get_or_insert(r);
                        if let Some(p) = pid {
                            let hid = self.host_id(&h);
                            self.ranks.insert((hid, p), r);
                        }
                    }
                    Fact::Started { world_size, job_id } => self.procs.started(file, pid, &h, world_size, job_id),
                    Fact::Exit { calls } => self.procs.get(file, pid, &h).summary = Some(calls),
                    Fact::Dereg { time_ns, rank } => self.point(&h, rank, Some(time_ns), None, Mark::Dereg),
                    Fact::BounceViolation { kind, record } => {
                        let v = self.violations.entry((h.clone(), pid)).or_default();
                        v.counts[usize::from(record)] += 1;
                        if !v.kinds.contains(&kind) {
                            v.kinds.push(kind);
                        }
                        if v.evidence.len() < 2 {
                            v.evidence.push(e);
                        }
                    }
                    Fact::Rereg { result } => {
                        self.rereg[0] += 1;
                        self.rereg[1] += u64::from(result == CallResult::Refused);
                        self.rereg[2] += u64::from(result == CallResult::Error);
                    }
                    Fact::Done => {
                        let run = self.live_runs.entry((file, pid)).or_default();
                        run.done = true;
                        run.evid.get_or_insert(e);
                    }
                    Fact::Env(k, v) => {
                        self.apply_env(file, pid, &k, &v, &e);
                        let hf = self.host_mut(&h);
                        hf.libs.insert(lib);
                        hf.env.insert(k, (v, e));
                    }
                    Fact::Version(name, v) => {
                        let hf = self.host_mut(&h);
                        hf.libs.insert(lib);
                        let s = hf.versions.entry(name).or_default();
                        if s.len() < 16 {
                            s.insert(v);
                        }
                    }
                    Fact::Memlock(m) => {
                        let hf = self.host_mut(&h);
                        if hf.memlock.len() < 8 {
                            hf.memlock.entry(m).or_insert(e);
                        }
                    }
                    Fact::MaxMapCount(n) => {
                        self.host_mut(&h).max_map_count = Some((n, e));
                    }
                    Fact::Flag(f) => {
                        match f {
                            Flag::GdrOn | Flag::GdrOff => {
                                self.live_runs.entry((file, pid)).or_default().gdr = Some(f == Flag::GdrOn)
                            }
                            Flag::RoAdvertised => self.live_runs.entry((file, pid)).or_default().ro = Some(true),
                            _ => {}
                        }
                        let hf = self.host_mut(&h);
                        hf.libs.insert(lib);
                        let ent = hf.flags.entry(f).or_insert((0, e));
                        ent.0 += 1;
                    }
                }
            }
        }
    }

    fn apply_env(&mut self, file: usize, pid: Option<u32>, k: &str, v: &str, e: &Evid) {
        let key = k.strip_prefix("NCCL_").or_else(|| k.strip_prefix("MCCL_")).or_else(|| k.strip_prefix("RCCL_"));
        let Some(key) = key else { return };
        let run = self.live_runs.entry((file, pid)).or_default();
        match key {
            "IB_PCI_RELAXED_ORDERING" => run.ro = Some(v.trim() != "0"),
            "NET_GDR_LEVEL" => run.gdr = Some(!(v == "0" || v.eq_ignore_ascii_case("LOC"))),
            "IB_DISABLE" => run.ib_disabled = v.trim() == "1",
            "CUMEM_ENABLE" if v.trim() == "1" => {
                let hf = self.hosts.entry(String::new()).or_default();
                hf.flags.entry(Flag::CudaVmm).or_insert((0, e.clone())).0 += 1;
                return;
            }
            _ => return,
        }
        run.evid.get_or_insert(e.clone());
    }

    /// Counts a call of `length` bytes under `to` in the size histogram, taken off `from` (a failed
    /// call a retry rescued; a rescue whose failure is not in the input takes nothing off).
    fn hist_move(&mut self, length: Option<u64>, from: Option<usize>, to: usize) {
        let Some(l) = length else { return };
        if self.hist.is_empty() {
            self.hist = vec![[0; 3]; 64];
        }
        let b = &mut self.hist[63 - l.max(1).leading_zeros() as usize];
        if let Some(f) = from {
            b[f] = b[f].saturating_sub(1);
        }
        b[to] += 1;
    }

    fn add_reg(&mut self, mut r: RegEv, file: usize, line: u64, text: &str) {
        // a parser that rewrote the line's text leaves its number (0) to the line it read
        if let Some((l @ 0, _)) = &mut r.evid {
            *l = line;
        }
        // the access mask says whether relaxed ordering was asked for (UCX prints `access=0x10000f`)
        if r.relaxed.is_none() {
            r.relaxed = r.access.map(|a| a & mrshim_access::RELAXED_ORDERING != 0);
        }
        // a failure on a line that names no process waits for the end of the input: the lines of
        // its process may come later, or in another file (the application's stdout saved apart)
        if r.pid.is_none() && !r.ok && r.attempt == 0 && self.pending.len() < MAX_PENDING {
            if r.evid.is_none() {
                r.evid = Some((line, clip(text)));
            }
            self.pending.push((r, file, self.order));
            return;
        }
        let hid = self.host_id(r.host.as_deref().unwrap_or(""));
        if !self.first_sighting(&r, hid) {
            return;
        }
        self.count_reg(r, hid, file, line, text);
    }

    /// Counts a registration (a failure only once [`Collector::first_sighting`] said it is new).
    fn count_reg(&mut self, mut r: RegEv, hid: u32, file: usize, line: u64, text: &str) {
        // evidence text is built only where it is kept
        let (eline, etext) = match r.evid.take() {
            Some((l, t)) => (l, std::borrow::Cow::Owned(t)),
            None => (line, std::borrow::Cow::Borrowed(text)),
        };
        let mk = || Evid { file: file.to_string(), line: eline, text: clip(&etext) };
        let host = r.host.take().unwrap_or_default();
        let rank = r.rank.or_else(|| r.pid.and_then(|p| self.ranks.get(&(hid, p))).copied()).or(r.rank_hint);
        // A retry attempt is not an application call: a successful one rescued the failed call it
        // follows. A learned strategy applied up front is the application's call, which mrshim
        // made succeed: counted as a registration and as a rescue by that strategy.
        let retry = r.attempt > 0;
        if r.ok && (retry || r.learned) {
            self.hist_move(r.length, retry.then_some(FAILED), RESCUED);
        }
        if retry || (r.learned && r.ok) {
            *self.retries.entry((r.strategy.clone().unwrap_or_else(|| "?".into()), r.ok)).or_default() += 1;
            if r.ok {
                self.procs.get(file, r.pid, &host).rescued += 1;
                if retry {
                    self.rescued_failures += 1;
                    self.point(&host, rank, r.time_ns, r.length, Mark::Rescued);
                } else {
                    self.learned_ok += 1;
                    self.procs.get(file, r.pid, &host).learned += 1;
                }
            }
            if retry {
                return;
            }
            // The NIC registered a shadow, not the caller's memory: the call counts for its rank and
            // the timeline, but not as evidence that this kind of memory registers.
            self.procs.reg((file, r.pid), &host, rank, (r.time_ns, self.order), true);
            self.point(&host, rank, r.time_ns, r.length, Mark::Rescued);
            return;
        }
        self.procs.reg((file, r.pid), &host, rank, (r.time_ns, self.order), r.ok);
        self.point(&host, rank, r.time_ns, r.length, if r.ok { Mark::Ok } else { Mark::Failed });
        self.hist_move(r.length, None, if r.ok { SUCCEEDED } else { FAILED });
        {
            let run = self.live_runs.entry((file, r.pid)).or_default();
            if run.host.is_none() {
                run.host = r.host.clone();
            }
            if r.ok {
                run.ok_regs += 1;
            } else {
                run.failed += 1;
                if run.evid.is_none() {
                    run.evid = Some(mk());
                }
            }
        }
        let lib = r.lib.unwrap_or(Lib::Text);
        let lib_bit = 1u64 << (lib as u32);
        if self.host_libs[hid as usize] & lib_bit == 0 || r.memlock.is_some() {
            self.host_libs[hid as usize] |= lib_bit;
            let hf = self.host_mut(&host);
            hf.libs.insert(lib);
            if let Some(m) = r.memlock {
                if hf.memlock.len() < 8 && !hf.memlock.contains_key(&m) {
                    hf.memlock.insert(m, mk());
                }
            }
        }
        let odp = r.access.is_some_and(|a| a & mrshim_access::ON_DEMAND != 0);
        let small = SmallKey {
            errno: if r.ok { None } else { r.errno },
            mem: r.mem,
            lib,
            ok: r.ok,
            relaxed: r.relaxed,
            odp: odp && !r.ok,
        };
        let calls = &mut self.raw[hid as usize];
        if !calls.contains_key(r.call.as_str()) {
            calls.insert(r.call.clone(), HashMap::default());
        }
        let g = calls.get_mut(r.call.as_str()).expect("inserted").entry(small).or_default();
        g.count += 1;
        rank_set_insert(&mut g.ranks, rank);
        if let Some(a) = r.access {
            if g.access.len() < 16 {
                g.access.insert(a);
            }
        }
        g.max_len = g.max_len.max(r.length.unwrap_or(0));
        // a size the failure line prints with its unit (`registering a 37.70 GB segment`): read here,
        // from the whole line, since the evidence kept is clipped (findings/order.rs)
        if !r.ok {
            g.max_len = crate::findings::printed_sizes(&etext).into_iter().fold(g.max_len, u64::max);
        }
        g.iova_misaligned += r.iova_misaligned as u64;
        g.over_memlock += r.over_memlock as u64;
        g.injected += r.injected as u64;
        // a dmabuf registration has an offset, not an address; implicit ODP registers address 0 on purpose
        g.zero_len_or_addr += ((r.length == Some(0) || r.addr == Some(0)) && !r.call.contains("dmabuf") && !odp) as u64;
        g.mapped += u64::from(!r.ok && r.mapped == Some(true));
        g.odp += u64::from(!r.ok && odp);
        if g.evidence.len() < if r.ok { 1 } else { MAX_EVIDENCE } {
            g.evidence.push(mk());
        }
    }

    /// Keeps every failure (up to the cap) and a thinning sample of successes.
    fn point(&mut self, host: &str, rank: Option<i64>, t: Option<u64>, len: Option<u64>, mark: Mark) {
        self.point_seen += 1;
        if let Some(t) = t {
            let r = self.time_range.get_or_insert((t, t));
            *r = (r.0.min(t), r.1.max(t));
        }
        if self.point_stride == 0 {
            self.point_stride = 1;
        }
        let ok = mark != Mark::Failed;
        if ok && !self.point_seen.is_multiple_of(self.point_stride) {
            return;
        }
        if self.points.len() >= MAX_POINTS {
            // Halve the successes kept so far and sample more sparsely from now on. Only while
            // there are successes to drop: a timeline full of failures keeps the first ones and
            // counts the rest, at no cost per further failure (each halving doubles the stride,
            // so there are at most 64 of them).
            if self.point_fails < self.points.len() {
                let mut i = 0u64;
                self.points.retain(|p| {
                    i += 1;
                    p.failed() || i.is_multiple_of(2)
                });
                self.point_stride = self.point_stride.saturating_mul(2);
            }
            if self.points.len() >= MAX_POINTS {
                self.points_dropped += 1;
                return;
            }
        }
        self.point_fails += usize::from(!ok);
        self.points.push(Point {
            host: host.to_string(),
            rank,
            t: t.unwrap_or(self.order),
            timed: t.is_some(),
            length: len.unwrap_or(0),
            mark,
        });
    }

    /// Resolves file indices in evidence to paths.
    pub fn path_of(&self, e: &Evid) -> Evid {
        let f =
            e.file.parse::<usize>().ok().and_then(|i| self.files.get(i)).map(|f| f.path.clone()).unwrap_or_default();
        Evid { file: f, ..e.clone() }
    }

    /// Runs with the file-wide env folded in.
    pub fn resolved_runs(&self) -> Vec<Run> {
        let mut out = Vec::new();
        for ((file, pid), r) in &self.runs {
            if pid.is_none() && self.runs.range((*file, Some(0))..(*file + 1, None)).next().is_some() {
                continue;
            }
            let mut r = r.clone();
            if pid.is_some() {
                if let Some(d) = self.runs.get(&(*file, None)) {
                    r.ro = r.ro.or(d.ro);
                    r.gdr = r.gdr.or(d.gdr);
                    r.ib_disabled |= d.ib_disabled;
                    r.evid = r.evid.or_else(|| d.evid.clone());
                }
            }
            out.push(r);
        }
        out
    }
}

/// Evidence text kept short and on one line.
pub fn clip(t: &str) -> String {
    let t = t.trim();
    if t.chars().count() <= 200 {
        t.to_string()
    } else {
        let mut s: String = t.chars().take(197).collect();
        s.push_str("...");
        s
    }
}
