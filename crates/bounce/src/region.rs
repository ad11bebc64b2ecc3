//! One bounce region: the application's buffer, its host shadow (what the NIC reads and writes)
//! and, for regions peers can write, a baseline — what the shadow held after the last copy either
//! way — so that the bytes a peer wrote are told apart from what the application wrote meanwhile.
//!
//! Epochs: [`bump_epoch`] is called for every post_send and every poll that returns completions
//! in a context with bounce regions; the application reacts to those, so its buffer may have
//! changed since. Receives posted back to back with neither in between fold the application's
//! writes once ([`Region::fold_app_writes`]). Folds before a post that may tell a peer to read
//! take no such shortcut: the application can write between two posts with no verb in between;
//! what makes them cheap is the kernel's write tracking of host memory (crates/dirty).

use crate::copy::CopyEngine;
use crate::dirty;
use crate::pool::{unmap, Mapping};
use mrshim_forklock::ForkLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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
}

/// The mappings behind a shadow (and its baseline, length 0 when there is none). Registrations
/// of memory inside an existing bounce region share them, as MRs of the same memory share its
/// pages on a NIC: Open MPI's one-sided component and UCX register a window once per device,
/// a peer puts through one MR and gets through another, and with a shadow each the get would
/// read bytes the put never reached. Back to the pool with the last region.
pub(crate) struct Maps {
    pub(crate) shadow: Mapping,
    pub(crate) baseline: Mapping,
}

impl Drop for Maps {
    fn drop(&mut self) {
        unmap(self.shadow);
        unmap(self.baseline);
    }
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
    /// Serialises the whole-region syncs; holds what they reuse (device copy, changed runs).
    pub(crate) sync: ForkLock<Scratch>,
    /// The [`EPOCH`] of the last fold: receives posted back to back fold once.
    pub(crate) folded: AtomicU64,
    /// The kernel tracks writes to the application's pages (host memory, crates/dirty).
    pub(crate) track: Option<mrshim_dirty::Id>,
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(id) = self.track {
            dirty::untrack(id);
        }
    }
}

/// Pages touched by changed runs (what brings a resting tracked range back to tracking).
fn changed_pages(runs: &[(usize, usize)]) -> usize {
    runs.iter().map(|&(a, b)| (b - 1) / PAGE - a / PAGE + 1).sum()
}

