//! The record writer: every record is one complete line in the kernel's page cache before the
//! intercepted call returns, so a record survives a SIGKILL right after the call. A file that is
//! this process's alone is a shared mapping and a record is a copy into it ([`crate::logmap`]:
//! no system call); any other destination gets one `write(2)` per record on an `O_APPEND` fd. No
//! buffering, no background thread.
//!
//! - **The descriptor is the log's until the application closes it.** The log's descriptor lives
//!   at [`FD_FLOOR`] or above, away from the numbers `open` hands out. Every libc call that can
//!   close or replace a descriptor (`close`, `dup2`, `dup3`, `close_range`, `closefrom`) is
//!   interposed by the preload (src/preload/fds.rs) and calls [`before_close`] first:
//!   the log's number is retired (no new write starts on it), writes already under way finish,
//!   and only then the application's call runs. The next record reopens the log by name (same
//!   checks), so a daemon that closes every inherited descriptor, or a program that `dup2`s over
//!   numbers, never gets a record in its own file and nothing is lost.
//! - **RLIMIT_FSIZE**: past it, `write(2)` raises SIGXFSZ, which kills the process, and a write
//!   that straddles it is cut short (a torn record). Only when a limit is set (rare) one `fstat`
//!   before each write gives the file's size; a record that does not fit is not written and counts
//!   as lost.
//!
//! How the file is opened (symbolic links, FIFOs, files of other users): [`crate::logfile`].

use crate::config::{self, LogDest};
use crate::logfile;
use crate::logmap::{LogMap, Stored};
use std::cell::Cell;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*};

const UNOPENED: i32 = -1;
const FAILED: i32 = -2;
/// The application closed or replaced the log's descriptor (its number: `Log::retired`).
const RETIRED: i32 = -3;
/// Or'ed into a descriptor while its first line is written: writers other than the opener wait
/// for the lock; [`before_close`] still sees the number.
const OPENING: i32 = 1 << 30;
const STDERR: i32 = 2;

/// The log's descriptor is moved to this number or above (when RLIMIT_NOFILE allows): programs
/// get their descriptors from the lowest free number, so they rarely land on it by chance.
pub const FD_FLOOR: i32 = 600;

thread_local! {
    /// Writes this thread has under way (0 or 1; a signal handler may nest one more): the close
    /// hook does not wait for those, it would wait for itself.
    static WRITING: Cell<u32> = const { Cell::new(0) };
}

pub struct Log {
    dest: LogDest,
    /// The descriptor, or UNOPENED/FAILED/RETIRED; `fd | OPENING` while its first line is written.
    fd: AtomicI32,
    /// Writes under way on `fd` (a writer counts itself, then checks `fd` is still the same).
    inflight: AtomicU32,
    /// The number the application closed (for the warning).
    retired: AtomicI32,
    /// Identity of the file `fd` was opened on (for the fork handler's check).
    dev: AtomicU64,
    ino: AtomicU64,
    /// RLIMIT_FSIZE as last read (u64::MAX: unlimited, no check); read again when a record would pass it.
    fsize_limit: AtomicU64,
    /// Serialises opening and reopening; a forked child can take it back (see `after_fork`).
    opening: mrshim_forklock::ForkLock<String>,
    opened_by: AtomicU32,
    pid_dependent: AtomicBool,
    warned_write: AtomicBool,
    warned_reopen: AtomicBool,
    /// The file as a shared mapping, when it is this process's alone.
    map: LogMap,
    /// This process is a forked child of one that used the log (it writes with write(2)).
    forked: AtomicBool,
    pub written: AtomicU64,
    pub lost: AtomicU64,
}

/// What one try at writing a record did.
enum Attempt {
    Done,
    /// The descriptor is not the log's any more: nothing written.
    NotOurs,
    /// The mapping is being closed by another thread: try again in a moment.
    Wait,
    /// The mapping is full: close it, then try again (with write(2)).
    Full,
}

/// What the check before a write found.
enum Check {
    Fits,
    /// The descriptor is closed or is another file now.
    NotOurs,
    /// The record would pass RLIMIT_FSIZE (the limit).
    TooBig(u64),
}

