//! The thin unsafe layer of libmrshim.so. Exports (listed in hooks.rs): the dlsym/dlvsym
//! trampolines (dlsym.rs), the verbs wrappers (wrappers.rs) and the real functions behind them
//! (backend.rs), dlclose (unload.rs), the descriptor calls the log watches (fds.rs); real-symbol lookup (elf.rs, real.rs, entry.rs); the bounce
//! layer's FFI (bounce.rs) and the GPU runtimes' copy engines (gpu/); process-level glue
//! (constructor, fork, exit) and the hook flag here.
//!
//! The decisions live in plain-Rust crates: one call's path, records, counters and warnings in
//! mrshim-core; strategies, injection and learning in mrshim-retry; bounce regions, coherence
//! and when to wrap a context in mrshim-bounce; GPU ABI facts and self-test verdicts in
//! gpu/abi.rs (plain, unit-tested). What stays here reads or writes C structures, calls
//! C functions, or is a table of them.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "libmrshim.so supports x86_64 and aarch64 only: its dlsym/dlvsym trampolines (dlsym.rs) are \
     per-architecture assembly that must not add a stack frame (docs/shim.md)"
);

/// The unconditional branch of this architecture, for tail-jump stubs (not built for unit tests).
#[cfg(target_arch = "x86_64")]
#[cfg_attr(test, allow(unused_macros))]
macro_rules! tail_jump {
    () => {
        "jmp"
    };
}
#[cfg(target_arch = "aarch64")]
#[cfg_attr(test, allow(unused_macros))]
macro_rules! tail_jump {
    () => {
        "b"
    };
}

/// The version glibc gave dlsym/dlvsym (in libdl.so.2) when the architecture was added: what
/// programs built on glibc < 2.34 reference. build.rs writes the same name into the version script.
#[cfg(target_arch = "x86_64")]
macro_rules! glibc_base {
    () => {
        "GLIBC_2.2.5"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! glibc_base {
    () => {
        "GLIBC_2.17"
    };
}

mod backend;
pub mod bounce;
mod dlsym;
pub mod elf;
mod entry;
pub mod fds;
pub mod gpu;
pub mod hooks;
pub mod real;
mod rereg;
pub mod unload;
mod wrappers;

use std::cell::Cell;

thread_local! {
    /// Set while this thread is inside one of our hooks: nested intercepted calls (libibverbs'
    /// ibv_reg_mr → ibv_reg_mr_iova2 through its PLT, anything the shim itself calls) pass
    /// straight through, so one application call is one record. 0: not in a hook; otherwise the
    /// library slot (real.rs) of the outer call + 1, which its nested calls go to: a copy's
    /// internal PLT call lands in our export and must still reach that copy. `const` + no Drop:
    /// plain TLS, no lazy registration, usable during thread start-up and teardown.
    static IN_HOOK: Cell<u8> = const { Cell::new(0) };
}

/// Proof that this thread entered the shim from outside; leaving drops it. Holds the flag's
/// address: in a cdylib every TLS access is a `__tls_get_addr` call, so look it up once.
pub struct Guard(*const Cell<u8>);

impl Guard {
    /// None when already inside a hook on this thread (or TLS is gone).
    #[inline]
    pub fn enter() -> Option<Guard> {
        Guard::route(0).1
    }

    /// A call into the wrapper of library slot `slot`: the slot its real function comes from
    /// (a nested call: the outer call's; TLS gone: `slot`) and, when this thread was not in a
    /// hook yet, the guard.
    #[inline]
    pub fn route(slot: usize) -> (usize, Option<Guard>) {
        let Ok(c) = IN_HOOK.try_with(|c| c as *const Cell<u8>) else { return (slot, None) };
        // This thread's own flag; it lives as long as the thread, the guard does not leave the
        // thread (raw pointer: !Send).
        // SAFETY: as just said.
        let outer = unsafe { (*c).get() };
        if outer != 0 {
            return (usize::from(outer - 1), None);
        }
        // Set only here, after the check: a Guard built for a nested call and dropped unused
        // would clear the outer call's flag (found by the registration fuzz test).
        // SAFETY: as above.
        unsafe { (*c).set(slot as u8 + 1) };
        (slot, Some(Guard(c)))
    }

    /// The slot a call that takes no guard (ibv_qp_to_qp_ex, ibv_destroy_qp) goes to.
    #[inline]
    pub fn slot(slot: usize) -> usize {
        match IN_HOOK.try_with(|c| c.get()) {
            Ok(outer) if outer != 0 => usize::from(outer - 1),
            _ => slot,
        }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in route: the current thread's flag, still alive.
        unsafe { (*self.0).set(0) };
    }
}

const _: () = assert!(real::SLOTS < u8::MAX as usize, "a slot + 1 fits the hook flag");

#[cfg(not(test))]
mod process {
    extern "C" fn init() {
        // Resolve glibc's dlsym/dlvsym now (the trampolines also do it lazily, for dlsym calls
        // made by constructors that run before this one).
        super::elf::resolve();
        super::fds::resolve();
        // This is libmrshim.so's own std: the hook sees only the shim's panics. The catcher
        // reports them (mrshim_core::internal), with the message kept here.
        std::panic::set_hook(Box::new(mrshim_core::internal::note_panic));
        mrshim_core::set_device_probe(super::gpu::current_device);
        // SAFETY: registering a plain extern "C" fn without arguments.
        unsafe { libc::pthread_atfork(Some(prepare), None, Some(child)) };
    }

    /// Before fork, in the forking thread: what a child would otherwise look up by listing the
    /// loaded objects is looked up now. glibc (2.36) resets the loader's main lock in a child but
    /// not the one dl_iterate_phdr takes: a child forked while another thread was inside
    /// dl_iterate_phdr (this shim's own first lookup of the GPU runtimes, or the application's)
    /// would wait for it forever at its first registration. Here, the lookup waits for that
    /// thread to leave instead, and the child inherits the result.
    extern "C" fn prepare() {
        mrshim_core::internal::guarded("the fork handler", super::gpu::before_fork);
    }

    extern "C" fn child() {
        mrshim_core::internal::guarded("the fork handler", || {
            // This is the atfork child handler; fork is not called from a hook.
            // SAFETY: the child's only thread, which is not inside the shim.
            unsafe {
                mrshim_core::after_fork_child();
                super::gpu::after_fork_child();
                mrshim_bounce::after_fork_child();
            }
        });
    }

    extern "C" fn fini() {
        let Some(_g) = super::Guard::enter() else { return };
        if let Some(s) = mrshim_core::shim_if_initialized() {
            if mrshim_bounce::live::any_region() {
                mrshim_core::internal::guarded("the exit summary", mrshim_bounce::live::at_exit);
            }
            mrshim_core::internal::guarded("the exit summary", || s.at_exit());
        }
    }

    #[used]
    #[link_section = ".init_array"]
    static INIT: extern "C" fn() = init;

    #[used]
    #[link_section = ".fini_array"]
    static FINI: extern "C" fn() = fini;
}
