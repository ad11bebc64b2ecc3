//! The device as programs see it outside libibverbs: `mrshim sim` runs its command in a private
//! mount namespace (plus a user namespace when not root) where /sys/class is a tmpfs holding
//! the host's /sys/class entries (bind mounts) plus `infiniband/` and `infiniband_verbs/`
//! written by the simulator, and /dev likewise plus `infiniband/uverbsN` and `rdma_cm`
//! character devices. Nothing of the host's /sys or /dev is modified: the mounts exist only in
//! the namespace and vanish with its last process. The command also joins a network namespace
//! shared by the `mrshim sim`s of one user and run directory, in which each RoCE port has its
//! interface (sim_netns.rs, sim_netns_shared.rs), shown in /sys/class/net and linked from
//! `device/net/<ifname>`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// rdma_cm's misc device number (10:58 on most kernels, but dynamic; nothing opens it here).
const RDMA_CM_DEV: (u32, u32) = (10, 58);

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("paths have no NUL")
}

fn check(rc: libc::c_int, what: &str) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", std::io::Error::last_os_error()))
    }
}

fn mount(src: &Path, dst: &Path, fstype: Option<&str>, flags: libc::c_ulong, data: Option<&str>) -> Result<(), String> {
    let (s, d) = (cstr(src), cstr(dst));
    let t = fstype.map(|t| CString::new(t).unwrap());
    let o = data.map(|t| CString::new(t).unwrap());
    // SAFETY: NUL-terminated strings that live across the call; NULL where optional.
    let rc = unsafe {
        libc::mount(
            s.as_ptr(),
            d.as_ptr(),
            t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            flags,
            o.as_ref().map_or(std::ptr::null(), |o| o.as_ptr().cast()),
        )
    };
    check(rc, &format!("mount {} on {}", src.display(), dst.display()))
}

