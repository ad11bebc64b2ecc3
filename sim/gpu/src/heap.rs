//! The device memory of all simulated GPUs of one process: allocations by address, per-device
//! accounting, and the copy operations (validated at the call, run later on a stream).

use crate::memory::{self, Alloc};
use crate::stream::Op;
use crate::{lock, Fault};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub struct Heap {
    /// Per device: (capacity, bytes in use).
    devices: Vec<Mutex<(u64, u64)>>,
    allocs: Mutex<BTreeMap<u64, Arc<Alloc>>>,
    next_buffer_id: AtomicU64,
}

impl Heap {
    pub fn new(devices: usize, capacity: u64) -> Heap {
        Heap {
            devices: (0..devices).map(|_| Mutex::new((capacity, 0))).collect(),
            allocs: Mutex::new(BTreeMap::new()),
            next_buffer_id: AtomicU64::new(1),
        }
    }

    /// (free, total) bytes of `device`.
    pub fn info(&self, device: i32) -> (u64, u64) {
        let (total, used) = *lock(&self.devices[device as usize]);
        (total - used, total)
    }

    /// A new allocation of `bytes` (page-rounded) on `device`, owned by `owner`.
    pub fn alloc(&self, owner: usize, device: i32, bytes: u64) -> Result<u64, Fault> {
        let size = memory::round_up(bytes).filter(|s| *s > 0).ok_or(Fault::Invalid)?;
        let mut acct = lock(&self.devices[device as usize]);
        if size > acct.0 - acct.1 {
            return Err(Fault::OutOfMemory);
        }
        let id = self.next_buffer_id.fetch_add(1, Ordering::Relaxed);
        let a = Alloc::new(size, owner, device, id).map_err(|e| {
            if e == libc::ENOMEM {
                Fault::OutOfMemory
            } else {
                Fault::System
            }
        })?;
        acct.1 += size;
        let d = a.dptr;
        lock(&self.allocs).insert(d, Arc::new(a));
        Ok(d)
    }

    /// `dptr` must be the start of an allocation.
    pub fn free(&self, dptr: u64) -> Result<(), Fault> {
        let a = lock(&self.allocs).remove(&dptr).ok_or(Fault::Invalid)?;
        a.release_address();
        lock(&self.devices[a.device as usize]).1 -= a.size;
        Ok(())
    }

    /// Start addresses of the allocations `owner` made (a destroyed context's are freed).
    pub fn owned_by(&self, owner: usize) -> Vec<u64> {
        lock(&self.allocs).values().filter(|a| a.owner == owner).map(|a| a.dptr).collect()
    }

    /// The allocation holding `p`.
    pub fn find(&self, p: u64) -> Option<Arc<Alloc>> {
        lock(&self.allocs).range(..=p).next_back().map(|(_, a)| a.clone()).filter(|a| a.contains(p))
    }

    /// The allocation starting exactly at `p`.
    pub fn exact(&self, p: u64) -> Option<Arc<Alloc>> {
        lock(&self.allocs).get(&p).cloned()
    }

    /// [p, p+len) inside one allocation: (allocation, offset).
    pub fn span(&self, p: u64, len: u64) -> Result<(Arc<Alloc>, u64), Fault> {
        let a = self.find(p).ok_or(Fault::Invalid)?;
        let off = p - a.dptr;
        if len > a.size - off {
            return Err(Fault::Invalid);
        }
        Ok((a, off))
    }

    /// Host memory given to a copy must not be device memory (the CPU would fault on it).
    pub fn host_range(&self, p: usize, len: u64) -> Result<(), Fault> {
        let p = p as u64;
        if p == 0 && len > 0 {
            return Err(Fault::Invalid);
        }
        let end = p.checked_add(len).ok_or(Fault::Invalid)?;
        let hit = lock(&self.allocs).range(..end).next_back().is_some_and(|(_, a)| a.dptr + a.size > p);
        if hit && len > 0 {
            return Err(Fault::Invalid);
        }
        Ok(())
    }

