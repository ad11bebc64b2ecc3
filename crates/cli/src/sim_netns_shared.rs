//! One network namespace per user and run directory, shared by every `mrshim sim` that meets
//! there: the simulated RoCE ports' interfaces (sim_netns.rs) exist once, and a server and its
//! client started as two `mrshim sim` processes of one job reach each other over loopback TCP
//! (MPI's, UCX's and perftest's out-of-band exchange) as they would on one host.
//!
//! The namespace is held by a small daemon (`mrshim-sim-net`, started by the first `mrshim sim`
//! that needs it): it makes the namespace (and, when not root, the user namespace that owns it,
//! mapping the caller's own uid/gid), creates the interfaces, and exits once no other process
//! has been in the namespace for two seconds. `RUNDIR/netns-<key>.pid` names it ("PID INODE",
//! the inode guarding against a reused pid); `RUNDIR/netns-<key>.lock` (flock) orders joining
//! and exiting, so a process joins a live holder or starts a new one, never a dying one. The key
//! is a hash of the interfaces, so `mrshim sim`s with different devices get different
//! namespaces.

use crate::sim_netns::Netdev;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How long the holder stays after the last member left, in one-second checks.
const IDLE_CHECKS: u32 = 2;

fn err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn key(devs: &[&Netdev]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for d in devs {
        (&d.name, d.mac, d.ipv4).hash(&mut h);
    }
    h.finish()
}

/// The network namespace inode of `pid` (`net:[INODE]`), if this process may see it.
fn net_inode(pid: &str) -> Option<u64> {
    let l = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let s = l.to_str()?;
    s.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// Opens and write-locks `path` (created 0600). The lock goes with the descriptor.
fn lock(path: &Path) -> Result<OwnedFd, String> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        .map_err(|_| format!("{}: NUL in path", path.display()))?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: open with a NUL-terminated path; the descriptor is owned below.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(err(&path.display().to_string()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(err(&format!("locking {}", path.display())));
    }
    Ok(fd)
}

/// The run directory, made when missing; it must be the caller's and closed to others, since
/// whoever can write there could offer a namespace of their own.
fn own_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let _ = std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700));
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: getters without preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // Group-writable only for the caller's own group (a umask of 002 with user-private groups).
    let open_to_others = m.mode() & 0o002 != 0 || (m.mode() & 0o020 != 0 && m.gid() != gid);
    if !m.is_dir() || m.uid() != uid || open_to_others {
        return Err(format!(
            "{} is not a directory of uid {uid} closed to others (owner {}, mode {:o}): no shared namespace there",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Joins the shared namespace of `devs` under `rundir`, starting its holder when there is none.
/// On return this process is in that network namespace (and, when not root, in the user
/// namespace that owns it, with the caller's own uid/gid); the caller then makes its private
/// mount namespace inside.
pub fn join(rundir: &Path, devs: &[&Netdev]) -> Result<(), String> {
    own_dir(rundir)?;
    let k = key(devs);
    let lock_path = rundir.join(format!("netns-{k:016x}.lock"));
    let pid_path = rundir.join(format!("netns-{k:016x}.pid"));
    let _lock = lock(&lock_path)?;
    let live = std::fs::read_to_string(&pid_path).ok().and_then(|s| {
        let mut it = s.split_whitespace();
        let (pid, ino) = (it.next()?.to_string(), it.next()?.parse::<u64>().ok()?);
        (net_inode(&pid) == Some(ino)).then_some(pid)
    });
    let pid = match live {
        Some(p) => p,
        None => {
            let pid = spawn_holder(devs, &lock_path, &pid_path)?;
            let ino = net_inode(&pid).ok_or_else(|| format!("the namespace holder {pid} vanished"))?;
            let tmp = rundir.join(format!(".netns-{k:016x}.{}", std::process::id()));
            std::fs::write(&tmp, format!("{pid} {ino}\n"))
                .and_then(|_| std::fs::rename(&tmp, &pid_path))
                .map_err(|e| format!("{}: {e}", pid_path.display()))?;
            pid
        }
    };
    enter(&pid)
    // The lock is released here: this process is a member now, the holder stays.
}

/// setns(2) into `pid`'s user namespace (when not root) and network namespace.
fn enter(pid: &str) -> Result<(), String> {
    let open = |ns: &str| {
        let p = std::ffi::CString::new(format!("/proc/{pid}/ns/{ns}")).unwrap();
        // SAFETY: open with a NUL-terminated path.
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(err(&format!("/proc/{pid}/ns/{ns}")));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    // SAFETY: a getter without preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let user = if root { None } else { Some(open("user")?) };
    let net = open("net")?;
    if let Some(u) = user {
        // SAFETY: setns with a namespace descriptor; this process is single-threaded here.
        if unsafe { libc::setns(u.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
            return Err(err("joining the shared user namespace"));
        }
    }
    // SAFETY: as above.
    if unsafe { libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(err("joining the shared network namespace"));
    }
    Ok(())
}

/// Starts the holder (a daemon: its own session, every inherited descriptor closed, cwd /) and
/// waits until it has made the namespace and the interfaces; returns its pid.
fn spawn_holder(devs: &[&Netdev], lock_path: &Path, pid_path: &Path) -> Result<String, String> {
    let mut p = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(err("pipe"));
    }
    // SAFETY: fresh descriptors nothing else owns.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    // The child only calls what is listed below and ends in _exit.
    // SAFETY: fork in a single-threaded process; the child keeps to the line above.
    match unsafe { libc::fork() } {
        -1 => return Err(err("fork")),
        0 => {
            // SAFETY: setsid/fork/_exit in the child.
            unsafe {
                libc::setsid();
                match libc::fork() {
                    0 => {
                        let code = holder(w.as_raw_fd(), devs, lock_path, pid_path);
                        libc::_exit(code)
                    }
                    _ => libc::_exit(0),
                }
            }
        }
        child => {
            let mut st = 0;
            // SAFETY: waits for the intermediate child, which exits at once.
            unsafe { libc::waitpid(child, &mut st, 0) };
        }
    }
    drop(w);
    let mut msg = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut msg).map_err(|e| format!("holder: {e}"))?;
    match msg.strip_prefix("ok ") {
        Some(pid) => Ok(pid.trim().to_string()),
        None if msg.is_empty() => Err("the namespace holder died while starting".into()),
        None => Err(msg.trim().to_string()),
    }
}

/// The holder process: makes the namespaces and interfaces, reports "ok PID" or the failure on
/// `report`, then waits for the namespace to be empty. Returns its exit code.
fn holder(report: libc::c_int, devs: &[&Netdev], lock_path: &Path, pid_path: &Path) -> i32 {
    // Nothing inherited stays open (a test's output pipes would never see their end).
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    // SAFETY: closing descriptors this process inherited and does not use; /dev/null on 0-2.
    unsafe {
        for fd in fds {
            if fd != report {
                libc::close(fd);
            }
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        if null > 2 {
            libc::close(null);
        }
        libc::chdir(c"/".as_ptr());
        libc::prctl(libc::PR_SET_NAME, c"mrshim-sim-net".as_ptr());
    }
    let say = |s: &str| {
        // SAFETY: writes a buffer of its length to the report pipe.
        unsafe { libc::write(report, s.as_ptr().cast(), s.len()) };
    };
    if let Err(e) = make(devs) {
        say(&e);
        return 1;
    }
    say(&format!("ok {}\n", std::process::id()));
    // SAFETY: closing our end of the report pipe: the starter reads to its end.
    unsafe { libc::close(report) };
    let me = std::process::id().to_string();
    let Some(mine) = net_inode("self") else { return 1 };
    let members = || {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && *p != me)
                    .any(|p| net_inode(&p) == Some(mine))
            })
            .unwrap_or(true)
    };
    let mut idle = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        idle = if members() { 0 } else { idle + 1 };
        if idle >= IDLE_CHECKS {
            // Under the lock: a process about to join holds it until it is a member. Without it
            // (the run directory was removed) nobody can find this namespace any more.
            let Ok(_l) = lock(lock_path) else { return 0 };
            if !members() {
                let _ = std::fs::remove_file(pid_path);
                return 0;
            }
            idle = 0;
        }
    }
}

