//! The process-wide HIP runtime: initialised implicitly by the first call (as HIP is), on the
//! shared model of a CUDA-runtime-shaped API (sim/gpu `device_runtime`), with HIP's error codes
//! and pointer attributes.

use crate::abi::*;
use simgpu::config::Config;
use simgpu::device_runtime::DeviceRuntime;
use std::sync::OnceLock;

pub use simgpu::device_runtime::Target;

/// The devices of this process: HSA's when the simulated libhsa-runtime64.so.1 is on the library
/// path (as on real ROCm, HIP loads HSA and its memory is HSA's memory), else our own.
static RT: OnceLock<Result<&'static DeviceRuntime, hipError_t>> = OnceLock::new();
static OWN: OnceLock<Result<DeviceRuntime, hipError_t>> = OnceLock::new();

pub use simgpu::codes::code as err;

/// The runtime, initialised at the first call; a bad environment is one stderr line and a
/// sticky hipErrorInvalidValue, no device hipErrorNoDevice.
pub fn rt() -> Result<&'static DeviceRuntime, hipError_t> {
    *RT.get_or_init(|| match hsa::devices() {
        Some(r) => Ok(r),
        None => own(),
    })
}

/// Devices owned by this library (the simulated HSA library's are made by this same call).
pub fn own() -> Result<&'static DeviceRuntime, hipError_t> {
    let r = OWN.get_or_init(|| {
        let cfg = Config::from_env("mrshim-sim-hip").map_err(|e| {
            eprintln!("{e}");
            INVALID_VALUE
        })?;
        if cfg.gpus == 0 {
            return Err(NO_DEVICE);
        }
        Ok(DeviceRuntime::new(cfg.gpus, cfg.mem))
    });
    r.as_ref().map_err(|e| *e)
}

mod hsa {
    use simgpu::device_runtime::DeviceRuntime;
    use std::ffi::c_void;

    /// Loads libhsa-runtime64.so.1 (kept loaded, as HIP keeps it), hsa_init()s it and takes its
    /// devices; None when it is not on the library path or is not the simulator's.
    pub fn devices() -> Option<&'static DeviceRuntime> {
        // SAFETY: dlopen of a NUL-terminated name; the handle is never closed.
        let h = unsafe { libc::dlopen(c"libhsa-runtime64.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return None;
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: dlsym on a live handle with a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let (init, devices) = (sym(c"hsa_init")?, sym(c"mrshim_sim_hsa_devices")?);
        // SAFETY: the simulated library's functions, with the signatures it defines (sim/hsa).
        unsafe {
            let init: extern "C" fn() -> u32 = std::mem::transmute::<*mut c_void, _>(init);
            let devices: extern "C" fn() -> *const DeviceRuntime = std::mem::transmute::<*mut c_void, _>(devices);
            if init() != 0 {
                return None;
            }
            // The runtime lives as long as the library, which is never unloaded.
            devices().as_ref()
        }
    }
}

/// hipPointerGetAttributes' answer for `p`.
pub fn attributes(rt: &DeviceRuntime, abi: &Abi, p: u64) -> Result<PointerAttribute, hipError_t> {
    let none = std::ptr::null_mut();
    match rt.heap.find(p) {
        Some(a) => Ok(PointerAttribute {
            memory_type: abi.memory_type_device,
            device: a.device,
            device_pointer: p as *mut _,
            host_pointer: none,
            is_managed: 0,
            allocation_flags: 0,
        }),
        None => abi
            .memory_type_unregistered
            .map(|t| PointerAttribute {
                memory_type: t,
                device: -1,
                device_pointer: none,
                host_pointer: none,
                is_managed: 0,
                allocation_flags: 0,
            })
            .ok_or(INVALID_VALUE),
    }
}
