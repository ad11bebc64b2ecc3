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
use crate::reads::PendingReads;
use crate::region::{bump_epoch, Extent, Region};
use mrshim_forklock::ForkLock;
use mrshim_verbs::ibv_sge;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub(crate) static REGIONS: ForkLock<Vec<Arc<Region>>> = ForkLock::new(Vec::new());
/// Number of live bounce regions: the post/poll wrappers' fast path checks it.
pub(crate) static LIVE: AtomicUsize = AtomicUsize::new(0);

/// True while any bounce region exists: until then completions need no look at all.
#[inline]
pub fn any_region() -> bool {
    LIVE.load(Ordering::Acquire) != 0
}

/// Live bounce lkeys, counted per hash slot: an SGE whose slot is empty is in no bounce region,
/// so WRs that touch none pass without a lock.
static LKEYS: [AtomicU32; 256] = [const { AtomicU32::new(0) }; 256];

pub(crate) fn lkey_slot(lkey: u32) -> &'static AtomicU32 {
    &LKEYS[((lkey ^ (lkey >> 8) ^ (lkey >> 16) ^ (lkey >> 24)) & 255) as usize]
}

/// A region goes live (its MR exists) / is gone (its MR was deregistered).
pub(crate) fn insert(r: Arc<Region>) {
    REGIONS.lock().push(r.clone());
    lkey_slot(r.lkey).fetch_add(1, Ordering::AcqRel);
    LIVE.fetch_add(1, Ordering::AcqRel);
}
pub(crate) fn remove(r: &Arc<Region>) {
    REGIONS.lock().retain(|x| !Arc::ptr_eq(x, r));
    lkey_slot(r.lkey).fetch_sub(1, Ordering::AcqRel);
    LIVE.fetch_sub(1, Ordering::AcqRel);
}
/// A live region with a baseline whose buffer contains [app, app+len): a new region there shares
/// its shadow.
pub(crate) fn containing(app: u64, len: u64) -> Option<Arc<Region>> {
    let regions = REGIONS.lock();
    regions.iter().find(|r| r.has_baseline() && r.app <= app && app + len <= r.app + r.len).cloned()
}

/// Whether `ctx` still has a bounce region.
pub(crate) fn in_context(ctx: usize) -> bool {
    REGIONS.lock().iter().any(|r| r.ctx == ctx)
}

/// SGE ranges of one WR that lie in bounce regions: (region, offset, length).
pub(crate) type Ranges = Vec<(Arc<Region>, u64, usize)>;

pub(crate) fn ranges(ctx: usize, sges: &[ibv_sge]) -> Ranges {
    if sges.iter().all(|s| lkey_slot(s.lkey).load(Ordering::Acquire) == 0) {
        return Vec::new();
    }
    let regions = REGIONS.lock();
    sges.iter()
        .filter_map(|s| {
            let r = regions.iter().find(|r| r.ctx == ctx && r.lkey == s.lkey)?;
            let (off, len) = r.range(s.addr, s.length as u64)?;
            Some((r.clone(), off, len))
        })
        .collect()
}

/// Ranges to copy to the application when a completion is polled, with a count of entries so
/// that completions with nothing pending skip the lock.
pub(crate) struct Pending<K> {
    pub(crate) map: ForkLock<Option<HashMap<K, Ranges>>>,
    len: AtomicUsize,
}

impl<K: std::hash::Hash + Eq> Pending<K> {
    const fn new() -> Self {
        Pending { map: ForkLock::new(None), len: AtomicUsize::new(0) }
    }
    fn add(&self, k: K, rs: Ranges) {
        let mut m = self.map.lock();
        let e = m.get_or_insert_with(HashMap::new).entry(k).or_default();
        if e.is_empty() {
            self.len.fetch_add(1, Ordering::AcqRel);
        }
        e.extend(rs);
    }
    fn take(&self, k: &K) -> Option<Ranges> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let r = self.map.lock().as_mut()?.remove(k)?;
        self.len.fetch_sub(1, Ordering::AcqRel);
        Some(r)
    }
}

