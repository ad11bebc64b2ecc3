//! The copy engine: validates a transfer up front (errors are returned at the call, as CUDA
//! does), then builds the operation that runs on the target stream through the runtime's view.

use crate::abi::*;
use crate::runtime::Runtime;
use crate::stream::Op;

pub fn htod(rt: &Runtime, dst: CUdeviceptr, src: usize, n: u64) -> Result<Op, CUresult> {
    let (a, off) = rt.span(dst, n)?;
    rt.host_range(src, n)?;
    Ok(Box::new(move || {
        // SAFETY: [off, off+n) is inside the allocation (span); the caller guarantees the host
        // range stays valid until the copy completed, as with cuMemcpyHtoDAsync.
        unsafe { std::ptr::copy(src as *const u8, a.ptr(off), n as usize) }
    }))
}

pub fn dtoh(rt: &Runtime, dst: usize, src: CUdeviceptr, n: u64) -> Result<Op, CUresult> {
    let (a, off) = rt.span(src, n)?;
    rt.host_range(dst, n)?;
    Ok(Box::new(move || {
        // SAFETY: as in htod, in the other direction.
        unsafe { std::ptr::copy(a.ptr(off), dst as *mut u8, n as usize) }
    }))
}

pub fn dtod(rt: &Runtime, dst: CUdeviceptr, src: CUdeviceptr, n: u64) -> Result<Op, CUresult> {
    let (d, doff) = rt.span(dst, n)?;
    let (s, soff) = rt.span(src, n)?;
    Ok(Box::new(move || {
        // SAFETY: both ranges are inside their allocations; copy is memmove (they may overlap).
        unsafe { std::ptr::copy(s.ptr(soff), d.ptr(doff), n as usize) }
    }))
}

pub fn memset8(rt: &Runtime, dst: CUdeviceptr, v: u8, n: u64) -> Result<Op, CUresult> {
    let (a, off) = rt.span(dst, n)?;
    Ok(Box::new(move || {
        // SAFETY: the range is inside the allocation.
        unsafe { std::ptr::write_bytes(a.ptr(off), v, n as usize) }
    }))
}
