//! A simulated GPU behind the CUDA driver API: `libcuda.so.1` with cuda.h's ABI (function names
//! including the `_v2` suffixes libcuda exports, enum values, out-parameter types).
//!
//! Device memory is a memfd named `mrshim-gpu`, mapped PROT_NONE at the address the
//! application gets (the CPU faults on it, and the simulated verbs device sees
//! `/memfd:mrshim-gpu` there) and read-write at a private address the copy engine uses.
//! Streams are in-order queues run by worker threads. See docs/sim-gpu.md.

pub mod abi;
mod api;
pub mod attrs;
pub mod config;
pub mod context;
mod copy;
pub mod memory;
pub mod runtime;
pub mod stream;
