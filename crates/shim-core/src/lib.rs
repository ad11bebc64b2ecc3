//! The logic of libmrshim.so, in plain (mostly safe) Rust so that it is unit-testable without
//! interposing on anything. The FFI layer (src/preload in the root crate) turns each intercepted
//! call into a [`RegArgs`], hands [`Shim::call`] a [`Backend`] that calls the real function, and
//! passes the [`Outcome`] back to the application.
//!
//! Call path (one application call):
//! `begin` (seq, clock) → `Backend::invoke` (the real function, exactly once) →
//! [retry engine slot, issue 6: further `invoke`s recorded as attempts linked by `parent_seq`] →
//! `finish` (counters, MR table, one record = one write(2), WARN line). Panics in the shim's own
//! parts are caught inside [`Shim::call`]; the real call happens exactly once regardless.

pub mod clock;
pub mod config;
pub mod diff;
pub mod ident;
pub mod internal;
pub mod limits;
pub mod line;
pub mod log;
pub mod logfile;
pub mod maps;
pub mod rescue;

use config::{Config, Level, LogDest, PanicAt};
use mrshim_forklock::ForkLock;
use mrshim_record::{CallStats, Kind, MemKind, Reg, Summary, SCHEMA_VERSION};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};

/// The intercepted entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    RegMr,
    RegMrIova,
    RegMrIova2,
    RegDmabufMr,
    DeregMr,
}

impl Call {
    pub const ALL: [Call; 5] = [Call::RegMr, Call::RegMrIova, Call::RegMrIova2, Call::RegDmabufMr, Call::DeregMr];
    pub fn name(self) -> &'static str {
        match self {
            Call::RegMr => "ibv_reg_mr",
            Call::RegMrIova => "ibv_reg_mr_iova",
            Call::RegMrIova2 => "ibv_reg_mr_iova2",
            Call::RegDmabufMr => "ibv_reg_dmabuf_mr",
            Call::DeregMr => "ibv_dereg_mr",
        }
    }
    fn idx(self) -> usize {
        self as usize
    }
}

/// The arguments of one call, as the application passed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegArgs {
    pub call: Option<Call>,
    /// Set when the caller asked for a non-default symbol version (`IBVERBS_1.0`).
    pub symbol_version: Option<&'static str>,
    pub pd: usize,
    /// The virtual address. For `ibv_reg_dmabuf_mr` this is the `iova` argument (the VA the MR
    /// will have); the dmabuf offset is in `dmabuf_offset`. For `ibv_dereg_mr`: `mr->addr`.
    pub addr: u64,
    pub length: u64,
    /// The IOVA: the argument for iova/iova2/dmabuf; `addr` for plain `ibv_reg_mr`.
    pub iova: Option<u64>,
    pub access: u32,
    pub dmabuf_fd: Option<i32>,
    pub dmabuf_offset: Option<u64>,
    /// `ibv_dereg_mr`: the MR being deregistered.
    pub mr: usize,
}

impl RegArgs {
    pub fn call(&self) -> Call {
        self.call.unwrap_or(Call::RegMr)
    }
    /// NCCL/UCX probe dmabuf support with fd -1 and look at errno: pass through, never retry.
    pub fn is_probe(&self) -> bool {
        self.call() == Call::RegDmabufMr && self.dmabuf_fd.is_some_and(|fd| fd < 0)
    }
}

/// What the real function answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The returned `struct ibv_mr *` (0 on failure; unused for dereg).
    pub mr: usize,
    pub lkey: u32,
    pub rkey: u32,
    /// 0 on success, else the errno (registrations) / the return value (dereg).
    pub err: i32,
    /// errno as the real function left it (restored for the caller before returning).
    pub errno_after: i32,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.err == 0
    }
}

/// The real functions, as the FFI layer reaches them.
pub trait Backend {
    /// Calls the real function once.
    fn invoke(&self, args: &RegArgs) -> Outcome;
    /// `pd->context->device->name`.
    fn device_name(&self, pd: usize) -> Option<DevName>;
    /// Memory of a loaded GPU runtime (cuPointerGetAttribute), for memory kinds and strategies.
    fn is_device_memory(&self, _addr: u64) -> bool {
        false
    }
    /// A dmabuf fd for device memory, from its runtime: (fd, offset of addr in it).
    fn export_dmabuf(&self, _addr: u64, _len: u64) -> Result<(i32, u64), String> {
        Err("no GPU runtime is loaded".into())
    }
    /// A host shadow for the region (bounce strategy); its address.
    fn bounce_shadow(&self, _args: &RegArgs) -> Result<u64, String> {
        Err("host bounce buffers are not available here".into())
    }
    /// The attempt's MR goes to the caller: make it look like the caller's own call.
    fn adopt(&self, _strategy: mrshim_retry::strategy::Strategy, _orig: &RegArgs, _attempt: &RegArgs, _mr: usize) {}
    /// A failed attempt: release what export_dmabuf / bounce_shadow made for it.
    fn discard(&self, _strategy: mrshim_retry::strategy::Strategy, _attempt: &RegArgs) {}
    /// Retries may call other entry points (false for the IBVERBS_1.0 ABI).
    fn can_retry(&self) -> bool {
        true
    }
}

