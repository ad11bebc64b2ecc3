//! The retry engine (mrshim-retry) wired to the shim: conversions between [`RegArgs`] and the
//! engine's requests, and the engine's environment — memory facts from /proc/self/maps and the
//! backend (GPU runtime, bounce buffers), memlock from getrlimit/setrlimit.

use crate::{Backend, Call, RegArgs, Staged};
use mrshim_record::MemKind;
use mrshim_retry::engine::Env;
use mrshim_retry::strategy::Facts;
use mrshim_retry::Req;
use std::sync::atomic::{AtomicBool, Ordering};

pub fn to_req(a: &RegArgs) -> Option<Req> {
    let entry = a.call();
    if entry == Call::DeregMr {
        return None;
    }
    Some(Req {
        entry,
        addr: a.addr,
        length: a.length,
        iova: a.iova.unwrap_or(a.addr),
        access: a.access,
        dmabuf_fd: a.dmabuf_fd.unwrap_or(-1),
        dmabuf_offset: a.dmabuf_offset.unwrap_or(0),
    })
}

/// The arguments for an attempt: the application's call with the engine's changes.
pub fn to_args(orig: &RegArgs, r: &Req) -> RegArgs {
    let call = r.entry;
    let dmabuf = r.entry.is_dmabuf();
    RegArgs {
        call: Some(call),
        symbol_version: None,
        pd: orig.pd,
        addr: r.addr,
        length: r.length,
        iova: Some(r.iova),
        access: r.access,
        dmabuf_fd: dmabuf.then_some(r.dmabuf_fd),
        dmabuf_offset: dmabuf.then_some(r.dmabuf_offset),
        mr: 0,
    }
}

/// raise-memlock runs once per process.
static MEMLOCK_RAISED: AtomicBool = AtomicBool::new(false);

pub struct ShimEnv<'a> {
    pub shim: &'a crate::Shim,
    pub backend: &'a dyn Backend,
    pub orig: &'a RegArgs,
    /// The shadow [`Env::bounce`] made for the attempt being prepared, until the attempt's
    /// outcome hands it back to the backend ([`ShimEnv::take_shadow`]).
    staged: std::cell::RefCell<Staged>,
}

impl<'a> ShimEnv<'a> {
    pub fn new(shim: &'a crate::Shim, backend: &'a dyn Backend, orig: &'a RegArgs) -> Self {
        ShimEnv { shim, backend, orig, staged: Default::default() }
    }

    /// The shadow of the attempt just tried (None unless it was a bounce attempt).
    pub fn take_shadow(&self) -> Staged {
        self.staged.borrow_mut().take()
    }

    pub fn kind(&self, r: &Req) -> MemKind {
        if self.backend.is_device_memory(r.addr) {
            return MemKind::Device;
        }
        self.shim.maps.classify(r.addr, r.length, false, crate::clock::mono_ns()).kind
    }
}

fn memlock() -> (u64, u64) {
    let (s, h) = crate::limits::read();
    (s.unwrap_or(u64::MAX), h.unwrap_or(u64::MAX))
}

impl Env for ShimEnv<'_> {
    fn facts(&self, r: &Req) -> Facts {
        let kind = self.kind(r);
        Facts {
            kind,
            memlock: memlock(),
            memlock_raised: MEMLOCK_RAISED.load(Ordering::Relaxed),
            can_export_dmabuf: kind == MemKind::Device && !r.entry.is_dmabuf(),
        }
    }

    fn raise_memlock(&self) -> Result<String, String> {
        if MEMLOCK_RAISED.swap(true, Ordering::AcqRel) {
            return Err("already raised once in this process".into());
        }
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit/setrlimit on a local struct.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) != 0 {
                return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
            }
            let old = rl.rlim_cur;
            rl.rlim_cur = rl.rlim_max;
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) != 0 {
                return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
            }
            self.shim.memlock.invalidate();
            let f = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { "unlimited".to_string() } else { v.to_string() };
            Ok(format!("RLIMIT_MEMLOCK soft {} -> {} (the hard limit)", f(old), f(rl.rlim_max)))
        }
    }

    fn export_dmabuf(&self, r: &Req) -> Result<(Req, String), String> {
        let (fd, offset) = self.backend.export_dmabuf(r.addr, r.length)?;
        let n = Req { entry: Call::RegDmabufMr, dmabuf_fd: fd, dmabuf_offset: offset, ..*r };
        Ok((
            n,
            format!(
                "{}(addr {:#x}) -> ibv_reg_dmabuf_mr(fd {fd}, offset {offset:#x}) exported by the GPU runtime",
                r.entry.name(),
                r.addr
            ),
        ))
    }

    fn bounce(&self, r: &Req) -> Result<(Req, String), String> {
        let staged = self.backend.bounce_shadow(&to_args(self.orig, r))?;
        let shadow = staged.addr();
        // One attempt is prepared at a time and each hands its shadow back: nothing to replace.
        if let Some(stale) = self.staged.borrow_mut().replace(staged) {
            stale.abandon();
        }
        // A peer's atomic on the shadow would not be atomic with the application's own
        // accesses to its buffer, nor reach it before a later completion: the shadow is
        // registered without REMOTE_ATOMIC, so such an atomic fails at the peer with a remote
        // access error instead of silently losing an update (docs/bounce.md).
        let atomic = r.access & mrshim_verbs::access::REMOTE_ATOMIC;
        let access = r.access & !mrshim_verbs::access::OPTIONAL_RANGE & !atomic;
        let n =
            Req { entry: Call::RegMrIova2, addr: shadow, iova: r.iova, access, dmabuf_fd: -1, dmabuf_offset: 0, ..*r };
        Ok((
            n,
            format!(
                "host shadow at {shadow:#x} registered with iova {:#x} in place of {:#x} ({} bytes){}",
                r.iova,
                r.addr,
                r.length,
                if atomic != 0 { ", without REMOTE_ATOMIC (peers' atomics are refused on bounce regions)" } else { "" }
            ),
        ))
    }
}
