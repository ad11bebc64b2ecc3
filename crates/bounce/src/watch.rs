//! Run-time detection for a process that has gone passive (docs/bounce.md, "Run-time
//! detection"). Everything else the bounce layer does happens inside a verb the process calls; a
//! passive one-sided target (Mooncake's Transfer Engine, NIXL) calls none after its setup, so what
//! peers do to its bounce regions would only show at its `ibv_dereg_mr` or exit — never for one
//! that leaves with `_exit` or is killed. So while regions peers reach exist, a watcher thread
//! (started by libmrshim.so, src/preload/bounce.rs) looks at them every [`period`]:
//!
//! - while any thread posts or polls (the epoch and the empty-poll count of state.rs change: a
//!   post_send, a poll with or without completions, `ibv_wr_start`) it only reads those two
//!   counters — an active job pays nothing else, and is never reported;
//! - once neither has changed since the last look, it compares, a slice at a time under the
//!   region's sync lock and at most [`BUDGET`] per look (a large region takes several looks), the
//!   shadows of regions peers write with their baselines (a peer's write no sync brought to the
//!   application) and, for host memory, the buffers of regions peers read with their baselines
//!   (bytes the application wrote that no fold brought to the shadow peers' READs are served
//!   from). The application's buffer is read with `process_vm_readv`: a page it unmapped or
//!   protected meanwhile is skipped, never faulted on;
//! - what it finds and is still there, the process still passive, the interval
//!   (MRSHIM_BOUNCE_WATCH, 10 s by default) later is a violation: `unannounced_write`, or `stale_for_peers`.
//!   Once per region per passive stretch.
//!
//! A peer's write in a shadow is evidence that the process is not polling for it. Bytes the
//! application wrote and no post folded are not: announced jobs write bytes no peer will READ
//! (an all-reduce's reduced chunk, a buffer refilled before its next SEND) and leave them there
//! through a pause. So the application's bytes are compared only in a process that shows the
//! passive target's other marks ([`suspect`]): it has posted nothing and polled no completion
//! since it registered the region, or a peer wrote into its bounce regions unannounced.
//!
//! The watcher only reads: no byte of the application, shadow or baseline is changed here. A
//! forked child watches only regions it registered itself (an inherited shadow may not even be
//! mapped in it: rdma-core's fork support marks registered pages MADV_DONTFORK).

use crate::region::Region;
use crate::state::STATE;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one compare covers, under the region's sync lock (a post or poll that starts meanwhile
/// waits at most that long).
pub const SLICE: usize = 256 << 10;
/// Comparing stops after this long per look, and goes on from there at the next one.
pub const BUDGET: Duration = Duration::from_millis(4);
const PAGE: usize = 4096;

/// How often the watcher looks, for a given interval: four times per interval, at most every
/// 250 ms (a report comes at most about interval + 2 looks after the write).
pub fn period_for(interval: Duration) -> Duration {
    (interval / 4).clamp(Duration::from_millis(2), Duration::from_millis(250))
}

/// MRSHIM_BOUNCE_WATCH as the shim parsed it (None: off, or no shim).
pub fn interval() -> Option<Duration> {
    mrshim_core::shim_if_initialized().and_then(|s| s.config()).and_then(|c| c.bounce_watch)
}

/// How often the watcher of this process looks.
pub fn period() -> Duration {
    period_for(interval().unwrap_or(mrshim_core::config::WATCH_DEFAULT))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Shadow against baseline: a peer's write no sync delivered.
    PeerWrite,
    /// Application against baseline (host memory): bytes no fold brought to the shadow.
    AppWrite,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::PeerWrite => "unannounced_write",
            Kind::AppWrite => "stale_for_peers",
        }
    }
}

/// One region's compare, going on across looks.
struct Scan {
    region: Arc<Region>,
    kind: Kind,
    /// Where the next slice starts.
    at: usize,
    /// A difference found while passive: when, and at which offset.
    found: Option<(Instant, usize)>,
    said: bool,
}

