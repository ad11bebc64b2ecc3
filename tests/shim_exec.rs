//! `mrshim exec` checks before launch: bad MRSHIM_* values and a library that does not load are
//! refused with exit 2 and one line (CMD never runs); `--log` means what MRSHIM_LOG means; a job
//! that records nothing leaves no directory behind.

mod shim_util;
use shim_util::*;

/// `mrshim exec ARGS -- sh -c 'echo ran'` in `dir`, with `env`.
fn exec_in(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = cmd(mrshim_bin());
    c.current_dir(dir).arg("exec").args(args).args(["--", "/bin/sh", "-c", "echo ran"]);
    c.env_remove("MRSHIM_LOG").env_remove("LD_PRELOAD");
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c)
}

fn refused_with_one_line(o: &std::process::Output, starts: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert_eq!(stdout(o), "", "the command must not run");
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(starts), "{err}");
    assert!(err.trim_end().ends_with("; not started"), "{err}");
}

#[test]
fn bad_values_are_refused_before_launch() {
    let d = tmp("exec-bad");
    let o = exec_in(&d, &[], &[("MRSHIM_RETRY", "bogus")]);
    refused_with_one_line(&o, "mrshim exec: MRSHIM_RETRY=\"bogus\" is not valid");
    let o = exec_in(&d, &["--inject", "ibv_reg_mr:ENOPE"], &[("MRSHIM_LEVEL", "some")]);
    refused_with_one_line(&o, "mrshim exec: MRSHIM_LEVEL=\"some\" is not valid");
    assert!(stderr(&o).contains("(also bad: MRSHIM_INJECT)"), "{}", stderr(&o));
    let o = exec_in(&d, &["--log", "/tmp/%q"], &[]);
    refused_with_one_line(&o, "mrshim exec: MRSHIM_LOG=\"/tmp/%q\" is not valid (unknown placeholder %q)");
    // good values through the flags reach the command
    let o = run(cmd(mrshim_bin())
        .current_dir(&d)
        .args(["exec", "--retry", "auto", "--inject", "ibv_reg_mr:EINVAL", "--level", "failures", "--log", "off"])
        .args(["--", "/bin/sh", "-c", "echo $MRSHIM_RETRY/$MRSHIM_INJECT/$MRSHIM_LEVEL/$MRSHIM_LOG"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "auto/ibv_reg_mr:EINVAL/failures/off\n");
}

#[test]
fn a_library_that_does_not_load_is_refused() {
    let d = tmp("exec-noload");
    let bad = d.join("libmrshim.so");
    std::fs::write(&bad, b"not an ELF file").unwrap();
    let o = exec_in(&d, &["--lib", bad.to_str().unwrap()], &[]);
    refused_with_one_line(&o, &format!("mrshim exec: {} does not load on this system: ", bad.display()));
}

#[test]
fn log_file_is_a_file_and_nothing_is_left_when_nothing_is_recorded() {
    let d = tmp("exec-log");
    let f = fake();
    let o = run(cmd(mrshim_bin())
        .current_dir(&d)
        .args(["exec", "--log", "out/run.jsonl", "--"])
        .arg(f.prog("fake_linked"))
        .env("LD_LIBRARY_PATH", f.lib_dir())
        .env_remove("MRSHIM_LOG"));
    assert!(o.status.success(), "{}", stderr(&o));
    let log = d.join("out/run.jsonl");
    assert!(log.is_file(), "--log out/run.jsonl is a file (its parent created)");
    assert!(records(&log).len() > 2);
    // no registration, no record: no ./mrshim-logs/ (the default) left behind
    let empty = tmp("exec-empty");
    let o = exec_in(&empty, &[], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ran\n");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "nothing created in the working directory");
}
