//! When the coherence wrappers are installed. The static-inline post/poll verbs call through the
//! context's `ops`, the `ibv_wr_*` builder API through each `ibv_qp_ex`'s function pointers; both
//! are wrapped only while the context has a bounce region, and restored when its last one goes.
//! The FFI layer reads and writes those pointers ([`Slots`]); this module decides, keeps the
//! provider's own functions for the wrappers to call, and follows every `ibv_qp_ex` the
//! application obtains (ibv_qp_to_qp_ex, the only way to one) until its QP is destroyed.

use crate::live;
use crate::region::bump_epoch;
use crate::state::STATE;
use mrshim_verbs::ibv_sge;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The ops of a context the bounce layer wraps, as function addresses (0: not set). A context
/// is wrapped only if it has the first three; `post_srq_recv` where the provider has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextOps {
    pub post_send: usize,
    pub post_recv: usize,
    pub poll_cq: usize,
    pub post_srq_recv: usize,
}

/// The builders of an `ibv_qp_ex` the bounce layer wraps, as function addresses (0: not set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpxOps {
    pub wr_start: usize,
    pub wr_rdma_read: usize,
    pub wr_set_sge: usize,
    pub wr_set_sge_list: usize,
}

impl QpxOps {
    fn complete(&self) -> bool {
        self.wr_start != 0 && self.wr_rdma_read != 0 && self.wr_set_sge != 0 && self.wr_set_sge_list != 0
    }
}

/// Declares `$saved`: the ops struct `$ops` kept field by field in atomics (a wrapper reads them
/// while a patch may store them), each field by its name, and read one by one by a method of
/// that name (a wrapper loads only the op it calls).
macro_rules! saved_ops {
    ($saved:ident, $ops:ident { $($f:ident),* }) => {
        pub struct $saved {
            $($f: AtomicUsize,)*
        }
        impl $saved {
            $(
                #[inline]
                pub fn $f(&self) -> usize {
                    self.$f.load(Ordering::Acquire)
                }
            )*
            const fn new() -> Self {
                $saved { $($f: AtomicUsize::new(0),)* }
            }
            fn store(&self, o: $ops) {
                $(self.$f.store(o.$f, Ordering::Release);)*
            }
            fn load(&self) -> $ops {
                $ops { $($f: self.$f.load(Ordering::Acquire),)* }
            }
        }
    };
}
saved_ops!(SavedContextOps, ContextOps { post_send, post_recv, poll_cq, post_srq_recv });
saved_ops!(SavedQpxOps, QpxOps { wr_start, wr_rdma_read, wr_set_sge, wr_set_sge_list });

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
    /// Takes `ctx`'s `create_cq_ex` slot for good, if it has one ([`crate::cqex`]): extended CQs
    /// made from now on are followed. Called under STATE.patching when the context is patched.
    ///
    /// # Safety
    /// As [`Slots::context_ops`].
    unsafe fn take_create_cq_ex(&self, _ctx: usize) {}
    /// Installs the bounce layer's `start_poll`/`next_poll` in the followed extended CQ `cq`
    /// ([`crate::cqex::wrap_context`]). Called under STATE.patching.
    ///
    /// # Safety
    /// `cq` is a live extended CQ made through the shim (`ibv_destroy_cq` forgets it under
    /// STATE.patching).
    unsafe fn wrap_cqx(&self, _cq: usize) {}
}

/// A context the shim sees opened: its extended CQs are made through the shim from now on
/// ([`crate::cqex`]), so that those made before its first bounce region are followed too.
pub fn context_opened(slots: &dyn Slots, ctx: usize) {
    let _g = STATE.patching.lock();
    // SAFETY: the FFI layer's ctx was just returned by ibv_open_device: live.
    unsafe { slots.take_create_cq_ex(ctx) };
}

/// The provider's own ops of one patched context (one cache line: what a wrapper reads of it).
#[repr(align(64))]
pub struct ContextOrig {
    ctx: usize,
    ops: SavedContextOps,
}

impl ContextOrig {
    /// The provider's ops (non-zero once a patch saved them, which happens before any wrapper
    /// that reads them is installed; `post_srq_recv` 0 where the provider has none).
    pub fn ops(&self) -> ContextOps {
        self.ops.load()
    }
    /// The same, one op at a time (for the wrappers).
    #[inline]
    pub fn provider(&self) -> &SavedContextOps {
        &self.ops
    }
}

/// The provider's ops of a context this crate patched (for the wrappers).
#[inline]
pub fn context_orig(ctx: usize) -> Option<&'static ContextOrig> {
    STATE.orig_hint.get(ctx, |o| o.ctx == ctx).or_else(|| context_orig_slow(ctx))
}

#[cold]
fn context_orig_slow(ctx: usize) -> Option<&'static ContextOrig> {
    STATE.origs.iter().find(|o| o.ctx == ctx)
}

