//! mrshim-sim: a simulated RDMA NIC behind rdma-core's libibverbs ABI. Built as
//! `libibverbs.so` (SONAME libibverbs.so.1, rdma-core's symbol versions) and used in place of the
//! system library through LD_LIBRARY_PATH — see README "Simulated device".
//!
//! Layers: config/fault/device/memory are plain logic (unit-tested); engine/wire/cq play the NIC;
//! the exported C ABI is one module per object kind (api: devices, PDs, MRs, CQs; qp, post, qpex,
//! srq, ah) plus misc/compat. `wr` (a send WR and its post-time checks) depends on the engine
//! only, so objects, post and qpex do not import one another in a circle.

pub mod ah;
pub mod api;
pub mod compat;
pub mod config;
pub mod cq;
pub mod device;
pub mod engine;
pub mod events;
pub mod fault;
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
