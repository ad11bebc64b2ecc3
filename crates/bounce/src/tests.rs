//! The crate's decisions with plain values: a fake verbs layer ([`FakeSlots`]), host buffers as
//! the application's memory, the shadow written directly as the NIC would.

use crate::copy::{CopyEngine, HostCopy};
use crate::fixes::{self, Fix, ShadowMr};
use crate::live::{self, Completion};
use crate::patch::{self, ContextOps, QpxOps, Slots};
use crate::region::bump_epoch;
use crate::shadow::{Memory, Shadow};
use mrshim_verbs::access::{LOCAL_WRITE, REMOTE_WRITE};
use mrshim_verbs::ibv_sge;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The statics are process-wide and the fold test counts epochs: one test at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

const OURS: (ContextOps, QpxOps) = (cops(0xa1, 0xa2, 0xa3), qops(0xb1, 0xb2, 0xb3, 0xb4));

/// A context's post_send, post_recv, poll_cq (no post_srq_recv).
const fn cops(post_send: usize, post_recv: usize, poll_cq: usize) -> ContextOps {
    ContextOps { post_send, post_recv, poll_cq, post_srq_recv: 0 }
}

const fn qops(wr_start: usize, wr_rdma_read: usize, wr_set_sge: usize, wr_set_sge_list: usize) -> QpxOps {
    QpxOps { wr_start, wr_rdma_read, wr_set_sge, wr_set_sge_list }
}

/// Verbs objects as maps from their address to their function slots.
#[derive(Default)]
struct FakeSlots {
    ctx: Mutex<HashMap<usize, ContextOps>>,
    qpx: Mutex<HashMap<usize, QpxOps>>,
}

impl Slots for FakeSlots {
    fn wrappers(&self) -> (ContextOps, QpxOps) {
        OURS
    }
    unsafe fn context_ops(&self, ctx: usize) -> ContextOps {
        self.ctx.lock().unwrap()[&ctx]
    }
    unsafe fn set_context_ops(&self, ctx: usize, ops: ContextOps) {
        self.ctx.lock().unwrap().insert(ctx, ops);
    }
    unsafe fn qpx_ops(&self, qpx: usize) -> QpxOps {
        self.qpx.lock().unwrap()[&qpx]
    }
    unsafe fn set_qpx_ops(&self, qpx: usize, ops: QpxOps) {
        self.qpx.lock().unwrap().insert(qpx, ops);
    }
}

impl FakeSlots {
    fn ctx(&self, ctx: usize) -> ContextOps {
        self.ctx.lock().unwrap()[&ctx]
    }
    fn qpx(&self, qpx: usize) -> QpxOps {
        self.qpx.lock().unwrap()[&qpx]
    }
}

fn shadow(app: &mut [u8], access: u32) -> Shadow {
    let p = app.as_mut_ptr() as u64;
    Shadow::prepare(p, app.len() as u64, p, access, || Memory::Host).unwrap()
}

/// A live region over `app` in context `ctx` with lkey `lkey`; its shadow's address.
fn live_region(slots: &FakeSlots, app: &mut [u8], access: u32, ctx: usize, lkey: u32, mr: usize) -> usize {
    let s = shadow(app, access);
    let addr = s.addr();
    let shown = fixes::adopt(s, ShadowMr { mr, ctx, lkey, addr }, slots);
    assert_eq!(shown, app.as_ptr() as u64, "the caller sees its own address");
    addr as usize
}

/// Fake verbs objects with one context `ctx` (ops 1, 2, 3).
fn with_context(ctx: usize) -> FakeSlots {
    let slots = FakeSlots::default();
    slots.ctx.lock().unwrap().insert(ctx, cops(1, 2, 3));
    slots
}

fn sge(addr: *const u8, length: u32, lkey: u32) -> ibv_sge {
    ibv_sge { addr: addr as u64, length, lkey }
}

/// One receive WR posted to QP `qpn` of `ctx`.
fn recv(ctx: usize, qpn: u32, wr_id: u64, sges: &[ibv_sge]) -> live::Posted {
    live::recv_wrs(live::RecvQueue::Qp { ctx, qpn }, std::iter::once((wr_id, sges)))
}

fn dereg(slots: &FakeSlots, mr: usize, ok: bool) -> u64 {
    let fix = fixes::before_dereg(mr).expect("a fix-up");
    let real = fix.real_addr();
    fix.after(ok, slots);
    real
}

#[test]
fn a_context_is_wrapped_while_it_has_a_region_and_restored_with_its_last() {
    let _one = serial();
    let slots = FakeSlots::default();
    let (ctx, qpx) = (0x1_0000, 0x1_1000);
    slots.ctx.lock().unwrap().insert(ctx, cops(1, 2, 3));
    slots.qpx.lock().unwrap().insert(qpx, qops(4, 5, 6, 7));
    patch::note_qpx(&slots, qpx, ctx);
    assert_eq!(slots.qpx(qpx), qops(4, 5, 6, 7), "no region: nothing wrapped");
    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
    let sa = live_region(&slots, &mut a, LOCAL_WRITE, ctx, 0x101, 0xa000);
    assert_eq!((slots.ctx(ctx), slots.qpx(qpx)), OURS, "the first region wraps the context and its qp_ex");
    assert_eq!(patch::context_orig(ctx).unwrap().ops(), cops(1, 2, 3));
    assert_eq!(patch::qpx(qpx).unwrap().ops(), qops(4, 5, 6, 7));
    live_region(&slots, &mut b, LOCAL_WRITE, ctx, 0x102, 0xb000);
    assert_eq!(patch::context_orig(ctx).unwrap().ops(), cops(1, 2, 3), "a second region does not save our wrappers");
    assert_eq!(dereg(&slots, 0xa000, true), sa as u64, "rdma-core gets its own addr back");
    assert_eq!(slots.ctx(ctx), OURS.0, "one region left: still wrapped");
    let fix = fixes::before_dereg(0xb000).unwrap();
    fix.after(false, &slots);
    assert_eq!(slots.ctx(ctx), OURS.0, "a failed dereg keeps the region served");
    // the region of the failed dereg is still live; a QP obtained now is wrapped at once
    let qpx2 = 0x1_2000;
    slots.qpx.lock().unwrap().insert(qpx2, qops(8, 9, 10, 11));
    patch::note_qpx(&slots, qpx2, ctx);
    assert_eq!(slots.qpx(qpx2), OURS.1);
    assert_eq!(patch::destroying_qp(qpx2, ctx, 77, || libc::EBUSY), libc::EBUSY);
    assert!(patch::qpx(qpx2).is_some(), "a QP that survives its destroy stays followed");
    assert_eq!(patch::destroying_qp(qpx2, ctx, 77, || 0), 0);
    assert!(patch::qpx(qpx2).is_none(), "a destroyed QP is forgotten");
}

#[test]
fn the_last_dereg_gives_the_provider_its_ops_back() {
    let _one = serial();
    let slots = FakeSlots::default();
    let (ctx, qpx) = (0x2_0000, 0x2_1000);
    slots.ctx.lock().unwrap().insert(ctx, cops(1, 2, 3));
    slots.qpx.lock().unwrap().insert(qpx, qops(4, 5, 6, 7));
    patch::note_qpx(&slots, qpx, ctx);
    let mut a = vec![0u8; 4096];
    live_region(&slots, &mut a, LOCAL_WRITE, ctx, 0x201, 0xc000);
    dereg(&slots, 0xc000, true);
    assert_eq!((slots.ctx(ctx), slots.qpx(qpx)), (cops(1, 2, 3), qops(4, 5, 6, 7)));
    assert!(fixes::before_dereg(0xc000).is_none(), "a fix-up is used once");
}

