//! Shared plumbing for the simulator's tests: the built libibverbs.so.1, C test programs
//! compiled on demand, a private runtime directory per test, free TCP ports.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub use mrshim_test_support::{free_port, sim_cm_lib_dir as cm_lib_dir, sim_lib_dir as lib_dir, target_dir, text};

/// Compiles sim/tests/c/<name>.c once per test process.
pub fn c_program(name: &str, libs: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    mrshim_test_support::c_program(&src, "sim-c", libs)
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
            "MRSHIM_SIM_NIC_DELAY_MS",
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

/// Runs a perftest/pingpong style server+client pair on `port`; returns (server, client) output.
pub fn server_client(sim: &Sim, prog: &str, server_args: &[&str], client_args: &[&str], port: u16) -> (Output, Output) {
    let mut server = sim.cmd(prog);
    server.args(server_args);
    mrshim_test_support::server_client(
        server,
        || {
            let mut c = sim.cmd(prog);
            c.args(client_args);
            c
        },
        port,
    )
}
