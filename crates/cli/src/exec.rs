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
  MRSHIM_BOUNCE_ON_VIOLATION  warn (default) | abort: a bounce region used outside its contract
                  is a WARN line, a violation record and a count in the summary; abort also
                  stops the process at the first one (docs/bounce.md)
  MRSHIM_BOUNCE_WATCH  10s (default) | a time (500ms, 60s) | off: how long a process with bounce
                  regions peers reach may neither post nor poll while a peer's write sits
                  undelivered, or bytes it wrote are missing from what peers READ, before a
                  violation is reported at run time (docs/bounce.md, Run-time detection)
  MRSHIM_INJECT   CALL:ERRNO[:COND,...];...  make up failures to rehearse, e.g.
                  ibv_reg_mr_iova2:EINVAL:relaxed (docs/retry.md)
  MRSHIM_DEBUG_PANIC  init | hook | call | record | exit | bounce: the shim panics there on purpose, to show that
                  no panic reaches the program (one stderr line, an `error` record, the call
                  passed through). Unset in production.
  MRSHIM_BOUNCE_TRACK  on (default) | off: the bounce layer tracks application writes through
                  the kernel; off: every fold compares whole regions (docs/bounce.md)
  MRSHIM_COPY_SELFTEST auto (default) | on | off: on proves every GPU copy engine (CUDA, HIP)
                  with a round trip before first use; MACA's is always proven (off = auto)
Switches accept on/off, 1/0, true/false, yes/no in any case; empty counts as bad.
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
#[command(after_help = "Environment variables of libmrshim.so: `mrshim exec --help`.", after_long_help = ENV_HELP)]
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

/// Checks before anything maps `lib`: a whole libmrshim.so for this machine (elf_check.rs: a
/// truncated copy would kill the loader with SIGBUS, another library must not be preloaded).
fn check_file(lib: &Path) -> Result<(), String> {
    let bytes = std::fs::read(lib).map_err(|e| format!("{}: {e}; not started", lib.display()))?;
    crate::elf_check::check(&bytes, "libmrshim.so")
        .map_err(|why| format!("{} is not a usable libmrshim.so: {why}; not started", lib.display()))
}

/// Loads the library as the loader would preload it, in a child (a damaged file that slipped
/// through [`check_file`] kills the child, not `mrshim exec`): one built against a newer glibc,
/// or needing a library this node lacks, fails here with the loader's message. Its
/// constructor only resolves glibc's dlsym and registers a fork handler.
fn check_loads(lib: &Path) -> Result<(), String> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(lib.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte; not started", lib.display()))?;
    let mut fds = [0; 2];
    // SAFETY: fds is a writable array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}; not started", std::io::Error::last_os_error()));
    }
    // SAFETY: `mrshim exec` is single-threaded here; the child only calls dlopen, dlerror,
    // write and _exit before it ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a NUL-terminated path; RTLD_LOCAL keeps its exports out of this child's scope.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        let code = if h.is_null() {
            // SAFETY: dlerror returns null or a C string valid until the next dl* call.
            let e = unsafe { libc::dlerror() };
            if !e.is_null() {
                // SAFETY: e is a NUL-terminated string; fds[1] is the pipe's write end.
                unsafe { libc::write(fds[1], e.cast(), libc::strlen(e)) };
            }
            1
        } else {
            0
        };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: fds[1] is ours and no longer needed here; fds[0] is owned by the File below.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is an open descriptor nothing else owns.
    let mut reader = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    if pid < 0 {
        return Err(format!("fork: {}; not started", std::io::Error::last_os_error()));
    }
    let mut msg = String::new();
    let _ = reader.read_to_string(&mut msg);
    let mut status = 0;
    // SAFETY: waits for the child forked above; status is writable.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
    let shown = lib.display();
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        return Err(format!(
            "{shown} killed the loader with signal {sig} ({}): a damaged or partial copy?; not started",
            signal_name(sig)
        ));
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        _ if msg.is_empty() => Err(format!("{shown} does not load on this system: the loader refused it; not started")),
        _ => Err(format!("{shown} does not load on this system: {}; not started", msg.trim_end())),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGBUS => "SIGBUS",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

/// The dynamic loader splits LD_PRELOAD at spaces and colons (glibc's `rtld.c`); tabs and
/// newlines are refused too, to be safe with any shell or launcher that passes it on.
fn preloadable(p: &str) -> bool {
    !p.is_empty() && !p.contains([' ', ':', '\t', '\n'])
}

/// A name for `lib` that LD_PRELOAD can carry: its own path when the loader can take it, else a
/// symbolic link to it in a private directory (`$XDG_RUNTIME_DIR/mrshim` or `/tmp/mrshim-<uid>`,
/// mode 0700, owned by this user and checked so) named after the library's path, size and
/// modification time. The link stays (processes of the job load it later, e.g. MPI's daemons
/// and every exec'd child); it is one small link per installed copy.
fn preload_path(lib: &Path) -> Result<String, String> {
    let shown = lib.display().to_string();
    if preloadable(&shown) && lib.to_str().is_some() {
        return Ok(shown);
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let candidates = std::env::var("XDG_RUNTIME_DIR")
        .ok()
        .filter(|d| d.starts_with('/') && preloadable(d))
        .map(|d| PathBuf::from(d).join("mrshim"))
        .into_iter()
        .chain([PathBuf::from(format!("/tmp/mrshim-{uid}"))]);
    let mut why = Vec::new();
    for dir in candidates {
        match private_link(&dir, lib, uid) {
            Ok(link) => return Ok(link),
            Err(e) => why.push(e),
        }
    }
    Err(format!(
        "the dynamic loader cannot preload {shown:?} (LD_PRELOAD splits paths at spaces and colons) and no private link could be made ({}); install mrshim under a path without spaces or colons, or pass --lib; not started",
        why.join("; ")
    ))
}

fn private_link(dir: &Path, lib: &Path, uid: libc::uid_t) -> Result<String, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let shown = dir.display();
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| format!("{shown}: {e}"))?;
    if !md.is_dir() || md.uid() != uid || md.permissions().mode() & 0o022 != 0 {
        return Err(format!("{shown} is not a directory of uid {uid} that only it can write"));
    }
    let st = std::fs::metadata(lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&(lib, st.len(), st.mtime(), st.mtime_nsec(), st.ino()), &mut h);
    let link = dir.join(format!("libmrshim-{:016x}.so", std::hash::Hasher::finish(&h)));
    if std::fs::read_link(&link).ok().as_deref() != Some(lib) {
        let tmp = dir.join(format!(".libmrshim.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(lib, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    let s = link.display().to_string();
    if preloadable(&s) {
        Ok(s)
    } else {
        Err(format!("{shown} itself has a space or colon"))
    }
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
    let lib_s = match validate(&vars)
        .and_then(|()| check_file(&lib))
        .and_then(|()| check_loads(&lib))
        .and_then(|()| preload_path(&lib))
    {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    let mut cmd = std::process::Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..]).envs(&vars);
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
