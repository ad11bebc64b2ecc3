//! Records: one JSON line per call, attempt, refusal, learned policy, caught panic, plus the
//! config line that opens every log. A call's record is built from a [`Done`] — what the
//! application asked, what the shim called instead (retry attempts), what came back — and
//! written by the hand writer in [`crate::line`] (one write(2) per record).

use crate::config::{Config, Level, LogDest, PanicAt};
use crate::ident::tid;
use crate::log;
use crate::{clock, line, stderr_line, Backend, Call, DevName, Meta, Outcome, RegArgs, Shim};
use mrshim_record::{Kind, MemKind, Reg, SCHEMA_VERSION};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

thread_local! {
    /// The record scratch buffer: it only grows, no zeroing or allocation per record.
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One finished call (or retry attempt), everything its record and counters need.
pub(crate) struct Done<'a> {
    /// The application's arguments, exactly as it asked: the record's addr, length, access and
    /// mem_kind.
    pub asked: &'a RegArgs,
    /// What the shim called instead (a retry attempt's arguments): the record's call, iova,
    /// dmabuf fields, and `used_*` wherever it differs from `asked`.
    pub used: Option<&'a RegArgs>,
    pub out: Outcome,
    pub seq: u64,
    /// Monotonic start (0: not clocked) and duration, ns.
    pub t0: u64,
    pub dur: u64,
    /// Dereg: the MR table's entry, taken out before the real call.
    pub before: Option<crate::mr_table::Live>,
    /// Registered bytes before the call (None: as the table says now).
    pub registered_before: Option<u64>,
    pub meta: Meta<'a>,
}

impl<'a> Done<'a> {
    pub fn new(asked: &'a RegArgs, t: &crate::call_path::Tried, seq: u64) -> Done<'a> {
        Done {
            asked,
            used: None,
            out: t.out,
            seq,
            t0: t.t0,
            dur: t.dur,
            before: None,
            registered_before: None,
            meta: Meta { injected: t.injected, ..Meta::default() },
        }
    }
    /// What was really called.
    fn called(&self) -> &'a RegArgs {
        self.used.unwrap_or(self.asked)
    }
}

/// The memory behind a registration: kind, and for host memory its mapping's name and whether
/// the range is fully mapped.
struct Memory {
    kind: MemKind,
    region: Option<Arc<str>>,
    fully_mapped: Option<bool>,
}

impl Shim {
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

    /// A `policy` record of a strategy refused for good, e.g. `copy_selftest`: a GPU copy engine
    /// that failed its self-test, so `strategy` (bounce) refuses that runtime's memory.
    pub fn record_policy_note(&self, call: &str, strategy: &str, change: &str) {
        if !self.log.enabled() {
            return;
        }
        let mut r = self.base(Kind::Policy, clock::wall_now_ns());
        r.seq = self.next_seq();
        r.call = call.into();
        r.strategy = Some(strategy.into());
        r.result = "refused".into();
        r.change = Some(change.into());
        self.emit(&r);
    }

    /// `record`, with a panic in it caught and reported (the call's outcome stands).
    pub(crate) fn record_guarded(&self, cfg: &Config, backend: &dyn Backend, d: &Done) {
        crate::internal::guarded(d.called().call().name(), || self.record(cfg, backend, d));
    }

