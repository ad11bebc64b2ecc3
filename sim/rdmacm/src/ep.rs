//! The synchronous endpoint calls: rdma_create_ep (an id without channel, bound for a passive
//! rdma_addrinfo, resolved for an active one, with its QP), rdma_get_request (the next
//! connection request of such a listener, with the QP rdma_create_ep was asked for) and
//! rdma_destroy_ep. Safety contracts: rdma-core's.
#![allow(clippy::missing_safety_doc)]

use crate::abi::{self as a, rdma_cm_event_type as et};
use crate::api::{
    new_id, rdma_bind_addr, rdma_destroy_id, rdma_migrate_id, rdma_resolve_addr, rdma_resolve_route, token,
};
use crate::cm::{self, lock};
use crate::qp_api::{rdma_create_qp, rdma_destroy_qp};
use crate::{err, ffi};
use mrshim_verbs as v;
use std::os::raw::c_int;
use std::ptr::null_mut;

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut a::rdma_cm_id,
    res: *mut a::rdma_addrinfo,
    pd: *mut v::ibv_pd,
    qp_init: *mut v::ibv_qp_init_attr,
) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller's addrinfo.
        let Some(r) = (unsafe { res.as_ref() }) else { return err(libc::EINVAL, -1) };
        if let Err(e) = crate::devices::get() {
            return err(e, -1);
        }
        let t = match new_id(&mut lock(), None, null_mut(), r.ai_port_space as u32) {
            Ok(t) => t,
            Err(e) => return err(e, -1),
        };
        let id: *mut a::rdma_cm_id = lock().ids[&t].ptr.cast();
        let fail = |id| {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
            // SAFETY: the id made above, not handed out.
            unsafe { rdma_destroy_id(id) };
            err(e, -1)
        };
        if r.ai_flags & a::RAI_PASSIVE as c_int != 0 {
            // SAFETY: the addrinfo's source address.
            if unsafe { rdma_bind_addr(id, r.ai_src_addr.cast()) } != 0 {
                return fail(id);
            }
            // SAFETY: the caller's optional QP attributes, kept for rdma_get_request with the
            // addrinfo's QP type (as rdma-core does).
            if let Some(q) = unsafe { qp_init.as_mut() } {
                q.qp_type = r.ai_qp_type as u32;
                lock().ids.get_mut(&t).unwrap().ep_qp = Some((pd as usize, *q));
            }
        } else {
            // SAFETY: the caller's optional QP attributes: their type is the addrinfo's.
            if let Some(q) = unsafe { qp_init.as_mut() } {
                q.qp_type = r.ai_qp_type as u32;
            }
            // SAFETY: the addrinfo's addresses; a synchronous id waits for each step.
            let ok = unsafe {
                rdma_resolve_addr(id, r.ai_src_addr.cast(), r.ai_dst_addr.cast(), 2000) == 0
                    && rdma_resolve_route(id, 2000) == 0
                    && (qp_init.is_null() || rdma_create_qp(id, pd, qp_init) == 0)
            };
            if !ok {
                return fail(id);
            }
        }
        // SAFETY: the caller's output pointer.
        unsafe { *out = id };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut a::rdma_cm_id) {
    ffi((), || {
        // SAFETY: the caller's id: its QP first, then the id.
        unsafe {
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(listen: *mut a::rdma_cm_id, out: *mut *mut a::rdma_cm_id) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller's listening id.
        let t = unsafe { token(listen) };
        let (chan, ep_qp) = {
            let cm = lock();
            match cm.ids.get(&t) {
                Some(s) if s.sync => (s.chan, s.ep_qp),
                _ => return err(libc::EINVAL, -1),
            }
        };
        let ev = loop {
            let ev = match cm::get_event(chan) {
                Ok(e) => e,
                Err(e) => return err(e, -1),
            };
            // SAFETY: our event.
            if unsafe { (*ev).ev.event } == et::RDMA_CM_EVENT_CONNECT_REQUEST {
                break ev;
            }
            // SAFETY: not what is waited for: released.
            drop(unsafe { Box::from_raw(ev) });
        };
        // SAFETY: our event; the new id it names.
        let id = unsafe { (*ev).ev.id };
        // The new id gets its own synchronous channel (rdma_accept waits for ESTABLISHED there).
        // SAFETY: the new id.
        if unsafe { rdma_migrate_id(id, null_mut()) } != 0 {
            // SAFETY: our event.
            drop(unsafe { Box::from_raw(ev) });
            return -1;
        }
        // SAFETY: the new id's public struct keeps its request event (rdma-core's id->event).
        unsafe { (*id).event = ev.cast() };
        if let Some((pd, mut q)) = ep_qp {
            // SAFETY: the new id, with a copy of the listener's QP attributes.
            if unsafe { rdma_create_qp(id, pd as *mut v::ibv_pd, &mut q) } != 0 {
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
                // SAFETY: the new id, given up.
                unsafe { rdma_destroy_id(id) };
                return err(e, -1);
            }
        }
        // SAFETY: the caller's output pointer.
        unsafe { *out = id };
        0
    })
}