#[test]
fn a_context_without_all_three_ops_is_left_alone() {
    let _one = serial();
    let slots = FakeSlots::default();
    let ctx = 0x3_0000;
    slots.ctx.lock().unwrap().insert(ctx, cops(1, 0, 3));
    let mut a = vec![0u8; 4096];
    live_region(&slots, &mut a, LOCAL_WRITE, ctx, 0x301, 0xd000);
    assert_eq!(slots.ctx(ctx), cops(1, 0, 3));
    dereg(&slots, 0xd000, true);
}

#[test]
fn a_send_copies_now_and_a_read_waits_for_a_completion_of_its_qp() {
    let _one = serial();
    let ctx = 0x4_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0x401, 0xe000);
    // SAFETY: the region's live shadow, 8192 bytes.
    let shadow = |i: usize| unsafe { *((sh + i) as *const u8) };
    app[100..200].fill(5);
    live::send_sges(ctx, 7, 0, false, false, &[sge(app[100..].as_ptr(), 100, 0x401)]);
    assert_eq!((shadow(99), shadow(100), shadow(199), shadow(200)), (0, 5, 5, 0), "exactly the SGE's range");
    app[300] = 9;
    live::send_sges(ctx + 1, 7, 0, false, false, &[sge(app[300..].as_ptr(), 1, 0x401)]);
    live::send_sges(ctx, 7, 0, false, false, &[sge(app[8000..].as_ptr(), 400, 0x401)]);
    assert_eq!(shadow(300), 0, "another context's lkey, or a range past the region: not ours");
    live::send_sges(ctx, 7, 0, true, false, &[sge(app[1000..].as_ptr(), 10, 0x401)]);
    // SAFETY: as above: the NIC writes what the READ fetched.
    unsafe { std::ptr::write_bytes((sh + 1000) as *mut u8, 0x33, 10) };
    let wc = |qp_num, ok| Completion::send(ctx, qp_num, 0, ok);
    live::completed([wc(8, true)]);
    assert_eq!(app[1000], 0, "another QP's completion releases nothing");
    live::completed([wc(7, true)]);
    assert!(app[1000..1010].iter().all(|&b| b == 0x33) && app[1010] == 0, "the READ's range, once complete");
    dereg(&slots, 0xe000, true);
}

#[test]
fn a_read_is_released_only_by_a_completion_of_a_wr_posted_no_earlier() {
    let _one = serial();
    let ctx = 0x4_8000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0x481, 0xe800);
    let lands = |at: usize, v: u8| {
        // SAFETY: the region's live shadow, 8192 bytes: the NIC writes what a READ fetched.
        unsafe { std::ptr::write_bytes((sh + at) as *mut u8, v, 16) };
    };
    let wc = |wr_id, ok| Completion::send(ctx, 7, wr_id, ok);
    // A SEND (wr_id 1) is still outstanding when READ 2 is posted: its completion proves
    // nothing about the READ, whose data has not landed yet.
    live::send_sges(ctx, 7, 1, false, false, &[sge(app[4000..].as_ptr(), 16, 0x481)]);
    live::send_sges(ctx, 7, 2, true, false, &[sge(app[1000..].as_ptr(), 16, 0x481)]);
    live::completed([wc(1, true)]);
    lands(1000, 0x33);
    assert_eq!(app[1000], 0, "released by the completion of a WR posted before it");
    live::completed([wc(2, true)]);
    assert!(app[1000..1016].iter().all(|&b| b == 0x33), "released by its own completion");
    // An unsignaled READ (3) is proven done by a later WR's completion (4), and only by that.
    live::send_sges(ctx, 7, 3, true, false, &[sge(app[2000..].as_ptr(), 16, 0x481)]);
    live::send_sges(ctx, 7, 4, false, false, &[]);
    lands(2000, 0x44);
    live::completed([wc(2, true)]);
    assert_eq!(app[2000], 0, "an old wr_id proves nothing");
    live::completed([wc(4, true)]);
    assert!(app[2000..2016].iter().all(|&b| b == 0x44), "a later WR's completion");
    // A failed completion: the QP is in error, the READ never lands, nothing is copied.
    live::send_sges(ctx, 7, 5, true, false, &[sge(app[3000..].as_ptr(), 16, 0x481)]);
    lands(3000, 0x55);
    live::completed([wc(5, false)]);
    live::completed([wc(5, true)]);
    assert_eq!(app[3000], 0, "dropped with the failed QP");
    // Built with ibv_wr_*: a completion naming no WR seen may be an unseen later one.
    live::send_sges(ctx, 7, 6, true, true, &[sge(app[5000..].as_ptr(), 16, 0x481)]);
    lands(5000, 0x66);
    live::completed([wc(99, true)]);
    assert!(app[5000..5016].iter().all(|&b| b == 0x66), "released as before on such a QP");
    dereg(&slots, 0xe800, true);
}

#[test]
fn a_receive_completion_copies_up_to_its_byte_len() {
    let _one = serial();
    let ctx = 0x5_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0x501, 0xf000);
    live::before_recv();
    recv(ctx, 3, 42, &[sge(app.as_ptr(), 256, 0x501), sge(app[4096..].as_ptr(), 256, 0x501)]);
    // SAFETY: the region's live shadow: the peer's message lands in both SGEs.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x44, 8192) };
    let wc = |wr_id, ok| Completion::recv(ctx, 3, wr_id, ok, false, 300);
    live::completed([wc(41, true)]);
    assert_eq!(app[0], 0, "another WR's completion");
    live::completed([wc(42, true)]);
    assert!(app[..256].iter().all(|&b| b == 0x44), "the first SGE, whole");
    assert!(app[4096..4096 + 44].iter().all(|&b| b == 0x44) && app[4096 + 44] == 0, "the second, up to byte_len");
    assert_eq!(app[256], 0, "between the SGEs: nothing");
    dereg(&slots, 0xf000, true);
}

#[test]
fn a_failed_receive_copies_nothing_and_releases_its_ranges() {
    let _one = serial();
    let ctx = 0x6_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0x601, 0x1_f000);
    recv(ctx, 3, 1, &[sge(app.as_ptr(), 16, 0x601)]);
    // SAFETY: the region's live shadow.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x55, 16) };
    let wc = Completion::recv(ctx, 3, 1, false, false, 16);
    live::completed([wc]);
    live::completed([Completion { ok: true, ..wc }]);
    assert_eq!(app[0], 0, "the error completion took the WR's ranges");
    dereg(&slots, 0x1_f000, true);
}

#[test]
fn a_peer_write_reaches_the_application_without_undoing_its_own_writes() {
    let _one = serial();
    let ctx = 0x7_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x701, 0x2_f000);
    app[10] = 1; // the application's own write, after the last sync
                 // SAFETY: the region's live shadow: a peer's RDMA WRITE.
    unsafe { std::ptr::write_bytes((sh + 2000) as *mut u8, 0x66, 8) };
    live::completed([Completion::recv(ctx, 9, 0, true, false, 0)]);
    assert!(app[2000..2008].iter().all(|&b| b == 0x66), "the peer's bytes");
    assert_eq!(app[10], 1, "the application's byte stays");
    dereg(&slots, 0x2_f000, true);
}

