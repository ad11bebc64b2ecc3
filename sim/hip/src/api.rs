//! HIP's side of the shared C-API bodies (sim/gpu `capi`): error codes, the runtime, hipMemcpyKind,
//! and what differs per ROCm major (versions, hipPointerGetAttributes).
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::abi::*;
use crate::runtime::{attributes, rt};
use simgpu::device_runtime::DeviceRuntime;
use std::ffi::{c_char, c_int};

pub use simgpu::capi::*;

pub struct Hip;

impl Api for Hip {
    const WHO: &'static str = "mrshim-sim-hip";
    fn rt() -> Result<&'static DeviceRuntime, u32> {
        rt()
    }
}

pub fn version(abi: &Abi, v: *mut c_int) -> hipError_t {
    ffi::<Hip>(|| out::<Hip, _>(v, abi.version))
}

pub fn error_text(e: hipError_t, long: bool) -> *const c_char {
    simgpu::codes::error_text(simgpu::codes::Names::Hip, e, long)
}

pub fn pointer_attributes(abi: &Abi, a: *mut PointerAttribute, p: u64) -> hipError_t {
    ffi::<Hip>(|| {
        if a.is_null() {
            return Err(INVALID_VALUE);
        }
        out::<Hip, _>(a, attributes(rt()?, abi, p)?)
    })
}
