//! Queue pairs: create (RC, UC, UD; on an SRQ or with their own receive queue), destroy,
//! modify with the kernel's state table and attribute checks, query.
#![allow(clippy::missing_safety_doc)]

use crate::engine::{QpInner, QpType};
use crate::fault::{self, Call, Facts};
use crate::objects::{ctx, device_of, outer, registry, Cq, Pd, Qp};
use crate::srq::srq_of;
use crate::{errno_ret, ffi};
use mrshim_verbs::{self as v, ibv_qp_attr_mask as m, ibv_qp_state as qps};
use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Init attributes of an RC QP on one CQ with `max_wr` WRs and one SGE each way: what the
/// crate's own tests and benchmarks create (applications build theirs).
pub fn rc_init_attr(cq: *mut v::ibv_cq, max_wr: u32) -> v::ibv_qp_init_attr {
    // SAFETY: ibv_qp_init_attr is plain old data; all-zero is valid.
    let mut ia: v::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = v::ibv_qp_type::IBV_QPT_RC;
    ia.cap.max_send_wr = max_wr;
    ia.cap.max_recv_wr = max_wr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia
}

pub unsafe extern "C" fn ibv_create_qp(pd: *mut v::ibv_pd, init: *mut v::ibv_qp_init_attr) -> *mut v::ibv_qp {
    ffi(null_mut(), || create_qp(pd, init, false))
}

/// verbs_context.create_qp_ex, behind the static-inline ibv_create_qp_ex.
pub unsafe extern "C" fn op_create_qp_ex(_c: *mut v::ibv_context, attr: *mut v::ibv_qp_init_attr_ex) -> *mut v::ibv_qp {
    ffi(null_mut(), || {
        // SAFETY: the caller's attribute struct.
        let a = unsafe { &mut *attr };
        const PD: u32 = v::IBV_QP_INIT_ATTR_PD;
        const CREATE_FLAGS: u32 = v::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        const SEND_OPS: u32 = v::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & PD == 0 || a.pd.is_null() {
            return errno_ret(libc::EINVAL, null_mut());
        }
        // The one create flag offered is IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, trivially kept as
        // there is no multicast; scatter FCS, CVLAN stripping, source QPN, ... are not.
        const BLOCK_SELF_MCAST_LB: u32 = v::IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
        let flags = if a.comp_mask & CREATE_FLAGS != 0 { a.create_flags & !BLOCK_SELF_MCAST_LB } else { 0 };
        if a.comp_mask & !(PD | SEND_OPS | CREATE_FLAGS) != 0 || flags != 0 {
            return errno_ret(libc::EOPNOTSUPP, null_mut());
        }
        // ibv_wr_* operations offered: RDMA WRITE (with immediate), SEND (with immediate), RDMA
        // READ. Atomics, memory windows, invalidation, TSO, atomic write and flush are not.
        const SUPPORTED_OPS: u64 = (v::IBV_QP_EX_WITH_RDMA_WRITE
            | v::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
            | v::IBV_QP_EX_WITH_SEND
            | v::IBV_QP_EX_WITH_SEND_WITH_IMM
            | v::IBV_QP_EX_WITH_RDMA_READ) as u64;
        if a.comp_mask & SEND_OPS != 0 && a.send_ops_flags & !SUPPORTED_OPS != 0 {
            return errno_ret(libc::EOPNOTSUPP, null_mut());
        }
        // SAFETY: ibv_qp_init_attr_ex starts with the fields of ibv_qp_init_attr.
        create_qp(a.pd, attr.cast(), a.comp_mask & SEND_OPS != 0)
    })
}