/// A device name (rdma-core's `char name[IBV_SYSFS_NAME_MAX]`), copied without allocating.
#[derive(Clone, Copy)]
pub struct DevName {
    buf: [u8; 64],
    len: u8,
}

impl DevName {
    /// Up to the first NUL, at most 64 bytes, cut to valid UTF-8.
    pub fn new(bytes: &[u8]) -> DevName {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len()).min(64);
        let valid = std::str::from_utf8(&bytes[..end]).map_or_else(|e| e.valid_up_to(), str::len);
        let mut buf = [0u8; 64];
        buf[..valid].copy_from_slice(&bytes[..valid]);
        DevName { buf, len: valid as u8 }
    }
    pub fn as_str(&self) -> &str {
        // new() keeps only a valid UTF-8 prefix.
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

/// How a record relates to the application's call (all zero: it is the call).
#[derive(Debug, Default, Clone, Copy)]
pub struct Meta<'a> {
    pub attempt: u32,
    pub parent_seq: Option<u64>,
    pub strategy: Option<&'a str>,
    pub change: Option<&'a str>,
    pub injected: bool,
    pub learned: bool,
    pub refused: bool,
}

/// Writes one line to stderr with a single write(2) (no std lock, usable anywhere).
pub fn stderr_line(s: &str) {
    let mut b = Vec::with_capacity(s.len() + 1);
    b.extend_from_slice(s.as_bytes());
    b.push(b'\n');
    let _ = log::write_all_once(2, &b);
}

#[derive(Default)]
struct Stats {
    calls: [AtomicU64; 5],
    failures: [AtomicU64; 5],
    probes: AtomicU64,
    errnos: ForkLock<BTreeMap<(Call, i32), u64>>,
    bytes_total: AtomicU64,
}

const SHARDS: usize = 16;

/// MR pointers are heap addresses the shim never lets anyone choose: a multiplicative hash is
/// enough (SipHash was a tenth of a record's user-space cost).
#[derive(Default, Clone, Copy)]
struct PtrHash(u64);

impl std::hash::Hasher for PtrHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type MrMap = HashMap<usize, (u64, u64), std::hash::BuildHasherDefault<PtrHash>>;

/// Live MRs registered through the shim: length and the seq of their registration.
struct MrTable {
    shards: [ForkLock<MrMap>; SHARDS],
    bytes: AtomicU64,
    peak: AtomicU64,
}

impl MrTable {
    fn new() -> Self {
        MrTable {
            shards: std::array::from_fn(|_| ForkLock::default()),
            bytes: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }
    fn shard(&self, mr: usize) -> &ForkLock<MrMap> {
        &self.shards[(mr >> 4) % SHARDS]
    }
    /// `track`: remember the MR (for `reg_seq` in dereg records); else only count bytes.
    fn insert(&self, mr: usize, len: u64, seq: u64, track: bool) -> u64 {
        if track {
            self.shard(mr).lock().insert(mr, (len, seq));
        }
        let now = self.bytes.fetch_add(len, Relaxed).wrapping_add(len);
        // a plain load first: the peak is rarely exceeded, and fetch_max is a CAS loop
        if (now as i64) > 0 && now > self.peak.load(Relaxed) {
            self.peak.fetch_max(now, Relaxed);
        }
        clamp(now)
    }
    /// Removes `mr`'s entry without changing the byte count (see `remove`, `put_back`).
    fn take(&self, mr: usize) -> Option<(u64, u64)> {
        self.shard(mr).lock().remove(&mr)
    }
    fn put_back(&self, mr: usize, entry: (u64, u64)) {
        self.shard(mr).lock().insert(mr, entry);
    }
    /// Returns the registered bytes after removing `mr` (`len_hint`: its length as the MR says,
    /// used when not tracking).
    fn remove(&self, mr: usize, len_hint: u64, track: bool) -> u64 {
        let len = if track {
            match self.shard(mr).lock().remove(&mr) {
                Some((len, _)) => len,
                None => return self.current(),
            }
        } else {
            len_hint
        };
        // wrapping arithmetic (one fetch_sub); readers clamp a transiently negative total to 0
        clamp(self.bytes.fetch_sub(len, Relaxed).wrapping_sub(len))
    }
    fn current(&self) -> u64 {
        clamp(self.bytes.load(Relaxed))
    }
    /// The parent's MRs are not the child's to account for (and a shard may have been locked).
    fn reset_in_child(&self) {
        for s in &self.shards {
            s.reset_in_child(MrMap::default());
        }
        self.bytes.store(0, Relaxed);
        self.peak.store(0, Relaxed);
    }
}

/// Registered-bytes totals are kept as wrapping u64 so that add/sub are single RMWs; a dereg of
/// an MR the shim never saw registered could push it "below 0": report that as 0.
fn clamp(v: u64) -> u64 {
    if (v as i64) < 0 {
        0
    } else {
        v
    }
}

thread_local! {
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

static FORK_GEN: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static TID: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, u32::MAX)) };
}

