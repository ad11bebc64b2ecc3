//! rdma_create_qp / rdma_create_qp_ex / rdma_destroy_qp: the QP (and, when the caller gives
//! none, its CQs with completion channels, as librdmacm makes them) on the id's device, brought
//! to INIT (connected) or RTS (UD) at once. Safety contracts: rdma-core's.
#![allow(clippy::missing_safety_doc)]

use crate::abi as a;
use crate::api::token;
use crate::cm::lock;
use crate::{devices, err, ffi, status};
use mrshim_verbs as v;
use std::os::raw::c_int;
use std::ptr::null_mut;

/// A CQ with its own completion channel for `id` (rdma_get_send_comp/recv_comp wait on it).
unsafe fn cq_with_channel(
    ctx: *mut v::ibv_context,
    cqe: u32,
    id: *mut a::rdma_cm_id,
) -> Option<(*mut v::ibv_comp_channel, *mut v::ibv_cq)> {
    // SAFETY: an open context; the CQ's context pointer is the id, as librdmacm sets it.
    unsafe {
        let ch = v::ibv_create_comp_channel(ctx);
        if ch.is_null() {
            return None;
        }
        let cq = v::ibv_create_cq(ctx, cqe.max(1) as c_int, id.cast(), ch, 0);
        if cq.is_null() {
            v::ibv_destroy_comp_channel(ch);
            return None;
        }
        Some((ch, cq))
    }
}

unsafe fn destroy_own_cqs(id: &mut a::rdma_cm_id) {
    // SAFETY: the CQs and channels rdma_create_qp made for this id.
    unsafe {
        for (cq, ch) in [(&mut id.send_cq, &mut id.send_cq_channel), (&mut id.recv_cq, &mut id.recv_cq_channel)] {
            if !cq.is_null() {
                v::ibv_destroy_cq(*cq);
                *cq = null_mut();
            }
            if !ch.is_null() {
                v::ibv_destroy_comp_channel(*ch);
                *ch = null_mut();
            }
        }
    }
}

fn create(idp: *mut a::rdma_cm_id, mut pd: *mut v::ibv_pd, attr: &mut v::ibv_qp_init_attr) -> Result<(), i32> {
    // SAFETY: the caller's id.
    let t = unsafe { token(idp) };
    let mut cm = lock();
    let s = cm.id_mut(t)?;
    // SAFETY: the id's public struct.
    let id = unsafe { &mut (*s.ptr).id };
    let d = devices::get()?;
    let dev = s.dev.map(|i| &d.devs[i]).ok_or(libc::EINVAL)?;
    if pd.is_null() {
        pd = dev.default_pd();
        if pd.is_null() {
            return Err(libc::ENOMEM);
        }
    }
    // SAFETY: the caller's PD.
    if unsafe { (*pd).context } != id.verbs || !id.qp.is_null() {
        return Err(libc::EINVAL);
    }
    let mut made = false;
    if attr.send_cq.is_null() || attr.recv_cq.is_null() {
        // SAFETY: the id's context.
        let r = unsafe { cq_with_channel(id.verbs, attr.cap.max_recv_wr, idp) };
        // SAFETY: as above.
        let s2 = unsafe { cq_with_channel(id.verbs, attr.cap.max_send_wr, idp) };
        let (Some((rch, rcq)), Some((sch, scq))) = (r, s2) else {
            // SAFETY: whichever of them was made.
            unsafe {
                for (ch, cq) in r.into_iter().chain(s2) {
                    v::ibv_destroy_cq(cq);
                    v::ibv_destroy_comp_channel(ch);
                }
            }
            return Err(libc::ENOMEM);
        };
        (id.recv_cq_channel, id.recv_cq, id.send_cq_channel, id.send_cq) = (rch, rcq, sch, scq);
        if attr.recv_cq.is_null() {
            attr.recv_cq = rcq;
        }
        if attr.send_cq.is_null() {
            attr.send_cq = scq;
        }
        made = true;
    }
    // SAFETY: the PD and the caller's attributes.
    let qp = unsafe { v::ibv_create_qp(pd, attr) };
    let res = if qp.is_null() {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM))
    } else {
        crate::qp::init(s, qp).inspect_err(|_| {
            // SAFETY: the QP just made.
            unsafe { v::ibv_destroy_qp(qp) };
        })
    };
    if let Err(e) = res {
        if made {
            // SAFETY: the CQs made above.
            unsafe { destroy_own_cqs(id) };
        }
        return Err(e);
    }
    s.own_cqs = made;
    id.qp = qp;
    id.pd = pd;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut a::rdma_cm_id,
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_qp_init_attr,
) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller's attributes.
        let Some(attr) = (unsafe { attr.as_mut() }) else { return err(libc::EINVAL, -1) };
        status(create(id, pd, attr))
    })
}

/// The extended form, for what it shares with the basic one (PD, CQs, SRQ, caps, type): other
/// attributes (XRC, create flags, send ops, TSO) are EOPNOTSUPP rather than ignored.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut a::rdma_cm_id, attr: *mut v::ibv_qp_init_attr_ex) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller's attributes.
        let Some(x) = (unsafe { attr.as_mut() }) else { return err(libc::EINVAL, -1) };
        let pd_bit = v::IBV_QP_INIT_ATTR_PD;
        if x.comp_mask & !pd_bit != 0 {
            return err(libc::EOPNOTSUPP, -1);
        }
        // SAFETY: ibv_qp_init_attr is plain old data; all-zero is valid.
        let mut b: v::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        b.qp_context = x.qp_context;
        b.send_cq = x.send_cq;
        b.recv_cq = x.recv_cq;
        b.srq = x.srq;
        b.cap = x.cap;
        b.qp_type = x.qp_type;
        b.sq_sig_all = x.sq_sig_all;
        let pd = if x.comp_mask & pd_bit != 0 { x.pd } else { null_mut() };
        match create(id, pd, &mut b) {
            Ok(()) => {
                x.cap = b.cap;
                x.send_cq = b.send_cq;
                x.recv_cq = b.recv_cq;
                0
            }
            Err(e) => err(e, -1),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(idp: *mut a::rdma_cm_id) {
    ffi((), || {
        // SAFETY: the caller's id.
        let t = unsafe { token(idp) };
        let mut cm = lock();
        let Some(s) = cm.ids.get_mut(&t) else { return };
        // SAFETY: the id's public struct and the QP rdma_create_qp made.
        let id = unsafe { &mut (*s.ptr).id };
        if !id.qp.is_null() {
            // SAFETY: as above.
            unsafe { v::ibv_destroy_qp(id.qp) };
            id.qp = null_mut();
        }
        if s.own_cqs {
            // SAFETY: the CQs rdma_create_qp made.
            unsafe { destroy_own_cqs(id) };
            s.own_cqs = false;
        }
    })
}
