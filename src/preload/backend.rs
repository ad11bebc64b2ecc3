//! The real functions as mrshim-core reaches them ([`Backend`]): one call's real function, the
//! others of the same libibverbs for retries that switch entry points, the device name, the GPU
//! runtimes, and what a strategy's MR needs to become the caller's (the bounce layer's FFI);
//! plus what every wrapper (wrappers.rs, rereg.rs) shares: its real function, its panic shield.

use super::bounce;
use super::real::{self, fn_type, Entry};
use mrshim_core::{Backend, Call, Outcome, RegArgs, Staged, StagedShadow};
use mrshim_retry::strategy::Strategy;
use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};

/// One real registration function, by its C signature.
#[derive(Clone, Copy)]
pub(super) enum Real {
    RegMr(fn_type::RegMr),
    Iova(fn_type::RegMrIova),
    Iova2(fn_type::RegMrIova2),
    Dmabuf(fn_type::RegDmabufMr),
    Dereg(fn_type::DeregMr),
}

impl Real {
    /// The entry point this function is.
    pub(super) fn call(self) -> Call {
        match self {
            Real::RegMr(_) => Call::RegMr,
            Real::Iova(_) => Call::RegMrIova,
            Real::Iova2(_) => Call::RegMrIova2,
            Real::Dmabuf(_) => Call::RegDmabufMr,
            Real::Dereg(_) => Call::DeregMr,
        }
    }
}

/// Calls the real function; remembers the first outcome for the panic fallback.
pub(super) struct RealFunctions {
    real: Real,
    /// The library instance `real` belongs to (real.rs): retries that switch entry points stay
    /// in it.
    slot: usize,
    /// The IBVERBS_1.0 ABI: pd/mr are rdma-core's compat structs; don't read through them.
    compat10: bool,
    /// The caller's own arguments (by address: retry attempts are other values).
    orig: *const RegArgs,
    /// The outcome of the caller's own call, once made: what a panic falls back to (never an
    /// attempt's, whose MR is not the caller's until adopted).
    done: Cell<Option<Outcome>>,
    /// The outcome of a real call the fast path already made: the first invoke returns it.
    preset: Cell<Option<Outcome>>,
}

