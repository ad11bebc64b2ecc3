//! The FFI side of host bounce buffers (the logic is the mrshim-bounce crate; contract:
//! docs/bounce.md): the shadow token the retry path hands back, the `ibv_mr` fields a strategy
//! changes, the function-pointer slots of contexts and `ibv_qp_ex`s, and the wrappers installed
//! in them — which walk the application's WR lists and completions and hand the crate plain
//! values.

use mrshim_bounce::cqex::{self, CqxOps};
use mrshim_bounce::fixes::{self, FixKind, ShadowMr};
use mrshim_bounce::live::{self, Completion};
use mrshim_bounce::patch::{self, ContextOps, QpxOps, Slots};
use mrshim_bounce::{Memory, Shadow};
use mrshim_core::internal::guarded;
use mrshim_core::StagedShadow;
use mrshim_verbs as v;
use std::ffi::c_int;

/// MRSHIM_DEBUG_PANIC=bounce: panic here (the wrappers' guards must catch it).
#[inline]
fn debug_panic() {
    if let Some(s) = mrshim_core::shim_if_initialized() {
        s.debug_panic(mrshim_core::config::PanicAt::Bounce);
    }
}

/// The bounce layer's part of a post or poll: a panic in it is caught (and counted), and, since
/// that call's copies did not happen, says loudly that data may be stale.
fn guarded_copies(what: &str, f: impl FnOnce()) {
    if guarded(what, f).is_none() {
        mrshim_bounce::region::warn_once(&format!("an internal error in {what} skipped its copies"));
    }
}

/// A shadow for [app, app+len): device memory through its runtime's engine, host memory as is.
pub fn prepare(app: u64, len: u64, iova: u64, access: u32) -> Result<Box<dyn StagedShadow>, String> {
    let memory = || match super::gpu::device_engine(app) {
        Some(e) => Memory::Device(e),
        None if mrshim_bounce::host_readable(app, len) => Memory::Host,
        None => Memory::Unknown { disabled: super::gpu::disabled() },
    };
    Ok(Box::new(Staged(Shadow::prepare(app, len, iova, access, memory)?)))
}

/// Whether [app, app+len) lies in a live bounce region (crates/bounce, `live::covers`).
pub fn covers(app: u64, len: u64) -> bool {
    mrshim_bounce::live::covers(app, len)
}

/// The token of one bounce attempt: adopted by its MR, or abandoned.
struct Staged(Shadow);

impl StagedShadow for Staged {
    fn addr(&self) -> u64 {
        self.0.addr()
    }
    fn adopt(self: Box<Self>, mr: usize) {
        // SAFETY: mr is the live MR the attempt just registered on this shadow.
        let (ctx, lkey, addr) = unsafe {
            let m = &*(mr as *const v::ibv_mr);
            (m.context as usize, m.lkey, m.addr as u64)
        };
        let shown = fixes::adopt(self.0, ShadowMr { mr, ctx, lkey, addr }, &FfiSlots);
        // SAFETY: as above; not yet handed to the application.
        unsafe { set_mr_addr(mr, shown) };
        start_watcher();
    }
    fn abandon(self: Box<Self>) {
        self.0.abandon();
    }
}

/// The bounce watcher (crates/bounce `watch.rs`): once a region peers reach is live, a thread of
/// the shim's looks at it every [`watch::period`] and reports what a passive process leaves
/// stale. It makes no verbs call, runs inside a hook guard (what it calls is not recorded), ends
/// when the process exits or it is the last thread left (a main thread that called
/// `pthread_exit` is not kept waiting for it), and a panic in it ends it with one line.
fn start_watcher() {
    use mrshim_bounce::watch;
    if !watch::claim() {
        return;
    }
    let period = watch::period();
    let spawned = std::thread::Builder::new().name("mrshim-watch".into()).spawn(move || loop {
        std::thread::sleep(period);
        let Some(_g) = super::Guard::enter() else { return };
        match guarded("the bounce watcher", || !watch::alone() && watch::tick()) {
            Some(true) => {}
            Some(false) => return,
            None => {
                return mrshim_bounce::region::warn_once(
                    "an internal error stopped the bounce watcher: a passive process's stale bytes are \
                     reported only at ibv_dereg_mr and at exit",
                )
            }
        }
    });
    if let Err(e) = spawned {
        watch::unclaim();
        mrshim_bounce::region::warn_once(&format!(
            "the bounce watcher thread cannot start ({e}): a passive process's stale bytes are reported only at \
             ibv_dereg_mr and at exit"
        ));
    }
}

