//! The calls that close or replace descriptors: `close`, `dup2`, `dup3`, `close_range`,
//! `closefrom`, and the exits that skip exit handlers: `_exit`, `_Exit`. Each tells the log first
//! ([`mrshim_core::log::before_close`]: if the log's descriptor is among them it is retired and
//! writes under way on it finish), then makes the application's call. That is how the log never
//! writes into a file the application opened at the log's old number, without a system call per
//! record (docs/shim.md, *Descriptors closed or reused by the application*).
//!
//! No allocation, lock or std I/O here: `close` and `dup2` are async-signal-safe, and the shim's
//! own std calls `close` through this export too. The real functions are found in the
//! constructor ([`resolve`]); before that (another library's constructor), the system call.

use std::ffi::{c_int, c_uint};
use std::sync::atomic::{AtomicUsize, Ordering::*};

/// The real functions, in this order (0: not found yet).
const NAMES: [&std::ffi::CStr; 7] = [c"close", c"dup2", c"dup3", c"close_range", c"closefrom", c"_exit", c"_Exit"];
static REAL: [AtomicUsize; 7] = [const { AtomicUsize::new(0) }; 7];

/// Looks up the next definition (libc's) of each name. From the constructor.
pub fn resolve() {
    let Some(dlsym) = super::elf::real_dlsym() else { return };
    for (name, slot) in NAMES.iter().zip(&REAL) {
        // SAFETY: RTLD_NEXT from this library: the definition after ours; the name is NUL-terminated.
        let p = unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if p != 0 && !super::elf::is_ours(p) {
            slot.store(p, Release);
        }
    }
}

fn real(i: usize) -> usize {
    REAL[i].load(Acquire)
}

/// The highest descriptor number (for ranges that run "to the end").
const MAX_FD: i32 = i32::MAX;

fn up_to(last: c_uint) -> i32 {
    i32::try_from(last).unwrap_or(MAX_FD)
}

/// # Safety
/// As libc's `close`.
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    mrshim_core::log::before_close(fd, fd);
    match real(0) {
        // SAFETY: libc's close, whose type this is; the caller's argument.
        p if p != 0 => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> c_int>(p)(fd) },
        // SAFETY: the system call with the caller's argument (errno set by syscall()).
        _ => unsafe { libc::syscall(libc::SYS_close, fd) as c_int },
    }
}

/// # Safety
/// As libc's `dup2`.
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        mrshim_core::log::before_close(new, new);
    }
    match real(1) {
        // SAFETY: libc's dup2, whose type this is; the caller's arguments.
        p if p != 0 => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int) -> c_int>(p)(old, new)
        },
        // SAFETY: dup2(fd, fd) only checks fd: F_GETFD does the same (and sets errno).
        _ if old == new => match unsafe { libc::fcntl(old, libc::F_GETFD) } {
            r if r < 0 => r,
            _ => new,
        },
        // SAFETY: as above.
        _ => unsafe { libc::syscall(libc::SYS_dup3, old, new, 0) as c_int },
    }
}

/// # Safety
/// As libc's `dup3`.
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        mrshim_core::log::before_close(new, new);
    }
    match real(2) {
        // SAFETY: libc's dup3, whose type this is; the caller's arguments.
        p if p != 0 => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int, c_int) -> c_int>(p)(old, new, flags)
        },
        // SAFETY: the system call with the caller's arguments.
        _ => unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) as c_int },
    }
}

/// # Safety
/// As libc's `close_range`.
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // CLOSE_RANGE_CLOEXEC only marks them (the log's is close-on-exec anyway)
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        mrshim_core::log::before_close(up_to(first), up_to(last));
    }
    match real(3) {
        // SAFETY: libc's close_range, whose type this is; the caller's arguments.
        p if p != 0 => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int>(p)(first, last, flags)
        },
        // SAFETY: the system call with the caller's arguments.
        _ => unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int },
    }
}

/// # Safety
/// As libc's `closefrom`.
pub unsafe extern "C" fn closefrom(low: c_int) {
    mrshim_core::log::before_close(low.max(0), MAX_FD);
    match real(4) {
        // SAFETY: libc's closefrom, whose type this is; the caller's argument.
        p if p != 0 => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int)>(p)(low) },
        // SAFETY: the system call with the caller's argument.
        _ => unsafe {
            libc::syscall(libc::SYS_close_range, low.max(0) as c_uint, c_uint::MAX, 0);
        },
    }
}

/// `_exit` and `_Exit`: a mapped log is trimmed first ([`mrshim_core::log::before_exit`]), since
/// exit handlers (where that happens otherwise) do not run; forked children end this way.
fn exit_with(i: usize, status: c_int) -> ! {
    mrshim_core::log::before_exit();
    match real(i) {
        // SAFETY: libc's _exit/_Exit, whose type this is; the caller's argument.
        p if p != 0 => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> !>(p)(status) },
        // SAFETY: the system call that _exit makes; it does not return.
        _ => unsafe {
            libc::syscall(libc::SYS_exit_group, status);
            libc::abort()
        },
    }
}

/// # Safety
/// As libc's `_exit`.
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    exit_with(5, status)
}

/// # Safety
/// As libc's `_Exit`.
#[allow(non_snake_case)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    exit_with(6, status)
}
