//! The one table of the verbs entry points libmrshim.so stands in front of: for each, its
//! symbol name and version, whether `dlsym` (no version) means it, its C signature, our
//! wrapper, and the [`Call`] its records name. Everything per entry point is derived from it:
//! [`Entry`] and its name/version table and lookup (real.rs), the real-function pointer types,
//! `wrapper()` (wrappers.rs) and the versioned exports (hooks.rs), the entry point a record names
//! (`Entry::call`).
//!
//! `for_each_entry!(m)` hands the table to the macro `m` (the X-macro pattern): the modules that
//! need it expand it their own way, and none of them needs another's items for it.
//!
//! build.rs reads the rows of this table for the IBVERBS version nodes of the export list.
//!
//! Adding an entry point: one line here and its wrapper (in wrappers.rs, or a file of its own
//! that wrappers.rs imports, as rereg.rs).

/// Columns: Entry variant, symbol, version, default version for `dlsym`, C signature, wrapper
/// (resolved in wrappers.rs), the `Call` it records as (None: followed, not recorded).
macro_rules! for_each_entry {
    ($m:ident) => {
        $m! {
            RegMr, "ibv_reg_mr", "IBVERBS_1.1", default,
                unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void,
                ibv_reg_mr, Some(Call::RegMr);
            RegMr10, "ibv_reg_mr", "IBVERBS_1.0", versioned,
                unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void,
                reg_mr_1_0, Some(Call::RegMr);
            RegMrIova, "ibv_reg_mr_iova", "IBVERBS_1.7", default,
                unsafe extern "C" fn(*mut c_void, *mut c_void, usize, u64, c_int) -> *mut c_void,
                ibv_reg_mr_iova, Some(Call::RegMrIova);
            RegMrIova2, "ibv_reg_mr_iova2", "IBVERBS_1.8", default,
                unsafe extern "C" fn(*mut c_void, *mut c_void, usize, u64, c_uint) -> *mut c_void,
                ibv_reg_mr_iova2, Some(Call::RegMrIova2);
            RegDmabufMr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", default,
                unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void,
                ibv_reg_dmabuf_mr, Some(Call::RegDmabufMr);
            DeregMr, "ibv_dereg_mr", "IBVERBS_1.1", default,
                unsafe extern "C" fn(*mut c_void) -> c_int,
                ibv_dereg_mr, Some(Call::DeregMr);
            DeregMr10, "ibv_dereg_mr", "IBVERBS_1.0", versioned,
                unsafe extern "C" fn(*mut c_void) -> c_int,
                dereg_mr_1_0, Some(Call::DeregMr);
            ReregMr, "ibv_rereg_mr", "IBVERBS_1.1", default,
                unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut c_void, usize, c_int) -> c_int,
                ibv_rereg_mr, Some(Call::ReregMr);
            // Not registrations: the bounce layer follows ibv_qp_ex objects, contexts and extended CQs
            // (docs/bounce.md).
            QpToQpEx, "ibv_qp_to_qp_ex", "IBVERBS_1.6", default,
                unsafe extern "C" fn(*mut c_void) -> *mut c_void,
                ibv_qp_to_qp_ex, None;
            DestroyQp, "ibv_destroy_qp", "IBVERBS_1.1", default,
                unsafe extern "C" fn(*mut c_void) -> c_int,
                ibv_destroy_qp, None;
            OpenDevice, "ibv_open_device", "IBVERBS_1.1", default,
                unsafe extern "C" fn(*mut c_void) -> *mut c_void,
                ibv_open_device, None;
            DestroyCq, "ibv_destroy_cq", "IBVERBS_1.1", default,
                unsafe extern "C" fn(*mut c_void) -> c_int,
                ibv_destroy_cq, None;
        }
    };
}
pub(crate) use for_each_entry;

/// [`Entry`] (one per symbol version), its names and versions, its `Call`.
macro_rules! define_entries {
    ($($v:ident, $name:literal, $ver:literal, $dflt:ident, $sig:ty, $wrapper:ident, $call:expr;)*) => {
        /// The real function's type, per entry.
        #[allow(dead_code)]
        pub mod fn_type {
            use super::*;
            $(pub type $v = $sig;)*
        }

        /// One entry point: a symbol at one version.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub enum Entry { $($v),* }

        impl Entry {
            pub const ALL: &'static [Entry] = &[$(Entry::$v),*];
            /// (name, version) per entry, in the order of [`Entry::ALL`].
            pub const SYMS: &'static [(&'static CStr, &'static CStr)] = &[$(
                (match CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) { Ok(c) => c, Err(_) => panic!() },
                 match CStr::from_bytes_with_nul(concat!($ver, "\0").as_bytes()) { Ok(c) => c, Err(_) => panic!() })
            ),*];
            /// What `dlsym` (no version) resolves to: the default version.
            pub fn is_default(self) -> bool {
                match self { $(Entry::$v => define_entries!(@default $dflt)),* }
            }
            /// The entry point a record names (None: followed, not recorded).
            pub fn call(self) -> Option<Call> {
                match self { $(Entry::$v => $call),* }
            }
            /// The default-version entry that records as `call`.
            pub fn for_call(call: Call) -> Entry {
                *Entry::ALL.iter().find(|e| e.is_default() && e.call() == Some(call)).expect("every Call has an entry")
            }
        }
    };
    (@default default) => { true };
    (@default versioned) => { false };
}
pub(crate) use define_entries;
