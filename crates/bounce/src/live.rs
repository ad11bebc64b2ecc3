//! The live bounce regions and what the coherence wrappers do with them: which SGE ranges lie in
//! a region, what is copied when a WR is posted, what is pending until a completion, and what a
//! completion releases. Contract: docs/bounce.md.
//!
//! - send WRs (SEND / RDMA WRITE / WRITE_WITH_IMM): their ranges go application → shadow now;
//!   RDMA READ into a region: shadow → application when a completion proves it done (reads.rs);
//! - receive WRs: before they are posted the application's writes are folded into the shadow and
//!   baseline; their ranges wait for the RECV completion (shadow → application, up to byte_len);
//! - any RECV / RECV_RDMA_WITH_IMM completion also copies what peers wrote into regions with
//!   REMOTE_WRITE (the bytes that differ from the baseline) shadow → application.

use crate::idle;
pub use crate::recvs::{Posted, RecvQueue};
use crate::recvs::{Recv, Sge};
use crate::region::{bump_epoch, Extent, Region};
use crate::state::STATE;
use mrshim_verbs::ibv_sge;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// True while any bounce region exists: until then completions need no look at all.
#[inline]
pub fn any_region() -> bool {
    STATE.live.load(Ordering::Acquire) != 0
}

/// The slot of `lkey` among the live bounce lkeys, counted per hash slot: an SGE whose slot is
/// empty is in no bounce region, so WRs that touch none pass without a lock.
#[inline]
pub(crate) fn lkey_slot(lkey: u32) -> &'static AtomicU32 {
    &STATE.lkeys[((lkey ^ (lkey >> 8) ^ (lkey >> 16) ^ (lkey >> 24)) & 255) as usize]
}

/// Whether none of these SGEs can be in a bounce region (their lkeys' slots are empty): the
/// wrappers' fast path, a load per SGE.
#[inline]
pub fn outside_regions(sges: &[ibv_sge]) -> bool {
    sges.iter().all(|s| lkey_slot(s.lkey).load(Ordering::Acquire) == 0)
}

/// A list of send WRs that [`outside_regions`], none of which [`announces`], posted while no
/// READ into a bounce region is pending ([`reads_pending`]): all it needs of the bounce layer is
/// the epoch (region.rs) — what [`send_sges`] and [`before_telling_peers`] would find is nothing.
#[inline]
pub fn plain_sends() {
    bump_epoch();
}

/// Whether some QP has an RDMA READ into a bounce region pending: every send WR posted on it
/// then takes an order number ([`send_sges`]).
#[inline]
pub fn reads_pending() -> bool {
    STATE.pending_read.any()
}

/// A region goes live (its MR exists) / is gone (its MR was deregistered).
pub(crate) fn insert(r: Arc<Region>) {
    crate::watch::region_live(&r);
    STATE.regions.lock().push(r.clone());
    lkey_slot(r.lkey).fetch_add(1, Ordering::AcqRel);
    STATE.live.fetch_add(1, Ordering::AcqRel);
}
/// Its pending receive SGEs and READs go too: a completion polled after the deregistration
/// must not copy into the old buffer (freed or reused by then).
pub(crate) fn remove(r: &Arc<Region>) {
    r.gone.store(true, Ordering::Release);
    STATE.regions.lock().retain(|x| !Arc::ptr_eq(x, r));
    lkey_slot(r.lkey).fetch_sub(1, Ordering::AcqRel);
    STATE.live.fetch_sub(1, Ordering::AcqRel);
    STATE.pending_recv.forget_region(r);
    STATE.pending_read.forget_region(r);
}
/// A live region with a baseline whose buffer contains [app, app+len): a new region there shares
/// its shadow.
pub(crate) fn containing(app: u64, len: u64) -> Option<Arc<Region>> {
    let regions = STATE.regions.lock();
    regions.iter().find(|r| r.has_baseline() && r.app <= app && app + len <= r.app + r.len).cloned()
}

