//! HIP's side of the shared C-API bodies (sim/gpu `capi`): error codes, the runtime, hipMemcpyKind,
//! and what differs per ROCm major (versions, hipPointerGetAttributes).
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::abi::*;
use crate::runtime::{attributes, direction, err, rt};
use simgpu::device_runtime::{DeviceRuntime, Direction};
use simgpu::Fault;
use std::ffi::{c_char, c_int};

pub use simgpu::capi::*;

pub struct Hip;

impl Api for Hip {
    const WHO: &'static str = "mrshim-sim-hip";
    const INVALID_VALUE: u32 = INVALID_VALUE;
    const NOT_READY: u32 = NOT_READY;
    const UNKNOWN: u32 = UNKNOWN;
    fn rt() -> Result<&'static DeviceRuntime, u32> {
        rt()
    }
    fn code(f: Fault) -> u32 {
        err(f)
    }
    fn direction(kind: u32) -> Result<Direction, u32> {
        direction(kind)
    }
}

pub fn version(abi: &Abi, v: *mut c_int) -> hipError_t {
    ffi::<Hip>(|| out::<Hip, _>(v, abi.version))
}

pub fn error_text(e: hipError_t, long: bool) -> *const c_char {
    let row = ERRORS.iter().find(|x| x.0 == e).unwrap_or(&ERRORS[ERRORS.len() - 1]);
    (if long { row.2 } else { row.1 }).as_ptr().cast()
}

pub fn pointer_attributes(abi: &Abi, a: *mut PointerAttribute, p: u64) -> hipError_t {
    ffi::<Hip>(|| {
        if a.is_null() {
            return Err(INVALID_VALUE);
        }
        out::<Hip, _>(a, attributes(rt()?, abi, p)?)
    })
}
