//! Walks the policy's strategies for one failed registration and remembers which one worked,
//! keyed by the cause it proved — the errno, the memory kind and the entry point of the failure
//! (like libfabric's verbs provider remembering that dmabuf does not work for a memory type).
//! With `sticky=on` the next failure with that cause goes straight to it; a strategy that only
//! changes how the same memory is registered ([`Strategy::up_front`]) is applied before the
//! caller's own call instead, so that call does not fail first. Bounce is never applied up
//! front: a registration the device accepts is never bounced (docs/retry.md, "Sticky").

use crate::policy::Policy;
use crate::strategy::{Facts, Plan, Strategy};
use crate::{Call, MemKind, RegArgs};
use mrshim_forklock::ForkLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// What the shim provides: facts about the memory and the side effects some strategies need.
/// What a strategy then makes of the request is the strategy's ([`Strategy`]).
pub trait Env {
    fn facts(&self, req: &RegArgs) -> Facts;
    /// Raises the soft RLIMIT_MEMLOCK to the hard one; describes the change.
    fn raise_memlock(&self) -> Result<String, String>;
    /// A dmabuf of this device memory exported by its runtime: (fd, offset of the address).
    fn export_dmabuf(&self, req: &RegArgs) -> Result<(i32, u64), String>;
    /// A host shadow standing in for this region: the address to register.
    fn bounce(&self, req: &RegArgs) -> Result<u64, String>;
}

/// One try, as the shim records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// 1, 2, ... (the application's own call is attempt 0).
    pub n: u32,
    pub strategy: Strategy,
    pub req: RegArgs,
    pub change: String,
    /// Taken first because it rescued this cause before (sticky): the kind of the caller's
    /// memory it was learned for.
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
    /// The request is invalid by the verbs specification: nothing is tried.
    Invalid {
        reason: String,
    },
    /// A change of learned policy (logged once per change).
    Learned {
        kind: MemKind,
        entry: Call,
        errno: i32,
        strategy: Strategy,
    },
}

/// The cause a rescue proved: this memory kind through this entry point failed with this errno.
type Cause = (MemKind, Call, i32);

