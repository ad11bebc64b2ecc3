//! One application call through the shim: the real function once (or an injected failure),
//! then — if it failed and MRSHIM_RETRY allows — the retry engine's attempts, each its own
//! record linked to the call by `parent_seq`; a strategy learned for this kind of memory goes
//! first (sticky retries).
//!
//! Panic boundaries: the hook layer catches a panic anywhere in the call (and hands the caller
//! the real function's answer); inside, recording is guarded on its own (`record_guarded`) so
//! that a panic while writing a record never makes the caller's call — or a rescue's MR, already
//! handed to the caller — happen twice.

use crate::config::PanicAt;
use crate::record::{Done, Tried};
use crate::{clock, internal, rescue, stderr_line, Backend, Meta, Outcome, RegArgs, Shim};
use mrshim_retry::engine::Attempt;

impl Shim {
    /// One application call (see the module doc).
    pub fn call(&self, args: &RegArgs, backend: &dyn Backend) -> Outcome {
        let Some(cfg) = &self.cfg else { return backend.invoke(args) };
        if self.plain {
            let out = backend.invoke(args);
            // A success is only counted, and only if a summary will show it.
            if cfg.summary || !out.ok() {
                let tried = Tried { out, t0: 0, dur: 0, injected: false };
                self.record_guarded(cfg, backend, &Done::new(args, &tried, 0));
            }
            return out;
        }
        let req = Some(args).filter(|a| a.call() != crate::Call::DeregMr && !a.is_probe() && backend.can_retry());
        let env = rescue::ShimEnv::new(self, backend);
        let seq = self.next_seq();
        // Memory inside a bounce region goes through its shadow (coherence, not learning:
        // Engine::shared_bounce_attempt); otherwise, sticky: what worked before for this kind
        // of memory goes first, as the call itself.
        let mut skip = None;
        let up_front = req.and_then(|r| {
            let shared = if backend.in_bounce_region(r.addr, r.length) {
                self.retry.shared_bounce_attempt(r, &env)
            } else {
                None
            };
            shared.or_else(|| self.retry.learned_attempt(r, &env))
        });
        if let Some(a) = up_front {
            let aargs = a.req;
            let t = self.attempt(&aargs, true, &env, backend);
            self.retry.learned_result(&a, t.out.ok());
            let meta = Meta {
                strategy: Some(a.strategy.name()),
                change: Some(&a.change),
                learned: a.learned.is_some(),
                injected: t.injected,
                ..Meta::default()
            };
            if t.out.ok() {
                backend.adopt(a.strategy, args, &aargs, t.out.mr, env.take_shadow());
                self.record_guarded(cfg, backend, &Done { used: Some(&aargs), meta, ..Done::new(args, &t, seq) });
                return t.out;
            }
            // No longer works for this memory: on record as a try of the call that follows
            // (its parent, `seq`), which then goes as usual without this strategy.
            let meta = Meta { parent_seq: Some(seq), ..meta };
            self.record_guarded(
                cfg,
                backend,
                &Done { used: Some(&aargs), meta, ..Done::new(args, &t, self.next_seq()) },
            );
            backend.discard(a.strategy, &aargs, env.take_shadow());
            skip = Some(a.strategy);
        }
        // For dereg, the entry leaves the table before the call: once the real dereg frees the
        // MR, another thread may get the same address for a new one (put back if it fails).
        let before =
            if self.log.enabled() && args.call() == crate::Call::DeregMr { self.mrs.take(args.mr) } else { None };
        let registered_before = Some(self.mrs.current());
        let t = self.attempt(args, req.is_some(), &env, backend);
        self.debug_panic(PanicAt::Call);
        let done = Done { before, registered_before, ..Done::new(args, &t, seq) };
        let Some(r) = req.filter(|_| !t.out.ok() && !self.retry.policy.is_off()) else {
            self.record_guarded(cfg, backend, &done);
            return t.out;
        };
        // The failure is on record before any attempt.
        let mut rescued: Option<(Outcome, Attempt)> = None;
        internal::guarded(args.call().name(), || {
            self.record(cfg, backend, &done);
            let mut try_ = |a: &Attempt| {
                let aargs = a.req;
                let at = self.attempt(&aargs, true, &env, backend);
                let meta = Meta {
                    attempt: a.n,
                    parent_seq: Some(seq),
                    strategy: Some(a.strategy.name()),
                    change: Some(&a.change),
                    injected: at.injected,
                    learned: a.learned.is_some(),
                    ..Meta::default()
                };
                let d = Done { used: Some(&aargs), meta, ..Done::new(args, &at, self.next_seq()) };
                self.record_guarded(cfg, backend, &d);
                if at.out.ok() {
                    Ok(at.out)
                } else {
                    backend.discard(a.strategy, &aargs, env.take_shadow());
                    Err(at.out.err)
                }
            };
            let mut note = |ev: mrshim_retry::engine::Event| self.note(cfg, args, seq, backend, ev);
            rescued = self.retry.rescue(r, t.out.err, &env, skip, &mut try_, &mut note);
        });
        match rescued {
            Some((o, a)) => {
                backend.adopt(a.strategy, args, &a.req, o.mr, env.take_shadow());
                if cfg.warn {
                    self.rescued_line(args, &a);
                }
                Outcome { errno_after: t.out.errno_after, ..o }
            }
            // Every strategy failed: the caller sees the original errno, not the last attempt's.
            None => t.out,
        }
    }

    /// `... MRSHIM INFO ibv_reg_mr_iova2 rescued by bounce: ... (job-wide equivalent: ...)`
    fn rescued_line(&self, args: &RegArgs, a: &Attempt) {
        stderr_line(&format!(
            "{} INFO {} rescued by {}: {} (job-wide equivalent: {})",
            self.prefix(),
            args.call().name(),
            a.strategy.name(),
            a.change,
            a.strategy.global_equivalent()
        ));
    }

    /// One try at the real function, unless MRSHIM_INJECT fails it first (`injectable`: a
    /// registration, not a deregistration, probe or 1.0 ABI call). Clocks only when recording.
    fn attempt(&self, a: &RegArgs, injectable: bool, env: &rescue::ShimEnv, backend: &dyn Backend) -> Tried {
        let t0 = if self.log.enabled() { clock::mono_ns() } else { 0 };
        let took = || if t0 != 0 { clock::mono_ns().saturating_sub(t0) } else { 0 };
        if injectable && !self.inject.is_empty() {
            if let Some(e) = mrshim_retry::inject::check(&self.inject, a, env.kind(a)) {
                let out = Outcome { err: e, errno_after: e, ..Default::default() };
                return Tried { out, dur: took(), t0, injected: true };
            }
        }
        let out = backend.invoke(a);
        Tried { out, dur: took(), t0, injected: false }
    }
}
