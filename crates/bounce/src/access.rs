//! Which parts of the application's host buffer the shim may touch right now. The application
//! may `mprotect` pages of a bounce region after registering it (a guard page, a buffer made
//! read-only) or unmap them (a registration cache keeps the MR of a freed buffer): the NIC keeps
//! the shadow's pages, but a copy of the shim into or out of such a page would fault in the
//! application's process. Every copy of the application's bytes asks first.
//!
//! One `PROCMAP_QUERY` ioctl on /proc/self/maps per mapping the range spans (Linux >= 6.11, about
//! 0.3 µs, as the msync it replaces); older kernels: /proc/self/maps read and parsed (tens of µs).
//! The descriptor stays open (close-on-exec, at the log's floor of numbers, away from the ones
//! `open` hands out); a forked child opens its own (a descriptor of /proc/self/maps names the
//! process that opened it); one the application closed or replaced is noticed (the ioctl fails)
//! and opened again.

use crate::state::STATE;
use std::sync::atomic::Ordering;

/// [start, end) of the asked range that may not be touched; `mapped`: a mapping is there, without
/// the access (PROT_NONE, or read-only for a write), else nothing is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hole {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) mapped: bool,
}

const NO_QUERY: i32 = -2;

/// linux/fs.h (6.11): struct procmap_query.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}
const VMA_READABLE: u64 = 0x01;
const VMA_WRITABLE: u64 = 0x02;
const COVERING_OR_NEXT_VMA: u64 = 0x10;
/// _IOWR('f', 17, struct procmap_query)
const PROCMAP_QUERY: u64 = (3 << 30) | ((std::mem::size_of::<ProcmapQuery>() as u64) << 16) | ((b'f' as u64) << 8) | 17;

/// The parts of [start, start+len) this process cannot read (`write`: read and write) now,
/// sorted; empty when all of it can be (the common case: no allocation).
pub(crate) fn holes(start: u64, len: u64, write: bool) -> Vec<Hole> {
    let end = start.saturating_add(len);
    if len == 0 {
        return Vec::new();
    }
    let want = if write { VMA_READABLE | VMA_WRITABLE } else { VMA_READABLE };
    match query(start, end, want) {
        Some(h) => h,
        None => from_text(&mrshim_core::maps::read_self(), start, end, write),
    }
}

/// Through PROCMAP_QUERY; None where it cannot answer.
fn query(start: u64, end: u64, want: u64) -> Option<Vec<Hole>> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let (fd, fresh) = fd()?;
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: COVERING_OR_NEXT_VMA,
            query_addr: at,
            ..Default::default()
        };
        // SAFETY: PROCMAP_QUERY reads and writes the struct it is given, whose size it is told.
        let rc = unsafe { libc::syscall(libc::SYS_ioctl, fd, PROCMAP_QUERY, &mut q as *mut ProcmapQuery) };
        if rc != 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // nothing mapped at or after `at`
                Some(libc::ENOENT) => {
                    push(&mut out, Hole { start: at, end, mapped: false });
                    break;
                }
                // The application closed our descriptor and the number is another file now:
                // forget it (it is not ours to close) and ask a fresh one.
                Some(libc::ENOTTY | libc::EINVAL | libc::EBADF) if !fresh => {
                    let _ = STATE.maps_fd.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
                    continue;
                }
                // A fresh descriptor of /proc/self/maps without the ioctl: a kernel before 6.11.
                _ => {
                    if STATE.maps_fd.compare_exchange(fd, NO_QUERY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        // SAFETY: the descriptor this call opened, no longer published.
                        unsafe { libc::close(fd) };
                    }
                    return None;
                }
            }
        }
        if q.vma_start > at {
            push(&mut out, Hole { start: at, end: q.vma_start.min(end), mapped: false });
        }
        if q.vma_start >= end || q.vma_end <= at {
            break;
        }
        if q.vma_flags & want != want {
            push(&mut out, Hole { start: q.vma_start.max(at), end: q.vma_end.min(end), mapped: true });
        }
        at = q.vma_end;
    }
    Some(out)
}

/// Our descriptor, and whether this call opened it.
fn fd() -> Option<(i32, bool)> {
    match STATE.maps_fd.load(Ordering::Acquire) {
        NO_QUERY => None,
        -1 => {
            // SAFETY: a NUL-terminated path; a new descriptor of our own.
            let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                STATE.maps_fd.store(NO_QUERY, Ordering::Release);
                return None;
            }
            // Away from the numbers `open` hands out, as the log's (the application's next
            // descriptor stays what it was).
            // SAFETY: F_DUPFD_CLOEXEC on our valid descriptor only creates a new one.
            let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, mrshim_core::log::FD_FLOOR) };
            let fd = if high >= 0 {
                // SAFETY: the descriptor opened above, replaced by `high`.
                unsafe { libc::close(fd) };
                high
            } else {
                fd
            };
            match STATE.maps_fd.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => Some((fd, true)),
                Err(other) => {
                    // SAFETY: the descriptor opened just above, not published.
                    unsafe { libc::close(fd) };
                    (other >= 0).then_some((other, false))
                }
            }
        }
        fd => Some((fd, false)),
    }
}

