//! The logic of libmrshim.so, in plain (mostly safe) Rust so that it is unit-testable without
//! interposing on anything. The FFI layer (src/preload in the root crate) turns each intercepted
//! call into a [`RegArgs`], hands [`Shim::call`] a [`Backend`] that calls the real function, and
//! passes the [`Outcome`] back to the application.
//!
//! By job: [`call`] (the shared types of one call), [`call_path`] (one call: the real function
//! once, then retry attempts), [`record`] (records and counters), [`report`] (stderr lines and
//! the exit summary), [`mr_table`] (live MRs and registered bytes), [`line`] (the fast record
//! writer), [`log`] (the log file; [`logmap`]: its shared mapping), [`config`], [`ident`], [`maps`], [`limits`], [`clock`],
//! [`rescue`] (the retry engine wired to the shim), [`internal`] (the panic catcher), [`rereg`]
//! (`ibv_rereg_mr`: [`Shim::rereg`]).
//! Here: the per-process [`Shim`] state, its construction and its fork handling.

pub mod call;
pub mod call_path;
pub mod clock;
pub mod config;
pub mod device_files;
pub mod ident;
pub mod internal;
pub mod job;
pub mod limits;
pub mod line;
pub mod log;
pub mod logfile;
pub mod logmap;
pub mod maps;
mod mr_table;
mod record;
pub mod report;
pub mod rereg;
pub mod rescue;
pub mod violation;

pub use call::{Backend, Call, DevName, Meta, Outcome, RegArgs, Staged, StagedShadow};
pub use report::{set_device_probe, stderr_line};

use config::{Config, LogDest, PanicAt};
use mr_table::MrTable;
use mrshim_forklock::ForkLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};

#[derive(Default)]
struct Stats {
    calls: [AtomicU64; Call::ALL.len()],
    failures: [AtomicU64; Call::ALL.len()],
    probes: AtomicU64,
    errnos: ForkLock<BTreeMap<(Call, i32), u64>>,
    bytes_total: AtomicU64,
}

/// The shim's state for this process.
pub struct Shim {
    /// `None`: configuration was bad; every call passes through unrecorded.
    cfg: Option<Config>,
    host: String,
    pid: AtomicU32,
    rank: Option<(i64, &'static str)>,
    local_rank: Option<(i64, &'static str)>,
    job: job::Job,
    env_echo: BTreeMap<String, String>,
    page: u64,
    seq: AtomicU64,
    log: log::Log,
    maps: maps::MapsCache,
    stats: Stats,
    mrs: MrTable,
    summarized: AtomicBool,
    clock: clock::Clock,
    /// CLOCK_MONOTONIC when the shim was built (in a forked child: the fork): the config
    /// record's time, never later than any record of the process.
    started: AtomicU64,
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
///
/// # Safety
/// Only in a forked child, from its atfork child handler: the child has one thread, and no
/// guard of that thread is alive.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract.
    unsafe { SHIM.reset_in_child() };
    if let Some(s) = SHIM.get() {
        // SAFETY: the caller's contract.
        unsafe { s.after_fork_child() };
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
            // Values through `get`; which library settings exist needs the names of the real
            // environment (in production `get` reads that same environment).
            job: job::Job::from_env(get, job::env_names()),
            env_echo,
            page: if page > 0 { page as u64 } else { 4096 },
            seq: AtomicU64::new(1),
            log,
            maps: maps::MapsCache::new(),
            stats: Stats::default(),
            mrs: MrTable::new(),
            summarized: AtomicBool::new(false),
            clock: clock::Clock::default(),
            started: AtomicU64::new(clock::mono_ns()),
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

    /// Whether the retry policy can make a bounce region (MRSHIM_RETRY names `bounce`, or
    /// `auto`, for some failure).
    pub fn may_bounce(&self) -> bool {
        self.retry.policy.uses(mrshim_retry::strategy::Strategy::Bounce)
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

    /// Registered bytes after a successful registration or deregistration of `mr` (`live`: the
    /// MR as the application asked for it).
    pub(crate) fn count_ok(&self, call: Call, mr: usize, live: mr_table::Live, track: bool) -> u64 {
        if call == Call::DeregMr {
            self.mrs.remove(mr, live.len, track)
        } else {
            self.stats.bytes_total.fetch_add(live.len, Relaxed);
            self.mrs.insert(mr, live, track)
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
        self.stats.calls[call.index()].fetch_add(1, Relaxed);
        self.count_ok(call, mr, mr_table::Live { len: length, ..Default::default() }, false);
    }

    pub(crate) fn next_seq(&self) -> u64 {
        if self.log.enabled() {
            self.seq.fetch_add(1, Relaxed)
        } else {
            0
        }
    }

    /// In the child after fork(2): new pid, own counters, own file if the name has the pid in it.
    ///
    /// # Safety
    /// Only in a forked child, from its atfork child handler: the child has one thread, and no
    /// guard of that thread is alive.
    pub unsafe fn after_fork_child(&self) {
        ident::forget_tids();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        self.pid.store(pid, Relaxed);
        self.started.store(clock::mono_ns(), Relaxed);
        // SAFETY: the caller's contract (also for the resets below).
        unsafe { self.log.after_fork(pid) };
        self.maps.forget();
        for c in Call::ALL {
            self.stats.calls[c.index()].store(0, Relaxed);
            self.stats.failures[c.index()].store(0, Relaxed);
        }
        self.stats.probes.store(0, Relaxed);
        self.stats.bytes_total.store(0, Relaxed);
        // Locks another thread of the parent may have held at the fork: the child's own again.
        // SAFETY: as above.
        unsafe {
            self.stats.errnos.reset_in_child(BTreeMap::new());
            self.mrs.reset_in_child();
            self.retry.reset_in_child();
        }
        internal::reset_in_child();
        violation::reset_in_child();
        self.summarized.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests;
