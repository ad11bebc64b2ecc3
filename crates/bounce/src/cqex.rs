//! Extended CQs (`ibv_create_cq_ex`, polled with `ibv_start_poll`/`ibv_next_poll`/
//! `ibv_end_poll`): static-inline calls through `verbs_context.create_cq_ex` and each CQ's own
//! function pointers, which the context's `poll_cq` wrapper never sees. The shim makes a
//! context's extended CQs itself (the provider's `create_cq_ex`, asking also for the byte count
//! and QP number of each completion) from the moment it sees the context: when it is opened
//! (`ibv_open_device`, if the retry policy can bounce) or at its first bounce region. Each CQ is
//! followed from its creation; its `start_poll` and `next_poll` are wrapped from its context's
//! first bounce region on (at once if there is one already): a completion they return releases
//! what `ibv_poll_cq`'s would ([`crate::live::completed`]). They stay wrapped for the CQ's life;
//! `ibv_destroy_cq` forgets it. The FFI layer reads and writes the pointers; this module keeps
//! the provider's functions.

use crate::state::STATE;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM: what the shim needs to read of a completion
/// (a receive's length, the QP whose pending work it releases), added to the application's
/// request.
pub const NEEDED_WC_FLAGS: u64 = 1 | 4;

/// The provider's functions of one extended CQ, as addresses (non-zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqxOps {
    pub start_poll: usize,
    pub next_poll: usize,
    pub read_opcode: usize,
    pub read_byte_len: usize,
    pub read_qp_num: usize,
}

pub(crate) struct Node {
    cq: AtomicUsize,
    ctx: AtomicUsize,
    /// Its polls are the shim's wrappers.
    wrapped: AtomicBool,
    start_poll: AtomicUsize,
    next_poll: AtomicUsize,
    read_opcode: AtomicUsize,
    read_byte_len: AtomicUsize,
    read_qp_num: AtomicUsize,
}

/// The provider's `create_cq_ex` of each context whose slot the shim took.
pub(crate) struct Create {
    ctx: usize,
    provider: usize,
}

/// The provider's `create_cq_ex` of `ctx`, if the shim took that slot.
pub fn create_of(ctx: usize) -> Option<usize> {
    STATE.creates.iter().find(|c| c.ctx == ctx).map(|c| c.provider)
}

/// From [`crate::patch::Slots::take_create_cq_ex`] (under STATE.patching): the shim took `ctx`'s
/// `create_cq_ex` slot, whose provider function is `f`.
pub fn took_create(ctx: usize, f: usize) {
    if create_of(ctx).is_none() {
        STATE.creates.push(Create { ctx, provider: f });
    }
}

/// An extended CQ of `ctx` made through the shim, with the provider's functions: follow it.
/// Whether the FFI layer wraps its polls now (its context has a bounce region); otherwise
/// [`wrap_context`] does at the context's first one.
pub fn follow(cq: usize, ctx: usize, ops: CqxOps) -> bool {
    let _g = STATE.patching.lock();
    let node = match STATE.cqxs.iter().find(|n| n.cq.load(Ordering::Acquire) == cq) {
        Some(n) => n,
        None => match STATE.cqxs.iter().find(|n| n.cq.load(Ordering::Acquire) == 0) {
            Some(n) => n,
            None => STATE.cqxs.push(Node {
                cq: AtomicUsize::new(0),
                ctx: AtomicUsize::new(0),
                wrapped: AtomicBool::new(false),
                start_poll: AtomicUsize::new(0),
                next_poll: AtomicUsize::new(0),
                read_opcode: AtomicUsize::new(0),
                read_byte_len: AtomicUsize::new(0),
                read_qp_num: AtomicUsize::new(0),
            }),
        },
    };
    node.start_poll.store(ops.start_poll, Ordering::Release);
    node.next_poll.store(ops.next_poll, Ordering::Release);
    node.read_opcode.store(ops.read_opcode, Ordering::Release);
    node.read_byte_len.store(ops.read_byte_len, Ordering::Release);
    node.read_qp_num.store(ops.read_qp_num, Ordering::Release);
    node.ctx.store(ctx, Ordering::Release);
    // a region goes live before its context is patched (both under STATE.patching)
    let now = crate::live::in_context(ctx);
    node.wrapped.store(now, Ordering::Release);
    node.cq.store(cq, Ordering::Release);
    now
}

/// Under STATE.patching, at the first bounce region of `ctx`: `wrap(cq)` for each followed CQ of it
/// whose polls are not wrapped yet.
pub(crate) fn wrap_context(ctx: usize, wrap: impl Fn(usize)) {
    for n in STATE.cqxs.iter() {
        let cq = n.cq.load(Ordering::Acquire);
        if cq != 0 && n.ctx.load(Ordering::Acquire) == ctx && !n.wrapped.swap(true, Ordering::AcqRel) {
            wrap(cq);
        }
    }
}

/// Around the real `ibv_destroy_cq` of `cq`: a followed CQ is forgotten once destroyed (its
/// node is reused), so that no later patch writes into its freed memory.
pub fn destroying(cq: usize, destroy: impl FnOnce() -> c_int) -> c_int {
    if STATE.cqxs.iter().all(|n| n.cq.load(Ordering::Acquire) != cq) {
        return destroy();
    }
    let _g = STATE.patching.lock();
    let rc = destroy();
    if rc == 0 {
        for n in STATE.cqxs.iter().filter(|n| n.cq.load(Ordering::Acquire) == cq) {
            n.cq.store(0, Ordering::Release);
        }
    }
    rc
}

/// The provider's functions of the followed CQ at `cq` (for its wrappers).
pub fn ops(cq: usize) -> Option<CqxOps> {
    let n = STATE.cqxs.iter().find(|n| n.cq.load(Ordering::Acquire) == cq)?;
    Some(CqxOps {
        start_poll: n.start_poll.load(Ordering::Acquire),
        next_poll: n.next_poll.load(Ordering::Acquire),
        read_opcode: n.read_opcode.load(Ordering::Acquire),
        read_byte_len: n.read_byte_len.load(Ordering::Acquire),
        read_qp_num: n.read_qp_num.load(Ordering::Acquire),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_followed_cq_keeps_its_providers_functions_and_a_new_cq_at_its_address_replaces_them() {
        let a = CqxOps { start_poll: 1, next_poll: 2, read_opcode: 3, read_byte_len: 4, read_qp_num: 5 };
        let b = CqxOps { start_poll: 11, ..a };
        assert_eq!(ops(0x5000), None);
        follow(0x5000, 0x70, a);
        follow(0x6000, 0x70, b);
        assert_eq!((ops(0x5000), ops(0x6000)), (Some(a), Some(b)));
        follow(0x5000, 0x70, b);
        assert_eq!(ops(0x5000), Some(b));
        assert_eq!(destroying(0x6000, || 0), 0);
        assert_eq!(ops(0x6000), None, "a destroyed CQ is forgotten");
        let _g = STATE.patching.lock();
        took_create(0x77, 9);
        took_create(0x77, 10);
        assert_eq!((create_of(0x77), create_of(0x78)), (Some(9), None));
        let seen = std::sync::Mutex::new(vec![]);
        wrap_context(0x70, |cq| seen.lock().unwrap().push(cq));
        wrap_context(0x70, |cq| seen.lock().unwrap().push(cq));
        assert_eq!(*seen.lock().unwrap(), vec![0x5000], "each CQ of the context wrapped once");
    }
}