fn tid() -> u32 {
    let gen = FORK_GEN.load(Relaxed);
    TID.with(|c| {
        let (t, g) = c.get();
        if g == gen && t != 0 {
            return t;
        }
        // SAFETY: gettid has no preconditions.
        let t = unsafe { libc::gettid() } as u32;
        c.set((t, gen));
        t
    })
}

/// The shim's state for this process.
pub struct Shim {
    /// `None`: configuration was bad; every call passes through unrecorded.
    cfg: Option<Config>,
    host: String,
    pid: AtomicU32,
    rank: Option<(i64, &'static str)>,
    local_rank: Option<(i64, &'static str)>,
    env_echo: BTreeMap<String, String>,
    page: u64,
    seq: AtomicU64,
    log: log::Log,
    maps: maps::MapsCache,
    stats: Stats,
    mrs: MrTable,
    summarized: AtomicBool,
    clock: clock::Clock,
    memlock: limits::Memlock,
    retry: mrshim_retry::engine::Engine,
    inject: Vec<mrshim_retry::inject::Rule>,
    /// No records, no retries, no injection: a call is the real function plus counters.
    plain: bool,
    /// No records, no injection: a success needs no record (retries only act on failures).
    quiet: bool,
    debug_panic: Option<PanicAt>,
}

/// Built at the first intercepted call; a child forked while another thread was building it
/// builds its own (see [`after_fork_child`]).
static SHIM: mrshim_forklock::ForkOnce<Shim> = mrshim_forklock::ForkOnce::new();

/// The process-wide shim, built from the environment on first use (if that panics: a shim
/// that passes every call through).
pub fn shim() -> &'static Shim {
    SHIM.get_or_init(|| {
        internal::guarded("the shim's start-up", || Shim::from_env(config::env_var))
            .unwrap_or_else(|| Shim::new(None, &|_| None))
    })
}

/// The shim if it was ever used (for the exit summary and fork handlers).
pub fn shim_if_initialized() -> Option<&'static Shim> {
    SHIM.get()
}

/// The atfork child handler's part: the child's own pid, counters, file and locks.
pub fn after_fork_child() {
    SHIM.reset_in_child();
    if let Some(s) = SHIM.get() {
        s.after_fork_child();
    }
}

