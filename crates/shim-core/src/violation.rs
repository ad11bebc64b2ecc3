//! Bounce regions used outside their contract (docs/bounce.md, "Run-time detection"), found
//! after the fact: a peer's write that no completion announced and the application never got, a
//! write the kernel's tracking did not see. The bytes the application saw may have been stale,
//! so each one is said loudly: a WARN line (the first few of each kind; the rest are counted), a
//! `violation` record, the `violations` count of the exit summary — or, with
//! `MRSHIM_BOUNCE_ON_VIOLATION=abort`, the process aborts at the first one.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

static COUNT: AtomicU64 = AtomicU64::new(0);
/// WARN lines printed per kind.
static LINES: Mutex<Vec<(&'static str, u32)>> = Mutex::new(Vec::new());
/// WARN lines per kind; later ones are only counted (records and summary).
pub const LINES_PER_KIND: u32 = 3;

/// Violations detected so far in this process.
pub fn count() -> u64 {
    COUNT.load(Relaxed)
}

/// A forked child counts its own.
pub fn reset_in_child() {
    COUNT.store(0, Relaxed);
    if let Ok(mut l) = LINES.try_lock() {
        l.clear();
    }
}

/// Whether a line of `kind` is still due (the first [`LINES_PER_KIND`] of each kind).
fn line_due(kind: &'static str) -> bool {
    let Ok(mut l) = LINES.lock() else { return false };
    match l.iter_mut().find(|(k, _)| *k == kind) {
        Some((_, n)) => {
            *n += 1;
            *n <= LINES_PER_KIND
        }
        None => {
            l.push((kind, 1));
            true
        }
    }
}

/// A violation of `kind` (a short name: `unannounced_write`, `stale_for_peers`) was detected;
/// `msg` says what and where, and what to do. Never panics; aborts the process if so configured.
pub fn report(kind: &'static str, msg: &str) {
    COUNT.fetch_add(1, Relaxed);
    let shim = crate::shim_if_initialized();
    let abort = shim.and_then(|s| s.config()).is_some_and(|c| c.bounce_abort);
    if line_due(kind) || abort {
        // The bytes that may have been stale: the application's, or (`stale_for_peers`) those
        // peers' RDMA READs were served.
        let who = if kind == "stale_for_peers" { "peers' RDMA READs" } else { "the application" };
        let text = format!(
            "bounce coherence violation ({kind}): {msg}; {who} may have seen stale bytes (docs/bounce.md, \
             Run-time detection)"
        );
        match shim {
            Some(s) => s.say("WARN", &text),
            None => crate::stderr_line(&format!("mrshim WARN {text}")),
        }
    }
    if let Some(s) = shim {
        s.record_violation(kind, msg);
    }
    if abort {
        crate::stderr_line("mrshim: aborting the process (MRSHIM_BOUNCE_ON_VIOLATION=abort)");
        std::process::abort();
    }
}
