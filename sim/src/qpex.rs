//! The extended send API (`ibv_wr_start` / `ibv_wr_rdma_write` / `ibv_wr_set_sge` /
//! `ibv_wr_complete`): static-inline calls through `struct ibv_qp_ex`, which perftest uses by
//! default. WRs are collected between start and complete and then posted like ibv_post_send's.

use crate::engine::{SendOp, Sge};
use crate::objects::{ctx, Qp};
use crate::wr::{enqueue, WrDesc};
use mrshim_verbs as v;
use std::os::raw::c_int;

fn qp<'a>(q: *mut v::ibv_qp_ex) -> &'a Qp {
    // SAFETY: qpx is the first field of Qp, and only our QPs have these ops installed.
    unsafe { &*q.cast::<Qp>() }
}

fn begin(q: *mut v::ibv_qp_ex, op: SendOp, rkey: u32, raddr: u64, imm: Option<u32>) {
    let qp = qp(q);
    let mut b = qp.batch.lock().unwrap();
    b.0.push(WrDesc {
        wr_id: qp.qpx.wr_id,
        op,
        imm,
        flags: qp.qpx.wr_flags,
        sges: Vec::new(),
        inline_data: None,
        raddr,
        rkey,
        ud: None,
    });
}

/// Marks the batch failed: ibv_wr_complete then returns the errno.
fn unsupported(q: *mut v::ibv_qp_ex) {
    qp(q).batch.lock().unwrap().1 = libc::EOPNOTSUPP;
}

