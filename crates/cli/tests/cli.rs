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

#[test]
fn completions_and_man_pages_come_from_the_clap_definitions() {
    let o = mrshim(&["completions", "bash"]);
    assert!(o.status.success());
    let bash = String::from_utf8_lossy(&o.stdout);
    assert!(bash.contains("complete -F _mrshim") && bash.contains("--prometheus"), "{bash}");
    let dir = std::env::temp_dir().join(format!("mrshim-man-{}", std::process::id()));
    let o = mrshim(&["man", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for page in ["mrshim.1", "mrshim-analyze.1", "mrshim-doctor.1", "mrshim-exec.1", "mrshim-sim.1"] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is a man page");
    }
    let analyze = std::fs::read_to_string(dir.join("mrshim-analyze.1")).unwrap();
    assert!(analyze.contains("prometheus") && analyze.contains("report"), "options documented");
    let _ = std::fs::remove_dir_all(&dir);
}
