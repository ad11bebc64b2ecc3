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

/// `analyze` of `inputs` with stderr on a terminal (through script(1)'s pseudo-terminal) or on a
/// pipe; the first input is a FIFO whose writer waits `delay` before sending its records, so the
/// run takes that long without a large input.
fn analyze_slowly(delay: &str, terminal: bool) -> String {
    let dir = std::env::temp_dir().join(format!("mrshim-progress-{}-{terminal}-{delay}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("rank0.jsonl");
    std::fs::write(
        &log,
        r#"{"v":1,"kind":"reg","seq":1,"time_ns":1,"host":"h","pid":1,"tid":1,"call":"ibv_reg_mr","result":"ok","duration_ns":1}
"#,
    )
    .unwrap();
    let fifo = dir.join("slow.jsonl");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let cmd = format!(
        "(sleep {delay}; cat {log}) > {fifo} & {bin} analyze {fifo} {log}",
        log = log.display(),
        fifo = fifo.display(),
        bin = env!("CARGO_BIN_EXE_mrshim")
    );
    let o = if terminal {
        Command::new("script").args(["-qec", &cmd, "/dev/null"]).output()
    } else {
        Command::new("sh").args(["-c", &format!("{cmd} 2>&1")]).output()
    }
    .expect("spawn");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_progress_line_on_a_terminal_for_slow_inputs_only() {
    let slow = analyze_slowly("1.5", true);
    assert!(slow.contains("\r\x1b[Kmrshim analyze: 1/2 inputs"), "no progress line: {slow:?}");
    // Erased before the report: what follows the last erase is the report's own first line.
    let after = &slow[slow.rfind("\r\x1b[K").unwrap() + 4..];
    assert!(after.starts_with("mrshim analyze: 2 inputs, 1 host"), "progress not erased: {slow:?}");
    let piped = analyze_slowly("1.5", false);
    assert!(!piped.contains('\x1b') && !piped.contains('\r'), "progress into a pipe: {piped:?}");
    let fast = analyze_slowly("0", true);
    assert!(!fast.contains("\x1b[K"), "progress for a fast input: {fast:?}");
}
