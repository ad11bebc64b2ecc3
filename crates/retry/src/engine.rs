//! Walks the policy's strategies for one failed registration and remembers, per memory kind and
//! entry point, which one worked (like libfabric's verbs provider remembering that dmabuf does
//! not work for a memory type), so that with `sticky=on` the next registration of that kind goes
//! straight to it instead of failing first.

use crate::policy::Policy;
use crate::strategy::{Facts, Plan, Strategy};
use crate::{Call, MemKind, Req};
use mrshim_forklock::ForkLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// What the shim provides: facts about the memory and the side effects some strategies need.
pub trait Env {
    fn facts(&self, req: &Req) -> Facts;
    /// Raises the soft RLIMIT_MEMLOCK to the hard one; describes the change.
    fn raise_memlock(&self) -> Result<String, String>;
    /// A dmabuf request for this device memory (exported by its runtime); describes it.
    fn export_dmabuf(&self, req: &Req) -> Result<(Req, String), String>;
    /// A request for a host shadow buffer standing in for this region; describes it.
    fn bounce(&self, req: &Req) -> Result<(Req, String), String>;
}

/// One try, as the shim records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// 1, 2, ... (the application's own call is attempt 0).
    pub n: u32,
    pub strategy: Strategy,
    pub req: Req,
    pub change: String,
    /// Applied up front because it worked before for this kind of the caller's memory (sticky).
    pub learned: Option<MemKind>,
}

/// What happened, for the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Tried(Attempt, Result<(), i32>),
    Refused {
        strategy: Strategy,
        reason: String,
    },
    /// A change of learned policy (logged once per change).
    Learned {
        kind: MemKind,
        entry: Call,
        strategy: Strategy,
    },
}

#[derive(Default)]
pub struct Engine {
    pub policy: Policy,
    learned: ForkLock<HashMap<(MemKind, Call), (Strategy, i32)>>,
    /// Set with the first learned entry: until then a registration needs no facts up front.
    any_learned: AtomicBool,
    rescued: ForkLock<HashMap<Strategy, u64>>,
}

impl Engine {
    pub fn new(policy: Policy) -> Engine {
        Engine { policy, ..Default::default() }
    }

    /// In a forked child: the locks may have been held by a parent thread; start over (what was
    /// learned is for the parent's memory, the counts are the parent's).
    ///
    /// # Safety
    /// Only in a forked child, from its atfork child handler: the child has one thread, and no
    /// guard of that thread is alive.
    pub unsafe fn reset_in_child(&self) {
        // SAFETY: the caller's contract, for both locks.
        unsafe {
            self.learned.reset_in_child(HashMap::new());
            self.rescued.reset_in_child(HashMap::new());
        }
        self.any_learned.store(false, Relaxed);
    }

    /// How many registrations each strategy rescued (learned applications included).
    pub fn rescued(&self) -> Vec<(Strategy, u64)> {
        let mut v: Vec<_> = self.rescued.lock().iter().map(|(s, n)| (*s, *n)).collect();
        v.sort();
        v
    }

    /// True once sticky mode learned anything: only then can a registration start with
    /// something other than the caller's own call.
    #[inline]
    pub fn has_learned(&self) -> bool {
        self.any_learned.load(Relaxed)
    }

    /// Sticky mode: the strategy that worked for this kind of memory, applied before the
    /// original call. None when nothing is learned (or it no longer applies).
    pub fn learned_attempt(&self, req: &Req, env: &dyn Env) -> Option<Attempt> {
        if !self.has_learned() || !self.policy.sticky || req.is_probe() || self.policy.is_off() {
            return None;
        }
        let kind = env.facts(req).kind;
        let (strategy, errno) = *self.learned.lock().get(&(kind, req.entry))?;
        let (req2, change) = self.prepare(strategy, req, errno, env).ok()??;
        Some(Attempt { n: 0, strategy, req: req2, change, learned: Some(kind) })
    }

    /// The learned attempt worked: count it. (It failed: forget it for that kind of memory, and
    /// call `rescue` as usual, skipping it.)
    pub fn learned_result(&self, a: &Attempt, ok: bool) {
        if ok {
            *self.rescued.lock().entry(a.strategy).or_default() += 1;
        } else if let Some(kind) = a.learned {
            self.learned.lock().retain(|(k, _), (s, _)| !(*k == kind && *s == a.strategy));
        }
    }

