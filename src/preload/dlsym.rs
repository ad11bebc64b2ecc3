//! `dlsym` / `dlvsym`: how a program that looks up a verbs function by name gets our wrapper.
//! RTLD_DEFAULT and RTLD_NEXT jump straight into glibc from naked per-architecture trampolines
//! (no frame of ours, so glibc sees the caller's return address); a real handle goes to
//! `*_handle`: the real lookup, and for our names remember the real pointer (real.rs) and hand
//! back the wrapper of that library's slot. Exported from hooks.rs.

use super::elf;
use super::real::{self, Entry};
use super::wrappers::wrapper;
use std::ffi::{c_char, c_void, CStr};

// The trampolines are per architecture; each keeps the caller's return address where glibc's
// dlsym/dlvsym read it (x86_64: on top of the stack; aarch64: in x30) when it jumps on.
// (Unit tests do not export the versioned stubs that use them.)
#[cfg(target_arch = "aarch64")]
#[cfg_attr(test, allow(unused_imports))]
pub use aarch64::{dlsym, dlvsym};
#[cfg(target_arch = "x86_64")]
#[cfg_attr(test, allow(unused_imports))]
pub use x86_64::{dlsym, dlvsym};

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    /// Label `2:` of both trampolines: tail-jump to glibc's function in `{slot}`, resolving it
    /// through `{resolve}` first when it is not yet (the argument registers saved around the
    /// call and restored before the jump; 0 if glibc has none).
    macro_rules! to_glibc {
        () => {
            concat!(
                "2:\n",
                "mov rax, qword ptr [rip + {slot}]\n",
                "test rax, rax\n",
                "jz 3f\n",
                "jmp rax\n",
                "3:\n",
                // entry rsp ≡ 8 (mod 16); three pushes make it 16-aligned for the call
                "push rdi\n",
                "push rsi\n",
                "push rdx\n",
                "call {resolve}\n",
                "pop rdx\n",
                "pop rsi\n",
                "pop rdi\n",
                "test rax, rax\n",
                "jz 4f\n",
                "jmp rax\n",
                "4:\n",
                "ret",
            )
        };
    }

    use super::{dlsym_handle, dlvsym_default, dlvsym_handle, elf};
    use std::ffi::{c_char, c_void};

    /// `dlsym`. RTLD_DEFAULT (0) and RTLD_NEXT (-1) tail-jump to glibc's dlsym; if it is not resolved
    /// yet, the arguments are saved around `elf::resolve` and restored before the jump, so the
    /// caller's return address is still on top of the stack when glibc runs.
    #[unsafe(naked)]
    pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        std::arch::naked_asm!(
            "test rdi, rdi",
            "jz 2f",
            "cmp rdi, -1",
            "je 2f",
            "jmp {handle}",
            to_glibc!(),
            handle = sym dlsym_handle,
            slot = sym elf::REAL_DLSYM,
            resolve = sym elf::resolve,
        )
    }

    /// `dlvsym`: as [`dlsym`], with the version in rdx.
    #[unsafe(naked)]
    pub unsafe extern "C" fn dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
        std::arch::naked_asm!(
            "test rdi, rdi",
            "jnz 5f",
            // RTLD_DEFAULT: glibc's dlvsym never matches our unversioned definitions, so for our
            // names ask dlvsym_default first (with the caller's return address, in rcx); it answers
            // 0 for anything else (then: tail jump).
            "push rdi",
            "push rsi",
            "push rdx",
            "mov rcx, qword ptr [rsp + 24]",
            "call {default}",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "test rax, rax",
            "jz 2f",
            "ret",
            "5:",
            "cmp rdi, -1",
            "je 2f",
            "jmp {handle}",
            to_glibc!(),
            handle = sym dlvsym_handle,
            default = sym dlvsym_default,
            slot = sym elf::REAL_DLVSYM,
            resolve = sym elf::resolve_v,
        )
    }
}

#[cfg(target_arch = "aarch64")]
mod aarch64 {
    /// Label `2:` of both trampolines: branch to glibc's function in `{slot}` with x30
    /// untouched, resolving it through `{resolve}` first when it is not yet (x0-x2 and the frame
    /// record saved around the call and restored before the branch; 0 if glibc has none).
    macro_rules! to_glibc {
        () => {
            concat!(
                "2:\n",
                "adrp x16, {slot}\n",
                "ldr x16, [x16, :lo12:{slot}]\n",
                "cbz x16, 3f\n",
                "br x16\n",
                "3:\n",
                "stp x29, x30, [sp, #-48]!\n",
                "mov x29, sp\n",
                "stp x0, x1, [sp, #16]\n",
                "str x2, [sp, #32]\n",
                "bl {resolve}\n",
                "mov x16, x0\n",
                "ldp x0, x1, [sp, #16]\n",
                "ldr x2, [sp, #32]\n",
                "ldp x29, x30, [sp], #48\n",
                "cbz x16, 4f\n",
                "br x16\n",
                "4:\n",
                "mov x0, #0\n",
                "ret",
            )
        };
    }

    use super::{dlsym_handle, dlvsym_default, dlvsym_handle, elf};
    use std::ffi::{c_char, c_void};

