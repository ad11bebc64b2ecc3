//! The log as a shared mapping of its file: a record is reserved with one atomic add and copied
//! into the mapping, no system call. A store into a `MAP_SHARED` file mapping is in the kernel's
//! page cache when it completes (the same pages `write(2)` fills), so the record survives the
//! process being killed right after the call, like a `write(2)`.
//!
//! - **Growth:** the file is extended ahead of the records, [`CHUNK`] at a time, with newline
//!   bytes (one `writev` of a static buffer): the part not yet used is blank lines, never NUL
//!   bytes, so `grep`, `jq` and `mrshim analyze` read a log that is still being written (or was
//!   cut short by SIGKILL) as its records plus empty lines, and a record whose copy was cut short
//!   stays on a line of its own.
//! - **Trim:** the unused end is cut off (`ftruncate` to the end of the last record) when the
//!   mapping closes: at exit (after the summary record), before the application closes or
//!   replaces the log's descriptor (the close hooks), and when the window is full. An earlier
//!   process's blank end (it was killed, or exec'd) is cut when the file is opened again.
//! - **Only when the file is this process's alone:** a per-process destination (a directory or
//!   `%p`), a regular file on a local filesystem, no RLIMIT_FSIZE or RLIMIT_AS, not a forked child
//!   (its children often end with `_exit`), and an exclusive `flock` on it. Everything else (a
//!   name several processes append to, NFS, Lustre) keeps one `O_APPEND` `write(2)` per record.
//! - **fork:** the window is `MADV_DONTFORK`: a child never writes into the parent's file.
//!
//! The state machine: `NONE` (no mapping: write(2)), `MAPPED`, `CLOSING` (one thread drains the
//! writers under way, trims and unmaps; writers meanwhile wait, then use write(2)).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering::*};

/// Address space mapped for the log: past it the log continues with write(2).
pub const WINDOW: u64 = 1 << 30;
/// The file grows this much at a time (and at most this much is blank after a SIGKILL).
pub const CHUNK: u64 = 256 << 10;

const NONE: u8 = 0;
const MAPPED: u8 = 1;
const CLOSING: u8 = 2;

/// Newlines the file grows with (written several times per chunk).
static BLANK: [u8; 16 << 10] = [b'\n'; 16 << 10];

pub struct LogMap {
    state: AtomicU8,
    base: AtomicPtr<u8>,
    /// The log descriptor the mapping belongs to.
    fd: AtomicI32,
    /// End of the last reserved record.
    next: AtomicU64,
    /// The file's size: [records' end, size) is blank lines.
    size: AtomicU64,
    /// Start of the first reservation that could not be stored (u64::MAX: none).
    cut: AtomicU64,
    growing: AtomicBool,
    /// The mapping's pages below this were dropped from the page tables (see release_written).
    released: AtomicU64,
    window: u64,
    chunk: u64,
}

/// What [`LogMap::store`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Stored {
    Yes,
    /// No mapping: write(2) the record.
    No,
    /// The mapping is being closed: wait, then write(2).
    Wait,
    /// The record does not fit (window full, disk full): close the mapping, then write(2).
    Full,
}

impl Default for LogMap {
    fn default() -> Self {
        LogMap::new(WINDOW, CHUNK)
    }
}

impl LogMap {
    pub const fn new(window: u64, chunk: u64) -> Self {
        LogMap {
            state: AtomicU8::new(NONE),
            base: AtomicPtr::new(std::ptr::null_mut()),
            fd: AtomicI32::new(-1),
            next: AtomicU64::new(0),
            size: AtomicU64::new(0),
            cut: AtomicU64::new(u64::MAX),
            growing: AtomicBool::new(false),
            released: AtomicU64::new(0),
            window,
            chunk,
        }
    }

    pub fn is_mapped(&self, fd: i32) -> bool {
        self.state.load(SeqCst) != NONE && self.fd.load(SeqCst) == fd
    }

    pub fn is_closing(&self) -> bool {
        self.state.load(SeqCst) == CLOSING
    }

