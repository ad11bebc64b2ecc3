//! The CUDA copy engine: libcuda.so.1 if the application loaded it (RTLD_NOLOAD, never linked
//! or loaded by the shim); cuMemcpyDtoHAsync_v2 / cuMemcpyHtoDAsync_v2 on the shim's own
//! CU_STREAM_NON_BLOCKING stream + cuStreamSynchronize, in the pointer's context. That stream
//! never waits behind the application's work on the legacy stream, so a copy cannot deadlock
//! against a long-running kernel. The other engines: host (crates/bounce), HIP and MACA
//! (rtapi.rs); docs/bounce.md.

use super::abi::{self, Attrs, Family, Observed};
use super::report::report_selftest;
use mrshim_bounce::CopyEngine;
use std::ffi::{c_int, c_uint, c_void};

type CuPtrAttr = unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int;
type CuCopy = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;
type CuCopyH = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> c_int;

/// The CUDA driver API entry points the shim uses.
pub struct Cuda {
    pointer_get_attribute: CuPtrAttr,
    ctx_push: unsafe extern "C" fn(*mut c_void) -> c_int,
    ctx_pop: unsafe extern "C" fn(*mut *mut c_void) -> c_int,
    ctx_get_device: unsafe extern "C" fn(*mut c_int) -> c_int,
    stream_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int,
    stream_sync: unsafe extern "C" fn(*mut c_void) -> c_int,
    dtoh: CuCopy,
    htod: CuCopyH,
    get_handle: unsafe extern "C" fn(*mut c_void, u64, usize, c_int, u64) -> c_int,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int,
    mem_free: unsafe extern "C" fn(u64) -> c_int,
    /// The self-test's verdict (MRSHIM_COPY_SELFTEST=on), run once.
    trusted: std::sync::OnceLock<Result<(), String>>,
}

const CU_POINTER_ATTRIBUTE_CONTEXT: c_int = 1;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_int = 11;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;
const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;

fn sym<T: Copy>(h: *mut c_void, name: &std::ffi::CStr) -> Option<T> {
    // Our own dlsym export forwards real handles to glibc.
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: T is the pointer-sized function type of this CUDA symbol.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy(&p) })
}

/// Looked up at first use (fork-aware: see `after_fork_child`).
static CUDA: mrshim_forklock::ForkOnce<Option<Cuda>> = mrshim_forklock::ForkOnce::new();

/// In a forked child: a lookup a parent thread had in progress is started again.
///
/// # Safety
/// Only in a forked child, from its atfork child handler: the child has one thread, and no
/// guard of that thread is alive.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract.
    unsafe { CUDA.reset_in_child() };
}

