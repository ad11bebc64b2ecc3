//! The command itself: what a user sees before any subcommand runs. The subcommands are tested
//! where their behaviour lives (tests/analyze_*.rs, tests/doctor_checks.rs, tests/shim_*.rs find
//! this binary through mrshim-test-support). Being an integration test of this package, this
//! file also makes `cargo test --workspace` build `target/<profile>/mrshim` before any test runs.
use std::process::Command;

fn mrshim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mrshim")).args(args).output().expect("spawn mrshim")
}

#[test]
fn version_names_the_command() {
    let o = mrshim(&["--version"]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), format!("mrshim {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn no_subcommand_is_a_usage_error_listing_them_all() {
    let o = mrshim(&[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    for sub in ["analyze", "doctor", "exec", "sim"] {
        assert!(err.contains(sub), "usage lacks {sub}: {err}");
    }
}
