//! One bounce region: the application's buffer, its host shadow (what the NIC reads and writes)
//! and, for regions peers can write or read, a baseline — what the shadow held after the last copy either
//! way — so that the bytes a peer wrote are told apart from what the application wrote meanwhile.
//!
//! Epochs: [`bump_epoch`] is called for every post_send and every poll that returns completions
//! in a context with bounce regions; the application reacts to those, so its buffer may have
//! changed since. Receives posted back to back with neither in between fold the application's
//! writes once ([`Region::fold_app_writes`]). Folds before a post that may tell a peer to read
//! take no such shortcut: the application can write between two posts with no verb in between;
//! what makes them cheap is the kernel's write tracking of host memory (crates/dirty).

use crate::access::{self, each_outside};
use crate::copy::CopyEngine;
use crate::dirty;
use crate::pool::{unmap, Mapping};
use crate::state::STATE;
use mrshim_forklock::ForkLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

const PAGE: usize = 4096;

/// Kept from one sync to the next (under `Region::sync`): no allocation per message.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Device memory compared through a copy.
    bytes: Vec<u8>,
    /// The changed runs of the last compare.
    runs: Vec<(usize, usize)>,
    /// The pages the kernel reported written.
    pages: Vec<(u64, u64)>,
    /// Where the next idle pass goes on down from (0: the top).
    idle_from: usize,
    /// Tracked folds checked by a whole compare so far, and when the last one was.
    verified: u32,
    verified_at: Option<std::time::Instant>,
}

/// A tracked span's first [`VERIFY_FIRST`] tracked folds, and then one every [`VERIFY_EVERY`],
/// also compare the whole span: bytes changed on pages the kernel did not report were written
/// without a page fault (io_uring fixed buffers, vmsplice, another device's DMA), which tracking
/// cannot see (docs/bounce.md, the contract).
pub const VERIFY_FIRST: u32 = 2;
pub const VERIFY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Scratch {
    fn verify_due(&mut self) -> bool {
        let now = std::time::Instant::now();
        let due =
            self.verified < VERIFY_FIRST || self.verified_at.is_none_or(|t| now.duration_since(t) >= VERIFY_EVERY);
        if due {
            self.verified += 1;
            self.verified_at = Some(now);
        }
        due
    }
}

/// An idle pass compares at most about this many bytes of one extent, then goes on from there
/// at the next pass: a 1 GiB region would hold the polling thread 100+ ms per pass otherwise.
pub const IDLE_BYTES: usize = 4 << 20;

/// The mappings behind a shadow (and its baseline, length 0 when there is none). Registrations
/// of memory inside an existing bounce region share them, as MRs of the same memory share its
/// pages on a NIC: Open MPI's one-sided component and UCX register a window once per device,
/// a peer puts through one MR and gets through another, and with a shadow each the get would
/// read bytes the put never reached. Back to the pool with the last region.
///
/// What the regions sharing them have in common lives here too: the lock that serialises their
/// syncs (they copy the same bytes) and, for host memory, the kernel's tracking of the first
/// region's buffer (`span`). Where that is tracked, every region of the mappings folds and syncs
/// the whole span, once: an inner region's own compare would read all of its bytes at every
/// SEND (UCX registers each buffer once per device), the span's scan reads only written pages.
pub(crate) struct Maps {
    pub(crate) shadow: Mapping,
    pub(crate) baseline: Mapping,
    /// The first region's buffer, shadow and baseline.
    pub(crate) span: View,
    /// Whether the kernel tracks writes to `span` (host memory, crates/dirty): decided at the
    /// first fold before a SEND ([`Region::start_tracking`]).
    pub(crate) track: OnceLock<Option<mrshim_dirty::Id>>,
    /// Tracking missed a write ([`VERIFY_FIRST`]): whole compares from then on.
    pub(crate) track_lost: AtomicBool,
    /// Serialises the syncs of the regions sharing these mappings; holds what they reuse.
    pub(crate) sync: ForkLock<Scratch>,
}

impl Drop for Maps {
    fn drop(&mut self) {
        if let Some(&Some(id)) = self.track.get() {
            dirty::untrack(id);
        }
        unmap(self.shadow);
        unmap(self.baseline);
    }
}

/// A stretch of the application's buffer with the shadow and baseline bytes that mirror it.
#[derive(Clone, Copy)]
pub(crate) struct View {
    pub(crate) app: u64,
    pub(crate) shadow: usize,
    pub(crate) baseline: usize,
    pub(crate) len: usize,
}