/// Writes `mr->addr`; returns what it held.
///
/// # Safety
/// `mr` is a live `struct ibv_mr` of a registration this shim made, which no other thread
/// reads or writes right now (being handed to the caller, or being deregistered by it).
unsafe fn set_mr_addr(mr: usize, addr: u64) -> u64 {
    // SAFETY: the caller's contract; addr is a plain pointer-sized field.
    unsafe {
        let a = std::ptr::addr_of_mut!((*(mr as *mut v::ibv_mr)).addr);
        std::mem::replace(&mut *a, addr as *mut std::ffi::c_void) as u64
    }
}

/// A strategy registered through another path: show the caller the `addr` it asked for.
///
/// # Safety
/// As [`set_mr_addr`]: the attempt's live MR, not yet handed to the application.
pub unsafe fn adopt_addr(mr: usize, caller_addr: u64, exported_fd: Option<i32>) {
    // SAFETY: the caller's contract.
    let real = unsafe { set_mr_addr(mr, caller_addr) };
    fixes::adopt_addr(mr, real, exported_fd);
}

/// Whether any MR may need a fix-up before its deregistration.
pub fn any_fixups() -> bool {
    fixes::any()
}

/// The strategy that registered `mr` another way than its struct says, if any (rereg.rs).
pub fn fixed_by(mr: usize) -> Option<mrshim_retry::strategy::Strategy> {
    use mrshim_retry::strategy::Strategy;
    fixes::fixed_by(mr).map(|k| match k {
        FixKind::ByAddress => Strategy::DmabufToVa,
        FixKind::ByDmabuf => Strategy::VaToDmabuf,
        FixKind::Bounce => Strategy::Bounce,
    })
}

/// Before the real ibv_dereg_mr: give rdma-core its MR back. Returns what to do after (with
/// whether the real call succeeded).
///
/// # Safety
/// As [`set_mr_addr`]: the application's live MR, being deregistered by this call.
pub unsafe fn before_dereg(mr: usize) -> Option<impl FnOnce(bool)> {
    let fix = fixes::before_dereg(mr)?;
    // SAFETY: the caller's contract; only MRs this shim adopted have a fix-up.
    unsafe { set_mr_addr(mr, fix.real_addr()) };
    Some(move |ok| fix.after(ok, &FfiSlots))
}

// ----------------------------------------------------------------- the wrapped slots

type PostSend = unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_send_wr, *mut *mut v::ibv_send_wr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_recv_wr, *mut *mut v::ibv_recv_wr) -> c_int;
type PostSrqRecv = unsafe extern "C" fn(*mut v::ibv_srq, *mut v::ibv_recv_wr, *mut *mut v::ibv_recv_wr) -> c_int;
type PollCq = unsafe extern "C" fn(*mut v::ibv_cq, c_int, *mut mrshim_verbs::sys::ibv_wc) -> c_int;
type CreateCqEx = unsafe extern "C" fn(*mut v::ibv_context, *mut v::ibv_cq_init_attr_ex) -> *mut v::ibv_cq_ex;
type StartPoll = unsafe extern "C" fn(*mut v::ibv_cq_ex, *mut v::ibv_poll_cq_attr) -> c_int;
type NextPoll = unsafe extern "C" fn(*mut v::ibv_cq_ex) -> c_int;
type ReadOpcode = unsafe extern "C" fn(*mut v::ibv_cq_ex) -> v::ibv_wc_opcode::Type;
type ReadU32 = unsafe extern "C" fn(*mut v::ibv_cq_ex) -> u32;
type QxStart = unsafe extern "C" fn(*mut v::ibv_qp_ex);
type QxRead = unsafe extern "C" fn(*mut v::ibv_qp_ex, u32, u64);
type QxSge = unsafe extern "C" fn(*mut v::ibv_qp_ex, u32, u64, u32);
type QxSgeList = unsafe extern "C" fn(*mut v::ibv_qp_ex, usize, *const v::ibv_sge);

/// The provider function at address `f`, as `F`.
///
/// # Safety
/// `F` is a function pointer type, and `f` a non-null function of that type (a slot the crate
/// saved from the same field of the same object).
unsafe fn provider<F: Copy>(f: usize) -> F {
    debug_assert!(f != 0 && std::mem::size_of::<F>() == std::mem::size_of::<usize>());
    // SAFETY: the caller's contract.
    unsafe { std::mem::transmute_copy::<usize, F>(&f) }
}

/// The context ops and `ibv_qp_ex` builders, read and written in place.
struct FfiSlots;