/// The watcher's state (state.rs: `STATE.watch`).
pub(crate) struct Watch {
    /// The epoch and empty-poll count at the last look.
    activity: Option<(u64, u32)>,
    scans: Vec<Scan>,
    /// Where the application's bytes are read into.
    scratch: Vec<u8>,
}

impl Watch {
    pub(crate) const fn new() -> Self {
        Watch { activity: None, scans: Vec::new(), scratch: Vec::new() }
    }
}

impl Default for Watch {
    fn default() -> Self {
        Watch::new()
    }
}

/// What a look found to report (said after the watcher's lock is released).
pub(crate) struct Found {
    pub(crate) kind: Kind,
    pub(crate) app: u64,
    pub(crate) len: u64,
    pub(crate) first: usize,
    pub(crate) after: Duration,
}

fn activity() -> (u64, u32) {
    (STATE.epoch.load(Ordering::Relaxed), STATE.polls.load(Ordering::Relaxed))
}

/// A peer's write into a bounce region of this process was found that nothing announced (a
/// violation said elsewhere): from now on, bytes its application leaves out of the shadows are
/// looked at too ([`suspect`]).
pub(crate) fn peers_unannounced() {
    STATE.unannounced_seen.store(true, Ordering::Release);
}

/// Whether the application's bytes of `r` are to be compared: the process has posted nothing
/// and polled no completion since `r` was registered (a passive target after its setup), or
/// peers wrote its memory unannounced.
fn suspect(r: &Region) -> bool {
    STATE.epoch.load(Ordering::Acquire) == r.born || STATE.unannounced_seen.load(Ordering::Acquire)
}

/// A region peers can reach was registered: the watcher is wanted ([`claim`]).
pub(crate) fn region_live(r: &Region) {
    if r.remote_write || r.remote_read {
        STATE.watch_wanted.store(true, Ordering::Release);
    }
}

/// Whether the caller is to start this process's watcher now: regions peers reach exist, the
/// watcher is not off, and none runs yet (then it runs from now on: [`tick`] says when to stop).
pub fn claim() -> bool {
    STATE.watch_wanted.load(Ordering::Acquire)
        && interval().is_some()
        && !STATE.watching.load(Ordering::Acquire)
        && !STATE.watching.swap(true, Ordering::AcqRel)
}

/// The watcher could not start (no thread): a later region tries again.
pub fn unclaim() {
    STATE.watching.store(false, Ordering::Release);
}

/// The process exits: the watcher stops (what is left is the exit check's, live.rs `at_exit`).
pub(crate) fn exiting() {
    STATE.watch_exiting.store(true, Ordering::Release);
}

/// One look of the watcher thread, now. False: stop the thread (the process exits, or the
/// watcher is off).
pub fn tick() -> bool {
    if STATE.watch_exiting.load(Ordering::Acquire) {
        return false;
    }
    let Some(interval) = interval() else { return false };
    let found = check(&mut STATE.watch.lock(), Instant::now(), interval, BUDGET);
    for f in found {
        if STATE.watch_exiting.load(Ordering::Acquire) {
            return false;
        }
        report(&f);
    }
    true
}

