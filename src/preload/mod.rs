//! The thin unsafe layer of libmrshim.so: exported hooks (all in hooks.rs), the real-symbol
//! lookup (elf.rs, real.rs), process-level glue (constructor, fork, exit) here.
//! Everything with a decision in it lives in the mrshim-core crate.

pub mod bounce;
pub mod copy;
pub mod elf;
mod entry;
pub mod gpu;
pub mod hooks;
pub mod real;
pub mod unload;

use std::cell::Cell;

thread_local! {
    /// Set while this thread is inside one of our hooks: nested intercepted calls (libibverbs'
    /// ibv_reg_mr → ibv_reg_mr_iova2 through its PLT, anything the shim itself calls) pass
    /// straight through, so one application call is one record. `const` + no Drop: plain TLS,
    /// no lazy registration, usable during thread start-up and teardown.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Proof that this thread entered the shim from outside; leaving drops it. Holds the flag's
/// address: in a cdylib every TLS access is a `__tls_get_addr` call, so look it up once.
pub struct Guard(*const Cell<bool>);

impl Guard {
    /// None when already inside a hook on this thread (or TLS is gone).
    #[inline]
    pub fn enter() -> Option<Guard> {
        let c = IN_HOOK.try_with(|c| c as *const Cell<bool>).ok()?;
        // `then`, not `then_some`: a Guard built for a nested call and dropped unused would
        // clear the outer call's flag (found by the registration fuzz test).
        // SAFETY: this thread's own flag; it lives as long as the thread, the guard does not
        // leave the thread (raw pointer: !Send).
        (!unsafe { (*c).replace(true) }).then(|| Guard(c))
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in enter: the current thread's flag, still alive.
        unsafe { (*self.0).set(false) };
    }
}

#[cfg(not(test))]
mod process {
    extern "C" fn init() {
        // Resolve glibc's dlsym/dlvsym now (the trampolines also do it lazily, for dlsym calls
        // made by constructors that run before this one).
        super::elf::resolve();
        // This is libmrshim.so's own std: the hook sees only the shim's panics. The catcher
        // reports them (mrshim_core::internal), with the message kept here.
        std::panic::set_hook(Box::new(mrshim_core::internal::note_panic));
        // SAFETY: registering a plain extern "C" fn without arguments.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    }

    extern "C" fn child() {
        mrshim_core::internal::guarded("the fork handler", || {
            // SAFETY: this is the atfork child handler: the child's only thread, which is not
            // inside the shim (fork is not called from a hook).
            unsafe {
                mrshim_core::after_fork_child();
                super::copy::after_fork_child();
                super::gpu::after_fork_child();
                super::bounce::after_fork_child();
                super::hooks::after_fork_child();
            }
        });
    }

    extern "C" fn fini() {
        let Some(_g) = super::Guard::enter() else { return };
        if let Some(s) = mrshim_core::shim_if_initialized() {
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
