//! `ibv_rereg_mr@@IBVERBS_1.1`, the wrapper of its row in the entry table (entry.rs; hooks.rs
//! exports it). The decisions — refuse a rereg of an MR a strategy altered, the
//! record, the MR table following the MR — are mrshim_core's ([`mrshim_core::Shim::rereg`]);
//! here: reading the MR, asking the bounce layer whether a strategy altered it, the real call.

use super::backend::{errno, real_fn, set_errno, shielded};
use super::real::{fn_type, Entry};
use super::{bounce, Guard};
use mrshim_core::config::PanicAt;
use mrshim_core::rereg::{self, Altered, ReregArgs, ReregBackend};
use mrshim_core::{Call, DevName};
use std::ffi::{c_int, c_void};

/// # Safety
/// Called by the application with ibv_rereg_mr's contract: `mr` is a live MR of this library
/// (or what rdma-core itself would be handed).
pub unsafe extern "C" fn ibv_rereg_mr<const S: usize>(
    mr: *mut c_void,
    flags: c_int,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let (slot, g) = Guard::route(S);
    // SAFETY: ibv_rereg_mr@IBVERBS_1.1 has this signature.
    let Some(f) = (unsafe { real_fn::<fn_type::ReregMr>(slot, Entry::ReregMr) }) else {
        // no libibverbs function to call: what a provider without the command answers
        set_errno(libc::EOPNOTSUPP);
        return mrshim_verbs::rereg::ERR_CMD;
    };
    // SAFETY: the real function with the caller's arguments.
    let direct = || unsafe { f(mr, flags, pd, addr, length, access) };
    let Some(_g) = g else { return direct() };
    let name = Call::ReregMr.name();
    // SAFETY: mr is the caller's live MR (read before the call, as rdma-core does).
    let a = unsafe { args(mr, flags, pd, addr as u64, length as u64, access) };
    let altered = mrshim_core::internal::guarded(name, || bounce::fixed_by(mr as usize).map(Altered)).flatten();
    // Decided before anything else can panic: the panic fallback below never hands an MR the
    // shim altered to the real rereg either.
    let refusal = altered.filter(|_| rereg::refuses(&a, altered)).map(Altered::answer);
    let call = || match refusal {
        Some((ret, e)) => {
            set_errno(e);
            ret
        }
        None => direct(),
    };
    shielded(name, call, |call| {
        let shim = mrshim_core::shim();
        shim.debug_panic(PanicAt::Hook);
        let out = shim.rereg(&a, altered, &Real { mr, call });
        set_errno(out.errno);
        out.ret
    })
}

/// # Safety
/// `mr` is null or a live `struct ibv_mr`.
unsafe fn args(mr: *mut c_void, flags: c_int, pd: *mut c_void, addr: u64, length: u64, access: c_int) -> ReregArgs {
    let mut a = ReregArgs { mr: mr as usize, flags, pd: pd as usize, addr, length, access, ..Default::default() };
    if !mr.is_null() {
        // SAFETY: per the contract.
        let m = unsafe { &*(mr as *const mrshim_verbs::ibv_mr) };
        a.mr_addr = m.addr as u64;
        a.mr_length = m.length as u64;
        a.mr_pd = m.pd as usize;
    }
    a
}

/// The real rereg (or the refusal decided above), as `Shim::rereg` reaches it.
struct Real<'a> {
    mr: *mut c_void,
    call: &'a dyn Fn() -> c_int,
}

impl ReregBackend for Real<'_> {
    fn invoke(&self) -> (i32, i32) {
        let ret = (self.call)();
        (ret, errno())
    }

    fn keys(&self) -> Option<(u32, u32)> {
        // SAFETY: the caller's MR, still live (only ibv_dereg_mr frees it, whatever rereg returned).
        (!self.mr.is_null()).then(|| unsafe {
            let m = &*(self.mr as *const mrshim_verbs::ibv_mr);
            (m.lkey, m.rkey)
        })
    }

    fn device_name(&self) -> Option<DevName> {
        if self.mr.is_null() {
            return None;
        }
        // SAFETY: as in keys; context and device are rdma-core-owned and outlive the MR; name is
        // a NUL-padded char[64], never read past.
        unsafe {
            let ctx = (*(self.mr as *const mrshim_verbs::ibv_mr)).context;
            if ctx.is_null() || (*ctx).device.is_null() {
                return None;
            }
            let name = &(*(*ctx).device).name;
            Some(DevName::new(std::slice::from_raw_parts(name.as_ptr() as *const u8, name.len())))
        }
    }
}