fn create_qp(pd: *mut v::ibv_pd, init: *mut v::ibv_qp_init_attr, ex: bool) -> *mut v::ibv_qp {
    let reg = registry().expect("registry");
    // SAFETY: pd and init are the caller's valid objects.
    let (p, ia) = unsafe { (outer::<Pd, _>(pd), &mut *init) };
    if let Some(e) = fault::check(&reg.config.faults, Call::CreateQp, &Facts::default()) {
        return errno_ret(e, null_mut());
    }
    let ty = match ia.qp_type {
        v::ibv_qp_type::IBV_QPT_RC => QpType::Rc,
        v::ibv_qp_type::IBV_QPT_UC => QpType::Uc,
        v::ibv_qp_type::IBV_QPT_UD => QpType::Ud,
        _ => return errno_ret(libc::EOPNOTSUPP, null_mut()),
    };
    // SAFETY: a non-NULL srq is the caller's SRQ.
    let srq = (!ia.srq.is_null()).then(|| unsafe { srq_of(ia.srq) }.inner.clone());
    let cap = &mut ia.cap;
    if srq.is_some() {
        // The QP has no receive queue of its own.
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    if ia.send_cq.is_null()
        || ia.recv_cq.is_null()
        || cap.max_send_wr > crate::device::MAX_QP_WR as u32
        || cap.max_recv_wr > crate::device::MAX_QP_WR as u32
        || cap.max_send_sge > crate::device::MAX_SGE as u32
        || cap.max_recv_sge > crate::device::MAX_SGE as u32
        || cap.max_inline_data > crate::device::MAX_INLINE
    {
        return errno_ret(libc::EINVAL, null_mut());
    }
    cap.max_send_wr = cap.max_send_wr.max(1);
    cap.max_recv_wr = cap.max_recv_wr.max(1);
    cap.max_send_sge = cap.max_send_sge.max(1);
    cap.max_recv_sge = cap.max_recv_sge.max(1);
    cap.max_inline_data = crate::device::MAX_INLINE;
    // SAFETY: the PD's context is ours; CQs are ours.
    let (cx, scq, rcq) = unsafe { (ctx(p.pd.context), outer::<Cq, _>(ia.send_cq), outer::<Cq, _>(ia.recv_cq)) };
    let qpn = match cx.engine.claim_qpn() {
        Ok(n) => n,
        Err(e) => return errno_ret(e.raw_os_error().unwrap_or(libc::ENOMEM), null_mut()),
    };
    scq.inner.users.fetch_add(1, Ordering::AcqRel);
    rcq.inner.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = &srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    let mtu = 128u32 << device_of(cx).port_attr().active_mtu;
    let inner = Arc::new(QpInner::new(
        qpn,
        p.id,
        (ty, srq),
        ia.sq_sig_all != 0,
        (cap.max_send_wr, cap.max_recv_wr, mtu),
        scq.inner.clone(),
        rcq.inner.clone(),
    ));
    cx.engine.qps.lock().unwrap().insert(qpn, inner.clone());
    // SAFETY: ibv_qp_ex is plain old data (pointers, ints, Option<fn>).
    let mut qpx: v::ibv_qp_ex = unsafe { std::mem::zeroed() };
    if ex {
        crate::qpex::install(&mut qpx);
    }
    let qp = &mut qpx.qp_base;
    qp.context = p.pd.context;
    qp.qp_context = ia.qp_context;
    qp.pd = pd;
    qp.send_cq = ia.send_cq;
    qp.recv_cq = ia.recv_cq;
    qp.srq = ia.srq;
    qp.handle = qpn;
    qp.qp_num = qpn;
    qp.state = qps::IBV_QPS_RESET;
    qp.qp_type = ia.qp_type;
    // SAFETY: pd is the caller's live PD.
    unsafe { Pd::count(pd, 1) };
    Box::into_raw(Box::new(Qp { qpx, ex, inner, cap: *cap, batch: Default::default() })).cast()
}

pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut v::ibv_qp) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: qp came from ibv_create_qp.
        let b = unsafe { Box::from_raw(qp.cast::<Qp>()) };
        // SAFETY: its context is ours.
        let cx = unsafe { ctx(b.qpx.qp_base.context) };
        cx.engine.qps.lock().unwrap().remove(&b.inner.qpn);
        // SAFETY: the QP's PD outlives it.
        unsafe { Pd::count(b.qpx.qp_base.pd, -1) };
        // Before the number can be handed out again: the CQs then hold none of this QP's.
        b.inner.send_cq.forget(b.inner.qpn);
        b.inner.recv_cq.forget(b.inner.qpn);
        cx.engine.release_qpn(b.inner.qpn);
        b.inner.send_cq.users.fetch_sub(1, Ordering::AcqRel);
        b.inner.recv_cq.users.fetch_sub(1, Ordering::AcqRel);
        if let Some(s) = &b.inner.srq {
            s.users.fetch_sub(1, Ordering::AcqRel);
        }
        0
    })
}

