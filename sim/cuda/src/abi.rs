//! The CUDA driver API's types and enum values (cuda.h, CUDA 12), only what this runtime uses.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

pub type CUresult = u32;
pub type CUdevice = i32;
pub type CUdeviceptr = u64;
/// Opaque handles: pointers to runtime-owned objects.
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_MAP_FAILED: CUresult = 205;
pub const CUDA_ERROR_OPERATING_SYSTEM: CUresult = 304;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// (code, cuGetErrorName, cuGetErrorString), NUL-terminated for C.
pub const ERRORS: &[(CUresult, &str, &str)] = &[
    (CUDA_SUCCESS, "CUDA_SUCCESS\0", "no error\0"),
    (CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED\0", "driver shutting down\0"),
    (CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE\0", "no CUDA-capable device is detected\0"),
    (CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE\0", "invalid device ordinal\0"),
    (CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT\0", "invalid device context\0"),
    (CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED\0", "mapping of buffer object failed\0"),
    (
        CUDA_ERROR_OPERATING_SYSTEM,
        "CUDA_ERROR_OPERATING_SYSTEM\0",
        "OS call failed or operation not supported on this OS\0",
    ),
    (CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE\0", "invalid resource handle\0"),
    (CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
    (CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY\0", "device not ready\0"),
    (CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED\0", "operation not permitted\0"),
    (CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED\0", "operation not supported\0"),
    (CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

pub fn error_name(e: CUresult) -> Option<*const c_char> {
    ERRORS.iter().find(|x| x.0 == e).map(|x| x.1.as_ptr().cast())
}

pub fn error_string(e: CUresult) -> Option<*const c_char> {
    ERRORS.iter().find(|x| x.0 == e).map(|x| x.2.as_ptr().cast())
}

// CUmemorytype
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;

// CUpointer_attribute
pub const CU_POINTER_ATTRIBUTE_CONTEXT: u32 = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: u32 = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: u32 = 3;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: u32 = 4;
pub const CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: u32 = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: u32 = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: u32 = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: u32 = 9;
pub const CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: u32 = 10;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: u32 = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: u32 = 12;
pub const CU_POINTER_ATTRIBUTE_MAPPED: u32 = 13;
pub const CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: u32 = 14;
pub const CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: u32 = 15;

// CUdevice_attribute (the ones with simulated values; others are CUDA_ERROR_INVALID_VALUE)
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: u32 = 1;
pub const CU_DEVICE_ATTRIBUTE_WARP_SIZE: u32 = 10;
pub const CU_DEVICE_ATTRIBUTE_CLOCK_RATE: u32 = 13;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: u32 = 16;
pub const CU_DEVICE_ATTRIBUTE_INTEGRATED: u32 = 18;
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: u32 = 19;
pub const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: u32 = 33;
pub const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: u32 = 34;
pub const CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: u32 = 40;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: u32 = 41;
pub const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: u32 = 50;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: u32 = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: u32 = 76;
pub const CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: u32 = 83;
pub const CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: u32 = 102;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: u32 = 116;
pub const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: u32 = 124;

// Stream flags and special handles
pub const CU_STREAM_NON_BLOCKING: u32 = 0x1;
pub const CU_STREAM_LEGACY: usize = 0x1;
pub const CU_STREAM_PER_THREAD: usize = 0x2;

// CUmemRangeHandleType
pub const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: u32 = 0x1;

/// What cuDriverGetVersion reports: 12.4 (cuMemGetHandleForAddressRange needs ≥ 11.7).
pub const DRIVER_VERSION: i32 = 12040;
