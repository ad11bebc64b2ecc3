//! The memory model every simulated GPU runtime shares (`libcuda.so.1`, `libamdhip64.so.5/6`,
//! `libmcruntime.so`): device memory is a memfd named `mrshim-gpu`, mapped PROT_NONE at the
//! address the application gets (the CPU faults on it; the simulated NIC recognises it) and
//! read-write at a private address only the runtime's copy engine uses; streams are in-order
//! queues run by worker threads. Each runtime maps [`Fault`] to its own error codes.
//! See docs/sim-gpu.md.

pub mod capi;
pub mod codes;
pub mod config;
pub mod device_runtime;
pub mod heap;
pub mod memory;
pub mod stream;

/// What went wrong, before a runtime turns it into its own error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A bad argument: a range outside an allocation, a host pointer that is device memory.
    Invalid,
    OutOfMemory,
    /// The kernel refused (memfd, mmap): `CUDA_ERROR_OPERATING_SYSTEM` and the like.
    System,
    /// A stream that is gone.
    BadHandle,
    /// A device ordinal out of range.
    InvalidDevice,
}

pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
