//! Which pages of the process's own private anonymous memory were written since it last looked.
//!
//! The bounce layer folds what the application wrote into its shadows before posts that may let a
//! peer read them (docs/bounce.md). Comparing whole regions at every fold is O(region) per post;
//! with a tracked range a fold compares only the pages written since the last one.
//!
//! Plain Rust over one trait, [`Pages`]; the kernel's implementation is [`uffd::Kernel`]
//! (userfaultfd's asynchronous write-protect and the PAGEMAP_SCAN ioctl, Linux >= 6.7), tests use
//! a model of it. An answer is either the exact pages written through the process's page tables
//! since the range's last scan, or [`Answer::Everything`] (compare the whole range): a range the
//! kernel cannot track, that overlaps another, that failed a scan, or whose writes cost more to
//! track than to compare (the policy below) is never guessed about.

pub mod uffd;

/// A new private anonymous read-write mapping of `n` bytes (the kind of memory the kernel can
/// track; also what the bounce layer's shadows are).
pub fn map_private(n: usize) -> std::io::Result<usize> {
    // SAFETY: a new mapping nobody else references; no address hint.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            n,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as usize)
}

pub const PAGE: u64 = 4096;

/// Write tracking of page-aligned ranges.
pub trait Pages {
    /// Starts tracking [start, start+len); nothing counts as written until the first scan
    /// protects the pages.
    fn arm(&mut self, start: u64, len: u64) -> Result<(), String>;
    fn disarm(&mut self, start: u64, len: u64);
    /// Appends the page-aligned ranges of [start, start+len) written since they were last
    /// scanned, and protects them again.
    fn scan(&mut self, start: u64, len: u64, out: &mut Vec<(u64, u64)>) -> Result<(), String>;
    /// Clears the protection of the pages of [start, start+len) (page-aligned) ahead of a write
    /// the caller is about to make: the next scan reports them written, and the write costs no
    /// fault per page.
    fn unprotect(&mut self, start: u64, len: u64);
}

/// Smallest range worth a kernel range of its own: below it a compare costs about as much as
/// the scan's system call (benches/dirty.rs), and every tracked range may split a mapping.
pub const MIN_LEN: u64 = 64 << 10;
/// At most this many tracked ranges (each may split the application's mapping in up to three).
pub const MAX_RANGES: usize = 1024;

/// The policy: a range stays tracked while, per fold, the written fraction of its pages
/// (a moving average, weight 1/8 per fold) is at most [`TRACK_UP_TO`]; above it, it rests
/// (every fold compares everything, the application's writes stop faulting) until the fraction
/// that compares find changed drops to [`REARM_BELOW`]. A write to a protected page costs one
/// minor fault, 0.5–4 µs; comparing a page costs 0.2–0.8 µs (benches/dirty.rs): tracking pays
/// off while well under a quarter of the pages are written between two folds. A range rests at
/// least [`FIRST_REST`] folds, twice as long each time it goes back to resting (up to
/// [`LONGEST_REST`]): a buffer the shim itself rewrites at every message (a receive buffer) only
/// shows "nothing changed" to whole compares, and would otherwise be re-armed again and again.
pub const TRACK_UP_TO: f32 = 0.25;
pub const REARM_BELOW: f32 = 1.0 / 16.0;
pub const FIRST_REST: u32 = 16;
pub const LONGEST_REST: u32 = 1 << 16;
const WEIGHT: f32 = 1.0 / 8.0;

pub type Id = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Scanned at every fold.
    Tracking,
    /// Armed but not scanned: folds compare everything.
    Resting,
    /// A scan failed: never scanned again (folds compare everything).
    Broken,
}

struct Range {
    id: Id,
    start: u64,
    end: u64,
    mode: Mode,
    /// Moving average of the fraction of pages written (or found changed) per fold.
    written: f32,
    /// Folds left before a resting range may be tracked again, and the next rest's length.
    rest_left: u32,
    next_rest: u32,
}

impl Range {
    fn pages(&self) -> f32 {
        ((self.end - self.start) / PAGE) as f32
    }
    fn observe(&mut self, pages: usize) {
        let f = (pages as f32 / self.pages()).min(1.0);
        self.written += (f - self.written) * WEIGHT;
    }
}

/// What a fold must compare.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Only the ranges appended to `out` (none: nothing was written).
    Written,
    /// The whole range.
    Everything,
}

/// The tracked ranges of the process.
pub struct Tracker<P> {
    pages: Option<P>,
    ranges: Vec<Range>,
}

