//! The record writer: every record is one `write(2)` of one complete line on an `O_APPEND` fd,
//! done before the intercepted call returns, so a record survives a SIGKILL right after the call.
//! No buffering, no background thread.
//!
//! Before each write one `fstat(2)` (the only added system call) checks two things:
//! - the descriptor still is the log (same device and inode): a daemon that closes every inherited
//!   descriptor, or a program that reuses numbers, must not get records in its own files. The
//!   log's descriptor lives at [`FD_FLOOR`] or above, away from the numbers `open` hands out, and
//!   is reopened (same file, same checks) when the application closed or replaced it;
//! - the record fits under `RLIMIT_FSIZE`: past it, `write(2)` raises SIGXFSZ, which kills the
//!   process, and a write that straddles it is cut short (a torn record). A record that does not
//!   fit is not written and counts as lost.
//!
//! How the file is opened (symbolic links, FIFOs, files of other users): [`crate::logfile`].

use crate::config::{self, LogDest};
use crate::logfile;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*};

const UNOPENED: i32 = -1;
const FAILED: i32 = -2;
const STDERR: i32 = 2;

/// The log's descriptor is moved to this number or above (when RLIMIT_NOFILE allows): programs
/// get their descriptors from the lowest free number, so they rarely land on it by chance.
pub const FD_FLOOR: i32 = 600;

pub struct Log {
    dest: LogDest,
    fd: AtomicI32,
    /// Identity of the file `fd` was opened on (stored before `fd`, under `opening`).
    dev: AtomicU64,
    ino: AtomicU64,
    /// RLIMIT_FSIZE as last read (u64::MAX: unlimited); read again when a record would pass it.
    fsize_limit: AtomicU64,
    /// Serialises opening and reopening; a forked child can take it back (see `after_fork`).
    opening: mrshim_forklock::ForkLock<String>,
    opened_by: AtomicU32,
    pid_dependent: AtomicBool,
    warned_write: AtomicBool,
    warned_reopen: AtomicBool,
    pub written: AtomicU64,
    pub lost: AtomicU64,
}

/// What the writer needs to know to name and start a file.
pub struct OpenCtx<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub rank: Option<i64>,
    /// The job id for `%j` (`nojob` without one).
    pub job: &'a str,
    /// The config record (first line of every log).
    pub first_line: &'a dyn Fn() -> Vec<u8>,
}

/// What the check before a write found.
enum Check {
    Fits,
    /// The descriptor is closed or is another file now.
    NotOurs,
    /// The record would pass RLIMIT_FSIZE (the limit).
    TooBig(u64),
}