#[test]
fn strategies_addresses_are_fixed_up_once() {
    let _one = serial();
    let slots = FakeSlots::default();
    fixes::adopt_addr(0x3_f000, 0x1234, None);
    assert!(fixes::any());
    let fix = fixes::before_dereg(0x3_f000).unwrap();
    assert!(matches!(fix, Fix::Addr(0x1234)));
    fix.after(true, &slots);
    assert!(fixes::before_dereg(0x3_f000).is_none());
}

#[test]
fn an_invalid_request_is_refused_before_the_memory_is_looked_at() {
    let _one = serial();
    let asked = AtomicBool::new(false);
    let r = Shadow::prepare(0x1000, 0, 0x1000, 0, || {
        asked.store(true, Ordering::Release);
        Memory::Host
    });
    assert!(r.is_err() && !asked.load(Ordering::Acquire));
    assert!(Shadow::prepare(0x1000, 8, 0x1001, 0, || Memory::Host).is_err(), "different page offsets");
    let e = Shadow::prepare(0x1000, 8, 0x1000, 0, || Memory::Unknown { disabled: vec!["HIP: untrusted".into()] });
    assert!(e.err().unwrap().contains("no trusted GPU runtime owns it: HIP: untrusted"));
}

/// A host copy engine behind which "the NIC" writes the next message into the shadow right
/// after the first copy to the application: the window a streaming peer hits.
struct NicWritesDuringCopy {
    shadow: usize,
    len: usize,
    fired: AtomicBool,
}

impl CopyEngine for NicWritesDuringCopy {
    fn name(&self) -> &'static str {
        "racy"
    }
    unsafe fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract.
        unsafe { HostCopy.to_host(dst, src, n) }
    }
    unsafe fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract.
        unsafe { HostCopy.to_app(dst, src, n)? };
        if !self.fired.swap(true, Ordering::AcqRel) {
            // SAFETY: the region's live shadow, len bytes.
            unsafe { std::ptr::write_bytes(self.shadow as *mut u8, 0xee, self.len) };
        }
        Ok(())
    }
    fn app_is_host(&self) -> bool {
        true
    }
}

/// A shadow for `app` that peers may write (so it keeps a baseline).
fn peer_writable(app: &mut [u8]) -> Shadow {
    shadow(app, LOCAL_WRITE | REMOTE_WRITE)
}

#[test]
fn a_peer_write_landing_during_a_sync_reaches_the_application_at_the_next_one() {
    let _one = serial();
    let len = 8192;
    let mut app = vec![0u8; len];
    let mut s = peer_writable(&mut app);
    s.region.engine = Box::new(NicWritesDuringCopy { shadow: s.region.shadow, len, fired: AtomicBool::new(false) });
    let r = &s.region;
    // SAFETY: the region's live shadow; the peer's first message.
    unsafe { std::ptr::write_bytes(r.shadow as *mut u8, 0x11, len) };
    r.sync_peer_writes();
    assert!(app.iter().all(|&b| b == 0x11), "first message copied");
    r.sync_peer_writes(); // the completion of the message that landed meanwhile
    assert!(app.iter().all(|&b| b == 0xee), "the second message was lost");
    s.abandon();
}

/// Reads of the application's (device-like) buffer, counted.
struct Counting(Arc<AtomicU32>);

impl CopyEngine for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    unsafe fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the caller's contract.
        unsafe { HostCopy.to_host(dst, src, n) }
    }
    unsafe fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract.
        unsafe { HostCopy.to_app(dst, src, n) }
    }
}

#[test]
fn receives_posted_back_to_back_fold_the_application_writes_once() {
    let _one = serial();
    let mut app = vec![0u8; 8192];
    let p = app.as_mut_ptr() as u64;
    let mut s = peer_writable(&mut app);
    let reads = Arc::new(AtomicU32::new(0));
    s.region.engine = Box::new(Counting(reads.clone()));
    let r = &s.region;
    // SAFETY: the region's live shadow, i < len.
    let shadow = |i: usize| unsafe { *((r.shadow + i) as *const u8) };
    // SAFETY: the application's own buffer, written through its pointer as a kernel would.
    unsafe { *(p as *mut u8) = 7 };
    r.fold_app_writes(true);
    r.fold_app_writes(true);
    assert_eq!(reads.load(Ordering::Acquire), 1, "the second receive, posted right after, reads nothing");
    assert_eq!(shadow(0), 7, "the application's write reached the shadow");
    // SAFETY: as above.
    unsafe { *((p + 1) as *mut u8) = 9 };
    bump_epoch(); // a post or a poll with completions in between
    r.fold_app_writes(true);
    assert_eq!(reads.load(Ordering::Acquire), 2);
    assert_eq!(shadow(1), 9);
    s.abandon();
}

/// A QP destroyed with receives posted gives their buffers back to the application: a receive
/// posted after it (on a new QP) folds what the application wrote since, though nothing was
/// posted or polled in between (checker seed 1000062).
#[test]
fn a_receive_after_a_qp_destroy_folds_the_applications_writes() {
    let _one = serial();
    let mut app = vec![0u8; 8192];
    let p = app.as_mut_ptr() as u64;
    let s = peer_writable(&mut app);
    let r = &s.region;
    bump_epoch();
    r.fold_app_writes(true); // the receives posted before the destroy
    live::qp_destroyed(0x7_7000, 77);
    // SAFETY: the application's own buffer: its refill after the destroy.
    unsafe { *(p as *mut u8) = 5 };
    r.fold_app_writes(true); // the receive posted on the new QP
                             // SAFETY: the region's live shadow, first byte.
    assert_eq!(unsafe { *(r.shadow as *const u8) }, 5, "the refill reached the shadow");
    s.abandon();
}

/// Issue 18: a peer RDMA-READs a region after a SEND of ours (UCX's rndv GET after its RTS,
/// MPI_Get after a fence): what the application wrote before that post must be in the shadow,
/// in this context's regions and another's, tracked by the kernel (>= 64 KiB of private
/// anonymous memory) or compared whole (smaller); RDMA WRITEs and READs fold nothing.
#[test]
fn a_send_brings_what_the_application_wrote_to_every_region_peers_read() {
    use mrshim_verbs::access::REMOTE_READ;
    use mrshim_verbs::ibv_wr_opcode::*;
    let _one = serial();
    let slots = FakeSlots::default();
    let (ctx, other) = (0x7_0000, 0x7_8000);
    slots.ctx.lock().unwrap().insert(ctx, cops(1, 2, 3));
    slots.ctx.lock().unwrap().insert(other, cops(1, 2, 3));
    let mut big = vec![0u8; 1 << 20];
    let mut small = vec![0u8; 8192];
    let mut unread = vec![0u8; 8192];
    let sh_big = live_region(&slots, &mut big, LOCAL_WRITE | REMOTE_READ, ctx, 0x701, 0x7100);
    let sh_small = live_region(&slots, &mut small, LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE, other, 0x702, 0x7200);
    let sh_unread = live_region(&slots, &mut unread, LOCAL_WRITE, ctx, 0x703, 0x7300);
    // SAFETY: live shadows of the lengths above.
    let at = |sh: usize, i: usize| unsafe { *((sh + i) as *const u8) };
    for round in 1..4u8 {
        big[5000] = round;
        big[(1 << 20) - 1] = round;
        small[7] = round;
        unread[7] = round;
        assert!(!live::announces(IBV_WR_RDMA_WRITE_WITH_IMM) && !live::announces(IBV_WR_RDMA_READ));
        assert_eq!((at(sh_big, 5000), at(sh_small, 7)), (round - 1, round - 1), "no fold before the SEND");
        assert!(live::announces(IBV_WR_SEND) && live::announces(IBV_WR_SEND_WITH_IMM));
        live::before_telling_peers();
        assert_eq!(
            (at(sh_big, 5000), at(sh_big, (1 << 20) - 1), at(sh_small, 7)),
            (round, round, round),
            "round {round}"
        );
        assert_eq!(at(sh_unread, 7), 0, "a region peers cannot read is left alone");
    }
    assert!(live::reads_into(IBV_WR_ATOMIC_FETCH_AND_ADD) && live::reads_into(IBV_WR_RDMA_READ));
    assert!(!live::reads_into(IBV_WR_SEND));
    for mr in [0x7100, 0x7200, 0x7300] {
        dereg(&slots, mr, true);
    }
}

