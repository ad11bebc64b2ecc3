//! rdma-core's ABI as Rust types: ibverbs-sys for the `ibv_*` structs and functions, plus the
//! pieces it leaves out (see build.rs), and the flag and errno names all of mrshim prints.

/// The raw crate, for the few items shadowed below (its `ibv_wc` has private fields).
pub use ibverbs_sys as sys;
pub use ibverbs_sys::*;

/// `$vis mod $name`: the bindgen output `$file` of the calling crate's build script (see
/// crates/bindgen), with the lints generated code does not meet allowed (its names are C's, its
/// bitfield accessors carry no SAFETY comments of ours).
#[macro_export]
macro_rules! bindgen_module {
    ($vis:vis mod $name:ident = $file:literal) => {
        #[allow(
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            dead_code,
            clippy::all,
            clippy::undocumented_unsafe_blocks,
            unsafe_op_in_unsafe_fn
        )]
        $vis mod $name {
            include!(concat!(env!("OUT_DIR"), "/", $file));
        }
    };
}

bindgen_module!(mod extra = "extra.rs");
pub use extra::{ibv_wc, verbs_context};
pub mod access;
pub mod call;
pub use call::Call;
pub mod errno;
pub mod fault_rule;
pub mod rc;
pub mod rereg;
pub mod units;

/// Constants from verbs.h that ibverbs-sys does not carry.
pub mod extra_consts {
    pub use crate::extra::{IB_UVERBS_ACCESS_OPTIONAL_FIRST, IB_UVERBS_ACCESS_OPTIONAL_LAST};
}