/// Required and optional attribute masks per transition (the kernel's qp_state_table).
fn transition_masks(cur: u32, next: u32, ty: QpType) -> Option<(u32, u32)> {
    use qps::*;
    let a = |x: v::ibv_qp_attr_mask| x.0;
    if ty == QpType::Ud {
        let (qkey, pkey, port) = (a(m::IBV_QP_QKEY), a(m::IBV_QP_PKEY_INDEX), a(m::IBV_QP_PORT));
        return Some(match (cur, next) {
            (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
            (IBV_QPS_RESET, IBV_QPS_INIT) => (pkey | port | qkey, 0),
            (IBV_QPS_INIT, IBV_QPS_INIT) => (0, pkey | port | qkey),
            (IBV_QPS_INIT, IBV_QPS_RTR) => (0, pkey | qkey),
            (IBV_QPS_RTR, IBV_QPS_RTS) => (a(m::IBV_QP_SQ_PSN), a(m::IBV_QP_CUR_STATE) | qkey),
            (IBV_QPS_RTS, IBV_QPS_RTS) => (0, a(m::IBV_QP_CUR_STATE) | qkey),
            _ => return None,
        });
    }
    let uc = ty == QpType::Uc;
    let path_opt = a(m::IBV_QP_ALT_PATH) | a(m::IBV_QP_ACCESS_FLAGS) | a(m::IBV_QP_PKEY_INDEX);
    Some(match (cur, next) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (a(m::IBV_QP_PKEY_INDEX) | a(m::IBV_QP_PORT) | a(m::IBV_QP_ACCESS_FLAGS), 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, a(m::IBV_QP_PKEY_INDEX) | a(m::IBV_QP_PORT) | a(m::IBV_QP_ACCESS_FLAGS)),
        (IBV_QPS_INIT, IBV_QPS_RTR) => {
            let base = a(m::IBV_QP_AV) | a(m::IBV_QP_PATH_MTU) | a(m::IBV_QP_DEST_QPN) | a(m::IBV_QP_RQ_PSN);
            let rc = a(m::IBV_QP_MAX_DEST_RD_ATOMIC) | a(m::IBV_QP_MIN_RNR_TIMER);
            if uc {
                (base, path_opt)
            } else {
                (base | rc, path_opt)
            }
        }
        (IBV_QPS_RTR, IBV_QPS_RTS) => {
            let rc =
                a(m::IBV_QP_TIMEOUT) | a(m::IBV_QP_RETRY_CNT) | a(m::IBV_QP_RNR_RETRY) | a(m::IBV_QP_MAX_QP_RD_ATOMIC);
            let opt = a(m::IBV_QP_CUR_STATE)
                | a(m::IBV_QP_ALT_PATH)
                | a(m::IBV_QP_ACCESS_FLAGS)
                | a(m::IBV_QP_MIN_RNR_TIMER)
                | a(m::IBV_QP_PATH_MIG_STATE);
            if uc {
                (a(m::IBV_QP_SQ_PSN), opt)
            } else {
                (a(m::IBV_QP_SQ_PSN) | rc, opt)
            }
        }
        (IBV_QPS_RTS, IBV_QPS_RTS) => (
            0,
            a(m::IBV_QP_CUR_STATE)
                | a(m::IBV_QP_ACCESS_FLAGS)
                | a(m::IBV_QP_ALT_PATH)
                | a(m::IBV_QP_PATH_MIG_STATE)
                | a(m::IBV_QP_MIN_RNR_TIMER),
        ),
        _ => return None,
    })
}

