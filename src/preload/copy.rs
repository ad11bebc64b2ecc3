//! Copy engines for host bounce buffers: move bytes between the application's buffer and its host
//! shadow. One small trait; the GPU runtimes are loaded with dlopen at first use, never linked.
//!
//! | engine | library | calls |
//! |--------|---------|-------|
//! | host   | —       | memcpy (host memory the NIC refused) |
//! | CUDA   | libcuda.so.1 (already loaded by the application: RTLD_NOLOAD) | cuMemcpyDtoHAsync_v2 / cuMemcpyHtoDAsync_v2 on the shim's own CU_STREAM_NON_BLOCKING stream + cuStreamSynchronize, in the pointer's context |
//! | HIP (slot)  | libamdhip64.so | hipMemcpyDtoHAsync / hipMemcpyHtoDAsync on a hipStreamNonBlocking stream, hipStreamSynchronize — same shape as CUDA, not wired yet |
//! | MACA (slot) | libmcruntime.so | mcMemcpyAsync on a non-blocking stream — same shape, not wired yet |
//!
//! The shim's own non-blocking stream never waits behind the application's work on the legacy
//! stream, so a copy cannot deadlock against a long-running kernel.

use std::ffi::{c_int, c_uint, c_void};

pub trait CopyEngine: Send + Sync {
    fn name(&self) -> &'static str;
    /// `n` bytes from the application's buffer at `src` into host memory at `dst`.
    fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String>;
    /// `n` bytes of host memory at `src` into the application's buffer at `dst`.
    fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String>;
    /// The application's addresses are host memory the shim may read in place.
    fn app_is_host(&self) -> bool {
        false
    }
}

/// Plain memory on both sides.
pub struct HostCopy;

impl CopyEngine for HostCopy {
    fn name(&self) -> &'static str {
        "host"
    }
    fn app_is_host(&self) -> bool {
        true
    }
    fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        // SAFETY: the bounce layer passes ranges inside a registered region and its shadow.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, n) };
        Ok(())
    }
    fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, n) };
        Ok(())
    }
}

type CuPtrAttr = unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int;
type CuCopy = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;
type CuCopyH = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> c_int;

/// The CUDA driver API entry points the shim uses.
pub struct Cuda {
    pointer_get_attribute: CuPtrAttr,
    ctx_push: unsafe extern "C" fn(*mut c_void) -> c_int,
    ctx_pop: unsafe extern "C" fn(*mut *mut c_void) -> c_int,
    stream_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int,
    stream_sync: unsafe extern "C" fn(*mut c_void) -> c_int,
    dtoh: CuCopy,
    htod: CuCopyH,
    get_handle: unsafe extern "C" fn(*mut c_void, u64, usize, c_int, u64) -> c_int,
}

const CU_POINTER_ATTRIBUTE_CONTEXT: c_int = 1;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
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
pub fn after_fork_child() {
    CUDA.reset_in_child();
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
                stream_create: sym(h, c"cuStreamCreate")?,
                stream_sync: sym(h, c"cuStreamSynchronize")?,
                dtoh: sym(h, c"cuMemcpyDtoHAsync_v2")?,
                htod: sym(h, c"cuMemcpyHtoDAsync_v2")?,
                get_handle: sym(h, c"cuMemGetHandleForAddressRange")?,
            })
        })
        .as_ref()
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

    /// A copy engine for memory of the context that owns `addr`.
    pub fn engine(&'static self, addr: u64) -> Result<CudaCopy, String> {
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
    fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        // SAFETY: dst is shadow memory of n bytes, src a device range the caller registered.
        self.run("cuMemcpyDtoHAsync", |s| unsafe { (self.cu.dtoh)(dst.cast(), src, n, s) })
    }
    fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: as above, the other way.
        self.run("cuMemcpyHtoDAsync", |s| unsafe { (self.cu.htod)(dst, src.cast(), n, s) })
    }
}

// SAFETY: the CUDA handles are plain identifiers the driver API accepts from any thread.
unsafe impl Send for CudaCopy {}
// SAFETY: as above; each copy synchronises its own stream.
unsafe impl Sync for CudaCopy {}
