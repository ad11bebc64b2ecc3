//! Finding glibc's real `dlsym`/`dlvsym` without calling `dlsym` (which would be our own export).
//!
//! `dl_iterate_phdr` yields every loaded object; for libc.so.6 (or libdl.so.2 on glibc < 2.34) we
//! walk its dynamic symbol table by hand: DT_GNU_HASH bucket/chain lookup, then DT_VERSYM +
//! DT_VERDEF to accept only the `GLIBC_2.34` or the architecture's first version of the symbol
//! (`GLIBC_2.2.5` on x86_64, `GLIBC_2.17` on aarch64: libdl's before 2.34).
//! No allocation, no locks of our own, no std I/O: this runs inside `dlsym` calls of arbitrary
//! threads, possibly before our constructor.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::*};

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const DT_VERDEF: i64 = 0x6fff_fffc;
const PT_DYNAMIC: u32 = 2;

#[repr(C)]
struct Elf64Dyn {
    d_tag: i64,
    d_un: u64,
}

#[repr(C)]
struct Verdef {
    vd_version: u16,
    vd_flags: u16,
    vd_ndx: u16,
    vd_cnt: u16,
    vd_hash: u32,
    vd_aux: u32,
    vd_next: u32,
}

#[repr(C)]
struct Verdaux {
    vda_name: u32,
    vda_next: u32,
}

/// What we are looking for, and what we found (the callback's context).
struct Query {
    names: [&'static [u8]; 2],
    versions: [&'static [u8]; 2],
    found: [usize; 2],
}

fn gnu_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 5381;
    for &c in name {
        h = h.wrapping_mul(33).wrapping_add(c as u32);
    }
    h
}

/// # Safety
/// `p` must point to a NUL-terminated string.
unsafe fn cstr_eq(p: *const c_char, want: &[u8]) -> bool {
    // SAFETY: caller guarantees a NUL-terminated string; we stop at the first mismatch or NUL.
    unsafe {
        for (i, &w) in want.iter().enumerate() {
            if *p.add(i) as u8 != w {
                return false;
            }
        }
        *p.add(want.len()) == 0
    }
}

fn ends_with(name: &[u8], suffix: &[u8]) -> bool {
    name.len() >= suffix.len() && &name[name.len() - suffix.len()..] == suffix
}

unsafe extern "C" fn callback(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the callback, and `data` is
    // the &mut Query we passed to it.
    unsafe {
        let q = &mut *(data as *mut Query);
        let info = &*info;
        if info.dlpi_name.is_null() {
            return 0;
        }
        let name = CStr::from_ptr(info.dlpi_name).to_bytes();
        if !(ends_with(name, b"/libc.so.6") || ends_with(name, b"/libdl.so.2") || name == b"libc.so.6") {
            return 0;
        }
        let base = info.dlpi_addr as usize;
        let mut dynamic: *const Elf64Dyn = std::ptr::null();
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type == PT_DYNAMIC {
                dynamic = (base + ph.p_vaddr as usize) as *const Elf64Dyn;
            }
        }
        if dynamic.is_null() {
            return 0;
        }
        let (mut strtab, mut symtab, mut gnuhash, mut versym, mut verdef) = (0usize, 0usize, 0usize, 0usize, 0usize);
        let mut d = dynamic;
        while (*d).d_tag != DT_NULL {
            // ld.so relocates these in place on x86_64 and aarch64; be robust if it did not.
            let mut v = (*d).d_un as usize;
            if v < base {
                v += base;
            }
            match (*d).d_tag {
                DT_STRTAB => strtab = v,
                DT_SYMTAB => symtab = v,
                DT_GNU_HASH => gnuhash = v,
                DT_VERSYM => versym = v,
                DT_VERDEF => verdef = v,
                _ => {}
            }
            d = d.add(1);
        }
        if strtab == 0 || symtab == 0 || gnuhash == 0 {
            return 0;
        }
        for k in 0..2 {
            if q.found[k] == 0 {
                q.found[k] = lookup(base, strtab, symtab, gnuhash, versym, verdef, q.names[k], &q.versions);
            }
        }
        (q.found[0] != 0 && q.found[1] != 0) as c_int
    }
}