impl Shim {
    /// Builds the state; bad variables are reported (one stderr line each) and disable recording.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Shim {
        let cfg = match config::parse(&get) {
            Ok(c) => Some(c),
            Err(errs) => {
                for e in errs {
                    stderr_line(&e.to_string());
                }
                None
            }
        };
        Shim::new(cfg, &get)
    }

    pub fn new(cfg: Option<Config>, get: &impl Fn(&str) -> Option<String>) -> Shim {
        if cfg.as_ref().and_then(|c| c.debug_panic) == Some(PanicAt::Init) {
            panic!("MRSHIM_DEBUG_PANIC=init");
        }
        let mut env_echo = BTreeMap::new();
        for v in config::VARS.iter().chain(ident::RANK_VARS).chain(ident::LOCAL_RANK_VARS) {
            if let Some(x) = get(v) {
                env_echo.insert(v.to_string(), config::shorten(x.trim_start_matches('\0')).into_owned());
            }
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let log = log::Log::new(cfg.as_ref().map_or(LogDest::Off, |c| c.log.clone()));
        let mut s = Shim {
            host: ident::hostname(),
            // SAFETY: getpid has no preconditions.
            pid: AtomicU32::new(unsafe { libc::getpid() } as u32),
            rank: ident::rank(get),
            local_rank: ident::local_rank(get),
            env_echo,
            page: if page > 0 { page as u64 } else { 4096 },
            seq: AtomicU64::new(1),
            log,
            maps: maps::MapsCache::new(),
            stats: Stats::default(),
            mrs: MrTable::new(),
            summarized: AtomicBool::new(false),
            clock: clock::Clock::default(),
            memlock: limits::Memlock::default(),
            retry: mrshim_retry::engine::Engine::new(cfg.as_ref().map(|c| c.retry.clone()).unwrap_or_default()),
            inject: cfg.as_ref().and_then(|c| mrshim_retry::inject::parse(&c.inject).ok()).unwrap_or_default(),
            plain: false,
            quiet: false,
            debug_panic: cfg.as_ref().and_then(|c| c.debug_panic),
            cfg,
        };
        s.quiet = !s.log.enabled() && s.inject.is_empty();
        s.plain = s.quiet && s.retry.policy.is_off();
        s
    }

    pub fn config(&self) -> Option<&Config> {
        self.cfg.as_ref()
    }

    /// Panics if MRSHIM_DEBUG_PANIC names `at` (the hook layer's points call this too).
    #[inline]
    #[track_caller]
    pub fn debug_panic(&self, at: PanicAt) {
        if self.debug_panic == Some(at) {
            panic!("MRSHIM_DEBUG_PANIC={}", at.name());
        }
    }

    /// An `error` record: a panic the shim caught while handling `call`.
    pub fn record_error(&self, call: &str, msg: &str) {
        if !self.log.enabled() {
            return;
        }
        let mut r = self.base(Kind::Error, clock::wall_now_ns());
        r.seq = self.next_seq();
        r.call = call.into();
        r.result = "error".into();
        r.error = Some(msg.into());
        self.emit(&r);
    }

    /// `finish`, with a panic in it caught and reported (the call's outcome stands).
    #[allow(clippy::too_many_arguments)]
    fn finish_guarded(
        &self,
        cfg: &Config,
        a: &RegArgs,
        out: &Outcome,
        seq: u64,
        t0: u64,
        dur: u64,
        before: Option<(u64, u64)>,
        registered_before: u64,
        backend: &dyn Backend,
        meta: &Meta,
    ) {
        internal::guarded(a.call().name(), || {
            self.finish(cfg, a, out, seq, t0, dur, before, registered_before, backend, meta)
        });
    }

    /// One application call: the real function once (or an injected failure), then — if it
    /// failed and MRSHIM_RETRY allows — the retry engine's attempts, each its own record.
    pub fn call(&self, args: &RegArgs, backend: &dyn Backend) -> Outcome {
        let Some(cfg) = &self.cfg else { return backend.invoke(args) };
        if self.plain {
            let out = backend.invoke(args);
            // A success is only counted, and only if a summary will show it.
            if cfg.summary || !out.ok() {
                self.finish_safe(cfg, args, &out, 0, 0, 0, backend, &Meta::default());
            }
            return out;
        }
        let req = rescue::to_req(args).filter(|r| !r.is_probe() && backend.can_retry());
        let env = rescue::ShimEnv { shim: self, backend, orig: args };
        let seq = self.next_seq();
        // Sticky: what worked before for this kind of memory goes first, as the call itself.
        let mut skip = None;
        if let Some(a) = req.as_ref().and_then(|r| self.retry.learned_attempt(r, &env)) {
            let aargs = rescue::to_args(args, &a.req);
            let (out, dur, t0, injected) = self.attempt(&aargs, Some(&a.req), &env, backend);
            self.retry.learned_result(&a, out.ok());
            let mut meta = Meta {
                strategy: Some(a.strategy.name()),
                change: Some(&a.change),
                learned: true,
                injected,
                ..Meta::default()
            };
            if out.ok() {
                backend.adopt(a.strategy, args, &aargs, out.mr);
                self.finish_safe(cfg, &aargs, &out, seq, t0, dur, backend, &meta);
                return out;
            }
            // No longer works for this memory: on record as a try of the call that follows
            // (its parent, `seq`), which then goes as usual without this strategy.
            meta.parent_seq = Some(seq);
            self.finish_safe(cfg, &aargs, &out, self.next_seq(), t0, dur, backend, &meta);
            backend.discard(a.strategy, &aargs);
            skip = Some(a.strategy);
        }
        // For dereg, the entry leaves the table before the call: once the real dereg frees the
        // MR, another thread may get the same address for a new one (put back if it fails).
        let before = if self.log.enabled() && args.call() == Call::DeregMr { self.mrs.take(args.mr) } else { None };
        let registered_before = self.mrs.current();
        let (out, dur, t0, injected) = self.attempt(args, req.as_ref(), &env, backend);
        self.debug_panic(PanicAt::Call);
        let Some(r) = req.filter(|_| !out.ok() && !self.retry.policy.is_off()) else {
            let meta = Meta { injected, ..Meta::default() };
            self.finish_guarded(cfg, args, &out, seq, t0, dur, before, registered_before, backend, &meta);
            return out;
        };
        // The failure is on record before any attempt.
        let mut rescued: Option<(Outcome, mrshim_retry::engine::Attempt)> = None;
        internal::guarded(args.call().name(), || {
            let meta = Meta { injected, ..Meta::default() };
            self.finish(cfg, args, &out, seq, t0, dur, before, registered_before, backend, &meta);
            let mut try_ = |a: &mrshim_retry::engine::Attempt| {
                let aargs = rescue::to_args(args, &a.req);
                let (o, d, w, inj) = self.attempt(&aargs, Some(&a.req), &env, backend);
                let meta = Meta {
                    attempt: a.n,
                    parent_seq: Some(seq),
                    strategy: Some(a.strategy.name()),
                    change: Some(&a.change),
                    injected: inj,
                    ..Meta::default()
                };
                self.finish_safe(cfg, &aargs, &o, self.next_seq(), w, d, backend, &meta);
                if o.ok() {
                    Ok(o)
                } else {
                    backend.discard(a.strategy, &aargs);
                    Err(o.err)
                }
            };
            let mut note = |ev: mrshim_retry::engine::Event| self.note(cfg, args, seq, backend, ev);
            rescued = self.retry.rescue(&r, out.err, &env, skip, &mut try_, &mut note);
        });
        match rescued {
            Some((o, a)) => {
                backend.adopt(a.strategy, args, &rescue::to_args(args, &a.req), o.mr);
                if cfg.warn {
                    stderr_line(&format!(
                        "{} INFO {} rescued by {}: {} (job-wide equivalent: {})",
                        self.prefix(),
                        args.call().name(),
                        a.strategy.name(),
                        a.change,
                        a.strategy.global_equivalent()
                    ));
                }
                Outcome { errno_after: out.errno_after, ..o }
            }
            // Every strategy failed: the caller sees the original errno, not the last attempt's.
            None => out,
        }
    }

    /// Registered bytes after a successful registration or deregistration of `mr`.
    fn count_ok(&self, call: Call, length: u64, mr: usize, seq: u64, track: bool) -> u64 {
        if call == Call::DeregMr {
            self.mrs.remove(mr, length, track)
        } else {
            self.stats.bytes_total.fetch_add(length, Relaxed);
            self.mrs.insert(mr, length, seq, track)
        }
    }

    /// True when a successful call needs nothing but [`Shim::succeeded`] (bad configuration, or
    /// no records and no injection; for registrations also nothing learned by sticky retries):
    /// the hook layer may call the real function itself and take [`Shim::call`] only for
    /// failures, with their outcome. Retries only act on failures, so a policy alone costs a
    /// success nothing.
    #[inline]
    pub fn counts_only(&self, call: Call) -> bool {
        // (bad configuration: no log, no injection, retries off, so `quiet` and nothing learned)
        self.quiet && (call == Call::DeregMr || !self.retry.has_learned())
    }

    /// A successful call made on the fast path; counted only if a summary will show it.
    #[inline]
    pub fn succeeded(&self, call: Call, length: u64, mr: usize) {
        if !self.cfg.as_ref().is_some_and(|c| c.summary) {
            return;
        }
        self.stats.calls[call.idx()].fetch_add(1, Relaxed);
        self.count_ok(call, length, mr, 0, false);
    }

    fn next_seq(&self) -> u64 {
        if self.log.enabled() {
            self.seq.fetch_add(1, Relaxed)
        } else {
            0
        }
    }

    /// One try at the real function, unless MRSHIM_INJECT fails it first (registrations only:
    /// `r` is None for deregistrations, probes and the 1.0 ABI). Clocks only when recording.
    /// Returns (outcome, duration ns, monotonic start ns, injected).
    fn attempt(
        &self,
        a: &RegArgs,
        r: Option<&mrshim_retry::Req>,
        env: &rescue::ShimEnv,
        backend: &dyn Backend,
    ) -> (Outcome, u64, u64, bool) {
        let t0 = if self.log.enabled() { clock::mono_ns() } else { 0 };
        let took = || if t0 != 0 { clock::mono_ns().saturating_sub(t0) } else { 0 };
        if let Some(r) = r.filter(|_| !self.inject.is_empty()) {
            if let Some(e) = mrshim_retry::inject::check(&self.inject, r, env.kind(r)) {
                return (Outcome { err: e, errno_after: e, ..Default::default() }, took(), t0, true);
            }
        }
        let o = backend.invoke(a);
        (o, took(), t0, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_safe(
        &self,
        cfg: &Config,
        a: &RegArgs,
        out: &Outcome,
        seq: u64,
        t0: u64,
        dur: u64,
        backend: &dyn Backend,
        meta: &Meta,
    ) {
        self.finish_guarded(cfg, a, out, seq, t0, dur, None, self.mrs.current(), backend, meta);
    }

    /// Refusals and learned-policy changes, as records.
    fn note(&self, cfg: &Config, args: &RegArgs, parent: u64, backend: &dyn Backend, ev: mrshim_retry::engine::Event) {
        use mrshim_retry::engine::Event;
        match ev {
            Event::Refused { strategy, reason } => {
                let meta = Meta {
                    parent_seq: Some(parent),
                    strategy: Some(strategy.name()),
                    change: Some(&reason),
                    refused: true,
                    ..Meta::default()
                };
                let out = Outcome { err: -1, ..Default::default() };
                self.finish_safe(cfg, args, &out, self.next_seq(), clock::mono_ns(), 0, backend, &meta);
            }
            Event::Learned { kind, entry, strategy } => {
                let line = format!(
                    "{} INFO learned: {} of {} memory goes straight to {}",
                    self.prefix(),
                    entry.name(),
                    line::mem_kind_str(kind),
                    strategy.name()
                );
                if cfg.warn {
                    stderr_line(&line);
                }
                if self.log.enabled() {
                    let mut r = self.base(Kind::Policy, clock::wall_now_ns());
                    r.seq = self.next_seq();
                    r.call = entry.name().into();
                    r.mem_kind = Some(kind);
                    r.strategy = Some(strategy.name().into());
                    r.parent_seq = Some(parent);
                    r.result = "ok".into();
                    r.change = Some(format!(
                        "{} of {} memory goes straight to {}",
                        entry.name(),
                        line::mem_kind_str(kind),
                        strategy.name()
                    ));
                    self.emit(&r);
                }
            }
            Event::Tried(..) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        cfg: &Config,
        a: &RegArgs,
        out: &Outcome,
        seq: u64,
        t0: u64,
        dur: u64,
        before: Option<(u64, u64)>,
        registered_before: u64,
        backend: &dyn Backend,
        meta: &Meta,
    ) {
        let call = a.call();
        let probe = a.is_probe();
        // Attempts, refusals and failed learned tries (all linked to a parent) are not
        // application calls.
        let app_call = meta.parent_seq.is_none();
        if app_call {
            self.stats.calls[call.idx()].fetch_add(1, Relaxed);
        }
        if meta.refused {
        } else if probe {
            self.stats.probes.fetch_add(1, Relaxed);
        } else if !out.ok() && app_call {
            self.stats.failures[call.idx()].fetch_add(1, Relaxed);
            *self.stats.errnos.lock().entry((call, out.err)).or_default() += 1;
        }
        let recording = self.log.enabled();
        let registered_after = match (call, before) {
            // taken out of the table already: only the byte count changes
            (Call::DeregMr, Some((len, _))) if out.ok() => self.mrs.remove(a.mr, len, false),
            (Call::DeregMr, Some(entry)) => {
                self.mrs.put_back(a.mr, entry);
                registered_before
            }
            _ if out.ok() && !probe => {
                self.count_ok(call, a.length, if call == Call::DeregMr { a.mr } else { out.mr }, seq, recording)
            }
            _ => registered_before,
        };
        let failed = !out.ok() && !probe && app_call;
        if failed && cfg.warn {
            stderr_line(&self.warn_line(a, out));
        }
        if !recording || (cfg.level == Level::Failures && out.ok() && !probe) {
            return;
        }
        self.debug_panic(PanicAt::Record);
        let device = if a.pd != 0 { backend.device_name(a.pd) } else { None };
        let dereg = call == Call::DeregMr;
        let mut l = line::RegLine {
            dereg,
            seq,
            time_ns: self.clock.wall_ns(t0),
            host: &self.host,
            pid: self.pid.load(Relaxed),
            tid: tid(),
            rank: self.rank.map(|r| r.0),
            local_rank: self.local_rank.map(|r| r.0),
            call: call.name(),
            symbol_version: a.symbol_version,
            device: device.as_ref().map(DevName::as_str),
            pd: (a.pd != 0).then_some(a.pd as u64),
            registered_bytes: registered_before,
            registered_bytes_after: Some(registered_after),
            ok: out.ok(),
            duration_ns: dur,
            probe,
            meta: *meta,
            ..Default::default()
        };
        if dereg {
            l.mr = Some(a.mr as u64);
            l.reg_seq = before.map(|b| b.1);
            if a.addr != 0 || a.length != 0 {
                l.addr = Some(a.addr);
                l.length = Some(a.length);
            }
        } else {
            l.addr = Some(a.addr);
            l.length = Some(a.length);
            l.addr_page_offset = Some(a.addr % self.page);
            l.addr_align = Some(a.addr & a.addr.wrapping_neg());
            if let Some(iova) = a.iova {
                l.iova = Some(iova);
                l.iova_page_offset = Some(iova % self.page);
            }
            l.access = Some(a.access);
            l.dmabuf_fd = a.dmabuf_fd;
            l.dmabuf_offset = a.dmabuf_offset;
            if a.dmabuf_fd.is_some() {
                l.mem_kind = Some(if probe { MemKind::Unknown } else { MemKind::Device });
            } else if backend.is_device_memory(a.addr) {
                // The GPU runtime knows its memory; /proc/self/maps only sees a mapping.
                l.mem_kind = Some(MemKind::Device);
            } else {
                let m = self.maps.classify(a.addr, a.length, !out.ok(), if t0 != 0 { t0 } else { clock::mono_ns() });
                l.mem_kind = Some(m.kind);
                l.mem_region = m.path;
                l.mem_fully_mapped = Some(m.fully_mapped);
            }
            let (s, h) = self.memlock.get(t0, !out.ok());
            l.memlock_soft = s;
            l.memlock_hard = h;
            if out.ok() {
                l.mr = Some(out.mr as u64);
                l.lkey = Some(out.lkey);
                l.rkey = Some(out.rkey);
            }
        }
        if !out.ok() && !meta.refused {
            l.errno = Some(out.err);
            l.errno_name = mrshim_verbs::errno::name(out.err);
        }
        let written = LINE.try_with(|b| {
            let Ok(mut b) = b.try_borrow_mut() else { return false };
            // a scratch that only grows: no zeroing per record
            let need = l.bound();
            if b.len() < need {
                b.resize(need, 0);
            }
            let n = l.write_into(&mut b);
            self.emit_bytes(&b[..n]);
            true
        });
        if written != Ok(true) {
            let mut b = Vec::with_capacity(1024);
            l.write(&mut b);
            self.emit_bytes(&b);
        }
    }

    fn base(&self, kind: Kind, time_ns: u64) -> Reg {
        Reg {
            v: SCHEMA_VERSION,
            kind: Some(kind),
            time_ns,
            host: self.host.clone(),
            pid: self.pid.load(Relaxed),
            tid: tid(),
            rank: self.rank.map(|r| r.0),
            local_rank: self.local_rank.map(|r| r.0),
            ..Reg::default()
        }
    }

    fn emit(&self, r: &Reg) {
        self.emit_bytes(r.to_line().as_bytes());
    }

    fn emit_bytes(&self, line: &[u8]) {
        let first = || self.config_record().to_line().into_bytes();
        let ctx = log::OpenCtx {
            host: &self.host,
            pid: self.pid.load(Relaxed),
            rank: self.rank.map(|r| r.0),
            first_line: &first,
        };
        self.log.write_line(line, &ctx);
    }

    /// The first line of every log: version, executable, environment, effective settings.
    pub fn config_record(&self) -> Reg {
        let mut r = self.base(Kind::Config, clock::wall_now_ns());
        r.seq = 0;
        r.shim_version = Some(env!("CARGO_PKG_VERSION").into());
        r.exe = std::fs::read_link("/proc/self/exe").ok().map(|p| p.display().to_string());
        r.env = Some(self.env_echo.clone());
        let mut s = BTreeMap::new();
        if let Some(c) = &self.cfg {
            s.insert(
                "log".into(),
                match &c.log {
                    LogDest::Off => "off".into(),
                    LogDest::Stderr => "stderr".into(),
                    LogDest::Path(p) => p.clone(),
                },
            );
            s.insert("level".into(), if c.level == Level::All { "all" } else { "failures" }.into());
            s.insert("summary".into(), if c.summary { "on" } else { "off" }.into());
            s.insert("warn".into(), if c.warn { "on" } else { "off" }.into());
            s.insert("retry".into(), c.retry.describe());
            if !c.inject.is_empty() {
                s.insert("inject".into(), c.inject.clone());
            }
        }
        if let Some((_, v)) = self.rank {
            s.insert("rank_from".into(), v.into());
        }
        if let Some((_, v)) = self.local_rank {
            s.insert("local_rank_from".into(), v.into());
        }
        s.insert("page_size".into(), self.page.to_string());
        r.settings = Some(s);
        r
    }

    fn prefix(&self) -> String {
        let rank = self.rank.map_or("-".to_string(), |r| r.0.to_string());
        format!("{}:{}:{} [{}] MRSHIM", self.host, self.pid.load(Relaxed), tid(), rank)
    }

    /// `host:pid:tid [rank] MRSHIM WARN ibv_reg_mr_iova2(addr=0x..., len=..., access=..., iova=0x...) failed: EINVAL (22)`
    pub fn warn_line(&self, a: &RegArgs, out: &Outcome) -> String {
        let acc = mrshim_verbs::access::describe(a.access);
        let args = match a.call() {
            Call::RegMr => format!("addr={:#x}, len={}, access={acc}", a.addr, a.length),
            Call::RegMrIova | Call::RegMrIova2 => {
                format!("addr={:#x}, len={}, access={acc}, iova={:#x}", a.addr, a.length, a.iova.unwrap_or(a.addr))
            }
            Call::RegDmabufMr => format!(
                "offset={}, len={}, iova={:#x}, fd={}, access={acc}",
                a.dmabuf_offset.unwrap_or(0),
                a.length,
                a.iova.unwrap_or(a.addr),
                a.dmabuf_fd.unwrap_or(-1)
            ),
            Call::DeregMr => format!("mr={:#x}", a.mr),
        };
        let e = match mrshim_verbs::errno::name(out.err) {
            Some(n) => format!("{n} ({})", out.err),
            None => format!("errno {}", out.err),
        };
        format!("{} WARN {}({args}) failed: {e}", self.prefix(), a.call().name())
    }

    pub fn summary(&self) -> Summary {
        let mut by_call = BTreeMap::new();
        let errnos = self.stats.errnos.lock().clone();
        let mut calls = 0;
        let mut failures = 0;
        for c in Call::ALL {
            let n = self.stats.calls[c.idx()].load(Relaxed);
            if n == 0 {
                continue;
            }
            let f = self.stats.failures[c.idx()].load(Relaxed);
            calls += n;
            failures += f;
            let mut e = BTreeMap::new();
            for ((cc, errno), k) in &errnos {
                if *cc == c {
                    let name = mrshim_verbs::errno::name(*errno).map_or_else(|| errno.to_string(), Into::into);
                    e.insert(name, *k);
                }
            }
            by_call.insert(c.name().to_string(), CallStats { calls: n, failures: f, errnos: e });
        }
        let rescued = self.retry.rescued();
        Summary {
            calls,
            failures,
            probes: self.stats.probes.load(Relaxed),
            by_call,
            bytes_registered_total: self.stats.bytes_total.load(Relaxed),
            registered_bytes: self.mrs.current(),
            peak_registered_bytes: self.mrs.peak.load(Relaxed),
            records_written: self.log.written.load(Relaxed),
            records_lost: self.log.lost.load(Relaxed),
            rescued: rescued.iter().map(|(s, n)| (s.name().to_string(), *n)).collect(),
            equivalents: rescued
                .iter()
                .map(|(s, _)| (s.name().to_string(), s.global_equivalent().to_string()))
                .collect(),
            internal_errors: internal::count(),
        }
    }

    /// `host:pid:tid [rank] MRSHIM INFO summary: ...`
    pub fn summary_line(&self, s: &Summary) -> String {
        let mut fails = Vec::new();
        for (c, st) in &s.by_call {
            for (e, n) in &st.errnos {
                fails.push(format!("{c} {e} x{n}"));
            }
        }
        let f = if fails.is_empty() { String::new() } else { format!(" ({})", fails.join(", ")) };
        let calls: Vec<String> = s.by_call.iter().map(|(c, st)| format!("{c} {}", st.calls)).collect();
        let mut line = format!(
            "{} INFO summary: {} calls ({}), {} failures{f}, {} probes, {} bytes registered in total, peak {} bytes, {} bytes still registered",
            self.prefix(),
            s.calls,
            calls.join(", "),
            s.failures,
            s.probes,
            s.bytes_registered_total,
            s.peak_registered_bytes,
            s.registered_bytes
        );
        if let LogDest::Path(_) | LogDest::Stderr = self.log.dest() {
            line.push_str(&format!(", {} records written, {} lost", s.records_written, s.records_lost));
        }
        if s.internal_errors > 0 {
            line.push_str(&format!(", {} internal errors (each call passed through)", s.internal_errors));
        }
        for (name, n) in &s.rescued {
            let eq = s.equivalents.get(name).map_or("", String::as_str);
            line.push_str(&format!("; {name} rescued {n} registrations (job-wide equivalent: {eq})"));
        }
        line
    }

    /// At normal process exit: the summary record and line, once, if the process made any call.
    pub fn at_exit(&self) {
        let Some(cfg) = &self.cfg else { return };
        self.debug_panic(PanicAt::Exit);
        let s = self.summary();
        if (s.calls == 0 && s.internal_errors == 0) || self.summarized.swap(true, Relaxed) {
            return;
        }
        if self.log.enabled() {
            let mut r = self.base(Kind::Summary, clock::wall_now_ns());
            r.seq = self.seq.load(Relaxed);
            r.summary = Some(s.clone());
            r.registered_bytes = s.registered_bytes;
            self.emit(&r);
        }
        if cfg.summary {
            // records_written now includes the summary record itself.
            stderr_line(&self.summary_line(&self.summary()));
        }
    }

    /// In the child after fork(2): new pid, own counters, own file if the name has the pid in it.
    pub fn after_fork_child(&self) {
        FORK_GEN.fetch_add(1, Relaxed);
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        self.pid.store(pid, Relaxed);
        self.log.after_fork(pid);
        self.maps.forget();
        for c in Call::ALL {
            self.stats.calls[c.idx()].store(0, Relaxed);
            self.stats.failures[c.idx()].store(0, Relaxed);
        }
        self.stats.probes.store(0, Relaxed);
        self.stats.bytes_total.store(0, Relaxed);
        // Locks another thread of the parent may have held at the fork: the child's own again.
        self.stats.errnos.reset_in_child(BTreeMap::new());
        self.mrs.reset_in_child();
        self.retry.reset_in_child();
        internal::reset_in_child();
        self.summarized.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests;