    /// Ok(Some) a request to try, Ok(None) skip, Err(reason) refused.
    fn prepare(&self, s: Strategy, r: &Req, errno: i32, env: &dyn Env) -> Result<Option<(Req, String)>, String> {
        match s.plan(r, errno, &env.facts(r)) {
            Plan::Skip => Ok(None),
            Plan::Refused(why) => Err(why),
            Plan::Try { req, change } => Ok(Some((req, change))),
            Plan::Prepare => match s {
                Strategy::RaiseMemlock => env.raise_memlock().map(|c| Some((*r, c))),
                Strategy::VaToDmabuf => env.export_dmabuf(r).map(Some),
                Strategy::Bounce => env.bounce(r).map(Some),
                _ => Ok(None),
            },
        }
    }

    /// Walks the strategies for a failed call. `try_` performs one attempt (the real call, or an
    /// injected failure); `note` receives every event in order. Returns the first success.
    /// None: nothing worked, and the caller must see the original errno.
    pub fn rescue<T>(
        &self,
        orig: &Req,
        errno: i32,
        env: &dyn Env,
        skip: Option<Strategy>,
        try_: &mut dyn FnMut(&Attempt) -> Result<T, i32>,
        note: &mut dyn FnMut(Event),
    ) -> Option<(T, Attempt)> {
        if orig.is_probe() {
            return None;
        }
        let mut n = 0;
        for &s in self.policy.for_failure(orig.entry, errno) {
            if Some(s) == skip {
                continue;
            }
            if n >= self.policy.max_attempts {
                break;
            }
            let (req, change) = match self.prepare(s, orig, errno, env) {
                Ok(Some(x)) => x,
                Ok(None) => continue,
                Err(reason) => {
                    note(Event::Refused { strategy: s, reason });
                    continue;
                }
            };
            n += 1;
            let a = Attempt { n, strategy: s, req, change, learned: None };
            match try_(&a) {
                Ok(t) => {
                    note(Event::Tried(a.clone(), Ok(())));
                    *self.rescued.lock().entry(s).or_default() += 1;
                    self.learn(orig, errno, s, env, note);
                    return Some((t, a));
                }
                Err(e) => note(Event::Tried(a, Err(e))),
            }
        }
        None
    }