unsafe extern "C" fn wr_start(q: *mut v::ibv_qp_ex) {
    *qp(q).batch.lock().unwrap() = (Vec::new(), 0);
}
unsafe extern "C" fn wr_abort(q: *mut v::ibv_qp_ex) {
    *qp(q).batch.lock().unwrap() = (Vec::new(), 0);
}
unsafe extern "C" fn wr_complete(q: *mut v::ibv_qp_ex) -> c_int {
    crate::ffi(libc::EINVAL, || {
        let qp = qp(q);
        let (wrs, err) = std::mem::take(&mut *qp.batch.lock().unwrap());
        if err != 0 {
            return err;
        }
        let mut st = qp.inner.st.lock().unwrap();
        let mut rc = 0;
        for w in wrs {
            if let Err(e) = enqueue(&qp.inner, &qp.cap, &mut st, w) {
                rc = e;
                break;
            }
        }
        drop(st);
        // SAFETY: the QP's context is ours.
        unsafe { ctx(qp.qpx.qp_base.context) }.engine.kick();
        rc
    })
}
unsafe extern "C" fn wr_rdma_write(q: *mut v::ibv_qp_ex, rkey: u32, raddr: u64) {
    begin(q, SendOp::Write, rkey, raddr, None)
}
unsafe extern "C" fn wr_rdma_write_imm(q: *mut v::ibv_qp_ex, rkey: u32, raddr: u64, imm: u32) {
    begin(q, SendOp::WriteImm, rkey, raddr, Some(imm))
}
unsafe extern "C" fn wr_rdma_read(q: *mut v::ibv_qp_ex, rkey: u32, raddr: u64) {
    begin(q, SendOp::Read, rkey, raddr, None)
}
unsafe extern "C" fn wr_send(q: *mut v::ibv_qp_ex) {
    begin(q, SendOp::Send, 0, 0, None)
}
unsafe extern "C" fn wr_send_imm(q: *mut v::ibv_qp_ex, imm: u32) {
    begin(q, SendOp::Send, 0, 0, Some(imm))
}
unsafe extern "C" fn wr_set_sge(q: *mut v::ibv_qp_ex, lkey: u32, addr: u64, len: u32) {
    if let Some(w) = qp(q).batch.lock().unwrap().0.last_mut() {
        w.sges = vec![Sge { addr, len, lkey }];
    }
}
unsafe extern "C" fn wr_set_sge_list(q: *mut v::ibv_qp_ex, n: usize, list: *const v::ibv_sge) {
    // SAFETY: the caller passes n SGEs.
    let sg = unsafe { std::slice::from_raw_parts(list, n) };
    if let Some(w) = qp(q).batch.lock().unwrap().0.last_mut() {
        w.sges = sg.iter().map(|s| Sge { addr: s.addr, len: s.length, lkey: s.lkey }).collect();
    }
}
unsafe extern "C" fn wr_set_inline_data(q: *mut v::ibv_qp_ex, addr: *mut std::os::raw::c_void, len: usize) {
    // SAFETY: inline data is copied from the caller's buffer now, as the verb specifies.
    let d = unsafe { caller_bytes(addr.cast(), len) }.to_vec();
    if let Some(w) = qp(q).batch.lock().unwrap().0.last_mut() {
        w.inline_data = Some(d);
    }
}
unsafe extern "C" fn wr_set_inline_data_list(q: *mut v::ibv_qp_ex, n: usize, list: *const v::ibv_data_buf) {
    // SAFETY: the caller passes n buffers.
    let bufs = unsafe { std::slice::from_raw_parts(list, n) };
    let mut d = Vec::new();
    for b in bufs {
        // SAFETY: each buffer is the caller's, copied now.
        d.extend_from_slice(unsafe { caller_bytes(b.addr.cast(), b.length) });
    }
    if let Some(w) = qp(q).batch.lock().unwrap().0.last_mut() {
        w.inline_data = Some(d);
    }
}
unsafe extern "C" fn wr_atomic_cmp_swp(q: *mut v::ibv_qp_ex, _rkey: u32, _raddr: u64, _cmp: u64, _swap: u64) {
    unsupported(q)
}
unsafe extern "C" fn wr_atomic_fetch_add(q: *mut v::ibv_qp_ex, _rkey: u32, _raddr: u64, _add: u64) {
    unsupported(q)
}
unsafe extern "C" fn wr_bind_mw(
    q: *mut v::ibv_qp_ex,
    _mw: *mut v::ibv_mw,
    _rkey: u32,
    _info: *const v::ibv_mw_bind_info,
) {
    unsupported(q)
}
unsafe extern "C" fn wr_local_inv(q: *mut v::ibv_qp_ex, _rkey: u32) {
    unsupported(q)
}
unsafe extern "C" fn wr_send_inv(q: *mut v::ibv_qp_ex, _rkey: u32) {
    unsupported(q)
}
unsafe extern "C" fn wr_send_tso(q: *mut v::ibv_qp_ex, _hdr: *mut std::os::raw::c_void, _sz: u16, _mss: u16) {
    unsupported(q)
}
unsafe extern "C" fn wr_set_ud_addr(q: *mut v::ibv_qp_ex, ah: *mut v::ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the caller's address handle.
    let dest = unsafe { crate::ah::ud_dest(ah, qpn, qkey) };
    if let Some(w) = qp(q).batch.lock().unwrap().0.last_mut() {
        w.ud = dest;
    }
}
unsafe extern "C" fn wr_set_xrc_srqn(q: *mut v::ibv_qp_ex, _srqn: u32) {
    unsupported(q)
}

/// The caller's `len` bytes at `addr`; an empty buffer may have any address, NULL included.
///
/// # Safety
/// `addr` points at `len` readable bytes when `len` > 0.
unsafe fn caller_bytes<'a>(addr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: as the caller guarantees.
    unsafe { std::slice::from_raw_parts(addr, len) }
}

unsafe extern "C" fn wr_atomic_write(q: *mut v::ibv_qp_ex, _rkey: u32, _raddr: u64, _wr: *const std::os::raw::c_void) {
    unsupported(q)
}
unsafe extern "C" fn wr_flush(q: *mut v::ibv_qp_ex, _rkey: u32, _raddr: u64, _len: usize, _ty: u8, _level: u8) {
    unsupported(q)
}

pub fn install(x: &mut v::ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_atomic_write = Some(wr_atomic_write);
    x.wr_flush = Some(wr_flush);
}
