//! Our function for each intercepted entry point, per library slot (real.rs): the registration
//! wrappers and the two QP calls the bounce layer follows.
//!
//! Each registration wrapper: nested call (guard set) → the real function, nothing else. When the
//! shim only counts, a success is the real call plus counters. Otherwise build a `RegArgs`, let
//! `mrshim_core::shim().call` invoke the real function exactly once and record (backend.rs),
//! catch any panic (falling back to the real function if it had not run), restore errno.

use super::backend::{errno, real_fn, record, set_errno, shielded, Real, RealFunctions};
use super::entry::for_each_entry;
use super::real::{self, fn_type, Entry};
// (rereg.rs has its own wrapper; exported through this module like the others)
pub(super) use super::rereg::ibv_rereg_mr;
use super::{bounce, Guard};
use mrshim_core::config::PanicAt;
use mrshim_core::{Call, Outcome, RegArgs};
use std::ffi::{c_int, c_uint, c_void};

/// Our function for each real one of library slot `slot`: the wrapper column of the entry table
/// (entry.rs), instantiated per slot.
macro_rules! define_wrapper {
    ($($v:ident, $name:literal, $ver:literal, $dflt:ident, $sig:ty, $wrapper:ident, $call:expr;)*) => {
        pub(super) fn wrapper(slot: usize, f: Entry) -> usize {
            match f {
                $(Entry::$v => {
                    const PER_SLOT: [fn_type::$v; real::SLOTS] = per_slot!($wrapper);
                    PER_SLOT[slot] as usize
                })*
            }
        }
    };
}
/// `[w::<0>, .., w::<SLOTS - 1>]`.
macro_rules! per_slot {
    ($w:ident) => {
        [$w::<0>, $w::<1>, $w::<2>, $w::<3>, $w::<4>, $w::<5>, $w::<6>, $w::<7>]
    };
}
const _: () = assert!(real::SLOTS == 8, "per_slot! lists every slot");
for_each_entry!(define_wrapper);

/// Every registration wrapper, after [`Guard::route`]: nested call (no guard) → `direct` (the
/// real function with the caller's arguments), nothing else. When the shim only counts (no
/// records, injection or anything learned), a success is the real call plus counters; anything
/// else goes through [`record`].
fn reg_hook(
    guard: Option<Guard>,
    slot: usize,
    direct: impl Fn() -> *mut c_void,
    real: Real,
    compat10: bool,
    args: impl FnOnce() -> RegArgs,
) -> *mut c_void {
    let Some(_g) = guard else { return direct() };
    let call = real.call();
    shielded(call.name(), direct, |direct| {
        let shim = mrshim_core::shim();
        shim.debug_panic(PanicAt::Hook);
        let a = args();
        if shim.counts_only(call) {
            let mr = direct();
            if !mr.is_null() {
                shim.succeeded(call, a.length, mr as usize);
                return mr;
            }
            return finish_mr(record(a, real, slot, compat10, Some(RealFunctions::mr_outcome(mr))));
        }
        finish_mr(record(a, real, slot, compat10, None))
    })
}

fn no_real() -> *mut c_void {
    set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

fn finish_mr(out: Outcome) -> *mut c_void {
    set_errno(out.errno_after);
    out.mr as *mut c_void
}

fn reg_args(call: Call, pd: *mut c_void, addr: u64, length: usize, iova: u64, access: u32) -> RegArgs {
    RegArgs {
        call: Some(call),
        pd: pd as usize,
        addr,
        length: length as u64,
        iova: Some(iova),
        access,
        ..Default::default()
    }
}

// Each wrapper is instantiated per library slot `S` (real.rs): slot 0 is exported (hooks.rs), the
// others are handed out by lookups that found another copy (`wrapper`).

/// # Safety
/// Called by the application with ibv_reg_mr's contract (exported as `ibv_reg_mr@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_reg_mr<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { reg_mr(S, Entry::RegMr, pd, addr, length, access) }
}

/// # Safety
/// Called with ibv_reg_mr@IBVERBS_1.0's contract (pd is a `struct ibv_pd_1_0 *`).
pub unsafe extern "C" fn reg_mr_1_0<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { reg_mr(S, Entry::RegMr10, pd, addr, length, access) }
}