/// UCX registers a window once per device: a registration inside a live bounce region is
/// registered on that region's shadow (a put through one MR is what a get through the other
/// reads); it lets go of the shared mappings when abandoned.
#[test]
fn a_registration_inside_a_live_region_shares_its_shadow() {
    use mrshim_verbs::access::REMOTE_READ;
    let _one = serial();
    let ctx = 0x8_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 16384];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE, ctx, 0x801, 0x8100);
    app[4096 + 3] = 42;
    let inner = Shadow::prepare(
        app[4096..].as_ptr() as u64,
        4096,
        app[4096..].as_ptr() as u64,
        LOCAL_WRITE | REMOTE_READ,
        || Memory::Host,
    )
    .unwrap();
    assert_eq!(inner.addr() as usize, sh + 4096, "the outer region's shadow, at the same offset");
    // SAFETY: the outer region's live shadow.
    assert_eq!(unsafe { *((sh + 4096 + 3) as *const u8) }, 42, "folded when it was registered");
    inner.abandon();
    // SAFETY: as above: still mapped, the outer region lives on.
    assert_eq!(unsafe { *((sh + 4096 + 3) as *const u8) }, 42);
    dereg(&slots, 0x8100, true);
}

/// UCX registers a buffer again for its other device: the inner region folds and syncs through
/// the outer one's tracked span, and goes on doing so after the outer region is deregistered
/// (the shared mappings and the kernel's tracking live as long as either region).
#[test]
fn an_inner_region_folds_and_syncs_through_the_tracked_span_it_shares() {
    use mrshim_verbs::access::{REMOTE_READ, REMOTE_WRITE};
    let _one = serial();
    let ctx = 0x9_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 1 << 20];
    let access = LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE;
    let sh = live_region(&slots, &mut app, access, ctx, 0x901, 0x9100);
    let p = app[65536..].as_ptr() as u64;
    let inner = Shadow::prepare(p, 65536, p, access, || Memory::Host).unwrap();
    assert_eq!(inner.addr() as usize, sh + 65536);
    fixes::adopt(inner, ShadowMr { mr: 0x9200, ctx, lkey: 0x902, addr: (sh + 65536) as u64 }, &slots);
    // SAFETY: the live shared shadow, 1 MiB.
    let at = |i: usize| unsafe { *((sh + i) as *const u8) };
    // SAFETY: as above; what a peer's RDMA WRITE does.
    let peer = |i: usize, v: u8| unsafe { *((sh + i) as *mut u8) = v };
    let recv = Completion::recv(ctx, 9, 0, true, false, 0);
    for round in 1..4u8 {
        app[65536 + 7] = round;
        app[3] = round;
        live::before_telling_peers();
        assert_eq!((at(65536 + 7), at(3)), (round, round), "round {round}: the application's writes");
        peer(65536 + 100, round);
        live::completed([recv]);
        assert_eq!(app[65536 + 100], round, "round {round}: the peer's write");
        let r = crate::state::STATE.regions.lock().iter().find(|r| r.lkey == 0x902).cloned().unwrap();
        let e = r.extent();
        assert!(
            e.track.is_some() && e.view.len == 1 << 20,
            "round {round}: the tracked span, not a compare of its own"
        );
        if round == 1 {
            dereg(&slots, 0x9100, true);
        }
    }
    dereg(&slots, 0x9200, true);
}

/// ucx_perftest's put_bw, NCCL's FIFO: a peer's plain RDMA WRITE, announced by nothing, reaches
/// the application while it spins on empty polls — only the bytes the peer changed, so what the
/// application wrote meanwhile stays.
#[test]
fn a_write_no_completion_announces_arrives_while_polls_come_back_empty() {
    use mrshim_verbs::access::REMOTE_WRITE;
    let _one = serial();
    let ctx = 0xa_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8195];
    let sh = live_region(&slots, &mut app[3..], LOCAL_WRITE | REMOTE_WRITE, ctx, 0xa01, 0xa100);
    live::completed([]);
    // SAFETY: the live shadow, 8192 bytes; what a peer's RDMA WRITE does.
    unsafe { std::ptr::write_bytes((sh + 1000) as *mut u8, 7, 4000) };
    app[3 + 6000] = 9;
    let start = std::time::Instant::now();
    let flag = app[3 + 4999..].as_ptr();
    // SAFETY: the application's live buffer; read as a program polling it does.
    while unsafe { std::ptr::read_volatile(flag) } != 7 {
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "never arrived");
        if crate::idle::empty_poll() {
            live::idle_pass();
        }
    }
    assert!(app[3 + 1000..3 + 5000].iter().all(|&b| b == 7) && app[3 + 999] == 0 && app[3 + 5000] == 0);
    assert_eq!(app[3 + 6000], 9, "the application's own write stays");
    dereg(&slots, 0xa100, true);
}

/// MPI rndv GET: the receiver fills its buffer, then RDMA-READs into it. A fold before the
/// READ's completion (a SEND on another QP, a post_recv) must not take the fill for the
/// application's new data and copy it over what the READ brought into the shadow.
#[test]
fn a_fold_before_a_reads_completion_keeps_what_the_read_brought() {
    use mrshim_verbs::access::{REMOTE_READ, REMOTE_WRITE};
    let _one = serial();
    let ctx = 0xb_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 1 << 17];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE, ctx, 0xb01, 0xb100);
    app[..8192].fill(0xa5);
    live::send_sges(ctx, 11, 1, true, false, &[sge(app.as_ptr(), 8192, 0xb01)]);
    // SAFETY: the live shadow; what the NIC does with the READ's response.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x6b, 8192) };
    live::completed([Completion::send(ctx, 12, 9, true)]);
    live::before_telling_peers();
    live::before_recv();
    live::completed([Completion::send(ctx, 11, 1, true)]);
    assert!(app[..8192].iter().all(|&b| b == 0x6b), "the READ's bytes, not the fill");
    dereg(&slots, 0xb100, true);
}

