//! The real verbs functions, per (name, version), found in the libibverbs actually loaded.
//!
//! Sources, in order: a pointer remembered from an application's handle-based `dlsym`/`dlvsym`
//! (that is how NCCL's privately opened copy is found); `dlvsym(RTLD_NEXT, ...)` called from this
//! library (the next definition after libmrshim in the global scope: the linked libibverbs);
//! finally every loaded object whose name contains "libibverbs" (covers a private copy whose
//! internal PLT call lands in our wrapper before any handle lookup was seen).

use super::elf;
use super::entry::{define_entries, for_each_entry};
use mrshim_core::Call;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::*};

for_each_entry!(define_entries);

static PTRS: [AtomicUsize; Entry::ALL.len()] = [const { AtomicUsize::new(0) }; Entry::ALL.len()];

/// Which of our functions a lookup is for: `version` None means plain `dlsym` (default version).
pub fn classify(name: &[u8], version: Option<&[u8]>) -> Option<Entry> {
    Entry::ALL.iter().copied().find(|&f| {
        let (n, v) = Entry::SYMS[f as usize];
        if n.to_bytes() != name {
            return false;
        }
        match version {
            Some(want) => v.to_bytes() == want,
            // dlsym gives the default version: 1.1 for reg/dereg
            None => f.is_default(),
        }
    })
}

/// Remember what a real handle lookup returned (never one of our own wrappers).
pub fn remember(f: Entry, p: usize) {
    if p != 0 && !elf::is_ours(p) {
        PTRS[f as usize].store(p, Release);
    }
}

/// After a handle lookup of one of our names: remember the others from the same handle too, so
/// that the library's internal calls (ibv_reg_mr → ibv_reg_mr_iova2) find their real target.
pub fn remember_siblings(handle: *mut c_void) {
    let Some(dlvsym) = elf::real_dlvsym() else { return };
    for &f in Entry::ALL {
        if PTRS[f as usize].load(Acquire) != 0 {
            continue;
        }
        let (n, v) = Entry::SYMS[f as usize];
        // SAFETY: handle came from the application's successful lookup; names are NUL-terminated.
        let p = unsafe { dlvsym(handle, n.as_ptr(), v.as_ptr()) };
        remember(f, p as usize);
    }
}

/// After a `dlclose`: forget every remembered function whose library is gone (unload.rs).
pub fn forget_unmapped() {
    for slot in &PTRS {
        let p = slot.load(Acquire);
        if p != 0 && !super::unload::still_loaded(p) {
            // only if nobody stored a new one meanwhile
            let _ = slot.compare_exchange(p, 0, AcqRel, Relaxed);
        }
    }
}

/// The real function's address, or 0 if there is none.
#[inline]
pub fn get(f: Entry) -> usize {
    let p = PTRS[f as usize].load(Acquire);
    if p != 0 {
        return p;
    }
    get_slow(f)
}

#[cold]
#[inline(never)]
fn get_slow(f: Entry) -> usize {
    let p = resolve(f);
    if p != 0 {
        PTRS[f as usize].store(p, Release);
    }
    p
}

fn resolve(f: Entry) -> usize {
    let (n, v) = Entry::SYMS[f as usize];
    // Default versions through dlsym: it also matches an unversioned definition (another preload
    // interposing the same function after us), which dlvsym never does.
    if f.is_default() {
        if let Some(dlsym) = elf::real_dlsym() {
            // SAFETY: RTLD_NEXT from this library: the next definition after libmrshim.so.
            let p = unsafe { dlsym(libc::RTLD_NEXT, n.as_ptr()) } as usize;
            if p != 0 && !elf::is_ours(p) {
                return p;
            }
        }
    }
    let Some(dlvsym) = elf::real_dlvsym() else { return 0 };
    // SAFETY: as above, asking for the exact version.
    let p = unsafe { dlvsym(libc::RTLD_NEXT, n.as_ptr(), v.as_ptr()) } as usize;
    if p != 0 && !elf::is_ours(p) {
        return p;
    }
    scan_loaded(n, v)
}

/// Names of loaded objects that look like a libibverbs (pointers into the loader's link maps).
struct Scan {
    names: [*const c_char; 8],
    n: usize,
}

unsafe extern "C" fn scan_cb(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> i32 {
    // SAFETY: valid for the duration of the callback; data is our &mut Scan. Only collects: no
    // dlopen here (it would take the loader's locks in the opposite order of a racing dlopen).
    unsafe {
        let s = &mut *(data as *mut Scan);
        let info = &*info;
        if info.dlpi_name.is_null() || s.n == s.names.len() {
            return 0;
        }
        let name = CStr::from_ptr(info.dlpi_name);
        if name.to_bytes().windows(10).any(|w| w == b"libibverbs") {
            s.names[s.n] = info.dlpi_name;
            s.n += 1;
        }
        0
    }
}

fn scan_loaded(n: &CStr, v: &CStr) -> usize {
    let mut s = Scan { names: [std::ptr::null(); 8], n: 0 };
    // SAFETY: scan_cb only touches s, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(scan_cb), &mut s as *mut Scan as *mut c_void) };
    let Some(dlvsym) = elf::real_dlvsym() else { return 0 };
    for &name in &s.names[..s.n] {
        // SAFETY: name is a loaded object's NUL-terminated name; RTLD_NOLOAD only returns a handle
        // to what is already loaded (and takes a reference we drop right after).
        unsafe {
            let h = libc::dlopen(name, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if h.is_null() {
                continue;
            }
            let p = dlvsym(h, n.as_ptr(), v.as_ptr()) as usize;
            libc::dlclose(h);
            if p != 0 && !elf::is_ours(p) {
                return p;
            }
        }
    }
    0
}
