//! HIP's types and values (hip_runtime_api.h / hip/driver_types.h of ROCm 5.7 and 6.x), only what
//! this runtime uses. The two majors differ in `hipMemoryType` and in what hipPointerGetAttributes
//! does with memory HIP does not know; the struct layout is the same.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

pub type hipError_t = u32;

pub const SUCCESS: hipError_t = 0;
pub const INVALID_VALUE: hipError_t = 1;
pub const OUT_OF_MEMORY: hipError_t = 2;
pub const NOT_INITIALIZED: hipError_t = 3;
pub const INVALID_MEMCPY_DIRECTION: hipError_t = 21;
pub const NO_DEVICE: hipError_t = 100;
pub const INVALID_DEVICE: hipError_t = 101;
pub const OPERATING_SYSTEM: hipError_t = 304;
pub const INVALID_HANDLE: hipError_t = 400;
pub const NOT_READY: hipError_t = 600;
pub const UNKNOWN: hipError_t = 999;

/// (code, hipGetErrorName, hipGetErrorString), NUL-terminated for C.
pub const ERRORS: &[(hipError_t, &str, &str)] = &[
    (SUCCESS, "hipSuccess\0", "no error\0"),
    (INVALID_VALUE, "hipErrorInvalidValue\0", "invalid argument\0"),
    (OUT_OF_MEMORY, "hipErrorOutOfMemory\0", "out of memory\0"),
    (NOT_INITIALIZED, "hipErrorNotInitialized\0", "initialization error\0"),
    (INVALID_MEMCPY_DIRECTION, "hipErrorInvalidMemcpyDirection\0", "invalid copy direction for memcpy\0"),
    (NO_DEVICE, "hipErrorNoDevice\0", "no ROCm-capable device is detected\0"),
    (INVALID_DEVICE, "hipErrorInvalidDevice\0", "invalid device ordinal\0"),
    (OPERATING_SYSTEM, "hipErrorOperatingSystem\0", "OS call failed or operation not supported on this OS\0"),
    (INVALID_HANDLE, "hipErrorInvalidHandle\0", "invalid resource handle\0"),
    (NOT_READY, "hipErrorNotReady\0", "device not ready\0"),
    (UNKNOWN, "hipErrorUnknown\0", "unknown error\0"),
];

// hipMemcpyKind (the same in 5 and 6)
pub const MEMCPY_HOST_TO_HOST: u32 = 0;
pub const MEMCPY_HOST_TO_DEVICE: u32 = 1;
pub const MEMCPY_DEVICE_TO_HOST: u32 = 2;
pub const MEMCPY_DEVICE_TO_DEVICE: u32 = 3;
pub const MEMCPY_DEFAULT: u32 = 4;

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