/// unshare(2) the network namespace (with a user namespace of its own when not root, mapping
/// the caller's own uid/gid) and create the interfaces in it.
fn make(devs: &[&Netdev]) -> Result<(), String> {
    // SAFETY: getters without preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags = libc::CLONE_NEWNET;
    if uid != 0 {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: unshare has no memory preconditions; this process is single-threaded.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(err("unshare"));
    }
    if uid != 0 {
        let w = |f: &str, s: String| std::fs::write(f, s).map_err(|e| format!("{f}: {e}"));
        w("/proc/self/setgroups", "deny".into())?;
        w("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        w("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    crate::sim_netns::create(devs)
}

/// Where the shared namespace's files go: the simulator's run directory (MRSHIM_SIM_RUNDIR,
/// default `$XDG_RUNTIME_DIR` or /tmp, then `mrshim-sim-<uid>`), asked of the simulator itself
/// so that both agree.
pub fn rundir(lib_dir: &Path) -> Result<PathBuf, String> {
    let f = crate::sim_view::sim_symbol(lib_dir, c"mrshim_sim_rundir")?;
    // The symbol returns NULL or a NUL-terminated string as long-lived as the library (never unloaded).
    // SAFETY: the symbol has the documented signature and the lifetime above.
    unsafe {
        let f: unsafe extern "C" fn() -> *const libc::c_char = std::mem::transmute(f);
        let p = f();
        if p.is_null() {
            return Err("the simulator's configuration is invalid (see the line above)".into());
        }
        Ok(PathBuf::from(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()))
    }
}