    /// `dlsym`. RTLD_DEFAULT (0) and RTLD_NEXT (-1) branch to glibc's dlsym with x30 untouched; if
    /// it is not resolved yet, the arguments and the frame record (x29, x30) are saved around
    /// `elf::resolve` and restored before the branch, so glibc sees the caller's x30.
    #[unsafe(naked)]
    pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        std::arch::naked_asm!(
            "cbz x0, 2f",
            "cmn x0, #1",
            "b.eq 2f",
            "b {handle}",
            to_glibc!(),
            handle = sym dlsym_handle,
            slot = sym elf::REAL_DLSYM,
            resolve = sym elf::resolve,
        )
    }

    /// `dlvsym`: as [`dlsym`], with the version in x2; RTLD_DEFAULT asks `dlvsym_default` first
    /// with the caller's return address (x30) as its fourth argument.
    #[unsafe(naked)]
    pub unsafe extern "C" fn dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
        std::arch::naked_asm!(
            "cbnz x0, 5f",
            "stp x29, x30, [sp, #-48]!",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "str x2, [sp, #32]",
            "mov x3, x30",
            "bl {default}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldr x2, [sp, #32]",
            "ldp x29, x30, [sp], #48",
            "cbz x16, 2f",
            "mov x0, x16",
            "ret",
            "5:",
            "cmn x0, #1",
            "b.eq 2f",
            "b {handle}",
            to_glibc!(),
            handle = sym dlvsym_handle,
            default = sym dlvsym_default,
            slot = sym elf::REAL_DLVSYM,
            resolve = sym elf::resolve_v,
        )
    }
}

/// dlsym with a real handle (an object's link map): never depends on the caller's address.
unsafe extern "C" fn dlsym_handle(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(real) = elf::real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: forwarding the application's own arguments to glibc's dlsym.
    let p = unsafe { real(handle, name) };
    // SAFETY: name was accepted by glibc as a C string (p non-null implies a valid name).
    unsafe { after_lookup(name, std::ptr::null(), p) }
}

unsafe extern "C" fn dlvsym_handle(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
    let Some(real) = elf::real_dlvsym() else { return std::ptr::null_mut() };
    // SAFETY: forwarding the application's own arguments to glibc's dlvsym.
    let p = unsafe { real(handle, name, version) };
    // SAFETY: as in dlsym_handle; version is only read when non-null.
    unsafe { after_lookup(name, version, p) }
}

/// dlvsym(RTLD_DEFAULT, name, version) for one of our names: look it up from here (the global
/// scope), else in the scope of the object `caller` (a return address) belongs to — an
/// RTLD_LOCAL plugin whose libibverbs is private to it — and hand back our wrapper. 0 means
/// "not ours / not found": the trampoline then lets glibc answer for the caller, exactly as
/// without the shim.
unsafe extern "C" fn dlvsym_default(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    caller: usize,
) -> *mut c_void {
    if name.is_null() || version.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dlvsym's contract: name and version are C strings. No allocation on this path.
    let (n, v) = unsafe { (CStr::from_ptr(name).to_bytes(), CStr::from_ptr(version).to_bytes()) };
    let Some(f) = real::classify(n, Some(v)) else { return std::ptr::null_mut() };
    let Some(real) = elf::real_dlvsym() else { return std::ptr::null_mut() };
    // SAFETY: forwarding the caller's arguments to glibc's dlvsym.
    let mut p = unsafe { real(handle, name, version) };
    if p.is_null() {
        let scope = elf::link_map(caller);
        if !scope.is_null() {
            // SAFETY: a link map is a valid dlvsym handle: that object and its dependencies.
            p = unsafe { real(scope, name, version) };
        }
    }
    if p.is_null() || elf::is_ours(p as usize) {
        return p;
    }
    wrapped(f, p)
}

/// # Safety
/// `name` must be a C string when `p` is non-null; `version` a C string or null.
unsafe fn after_lookup(name: *const c_char, version: *const c_char, p: *mut c_void) -> *mut c_void {
    if p.is_null() || name.is_null() || elf::is_ours(p as usize) {
        return p;
    }
    // SAFETY: per the function contract, `name` is a C string. No allocation on this path.
    let n = unsafe { CStr::from_ptr(name).to_bytes() };
    let v = if version.is_null() {
        None
    } else {
        // SAFETY: per the function contract, a non-null `version` is a C string.
        Some(unsafe { CStr::from_ptr(version).to_bytes() })
    };
    let Some(f) = real::classify(n, v) else { return p };
    wrapped(f, p)
}

/// What a lookup that found `p`, the real `f`, hands back: the wrapper of the slot of `p`'s
/// library (real.rs). With every slot taken: `p` itself — the calls reach their own library
/// unrecorded, which one line says — never a wrapper that would reach another copy.
fn wrapped(f: Entry, p: *mut c_void) -> *mut c_void {
    if let Some(slot) = real::remember(f, p as usize) {
        return wrapper(slot, f) as *mut c_void;
    }
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if elf::object_base(p as usize) != 0 && !SAID.swap(true, std::sync::atomic::Ordering::AcqRel) {
        mrshim_core::stderr_line(&format!(
            "mrshim: more than {} libibverbs copies looked up in this process: calls through the later ones pass \
             through unrecorded",
            real::SLOTS - 1
        ));
    }
    p
}
