//! Every symbol libmrshim.so exports, in one file: the ABI surface at a glance.
//!
//! | export              | what it does                                                          |
//! |---------------------|-----------------------------------------------------------------------|
//! | `dlsym`, `dlvsym`   | naked trampolines: RTLD_DEFAULT/RTLD_NEXT jump straight into glibc (no |
//! |                     | frame of ours, so glibc sees the caller's return address); a real     |
//! |                     | handle goes to `*_handle`: real lookup, and for our names remember the |
//! |                     | real pointer and hand back our wrapper                                |
//! | `ibv_reg_mr`, `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`, `ibv_reg_dmabuf_mr`, `ibv_dereg_mr` | |
//! |                     | with rdma-core's versions (entry.rs): programs linked against         |
//! |                     | libibverbs bind here; `ibv_reg_mr@IBVERBS_1.0` / `ibv_dereg_mr@...1.0` |
//! |                     | are `reg_mr_1_0` / `dereg_mr_1_0` (the 1.0 ABI's compat `ibv_pd_1_0`) |
//! | `ibv_qp_to_qp_ex`, `ibv_destroy_qp` | the real call, and the bounce layer learns / forgets the   |
//! |                     | QP's `ibv_qp_ex` (whose `ibv_wr_*` ops it patches while its context   |
//! |                     | has a bounce region); nothing is recorded                             |
//!
//! dlsym/dlvsym are exported as `@GLIBC_2.2.5` (aarch64: `@GLIBC_2.17`) and `@@GLIBC_2.34`; every
//! export is a tail-jump stub (`.symver` must sit next to the symbol it names, hence assembly).
//!
//! Each wrapper: nested call (guard set) → the real function, nothing else. When the shim only
//! counts, a success is the real call plus counters. Otherwise build a `RegArgs`, let
//! `mrshim_core::shim().call` invoke the real function exactly once and record, catch any panic
//! (falling back to the real function if it had not run), restore errno.

use super::entry::for_each_entry;
use super::real::{self, fn_type, Entry};
use super::{bounce, elf, Guard};
use mrshim_core::config::PanicAt;
use mrshim_core::{Backend, Call, Outcome, RegArgs, Staged, StagedShadow};
use mrshim_retry::strategy::Strategy;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

// ---------------------------------------------------------------------------------------------
// dlsym / dlvsym
// ---------------------------------------------------------------------------------------------

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
    use super::*;

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
            "2:",
            "mov rax, qword ptr [rip + {slot}]",
            "test rax, rax",
            "jz 3f",
            "jmp rax",
            "3:",
            // entry rsp ≡ 8 (mod 16); three pushes make it 16-aligned for the call
            "push rdi",
            "push rsi",
            "push rdx",
            "call {resolve}",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "test rax, rax",
            "jz 4f",
            "jmp rax",
            "4:",
            "ret",
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
            "2:",
            "mov rax, qword ptr [rip + {slot}]",
            "test rax, rax",
            "jz 3f",
            "jmp rax",
            "3:",
            "push rdi",
            "push rsi",
            "push rdx",
            "call {resolve}",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "test rax, rax",
            "jz 4f",
            "jmp rax",
            "4:",
            "ret",
            handle = sym dlvsym_handle,
            default = sym dlvsym_default,
            slot = sym elf::REAL_DLVSYM,
            resolve = sym elf::resolve_v,
        )
    }
}

#[cfg(target_arch = "aarch64")]
mod aarch64 {
    use super::*;

