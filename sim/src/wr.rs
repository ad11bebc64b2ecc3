//! One send work request as both post APIs build it (ibv_post_send and the ibv_wr_* builders),
//! and the driver's checks before it goes on the send queue.

use crate::engine::{QpInner, QpState, QpType, SendOp, SendWqe, Sge, UdDest};
use mrshim_verbs::{self as v, ibv_qp_state as qps};
use std::os::raw::{c_int, c_uint};

/// The Q_Key bit that says "use the QP's own Q_Key" in a UD work request.
const QKEY_FROM_QP: u32 = 0x8000_0000;

/// One send work request, from either post API (ibv_post_send or the ibv_wr_* builders).
pub struct WrDesc {
    pub wr_id: u64,
    pub op: SendOp,
    pub imm: Option<u32>,
    pub flags: c_uint,
    pub sges: Vec<Sge>,
    /// Set by ibv_wr_set_inline_data: the bytes, copied at build time.
    pub inline_data: Option<Vec<u8>>,
    pub raddr: u64,
    pub rkey: u32,
    /// UD: the destination from the WR's address handle.
    pub ud: Option<UdDest>,
}

/// The driver's checks at post time, then the WR goes on the send queue (or is flushed at once
/// in the error state). An errno for ibv_post_send's return value otherwise.
pub fn enqueue(inner: &QpInner, cap: &v::ibv_qp_cap, st: &mut QpState, w: WrDesc) -> Result<(), c_int> {
    let len: u64 = match &w.inline_data {
        Some(d) => d.len() as u64,
        None => w.sges.iter().map(|s| s.len as u64).sum(),
    };
    let inline =
        (w.flags & v::ibv_send_flags::IBV_SEND_INLINE.0 != 0 || w.inline_data.is_some()) && w.op != SendOp::Read;
    let ud = inner.ty == QpType::Ud;
    if (w.op == SendOp::Read && inner.ty != QpType::Rc)
        || (ud && (w.op != SendOp::Send || w.ud.is_none()))
        || w.sges.len() > cap.max_send_sge as usize
        || len > inner.max_msg as u64
        || (inline && len > cap.max_inline_data as u64)
    {
        return Err(libc::EINVAL);
    }
    if (st.state < qps::IBV_QPS_RTS && st.state != qps::IBV_QPS_ERR) || st.state == qps::IBV_QPS_SQD {
        return Err(libc::EINVAL);
    }
    if st.sq.len() + st.inflight_len() >= inner.max_send_wr as usize {
        return Err(libc::ENOMEM);
    }
    if st.state == qps::IBV_QPS_ERR {
        inner.send_cq.push(inner.wc(w.wr_id, v::ibv_wc_status::IBV_WC_WR_FLUSH_ERR, 0, 0));
        return Ok(());
    }
    let inline_data = match w.inline_data {
        Some(d) => Some(d),
        None if inline => {
            let mut d = Vec::with_capacity(len as usize);
            // An empty SGE may carry any address, NULL included (UCX posts those).
            for s in w.sges.iter().filter(|s| s.len > 0) {
                // SAFETY: inline data is read from the caller's buffers at post time, as the verb specifies.
                d.extend_from_slice(unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.len as usize) });
            }
            Some(d)
        }
        None => None,
    };
    let ud = w.ud.map(|mut d| {
        if d.qkey & QKEY_FROM_QP != 0 {
            d.qkey = st.attrs.qkey;
        }
        d
    });
    let psn = st.take_psn();
    st.sq.push_back(SendWqe {
        wr_id: w.wr_id,
        op: w.op,
        signaled: w.flags & v::ibv_send_flags::IBV_SEND_SIGNALED.0 != 0,
        sges: w.sges,
        inline: inline_data,
        raddr: w.raddr,
        rkey: w.rkey,
        imm: w.imm,
        len,
        psn,
        retries: 0,
        ud,
        acked: false,
    });
    Ok(())
}