#[derive(Default)]
pub struct Engine {
    pub policy: Policy,
    learned: ForkLock<HashMap<Cause, Strategy>>,
    /// Set with the first learned up-front strategy: until then a registration needs no facts
    /// before its own call.
    any_up_front: AtomicBool,
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
        self.any_up_front.store(false, Relaxed);
    }

    /// How many registrations each strategy rescued (learned applications included).
    pub fn rescued(&self) -> Vec<(Strategy, u64)> {
        let mut v: Vec<_> = self.rescued.lock().iter().map(|(s, n)| (*s, *n)).collect();
        v.sort();
        v
    }

    /// True once sticky mode learned a strategy it applies up front: only then can a
    /// registration start with something other than the caller's own call.
    #[inline]
    pub fn has_learned(&self) -> bool {
        self.any_up_front.load(Relaxed)
    }

    /// Before the caller's own call, for memory that already has a bounce region: the same
    /// shadow, whatever this request's access (the policy must allow bounce). Not a learned
    /// strategy but coherence: a second MR registered directly on the buffer would let a NIC
    /// write it past the shadow's write tracking. None when bounce does not apply (a probe, a
    /// request invalid by the verbs specification, a policy without bounce, the contract).
    pub fn shared_bounce_attempt(&self, req: &RegArgs, env: &dyn Env) -> Option<Attempt> {
        if !self.policy.uses(Strategy::Bounce) || req.is_probe() || req.spec_violation().is_some() {
            return None;
        }
        let (req2, change) = self.prepare(Strategy::Bounce, req, 0, env).ok()??;
        let change = format!("memory inside a bounce region: its shadow, {change}");
        Some(Attempt { n: 0, strategy: Strategy::Bounce, req: req2, change, learned: None })
    }

    /// Sticky mode, before the caller's own call: an up-front strategy that rescued this kind
    /// of memory through this entry point. None when nothing applies.
    pub fn learned_attempt(&self, req: &RegArgs, env: &dyn Env) -> Option<Attempt> {
        if !self.has_learned() || !self.policy.sticky || req.is_probe() || self.policy.is_off() {
            return None;
        }
        if req.spec_violation().is_some() {
            return None;
        }
        let kind = env.facts(req).kind;
        let (strategy, errno) = self
            .learned
            .lock()
            .iter()
            .filter(|((k, c, _), s)| *k == kind && *c == req.call() && s.up_front())
            .map(|((_, _, e), s)| (*s, *e))
            .min()?;
        let (req2, change) = self.prepare(strategy, req, errno, env).ok()??;
        Some(Attempt { n: 0, strategy, req: req2, change, learned: Some(kind) })
    }

    /// The learned attempt worked: count it. (It failed: forget it for that kind of memory, and
    /// call `rescue` as usual, skipping it.)
    pub fn learned_result(&self, a: &Attempt, ok: bool) {
        if ok {
            *self.rescued.lock().entry(a.strategy).or_default() += 1;
        } else if let Some(kind) = a.learned {
            self.learned.lock().retain(|(k, _, _), s| !(*k == kind && *s == a.strategy));
        }
    }

    /// Ok(Some) a request to try, Ok(None) skip, Err(reason) refused.
    fn prepare(
        &self,
        s: Strategy,
        r: &RegArgs,
        errno: i32,
        env: &dyn Env,
    ) -> Result<Option<(RegArgs, String)>, String> {
        match s.plan(r, errno, &env.facts(r), &self.policy) {
            Plan::Skip => Ok(None),
            Plan::Refused(why) => Err(why),
            Plan::Try { req, change } => Ok(Some((req, change))),
            Plan::Prepare => match s {
                Strategy::RaiseMemlock => env.raise_memlock().map(|c| Some((*r, c))),
                Strategy::VaToDmabuf => {
                    env.export_dmabuf(r).map(|(fd, off)| Some(Strategy::dmabuf_request(r, fd, off)))
                }
                Strategy::Bounce => env.bounce(r).map(|shadow| Some(Strategy::bounce_request(r, shadow))),
                _ => Ok(None),
            },
        }
    }

    /// Walks the strategies for a failed call. `try_` performs one attempt (the real call, or an
    /// injected failure); `note` receives every event in order. Returns the first success.
    /// None: nothing worked, and the caller must see the original errno. A request invalid by
    /// the verbs specification is never retried. A strategy that rescued this cause before goes
    /// first.
    pub fn rescue<T>(
        &self,
        orig: &RegArgs,
        errno: i32,
        env: &dyn Env,
        skip: Option<Strategy>,
        try_: &mut dyn FnMut(&Attempt) -> Result<T, i32>,
        note: &mut dyn FnMut(Event),
    ) -> Option<(T, Attempt)> {
        if orig.is_probe() {
            return None;
        }
        if let Some(reason) = orig.spec_violation() {
            note(Event::Invalid { reason });
            return None;
        }
        let list = self.policy.for_failure(orig.call(), errno);
        if list.is_empty() {
            return None;
        }
        let cause = || (env.facts(orig).kind, orig.call(), errno);
        let first = if self.policy.sticky { self.learned.lock().get(&cause()).copied() } else { None }
            .filter(|s| list.contains(s) && Some(*s) != skip);
        let order = first.into_iter().chain(list.iter().copied().filter(|s| Some(*s) != first));
        let mut n = 0;
        for s in order {
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
            let learned = (first == Some(s)).then(|| cause().0);
            let a = Attempt { n, strategy: s, req, change, learned };
            match try_(&a) {
                Ok(t) => {
                    note(Event::Tried(a.clone(), Ok(())));
                    *self.rescued.lock().entry(s).or_default() += 1;
                    self.learn(cause(), s, note);
                    return Some((t, a));
                }
                Err(e) => {
                    if learned.is_some() {
                        // No longer rescues this cause: the walk goes on without it.
                        self.learned.lock().remove(&cause());
                    }
                    note(Event::Tried(a, Err(e)))
                }
            }
        }
        None
    }

    fn learn(&self, (kind, entry, errno): Cause, s: Strategy, note: &mut dyn FnMut(Event)) {
        // raise-memlock fixes the process, not the memory: nothing to remember.
        if !self.policy.sticky || s == Strategy::RaiseMemlock {
            return;
        }
        let prev = self.learned.lock().insert((kind, entry, errno), s);
        if s.up_front() {
            self.any_up_front.store(true, Relaxed);
        }
        if prev != Some(s) {
            note(Event::Learned { kind, entry, errno, strategy: s });
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
        shadow: Option<u64>,
    }

    impl Env for FakeEnv {
        fn facts(&self, _r: &RegArgs) -> Facts {
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
        fn export_dmabuf(&self, _r: &RegArgs) -> Result<(i32, u64), String> {
            Ok((9, 0))
        }
        fn bounce(&self, _r: &RegArgs) -> Result<u64, String> {
            self.shadow.ok_or_else(|| "host bounce buffers are not available".into())
        }
    }

    fn req(access: u32) -> RegArgs {
        RegArgs {
            call: Some(Call::RegMrIova2),
            addr: 0x10000,
            length: 1 << 20,
            iova: Some(0x10000),
            access,
            ..Default::default()
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
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)), shadow: None };
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

    /// Memory already inside a bounce region: its shadow, whatever the access, when the policy
    /// has bounce; never for a probe, a spec-invalid request or a policy without bounce.
    #[test]
    fn memory_inside_a_bounce_region_goes_through_its_shadow() {
        let env =
            FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)), shadow: Some(0x7000_0000) };
        let e = Engine::new(Policy::parse("bounce").unwrap());
        let local = mrshim_verbs::access::LOCAL_WRITE;
        let a = e.shared_bounce_attempt(&req(local), &env).expect("through the shadow");
        assert_eq!((a.strategy, a.req.addr, a.learned), (Strategy::Bounce, 0x7000_0000, None));
        assert!(a.change.starts_with("memory inside a bounce region"), "{}", a.change);
        assert!(e.shared_bounce_attempt(&req(mrshim_verbs::access::REMOTE_ATOMIC), &env).is_none(), "spec-invalid");
        assert!(e.shared_bounce_attempt(&req(0xf), &env).is_none(), "peers' access: the contract decides");
        let e = Engine::new(Policy::parse("drop-relaxed-ordering").unwrap());
        assert!(e.shared_bounce_attempt(&req(local), &env).is_none(), "a policy without bounce");
    }

    #[test]
    fn memlock_raised_once_on_enomem() {
        let e = Engine::new(Policy::parse("drop-relaxed-ordering,raise-memlock").unwrap());
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((64 << 10, 1 << 30)), shadow: None };
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
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)), shadow: Some(0x5000) };
        let mut events = Vec::new();
        // NCCL's access: a region peers write and read one-sided, not bounced by default.
        let got: Option<((), Attempt)> =
            e.rescue(&req(0xf), libc::EFAULT, &env, None, &mut |_| Err(libc::EFAULT), &mut |ev| events.push(ev));
        assert!(got.is_none());
        let refused: Vec<Strategy> = events
            .iter()
            .filter_map(|ev| match ev {
                Event::Refused { strategy, .. } => Some(*strategy),
                _ => None,
            })
            .collect();
        assert_eq!(refused, vec![Strategy::Bounce], "{events:?}");
        // The user declares the stack's peer accesses announced: bounced.
        let mut p = Policy::parse("auto").unwrap();
        p.bounce_remote = crate::strategy::BounceRemote::Announced;
        let e = Engine::new(p);
        let mut try_ = |a: &Attempt| if a.strategy == Strategy::Bounce { Ok(()) } else { Err(libc::EFAULT) };
        let (_, a) = e.rescue(&req(0xf), libc::EFAULT, &env, None, &mut try_, &mut |_| {}).expect("bounced");
        assert_eq!(a.req.addr, 0x5000);
    }

    #[test]
    fn requests_invalid_by_the_verbs_specification_are_never_retried() {
        let e = Engine::new(Policy::parse("auto").unwrap());
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)), shadow: Some(0x5000) };
        let misaligned = RegArgs { iova: Some(0x20010), ..req(0xf) };
        let cases = [
            (req(mrshim_verbs::access::REMOTE_ATOMIC), "REMOTE_ATOMIC without LOCAL_WRITE"),
            (req(mrshim_verbs::access::REMOTE_WRITE | RO), "REMOTE_WRITE without LOCAL_WRITE"),
            (req(0x1 | 0x800), "undefined access bits 0x800"),
            (RegArgs { length: 0, ..req(0x1) }, "length 0"),
            (RegArgs { addr: u64::MAX - 4095, iova: Some(u64::MAX - 4095), ..req(0x1) }, "wraps"),
            (misaligned, "page offset 0x10"),
        ];
        for (r, why) in cases {
            let mut events = Vec::new();
            let mut tried = 0;
            let got: Option<((), Attempt)> = e.rescue(
                &r,
                libc::EINVAL,
                &env,
                None,
                &mut |_| {
                    tried += 1;
                    Ok(())
                },
                &mut |ev| events.push(ev),
            );
            assert!(got.is_none() && tried == 0, "{why}");
            assert!(matches!(&events[..], [Event::Invalid { reason }] if reason.contains(why)), "{why}: {events:?}");
        }
        assert!(!e.has_learned() && e.rescued().is_empty());
    }

    #[test]
    fn learning_is_keyed_by_the_cause_and_bounce_never_goes_first() {
        let mut p = Policy::parse("auto").unwrap();
        p.bounce_remote = crate::strategy::BounceRemote::Announced;
        let e = Engine::new(p);
        let env = FakeEnv { kind: MemKind::HostAnon, memlock: Cell::new((u64::MAX, u64::MAX)), shadow: Some(0x5000) };
        let tried = std::cell::RefCell::new(Vec::new());
        let mut only_bounce = |a: &Attempt| {
            tried.borrow_mut().push((a.strategy, a.learned.is_some()));
            if a.strategy == Strategy::Bounce {
                Ok(())
            } else {
                Err(libc::EFAULT)
            }
        };
        let mut events = Vec::new();
        e.rescue(&req(0xf | RO), libc::EFAULT, &env, None, &mut only_bounce, &mut |ev| events.push(ev)).unwrap();
        assert!(
            events.iter().any(
                |ev| matches!(ev, Event::Learned { strategy: Strategy::Bounce, errno, .. } if *errno == libc::EFAULT)
            ),
            "{events:?}"
        );
        // A registration the device would accept is not bounced: nothing applies up front.
        assert!(!e.has_learned() && e.learned_attempt(&req(0xf | RO), &env).is_none());
        // The same cause again: bounce first, no other strategy tried.
        tried.borrow_mut().clear();
        e.rescue(&req(0xf | RO), libc::EFAULT, &env, None, &mut only_bounce, &mut |_| {}).unwrap();
        assert_eq!(*tried.borrow(), vec![(Strategy::Bounce, true)]);
        // Another errno is another cause: the usual walk.
        tried.borrow_mut().clear();
        e.rescue(&req(0xf | RO), libc::ENOMEM, &env, None, &mut only_bounce, &mut |_| {}).unwrap();
        let t = tried.borrow();
        assert_eq!(t.first(), Some(&(Strategy::DropRelaxedOrdering, false)), "{t:?}");
    }

    #[test]
    fn device_memory_goes_to_dmabuf_and_probes_are_never_retried() {
        let e = Engine::new(Policy::parse("auto").unwrap());
        let env = FakeEnv { kind: MemKind::Device, memlock: Cell::new((u64::MAX, u64::MAX)), shadow: None };
        let mut try_ = |a: &Attempt| if a.req.call() == Call::RegDmabufMr { Ok(()) } else { Err(libc::EINVAL) };
        let (_, a) = e.rescue(&req(0xf | RO), libc::EINVAL, &env, None, &mut try_, &mut |_| {}).unwrap();
        assert_eq!((a.strategy, a.n), (Strategy::VaToDmabuf, 2), "drop-relaxed-ordering tried first and failed");
        let probe = RegArgs { call: Some(Call::RegDmabufMr), dmabuf_fd: Some(-1), dmabuf_offset: Some(0), ..req(0) };
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
            let env = FakeEnv { kind: if dev { MemKind::Device } else { MemKind::HostAnon }, memlock: Cell::new((4096, 1 << 40)), shadow: None };
            let r = req(if access_ro { 0xf | RO } else { 0xf });
            let accepts = |a: &Attempt| mask & (1 << (Strategy::ALL.iter().position(|s| *s == a.strategy).unwrap())) != 0;
            let mut n = 0u32;
            let got = e.rescue(&r, libc::ENOMEM, &env, None, &mut |a| { n += 1; if accepts(a) { Ok(a.clone()) } else { Err(libc::EINVAL) } }, &mut |_| {});
            proptest::prop_assert!(n <= max);
            if let Some((a, _)) = got { proptest::prop_assert!(accepts(&a)); }
        }
    }
}
