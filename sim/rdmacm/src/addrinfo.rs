//! rdma_getaddrinfo / rdma_freeaddrinfo: the host's resolver (getaddrinfo) for the name and
//! service, its first answer as the destination (or, with RAI_PASSIVE, the source), the QP type
//! and port space from the hints or RC over RDMA_PS_TCP. There is no ibacm: no route or
//! connect data. Returns 0 or getaddrinfo's EAI code, as rdma-core does.
#![allow(clippy::missing_safety_doc)]

use crate::abi::{self as a, rdma_port_space as ps};
use crate::ffi;
use mrshim_verbs as v;
use std::os::raw::{c_char, c_int};
use std::ptr::null_mut;

/// A malloc'd copy of `len` bytes at `p` (the list is released with free(3)).
unsafe fn dup(p: *const libc::sockaddr, len: usize) -> *mut libc::sockaddr {
    if p.is_null() || len == 0 {
        return null_mut();
    }
    // SAFETY: allocate len bytes and copy the caller's sockaddr of that size.
    unsafe {
        let q = libc::malloc(len).cast::<libc::sockaddr>();
        if !q.is_null() {
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), len);
        }
        q
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const a::rdma_addrinfo,
    res: *mut *mut a::rdma_addrinfo,
) -> c_int {
    ffi(libc::EAI_SYSTEM, || {
        // SAFETY: the caller's optional hints.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        let passive = flags & a::RAI_PASSIVE as c_int != 0;
        // SAFETY: rdma_addrinfo is plain old data; all-zero is valid. calloc'd for free(3).
        let r = unsafe { libc::calloc(1, std::mem::size_of::<a::rdma_addrinfo>()) }.cast::<a::rdma_addrinfo>();
        if r.is_null() {
            return libc::EAI_MEMORY;
        }
        // SAFETY: just allocated and zeroed.
        let ri = unsafe { &mut *r };
        ri.ai_flags = flags;
        ri.ai_qp_type = h.map_or(0, |h| h.ai_qp_type);
        if ri.ai_qp_type == 0 {
            ri.ai_qp_type = v::ibv_qp_type::IBV_QPT_RC as c_int;
        }
        ri.ai_port_space = h.map_or(0, |h| h.ai_port_space);
        if ri.ai_port_space == 0 {
            let ud = ri.ai_qp_type == v::ibv_qp_type::IBV_QPT_UD as c_int;
            ri.ai_port_space = (if ud { ps::RDMA_PS_UDP } else { ps::RDMA_PS_TCP }) as c_int;
        }
        if let Some(h) = h {
            // SAFETY: the hints' addresses of their given lengths.
            unsafe {
                ri.ai_src_addr = dup(h.ai_src_addr.cast(), h.ai_src_len as usize).cast();
                ri.ai_src_len = if ri.ai_src_addr.is_null() { 0 } else { h.ai_src_len };
                ri.ai_dst_addr = dup(h.ai_dst_addr.cast(), h.ai_dst_len as usize).cast();
                ri.ai_dst_len = if ri.ai_dst_addr.is_null() { 0 } else { h.ai_dst_len };
            }
            ri.ai_family = h.ai_family;
        }
        if !node.is_null() || !service.is_null() {
            // SAFETY: addrinfo is plain old data; all-zero is valid.
            let mut ah: libc::addrinfo = unsafe { std::mem::zeroed() };
            ah.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
            ah.ai_socktype =
                if ri.ai_qp_type == v::ibv_qp_type::IBV_QPT_UD as c_int { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
            if passive {
                ah.ai_flags |= libc::AI_PASSIVE;
            }
            if flags & a::RAI_NUMERICHOST as c_int != 0 {
                ah.ai_flags |= libc::AI_NUMERICHOST;
            }
            let mut ai: *mut libc::addrinfo = null_mut();
            // SAFETY: the caller's strings, our hints and output.
            let rc = unsafe { libc::getaddrinfo(node, service, &ah, &mut ai) };
            if rc != 0 {
                // SAFETY: the partial result is ours.
                unsafe { rdma_freeaddrinfo(r) };
                return rc;
            }
            // SAFETY: getaddrinfo's first answer.
            let first = unsafe { &*ai };
            ri.ai_family = first.ai_family;
            // SAFETY: its address of ai_addrlen bytes.
            let copy = unsafe { dup(first.ai_addr, first.ai_addrlen as usize) };
            if passive {
                // SAFETY: replacing our own copy.
                unsafe { libc::free(ri.ai_src_addr.cast()) };
                ri.ai_src_addr = copy.cast();
                ri.ai_src_len = first.ai_addrlen;
            } else {
                // SAFETY: as above.
                unsafe { libc::free(ri.ai_dst_addr.cast()) };
                ri.ai_dst_addr = copy.cast();
                ri.ai_dst_len = first.ai_addrlen;
            }
            // SAFETY: getaddrinfo's list.
            unsafe { libc::freeaddrinfo(ai) };
        }
        // SAFETY: the caller's output pointer.
        unsafe { *res = r };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut a::rdma_addrinfo) {
    ffi((), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: a node rdma_getaddrinfo allocated, with malloc'd members.
            unsafe {
                let n = &*p;
                let next = n.ai_next;
                for m in [
                    n.ai_src_addr.cast::<libc::c_void>(),
                    n.ai_dst_addr.cast(),
                    n.ai_src_canonname.cast(),
                    n.ai_dst_canonname.cast(),
                    n.ai_route,
                    n.ai_connect,
                ] {
                    libc::free(m);
                }
                libc::free(p.cast());
                p = next;
            }
        }
    })
}