impl Slots for FfiSlots {
    fn wrappers(&self) -> (ContextOps, QpxOps) {
        (
            ContextOps {
                post_send: post_send as PostSend as usize,
                post_recv: post_recv as PostRecv as usize,
                poll_cq: poll_cq as PollCq as usize,
                post_srq_recv: post_srq_recv as PostSrqRecv as usize,
            },
            QpxOps {
                wr_start: qx_start as QxStart as usize,
                wr_rdma_read: qx_rdma_read as QxRead as usize,
                wr_set_sge: qx_set_sge as QxSge as usize,
                wr_set_sge_list: qx_set_sge_list as QxSgeList as usize,
            },
        )
    }
    unsafe fn context_ops(&self, ctx: usize) -> ContextOps {
        // SAFETY: the trait's contract: a live context; reading plain function pointers.
        let ops = unsafe { &(*(ctx as *const v::ibv_context)).ops };
        ContextOps {
            post_send: ops.post_send.map_or(0, |p| p as usize),
            post_recv: ops.post_recv.map_or(0, |p| p as usize),
            poll_cq: ops.poll_cq.map_or(0, |p| p as usize),
            post_srq_recv: ops.post_srq_recv.map_or(0, |p| p as usize),
        }
    }
    unsafe fn set_context_ops(&self, ctx: usize, o: ContextOps) {
        // The trait's contract: a live context whose ops the static-inline verbs read on every
        // call; pointer-sized aligned stores; each value is a function of the slot's type (ours,
        // or the provider's own saved from this slot), or 0 (None) where the provider had none.
        // SAFETY: as just said.
        unsafe {
            let ops = &mut (*(ctx as *mut v::ibv_context)).ops;
            ops.post_send = Some(provider(o.post_send));
            ops.post_recv = Some(provider(o.post_recv));
            ops.poll_cq = Some(provider(o.poll_cq));
            ops.post_srq_recv = (o.post_srq_recv != 0).then(|| provider(o.post_srq_recv));
        }
    }
    unsafe fn qpx_ops(&self, qpx: usize) -> QpxOps {
        // SAFETY: the trait's contract: a live ibv_qp_ex.
        let q = unsafe { &*(qpx as *const v::ibv_qp_ex) };
        QpxOps {
            wr_start: q.wr_start.map_or(0, |p| p as usize),
            wr_rdma_read: q.wr_rdma_read.map_or(0, |p| p as usize),
            wr_set_sge: q.wr_set_sge.map_or(0, |p| p as usize),
            wr_set_sge_list: q.wr_set_sge_list.map_or(0, |p| p as usize),
        }
    }
    unsafe fn take_create_cq_ex(&self, ctx: usize) {
        // SAFETY: the trait's contract: a live context.
        let Some(vc) = (unsafe { verbs_context(ctx) }) else { return };
        // SAFETY: verbs_context says the slot exists; a pointer-sized aligned field.
        let slot = unsafe { &mut (*vc).create_cq_ex };
        let (cur, ours) = (slot.map_or(0, |f| f as usize), create_cq_ex as CreateCqEx as usize);
        if cur != 0 && cur != ours {
            cqex::took_create(ctx, cur);
            *slot = Some(create_cq_ex);
        }
    }
    unsafe fn wrap_cqx(&self, cq: usize) {
        // SAFETY: the trait's contract: a live extended CQ made through the shim.
        unsafe { wrap_cqx_polls(cq as *mut v::ibv_cq_ex) };
    }
    unsafe fn set_qpx_ops(&self, qpx: usize, o: QpxOps) {
        // SAFETY: as in set_context_ops, for a live ibv_qp_ex: a racing ibv_wr_* call sees the
        // old or the new op.
        unsafe {
            let q = &mut *(qpx as *mut v::ibv_qp_ex);
            q.wr_start = Some(provider(o.wr_start));
            q.wr_rdma_read = Some(provider(o.wr_rdma_read));
            q.wr_set_sge = Some(provider(o.wr_set_sge));
            q.wr_set_sge_list = Some(provider(o.wr_set_sge_list));
        }
    }
}

/// The fields of a send or receive WR that the bounce layer reads.
trait WorkRequest {
    fn next(&self) -> *mut Self;
    /// # Safety
    /// The WR is one the application is posting: `sg_list` holds `num_sge` entries.
    unsafe fn sges(&self) -> &[v::ibv_sge];
}

/// An application's scatter/gather list as a slice (empty when null or `n <= 0`).
///
/// # Safety
/// A non-null `sg` holds `n` entries that stay valid and unchanged for `'a`.
unsafe fn sge_slice<'a>(sg: *const v::ibv_sge, n: c_int) -> &'a [v::ibv_sge] {
    if sg.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(sg, n as usize) }
}

