//! How an engine's self-test verdict reaches the user.

use super::abi::Family;

/// The self-test's verdict, once per engine and process: one line, and a policy record when the
/// engine is disabled.
pub fn report_selftest(family: Family, r: &Result<(), String>) {
    let name = family.name();
    let shim = mrshim_core::shim_if_initialized();
    let say = |level: &str, msg: String| match shim {
        Some(s) => s.say(level, &msg),
        None => mrshim_core::stderr_line(&format!("mrshim {level} {msg}")),
    };
    match r {
        Ok(()) => say(
            "INFO",
            format!("{name} copy engine: self-test passed (pointer query and a round trip through its own allocation)"),
        ),
        Err(e) => {
            say(
                "WARN",
                format!(
                    "{name} copy engine disabled: self-test failed: {e}; registrations of {name} device memory are not \
                     bounced (they fail with their original errno)"
                ),
            );
            if let Some(s) = shim {
                s.record_policy_note("copy_selftest", "bounce", &format!("{name} copy engine disabled: {e}"));
            }
        }
    }
}