impl Cuda {
    /// libcuda.so.1 if the application has loaded it (a runtime nobody loaded has no memory).
    pub fn get() -> Option<&'static Cuda> {
        CUDA.get_or_init(|| {
            // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded library.
            let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if h.is_null() {
                return None;
            }
            Some(Cuda {
                pointer_get_attribute: sym(h, c"cuPointerGetAttribute")?,
                ctx_push: sym(h, c"cuCtxPushCurrent_v2")?,
                ctx_pop: sym(h, c"cuCtxPopCurrent_v2")?,
                ctx_get_device: sym(h, c"cuCtxGetDevice")?,
                stream_create: sym(h, c"cuStreamCreate")?,
                stream_sync: sym(h, c"cuStreamSynchronize")?,
                dtoh: sym(h, c"cuMemcpyDtoHAsync_v2")?,
                htod: sym(h, c"cuMemcpyHtoDAsync_v2")?,
                get_handle: sym(h, c"cuMemGetHandleForAddressRange")?,
                mem_alloc: sym(h, c"cuMemAlloc_v2")?,
                mem_free: sym(h, c"cuMemFree_v2")?,
                trusted: std::sync::OnceLock::new(),
            })
        })
        .as_ref()
    }

    /// The device of this thread's current context (what cudaGetDevice reports once the runtime
    /// made its primary context current); none before cuInit or without a current context.
    pub fn current_device(&self) -> Option<i32> {
        let mut dev: c_int = 0;
        // SAFETY: out pointer to a local CUdevice (an int).
        let rc = unsafe { (self.ctx_get_device)(&mut dev) };
        (rc == 0).then_some(dev)
    }

    /// True if `addr` is CUDA device memory (cuPointerGetAttribute MEMORY_TYPE).
    pub fn is_device(&self, addr: u64) -> bool {
        let mut t: c_uint = 0;
        // SAFETY: out pointer to a local of the attribute's type.
        unsafe {
            (self.pointer_get_attribute)((&mut t as *mut c_uint).cast(), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) == 0
                && t == CU_MEMORYTYPE_DEVICE
        }
    }

    /// Exports [addr, addr+len) as a dmabuf: (fd, offset of addr in it).
    pub fn export_dmabuf(&self, addr: u64, len: u64) -> Result<(i32, u64), String> {
        let mut start: u64 = 0;
        // SAFETY: out pointer to a local CUdeviceptr.
        let rc = unsafe {
            (self.pointer_get_attribute)((&mut start as *mut u64).cast(), CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, addr)
        };
        if rc != 0 {
            return Err(format!("cuPointerGetAttribute(RANGE_START_ADDR) failed: CUresult {rc}"));
        }
        let mut fd: c_int = -1;
        let size = (addr - start + len) as usize;
        // SAFETY: out pointer to a local int; the range lies in one allocation.
        let rc = unsafe {
            (self.get_handle)((&mut fd as *mut c_int).cast(), start, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
        };
        if rc != 0 || fd < 0 {
            return Err(format!("cuMemGetHandleForAddressRange failed: CUresult {rc}"));
        }
        Ok((fd, addr - start))
    }

    fn attr<T: Default>(&self, attr: c_int, addr: u64) -> Option<T> {
        let mut v = T::default();
        // SAFETY: out pointer to a local of the attribute's type (the callers pick it).
        let rc = unsafe { (self.pointer_get_attribute)((&mut v as *mut T).cast(), attr, addr) };
        (rc == 0).then_some(v)
    }

    /// With MRSHIM_COPY_SELFTEST=on, the engine proves itself once before first use: a scratch
    /// allocation in `addr`'s context, its pointer attributes, a host pointer's, a round trip.
    fn trusted(&'static self, addr: u64) -> Result<(), String> {
        self.trusted
            .get_or_init(|| {
                if !abi::selftest_wanted(Family::Cuda, abi::selftest_every()) {
                    return Ok(());
                }
                let r = self.self_test(addr);
                report_selftest(Family::Cuda, &r);
                r
            })
            .clone()
    }

    fn self_test(&'static self, addr: u64) -> Result<(), String> {
        const N: usize = 4096;
        let e = self.engine_unchecked(addr)?;
        let mut scratch = 0u64;
        // SAFETY: out pointer to a local, in the context of `addr`.
        let rc = e.in_ctx(|| unsafe { (self.mem_alloc)(&mut scratch, N) })?;
        if rc != 0 {
            return Err(format!("cuMemAlloc of its scratch failed: CUresult {rc}"));
        }
        let device = self.attr::<c_int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr).unwrap_or(-1);
        let on_scratch = self.attr::<c_uint>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, scratch).map(|t| Attrs {
            memory_type: t,
            device: self.attr::<c_int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, scratch).unwrap_or(-1),
            device_pointer: scratch,
        });
        let host = abi::pattern(N);
        let on_host = self.attr::<c_uint>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host.as_ptr() as u64).map(|t| Attrs {
            memory_type: t,
            device: -1,
            device_pointer: 0,
        });
        let mut back = vec![0u8; N];
        // SAFETY: host is an N-byte host buffer, scratch the N-byte device allocation made above
        // in this engine's context.
        let there = unsafe { e.to_app(scratch, host.as_ptr(), N) };
        // SAFETY: back is an N-byte host buffer, scratch as above.
        let back_again = there.and_then(|_| unsafe { e.to_host(back.as_mut_ptr(), scratch, N) });
        let round_trip = back_again.map(|_| back.iter().zip(&host).position(|(a, b)| a != b));
        // SAFETY: freeing the allocation made above, in its context.
        let _ = e.in_ctx(|| unsafe { (self.mem_free)(scratch) });
        abi::verdict(Family::Cuda, CU_MEMORYTYPE_DEVICE, &Observed { scratch, device, on_scratch, on_host, round_trip })
    }

    /// A copy engine for memory of the context that owns `addr` (self-tested first when
    /// MRSHIM_COPY_SELFTEST=on).
    pub fn engine(&'static self, addr: u64) -> Result<CudaCopy, String> {
        self.trusted(addr)?;
        self.engine_unchecked(addr)
    }

    fn engine_unchecked(&'static self, addr: u64) -> Result<CudaCopy, String> {
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: out pointer to a local CUcontext.
        let rc = unsafe {
            (self.pointer_get_attribute)((&mut ctx as *mut *mut c_void).cast(), CU_POINTER_ATTRIBUTE_CONTEXT, addr)
        };
        if rc != 0 {
            return Err(format!("cuPointerGetAttribute(CONTEXT) failed: CUresult {rc}"));
        }
        let e = CudaCopy { cu: self, ctx: ctx as usize, stream: 0 };
        let mut s: *mut c_void = std::ptr::null_mut();
        // SAFETY: creating our own stream in the pointer's context.
        let rc = e.in_ctx(|| unsafe { (self.stream_create)(&mut s, CU_STREAM_NON_BLOCKING) })?;
        if rc != 0 {
            return Err(format!("cuStreamCreate failed: CUresult {rc}"));
        }
        Ok(CudaCopy { stream: s as usize, ..e })
    }
}