/// Whether a live bounce region's buffer contains [app, app+len): memory whose shadow peers
/// reach. Another MR of that memory must go through the same shadow (the shim routes it there):
/// a NIC writing the application's buffer directly through a second MR bypasses the write
/// tracking the shadow's folds rely on, and peers reading through the first one would read
/// stale bytes (seen: Open MPI's one-sided window, registered by UCX with and without relaxed
/// ordering).
pub fn covers(app: u64, len: u64) -> bool {
    if STATE.live.load(Ordering::Acquire) == 0 {
        return false;
    }
    STATE.regions.lock().iter().any(|r| r.app <= app && app.saturating_add(len) <= r.app + r.len)
}

/// Whether `ctx` still has a bounce region.
pub(crate) fn in_context(ctx: usize) -> bool {
    STATE.regions.lock().iter().any(|r| r.ctx == ctx)
}

/// SGE ranges of one WR that lie in bounce regions: (region, offset, length).
pub(crate) type Ranges = Vec<(Arc<Region>, u64, usize)>;

/// Every SGE of a receive WR with at least one in a bounce region (empty: none is): the message
/// fills them in order, so the ones outside bounce regions count too.
fn wr_sges(ctx: usize, sges: &[ibv_sge]) -> Vec<Sge> {
    if sges.iter().all(|s| lkey_slot(s.lkey).load(Ordering::Acquire) == 0) {
        return Vec::new();
    }
    let regions = STATE.regions.lock();
    let all: Vec<Sge> = sges
        .iter()
        .map(|s| {
            let hit = regions
                .iter()
                .filter(|r| r.ctx == ctx && r.lkey == s.lkey)
                .find_map(|r| Some((r.clone(), r.range(s.addr, s.length as u64)?)));
            match hit {
                Some((r, (off, len))) => Sge { region: Some(r), off, len },
                None => Sge { region: None, off: 0, len: s.length as usize },
            }
        })
        .collect();
    if all.iter().all(|s| s.region.is_none()) {
        return Vec::new();
    }
    all
}

pub(crate) fn ranges(ctx: usize, sges: &[ibv_sge]) -> Ranges {
    if sges.iter().all(|s| lkey_slot(s.lkey).load(Ordering::Acquire) == 0) {
        return Vec::new();
    }
    let regions = STATE.regions.lock();
    sges.iter()
        .filter_map(|s| {
            let r = regions.iter().find(|r| r.ctx == ctx && r.lkey == s.lkey)?;
            let (off, len) = r.range(s.addr, s.length as u64)?;
            Some((r.clone(), off, len))
        })
        .collect()
}

/// Whether a post of this opcode tells a peer it may now read: a message its CPU receives (SEND
/// and its variants) — how UCX's rendezvous (the RTS), Open MPI's fences, locks and barriers and
/// libfabric's rendezvous say "come and get it". RDMA WRITE and WRITE_WITH_IMM do not: folding
/// every REMOTE_READ region at each of them would cost NCCL-style rings, which stream data with
/// them and never read, a compare of every region per message (docs/bounce.md, Cost).
#[inline]
pub fn announces(op: mrshim_verbs::ibv_wr_opcode::Type) -> bool {
    use mrshim_verbs::ibv_wr_opcode::*;
    matches!(op, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV | IBV_WR_TSO)
}

/// Whether the NIC writes this WR's local SGEs when its response comes: an RDMA READ's data, an
/// atomic's original value (copied to the application at the completion).
pub fn reads_into(op: mrshim_verbs::ibv_wr_opcode::Type) -> bool {
    use mrshim_verbs::ibv_wr_opcode::*;
    matches!(op, IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD)
}

/// Before a post that may tell a peer to read (see [`announces`]; at `ibv_wr_start`, whose
/// opcodes are not known yet): what the application wrote to regions peers read reaches their
/// shadows. Every time: the application may write between two posts with no verb in between.
pub fn before_telling_peers() {
    each_remote(true, |r, e| r.fold(e, false));
}