/// Posted receives' ranges by (qp_num, wr_id); RDMA READs' by qp_num, in posting order.
pub(crate) static PENDING_RECV: Pending<(u32, u64)> = Pending::new();
pub(crate) static PENDING_READ: PendingReads = PendingReads::new();

/// Whether a post of this opcode tells a peer it may now read: a message its CPU receives (SEND
/// and its variants) — how UCX's rendezvous (the RTS), Open MPI's fences, locks and barriers and
/// libfabric's rendezvous say "come and get it". RDMA WRITE and WRITE_WITH_IMM do not: folding
/// every REMOTE_READ region at each of them would cost NCCL-style rings, which stream data with
/// them and never read, a compare of every region per message (docs/bounce.md, Cost).
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
pub fn send_sges(ctx: usize, qpn: u32, wr_id: u64, read: bool, built: bool, sges: &[ibv_sge]) {
    let rs = ranges(ctx, sges);
    if read && !rs.is_empty() {
        for (reg, off, n) in &rs {
            reg.being_read_into(*off, *n);
        }
        PENDING_READ.read(qpn, wr_id, rs, built);
        return;
    }
    PENDING_READ.posted(qpn, wr_id, built);
    for (reg, off, n) in &rs {
        reg.to_shadow(*off, *n);
    }
}

/// Before a list of receive WRs is posted: what peers write after it must be told apart from
/// what the application wrote (a no-op when nothing was posted or polled since the last fold).
pub fn before_recv() {
    each_remote(false, |r, e| r.fold(e, true));
}

/// One receive WR: its ranges in bounce regions wait for its completion.
pub fn recv_sges(ctx: usize, qpn: u32, wr_id: u64, sges: &[ibv_sge]) {
    let rs = ranges(ctx, sges);
    if !rs.is_empty() {
        PENDING_RECV.add((qpn, wr_id), rs);
    }
}

/// The fields of a polled work completion the bounce layer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub qp_num: u32,
    pub wr_id: u64,
    /// IBV_WC_SUCCESS.
    pub ok: bool,
    /// IBV_WC_RECV or IBV_WC_RECV_RDMA_WITH_IMM: a peer's data arrived.
    pub recv: bool,
    pub byte_len: u32,
}

/// Completions just polled: what they release reaches the application.
pub fn completed(wcs: impl IntoIterator<Item = Completion>) {
    bump_epoch();
    idle::completion();
    let mut peer_wrote = false;
    for w in wcs {
        if w.recv {
            let mine = PENDING_RECV.take(&(w.qp_num, w.wr_id));
            if w.ok {
                let mut left = w.byte_len as usize;
                for (r, off, len) in mine.unwrap_or_default() {
                    let k = len.min(left);
                    r.to_app(off, k);
                    left -= k;
                }
                peer_wrote = true;
            }
        } else {
            for (r, off, len) in PENDING_READ.completed(w.qp_num, w.wr_id, w.ok) {
                r.to_app(off, len);
            }
        }
    }
    if peer_wrote {
        each_remote(false, Region::sync_peer);
    }
}

/// What peers wrote that no completion announced reaches the application, when
/// [`idle::empty_poll`] says a pass is due.
pub fn idle_pass() {
    let start = Instant::now();
    let mut found = false;
    each_remote(false, |r, e| found |= r.sync_unannounced(e));
    idle::passed(found, start, Instant::now());
}

/// Every bounce region peers can write (`read`: read), in any context: a process may learn of a
/// peer's write through another context than the region's, and the message after which a peer
/// reads may leave through another (Open MPI's one-sided component has its own UCX context; the
/// fence or barrier that announces a put or allows a get comes through the point-to-point one).
fn each_remote(read: bool, mut f: impl FnMut(&Region, &Extent)) {
    // a snapshot: `f` copies region bytes, other threads' posts need not wait for that
    let all: Vec<Arc<Region>> =
        REGIONS.lock().iter().filter(|r| if read { r.remote_read } else { r.remote_write }).cloned().collect();
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