    /// `dlsym`. RTLD_DEFAULT (0) and RTLD_NEXT (-1) branch to glibc's dlsym with x30 untouched; if
    /// it is not resolved yet, x0/x1 and the frame record (x29, x30) are saved around
    /// `elf::resolve` and restored before the branch, so glibc sees the caller's x30.
    #[unsafe(naked)]
    pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        std::arch::naked_asm!(
            "cbz x0, 2f",
            "cmn x0, #1",
            "b.eq 2f",
            "b {handle}",
            "2:",
            "adrp x16, {slot}",
            "ldr x16, [x16, :lo12:{slot}]",
            "cbz x16, 3f",
            "br x16",
            "3:",
            "stp x29, x30, [sp, #-32]!",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "bl {resolve}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldp x29, x30, [sp], #32",
            "cbz x16, 4f",
            "br x16",
            "4:",
            "mov x0, #0",
            "ret",
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
            "2:",
            "adrp x16, {slot}",
            "ldr x16, [x16, :lo12:{slot}]",
            "cbz x16, 3f",
            "br x16",
            "3:",
            "stp x29, x30, [sp, #-48]!",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "str x2, [sp, #32]",
            "bl {resolve}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldr x2, [sp, #32]",
            "ldp x29, x30, [sp], #48",
            "cbz x16, 4f",
            "br x16",
            "4:",
            "mov x0, #0",
            "ret",
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
    // SAFETY: per the function contract. No allocation on this path.
    let (n, v) =
        unsafe { (CStr::from_ptr(name).to_bytes(), (!version.is_null()).then(|| CStr::from_ptr(version).to_bytes())) };
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

/// Our function for each real one of library slot `slot`: the wrapper column of the entry table
/// (entry.rs), instantiated per slot.
macro_rules! define_wrapper {
    ($($v:ident, $name:literal, $ver:literal, $dflt:ident, $sig:ty, $wrapper:ident, $call:expr;)*) => {
        fn wrapper(slot: usize, f: Entry) -> usize {
            match f {
                $(Entry::$v => {
                    const W: [fn_type::$v; real::SLOTS] = per_slot!($wrapper);
                    W[slot] as usize
                })*
            }
        }
    };
}
/// `[w::<0>, .., w::<SLOTS - 1>]`.
macro_rules! per_slot {
    ($w:ident) => {
        [$w::<0>, $w::<1>, $w::<2>, $w::<3>, $w::<4>, $w::<5>, $w::<6>, $w::<7>]
    };
}
const _: () = assert!(real::SLOTS == 8, "per_slot! lists every slot");
for_each_entry!(define_wrapper);

/// Two exported versions of one name: `name@old` and the default `name@@new`, both tail jumps
/// (no frame: the dlsym trampolines rely on the caller's return address being untouched).
macro_rules! two_versions {
    ($name:literal, $old_ver:expr => $old:path, $new_ver:literal => $new:path) => {
        #[cfg(not(test))]
        std::arch::global_asm!(
            concat!(".globl __mrshim_", $name, "_old"),
            concat!(".type __mrshim_", $name, "_old,%function"),
            concat!("__mrshim_", $name, "_old:"),
            concat!(tail_jump!(), " {old}"),
            concat!(".symver __mrshim_", $name, "_old, ", $name, "@", $old_ver),
            concat!(".globl __mrshim_", $name, "_new"),
            concat!(".type __mrshim_", $name, "_new,%function"),
            concat!("__mrshim_", $name, "_new:"),
            concat!(tail_jump!(), " {new}"),
            concat!(".symver __mrshim_", $name, "_new, ", $name, "@@", $new_ver),
            old = sym $old,
            new = sym $new,
        );
    };
}

two_versions!("dlsym", glibc_base!() => dlsym, "GLIBC_2.34" => dlsym);
two_versions!("dlvsym", glibc_base!() => dlvsym, "GLIBC_2.34" => dlvsym);
two_versions!("dlclose", glibc_base!() => super::unload::dlclose, "GLIBC_2.34" => super::unload::dlclose);
/// Every row of the entry table exported at its version: `name@@VER` for the default, `name@VER`
/// for an older ABI. Each is a tail jump to slot 0's wrapper, the one linked calls mean; the
/// IBVERBS version nodes come from the same table (build.rs).
macro_rules! export_entries {
    ($($v:ident, $name:literal, $ver:literal, $dflt:ident, $sig:ty, $wrapper:ident, $call:expr;)*) => {
        $(export_entries!(@one $name, $ver, $dflt, $wrapper);)*
    };
    (@one $name:literal, $ver:literal, default, $w:ident) => { export_entries!(@asm $name, "@@", $ver, $w); };
    (@one $name:literal, $ver:literal, versioned, $w:ident) => { export_entries!(@asm $name, "@", $ver, $w); };
    (@asm $name:literal, $at:literal, $ver:literal, $w:ident) => {
        #[cfg(not(test))]
        std::arch::global_asm!(
            concat!(".globl __mrshim_export_", stringify!($w)),
            concat!(".type __mrshim_export_", stringify!($w), ",%function"),
            concat!("__mrshim_export_", stringify!($w), ":"),
            concat!(tail_jump!(), " {w}"),
            concat!(".symver __mrshim_export_", stringify!($w), ", ", $name, $at, $ver),
            w = sym $w::<0>,
        );
    };
}
for_each_entry!(export_entries);

// ---------------------------------------------------------------------------------------------
// The verbs wrappers
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Real {
    RegMr(fn_type::RegMr),
    Iova(fn_type::RegMrIova),
    Iova2(fn_type::RegMrIova2),
    Dmabuf(fn_type::RegDmabufMr),
    Dereg(fn_type::DeregMr),
}

impl Real {
    /// The entry point this function is.
    fn call(self) -> Call {
        match self {
            Real::RegMr(_) => Call::RegMr,
            Real::Iova(_) => Call::RegMrIova,
            Real::Iova2(_) => Call::RegMrIova2,
            Real::Dmabuf(_) => Call::RegDmabufMr,
            Real::Dereg(_) => Call::DeregMr,
        }
    }
}

/// Calls the real function; remembers the first outcome for the panic fallback.
struct RealFunctions {
    real: Real,
    /// The library instance `real` belongs to (real.rs): retries that switch entry points stay
    /// in it.
    slot: usize,
    /// The IBVERBS_1.0 ABI: pd/mr are rdma-core's compat structs; don't read through them.
    compat10: bool,
    /// The caller's own arguments (by address: retry attempts are other values).
    orig: *const RegArgs,
    /// The outcome of the caller's own call, once made: what a panic falls back to (never an
    /// attempt's, whose MR is not the caller's until adopted).
    done: Cell<Option<Outcome>>,
    /// The outcome of a real call the fast path already made: the first invoke returns it.
    preset: Cell<Option<Outcome>>,
}

fn errno() -> c_int {
    // SAFETY: __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

impl RealFunctions {
    fn mr_outcome(mr: *mut c_void) -> Outcome {
        let e = errno();
        if mr.is_null() {
            return Outcome { err: if e != 0 { e } else { -1 }, errno_after: e, ..Default::default() };
        }
        // SAFETY: a non-null return of a successful registration is a valid struct ibv_mr (the
        // 1.0 compat struct starts with the same fields).
        let m = unsafe { &*(mr as *const mrshim_verbs::ibv_mr) };
        Outcome { mr: mr as usize, lkey: m.lkey, rkey: m.rkey, err: 0, errno_after: e }
    }
}

impl RealFunctions {
    /// The real function for `call`: the intercepted one, or (for retry attempts that switch
    /// entry points) another real function of the same libibverbs.
    fn real_for(&self, call: Call) -> Option<Real> {
        if self.real.call() == call {
            return Some(self.real);
        }
        let f = Entry::for_call(call);
        let p = real::get(self.slot, f);
        if p == 0 {
            return None;
        }
        // SAFETY: p is the real function of that name and version, with this signature.
        Some(unsafe {
            match call {
                Call::RegMr => Real::RegMr(std::mem::transmute::<usize, fn_type::RegMr>(p)),
                Call::RegMrIova => Real::Iova(std::mem::transmute::<usize, fn_type::RegMrIova>(p)),
                Call::RegMrIova2 => Real::Iova2(std::mem::transmute::<usize, fn_type::RegMrIova2>(p)),
                Call::RegDmabufMr => Real::Dmabuf(std::mem::transmute::<usize, fn_type::RegDmabufMr>(p)),
                Call::DeregMr => Real::Dereg(std::mem::transmute::<usize, fn_type::DeregMr>(p)),
            }
        })
    }
}

impl Backend for RealFunctions {
    fn is_device_memory(&self, addr: u64) -> bool {
        super::gpu::is_device(addr)
    }

    fn export_dmabuf(&self, addr: u64, len: u64) -> Result<(i32, u64), String> {
        super::gpu::export_dmabuf(addr, len)
    }

    fn bounce_shadow(&self, a: &RegArgs) -> Result<Box<dyn StagedShadow>, String> {
        bounce::prepare(a.addr, a.length, a.iova.unwrap_or(a.addr), a.access)
    }

    fn adopt(&self, strategy: Strategy, orig: &RegArgs, attempt: &RegArgs, mr: usize, shadow: Staged) {
        if let Some(s) = shadow {
            return s.adopt(mr);
        }
        let (shown, exported_fd) = match strategy {
            Strategy::VaToDmabuf => (orig.addr, attempt.dmabuf_fd),
            // rdma-core's dmabuf MRs carry the offset in addr.
            Strategy::DmabufToVa => (orig.dmabuf_offset.unwrap_or(0), None),
            _ => return,
        };
        // SAFETY: mr is the attempt's live MR, not yet handed to the application.
        unsafe { bounce::adopt_addr(mr, shown, exported_fd) };
    }

    fn discard(&self, strategy: Strategy, attempt: &RegArgs, shadow: Staged) {
        if let Some(s) = shadow {
            return s.abandon();
        }
        if strategy != Strategy::VaToDmabuf {
            return;
        }
        if let Some(fd) = attempt.dmabuf_fd.filter(|fd| *fd >= 0) {
            // SAFETY: closing the dmabuf fd the shim exported for this failed attempt.
            unsafe { libc::close(fd) };
        }
    }

    fn can_retry(&self) -> bool {
        !self.compat10
    }

    fn invoke(&self, a: &RegArgs) -> Outcome {
        if let Some(o) = self.preset.take() {
            self.done.set(Some(o));
            return o;
        }
        let pd = a.pd as *mut c_void;
        let addr = a.addr as *mut c_void;
        let len = a.length as usize;
        let Some(real) = self.real_for(a.call()) else {
            return Outcome { err: libc::ENOSYS, errno_after: libc::ENOSYS, ..Default::default() };
        };
        // SAFETY: each arm calls the real function with the application's arguments (or, for
        // retries, arguments derived from them), with the signature rdma-core declares.
        let out = unsafe {
            match real {
                Real::RegMr(f) => Self::mr_outcome(f(pd, addr, len, a.access as c_int)),
                Real::Iova(f) => Self::mr_outcome(f(pd, addr, len, a.iova.unwrap_or(a.addr), a.access as c_int)),
                Real::Iova2(f) => Self::mr_outcome(f(pd, addr, len, a.iova.unwrap_or(a.addr), a.access as c_uint)),
                Real::Dmabuf(f) => Self::mr_outcome(f(
                    pd,
                    a.dmabuf_offset.unwrap_or(0),
                    len,
                    a.iova.unwrap_or(a.addr),
                    a.dmabuf_fd.unwrap_or(-1),
                    a.access as c_int,
                )),
                Real::Dereg(f) => {
                    // An MR a strategy made: give rdma-core back what it set, clean up after.
                    // (inside the unsafe block: the application's MR, deregistered by this call)
                    let after = if bounce::any_fixups() { bounce::before_dereg(a.mr) } else { None };
                    let rc = f(a.mr as *mut c_void);
                    let e = errno();
                    if let Some(after) = after {
                        after(rc == 0);
                    }
                    Outcome { err: rc, errno_after: e, ..Default::default() }
                }
            }
        };
        if std::ptr::eq(a, self.orig) {
            self.done.set(Some(out));
        }
        out
    }

    fn device_name(&self, pd: usize) -> Option<mrshim_core::DevName> {
        if self.compat10 || pd == 0 {
            return None;
        }
        // SAFETY: pd is the application's protection domain, which the real call just accepted
        // (or, on failure, dereferenced itself); context and device are rdma-core-owned and live
        // as long as the pd. name is a NUL-padded char[64]; we never read past it.
        unsafe {
            let ctx = (*(pd as *const mrshim_verbs::ibv_pd)).context;
            if ctx.is_null() {
                return None;
            }
            let dev = (*ctx).device;
            if dev.is_null() {
                return None;
            }
            let name = &(*dev).name;
            Some(mrshim_core::DevName::new(std::slice::from_raw_parts(name.as_ptr() as *const u8, name.len())))
        }
    }
}
/// The slow path of every wrapper: `Shim::call` invokes the real function (unless `preset`
/// already holds its outcome) and records; a panic falls back to the real function if it had
/// not run yet.
fn record(args: RegArgs, real: Real, slot: usize, compat10: bool, preset: Option<Outcome>) -> Outcome {
    let backend = RealFunctions { real, slot, compat10, orig: &args, done: Cell::new(None), preset: Cell::new(preset) };
    mrshim_core::internal::guarded(args.call().name(), || mrshim_core::shim().call(&args, &backend))
        .unwrap_or_else(|| backend.done.get().unwrap_or_else(|| backend.invoke(&args)))
}

/// Runs a wrapper's own part, `body`, which calls the real function through the `direct` it is
/// handed (at most once). A panic anywhere in it is caught and reported, and the caller gets
/// the real function's answer (calling it now if it had not run), with its errno.
fn shielded<R: Copy>(name: &'static str, direct: impl Fn() -> R, body: impl FnOnce(&dyn Fn() -> R) -> R) -> R {
    let ran: Cell<Option<(R, c_int)>> = Cell::new(None);
    let once = || {
        let r = direct();
        ran.set(Some((r, errno())));
        r
    };
    mrshim_core::internal::guarded(name, || body(&once)).unwrap_or_else(|| match ran.get() {
        Some((r, e)) => {
            set_errno(e);
            r
        }
        None => direct(),
    })
}

/// The real function for `f` in library slot `slot`, as the function pointer type `F`.
///
/// # Safety
/// `F` must be the signature of `f`'s symbol (a `fn` pointer type).
unsafe fn real_fn<F: Copy>(slot: usize, f: Entry) -> Option<F> {
    let p = real::get(slot, f);
    // SAFETY: per the contract, p (non-null) is a function of type F; F is pointer-sized.
    (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
}

/// Every registration wrapper, after [`Guard::route`]: nested call (no guard) → `direct` (the
/// real function with the caller's arguments), nothing else. When the shim only counts (no
/// records, injection or anything learned), a success is the real call plus counters; anything
/// else goes through [`record`].
fn reg_hook(
    guard: Option<Guard>,
    slot: usize,
    direct: impl Fn() -> *mut c_void,
    real: Real,
    compat10: bool,
    args: impl FnOnce() -> RegArgs,
) -> *mut c_void {
    let Some(_g) = guard else { return direct() };
    let call = real.call();
    shielded(call.name(), direct, |direct| {
        let shim = mrshim_core::shim();
        shim.debug_panic(PanicAt::Hook);
        let a = args();
        if shim.counts_only(call) {
            let mr = direct();
            if !mr.is_null() {
                shim.succeeded(call, a.length, mr as usize);
                return mr;
            }
            return finish_mr(record(a, real, slot, compat10, Some(RealFunctions::mr_outcome(mr))));
        }
        finish_mr(record(a, real, slot, compat10, None))
    })
}

fn no_real() -> *mut c_void {
    set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

fn finish_mr(out: Outcome) -> *mut c_void {
    set_errno(out.errno_after);
    out.mr as *mut c_void
}

fn reg_args(call: Call, pd: *mut c_void, addr: u64, length: usize, iova: u64, access: u32) -> RegArgs {
    RegArgs {
        call: Some(call),
        pd: pd as usize,
        addr,
        length: length as u64,
        iova: Some(iova),
        access,
        ..Default::default()
    }
}

// Each wrapper is instantiated per library slot `S` (real.rs): slot 0 is exported (above), the
// others are handed out by lookups that found another copy (`wrapper`).

/// # Safety
/// Called by the application with ibv_reg_mr's contract (exported as `ibv_reg_mr@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_reg_mr<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { reg_mr(S, Entry::RegMr, pd, addr, length, access) }
}

/// # Safety
/// Called with ibv_reg_mr@IBVERBS_1.0's contract (pd is a `struct ibv_pd_1_0 *`).
pub unsafe extern "C" fn reg_mr_1_0<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { reg_mr(S, Entry::RegMr10, pd, addr, length, access) }
}

/// ibv_reg_mr of either ABI (`entry` RegMr or RegMr10: one C signature; 1.0's pd is the compat
/// struct, which the shim does not read through).
///
/// # Safety
/// The arguments follow that version's ibv_reg_mr contract.
unsafe fn reg_mr(
    s: usize,
    entry: Entry,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut c_void {
    let compat10 = entry == Entry::RegMr10;
    let (slot, g) = Guard::route(s);
    // SAFETY: both versions of ibv_reg_mr have this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegMr>(slot, entry) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(pd, addr, length, access) };
    reg_hook(g, slot, direct, Real::RegMr(f), compat10, || {
        let a = reg_args(Call::RegMr, pd, addr as u64, length, addr as u64, access as u32);
        RegArgs { symbol_version: if compat10 { Some("IBVERBS_1.0") } else { a.symbol_version }, ..a }
    })
}

/// # Safety
/// Called by the application with ibv_reg_mr_iova's contract.
pub unsafe extern "C" fn ibv_reg_mr_iova<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut c_void {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_reg_mr_iova@IBVERBS_1.7 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegMrIova>(slot, Entry::RegMrIova) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(pd, addr, length, iova, access) };
    reg_hook(g, slot, direct, Real::Iova(f), false, || {
        reg_args(Call::RegMrIova, pd, addr as u64, length, iova, access as u32)
    })
}

/// # Safety
/// Called by the application with ibv_reg_mr_iova2's contract.
pub unsafe extern "C" fn ibv_reg_mr_iova2<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut c_void {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_reg_mr_iova2@IBVERBS_1.8 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegMrIova2>(slot, Entry::RegMrIova2) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments (nested: libibverbs' own ibv_reg_mr).
    let direct = || unsafe { f(pd, addr, length, iova, access) };
    reg_hook(g, slot, direct, Real::Iova2(f), false, || {
        reg_args(Call::RegMrIova2, pd, addr as u64, length, iova, access)
    })
}

/// # Safety
/// Called by the application with ibv_reg_dmabuf_mr's contract.
pub unsafe extern "C" fn ibv_reg_dmabuf_mr<const S: usize>(
    pd: *mut c_void,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut c_void {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_reg_dmabuf_mr@IBVERBS_1.12 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegDmabufMr>(slot, Entry::RegDmabufMr) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(pd, offset, length, iova, fd, access) };
    // The VA of a dmabuf MR is its iova; `offset` is into the dmabuf.
    reg_hook(g, slot, direct, Real::Dmabuf(f), false, || RegArgs {
        dmabuf_fd: Some(fd),
        dmabuf_offset: Some(offset),
        ..reg_args(Call::RegDmabufMr, pd, iova, length, iova, access as u32)
    })
}

fn dereg_args(mr: *mut c_void, compat10: bool) -> RegArgs {
    let mut a = RegArgs { call: Some(Call::DeregMr), mr: mr as usize, ..Default::default() };
    if !mr.is_null() {
        // SAFETY: the application hands us a live MR (ibv_mr, or the 1.0 compat struct which
        // starts with the same context/pd/addr/length fields); read before the real call frees it.
        let m = unsafe { &*(mr as *const mrshim_verbs::ibv_mr) };
        a.addr = m.addr as u64;
        a.length = m.length as u64;
        a.pd = m.pd as usize;
        if compat10 {
            a.symbol_version = Some("IBVERBS_1.0");
        }
    }
    a
}

/// Both ibv_dereg_mr wrappers of library slot `slot` (`entry`: which version); the fast path as
/// in [`reg_hook`] (an MR a strategy made always takes the slow one: it needs its fix-up).
fn dereg_hook(slot: usize, entry: Entry, mr: *mut c_void, compat10: bool) -> c_int {
    let (slot, g) = Guard::route(slot);
    // SAFETY: both ibv_dereg_mr versions have this C signature.
    let Some(f) = (unsafe { real_fn::<fn_type::DeregMr>(slot, entry) }) else {
        set_errno(libc::ENOSYS);
        return libc::ENOSYS;
    };
    // SAFETY: the real ibv_dereg_mr with the caller's MR.
    let direct = || unsafe { f(mr) };
    let Some(_g) = g else { return direct() };
    shielded(Call::DeregMr.name(), direct, |direct| {
        let shim = mrshim_core::shim();
        shim.debug_panic(PanicAt::Hook);
        let a = dereg_args(mr, compat10);
        let preset = if shim.counts_only(Call::DeregMr) && !bounce::any_fixups() {
            let rc = direct();
            if rc == 0 {
                shim.succeeded(Call::DeregMr, a.length, mr as usize);
                return 0;
            }
            Some(Outcome { err: rc, errno_after: errno(), ..Default::default() })
        } else {
            None
        };
        let out = record(a, Real::Dereg(f), slot, compat10, preset);
        set_errno(out.errno_after);
        out.err
    })
}

/// # Safety
/// Called by the application with ibv_dereg_mr's contract (exported as `ibv_dereg_mr@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_dereg_mr<const S: usize>(mr: *mut c_void) -> c_int {
    dereg_hook(S, Entry::DeregMr, mr, false)
}

/// # Safety
/// Called with ibv_dereg_mr@IBVERBS_1.0's contract.
pub unsafe extern "C" fn dereg_mr_1_0<const S: usize>(mr: *mut c_void) -> c_int {
    dereg_hook(S, Entry::DeregMr10, mr, true)
}

// ---------------------------------------------------------------------------------------------
// QP objects the bounce layer follows
// ---------------------------------------------------------------------------------------------

/// # Safety
/// Called by the application with ibv_qp_to_qp_ex's contract (`@@IBVERBS_1.6`).
pub unsafe extern "C" fn ibv_qp_to_qp_ex<const S: usize>(qp: *mut c_void) -> *mut c_void {
    // SAFETY: ibv_qp_to_qp_ex@IBVERBS_1.6 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::QpToQpEx>(Guard::slot(S), Entry::QpToQpEx) }) else {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    };
    // SAFETY: the real function with the caller's QP.
    let q = unsafe { f(qp) };
    if !q.is_null() {
        let e = errno();
        mrshim_core::internal::guarded("ibv_qp_to_qp_ex", || bounce::note_qpx(q as usize));
        set_errno(e);
    }
    q
}

/// # Safety
/// Called with ibv_destroy_qp's contract (`@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_destroy_qp<const S: usize>(qp: *mut c_void) -> c_int {
    // SAFETY: ibv_destroy_qp@IBVERBS_1.1 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::DestroyQp>(Guard::slot(S), Entry::DestroyQp) }) else {
        set_errno(libc::ENOSYS);
        return libc::ENOSYS;
    };
    // SAFETY: the real function with the caller's QP, called exactly once.
    bounce::destroying_qp(qp as usize, || unsafe { f(qp) })
}