pub struct Region {
    /// The verbs context and lkey of the shadow's MR (0 until adopted).
    pub(crate) ctx: usize,
    pub(crate) lkey: u32,
    /// The caller's view: IOVA range [iova, iova+len) and its buffer at `app`.
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) app: u64,
    /// Host pointer for `iova`.
    pub(crate) shadow: usize,
    /// What the shadow held after the last copy either way: bytes that differ from it now were
    /// written by a peer (so only those go to the application's buffer), bytes of the
    /// application's buffer that differ from it were written by the application (so only those
    /// go to the shadow). Kept only for regions peers can write or read.
    pub(crate) baseline: usize,
    /// The shadow's and baseline's mappings, shared by every region of the same memory.
    pub(crate) maps: Arc<Maps>,
    pub(crate) remote_write: bool,
    pub(crate) remote_read: bool,
    pub(crate) engine: Box<dyn CopyEngine>,
    /// The `STATE.epoch` of the last fold: receives posted back to back fold once.
    pub(crate) folded: AtomicU64,
    /// Deregistered: its buffer may be freed or reused, nothing is copied into it any more.
    pub(crate) gone: AtomicBool,
    /// Pages of the buffer were found inaccessible (reported once per region).
    pub(crate) said_inaccessible: AtomicBool,
    /// The process that registered it (a forked child's watcher leaves its parent's alone).
    pub(crate) pid: u32,
    /// `STATE.epoch` when it was registered: unchanged, the process has posted nothing and polled
    /// no completion since (watch.rs).
    pub(crate) born: u64,
}

/// Pages touched by changed runs (what brings a resting tracked range back to tracking).
fn changed_pages(runs: &[(usize, usize)]) -> usize {
    runs.iter().map(|&(a, b)| (b - 1) / PAGE - a / PAGE + 1).sum()
}

/// A post_send, a poll with completions or a `wr_start` in a context with bounce regions: the
/// application may have written its buffers since, so the next receive folds them again.
#[inline]
pub fn bump_epoch() {
    STATE.epoch.fetch_add(1, Ordering::AcqRel);
}

/// What a fold or sync of a region covers: see [`Region::extent`].
pub(crate) struct Extent {
    pub(crate) view: View,
    pub(crate) track: Option<mrshim_dirty::Id>,
}