    /// Refusals and learned-policy changes, as records.
    pub(crate) fn note(
        &self,
        cfg: &Config,
        args: &RegArgs,
        parent: u64,
        backend: &dyn Backend,
        ev: mrshim_retry::engine::Event,
    ) {
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
                let tried = crate::call_path::Tried {
                    out: Outcome { err: -1, ..Default::default() },
                    t0: clock::mono_ns(),
                    dur: 0,
                    injected: false,
                };
                self.record_guarded(cfg, backend, &Done { meta, ..Done::new(args, &tried, self.next_seq()) });
            }
            Event::Learned { kind, entry, strategy } => {
                let line = format!(
                    "{} INFO learned: {} of {} memory goes straight to {}",
                    self.prefix(),
                    entry.name(),
                    kind.name(),
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
                        kind.name(),
                        strategy.name()
                    ));
                    self.emit(&r);
                }
            }
            Event::Tried(..) => {}
        }
    }

    fn memory(&self, a: &RegArgs, probe: bool, failed: bool, t0: u64, backend: &dyn Backend) -> Memory {
        if a.dmabuf_fd.is_some() {
            let kind = if probe { MemKind::Unknown } else { MemKind::Device };
            return Memory { kind, region: None, fully_mapped: None };
        }
        if backend.is_device_memory(a.addr) {
            // The GPU runtime knows its memory; /proc/self/maps only sees a mapping.
            return Memory { kind: MemKind::Device, region: None, fully_mapped: None };
        }
        let m = self.maps.classify(a.addr, a.length, failed, if t0 != 0 { t0 } else { clock::mono_ns() });
        Memory { kind: m.kind, region: m.path, fully_mapped: Some(m.fully_mapped) }
    }

    /// Counters, the MR table, the WARN line of a failed application call, and its record.
    pub(crate) fn record(&self, cfg: &Config, backend: &dyn Backend, d: &Done) {
        let (asked, a, out) = (d.asked, d.called(), &d.out);
        let meta = &d.meta;
        let call = a.call();
        let probe = a.is_probe();
        let registered_before = d.registered_before.unwrap_or_else(|| self.mrs.current());
        // Attempts, refusals and failed learned tries (all linked to a parent) are not
        // application calls.
        let app_call = meta.parent_seq.is_none();
        if app_call {
            self.stats.calls[call.index()].fetch_add(1, Relaxed);
        }
        if meta.refused {
        } else if probe {
            self.stats.probes.fetch_add(1, Relaxed);
        } else if !out.ok() && app_call {
            self.stats.failures[call.index()].fetch_add(1, Relaxed);
            *self.stats.errnos.lock().entry((call, out.err)).or_default() += 1;
        }
        let recording = self.log.enabled();
        let registered_after = match (call, d.before) {
            // taken out of the table already: only the byte count changes
            (Call::DeregMr, Some(e)) if out.ok() => self.mrs.remove(a.mr, e.len, false),
            (Call::DeregMr, Some(entry)) => {
                self.mrs.put_back(a.mr, entry);
                registered_before
            }
            _ if out.ok() && !probe => {
                // the table keeps the MR as the application asked for it (a rescue's too)
                let live = crate::mr_table::Live { len: a.length, seq: d.seq, addr: asked.addr, access: asked.access };
                self.count_ok(call, if call == Call::DeregMr { a.mr } else { out.mr }, live, recording)
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
        let t0 = d.t0;
        let mut l = line::RegLine {
            kind: if dereg { Kind::Dereg } else { Kind::Reg },
            seq: d.seq,
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
            duration_ns: d.dur,
            probe,
            meta: *meta,
            ..Default::default()
        };
        if dereg {
            l.mr = Some(a.mr as u64);
            l.reg_seq = d.before.map(|b| b.seq);
            if a.addr != 0 || a.length != 0 {
                l.addr = Some(a.addr);
                l.length = Some(a.length);
            }
        } else {
            // addr, length, access and the memory kind as the application asked
            l.addr = Some(asked.addr);
            l.length = Some(asked.length);
            l.addr_page_offset = Some(asked.addr % self.page);
            l.addr_align = Some(asked.addr & asked.addr.wrapping_neg());
            if let Some(iova) = a.iova {
                l.iova = Some(iova);
                l.iova_page_offset = Some(iova % self.page);
            }
            l.access = Some(asked.access);
            l.dmabuf_fd = a.dmabuf_fd;
            l.dmabuf_offset = a.dmabuf_offset;
            let m = self.memory(asked, asked.is_probe(), !out.ok(), t0, backend);
            l.mem_kind = Some(m.kind);
            l.mem_region = m.region;
            l.mem_fully_mapped = m.fully_mapped;
            // what the shim registered instead, where it differs
            if let Some(u) = d.used {
                l.used_addr = (u.addr != asked.addr).then_some(u.addr);
                l.used_length = (u.length != asked.length).then_some(u.length);
                l.used_access = (u.access != asked.access).then_some(u.access);
                let used_kind = if u.addr == asked.addr && u.dmabuf_fd.is_some() == asked.dmabuf_fd.is_some() {
                    m.kind
                } else {
                    self.memory(u, probe, !out.ok(), t0, backend).kind
                };
                l.used_mem_kind = (used_kind != m.kind).then_some(used_kind);
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
        self.emit_line(&l);
    }

    /// Writes `l` through the thread's scratch buffer (a fresh one while it is busy or gone).
    pub(crate) fn emit_line(&self, l: &line::RegLine) {
        let written = LINE.try_with(|b| {
            let Ok(mut b) = b.try_borrow_mut() else { return false };
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

    pub(crate) fn base(&self, kind: Kind, time_ns: u64) -> Reg {
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

    pub(crate) fn emit(&self, r: &Reg) {
        self.emit_bytes(r.to_line().as_bytes());
    }

    fn emit_bytes(&self, line: &[u8]) {
        let first = || self.config_record().to_line().into_bytes();
        let ctx = log::OpenCtx {
            host: &self.host,
            pid: self.pid.load(Relaxed),
            rank: self.rank.map(|r| r.0),
            job: &self.job.file_name_id(),
            first_line: &first,
        };
        self.log.write_line(line, &ctx);
    }

    /// The first line of every log: version, executable, environment, effective settings.
    pub fn config_record(&self) -> Reg {
        // When the shim started: the record is written with the first record that opens the
        // log, whose time is that call's start, after this.
        let mut r = self.base(Kind::Config, self.clock.wall_ns_before(self.started.load(Relaxed)));
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
            s.insert("debug".into(), if c.info { "INFO" } else { "WARN" }.into());
            s.insert("warn".into(), if c.warn { "on" } else { "off" }.into());
            s.insert("retry".into(), c.retry.describe());
            if !c.inject.is_empty() {
                s.insert("inject".into(), c.inject.clone());
            }
            s.insert("bounce_track".into(), if c.bounce_track { "on" } else { "off" }.into());
            s.insert("copy_selftest".into(), if c.copy_selftest { "on" } else { "auto" }.into());
        }
        if let Some((_, v)) = self.rank {
            s.insert("rank_from".into(), v.into());
        }
        if let Some((_, v)) = self.local_rank {
            s.insert("local_rank_from".into(), v.into());
        }
        if let Some((id, v)) = &self.job.id {
            r.job_id = Some(id.clone());
            s.insert("job_id_from".into(), v.to_string());
        }
        if let Some((n, v)) = self.job.world_size {
            r.world_size = Some(n);
            s.insert("world_size_from".into(), v.into());
        }
        r.launcher = self.job.launcher.map(String::from);
        if !self.job.knobs.is_empty() {
            r.job_env = Some(self.job.knobs.clone());
        }
        s.insert("page_size".into(), self.page.to_string());
        r.settings = Some(s);
        r
    }
}