/// Unshares the mount namespace (and the user namespace when not root and not already in the
/// shared one, mapping the caller's own uid/gid so the command runs as itself) and stops mount
/// propagation to the host.
fn private_namespace(in_userns: bool) -> Result<(), String> {
    // SAFETY: getters without preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags = libc::CLONE_NEWNS;
    let new_user = uid != 0 && !in_userns;
    if new_user {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: unshare has no memory preconditions; this process is single-threaded here.
    check(unsafe { libc::unshare(flags) }, "unshare")?;
    if new_user {
        let w = |f: &str, s: String| std::fs::write(f, s).map_err(|e| format!("{f}: {e}"));
        w("/proc/self/setgroups", "deny".into())?;
        w("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        w("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    mount(Path::new("none"), Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None)
}

/// Covers `dir` with a tmpfs that shows what `dir` showed: sub-directories and files are bind
/// mounts of the originals (reached through a descriptor opened before covering), symbolic
/// links are copied.
fn cover(dir: &Path) -> Result<(), String> {
    let entries: Vec<_> = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten().collect();
    // SAFETY: open with a NUL-terminated path; the descriptor stays open for the namespace's life.
    let fd = unsafe { libc::open(cstr(dir).as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("{}: {}", dir.display(), std::io::Error::last_os_error()));
    }
    mount(Path::new("tmpfs"), dir, Some("tmpfs"), libc::MS_NOSUID, Some("mode=755"))?;
    for e in entries {
        let name = e.file_name();
        let src = Path::new("/proc/self/fd").join(fd.to_string()).join(&name);
        let dst = dir.join(&name);
        let Ok(ty) = e.file_type() else { continue };
        // An entry that cannot be reproduced (a racing device removal) is left out, not fatal.
        let _ = if ty.is_symlink() {
            std::fs::read_link(&src)
                .and_then(|t| std::os::unix::fs::symlink(t, &dst))
                .map_err(|e| format!("{}: {e}", dst.display()))
        } else if ty.is_dir() {
            std::fs::create_dir(&dst)
                .map_err(|e| e.to_string())
                .and_then(|_| mount(&src, &dst, None, libc::MS_BIND | libc::MS_REC, None))
        } else {
            std::fs::File::create(&dst)
                .map_err(|e| e.to_string())
                .and_then(|_| mount(&src, &dst, None, libc::MS_BIND, None))
        };
    }
    Ok(())
}

/// A character device node, or where mknod is not allowed (a user namespace) a bind mount of
/// /dev/null: UCX only checks that the node is a character device it may read and write.
fn char_device(path: &Path, (major, minor): (u32, u32)) -> Result<(), String> {
    // SAFETY: mknod with a NUL-terminated path.
    let rc = unsafe { libc::mknod(cstr(path).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(major, minor)) };
    if rc == 0 {
        return Ok(());
    }
    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    mount(Path::new("/dev/null"), path, None, libc::MS_BIND, None)
}

/// A function of the simulator library the command will load (loaded here once, never
/// unloaded), by name.
pub(crate) fn sim_symbol(lib_dir: &Path, name: &std::ffi::CStr) -> Result<*mut libc::c_void, String> {
    let lib = cstr(&lib_dir.join("libibverbs.so.1"));
    // SAFETY: dlopen/dlsym with NUL-terminated names.
    unsafe {
        let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return Err(format!("cannot load {}", lib_dir.join("libibverbs.so.1").display()));
        }
        let f = libc::dlsym(h, name.as_ptr());
        if f.is_null() {
            return Err(format!("the simulator library has no {}", name.to_string_lossy()));
        }
        Ok(f)
    }
}

/// Asks the simulator (the library the command will load) to write its /sys/class entries.
fn write_sysfs(lib_dir: &Path, root: &Path) -> Result<(), String> {
    let f = sim_symbol(lib_dir, c"mrshim_sim_write_sysfs")?;
    // SAFETY: the symbol has the documented signature; root is NUL-terminated.
    unsafe {
        let f: unsafe extern "C" fn(*const libc::c_char) -> libc::c_int = std::mem::transmute(f);
        check(f(cstr(root).as_ptr()), &format!("writing the simulated devices under {}", root.display()))
    }
}

/// Writes the view under `dir` (`mrshim sim --write-sysfs DIR`).
pub fn write_to(lib_dir: &Path, dir: &Path) -> Result<(), String> {
    write_sysfs(lib_dir, dir)
}

/// The network side of the view.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Net {
    /// The host's network; the RoCE ports have no interface (`--no-netns`).
    Host,
    /// The shared namespace with the ports' interfaces where the machine allows it, else the
    /// host's network and one line saying what is missing (the default).
    Shared,
    /// The shared namespace or an error (`--netns`).
    Required,
}

/// Enters the namespace with the view and, unless `net` is [`Net::Host`], the shared network
/// namespace where each RoCE port has its interface (sim_netns_shared.rs). Already inside a
/// view (a nested `mrshim sim`, or a host with real RDMA devices): nothing to do — but
/// [`Net::Required`] then needs the interfaces to be there already. Ok(Some(line)): the view is
/// made, the interfaces are not (why, for the user).
pub fn enter(lib_dir: &Path, net: Net) -> Result<Option<String>, String> {
    let sys = Path::new("/sys");
    if sys.join("class/infiniband").exists() {
        let missing = crate::sim_netns::from_sysfs(&sys.join("class/infiniband"))
            .into_iter()
            .find(|(_, d)| !sys.join("class/net").join(&d.name).exists());
        return match missing {
            Some((dev, d)) if net == Net::Required => Err(format!(
                "/sys/class/infiniband exists already (real devices, or a view made with --no-netns) and {dev}'s \
                 interface {} does not: no network namespace made",
                d.name
            )),
            _ => Ok(None),
        };
    }
    let mut joined = false;
    let mut missing = None;
    if net != Net::Host {
        match shared_netns(lib_dir) {
            Ok(j) => joined = j,
            Err(e) if net == Net::Required => return Err(e),
            Err(e) => missing = Some(e),
        }
    }
    // SAFETY: a getter without preconditions.
    let in_userns = joined && unsafe { libc::geteuid() } != 0;
    private_namespace(in_userns)?;
    cover(Path::new("/sys/class"))?;
    write_sysfs(lib_dir, sys)?;
    if joined {
        port_interfaces(sys)?;
    }
    cover(Path::new("/dev"))?;
    let ib = Path::new("/dev/infiniband");
    std::fs::create_dir_all(ib).map_err(|e| format!("{}: {e}", ib.display()))?;
    for i in 0..written_devices(Path::new("/sys")) {
        char_device(&ib.join(format!("uverbs{i}")), (231, 192 + i as u32))?;
    }
    char_device(&ib.join("rdma_cm"), RDMA_CM_DEV)?;
    Ok(missing)
}

/// Joins the shared network namespace of the devices' RoCE ports (false: they have none, the
/// host's network is kept).
fn shared_netns(lib_dir: &Path) -> Result<bool, String> {
    let tmp = std::env::temp_dir().join(format!("mrshim-sim-ports-{}", std::process::id()));
    let r = write_sysfs(lib_dir, &tmp).map(|_| crate::sim_netns::from_sysfs(&tmp.join("class/infiniband")));
    let _ = std::fs::remove_dir_all(&tmp);
    let devs = r?;
    if devs.is_empty() {
        return Ok(false);
    }
    let rundir = crate::sim_netns_shared::rundir(lib_dir)?;
    crate::sim_netns_shared::join(&rundir, &devs.iter().map(|(_, d)| d).collect::<Vec<_>>())?;
    Ok(true)
}

/// Shows this (shared) network namespace's interfaces in /sys/class/net and
/// /sys/devices/virtual/net — sysfs shows the network namespace of whoever mounted it, so a
/// fresh sysfs mounted here is bound over the host's two directories, then detached — plus
/// `device/net/<ifname>` links for each port.
fn port_interfaces(sys: &Path) -> Result<(), String> {
    let ib = sys.join("class/infiniband");
    let devs = crate::sim_netns::from_sysfs(&ib);
    let fresh = sys.join("class/.mrshim-sysfs");
    std::fs::create_dir(&fresh).map_err(|e| format!("{}: {e}", fresh.display()))?;
    mount(Path::new("sysfs"), &fresh, Some("sysfs"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)?;
    for rel in ["class/net", "devices/virtual/net"] {
        mount(&fresh.join(rel), &sys.join(rel), None, libc::MS_BIND, None)?;
    }
    // SAFETY: umount2 with a NUL-terminated path.
    check(unsafe { libc::umount2(cstr(&fresh).as_ptr(), libc::MNT_DETACH) }, "detaching the fresh sysfs")?;
    let _ = std::fs::remove_dir(&fresh);
    for (dev, d) in &devs {
        let net = ib.join(dev).join("device/net");
        std::fs::create_dir_all(&net)
            .and_then(|_| std::os::unix::fs::symlink(sys.join("devices/virtual/net").join(&d.name), net.join(&d.name)))
            .map_err(|e| format!("{}: {e}", net.display()))?;
    }
    Ok(())
}

/// How many devices the view holds: the uverbsN entries the simulator wrote.
fn written_devices(sys: &Path) -> usize {
    std::fs::read_dir(sys.join("class/infiniband_verbs"))
        .map(|d| d.flatten().filter(|e| e.file_name().as_bytes().starts_with(b"uverbs")).count())
        .unwrap_or(0)
}
