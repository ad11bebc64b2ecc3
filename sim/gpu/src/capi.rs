//! The C-API bodies a CUDA-runtime-shaped simulator exports (HIP's `hip*`, MACA's `mc*`):
//! each catches panics and returns the runtime's error code ([`Api`] supplies the codes and the
//! runtime). Pointer arguments are the C caller's, with the API's documented contracts; they are
//! checked for NULL and written once.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::device_runtime::{DeviceRuntime, Direction, Target};
use crate::{codes, Fault};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What differs between the runtimes behind the same bodies (the codes default to the
/// numbering of crate::codes, which HIP and the MACA simulator share).
pub trait Api {
    /// Library name for messages, e.g. `mrshim-sim-hip`.
    const WHO: &'static str;
    const INVALID_VALUE: u32 = codes::INVALID_VALUE;
    const NOT_READY: u32 = codes::NOT_READY;
    const UNKNOWN: u32 = codes::UNKNOWN;
    /// The runtime (initialised at the first call, or its sticky init error).
    fn rt() -> Result<&'static DeviceRuntime, u32>;
    fn code(f: Fault) -> u32 {
        codes::code(f)
    }
    /// The `*MemcpyKind` value → direction (or the runtime's bad-direction error).
    fn direction(kind: u32) -> Result<Direction, u32> {
        codes::direction(kind)
    }
}

pub fn ffi<A: Api>(f: impl FnOnce() -> Result<(), u32>) -> u32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("{}: internal error (panic); returning error {}", A::WHO, A::UNKNOWN);
            A::UNKNOWN
        }
    }
}

/// Stores `v` through a caller's out-pointer; NULL is the runtime's invalid-value error.
pub fn out<A: Api, T>(p: *mut T, v: T) -> Result<(), u32> {
    if p.is_null() {
        return Err(A::INVALID_VALUE);
    }
    // SAFETY: non-NULL out-pointer the caller passed for a T, per the API contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

fn rt<A: Api>() -> Result<&'static DeviceRuntime, u32> {
    A::rt()
}

pub fn init<A: Api>(flags: u32) -> u32 {
    ffi::<A>(|| if flags != 0 { Err(A::INVALID_VALUE) } else { rt::<A>().map(|_| ()) })
}

pub fn device_count<A: Api>(n: *mut c_int) -> u32 {
    ffi::<A>(|| out::<A, _>(n, rt::<A>()?.gpus))
}

pub fn get_device<A: Api>(d: *mut c_int) -> u32 {
    ffi::<A>(|| out::<A, _>(d, rt::<A>()?.current()))
}

pub fn set_device<A: Api>(d: c_int) -> u32 {
    ffi::<A>(|| rt::<A>()?.set_current(d).map_err(A::code))
}

pub fn device_synchronize<A: Api>() -> u32 {
    ffi::<A>(|| {
        let r = rt::<A>()?;
        r.sync_device(r.current(), false);
        Ok(())
    })
}

pub fn malloc<A: Api>(p: *mut *mut c_void, n: usize) -> u32 {
    ffi::<A>(|| {
        if p.is_null() {
            return Err(A::INVALID_VALUE);
        }
        if n == 0 {
            return out::<A, _>(p, std::ptr::null_mut());
        }
        let d = rt::<A>()?.alloc(n as u64).map_err(A::code)?;
        out::<A, _>(p, d as *mut c_void)
    })
}

pub fn free<A: Api>(p: *mut c_void) -> u32 {
    ffi::<A>(|| if p.is_null() { Ok(()) } else { rt::<A>()?.heap.free(p as u64).map_err(A::code) })
}

pub fn mem_info<A: Api>(free: *mut usize, total: *mut usize) -> u32 {
    ffi::<A>(|| {
        let r = rt::<A>()?;
        let (f, t) = r.heap.info(r.current());
        out::<A, _>(free, f as usize)?;
        out::<A, _>(total, t as usize)
    })
}

pub fn memcpy<A: Api>(dst: usize, src: usize, n: usize, kind: u32, stream: usize) -> u32 {
    ffi::<A>(|| {
        let r = rt::<A>()?;
        let t = r.target(stream).map_err(A::code)?;
        r.run(t, r.copy_op(dst, src, n as u64, A::direction(kind)?).map_err(A::code)?).map_err(A::code)
    })
}

pub fn stream_create<A: Api>(s: *mut *mut c_void, flags: u32) -> u32 {
    ffi::<A>(|| {
        if s.is_null() {
            return Err(A::INVALID_VALUE);
        }
        out::<A, _>(s, rt::<A>()?.create_stream(flags).map_err(A::code)? as *mut c_void)
    })
}

pub fn stream_destroy<A: Api>(s: usize) -> u32 {
    ffi::<A>(|| rt::<A>()?.destroy_stream(s).map_err(A::code))
}

pub fn stream_synchronize<A: Api>(s: usize) -> u32 {
    ffi::<A>(|| {
        let r = rt::<A>()?;
        match r.target(s).map_err(A::code)? {
            Target::Null => r.sync_device(r.current(), true),
            Target::PerThread => {}
            Target::Queue(q) => q.synchronize(),
        }
        Ok(())
    })
}

pub fn stream_query<A: Api>(s: usize) -> u32 {
    ffi::<A>(|| match rt::<A>()?.target(s).map_err(A::code)? {
        Target::Queue(q) if !q.idle() => Err(A::NOT_READY),
        _ => Ok(()),
    })
}

/// Test-only: occupies stream `s` for `ms` milliseconds, like a long-running kernel.
pub fn stream_busy<A: Api>(s: usize, ms: u32) -> u32 {
    ffi::<A>(|| match rt::<A>()?.target(s).map_err(A::code)? {
        Target::Queue(q) => {
            q.submit(Box::new(move || std::thread::sleep(std::time::Duration::from_millis(ms.into())))).map_err(A::code)
        }
        _ => Err(A::INVALID_VALUE),
    })
}

/// `*MemGetAddressRange(&base, &size, p)`: the allocation holding `p`.
pub fn address_range<A: Api>(base: *mut u64, size: *mut usize, p: u64) -> u32 {
    ffi::<A>(|| {
        let a = rt::<A>()?.heap.find(p).ok_or(A::INVALID_VALUE)?;
        if !base.is_null() {
            out::<A, _>(base, a.dptr)?;
        }
        if !size.is_null() {
            out::<A, _>(size, a.size as usize)?;
        }
        Ok(())
    })
}

/// `*MemGetHandleForAddressRange(&fd, base, size, 1 /* dmabuf fd */, 0)`: the allocation's
/// start, a page multiple no larger than the allocation (as cuMemGetHandleForAddressRange).
pub fn export_dmabuf<A: Api>(handle: *mut c_int, p: u64, size: usize, kind: u32, flags: u64) -> u32 {
    ffi::<A>(|| {
        if handle.is_null() || kind != 1 || flags != 0 {
            return Err(A::INVALID_VALUE);
        }
        out::<A, _>(handle, rt::<A>()?.heap.export_dmabuf(p, size as u64).map_err(A::code)?)
    })
}