impl Log {
    pub fn new(dest: LogDest) -> Self {
        Log {
            dest,
            fd: AtomicI32::new(UNOPENED),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            fsize_limit: AtomicU64::new(fsize_limit()),
            opening: mrshim_forklock::ForkLock::new(String::new()),
            opened_by: AtomicU32::new(0),
            pid_dependent: AtomicBool::new(false),
            warned_write: AtomicBool::new(false),
            warned_reopen: AtomicBool::new(false),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.dest != LogDest::Off
    }

    pub fn dest(&self) -> &LogDest {
        &self.dest
    }

    /// Writes one line (which must end in '\n'). Opens the destination on first use.
    pub fn write_line(&self, line: &[u8], ctx: &OpenCtx) {
        let fd = self.ensure_open(ctx);
        if fd < 0 {
            self.lost.fetch_add(1, Relaxed);
            return;
        }
        match self.check(fd, line.len()) {
            Check::NotOurs => match self.reopen(fd, ctx) {
                fd if fd >= 0 => self.write_checked(fd, line),
                _ => {
                    self.lost.fetch_add(1, Relaxed);
                }
            },
            check => self.write_on(fd, line, check),
        }
    }

    fn write_checked(&self, fd: i32, line: &[u8]) {
        self.write_on(fd, line, self.check(fd, line.len()));
    }

    /// One record on `fd` as `check` found it; counted either way.
    fn write_on(&self, fd: i32, line: &[u8], check: Check) {
        let r = match check {
            Check::Fits => write_all_once(fd, line),
            Check::TooBig(limit) => Err(std::io::Error::other(format!(
                "the log reached the file-size limit (RLIMIT_FSIZE, `ulimit -f`) of {limit} bytes"
            ))),
            Check::NotOurs => Err(std::io::Error::other("the log's descriptor was closed or replaced")),
        };
        match r {
            Ok(()) => {
                self.written.fetch_add(1, Relaxed);
            }
            Err(e) => {
                self.lost.fetch_add(1, Relaxed);
                if !self.warned_write.swap(true, Relaxed) {
                    crate::stderr_line(&format!(
                        "mrshim: writing a record failed: {e}; this and possibly later records are lost, calls pass through"
                    ));
                }
            }
        }
    }

    /// The check before each write: one fstat.
    fn check(&self, fd: i32, len: usize) -> Check {
        let st = match logfile::fstat(fd) {
            Ok(st) => st,
            // stderr is the application's: a closed one fails at the write and is counted there
            Err(_) if fd == STDERR => return Check::Fits,
            Err(_) => return Check::NotOurs,
        };
        if fd != STDERR && (st.st_ino != self.ino.load(Acquire) || st.st_dev != self.dev.load(Acquire)) {
            return Check::NotOurs;
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFREG {
            let end = (st.st_size as u64).saturating_add(len as u64);
            if end > self.fsize_limit.load(Relaxed) {
                // raised since? (lowered later than the open is not seen: see docs/shim.md)
                let now = fsize_limit();
                self.fsize_limit.store(now, Relaxed);
                if end > now {
                    return Check::TooBig(now);
                }
            }
        }
        Check::Fits
    }

    fn ensure_open(&self, ctx: &OpenCtx) -> i32 {
        let fd = self.fd.load(Acquire);
        if fd != UNOPENED {
            return fd;
        }
        let mut path = self.opening.lock();
        let mut fd = self.fd.load(Acquire);
        if fd == UNOPENED {
            fd = match self.dest {
                LogDest::Stderr => STDERR,
                _ => self.open(ctx, &mut path).map_or(FAILED, |o| self.install(o)),
            };
            if fd >= 0 {
                self.write_checked(fd, &(ctx.first_line)());
            }
            self.opened_by.store(ctx.pid, Relaxed);
            self.fd.store(fd, Release);
        }
        fd
    }

    /// `seen` failed the check: reopen the log, unless another thread did already.
    fn reopen(&self, seen: i32, ctx: &OpenCtx) -> i32 {
        let mut path = self.opening.lock();
        let fd = self.fd.load(Acquire);
        if fd != seen || fd < 0 || !matches!(self.check(fd, 0), Check::NotOurs) {
            return fd;
        }
        // `seen` is closed or the application's own file now: forgotten, never closed by us.
        let fd = match self.open(ctx, &mut path) {
            Some(o) => {
                let created = o.created;
                let fd = self.install(o);
                if !self.warned_reopen.swap(true, Relaxed) {
                    crate::stderr_line(&format!(
                        "mrshim: the application closed or replaced the log's descriptor {seen}; the log {:?} was reopened{}",
                        config::shorten(&path),
                        if created { " (it was gone: a new file)" } else { "" }
                    ));
                }
                if created {
                    self.write_checked(fd, &(ctx.first_line)());
                }
                fd
            }
            None => FAILED,
        };
        self.fd.store(fd, Release);
        fd
    }

    /// Takes an opened file as the log: its descriptor out of the low range, its identity noted.
    fn install(&self, o: logfile::Opened) -> i32 {
        self.dev.store(o.dev, Release);
        self.ino.store(o.ino, Release);
        self.fsize_limit.store(fsize_limit(), Relaxed);
        // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor only creates a new one.
        let high = unsafe { libc::fcntl(o.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, FD_FLOOR) };
        if high < 0 {
            return o.fd.into_raw_fd();
        }
        drop(o.fd);
        // SAFETY: high was just created by fcntl; it is ours alone.
        unsafe { OwnedFd::from_raw_fd(high) }.into_raw_fd()
    }

    /// Opens the file the pattern names now (`path`: set to it); None after one stderr line.
    fn open(&self, ctx: &OpenCtx, path: &mut String) -> Option<logfile::Opened> {
        let LogDest::Path(pattern) = &self.dest else { return None };
        let expanded = config::expand(pattern, ctx.host, ctx.pid, ctx.rank, ctx.job);
        let dir_file = || config::dir_file_name(ctx.host, ctx.pid, ctx.rank);
        let (dir, name, is_dir) = if expanded.ends_with('/') {
            (logfile::open_dir(&expanded, true), dir_file(), true)
        } else {
            let (parent, last) = logfile::split(&expanded);
            // A file pattern under a directory that does not exist yet (a shared filesystem path
            // per job): its parents are created like a one-file-per-process directory.
            match logfile::open_dir(parent, true) {
                Ok(p) => match logfile::subdir(&p, last, &expanded) {
                    Ok(Some(d)) => (Ok(d), dir_file(), true),
                    Ok(None) => (Ok(p), last.to_string(), false),
                    Err(e) => (Err(e), last.to_string(), false),
                },
                Err(e) => (Err(e), last.to_string(), false),
            }
        };
        self.pid_dependent.store(config::pid_dependent(pattern, is_dir), Relaxed);
        *path = if is_dir { format!("{}/{name}", expanded.trim_end_matches('/')) } else { expanded };
        match dir.and_then(|d| logfile::open_file(&d, &name)) {
            Ok(o) => Some(o),
            Err(e) => {
                let from = if path == pattern {
                    String::new()
                } else {
                    format!(" (MRSHIM_LOG={:?})", config::shorten(pattern))
                };
                crate::stderr_line(&format!(
                    "mrshim: cannot open the log {:?}{from}: {e}; records are not written, calls pass through",
                    config::shorten(path)
                ));
                None
            }
        }
    }

    /// In a forked child: a per-pid destination gets a new file at the next record.
    ///
    /// # Safety
    /// Only in a forked child, from its atfork child handler: the child has one thread, and no
    /// guard of that thread is alive.
    pub unsafe fn after_fork(&self, child_pid: u32) {
        // SAFETY: the caller's contract.
        unsafe { self.opening.reset_in_child(String::new()) };
        let fd = self.fd.load(Relaxed);
        if fd >= 0 && fd != STDERR && self.pid_dependent.load(Relaxed) && self.opened_by.load(Relaxed) != child_pid {
            if !matches!(self.check(fd, 0), Check::NotOurs) {
                // SAFETY: fd is the child's own copy of the log descriptor (just checked); nothing else uses it.
                unsafe { libc::close(fd) };
            }
            self.fd.store(UNOPENED, Relaxed);
        }
        if fd == FAILED {
            // Try again (and warn again) in the child: it may have a different name.
            self.fd.store(UNOPENED, Relaxed);
        }
        self.written.store(0, Relaxed);
        self.lost.store(0, Relaxed);
        self.warned_write.store(false, Relaxed);
        self.warned_reopen.store(false, Relaxed);
    }
}

/// RLIMIT_FSIZE's soft limit in bytes (u64::MAX when unlimited or unreadable).
fn fsize_limit() -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is writable; getrlimit only writes into it.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        return u64::MAX;
    }
    r.rlim_cur
}

