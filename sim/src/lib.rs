//! mrshim-sim: a simulated RDMA NIC behind rdma-core's libibverbs ABI. Built as
//! `libibverbs.so` (SONAME libibverbs.so.1, rdma-core's symbol versions) and used in place of the
//! system library through LD_LIBRARY_PATH — see README "Simulated device".
//!
//! Layers (a module imports from its own layer or the ones before it, never in a circle):
//! 1. plain logic (unit-tested): config, fault, device (the device's attributes and limits, its
//!    sysfs files), memory, grh (the GRH wire format), simlog, events;
//! 2. the NIC: wire, cq, engine (queue pairs, SRQ queues, the progress thread); `wr` (a send WR
//!    and its post-time checks) on top of the engine;
//! 3. the exported C ABI, one module per object kind: objects (the registry every other one
//!    looks contexts and PDs up in), api (devices, PDs, MRs, CQs), qp, post, qpex, srq, ah,
//!    rereg, sysview (the fake /sys), misc, compat.
//!
//! A constant or helper two layers need lives in the lower one (e.g. the SRQ limits and PCI ids in
//! device, the GRH in grh), so no two modules import each other.

pub mod ah;
pub mod api;
pub mod compat;
pub mod config;
pub mod cq;
pub mod cqex;
pub mod device;
pub mod engine;
pub mod events;
pub mod fault;
pub mod grh;
pub mod memory;
pub mod misc;
pub mod objects;
pub mod post;
pub mod qp;
pub mod qpex;
pub mod rereg;
pub mod simlog;
pub mod srq;
pub mod sysview;
pub mod wire;
pub mod wr;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Sets errno and returns `v` (the verbs' "NULL/-1 with errno" convention).
pub fn errno_ret<T>(e: i32, v: T) -> T {
    set_errno(e);
    v
}

/// Runs an exported function's body; a panic becomes `fail` (with errno EIO) instead of
/// unwinding into C.
pub fn ffi<T>(fail: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            eprintln!("mrshim-sim: internal error (panic) in a verb; returning failure");
            errno_ret(libc::EIO, fail)
        }
    }
}
