//! When the coherence wrappers are installed. The static-inline post/poll verbs call through the
//! context's `ops`, the `ibv_wr_*` builder API through each `ibv_qp_ex`'s function pointers; both
//! are wrapped only while the context has a bounce region, and restored when its last one goes.
//! The FFI layer reads and writes those pointers ([`Slots`]); this module decides, keeps the
//! provider's own functions for the wrappers to call, and follows every `ibv_qp_ex` the
//! application obtains (ibv_qp_to_qp_ex, the only way to one) until its QP is destroyed.

use crate::leaked::Leaked;
use crate::live;
use crate::region::bump_epoch;
use mrshim_forklock::ForkLock;
use mrshim_verbs::ibv_sge;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A context's `post_send`, `post_recv`, `poll_cq` as function addresses (0: not set).
pub type ContextOps = [usize; 3];
/// An `ibv_qp_ex`'s `wr_start`, `wr_rdma_read`, `wr_set_sge`, `wr_set_sge_list` (0: not set).
pub type QpxOps = [usize; 4];

/// The function-pointer slots of verbs objects, as the FFI layer reaches them, and its wrappers.
pub trait Slots {
    /// The bounce layer's own functions for each slot.
    fn wrappers(&self) -> (ContextOps, QpxOps);
    /// # Safety
    /// `ctx` is a live `ibv_context` the FFI layer handed to this crate (from an MR or a QP).
    unsafe fn context_ops(&self, ctx: usize) -> ContextOps;
    /// # Safety
    /// As [`Slots::context_ops`]; each store is one pointer-sized aligned write (a racing verbs
    /// call sees the old or the new function).
    unsafe fn set_context_ops(&self, ctx: usize, ops: ContextOps);
    /// # Safety
    /// `qpx` is a live `ibv_qp_ex` the FFI layer handed to this crate ([`note_qpx`]).
    unsafe fn qpx_ops(&self, qpx: usize) -> QpxOps;
    /// # Safety
    /// As [`Slots::qpx_ops`]; pointer-sized aligned stores, as in [`Slots::set_context_ops`].
    unsafe fn set_qpx_ops(&self, qpx: usize, ops: QpxOps);
}

/// Function addresses saved by a patch, for the wrappers to call.
struct Saved<const N: usize>([AtomicUsize; N]);

impl<const N: usize> Saved<N> {
    const fn new() -> Self {
        Saved([const { AtomicUsize::new(0) }; N])
    }
    fn store(&self, ops: [usize; N]) {
        for (s, v) in self.0.iter().zip(ops) {
            s.store(v, Ordering::Release);
        }
    }
    fn load(&self) -> [usize; N] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Acquire))
    }
}

/// The provider's own ops of one patched context.
pub struct ContextOrig {
    ctx: usize,
    ops: Saved<3>,
}

impl ContextOrig {
    /// The provider's `post_send`, `post_recv`, `poll_cq` (non-zero once a patch saved them,
    /// which happens before any wrapper that reads them is installed).
    pub fn ops(&self) -> ContextOps {
        self.ops.load()
    }
}

static ORIGS: Leaked<ContextOrig> = Leaked::new();
/// Serialises patching and restoring, and every push to the leaked lists.
pub(crate) static PATCHING: ForkLock<()> = ForkLock::new(());

/// The provider's ops of a context this crate patched (for the wrappers).
pub fn context_orig(ctx: usize) -> Option<&'static ContextOrig> {
    ORIGS.iter().find(|o| o.ctx == ctx)
}

/// A region went live in `ctx`: wrap its ops and its `ibv_qp_ex`s (once).
pub(crate) fn patch(slots: &dyn Slots, ctx: usize) {
    let _g = PATCHING.lock();
    // SAFETY: ctx came from the MR the FFI layer adopted: a live context.
    let ops = unsafe { slots.context_ops(ctx) };
    if ops.contains(&0) || is_patched(slots, ctx) {
        return;
    }
    let o = context_orig(ctx).unwrap_or_else(|| ORIGS.push(ContextOrig { ctx, ops: Saved::new() }));
    o.ops.store(ops);
    // SAFETY: as above; the saved ops are in place before the wrappers that call them.
    unsafe { slots.set_context_ops(ctx, slots.wrappers().0) };
    each_qpx(ctx, |n| n.patch(slots));
}

/// The last region of `ctx` may be gone: if so, give the provider its ops back.
pub(crate) fn unpatch_if_unused(slots: &dyn Slots, ctx: usize) {
    let _g = PATCHING.lock();
    if live::in_context(ctx) {
        return;
    }
    if let Some(o) = context_orig(ctx) {
        // SAFETY: the context of a region that was live until now; restoring its own pointers.
        unsafe { slots.set_context_ops(ctx, o.ops()) };
    }
    each_qpx(ctx, |n| n.unpatch(slots));
}

/// Whether a context's ops are ours right now (it has a bounce region).
fn is_patched(slots: &dyn Slots, ctx: usize) -> bool {
    // SAFETY: the callers' ctx is live (an MR's or a followed QP's).
    unsafe { slots.context_ops(ctx)[0] == slots.wrappers().0[0] }
}

