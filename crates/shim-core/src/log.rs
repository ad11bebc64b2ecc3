//! The record writer: every record is one `write(2)` of one complete line on an `O_APPEND` fd,
//! done before the intercepted call returns, so a record survives a SIGKILL right after the call.
//! No buffering, no background thread.

use crate::config::{self, LogDest};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*};

const UNOPENED: i32 = -1;
const FAILED: i32 = -2;

pub struct Log {
    dest: LogDest,
    fd: AtomicI32,
    /// Serialises opening; a forked child can take it back (see `after_fork`).
    opening: mrshim_forklock::ForkLock<()>,
    opened_by: AtomicU32,
    pid_dependent: AtomicBool,
    warned_write: AtomicBool,
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

impl Log {
    pub fn new(dest: LogDest) -> Self {
        Log {
            dest,
            fd: AtomicI32::new(UNOPENED),
            opening: mrshim_forklock::ForkLock::new(()),
            opened_by: AtomicU32::new(0),
            pid_dependent: AtomicBool::new(false),
            warned_write: AtomicBool::new(false),
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
        if write_all_once(fd, line) {
            self.written.fetch_add(1, Relaxed);
        } else {
            let e = std::io::Error::last_os_error();
            self.lost.fetch_add(1, Relaxed);
            if !self.warned_write.swap(true, Relaxed) {
                crate::stderr_line(&format!(
                    "mrshim: writing a record failed: {e}; this and possibly later records are lost, calls pass through"
                ));
            }
        }
    }

    fn ensure_open(&self, ctx: &OpenCtx) -> i32 {
        let fd = self.fd.load(Acquire);
        if fd != UNOPENED {
            return fd;
        }
        let opening = self.opening.lock();
        let mut fd = self.fd.load(Acquire);
        if fd == UNOPENED {
            fd = self.open(ctx);
            if fd >= 0 {
                let first = (ctx.first_line)();
                if write_all_once(fd, &first) {
                    self.written.fetch_add(1, Relaxed);
                } else {
                    // the record that follows fails the same way and says so
                    self.lost.fetch_add(1, Relaxed);
                }
            }
            self.opened_by.store(ctx.pid, Relaxed);
            self.fd.store(fd, Release);
        }
        drop(opening);
        fd
    }

    fn open(&self, ctx: &OpenCtx) -> i32 {
        let pattern = match &self.dest {
            LogDest::Off => return FAILED,
            LogDest::Stderr => return 2,
            LogDest::Path(p) => p,
        };
        let expanded = config::expand(pattern, ctx.host, ctx.pid, ctx.rank, ctx.job);
        let mut is_dir = expanded.ends_with('/');
        if is_dir {
            create_dirs(std::path::Path::new(&expanded));
        } else {
            is_dir = std::path::Path::new(&expanded).is_dir();
            if let Some(parent) = std::path::Path::new(&expanded).parent().filter(|_| !is_dir) {
                // A file pattern under a directory that does not exist yet (a shared
                // filesystem path per job): create it like a one-file-per-process directory.
                create_dirs(parent);
            }
        }
        self.pid_dependent.store(config::pid_dependent(pattern, is_dir), Relaxed);
        let path = if is_dir {
            format!("{}/{}", expanded.trim_end_matches('/'), config::dir_file_name(ctx.host, ctx.pid, ctx.rank))
        } else {
            expanded
        };
        match open_append(&path) {
            Ok(fd) => fd,
            Err(e) => {
                crate::stderr_line(&format!(
                    "mrshim: cannot open the log {path:?} (MRSHIM_LOG={pattern:?}): {e}; records are not written, calls pass through"
                ));
                FAILED
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
        unsafe { self.opening.reset_in_child(()) };
        let fd = self.fd.load(Relaxed);
        if fd >= 0 && fd != 2 && self.pid_dependent.load(Relaxed) && self.opened_by.load(Relaxed) != child_pid {
            // SAFETY: fd is the child's own copy of the log descriptor; nothing else uses it.
            unsafe { libc::close(fd) };
            self.fd.store(UNOPENED, Relaxed);
        }
        if fd == FAILED {
            // Try again (and warn again) in the child: it may have a different name.
            self.fd.store(UNOPENED, Relaxed);
        }
        self.written.store(0, Relaxed);
        self.lost.store(0, Relaxed);
        self.warned_write.store(false, Relaxed);
    }
}

/// Creates a log directory and its missing parents, mode 0750 (before the umask); what exists
/// is left as it is. A failure shows when the log file is opened.
fn create_dirs(dir: &std::path::Path) {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.as_os_str().is_empty() {
        let _ = std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir);
    }
}

/// `O_WRONLY|O_CREAT|O_APPEND|O_NOFOLLOW|O_CLOEXEC`, mode 0640 (further reduced by the umask).
pub fn open_append(path: &str) -> std::io::Result<i32> {
    let c = CString::new(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a valid NUL-terminated string; open does not retain the pointer.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o640 as libc::c_uint,
        )
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// One write(2) of the whole buffer (retried only on EINTR, where nothing was written).
/// A short write counts as failure: O_APPEND regular files and pipes (≤ PIPE_BUF) don't do that.
pub fn write_all_once(fd: i32, buf: &[u8]) -> bool {
    loop {
        // The system call itself, not glibc's write(): that one is a pthread cancellation point,
        // and a registration must not become one (a cancelled thread would unwind out of the
        // shim mid-call); it also skips the wrapper's cancellation bookkeeping.
        // SAFETY: buf is valid for buf.len() bytes for the duration of the call.
        let n = unsafe { libc::syscall(libc::SYS_write, fd, buf.as_ptr(), buf.len()) } as isize;
        if n == buf.len() as isize {
            return true;
        }
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return false;
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
