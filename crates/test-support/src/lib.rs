//! What the test suites and benchmarks of the workspace share: where cargo put the artifacts
//! (the `mrshim` command, libmrshim.so, the simulated libibverbs/libcuda), directories of
//! SONAME links for LD_LIBRARY_PATH, C programs compiled once per test process, and the
//! server/client dance of perftest-style tools.
//!
//! Everything is found from the running executable's path (target/<profile>/deps/<name>-<hash>
//! for tests and benches), so it works for any profile and any package of the workspace.

pub mod stats;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// target/<profile> of the running test or bench binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("the test binary's directory");
    // Tests and benches live in target/<profile>/deps; examples in target/<profile>/examples.
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().unwrap().to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// A file cargo built into target/<profile> (or its deps/ directory, where a dependency's
/// cdylib stays); None when it is not built.
pub fn find_built(file: &str) -> Option<PathBuf> {
    let t = target_dir();
    [t.join(file), t.join("deps").join(file)].into_iter().find(|p| p.exists())
}

/// Like `find_built`, with a panic that says which package to build.
pub fn built(file: &str, package: &str) -> PathBuf {
    find_built(file).unwrap_or_else(|| {
        panic!("{file} is not built in {}: run `cargo build -p {package}` (scripts/test does)", target_dir().display())
    })
}

/// The `mrshim` command (package mrshim-cli; `cargo test --workspace` builds it first because
/// the package has integration tests).
pub fn mrshim_bin() -> PathBuf {
    let p = target_dir().join("mrshim");
    assert!(p.exists(), "{} is not built: run `cargo build -p mrshim-cli` (scripts/test does)", p.display());
    p
}

/// libmrshim.so, the preload (the root package).
pub fn shim_lib() -> PathBuf {
    let p = target_dir().join("libmrshim.so");
    assert!(p.exists(), "{} is not built: run `cargo build -p mrshim` (scripts/test does)", p.display());
    p
}

/// `$TMPDIR/mrshim-it-<pid>-<name>`, emptied and created. Everything named so by this process
/// is removed when it exits (a whole suite leaves about 1 GB otherwise), unless
/// `MRSHIM_TEST_KEEP_TMP=1` keeps them to look at after a failure.
pub fn own_dir(name: &str) -> PathBuf {
    static CLEANUP: OnceLock<()> = OnceLock::new();
    CLEANUP.get_or_init(|| {
        if std::env::var_os("MRSHIM_TEST_KEEP_TMP").is_none_or(|v| v.is_empty() || v == "0") {
            OWNER.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
            // SAFETY: `remove_own_dirs` is an `extern "C" fn()` that never unwinds.
            unsafe { libc::atexit(remove_own_dirs) };
        }
    });
    let d = std::env::temp_dir().join(format!("mrshim-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The process whose directories `remove_own_dirs` removes: a child forked without exec runs
/// the parent's exit handlers too, and must leave the parent's directories alone.
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn remove_own_dirs() {
    let pid = std::process::id();
    if OWNER.load(std::sync::atomic::Ordering::Relaxed) != pid {
        return;
    }
    let prefix = format!("mrshim-it-{pid}-");
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in entries.flatten() {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            // Directories, and the few programs tests build straight into $TMPDIR.
            let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
        }
    }
}

/// A directory of this process's own (tests of one binary run in parallel threads and share
/// it; binaries run one after another) holding `links` → built files.
fn link_dir(name: &str, links: &[(&str, &Path)]) -> PathBuf {
    let d = own_dir(name);
    for (link, target) in links {
        std::os::unix::fs::symlink(target, d.join(link)).unwrap();
    }
    d
}

/// A directory with libibverbs.so.1 and libibverbs.so pointing at the simulator's cdylib.
pub fn sim_lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let verbs = built("libibverbs.so", "mrshim-sim");
        link_dir("simlib", &[("libibverbs.so.1", &verbs), ("libibverbs.so", &verbs)])
    })
}

