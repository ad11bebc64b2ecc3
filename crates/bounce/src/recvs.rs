//! Receive WRs waiting for their completions, as FIFOs. A QP's receive queue completes in the
//! order its WRs were posted (RC, UC and UD alike; a QP in error flushes them in that order too),
//! so the n-th receive completion of a QP is its n-th receive posted, whatever the `wr_id`s say
//! (ibv_rc_pingpong posts every receive with the same one). A shared receive queue hands its WRs
//! to its QPs in posting order, but their completions reach the CQs QP by QP: an SRQ's completion
//! takes the oldest WR with its `wr_id` (the completion names a QP, not the SRQ: every SRQ of the
//! context is looked at, oldest WR first).
//!
//! Every receive posted through the wrappers has an entry (empty when none of its SGEs is in a
//! bounce region), so the positions stay right. A completion whose QP's oldest entry has another
//! `wr_id` is of a receive posted before the context was wrapped: it takes nothing.

use crate::region::Region;
use mrshim_forklock::ForkLock;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Where a receive WR was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvQueue {
    /// A QP's own receive queue (`ibv_post_recv`).
    Qp { ctx: usize, qpn: u32 },
    /// A shared receive queue (`ibv_post_srq_recv`), by its `struct ibv_srq *`.
    Srq { ctx: usize, srq: usize },
}

impl RecvQueue {
    pub fn ctx(&self) -> usize {
        match *self {
            RecvQueue::Qp { ctx, .. } | RecvQueue::Srq { ctx, .. } => ctx,
        }
    }
}

/// One SGE of a receive WR: in a bounce region (at `off`) or not (`region` None), `len` bytes.
pub(crate) struct Sge {
    pub(crate) region: Option<Arc<Region>>,
    pub(crate) off: u64,
    pub(crate) len: usize,
}

/// One receive WR posted.
pub(crate) struct Recv {
    pub(crate) wr_id: u64,
    /// Its place among the receives ever posted (for [`RecvQueues::drop_tokens`]).
    pub(crate) token: u64,
    pub(crate) sges: Vec<Sge>,
}

/// What one post call added: `n` entries of queue `q` with consecutive tokens from `first`.
#[derive(Debug, Clone, Copy)]
pub struct Posted {
    pub(crate) q: RecvQueue,
    pub(crate) first: u64,
    pub(crate) n: usize,
}

#[derive(Default)]
pub(crate) struct Queues {
    map: HashMap<RecvQueue, VecDeque<Recv>>,
    next_token: u64,
}

/// Every receive queue's pending WRs, with a count of them (completions with nothing pending
/// skip the lock).
pub(crate) struct RecvQueues {
    pub(crate) map: ForkLock<Option<Queues>>,
    len: AtomicUsize,
}

impl RecvQueues {
    pub(crate) const fn new() -> Self {
        RecvQueues { map: ForkLock::new(None), len: AtomicUsize::new(0) }
    }

    /// Appends one post call's WRs to `q` (consecutive tokens: one lock for the call).
    pub(crate) fn add(&self, q: RecvQueue, wrs: Vec<Recv>) -> Posted {
        let n = wrs.len();
        let mut g = self.map.lock();
        let qs = g.get_or_insert_with(Queues::default);
        let first = qs.next_token;
        qs.next_token += n as u64;
        let fifo = qs.map.entry(q).or_default();
        for (i, mut r) in wrs.into_iter().enumerate() {
            r.token = first + i as u64;
            fifo.push_back(r);
        }
        self.len.fetch_add(n, Ordering::AcqRel);
        Posted { q, first, n }
    }

    /// The receive a completion of QP `qpn` of `ctx` naming `wr_id` consumed, if it was seen.
    pub(crate) fn take(&self, ctx: usize, qpn: u32, wr_id: u64) -> Option<Recv> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut g = self.map.lock();
        let qs = g.as_mut()?;
        let got = match qs.map.get_mut(&RecvQueue::Qp { ctx, qpn }) {
            // The QP has a receive queue of its own: FIFO.
            Some(fifo) => fifo.front().is_some_and(|r| r.wr_id == wr_id).then(|| fifo.pop_front()).flatten(),
            None => qs
                .map
                .iter_mut()
                .filter(|(q, _)| matches!(q, RecvQueue::Srq { ctx: c, .. } if *c == ctx))
                .filter_map(|(_, fifo)| Some((fifo.iter().position(|r| r.wr_id == wr_id)?, fifo)))
                .min_by_key(|(i, fifo)| fifo[*i].token)
                .and_then(|(i, fifo)| fifo.remove(i)),
        };
        if got.is_some() {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        got
    }

    /// Entries of `q` whose tokens are in `tokens` were not posted after all.
    pub(crate) fn drop_tokens(&self, q: RecvQueue, tokens: Range<u64>) {
        if tokens.is_empty() {
            return;
        }
        let mut g = self.map.lock();
        if let Some(fifo) = g.as_mut().and_then(|qs| qs.map.get_mut(&q)) {
            let before = fifo.len();
            fifo.retain(|r| !tokens.contains(&r.token));
            self.len.fetch_sub(before - fifo.len(), Ordering::AcqRel);
        }
    }

    /// `q` is gone (its QP destroyed): so are its pending WRs.
    pub(crate) fn drop_queue(&self, q: RecvQueue) {
        let mut g = self.map.lock();
        if let Some(fifo) = g.as_mut().and_then(|qs| qs.map.remove(&q)) {
            self.len.fetch_sub(fifo.len(), Ordering::AcqRel);
        }
    }

    /// Region `r` was deregistered: its SGEs stay in their WRs (they count for `byte_len`) but
    /// are copied nowhere.
    pub(crate) fn forget_region(&self, r: &Arc<Region>) {
        if self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut g = self.map.lock();
        for s in g.iter_mut().flat_map(|qs| qs.map.values_mut()).flatten().flat_map(|w| w.sges.iter_mut()) {
            if s.region.as_ref().is_some_and(|x| Arc::ptr_eq(x, r)) {
                s.region = None;
            }
        }
    }

    /// Pending receive WRs in all queues.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
}
