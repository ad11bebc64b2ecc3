//! The bounce layer's one tracker of application writes (crates/dirty), with the kernel's
//! descriptors open only while a tracked region exists. `MRSHIM_BOUNCE_TRACK=off` turns it off
//! (every fold compares whole regions): for buffers that a device writes by DMA behind the page
//! tables (docs/bounce.md).

use crate::state::STATE;
use mrshim_dirty::{uffd::Kernel, Answer, Id, Tracker};
use std::sync::atomic::Ordering;

/// MRSHIM_BOUNCE_TRACK as the shim's configuration parsed it (on without a shim: unit tests).
/// A bad value never gets here: the shim then passes every call through, so nothing is bounced.
fn enabled_by_setting() -> bool {
    mrshim_core::shim_if_initialized().and_then(|s| s.config()).is_none_or(|c| c.bounce_track)
}

/// Tracks the application's pages of [app, app+len) if they are private anonymous memory and
/// the kernel can; the caller compares the whole range once after it (writes before the pages
/// were protected are not reported).
pub fn track(app: u64, len: u64) -> Option<Id> {
    let start = app & !(mrshim_dirty::PAGE - 1);
    if !mrshim_core::maps::private_anonymous(&mrshim_core::maps::read_self(), start, len.checked_add(app - start)?) {
        return None;
    }
    let mut g = STATE.tracker.lock();
    let t = g.get_or_insert_with(|| Tracker::new(enabled_by_setting().then(Kernel::open).and_then(said_once)));
    let id = t.track(app, len);
    if t.is_empty() {
        *g = None;
    }
    id
}

/// The kernel's tracker, or, when it cannot start (a kernel before 6.7, seccomp,
/// vm.unprivileged_userfaultfd), one line saying why, once per process: folds then compare whole
/// regions (exact, slower).
fn said_once<K>(k: Result<K, String>) -> Option<K> {
    k.inspect_err(|e| {
        if !STATE.track_said.swap(true, Ordering::AcqRel) {
            let msg = format!(
                "bounce write tracking cannot start ({e}): folds compare whole regions (exact, slower; \
                 Linux >= 6.7 with userfaultfd allowed tracks them)"
            );
            match mrshim_core::shim_if_initialized() {
                Some(s) => s.say("INFO", &msg),
                None => mrshim_core::stderr_line(&format!("mrshim INFO {msg}")),
            }
            STATE.track_lines.fetch_add(1, Ordering::AcqRel);
        }
    })
    .ok()
}

pub fn untrack(id: Id) {
    let mut g = STATE.tracker.lock();
    if let Some(t) = g.as_mut() {
        t.untrack(id);
        if t.is_empty() {
            // the descriptors close with it; the next tracked region opens them again
            *g = None;
        }
    }
}

pub fn written(id: Id, out: &mut Vec<(u64, u64)>) -> Answer {
    STATE.tracker.lock().as_mut().map_or(Answer::Everything, |t| t.written(id, out))
}

/// The shim is about to write [start, start+len) of the tracked range `id` (dirty crate).
pub fn unprotect(id: Id, start: u64, len: u64) {
    if let Some(t) = STATE.tracker.lock().as_mut() {
        t.unprotect(id, start, len);
    }
}

pub fn compared(id: Id, changed_pages: usize) {
    if let Some(t) = STATE.tracker.lock().as_mut() {
        t.compared(id, changed_pages);
    }
}

/// In a forked child: a tracker of its own, opened at the child's first tracked region (the
/// parent's descriptors act on the parent's memory; the kernel did not copy the registrations).
///
/// # Safety
/// Only from the atfork child handler: the child's one thread, not inside the shim.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract.
    unsafe { STATE.tracker.recover_in_child(|| None) };
    // The parent's descriptors stay open in the child, untouched (a Kernel dropped in another
    // process closes nothing): the parent's regions' folds compare whole.
    drop(STATE.tracker.lock().take());
    // Regions tracked in the parent keep its ids, which the child's tracker does not know
    // (ids are never reused): their folds compare whole. Regions the child tracks are its own.
}

#[cfg(test)]
mod tests {
    /// N19: tracking that cannot start says so once, and folds fall back to whole compares.
    #[test]
    fn tracking_that_cannot_start_says_so_once() {
        let before = crate::state::STATE.track_lines.load(super::Ordering::Acquire);
        assert!(super::said_once::<()>(Err("userfaultfd: Operation not permitted".into())).is_none());
        assert!(super::said_once::<()>(Err("again".into())).is_none());
        assert_eq!(
            crate::state::STATE.track_lines.load(super::Ordering::Acquire),
            1.max(before),
            "one line per process"
        );
    }
}
