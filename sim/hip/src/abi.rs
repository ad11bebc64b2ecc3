//! HIP's types and values (hip_runtime_api.h / hip/driver_types.h of ROCm 5.7 and 6.x), only what
//! this runtime uses. The two majors differ in `hipMemoryType` and in what hipPointerGetAttributes
//! does with memory HIP does not know; the struct layout is the same.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

pub type hipError_t = u32;

// Error codes and hipMemcpyKind: the CUDA runtime's numbering, in sim/gpu's `codes`.
pub use simgpu::codes::*;

/// hipMemRangeHandleTypeDmaBufFd.
pub const MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: u32 = 1;

/// hipPointerAttribute_t: `type` (ROCm 5 also names it `memoryType`), device, devicePointer,
/// hostPointer, isManaged, allocationFlags — 32 bytes, the same offsets in ROCm 5 and 6.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttribute {
    pub memory_type: u32,
    pub device: i32,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
    pub is_managed: i32,
    pub allocation_flags: u32,
}

/// What differs between the majors.
#[derive(Debug)]
pub struct Abi {
    pub major: u32,
    /// hipRuntimeGetVersion / hipDriverGetVersion: major·10⁷ + minor·10⁵ + build.
    pub version: i32,
    pub memory_type_host: u32,
    pub memory_type_device: u32,
    /// ROCm 6+: hipMemoryTypeUnregistered, returned with hipSuccess for memory HIP does not know.
    /// ROCm 5 has no such value and fails the query with hipErrorInvalidValue.
    pub memory_type_unregistered: Option<u32>,
}

/// ROCm 5.7.1: hipMemoryTypeHost = 0, Device = 1, Array = 2, Unified = 3, Managed = 4.
pub const ROCM5: Abi =
    Abi { major: 5, version: 50731921, memory_type_host: 0, memory_type_device: 1, memory_type_unregistered: None };

/// ROCm 6.x: hipMemoryTypeUnregistered = 0, Host = 1, Device = 2, Managed = 3, Array = 10,
/// Unified = 11.
pub const ROCM6: Abi =
    Abi { major: 6, version: 60241134, memory_type_host: 1, memory_type_device: 2, memory_type_unregistered: Some(0) };
