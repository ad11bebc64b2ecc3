//! libmrshim.so — the preload. See docs/shim.md.
//!
//! This crate is only the FFI layer (src/preload): every exported symbol is in
//! src/preload/hooks.rs. The logic is in crates/shim-core (mrshim-core).

mod preload;