/// The preload's close hooks call this before the application's call closes or replaces the
/// descriptors `first..=last`: if the log's is among them it is retired first (no write starts
/// on it any more, those under way on other threads have finished), so the number can be reused
/// by the application without a record ever reaching its file. Lock-free and allocation-free:
/// `close` is async-signal-safe and so is this.
pub fn before_close(first: i32, last: i32) {
    if let Some(s) = crate::shim_if_initialized() {
        s.log.release(first, last);
    }
}

/// The preload's `_exit`/`_Exit` hooks call this first: a mapped log gets its blank end trimmed,
/// as at a normal exit (whose handlers `_exit` skips). Only in the process that opened the log: a
/// `vfork` child shares its parent's memory, and its `_exit` must leave the parent's mapping be.
pub fn before_exit() {
    if let Some(s) = crate::shim_if_initialized() {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        if s.log.opened_by.load(Relaxed) == me {
            s.log.finish();
        }
    }
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
            inflight: AtomicU32::new(0),
            retired: AtomicI32::new(-1),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            fsize_limit: AtomicU64::new(fsize_limit()),
            opening: mrshim_forklock::ForkLock::new(String::new()),
            opened_by: AtomicU32::new(0),
            pid_dependent: AtomicBool::new(false),
            warned_write: AtomicBool::new(false),
            warned_reopen: AtomicBool::new(false),
            map: LogMap::default(),
            forked: AtomicBool::new(false),
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

    /// Writes one line (which must end in '\n'). Opens the destination on first use, reopens it
    /// after the application closed its descriptor.
    pub fn write_line(&self, line: &[u8], ctx: &OpenCtx) {
        // (a few rounds: each is a reopen the application undid at once; waiting for another
        // thread to close the mapping is not a round, but is bounded too)
        let (mut rounds, mut waits) = (0, 0u32);
        while rounds < 4 && waits < 1 << 20 {
            let raw = self.fd.load(SeqCst);
            if raw >= 0 && raw & OPENING == 0 {
                match self.write_as(raw, line) {
                    Attempt::Done => return,
                    Attempt::NotOurs => {}
                    Attempt::Wait => {
                        waits += 1;
                        std::thread::yield_now();
                        continue;
                    }
                    Attempt::Full => {
                        self.unmap(raw);
                        continue;
                    }
                }
            } else if raw == FAILED {
                break;
            } else {
                self.open_locked(ctx);
            }
            rounds += 1;
        }
        self.lost.fetch_add(1, Relaxed);
    }

    /// One write on the descriptor `raw` stands for, if the log still is `raw` once this write is
    /// counted as under way (else NotOurs: nothing written, nothing counted).
    fn write_as(&self, raw: i32, line: &[u8]) -> Attempt {
        self.inflight.fetch_add(1, SeqCst);
        let _ = WRITING.try_with(|w| w.set(w.get() + 1));
        let r = if self.fd.load(SeqCst) == raw {
            let fd = raw & !OPENING;
            match self.map.store(fd, line) {
                Stored::Yes => {
                    self.written.fetch_add(1, Relaxed);
                    Attempt::Done
                }
                Stored::No => {
                    let check = if fd == STDERR { Check::Fits } else { self.check_size(fd, line.len()) };
                    self.write_on(fd, line, check);
                    Attempt::Done
                }
                Stored::Wait => Attempt::Wait,
                Stored::Full => Attempt::Full,
            }
        } else {
            Attempt::NotOurs
        };
        let _ = WRITING.try_with(|w| w.set(w.get().saturating_sub(1)));
        self.inflight.fetch_sub(1, Release);
        r
    }

    /// Closes the mapping of `raw`'s descriptor (its blank end trimmed; records go on with
    /// write(2)), or waits until the thread already closing it is done.
    fn unmap(&self, raw: i32) {
        let fd = raw & !OPENING;
        if self.map.is_mapped(fd) && self.map.begin_close() {
            self.drain();
            self.map.finish(fd);
            return;
        }
        let mut waits = 0u32;
        while self.map.is_closing() && waits < 1 << 20 {
            waits += 1;
            std::thread::yield_now();
        }
    }

    /// Waits until the writes under way on other threads have finished.
    fn drain(&self) {
        let mine = WRITING.try_with(|w| w.get()).unwrap_or(0);
        while self.inflight.load(SeqCst) > mine {
            std::hint::spin_loop();
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }

    /// At exit (after the summary record): a mapped log gets its blank end trimmed; records of
    /// threads still running go on with write(2).
    pub fn finish(&self) {
        let raw = self.fd.load(SeqCst);
        if raw >= 0 {
            self.unmap(raw);
        }
    }

    /// [`before_close`] for this log.
    pub fn release(&self, first: i32, last: i32) {
        let raw = self.fd.load(SeqCst);
        let fd = raw & !OPENING;
        if raw < 0 || fd == STDERR || fd < first || fd > last {
            return;
        }
        if self.fd.compare_exchange(raw, RETIRED, SeqCst, SeqCst).is_err() {
            // changed meanwhile: retired by another thread, or (re)opened at another number
            return self.release(first, last);
        }
        self.retired.store(fd, Relaxed);
        self.drain();
        // no write runs on it now and none starts: the blank end goes before the application's call
        if self.map.is_mapped(fd) {
            self.unmap(fd);
        }
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

    /// Does a record of `len` bytes fit under RLIMIT_FSIZE? Without a limit (the usual case): yes,
    /// without a system call; with one, an `fstat` gives the file's size.
    fn check_size(&self, fd: i32, len: usize) -> Check {
        if self.fsize_limit.load(Relaxed) == u64::MAX {
            return Check::Fits;
        }
        match logfile::fstat(fd) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {
                let end = (st.st_size as u64).saturating_add(len as u64);
                if end > self.fsize_limit.load(Relaxed) {
                    // raised since? (lowered later than the open is not seen: see docs/shim.md)
                    let now = fsize_limit();
                    self.fsize_limit.store(now, Relaxed);
                    if end > now {
                        return Check::TooBig(now);
                    }
                }
                Check::Fits
            }
            Ok(_) => Check::Fits,
            Err(_) => Check::NotOurs,
        }
    }

    /// Is `fd` still the file the log was opened on? (One `fstat`: only off the record path.)
    fn is_ours(&self, fd: i32) -> bool {
        logfile::fstat(fd).is_ok_and(|st| st.st_ino == self.ino.load(Acquire) && st.st_dev == self.dev.load(Acquire))
    }

    /// Opens the log (first use) or reopens it (retired), unless another thread just did.
    fn open_locked(&self, ctx: &OpenCtx) {
        let mut path = self.opening.lock();
        let first = match self.fd.load(SeqCst) {
            UNOPENED => true,
            RETIRED => false,
            _ => return,
        };
        let (fd, created) = match (&self.dest, first) {
            (LogDest::Stderr, _) => (STDERR, true),
            _ => match self.open(ctx, &mut path) {
                Some(o) => {
                    let created = o.created;
                    (self.install(o), created)
                }
                None => (FAILED, false),
            },
        };
        if first {
            self.opened_by.store(ctx.pid, Relaxed);
        } else if fd >= 0 && !self.warned_reopen.swap(true, Relaxed) {
            crate::stderr_line(&format!(
                "mrshim: the application closed or replaced the log's descriptor {}; the log {:?} was reopened{}",
                self.retired.load(Relaxed),
                config::shorten(&path),
                if created { " (it was gone: a new file)" } else { "" }
            ));
        }
        if fd < 0 {
            self.fd.store(FAILED, SeqCst);
            return;
        }
        if !(first || created) {
            self.fd.store(fd, SeqCst);
            return;
        }
        // The first line before any other record: other writers wait for this lock meanwhile.
        self.fd.store(fd | OPENING, SeqCst);
        let first_line = (ctx.first_line)();
        let mut done = false;
        for _ in 0..2 {
            match self.write_as(fd | OPENING, &first_line) {
                Attempt::Done => done = true,
                Attempt::Full => {
                    self.unmap(fd);
                    continue;
                }
                Attempt::NotOurs | Attempt::Wait => {}
            }
            break;
        }
        if !done {
            self.lost.fetch_add(1, Relaxed);
        }
        // (fails when the application closed it meanwhile: RETIRED stays, the next record reopens)
        let _ = self.fd.compare_exchange(fd | OPENING, fd, SeqCst, SeqCst);
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
        let fd = unsafe { OwnedFd::from_raw_fd(high) }.into_raw_fd();
        self.try_map(fd, o.dev, o.ino);
        fd
    }

    /// Maps the log if it is this process's alone (crate::logmap says when); else nothing changes.
    fn try_map(&self, fd: i32, dev: u64, ino: u64) {
        if !self.pid_dependent.load(Relaxed)
            || self.forked.load(Relaxed)
            || self.fsize_limit.load(Relaxed) != u64::MAX
            || !unlimited(libc::RLIMIT_AS)
        {
            return;
        }
        let Ok(st) = logfile::fstat(fd) else { return };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || !crate::logmap::local_fs(fd) {
            return;
        }
        // SAFETY: flock on the log's descriptor; a lock another process holds fails at once.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return;
        }
        if !self.map.setup(fd, st.st_size as u64, dev, ino) {
            // SAFETY: as above.
            unsafe { libc::flock(fd, libc::LOCK_UN) };
        }
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
        // the parent's writes under way are not the child's, nor is its mapping
        self.inflight.store(0, Relaxed);
        self.map.reset_in_child();
        self.forked.store(true, Relaxed);
        let raw = self.fd.load(Relaxed);
        if raw >= 0 && raw & OPENING != 0 {
            // forked while another thread wrote the first line: the child starts over
            self.fd.store(UNOPENED, Relaxed);
        } else if raw >= 0
            && raw != STDERR
            && self.pid_dependent.load(Relaxed)
            && self.opened_by.load(Relaxed) != child_pid
        {
            self.fd.store(UNOPENED, Relaxed);
            if self.is_ours(raw) {
                // SAFETY: raw is the child's own copy of the log descriptor (just checked); nothing else uses it.
                unsafe { libc::close(raw) };
            }
        }
        if raw == FAILED {
            // Try again (and warn again) in the child: it may have a different name.
            self.fd.store(UNOPENED, Relaxed);
        }
        self.written.store(0, Relaxed);
        self.lost.store(0, Relaxed);
        self.warned_write.store(false, Relaxed);
        self.warned_reopen.store(false, Relaxed);
    }
}

