//! `dlclose`: when the application unloads a library, the real functions the shim remembered
//! from it (real.rs keeps one per symbol) must not be called any more — a libibverbs opened
//! again lands elsewhere, and its internal `ibv_reg_mr` → `ibv_reg_mr_iova2` call would reach
//! the old copy's unmapped code. After each successful `dlclose` every remembered address that no
//! loaded object contains any more is forgotten and found again at the next lookup or call.

use super::elf;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::*};

type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's dlclose (GLIBC_2.34, or the libdl one on older systems), found once.
fn real_dlclose() -> Option<DlcloseFn> {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let mut p = REAL.load(Acquire);
    if p == 0 {
        let dlvsym = elf::real_dlvsym()?;
        for v in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: RTLD_NEXT from this library: the definition after ours; names NUL-terminated.
            p = unsafe { dlvsym(libc::RTLD_NEXT, c"dlclose".as_ptr(), v.as_ptr()) } as usize;
            if p != 0 && !super::elf::is_ours(p) {
                break;
            }
            p = 0;
        }
        if p == 0 {
            return None;
        }
        REAL.store(p, Release);
    }
    // SAFETY: p is glibc's dlclose, whose type this is.
    Some(unsafe { std::mem::transmute::<usize, DlcloseFn>(p) })
}

/// Our `dlclose` (exported as dlclose@@GLIBC_2.34 and dlclose@GLIBC_2.2.5 by hooks.rs).
///
/// # Safety
/// As glibc's dlclose: `handle` comes from dlopen.
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let Some(real) = real_dlclose() else { return -1 };
    // SAFETY: the caller's handle, to glibc's dlclose.
    let rc = unsafe { real(handle) };
    if rc == 0 {
        mrshim_core::internal::guarded("dlclose", super::real::forget_unmapped);
    }
    rc
}