    fn learn(&self, orig: &Req, errno: i32, s: Strategy, env: &dyn Env, note: &mut dyn FnMut(Event)) {
        // raise-memlock fixes the process, not the memory: nothing to apply up front next time.
        if !self.policy.sticky || s == Strategy::RaiseMemlock {
            return;
        }
        let kind = env.facts(orig).kind;
        let prev = self.learned.lock().insert((kind, orig.entry), (s, errno));
        self.any_learned.store(true, Relaxed);
        if prev.map(|p| p.0) != Some(s) {
            note(Event::Learned { kind, entry: orig.entry, strategy: s });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use mrshim_verbs::access::RELAXED_ORDERING as RO;
    use std::cell::Cell;

    struct FakeEnv {
        kind: MemKind,
        memlock: Cell<(u64, u64)>,
    }

    impl Env for FakeEnv {
        fn facts(&self, _r: &Req) -> Facts {
            Facts {
                kind: self.kind,
                memlock: self.memlock.get(),
                memlock_raised: false,
                can_export_dmabuf: self.kind == MemKind::Device,
            }
        }
        fn raise_memlock(&self) -> Result<String, String> {
            let (s, h) = self.memlock.get();
            self.memlock.set((h, h));
            Ok(format!("RLIMIT_MEMLOCK soft {s} -> {h}"))
        }
        fn export_dmabuf(&self, r: &Req) -> Result<(Req, String), String> {
            Ok((Req { entry: Call::RegDmabufMr, dmabuf_fd: 9, dmabuf_offset: 0, ..*r }, "exported fd 9".into()))
        }
        fn bounce(&self, _r: &Req) -> Result<(Req, String), String> {
            Err("host bounce buffers are not available".into())
        }
    }

    fn req(access: u32) -> Req {
        Req {
            entry: Call::RegMrIova2,
            addr: 0x10000,
            length: 1 << 20,
            iova: 0x10000,
            access,
            dmabuf_fd: -1,
            dmabuf_offset: 0,
        }
    }

    /// A device that rejects relaxed ordering, like the seed's injected failure.
    fn no_relaxed(a: &Attempt) -> Result<u32, i32> {
        if a.req.access & RO != 0 {
            Err(libc::EINVAL)
        } else {
            Ok(a.n)
        }
    }

    #[test]
    fn seed_rescued_by_drop_relaxed_ordering_and_learned() {
        let e = Engine::new(Policy::parse("auto").unwrap());
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)) };
        let mut events = Vec::new();
        let got = e.rescue(&req(0xf | RO), libc::EINVAL, &env, None, &mut no_relaxed, &mut |ev| events.push(ev));
        let (_, a) = got.expect("rescued");
        assert_eq!(a.strategy, Strategy::DropRelaxedOrdering);
        assert!(
            matches!(
                &events[..],
                [Event::Tried(_, Ok(())), Event::Learned { strategy: Strategy::DropRelaxedOrdering, .. }]
            ),
            "{events:?}"
        );
        // Sticky: the next one goes straight to the learned variant, 1000 times, no new failures.
        for _ in 0..1000 {
            let l = e.learned_attempt(&req(0xf | RO), &env).expect("learned");
            assert!(l.learned == Some(MemKind::HostAnon) && l.req.access == 0xf);
            e.learned_result(&l, no_relaxed(&l).is_ok());
        }
        assert_eq!(e.rescued(), vec![(Strategy::DropRelaxedOrdering, 1001)]);
    }

    #[test]
    fn memlock_raised_once_on_enomem() {
        let e = Engine::new(Policy::parse("drop-relaxed-ordering,raise-memlock").unwrap());
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((64 << 10, 1 << 30)) };
        let mut try_ = |a: &Attempt| if env.memlock.get().0 >= a.req.length { Ok(()) } else { Err(libc::ENOMEM) };
        let mut events = Vec::new();
        let (_, a) = e.rescue(&req(0xf), libc::ENOMEM, &env, None, &mut try_, &mut |ev| events.push(ev)).unwrap();
        assert_eq!(a.strategy, Strategy::RaiseMemlock);
        assert!(a.change.contains("65536 -> 1073741824"), "{}", a.change);
        assert!(e.learned_attempt(&req(0xf), &env).is_none(), "raise-memlock is not applied up front");
    }

    #[test]
    fn refusals_are_reported_and_original_errno_kept() {
        let e = Engine::new(Policy::parse("auto").unwrap());
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)) };
        let mut r = req(0xf);
        r.iova = 0x20010;
        let mut events = Vec::new();
        let got: Option<((), Attempt)> =
            e.rescue(&r, libc::EINVAL, &env, None, &mut |_| Err(libc::EINVAL), &mut |ev| events.push(ev));
        assert!(got.is_none());
        let refused: Vec<Strategy> = events
            .iter()
            .filter_map(|ev| match ev {
                Event::Refused { strategy, .. } => Some(*strategy),
                _ => None,
            })
            .collect();
        assert_eq!(refused, vec![Strategy::RealignIova, Strategy::Bounce]);
    }

    #[test]
    fn device_memory_goes_to_dmabuf_and_probes_are_never_retried() {
        let e = Engine::new(Policy::parse("auto").unwrap());
        let env = FakeEnv { kind: MemKind::Device, memlock: Cell::new((u64::MAX, u64::MAX)) };
        let mut try_ = |a: &Attempt| if a.req.entry == Call::RegDmabufMr { Ok(()) } else { Err(libc::EINVAL) };
        let (_, a) = e.rescue(&req(0xf | RO), libc::EINVAL, &env, None, &mut try_, &mut |_| {}).unwrap();
        assert_eq!((a.strategy, a.n), (Strategy::VaToDmabuf, 2), "drop-relaxed-ordering tried first and failed");
        let probe = Req { entry: Call::RegDmabufMr, dmabuf_fd: -1, ..req(0) };
        let mut calls = 0;
        let got: Option<((), Attempt)> = e.rescue(
            &probe,
            libc::EOPNOTSUPP,
            &env,
            None,
            &mut |_| {
                calls += 1;
                Ok(())
            },
            &mut |_| {},
        );
        assert!(got.is_none() && calls == 0);
    }

    proptest::proptest! {
        /// Random policies against random failure sets: never a panic, never more attempts than
        /// allowed, and a success only ever comes from an attempt the device accepted.
        #[test]
        fn random_policies_and_failures(mask in 0u64..64, pol in 0usize..6, max in 1u32..8, access_ro: bool, dev: bool) {
            let names: Vec<&str> = Strategy::ALL.iter().cycle().skip(pol).take(3).map(|s| s.name()).collect();
            let e = Engine::new(Policy::parse(&format!("{};max_attempts={max}", names.join(","))).unwrap());
            let env = FakeEnv { kind: if dev { MemKind::Device } else { MemKind::HostAnon }, memlock: Cell::new((4096, 1 << 40)) };
            let r = req(if access_ro { 0xf | RO } else { 0xf });
            let accepts = |a: &Attempt| mask & (1 << (Strategy::ALL.iter().position(|s| *s == a.strategy).unwrap())) != 0;
            let mut n = 0u32;
            let got = e.rescue(&r, libc::ENOMEM, &env, None, &mut |a| { n += 1; if accepts(a) { Ok(a.clone()) } else { Err(libc::EINVAL) } }, &mut |_| {});
            proptest::prop_assert!(n <= max);
            if let Some((a, _)) = got { proptest::prop_assert!(accepts(&a)); }
        }
    }
}
