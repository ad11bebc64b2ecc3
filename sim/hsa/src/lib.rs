//! `libhsa-runtime64.so.1`: the part of ROCr (the HSA runtime) the HIP runtime and mrshim use.
//! On real ROCm the HIP runtime is built on HSA and loads it; here, likewise, the simulated
//! `libamdhip64.so.{5,6}` load this library when it is on the library path and use the devices
//! it owns (sim/hip `runtime`), so that memory from hipMalloc is memory HSA knows.
//!
//! Exported (signatures and status values of ROCr's public hsa.h / hsa_ext_amd.h):
//! `hsa_init`, `hsa_shut_down` (a reference count: every other call needs it above zero, else
//! HSA_STATUS_ERROR_NOT_INITIALIZED), `hsa_amd_portable_export_dmabuf(ptr, size, *fd, *offset)`
//! (a dmabuf of the whole allocation holding [ptr, ptr+size), and ptr's offset in it) and
//! `hsa_amd_portable_close_dmabuf(fd)`. See docs/sim-gpu.md.
#![allow(clippy::not_unsafe_ptr_arg_deref, non_camel_case_types)]

use simgpu::device_runtime::DeviceRuntime;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

pub type hsa_status_t = u32;
pub const HSA_STATUS_SUCCESS: hsa_status_t = 0;
pub const HSA_STATUS_ERROR: hsa_status_t = 0x1000;
pub const HSA_STATUS_ERROR_INVALID_ARGUMENT: hsa_status_t = 0x1001;
pub const HSA_STATUS_ERROR_INVALID_ALLOCATION: hsa_status_t = 0x1003;
pub const HSA_STATUS_ERROR_OUT_OF_RESOURCES: hsa_status_t = 0x1008;
pub const HSA_STATUS_ERROR_NOT_INITIALIZED: hsa_status_t = 0x100B;

/// hsa_init's reference count.
static REFS: AtomicU32 = AtomicU32::new(0);

fn guarded(f: impl FnOnce() -> Result<(), hsa_status_t>) -> hsa_status_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HSA_STATUS_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("mrshim-sim-hsa: internal error (panic); returning HSA_STATUS_ERROR");
            HSA_STATUS_ERROR
        }
    }
}

fn initialized() -> Result<&'static DeviceRuntime, hsa_status_t> {
    if REFS.load(Ordering::Acquire) == 0 {
        return Err(HSA_STATUS_ERROR_NOT_INITIALIZED);
    }
    simhip::runtime::own().map_err(|_| HSA_STATUS_ERROR)
}

#[no_mangle]
pub extern "C" fn hsa_init() -> hsa_status_t {
    guarded(|| {
        simhip::runtime::own().map_err(|_| HSA_STATUS_ERROR)?;
        REFS.fetch_add(1, Ordering::AcqRel);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hsa_shut_down() -> hsa_status_t {
    guarded(|| {
        REFS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| HSA_STATUS_ERROR_NOT_INITIALIZED)
    })
}

/// A dmabuf of the allocation holding [ptr, ptr+size): its fd (close-on-exec) and ptr's offset.
#[no_mangle]
pub extern "C" fn hsa_amd_portable_export_dmabuf(
    ptr: *const c_void,
    size: usize,
    dmabuf: *mut c_int,
    offset: *mut u64,
) -> hsa_status_t {
    guarded(|| {
        let rt = initialized()?;
        if dmabuf.is_null() || offset.is_null() || size == 0 {
            return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        }
        let (a, off) = rt.heap.span(ptr as u64, size as u64).map_err(|_| HSA_STATUS_ERROR_INVALID_ALLOCATION)?;
        let fd = rt.heap.export_dmabuf(a.dptr, a.size).map_err(|_| HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
        // SAFETY: both out-pointers are non-NULL, the caller's, per the API contract.
        unsafe {
            dmabuf.write_unaligned(fd);
            offset.write_unaligned(off);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn hsa_amd_portable_close_dmabuf(dmabuf: c_int) -> hsa_status_t {
    guarded(|| {
        initialized()?;
        // SAFETY: closing a descriptor the caller hands over.
        match unsafe { libc::close(dmabuf) } {
            0 => Ok(()),
            _ => Err(HSA_STATUS_ERROR_INVALID_ARGUMENT),
        }
    })
}

/// Not HSA: the devices this library owns, for the simulated HIP runtime that loaded it (the
/// same build of sim/gpu's `DeviceRuntime`, so the reference is shared between the two).
#[no_mangle]
pub extern "C" fn mrshim_sim_hsa_devices() -> *const DeviceRuntime {
    simhip::runtime::own().map_or(std::ptr::null(), |r| r as *const DeviceRuntime)
}