    /// Maps `fd` (the log, opened `O_APPEND`, `size` bytes long, identity `dev`/`ino`); false:
    /// not mapped, records use write(2). The caller checked the conditions of the module.
    pub fn setup(&self, fd: i32, size: u64, dev: u64, ino: u64) -> bool {
        if self.state.load(SeqCst) != NONE || size > self.window / 2 {
            return false;
        }
        // PROT_WRITE needs a descriptor open for reading too: the same file again, by its
        // descriptor, checked to be the same inode.
        let Ok(path) = std::ffi::CString::new(format!("/proc/self/fd/{fd}")) else { return false };
        // SAFETY: path is NUL-terminated; open does not keep it.
        let rw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if rw < 0 {
            return false;
        }
        let same = crate::logfile::fstat(rw).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino);
        let base = if same {
            // SAFETY: a new shared mapping of rw at an address the kernel chooses; nothing else is affected.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    self.window as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    rw,
                    0,
                )
            }
        } else {
            libc::MAP_FAILED
        };
        // SAFETY: rw was opened above and is used by nothing else (the mapping keeps the file).
        unsafe { libc::close(rw) };
        if base == libc::MAP_FAILED {
            return false;
        }
        let base = base as *mut u8;
        // SAFETY: base..base+window is the mapping just made.
        unsafe { libc::madvise(base.cast(), self.window as usize, libc::MADV_DONTFORK) };
        // SAFETY: [0, size) of the mapping is inside the file: readable.
        let text = unsafe { std::slice::from_raw_parts(base, size as usize) };
        let end = used_end(text);
        // SAFETY: ftruncate on the log descriptor; only the blank end goes.
        if end < size && unsafe { libc::ftruncate(fd, end as libc::off_t) } != 0 {
            // SAFETY: the mapping made above, used by nobody yet.
            unsafe { libc::munmap(base.cast(), self.window as usize) };
            return false;
        }
        self.next.store(end, SeqCst);
        self.size.store(end, SeqCst);
        self.cut.store(u64::MAX, SeqCst);
        self.released.store(0, SeqCst);
        self.fd.store(fd, SeqCst);
        self.base.store(base, SeqCst);
        self.state.store(MAPPED, SeqCst);
        true
    }

    /// Stores one record (a complete line). The caller counts itself as a write under way on
    /// `fd` (see crate::log) before calling, so closing waits for it.
    pub fn store(&self, fd: i32, line: &[u8]) -> Stored {
        match self.state.load(SeqCst) {
            NONE => return Stored::No,
            CLOSING => return Stored::Wait,
            _ => {}
        }
        if self.fd.load(SeqCst) != fd {
            return Stored::No;
        }
        let base = self.base.load(SeqCst);
        let len = line.len() as u64;
        let off = self.next.fetch_add(len, Relaxed);
        let end = off.saturating_add(len);
        if end > self.window || !self.grow_to(fd, end) {
            self.cut.fetch_min(off, Relaxed);
            return Stored::Full;
        }
        // [off, end) is inside the mapping and the file (grow_to), reserved by this thread alone.
        // SAFETY: as above; the mapping lives until every writer counted under way has finished.
        unsafe { std::ptr::copy_nonoverlapping(line.as_ptr(), base.add(off as usize), line.len()) };
        Stored::Yes
    }

    /// The file is at least `end` bytes long (grown by blank lines); false if it cannot grow.
    fn grow_to(&self, fd: i32, end: u64) -> bool {
        let mut spins = 0u32;
        loop {
            if self.size.load(Acquire) >= end {
                return true;
            }
            if self.growing.compare_exchange(false, true, Acquire, Relaxed).is_ok() {
                let size = self.size.load(Acquire);
                let ok = size >= end || {
                    let target = end.div_ceil(self.chunk).saturating_mul(self.chunk).min(self.window);
                    let grown = target >= end && append_blank(fd, size, target);
                    if grown {
                        self.size.store(target, Release);
                        self.release_written(size);
                    }
                    grown
                };
                self.growing.store(false, Release);
                return ok;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Drops the pages of chunks written before the one ending at `size` from this process's
    /// page tables: they stay in the page cache (dirty ones are written back as usual), and the
    /// process's RSS does not grow with its log. A writer still copying into one faults it back.
    fn release_written(&self, size: u64) {
        let upto = size.saturating_sub(self.chunk) & !4095;
        let from = self.released.load(Relaxed);
        if upto > from {
            let base = self.base.load(SeqCst);
            // MADV_DONTNEED on a shared file mapping keeps the file's contents (read back from the page cache).
            // SAFETY: [from, upto) is inside the mapping; the advice above loses nothing.
            unsafe { libc::madvise(base.add(from as usize).cast(), (upto - from) as usize, libc::MADV_DONTNEED) };
            self.released.store(upto, Relaxed);
        }
    }

    /// MAPPED → CLOSING; true for the one caller that must then [`LogMap::finish`].
    pub fn begin_close(&self) -> bool {
        self.state.compare_exchange(MAPPED, CLOSING, SeqCst, SeqCst).is_ok()
    }

    /// Trims the blank end and unmaps (after [`LogMap::begin_close`], once no writer is under way).
    pub fn finish(&self, fd: i32) {
        let base = self.base.swap(std::ptr::null_mut(), SeqCst);
        let used = self.next.load(SeqCst).min(self.cut.load(SeqCst)).min(self.size.load(SeqCst));
        if self.fd.load(SeqCst) == fd {
            // SAFETY: ftruncate on the log's descriptor: only the blank end goes.
            unsafe { libc::ftruncate(fd, used as libc::off_t) };
        }
        if !base.is_null() {
            // SAFETY: the mapping made in setup; no writer is under way and none starts (CLOSING).
            unsafe { libc::munmap(base.cast(), self.window as usize) };
        }
        self.fd.store(-1, SeqCst);
        self.state.store(NONE, SeqCst);
    }

    /// In a forked child: the window was not inherited (MADV_DONTFORK).
    pub fn reset_in_child(&self) {
        self.base.store(std::ptr::null_mut(), Relaxed);
        self.fd.store(-1, Relaxed);
        self.growing.store(false, Relaxed);
        self.state.store(NONE, Relaxed);
    }
}

/// Where the records of `text` (a log's bytes) end: a blank end — newlines or NUL bytes, an
/// earlier process's growth or a hole — is not part of them (the newline ending the last record
/// is).
pub fn used_end(text: &[u8]) -> u64 {
    let mut e = text.len();
    while e > 0 && matches!(text[e - 1], b'\n' | 0) {
        e -= 1;
    }
    if e > 0 && e < text.len() && text[e] == b'\n' {
        e += 1;
    }
    e as u64
}

/// Appends `target - size` newline bytes to `fd` (O_APPEND, now `size` bytes long); true when
/// the file is then exactly `target` bytes long (nobody else appended meanwhile).
fn append_blank(fd: i32, size: u64, target: u64) -> bool {
    let mut left = (target - size) as usize;
    while left > 0 {
        let mut iov = [libc::iovec { iov_base: BLANK.as_ptr() as *mut libc::c_void, iov_len: 0 }; 16];
        let mut n = 0;
        for v in iov.iter_mut() {
            v.iov_len = (left - n).min(BLANK.len());
            n += v.iov_len;
        }
        // SAFETY: every iovec points into BLANK (static; the kernel only reads it).
        let w = unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as i32) };
        if w < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if w <= 0 {
            return false;
        }
        left -= w as usize;
    }
    crate::logfile::fstat(fd).is_ok_and(|st| st.st_size as u64 == target)
}

/// Is the filesystem of `fd` a local one whose shared mappings are coherent with write(2)?
pub fn local_fs(fd: i32) -> bool {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: s is writable; fstatfs only writes into it.
    if unsafe { libc::fstatfs(fd, &mut s) } != 0 {
        return false;
    }
    // ext2/3/4, XFS, Btrfs, tmpfs, F2FS
    matches!(s.f_type as u64, 0xEF53 | 0x5846_5342 | 0x9123_683E | 0x0102_1994 | 0xF2F5_2010)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blank_end_is_not_part_of_the_records() {
        assert_eq!(used_end(b""), 0);
        assert_eq!(used_end(b"\n\n\n"), 0);
        assert_eq!(used_end(b"{}\n"), 3);
        assert_eq!(used_end(b"{}\n\n\n\n"), 3);
        assert_eq!(used_end(b"{}\n{\"a\"\n\n"), 8);
        assert_eq!(used_end(b"{}\n{\"a\0\0"), 6);
        assert_eq!(used_end(b"{}\n\0\0"), 3);
        assert_eq!(used_end(b"{}"), 2);
    }
}