/// ibv_reg_mr of either ABI (`entry` RegMr or RegMr10: one C signature; 1.0's pd is the compat
/// struct, which the shim does not read through).
///
/// # Safety
/// The arguments follow that version's ibv_reg_mr contract.
unsafe fn reg_mr(
    s: usize,
    entry: Entry,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut c_void {
    let compat10 = entry == Entry::RegMr10;
    let (slot, g) = Guard::route(s);
    // SAFETY: both versions of ibv_reg_mr have this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegMr>(slot, entry) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(pd, addr, length, access) };
    reg_hook(g, slot, direct, Real::RegMr(f), compat10, || {
        let a = reg_args(Call::RegMr, pd, addr as u64, length, addr as u64, access as u32);
        RegArgs { symbol_version: if compat10 { Some("IBVERBS_1.0") } else { a.symbol_version }, ..a }
    })
}

/// # Safety
/// Called by the application with ibv_reg_mr_iova's contract.
pub unsafe extern "C" fn ibv_reg_mr_iova<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut c_void {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_reg_mr_iova@IBVERBS_1.7 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegMrIova>(slot, Entry::RegMrIova) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(pd, addr, length, iova, access) };
    reg_hook(g, slot, direct, Real::Iova(f), false, || {
        reg_args(Call::RegMrIova, pd, addr as u64, length, iova, access as u32)
    })
}

/// # Safety
/// Called by the application with ibv_reg_mr_iova2's contract.
pub unsafe extern "C" fn ibv_reg_mr_iova2<const S: usize>(
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut c_void {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_reg_mr_iova2@IBVERBS_1.8 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegMrIova2>(slot, Entry::RegMrIova2) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments (nested: libibverbs' own ibv_reg_mr).
    let direct = || unsafe { f(pd, addr, length, iova, access) };
    reg_hook(g, slot, direct, Real::Iova2(f), false, || {
        reg_args(Call::RegMrIova2, pd, addr as u64, length, iova, access)
    })
}

/// # Safety
/// Called by the application with ibv_reg_dmabuf_mr's contract.
pub unsafe extern "C" fn ibv_reg_dmabuf_mr<const S: usize>(
    pd: *mut c_void,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut c_void {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_reg_dmabuf_mr@IBVERBS_1.12 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::RegDmabufMr>(slot, Entry::RegDmabufMr) }) else { return no_real() };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(pd, offset, length, iova, fd, access) };
    // The VA of a dmabuf MR is its iova; `offset` is into the dmabuf.
    reg_hook(g, slot, direct, Real::Dmabuf(f), false, || RegArgs {
        dmabuf_fd: Some(fd),
        dmabuf_offset: Some(offset),
        ..reg_args(Call::RegDmabufMr, pd, iova, length, iova, access as u32)
    })
}

fn dereg_args(mr: *mut c_void, compat10: bool) -> RegArgs {
    let mut a = RegArgs { call: Some(Call::DeregMr), mr: mr as usize, ..Default::default() };
    if !mr.is_null() {
        // SAFETY: the application hands us a live MR (ibv_mr, or the 1.0 compat struct which
        // starts with the same context/pd/addr/length fields); read before the real call frees it.
        let m = unsafe { &*(mr as *const mrshim_verbs::ibv_mr) };
        a.addr = m.addr as u64;
        a.length = m.length as u64;
        a.pd = m.pd as usize;
        if compat10 {
            a.symbol_version = Some("IBVERBS_1.0");
        }
    }
    a
}

