//! Shared plumbing for the simulated GPU's tests: a library directory with libcuda.so.1 (and
//! the simulated libibverbs.so.1) for LD_LIBRARY_PATH, C programs compiled on demand. Same
//! approach as sim/tests/common: everything is found from the test executable's path.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// target/<profile>, from the running test binary (target/<profile>/deps/<test>-<hash>).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn built(t: &Path, file: &str) -> PathBuf {
    [t.join(file), t.join("deps").join(file)].into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("{file} not built in {}: run `cargo build -p mrshim-sim-cuda -p mrshim-sim`", t.display())
    })
}

/// A directory holding libcuda.so.1 → the simulated GPU and libibverbs.so.1 → the simulated NIC.
pub fn lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let t = target_dir();
        let d = t.join("sim-cuda-lib");
        std::fs::create_dir_all(&d).unwrap();
        for (link, file) in [
            ("libcuda.so.1", "libcuda.so"),
            ("libcuda.so", "libcuda.so"),
            ("libibverbs.so.1", "libibverbs.so"),
            ("libibverbs.so", "libibverbs.so"),
        ] {
            let l = d.join(link);
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink(built(&t, file), &l).unwrap();
        }
        d
    })
}

/// Compiles sim/cuda/tests/c/<name>.c once per test process.
pub fn c_program(name: &str, libs: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut done = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = done.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let out = target_dir().join("sim-cuda-c").join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .args(libs)
        .arg("-ldl")
        .status()
        .expect("cc");
    assert!(st.success(), "compiling {}", src.display());
    done.push((name.into(), out.clone()));
    out
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

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