impl WorkRequest for v::ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    unsafe fn sges(&self) -> &[v::ibv_sge] {
        // SAFETY: the caller's contract.
        unsafe { sge_slice(self.sg_list, self.num_sge) }
    }
}
impl WorkRequest for v::ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    unsafe fn sges(&self) -> &[v::ibv_sge] {
        // SAFETY: the caller's contract.
        unsafe { sge_slice(self.sg_list, self.num_sge) }
    }
}

/// Calls `f` for every WR of the application's list.
///
/// # Safety
/// `first` is null or the head of a WR list the application is posting.
unsafe fn each_wr<W: WorkRequest>(first: *mut W, mut f: impl FnMut(&W)) {
    let mut w = first;
    while !w.is_null() {
        // SAFETY: walking the application's WR list, as the provider is about to.
        let r = unsafe { &*w };
        f(r);
        w = r.next();
    }
}

/// Whether `f` holds for every WR of the application's list.
///
/// # Safety
/// As [`each_wr`].
unsafe fn all_wrs<W: WorkRequest>(first: *mut W, f: impl Fn(&W) -> bool) -> bool {
    let mut w = first;
    while !w.is_null() {
        // SAFETY: walking the application's WR list, as the provider is about to.
        let r = unsafe { &*w };
        if !f(r) {
            return false;
        }
        w = r.next();
    }
    true
}

/// The position of `bad` in the list starting at `first` (the WRs the provider posted), or the
/// list's length when `bad` is not in it.
///
/// # Safety
/// As [`each_wr`].
unsafe fn accepted<W: WorkRequest>(first: *mut W, bad: *mut W) -> usize {
    let mut n = 0;
    let mut w = first;
    while !w.is_null() && w != bad {
        n += 1;
        // SAFETY: walking the application's WR list.
        w = unsafe { &*w }.next();
    }
    n
}

/// `*bad` after a refused post (null when the caller passed no `bad` or the provider left it).
///
/// # Safety
/// `bad` is null or the caller's writable out pointer.
unsafe fn bad_wr<W>(bad: *mut *mut W) -> *mut W {
    if bad.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    unsafe { *bad }
}

unsafe extern "C" fn post_send(qp: *mut v::ibv_qp, wr: *mut v::ibv_send_wr, bad: *mut *mut v::ibv_send_wr) -> c_int {
    // SAFETY: qp is the application's live QP; its context is one we patched.
    let ctx = unsafe { (*qp).context } as usize;
    let Some(o) = patch::context_orig(ctx) else { return libc::EINVAL };
    // The common case, a few loads per WR: no SGE in a bounce region, none telling a peer to
    // read, no READ pending (live::plain_sends). The rest is out of line: this path stays a few
    // cache lines of code.
    // SAFETY: the application's WR list, passed on to the provider.
    let plain = unsafe { all_wrs(wr, |r| !live::announces(r.opcode) && live::outside_regions(r.sges())) };
    if plain && !live::reads_pending() {
        live::plain_sends();
        // SAFETY: the provider's own post_send (saved from this slot) with the application's arguments.
        return unsafe { provider::<PostSend>(o.provider().post_send())(qp, wr, bad) };
    }
    // SAFETY: the caller's arguments, as above.
    unsafe { post_send_copying(o, qp, wr, bad) }
}

/// [`post_send`] of a list with WRs the bounce layer acts on.
///
/// # Safety
/// As for `ibv_post_send`; `o` is `qp`'s context's.
#[inline(never)]
unsafe fn post_send_copying(
    o: &patch::ContextOrig,
    qp: *mut v::ibv_qp,
    wr: *mut v::ibv_send_wr,
    bad: *mut *mut v::ibv_send_wr,
) -> c_int {
    // SAFETY: qp is the application's live QP.
    let (ctx, qpn) = unsafe { ((*qp).context as usize, (*qp).qp_num) };
    // (position in the list, order number) of the WRs pending READs wait on: no allocation
    // unless some READ is pending on this QP.
    let mut seqs: Vec<(usize, u64)> = Vec::new();
    guarded_copies("ibv_post_send", || {
        debug_panic();
        mrshim_bounce::region::bump_epoch();
        let mut announces = false;
        let mut i = 0;
        // SAFETY: the application's WR list, passed on to the provider below.
        unsafe {
            each_wr(wr, |r| {
                announces |= live::announces(r.opcode);
                let seq = live::send_sges(ctx, qpn, r.wr_id, live::reads_into(r.opcode), false, r.sges());
                seqs.extend(seq.map(|s| (i, s)));
                i += 1;
            })
        };
        // Before the provider posts any of them; after the WRs' own ranges, which this skips.
        if announces {
            live::before_telling_peers();
        }
    });
    // SAFETY: the provider's own post_send (saved from this slot) with the application's arguments.
    let rc = unsafe { provider::<PostSend>(o.provider().post_send())(qp, wr, bad) };
    if rc != 0 && !seqs.is_empty() {
        // SAFETY: the application's WR list and out pointer, as the provider left them.
        let n = unsafe { accepted(wr, bad_wr(bad)) };
        guarded_copies("ibv_post_send", || live::send_refused(qpn, &seqs, n));
    }
    rc
}