    /// Host → device; the operation runs later, on the target stream.
    pub fn htod(&self, dst: u64, src: usize, n: u64) -> Result<Op, Fault> {
        let (a, off) = self.span(dst, n)?;
        self.host_range(src, n)?;
        Ok(Box::new(move || {
            // SAFETY: [off, off+n) is inside the allocation (span); the caller guarantees the host
            // range stays valid until the copy completed, as with cuMemcpyHtoDAsync.
            unsafe { std::ptr::copy(src as *const u8, a.ptr(off), n as usize) }
        }))
    }

    pub fn dtoh(&self, dst: usize, src: u64, n: u64) -> Result<Op, Fault> {
        let (a, off) = self.span(src, n)?;
        self.host_range(dst, n)?;
        Ok(Box::new(move || {
            // SAFETY: as in htod, in the other direction.
            unsafe { std::ptr::copy(a.ptr(off), dst as *mut u8, n as usize) }
        }))
    }

    pub fn dtod(&self, dst: u64, src: u64, n: u64) -> Result<Op, Fault> {
        let (d, doff) = self.span(dst, n)?;
        let (s, soff) = self.span(src, n)?;
        Ok(Box::new(move || {
            // SAFETY: both ranges are inside their allocations; copy is memmove (they may overlap).
            unsafe { std::ptr::copy(s.ptr(soff), d.ptr(doff), n as usize) }
        }))
    }

    pub fn memset8(&self, dst: u64, v: u8, n: u64) -> Result<Op, Fault> {
        let (a, off) = self.span(dst, n)?;
        Ok(Box::new(move || {
            // SAFETY: the range is inside the allocation.
            unsafe { std::ptr::write_bytes(a.ptr(off), v, n as usize) }
        }))
    }

    /// A dmabuf of the allocation starting at `dptr`: a close-on-exec dup of its memfd (offset 0 =
    /// allocation start). `size` must be a non-zero multiple of the page size, at most the
    /// allocation's size (what cuMemGetHandleForAddressRange and its HIP/MACA twins require).
    pub fn export_dmabuf(&self, dptr: u64, size: u64) -> Result<i32, Fault> {
        let a = self.exact(dptr).ok_or(Fault::Invalid)?;
        if size == 0 || !size.is_multiple_of(memory::PAGE) || size > a.size {
            return Err(Fault::Invalid);
        }
        use std::os::fd::AsRawFd;
        // SAFETY: F_DUPFD_CLOEXEC on the allocation's live memfd.
        let fd = unsafe { libc::fcntl(a.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Fault::System);
        }
        Ok(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_bounds_and_round_trip() {
        let h = Heap::new(2, 64 << 10);
        assert_eq!(h.alloc(0, 1, 0), Err(Fault::Invalid));
        let d = h.alloc(7, 1, 5000).unwrap();
        assert_eq!(h.info(1), ((64 << 10) - 8192, 64 << 10));
        assert_eq!(h.info(0).0, 64 << 10);
        assert_eq!(h.alloc(7, 1, 64 << 10), Err(Fault::OutOfMemory));
        assert_eq!(h.span(d + 8000, 193).err(), Some(Fault::Invalid));
        assert_eq!(h.host_range(d as usize + 10, 1), Err(Fault::Invalid));
        let src = [0x5au8; 100];
        h.htod(d + 4000, src.as_ptr() as usize, 100).unwrap()();
        let mut back = [0u8; 100];
        h.dtoh(back.as_mut_ptr() as usize, d + 4000, 100).unwrap()();
        assert_eq!(back, src);
        assert_eq!(h.owned_by(7), vec![d]);
        assert_eq!(h.export_dmabuf(d + 4096, 4096), Err(Fault::Invalid));
        assert_eq!(h.export_dmabuf(d, 100), Err(Fault::Invalid));
        let fd = h.export_dmabuf(d, 8192).unwrap();
        // SAFETY: closing the fd we were handed.
        unsafe { libc::close(fd) };
        h.free(d).unwrap();
        assert_eq!(h.free(d), Err(Fault::Invalid));
        assert_eq!(h.info(1).0, 64 << 10);
    }
}
