//! Device memory: one memfd per allocation, mapped PROT_NONE at the address the application
//! holds (so the CPU faults on it, as on real device memory) and read-write at a second,
//! private address that only the runtime's copy engine uses.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const PAGE: u64 = 4096;

/// The memfd name the verbs simulator recognises as GPU memory (`/memfd:mrshim-gpu` in
/// /proc/self/maps and /proc/self/fd).
const MEMFD_NAME: &[u8] = b"mrshim-gpu\0";

pub fn round_up(n: u64) -> Option<u64> {
    n.checked_add(PAGE - 1).map(|v| v & !(PAGE - 1))
}

#[derive(Debug)]
pub struct Alloc {
    pub dptr: u64,
    /// Page-rounded size: what RANGE_SIZE reports and what the memfd holds.
    pub size: u64,
    pub fd: OwnedFd,
    /// The runtime's read-write view of the same pages.
    view: usize,
    /// Who allocated it: a CUDA context handle, or the device for HIP/MACA.
    pub owner: usize,
    pub device: i32,
    pub buffer_id: u64,
}

// SAFETY: `view` is a shared mapping owned by this value; all access goes through `ptr` with
// bounds checked by the callers, and concurrent copies race like they would on a real GPU.
unsafe impl Send for Alloc {}
// SAFETY: as above.
unsafe impl Sync for Alloc {}

impl Alloc {
    /// Creates the memfd and both mappings. Errors are errno values.
    pub fn new(size: u64, owner: usize, device: i32, buffer_id: u64) -> Result<Alloc, i32> {
        // The system call (kernel 3.17+): glibc's memfd_create() wrapper is 2.27+, and the
        // simulator ships in the portable (glibc 2.17) package too.
        // SAFETY: memfd_create with a NUL-terminated name; the fd is owned right away.
        let raw = unsafe { libc::syscall(libc::SYS_memfd_create, MEMFD_NAME.as_ptr(), libc::MFD_CLOEXEC) } as i32;
        if raw < 0 {
            return Err(errno());
        }
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(errno());
        }
        let view = map(&fd, size, libc::PROT_READ | libc::PROT_WRITE)?;
        let dptr = match map(&fd, size, libc::PROT_NONE) {
            Ok(p) => p,
            Err(e) => {
                unmap(view, size);
                return Err(e);
            }
        };
        Ok(Alloc { dptr: dptr as u64, size, fd, view, owner, device, buffer_id })
    }

    /// The runtime's address for `dptr + off`; callers check `off + len <= size`.
    pub fn ptr(&self, off: u64) -> *mut u8 {
        (self.view + off as usize) as *mut u8
    }

    pub fn contains(&self, p: u64) -> bool {
        p >= self.dptr && p - self.dptr < self.size
    }

    /// Releases the application's address (cuMemFree/hipFree/mcFree); the view lives on while queued
    /// copies still hold this allocation.
    pub fn release_address(&self) {
        unmap(self.dptr as usize, self.size);
    }
}

impl Drop for Alloc {
    fn drop(&mut self) {
        unmap(self.view, self.size);
    }
}

fn map(fd: &OwnedFd, size: u64, prot: i32) -> Result<usize, i32> {
    // SAFETY: a new shared mapping of our memfd at an address the kernel picks.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), size as usize, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p as usize)
    }
}

fn unmap(addr: usize, size: u64) {
    // SAFETY: addr/size are exactly a mapping this module created.
    unsafe { libc::munmap(addr as *mut libc::c_void, size as usize) };
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_and_memfd_share_pages() {
        let a = Alloc::new(2 * PAGE, 0, 0, 1).unwrap();
        // SAFETY: the view is 2 pages long.
        unsafe { a.ptr(PAGE + 3).write(0x5a) };
        let mut b = [0u8; 1];
        // SAFETY: pread into a 1-byte buffer from our memfd.
        let n = unsafe { libc::pread(a.fd.as_raw_fd(), b.as_mut_ptr().cast(), 1, (PAGE + 3) as libc::off_t) };
        assert_eq!((n, b[0]), (1, 0x5a));
        assert!(a.contains(a.dptr) && a.contains(a.dptr + 2 * PAGE - 1) && !a.contains(a.dptr + 2 * PAGE));
        let link = std::fs::read_link(format!("/proc/self/fd/{}", a.fd.as_raw_fd())).unwrap();
        assert!(link.to_string_lossy().starts_with("/memfd:mrshim-gpu"), "{link:?}");
        a.release_address();
    }

    #[test]
    fn rounding() {
        assert_eq!(round_up(1), Some(PAGE));
        assert_eq!(round_up(PAGE), Some(PAGE));
        assert_eq!(round_up(u64::MAX), None);
    }
}
