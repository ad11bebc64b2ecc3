//! A simulated GPU behind the CUDA driver API: `libcuda.so.1` with cuda.h's ABI (function names
//! including the `_v2` suffixes libcuda exports, enum values, out-parameter types).
//!
//! Device memory and streams are the shared model of sim/gpu (`simgpu`): a memfd named
//! `mrshim-gpu` mapped PROT_NONE at the address the application gets, in-order stream queues.
//! See docs/sim-gpu.md.

pub mod abi;
mod api;
pub mod attrs;
pub mod context;
pub use simgpu::{config, memory, stream};
pub mod runtime;