/// One look at `now` ([`tick`] without the clock and the configuration): what to report.
pub(crate) fn check(w: &mut Watch, now: Instant, interval: Duration, budget: Duration) -> Vec<Found> {
    let act = activity();
    if w.activity != Some(act) {
        // Posting or polling: nothing to look at, and what was found waits for the next
        // passive stretch (a sync may deliver it now).
        w.activity = Some(act);
        w.scans.clear();
        return Vec::new();
    }
    refresh(w);
    let deadline = now + budget;
    let mut out = Vec::new();
    let Watch { scans, scratch, .. } = w;
    for s in scans.iter_mut() {
        if s.said || s.region.gone.load(Ordering::Acquire) {
            continue;
        }
        if let Some((t, first)) = s.found {
            if now.duration_since(t) < interval {
                continue;
            }
            // Still there? (The process has stayed passive, so it must be; a slice says.)
            let from = first - first % SLICE;
            match differs(&s.region, s.kind, from, scratch) {
                Some(d) => {
                    s.said = true;
                    if s.kind == Kind::PeerWrite {
                        peers_unannounced();
                    }
                    out.push(Found {
                        kind: s.kind,
                        app: s.region.app,
                        len: s.region.len,
                        first: d,
                        after: now.duration_since(t),
                    });
                }
                None => {
                    s.found = None;
                    s.at = from;
                }
            }
            continue;
        }
        while Instant::now() < deadline {
            if activity() != act {
                // the process woke up: the next look starts over
                return out;
            }
            let len = s.region.len as usize;
            if s.at >= len {
                s.at = 0;
                break;
            }
            if let Some(d) = differs(&s.region, s.kind, s.at, scratch) {
                s.found = Some((now, d));
                break;
            }
            s.at += SLICE;
        }
    }
    out
}

/// The scans of this look: one per kind for each live region of this process peers reach
/// (regions sharing mappings, once), kept from the last look where they still exist.
fn refresh(w: &mut Watch) {
    let pid = std::process::id();
    let regions: Vec<Arc<Region>> = STATE.regions.lock().iter().filter(|r| r.pid == pid).cloned().collect();
    w.scans.retain(|s| regions.iter().any(|r| Arc::ptr_eq(r, &s.region)));
    let mut seen: Vec<usize> = Vec::new();
    for r in &regions {
        let maps = Arc::as_ptr(&r.maps) as usize;
        if seen.contains(&maps) || r.gone.load(Ordering::Acquire) || !r.has_baseline() {
            continue;
        }
        seen.push(maps);
        let kinds = [
            (r.remote_write, Kind::PeerWrite),
            (r.remote_read && r.engine.app_is_host() && suspect(r), Kind::AppWrite),
        ];
        for (wanted, kind) in kinds {
            if wanted && !w.scans.iter().any(|s| s.kind == kind && Arc::ptr_eq(&s.region, r)) {
                w.scans.push(Scan { region: r.clone(), kind, at: 0, found: None, said: false });
            }
        }
    }
}

