//! Peers' writes that no completion announces. Some protocols tell the owner of a buffer that a
//! peer wrote it through the buffer itself: ucx_perftest's put bandwidth test polls the last
//! byte of its receive buffer, NCCL's sender polls the FIFO its receiver RDMA-WRITEs its
//! clear-to-send into. Such a process spins calling `ibv_poll_cq` (UCX's and NCCL's progress)
//! and finds it empty; with a bounce region the write sits in the shadow, so it would spin
//! forever. So while polls keep coming back empty (any thread's), what peers wrote to regions they
//! can write is brought over now and then ([`crate::region::Region::sync_unannounced`]).
//!
//! How often: first after [`FIRST`] of empty polls (a stream whose completions come sooner
//! never gets here), then again after a gap that doubles while nothing is found, up to
//! [`MAX_GAP`]; and, across completions too, never sooner than [`DUTY`] times what the last
//! pass took after it ended — the passes compare whole regions, so they get at most a
//! seventeenth of the thread's time. A pass that found a write starts over at [`FIRST`]: the
//! next write is likely to follow soon (a bandwidth test's next message). The clock is read once
//! every [`CHECK_EVERY`] empty polls.

use crate::state::STATE;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub const CHECK_EVERY: u32 = 64;
pub const FIRST: Duration = Duration::from_millis(1);
pub const MAX_GAP: Duration = Duration::from_millis(50);
pub const DUTY: u32 = 16;

/// The process's run of empty polls (all threads': a pass serves every thread).
#[derive(Clone, Copy)]
pub struct Backoff {
    /// When the next pass may run (None: the run of empty polls just started).
    next: Option<Instant>,
    gap: Duration,
    /// The end of the last pass plus DUTY times its length: no pass before, whatever happened.
    rest: Option<Instant>,
}

impl Backoff {
    pub const fn new() -> Self {
        Backoff { next: None, gap: FIRST, rest: None }
    }
    /// Every [`CHECK_EVERY`]th empty poll, at `now`: whether a pass is due.
    pub fn due(&mut self, now: Instant) -> bool {
        match self.next {
            None => {
                self.gap = FIRST;
                self.next = Some(self.rest.map_or(now + FIRST, |r| r.max(now + FIRST)));
                false
            }
            Some(t) => now >= t,
        }
    }
    /// A pass ran from `start` to `end`; `found`: it brought a peer's write over.
    pub fn passed(&mut self, found: bool, start: Instant, end: Instant) {
        self.gap = if found { FIRST } else { (self.gap * 2).min(MAX_GAP) };
        let rest = end + (end - start) * DUTY;
        self.rest = Some(rest);
        self.next = Some(rest.max(end + self.gap));
    }
    /// A poll returned completions: the run of empty polls is over (the rest after the last
    /// pass is kept).
    pub fn completion(&mut self) {
        *self = Backoff { rest: self.rest, ..Backoff::new() };
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// An empty poll: whether a pass is due.
#[inline]
pub fn empty_poll() -> bool {
    let n = STATE.polls.load(Ordering::Relaxed).wrapping_add(1);
    STATE.polls.store(n, Ordering::Relaxed);
    if !n.is_multiple_of(CHECK_EVERY) {
        return false;
    }
    STATE.idle_running.store(true, Ordering::Relaxed);
    STATE.idle.lock().due(Instant::now())
}

/// A pass ran (see [`Backoff::passed`]).
pub fn passed(found: bool, start: Instant, end: Instant) {
    STATE.idle.lock().passed(found, start, end);
}

/// A poll returned completions.
#[inline]
pub fn completion() {
    // (a load first: no locked swap on each poll that returns completions)
    if STATE.idle_running.load(Ordering::Relaxed) && STATE.idle_running.swap(false, Ordering::Relaxed) {
        STATE.idle.lock().completion();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks until a pass is due, the clock advancing `step` per check; the time it took.
    fn until_due(b: &mut Backoff, t: &mut Instant, step: Duration) -> Duration {
        let start = *t;
        for _ in 0..10_000_000 {
            *t += step;
            if b.due(*t) {
                return *t - start;
            }
        }
        panic!("never due");
    }

    #[test]
    fn passes_start_after_a_run_of_empty_polls_and_back_off_while_they_find_nothing() {
        let mut b = Backoff::new();
        let mut t = Instant::now();
        let step = Duration::from_micros(10);
        let first = until_due(&mut b, &mut t, step);
        assert!(first >= FIRST && first <= FIRST + 2 * step, "{first:?}");
        let mut gaps = vec![];
        for _ in 0..12 {
            b.passed(false, t, t);
            gaps.push(until_due(&mut b, &mut t, step));
        }
        assert!(gaps[1] >= 2 * gaps[0] - step && gaps[0] >= 2 * FIRST, "{gaps:?}");
        assert!(gaps.iter().all(|g| *g <= MAX_GAP + step), "capped: {gaps:?}");
        // a pass that found a write starts over
        b.passed(true, t, t);
        assert!(until_due(&mut b, &mut t, step) <= FIRST + step);
        // a long pass waits DUTY times its length
        let long = Duration::from_millis(10);
        b.passed(true, t, t + long);
        t += long;
        assert!(until_due(&mut b, &mut t, step) >= long * DUTY);
        // a completion ends the run: the next run waits FIRST again, and the rest after a long
        // pass holds across it
        b.completion();
        assert!(until_due(&mut b, &mut t, step) <= FIRST + 2 * step);
        b.passed(true, t, t + long);
        t += long;
        b.completion();
        assert!(until_due(&mut b, &mut t, step) >= long * DUTY, "the rest survives a completion");
    }
}
