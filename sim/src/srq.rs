//! Shared receive queues: `ibv_create_srq(_ex)`, `ibv_post_srq_recv`, `ibv_modify_srq` (limit
//! only: mlx5 cannot resize an SRQ, so IBV_DEVICE_SRQ_RESIZE is not advertised),
//! `ibv_query_srq`, `ibv_destroy_srq`, and the SRQ limit event.
//!
//! The exported functions have the safety contracts of rdma-core's functions of the same name.
#![allow(clippy::missing_safety_doc)]

use crate::engine::RecvWqe;
use crate::events::AsyncEvents;
use crate::objects::{ctx, outer, Pd};
use crate::{errno_ret, ffi};
use mrshim_verbs as v;
use std::collections::VecDeque;
use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub const MAX_SRQ_WR: u32 = 32767;
pub const MAX_SRQ_SGE: u32 = 31;

struct Queue {
    wqes: VecDeque<RecvWqe>,
    /// Armed limit (0: not armed): when fewer WQEs remain, one SRQ_LIMIT_REACHED event fires.
    limit: u32,
}

pub struct SrqInner {
    q: Mutex<Queue>,
    pub max_wr: u32,
    pub max_sge: u32,
    events: AsyncEvents,
    /// The `struct ibv_srq *` the application holds (the event's element).
    ptr: AtomicUsize,
    /// QPs attached (the kernel's usecnt): destroy refuses with EBUSY while > 0.
    pub users: AtomicU32,
}

impl SrqInner {
    /// mlx5 sizes the queue to a power of two and reports one less as max_wr.
    pub fn new(attr: &v::ibv_srq_attr, events: AsyncEvents) -> Result<SrqInner, i32> {
        if attr.max_wr > MAX_SRQ_WR || attr.max_sge > MAX_SRQ_SGE {
            return Err(libc::EINVAL);
        }
        let max_wr = (attr.max_wr + 1).next_power_of_two() - 1;
        Ok(SrqInner {
            q: Mutex::new(Queue { wqes: VecDeque::new(), limit: 0 }),
            max_wr: max_wr.max(1),
            max_sge: attr.max_sge.max(1),
            events,
            ptr: AtomicUsize::new(0),
            users: AtomicU32::new(0),
        })
    }

    pub fn post(&self, w: RecvWqe) -> Result<(), i32> {
        if w.sges.len() > self.max_sge as usize {
            return Err(libc::EINVAL);
        }
        let mut q = self.q.lock().unwrap();
        if q.wqes.len() >= self.max_wr as usize {
            return Err(libc::ENOMEM);
        }
        q.wqes.push_back(w);
        Ok(())
    }

    pub fn take(&self) -> Option<RecvWqe> {
        let mut q = self.q.lock().unwrap();
        let w = q.wqes.pop_front()?;
        if q.limit > 0 && (q.wqes.len() as u32) < q.limit {
            q.limit = 0;
            drop(q);
            self.events.post(self.ptr.load(Ordering::Acquire), v::IBV_EVENT_SRQ_LIMIT_REACHED);
        }
        Some(w)
    }

    pub fn modify(&self, attr: &v::ibv_srq_attr, mask: u32) -> Result<(), i32> {
        if mask & !(v::IBV_SRQ_MAX_WR | v::IBV_SRQ_LIMIT) != 0 || mask & v::IBV_SRQ_MAX_WR != 0 {
            return Err(libc::EINVAL);
        }
        if mask & v::IBV_SRQ_LIMIT != 0 {
            if attr.srq_limit > self.max_wr {
                return Err(libc::EINVAL);
            }
            self.q.lock().unwrap().limit = attr.srq_limit;
        }
        Ok(())
    }

    pub fn query(&self) -> v::ibv_srq_attr {
        v::ibv_srq_attr { max_wr: self.max_wr, max_sge: self.max_sge, srq_limit: self.q.lock().unwrap().limit }
    }
}

#[repr(C)]
pub struct Srq {
    pub srq: v::ibv_srq,
    pub inner: Arc<SrqInner>,
}