/// Ids are the process's, never reused, across trackers: a tracker rebuilt (in a forked child,
/// or after the last range went) never hands out an id a caller still holds for an older range,
/// which would then get the new range's answers.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<P: Pages> Tracker<P> {
    /// `pages`: None where the kernel cannot track (every answer is then [`Answer::Everything`]).
    pub const fn new(pages: Option<P>) -> Self {
        Tracker { pages, ranges: Vec::new() }
    }

    pub fn enabled(&self) -> bool {
        self.pages.is_some()
    }

    /// No range is tracked (the caller may close the kernel's descriptors).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Tracks the pages of [start, start+len): call it before the caller's first full copy, so
    /// that every write after that copy is either in it or reported by a later scan. None when
    /// the range cannot be tracked (too small, overlapping a tracked range, too many, or the
    /// kernel refused): the caller compares everything at each fold.
    pub fn track(&mut self, start: u64, len: u64) -> Option<Id> {
        let (s, e) = (start & !(PAGE - 1), start.checked_add(len)?.checked_next_multiple_of(PAGE)?);
        if e - s < MIN_LEN || self.ranges.len() >= MAX_RANGES || self.ranges.iter().any(|r| r.start < e && s < r.end) {
            return None;
        }
        let k = self.pages.as_mut()?;
        k.arm(s, e - s).ok()?;
        // The first scan protects every page; what it reports was written before tracking.
        let mut ignored = Vec::new();
        if k.scan(s, e - s, &mut ignored).is_err() {
            k.disarm(s, e - s);
            return None;
        }
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.ranges.push(Range {
            id,
            start: s,
            end: e,
            mode: Mode::Tracking,
            written: 0.0,
            rest_left: 0,
            next_rest: FIRST_REST,
        });
        Some(id)
    }

    pub fn untrack(&mut self, id: Id) {
        let Some(i) = self.ranges.iter().position(|r| r.id == id) else { return };
        let r = self.ranges.swap_remove(i);
        if let (Some(k), false) = (self.pages.as_mut(), r.mode == Mode::Broken) {
            k.disarm(r.start, r.end - r.start);
        }
    }

    /// At a fold of `id`: the pages written since its last fold, appended to `out`, or
    /// Everything. Unknown ids (untracked, or a tracker rebuilt in a forked child) get
    /// Everything.
    pub fn written(&mut self, id: Id, out: &mut Vec<(u64, u64)>) -> Answer {
        let Some(r) = self.ranges.iter_mut().find(|r| r.id == id) else { return Answer::Everything };
        let Some(k) = self.pages.as_mut() else { return Answer::Everything };
        let (s, len) = (r.start, r.end - r.start);
        match r.mode {
            Mode::Broken => Answer::Everything,
            Mode::Resting if r.written >= REARM_BELOW || r.rest_left > 0 => {
                r.rest_left = r.rest_left.saturating_sub(1);
                Answer::Everything
            }
            Mode::Resting => {
                // Protect everything again; the caller's whole compare, after this, catches
                // what was written before.
                let mut ignored = Vec::new();
                r.mode = if k.scan(s, len, &mut ignored).is_ok() { Mode::Tracking } else { Mode::Broken };
                Answer::Everything
            }
            Mode::Tracking => {
                let at = out.len();
                if k.scan(s, len, out).is_err() {
                    out.truncate(at);
                    r.mode = Mode::Broken;
                    k.disarm(s, len);
                    return Answer::Everything;
                }
                let pages: u64 = out[at..].iter().map(|&(a, b)| (b - a) / PAGE).sum();
                r.observe(pages as usize);
                if r.written > TRACK_UP_TO {
                    r.mode = Mode::Resting;
                    r.rest_left = r.next_rest;
                    r.next_rest = (r.next_rest * 2).min(LONGEST_REST);
                }
                Answer::Written
            }
        }
    }

    /// The caller is about to write [start, start+len) of `id` itself (the shim copying a peer's
    /// bytes into the application's buffer): its whole pages lose their protection in one call
    /// instead of one fault each. Counted as written at the next scan, as the faults would be.
    pub fn unprotect(&mut self, id: Id, start: u64, len: u64) {
        let Some(r) = self.ranges.iter().find(|r| r.id == id && r.mode != Mode::Broken) else { return };
        let Some(k) = self.pages.as_mut() else { return };
        let s = start.max(r.start) & !(PAGE - 1);
        let e = start.saturating_add(len).min(r.end).next_multiple_of(PAGE).min(r.end);
        if s < e {
            k.unprotect(s, e - s);
        }
    }

    /// After a whole compare of `id` (an Everything answer): how many pages differed. Drives
    /// when a resting range is tracked again.
    pub fn compared(&mut self, id: Id, changed_pages: usize) {
        if let Some(r) = self.ranges.iter_mut().find(|r| r.id == id && r.mode == Mode::Resting) {
            r.observe(changed_pages);
        }
    }

    #[cfg(test)]
    fn mode(&self, id: Id) -> Option<Mode> {
        self.ranges.iter().find(|r| r.id == id).map(|r| r.mode)
    }
}

#[cfg(test)]
mod tests;
