//! The bounce layer's one tracker of application writes (crates/dirty), with the kernel's
//! descriptors open only while a tracked region exists. `MRSHIM_BOUNCE_TRACK=off` turns it off
//! (every fold compares whole regions): for buffers that a device writes by DMA behind the page
//! tables (docs/bounce.md).

use mrshim_dirty::{uffd::Kernel, Answer, Id, Tracker};
use mrshim_forklock::ForkLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// None while no region is tracked; then a tracker, disabled where the kernel cannot track.
static TRACKER: ForkLock<Option<Tracker<Kernel>>> = ForkLock::new(None);

/// Set in a forked child: it never tracks (see [`after_fork_child`]).
static FORKED_OFF: AtomicBool = AtomicBool::new(false);

/// MRSHIM_BOUNCE_TRACK as the shim's configuration parsed it (on without a shim: unit tests).
/// A bad value never gets here: the shim then passes every call through, so nothing is bounced.
fn enabled_by_setting() -> bool {
    !FORKED_OFF.load(Ordering::Acquire)
        && mrshim_core::shim_if_initialized().and_then(|s| s.config()).is_none_or(|c| c.bounce_track)
}

/// Tracks the application's pages of [app, app+len) if they are private anonymous memory and
/// the kernel can; the caller compares the whole range once after it (writes before the pages
/// were protected are not reported).
pub fn track(app: u64, len: u64) -> Option<Id> {
    let start = app & !(mrshim_dirty::PAGE - 1);
    if !mrshim_core::maps::private_anonymous(&mrshim_core::maps::read_self(), start, len.checked_add(app - start)?) {
        return None;
    }
    let mut g = TRACKER.lock();
    let t = g.get_or_insert_with(|| Tracker::new(enabled_by_setting().then(Kernel::open).and_then(Result::ok)));
    let id = t.track(app, len);
    if t.is_empty() {
        *g = None;
    }
    id
}

pub fn untrack(id: Id) {
    let mut g = TRACKER.lock();
    if let Some(t) = g.as_mut() {
        t.untrack(id);
        if t.is_empty() {
            // the descriptors close with it; the next tracked region opens them again
            *g = None;
        }
    }
}

pub fn written(id: Id, out: &mut Vec<(u64, u64)>) -> Answer {
    TRACKER.lock().as_mut().map_or(Answer::Everything, |t| t.written(id, out))
}

/// The shim is about to write [start, start+len) of the tracked range `id` (dirty crate).
pub fn unprotect(id: Id, start: u64, len: u64) {
    if let Some(t) = TRACKER.lock().as_mut() {
        t.unprotect(id, start, len);
    }
}

pub fn compared(id: Id, changed_pages: usize) {
    if let Some(t) = TRACKER.lock().as_mut() {
        t.compared(id, changed_pages);
    }
}

/// In a forked child: a tracker of its own that tracks nothing (the parent's descriptors act on
/// the parent's memory; the kernel did not copy the registrations), so every fold compares.
///
/// # Safety
/// Only from the atfork child handler: the child's one thread, not inside the shim.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract.
    unsafe { TRACKER.recover_in_child(|| None) };
    // The parent's descriptors stay open in the child, untouched (a Kernel dropped in another
    // process closes nothing); the child's folds all compare whole regions.
    drop(TRACKER.lock().take());
    FORKED_OFF.store(true, Ordering::Release);
}
