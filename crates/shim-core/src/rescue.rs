//! The retry engine (mrshim-retry) wired to the shim: the engine's environment — memory facts
//! from /proc/self/maps and the backend (GPU runtime, bounce buffers), memlock from
//! getrlimit/setrlimit. What each strategy makes of a request is the strategy's
//! (crates/retry/src/strategy.rs); here only what it needs from the process.

use crate::{Backend, RegArgs, Staged};
use mrshim_record::MemKind;
use mrshim_retry::engine::Env;
use mrshim_retry::strategy::Facts;
use std::sync::atomic::{AtomicBool, Ordering};

/// raise-memlock runs once per process.
static MEMLOCK_RAISED: AtomicBool = AtomicBool::new(false);

pub struct ShimEnv<'a> {
    pub shim: &'a crate::Shim,
    pub backend: &'a dyn Backend,
    /// The shadow [`Env::bounce`] made for the attempt being prepared, until the attempt's
    /// outcome hands it back to the backend ([`ShimEnv::take_shadow`]).
    staged: std::cell::RefCell<Staged>,
}

impl<'a> ShimEnv<'a> {
    pub fn new(shim: &'a crate::Shim, backend: &'a dyn Backend) -> Self {
        ShimEnv { shim, backend, staged: Default::default() }
    }

    /// The shadow of the attempt just tried (None unless it was a bounce attempt).
    pub fn take_shadow(&self) -> Staged {
        self.staged.borrow_mut().take()
    }

    pub fn kind(&self, r: &RegArgs) -> MemKind {
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
    fn facts(&self, r: &RegArgs) -> Facts {
        let kind = self.kind(r);
        Facts {
            kind,
            memlock: memlock(),
            memlock_raised: MEMLOCK_RAISED.load(Ordering::Relaxed),
            can_export_dmabuf: kind == MemKind::Device && !r.call().is_dmabuf(),
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

    fn export_dmabuf(&self, r: &RegArgs) -> Result<(i32, u64), String> {
        self.backend.export_dmabuf(r.addr, r.length)
    }

    fn bounce(&self, r: &RegArgs) -> Result<u64, String> {
        let staged = self.backend.bounce_shadow(r)?;
        let shadow = staged.addr();
        // One attempt is prepared at a time and each hands its shadow back: nothing to replace.
        if let Some(stale) = self.staged.borrow_mut().replace(staged) {
            stale.abandon();
        }
        Ok(shadow)
    }
}
