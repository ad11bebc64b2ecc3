//! A simulated AMD GPU behind the HIP runtime API, on the shared memory model of sim/gpu (device
//! memory the CPU cannot touch, in-order streams). Two cdylibs export it: `rocm5/`
//! (`libamdhip64.so.5`) and `rocm6/` (`libamdhip64.so.6`), each through [`exports!`] with its
//! own [`abi::Abi`]. See docs/sim-gpu.md.

pub mod abi;
#[doc(hidden)]
pub mod api;
pub mod runtime;

/// Defines the exported HIP functions of one ROCm major (`$abi`: an [`abi::Abi`] constant).
#[macro_export]
macro_rules! exports {
    ($abi:path) => {
        use std::ffi::{c_char, c_int, c_uint, c_void};
        use $crate::abi::{hipError_t, PointerAttribute};
        use $crate::api;

        #[no_mangle]
        pub extern "C" fn hipInit(flags: c_uint) -> hipError_t {
            api::init::<api::Hip>(flags)
        }
        #[no_mangle]
        pub extern "C" fn hipRuntimeGetVersion(v: *mut c_int) -> hipError_t {
            api::version(&$abi, v)
        }
        #[no_mangle]
        pub extern "C" fn hipDriverGetVersion(v: *mut c_int) -> hipError_t {
            api::version(&$abi, v)
        }
        #[no_mangle]
        pub extern "C" fn hipGetErrorName(e: hipError_t) -> *const c_char {
            api::error_text(e, false)
        }
        #[no_mangle]
        pub extern "C" fn hipGetErrorString(e: hipError_t) -> *const c_char {
            api::error_text(e, true)
        }
        #[no_mangle]
        pub extern "C" fn hipGetDeviceCount(n: *mut c_int) -> hipError_t {
            api::device_count::<api::Hip>(n)
        }
        #[no_mangle]
        pub extern "C" fn hipGetDevice(d: *mut c_int) -> hipError_t {
            api::get_device::<api::Hip>(d)
        }
        #[no_mangle]
        pub extern "C" fn hipSetDevice(d: c_int) -> hipError_t {
            api::set_device::<api::Hip>(d)
        }
        #[no_mangle]
        pub extern "C" fn hipDeviceSynchronize() -> hipError_t {
            api::device_synchronize::<api::Hip>()
        }
        #[no_mangle]
        pub extern "C" fn hipMalloc(p: *mut *mut c_void, n: usize) -> hipError_t {
            api::malloc::<api::Hip>(p, n)
        }
        #[no_mangle]
        pub extern "C" fn hipFree(p: *mut c_void) -> hipError_t {
            api::free::<api::Hip>(p)
        }
        #[no_mangle]
        pub extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> hipError_t {
            api::mem_info::<api::Hip>(free, total)
        }
        #[no_mangle]
        pub extern "C" fn hipMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_uint) -> hipError_t {
            api::memcpy::<api::Hip>(dst as usize, src as usize, n, kind, 0)
        }
        #[no_mangle]
        pub extern "C" fn hipMemcpyAsync(
            dst: *mut c_void,
            src: *const c_void,
            n: usize,
            kind: c_uint,
            s: *mut c_void,
        ) -> hipError_t {
            api::memcpy::<api::Hip>(dst as usize, src as usize, n, kind, s as usize)
        }
        #[no_mangle]
        pub extern "C" fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, n: usize) -> hipError_t {
            api::memcpy::<api::Hip>(dst as usize, src as usize, n, $crate::abi::MEMCPY_HOST_TO_DEVICE, 0)
        }
        #[no_mangle]
        pub extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, n: usize) -> hipError_t {
            api::memcpy::<api::Hip>(dst as usize, src as usize, n, $crate::abi::MEMCPY_DEVICE_TO_HOST, 0)
        }
        #[no_mangle]
        pub extern "C" fn hipMemcpyHtoDAsync(
            dst: *mut c_void,
            src: *mut c_void,
            n: usize,
            s: *mut c_void,
        ) -> hipError_t {
            api::memcpy::<api::Hip>(dst as usize, src as usize, n, $crate::abi::MEMCPY_HOST_TO_DEVICE, s as usize)
        }
        #[no_mangle]
        pub extern "C" fn hipMemcpyDtoHAsync(
            dst: *mut c_void,
            src: *mut c_void,
            n: usize,
            s: *mut c_void,
        ) -> hipError_t {
            api::memcpy::<api::Hip>(dst as usize, src as usize, n, $crate::abi::MEMCPY_DEVICE_TO_HOST, s as usize)
        }
        #[no_mangle]
        pub extern "C" fn hipStreamCreate(s: *mut *mut c_void) -> hipError_t {
            api::stream_create::<api::Hip>(s, 0)
        }
        #[no_mangle]
        pub extern "C" fn hipStreamCreateWithFlags(s: *mut *mut c_void, flags: c_uint) -> hipError_t {
            api::stream_create::<api::Hip>(s, flags)
        }
        #[no_mangle]
        pub extern "C" fn hipStreamDestroy(s: *mut c_void) -> hipError_t {
            api::stream_destroy::<api::Hip>(s as usize)
        }
        #[no_mangle]
        pub extern "C" fn hipStreamSynchronize(s: *mut c_void) -> hipError_t {
            api::stream_synchronize::<api::Hip>(s as usize)
        }
        #[no_mangle]
        pub extern "C" fn hipStreamQuery(s: *mut c_void) -> hipError_t {
            api::stream_query::<api::Hip>(s as usize)
        }
        #[no_mangle]
        pub extern "C" fn hipPointerGetAttributes(a: *mut PointerAttribute, p: *const c_void) -> hipError_t {
            api::pointer_attributes(&$abi, a, p as u64)
        }
        #[no_mangle]
        pub extern "C" fn hipMemGetAddressRange(
            base: *mut *mut c_void,
            size: *mut usize,
            p: *mut c_void,
        ) -> hipError_t {
            api::address_range::<api::Hip>(base.cast(), size, p as u64)
        }
        /// Test-only (not HIP): occupies stream `s` for `ms` milliseconds, like a long kernel.
        #[no_mangle]
        pub extern "C" fn mrshim_sim_hip_stream_busy(s: *mut c_void, ms: c_uint) -> hipError_t {
            api::stream_busy::<api::Hip>(s as usize, ms)
        }
    };
}

/// hipMemGetHandleForAddressRange: ROCm 6 only (it is not in ROCm 5's runtime).
#[macro_export]
macro_rules! exports_rocm6 {
    () => {
        #[no_mangle]
        pub extern "C" fn hipMemGetHandleForAddressRange(
            handle: *mut std::ffi::c_void,
            p: *mut std::ffi::c_void,
            size: usize,
            kind: std::ffi::c_uint,
            flags: std::ffi::c_ulonglong,
        ) -> $crate::abi::hipError_t {
            $crate::api::export_dmabuf::<$crate::api::Hip>(handle.cast(), p as u64, size, kind, flags)
        }
    };
}
