//! A simulated MetaX GPU behind the MACA runtime API (`libmcruntime.so`), on the shared memory
//! model of sim/gpu. `MRSHIM_SIM_MACA_ABI=assumed|enum|layout` chooses whether its unpublished
//! ABI details (mcMemoryType values, mcPointerAttribute_t layout) match what mrshim's MACA engine
//! assumes — so the engine's self-test and its refusal are testable. See docs/sim-gpu.md.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod abi;

use abi::*;
use simgpu::capi::{self, ffi, out, Api};
use simgpu::config::Config;
use simgpu::device_runtime::DeviceRuntime;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

struct Runtime {
    rt: DeviceRuntime,
    abi: Variant,
}

static RT: OnceLock<Result<Runtime, mcError_t>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime, mcError_t> {
    RT.get_or_init(|| {
        let say = |e: String| {
            eprintln!("{e}");
            INVALID_VALUE
        };
        let cfg = Config::from_env("mrshim-sim-maca").map_err(|e| say(e.to_string()))?;
        let abi = Variant::parse(std::env::var("MRSHIM_SIM_MACA_ABI").ok().as_deref()).map_err(say)?;
        if cfg.gpus == 0 {
            return Err(NO_DEVICE);
        }
        Ok(Runtime { rt: DeviceRuntime::new(cfg.gpus, cfg.mem), abi })
    })
    .as_ref()
    .map_err(|e| *e)
}

/// MACA's side of the shared C-API bodies.
pub struct Maca;

impl Api for Maca {
    const WHO: &'static str = "mrshim-sim-maca";
    fn rt() -> Result<&'static DeviceRuntime, u32> {
        runtime().map(|r| &r.rt)
    }
}

/// MACA 3.x-style version numbers (major·1000 + minor·10).
const VERSION: c_int = 3050;

#[no_mangle]
pub extern "C" fn mcInit(flags: c_uint) -> mcError_t {
    capi::init::<Maca>(flags)
}
#[no_mangle]
pub extern "C" fn mcRuntimeGetVersion(v: *mut c_int) -> mcError_t {
    ffi::<Maca>(|| out::<Maca, _>(v, VERSION))
}
#[no_mangle]
pub extern "C" fn mcDriverGetVersion(v: *mut c_int) -> mcError_t {
    ffi::<Maca>(|| out::<Maca, _>(v, VERSION))
}
#[no_mangle]
pub extern "C" fn mcGetErrorName(e: mcError_t) -> *const c_char {
    simgpu::codes::error_text(simgpu::codes::Names::Maca, e, false)
}
#[no_mangle]
pub extern "C" fn mcGetErrorString(e: mcError_t) -> *const c_char {
    simgpu::codes::error_text(simgpu::codes::Names::Maca, e, true)
}
#[no_mangle]
pub extern "C" fn mcGetDeviceCount(n: *mut c_int) -> mcError_t {
    capi::device_count::<Maca>(n)
}
#[no_mangle]
pub extern "C" fn mcGetDevice(d: *mut c_int) -> mcError_t {
    capi::get_device::<Maca>(d)
}
#[no_mangle]
pub extern "C" fn mcSetDevice(d: c_int) -> mcError_t {
    capi::set_device::<Maca>(d)
}
#[no_mangle]
pub extern "C" fn mcDeviceSynchronize() -> mcError_t {
    capi::device_synchronize::<Maca>()
}
#[no_mangle]
pub extern "C" fn mcMalloc(p: *mut *mut c_void, n: usize) -> mcError_t {
    capi::malloc::<Maca>(p, n)
}
#[no_mangle]
pub extern "C" fn mcFree(p: *mut c_void) -> mcError_t {
    capi::free::<Maca>(p)
}
#[no_mangle]
pub extern "C" fn mcMemGetInfo(free: *mut usize, total: *mut usize) -> mcError_t {
    capi::mem_info::<Maca>(free, total)
}
#[no_mangle]
pub extern "C" fn mcMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_uint) -> mcError_t {
    capi::memcpy::<Maca>(dst as usize, src as usize, n, kind, 0)
}
#[no_mangle]
pub extern "C" fn mcMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    kind: c_uint,
    s: *mut c_void,
) -> mcError_t {
    capi::memcpy::<Maca>(dst as usize, src as usize, n, kind, s as usize)
}
#[no_mangle]
pub extern "C" fn mcStreamCreate(s: *mut *mut c_void) -> mcError_t {
    capi::stream_create::<Maca>(s, 0)
}
#[no_mangle]
pub extern "C" fn mcStreamCreateWithFlags(s: *mut *mut c_void, flags: c_uint) -> mcError_t {
    capi::stream_create::<Maca>(s, flags)
}
#[no_mangle]
pub extern "C" fn mcStreamDestroy(s: *mut c_void) -> mcError_t {
    capi::stream_destroy::<Maca>(s as usize)
}
#[no_mangle]
pub extern "C" fn mcStreamSynchronize(s: *mut c_void) -> mcError_t {
    capi::stream_synchronize::<Maca>(s as usize)
}
#[no_mangle]
pub extern "C" fn mcStreamQuery(s: *mut c_void) -> mcError_t {
    capi::stream_query::<Maca>(s as usize)
}
#[no_mangle]
pub extern "C" fn mcMemGetAddressRange(base: *mut u64, size: *mut usize, p: u64) -> mcError_t {
    capi::address_range::<Maca>(base, size, p)
}
#[no_mangle]
pub extern "C" fn mcMemGetHandleForAddressRange(
    handle: *mut c_void,
    p: u64,
    size: usize,
    kind: c_uint,
    flags: c_ulonglong,
) -> mcError_t {
    capi::export_dmabuf::<Maca>(handle.cast(), p, size, kind, flags)
}

/// mcPointerGetAttributes: device memory is mcMemoryTypeDevice on its device; other memory is
/// mcSuccess with mcMemoryTypeUnregistered (0), device -1 — in the layout and numbering
/// `MRSHIM_SIM_MACA_ABI` selects.
#[no_mangle]
pub extern "C" fn mcPointerGetAttributes(a: *mut c_void, p: *const c_void) -> mcError_t {
    ffi::<Maca>(|| {
        let r = runtime()?;
        if a.is_null() {
            return Err(INVALID_VALUE);
        }
        let (_, device_type) = r.abi.memory_types();
        let (t, dev, dptr) = match r.rt.heap.find(p as u64) {
            Some(al) => (device_type, al.device, p as *mut c_void),
            None => (0, -1, std::ptr::null_mut()),
        };
        let host = std::ptr::null_mut();
        match r.abi {
            Variant::Layout => out::<Maca, _>(
                a.cast(),
                PointerAttributeSwapped { device: dev, memory_type: t, device_pointer: dptr, host_pointer: host },
            ),
            _ => out::<Maca, _>(
                a.cast(),
                PointerAttribute { memory_type: t, device: dev, device_pointer: dptr, host_pointer: host },
            ),
        }
    })
}

/// Test-only (not MACA): occupies stream `s` for `ms` milliseconds, like a long kernel.
#[no_mangle]
pub extern "C" fn mrshim_sim_maca_stream_busy(s: *mut c_void, ms: c_uint) -> mcError_t {
    capi::stream_busy::<Maca>(s as usize, ms)
}
