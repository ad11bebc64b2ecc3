//! What the simulated librdmacm exports only to fail as rdma-core does on hardware without the
//! feature: multicast (the simulated devices have `max_mcast_grp` 0) and ECE (the devices
//! negotiate no enhanced connection establishment). Exported because programs link them
//! without calling them — pyverbs' `cmid` module links all five, so rdma-core's own Python
//! tests would not even load — and a program that does call them gets an errno, never a wrong
//! result.

use crate::abi as a;
use crate::{err, ffi};
use std::os::raw::{c_int, c_void};

/// ucma_addrlen's test: a NULL address or one of another family than IPv4/IPv6 (AF_IB is not
/// simulated) is EINVAL before anything else.
fn valid_addr(addr: *const libc::sockaddr) -> bool {
    // SAFETY: a non-NULL caller's sockaddr has at least its family.
    !addr.is_null() && matches!(unsafe { (*addr).sa_family } as c_int, libc::AF_INET | libc::AF_INET6)
}

fn no_multicast() -> c_int {
    eprintln!("mrshim-sim librdmacm: multicast is not simulated (the devices have max_mcast_grp 0)");
    err(libc::EOPNOTSUPP, -1)
}

/// `rdma_join_multicast`: EINVAL for a bad address as rdma-core, else EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn rdma_join_multicast(_id: *mut a::rdma_cm_id, addr: *mut libc::sockaddr, _ctx: *mut c_void) -> c_int {
    ffi(-1, || if valid_addr(addr) { no_multicast() } else { err(libc::EINVAL, -1) })
}

/// `rdma_join_multicast_ex`: rdma-core's checks of the attributes (ENOTSUP for unknown mask
/// bits, EINVAL without address or join flags), then EOPNOTSUPP.
///
/// # Safety
/// `attr` is NULL or a caller's `rdma_cm_join_mc_attr_ex`.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    _id: *mut a::rdma_cm_id,
    attr: *mut a::rdma_cm_join_mc_attr_ex,
    _ctx: *mut c_void,
) -> c_int {
    ffi(-1, || {
        // SAFETY: as the caller guarantees.
        let Some(at) = (unsafe { attr.as_ref() }) else { return err(libc::EINVAL, -1) };
        if at.comp_mask >= a::RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return err(libc::ENOTSUP, -1);
        }
        let flags_ok =
            at.comp_mask & a::RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS != 0 && at.join_flags < a::RDMA_MC_JOIN_FLAG_RESERVED;
        if at.comp_mask & a::RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 || !flags_ok || !valid_addr(at.addr.cast()) {
            return err(libc::EINVAL, -1);
        }
        no_multicast()
    })
}

/// `rdma_leave_multicast`: no group was ever joined, so EADDRNOTAVAIL (EINVAL for a bad
/// address), as rdma-core for an address not in the id's list.
#[no_mangle]
pub extern "C" fn rdma_leave_multicast(_id: *mut a::rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    ffi(-1, || err(if valid_addr(addr) { libc::EADDRNOTAVAIL } else { libc::EINVAL }, -1))
}

/// `rdma_set_local_ece`: rdma-core's argument checks (EINVAL), then EOPNOTSUPP: there is no
/// ECE to offer the peer.
///
/// # Safety
/// `id` and `ece` are NULL or the caller's objects.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut a::rdma_cm_id, ece: *mut mrshim_verbs::ibv_ece) -> c_int {
    ffi(-1, || {
        // SAFETY: as the caller guarantees.
        let (id, ece) = unsafe { (id.as_ref(), ece.as_ref()) };
        match (id, ece) {
            (Some(id), Some(e)) if id.qp.is_null() && e.vendor_id != 0 && e.comp_mask == 0 => err(libc::EOPNOTSUPP, -1),
            _ => err(libc::EINVAL, -1),
        }
    })
}

/// `rdma_get_remote_ece`: rdma-core's argument checks, then the peer's ECE — none (zeros): no
/// simulated id can offer one.
///
/// # Safety
/// `id` and `ece` are NULL or the caller's objects.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut a::rdma_cm_id, ece: *mut mrshim_verbs::ibv_ece) -> c_int {
    ffi(-1, || {
        // SAFETY: as the caller guarantees.
        let (id, ece) = unsafe { (id.as_ref(), ece.as_mut()) };
        match (id, ece) {
            (Some(id), Some(e)) if id.qp.is_null() => {
                *e = mrshim_verbs::ibv_ece { vendor_id: 0, options: 0, comp_mask: 0 };
                0
            }
            _ => err(libc::EINVAL, -1),
        }
    })
}