pub struct CudaCopy {
    cu: &'static Cuda,
    ctx: usize,
    stream: usize,
}

impl CudaCopy {
    fn in_ctx(&self, f: impl FnOnce() -> c_int) -> Result<c_int, String> {
        // SAFETY: push/pop of a context the runtime handed us, around one driver call.
        unsafe {
            let rc = (self.cu.ctx_push)(self.ctx as *mut c_void);
            if rc != 0 {
                return Err(format!("cuCtxPushCurrent failed: CUresult {rc}"));
            }
            let r = f();
            let mut old = std::ptr::null_mut();
            (self.cu.ctx_pop)(&mut old);
            Ok(r)
        }
    }

    fn run(&self, what: &str, f: impl FnOnce(*mut c_void) -> c_int) -> Result<(), String> {
        let s = self.stream as *mut c_void;
        let rc = self.in_ctx(|| match f(s) {
            // SAFETY: the async copy and the sync run on our own stream in our context.
            0 => unsafe { (self.cu.stream_sync)(s) },
            e => e,
        })?;
        if rc != 0 {
            Err(format!("{what} failed: CUresult {rc}"))
        } else {
            Ok(())
        }
    }
}

impl CopyEngine for CudaCopy {
    fn name(&self) -> &'static str {
        "cuda"
    }
    unsafe fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract: dst is n bytes of host memory, src a device range.
        self.run("cuMemcpyDtoHAsync", |s| unsafe { (self.cu.dtoh)(dst.cast(), src, n, s) })
    }
    unsafe fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: as above, the other way.
        self.run("cuMemcpyHtoDAsync", |s| unsafe { (self.cu.htod)(dst, src.cast(), n, s) })
    }
}

// SAFETY: the CUDA handles are plain identifiers the driver API accepts from any thread.
unsafe impl Send for CudaCopy {}
// SAFETY: as above; each copy synchronises its own stream.
unsafe impl Sync for CudaCopy {}
