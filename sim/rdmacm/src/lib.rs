//! mrshim-sim-rdmacm: a simulated librdmacm.so.1 (rdma-core's ABI and symbol versions) over the
//! simulated libibverbs. Connection management between processes goes over unix sockets in the
//! simulator's run directory (MRSHIM_SIM_RUNDIR), the same rendezvous its QPs use; see
//! docs/sim.md "librdmacm".
//!
//! Layers: addr/wire/ports are plain logic (unit-tested); devices opens the simulated devices;
//! cm holds ids, channels and events; proto turns CM messages into events; qp moves an id's QP
//! through its states; api, qp_api, addrinfo and ep are the exported C functions; absent the
//! ones that fail as on hardware without the feature (multicast, ECE).

pub mod abi;
pub mod absent;
pub mod addr;
pub mod addrinfo;
pub mod api;
pub mod cm;
pub mod devices;
pub mod ep;
pub mod ports;
pub mod proto;
pub mod qp;
pub mod qp_api;
pub mod strings;
pub mod wire;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Sets errno and returns `v` (librdmacm's "-1/NULL with errno" convention).
pub fn err<T>(e: i32, v: T) -> T {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
    v
}

/// 0, or -1 with errno `e` (the C result of a call that returns `int`).
pub fn status(r: Result<(), i32>) -> std::os::raw::c_int {
    r.map_or_else(|e| err(e, -1), |_| 0)
}

/// Runs an exported function's body; a panic becomes `fail` (errno EIO) instead of unwinding
/// into C.
pub fn ffi<T>(fail: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            eprintln!("mrshim-sim librdmacm: internal error (panic); returning failure");
            err(libc::EIO, fail)
        }
    }
}
