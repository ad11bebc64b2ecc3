//! RDMA READs into bounce regions, waiting for proof that their data has landed. RC completes a
//! QP's send queue in order, so a successful completion proves done every WR posted up to the
//! one it names — and nothing about WRs posted after it. Each QP with a READ pending therefore
//! remembers the order of what was posted since: a completion releases only the READs posted
//! no later than the WR it names (matched by `wr_id`, the oldest such WR first).
//!
//! Not proven: a WR posted before a READ that is still outstanding and carries the same `wr_id`
//! as the READ or a WR after it; and QPs that build WRs with `ibv_wr_*` (WRs without SGEs are
//! not seen there, so a completion naming no WR seen releases every pending READ, as before).

use crate::live::Ranges;
use mrshim_forklock::ForkLock;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Default)]
pub(crate) struct Order {
    next: u64,
    /// (seq, ranges) of READs not yet proven done, oldest first.
    reads: VecDeque<(u64, Ranges)>,
    /// (seq, wr_id) of every send WR posted since the oldest pending READ, READs included.
    posted: VecDeque<(u64, u64)>,
    /// WRs built with `ibv_wr_*` were posted: those without SGEs (inline data, atomics) are
    /// not seen, so a completion naming no WR seen may be one of them.
    blind: bool,
}

/// Pending READs per QP number, with a count of QPs that have some (so that posts and
/// completions with nothing pending skip the lock).
pub(crate) struct PendingReads {
    pub(crate) map: ForkLock<Option<HashMap<u32, Order>>>,
    qps: AtomicUsize,
}

impl PendingReads {
    pub(crate) const fn new() -> Self {
        PendingReads { map: ForkLock::new(None), qps: AtomicUsize::new(0) }
    }

    /// Whether any QP has a READ pending.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.qps.load(Ordering::Acquire) != 0
    }

    /// A READ `wr_id` posted on `qpn` into the bounce ranges `rs` (`blind`: built with
    /// `ibv_wr_*`).
    pub(crate) fn read(&self, qpn: u32, wr_id: u64, rs: Ranges, blind: bool) -> u64 {
        let mut m = self.map.lock();
        let o = m.get_or_insert_with(HashMap::new).entry(qpn).or_default();
        if o.reads.is_empty() {
            self.qps.fetch_add(1, Ordering::AcqRel);
        }
        o.blind |= blind;
        let seq = o.next;
        o.next += 1;
        o.reads.push_back((seq, rs));
        o.posted.push_back((seq, wr_id));
        seq
    }

    /// Any other send WR posted on `qpn` (`blind`: built with `ibv_wr_*`); its order number if
    /// the QP has READs pending.
    pub(crate) fn posted(&self, qpn: u32, wr_id: u64, blind: bool) -> Option<u64> {
        if self.qps.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut m = self.map.lock();
        let o = m.as_mut().and_then(|m| m.get_mut(&qpn))?;
        let seq = o.next;
        o.next += 1;
        o.posted.push_back((seq, wr_id));
        o.blind |= blind;
        Some(seq)
    }

    /// The WRs of `qpn` with order numbers `seqs` were refused by the provider: never posted.
    /// Returns the ranges of the READs among them.
    pub(crate) fn unpost(&self, qpn: u32, seqs: &[u64]) -> Ranges {
        let mut m = self.map.lock();
        let Some(map) = m.as_mut() else { return Vec::new() };
        let Some(o) = map.get_mut(&qpn) else { return Vec::new() };
        let mut gone = Vec::new();
        o.reads.retain_mut(|(s, rs)| {
            let keep = !seqs.contains(s);
            if !keep {
                gone.append(rs);
            }
            keep
        });
        o.posted.retain(|(s, _)| !seqs.contains(s));
        if o.reads.is_empty() {
            map.remove(&qpn);
            self.qps.fetch_sub(1, Ordering::AcqRel);
        }
        gone
    }

    /// QP `qpn` was destroyed: its READs never complete.
    pub(crate) fn drop_qp(&self, qpn: u32) {
        if self.qps.load(Ordering::Acquire) == 0 {
            return;
        }
        if self.map.lock().as_mut().and_then(|m| m.remove(&qpn)).is_some() {
            self.qps.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Region `r` was deregistered: READs into it copy nothing any more.
    pub(crate) fn forget_region(&self, r: &std::sync::Arc<crate::region::Region>) {
        if self.qps.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut m = self.map.lock();
        for o in m.iter_mut().flat_map(|m| m.values_mut()) {
            for (_, rs) in o.reads.iter_mut() {
                rs.retain(|(x, _, _)| !std::sync::Arc::ptr_eq(x, r));
            }
        }
    }

    /// QPs with READs pending (tests).
    #[cfg(test)]
    pub(crate) fn qps(&self) -> usize {
        self.qps.load(Ordering::Acquire)
    }

    /// A send-queue completion of `qpn` naming `wr_id`: the READs it proves done. A failed one
    /// puts the QP in error: its pending READs never land and are dropped.
    pub(crate) fn completed(&self, qpn: u32, wr_id: u64, ok: bool) -> Ranges {
        if self.qps.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut m = self.map.lock();
        let Some(map) = m.as_mut() else { return Vec::new() };
        let Some(o) = map.get_mut(&qpn) else { return Vec::new() };
        let mut done = Vec::new();
        if ok {
            // Not found: a WR posted before every pending READ, which proves nothing — or,
            // on a QP that builds WRs with ibv_wr_*, possibly one posted after them unseen,
            // taken as the newest (the READs are released as when any completion did).
            let upto = match o.posted.iter().find(|(_, w)| *w == wr_id) {
                Some(&(s, _)) => s,
                None if o.blind => o.next,
                None => return done,
            };
            while o.reads.front().is_some_and(|(s, _)| *s <= upto) {
                done.extend(o.reads.pop_front().unwrap().1);
            }
            while o.posted.front().is_some_and(|(s, _)| *s <= upto) {
                o.posted.pop_front();
            }
            if !o.reads.is_empty() {
                return done;
            }
        }
        map.remove(&qpn);
        self.qps.fetch_sub(1, Ordering::AcqRel);
        done
    }
}
