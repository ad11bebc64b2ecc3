//! Every process-wide value of the bounce layer, in one place ([`STATE`]), with the one reset a
//! forked child needs ([`State::after_fork_child`]). The modules keep the logic; each field says
//! which module owns it.

use crate::cqex::{Create, Node as CqxNode};
use crate::fixes::Fix;
use crate::idle::Backoff;
use crate::leaked::{Hint, Leaked};
use crate::patch::{ContextOrig, Qpx};
use crate::pool::Mapping;
use crate::reads::PendingReads;
use crate::recvs::RecvQueues;
use crate::region::Region;
use crate::watch::Watch;
use mrshim_dirty::{uffd::Kernel, Tracker};
use mrshim_forklock::ForkLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Arc;

/// A value alone on its cache line: written on every post or poll, it must not slow down the
/// threads that only read its neighbours.
#[repr(align(64))]
pub(crate) struct Line<T>(pub(crate) T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

pub(crate) struct State {
    // live.rs: the live regions and what waits for completions
    pub(crate) regions: ForkLock<Vec<Arc<Region>>>,
    /// Number of live bounce regions: the post/poll wrappers' fast path checks it.
    pub(crate) live: AtomicUsize,
    /// Live bounce lkeys, counted per hash slot (`live::lkey_slot`).
    pub(crate) lkeys: [AtomicU32; 256],
    /// Posted receives' SGEs, per receive queue, in posting order (recvs.rs).
    pub(crate) pending_recv: RecvQueues,
    /// RDMA READs into bounce regions by qp_num (reads.rs).
    pub(crate) pending_read: PendingReads,
    // region.rs
    /// Bumped by every post_send and every poll with completions (region.rs, Epochs).
    pub(crate) epoch: Line<AtomicU64>,
    /// `region::warn_once` said its line.
    pub(crate) warned: AtomicBool,
    // idle.rs
    /// Empty polls (idle.rs), counted with a plain load and store, no atomic read-modify-write and
    /// no thread-local (a call through `__tls_get_addr` in a preloaded library: 7 % of a 4 KiB
    /// stream's cycles, measured): threads racing on it lose counts, which only moves the next
    /// check.
    pub(crate) polls: Line<AtomicU32>,
    pub(crate) idle: ForkLock<Backoff>,
    /// A run of empty polls is under way: completions must end it.
    pub(crate) idle_running: AtomicBool,
    // fixes.rs
    pub(crate) fixes: ForkLock<Vec<(usize, Fix)>>,
    /// Set with the first fix-up: until then no dereg needs one (or the table's lock).
    pub(crate) any_fix: AtomicBool,
    // patch.rs: the providers' ops of patched contexts and followed `ibv_qp_ex`s
    pub(crate) origs: Leaked<ContextOrig>,
    pub(crate) orig_hint: Hint<ContextOrig>,
    /// Serialises patching and restoring, and every push to the leaked lists.
    pub(crate) patching: ForkLock<()>,
    pub(crate) qpxs: Leaked<Qpx>,
    pub(crate) qpx_hint: Hint<Qpx>,
    // cqex.rs
    /// Followed extended CQs, by address.
    pub(crate) cqxs: Leaked<CqxNode>,
    /// The provider's `create_cq_ex` of each context whose slot the shim took.
    pub(crate) creates: Leaked<Create>,
    // pool.rs
    pub(crate) pool: ForkLock<Vec<Mapping>>,
    // dirty.rs
    /// None while no region is tracked; then a tracker, disabled where the kernel cannot track.
    pub(crate) tracker: ForkLock<Option<Tracker<Kernel>>>,
    /// `dirty::said_once` said why tracking cannot start; the lines it printed (tests).
    pub(crate) track_said: AtomicBool,
    pub(crate) track_lines: AtomicU32,
    // access.rs
    /// The descriptor of /proc/self/maps (access.rs: -1 not open yet).
    pub(crate) maps_fd: AtomicI32,
    // watch.rs
    pub(crate) watch: ForkLock<Watch>,
    /// A region peers reach went live in this process: the watcher is wanted.
    pub(crate) watch_wanted: AtomicBool,
    /// This process's watcher thread runs (or is being started).
    pub(crate) watching: AtomicBool,
    /// The process is exiting: the watcher stops.
    pub(crate) watch_exiting: AtomicBool,
    /// A peer wrote into a bounce region of this process with no announcement (watch.rs).
    pub(crate) unannounced_seen: AtomicBool,
}

pub(crate) static STATE: State = State {
    regions: ForkLock::new(Vec::new()),
    live: AtomicUsize::new(0),
    lkeys: [const { AtomicU32::new(0) }; 256],
    pending_recv: RecvQueues::new(),
    pending_read: PendingReads::new(),
    epoch: Line(AtomicU64::new(0)),
    warned: AtomicBool::new(false),
    polls: Line(AtomicU32::new(0)),
    idle: ForkLock::new(Backoff::new()),
    idle_running: AtomicBool::new(false),
    fixes: ForkLock::new(Vec::new()),
    any_fix: AtomicBool::new(false),
    origs: Leaked::new(),
    orig_hint: Hint::new(),
    patching: ForkLock::new(()),
    qpxs: Leaked::new(),
    qpx_hint: Hint::new(),
    cqxs: Leaked::new(),
    creates: Leaked::new(),
    pool: ForkLock::new(Vec::new()),
    tracker: ForkLock::new(None),
    track_said: AtomicBool::new(false),
    track_lines: AtomicU32::new(0),
    maps_fd: AtomicI32::new(-1),
    watch: ForkLock::new(Watch::new()),
    watch_wanted: AtomicBool::new(false),
    watching: AtomicBool::new(false),
    watch_exiting: AtomicBool::new(false),
    unannounced_seen: AtomicBool::new(false),
};

impl State {
    /// In a forked child (one thread): every lock a parent thread held at the fork is free again,
    /// its possibly half-updated value replaced by an empty one (a child forked mid-update loses
    /// that table, never hangs on it); locks nobody held keep their values. The write tracker
    /// and the maps descriptor are the parent's: the child opens its own.
    ///
    /// # Safety
    /// Only from the atfork child handler: the child's one thread, not inside the shim.
    pub(crate) unsafe fn after_fork_child(&self) {
        // No guard of these locks is alive in this thread: the regions guard below is taken after
        // the lock itself was recovered, and each region's sync lock is recovered under it alone.
        // SAFETY: the caller's contract (the child's one thread) and the order above.
        unsafe {
            self.regions.recover_in_child(Vec::new);
            for r in self.regions.lock().iter() {
                r.maps.sync.recover_in_child(Default::default);
            }
            self.fixes.recover_in_child(Vec::new);
            self.pool.recover_in_child(Vec::new);
            self.patching.recover_in_child(|| ());
            self.pending_recv.map.recover_in_child(|| None);
            self.pending_read.map.recover_in_child(|| None);
            self.idle.recover_in_child(Backoff::new);
            // The parent's watcher thread is not in the child: a region the child registers
            // starts its own, which looks only at the child's regions (watch.rs).
            // (the parent's scans are leaked, not dropped: no region is unmapped here)
            self.watch.reset_in_child(Watch::new());
            self.watch_wanted.store(false, std::sync::atomic::Ordering::Release);
            self.watching.store(false, std::sync::atomic::Ordering::Release);
            crate::dirty::after_fork_child();
            crate::access::after_fork_child();
        }
    }
}

#[cfg(test)]
impl State {
    /// Takes every lock of the state (and each live region's sync lock) and holds them until
    /// the returned value is dropped: what [`State::after_fork_child`] must undo in a child.
    pub(crate) fn lock_all(&'static self) -> Box<dyn std::any::Any> {
        // (the regions' mappings, leaked: a test's few)
        let maps: &'static [Arc<crate::region::Maps>] =
            Vec::leak(self.regions.lock().iter().map(|r| r.maps.clone()).collect());
        let syncs: Vec<_> = maps.iter().map(|m| m.sync.lock()).collect();
        Box::new((
            syncs,
            self.regions.lock(),
            self.fixes.lock(),
            self.pool.lock(),
            self.patching.lock(),
            self.pending_recv.map.lock(),
            self.pending_read.map.lock(),
            self.idle.lock(),
            self.tracker.lock(),
            self.watch.lock(),
        ))
    }
}
