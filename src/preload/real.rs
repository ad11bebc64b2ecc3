//! The real verbs functions, per library instance and (name, version).
//!
//! A process can hold more than one libibverbs: the one it is linked against and a different
//! private copy a plugin opened (RTLD_LOCAL), or the same library unloaded and loaded again.
//! Each call must reach the copy it was meant for, so the real functions live in [`SLOTS`]
//! tables, one per library object:
//!
//! * slot 0 is what a linked call means: `dlvsym(RTLD_NEXT, ...)` from this library (the next
//!   definition after libmrshim in the global scope), else every loaded object whose name
//!   contains "libibverbs" (a private copy whose internal PLT call lands in our export first);
//! * slots 1.. belong to the objects an application's lookup found (a handle-based
//!   `dlsym`/`dlvsym`, or RTLD_DEFAULT from a plugin's own scope: that is how NCCL's privately
//!   opened copy is found), keyed by the object's load address (`dladdr`). The lookup hands back
//!   that slot's wrappers (wrappers.rs), so the wrapper itself says which copy it stands for.
//!
//! A copy's internal calls (`ibv_reg_mr` → `ibv_reg_mr_iova2` through its PLT) land in our
//! exports, which are slot 0's; they are nested inside the outer wrapper, which left its slot in
//! the thread's hook flag (mod.rs, [`super::Guard`]), and use that slot's table.
//! After a `dlclose` every remembered function no loaded object contains any more is forgotten,
//! and a slot whose object is gone is freed for the next copy (unload.rs).

use super::elf;
use super::entry::{define_entries, for_each_entry};
use mrshim_core::Call;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::*};

for_each_entry!(define_entries);

/// How many library instances the shim tells apart at once (slot 0 + 7 looked-up copies); the
/// per-slot wrappers in wrappers.rs are instantiated for each.
pub const SLOTS: usize = 8;

/// One library instance's real functions.
struct Slot {
    /// The object's load address (`dli_fbase`); 0: free. Always 0 for slot 0.
    base: AtomicUsize,
    ptrs: [AtomicUsize; Entry::ALL.len()],
}

static TABLE: [Slot; SLOTS] =
    [const { Slot { base: AtomicUsize::new(0), ptrs: [const { AtomicUsize::new(0) }; Entry::ALL.len()] } }; SLOTS];

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

/// An application's lookup found `p`, the real `f`: file it under the slot of the object `p` lies
/// in, with its siblings from that object's own scope (so the library's internal calls find
/// their real target). Returns that slot, or None when `p` is ours, in no object, or every slot
/// is taken.
pub fn remember(f: Entry, p: usize) -> Option<usize> {
    if p == 0 || elf::is_ours(p) {
        return None;
    }
    let base = elf::object_base(p);
    let slot = slot_for(base)?;
    TABLE[slot].ptrs[f as usize].store(p, Release);
    remember_siblings(slot, elf::link_map(p));
    Some(slot)
}

/// The slot of the object loaded at `base`: the one it already has, else a free one.
fn slot_for(base: usize) -> Option<usize> {
    if base == 0 {
        return None;
    }
    let looked_up = 1..SLOTS;
    if let Some(s) = looked_up.clone().find(|&s| TABLE[s].base.load(Acquire) == base) {
        return Some(s);
    }
    // Two threads looking the same new copy up at once may take two slots: both are right.
    looked_up.into_iter().find(|&s| TABLE[s].base.compare_exchange(0, base, AcqRel, Relaxed).is_ok())
}

fn remember_siblings(slot: usize, handle: *mut c_void) {
    let Some(dlvsym) = elf::real_dlvsym().filter(|_| !handle.is_null()) else { return };
    for &f in Entry::ALL {
        let p = &TABLE[slot].ptrs[f as usize];
        if p.load(Acquire) != 0 {
            continue;
        }
        let (n, v) = Entry::SYMS[f as usize];
        // SAFETY: handle is a loaded object's link map (a valid dlvsym handle); names are
        // NUL-terminated.
        let q = unsafe { dlvsym(handle, n.as_ptr(), v.as_ptr()) } as usize;
        if q != 0 && !elf::is_ours(q) {
            p.store(q, Release);
        }
    }
}

/// After a `dlclose`: forget every remembered function whose library is gone (called by unload.rs), and
/// free the slot of a copy that is gone.
pub fn forget_unmapped() {
    for (i, slot) in TABLE.iter().enumerate() {
        let base = slot.base.load(Acquire);
        let gone = i > 0 && base != 0 && !elf::still_loaded(base);
        for p in &slot.ptrs {
            let a = p.load(Acquire);
            if a != 0 && (gone || !elf::still_loaded(a)) {
                // only if nobody stored a new one meanwhile
                let _ = p.compare_exchange(a, 0, AcqRel, Relaxed);
            }
        }
        if gone {
            let _ = slot.base.compare_exchange(base, 0, AcqRel, Relaxed);
        }
    }
}

/// The real function `f` of the library instance `slot`, or 0 if there is none. Slot 0 is
/// resolved on first use; a looked-up copy has what its lookup found (a function that copy
/// lacks is 0: never another copy's).
#[inline]
pub fn get(slot: usize, f: Entry) -> usize {
    let p = TABLE[slot].ptrs[f as usize].load(Acquire);
    if p != 0 || slot != 0 {
        return p;
    }
    get_slow(f)
}

#[cold]
#[inline(never)]
fn get_slow(f: Entry) -> usize {
    let p = resolve(f);
    if p != 0 {
        TABLE[0].ptrs[f as usize].store(p, Release);
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