/// N2: ibv_rc_pingpong posts every receive with the same wr_id. A QP's receive queue completes in
/// posting order: the n-th completion copies the n-th receive's range, not all of them at once.
#[test]
fn receives_sharing_a_wr_id_complete_one_by_one_in_posting_order() {
    let _one = serial();
    let ctx = 0xc_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xc01, 0xc100);
    for i in 0..4 {
        recv(ctx, 5, 7, &[sge(app[i * 1024..].as_ptr(), 1024, 0xc01)]);
    }
    // SAFETY: the live shadow: the first message lands in the first receive's range.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 1, 1024) };
    live::completed([Completion::recv(ctx, 5, 7, true, false, 1024)]);
    assert!(app[..1024].iter().all(|&b| b == 1), "the first receive's bytes");
    // SAFETY: as above: the second message, in the second range.
    unsafe { std::ptr::write_bytes((sh + 1024) as *mut u8, 2, 1024) };
    live::completed([Completion::recv(ctx, 5, 7, true, false, 1024)]);
    assert!(app[1024..2048].iter().all(|&b| b == 2), "the second completion copies the second receive");
    assert_eq!(crate::state::STATE.pending_recv.pending(), 2);
    live::qp_destroyed(ctx, 5);
    dereg(&slots, 0xc100, true);
}

/// N12: a header SGE in a plain MR, the payload in a bounce region: `byte_len` counts the
/// header too, so only the bytes that arrived are copied.
#[test]
fn a_multi_sge_receive_copies_only_the_bytes_that_arrived() {
    let _one = serial();
    let ctx = 0xc_8000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let header = [0u8; 64];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xc81, 0xc900);
    recv(ctx, 6, 1, &[sge(header.as_ptr(), 64, 0x9999), sge(app.as_ptr(), 4096, 0xc81)]);
    // SAFETY: the live shadow: stale bytes past the message's end must stay in the shadow.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 3, 4096) };
    live::completed([Completion::recv(ctx, 6, 1, true, false, 64 + 100)]);
    assert!(app[..100].iter().all(|&b| b == 3), "the payload that arrived");
    assert_eq!(app[100], 0, "nothing past the message's end");
    dereg(&slots, 0xc900, true);
}

/// N20: a WRITE_WITH_IMM consumes a receive WR but writes where the peer pointed: the receive's
/// SGEs keep what the application put there.
#[test]
fn a_write_with_imm_completion_leaves_the_consumed_receives_buffer_alone() {
    let _one = serial();
    let ctx = 0xd_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xd01, 0xd100);
    recv(ctx, 8, 1, &[sge(app.as_ptr(), 256, 0xd01)]);
    // SAFETY: the live shadow holds stale bytes there (what it had when the receive was posted).
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0xee, 256) };
    app[..256].fill(0x11);
    live::completed([Completion::recv(ctx, 8, 1, true, true, 256)]);
    assert!(app[..256].iter().all(|&b| b == 0x11), "the application's newer bytes stay");
    assert_eq!(crate::state::STATE.pending_recv.pending(), 0, "the receive was consumed");
    dereg(&slots, 0xd100, true);
}

/// N13: receives and READs the provider refused (`*bad_wr`) wait for nothing: a later
/// completion with the same wr_id does not copy their stale shadow bytes.
#[test]
fn posts_the_provider_refused_drop_their_pending_work() {
    let _one = serial();
    let ctx = 0xd_8000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xd81, 0xd900);
    let sges = [sge(app.as_ptr(), 64, 0xd81)];
    let p = live::recv_wrs(live::RecvQueue::Qp { ctx, qpn: 9 }, [(1, &sges[..]), (2, &sges[..])].into_iter());
    live::recv_refused(p, 0);
    assert_eq!(crate::state::STATE.pending_recv.pending(), 0);
    // A READ refused (send queue full): its completion never comes; a later WR's must not
    // release it.
    let seq = live::send_sges(ctx, 9, 5, true, false, &[sge(app[1024..].as_ptr(), 64, 0xd81)]).unwrap();
    live::send_refused(9, &[(0, seq)], 0);
    // SAFETY: the live shadow: stale bytes.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x77, 4096) };
    live::send_sges(ctx, 9, 5, false, false, &[]);
    live::completed([Completion::send(ctx, 9, 5, true), Completion::recv(ctx, 9, 1, true, false, 64)]);
    assert!(app.iter().all(|&b| b == 0), "nothing refused was copied");
    assert_eq!(crate::state::STATE.pending_read.qps(), 0);
    dereg(&slots, 0xd900, true);
}

/// N5: receives and READs pending on a destroyed QP are freed with it (and the region's memory
/// with its last reference).
#[test]
fn a_destroyed_qps_pending_work_is_freed() {
    let _one = serial();
    let ctx = 0xe_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xe01, 0xe100);
    for _ in 0..100 {
        recv(ctx, 10, 1, &[sge(app.as_ptr(), 64, 0xe01)]);
    }
    live::send_sges(ctx, 10, 2, true, false, &[sge(app.as_ptr(), 64, 0xe01)]);
    assert_eq!(patch::destroying_qp(0xe0e0, ctx, 10, || 0), 0);
    assert_eq!(crate::state::STATE.pending_recv.pending(), 0);
    assert_eq!(crate::state::STATE.pending_read.qps(), 0);
    let r = crate::state::STATE.regions.lock().iter().find(|r| r.lkey == 0xe01).cloned().unwrap();
    assert_eq!(Arc::strong_count(&r), 3, "the region list, its fix-up and this test: no pending copy");
    drop(r);
    dereg(&slots, 0xe100, true);
}

/// N6: a completion polled after the region's deregistration copies nothing into the old
/// buffer (freed, or reused by then).
#[test]
fn a_completion_after_dereg_does_not_copy_into_the_old_buffer() {
    let _one = serial();
    let ctx = 0xe_8000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xe81, 0xe900);
    recv(ctx, 11, 1, &[sge(app.as_ptr(), 64, 0xe81)]);
    live::send_sges(ctx, 11, 2, true, false, &[sge(app[1024..].as_ptr(), 64, 0xe81)]);
    // SAFETY: the live shadow.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x99, 4096) };
    dereg(&slots, 0xe900, true);
    app.fill(0x42); // the buffer reused
    live::completed([Completion::recv(ctx, 11, 1, true, false, 64), Completion::send(ctx, 11, 2, true)]);
    assert!(app.iter().all(|&b| b == 0x42), "the reused buffer is left alone");
    live::qp_destroyed(ctx, 11);
}

/// N1: receives posted to a shared receive queue are copied at the completion of whichever QP
/// consumed them (the oldest with the completion's wr_id first).
#[test]
fn srq_receives_reach_the_application() {
    let _one = serial();
    let ctx = 0xf_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE, ctx, 0xf01, 0xf100);
    let q = live::RecvQueue::Srq { ctx, srq: 0xf0f0 };
    let (a, b) = ([sge(app.as_ptr(), 64, 0xf01)], [sge(app[64..].as_ptr(), 64, 0xf01)]);
    live::recv_wrs(q, [(3, &a[..]), (3, &b[..])].into_iter());
    // SAFETY: the live shadow: two messages.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x21, 128) };
    live::completed([Completion::recv(ctx, 40, 3, true, false, 64)]);
    assert!(app[..64].iter().all(|&b| b == 0x21) && app[64] == 0, "the oldest first");
    live::completed([Completion::recv(ctx, 41, 3, true, false, 64)]);
    assert!(app[64..128].iter().all(|&b| b == 0x21), "then the next, on another QP");
    dereg(&slots, 0xf100, true);
}

