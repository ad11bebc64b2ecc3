//! Posting work requests: ibv_post_send / ibv_post_recv behind rdma-core's static-inline calls.
#![allow(clippy::missing_safety_doc)]

use crate::ah::ud_dest;
use crate::engine::{QpType, RecvWqe, SendOp, Sge};
use crate::ffi;
use crate::objects::{ctx, outer, Qp};
use crate::wr::{enqueue, WrDesc};
use mrshim_verbs::{self as v, ibv_qp_state as qps};
use std::os::raw::c_int;
use std::ptr::null_mut;

/// The scatter/gather list of a WR.
///
/// # Safety
/// `list` holds `n` SGEs (or `n` <= 0).
pub unsafe fn sges(list: *mut v::ibv_sge, n: c_int) -> Vec<Sge> {
    if n <= 0 || list.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's WR holds n SGEs.
    unsafe { std::slice::from_raw_parts(list, n as usize) }
        .iter()
        .map(|s| Sge { addr: s.addr, len: s.length, lkey: s.lkey })
        .collect()
}

pub unsafe extern "C" fn op_post_send(
    qp: *mut v::ibv_qp,
    mut wr: *mut v::ibv_send_wr,
    bad: *mut *mut v::ibv_send_wr,
) -> c_int {
    ffi(libc::EINVAL, || {
        use v::ibv_wr_opcode::*;
        // SAFETY: qp is ours.
        let q = unsafe { outer::<Qp, _>(qp) };
        let mut st = q.inner.st.lock().unwrap();
        let mut rc = 0;
        while !wr.is_null() {
            // SAFETY: walking the caller's WR list.
            let w = unsafe { &*wr };
            let (op, imm) = match w.opcode {
                IBV_WR_SEND => (SendOp::Send, None),
                // SAFETY: imm_data is the active union member for *_WITH_IMM.
                IBV_WR_SEND_WITH_IMM => (SendOp::Send, Some(unsafe { w.__bindgen_anon_1.imm_data })),
                IBV_WR_RDMA_WRITE => (SendOp::Write, None),
                // SAFETY: as above.
                IBV_WR_RDMA_WRITE_WITH_IMM => (SendOp::WriteImm, Some(unsafe { w.__bindgen_anon_1.imm_data })),
                IBV_WR_RDMA_READ => (SendOp::Read, None),
                _ => {
                    rc = libc::EINVAL;
                    break;
                }
            };
            if w.num_sge < 0 {
                rc = libc::EINVAL;
                break;
            }
            // SAFETY: rdma is the active union member for RDMA opcodes (ignored otherwise).
            let rdma = unsafe { w.wr.rdma };
            let ud = if q.inner.ty == QpType::Ud {
                // SAFETY: ud is the active union member on UD QPs; its AH is the caller's.
                unsafe { ud_dest(w.wr.ud.ah, w.wr.ud.remote_qpn, w.wr.ud.remote_qkey) }
            } else {
                None
            };
            let d = WrDesc {
                wr_id: w.wr_id,
                op,
                imm,
                flags: w.send_flags,
                // SAFETY: the WR holds num_sge SGEs.
                sges: unsafe { sges(w.sg_list, w.num_sge) },
                inline_data: None,
                raddr: rdma.remote_addr,
                rkey: rdma.rkey,
                ud,
            };
            if let Err(e) = enqueue(&q.inner, &q.cap, &mut st, d) {
                rc = e;
                break;
            }
            wr = w.next;
        }
        drop(st);
        if rc != 0 && !bad.is_null() {
            // SAFETY: caller's out pointer.
            unsafe { *bad = wr };
        }
        // SAFETY: the QP's context is ours.
        unsafe { ctx(q.qpx.qp_base.context) }.engine.kick();
        rc
    })
}

pub unsafe extern "C" fn op_post_recv(
    qp: *mut v::ibv_qp,
    mut wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: qp is ours.
        let q = unsafe { outer::<Qp, _>(qp) };
        let inner = &q.inner;
        let mut st = inner.st.lock().unwrap();
        let mut rc = 0;
        while !wr.is_null() {
            // SAFETY: walking the caller's WR list.
            let w = unsafe { &*wr };
            let own_rq = inner.srq.is_none();
            if !own_rq || st.state == qps::IBV_QPS_RESET || w.num_sge < 0 || w.num_sge as u32 > q.cap.max_recv_sge {
                rc = libc::EINVAL;
                break;
            }
            if st.rq.len() >= inner.max_recv_wr as usize {
                rc = libc::ENOMEM;
                break;
            }
            if st.state == qps::IBV_QPS_ERR {
                inner.recv_cq.push(inner.wc(
                    w.wr_id,
                    v::ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
                    v::ibv_wc_opcode::IBV_WC_RECV,
                    0,
                ));
            } else {
                // SAFETY: the WR holds num_sge SGEs.
                st.rq.push_back(RecvWqe { wr_id: w.wr_id, sges: unsafe { sges(w.sg_list, w.num_sge) } });
            }
            wr = w.next;
        }
        // SAFETY: the QP's context is ours.
        let cx = unsafe { ctx(q.qpx.qp_base.context) };
        cx.engine.match_unmatched(inner, &mut st);
        drop(st);
        if rc != 0 && !bad.is_null() {
            // SAFETY: caller's out pointer.
            unsafe { *bad = wr };
        }
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut v::ibv_qp) -> *mut v::ibv_qp_ex {
    // SAFETY: qp is ours. Only QPs created through ibv_create_qp_ex with send_ops_flags have one.
    let q = unsafe { &mut *qp.cast::<Qp>() };
    if q.ex {
        &mut q.qpx
    } else {
        null_mut()
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(_qp: *mut v::ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}