/// `sim_lib_dir` plus librdmacm.so.1 and librdmacm.so pointing at the simulated librdmacm.
pub fn sim_cm_lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let verbs = built("libibverbs.so", "mrshim-sim");
        let cm = built("librdmacm.so", "mrshim-sim-rdmacm");
        link_dir(
            "simcmlib",
            &[("libibverbs.so.1", &verbs), ("libibverbs.so", &verbs), ("librdmacm.so.1", &cm), ("librdmacm.so", &cm)],
        )
    })
}

/// `sim_lib_dir` plus libcuda.so.1 and libcuda.so pointing at the simulated GPU.
pub fn sim_gpu_lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let verbs = built("libibverbs.so", "mrshim-sim");
        let cuda = built("libcuda.so", "mrshim-sim-cuda");
        link_dir(
            "simgpulib",
            &[("libibverbs.so.1", &verbs), ("libibverbs.so", &verbs), ("libcuda.so.1", &cuda), ("libcuda.so", &cuda)],
        )
    })
}

/// `sim_lib_dir` plus simulated GPU runtime libraries under their SONAMEs, each `(soname, file,
/// package)`, e.g. `[("libamdhip64.so.5", "libamdhip64_5.so", "mrshim-sim-hip5")]` or
/// `[("libmcruntime.so", "libmcruntime.so", "mrshim-sim-maca")]`; one directory per set and process.
pub fn sim_runtime_lib_dir(libs: &[(&str, &str, &str)]) -> &'static Path {
    static DIRS: Mutex<Vec<(String, &'static Path)>> = Mutex::new(Vec::new());
    let key = libs.iter().map(|l| l.0).collect::<Vec<_>>().join("+");
    let mut dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = dirs.iter().find(|(s, _)| *s == key) {
        return d;
    }
    let verbs = built("libibverbs.so", "mrshim-sim");
    let rts: Vec<(&str, PathBuf)> =
        libs.iter().map(|(soname, file, package)| (*soname, built(file, package))).collect();
    let mut links: Vec<(&str, &Path)> = vec![("libibverbs.so.1", &verbs), ("libibverbs.so", &verbs)];
    links.extend(rts.iter().map(|(s, p)| (*s, p.as_path())));
    let d = link_dir(&format!("simlib-{key}"), &links);
    let d: &'static Path = Box::leak(d.into_boxed_path());
    dirs.push((key, d));
    d
}

/// A fresh directory for one test (`own_dir`: removed when the process exits).
pub fn tmp(name: &str) -> PathBuf {
    own_dir(name)
}

/// Runs `cc args`, panicking with its stderr when it fails.
pub fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc");
    assert!(out.status.success(), "cc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Compiles `src` into target/<profile>/<subdir>/ once per test process (tests run in parallel
/// threads): `cc -O1 -Wall -o OUT SRC LIBS...`.
pub fn c_program(src: &Path, subdir: &str, libs: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
    let mut done = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = done.iter().find(|(s, _)| s == src) {
        return p.clone();
    }
    let stem = src.file_stem().unwrap().to_string_lossy();
    let out = target_dir().join(subdir).join(format!("{stem}-{}", std::process::id()));
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mut args = vec!["-O1", "-Wall", "-o", out.to_str().unwrap(), src.to_str().unwrap()];
    args.extend_from_slice(libs);
    cc(&args);
    done.push((src.to_path_buf(), out.clone()));
    out
}

/// Lossy UTF-8 of a process's output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Server + client of a perftest/pingpong-style tool: the server gets `-p PORT`, the client
/// `-p PORT 127.0.0.1`. Clients of these tools give up quickly when nobody listens yet, so the
/// client is started again until it connects. Returns (server, client) output.
pub fn server_client(mut server: Command, mut client: impl FnMut() -> Command, port: u16) -> (Output, Output) {
    let p = port.to_string();
    let server = server
        .args(["-p", &p])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut out = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let o = client().args(["-p", &p, "127.0.0.1"]).output().expect("spawn the client");
        let err = text(&o.stderr);
        if o.status.success()
            || !(err.contains("Couldn't connect")
                || err.contains("Unable to open file descriptor for socket connection"))
        {
            out = Some(o);
            break;
        }
    }
    let client = out.expect("client never connected");
    (server.wait_with_output().unwrap(), client)
}
