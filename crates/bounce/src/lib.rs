//! Host bounce buffers (the `bounce` strategy) and the MR fix-ups of strategies that register
//! through another path, as plain Rust. Contract: docs/bounce.md.
//!
//! A region the NIC refused gets a page-aligned host shadow ([`Shadow::prepare`]), registered
//! with `ibv_reg_mr_iova2(shadow, len, iova = the caller's iova)`: the caller's SGE addresses and
//! the rkey it hands to peers keep working. The MR handed back says `addr`/`length` as asked
//! ([`fixes`]); the real `ibv_dereg_mr` sees what rdma-core expects again. Coherence comes from
//! wrapping the context's post/poll ops and its `ibv_qp_ex` builders while a bounce region exists
//! in it ([`patch`]); what those wrappers copy when is [`live`].
//!
//! | module | job |
//! |--------|-----|
//! | [`region`] | one region: shadow, baseline, copies either way, epochs, folds, peer syncs |
//! | [`shadow`] | a shadow before its MR exists: build, fill, abandon; which engine |
//! | [`live`] | live regions, SGE ranges, pending receives/READs, what a completion releases |
//! | [`idle`] | when spinning on empty polls brings over peers' unannounced writes |
//! | [`fixes`] | MRs with a changed `addr` and what their deregistration needs |
//! | [`patch`] | when a context's / `ibv_qp_ex`'s ops are wrapped and restored |
//! | [`cqex`] | extended CQs made and polled through the shim |
//! | [`copy`] | the copy engine trait and the host engine |
//! | `pool` | mmap pool for shadows and baselines |
//! | `dirty` | the one tracker of the application's writes (crates/dirty) |
//! | `access` | which pages of the application's buffer the shim may touch now |
//! | [`watch`] | run-time detection while the process neither posts nor polls (a watcher thread) |
//! | `state` | every process-wide value of the above, and the one reset of a forked child |
//!
//! The verbs objects themselves (context ops, `ibv_qp_ex` pointers, `ibv_mr` fields, WR lists,
//! work completions) are read and written by libmrshim.so's FFI layer (src/preload/bounce.rs):
//! this crate sees plain values and the [`patch::Slots`] trait.

mod access;
pub mod copy;
pub mod cqex;
pub mod diff;
mod dirty;
pub mod fixes;
pub mod idle;
mod leaked;
pub mod live;
pub mod patch;
mod pool;
mod reads;
mod recvs;
pub mod region;
pub mod shadow;
mod state;
pub mod watch;

pub use copy::{CopyEngine, HostCopy};
pub use shadow::{host_readable, Memory, Shadow};

/// In a forked child (one thread): the bounce layer's one state made safe to use again
/// (`state::State::after_fork_child`).
///
/// # Safety
/// Only from the atfork child handler: the child's one thread, not inside the shim.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract.
    unsafe { state::STATE.after_fork_child() }
}

#[cfg(test)]
mod tests;
