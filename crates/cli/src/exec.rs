//! `mrshim exec [--log DIR] [--level LEVEL] -- CMD ARGS...`: run CMD with libmrshim.so preloaded.
//!
//! Finds libmrshim.so next to this executable (or ../lib/, or --lib / MRSHIM_LIB), prepends it to
//! LD_PRELOAD, sets MRSHIM_LOG / MRSHIM_LEVEL, and exec(2)s CMD: same pid, same environment
//! otherwise, so it composes with `mpirun -np N mrshim exec -- CMD` (each rank execs itself).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const ENV_HELP: &str = "\
Environment read by libmrshim.so (also when preloaded without `mrshim exec`):
  MRSHIM_LOG      where records go (one JSON line per call, docs/record-schema.md):
                    off (default when unset) | stderr | a file path | a directory
                    (one file per process: mrshim-<host>-r<rank>-p<pid>.jsonl; a trailing /
                    creates it). Placeholders: %h host, %p pid, %r rank, %% percent.
                    Files are opened O_APPEND|O_NOFOLLOW, created with mode 0640.
  MRSHIM_LEVEL    all (default): every call is a record | failures: failed calls and probes only
  MRSHIM_WARN     on (default) | off: NCCL-style WARN line on stderr per failed call
  MRSHIM_SUMMARY  on (default) | off: one summary line on stderr at exit (processes that made calls)
  MRSHIM_RETRY    off (default) | auto | drop-relaxed-ordering,raise-memlock,realign-iova,dmabuf-to-va,
                  va-to-dmabuf,bounce [;max_attempts=N;sticky=on|off;calls=...;errnos=...;on.EINVAL=...]
                  rescue failed registrations another way (docs/retry.md, docs/bounce.md)
  MRSHIM_INJECT   CALL:ERRNO[:COND,...];...  make up failures to rehearse, e.g.
                  ibv_reg_mr_iova2:EINVAL:relaxed (docs/retry.md)
  MRSHIM_DEBUG_PANIC  init | hook | call | record | exit | bounce: the shim panics there on purpose, to show that
                  no panic reaches the program (one stderr line, an `error` record, the call
                  passed through). Unset in production.
A bad value prints one line naming the variable, the value and what is accepted; the shim then
passes every call through unrecorded. Rank: OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK,
SLURM_PROCID, RANK (first one set); local rank: OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
SLURM_LOCALID, LOCAL_RANK.

`mrshim exec` without --log and without MRSHIM_LOG logs into ./mrshim-logs/.
Under MPI: `mpirun -np N mrshim exec --log DIR -- CMD` or `mpirun -x LD_PRELOAD=/path/libmrshim.so -x MRSHIM_LOG=DIR/ CMD`.";

#[derive(clap::Args)]
#[command(after_long_help = ENV_HELP)]
pub struct Args {
    /// Directory for the records (one file per process), or a file pattern with %h/%p/%r; sets
    /// MRSHIM_LOG. Default: $MRSHIM_LOG if set, else ./mrshim-logs/
    #[arg(long, value_name = "DIR")]
    pub log: Option<String>,
    /// `all` (every call) or `failures`; sets MRSHIM_LEVEL
    #[arg(long, value_name = "LEVEL", value_parser = ["all", "failures"])]
    pub level: Option<String>,
    /// libmrshim.so to preload (default: next to this executable, or ../lib/)
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

/// The MRSHIM_LOG value for `--log`: a plain directory becomes an absolute path with a trailing
/// `/` (created now, so every rank finds it); a pattern (with `%`) or `off`/`stderr` is kept.
fn log_value(v: &str) -> Result<String, String> {
    if matches!(v, "off" | "stderr") {
        return Ok(v.to_string());
    }
    let abs = absolute(Path::new(v)).display().to_string();
    if v.contains('%') {
        return Ok(abs);
    }
    std::fs::create_dir_all(&abs).map_err(|e| format!("cannot create log directory {abs}: {e}"))?;
    Ok(format!("{}/", abs.trim_end_matches('/')))
}

pub fn run(a: Args) -> ExitCode {
    let lib = match find_lib(a.lib) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mrshim exec: {e}");
            return ExitCode::from(2);
        }
    };
    let log = match (&a.log, std::env::var_os("MRSHIM_LOG")) {
        (Some(v), _) => Some(log_value(v)),
        (None, Some(_)) => None,
        (None, None) => Some(log_value("mrshim-logs")),
    };
    let mut cmd = std::process::Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..]);
    match log {
        Some(Ok(v)) => {
            cmd.env("MRSHIM_LOG", v);
        }
        Some(Err(e)) => {
            eprintln!("mrshim exec: {e}");
            return ExitCode::from(2);
        }
        None => {}
    }
    if let Some(l) = &a.level {
        cmd.env("MRSHIM_LEVEL", l);
    }
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
