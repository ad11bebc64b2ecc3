//! libmrshim.so — the preload. See docs/shim.md.
//!
//! This crate is only the FFI layer (src/preload): every exported symbol is listed in
//! src/preload/hooks.rs. The logic is in crates/shim-core (mrshim-core), crates/retry and
//! crates/bounce.
// The unit-test build exports nothing (no `no_mangle`), so the hooks look unused there.
#![cfg_attr(test, allow(dead_code))]

mod preload;