pub(super) fn errno() -> c_int {
    // SAFETY: __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub(super) fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

impl RealFunctions {
    pub(super) fn mr_outcome(mr: *mut c_void) -> Outcome {
        let e = errno();
        if mr.is_null() {
            return Outcome { err: if e != 0 { e } else { -1 }, errno_after: e, ..Default::default() };
        }
        // SAFETY: a non-null return of a successful registration is a valid struct ibv_mr (the
        // 1.0 compat struct starts with the same fields).
        let m = unsafe { &*(mr as *const mrshim_verbs::ibv_mr) };
        Outcome { mr: mr as usize, lkey: m.lkey, rkey: m.rkey, err: 0, errno_after: e }
    }
}

impl RealFunctions {
    /// The real function for `call`: the intercepted one, or (for retry attempts that switch
    /// entry points) another real function of the same libibverbs.
    fn real_for(&self, call: Call) -> Option<Real> {
        if self.real.call() == call {
            return Some(self.real);
        }
        let f = Entry::for_call(call);
        let p = real::get(self.slot, f);
        if p == 0 {
            return None;
        }
        // SAFETY: p is the real function of that name and version, with this signature.
        Some(unsafe {
            match call {
                Call::RegMr => Real::RegMr(std::mem::transmute::<usize, fn_type::RegMr>(p)),
                Call::RegMrIova => Real::Iova(std::mem::transmute::<usize, fn_type::RegMrIova>(p)),
                Call::RegMrIova2 => Real::Iova2(std::mem::transmute::<usize, fn_type::RegMrIova2>(p)),
                Call::RegDmabufMr => Real::Dmabuf(std::mem::transmute::<usize, fn_type::RegDmabufMr>(p)),
                Call::DeregMr => Real::Dereg(std::mem::transmute::<usize, fn_type::DeregMr>(p)),
                Call::ReregMr => return None, // its own wrapper (rereg.rs), never a retry's
            }
        })
    }
}

impl Backend for RealFunctions {
    fn is_device_memory(&self, addr: u64) -> bool {
        super::gpu::is_device(addr)
    }

    fn export_dmabuf(&self, addr: u64, len: u64) -> Result<(i32, u64), String> {
        super::gpu::export_dmabuf(addr, len)
    }

    fn in_bounce_region(&self, addr: u64, len: u64) -> bool {
        bounce::covers(addr, len)
    }

    fn bounce_shadow(&self, a: &RegArgs) -> Result<Box<dyn StagedShadow>, String> {
        bounce::prepare(a.addr, a.length, a.iova(), a.access)
    }

    fn adopt(&self, strategy: Strategy, orig: &RegArgs, attempt: &RegArgs, mr: usize, shadow: Staged) {
        if let Some(s) = shadow {
            return s.adopt(mr);
        }
        let Some((shown, exported_fd)) = strategy.shown(orig, attempt) else { return };
        // SAFETY: mr is the attempt's live MR, not yet handed to the application.
        unsafe { bounce::adopt_addr(mr, shown, exported_fd) };
    }

    fn discard(&self, strategy: Strategy, attempt: &RegArgs, shadow: Staged) {
        if let Some(s) = shadow {
            return s.abandon();
        }
        if strategy != Strategy::VaToDmabuf {
            return;
        }
        if let Some(fd) = attempt.dmabuf_fd.filter(|fd| *fd >= 0) {
            // SAFETY: closing the dmabuf fd the shim exported for this failed attempt.
            unsafe { libc::close(fd) };
        }
    }

    fn can_retry(&self) -> bool {
        !self.compat10
    }

    fn invoke(&self, a: &RegArgs) -> Outcome {
        if let Some(o) = self.preset.take() {
            self.done.set(Some(o));
            return o;
        }
        let pd = a.pd as *mut c_void;
        let addr = a.addr as *mut c_void;
        let len = a.length as usize;
        let Some(real) = self.real_for(a.call()) else {
            return Outcome { err: libc::ENOSYS, errno_after: libc::ENOSYS, ..Default::default() };
        };
        // SAFETY: each arm calls the real function with the application's arguments (or, for
        // retries, arguments derived from them), with the signature rdma-core declares.
        let out = unsafe {
            match real {
                Real::RegMr(f) => Self::mr_outcome(f(pd, addr, len, a.access as c_int)),
                Real::Iova(f) => Self::mr_outcome(f(pd, addr, len, a.iova.unwrap_or(a.addr), a.access as c_int)),
                Real::Iova2(f) => Self::mr_outcome(f(pd, addr, len, a.iova.unwrap_or(a.addr), a.access as c_uint)),
                Real::Dmabuf(f) => Self::mr_outcome(f(
                    pd,
                    a.dmabuf_offset.unwrap_or(0),
                    len,
                    a.iova.unwrap_or(a.addr),
                    a.dmabuf_fd.unwrap_or(-1),
                    a.access as c_int,
                )),
                Real::Dereg(f) => {
                    // An MR a strategy made: give rdma-core back what it set, clean up after.
                    // (inside the unsafe block: the application's MR, deregistered by this call)
                    let after = if bounce::any_fixups() { bounce::before_dereg(a.mr) } else { None };
                    let rc = f(a.mr as *mut c_void);
                    let e = errno();
                    if let Some(after) = after {
                        after(rc == 0);
                    }
                    Outcome { err: rc, errno_after: e, ..Default::default() }
                }
            }
        };
        if std::ptr::eq(a, self.orig) {
            self.done.set(Some(out));
        }
        out
    }

    fn device_name(&self, pd: usize) -> Option<mrshim_core::DevName> {
        if self.compat10 || pd == 0 {
            return None;
        }
        // SAFETY: pd is the application's protection domain, which the real call just accepted
        // (or, on failure, dereferenced itself); context and device are rdma-core-owned and live
        // as long as the pd. name is a NUL-padded char[64]; we never read past it.
        unsafe {
            let ctx = (*(pd as *const mrshim_verbs::ibv_pd)).context;
            if ctx.is_null() {
                return None;
            }
            let dev = (*ctx).device;
            if dev.is_null() {
                return None;
            }
            let name = &(*dev).name;
            Some(mrshim_core::DevName::new(std::slice::from_raw_parts(name.as_ptr() as *const u8, name.len())))
        }
    }
}

/// The slow path of every wrapper: `Shim::call` invokes the real function (unless `preset`
/// already holds its outcome) and records; a panic falls back to the real function if it had
/// not run yet.
pub(super) fn record(args: RegArgs, real: Real, slot: usize, compat10: bool, preset: Option<Outcome>) -> Outcome {
    let backend = RealFunctions { real, slot, compat10, orig: &args, done: Cell::new(None), preset: Cell::new(preset) };
    mrshim_core::internal::guarded(args.call().name(), || mrshim_core::shim().call(&args, &backend))
        .unwrap_or_else(|| backend.done.get().unwrap_or_else(|| backend.invoke(&args)))
}

/// Runs a wrapper's own part, `body`, which calls the real function through the `direct` it is
/// handed (at most once). A panic anywhere in it is caught and reported, and the caller gets
/// the real function's answer (calling it now if it had not run), with its errno.
pub(super) fn shielded<R: Copy>(
    name: &'static str,
    direct: impl Fn() -> R,
    body: impl FnOnce(&dyn Fn() -> R) -> R,
) -> R {
    let ran: Cell<Option<(R, c_int)>> = Cell::new(None);
    let once = || {
        let r = direct();
        ran.set(Some((r, errno())));
        r
    };
    mrshim_core::internal::guarded(name, || body(&once)).unwrap_or_else(|| match ran.get() {
        Some((r, e)) => {
            set_errno(e);
            r
        }
        None => direct(),
    })
}

/// The real function for `f` in library slot `slot`, as the function pointer type `F`.
///
/// # Safety
/// `F` must be the signature of `f`'s symbol (a `fn` pointer type).
pub(super) unsafe fn real_fn<F: Copy>(slot: usize, f: Entry) -> Option<F> {
    let p = real::get(slot, f);
    // SAFETY: per the contract, p (non-null) is a function of type F; F is pointer-sized.
    (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
}
