//! rdma_cma.h's types (bindgen, see build.rs) on top of mrshim-verbs' `ibv_*` types.
mrshim_verbs::bindgen_module!(mod generated = "rdma_cma.rs");
pub use generated::*;
