//! Shared plumbing for the simulated GPU's tests: a library directory with libcuda.so.1 (and
//! the simulated libibverbs.so.1) for LD_LIBRARY_PATH, C programs compiled on demand. Same
//! approach as sim/tests/common: everything is found from the test executable's path.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use mrshim_test_support::{sim_gpu_lib_dir as lib_dir, target_dir, text};

/// Compiles sim/cuda/tests/c/<name>.c once per test process.
pub fn c_program(name: &str, libs: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let mut libs = libs.to_vec();
    libs.push("-ldl");
    mrshim_test_support::c_program(&src, "sim-cuda-c", &libs)
}

/// Runs `prog args` against the simulated libraries with `env` and nothing else of ours.
pub fn run(prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let rundir = tempfile::tempdir().unwrap();
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "120"]).arg(prog).args(args);
    c.env("LD_LIBRARY_PATH", lib_dir());
    for (k, _) in std::env::vars() {
        if k.starts_with("MRSHIM_") || k == "LD_PRELOAD" {
            c.env_remove(k);
        }
    }
    c.env("MRSHIM_SIM_RUNDIR", rundir.path());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn")
}

/// Runs a self-checking program ("ok X"/"FAIL X" lines, exit status = failures) and returns
/// its stdout after asserting it passed.
pub fn checks(prog: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = run(prog, args, env);
    let so = text(&out.stdout);
    assert!(
        out.status.success() && !so.contains("FAIL"),
        "{args:?} {env:?} failed ({:?})\nstdout:\n{so}\nstderr:\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(so.lines().filter(|l| l.starts_with("ok ")).count() > 0, "no checks ran: {so}");
    so
}

/// The value of an "info KEY=VALUE" line.
pub fn info<'a>(out: &'a str, key: &str) -> &'a str {
    let p = format!("info {key}=");
    out.lines().find_map(|l| l.strip_prefix(&p)).unwrap_or_else(|| panic!("no {key} in\n{out}"))
}
