//! rdma_cma.h's types (bindgen, see build.rs) on top of mrshim-verbs' `ibv_*` types.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn
)]
include!(concat!(env!("OUT_DIR"), "/rdma_cma.rs"));