/// # Safety
/// `p` must be an SRQ this library created.
pub unsafe fn srq_of<'a>(p: *mut v::ibv_srq) -> &'a Srq {
    // SAFETY: as the caller guarantees.
    unsafe { outer::<Srq, _>(p) }
}

fn create(pd: *mut v::ibv_pd, srq_context: *mut std::ffi::c_void, attr: &mut v::ibv_srq_attr) -> *mut v::ibv_srq {
    // SAFETY: pd is the caller's PD; its context is ours.
    let (p, cx) = unsafe { (outer::<Pd, _>(pd), ctx((*pd).context)) };
    let inner = match SrqInner::new(attr, cx.events) {
        Ok(i) => Arc::new(i),
        Err(e) => return errno_ret(e, null_mut()),
    };
    attr.max_wr = inner.max_wr;
    attr.max_sge = inner.max_sge;
    // SAFETY: ibv_srq is plain old data (zeroed pthread objects are their static initialisers).
    let mut srq: v::ibv_srq = unsafe { std::mem::zeroed() };
    srq.context = p.pd.context;
    srq.srq_context = srq_context;
    srq.pd = pd;
    srq.handle = p.id as u32;
    // SAFETY: pd is the caller's live PD.
    unsafe { Pd::count(pd, 1) };
    let b = Box::into_raw(Box::new(Srq { srq, inner }));
    // SAFETY: b is live.
    let inner = unsafe { &(*b).inner };
    inner.ptr.store(b as usize, Ordering::Release);
    b.cast()
}

pub unsafe extern "C" fn ibv_create_srq(pd: *mut v::ibv_pd, init: *mut v::ibv_srq_init_attr) -> *mut v::ibv_srq {
    ffi(null_mut(), || {
        // SAFETY: the caller's attribute struct.
        let ia = unsafe { &mut *init };
        create(pd, ia.srq_context, &mut ia.attr)
    })
}

/// verbs_context.create_srq_ex, behind the static-inline ibv_create_srq_ex: basic SRQs only
/// (XRC and tag matching are reported absent).
pub unsafe extern "C" fn op_create_srq_ex(
    _c: *mut v::ibv_context,
    init: *mut v::ibv_srq_init_attr_ex,
) -> *mut v::ibv_srq {
    ffi(null_mut(), || {
        // SAFETY: the caller's attribute struct.
        let ia = unsafe { &mut *init };
        if ia.comp_mask & v::IBV_SRQ_INIT_ATTR_PD == 0 || ia.pd.is_null() {
            return errno_ret(libc::EINVAL, null_mut());
        }
        let basic = ia.comp_mask & v::IBV_SRQ_INIT_ATTR_TYPE == 0 || ia.srq_type == v::IBV_SRQT_BASIC;
        if !basic || ia.comp_mask & !(v::IBV_SRQ_INIT_ATTR_TYPE | v::IBV_SRQ_INIT_ATTR_PD) != 0 {
            return errno_ret(libc::EOPNOTSUPP, null_mut());
        }
        create(ia.pd, ia.srq_context, &mut ia.attr)
    })
}

pub unsafe extern "C" fn ibv_modify_srq(srq: *mut v::ibv_srq, attr: *mut v::ibv_srq_attr, mask: c_int) -> c_int {
    // SAFETY: the caller's SRQ and attribute struct.
    ffi(libc::EINVAL, || match unsafe { srq_of(srq) }.inner.modify(unsafe { &*attr }, mask as u32) {
        Ok(()) => 0,
        Err(e) => e,
    })
}

pub unsafe extern "C" fn ibv_query_srq(srq: *mut v::ibv_srq, attr: *mut v::ibv_srq_attr) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: the caller's SRQ and out struct.
        unsafe { *attr = srq_of(srq).inner.query() };
        0
    })
}

pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut v::ibv_srq) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: srq came from ibv_create_srq.
        if unsafe { srq_of(srq) }.inner.users.load(Ordering::Acquire) > 0 {
            return libc::EBUSY;
        }
        // SAFETY: as above; nobody else refers to it any more.
        let b = unsafe { Box::from_raw(srq.cast::<Srq>()) };
        // SAFETY: the SRQ's PD outlives it.
        unsafe { Pd::count(b.srq.pd, -1) };
        0
    })
}

/// Behind the static-inline ibv_post_srq_recv. A new WQE may complete a message that arrived
/// for one of the SRQ's QPs before any WQE was there.
pub unsafe extern "C" fn op_post_srq_recv(
    srq: *mut v::ibv_srq,
    mut wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: the caller's SRQ.
        let s = unsafe { srq_of(srq) };
        let mut rc = 0;
        while !wr.is_null() {
            // SAFETY: walking the caller's WR list.
            let w = unsafe { &*wr };
            if w.num_sge < 0 {
                rc = libc::EINVAL;
                break;
            }
            // SAFETY: the WR holds num_sge SGEs.
            let sges = unsafe { crate::post::sges(w.sg_list, w.num_sge) };
            if let Err(e) = s.inner.post(RecvWqe { wr_id: w.wr_id, sges }) {
                rc = e;
                break;
            }
            wr = w.next;
        }
        if rc != 0 && !bad.is_null() {
            // SAFETY: caller's out pointer.
            unsafe { *bad = wr };
        }
        // SAFETY: the SRQ's context is ours.
        unsafe { ctx(s.srq.context) }.engine.srq_refilled(&s.inner);
        rc
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Sge;

    fn wqe(id: u64) -> RecvWqe {
        RecvWqe { wr_id: id, sges: vec![Sge { addr: 0, len: 8, lkey: 1 }] }
    }

    #[test]
    fn sized_like_mlx5_and_full_is_enomem() {
        let attr = v::ibv_srq_attr { max_wr: 5, max_sge: 1, srq_limit: 0 };
        let s = SrqInner::new(&attr, AsyncEvents(-1)).unwrap();
        assert_eq!(s.max_wr, 7);
        for i in 0..7 {
            s.post(wqe(i)).unwrap();
        }
        assert_eq!(s.post(wqe(7)), Err(libc::ENOMEM));
        assert_eq!(s.take().unwrap().wr_id, 0);
        let too_big = v::ibv_srq_attr { max_wr: MAX_SRQ_WR + 1, max_sge: 1, srq_limit: 0 };
        assert_eq!(SrqInner::new(&too_big, AsyncEvents(-1)).err(), Some(libc::EINVAL));
    }

    #[test]
    fn limit_event_fires_once_below_the_limit() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills our array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) }, 0);
        let attr = v::ibv_srq_attr { max_wr: 15, max_sge: 1, srq_limit: 0 };
        let s = SrqInner::new(&attr, AsyncEvents(fds[1])).unwrap();
        s.ptr.store(0x1234, Ordering::Relaxed);
        for i in 0..4 {
            s.post(wqe(i)).unwrap();
        }
        let arm = v::ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: 3 };
        assert_eq!(s.modify(&arm, v::IBV_SRQ_MAX_WR), Err(libc::EINVAL), "mlx5 cannot resize");
        s.modify(&arm, v::IBV_SRQ_LIMIT).unwrap();
        // SAFETY: plain old data.
        let mut ev: v::ibv_async_event = unsafe { std::mem::zeroed() };
        s.take(); // 3 left: not below 3
        assert_eq!(crate::events::read_event(fds[0], &mut ev), -1);
        s.take(); // 2 left: fires, disarms
        assert_eq!(crate::events::read_event(fds[0], &mut ev), 0);
        assert_eq!(ev.event_type, v::IBV_EVENT_SRQ_LIMIT_REACHED);
        // SAFETY: the union member written by post().
        assert_eq!(unsafe { ev.element.srq } as usize, 0x1234);
        s.take();
        assert_eq!(crate::events::read_event(fds[0], &mut ev), -1, "disarmed after firing");
        assert_eq!(s.query().srq_limit, 0);
        // SAFETY: closing our pipe.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