/// The first offset in the slice of `r` at `from` where its shadow (PeerWrite) or the
/// application's buffer (AppWrite) differs from its baseline, if any. Under the region's sync
/// lock: a fold or sync in another thread is never seen half done.
fn differs(r: &Region, kind: Kind, from: usize, scratch: &mut Vec<u8>) -> Option<usize> {
    let len = r.len as usize;
    if from >= len {
        return None;
    }
    let n = SLICE.min(len - from);
    let _one_at_a_time = r.maps.sync.lock();
    // The baseline is a live mapping of the region's length (the Arc keeps it mapped), written
    // only under the lock held here; read only.
    // SAFETY: as just said.
    let ba = unsafe { std::slice::from_raw_parts((r.baseline + from) as *const u8, n) };
    match kind {
        Kind::PeerWrite => {
            // The shadow, likewise a live mapping of the region's length; the NIC may be writing
            // it (a byte read mid-write is compared again before it is reported).
            // SAFETY: as just said.
            let sh = unsafe { std::slice::from_raw_parts((r.shadow + from) as *const u8, n) };
            first_difference(sh, ba).map(|i| from + i)
        }
        Kind::AppWrite => {
            scratch.resize(SLICE, 0);
            let mut o = 0;
            while o < n {
                let got = read_own(r.app + (from + o) as u64, &mut scratch[..n - o]);
                if let Some(i) = first_difference(&scratch[..got], &ba[o..o + got]) {
                    return Some(from + o + i);
                }
                // past what could be read: the next page (one unmapped or protected is skipped)
                o += got;
                if o < n {
                    o = (o + PAGE) - (r.app as usize + from + o) % PAGE;
                }
            }
            None
        }
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Reads this process's memory at `addr` into `buf` without faulting: how many bytes could be
/// read (a page the application unmapped or made unreadable stops it).
fn read_own(addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // The kernel reads the remote range through this process's page tables and reports what it
    // cannot read as an error or a short count; `local` is our own buffer of that length.
    // SAFETY: as just said.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        0
    } else {
        n as usize
    }
}

/// The violation a look found.
fn report(f: &Found) {
    let secs = f.after.as_secs_f64();
    let msg = match f.kind {
        Kind::PeerWrite => format!(
            "bytes a peer wrote to the bounce region at {:#x} (length {}, first at offset {}) have not reached \
             the application for {secs:.1} s, while no thread of this process posted or polled a completion \
             queue: nothing brings them over (a passive one-sided target, such as Mooncake's Transfer Engine or \
             NIXL, is outside what MRSHIM_BOUNCE_REMOTE=announced declares); register the buffer directly \
             (dmabuf, GPU peer memory) or use the job-wide fallback. If this process announces them later (a \
             poll or an MPI fence after a long compute phase), none was lost: set MRSHIM_BOUNCE_WATCH above the \
             job's longest pause",
            f.app, f.len, f.first
        ),
        Kind::AppWrite => format!(
            "bytes the application wrote to the bounce region at {:#x} (length {}, first at offset {}) have not \
             reached the shadow peers' RDMA READs are served from for {secs:.1} s, while no thread of this \
             process posted or polled: a peer reading them now gets the older bytes (a passive one-sided \
             target, such as Mooncake's Transfer Engine or NIXL, is outside what MRSHIM_BOUNCE_REMOTE=announced \
             declares); register the buffer directly (dmabuf, GPU peer memory) or use the job-wide fallback. If \
             every READ of them is announced by a message this process posts later (an MPI fence), none was \
             served stale: set MRSHIM_BOUNCE_WATCH above the job's longest pause",
            f.app, f.len, f.first
        ),
    };
    mrshim_core::violation::report(f.kind.name(), &msg);
}

/// Whether the calling thread is the last one of the process (`Threads:` of /proc/self/status):
/// then the watcher ends, and a process whose main thread called `pthread_exit` is not kept
/// alive by it.
pub fn alone() -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else { return false };
    s.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse::<u32>().ok()) == Some(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_come_four_times_per_interval_and_at_most_every_250_ms() {
        assert_eq!(period_for(Duration::from_secs(1)), Duration::from_millis(250));
        assert_eq!(period_for(Duration::from_secs(60)), Duration::from_millis(250));
        assert_eq!(period_for(Duration::from_millis(100)), Duration::from_millis(25));
        assert_eq!(period_for(Duration::from_millis(4)), Duration::from_millis(2));
    }

    /// The watcher ends when it is the last thread of its process (a main thread that called
    /// `pthread_exit`): `alone` says so in a one-thread process (a forked child of the test) and
    /// not in the test's own, which has its harness's threads too.
    #[test]
    fn alone_is_true_only_for_the_last_thread() {
        let other = std::thread::spawn(|| std::thread::sleep(Duration::from_millis(200)));
        assert!(!alone());
        // SAFETY: fork in a test; the child only reads /proc and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = alone();
            // SAFETY: ends the child without the test harness's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 3 }) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
        other.join().unwrap();
    }

    #[test]
    fn reading_own_memory_stops_at_an_unmapped_page_without_faulting() {
        let mut buf = vec![0u8; 2 * PAGE];
        // SAFETY: a fresh anonymous mapping of two pages; the second is unmapped at once.
        let p = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            std::ptr::write_bytes(p.cast::<u8>(), 0x42, PAGE);
            libc::munmap(p.cast::<u8>().add(PAGE).cast(), PAGE);
            p as u64
        };
        assert_eq!(read_own(p, &mut buf), PAGE);
        assert!(buf[..PAGE].iter().all(|&b| b == 0x42));
        assert_eq!(read_own(p + PAGE as u64, &mut buf), 0);
        // SAFETY: the first page, still ours.
        unsafe { libc::munmap(p as *mut libc::c_void, PAGE) };
    }
}
