//! Extended CQs (`ibv_create_cq_ex`, then `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` and
//! the `ibv_wc_read_*` accessors): static-inline calls through `verbs_context.create_cq_ex` and
//! the function pointers of `struct ibv_cq_ex`. The CQ is an ordinary simulated CQ (api.rs);
//! polling takes one completion at a time into `Cq::current`, which the accessors read.

use crate::objects::{outer, Cq};
use mrshim_verbs as v;
use std::os::raw::c_int;
use std::ptr::null_mut;

/// The `wc_flags` a simulated extended CQ can report (what `struct ibv_wc` carries).
const SUPPORTED: u64 = (v::IBV_WC_EX_WITH_BYTE_LEN
    | v::IBV_WC_EX_WITH_IMM
    | v::IBV_WC_EX_WITH_QP_NUM
    | v::IBV_WC_EX_WITH_SRC_QP
    | v::IBV_WC_EX_WITH_SLID
    | v::IBV_WC_EX_WITH_SL
    | v::IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

/// verbs_context.create_cq_ex: EOPNOTSUPP for `wc_flags` or attributes the simulated NIC has not
/// (timestamps, flow tags, a parent domain), as providers answer.
///
/// # Safety
/// `c` is a context of this library; `attr` null or the application's attributes.
pub unsafe extern "C" fn op_create_cq_ex(
    c: *mut v::ibv_context,
    attr: *mut v::ibv_cq_init_attr_ex,
) -> *mut v::ibv_cq_ex {
    // SAFETY: rdma-core passes the application's attributes.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return crate::errno_ret(libc::EINVAL, null_mut());
    };
    if a.wc_flags & !SUPPORTED != 0 || a.comp_mask & !v::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        return crate::errno_ret(libc::EOPNOTSUPP, null_mut());
    }
    let cqe = c_int::try_from(a.cqe).unwrap_or(c_int::MAX);
    let vector = c_int::try_from(a.comp_vector).unwrap_or(c_int::MAX);
    // SAFETY: the application's context and attributes, as ibv_create_cq takes them.
    let cq = unsafe { crate::api::ibv_create_cq(c, cqe, a.cq_context, a.channel, vector) };
    if cq.is_null() {
        return null_mut();
    }
    let x = cq.cast::<v::ibv_cq_ex>();
    // SAFETY: every simulated CQ is a Cq, whose head is an ibv_cq_ex; not yet shared.
    let q = unsafe { &mut *x };
    q.start_poll = Some(start_poll);
    q.next_poll = Some(next_poll);
    q.end_poll = Some(end_poll);
    q.read_opcode = Some(read_opcode);
    q.read_vendor_err = Some(read_vendor_err);
    q.read_wc_flags = Some(read_wc_flags);
    // The readers of the optional fields, each where its flag was asked for (as providers do).
    type Set = fn(&mut v::ibv_cq_ex);
    let optional: [(u32, Set); 7] = [
        (v::IBV_WC_EX_WITH_BYTE_LEN, |q| q.read_byte_len = Some(read_byte_len)),
        (v::IBV_WC_EX_WITH_IMM, |q| q.read_imm_data = Some(read_imm_data)),
        (v::IBV_WC_EX_WITH_QP_NUM, |q| q.read_qp_num = Some(read_qp_num)),
        (v::IBV_WC_EX_WITH_SRC_QP, |q| q.read_src_qp = Some(read_src_qp)),
        (v::IBV_WC_EX_WITH_SLID, |q| q.read_slid = Some(read_slid)),
        (v::IBV_WC_EX_WITH_SL, |q| q.read_sl = Some(read_sl)),
        (v::IBV_WC_EX_WITH_DLID_PATH_BITS, |q| q.read_dlid_path_bits = Some(read_dlid_path_bits)),
    ];
    for (flag, set) in optional {
        if a.wc_flags & flag as u64 != 0 {
            set(q);
        }
    }
    x
}

/// The simulated CQ behind an extended CQ.
///
/// # Safety
/// `cq` is a live CQ of this library.
unsafe fn cq<'a>(cq: *mut v::ibv_cq_ex) -> &'a Cq {
    // SAFETY: the caller's contract; Cq is repr(C) with the ibv_cq_ex first.
    unsafe { outer::<Cq, _>(cq) }
}

/// The completion polled last.
///
/// # Safety
/// As [`cq`]; the one thread polling it.
unsafe fn current<'a>(x: *mut v::ibv_cq_ex) -> &'a v::ibv_wc {
    // SAFETY: the caller's contract.
    unsafe { &*cq(x).current.get() }
}

/// Takes the next completion: 0, or ENOENT when there is none.
///
/// # Safety
/// As [`current`].
unsafe fn take(x: *mut v::ibv_cq_ex) -> c_int {
    // SAFETY: the caller's live CQ; the one poller writes `current`.
    let (c, wc) = unsafe { (cq(x), &mut *cq(x).current.get()) };
    if c.inner.poll(std::slice::from_mut(wc)) == 0 {
        return libc::ENOENT;
    }
    // SAFETY: as above; the fields rdma-core's inline readers take from the CQ itself.
    unsafe {
        (*x).status = wc.status;
        (*x).wr_id = wc.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(x: *mut v::ibv_cq_ex, _attr: *mut v::ibv_poll_cq_attr) -> c_int {
    // SAFETY: the application's extended CQ.
    unsafe { take(x) }
}
unsafe extern "C" fn next_poll(x: *mut v::ibv_cq_ex) -> c_int {
    // SAFETY: as above.
    unsafe { take(x) }
}
unsafe extern "C" fn end_poll(_x: *mut v::ibv_cq_ex) {}

macro_rules! readers {
    ($($name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        unsafe extern "C" fn $name(x: *mut v::ibv_cq_ex) -> $t {
            // SAFETY: the application's extended CQ, between start_poll and end_poll.
            let $w = unsafe { current(x) };
            $e
        }
    )*};
}
readers! {
    read_opcode -> v::ibv_wc_opcode::Type = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    // SAFETY: a plain u32 union (imm_data / invalidated_rkey).
    read_imm_data -> u32 = |w| unsafe { w.__bindgen_anon_1.imm_data };
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> std::os::raw::c_uint = |w| w.wc_flags;
    read_slid -> u32 = |w| w.slid as u32;
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}
