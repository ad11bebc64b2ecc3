//! `mrshim sim [--devices SPEC] [--faults RULES] -- CMD ARGS...`: run CMD on the simulated verbs
//! device (and simulated GPU runtimes): a directory of `libibverbs.so.1` / `libcuda.so.1` /
//! `libamdhip64.so.{6,5}` / `libhsa-runtime64.so.1` / `libmcruntime.so` links to the simulator's
//! libraries goes first in LD_LIBRARY_PATH, then CMD is exec(2)ed in a private mount namespace
//! that shows the simulated devices in /sys/class and /dev (sim_view.rs), in a network namespace
//! where the RoCE ports have their interfaces, shared by the `mrshim sim`s of one run directory
//! (sim_netns_shared.rs). An LD_AUDIT module (sim/audit) sends the libibverbs and librdmacm that
//! a program brings itself (a wheel's renamed copies, found through RPATH before LD_LIBRARY_PATH
//! is consulted) to the simulator's.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const ENV_HELP: &str = "\
Environment read by the simulated device (see docs/sim.md):
  MRSHIM_SIM_DEVICES    NAME:LINK[:mtu=N][:state=active|down],...  LINK = roce | ib
                        (default mlx5_0:roce,mlx5_1:roce — ConnectX-7 400G look-alikes)
  MRSHIM_SIM_FAULTS     CALL:ERRNO[:COND,...];...  e.g. reg_mr_iova2:EINVAL:relaxed
  MRSHIM_SIM_MEMLOCK    auto | enforce (apply RLIMIT_MEMLOCK even as root) | off
  MRSHIM_SIM_DMABUF     on | off   (off: ibv_reg_dmabuf_mr fails with EOPNOTSUPP)
  MRSHIM_SIM_PEER_MEMORY on | off  (off: GPU memory through the VA path fails, like a missing
                        nvidia_peermem)
  MRSHIM_SIM_DEVICE_MEM_ERRNO  errno for that failure (default EINVAL, as in the seed)
  MRSHIM_SIM_RUNDIR     where processes meet (default $XDG_RUNTIME_DIR or /tmp, mrshim-sim-UID);
                        the `mrshim sim`s of one run directory share one network namespace
  MRSHIM_SIM_LOG        file: one JSON line per registration the device saw
Simulated GPUs (docs/sim-gpu.md): MRSHIM_SIM_GPUS, MRSHIM_SIM_GPU_MEM; MRSHIM_SIM_MACA_ABI
  assumed | enum | layout  (libmcruntime.so's mcMemoryType values / mcPointerAttribute_t
                        layout differ from what mrshim's MACA engine assumes)";

#[derive(clap::Args)]
#[command(after_long_help = ENV_HELP)]
pub struct Args {
    /// Sets MRSHIM_SIM_DEVICES
    #[arg(long, value_name = "SPEC")]
    pub devices: Option<String>,
    /// Sets MRSHIM_SIM_FAULTS
    #[arg(long, value_name = "RULES")]
    pub faults: Option<String>,
    /// Print the library directory to put in LD_LIBRARY_PATH and exit
    #[arg(long, conflicts_with = "cmd")]
    pub print_lib_dir: bool,
    /// Write the devices' /sys/class entries under DIR (class/infiniband/...) and exit
    #[arg(long, value_name = "DIR", conflicts_with = "cmd")]
    pub write_sysfs: Option<PathBuf>,
    /// Run CMD without the private /sys/class and /dev view (libibverbs users do not need it;
    /// UCX and Open MPI do)
    #[arg(long)]
    pub no_view: bool,
    /// Require the network namespace (below): exit 2 with one line when it cannot be made,
    /// instead of running CMD without the ports' interfaces
    #[arg(long, conflicts_with_all = ["no_view", "no_netns"])]
    pub netns: bool,
    /// Keep the host's network: by default CMD runs in a network namespace shared by the
    /// `mrshim sim`s of this user and run directory (MRSHIM_SIM_RUNDIR), where each simulated
    /// RoCE port has its interface (mrsimN, 192.0.2.(10+N)/24, in /sys/class/net and the
    /// device's device/net/) as UCX >= 1.23 and rdma_cm users need, and lo is up; CMD reaches no
    /// other network there
    #[arg(long)]
    pub no_netns: bool,
    /// Do not redirect the libibverbs and librdmacm a program brings itself (renamed copies in
    /// a Python wheel, found through RPATH) to the simulator's: by default every library name
    /// of theirs, linked or dlopen()ed, loads the simulator's (an LD_AUDIT module)
    #[arg(long)]
    pub no_redirect: bool,
    /// The command and its arguments (after `--`)
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD",
        required_unless_present_any = ["print_lib_dir", "write_sysfs"]
    )]
    pub cmd: Vec<OsString>,
}