/// One `ibv_qp_ex` the application holds, with the provider's ops while they are wrapped.
/// Leaked and never unlinked (lock-free lookup from the wrappers); a destroyed QP's node is
/// reused for the next one.
pub struct Qpx {
    qpx: AtomicUsize,
    ctx: AtomicUsize,
    saved: Saved<4>,
    /// The WR being built is an RDMA READ.
    reading: AtomicBool,
}

static QPXS: Leaked<Qpx> = Leaked::new();

/// The followed `ibv_qp_ex` at `qpx` (for its wrappers).
pub fn qpx(qpx: usize) -> Option<&'static Qpx> {
    QPXS.iter().find(|n| n.qpx.load(Ordering::Acquire) == qpx)
}

/// Under PATCHING.
fn each_qpx(ctx: usize, f: impl Fn(&Qpx)) {
    for n in QPXS.iter().filter(|n| n.qpx.load(Ordering::Acquire) != 0 && n.ctx.load(Ordering::Acquire) == ctx) {
        f(n);
    }
}

impl Qpx {
    /// The provider's `wr_start`, `wr_rdma_read`, `wr_set_sge`, `wr_set_sge_list`, saved
    /// before the wrappers that call them were installed.
    pub fn ops(&self) -> QpxOps {
        self.saved.load()
    }
    /// Under PATCHING.
    fn patch(&self, slots: &dyn Slots) {
        let q = self.qpx.load(Ordering::Acquire);
        let ours = slots.wrappers().1;
        // SAFETY: a followed QP's ibv_qp_ex (nodes of destroyed QPs have qpx 0 and are not
        // visited); destroying_qp holds PATCHING while the QP is freed.
        let ops = unsafe { slots.qpx_ops(q) };
        if ops.contains(&0) || ops[2] == ours[2] {
            return;
        }
        self.saved.store(ops);
        self.reading.store(false, Ordering::Release);
        // SAFETY: as above; the saved ops are in place before the wrappers that call them.
        unsafe { slots.set_qpx_ops(q, ours) };
    }
    /// Under PATCHING.
    fn unpatch(&self, slots: &dyn Slots) {
        let q = self.qpx.load(Ordering::Acquire);
        // SAFETY: as in patch.
        if unsafe { slots.qpx_ops(q)[2] } != slots.wrappers().1[2] {
            return;
        }
        // SAFETY: as in patch; restoring the provider's own pointers.
        unsafe { slots.set_qpx_ops(q, self.saved.load()) };
    }
    /// `wr_start`: a new WR, not (yet) a READ; the application may have written its buffers.
    pub fn start(&self) {
        bump_epoch();
        self.reading.store(false, Ordering::Release);
    }
    /// `wr_rdma_read`: the WR being built reads.
    pub fn rdma_read(&self) {
        self.reading.store(true, Ordering::Release);
    }
    /// `wr_set_sge(_list)` of QP `qpn`: the ranges in bounce regions are copied to the shadow
    /// now, or for an RDMA READ remembered until its completion is polled.
    pub fn set_sges(&self, qpn: u32, wr_id: u64, sges: &[ibv_sge]) {
        live::send_sges(self.ctx.load(Ordering::Acquire), qpn, wr_id, self.reading.load(Ordering::Acquire), true, sges);
    }
    /// After `wr_set_sge(_list)`: the WR is complete.
    pub fn sges_set(&self) {
        self.reading.store(false, Ordering::Release);
    }
}

/// ibv_qp_to_qp_ex returned `qpx`, of context `ctx`: follow it (and wrap it now if its context
/// has a bounce region).
pub fn note_qpx(slots: &dyn Slots, qpx: usize, ctx: usize) {
    let _g = PATCHING.lock();
    let node = match QPXS.iter().find(|n| n.qpx.load(Ordering::Acquire) == qpx) {
        Some(n) => n,
        None => match QPXS.iter().find(|n| n.qpx.load(Ordering::Acquire) == 0) {
            Some(n) => {
                n.ctx.store(ctx, Ordering::Release);
                n.qpx.store(qpx, Ordering::Release);
                n
            }
            None => QPXS.push(Qpx {
                qpx: AtomicUsize::new(qpx),
                ctx: AtomicUsize::new(ctx),
                saved: Saved::new(),
                reading: AtomicBool::new(false),
            }),
        },
    };
    if is_patched(slots, ctx) {
        node.patch(slots);
    }
}

/// Around the real ibv_destroy_qp: a destroyed QP's `ibv_qp_ex` is forgotten (its node freed
/// for reuse); one that survives (EBUSY) stays followed.
pub fn destroying_qp(qp: usize, destroy: impl FnOnce() -> c_int) -> c_int {
    if QPXS.iter().all(|n| n.qpx.load(Ordering::Acquire) != qp) {
        return destroy();
    }
    // Holding PATCHING: no patch of this object can start while it is being freed.
    let _g = PATCHING.lock();
    let rc = destroy();
    if rc == 0 {
        for n in QPXS.iter().filter(|n| n.qpx.load(Ordering::Acquire) == qp) {
            n.qpx.store(0, Ordering::Release);
        }
    }
    rc
}
