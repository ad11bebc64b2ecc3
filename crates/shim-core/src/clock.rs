//! Time for records at two vDSO reads per call: a monotonic start and end (the duration), and
//! wall-clock time derived from the start through an offset refreshed once a second (so an NTP
//! step shows up in `time_ns` within a second, and a call never pays a third clock read).
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in ns.
pub fn mono_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: t is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

pub fn wall_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

const REFRESH_NS: u64 = 1_000_000_000;

#[derive(Default)]
pub struct Clock {
    /// wall - mono, in ns (wrapping), and the mono time it was taken at (0: never).
    offset: AtomicU64,
    stamp: AtomicU64,
}

impl Clock {
    /// Wall-clock ns since the epoch at monotonic time `mono`.
    pub fn wall_ns(&self, mono: u64) -> u64 {
        let stamp = self.stamp.load(Relaxed);
        if stamp == 0 || mono.wrapping_sub(stamp) > REFRESH_NS {
            let off = wall_now_ns().wrapping_sub(mono_ns());
            self.offset.store(off, Relaxed);
            self.stamp.store(mono.max(1), Relaxed);
            return mono.wrapping_add(off);
        }
        mono.wrapping_add(self.offset.load(Relaxed))
    }

    /// Wall-clock ns at an earlier monotonic time `mono`, with the offset the last [`wall_ns`]
    /// used (no refresh: an offset taken now could be a few ns larger than the one a later
    /// record used, and put this time after that record's).
    ///
    /// [`wall_ns`]: Clock::wall_ns
    pub fn wall_ns_before(&self, mono: u64) -> u64 {
        if self.stamp.load(Relaxed) == 0 {
            return self.wall_ns(mono);
        }
        mono.wrapping_add(self.offset.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_wall_time_matches_the_system_clock() {
        let c = Clock::default();
        for _ in 0..3 {
            let (w0, m) = (wall_now_ns(), mono_ns());
            let w = c.wall_ns(m);
            let w1 = wall_now_ns();
            // within the two reads around it, give or take the offset's own read window
            assert!(w + 50_000_000 >= w0 && w <= w1 + 50_000_000, "{w0} {w} {w1}");
        }
    }
}