/// One write(2) of the whole buffer (retried only on EINTR, where nothing was written).
/// A short write is an error: O_APPEND regular files and pipes (≤ PIPE_BUF) don't do that.
pub fn write_all_once(fd: i32, buf: &[u8]) -> std::io::Result<()> {
    loop {
        // The system call itself, not glibc's write(): that one is a pthread cancellation point,
        // and a registration must not become one (a cancelled thread would unwind out of the
        // shim mid-call); it also skips the wrapper's cancellation bookkeeping.
        // SAFETY: buf is valid for buf.len() bytes for the duration of the call.
        let n = unsafe { libc::syscall(libc::SYS_write, fd, buf.as_ptr(), buf.len()) } as isize;
        if n == buf.len() as isize {
            return Ok(());
        }
        if n >= 0 {
            return Err(std::io::Error::other(format!("short write ({n} of {} bytes)", buf.len())));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("mrshim-core-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn ctx<'a>(f: &'a dyn Fn() -> Vec<u8>) -> OpenCtx<'a> {
        OpenCtx { host: "hostA", pid: 77, rank: Some(3), job: "nojob", first_line: f }
    }

    #[test]
    fn pattern_file_gets_config_line_first_and_mode_0640() {
        let d = tmp("pattern");
        let log = Log::new(LogDest::Path(format!("{}/x-%h-%r-%p.jsonl", d.display())));
        let first = || b"{\"kind\":\"config\"}\n".to_vec();
        log.write_line(b"{\"a\":1}\n", &ctx(&first));
        log.write_line(b"{\"a\":2}\n", &ctx(&first));
        let p = d.join("x-hostA-3-77.jsonl");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"kind\":\"config\"}\n{\"a\":1}\n{\"a\":2}\n");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "mode {mode:o}");
        assert_eq!(log.written.load(Relaxed), 3);
    }

    #[test]
    fn directory_means_one_file_per_process() {
        let d = tmp("dir");
        let log = Log::new(LogDest::Path(d.display().to_string()));
        let first = || b"c\n".to_vec();
        log.write_line(b"r\n", &ctx(&first));
        assert_eq!(std::fs::read_to_string(d.join("mrshim-hostA-r3-p77.jsonl")).unwrap(), "c\nr\n");
        // trailing slash: created
        let sub = d.join("new/deeper/");
        let log = Log::new(LogDest::Path(format!("{}/", sub.display())));
        log.write_line(b"r\n", &ctx(&first));
        assert!(sub.join("mrshim-hostA-r3-p77.jsonl").exists());
    }

    #[test]
    fn a_file_patterns_missing_parents_are_created_0750_with_the_job_id() {
        let d = tmp("parents");
        let log = Log::new(LogDest::Path(format!("{}/shared/mrshim/%j/%h-%r.jsonl", d.display())));
        let first = || b"c\n".to_vec();
        let ctx = OpenCtx { job: "4242", ..ctx(&first) };
        log.write_line(b"r\n", &ctx);
        let job_dir = d.join("shared/mrshim/4242");
        assert_eq!(std::fs::read_to_string(job_dir.join("hostA-3.jsonl")).unwrap(), "c\nr\n");
        for dir in [d.join("shared"), job_dir] {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & !0o750, 0, "{} mode {mode:o}", dir.display());
        }
        assert_eq!(log.lost.load(Relaxed), 0);
    }

    #[test]
    fn symlink_is_refused_and_lost_is_counted() {
        let d = tmp("symlink");
        let target = d.join("target");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, d.join("link")).unwrap();
        let log = Log::new(LogDest::Path(format!("{}/link", d.display())));
        let first = || b"c\n".to_vec();
        log.write_line(b"r\n", &ctx(&first));
        log.write_line(b"r\n", &ctx(&first));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        assert_eq!(log.lost.load(Relaxed), 2);
    }

    #[test]
    fn unwritable_destination_counts_lost() {
        let log = Log::new(LogDest::Path("/proc/definitely/not/here.jsonl".into()));
        let first = || b"c\n".to_vec();
        for _ in 0..3 {
            log.write_line(b"r\n", &ctx(&first));
        }
        assert_eq!(log.lost.load(Relaxed), 3);
        assert_eq!(log.written.load(Relaxed), 0);
    }
}
