//! Panics the shim catches in itself. None may reach the application: every hook runs the shim's
//! part under [`guarded`], and the interrupted call goes to the real function. The first one
//! gets one line on stderr; each gets an `error` record; the exit summary counts them.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

thread_local! {
    /// The last panic's message on this thread, from the panic hook to the catcher.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

static COUNT: AtomicU64 = AtomicU64::new(0);

/// The panic hook of libmrshim.so's own std (an application's Rust code has its own): keep the
/// message for the catcher instead of printing a backtrace notice mid-job.
pub fn note_panic(info: &PanicHookInfo) {
    let p = info.payload();
    let msg =
        p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(String::as_str)).unwrap_or("panic");
    let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
    let text = format!("{msg}{at}");
    let _ = LAST.try_with(|l| l.try_borrow_mut().map(|mut l| *l = Some(text)));
}

/// Panics caught so far in this process.
pub fn count() -> u64 {
    COUNT.load(Relaxed)
}

/// A forked child counts its own.
pub fn reset_in_child() {
    COUNT.store(0, Relaxed);
}

/// A panic was caught while the shim handled `what` (an entry point's name): count it, say so
/// once on stderr, record it. Never panics itself.
pub fn caught(what: &str) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let msg = LAST
            .try_with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.take()))
            .ok()
            .flatten()
            .unwrap_or_else(|| "panic".into());
        if COUNT.fetch_add(1, Relaxed) == 0 {
            crate::stderr_line(&format!(
                "mrshim: internal error in {what}: {msg}; the call was passed through to the real function \
                 (later internal errors are only counted, in the exit summary; please report this)"
            ));
        }
        if let Some(s) = crate::shim_if_initialized() {
            s.record_error(what, &msg);
        }
    }));
}

/// Runs the shim's part of handling `what`; a panic in it is [`caught`] and gives None.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(t) => Some(t),
        Err(_) => {
            caught(what);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_caught_counted_and_its_message_kept() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(note_panic));
        let before = count();
        assert_eq!(guarded("ibv_reg_mr", || -> u32 { panic!("boom {}", 7) }), None);
        assert_eq!(guarded("ibv_reg_mr", || 5), Some(5));
        std::panic::set_hook(prev);
        assert!(count() > before);
        assert!(LAST.with(|l| l.borrow().is_none()), "the message went to the catcher");
    }
}