/// Is the soft limit `resource` unlimited?
fn unlimited(resource: libc::__rlimit_resource_t) -> bool {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is writable; getrlimit only writes into it.
    unsafe { libc::getrlimit(resource, &mut r) == 0 && r.rlim_cur == libc::RLIM_INFINITY }
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
        log.finish();
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
        log.finish();
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
    fn a_released_descriptor_is_never_written_again_and_the_log_is_reopened() {
        let d = tmp("release");
        let log = Log::new(LogDest::Path(format!("{}/x.jsonl", d.display())));
        let first = || b"c\n".to_vec();
        log.write_line(b"r1\n", &ctx(&first));
        let fd = log.fd.load(SeqCst);
        assert!(fd >= 0);
        // what the preload's close hook does before the application's close(fd) ...
        log.release(fd - 1, fd + 1);
        // ... and the application's own file at that number
        let app = d.join("app.txt");
        let f = std::fs::File::create(&app).unwrap();
        // SAFETY: both descriptors are valid; fd (the log's old one) is replaced by the app's file.
        assert_eq!(unsafe { libc::dup2(f.as_raw_fd(), fd) }, fd);
        log.write_line(b"r2\n", &ctx(&first));
        assert_eq!(std::fs::read_to_string(&app).unwrap(), "", "nothing in the application's file");
        assert_eq!(std::fs::read_to_string(d.join("x.jsonl")).unwrap(), "c\nr1\nr2\n");
        assert_ne!(log.fd.load(SeqCst), fd);
        assert_eq!((log.written.load(Relaxed), log.lost.load(Relaxed)), (3, 0));
        // a range without the log's descriptor changes nothing
        let now = log.fd.load(SeqCst);
        log.release(0, now - 1);
        assert_eq!(log.fd.load(SeqCst), now);
        // SAFETY: fd is the application's copy made above; closing it is the test's own business.
        unsafe { libc::close(fd) };
    }

    /// A per-process file is a shared mapping: while the process runs it reads as its records
    /// plus blank lines (never NUL bytes), at exit it is exactly the records; a name several
    /// processes may share gets write(2).
    #[test]
    fn a_per_process_log_is_mapped_blank_while_running_and_exact_at_exit() {
        let d = tmp("mapped");
        let log = Log::new(LogDest::Path(format!("{}/m-%p.jsonl", d.display())));
        let first = || b"c\n".to_vec();
        log.write_line(b"r1\n", &ctx(&first));
        log.write_line(b"r2\n", &ctx(&first));
        let fd = log.fd.load(SeqCst);
        assert!(log.map.is_mapped(fd), "a %p name is mapped");
        let p = d.join("m-77.jsonl");
        let running = std::fs::read(&p).unwrap();
        assert_eq!(running.len() as u64, crate::logmap::CHUNK, "grown a chunk ahead");
        assert!(running.starts_with(b"c\nr1\nr2\n"));
        assert!(running[9..].iter().all(|&b| b == b'\n'), "the rest is blank lines");
        log.finish();
        assert!(!log.map.is_mapped(fd));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "c\nr1\nr2\n");
        // after the mapping closed (exit with threads still running): write(2) on the same file
        log.write_line(b"r3\n", &ctx(&first));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "c\nr1\nr2\nr3\n");
        assert_eq!((log.written.load(Relaxed), log.lost.load(Relaxed)), (4, 0));

        // a later process at the same name (a reused pid, an exec) cuts an earlier blank end
        // (this one's descriptor, still holding the lock, goes first)
        log.release(fd, fd);
        // SAFETY: the log's descriptor, released above: nobody uses it any more.
        unsafe { libc::close(fd) };
        std::fs::write(&p, "old\n\n\n\n").unwrap();
        let log = Log::new(LogDest::Path(format!("{}/m-%p.jsonl", d.display())));
        log.write_line(b"new\n", &ctx(&first));
        log.finish();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\nc\nnew\n");

        // a name without the pid may be shared by several processes: write(2), never mapped
        let log = Log::new(LogDest::Path(format!("{}/shared.jsonl", d.display())));
        log.write_line(b"r\n", &ctx(&first));
        assert!(!log.map.is_mapped(log.fd.load(SeqCst)));
        assert_eq!(std::fs::read_to_string(d.join("shared.jsonl")).unwrap(), "c\nr\n");
    }

    /// The window full: the log closes its mapping (trimmed) and goes on with write(2), losing
    /// nothing; 8 threads meanwhile.
    #[test]
    fn a_full_mapping_goes_on_with_write_and_eight_threads_lose_nothing() {
        let d = tmp("mapfull");
        let mut log = Log::new(LogDest::Path(format!("{}/", d.display())));
        log.map = LogMap::new(64 << 10, 4096);
        let first = || b"c\n".to_vec();
        std::thread::scope(|s| {
            for t in 0..8 {
                let log = &log;
                let first = &first;
                s.spawn(move || {
                    for i in 0..2000 {
                        log.write_line(format!("{{\"t\":{t},\"i\":{i}}}\n").as_bytes(), &ctx(first));
                    }
                });
            }
        });
        assert!(!log.map.is_mapped(log.fd.load(SeqCst)), "64 KiB are full after ~3000 records");
        log.finish();
        let text = std::fs::read_to_string(d.join("mrshim-hostA-r3-p77.jsonl")).unwrap();
        let mut seen = std::collections::HashSet::new();
        for l in text.lines().skip(1) {
            assert!(seen.insert(l.to_string()), "twice: {l:?}");
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
            assert!(v["i"].as_u64().unwrap() < 2000);
        }
        assert_eq!(seen.len(), 16000);
        assert_eq!((log.written.load(Relaxed), log.lost.load(Relaxed)), (16001, 0));
    }

    /// What the close hook does on a mapped log: the blank end is gone before the application's
    /// close, and the application's file at that number gets nothing.
    #[test]
    fn a_released_mapped_log_is_trimmed_before_the_number_is_reused() {
        let d = tmp("maprelease");
        let log = Log::new(LogDest::Path(format!("{}/", d.display())));
        let first = || b"c\n".to_vec();
        log.write_line(b"r1\n", &ctx(&first));
        let fd = log.fd.load(SeqCst);
        assert!(log.map.is_mapped(fd));
        log.release(fd, fd);
        let p = d.join("mrshim-hostA-r3-p77.jsonl");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "c\nr1\n", "trimmed before the close");
        let app = d.join("app.txt");
        let f = std::fs::File::create(&app).unwrap();
        // SAFETY: both descriptors are valid; fd (the log's old one) is replaced by the app's file.
        assert_eq!(unsafe { libc::dup2(f.as_raw_fd(), fd) }, fd);
        log.write_line(b"r2\n", &ctx(&first));
        log.finish();
        assert_eq!(std::fs::read_to_string(&app).unwrap(), "");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "c\nr1\nr2\n");
        // SAFETY: fd is the application's copy made above.
        unsafe { libc::close(fd) };
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