/// The receive WRs of a list as (wr_id, SGEs).
///
/// # Safety
/// As [`each_wr`]; the list stays unchanged while the iterator lives.
unsafe fn recv_list<'a>(wr: *mut v::ibv_recv_wr) -> impl Iterator<Item = (u64, &'a [v::ibv_sge])> {
    let mut w = wr;
    std::iter::from_fn(move || {
        // SAFETY: the caller's contract.
        let r = unsafe { w.as_ref()? };
        w = r.next;
        // SAFETY: as above.
        Some((r.wr_id, unsafe { sge_slice(r.sg_list, r.num_sge) }))
    })
}

/// The bounce part of posting the receive list `wr` to `q`, around the provider's `post`.
///
/// # Safety
/// `wr` and `bad` are the application's, passed on to `post`.
unsafe fn posting_recvs(
    what: &str,
    q: live::RecvQueue,
    wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
    post: impl FnOnce() -> c_int,
) -> c_int {
    let posted = guarded(what, || {
        debug_panic();
        live::before_recv();
        // SAFETY: the application's WR list, passed on to the provider below.
        live::recv_wrs(q, unsafe { recv_list(wr) })
    });
    if posted.is_none() {
        mrshim_bounce::region::warn_once(&format!("an internal error in {what} skipped its copies"));
    }
    let rc = post();
    if let (Some(p), true) = (posted, rc != 0) {
        // SAFETY: the application's WR list and out pointer, as the provider left them.
        let n = unsafe { accepted(wr, bad_wr(bad)) };
        guarded_copies(what, || live::recv_refused(p, n));
    }
    rc
}

unsafe extern "C" fn post_recv(qp: *mut v::ibv_qp, wr: *mut v::ibv_recv_wr, bad: *mut *mut v::ibv_recv_wr) -> c_int {
    // SAFETY: as in post_send.
    let (ctx, qpn) = unsafe { ((*qp).context as usize, (*qp).qp_num) };
    let Some(o) = patch::context_orig(ctx) else { return libc::EINVAL };
    // SAFETY: the application's arguments; the provider's own post_recv.
    unsafe {
        posting_recvs("ibv_post_recv", live::RecvQueue::Qp { ctx, qpn }, wr, bad, || {
            provider::<PostRecv>(o.provider().post_recv())(qp, wr, bad)
        })
    }
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut v::ibv_srq,
    wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    // SAFETY: srq is the application's live SRQ; its context is one we patched.
    let ctx = unsafe { (*srq).context } as usize;
    let Some(o) = patch::context_orig(ctx).filter(|o| o.provider().post_srq_recv() != 0) else { return libc::EINVAL };
    // SAFETY: the application's arguments; the provider's own post_srq_recv.
    unsafe {
        posting_recvs("ibv_post_srq_recv", live::RecvQueue::Srq { ctx, srq: srq as usize }, wr, bad, || {
            provider::<PostSrqRecv>(o.provider().post_srq_recv())(srq, wr, bad)
        })
    }
}

unsafe extern "C" fn poll_cq(cq: *mut v::ibv_cq, n: c_int, wc: *mut mrshim_verbs::sys::ibv_wc) -> c_int {
    // SAFETY: cq is the application's live CQ.
    let ctx = unsafe { (*cq).context } as usize;
    let Some(o) = patch::context_orig(ctx) else { return -1 };
    // SAFETY: the provider's own poll_cq.
    let got = unsafe { provider::<PollCq>(o.provider().poll_cq())(cq, n, wc) };
    if got < 0 || !live::any_region() {
        return got;
    }
    if got == 0 {
        if mrshim_bounce::idle::empty_poll() {
            guarded_copies("ibv_poll_cq", live::idle_pass);
        }
        return got;
    }
    // SAFETY: the provider filled `got` entries; both ibv_wc types share rdma-core's layout.
    let wcs = unsafe { std::slice::from_raw_parts(wc.cast::<v::ibv_wc>(), got as usize) };
    polled(ctx, wcs);
    got
}

