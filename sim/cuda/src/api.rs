//! Every exported function of the simulated libcuda.so.1, in one file so the ABI surface is
//! reviewable at a glance. Each one catches panics and returns a CUresult.

use crate::abi::*;
use crate::runtime::cu;
use crate::runtime::{self, rt};
use crate::stream::Op;
use crate::{abi, attrs, context};
use simgpu::{heap::Heap, Fault};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn ffi(f: impl FnOnce() -> Result<(), CUresult>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("mrshim-sim-cuda: internal error (panic); returning CUDA_ERROR_UNKNOWN");
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// Stores `v` through a caller's out-pointer; NULL is CUDA_ERROR_INVALID_VALUE.
fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL out-pointer the caller passed for a T, per the API contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Makes something and hands it out through `p`, checked first: with a NULL `p` nothing is made
/// (there would be no handle to free it with).
fn out_new<T>(p: *mut T, make: impl FnOnce() -> Result<T, CUresult>) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(p, make()?)
}

/// An asynchronous copy or set on stream `s`: `op` is checked against the heap now (its failure
/// is the call's), then runs as the stream's next work.
fn on_stream(s: CUstream, op: impl FnOnce(&Heap) -> Result<Op, Fault>) -> CUresult {
    ffi(|| {
        let r = rt()?;
        let t = r.target(s as usize)?;
        r.run(t, op(&r.heap).map_err(cu)?)
    })
}

/// Copies `s` into a caller's buffer of `len` bytes, truncated and NUL-terminated.
fn out_str(buf: *mut c_char, len: c_int, s: &str) -> Result<(), CUresult> {
    if buf.is_null() || len <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: the caller's buffer holds `len` bytes; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    Ok(())
}

// ---- initialisation, version, errors ----

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    ffi(|| {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match runtime::init() {
            CUDA_SUCCESS => Ok(()),
            e => Err(e),
        }
    })
}

#[no_mangle]
pub extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    ffi(|| out(v, DRIVER_VERSION))
}

#[no_mangle]
pub extern "C" fn cuGetErrorName(e: CUresult, s: *mut *const c_char) -> CUresult {
    ffi(|| match abi::error_name(e) {
        Some(p) => out(s, p),
        None => out(s, std::ptr::null()).and(Err(CUDA_ERROR_INVALID_VALUE)),
    })
}

#[no_mangle]
pub extern "C" fn cuGetErrorString(e: CUresult, s: *mut *const c_char) -> CUresult {
    ffi(|| match abi::error_string(e) {
        Some(p) => out(s, p),
        None => out(s, std::ptr::null()).and(Err(CUDA_ERROR_INVALID_VALUE)),
    })
}

// ---- devices ----

#[no_mangle]
pub extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    ffi(|| out(n, rt()?.devices.len() as c_int))
}

#[no_mangle]
pub extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    ffi(|| {
        rt()?.device(ordinal)?;
        out(dev, ordinal)
    })
}

#[no_mangle]
pub extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    ffi(|| out_str(name, len, &rt()?.device(dev)?.name))
}

#[no_mangle]
pub extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    ffi(|| out(bytes, rt()?.device(dev)?.total as usize))
}

#[no_mangle]
pub extern "C" fn cuDeviceGetPCIBusId(bus: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    ffi(|| {
        rt()?.device(dev)?;
        out_str(bus, len, &format!("0000:{:02X}:00.0", runtime::pci_bus(dev)))
    })
}

