//! The kernel's [`Pages`]: the range is registered with a userfaultfd in write-protect mode with
//! asynchronous faults (UFFD_FEATURE_WP_ASYNC: a write to a protected page is resolved inside the
//! kernel, which only clears the protection; no thread waits on the descriptor), and the
//! PAGEMAP_SCAN ioctl of /proc/self/pagemap reports the pages whose protection was cleared —
//! written — and protects them again in the same walk (PM_SCAN_WP_MATCHING). Linux 6.7 and
//! later; UFFD_FEATURE_WP_UNPOPULATED so pages never touched are protected too;
//! UFFD_USER_MODE_ONLY so no privilege is needed (asynchronous write-protect faults never wait).
//!
//! What it cannot see: writes that do not go through this process's page tables — DMA into
//! pages pinned by a device (another MR, a GPU copy into host-registered memory, O_DIRECT I/O)
//! and writes through another mapping of the same pages (hence private anonymous memory only,
//! which its caller checks: mrshim_core::maps::private_anonymous).

use super::{Pages, PAGE};
use std::ffi::c_int;

const UFFD_USER_MODE_ONLY: c_int = 1;
const UFFD_API: u64 = 0xaa;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
// _IOWR(0xaa, 0x3f, struct uffdio_api), _IOWR(0xaa, 0x00, struct uffdio_register),
// _IOR(0xaa, 0x01, struct uffdio_range): the same numbers on x86_64 and aarch64.
const UFFDIO_API: u64 = 0xc018_aa3f;
const UFFDIO_REGISTER: u64 = 0xc020_aa00;
const UFFDIO_UNREGISTER: u64 = 0x8010_aa01;
// _IOWR(0xaa, 0x06, struct uffdio_writeprotect { struct uffdio_range; __u64 mode; })
const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
// _IOWR('f', 16, struct pm_scan_arg)
const PAGEMAP_SCAN: u64 = 0xc060_6610;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRegister {
    start: u64,
    len: u64,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// The two descriptors, checked before every use: a forked child (whose copies would act on
/// its parent's address space) or an application that closed and reused a descriptor number
/// gets errors, never a scan of the wrong memory.
pub struct Kernel {
    uffd: c_int,
    pagemap: c_int,
    pagemap_id: (u64, u64),
    pid: u32,
    regions: Vec<PageRegion>,
}

fn last_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn file_id(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: fstat into a zeroed stat buffer of ours.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

impl Kernel {
    /// Opens both descriptors and proves the facility on a private mapping of its own: a page
    /// written before protection, one written after, one never touched then written, one left
    /// alone — exactly the two written after must be reported. Err says why not (a kernel
    /// before 6.7, seccomp, vm.unprivileged_userfaultfd, no /proc).
    pub fn open() -> Result<Kernel, String> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY;
        // SAFETY: the userfaultfd system call with flags only; returns a new descriptor or -1.
        let uffd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if uffd < 0 {
            return Err(last_error("userfaultfd"));
        }
        let uffd = uffd as c_int;
        let mut api =
            UffdioApi { api: UFFD_API, features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED, ioctls: 0 };
        // SAFETY: UFFDIO_API on our userfaultfd with a struct of the kernel's layout.
        if unsafe { libc::ioctl(uffd, UFFDIO_API as _, &mut api) } != 0 {
            let e = last_error("UFFDIO_API (asynchronous write-protect, Linux >= 6.7)");
            // SAFETY: closing our own descriptor.
            unsafe { libc::close(uffd) };
            return Err(e);
        }
        // SAFETY: opening a file; returns a new descriptor or -1.
        let pagemap = unsafe { libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        let id = if pagemap < 0 { None } else { file_id(pagemap) };
        let Some(pagemap_id) = id else {
            let e = last_error("/proc/self/pagemap");
            // SAFETY: closing our own descriptors (-1 is ignored by the kernel with EBADF).
            unsafe {
                libc::close(uffd);
                libc::close(pagemap);
            }
            return Err(e);
        };
        let mut k =
            Kernel { uffd, pagemap, pagemap_id, pid: std::process::id(), regions: vec![PageRegion::default(); 64] };
        k.selftest()?;
        Ok(k)
    }

    fn selftest(&mut self) -> Result<(), String> {
        let n = 4 * PAGE as usize;
        let p = super::map_private(n).map_err(|e| format!("mmap: {e}"))?;
        let a = p as u64;
        let write = |i: u64| {
            // SAFETY: page i of our 4-page mapping.
            unsafe { std::ptr::write_volatile((a + i * PAGE + 8) as *mut u8, 1) }
        };
        write(0);
        write(1);
        let mut out = Vec::new();
        let r = self.arm(a, n as u64).and_then(|_| self.scan(a, n as u64, &mut out)).and_then(|_| {
            write(1);
            write(2);
            out.clear();
            self.scan(a, n as u64, &mut out)
        });
        self.disarm(a, n as u64);
        // SAFETY: our mapping, no longer used.
        unsafe { libc::munmap(p as *mut libc::c_void, n) };
        r?;
        let want = vec![(a + PAGE, a + 3 * PAGE)];
        if out != want {
            return Err(format!("PAGEMAP_SCAN self-test: written pages {out:x?}, expected {want:x?}"));
        }
        Ok(())
    }

    fn ours(&self) -> Result<(), String> {
        if std::process::id() != self.pid {
            return Err("descriptors of the parent process".into());
        }
        if file_id(self.pagemap) != Some(self.pagemap_id) {
            return Err("the pagemap descriptor was closed or reused".into());
        }
        Ok(())
    }
}

impl Pages for Kernel {
    fn arm(&mut self, start: u64, len: u64) -> Result<(), String> {
        self.ours()?;
        let mut r = UffdioRegister { start, len, mode: UFFDIO_REGISTER_MODE_WP, ioctls: 0 };
        // SAFETY: UFFDIO_REGISTER of our userfaultfd (the pid check above: our process's) on a
        // range of our address space; it changes no byte of it.
        if unsafe { libc::ioctl(self.uffd, UFFDIO_REGISTER as _, &mut r) } != 0 {
            return Err(last_error("UFFDIO_REGISTER"));
        }
        Ok(())
    }

    fn disarm(&mut self, start: u64, len: u64) {
        if self.ours().is_err() {
            return;
        }
        let mut r = [start, len];
        // SAFETY: UFFDIO_UNREGISTER of a range we registered; also clears its protection.
        unsafe { libc::ioctl(self.uffd, UFFDIO_UNREGISTER as _, r.as_mut_ptr()) };
    }

    fn unprotect(&mut self, start: u64, len: u64) {
        if self.ours().is_err() {
            return;
        }
        // mode 0: clear the protection (and wake no one: asynchronous faults never wait)
        let mut wp = [start, len, 0u64];
        // SAFETY: UFFDIO_WRITEPROTECT of a range we registered; it changes no byte of it. A
        // failure leaves the pages protected: the caller's write then faults, as without this.
        unsafe { libc::ioctl(self.uffd, UFFDIO_WRITEPROTECT as _, wp.as_mut_ptr()) };
    }

    fn scan(&mut self, start: u64, len: u64, out: &mut Vec<(u64, u64)>) -> Result<(), String> {
        self.ours()?;
        let end = start + len;
        let mut at = start;
        while at < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: at,
                end,
                walk_end: 0,
                vec: self.regions.as_mut_ptr() as u64,
                vec_len: self.regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: PAGE_IS_WRITTEN,
                category_anyof_mask: 0,
                return_mask: PAGE_IS_WRITTEN,
            };
            // SAFETY: PAGEMAP_SCAN on our own /proc/self/pagemap (checked above) with an output
            // vector of vec_len entries we own; it reads page tables and write-protects pages.
            let got = unsafe { libc::ioctl(self.pagemap, PAGEMAP_SCAN as _, &mut arg) };
            if got < 0 {
                return Err(last_error("PAGEMAP_SCAN"));
            }
            for r in &self.regions[..got as usize] {
                match out.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => out.push((r.start, r.end)),
                }
            }
            if arg.walk_end <= at {
                return Err("PAGEMAP_SCAN made no progress".into());
            }
            at = arg.walk_end;
        }
        Ok(())
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if self.ours().is_ok() {
            // SAFETY: closing our own descriptors (in this process).
            unsafe {
                libc::close(self.pagemap);
                libc::close(self.uffd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a kernel with the facility (6.7 and later, vm.unprivileged_userfaultfd or root): a
    /// mapping's writes, by this thread, by the kernel on its behalf (read(2) into it), after
    /// MADV_DONTNEED. On a kernel without it, one line says so and the fallback is tested
    /// instead: the tracker the bounce layer builds then answers "compare everything".
    #[test]
    fn the_kernel_reports_exactly_the_written_pages() {
        let mut k = match Kernel::open() {
            Ok(k) => k,
            Err(e) => {
                eprintln!("this kernel cannot track writes ({e}): testing the whole-compare fallback instead");
                let mut t = crate::Tracker::new(Kernel::open().ok());
                assert!(!t.enabled());
                let mut v = vec![0u8; 64 * PAGE as usize];
                let a = (v.as_mut_ptr() as u64).next_multiple_of(PAGE);
                assert_eq!(t.track(a, 32 * PAGE), None, "nothing is tracked without the kernel");
                assert_eq!(t.written(1, &mut Vec::new()), crate::Answer::Everything);
                return;
            }
        };
        let n = 256 * PAGE as usize;
        let mut v = vec![0u8; n + PAGE as usize];
        let a = (v.as_mut_ptr() as u64).next_multiple_of(PAGE);
        k.arm(a, n as u64).unwrap();
        let mut out = Vec::new();
        k.scan(a, n as u64, &mut out).unwrap();
        let scan = |k: &mut Kernel| {
            let mut out = Vec::new();
            k.scan(a, n as u64, &mut out).unwrap();
            out
        };
        assert_eq!(scan(&mut k), vec![]);
        // SAFETY: inside v.
        unsafe { *((a + 7 * PAGE + 100) as *mut u8) = 1 };
        assert_eq!(scan(&mut k), vec![(a + 7 * PAGE, a + 8 * PAGE)]);
        // the kernel writing on our behalf
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        // SAFETY: reading into page 9 of v.
        let got = unsafe { libc::read(std::os::fd::AsRawFd::as_raw_fd(&f), (a + 9 * PAGE) as *mut libc::c_void, 64) };
        assert!(got > 0);
        assert_eq!(scan(&mut k), vec![(a + 9 * PAGE, a + 10 * PAGE)]);
        // contents dropped (they read back as zeros): reported too
        // SAFETY: pages 20..22 of v.
        unsafe { libc::madvise((a + 20 * PAGE) as *mut libc::c_void, 2 * PAGE as usize, libc::MADV_DONTNEED) };
        assert_eq!(scan(&mut k), vec![(a + 20 * PAGE, a + 22 * PAGE)]);
        // unprotected ahead of the shim's own write: reported as written, like a write
        k.unprotect(a + 30 * PAGE, 3 * PAGE);
        assert_eq!(scan(&mut k), vec![(a + 30 * PAGE, a + 33 * PAGE)]);
        assert_eq!(scan(&mut k), vec![], "protected again by the scan");
        k.disarm(a, n as u64);
    }
}