/// N3: one thread copies its buffer to the shadow for a send while another syncs what peers
/// wrote (a RECV completion): the half-copied state must never be taken for a peer's write —
/// the sender's buffer would revert and the old bytes go on the wire.
#[test]
fn a_send_copy_and_another_threads_sync_never_interleave() {
    let _one = serial();
    let ctx = 0xf_8000;
    let slots = with_context(ctx);
    let n = 256 << 10;
    let mut app = vec![0u8; n];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0xf81, 0xf900);
    let start = std::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                live::completed([Completion::recv(ctx, 99, 0, true, false, 0)]);
            }
        })
    };
    let app_at = app.as_mut_ptr() as usize;
    let mut bad = None;
    for i in 1..=100_000u32 {
        if start.elapsed() > std::time::Duration::from_secs(3) {
            break;
        }
        let v = (i % 251) as u8 + 1;
        // SAFETY: the application's buffer (the syncer writes it only through the shim).
        unsafe { std::ptr::write_bytes(app_at as *mut u8, v, n) };
        live::send_sges(ctx, 12, 0, false, false, &[sge(app_at as *const u8, n as u32, 0xf81)]);
        // SAFETY: both live, n bytes.
        let (a, s) = unsafe {
            (std::slice::from_raw_parts(app_at as *const u8, n), std::slice::from_raw_parts(sh as *const u8, n))
        };
        let want = vec![v; n];
        if a == &want[..] && s == &want[..] {
            continue;
        }
        if let Some(j) = (0..n).find(|&j| a[j] != v || s[j] != v) {
            bad = Some((i, j, a[j], s[j], v));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    syncer.join().unwrap();
    assert_eq!(bad, None, "(iteration, byte, application, shadow, expected)");
    dereg(&slots, 0xf900, true);
}

/// N3, the other half: one thread refills its buffer while another thread's post_recv folds the
/// region (its receive slot shares the region with the send slot being refilled). The fold must
/// leave shadow and baseline equal — a torn fold that gave them different bytes is a "peer's
/// write" to every later sync, which copies the older bytes back over the application's.
#[test]
fn a_fold_racing_the_applications_writes_never_fakes_a_peer_write() {
    let _one = serial();
    let n = 4096;
    let mut app = vec![0u8; n];
    let at = app.as_mut_ptr() as usize;
    let s = peer_writable(&mut app);
    let r = &s.region;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = 0u8;
            while !stop.load(Ordering::Relaxed) {
                v = v.wrapping_add(1).max(1);
                for i in (0..n).step_by(8) {
                    // SAFETY: the application's buffer, alive until the writer is joined.
                    unsafe { std::ptr::write_volatile((at + i) as *mut u64, u64::from_ne_bytes([v; 8])) };
                }
            }
            v
        })
    };
    let start = std::time::Instant::now();
    let mut torn = None;
    for i in 0..1_000_000 {
        if start.elapsed() > std::time::Duration::from_secs(4) {
            break;
        }
        r.fold_app_writes(false);
        // SAFETY: the region's live shadow and baseline, n bytes each; only the fold writes
        // them, on this thread.
        let (sh, ba) = unsafe {
            (
                std::slice::from_raw_parts(r.shadow as *const u8, n),
                std::slice::from_raw_parts(r.baseline as *const u8, n),
            )
        };
        if let Some(j) = (0..n).find(|&j| sh[j] != ba[j]) {
            torn = Some((i, j, sh[j], ba[j]));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().unwrap();
    assert_eq!(torn, None, "(fold, byte, shadow, baseline) after a fold with no peer");
    r.sync_peer_writes();
    assert!(app.iter().all(|&b| b == last), "a sync copied older bytes over the application's");
    s.abandon();
}

/// N16: an idle pass over a large region compares a bounded amount and goes on from there the
/// next time; a write at the bottom is found by a later pass, never lost.
#[test]
fn idle_passes_over_a_large_region_are_bounded() {
    use crate::region::IDLE_BYTES;
    let _one = serial();
    let ctx = 0x10_0000;
    let slots = with_context(ctx);
    let n = 4 * IDLE_BYTES;
    let mut app = vec![0u8; n];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1001, 0x10100);
    // SAFETY: the live shadow: a peer's write at the bottom, announced by nothing.
    unsafe { std::ptr::write_bytes(sh as *mut u8, 0x5a, 16) };
    let r = crate::state::STATE.regions.lock().iter().find(|r| r.lkey == 0x1001).cloned().unwrap();
    let (found, bottom) = r.sync_unannounced(&r.extent());
    assert!(!found && !bottom && app[0] == 0, "the first pass stops after about IDLE_BYTES");
    let mut passes = 1;
    // SAFETY: app's first byte, written by the sync through the region's pointer (volatile:
    // the compiler cannot see that write).
    while unsafe { std::ptr::read_volatile(app.as_ptr()) } != 0x5a {
        let (_, bottom) = r.sync_unannounced(&r.extent());
        passes += 1;
        assert!(passes <= 4 || !bottom, "a sweep takes about n / IDLE_BYTES passes");
        assert!(passes < 10, "never found");
    }
    assert!(app[..16].iter().all(|&b| b == 0x5a));
    drop(r);
    dereg(&slots, 0x10100, true);
}

/// Issue 28, item 3: a peer's write that nothing announced and the application never got (a
/// passive one-sided target that neither polls nor posts) is a violation at deregistration.
#[test]
fn an_undelivered_peer_write_is_a_violation_at_deregistration() {
    let _one = serial();
    let ctx = 0x11_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 4096];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1101, 0x11100);
    let before = mrshim_core::violation::count();
    dereg(&slots, 0x11100, true);
    assert_eq!(mrshim_core::violation::count(), before, "nothing written: no violation");
    let sh2 = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1102, 0x11200);
    let _ = sh;
    // SAFETY: the live shadow: a peer's RDMA WRITE, and no completion is ever polled.
    unsafe { std::ptr::write_bytes((sh2 + 100) as *mut u8, 0x3c, 10) };
    dereg(&slots, 0x11200, true);
    assert_eq!(mrshim_core::violation::count(), before + 1, "reported");
}

/// Issue 28, item 3: a peer's write that nothing announced yet, to bytes the application then
/// sends from: the SEND carries the application's bytes and the peer's are lost — reported as a
/// violation when the send copies over them, not silent (checker soak seed 5000246).
#[test]
fn a_send_over_an_undelivered_peer_write_is_a_violation() {
    let _one = serial();
    let ctx = 0x12_0000;
    let slots = with_context(ctx);
    let mut app = vec![0x11u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1201, 0x12100);
    let before = mrshim_core::violation::count();
    live::send_sges(ctx, 7, 1, false, false, &[sge(app[100..].as_ptr(), 100, 0x1201)]);
    assert_eq!(mrshim_core::violation::count(), before, "no peer write: no violation");
    // SAFETY: the live shadow: a peer's RDMA WRITE that no completion announced.
    unsafe { std::ptr::write_bytes((sh + 5000) as *mut u8, 0x3c, 10) };
    live::send_sges(ctx, 7, 2, false, false, &[sge(app[100..].as_ptr(), 100, 0x1201)]);
    assert_eq!(mrshim_core::violation::count(), before, "a send elsewhere leaves the peer's bytes alone");
    live::send_sges(ctx, 7, 3, false, false, &[sge(app[4990..].as_ptr(), 100, 0x1201)]);
    assert_eq!(mrshim_core::violation::count(), before + 1, "the send replaced them: reported");
    // SAFETY: the live shadow, 8192 bytes from `sh`: it holds what the SEND carries.
    let sent = unsafe { *((sh + 5004) as *const u8) };
    assert_eq!(sent, 0x11, "the application's bytes");
    // SAFETY: as above, 2000 bytes before the shadow's end.
    unsafe { std::ptr::write_bytes((sh + 6192) as *mut u8, 0x5a, 3) };
    live::send_sges(ctx, 7, 4, false, false, &[sge(app[1000..].as_ptr(), 7000, 0x1201)]);
    assert_eq!(mrshim_core::violation::count(), before + 2, "found 5 KiB into a longer send: reported");
    dereg(&slots, 0x12100, true);
}

