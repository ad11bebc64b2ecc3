//! The QP of an id: rdma_create_qp/rdma_destroy_qp, and the attributes of each transition as
//! the kernel's rdma_cm gives them (rdma_init_qp_attr): a connected QP goes to INIT when it is
//! created and through RTR and RTS when the connection is made, with the peer's QPN and PSN,
//! the path's MTU and address vector, and the negotiated RDMA read resources; a UD QP goes
//! straight to RTS with rdma_cm's Q_Key.

use crate::abi::RDMA_UDP_QKEY;
use crate::cm::IdSt;
use crate::devices;
use crate::proto::{ah_attr, is_ud};
use mrshim_verbs::{self as v, ibv_qp_attr_mask as m, ibv_qp_state as qps, rc};

/// Timeout (4.096 us * 2^14 = 67 ms) and RNR timer (code 12 = 0.64 ms) rdma_cm programs.
const LOCAL_ACK_TIMEOUT: u8 = 14;
const MIN_RNR_TIMER: u8 = 12;

/// The attributes for moving id `s`'s QP to `state`: EINVAL when the id is not far enough
/// (RTR/RTS of a connected QP need the peer's REQ or REP).
pub fn attr(s: &IdSt, state: u32) -> Result<(v::ibv_qp_attr, i32), i32> {
    let ud = is_ud(s.ps);
    match state {
        qps::IBV_QPS_INIT if ud => {
            let mut a = rc::attr(state);
            a.pkey_index = 0;
            a.port_num = 1;
            a.qkey = RDMA_UDP_QKEY;
            Ok((a, rc::mask(&[m::IBV_QP_STATE, m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_QKEY])))
        }
        qps::IBV_QPS_INIT => Ok(rc::init(1, 0)),
        qps::IBV_QPS_RTR if ud => Ok((rc::attr(state), rc::mask(&[m::IBV_QP_STATE]))),
        qps::IBV_QPS_RTS if ud => {
            let mut a = rc::attr(state);
            a.sq_psn = s.psn;
            Ok((a, rc::mask(&[m::IBV_QP_STATE, m::IBV_QP_SQ_PSN])))
        }
        qps::IBV_QPS_RTR => {
            let r = s.remote.as_ref().ok_or(libc::EINVAL)?;
            let local_mtu = devices::get().ok().and_then(|d| s.dev.map(|i| d.devs[i].mtu)).unwrap_or(r.mtu as u32);
            let (mut a, mask) = rc::Rtr {
                ah_attr: ah_attr(s, r.gid, r.lid),
                path_mtu: local_mtu.min(r.mtu as u32).max(1),
                dest_qp_num: r.qpn,
                rq_psn: r.psn,
                max_dest_rd_atomic: s.responder_resources,
                min_rnr_timer: MIN_RNR_TIMER,
            }
            .attr();
            // RDMA READ is allowed when the peer may have reads outstanding (as the IB CM does;
            // the simulated device offers no atomics).
            a.qp_access_flags = v::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
                | if s.responder_resources > 0 { v::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 } else { 0 };
            Ok((a, mask | rc::mask(&[m::IBV_QP_ACCESS_FLAGS])))
        }
        qps::IBV_QPS_RTS => {
            if s.remote.is_none() {
                return Err(libc::EINVAL);
            }
            let rts = rc::Rts {
                sq_psn: s.psn,
                timeout: s.ack_timeout.unwrap_or(LOCAL_ACK_TIMEOUT),
                retry_cnt: s.retry_count,
                rnr_retry: s.rnr_retry_count,
                max_rd_atomic: s.initiator_depth,
            };
            Ok(rts.attr())
        }
        _ => Err(libc::EINVAL),
    }
}

pub(crate) fn modify(s: &IdSt, qp: *mut v::ibv_qp, state: u32) -> Result<(), i32> {
    let (mut a, mask) = attr(s, state)?;
    // SAFETY: the id's QP and our attribute struct.
    match unsafe { v::ibv_modify_qp(qp, &mut a, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// RTR then RTS with the peer's parameters (both sides of a connected QP).
pub(crate) fn connect(s: &IdSt, qp: *mut v::ibv_qp) -> Result<(), i32> {
    modify(s, qp, qps::IBV_QPS_RTR)?;
    modify(s, qp, qps::IBV_QPS_RTS)
}

/// Brings a new QP to where rdma_cm keeps it before the connection: INIT (connected), RTS (UD).
pub(crate) fn init(s: &IdSt, qp: *mut v::ibv_qp) -> Result<(), i32> {
    modify(s, qp, qps::IBV_QPS_INIT)?;
    if is_ud(s.ps) {
        modify(s, qp, qps::IBV_QPS_RTR)?;
        modify(s, qp, qps::IBV_QPS_RTS)?;
    }
    Ok(())
}

/// Keeps a disconnect in its place among the packets between the two ports, as one wire does on
/// a NIC (the simulator's `mrshim_sim_fence`): called before the DREQ or DREP goes out, so the
/// peer's NIC has handled the ACKs of what this side received before the DREQ can be seen there,
/// and when one arrives (or the peer's process is gone) before the DISCONNECTED event, so this
/// side's NIC has handled what the peer sent before it. A send the peer acknowledged completes
/// as a success before DISCONNECTED, never dropped by a teardown that overtook its ACK.
///
/// The fence is on the id's device context (`id.verbs`, which this library opened and never
/// closes; `rdma_create_qp` makes the QP there), never through `id.qp`: an application may free
/// the QP with `ibv_destroy_qp` while its CM thread still reads events (rping v44 does), and
/// `id.qp` then points at freed memory.
pub(crate) fn fence(s: &IdSt) {
    // SAFETY: the id's public struct, live while the id is in `cm.ids`.
    let ctx = unsafe { (*s.ptr).id.verbs };
    let Some(f) = devices::get().ok().and_then(|d| d.fence) else { return };
    if !ctx.is_null() {
        // SAFETY: a context of the simulator's that this library opened, open for good.
        unsafe { f(ctx) };
    }
}

pub(crate) fn to_error(qp: *mut v::ibv_qp) {
    let mut a = rc::attr(qps::IBV_QPS_ERR);
    // SAFETY: the id's QP and our attribute struct.
    unsafe { v::ibv_modify_qp(qp, &mut a, m::IBV_QP_STATE.0 as i32) };
}