/// A send WR `wr_id` of QP `qpn` (or one `ibv_wr_set_sge*` call of a WR being built), every one
/// posted: ranges in bounce regions of `ctx` go application → shadow now, or, for an RDMA READ,
/// are remembered until a completion proves the READ done (reads.rs).
/// `built`: a WR built with `ibv_wr_*` (reads.rs: not every such WR is seen).
/// Returns the WR's order number among the QP's pending READs, if it has one (for
/// [`send_refused`]).
pub fn send_sges(ctx: usize, qpn: u32, wr_id: u64, read: bool, built: bool, sges: &[ibv_sge]) -> Option<u64> {
    let rs = ranges(ctx, sges);
    if read && !rs.is_empty() {
        for (reg, off, n) in &rs {
            reg.being_read_into(*off, *n);
        }
        return Some(STATE.pending_read.read(qpn, wr_id, rs, built));
    }
    for (reg, off, n) in &rs {
        reg.sending(*off, *n);
    }
    STATE.pending_read.posted(qpn, wr_id, built)
}

/// Before a list of receive WRs is posted: what peers write after it must be told apart from
/// what the application wrote (a no-op when nothing was posted or polled since the last fold).
pub fn before_recv() {
    each_remote(false, |r, e| r.fold(e, true));
}

/// A list of receive WRs about to be posted to `q`, as (wr_id, SGEs): each waits in `q`'s FIFO
/// for its completion. What to call [`recv_refused`] with if the provider refuses some.
pub fn recv_wrs<'a>(q: RecvQueue, wrs: impl Iterator<Item = (u64, &'a [ibv_sge])>) -> Posted {
    let ctx = q.ctx();
    let wrs: Vec<Recv> = wrs.map(|(wr_id, sges)| Recv { wr_id, token: 0, sges: wr_sges(ctx, sges) }).collect();
    STATE.pending_recv.add(q, wrs)
}

/// The provider posted only the first `accepted` WRs of `p` (`*bad_wr`): the others wait for
/// nothing.
pub fn recv_refused(p: Posted, accepted: usize) {
    STATE.pending_recv.drop_tokens(p.q, p.first + accepted as u64..p.first + p.n as u64);
}

/// The provider posted only the first `accepted` WRs of a send list on `qpn`; `seqs` are the
/// (position in the list, order number) of its WRs that [`send_sges`] gave one: those not
/// posted are forgotten (a READ among them never completes).
pub fn send_refused(qpn: u32, seqs: &[(usize, u64)], accepted: usize) {
    let gone: Vec<u64> = seqs.iter().filter(|(i, _)| *i >= accepted).map(|(_, s)| *s).collect();
    if gone.is_empty() {
        return;
    }
    // Their ranges' baselines took the application's bytes (Region::being_read_into) for a
    // READ that never comes: the shadow gets them too, or a sync would take the difference for
    // a peer's write.
    for (r, off, n) in STATE.pending_read.unpost(qpn, &gone) {
        r.to_shadow(off, n);
    }
}

/// QP `qpn` of `ctx` was destroyed: what was pending on it never completes. The buffers of
/// its receives are the application's again (refilled, reused): the next receive folds them, as
/// after a post or a poll with completions (found by the checker, seed 1000062: a receive posted
/// after the destroy and a refill skipped its fold as one of the same back-to-back run, and a
/// peer's write of the bytes the shadow held before the refill was lost).
pub fn qp_destroyed(ctx: usize, qpn: u32) {
    bump_epoch();
    STATE.pending_recv.drop_queue(RecvQueue::Qp { ctx, qpn });
    STATE.pending_read.drop_qp(qpn);
}

/// The fields of a polled work completion the bounce layer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The context of the CQ it was polled from.
    pub ctx: usize,
    pub qp_num: u32,
    pub wr_id: u64,
    /// IBV_WC_SUCCESS.
    pub ok: bool,
    /// IBV_WC_RECV or IBV_WC_RECV_RDMA_WITH_IMM: a receive WR was consumed, a peer's data arrived.
    pub recv: bool,
    /// IBV_WC_RECV_RDMA_WITH_IMM: the data went where the peer's WRITE pointed, not into the
    /// consumed receive WR's SGEs (which are left as they were).
    pub with_imm: bool,
    pub byte_len: u32,
}