/// A send's copy writes nothing where the application's bytes and the shadow are both as the
/// baseline holds them (region.rs, `send_piece`): over random sends of random ranges across
/// several 4 KiB pieces, with the application changing some of its bytes (some to the values
/// they had) and a peer writing some of the shadow's without a completion, every send leaves
/// the shadow holding the application's bytes in its range and the peer's outside it, the
/// baseline holding what the shadow was given, and is a violation exactly when it replaced
/// bytes a peer wrote.
#[test]
fn a_send_copies_only_what_differs_and_still_finds_every_peer_write() {
    let _one = serial();
    let ctx = 0x13_0000;
    let slots = with_context(ctx);
    const N: usize = 5 * 4096 + 300;
    let mut app = vec![0u8; N];
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for b in app.iter_mut() {
        *b = next() as u8;
    }
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1301, 0x13100);
    let region = live::containing(app.as_ptr() as u64, N as u64).expect("the live region");
    // SAFETY: the live shadow and baseline, N bytes each, while the region lives (to the end).
    let (shadow, baseline) = unsafe {
        (std::slice::from_raw_parts_mut(sh as *mut u8, N), std::slice::from_raw_parts(region.baseline as *const u8, N))
    };
    // what the shadow was given last: the baseline as it must be
    let mut given = app.clone();
    let range = |next: &mut dyn FnMut() -> u64, max: usize| {
        let a = next() as usize % N;
        (a, (a + 1 + next() as usize % max).min(N))
    };
    let mut reported = 0;
    for round in 0..400 {
        match next() % 4 {
            0 => {
                let (a, b) = range(&mut next, 3 * 4096);
                for x in &mut app[a..b] {
                    *x = next() as u8;
                }
            }
            1 => {
                let (a, b) = range(&mut next, 200);
                let v = next() as u8;
                app[a..b].iter_mut().for_each(|x| *x = if next() % 2 == 0 { v } else { *x });
            }
            _ => {}
        }
        if next() % 3 == 0 {
            // a peer's RDMA WRITE that no completion announces
            let (a, b) = range(&mut next, 300);
            for x in &mut shadow[a..b] {
                *x = next() as u8;
            }
        }
        let before = (shadow.to_vec(), mrshim_core::violation::count());
        let (a, b) = range(&mut next, 3 * 4096);
        let peer = (a..b).any(|i| before.0[i] != given[i]);
        live::send_sges(ctx, 7, round, false, false, &[sge(app[a..].as_ptr(), (b - a) as u32, 0x1301)]);
        assert_eq!(&shadow[a..b], &app[a..b], "round {round}: the shadow holds what the send carries");
        assert!(shadow[..a] == before.0[..a] && shadow[b..] == before.0[b..], "round {round}: the rest as it was");
        given[a..b].copy_from_slice(&app[a..b]);
        assert!(baseline == &given[..], "round {round}: the baseline holds what the shadow was given");
        assert_eq!(
            mrshim_core::violation::count(),
            before.1 + peer as u64,
            "round {round}: reported iff a peer's bytes"
        );
        reported += peer as u32;
    }
    assert!(reported > 10, "the peer's writes were met by sends ({reported})");
    drop(region);
    // (the peer's bytes no send replaced are a violation at the deregistration)
    dereg(&slots, 0x13100, true);
}

/// The wrappers find each context's and each `ibv_qp_ex`'s own provider ops in O(1) — also with
/// more of them than the index has slots (colliding keys fall back to the list, never to
/// another object's ops).
#[test]
fn every_context_and_qp_ex_finds_its_own_provider_ops() {
    let _one = serial();
    let slots = FakeSlots::default();
    let n = 200;
    let ctx = |i: usize| 0x7_0000_0000 + i * 0x1000;
    let qpx = |i: usize| 0x8_0000_0000 + i * 0x40;
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 64]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        // (provider ops far from OURS)
        slots.ctx.lock().unwrap().insert(ctx(i), cops(0x1000 + i, 0x2000 + i, 0x3000 + i));
        slots.qpx.lock().unwrap().insert(qpx(i), qops(0x4000 + i, 0x5000 + i, 0x6000 + i, 0x7000 + i));
        patch::note_qpx(&slots, qpx(i), ctx(i));
        live_region(&slots, b, LOCAL_WRITE, ctx(i), 0x5000 + i as u32, 0x9_0000 + i);
    }
    for i in 0..n {
        let o = patch::context_orig(ctx(i)).expect("patched");
        assert_eq!((o.provider().post_send(), o.provider().poll_cq()), (0x1000 + i, 0x3000 + i), "context {i}");
        let q = patch::qpx(qpx(i)).expect("followed");
        assert_eq!((q.provider().wr_start(), q.provider().wr_set_sge_list()), (0x4000 + i, 0x7000 + i), "qp_ex {i}");
    }
    assert!(patch::context_orig(ctx(n)).is_none() && patch::qpx(qpx(n)).is_none());
    for i in 0..n {
        assert_eq!(patch::destroying_qp(qpx(i), ctx(i), i as u32, || 0), 0);
        assert!(patch::qpx(qpx(i)).is_none(), "a destroyed QP's qp_ex is not found");
        dereg(&slots, 0x9_0000 + i, true);
    }
}

