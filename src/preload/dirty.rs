//! The bounce layer's one tracker of application writes (crates/dirty), opened at the first
//! region that wants it. `MRSHIM_BOUNCE_TRACK=off` turns it off (every fold compares whole
//! regions): for buffers that a device writes by DMA behind the page tables (docs/bounce.md).

use mrshim_dirty::{uffd::Kernel, Answer, Id, Tracker};
use mrshim_forklock::ForkLock;

/// None until the first [`track`]; then a tracker, disabled where the kernel cannot track.
static TRACKER: ForkLock<Option<Tracker<Kernel>>> = ForkLock::new(None);

fn enabled_by_setting() -> bool {
    match std::env::var("MRSHIM_BOUNCE_TRACK").as_deref() {
        Err(_) | Ok("on") => true,
        Ok("off") => false,
        Ok(other) => {
            mrshim_core::stderr_line(&format!(
                "mrshim WARN MRSHIM_BOUNCE_TRACK={} is not on or off; using on",
                mrshim_core::config::shorten(other)
            ));
            true
        }
    }
}

/// Tracks the application's pages of [app, app+len) if they are private anonymous memory and
/// the kernel can; call before the region's first full copy.
pub fn track(app: u64, len: u64) -> Option<Id> {
    let end = app.checked_add(len)?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    if !mrshim_dirty::maps::private_anonymous(&maps, app & !(mrshim_dirty::PAGE - 1), end) {
        return None;
    }
    let mut t = TRACKER.lock();
    let t = t.get_or_insert_with(|| Tracker::new(enabled_by_setting().then(Kernel::open).and_then(Result::ok)));
    t.track(app, len)
}

pub fn untrack(id: Id) {
    if let Some(t) = TRACKER.lock().as_mut() {
        t.untrack(id);
    }
}

pub fn written(id: Id, out: &mut Vec<(u64, u64)>) -> Answer {
    TRACKER.lock().as_mut().map_or(Answer::Everything, |t| t.written(id, out))
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
    *TRACKER.lock() = Some(Tracker::new(None));
}