/// A region went live in `ctx`: wrap its ops and its `ibv_qp_ex`s (once).
pub(crate) fn patch(slots: &dyn Slots, ctx: usize) {
    let _g = STATE.patching.lock();
    // SAFETY: ctx came from the MR the FFI layer adopted: a live context.
    let ops = unsafe { slots.context_ops(ctx) };
    if ops.post_send == 0 || ops.post_recv == 0 || ops.poll_cq == 0 || is_patched(slots, ctx) {
        return;
    }
    let o = context_orig(ctx).unwrap_or_else(|| STATE.origs.push(ContextOrig { ctx, ops: SavedContextOps::new() }));
    o.ops.store(ops);
    STATE.orig_hint.set(ctx, o);
    let mut ours = slots.wrappers().0;
    if ops.post_srq_recv == 0 {
        ours.post_srq_recv = 0;
    }
    // SAFETY: as above; the saved ops are in place before the wrappers that call them; the
    // followed extended CQs are live (ibv_destroy_cq forgets one under STATE.patching, held here).
    unsafe {
        slots.set_context_ops(ctx, ours);
        slots.take_create_cq_ex(ctx);
        crate::cqex::wrap_context(ctx, |cq| slots.wrap_cqx(cq));
    }
    each_qpx(ctx, |n| n.patch(slots));
}

/// The last region of `ctx` may be gone: if so, give the provider its ops back.
pub(crate) fn unpatch_if_unused(slots: &dyn Slots, ctx: usize) {
    let _g = STATE.patching.lock();
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
    unsafe { slots.context_ops(ctx).post_send == slots.wrappers().0.post_send }
}

/// One `ibv_qp_ex` the application holds, with the provider's ops while they are wrapped.
/// Leaked and never unlinked (lock-free lookup from the wrappers); a destroyed QP's node is
/// reused for the next one.
pub struct Qpx {
    qpx: AtomicUsize,
    ctx: AtomicUsize,
    saved: SavedQpxOps,
    /// The WR being built is an RDMA READ.
    reading: AtomicBool,
}

/// The followed `ibv_qp_ex` at `qpx` (for its wrappers).
#[inline]
pub fn qpx(qpx: usize) -> Option<&'static Qpx> {
    let is = |n: &Qpx| n.qpx.load(Ordering::Acquire) == qpx;
    STATE.qpx_hint.get(qpx, is).or_else(|| STATE.qpxs.iter().find(|n| is(n)))
}

/// Under STATE.patching.
fn each_qpx(ctx: usize, f: impl Fn(&Qpx)) {
    for n in STATE.qpxs.iter().filter(|n| n.qpx.load(Ordering::Acquire) != 0 && n.ctx.load(Ordering::Acquire) == ctx) {
        f(n);
    }
}

impl Qpx {
    /// The provider's `wr_start`, `wr_rdma_read`, `wr_set_sge`, `wr_set_sge_list`, saved
    /// before the wrappers that call them were installed.
    pub fn ops(&self) -> QpxOps {
        self.saved.load()
    }
    /// The same, one op at a time (for the wrappers).
    #[inline]
    pub fn provider(&self) -> &SavedQpxOps {
        &self.saved
    }
    /// Under STATE.patching.
    fn patch(&self, slots: &dyn Slots) {
        let q = self.qpx.load(Ordering::Acquire);
        let ours = slots.wrappers().1;
        // SAFETY: a followed QP's ibv_qp_ex (nodes of destroyed QPs have qpx 0 and are not
        // visited); destroying_qp holds STATE.patching while the QP is freed.
        let ops = unsafe { slots.qpx_ops(q) };
        if !ops.complete() || ops.wr_set_sge == ours.wr_set_sge {
            return;
        }
        self.saved.store(ops);
        self.reading.store(false, Ordering::Release);
        // SAFETY: as above; the saved ops are in place before the wrappers that call them.
        unsafe { slots.set_qpx_ops(q, ours) };
    }
    /// Under STATE.patching.
    fn unpatch(&self, slots: &dyn Slots) {
        let q = self.qpx.load(Ordering::Acquire);
        // SAFETY: as in patch.
        if unsafe { slots.qpx_ops(q).wr_set_sge } != slots.wrappers().1.wr_set_sge {
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
    let _g = STATE.patching.lock();
    let node = match STATE.qpxs.iter().find(|n| n.qpx.load(Ordering::Acquire) == qpx) {
        Some(n) => n,
        None => match STATE.qpxs.iter().find(|n| n.qpx.load(Ordering::Acquire) == 0) {
            Some(n) => {
                n.ctx.store(ctx, Ordering::Release);
                n.qpx.store(qpx, Ordering::Release);
                n
            }
            None => STATE.qpxs.push(Qpx {
                qpx: AtomicUsize::new(qpx),
                ctx: AtomicUsize::new(ctx),
                saved: SavedQpxOps::new(),
                reading: AtomicBool::new(false),
            }),
        },
    };
    STATE.qpx_hint.set(qpx, node);
    if is_patched(slots, ctx) {
        node.patch(slots);
    }
}

/// Around the real ibv_destroy_qp of QP `qp` (number `qpn` in context `ctx`): a destroyed QP's
/// `ibv_qp_ex` is forgotten (its node freed for reuse) and the receives and READs still pending
/// on it are dropped (their completions never come); one that survives (EBUSY) stays followed.
pub fn destroying_qp(qp: usize, ctx: usize, qpn: u32, destroy: impl FnOnce() -> c_int) -> c_int {
    if STATE.qpxs.iter().all(|n| n.qpx.load(Ordering::Acquire) != qp) {
        let rc = destroy();
        if rc == 0 {
            live::qp_destroyed(ctx, qpn);
        }
        return rc;
    }
    // Holding STATE.patching: no patch of this object can start while it is being freed.
    let _g = STATE.patching.lock();
    let rc = destroy();
    if rc == 0 {
        for n in STATE.qpxs.iter().filter(|n| n.qpx.load(Ordering::Acquire) == qp) {
            n.qpx.store(0, Ordering::Release);
        }
        live::qp_destroyed(ctx, qpn);
    }
    rc
}