/// The simulator's libraries, found next to this executable (target/<profile>/).
fn libraries() -> Result<Vec<(&'static str, PathBuf)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let find = |file: &str| {
        [dir.join(file), dir.join("deps").join(file), dir.join("../lib/mrshim").join(file)]
            .into_iter()
            .find(|p| p.is_file())
    };
    let verbs = find("libibverbs.so").ok_or_else(|| {
        format!(
            "libibverbs.so (the simulator) not found next to {}: build it with `cargo build -p mrshim-sim`",
            exe.display()
        )
    })?;
    let mut libs = vec![("libibverbs.so.1", verbs.clone()), ("libibverbs.so", verbs)];
    // The simulated librdmacm, on the simulated libibverbs.
    if let Some(cm) = find("librdmacm.so") {
        libs.push(("librdmacm.so.1", cm.clone()));
        libs.push(("librdmacm.so", cm));
    }
    // The loader audit module that sends a program's own libibverbs/librdmacm (a wheel's
    // renamed copy found through RPATH) to the ones above (sim/audit).
    if let Some(audit) = find("libmrshim_sim_audit.so") {
        libs.push((AUDIT, audit));
    }
    if let Some(cuda) = find("libcuda.so") {
        libs.push(("libcuda.so.1", cuda.clone()));
        libs.push(("libcuda.so", cuda));
    }
    // The simulated HIP runtimes (ROCm 6 is also the unversioned name), the HSA runtime they
    // load, and MACA's.
    for (link, file) in [
        ("libamdhip64.so.6", "libamdhip64_6.so"),
        ("libamdhip64.so", "libamdhip64_6.so"),
        ("libamdhip64.so.5", "libamdhip64_5.so"),
        ("libhsa-runtime64.so.1", "libhsa_runtime64.so"),
        ("libmcruntime.so", "libmcruntime.so"),
    ] {
        if let Some(p) = find(file) {
            libs.push((link, p));
        }
    }
    Ok(libs)
}

/// The audit module's name in the private directory.
const AUDIT: &str = "libmrshim_sim_audit.so";

/// A private directory of SONAME links (the build produces lib*.so without the .1).
fn lib_dir() -> Result<PathBuf, String> {
    let libs = libraries()?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let base = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("mrshim-sim-lib-{uid}-{:x}", hash(&libs[0].1)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, target) in libs {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)
                .and_then(|_| std::fs::rename(&tmp, &link))
                .map_err(|e| format!("{}: {e}", link.display()))?;
        }
    }
    Ok(dir)
}

/// LD_AUDIT for CMD: the audit module first, then what was set already (the loader splits the
/// list at colons; the private directory's path has none, see [`lib_dir`]).
fn audit_value(dir: &Path) -> Result<OsString, String> {
    let module = dir.join(AUDIT);
    if !module.exists() {
        return Err(format!(
            "{AUDIT} not found next to the simulator (build it with `cargo build -p mrshim-sim-audit`): programs that bring their own libibverbs (Python wheels) will not reach the simulated devices"
        ));
    }
    let mut v = OsString::from(&module);
    match std::env::var_os("LD_AUDIT").filter(|o| !o.is_empty()) {
        Some(old) if !old.to_string_lossy().split(':').any(|p| Path::new(p) == module) => {
            v.push(":");
            v.push(old);
        }
        Some(old) => v = old,
        None => {}
    }
    Ok(v)
}

fn hash(p: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.hash(&mut h);
    h.finish()
}

pub fn run(a: Args) -> ExitCode {
    let dir = match lib_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("mrshim sim: {e}");
            return ExitCode::from(2);
        }
    };
    if a.print_lib_dir {
        println!("{}", dir.display());
        return ExitCode::SUCCESS;
    }
    if let Some(d) = &a.devices {
        // Before the view is written: it shows these devices. (Single-threaded here.)
        std::env::set_var("MRSHIM_SIM_DEVICES", d);
    }
    if let Some(out) = &a.write_sysfs {
        return match crate::sim_view::write_to(&dir, out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mrshim sim: {e}");
                ExitCode::from(2)
            }
        };
    }
    if !a.no_view {
        use crate::sim_view::Net;
        let net = match (a.netns, a.no_netns) {
            (true, _) => Net::Required,
            (false, true) => Net::Host,
            (false, false) => Net::Shared,
        };
        match crate::sim_view::enter(&dir, net) {
            Ok(None) => {}
            Ok(Some(missing)) => eprintln!(
                "mrshim sim: the RoCE ports have no network interface ({missing}): UCX >= 1.23 will not reach \
                 them, rdma_cm users find no address; --no-netns keeps the host's network without this line"
            ),
            Err(e) if a.netns => {
                // Asked for: running without the interfaces would not be what was asked.
                eprintln!("mrshim sim: --netns: {e}");
                return ExitCode::from(2);
            }
            Err(e) => eprintln!(
                "mrshim sim: no /sys/class/infiniband and /dev/infiniband view ({e}); libibverbs programs run, \
                 UCX and Open MPI will not see the devices"
            ),
        }
    }
    let mut path = OsString::from(&dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = std::process::Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..]).env("LD_LIBRARY_PATH", path);
    if !a.no_redirect {
        match audit_value(&dir) {
            Ok(v) => {
                cmd.env("LD_AUDIT", v);
            }
            Err(e) => eprintln!("mrshim sim: {e}"),
        }
    }
    if let Some(f) = a.faults {
        cmd.env("MRSHIM_SIM_FAULTS", f);
    }
    let err = cmd.exec();
    eprintln!("mrshim sim: cannot run {}: {err}", a.cmd[0].to_string_lossy());
    ExitCode::from(127)
}