/// # Safety
/// The addresses must be the relocated dynamic tables of one loaded object.
#[allow(clippy::too_many_arguments)] // the object's dynamic tables, each one word
unsafe fn lookup(
    base: usize,
    strtab: usize,
    symtab: usize,
    gnuhash: usize,
    versym: usize,
    verdef: usize,
    name: &[u8],
    versions: &[&[u8]; 2],
) -> usize {
    // SAFETY: per the caller, these point into the object's mapped, read-only dynamic tables; the
    // GNU hash layout is [nbuckets, symoffset, bloom_size, bloom_shift, bloom[], buckets[], chain[]].
    unsafe {
        let h = gnuhash as *const u32;
        let nbuckets = *h;
        let symoffset = *h.add(1);
        let bloom_size = *h.add(2);
        if nbuckets == 0 {
            return 0;
        }
        let buckets = (h.add(4) as *const u64).add(bloom_size as usize) as *const u32;
        let chain = buckets.add(nbuckets as usize);
        let hash = gnu_hash(name);
        let mut i = *buckets.add((hash % nbuckets) as usize);
        if i < symoffset {
            return 0;
        }
        loop {
            let ch = *chain.add((i - symoffset) as usize);
            if (ch | 1) == (hash | 1) {
                let sym = &*(symtab as *const libc::Elf64_Sym).add(i as usize);
                if sym.st_value != 0
                    && cstr_eq((strtab + sym.st_name as usize) as *const c_char, name)
                    && version_ok(strtab, versym, verdef, i, versions)
                {
                    return base + sym.st_value as usize;
                }
            }
            if ch & 1 != 0 {
                return 0;
            }
            i += 1;
        }
    }
}

/// # Safety
/// As for [`lookup`].
unsafe fn version_ok(strtab: usize, versym: usize, verdef: usize, i: u32, versions: &[&[u8]; 2]) -> bool {
    if versym == 0 || verdef == 0 {
        return true;
    }
    // SAFETY: versym has one u16 per dynamic symbol; the verdef chain is terminated by vd_next 0.
    unsafe {
        let ndx = *(versym as *const u16).add(i as usize) & 0x7fff;
        let mut vd = verdef as *const Verdef;
        loop {
            if (*vd).vd_ndx == ndx {
                let aux = &*((vd as usize + (*vd).vd_aux as usize) as *const Verdaux);
                let vname = (strtab + aux.vda_name as usize) as *const c_char;
                return versions.iter().any(|v| cstr_eq(vname, v));
            }
            if (*vd).vd_next == 0 {
                return false;
            }
            vd = (vd as usize + (*vd).vd_next as usize) as *const Verdef;
        }
    }
}

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
pub type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// The slots the trampolines in dlsym.rs jump through (0 until resolved).
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
pub static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

/// Resolves both slots if needed; returns the dlsym slot's value. Idempotent, lock-free, racing
/// threads compute the same answer. Called by the trampolines (their slow path) and the constructor.
pub extern "C" fn resolve() -> usize {
    let (s, v) = (&REAL_DLSYM, &REAL_DLVSYM);
    let cur = s.load(Acquire);
    if cur != 0 && v.load(Acquire) != 0 {
        return cur;
    }
    let mut q =
        Query { names: [b"dlsym", b"dlvsym"], versions: [b"GLIBC_2.34", glibc_base!().as_bytes()], found: [0, 0] };
    // SAFETY: callback only reads loader data and writes into q, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(callback), &mut q as *mut Query as *mut c_void) };
    if q.found[1] != 0 {
        v.store(q.found[1], Release);
    }
    if q.found[0] != 0 {
        s.store(q.found[0], Release);
    }
    q.found[0]
}

/// The dlvsym slot's value, resolving it if needed.
pub extern "C" fn resolve_v() -> usize {
    resolve();
    REAL_DLVSYM.load(Acquire)
}

