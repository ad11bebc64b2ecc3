//! Every symbol libmrshim.so exports, in one file: the ABI surface at a glance.
//!
//! | export              | what it does                                                          |
//! |---------------------|-----------------------------------------------------------------------|
//! | `dlsym`, `dlvsym`   | naked trampolines: RTLD_DEFAULT/RTLD_NEXT jump straight into glibc (no |
//! |                     | frame of ours, so glibc sees the caller's return address); a real     |
//! |                     | handle goes to `*_handle`: real lookup, and for our names remember the |
//! |                     | real pointer and hand back our wrapper                                |
//! | `ibv_reg_mr`, `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`, `ibv_reg_dmabuf_mr`, `ibv_dereg_mr` | |
//! |                     | with rdma-core's versions (entry.rs): programs linked against         |
//! |                     | libibverbs bind here; `ibv_reg_mr@IBVERBS_1.0` / `ibv_dereg_mr@...1.0` |
//! |                     | are `reg_mr_1_0` / `dereg_mr_1_0` (the 1.0 ABI's compat `ibv_pd_1_0`) |
//! | `ibv_rereg_mr`      | its wrapper is in rereg.rs (`@@IBVERBS_1.1`): recorded; refused on an MR |
//! |                     | a retry strategy made (mrshim_core::rereg)                            |
//! | `ibv_qp_to_qp_ex`, `ibv_destroy_qp` | the real call, and the bounce layer learns / forgets the   |
//! |                     | QP's `ibv_qp_ex` (whose `ibv_wr_*` ops it patches while its context   |
//! |                     | has a bounce region); nothing is recorded                             |
//! | `ibv_open_device`, `ibv_destroy_cq` | the real call; the bounce layer makes the context's      |
//! |                     | extended CQs through the shim from its opening on (where the retry    |
//! |                     | policy can bounce) / forgets a destroyed one; nothing is recorded     |
//! | `close`, `dup2`, `dup3`, `close_range`, `closefrom` | libc's call, after the log retired its  |
//! |                     | descriptor if the call closes or replaces it (fds.rs; plain exports,  |
//! |                     | versioned by libmrshim.map: glibc's base version, `dup3` at 2.9,      |
//! |                     | `close_range`/`closefrom` at 2.34)                                    |
//! | `_exit`, `_Exit`    | libc's call, after a mapped log's blank end was trimmed (exit handlers |
//! |                     | do not run on these; forked children end with them), fds.rs          |
//!
//! dlsym/dlvsym are exported as `@GLIBC_2.2.5` (aarch64: `@GLIBC_2.17`) and `@@GLIBC_2.34`; every
//! export is a tail-jump stub (`.symver` must sit next to the symbol it names, hence assembly).
//!
//! The functions behind the exports: the trampolines in dlsym.rs, the wrappers in wrappers.rs
//! (their real-function backend in backend.rs), `dlclose` in unload.rs.

use super::entry::for_each_entry;
// (the exports are not built into unit tests)
#[cfg_attr(test, allow(unused_imports))]
use super::{dlsym, fds, wrappers};
use std::ffi::{c_int, c_uint};

/// The descriptor calls: plain exports (no return-address games), versioned by the map.
macro_rules! export_fd_calls {
    ($($name:ident($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {$(
        /// # Safety
        /// As libc's function of this name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
            // SAFETY: the caller's contract, passed on.
            unsafe { fds::$name($($a),*) }
        }
    )*};
}
export_fd_calls! {
    close(fd: c_int) -> c_int;
    dup2(old: c_int, new: c_int) -> c_int;
    dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    closefrom(low: c_int);
}

/// `_exit` and `_Exit` (they do not return, so not through the macro above).
///
/// # Safety
/// As libc's `_exit`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    // SAFETY: the caller's contract, passed on.
    unsafe { fds::_exit(status) }
}

/// # Safety
/// As libc's `_Exit`.
#[cfg_attr(not(test), no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: the caller's contract, passed on.
    unsafe { fds::_Exit(status) }
}

/// Two exported versions of one name: `name@old` and the default `name@@new`, both tail jumps
/// (no frame: the dlsym trampolines rely on the caller's return address being untouched).
macro_rules! two_versions {
    ($name:literal, $old_ver:expr => $old:path, $new_ver:literal => $new:path) => {
        #[cfg(not(test))]
        std::arch::global_asm!(
            concat!(".globl __mrshim_", $name, "_old"),
            concat!(".type __mrshim_", $name, "_old,%function"),
            concat!("__mrshim_", $name, "_old:"),
            concat!(tail_jump!(), " {old}"),
            concat!(".symver __mrshim_", $name, "_old, ", $name, "@", $old_ver),
            concat!(".globl __mrshim_", $name, "_new"),
            concat!(".type __mrshim_", $name, "_new,%function"),
            concat!("__mrshim_", $name, "_new:"),
            concat!(tail_jump!(), " {new}"),
            concat!(".symver __mrshim_", $name, "_new, ", $name, "@@", $new_ver),
            old = sym $old,
            new = sym $new,
        );
    };
}

two_versions!("dlsym", glibc_base!() => dlsym::dlsym, "GLIBC_2.34" => dlsym::dlsym);
two_versions!("dlvsym", glibc_base!() => dlsym::dlvsym, "GLIBC_2.34" => dlsym::dlvsym);
two_versions!("dlclose", glibc_base!() => super::unload::dlclose, "GLIBC_2.34" => super::unload::dlclose);
/// Every row of the entry table exported at its version: `name@@VER` for the default, `name@VER`
/// for an older ABI. Each is a tail jump to slot 0's wrapper, the one linked calls mean; the
/// IBVERBS version nodes come from the same table (build.rs).
macro_rules! export_entries {
    ($($v:ident, $name:literal, $ver:literal, $dflt:ident, $sig:ty, $wrapper:ident, $call:expr;)*) => {
        $(export_entries!(@one $name, $ver, $dflt, $wrapper);)*
    };
    (@one $name:literal, $ver:literal, default, $w:ident) => { export_entries!(@asm $name, "@@", $ver, $w); };
    (@one $name:literal, $ver:literal, versioned, $w:ident) => { export_entries!(@asm $name, "@", $ver, $w); };
    (@asm $name:literal, $at:literal, $ver:literal, $w:ident) => {
        #[cfg(not(test))]
        std::arch::global_asm!(
            concat!(".globl __mrshim_export_", stringify!($w)),
            concat!(".type __mrshim_export_", stringify!($w), ",%function"),
            concat!("__mrshim_export_", stringify!($w), ":"),
            concat!(tail_jump!(), " {w}"),
            concat!(".symver __mrshim_export_", stringify!($w), ", ", $name, $at, $ver),
            w = sym wrappers::$w::<0>,
        );
    };
}
for_each_entry!(export_entries);