/// Both ibv_dereg_mr wrappers of library slot `slot` (`entry`: which version); the fast path as
/// in [`reg_hook`] (an MR a strategy made always takes the slow one: it needs its fix-up).
fn dereg_hook(slot: usize, entry: Entry, mr: *mut c_void, compat10: bool) -> c_int {
    let (slot, g) = Guard::route(slot);
    // SAFETY: both ibv_dereg_mr versions have this C signature.
    let Some(f) = (unsafe { real_fn::<fn_type::DeregMr>(slot, entry) }) else {
        set_errno(libc::ENOSYS);
        return libc::ENOSYS;
    };
    // SAFETY: the real ibv_dereg_mr with the caller's MR.
    let direct = || unsafe { f(mr) };
    let Some(_g) = g else { return direct() };
    shielded(Call::DeregMr.name(), direct, |direct| {
        let shim = mrshim_core::shim();
        shim.debug_panic(PanicAt::Hook);
        let a = dereg_args(mr, compat10);
        let preset = if shim.counts_only(Call::DeregMr) && !bounce::any_fixups() {
            let rc = direct();
            if rc == 0 {
                shim.succeeded(Call::DeregMr, a.length, mr as usize);
                return 0;
            }
            Some(Outcome { err: rc, errno_after: errno(), ..Default::default() })
        } else {
            None
        };
        let out = record(a, Real::Dereg(f), slot, compat10, preset);
        set_errno(out.errno_after);
        out.err
    })
}

/// # Safety
/// Called by the application with ibv_dereg_mr's contract (exported as `ibv_dereg_mr@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_dereg_mr<const S: usize>(mr: *mut c_void) -> c_int {
    dereg_hook(S, Entry::DeregMr, mr, false)
}

/// # Safety
/// Called with ibv_dereg_mr@IBVERBS_1.0's contract.
pub unsafe extern "C" fn dereg_mr_1_0<const S: usize>(mr: *mut c_void) -> c_int {
    dereg_hook(S, Entry::DeregMr10, mr, true)
}

// ---------------------------------------------------------------------------------------------
// QP objects the bounce layer follows
// ---------------------------------------------------------------------------------------------

/// # Safety
/// Called by the application with ibv_qp_to_qp_ex's contract (`@@IBVERBS_1.6`).
pub unsafe extern "C" fn ibv_qp_to_qp_ex<const S: usize>(qp: *mut c_void) -> *mut c_void {
    // SAFETY: ibv_qp_to_qp_ex@IBVERBS_1.6 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::QpToQpEx>(Guard::slot(S), Entry::QpToQpEx) }) else {
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    };
    // SAFETY: the real function with the caller's QP.
    let q = unsafe { f(qp) };
    if !q.is_null() {
        let e = errno();
        mrshim_core::internal::guarded("ibv_qp_to_qp_ex", || bounce::note_qpx(q as usize));
        set_errno(e);
    }
    q
}

/// # Safety
/// Called with ibv_destroy_qp's contract (`@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_destroy_qp<const S: usize>(qp: *mut c_void) -> c_int {
    // SAFETY: ibv_destroy_qp@IBVERBS_1.1 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::DestroyQp>(Guard::slot(S), Entry::DestroyQp) }) else {
        set_errno(libc::ENOSYS);
        return libc::ENOSYS;
    };
    // SAFETY: the caller's live QP (or null), destroyed by the real function, called exactly once.
    unsafe { bounce::destroying_qp(qp as usize, || f(qp)) }
}

/// # Safety
/// Called with ibv_open_device's contract (`@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_open_device<const S: usize>(dev: *mut c_void) -> *mut c_void {
    // SAFETY: ibv_open_device@IBVERBS_1.1 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::OpenDevice>(Guard::slot(S), Entry::OpenDevice) }) else {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: the real function with the caller's device.
    let c = unsafe { f(dev) };
    if !c.is_null() {
        let e = errno();
        mrshim_core::internal::guarded("ibv_open_device", || bounce::opened(c as usize));
        set_errno(e);
    }
    c
}

/// # Safety
/// Called with ibv_destroy_cq's contract (`@@IBVERBS_1.1`).
pub unsafe extern "C" fn ibv_destroy_cq<const S: usize>(cq: *mut c_void) -> c_int {
    // SAFETY: ibv_destroy_cq@IBVERBS_1.1 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::DestroyCq>(Guard::slot(S), Entry::DestroyCq) }) else {
        set_errno(libc::ENOSYS);
        return libc::ENOSYS;
    };
    let destroy = || {
        // SAFETY: the caller's CQ, destroyed by the real function, called exactly once.
        unsafe { f(cq) }
    };
    bounce::destroying_cq(cq as usize, destroy)
}
