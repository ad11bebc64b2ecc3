//! RLIMIT_MEMLOCK for records without a getrlimit(2) per call (a syscall is an eighth of the
//! full-logging budget): read at most every 10 ms, and always fresh for failed calls (where the
//! limit is the diagnosis) and after the shim itself raised it.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const MAX_AGE_NS: u64 = 10_000_000;
/// Stored for "unlimited" (RLIM_INFINITY).
const UNLIMITED: u64 = u64::MAX;

#[derive(Default)]
pub struct Memlock {
    /// Monotonic ns of the last read (0: stale).
    stamp: AtomicU64,
    soft: AtomicU64,
    hard: AtomicU64,
}

/// (soft, hard) now, `None` = unlimited.
pub fn read() -> (Option<u64>, Option<u64>) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return (None, None);
    }
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    (f(r.rlim_cur), f(r.rlim_max))
}

impl Memlock {
    /// The limits as of at most 10 ms before `mono` (`fresh`: read them now).
    pub fn get(&self, mono: u64, fresh: bool) -> (Option<u64>, Option<u64>) {
        let stamp = self.stamp.load(Relaxed);
        if fresh || stamp == 0 || mono.wrapping_sub(stamp) > MAX_AGE_NS {
            let (s, h) = read();
            self.soft.store(s.unwrap_or(UNLIMITED), Relaxed);
            self.hard.store(h.unwrap_or(UNLIMITED), Relaxed);
            self.stamp.store(mono.max(1), Relaxed);
            return (s, h);
        }
        let f = |v: u64| (v != UNLIMITED).then_some(v);
        (f(self.soft.load(Relaxed)), f(self.hard.load(Relaxed)))
    }

    /// The limit changed under us (the raise-memlock strategy): the next record reads it again.
    pub fn invalidate(&self) {
        self.stamp.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_until_stale_or_invalidated() {
        let m = Memlock::default();
        let now = read();
        assert_eq!(m.get(1_000, false), now);
        // a value planted in the cache is served while young, replaced when stale or invalidated
        m.soft.store(7, Relaxed);
        assert_eq!(m.get(2_000, false).0, Some(7));
        assert_eq!(m.get(2_000, true), now, "fresh reads bypass the cache");
        m.soft.store(7, Relaxed);
        assert_eq!(m.get(2_000 + MAX_AGE_NS + 1, false), now);
        m.soft.store(7, Relaxed);
        m.invalidate();
        assert_eq!(m.get(3_000, false), now);
    }
}
