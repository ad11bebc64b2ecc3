//! MRs a strategy registered through another path than the caller asked for, and what each needs
//! around the real ibv_dereg_mr. The caller sees the `addr` it asked for; rdma-core gets back the
//! one it set before it frees the MR. A bounce MR's region is live from [`adopt`] until its
//! deregistration succeeds.

use crate::live;
use crate::patch::{self, Slots};
use crate::region::Region;
use crate::shadow::Shadow;
use crate::state::STATE;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What an MR needs before and after the real ibv_dereg_mr.
pub enum Fix {
    /// mr->addr as rdma-core set it.
    Addr(u64),
    /// Plus a dmabuf fd the shim exported for it (closed once the MR is gone).
    AddrFd(u64, i32),
    /// A bounce region's MR.
    Bounce(u64, Arc<Region>),
}

/// Whether any MR may need a fix-up at its deregistration.
#[inline]
pub fn any() -> bool {
    STATE.any_fix.load(Ordering::Acquire)
}

fn push(mr: usize, fix: Fix) {
    STATE.any_fix.store(true, Ordering::Release);
    STATE.fixes.lock().push((mr, fix));
}

/// The MR `mr`, registered by a strategy, now shows the caller's address; `real` is what
/// rdma-core set, `exported_fd` a dmabuf fd the shim exported for it.
pub fn adopt_addr(mr: usize, real: u64, exported_fd: Option<i32>) {
    push(
        mr,
        match exported_fd {
            Some(fd) => Fix::AddrFd(real, fd),
            None => Fix::Addr(real),
        },
    );
}

/// The MR a bounce attempt registered on a shadow.
#[derive(Debug, Clone, Copy)]
pub struct ShadowMr {
    /// The `struct ibv_mr *`.
    pub mr: usize,
    /// Its context and lkey.
    pub ctx: usize,
    pub lkey: u32,
    /// `mr->addr` as rdma-core set it (the shadow's address).
    pub addr: u64,
}

/// The shadow's MR exists: the region goes live and its context gets the coherence wrappers.
/// Returns the address the caller must see in `mr->addr` (its own buffer's).
pub fn adopt(s: Shadow, m: ShadowMr, slots: &dyn Slots) -> u64 {
    let mut r = s.region;
    r.ctx = m.ctx;
    r.lkey = m.lkey;
    let shown = r.app;
    let r = Arc::new(r);
    STATE.any_fix.store(true, Ordering::Release);
    live::insert(r.clone());
    patch::patch(slots, r.ctx);
    push(m.mr, Fix::Bounce(m.addr, r));
    shown
}

/// How a strategy registered an MR another way than its struct says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixKind {
    /// dmabuf-to-va: registered by address in place of the caller's dmabuf.
    ByAddress,
    /// va-to-dmabuf: registered through a dmabuf the shim exported.
    ByDmabuf,
    /// On a host shadow.
    Bounce,
}

/// What registered `mr` another way, if a strategy did (ibv_rereg_mr refuses those).
pub fn fixed_by(mr: usize) -> Option<FixKind> {
    if !any() {
        return None;
    }
    STATE.fixes.lock().iter().find(|(m, _)| *m == mr).map(|(_, fix)| match fix {
        Fix::Addr(_) => FixKind::ByAddress,
        Fix::AddrFd(..) => FixKind::ByDmabuf,
        Fix::Bounce(..) => FixKind::Bounce,
    })
}

/// Before the real ibv_dereg_mr of `mr`: its fix-up, if it has one (then `mr->addr` must be
/// set back to [`Fix::real_addr`], and [`Fix::after`] called with the real call's result).
pub fn before_dereg(mr: usize) -> Option<Fix> {
    let mut f = STATE.fixes.lock();
    let i = f.iter().position(|(m, _)| *m == mr)?;
    Some(f.swap_remove(i).1)
}

impl Fix {
    /// `mr->addr` as rdma-core set it.
    pub fn real_addr(&self) -> u64 {
        match self {
            Fix::Addr(a) | Fix::AddrFd(a, _) | Fix::Bounce(a, _) => *a,
        }
    }

    /// After the real ibv_dereg_mr: `ok`, the MR is gone (its fd closed, its region and memory
    /// released, the context's wrappers removed with its last region); otherwise it lives on and
    /// is kept being served (its fix-up is not put back: a later dereg goes straight through).
    pub fn after(self, ok: bool, slots: &dyn Slots) {
        if !ok {
            return;
        }
        match self {
            Fix::Addr(_) => {}
            Fix::AddrFd(_, fd) => {
                // SAFETY: closing the dmabuf fd this shim exported for the MR.
                unsafe { libc::close(fd) };
            }
            Fix::Bounce(_, r) => {
                r.check_delivered("at its deregistration");
                live::remove(&r);
                patch::unpatch_if_unused(slots, r.ctx);
                // The mappings go with the last reference (a pending range may hold one).
            }
        }
    }
}
