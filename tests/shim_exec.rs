//! `mrshim exec` checks before launch: bad MRSHIM_* values and a library that does not load are
//! refused with exit 2 and one line (CMD never runs); `--log` means what MRSHIM_LOG means; a job
//! that records nothing leaves no directory behind.

mod shim_util;
use shim_util::*;
use std::os::unix::fs::PermissionsExt;

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
    refused_with_one_line(
        &o,
        &format!("mrshim exec: {} is not a usable libmrshim.so: it is not an ELF file", bad.display()),
    );
    // a whole libmrshim.so that needs a library this node lacks: the loader's own words
    std::fs::copy(shim_lib(), &bad).unwrap();
    require("patchelf", "patchelf");
    assert!(run(cmd("patchelf").args(["--add-needed", "libnot-on-this-node.so.1"]).arg(&bad)).status.success());
    let o = exec_in(&d, &["--lib", bad.to_str().unwrap()], &[]);
    refused_with_one_line(&o, &format!("mrshim exec: {} does not load on this system: ", bad.display()));
    assert!(stderr(&o).contains("libnot-on-this-node.so.1"), "{}", stderr(&o));
}

/// Issue 31 item 2: a partial copy of libmrshim.so (an interrupted copy to a shared filesystem)
/// used to kill `mrshim exec` with SIGBUS in its own load check; another library (libibverbs)
/// would have been preloaded. Both are refused before anything maps them: exit 2, one line.
#[test]
fn a_truncated_or_foreign_library_is_refused_with_one_line() {
    let d = tmp("exec-partial");
    let whole = std::fs::read(shim_lib()).unwrap();
    let part = d.join("libmrshim.so");
    for cut in [whole.len() / 2, whole.len() - 4096, 100] {
        std::fs::write(&part, &whole[..cut]).unwrap();
        let o = exec_in(&d, &["--lib", part.to_str().unwrap()], &[]);
        let want =
            format!("mrshim exec: {} is not a usable libmrshim.so: it is truncated: {cut} bytes", part.display());
        refused_with_one_line(&o, &want);
    }
    let verbs = std::fs::canonicalize("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").unwrap();
    let o = exec_in(&d, &["--lib", verbs.to_str().unwrap()], &[]);
    let want = format!(
        "mrshim exec: {} is not a usable libmrshim.so: it is libibverbs.so.1, not libmrshim.so",
        verbs.display()
    );
    refused_with_one_line(&o, &want);
}

/// Issue 31 item 2: installed under a path the loader cannot take in LD_PRELOAD (it splits at
/// spaces and colons) — here `a b:c/ünï/` — `mrshim exec` preloads a private link to the library
/// instead, so the job is recorded; it never runs the job without the shim.
#[test]
fn exec_from_a_path_with_a_space_a_colon_and_unicode_records_the_job() {
    let d = tmp("exec-path");
    let inst = d.join("a b:c/ünï");
    std::fs::create_dir_all(inst.join("bin")).unwrap();
    std::fs::create_dir_all(inst.join("lib")).unwrap();
    std::fs::copy(mrshim_bin(), inst.join("bin/mrshim")).unwrap();
    std::fs::copy(shim_lib(), inst.join("lib/libmrshim.so")).unwrap();
    let runtime = d.join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let f = fake();
    let logs = d.join("logs");
    let o = run(cmd(inst.join("bin/mrshim"))
        .args(["exec", "--log", &format!("{}/", logs.display()), "--"])
        .arg(f.prog("fake_linked"))
        .env("LD_LIBRARY_PATH", f.lib_dir())
        .env("XDG_RUNTIME_DIR", &runtime)
        .env_remove("LD_PRELOAD")
        .env_remove("MRSHIM_LOG"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("cannot be preloaded"), "{}", stderr(&o));
    let recs = records(&only_file(&logs));
    assert!(recs.len() > 2, "the job is recorded: {recs:?}");
    // what the job sees: one LD_PRELOAD entry, a link in the private directory to that library
    let o = run(cmd(inst.join("bin/mrshim"))
        .args(["exec", "--log", "off", "--", "/bin/sh", "-c", "echo \"$LD_PRELOAD\""])
        .env("XDG_RUNTIME_DIR", &runtime)
        .env_remove("LD_PRELOAD"));
    let preload = stdout(&o).trim_end().to_string();
    assert!(preload.starts_with(&format!("{}/mrshim/libmrshim-", runtime.display())), "{preload}");
    assert!(!preload.contains([' ', ':']), "{preload}");
    assert_eq!(std::fs::canonicalize(&preload).unwrap(), std::fs::canonicalize(inst.join("lib/libmrshim.so")).unwrap());
    let mode = std::fs::metadata(runtime.join("mrshim")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
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