/// See the module doc.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// A post_send, a poll with completions or a `wr_start` in a context with bounce regions: the
/// application may have written its buffers since, so the next receive folds them again.
pub fn bump_epoch() {
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

impl Region {
    /// The offset and length of [addr, addr+len) in this region, if it lies wholly inside.
    pub(crate) fn range(&self, addr: u64, len: u64) -> Option<(u64, usize)> {
        let end = addr.checked_add(len)?;
        (addr >= self.iova && end <= self.iova + self.len).then(|| (addr - self.iova, len as usize))
    }
    /// Application → shadow. For regions peers write, through the baseline: it holds exactly
    /// what the shadow was given, so a peer's write that lands meanwhile still shows as a change.
    pub(crate) fn to_shadow(&self, off: u64, n: usize) {
        self.through_baseline(off, n, |ba, sh, o, k| {
            let dst = ba.unwrap_or(sh);
            // SAFETY: [o, o+k) is within the region: the shadow (or baseline) mapping and the
            // application's buffer it was prepared for both cover it.
            if let Err(e) = unsafe { self.engine.to_host(dst as *mut u8, self.app + o, k) } {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
            if let Some(ba) = ba {
                // SAFETY: both mappings cover the region's length; [o, o+k) is within it.
                unsafe { std::ptr::copy_nonoverlapping(ba as *const u8, sh as *mut u8, k) };
            }
        });
    }
    /// Shadow → application. For regions peers write, through the baseline: a snapshot first,
    /// then the application gets exactly the snapshot, so bytes a peer writes while this runs
    /// differ from the baseline and go over at the next sync instead of being lost.
    pub(crate) fn to_app(&self, off: u64, n: usize) {
        self.through_baseline(off, n, |ba, sh, o, k| {
            if let Some(ba) = ba {
                // SAFETY: as in to_shadow.
                unsafe { std::ptr::copy_nonoverlapping(sh as *const u8, ba as *mut u8, k) };
            }
            // SAFETY: as in to_shadow; the shim's mappings never overlap the application's buffer.
            if let Err(e) = unsafe { self.engine.to_app(self.app + o, ba.unwrap_or(sh) as *const u8, k) } {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
        });
    }
    /// Runs `step(baseline, shadow, offset, len)` over [off, off+n): for host memory in 16 KiB
    /// steps, so the second copy of each step reads the baseline from cache; in one step for a
    /// GPU runtime (each of its copies is a call and a stream sync). No baseline: one step.
    fn through_baseline(&self, off: u64, n: usize, mut step: impl FnMut(Option<usize>, usize, u64, usize)) {
        const STEP: usize = 16 << 10;
        let unit = if self.has_baseline() && self.engine.app_is_host() { STEP } else { n.max(1) };
        let mut done = 0;
        while done < n {
            let k = unit.min(n - done);
            let o = off as usize + done;
            step(self.has_baseline().then_some(self.baseline + o), self.shadow + o, o as u64, k);
            done += k;
        }
    }
    pub(crate) fn has_baseline(&self) -> bool {
        self.maps.baseline.1 != 0
    }
    /// Whether the application's host buffer is still mapped. A registration may outlive it:
    /// UCX's registration cache keeps an MR after the buffer was freed until it processes the
    /// unmap event, and the NIC keeps the pinned pages meanwhile; the shim must not touch the
    /// hole (one msync(MS_ASYNC), which only checks the mappings). Device memory: the engine's
    /// copies report errors themselves.
    fn app_mapped(&self) -> bool {
        if !self.engine.app_is_host() {
            return true;
        }
        let start = self.app & !(PAGE as u64 - 1);
        // SAFETY: MS_ASYNC only validates that [start, app+len) is mapped; nothing is written.
        unsafe { libc::msync(start as *mut libc::c_void, (self.app + self.len - start) as usize, libc::MS_ASYNC) == 0 }
    }
    /// The runs where the shadow (or, with `now`, the given view of the application's buffer)
    /// differs from the baseline, into `runs`.
    fn changed(&self, now: Option<&[u8]>, runs: &mut Vec<(usize, usize)>) {
        let len = self.len as usize;
        // SAFETY: shadow and baseline are live mappings of at least len bytes; only read here.
        let (sh, ba) = unsafe {
            (
                std::slice::from_raw_parts(self.shadow as *const u8, len),
                std::slice::from_raw_parts(self.baseline as *const u8, len),
            )
        };
        runs.clear();
        mrshim_core::diff::for_each_run(now.unwrap_or(sh), ba, |a, b| runs.push((a, b)));
    }
    /// Before a receive is posted (regions peers write) and before a post that may tell a peer
    /// to read (regions peers read): bytes the application changed in its buffer since the last
    /// sync go to the shadow (and the baseline), so that what a peer writes next is told apart
    /// from them even where it writes the value the shadow held before, and what a peer reads
    /// after hearing from us is what the application wrote before it spoke. Host memory is
    /// compared in place, only the pages written since the last fold where the kernel tracks
    /// them; device memory through one copy into a scratch buffer kept for the next time.
    /// `once_per_epoch`: receives posted back to back fold once (docs/bounce.md).
    pub(crate) fn fold_app_writes(&self, once_per_epoch: bool) {
        let epoch = EPOCH.load(Ordering::Acquire);
        if once_per_epoch && self.folded.load(Ordering::Acquire) == epoch || !self.app_mapped() {
            return;
        }
        let len = self.len as usize;
        let mut guard = self.sync.lock();
        let Scratch { bytes, runs, pages } = &mut *guard;
        let now: &[u8] = if self.engine.app_is_host() {
            // SAFETY: host memory the region covers, readable for len bytes (checked when the
            // shadow was prepared, mapped as just checked); racing writes by the application are
            // what a NIC would see too.
            unsafe { std::slice::from_raw_parts(self.app as *const u8, len) }
        } else {
            bytes.resize(len, 0);
            // SAFETY: the scratch buffer was just sized to len; the region covers [app, app+len).
            if let Err(e) = unsafe { self.engine.to_host(bytes.as_mut_ptr(), self.app, len) } {
                return warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
            bytes
        };
        pages.clear();
        match self.track.map(|id| (id, dirty::written(id, pages))) {
            Some((_, mrshim_dirty::Answer::Written)) => {
                runs.clear();
                for &(a, b) in pages.iter() {
                    // the written pages, clipped to the region, as offsets into it
                    let (a, b) = (a.max(self.app) - self.app, b.min(self.app + self.len).saturating_sub(self.app));
                    if a < b {
                        self.changed_in(now, a as usize, b as usize, runs);
                    }
                }
            }
            answer => {
                self.changed(Some(now), runs);
                if let Some((id, _)) = answer {
                    dirty::compared(id, changed_pages(runs));
                }
            }
        }
        for &(a, b) in runs.iter() {
            // SAFETY: shadow and baseline are live, each [a, b) is within len, and neither
            // aliases `now` (the application's buffer or the scratch copy).
            unsafe {
                std::ptr::copy_nonoverlapping(now[a..].as_ptr(), (self.shadow + a) as *mut u8, b - a);
                std::ptr::copy_nonoverlapping(now[a..].as_ptr(), (self.baseline + a) as *mut u8, b - a);
            }
        }
        self.folded.store(epoch, Ordering::Release);
    }
    /// The runs in [a, b) where `now` differs from the baseline, appended to `runs`.
    fn changed_in(&self, now: &[u8], a: usize, b: usize, runs: &mut Vec<(usize, usize)>) {
        // SAFETY: the baseline is a live mapping of at least len >= b bytes; only read here.
        let ba = unsafe { std::slice::from_raw_parts((self.baseline + a) as *const u8, b - a) };
        mrshim_core::diff::for_each_run(&now[a..b], ba, |x, y| runs.push((a + x, a + y)));
    }
    /// Copies to the application only the bytes a peer changed in the shadow since the last sync,
    /// so what the application wrote to its buffer meanwhile is not overwritten.
    pub(crate) fn sync_peer_writes(&self) {
        let mut one_at_a_time = self.sync.lock();
        let runs = &mut one_at_a_time.runs;
        self.changed(None, runs);
        if runs.is_empty() || !self.app_mapped() {
            return;
        }
        for &(a, b) in runs.iter() {
            self.to_app(a as u64, b - a);
        }
    }
}

/// The one loud line for copies that did not happen (later ones are not repeated): the
/// application may now see stale bytes in a bounce region, and must be told so.
pub fn warn_once(e: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::AcqRel) {
        mrshim_core::stderr_line(&format!(
            "mrshim WARN bounce buffer copy failed: {e}; data in bounce regions may be stale"
        ));
    }
}