impl Region {
    /// The offset and length of [addr, addr+len) in this region, if it lies wholly inside.
    pub(crate) fn range(&self, addr: u64, len: u64) -> Option<(u64, usize)> {
        let end = addr.checked_add(len)?;
        (addr >= self.iova && end <= self.iova + self.len).then(|| (addr - self.iova, len as usize))
    }
    fn own(&self) -> View {
        View { app: self.app, shadow: self.shadow, baseline: self.baseline, len: self.len as usize }
    }
    /// What folds and syncs of this region cover: its mappings' tracked span (which contains the
    /// region, and is the same for every region sharing the mappings), else the region itself.
    /// No system call: whether the buffer is still mapped is asked ([`Self::usable`]) only where
    /// the application's bytes are about to be touched — most syncs find nothing to copy.
    pub(crate) fn extent(&self) -> Extent {
        match self.tracked() {
            Some(id) => Extent { view: self.maps.span, track: Some(id) },
            None => Extent { view: self.own(), track: None },
        }
    }
    /// `e` and the parts of it the shim must not touch now ([`Self::holes`]; `write`: the shim
    /// writes the application's bytes). A span partly gone or protected (the outer region's
    /// buffer freed) falls back to this region alone; None when nothing of it can be touched.
    fn usable(&self, e: &Extent, write: bool) -> Option<(Extent, Vec<(usize, usize)>)> {
        let mut e = Extent { view: e.view, track: e.track };
        let mut h = self.holes(&e.view, 0, e.view.len, write, e.track.is_none());
        if !h.is_empty() && e.track.is_some() {
            e = Extent { view: self.own(), track: None };
            h = self.holes(&e.view, 0, e.view.len, write, true);
        }
        (h.first() != Some(&(0, e.view.len))).then_some((e, h))
    }
    /// The parts of [off, off+n) of `v` the shim must not touch now, as offsets into `v`, sorted:
    /// the application unmapped them (a registration may outlive its buffer: UCX's registration
    /// cache keeps an MR after the buffer was freed until it processes the unmap event), or made
    /// them inaccessible (`mprotect`: a guard page; read-only where the shim would write) — the
    /// NIC keeps the shadow's pages, but a copy of the shim's there would fault in the
    /// application's process. With `report`, the latter is a violation, said once per region.
    /// Device memory: none (the engine's copies report errors themselves).
    fn holes(&self, v: &View, off: usize, n: usize, write: bool, report: bool) -> Vec<(usize, usize)> {
        if !self.engine.app_is_host() {
            return Vec::new();
        }
        let hs = access::holes(v.app + off as u64, n as u64, write);
        if let (Some(h), true) = (hs.iter().find(|h| h.mapped), report) {
            if !self.said_inaccessible.swap(true, Ordering::AcqRel) {
                mrshim_core::violation::report(
                    "inaccessible_pages",
                    &format!(
                        "the application made [{:#x}, {:#x}) of the bounce region at {:#x} (length {}) {} after \
                         registering it (mprotect): the shim neither reads nor writes those pages, so what a peer \
                         writes there does not reach the application and what the application wrote there last \
                         may not reach peers; keep guard pages out of registered memory, or register the buffer \
                         directly",
                        h.start,
                        h.end,
                        self.app,
                        self.len,
                        if write { "not writable" } else { "unreadable" }
                    ),
                );
            }
        }
        hs.iter().map(|h| ((h.start - v.app) as usize, (h.end - v.app) as usize)).collect()
    }
    fn tracked(&self) -> Option<mrshim_dirty::Id> {
        self.maps.track.get().copied().flatten().filter(|_| !self.maps.track_lost.load(Ordering::Acquire))
    }
    /// At a fold before a SEND, the first one of these mappings: the kernel tracks the
    /// application's writes to the span from now on, where it can (host memory with a
    /// baseline). Folds before SENDs run at every SEND, so they are what tracking pays for;
    /// regions only folded at post_recv (once per batch of receives) and written wholesale by
    /// the shim at each completion (NCCL-style rings) would pay a fault per page and gain
    /// little. The extent of this first fold: the span compared whole (writes before the kernel
    /// protected the pages are not reported), or None when tracking did not start now.
    pub(crate) fn start_tracking(&self) -> Option<Extent> {
        if self.maps.track.get().is_some() {
            return None;
        }
        let trackable = self.has_baseline() && self.engine.app_is_host();
        let span = self.maps.span;
        let mut started = false;
        self.maps.track.get_or_init(|| {
            let id = if trackable { dirty::track(span.app, span.len as u64) } else { None };
            started = id.is_some();
            id
        });
        started.then_some(Extent { view: span, track: None })
    }
    /// Application → shadow. For regions peers write, through the baseline: it holds exactly
    /// what the shadow was given, so a peer's write that lands meanwhile still shows as a change.
    ///
    /// Under the mappings' sync lock: between its two copies the baseline holds the
    /// application's new bytes and the shadow the old ones, which another thread's sync would
    /// take for a peer's write and copy back over the application's buffer.
    pub(crate) fn to_shadow(&self, off: u64, n: usize) {
        self.copy_to_shadow(off, n, false);
    }
    /// [`Self::to_shadow`] for a post that sends [off, off+n) (a local SGE of a SEND, WRITE or
    /// atomic).
    ///
    /// Where the shadow differs from the baseline there, a peer wrote bytes no sync has brought
    /// to the application yet (no completion this process polled announced them): the
    /// application's bytes, which the post sends, replace them, so the peer's write is lost — a
    /// violation, reported ([`Self::report_overwritten`]) instead of silent.
    pub(crate) fn sending(&self, off: u64, n: usize) {
        self.copy_to_shadow(off, n, true);
    }
    /// `check`: count the bytes where the shadow differs from the baseline before they are
    /// replaced (not at the first copy, and not where a READ that never comes had made them
    /// differ).
    fn copy_to_shadow(&self, off: u64, n: usize, check: bool) {
        let guard = self.maps.sync.lock();
        let own = self.own();
        let holes = self.holes(&own, off as usize, n, false, true);
        let mut lost = Conflict::default();
        if check && self.has_baseline() && self.engine.app_is_host() {
            each_outside(off as usize, off as usize + n, &holes, |from, to| {
                let mut o = from;
                while o < to {
                    let k = SEND_PIECE.min(to - o);
                    // [o, o+k) is within the region and outside the holes: the application's
                    // buffer is readable there, shadow and baseline cover it.
                    // SAFETY: as just said.
                    lost.add(o, unsafe { send_piece(&own, o, k) });
                    o += k;
                }
            });
            drop(guard);
            return self.report_overwritten(lost);
        }
        self.through_baseline(&own, off, n, &holes, |ba, sh, app, k| {
            if let (Some(ba), true) = (ba, check) {
                // SAFETY: both mappings cover the region; [ba, ba+k) and [sh, sh+k) are within it.
                let d = unsafe { differing(sh as *const u8, ba as *const u8, k) };
                lost.add(ba - own.baseline, d);
            }
            let dst = ba.unwrap_or(sh);
            // The shadow (or baseline) mapping and the application's buffer both cover the region.
            // SAFETY: [app, app+k) and [dst, dst+k) are within the region (the line above).
            if let Err(e) = unsafe { self.engine.to_host(dst as *mut u8, app, k) } {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
            if let Some(ba) = ba {
                // SAFETY: both mappings cover the region's length; [ba, ba+k) is within it.
                unsafe { std::ptr::copy_nonoverlapping(ba as *const u8, sh as *mut u8, k) };
            }
        });
        drop(guard);
        self.report_overwritten(lost);
    }
    /// Peer bytes [`Self::to_shadow`] replaced before any sync delivered them.
    fn report_overwritten(&self, c: Conflict) {
        if c.bytes == 0 {
            return;
        }
        crate::watch::peers_unannounced();
        mrshim_core::violation::report(
            "unannounced_write",
            &format!(
                "{} bytes a peer wrote to the bounce region at {:#x} (length {}, first at offset {}) had reached \
                 the application through no completion it polled when it posted a send from them: the application's \
                 bytes were sent and the peer's are lost; a peer's write must be announced (a completion polled) \
                 before the application sends from the same bytes, or the buffer registered directly",
                c.bytes, self.app, self.len, c.first
            ),
        );
    }
    /// An RDMA READ (or a fetching atomic) into [off, off+n) was posted: the NIC writes the
    /// shadow there and its completion brings the bytes over. What the application holds there
    /// now is to be replaced, so it becomes the baseline: a fold before that completion (a SEND
    /// on another QP, a post_recv) must not take it for a change of the application's and copy
    /// it over the READ's data in the shadow (seen: the receiver's 0xa5 fill, MPI rndv GET).
    pub(crate) fn being_read_into(&self, off: u64, n: usize) {
        if !self.has_baseline() {
            return;
        }
        let _one_at_a_time = self.maps.sync.lock();
        let holes = self.holes(&self.own(), off as usize, n, false, true);
        each_outside(off as usize, off as usize + n, &holes, |a, b| {
            // [a, b) is within the region and readable now: the baseline mapping and the
            // application's buffer both cover it.
            // SAFETY: as just said.
            if let Err(e) = unsafe { self.engine.to_host((self.baseline + a) as *mut u8, self.app + a as u64, b - a) } {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
        });
    }
    /// Shadow → application, [off, off+n) of this region (under the sync lock, as
    /// [`Self::to_shadow`]).
    pub(crate) fn to_app(&self, off: u64, n: usize) {
        let _one_at_a_time = self.maps.sync.lock();
        let own = self.own();
        let holes = self.holes(&own, off as usize, n, true, true);
        self.to_app_in(&own, off, n, &holes);
    }
    /// Shadow → application, [off, off+n) of `v`. For regions peers write, through the baseline:
    /// a snapshot first, then the application gets exactly the snapshot, so bytes a peer writes
    /// while this runs differ from the baseline and go over at the next sync instead of being
    /// lost.
    /// `holes`: the parts of `v` not to touch ([`Self::holes`]).
    fn to_app_in(&self, v: &View, off: u64, n: usize, holes: &[(usize, usize)]) {
        if self.gone.load(Ordering::Acquire) {
            return;
        }
        self.will_write_app(v.app + off, n);
        self.through_baseline(v, off, n, holes, |ba, sh, app, k| {
            if let Some(ba) = ba {
                // SAFETY: as in to_shadow.
                unsafe { std::ptr::copy_nonoverlapping(sh as *const u8, ba as *mut u8, k) };
            }
            // SAFETY: as in to_shadow; the shim's mappings never overlap the application's buffer.
            if let Err(e) = unsafe { self.engine.to_app(app, ba.unwrap_or(sh) as *const u8, k) } {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
        });
    }
    /// Runs `step(baseline, shadow, application, len)` over [off, off+n) of `v` outside
    /// `holes`: for host memory in 16 KiB steps, so the second copy of each step reads the
    /// baseline from cache; in one step for a GPU runtime (each of its copies is a call and a
    /// stream sync). No baseline: one step.
    fn through_baseline(
        &self,
        v: &View,
        off: u64,
        n: usize,
        holes: &[(usize, usize)],
        mut step: impl FnMut(Option<usize>, usize, u64, usize),
    ) {
        const STEP: usize = 16 << 10;
        each_outside(off as usize, off as usize + n, holes, |from, to| {
            let unit = if self.has_baseline() && self.engine.app_is_host() { STEP } else { to - from };
            let mut o = from;
            while o < to {
                let k = unit.min(to - o);
                step(self.has_baseline().then_some(v.baseline + o), v.shadow + o, v.app + o as u64, k);
                o += k;
            }
        });
    }
    /// Before the shim writes [app, app+n) of the application's buffer: where the kernel tracks
    /// it, the pages lose their write protection in one call instead of one fault each (a
    /// fault costs 0.7–2.7 µs a page on this VM: 5 ms for each 8 MiB a peer wrote). Below two
    /// pages the faults cost no more than the call.
    fn will_write_app(&self, app: u64, n: usize) {
        if let Some(id) = self.tracked() {
            if n >= 2 * PAGE {
                dirty::unprotect(id, app, n as u64);
            }
        }
    }
    pub(crate) fn has_baseline(&self) -> bool {
        self.maps.baseline.1 != 0
    }
    /// Before a receive is posted (regions peers write) and before a post that may tell a peer
    /// to read (regions peers read): bytes the application changed in its buffer since the last
    /// sync go to the shadow (and the baseline), so that what a peer writes next is told apart
    /// from them even where it writes the value the shadow held before, and what a peer reads
    /// after hearing from us is what the application wrote before it spoke.
    /// `once_per_epoch`: receives posted back to back fold once (docs/bounce.md).
    pub(crate) fn fold_app_writes(&self, once_per_epoch: bool) {
        self.fold(&self.extent(), once_per_epoch);
    }
    /// [`Self::fold_app_writes`] over `e`. Host memory is compared in place, only the pages
    /// written since the last fold where the kernel tracks them; device memory through one copy
    /// into a scratch buffer kept for the next time.
    pub(crate) fn fold(&self, e: &Extent, once_per_epoch: bool) {
        let epoch = STATE.epoch.load(Ordering::Acquire);
        if once_per_epoch && self.folded.load(Ordering::Acquire) == epoch {
            return;
        }
        let Some((e, holes)) = self.usable(e, false) else { return };
        let v = e.view;
        let mut guard = self.maps.sync.lock();
        let verify = e.track.is_some() && guard.verify_due();
        let Scratch { bytes, runs, pages, .. } = &mut *guard;
        // The application's bytes: host memory in place (racing writes by the application are
        // what a NIC would see too), device memory through a copy.
        let now: *const u8 = if self.engine.app_is_host() {
            v.app as *const u8
        } else {
            bytes.resize(v.len, 0);
            // SAFETY: the scratch buffer was just sized to len; the region covers [app, app+len).
            if let Err(err) = unsafe { self.engine.to_host(bytes.as_mut_ptr(), v.app, v.len) } {
                return warn_once(&format!("{} engine: {err}", self.engine.name()));
            }
            bytes.as_ptr()
        };
        pages.clear();
        runs.clear();
        // `now` is readable outside `holes` for the extent's length (host memory as just
        // checked, or the scratch copy).
        let changed = |a: usize, b: usize, runs: &mut Vec<(usize, usize)>| {
            // SAFETY: [a, b) is outside the holes and within the extent (each_outside).
            each_outside(a, b, &holes, |a, b| unsafe { changed_in(&v, now, a, b, runs) })
        };
        match e.track.map(|id| (id, dirty::written(id, pages))) {
            Some((_, mrshim_dirty::Answer::Written)) if verify => changed(0, v.len, runs),
            Some((_, mrshim_dirty::Answer::Written)) => {
                let end = v.app + v.len as u64;
                for &(a, b) in pages.iter() {
                    // the written pages, clipped to the extent, as offsets into it
                    let (a, b) = (a.max(v.app) - v.app, b.min(end).saturating_sub(v.app));
                    changed(a as usize, b as usize, runs);
                }
            }
            answer => {
                changed(0, v.len, runs);
                if let Some((id, _)) = answer {
                    dirty::compared(id, changed_pages(runs));
                }
            }
        }
        let mut both = Conflict::default();
        for &(a, b) in runs.iter() {
            // SAFETY: each [a, b) is within the extent and readable in `now` (found there).
            both.add(a, unsafe { take_run(&v, now, a, b) });
        }
        if let (true, Some(id)) = (verify, e.track) {
            self.verify(&v, id, runs, pages, now, &holes);
        }
        self.folded.store(epoch, Ordering::Release);
        drop(guard);
        self.report_conflict(&v, both);
    }
    /// Bytes a fold found changed both by the application and by a peer since the last sync
    /// ([`take_run`]): the peer's bytes had reached no completion this process polled, and the
    /// application's replaced them. Which came last no event of this process tells: a peer's
    /// write that nothing announced before the application wrote there (outside the contract),
    /// or one the application allowed after writing with a post that did not fold this region
    /// (a SEND, for a region peers write but do not read) — either way the application may keep
    /// the wrong one, so it is a violation.
    fn report_conflict(&self, v: &View, c: Conflict) {
        if c.bytes == 0 {
            return;
        }
        crate::watch::peers_unannounced();
        mrshim_core::violation::report(
            "write_conflict",
            &format!(
                "{} bytes of the bounce region at {:#x} (length {}, first at offset {}) were written both by a peer \
                 (announced by no completion this process polled yet) and by the application since the last sync: \
                 the application's bytes were kept and the peer's are lost; a peer's write must be announced (a \
                 completion polled) before the application writes there, or the buffer registered directly",
                c.bytes, v.app, v.len, c.first
            ),
        );
    }
    /// After a tracked fold that compared the whole span (`runs`: what changed, folded already;
    /// `pages`: what the kernel reported written): pages written while it compared are asked
    /// for again and folded (the scan re-protected them); a change on a page neither scan
    /// reported was written without a fault — a violation, and the span is compared whole from
    /// now on.
    fn verify(
        &self,
        v: &View,
        id: mrshim_dirty::Id,
        runs: &[(usize, usize)],
        pages: &mut Vec<(u64, u64)>,
        now: *const u8,
        holes: &[(usize, usize)],
    ) {
        let before = pages.len();
        if dirty::written(id, pages) != mrshim_dirty::Answer::Written {
            return;
        }
        let reported = |p: u64| pages.iter().any(|&(x, y)| x <= p && p < y);
        let unseen: usize = runs
            .iter()
            .map(|&(a, b)| {
                let (a, b) = (v.app + a as u64, v.app + b as u64);
                let mut n = 0;
                let mut p = a & !(PAGE as u64 - 1);
                while p < b {
                    if !reported(p) {
                        n += (b.min(p + PAGE as u64) - a.max(p)) as usize;
                    }
                    p += PAGE as u64;
                }
                n
            })
            .sum();
        let first = runs.first().map_or(0, |r| r.0);
        // the pages written meanwhile, folded now
        let end = v.app + v.len as u64;
        let mut more = Vec::new();
        for &(a, b) in &pages[before..] {
            let (a, b) = ((a.max(v.app) - v.app) as usize, (b.min(end).saturating_sub(v.app)) as usize);
            // SAFETY: [a, b) is outside the holes and within the extent (each_outside).
            each_outside(a, b, holes, |a, b| unsafe { changed_in(v, now, a, b, &mut more) });
        }
        let mut both = Conflict::default();
        for &(a, b) in &more {
            // SAFETY: as in fold.
            both.add(a, unsafe { take_run(v, now, a, b) });
        }
        self.report_conflict(v, both);
        if unseen == 0 || self.maps.track_lost.swap(true, Ordering::AcqRel) {
            return;
        }
        dirty::untrack(id);
        mrshim_core::violation::report(
            "untracked_write",
            &format!(
                "{unseen} bytes of the bounce region at {:#x} (length {}, first at offset {first}) changed with no page \
                 fault the kernel's write tracking saw (io_uring fixed buffers, vmsplice, another device's DMA into \
                 these pages): folded now, but a peer that read them before may have read older bytes; this \
                 region is compared whole from now on (MRSHIM_BOUNCE_TRACK=off does that for every region)",
                self.app, self.len
            ),
        );
    }
    /// Copies to the application only the bytes a peer changed in the shadow since the last sync,
    /// so what the application wrote to its buffer meanwhile is not overwritten.
    #[cfg(test)]
    pub(crate) fn sync_peer_writes(&self) {
        self.sync_peer(&self.extent());
    }
    /// [`Self::sync_peer_writes`] over `e`.
    pub(crate) fn sync_peer(&self, e: &Extent) {
        let v = e.view;
        let mut one_at_a_time = self.maps.sync.lock();
        let runs = &mut one_at_a_time.runs;
        runs.clear();
        // SAFETY: the shadow is a live mapping covering the extent; only read here.
        unsafe { changed_in(&v, v.shadow as *const u8, 0, v.len, runs) };
        if runs.is_empty() {
            return;
        }
        let holes = match self.usable(e, true) {
            Some((u, holes)) if u.view.app == v.app => holes,
            Some((own, _)) => {
                drop(one_at_a_time);
                return self.sync_peer(&own);
            }
            None => return,
        };
        for &(a, b) in runs.iter() {
            self.to_app_in(&v, a as u64, b - a, &holes);
        }
    }
    /// Peers' writes that no completion announced, while the application spins on empty polls
    /// (idle.rs): like [`Self::sync_peer`], what a peer changed in the shadow since the last sync
    /// goes to the application. Whether it found any.
    ///
    /// The shadow is read from its end down, in 4 KiB chunks (each compared first, only changed
    /// ones read again, in aligned 8-byte loads from the top, into a buffer on the stack): a NIC writes a message in address
    /// order, so what is read holds a prefix of a write in flight, never a later byte without the
    /// earlier ones — a program that polls a message's last byte sees the whole message once it
    /// sees that byte, as without bounce.
    ///
    /// At most about [`IDLE_BYTES`] per pass: the next pass goes on below where this one
    /// stopped, and it stops only after a chunk that had not changed — a message in flight
    /// across the cut would have changed it (its bytes below the cut land before those above),
    /// so no message's end is copied without its beginning. Returns (found a write, reached the
    /// bottom).
    pub(crate) fn sync_unannounced(&self, e: &Extent) -> (bool, bool) {
        const CHUNK: usize = 4096;
        let Some((e, holes)) = self.usable(e, true) else { return (false, true) };
        if self.gone.load(Ordering::Acquire) {
            return (false, true);
        }
        let v = e.view;
        let mut guard = self.maps.sync.lock();
        let Scratch { runs, idle_from, .. } = &mut *guard;
        runs.clear();
        let mut chunk = [0u8; CHUNK];
        let mut end = if *idle_from == 0 || *idle_from > v.len { v.len } else { *idle_from };
        let mut scanned = 0;
        while end > 0 {
            let start = end.saturating_sub(CHUNK);
            let n = end - start;
            // Shadow and baseline are live mappings covering the extent; the baseline is only
            // written by the shim, under the sync lock held here.
            // SAFETY: as just said.
            let (sh, ba) = unsafe {
                (
                    std::slice::from_raw_parts((v.shadow + start) as *const u8, n),
                    std::slice::from_raw_parts_mut((v.baseline + start) as *mut u8, n),
                )
            };
            let clean = sh == ba;
            if !clean {
                // SAFETY: [start, end) of the shadow is readable (above).
                unsafe { snapshot_from_end(sh.as_ptr(), &mut chunk[..n]) };
                let at = runs.len();
                crate::diff::for_each_run(&chunk[..n], ba, |x, y| runs.push((start + x, start + y)));
                for &(x, y) in &runs[at..] {
                    ba[x - start..y - start].copy_from_slice(&chunk[x - start..y - start]);
                }
                runs[at..].reverse();
            }
            end = start;
            scanned += n;
            if scanned >= IDLE_BYTES && clean {
                break;
            }
        }
        *idle_from = end;
        runs.reverse();
        let found = !runs.is_empty();
        for &(a, b) in runs.iter() {
            each_outside(a, b, &holes, |a, b| {
                self.will_write_app(v.app + a as u64, b - a);
                // The run's last byte last: another thread polling it sees the rest first.
                let split = if b - a > 1 && self.engine.app_is_host() { b - 1 } else { b };
                for (x, y) in [(a, split), (split, b)] {
                    let (to, from) = (v.app + x as u64, (v.baseline + x) as *const u8);
                    // [x, y) is within the extent, which the application's buffer covers
                    // (writable: outside the holes).
                    // SAFETY: as just said.
                    if let Err(err) = unsafe { self.engine.to_app(to, from, y - x) } {
                        warn_once(&format!("{} engine: {err}", self.engine.name()));
                    }
                }
            });
        }
        (found, end == 0)
    }
}

impl Region {
    /// Bytes of this region that a peer wrote into the shadow and no completion, idle pass or
    /// other sync brought to the application: (first offset, count). At deregistration and at
    /// exit, any is a write outside the contract (nothing announced it to a process that polled
    /// or posted), and what the application read there was stale.
    pub(crate) fn undelivered(&self) -> Option<(usize, usize)> {
        if !self.remote_write || !self.has_baseline() {
            return None;
        }
        let _one_at_a_time = self.maps.sync.lock();
        let v = self.own();
        // SAFETY: shadow and baseline are live mappings covering the region; only read here.
        let (sh, ba) = unsafe {
            (
                std::slice::from_raw_parts(v.shadow as *const u8, v.len),
                std::slice::from_raw_parts(v.baseline as *const u8, v.len),
            )
        };
        if sh == ba {
            return None;
        }
        let (mut first, mut n) = (usize::MAX, 0);
        crate::diff::for_each_run(sh, ba, |a, b| {
            first = first.min(a);
            n += sh[a..b].iter().zip(&ba[a..b]).filter(|(x, y)| x != y).count();
        });
        (n > 0).then_some((first, n))
    }

    /// Reports [`Self::undelivered`] bytes as a violation; `when`: "at its deregistration", "at
    /// exit".
    pub(crate) fn check_delivered(&self, when: &str) {
        if let Some((first, n)) = self.undelivered() {
            crate::watch::peers_unannounced();
            mrshim_core::violation::report(
                "unannounced_write",
                &format!(
                    "{n} bytes a peer wrote to the bounce region at {:#x} (length {}, first at offset {first}) never \
                     reached the application ({when}): no completion this process polled announced them; \
                     passive one-sided peers need the buffer registered directly (dmabuf, GPU peer memory) or \
                     the job-wide fallback",
                    self.app, self.len
                ),
            );
        }
    }
}

/// Copies `src[..dst.len()]` into `dst` reading from the end down, in aligned 8-byte loads
/// (single-copy atomic on x86_64 and aarch64) between byte loads at the unaligned ends.
///
/// # Safety
/// `src` must be readable for `dst.len()` bytes.
unsafe fn snapshot_from_end(src: *const u8, dst: &mut [u8]) {
    let mut i = dst.len();
    let at = |i: usize| src as usize + i;
    while i > 0 && at(i) % 8 != 0 {
        i -= 1;
        // SAFETY: i < len, within what the caller guarantees readable.
        dst[i] = unsafe { std::ptr::read_volatile(src.add(i)) };
    }
    while i >= 8 {
        i -= 8;
        // SAFETY: [i, i+8) is readable and src+i is 8-aligned (the loop above stopped there).
        let w = unsafe { std::ptr::read_volatile(src.add(i).cast::<u64>()) };
        dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    while i > 0 {
        i -= 1;
        // SAFETY: as in the first loop.
        dst[i] = unsafe { std::ptr::read_volatile(src.add(i)) };
    }
}

/// Bytes both the application and a peer changed, found by folds ([`take_run`]).
#[derive(Default)]
struct Conflict {
    bytes: usize,
    first: usize,
}

impl Conflict {
    /// `k` such bytes in the run starting at `a` (its first one at `at`).
    fn add(&mut self, a: usize, (k, at): (usize, usize)) {
        if k > 0 {
            self.first = if self.bytes == 0 { a + at } else { self.first.min(a + at) };
            self.bytes += k;
        }
    }
}

/// A fold's copy of the changed run [a, b) of `now` (the application's bytes): into the
/// baseline, then from the baseline into the shadow — `now` is read once.
///
/// Where the shadow differs from the baseline in the run, a peer wrote there since the last
/// sync (its write not announced yet): bytes the application left as they were keep the
/// peer's (a run spans up to 126 unchanged bytes, diff.rs), the next sync brings them over;
/// bytes both changed take the application's. Returns (how many bytes both changed, the offset
/// in the run of the first). Another thread of the
/// application may be writing there meanwhile (it refills a buffer while this thread's
/// post_recv folds the region): read twice, the shadow could get the older bytes and the
/// baseline the newer ones, a difference every later sync takes for a peer's write — the old
/// bytes would be copied back over the application's and go on the wire (N3, issue 28).
///
/// # Safety
/// `now + a .. now + b` is readable; b <= the extent's length; neither mapping aliases `now`.
unsafe fn take_run(v: &View, now: *const u8, a: usize, b: usize) -> (usize, usize) {
    let (ba, sh) = ((v.baseline + a) as *mut u8, (v.shadow + a) as *mut u8);
    // SAFETY: shadow and baseline are live mappings covering the extent, b <= len; only read.
    let peer = unsafe { std::slice::from_raw_parts(sh, b - a) != std::slice::from_raw_parts(ba, b - a) };
    if peer {
        let (mut both, mut first) = (0, 0);
        for i in 0..b - a {
            // SAFETY: as above, and the caller's contract for `now` (read once per byte).
            unsafe {
                let (app, old, theirs) = (std::ptr::read_volatile(now.add(a + i)), *ba.add(i), *sh.add(i));
                if theirs != old {
                    if app == old {
                        continue;
                    }
                    if both == 0 {
                        first = i;
                    }
                    both += 1;
                }
                *ba.add(i) = app;
                *sh.add(i) = app;
            }
        }
        return (both, first);
    }
    // The second copy's source goes through black_box: the optimiser would otherwise forward
    // `now` to it (memcpy(b, a); memcpy(c, b) becomes memcpy(c, a)), reading the application's
    // bytes twice again.
    // SAFETY: live shadow and baseline over the extent; the caller's `now`; no overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(now.add(a), ba, b - a);
        std::ptr::copy_nonoverlapping(std::hint::black_box(ba as *const u8), sh, b - a);
    }
    (0, 0)
}

/// What [`send_piece`] compares and copies at a time: a piece's three copies stay in L1 between
/// its compares and its copies (docs/perf.md, issue 28).
const SEND_PIECE: usize = 4096;

/// A send's [k bytes at offset `o`] of `v`, host memory with a baseline: the shadow gets the
/// application's bytes, and the bytes where it differed from the baseline (a peer's write no
/// sync delivered) are counted, as (how many, offset in the piece of the first).
///
/// Nothing is written where nothing differs: where the application's bytes equal the baseline
/// and so does the shadow, it already holds them. A send that finds its bytes unchanged (a
/// buffer sent again, a ring slot refilled with the same bytes) thus only reads the shadow,
/// which the NIC may be reading at the same time on another core; a store there would take
/// each line from that core and hand it back when the NIC reads on (docs/perf.md, "Issue 28,
/// the send check's 64 KiB cost"). Otherwise as before: application → baseline → shadow, the
/// application's bytes read once for both.
///
/// # Safety
/// `v.app + o .. + k` is readable; `o + k <= v.len`; neither mapping aliases the application's
/// buffer.
unsafe fn send_piece(v: &View, o: usize, k: usize) -> (usize, usize) {
    let (app, ba, sh) = ((v.app as usize + o) as *const u8, (v.baseline + o) as *mut u8, (v.shadow + o) as *mut u8);
    // The caller's contract for the application's bytes; shadow and baseline are live mappings
    // covering the extent, o + k <= len; only read here.
    // SAFETY: as just said.
    let unchanged = unsafe { std::slice::from_raw_parts(app, k) == std::slice::from_raw_parts(ba, k) };
    // SAFETY: as above.
    let lost = unsafe { differing(sh, ba, k) };
    if unchanged && lost.0 == 0 {
        return lost;
    }
    if !unchanged {
        // SAFETY: as above; the three do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(app, ba, k) };
    }
    // The source goes through black_box: the optimiser would otherwise forward `app` to this
    // copy (see take_run), reading the application's bytes twice.
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(std::hint::black_box(ba as *const u8), sh, k) };
    lost
}

/// How many of the `k` bytes at `x` and `y` differ, and the offset of the first (0 when none):
/// the equal case, the common one, is one `memcmp`.
///
/// # Safety
/// `x` and `y` are readable for `k` bytes.
unsafe fn differing(x: *const u8, y: *const u8, k: usize) -> (usize, usize) {
    // SAFETY: the caller's contract; only read.
    let (x, y) = unsafe { (std::slice::from_raw_parts(x, k), std::slice::from_raw_parts(y, k)) };
    if x == y {
        return (0, 0);
    }
    let first = x.iter().zip(y).position(|(a, b)| a != b).unwrap_or(0);
    (x[first..].iter().zip(&y[first..]).filter(|(a, b)| a != b).count(), first)
}

/// The runs in [a, b) where `now` (the extent's bytes, application or shadow) differs from its
/// baseline, appended to `runs`.
///
/// # Safety
/// `now + a .. now + b` is readable; b <= the extent's length.
unsafe fn changed_in(v: &View, now: *const u8, a: usize, b: usize, runs: &mut Vec<(usize, usize)>) {
    // The baseline is a live mapping covering the extent, b <= len; the caller's contract
    // for `now`; only read here.
    // SAFETY: as just said.
    let (ba, now) = unsafe {
        (
            std::slice::from_raw_parts((v.baseline + a) as *const u8, b - a),
            std::slice::from_raw_parts(now.add(a), b - a),
        )
    };
    crate::diff::for_each_run(now, ba, |x, y| runs.push((a + x, a + y)));
}

/// The one loud line for copies that did not happen (later ones are not repeated): the
/// application may now see stale bytes in a bounce region, and must be told so.
pub fn warn_once(e: &str) {
    if !STATE.warned.swap(true, Ordering::AcqRel) {
        mrshim_core::stderr_line(&format!(
            "mrshim WARN bounce buffer copy failed: {e}; data in bounce regions may be stale"
        ));
    }
}