/// [`poll_cq`] found completions (out of line: the empty poll stays a few cache lines of code).
#[inline(never)]
fn polled(ctx: usize, wcs: &[v::ibv_wc]) {
    guarded_copies("ibv_poll_cq", || {
        debug_panic();
        live::completed(wcs.iter().map(|w| completion(ctx, w)));
    });
}

fn completion(ctx: usize, w: &v::ibv_wc) -> Completion {
    use v::ibv_wc_opcode::{IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM};
    let ok = w.status == v::ibv_wc_status::IBV_WC_SUCCESS;
    if matches!(w.opcode, IBV_WC_RECV | IBV_WC_RECV_RDMA_WITH_IMM) {
        Completion::recv(ctx, w.qp_num, w.wr_id, ok, w.opcode == IBV_WC_RECV_RDMA_WITH_IMM, w.byte_len)
    } else {
        Completion::send(ctx, w.qp_num, w.wr_id, ok)
    }
}

// ----------------------------------------------------------------- ibv_qp_ex (ibv_wr_*)
//
// The builder API calls through function pointers in each QP's `ibv_qp_ex`, not the context's
// ops; while the QP's context has a bounce region four of them are ours: `wr_start` and
// `wr_rdma_read` track whether the WR being built reads, `wr_set_sge` / `wr_set_sge_list` copy
// outgoing ranges application → shadow (or remember a READ's ranges for the poll), exactly as
// post_send does for an `ibv_send_wr`.

/// ibv_qp_to_qp_ex returned `qpx`: follow it (and wrap it now if its context has a bounce region).
pub fn note_qpx(qpx: usize) {
    // SAFETY: the provider just returned this live ibv_qp_ex; its qp_base.context is its context.
    let ctx = unsafe { (*(qpx as *const v::ibv_qp_ex)).qp_base.context } as usize;
    patch::note_qpx(&FfiSlots, qpx, ctx);
}

/// Around the real ibv_destroy_qp (see [`patch::destroying_qp`]).
///
/// # Safety
/// `qp` is null or the application's live QP, being destroyed by `destroy`.
pub unsafe fn destroying_qp(qp: usize, destroy: impl FnOnce() -> c_int) -> c_int {
    if qp == 0 {
        return destroy();
    }
    // SAFETY: the caller's contract; read before the QP is freed.
    let (ctx, qpn) = unsafe { ((*(qp as *const v::ibv_qp)).context as usize, (*(qp as *const v::ibv_qp)).qp_num) };
    patch::destroying_qp(qp, ctx, qpn, destroy)
}

/// The QP number of a live `ibv_qp_ex`.
///
/// # Safety
/// `q` is the application's live `ibv_qp_ex`.
unsafe fn qp_num(q: *mut v::ibv_qp_ex) -> u32 {
    // SAFETY: the caller's contract; qp_base is its ibv_qp.
    unsafe { (*q).qp_base.qp_num }
}

unsafe extern "C" fn qx_start(q: *mut v::ibv_qp_ex) {
    let Some(n) = patch::qpx(q as usize) else { return };
    n.start();
    // The batch's opcodes are not known yet: fold as for a post that may tell peers to read.
    guarded_copies("ibv_wr_start", live::before_telling_peers);
    // SAFETY: the provider's wr_start with the application's QP.
    unsafe { provider::<QxStart>(n.provider().wr_start())(q) }
}

unsafe extern "C" fn qx_rdma_read(q: *mut v::ibv_qp_ex, rkey: u32, raddr: u64) {
    let Some(n) = patch::qpx(q as usize) else { return };
    n.rdma_read();
    // SAFETY: the provider's wr_rdma_read with the application's arguments.
    unsafe { provider::<QxRead>(n.provider().wr_rdma_read())(q, rkey, raddr) }
}

unsafe extern "C" fn qx_set_sge(q: *mut v::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let Some(n) = patch::qpx(q as usize) else { return };
    // SAFETY: q is the application's live ibv_qp_ex; wr_id is the WR being built.
    let (qpn, wr_id) = unsafe { (qp_num(q), (*q).wr_id) };
    guarded_copies("ibv_wr_set_sge", || n.set_sges(qpn, wr_id, &[v::ibv_sge { addr, length, lkey }]));
    n.sges_set();
    // SAFETY: the provider's wr_set_sge with the application's arguments.
    unsafe { provider::<QxSge>(n.provider().wr_set_sge())(q, lkey, addr, length) }
}

