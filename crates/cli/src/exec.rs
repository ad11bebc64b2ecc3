//! `mrshim exec [--log DEST] [--level L] [--retry P] [--inject R] -- CMD ARGS...`: run CMD with
//! libmrshim.so preloaded.
//!
//! Finds libmrshim.so next to this executable (or ../lib/, ../lib/mrshim/, or --lib /
//! MRSHIM_LIB), checks before launch what would otherwise fail in every rank — every MRSHIM_*
//! value (the shim's own parser) and that the library loads here — then prepends it to
//! LD_PRELOAD, sets the MRSHIM_* variables of the flags, and exec(2)s CMD: same pid, same
//! environment otherwise, so it composes with `mpirun -np N mrshim exec -- CMD`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const ENV_HELP: &str = "\
Environment read by libmrshim.so (also when preloaded without `mrshim exec`):
  MRSHIM_LOG      where records go (one JSON line per call, docs/record-schema.md):
                    off (default when unset) | stderr | a file path | a directory
                    (one file per process: mrshim-<host>-r<rank>-p<pid>.jsonl; a trailing /
                    creates it). Placeholders: %h host, %p pid, %r rank, %j job id, %% percent.
                    Missing parent directories are created (mode 0750). Files are opened
                    O_APPEND|O_NOFOLLOW, created with mode 0640.
  MRSHIM_LEVEL    all (default): every call is a record | failures: failed calls and probes only
  MRSHIM_DEBUG    WARN (default): NCCL-style WARN line on stderr per failed call, and a summary
                  line at exit only where something failed, was rescued or lost | INFO: also
                  the summary of every process that made calls (as NCCL_DEBUG=INFO)
  MRSHIM_WARN     on (default) | off: the WARN lines (older switch, kept)
  MRSHIM_SUMMARY  on: every summary (= INFO's) | off: none (older switch, kept)
  MRSHIM_RETRY    off (default) | auto | drop-relaxed-ordering,raise-memlock,realign-iova,dmabuf-to-va,
                  va-to-dmabuf,bounce [;max_attempts=N;sticky=on|off;calls=...;errnos=...;on.EINVAL=...]
                  rescue failed registrations another way (docs/retry.md, docs/bounce.md)
  MRSHIM_BOUNCE_REMOTE  refuse (default) | announced: may bounce regions peers RDMA-WRITE/READ;
                  announced = every such access is announced by a completion the process polls
                  or a message it posts (NCCL, MPI): the bounce contract (docs/bounce.md)
  MRSHIM_INJECT   CALL:ERRNO[:COND,...];...  make up failures to rehearse, e.g.
                  ibv_reg_mr_iova2:EINVAL:relaxed (docs/retry.md)
  MRSHIM_DEBUG_PANIC  init | hook | call | record | exit | bounce: the shim panics there on purpose, to show that
                  no panic reaches the program (one stderr line, an `error` record, the call
                  passed through). Unset in production.
A bad value prints one line naming the variable, the value and what is accepted; the shim then
passes every call through unrecorded (`mrshim exec` refuses to start instead). Rank:
OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID, RANK, MV2_COMM_WORLD_RANK,
FLUX_TASK_RANK, PALS_RANKID (first one set); local rank: OMPI_COMM_WORLD_LOCAL_RANK,
MPI_LOCALRANKID, SLURM_LOCALID, LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, FLUX_TASK_LOCAL_ID,
PALS_LOCAL_RANKID. The config record also carries the job id, world size, launcher and the
NCCL_*/MCCL_*/RCCL_*/UCX_*/FI_*/CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES settings.

`mrshim exec` without --log and without MRSHIM_LOG logs into ./mrshim-logs/ (created at the first
record). Under MPI: `mpirun -np N mrshim exec --log DIR/ -- CMD` or
`mpirun -x LD_PRELOAD=/path/libmrshim.so -x MRSHIM_LOG=DIR/ CMD`.";

#[derive(clap::Args)]
#[command(after_long_help = ENV_HELP)]
pub struct Args {
    /// Sets MRSHIM_LOG, with the same meaning: a file path (pattern with %h/%p/%r/%j), a directory
    /// (existing, or ending in /: one file per process), off or stderr. Default: $MRSHIM_LOG if
    /// set, else ./mrshim-logs/
    #[arg(long, value_name = "DEST")]
    pub log: Option<String>,
    /// `all` (every call) or `failures`; sets MRSHIM_LEVEL
    #[arg(long, value_name = "LEVEL")]
    pub level: Option<String>,
    /// Retry policy, e.g. `auto` or `drop-relaxed-ordering,bounce`; sets MRSHIM_RETRY
    #[arg(long, value_name = "POLICY")]
    pub retry: Option<String>,
    /// Failures to make up, e.g. `ibv_reg_mr_iova2:EINVAL:relaxed`; sets MRSHIM_INJECT
    #[arg(long, value_name = "RULES")]
    pub inject: Option<String>,
    /// `WARN` (default) or `INFO`; sets MRSHIM_DEBUG
    #[arg(long, value_name = "LEVEL")]
    pub debug: Option<String>,
    /// libmrshim.so to preload (default: next to this executable, or ../lib/, ../lib/mrshim/)
    #[arg(long, env = "MRSHIM_LIB", value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// The command and its arguments (after `--`)
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

fn find_lib(explicit: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if p.is_file() { Ok(absolute(&p)) } else { Err(format!("{} does not exist", p.display())) };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates =
        [dir.join("libmrshim.so"), dir.join("../lib/libmrshim.so"), dir.join("../lib/mrshim/libmrshim.so")];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(format!("libmrshim.so not found (looked in {}); pass --lib PATH or set MRSHIM_LIB", looked.join(", ")))
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

/// The MRSHIM_LOG value for `--log`: what MRSHIM_LOG would mean, made absolute (a trailing `/`
/// kept) so that it does not depend on where CMD changes directory. Nothing is created here: the
/// shim creates directories at its first record, so a job that records nothing leaves nothing.
fn log_value(v: &str) -> String {
    if matches!(v, "off" | "OFF" | "none" | "stderr" | "STDERR" | "-") || v.is_empty() {
        return v.to_string();
    }
    let abs = absolute(Path::new(v)).display().to_string();
    if v.ends_with('/') && !abs.ends_with('/') {
        abs + "/"
    } else {
        abs
    }
}

/// The MRSHIM_* variables the flags set for CMD.
fn flag_vars(a: &Args) -> BTreeMap<&'static str, String> {
    let mut vars = BTreeMap::new();
    match (&a.log, std::env::var_os("MRSHIM_LOG")) {
        (Some(v), _) => {
            vars.insert("MRSHIM_LOG", log_value(v));
        }
        (None, None) => {
            vars.insert("MRSHIM_LOG", log_value("mrshim-logs/"));
        }
        (None, Some(_)) => {}
    }
    for (var, flag) in [
        ("MRSHIM_LEVEL", &a.level),
        ("MRSHIM_RETRY", &a.retry),
        ("MRSHIM_INJECT", &a.inject),
        ("MRSHIM_DEBUG", &a.debug),
    ] {
        if let Some(v) = flag {
            vars.insert(var, v.clone());
        }
    }
    vars
}

/// Every MRSHIM_* value CMD would see, through the shim's own parser: one line naming the first
/// bad variable (and any others), or Ok.
fn validate(vars: &BTreeMap<&'static str, String>) -> Result<(), String> {
    let get = |k: &str| vars.get(k).cloned().or_else(|| std::env::var(k).ok());
    let errs = mrshim_core::config::parse(get).err().unwrap_or_default();
    let Some(first) = errs.first() else { return Ok(()) };
    let others: Vec<&str> = errs[1..].iter().map(|e| e.var).collect();
    let also = if others.is_empty() { String::new() } else { format!(" (also bad: {})", others.join(", ")) };
    Err(format!("{}{also}; not started", first.problem()))
}

/// Loads the library into this process (which exec(2)s next) as the loader would preload it:
/// one built for another architecture or needing a newer glibc fails here with the loader's
/// message. Its constructor only resolves glibc's dlsym and registers a fork handler.
fn check_loads(lib: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(lib.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", lib.display()))?;
    // SAFETY: a NUL-terminated path; RTLD_LOCAL keeps its exports out of this process's scope.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if !h.is_null() {
        return Ok(());
    }
    // SAFETY: dlerror returns null or a C string valid until the next dl* call on this thread.
    let e = unsafe { libc::dlerror() };
    let why = if e.is_null() {
        "the loader refused it".to_string()
    } else {
        // SAFETY: as above, non-null.
        unsafe { std::ffi::CStr::from_ptr(e) }.to_string_lossy().into_owned()
    };
    Err(format!("{} does not load on this system: {why}; not started", lib.display()))
}

pub fn run(a: Args) -> ExitCode {
    let refuse = |e: String| {
        eprintln!("mrshim exec: {e}");
        ExitCode::from(2)
    };
    let lib = match find_lib(a.lib.clone()) {
        Ok(l) => l,
        Err(e) => return refuse(e),
    };
    let vars = flag_vars(&a);
    if let Err(e) = validate(&vars).and_then(|()| check_loads(&lib)) {
        return refuse(e);
    }
    let mut cmd = std::process::Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..]).envs(&vars);
    let lib_s = lib.display().to_string();
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if old.split([' ', ':']).any(|p| p == lib_s) => old,
        Ok(old) if !old.trim().is_empty() => format!("{lib_s}:{old}"),
        _ => lib_s,
    };
    cmd.env("LD_PRELOAD", preload);
    let err = cmd.exec();
    eprintln!("mrshim exec: cannot run {}: {err}", a.cmd[0].to_string_lossy());
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
}