impl Completion {
    /// A receive-queue completion of `qp_num` in `ctx` (RECV, or with `with_imm` a
    /// WRITE_WITH_IMM's).
    pub fn recv(ctx: usize, qp_num: u32, wr_id: u64, ok: bool, with_imm: bool, byte_len: u32) -> Completion {
        Completion { ctx, qp_num, wr_id, ok, recv: true, with_imm, byte_len }
    }
    /// A send-queue completion.
    pub fn send(ctx: usize, qp_num: u32, wr_id: u64, ok: bool) -> Completion {
        Completion { ctx, qp_num, wr_id, ok, recv: false, with_imm: false, byte_len: 0 }
    }
}

/// Completions just polled: what they release reaches the application.
pub fn completed(wcs: impl IntoIterator<Item = Completion>) {
    bump_epoch();
    idle::completion();
    let mut peer_wrote = false;
    for w in wcs {
        if w.recv {
            let mine = STATE.pending_recv.take(w.ctx, w.qp_num, w.wr_id);
            if w.ok {
                if let (Some(r), false) = (mine, w.with_imm) {
                    // The message fills the WR's SGEs in order, `byte_len` bytes in all.
                    let mut left = w.byte_len as usize;
                    for s in r.sges {
                        let k = s.len.min(left);
                        if let (Some(reg), true) = (s.region, k > 0) {
                            reg.to_app(s.off, k);
                        }
                        left -= k;
                    }
                }
                peer_wrote = true;
            }
        } else {
            for (r, off, len) in STATE.pending_read.completed(w.qp_num, w.wr_id, w.ok) {
                r.to_app(off, len);
            }
        }
    }
    if peer_wrote {
        each_remote(false, Region::sync_peer);
    }
}

/// At process exit: peers' writes to live regions that never reached the application are
/// violations (the passive one-sided pattern: a target that neither polls nor posts).
pub fn at_exit() {
    crate::watch::exiting();
    let all: Vec<Arc<Region>> = STATE.regions.lock().iter().filter(|r| r.remote_write).cloned().collect();
    for r in all {
        r.check_delivered("at exit");
    }
}

/// What peers wrote that no completion announced reaches the application, when
/// [`idle::empty_poll`] says a pass is due.
pub fn idle_pass() {
    let start = Instant::now();
    let mut found = false;
    let mut swept = true;
    each_remote(false, |r, e| {
        let (f, bottom) = r.sync_unannounced(e);
        found |= f;
        swept &= bottom;
    });
    // A sweep not finished yet goes on soon, as after a find (the gap doubles only once every
    // region was looked at whole and nothing was found).
    idle::passed(found || !swept, start, Instant::now());
}

/// Every bounce region peers can write (`read`: read), in any context: a process may learn of a
/// peer's write through another context than the region's, and the message after which a peer
/// reads may leave through another (Open MPI's one-sided component has its own UCX context; the
/// fence or barrier that announces a put or allows a get comes through the point-to-point one).
fn each_remote(read: bool, mut f: impl FnMut(&Region, &Extent)) {
    // a snapshot: `f` copies region bytes, other threads' posts need not wait for that
    let all: Vec<Arc<Region>> =
        STATE.regions.lock().iter().filter(|r| if read { r.remote_read } else { r.remote_write }).cloned().collect();
    // Regions that share a span (region.rs, Maps) fold and sync it once.
    let mut done: Vec<(usize, usize)> = Vec::new();
    for r in &all {
        // before a SEND (`read`): tracking may start now (Region::start_tracking)
        let e = if read { r.start_tracking().unwrap_or_else(|| r.extent()) } else { r.extent() };
        if done.contains(&(e.view.shadow, e.view.len)) {
            continue;
        }
        done.push((e.view.shadow, e.view.len));
        f(r, &e);
    }
}
