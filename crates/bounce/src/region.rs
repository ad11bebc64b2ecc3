//! One bounce region: the application's buffer, its host shadow (what the NIC reads and writes)
//! and, for regions peers can write, a baseline — what the shadow held after the last copy either
//! way — so that the bytes a peer wrote are told apart from what the application wrote meanwhile.
//!
//! Epochs: [`bump_epoch`] is called for every post_send and every poll that returns completions
//! in a context with bounce regions; the application reacts to those, so its buffer may have
//! changed since. Receives posted back to back with neither in between fold the application's
//! writes once (`Region::fold_app_writes`).

use crate::copy::CopyEngine;
use crate::pool::Mapping;
use mrshim_forklock::ForkLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Kept from one sync to the next (under `Region::sync`): no allocation per message.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Device memory compared through a copy.
    bytes: Vec<u8>,
    /// The changed runs of the last compare.
    runs: Vec<(usize, usize)>,
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
    /// written by a peer (so only those go to the application's buffer). Kept only for regions
    /// peers can write.
    pub(crate) baseline: usize,
    pub(crate) map: Mapping,
    pub(crate) base_map: Mapping,
    pub(crate) remote_write: bool,
    pub(crate) engine: Box<dyn CopyEngine>,
    /// Serialises the whole-region syncs; holds what they reuse (device copy, changed runs).
    pub(crate) sync: ForkLock<Scratch>,
    /// The [`EPOCH`] of the last fold: receives posted back to back fold once.
    pub(crate) folded: AtomicU64,
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
        let unit = if self.remote_write && self.engine.app_is_host() { STEP } else { n.max(1) };
        let mut done = 0;
        while done < n {
            let k = unit.min(n - done);
            let o = off as usize + done;
            step(self.remote_write.then_some(self.baseline + o), self.shadow + o, o as u64, k);
            done += k;
        }
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
    /// Before a receive is posted: bytes the application changed in its buffer since the last
    /// sync go to the shadow (and the baseline), so that what a peer writes next is told apart
    /// from them even where it writes the value the shadow held before. Host memory is compared
    /// in place; device memory through one copy into a scratch buffer kept for the next time.
    pub(crate) fn fold_app_writes(&self) {
        let epoch = EPOCH.load(Ordering::Acquire);
        if self.folded.load(Ordering::Acquire) == epoch {
            return;
        }
        let len = self.len as usize;
        let mut guard = self.sync.lock();
        let Scratch { bytes, runs } = &mut *guard;
        let now: &[u8] = if self.engine.app_is_host() {
            // SAFETY: host memory the region covers, readable for len bytes (checked when the
            // shadow was prepared); racing writes by the application are what a NIC would see too.
            unsafe { std::slice::from_raw_parts(self.app as *const u8, len) }
        } else {
            bytes.resize(len, 0);
            // SAFETY: the scratch buffer was just sized to len; the region covers [app, app+len).
            if let Err(e) = unsafe { self.engine.to_host(bytes.as_mut_ptr(), self.app, len) } {
                return warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
            bytes
        };
        self.changed(Some(now), runs);
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
    /// Copies to the application only the bytes a peer changed in the shadow since the last sync,
    /// so what the application wrote to its buffer meanwhile is not overwritten.
    pub(crate) fn sync_peer_writes(&self) {
        let mut one_at_a_time = self.sync.lock();
        let runs = &mut one_at_a_time.runs;
        self.changed(None, runs);
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
