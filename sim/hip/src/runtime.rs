//! The process-wide HIP runtime: initialised implicitly by the first call (as HIP is), on the
//! shared model of a CUDA-runtime-shaped API (sim/gpu `device_runtime`), with HIP's error codes
//! and pointer attributes.

use crate::abi::*;
use simgpu::config::Config;
use simgpu::device_runtime::DeviceRuntime;
use std::sync::OnceLock;

pub use simgpu::device_runtime::Target;

static RT: OnceLock<Result<DeviceRuntime, hipError_t>> = OnceLock::new();

pub use simgpu::codes::code as err;

/// The runtime, initialised at the first call; a bad environment is one stderr line and a
/// sticky hipErrorInvalidValue, no device hipErrorNoDevice.
pub fn rt() -> Result<&'static DeviceRuntime, hipError_t> {
    let r = RT.get_or_init(|| {
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
