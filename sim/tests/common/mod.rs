//! Shared plumbing for the simulator's tests: the built libibverbs.so.1, C test programs
//! compiled on demand, a private runtime directory per test, free TCP ports.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

/// target/<profile>, from the running test binary (target/<profile>/deps/<test>-<hash>).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A directory holding libibverbs.so.1 and libibverbs.so, both pointing at the simulator.
pub fn lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let t = target_dir();
        let so = [t.join("libibverbs.so"), t.join("deps/libibverbs.so")]
            .into_iter()
            .find(|p| p.exists())
            .expect("libibverbs.so not built: run `cargo build -p mrshim-sim` (scripts/test does)");
        let d = t.join("sim-lib");
        std::fs::create_dir_all(&d).unwrap();
        for name in ["libibverbs.so.1", "libibverbs.so"] {
            let l = d.join(name);
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink(&so, &l).unwrap();
        }
        d
    })
}

/// Compiles sim/tests/c/<name>.c once per test process (tests run in parallel threads).
pub fn c_program(name: &str, libs: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let out = target_dir().join("sim-c").join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let st = Command::new("cc").args(["-O1", "-Wall", "-o"]).arg(&out).arg(&src).args(libs).status().expect("cc");
    assert!(st.success(), "compiling {}", src.display());
    built.push((name.into(), out.clone()));
    out
}

/// A test's private world: its own runtime directory for the simulated fabric.
pub struct Sim {
    pub rundir: tempfile::TempDir,
    pub env: Vec<(String, String)>,
}

impl Sim {
    pub fn new() -> Sim {
        Sim { rundir: tempfile::tempdir().unwrap(), env: Vec::new() }
    }

    pub fn with(mut self, k: &str, v: &str) -> Sim {
        self.env.push((k.into(), v.into()));
        self
    }

    /// `prog` under `timeout`, so a wedged peer fails the test instead of hanging it.
    pub fn cmd(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("timeout");
        c.args(["-k", "5", "120"]).arg(prog);
        c.env("LD_LIBRARY_PATH", lib_dir()).env("MRSHIM_SIM_RUNDIR", self.rundir.path());
        for k in [
            "MRSHIM_SIM_DEVICES",
            "MRSHIM_SIM_FAULTS",
            "MRSHIM_SIM_MEMLOCK",
            "MRSHIM_SIM_DMABUF",
            "MRSHIM_SIM_PEER_MEMORY",
            "MRSHIM_SIM_DEVICE_MEM_ERRNO",
            "MRSHIM_SIM_LOG",
            "LD_PRELOAD",
        ] {
            c.env_remove(k);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    pub fn run(&self, prog: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        let out = self.cmd(prog).args(args).output().expect("spawn");
        out
    }

    pub fn spawn(&self, prog: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Child {
        self.cmd(prog).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs a perftest/pingpong style server+client pair on `port`; returns (server, client) output.
pub fn server_client(sim: &Sim, prog: &str, server_args: &[&str], client_args: &[&str], port: u16) -> (Output, Output) {
    let p = port.to_string();
    let mut sargs: Vec<&str> = server_args.to_vec();
    sargs.extend(["-p", &p]);
    let server = sim.spawn(prog, &sargs);
    let mut cargs: Vec<&str> = client_args.to_vec();
    cargs.extend(["-p", &p, "127.0.0.1"]);
    // The server needs a moment to listen; clients of these tools do not retry for long.
    let mut client = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let out = sim.run(prog, &cargs);
        let err = text(&out.stderr);
        if out.status.success()
            || !(err.contains("Couldn't connect")
                || err.contains("Unable to open file descriptor for socket connection"))
        {
            client = Some(out);
            break;
        }
    }
    let client = client.expect("client never connected");
    let server = server.wait_with_output().unwrap();
    (server, client)
}
