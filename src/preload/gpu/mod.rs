//! The GPU runtimes the shim can copy through and export dmabufs from, each found only among
//! the libraries the application already loaded: CUDA (cuda.rs), HIP and MACA (rtapi.rs).
//! Which runtime owns an address is asked of each loaded runtime in turn; a runtime whose
//! engine failed its self-test owns nothing it could be trusted with, and its memory is refused.

pub mod abi;
pub mod cuda;
pub mod loaded;
mod report;
pub mod rtapi;

use abi::Family;
use cuda::Cuda;
use mrshim_bounce::CopyEngine;
use rtapi::RtApi;

static HIP: mrshim_forklock::ForkOnce<Option<RtApi>> = mrshim_forklock::ForkOnce::new();
static MACA: mrshim_forklock::ForkOnce<Option<RtApi>> = mrshim_forklock::ForkOnce::new();

/// In a forked child: the runtimes are looked up again (streams do not survive fork).
///
/// # Safety
/// Only in a forked child, from its atfork child handler: the child has one thread, and no
/// guard of that thread is alive.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract is ForkOnce::reset_in_child's (and cuda's).
    unsafe {
        cuda::after_fork_child();
        HIP.reset_in_child();
        MACA.reset_in_child();
    }
}

/// Before fork (the atfork prepare handler): the runtimes are looked up now if they were not yet,
/// so a child never lists the loaded objects (see `process::prepare` in preload/mod.rs).
pub fn before_fork() {
    let _ = (hip(), maca());
}

/// A runtime that is loaded but that the engine cannot speak: one line, then as if absent.
fn usable(family: Family, r: Option<Result<RtApi, String>>) -> Option<RtApi> {
    match r? {
        Ok(rt) => Some(rt),
        Err(e) => {
            let msg = format!("{} copy engine unavailable: {e}; its device memory cannot be bounced", family.name());
            match mrshim_core::shim_if_initialized() {
                Some(s) => s.say("WARN", &msg),
                None => mrshim_core::stderr_line(&format!("mrshim WARN {msg}")),
            }
            None
        }
    }
}

pub fn hip() -> Option<&'static RtApi> {
    HIP.get_or_init(|| usable(Family::Hip, RtApi::hip())).as_ref()
}

pub fn maca() -> Option<&'static RtApi> {
    MACA.get_or_init(|| usable(Family::Maca, RtApi::maca())).as_ref()
}

fn runtime_apis() -> impl Iterator<Item = &'static RtApi> {
    [hip(), maca()].into_iter().flatten()
}

/// The GPU device current on the calling thread, as NCCL (cudaGetDevice), RCCL (hipGetDevice) and
/// MCCL (mcGetDevice) print it in their `[N]`: the first loaded runtime that has one. A line
/// printed while a runtime is being looked up (its "engine unavailable" warning) shows none
/// rather than asking that runtime again.
pub fn current_device() -> Option<i32> {
    thread_local! {
        static ASKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    struct Asking;
    impl Drop for Asking {
        fn drop(&mut self) {
            ASKING.set(false);
        }
    }
    if ASKING.replace(true) {
        return None;
    }
    let _asking = Asking;
    Cuda::get().and_then(Cuda::current_device).or_else(|| runtime_apis().find_map(RtApi::current_device))
}

/// True if `addr` is device memory of a loaded runtime that can be trusted.
pub fn is_device(addr: u64) -> bool {
    Cuda::get().is_some_and(|c| c.is_device(addr)) || runtime_apis().any(|r| r.is_device(addr))
}

/// A copy engine for device memory at `addr`: None when no loaded runtime claims it.
pub fn device_engine(addr: u64) -> Option<Result<Box<dyn CopyEngine>, String>> {
    if let Some(cu) = Cuda::get().filter(|c| c.is_device(addr)) {
        return Some(cu.engine(addr).map(|e| Box::new(e) as Box<dyn CopyEngine>));
    }
    let rt = runtime_apis().find(|r| r.is_device(addr))?;
    Some(rt.engine(addr).map(|e| Box::new(e) as Box<dyn CopyEngine>))
}

/// Why memory no runtime claims may still be a distrusted runtime's: the disabled engines.
pub fn disabled() -> Vec<String> {
    runtime_apis()
        .filter_map(|r| r.trusted().err().map(|e| format!("{} copy engine disabled ({e})", r.family.name())))
        .collect()
}

/// Exports [addr, addr+len) through the runtime that owns it: (fd, offset of addr in the fd).
pub fn export_dmabuf(addr: u64, len: u64) -> Result<(i32, u64), String> {
    if let Some(cu) = Cuda::get().filter(|c| c.is_device(addr)) {
        return cu.export_dmabuf(addr, len);
    }
    match runtime_apis().find(|r| r.is_device(addr)) {
        Some(rt) => rt.export_dmabuf(addr, len),
        None => Err("no loaded GPU runtime (CUDA, HIP, MACA) owns this memory".into()),
    }
}