#[no_mangle]
pub extern "C" fn cuDeviceGetAttribute(v: *mut c_int, attr: c_uint, dev: CUdevice) -> CUresult {
    ffi(|| {
        rt()?.device(dev)?;
        let x = match attr {
            CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
            CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
            CU_DEVICE_ATTRIBUTE_CLOCK_RATE => 1_755_000,
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
            CU_DEVICE_ATTRIBUTE_INTEGRATED => 0,
            CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY => 1,
            CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => runtime::pci_bus(dev),
            CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID | CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID => 0,
            CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => 2,
            CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
            CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY => 0,
            CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => 0,
            CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED => 1,
            CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED => 1,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        out(v, x)
    })
}

// ---- contexts ----

#[no_mangle]
pub extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, _flags: c_uint, dev: CUdevice) -> CUresult {
    ffi(|| {
        out_new(pctx, || {
            let h = rt()?.create_ctx(dev)?;
            context::push(h);
            Ok(h as CUcontext)
        })
    })
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    ffi(|| rt()?.destroy_ctx(ctx as usize))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    ffi(|| {
        let r = rt()?;
        if !ctx.is_null() {
            r.ctx(ctx as usize)?;
        }
        context::set_current(ctx as usize);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    ffi(|| {
        rt()?;
        out(pctx, context::current().unwrap_or(0) as CUcontext)
    })
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    ffi(|| {
        rt()?.ctx(ctx as usize)?;
        context::push(ctx as usize);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    ffi(|| {
        rt()?;
        let h = context::current().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        context::pop();
        if !pctx.is_null() {
            out(pctx, h as CUcontext)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    ffi(|| out(dev, rt()?.current()?.1.device))
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    ffi(|| {
        let (_, c) = rt()?.current()?;
        c.streams().iter().for_each(|s| s.synchronize());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    ffi(|| {
        let d = rt()?.device(dev)?;
        out(pctx, std::sync::Arc::as_ptr(&d.primary) as CUcontext)?;
        d.primary.retained.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    ffi(|| {
        let d = rt()?.device(dev)?;
        d.primary
            .retained
            .fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| {
                n.checked_sub(1)
            })
            .map(|_| ())
            .map_err(|_| CUDA_ERROR_INVALID_CONTEXT)
    })
}

/// The pre-11.0 name; same signature.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    cuDevicePrimaryCtxRelease_v2(dev)
}

// ---- memory ----

#[no_mangle]
pub extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    ffi(|| out_new(dptr, || rt()?.alloc(bytes as u64)))
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    ffi(|| rt()?.free(dptr))
}

#[no_mangle]
pub extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    ffi(|| {
        let r = rt()?;
        let (_, c) = r.current()?;
        r.device(c.device)?;
        let (free_bytes, total_bytes) = r.heap.info(c.device);
        out(free, free_bytes as usize)?;
        out(total, total_bytes as usize)
    })
}

#[no_mangle]
pub extern "C" fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, dptr: CUdeviceptr) -> CUresult {
    ffi(|| {
        let a = rt()?.find(dptr).ok_or(CUDA_ERROR_NOT_FOUND)?;
        if !base.is_null() {
            out(base, a.dptr)?;
        }
        if !size.is_null() {
            out(size, a.size as usize)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) -> CUresult {
    ffi(|| {
        let r = rt()?;
        r.run(runtime::Target::Legacy, r.heap.htod(dst, src as usize, n as u64).map_err(cu)?)
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    ffi(|| {
        let r = rt()?;
        r.run(runtime::Target::Legacy, r.heap.dtoh(dst as usize, src, n as u64).map_err(cu)?)
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    ffi(|| {
        let r = rt()?;
        r.run(runtime::Target::Legacy, r.heap.dtod(dst, src, n as u64).map_err(cu)?)
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) -> CUresult {
    ffi(|| {
        let r = rt()?;
        r.run(runtime::Target::Legacy, r.heap.memset8(dst, v, n as u64).map_err(cu)?)
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) -> CUresult {
    on_stream(s, |h| h.htod(dst, src as usize, n as u64))
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) -> CUresult {
    on_stream(s, |h| h.dtoh(dst as usize, src, n as u64))
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) -> CUresult {
    on_stream(s, |h| h.dtod(dst, src, n as u64))
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: CUstream) -> CUresult {
    on_stream(s, |h| h.memset8(dst, v, n as u64))
}

/// dmabuf export of a whole allocation (or a prefix of it): `dptr` must be where the
/// allocation starts, `size` a multiple of the page size no larger than the allocation.
/// The fd is a dup of the allocation's memfd (offset 0 = allocation start).
#[no_mangle]
pub extern "C" fn cuMemGetHandleForAddressRange(
    handle: *mut c_void,
    dptr: CUdeviceptr,
    size: usize,
    kind: c_uint,
    flags: c_ulonglong,
) -> CUresult {
    ffi(|| {
        let r = rt()?;
        // flags: 0, or CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (1), meaningless here.
        if handle.is_null() || kind != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags > 1 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let fd = r.heap.export_dmabuf(dptr, size as u64).map_err(cu)?;
        out(handle.cast::<c_int>(), fd)
    })
}

#[no_mangle]
pub extern "C" fn cuPointerGetAttribute(data: *mut c_void, attr: c_uint, ptr: CUdeviceptr) -> CUresult {
    ffi(|| {
        let r = rt()?;
        if data.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = r.find(ptr);
        let v = attrs::single(attr, a.as_deref(), ptr)?;
        if attr == CU_POINTER_ATTRIBUTE_DEVICE_POINTER {
            r.current()?; // "If there is no current CUcontext then CUDA_ERROR_INVALID_CONTEXT"
        }
        // SAFETY: `data` points to a buffer of the attribute's documented type.
        unsafe { v.write(data) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuPointerGetAttributes(
    n: c_uint,
    attrs_: *const c_uint,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    ffi(|| {
        let r = rt()?;
        if n == 0 || attrs_.is_null() || data.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = r.find(ptr);
        // SAFETY: the caller passes an array of `n` attributes.
        let list = unsafe { std::slice::from_raw_parts(attrs_, n as usize) };
        // SAFETY: the caller passes an array of `n` data pointers.
        let outs = unsafe { std::slice::from_raw_parts(data, n as usize) };
        let vals = list.iter().map(|&at| attrs::multi(at, a.as_deref(), ptr)).collect::<Result<Vec<_>, _>>()?;
        if outs.iter().any(|p| p.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for (v, p) in vals.into_iter().zip(outs) {
            // SAFETY: each data pointer is a buffer of its attribute's type.
            unsafe { v.write(*p) };
        }
        Ok(())
    })
}

// ---- streams ----

#[no_mangle]
pub extern "C" fn cuStreamCreate(ps: *mut CUstream, flags: c_uint) -> CUresult {
    ffi(|| out_new(ps, || Ok(rt()?.create_stream(flags)? as CUstream)))
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(s: CUstream) -> CUresult {
    ffi(|| rt()?.destroy_stream(s as usize))
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(s: CUstream) -> CUresult {
    ffi(|| {
        let r = rt()?;
        match r.target(s as usize)? {
            runtime::Target::Legacy => r.sync_blocking(),
            runtime::Target::PerThread => {}
            runtime::Target::Queue(q) => q.synchronize(),
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamQuery(s: CUstream) -> CUresult {
    ffi(|| match rt()?.target(s as usize)? {
        runtime::Target::Queue(q) if !q.idle() => Err(CUDA_ERROR_NOT_READY),
        _ => Ok(()),
    })
}

#[no_mangle]
pub extern "C" fn cuStreamGetFlags(s: CUstream, flags: *mut c_uint) -> CUresult {
    ffi(|| match rt()?.target(s as usize)? {
        runtime::Target::Queue(q) => out(flags, q.flags),
        _ => out(flags, 0),
    })
}

/// Test-only (not CUDA): occupies stream `s` for `ms` milliseconds, like a long-running
/// kernel. The NULL/legacy/per-thread streams are refused (CUDA_ERROR_INVALID_VALUE).
#[no_mangle]
pub extern "C" fn mrshim_sim_cuda_stream_busy(s: CUstream, ms: c_uint) -> CUresult {
    ffi(|| match rt()?.target(s as usize)? {
        runtime::Target::Queue(q) => {
            q.submit(Box::new(move || std::thread::sleep(std::time::Duration::from_millis(ms.into())))).map_err(cu)
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}