unsafe extern "C" fn qx_set_sge_list(q: *mut v::ibv_qp_ex, num: usize, list: *const v::ibv_sge) {
    let Some(n) = patch::qpx(q as usize) else { return };
    // SAFETY: the application's list of `num` SGEs, passed on to the provider below.
    let sges = unsafe { sge_slice(list, num.min(c_int::MAX as usize) as c_int) };
    // SAFETY: q is the application's live ibv_qp_ex; wr_id is the WR being built.
    let (qpn, wr_id) = unsafe { (qp_num(q), (*q).wr_id) };
    guarded_copies("ibv_wr_set_sge_list", || n.set_sges(qpn, wr_id, sges));
    n.sges_set();
    // SAFETY: the provider's wr_set_sge_list with the application's arguments.
    unsafe { provider::<QxSgeList>(n.provider().wr_set_sge_list())(q, num, list) }
}

// ----------------------------------------------------------------- extended CQs
//
// `ibv_create_cq_ex` calls the context's `verbs_context.create_cq_ex`, `ibv_start_poll` and
// `ibv_next_poll` each CQ's own pointers (crates/bounce `cqex.rs`).

/// rdma-core's `verbs_get_ctx_op(ctx, create_cq_ex)`: the context's `verbs_context` when it is
/// an extended one large enough to hold that op.
///
/// # Safety
/// `ctx` is a live `ibv_context`.
unsafe fn verbs_context(ctx: usize) -> Option<*mut v::verbs_context> {
    const AT: usize = std::mem::offset_of!(v::verbs_context, context);
    let need = std::mem::size_of::<v::verbs_context>() - std::mem::offset_of!(v::verbs_context, create_cq_ex);
    let c = ctx as *mut v::ibv_context;
    // The caller's contract; abi_compat is (void *)-1 exactly when the ibv_context is the tail
    // of a verbs_context, whose sz says how many of its ops (laid out from the newest down) the
    // provider knows.
    // SAFETY: as just said.
    unsafe {
        if (*c).abi_compat as usize != usize::MAX {
            return None;
        }
        let vc = c.cast::<u8>().sub(AT).cast::<v::verbs_context>();
        ((*vc).sz >= need).then_some(vc)
    }
}

/// The shim's `create_cq_ex`: the provider's, asking also for what the bounce layer reads of a
/// completion, then the new CQ's polls wrapped. A provider that refuses the added flags makes the
/// application's own request, and that CQ is not followed (one line says so).
unsafe extern "C" fn create_cq_ex(c: *mut v::ibv_context, attr: *mut v::ibv_cq_init_attr_ex) -> *mut v::ibv_cq_ex {
    let Some(p) = cqex::create_of(c as usize) else {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        return std::ptr::null_mut();
    };
    let create = |a| {
        // SAFETY: the provider's own create_cq_ex with the application's arguments.
        unsafe { provider::<CreateCqEx>(p)(c, a) }
    };
    if attr.is_null() {
        return create(attr);
    }
    // SAFETY: the application's attributes, passed on to the provider.
    let asked = unsafe { (*attr).wc_flags };
    // SAFETY: as above; restored before returning.
    unsafe { (*attr).wc_flags = asked | cqex::NEEDED_WC_FLAGS };
    let cq = create(attr);
    // SAFETY: as above.
    unsafe { (*attr).wc_flags = asked };
    if cq.is_null() {
        if asked & cqex::NEEDED_WC_FLAGS == cqex::NEEDED_WC_FLAGS {
            return cq;
        }
        let cq = create(attr);
        if !cq.is_null() {
            mrshim_bounce::region::warn_once(
                "an extended CQ could not be made with byte counts and QP numbers: completions polled from it \
                 with ibv_start_poll/ibv_next_poll do not reach bounce regions",
            );
        }
        return cq;
    }
    // SAFETY: the provider just made this CQ; nobody polls it yet.
    let q = unsafe { &mut *cq };
    let addr = |f: Option<usize>| f.unwrap_or(0);
    let ops = CqxOps {
        start_poll: addr(q.start_poll.map(|f| f as usize)),
        next_poll: addr(q.next_poll.map(|f| f as usize)),
        read_opcode: addr(q.read_opcode.map(|f| f as usize)),
        read_byte_len: addr(q.read_byte_len.map(|f| f as usize)),
        read_qp_num: addr(q.read_qp_num.map(|f| f as usize)),
    };
    if [ops.start_poll, ops.next_poll, ops.read_opcode, ops.read_byte_len, ops.read_qp_num].contains(&0) {
        mrshim_bounce::region::warn_once(
            "an extended CQ without the poll functions the shim needs: its completions do not reach bounce regions",
        );
        return cq;
    }
    if cqex::follow(cq as usize, c as usize, ops) {
        // SAFETY: the CQ just made, followed with the provider's functions.
        unsafe { wrap_cqx_polls(cq) };
    }
    cq
}