/// The kernel's checks for one ibv_modify_qp call; Ok(next state).
pub fn check_modify(
    cur: u32,
    ty: QpType,
    attr: &v::ibv_qp_attr,
    mask: u32,
    dev: &crate::device::Device,
) -> Result<u32, i32> {
    let state_bit = m::IBV_QP_STATE.0;
    let next = if mask & state_bit != 0 { attr.qp_state } else { cur };
    if next > qps::IBV_QPS_ERR {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_CUR_STATE.0 != 0 && attr.cur_qp_state != cur {
        return Err(libc::EINVAL);
    }
    let (req, opt) = transition_masks(cur, next, ty).ok_or(libc::EINVAL)?;
    let given = mask & !state_bit;
    if given & req != req || given & !(req | opt | m::IBV_QP_CUR_STATE.0) != 0 {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_PORT.0 != 0 && attr.port_num != crate::device::PORT {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_PKEY_INDEX.0 != 0 && attr.pkey_index as i32 >= dev.port_attr().pkey_tbl_len as i32 {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_PATH_MTU.0 != 0 && (attr.path_mtu < 1 || attr.path_mtu > dev.port_attr().active_mtu) {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_AV.0 != 0 {
        let ah = &attr.ah_attr;
        if dev.is_roce() && (ah.is_global == 0 || ah.grh.sgid_index as usize >= dev.gids.len()) {
            return Err(libc::EINVAL); // RoCE needs a GRH with a valid source GID
        }
        if !dev.is_roce() && ah.dlid == 0 {
            return Err(libc::EINVAL);
        }
    }
    if mask & m::IBV_QP_DEST_QPN.0 != 0 && attr.dest_qp_num > 0xff_ffff {
        return Err(libc::EINVAL);
    }
    if (mask & m::IBV_QP_MAX_QP_RD_ATOMIC.0 != 0 && attr.max_rd_atomic as i32 > crate::device::MAX_RD_ATOM)
        || (mask & m::IBV_QP_MAX_DEST_RD_ATOMIC.0 != 0 && attr.max_dest_rd_atomic as i32 > crate::device::MAX_RD_ATOM)
        || (mask & m::IBV_QP_TIMEOUT.0 != 0 && attr.timeout > 31)
        || (mask & m::IBV_QP_RETRY_CNT.0 != 0 && attr.retry_cnt > 7)
        || (mask & m::IBV_QP_RNR_RETRY.0 != 0 && attr.rnr_retry > 7)
    {
        return Err(libc::EINVAL);
    }
    Ok(next)
}

pub unsafe extern "C" fn ibv_modify_qp(qp: *mut v::ibv_qp, attr: *mut v::ibv_qp_attr, mask: c_int) -> c_int {
    ffi(libc::EINVAL, || {
        let reg = registry().expect("registry");
        // SAFETY: qp and attr are the caller's valid objects.
        let (q, a) = unsafe { (&mut *qp.cast::<Qp>(), &*attr) };
        if let Some(e) = fault::check(&reg.config.faults, Call::ModifyQp, &Facts::default()) {
            return e;
        }
        // SAFETY: the QP's context is ours.
        let dev = device_of(unsafe { ctx(q.qpx.qp_base.context) });
        let inner = q.inner.clone();
        let mut st = inner.st.lock().unwrap();
        let mask = mask as u32;
        let next = match check_modify(st.state, inner.ty, a, mask, dev) {
            Ok(n) => n,
            Err(e) => return e,
        };
        let has = |b: v::ibv_qp_attr_mask| mask & b.0 != 0;
        let t = &mut st.attrs;
        if has(m::IBV_QP_PORT) {
            t.port = a.port_num;
        }
        if has(m::IBV_QP_ACCESS_FLAGS) {
            t.access = a.qp_access_flags;
        }
        if has(m::IBV_QP_PKEY_INDEX) {
            t.pkey_index = a.pkey_index;
        }
        if has(m::IBV_QP_AV) {
            t.ah = Some(a.ah_attr);
        }
        if has(m::IBV_QP_QKEY) {
            t.qkey = a.qkey;
        }
        if has(m::IBV_QP_PATH_MTU) {
            t.path_mtu = a.path_mtu;
        }
        if has(m::IBV_QP_DEST_QPN) {
            t.dest_qpn = a.dest_qp_num;
        }
        if has(m::IBV_QP_RQ_PSN) {
            t.rq_psn = a.rq_psn;
        }
        if has(m::IBV_QP_MAX_DEST_RD_ATOMIC) {
            t.max_dest_rd_atomic = a.max_dest_rd_atomic;
        }
        if has(m::IBV_QP_MIN_RNR_TIMER) {
            t.min_rnr_timer = a.min_rnr_timer;
        }
        if has(m::IBV_QP_TIMEOUT) {
            t.timeout = a.timeout;
        }
        if has(m::IBV_QP_RETRY_CNT) {
            t.retry_cnt = a.retry_cnt;
        }
        if has(m::IBV_QP_RNR_RETRY) {
            t.rnr_retry = a.rnr_retry;
        }
        if has(m::IBV_QP_MAX_QP_RD_ATOMIC) {
            t.max_rd_atomic = a.max_rd_atomic;
        }
        if has(m::IBV_QP_SQ_PSN) {
            t.sq_psn = a.sq_psn;
            inner.set_sq_psn(&mut st, a.sq_psn);
        }
        match next {
            qps::IBV_QPS_RESET => inner.reset(&mut st),
            qps::IBV_QPS_ERR if st.state != qps::IBV_QPS_ERR => inner.flush(&mut st),
            _ => {}
        }
        st.state = next;
        q.qpx.qp_base.state = next;
        drop(st);
        // SAFETY: the QP's context is ours.
        unsafe { ctx(q.qpx.qp_base.context) }.engine.kick();
        0
    })
}

pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut v::ibv_qp,
    attr: *mut v::ibv_qp_attr,
    _mask: c_int,
    init: *mut v::ibv_qp_init_attr,
) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: caller's valid objects.
        let (q, a) = unsafe { (outer::<Qp, _>(qp), &mut *attr) };
        let st = q.inner.st.lock().unwrap();
        // SAFETY: plain old data.
        *a = unsafe { std::mem::zeroed() };
        a.qp_state = st.state;
        a.cur_qp_state = st.state;
        a.path_mtu = st.attrs.path_mtu;
        a.rq_psn = st.attrs.rq_psn;
        a.sq_psn = st.attrs.sq_psn;
        a.dest_qp_num = st.attrs.dest_qpn;
        a.qp_access_flags = st.attrs.access;
        a.cap = q.cap;
        if let Some(ah) = st.attrs.ah {
            a.ah_attr = ah;
        }
        a.pkey_index = st.attrs.pkey_index;
        a.max_rd_atomic = st.attrs.max_rd_atomic;
        a.max_dest_rd_atomic = st.attrs.max_dest_rd_atomic;
        a.min_rnr_timer = st.attrs.min_rnr_timer;
        a.port_num = st.attrs.port;
        a.timeout = st.attrs.timeout;
        a.retry_cnt = st.attrs.retry_cnt;
        a.rnr_retry = st.attrs.rnr_retry;
        a.qkey = st.attrs.qkey;
        if !init.is_null() {
            // SAFETY: caller's out struct.
            let ia = unsafe { &mut *init };
            ia.qp_context = q.qpx.qp_base.qp_context;
            ia.send_cq = q.qpx.qp_base.send_cq;
            ia.recv_cq = q.qpx.qp_base.recv_cq;
            ia.srq = q.qpx.qp_base.srq;
            ia.cap = q.cap;
            ia.qp_type = q.qpx.qp_base.qp_type;
            ia.sq_sig_all = q.inner.sq_sig_all as c_int;
        }
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::*;

    /// The kernel's usecnt, not the Arc's count, decides whether a CQ is busy: the progress
    /// thread may still hold a clone of a destroyed QP (finishing a message) when the
    /// application destroys the CQ, and that must not be EBUSY. Here the clone is held on
    /// purpose, so the moment the race needs is certain.
    #[test]
    fn destroy_cq_after_destroy_qp_succeeds_while_the_engine_still_holds_the_qp() {
        let dir = std::env::temp_dir().join(format!("mrshim-sim-unit-{}", std::process::id()));
        std::env::set_var("MRSHIM_SIM_RUNDIR", &dir);
        // SAFETY: the verbs calls below are used as an application uses them, on objects they
        // returned, each checked before use.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert!(!list.is_null() && n > 0);
            let ctx = ibv_open_device(*list);
            assert!(!ctx.is_null());
            let pd = ibv_alloc_pd(ctx);
            let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
            assert!(!pd.is_null() && !cq.is_null());
            let qp = ibv_create_qp(pd, &mut rc_init_attr(cq, 4));
            assert!(!qp.is_null());
            assert_eq!(ibv_destroy_cq(cq), libc::EBUSY, "a live QP uses the CQ");
            let held = (*qp.cast::<Qp>()).inner.clone();
            // A completion queued before the destroy, one the engine pushes after it: the
            // application polls neither (libmlx5 cleans the CQ of a destroyed QP's entries; a
            // consumer would take their wr_id for an object it freed with the QP — libfabric's
            // ofi_rxm reposted a receive on a closed endpoint and crashed).
            let cqi = held.send_cq.clone_cq();
            held.send_cq.push(held.wc(7, v::ibv_wc_status::IBV_WC_SUCCESS, 0, 0));
            assert_eq!(cqi.pending(), 1);
            assert_eq!(ibv_destroy_qp(qp), 0);
            assert_eq!(cqi.pending(), 0, "the destroyed QP's completion is gone");
            held.recv_cq.push(held.wc(8, v::ibv_wc_status::IBV_WC_SUCCESS, 0, 0));
            held.send_cq.push_all([held.wc(9, v::ibv_wc_status::IBV_WC_SUCCESS, 0, 0)]);
            assert_eq!(cqi.pending(), 0, "nothing is queued for a destroyed QP");
            drop(cqi);
            assert_eq!(ibv_destroy_cq(cq), 0, "only the engine's clone of the destroyed QP is left");
            drop(held);
            assert_eq!(ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_close_device(ctx), 0);
            ibv_free_device_list(list);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
