//! Opening the log without trusting what is on disk: the shim often runs as root, in shared
//! directories, at names anyone can predict.
//!
//! - Directories are walked one component at a time (`openat`, `O_NOFOLLOW`). A symbolic link on
//!   the way is followed only when it belongs to root or to this process's effective user: the rule
//!   the kernel's `fs.protected_symlinks` applies in sticky directories, applied to every directory
//!   (`/shared/logs -> /etc` planted by another user is refused; an administrator's `/scratch ->
//!   /lustre/scratch` is followed). Missing directories are created (`mkdirat`, mode 0750 less the
//!   umask: logs hold addresses, paths and settings), and the error
//!   names the component that failed.
//! - Every directory on the way (the start, `/` or the working directory, and what a trusted
//!   link leads to) must belong to root or to this process's effective user and must not be
//!   writable by others (`o+w`), unless it is sticky (`/tmp`, `/var/tmp`: others may add entries
//!   there but cannot rename or remove ours). Otherwise the user who owns or may write it could
//!   move the records away and plant a directory of its own for the next process: it is refused
//!   with one line, like an untrusted symbolic link. Group-writable directories are accepted (the
//!   owner chose the group). Directories the shim creates itself pass by construction.
//! - The file itself is never a symbolic link (`O_NOFOLLOW`), never blocks the open
//!   (`O_NONBLOCK`: a FIFO with no reader fails with ENXIO at once instead of hanging the job), and
//!   must be a regular file (`fstat`; `/dev/null` and `/dev/full` are allowed: they cannot block and
//!   have no side effect).
//! - The file is created `O_EXCL`: a fresh file is this process's own. An existing file is
//!   appended to only if it belongs to this process's effective user and has one link (a file
//!   planted by another user at a predictable per-process name, or a hard link to someone else's
//!   file, is refused).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An open log file and what identifies it (checked again before each write).
pub struct Opened {
    pub fd: OwnedFd,
    pub dev: u64,
    pub ino: u64,
    /// This open created the file (so it needs its first line).
    pub created: bool,
}

/// Is `uid` one whose symbolic links this process follows?
fn trusted(uid: libc::uid_t) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn openat(dir: RawFd, name: &CString, flags: i32, mode: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: name is NUL-terminated; openat does not keep the pointer.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is writable; fstat only writes into it.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn with_place(place: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", crate::config::shorten(place)))
}

/// Is a directory with this owner and mode one whose entries only trusted users can move?
/// (The rule the module describes; Err: why not, for the one line.)
pub fn dir_trusted(uid: libc::uid_t, mode: libc::mode_t) -> Result<(), String> {
    if !trusted(uid) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        return Err(format!("belongs to uid {uid} (neither root nor this process's uid {me})"));
    }
    if mode & libc::S_IWOTH != 0 && mode & libc::S_ISVTX == 0 {
        return Err(format!("is writable by others and not sticky (mode {:04o})", mode & 0o7777));
    }
    Ok(())
}

/// `dir` (reached as `shown`) passes [`dir_trusted`], or an error naming it.
fn check_dir(dir: &OwnedFd, shown: &str) -> io::Result<()> {
    let st = fstat(dir.as_raw_fd())?;
    dir_trusted(st.st_uid, st.st_mode).map_err(|why| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the directory {} {why}: not used", crate::config::shorten(shown)),
        )
    })
}

/// One directory component below `dir` (`shown`: the path so far, for messages).
fn step(dir: RawFd, comp: &str, shown: &str) -> io::Result<OwnedFd> {
    let name = cstr(comp)?;
    let node = openat(dir, &name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
    let st = fstat(node.as_raw_fd())?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {
            dir_trusted(st.st_uid, st.st_mode).map_err(|why| {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("the directory {} {why}: not used", crate::config::shorten(shown)),
                )
            })?;
            Ok(node)
        }
        libc::S_IFLNK if trusted(st.st_uid) => {
            let target = openat(dir, &name, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            check_dir(&target, &format!("{shown} (where the link leads)"))?;
            Ok(target)
        }
        libc::S_IFLNK => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is a symbolic link that belongs to uid {} (neither root nor this process's uid {}): not followed",
                crate::config::shorten(shown),
                st.st_uid,
                // SAFETY: geteuid has no preconditions.
                unsafe { libc::geteuid() }
            ),
        )),
        _ => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
    }
}

/// Opens directory `path` (O_PATH), walking it as the module says; `create`: make what is missing.
pub fn open_dir(path: &str, create: bool) -> io::Result<OwnedFd> {
    let start = if path.starts_with('/') { "/" } else { "." };
    let mut dir = openat(libc::AT_FDCWD, &cstr(start)?, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    check_dir(&dir, if start == "/" { "/" } else { "." })?;
    let mut shown = String::from(if start == "/" { "" } else { "." });
    for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        shown.push('/');
        shown.push_str(comp);
        let next = match step(dir.as_raw_fd(), comp, &shown) {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                let name = cstr(comp)?;
                // SAFETY: name is NUL-terminated; mkdirat does not keep the pointer.
                if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o750) } != 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(with_place(&format!("creating {shown}"), e));
                    }
                }
                step(dir.as_raw_fd(), comp, &shown)
            }
            r => r,
        };
        dir = next.map_err(|e| if e.raw_os_error().is_some() { with_place(&shown, e) } else { e })?;
    }
    Ok(dir)
}

/// `path` split into its directory and its last component.
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (".", path),
    }
}

/// Is `name` in `dir` a directory (through a trusted link too)? Then it is returned; Ok(None)
/// when it is missing or not a directory; an error when it is one that may not be used.
pub fn subdir(dir: &OwnedFd, name: &str, shown: &str) -> io::Result<Option<OwnedFd>> {
    match step(dir.as_raw_fd(), name, shown) {
        Ok(d) => Ok(Some(d)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_null_or_full(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && [libc::makedev(1, 3), libc::makedev(1, 7)].contains(&st.st_rdev)
}

fn kind_name(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        libc::S_IFDIR => "a directory",
        _ => "not a regular file",
    }
}

/// Opens `name` in `dir` for appending records: created `O_EXCL` (then it is this process's own),
/// or, if it exists (a log shared by several processes, a reused pid), checked as the module says.
pub fn open_file(dir: &OwnedFd, name: &str) -> io::Result<Opened> {
    let c = cstr(name)?;
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let mut created = false;
    let fd = match openat(dir.as_raw_fd(), &c, flags | libc::O_CREAT | libc::O_EXCL, 0o640) {
        Ok(fd) => {
            created = true;
            fd
        }
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => openat(dir.as_raw_fd(), &c, flags, 0).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENXIO) {
                io::Error::other("it is a FIFO or a device without a reader: records go only to regular files")
            } else {
                e
            }
        })?,
        Err(e) => return Err(e),
    };
    let st = fstat(fd.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        if is_null_or_full(&st) {
            return Ok(Opened { fd, dev: st.st_dev, ino: st.st_ino, created });
        }
        return Err(io::Error::other(format!("it is {}: records go only to regular files", kind_name(st.st_mode))));
    }
    if !created {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if st.st_uid != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("it belongs to uid {}, not to this process's uid {me}: not appended to", st.st_uid),
            ));
        }
        if st.st_nlink != 1 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("it has {} hard links: not appended to", st.st_nlink),
            ));
        }
    }
    Ok(Opened { fd, dev: st.st_dev, ino: st.st_ino, created })
}