/// The bounce layer's polls in a followed extended CQ.
///
/// # Safety
/// `cq` is a live extended CQ whose provider functions [`cqex::follow`] saved; pointer-sized
/// aligned stores (a racing poll calls the provider's function or ours, which calls it).
unsafe fn wrap_cqx_polls(cq: *mut v::ibv_cq_ex) {
    // SAFETY: the caller's contract.
    unsafe {
        (*cq).start_poll = Some(cqx_start_poll);
        (*cq).next_poll = Some(cqx_next_poll);
    }
}

/// `ibv_open_device` returned `ctx`: where the retry policy may bounce, its extended CQs are
/// made through the shim from now on (crates/bounce `cqex.rs`): one made before the context's
/// first bounce region is followed too.
pub fn opened(ctx: usize) {
    if mrshim_core::shim().may_bounce() {
        patch::context_opened(&FfiSlots, ctx);
    }
}

/// Around the real ibv_destroy_cq (see [`cqex::destroying`]).
pub fn destroying_cq(cq: usize, destroy: impl FnOnce() -> c_int) -> c_int {
    cqex::destroying(cq, destroy)
}

unsafe extern "C" fn cqx_start_poll(cq: *mut v::ibv_cq_ex, attr: *mut v::ibv_poll_cq_attr) -> c_int {
    let Some(o) = cqex::ops(cq as usize) else { return libc::EINVAL };
    // SAFETY: the provider's own start_poll, saved from this CQ, with the application's arguments.
    let rc = unsafe { provider::<StartPoll>(o.start_poll)(cq, attr) };
    // SAFETY: the application's live CQ, just polled.
    unsafe { cqx_polled("ibv_start_poll", cq, &o, rc) };
    rc
}

unsafe extern "C" fn cqx_next_poll(cq: *mut v::ibv_cq_ex) -> c_int {
    let Some(o) = cqex::ops(cq as usize) else { return libc::EINVAL };
    // SAFETY: the provider's own next_poll, saved from this CQ.
    let rc = unsafe { provider::<NextPoll>(o.next_poll)(cq) };
    if rc != libc::ENOENT {
        // SAFETY: as in cqx_start_poll.
        unsafe { cqx_polled("ibv_next_poll", cq, &o, rc) };
    }
    rc
}

/// After a start/next poll of a followed CQ returned `rc`: a completion releases what it
/// completes, as in [`poll_cq`]; `ibv_start_poll` finding nothing is an empty poll.
///
/// # Safety
/// `cq` is the application's live extended CQ, between its poll and its `ibv_end_poll`.
unsafe fn cqx_polled(what: &str, cq: *mut v::ibv_cq_ex, o: &CqxOps, rc: c_int) {
    if !live::any_region() {
        return;
    }
    if rc == libc::ENOENT {
        if mrshim_bounce::idle::empty_poll() {
            guarded_copies(what, live::idle_pass);
        }
        return;
    }
    if rc != 0 {
        return;
    }
    use v::ibv_wc_opcode::{IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM};
    // SAFETY: the caller's contract: the current completion's fields and the provider's readers
    // (the CQ was made with byte counts and QP numbers).
    let c = unsafe {
        let (ctx, wr_id) = ((*cq).context as usize, (*cq).wr_id);
        let ok = (*cq).status == v::ibv_wc_status::IBV_WC_SUCCESS;
        let op = provider::<ReadOpcode>(o.read_opcode)(cq);
        let qpn = provider::<ReadU32>(o.read_qp_num)(cq);
        if matches!(op, IBV_WC_RECV | IBV_WC_RECV_RDMA_WITH_IMM) {
            let len = provider::<ReadU32>(o.read_byte_len)(cq);
            Completion::recv(ctx, qpn, wr_id, ok, op == IBV_WC_RECV_RDMA_WITH_IMM, len)
        } else {
            Completion::send(ctx, qpn, wr_id, ok)
        }
    };
    guarded_copies(what, || {
        debug_panic();
        live::completed(std::iter::once(c));
    });
}
