//! Helpers shared by the tests/shim_*.rs integration tests: artifact paths, C programs compiled
//! at test time, running processes, reading records.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// target/<profile>, found from the mrshim binary cargo built for this test.
pub fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mrshim")).parent().unwrap().to_path_buf()
}

pub fn mrshim_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mrshim"))
}

pub fn shim_lib() -> PathBuf {
    let p = target_dir().join("libmrshim.so");
    assert!(p.exists(), "{} not built", p.display());
    p
}

pub fn src_c(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(name)
}

/// A fresh directory for one test.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrshim-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc");
    assert!(out.status.success(), "cc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The fake versioned libibverbs and the C programs, built once per test binary.
pub struct Fake {
    pub dir: PathBuf,
}

impl Fake {
    pub fn lib_dir(&self) -> &Path {
        &self.dir
    }
    pub fn prog(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

pub fn fake() -> &'static Fake {
    static F: OnceLock<Fake> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mrshim-it-{}-fake", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        let lib = format!("{d}/libibverbs.so.1");
        let map = format!("-Wl,--version-script={}", src_c("fakeverbs.map").display());
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            &lib,
            "-Wl,-soname,libibverbs.so.1",
            &map,
            src_c("fakeverbs.c").to_str().unwrap(),
        ]);
        std::os::unix::fs::symlink("libibverbs.so.1", format!("{d}/libibverbs.so")).unwrap();
        let rpath = format!("-Wl,-rpath,{d}");
        let ldir = format!("-L{d}");
        cc(&[
            "-O1",
            "-o",
            &format!("{d}/fake_linked"),
            src_c("fake_linked.c").to_str().unwrap(),
            &ldir,
            "-libverbs",
            &rpath,
            "-lpthread",
        ]);
        cc(&["-O1", "-o", &format!("{d}/hostile"), src_c("hostile.c").to_str().unwrap(), &ldir, "-libverbs", &rpath]);
        cc(&["-O1", "-o", &format!("{d}/nccl_style"), src_c("nccl_style.c").to_str().unwrap(), "-ldl"]);
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &format!("{d}/libother.so"),
            src_c("other_preload.c").to_str().unwrap(),
            "-ldl",
        ]);
        cc(&["-shared", "-fPIC", "-o", &format!("{d}/libregpre.so"), src_c("reg_preload.c").to_str().unwrap(), "-ldl"]);
        let plugin = src_c("local_plugin.c");
        cc(&[
            "-shared",
            "-fPIC",
            "-DPLUGIN",
            "-o",
            &format!("{d}/liblocal_plugin.so"),
            plugin.to_str().unwrap(),
            &ldir,
            "-libverbs",
            &rpath,
            "-ldl",
        ]);
        cc(&["-O1", "-o", &format!("{d}/local_plugin"), plugin.to_str().unwrap(), "-ldl"]);
        Fake { dir }
    })
}

/// A command with a clean MRSHIM_* environment.
pub fn cmd(prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(prog);
    for (k, _) in std::env::vars() {
        if k.starts_with("MRSHIM_")
            || k.starts_with("FAKE_")
            || k == "LD_PRELOAD"
            || k.ends_with("_RANK")
            || k == "RANK"
        {
            c.env_remove(k);
        }
    }
    c
}

/// `cmd` on the fake library with the shim preloaded.
pub fn fake_cmd(prog: &str) -> Command {
    let f = fake();
    let mut c = cmd(f.prog(prog));
    c.env("LD_LIBRARY_PATH", f.lib_dir()).env("LD_PRELOAD", shim_lib());
    c
}

pub fn run(c: &mut Command) -> Output {
    c.output().expect("spawn")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every line of a log, parsed (panics on a line that is not a record).
pub fn records(p: &Path) -> Vec<mrshim_record::Reg> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(text.ends_with('\n'), "log ends with a complete line");
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|r| r.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    v.sort();
    v
}

pub fn only_file(dir: &Path) -> PathBuf {
    let v = files(dir);
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

pub fn host() -> String {
    let mut b = [0u8; 256];
    // SAFETY: b is writable for its length minus the terminating NUL we keep.
    assert_eq!(unsafe { libc::gethostname(b.as_mut_ptr().cast(), 255) }, 0);
    let end = b.iter().position(|&c| c == 0).unwrap();
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A directory with libibverbs.so.1 / libibverbs.so pointing at the simulator cdylib.
pub fn sim_lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let t = target_dir();
        let so = [t.join("deps/libibverbs.so"), t.join("libibverbs.so")]
            .into_iter()
            .find(|p| p.exists())
            .expect("the simulator's libibverbs.so is not built (it is a dev-dependency; `cargo test` builds it)");
        let d = std::env::temp_dir().join(format!("mrshim-it-{}-simlib", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for name in ["libibverbs.so.1", "libibverbs.so"] {
            std::os::unix::fs::symlink(&so, d.join(name)).unwrap();
        }
        d
    })
}

/// A simulated fabric private to one test (its own MRSHIM_SIM_RUNDIR).
pub struct SimWorld {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
}

impl SimWorld {
    pub fn new(name: &str) -> SimWorld {
        let dir = tmp(name);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        SimWorld { dir, env: vec![] }
    }
    pub fn with(mut self, k: &str, v: impl Into<String>) -> SimWorld {
        self.env.push((k.into(), v.into()));
        self
    }
    /// `prog` under timeout, on the simulator, with the shim preloaded.
    pub fn cmd(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = cmd("timeout");
        c.args(["-k", "5", "120"]).arg(prog);
        c.env("LD_LIBRARY_PATH", sim_lib_dir())
            .env("MRSHIM_SIM_RUNDIR", self.dir.join("run"))
            .env("LD_PRELOAD", shim_lib());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Server + client of a perftest-style tool (`-p PORT`, client gets the server address last).
/// `per_side` lets each side have its own env (e.g. its own simulator log).
pub fn server_client(
    w: &SimWorld,
    prog: &str,
    args: &[&str],
    server_env: &[(&str, String)],
    client_env: &[(&str, String)],
) -> (Output, Output) {
    let port = free_port().to_string();
    let mut s = w.cmd(prog);
    s.args(args).args(["-p", &port]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    for (k, v) in server_env {
        s.env(k, v);
    }
    let server = s.spawn().unwrap();
    let mut client = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut c = w.cmd(prog);
        c.args(args).args(["-p", &port, "127.0.0.1"]);
        for (k, v) in client_env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        let err = stderr(&o);
        if o.status.success()
            || !(err.contains("Couldn't connect")
                || err.contains("Unable to open file descriptor for socket connection"))
        {
            client = Some(o);
            break;
        }
    }
    let client = client.expect("client never connected");
    (server.wait_with_output().unwrap(), client)
}

/// The simulator's own log (MRSHIM_SIM_LOG): what the device really received.
pub fn sim_log(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