/// fork(2) copies only the forking thread: a child forked while other threads of the parent
/// hold the bounce layer's locks must not hang on them. After the one reset the atfork child
/// handler runs, the child takes every lock of the state again and uses the layer (a region's
/// lookup, a receive posted and completed). Fails — the child hangs until its alarm kills it —
/// when any lock is left out of the reset.
#[test]
fn a_child_forked_while_every_bounce_lock_is_held_starts_usable() {
    let _one = serial();
    let ctx = 0x3_0000;
    let slots = with_context(ctx);
    let mut a = vec![0u8; 4096];
    live_region(&slots, &mut a, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x301, 0x3_a000);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let guards = crate::state::STATE.lock_all();
        held_tx.send(()).unwrap();
        let _ = done_rx.recv();
        drop(guards);
    });
    held_rx.recv().unwrap();
    let app = a.as_ptr();
    // SAFETY: fork in a test; the child only takes the shim's own locks and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: the child's one thread; alarm kills a child that hangs.
        unsafe {
            libc::alarm(10);
            crate::after_fork_child();
        }
        let s = &crate::state::STATE;
        // (a table held at the fork may be half-updated: the child starts without it)
        let ok = !live::covers(app as u64, 64)
            && s.fixes.lock().len() < usize::MAX
            && s.pool.lock().len() < usize::MAX
            && s.tracker.lock().is_none()
            && s.regions.lock().iter().all(|r| r.maps.sync.try_lock().is_some());
        drop(s.patching.lock());
        drop(s.idle.lock());
        drop(s.watch.lock());
        let fresh = !s.watching.load(Ordering::Acquire) && !s.watch_wanted.load(Ordering::Acquire);
        recv(ctx, 7, 1, &[sge(app, 64, 0x301)]);
        live::completed([Completion::recv(ctx, 7, 1, true, false, 64)]);
        // SAFETY: ends the child without the test harness's exit handlers.
        unsafe { libc::_exit(if ok && fresh { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    done_tx.send(()).unwrap();
    holder.join().unwrap();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
    dereg(&slots, 0x3_a000, true);
}

/// The watcher's looks (watch.rs) at regions of `app` only (other tests' regions are not ours).
fn look(w: &mut crate::watch::Watch, at: std::time::Instant, app: &[u8]) -> Vec<(&'static str, usize)> {
    let (lo, hi) = (app.as_ptr() as u64, app.as_ptr() as u64 + app.len() as u64);
    crate::watch::check(w, at, std::time::Duration::from_millis(100), std::time::Duration::from_millis(4))
        .into_iter()
        .filter(|f| f.app >= lo && f.app < hi)
        .map(|f| (f.kind.name(), f.first))
        .collect()
}

/// Issue 28, item 3, while the process runs: a peer's write into a region peers write, with no
/// post or poll after it, is reported one interval after the watcher first saw it — not
/// before, and once; bytes the application wrote into a region peers read, likewise.
#[test]
fn a_passive_process_is_reported_one_interval_after_the_watcher_sees_its_stale_bytes() {
    use crate::watch::Watch;
    use mrshim_verbs::access::REMOTE_READ;
    use std::time::{Duration, Instant};
    let _one = serial();
    let ctx = 0x13_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 3 * crate::watch::SLICE + 100];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ, ctx, 0x1301, 0x13100);
    let mut w = Watch::new();
    let t = Instant::now();
    let ms = |n| t + Duration::from_millis(n);
    assert!(look(&mut w, ms(0), &app).is_empty(), "the first look only notes the counters");
    assert!(look(&mut w, ms(10), &app).is_empty(), "nothing stale");
    // SAFETY: the live shadow: a peer's RDMA WRITE near the end, announced by nothing.
    unsafe { std::ptr::write_bytes((sh + 2 * crate::watch::SLICE + 7) as *mut u8, 0x3c, 5) };
    assert!(look(&mut w, ms(20), &app).is_empty(), "seen, not reported yet");
    assert!(look(&mut w, ms(110), &app).is_empty(), "not before the interval");
    assert_eq!(look(&mut w, ms(130), &app), [("unannounced_write", 2 * crate::watch::SLICE + 7)]);
    assert!(look(&mut w, ms(500), &app).is_empty(), "once per passive stretch");
    assert_eq!(app[2 * crate::watch::SLICE + 7], 0, "the watcher only reads");
    // The application refills a byte peers may READ and posts nothing.
    app[100] = 0x77;
    assert!(look(&mut w, ms(510), &app).is_empty());
    assert_eq!(look(&mut w, ms(620), &app), [("stale_for_peers", 100)]);
    // SAFETY: as above: the peer's write is still in the shadow, the application's not.
    assert_eq!(unsafe { *((sh + 100) as *const u8) }, 0, "the watcher only reads");
    dereg(&slots, 0x13100, true);
}

/// Bytes the application wrote and no post folded, in a process that has posted since it
/// registered the region and whose peers announce their writes (an all-reduce's reduced chunk,
/// which no peer READs): not looked at, however long the process pauses. Once a peer's write
/// is found unannounced, they are.
#[test]
fn an_announced_jobs_unsent_bytes_are_not_taken_for_a_passive_targets() {
    use crate::watch::Watch;
    use mrshim_verbs::access::REMOTE_READ;
    use std::time::{Duration, Instant};
    let _one = serial();
    crate::state::STATE.unannounced_seen.store(false, Ordering::Release);
    let ctx = 0x16_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ, ctx, 0x1601, 0x16100);
    live::send_sges(ctx, 7, 1, false, false, &[sge(app[4096..].as_ptr(), 100, 0x1601)]);
    bump_epoch();
    app[10] = 1;
    let mut w = Watch::new();
    let t = Instant::now();
    for i in 0..20u64 {
        assert!(look(&mut w, t + Duration::from_millis(50 * i), &app).is_empty(), "look {i}");
    }
    // SAFETY: the live shadow: a peer's write nothing announces.
    unsafe { *((sh + 5000) as *mut u8) = 9 };
    let mut got = vec![];
    for i in 20..40u64 {
        got.extend(look(&mut w, t + Duration::from_millis(50 * i), &app));
    }
    assert_eq!(got, [("unannounced_write", 5000), ("stale_for_peers", 10)]);
    dereg(&slots, 0x16100, true);
}

/// A job that posts or polls is never reported, whatever sits in its shadows meanwhile: a look
/// that finds the counters moved starts over (and a completion then delivers the write).
#[test]
fn a_process_that_posts_or_polls_is_never_reported() {
    use crate::watch::Watch;
    use std::time::{Duration, Instant};
    let _one = serial();
    let ctx = 0x14_0000;
    let slots = with_context(ctx);
    let mut app = vec![0u8; 8192];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1401, 0x14100);
    let mut w = Watch::new();
    let t = Instant::now();
    look(&mut w, t, &app);
    // SAFETY: the live shadow: a peer's RDMA WRITE, to be announced by a completion.
    unsafe { std::ptr::write_bytes((sh + 10) as *mut u8, 0x3c, 5) };
    for i in 1..50u64 {
        // the process polls: empty polls now and then, a completion once
        if i % 2 == 0 {
            for _ in 0..crate::idle::CHECK_EVERY / 2 {
                let _ = crate::idle::empty_poll();
            }
        } else {
            bump_epoch();
        }
        assert!(look(&mut w, t + Duration::from_millis(50 * i), &app).is_empty(), "look {i}");
    }
    live::completed([Completion::recv(ctx, 1, 1, true, true, 0)]);
    assert_eq!(app[10], 0x3c, "announced: delivered");
    for i in 50..60u64 {
        assert!(look(&mut w, t + Duration::from_millis(50 * i), &app).is_empty(), "nothing stale any more");
    }
    dereg(&slots, 0x14100, true);
}

/// A look compares at most about its budget's worth (watch.rs, BUDGET) and goes on at the next:
/// a 64 MiB region's write at its end is found over several looks, none of which holds the
/// region's lock (or the watcher) long.
#[test]
fn looks_at_a_large_region_are_bounded() {
    use crate::watch::Watch;
    use std::time::{Duration, Instant};
    let _one = serial();
    let ctx = 0x15_0000;
    let slots = with_context(ctx);
    let n = 64 << 20;
    let mut app = vec![0u8; n];
    let sh = live_region(&slots, &mut app, LOCAL_WRITE | REMOTE_WRITE, ctx, 0x1501, 0x15100);
    // SAFETY: the live shadow: a peer's write at its very end.
    unsafe { *((sh + n - 1) as *mut u8) = 1 };
    let mut w = Watch::new();
    let t = Instant::now();
    look(&mut w, t, &app);
    let (mut looks, mut longest) = (0, Duration::ZERO);
    loop {
        looks += 1;
        assert!(looks < 10_000, "never found");
        let start = Instant::now();
        // (looks a millisecond apart: the interval, 100 ms, passes after about 100 of them)
        let got = look(&mut w, t + Duration::from_millis(looks), &app);
        longest = longest.max(start.elapsed());
        if !got.is_empty() {
            assert_eq!(got, [("unannounced_write", n - 1)]);
            break;
        }
    }
    assert!(looks > 100, "the interval counts from when the write was seen: {looks}");
    // (debug build, loaded machine: a 4 ms budget plus one 256 KiB slice, with room)
    assert!(longest < Duration::from_millis(100), "a look took {longest:?}");
    dereg(&slots, 0x15100, true);
}
