//! An RC QP's way from RESET to RTS (ibv_modify_qp(3)): the attributes each transition sets and
//! the mask bits it must carry, written once for everything here that connects RC QPs by hand
//! (the simulated librdmacm's rdma_init_qp_attr, the allreduce example, the simulator's bench).
//! The values are the caller's: they differ between rdma_cm, NCCL and a benchmark.

use crate::{ibv_ah_attr, ibv_qp_attr, ibv_qp_attr_mask as m, ibv_qp_state as qps};
use std::os::raw::c_int;

/// `bits` as ibv_modify_qp's `attr_mask` argument.
pub fn mask(bits: &[m]) -> c_int {
    bits.iter().fold(0, |acc, b| acc | b.0) as c_int
}

fn zeroed() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain old data; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// An attribute struct asking for `state`, nothing else set.
pub fn attr(state: u32) -> ibv_qp_attr {
    ibv_qp_attr { qp_state: state, ..zeroed() }
}

/// RESET → INIT on `port`, P_Key index 0, allowing the remote `access` (IBV_ACCESS_* bits).
pub fn init(port: u8, access: u32) -> (ibv_qp_attr, c_int) {
    let a =
        ibv_qp_attr { qp_state: qps::IBV_QPS_INIT, pkey_index: 0, port_num: port, qp_access_flags: access, ..zeroed() };
    (a, mask(&[m::IBV_QP_STATE, m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_ACCESS_FLAGS]))
}

/// INIT → RTR: where the peer's QP is and what this side answers it with.
pub struct Rtr {
    /// The address vector of the peer's port (see [`ah`]).
    pub ah_attr: ibv_ah_attr,
    pub path_mtu: u32,
    pub dest_qp_num: u32,
    /// The peer's starting send PSN.
    pub rq_psn: u32,
    /// RDMA reads/atomics the peer may have outstanding towards this QP.
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
}

impl Rtr {
    pub fn attr(&self) -> (ibv_qp_attr, c_int) {
        let a = ibv_qp_attr {
            qp_state: qps::IBV_QPS_RTR,
            ah_attr: self.ah_attr,
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qp_num,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            ..zeroed()
        };
        let bits = [
            m::IBV_QP_STATE,
            m::IBV_QP_AV,
            m::IBV_QP_PATH_MTU,
            m::IBV_QP_DEST_QPN,
            m::IBV_QP_RQ_PSN,
            m::IBV_QP_MAX_DEST_RD_ATOMIC,
            m::IBV_QP_MIN_RNR_TIMER,
        ];
        (a, mask(&bits))
    }
}

/// RTR → RTS: how this side sends.
pub struct Rts {
    pub sq_psn: u32,
    /// Local ACK timeout, 4.096 µs · 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// RDMA reads/atomics this side may have outstanding.
    pub max_rd_atomic: u8,
}

impl Rts {
    pub fn attr(&self) -> (ibv_qp_attr, c_int) {
        let a = ibv_qp_attr {
            qp_state: qps::IBV_QPS_RTS,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            ..zeroed()
        };
        let bits = [
            m::IBV_QP_STATE,
            m::IBV_QP_TIMEOUT,
            m::IBV_QP_RETRY_CNT,
            m::IBV_QP_RNR_RETRY,
            m::IBV_QP_SQ_PSN,
            m::IBV_QP_MAX_QP_RD_ATOMIC,
        ];
        (a, mask(&bits))
    }
}

/// The global route of an address vector (RoCE, or IB across subnets).
#[derive(Clone, Copy)]
pub struct Grh {
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
}

/// The address vector of the peer at `dlid` (or `grh`) through the local `port`.
pub fn ah(port: u8, dlid: u16, grh: Option<Grh>) -> ibv_ah_attr {
    // SAFETY: ibv_ah_attr is plain old data; all-zero is valid.
    let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah.port_num = port;
    ah.dlid = dlid;
    if let Some(g) = grh {
        ah.is_global = 1;
        ah.grh.dgid.raw = g.dgid;
        ah.grh.sgid_index = g.sgid_index;
        ah.grh.hop_limit = g.hop_limit;
    }
    ah
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_transition_asks_for_its_state_with_its_mask() {
        let (a, mk) = init(1, 0xf);
        assert_eq!((a.qp_state, a.port_num, a.qp_access_flags), (qps::IBV_QPS_INIT, 1, 0xf));
        assert_eq!(mk, (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0 as c_int);
        let grh = Grh { dgid: [7; 16], sgid_index: 3, hop_limit: 64 };
        let rtr = Rtr {
            ah_attr: ah(1, 9, Some(grh)),
            path_mtu: 5,
            dest_qp_num: 42,
            rq_psn: 100,
            max_dest_rd_atomic: 2,
            min_rnr_timer: 12,
        };
        let (a, mk) = rtr.attr();
        assert_eq!((a.qp_state, a.dest_qp_num, a.rq_psn, a.path_mtu), (qps::IBV_QPS_RTR, 42, 100, 5));
        assert_eq!((a.ah_attr.is_global, a.ah_attr.dlid, a.ah_attr.grh.sgid_index), (1, 9, 3));
        // SAFETY: reading the raw bytes of a GID union.
        assert_eq!(unsafe { a.ah_attr.grh.dgid.raw }, [7; 16]);
        assert_ne!(mk & m::IBV_QP_AV.0 as c_int, 0);
        assert_eq!(mk & m::IBV_QP_SQ_PSN.0 as c_int, 0);
        let (a, mk) = Rts { sq_psn: 5, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 }.attr();
        assert_eq!((a.qp_state, a.sq_psn, a.timeout), (qps::IBV_QPS_RTS, 5, 14));
        assert_ne!(mk & m::IBV_QP_SQ_PSN.0 as c_int, 0);
        assert_eq!(ah(1, 4, None).is_global, 0);
    }
}