/// Appends `h`, merged with the last hole when they touch and are of the same kind.
fn push(out: &mut Vec<Hole>, h: Hole) {
    if h.start >= h.end {
        return;
    }
    match out.last_mut() {
        Some(l) if l.end == h.start && l.mapped == h.mapped => l.end = h.end,
        _ => out.push(h),
    }
}

/// The same answer from the text of /proc/self/maps (parsed, sorted).
fn from_text(maps: &[mrshim_core::maps::Region], start: u64, end: u64, write: bool) -> Vec<Hole> {
    let mut out = Vec::new();
    let mut at = start;
    for r in maps.iter().filter(|r| r.end > start && r.start < end) {
        if r.start > at {
            push(&mut out, Hole { start: at, end: r.start, mapped: false });
        }
        if !r.readable || (write && !r.writable) {
            push(&mut out, Hole { start: r.start.max(start), end: r.end.min(end), mapped: true });
        }
        at = r.end;
    }
    if at < end {
        push(&mut out, Hole { start: at, end, mapped: false });
    }
    out
}

/// In a forked child: the inherited descriptor describes the parent; the child opens its own.
///
/// # Safety
/// Only from the atfork child handler (the child's one thread).
pub(crate) unsafe fn after_fork_child() {
    let fd = STATE.maps_fd.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: our own descriptor, inherited; the parent keeps its copy.
        unsafe { libc::close(fd) };
    }
}

/// Calls `f(a, b)` for each part of [a, b) outside `holes` (sorted, disjoint, offsets).
pub(crate) fn each_outside(a: usize, b: usize, holes: &[(usize, usize)], mut f: impl FnMut(usize, usize)) {
    let mut at = a;
    for &(x, y) in holes.iter().filter(|&&(x, y)| y > a && x < b) {
        if x > at {
            f(at, x);
        }
        at = at.max(y);
    }
    if at < b {
        f(at, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(n: usize) -> u64 {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    /// A guard page, a read-only page and an unmapped page inside a range: each found, by the
    /// ioctl and by the text alike.
    #[test]
    fn finds_protected_read_only_and_unmapped_pages() {
        let p = map(6);
        // SAFETY: pages of the mapping made just above.
        unsafe {
            assert_eq!(libc::mprotect((p + 4096) as *mut _, 4096, libc::PROT_NONE), 0);
            assert_eq!(libc::mprotect((p + 3 * 4096) as *mut _, 4096, libc::PROT_READ), 0);
            assert_eq!(libc::munmap((p + 5 * 4096) as *mut _, 4096), 0);
        }
        let h = |s: u64, e: u64, m| Hole { start: p + s * 4096, end: p + e * 4096, mapped: m };
        let read = vec![h(1, 2, true), h(5, 6, false)];
        let write = vec![h(1, 2, true), h(3, 4, true), h(5, 6, false)];
        assert_eq!(holes(p, 6 * 4096, false), read);
        assert_eq!(holes(p, 6 * 4096, true), write);
        let maps = mrshim_core::maps::read_self();
        assert_eq!(from_text(&maps, p, p + 6 * 4096, false), read);
        assert_eq!(from_text(&maps, p, p + 6 * 4096, true), write);
        assert!(holes(p + 100, 900, true).is_empty(), "inside the first page: none");
        assert_eq!(
            holes(p + 4096 + 10, 20, false),
            vec![Hole { start: p + 4096 + 10, end: p + 4096 + 30, mapped: true }]
        );
    }

    #[test]
    fn each_outside_skips_the_holes() {
        let mut got = Vec::new();
        each_outside(0, 100, &[(10, 20), (50, 60), (95, 200)], |a, b| got.push((a, b)));
        assert_eq!(got, vec![(0, 10), (20, 50), (60, 95)]);
        got.clear();
        each_outside(15, 55, &[(10, 20), (50, 60)], |a, b| got.push((a, b)));
        assert_eq!(got, vec![(20, 50)]);
        got.clear();
        each_outside(0, 10, &[], |a, b| got.push((a, b)));
        assert_eq!(got, vec![(0, 10)]);
    }
}