pub fn real_dlsym() -> Option<DlsymFn> {
    let p = resolve();
    // SAFETY: p is the address of glibc's dlsym (checked name and version), or 0.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

pub fn real_dlvsym() -> Option<DlvsymFn> {
    let p = resolve_v();
    // SAFETY: p is the address of glibc's dlvsym (checked name and version), or 0.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlvsymFn>(p) })
}

/// True for any code address inside libmrshim.so: our wrappers and the versioned stubs glibc
/// hands out for them (a "real" function that is ours would recurse forever).
pub fn is_ours(p: usize) -> bool {
    p != 0 && object_base(p) == object_base(is_ours as *const () as usize)
}

/// The link map (usable as a dlopen handle: that object, then its dependencies) of the object
/// containing code address `addr`; null if none does.
pub fn link_map(addr: usize) -> *mut c_void {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
    let mut map: *mut c_void = std::ptr::null_mut();
    const RTLD_DL_LINKMAP: c_int = 2;
    // SAFETY: dladdr1 only reads the address and fills info and map.
    let ok = unsafe { libc::dladdr1(addr as *const c_void, info.as_mut_ptr(), &mut map, RTLD_DL_LINKMAP) };
    if ok == 0 {
        std::ptr::null_mut()
    } else {
        map
    }
}

/// The load address of the object containing `addr` (0: in none).
pub fn object_base(addr: usize) -> usize {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
    // SAFETY: dladdr only reads the address and fills info.
    if unsafe { libc::dladdr(addr as *const c_void, info.as_mut_ptr()) } == 0 {
        return 0;
    }
    // SAFETY: dladdr succeeded, so info is filled.
    unsafe { info.assume_init() }.dli_fbase as usize
}

/// Is `addr` inside an object the loader still has mapped?
pub fn still_loaded(addr: usize) -> bool {
    // SAFETY: an all-zero Dl_info is a valid value; dladdr only fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads no memory at addr; it looks it up in the link maps.
    unsafe { libc::dladdr(addr as *const c_void, &mut info) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_glibcs_own_dlsym_and_dlvsym() {
        // In the unit-test binary nothing interposes, so libc's symbols are the real ones.
        assert_eq!(resolve(), libc::dlsym as *const () as usize);
        assert_eq!(resolve_v(), libc::dlvsym as *const () as usize);
        let f = real_dlsym().unwrap();
        // SAFETY: f is glibc's dlsym; the name is NUL-terminated.
        let p = unsafe { f(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert_eq!(p as usize, libc::getpid as *const () as usize);
    }

    #[test]
    fn finds_the_pre_2_34_version_that_libdl_exported() {
        // Before glibc 2.34 dlsym/dlvsym exist only in libdl.so.2, under the architecture's
        // first version; libc.so.6 of 2.34+ keeps that version for old binaries. Looking up only
        // that version name must find exactly what the loader binds for it.
        let mut q = Query { names: [b"dlsym", b"dlvsym"], versions: [glibc_base!().as_bytes(); 2], found: [0, 0] };
        // SAFETY: callback only reads loader data and writes into q.
        unsafe { libc::dl_iterate_phdr(Some(callback), &mut q as *mut Query as *mut c_void) };
        let base = std::ffi::CString::new(glibc_base!()).unwrap();
        for (k, name) in [c"dlsym", c"dlvsym"].into_iter().enumerate() {
            // SAFETY: glibc's dlvsym with C strings.
            let want = unsafe { libc::dlvsym(libc::RTLD_DEFAULT, name.as_ptr(), base.as_ptr()) } as usize;
            assert_ne!(want, 0, "{name:?}@{} exists", glibc_base!());
            assert_eq!(q.found[k], want, "{name:?}");
        }
    }

    #[test]
    fn gnu_hash_known_values() {
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"printf"), 0x156b2bb8);
        assert_eq!(gnu_hash(b"exit"), 0x7c967e3f);
    }
}
