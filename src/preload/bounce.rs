//! Host bounce buffers (the `bounce` strategy) and the MR fix-ups of strategies that register
//! through another path. Contract: docs/bounce.md.
//!
//! A region the NIC refused gets a page-aligned host shadow, registered with
//! `ibv_reg_mr_iova2(shadow, len, iova = the caller's iova)`: the caller's SGE addresses and the
//! rkey it hands to peers keep working. The MR handed back says `addr`/`length` as asked; the
//! real `ibv_dereg_mr` sees what rdma-core expects again. Coherence comes from the context's
//! `ops` (the static-inline post/poll calls go through them), patched only while a bounce region
//! exists in that context:
//! - post_send: SEND / RDMA WRITE / WRITE_WITH_IMM SGE ranges in a region: app → shadow first;
//!   RDMA READ into a region: shadow → app when a later completion of that QP is polled;
//! - post_recv: remember the WR's ranges; poll_cq: a RECV completion copies shadow → app;
//! - any RECV / RECV_RDMA_WITH_IMM completion also copies what peers wrote into regions with
//!   REMOTE_WRITE (the bytes that differ from the shadow's last synced state) shadow → app, so data
//!   a peer wrote is visible once the completion announcing it is polled, and what the
//!   application wrote to its own buffer meanwhile stays;
//! - the `ibv_wr_*` builder API: the same rules, applied by wrapping `wr_start`, `wr_rdma_read`,
//!   `wr_set_sge(_list)` of every `ibv_qp_ex` of that context (section at the end).

use super::copy::{CopyEngine, HostCopy};
use super::dirty;
use mrshim_core::internal::guarded;
use mrshim_forklock::ForkLock;
use mrshim_verbs as v;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

const PAGE: u64 = 4096;

/// Kept from one sync to the next (under `Region::sync`): no allocation per message.
#[derive(Default)]
struct Scratch {
    /// Device memory compared through a copy.
    bytes: Vec<u8>,
    /// The changed runs of the last compare.
    runs: Vec<(usize, usize)>,
    /// The pages the kernel reported written.
    pages: Vec<(u64, u64)>,
}

/// Pages touched by changed runs (what drives a resting tracked range back to tracking).
fn changed_pages(runs: &[(usize, usize)]) -> usize {
    runs.iter().map(|&(a, b)| (b - 1) / PAGE as usize - a / PAGE as usize + 1).sum()
}

pub struct Region {
    ctx: usize,
    lkey: u32,
    /// The caller's view: IOVA range [iova, iova+len) and its buffer at `app`.
    iova: u64,
    len: u64,
    app: u64,
    /// Host pointer for `iova`.
    shadow: usize,
    /// What the shadow held after the last copy either way: bytes that differ from it now were
    /// written by a peer (so only those go to the application's buffer), bytes of the
    /// application's buffer that differ from it were written by the application (so only those
    /// go to the shadow). Kept only for regions peers can write or read.
    baseline: usize,
    /// The shadow's and baseline's mappings, shared by every region of the same memory.
    maps: Arc<Maps>,
    remote_write: bool,
    remote_read: bool,
    engine: Box<dyn CopyEngine>,
    /// Serialises the whole-region syncs; holds what they reuse (device copy, changed runs).
    sync: ForkLock<Scratch>,
    /// The [`EPOCH`] of the last fold: receives posted back to back fold once.
    folded: AtomicU64,
    /// The kernel tracks writes to the application's pages (host memory, crates/dirty).
    track: Option<mrshim_dirty::Id>,
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(id) = self.track {
            dirty::untrack(id);
        }
    }
}

/// Bumped by every post_send and every poll that returns completions in a patched context: the
/// application reacts to those, so its buffer may have changed since; between two post_recv
/// calls with neither in between, the first one's fold stands.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// In a forked child (one thread): every bounce lock a parent thread held at the fork is free
/// again, its possibly half-updated value replaced by an empty one (a child forked mid-update loses
/// that table, never hangs on it); locks nobody held keep their values.
///
/// # Safety
/// Only from the atfork child handler: the child's one thread, not inside the shim.
pub unsafe fn after_fork_child() {
    // SAFETY: the caller's contract; no guard of these locks is alive in this thread (the
    // REGIONS guard below is taken after REGIONS itself was recovered, and each region's sync
    // lock is recovered while only REGIONS is held).
    unsafe {
        REGIONS.recover_in_child(Vec::new);
        for r in REGIONS.lock().iter() {
            r.sync.recover_in_child(Scratch::default);
        }
        FIXES.recover_in_child(Vec::new);
        POOL.recover_in_child(Vec::new);
        PATCHING.recover_in_child(|| ());
        PENDING_RECV.map.recover_in_child(|| None);
        PENDING_READ.map.recover_in_child(|| None);
    }
}

/// MRSHIM_DEBUG_PANIC=bounce: panic here (the wrappers' guards must catch it).
#[inline]
fn debug_panic() {
    if let Some(s) = mrshim_core::shim_if_initialized() {
        s.debug_panic(mrshim_core::config::PanicAt::Bounce);
    }
}

fn bump_epoch() {
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

impl Region {
    fn range(&self, addr: u64, len: u64) -> Option<(u64, usize)> {
        let end = addr.checked_add(len)?;
        (addr >= self.iova && end <= self.iova + self.len).then(|| (addr - self.iova, len as usize))
    }
    /// Application → shadow. For regions peers write, through the baseline: it holds exactly
    /// what the shadow was given, so a peer's write that lands meanwhile still shows as a change.
    fn to_shadow(&self, off: u64, n: usize) {
        self.through_baseline(off, n, |ba, sh, o, k| {
            let dst = ba.unwrap_or(sh);
            if let Err(e) = self.engine.to_host(dst as *mut u8, self.app + o, k) {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
            if let Some(ba) = ba {
                // SAFETY: both mappings cover the region's length; [o, o+k) is within it.
                unsafe { std::ptr::copy_nonoverlapping(ba as *const u8, sh as *mut u8, k) };
            }
        });
    }
    /// Shadow → application. For regions peers write, through the baseline: a snapshot first,
    /// then the application gets exactly the snapshot, so bytes a peer writes while this runs
    /// differ from the baseline and go over at the next sync instead of being lost.
    fn to_app(&self, off: u64, n: usize) {
        self.through_baseline(off, n, |ba, sh, o, k| {
            if let Some(ba) = ba {
                // SAFETY: as in to_shadow.
                unsafe { std::ptr::copy_nonoverlapping(sh as *const u8, ba as *mut u8, k) };
            }
            if let Err(e) = self.engine.to_app(self.app + o, ba.unwrap_or(sh) as *const u8, k) {
                warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
        });
    }
    /// Runs `step(baseline, shadow, offset, len)` over [off, off+n): for host memory in 16 KiB
    /// steps, so the second copy of each step reads the baseline from cache; in one step for a
    /// GPU runtime (each of its copies is a call and a stream sync). No baseline: one step.
    fn through_baseline(&self, off: u64, n: usize, mut step: impl FnMut(Option<usize>, usize, u64, usize)) {
        const STEP: usize = 16 << 10;
        let unit = if self.has_baseline() && self.engine.app_is_host() { STEP } else { n.max(1) };
        let mut done = 0;
        while done < n {
            let k = unit.min(n - done);
            let o = off as usize + done;
            step(self.has_baseline().then_some(self.baseline + o), self.shadow + o, o as u64, k);
            done += k;
        }
    }
    fn has_baseline(&self) -> bool {
        self.maps.baseline.1 != 0
    }
    /// Whether the application's host buffer is still mapped. A registration may outlive it:
    /// UCX's registration cache keeps an MR after the buffer was freed until it processes the
    /// unmap event, and the NIC keeps the pinned pages meanwhile; the shim must not touch the
    /// hole (one msync(MS_ASYNC), which only checks the mappings). Device memory: the engine's
    /// copies report errors themselves.
    fn app_mapped(&self) -> bool {
        if !self.engine.app_is_host() {
            return true;
        }
        let start = self.app & !(PAGE - 1);
        // SAFETY: MS_ASYNC only validates that [start, app+len) is mapped; nothing is written.
        unsafe { libc::msync(start as *mut libc::c_void, (self.app + self.len - start) as usize, libc::MS_ASYNC) == 0 }
    }
    /// The runs where the shadow (or, with `now`, the given view of the application's buffer)
    /// differs from the baseline, into `runs`.
    fn changed(&self, now: Option<&[u8]>, runs: &mut Vec<(usize, usize)>) {
        let len = self.len as usize;
        // SAFETY: shadow and baseline are live mappings of at least len bytes; only read here.
        let (sh, ba) = unsafe {
            (
                std::slice::from_raw_parts(self.shadow as *const u8, len),
                std::slice::from_raw_parts(self.baseline as *const u8, len),
            )
        };
        runs.clear();
        mrshim_core::diff::for_each_run(now.unwrap_or(sh), ba, |a, b| runs.push((a, b)));
    }
    /// Before a receive is posted (regions peers write) and before a post that may tell a peer
    /// to read (regions peers read): bytes the application changed in its buffer since the last
    /// sync go to the shadow (and the baseline), so that what a peer writes next is told apart
    /// from them even where it writes the value the shadow held before, and what a peer reads
    /// after hearing from us is what the application wrote before it spoke. Host memory is
    /// compared in place, only the pages written since the last fold where the kernel tracks
    /// them (crates/dirty); device memory through one copy into a scratch buffer kept for the
    /// next time. `once_per_epoch`: receives posted back to back fold once (docs/bounce.md).
    fn fold_app_writes(&self, once_per_epoch: bool) {
        let epoch = EPOCH.load(Ordering::Acquire);
        if once_per_epoch && self.folded.load(Ordering::Acquire) == epoch || !self.app_mapped() {
            return;
        }
        let len = self.len as usize;
        let mut guard = self.sync.lock();
        let Scratch { bytes, runs, pages } = &mut *guard;
        let now: &[u8] = if self.engine.app_is_host() {
            // SAFETY: host memory the region covers, readable for len bytes (checked when the
            // shadow was prepared, mapped as just checked); racing writes by the application
            // are what a NIC would see too.
            unsafe { std::slice::from_raw_parts(self.app as *const u8, len) }
        } else {
            bytes.resize(len, 0);
            if let Err(e) = self.engine.to_host(bytes.as_mut_ptr(), self.app, len) {
                return warn_once(&format!("{} engine: {e}", self.engine.name()));
            }
            bytes
        };
        pages.clear();
        match self.track.map(|id| dirty::written(id, pages)) {
            Some(mrshim_dirty::Answer::Written) => {
                runs.clear();
                for &(a, b) in pages.iter() {
                    // the written pages, clipped to the region, as offsets into it
                    let (a, b) = (a.max(self.app) - self.app, b.min(self.app + self.len) - self.app);
                    if a < b {
                        self.changed_in(now, a as usize, b as usize, runs);
                    }
                }
            }
            answer => {
                self.changed(Some(now), runs);
                if let (Some(id), Some(_)) = (self.track, answer) {
                    dirty::compared(id, changed_pages(runs));
                }
            }
        }
        for &(a, b) in runs.iter() {
            // SAFETY: shadow and baseline are live, each [a, b) is within len, and neither
            // aliases `now` (the application's buffer or the scratch copy).
            unsafe {
                std::ptr::copy_nonoverlapping(now[a..].as_ptr(), (self.shadow + a) as *mut u8, b - a);
                std::ptr::copy_nonoverlapping(now[a..].as_ptr(), (self.baseline + a) as *mut u8, b - a);
            }
        }
        self.folded.store(epoch, Ordering::Release);
    }
    /// The runs in [a, b) where `now` differs from the baseline, appended to `runs`.
    fn changed_in(&self, now: &[u8], a: usize, b: usize, runs: &mut Vec<(usize, usize)>) {
        // SAFETY: the baseline is a live mapping of at least len >= b bytes; only read here.
        let ba = unsafe { std::slice::from_raw_parts((self.baseline + a) as *const u8, b - a) };
        mrshim_core::diff::for_each_run(&now[a..b], ba, |x, y| runs.push((a + x, a + y)));
    }
    /// Copies to the application only the bytes a peer changed in the shadow since the last sync,
    /// so what the application wrote to its buffer meanwhile is not overwritten.
    fn sync_peer_writes(&self) {
        let mut one_at_a_time = self.sync.lock();
        let runs = &mut one_at_a_time.runs;
        self.changed(None, runs);
        if runs.is_empty() || !self.app_mapped() {
            return;
        }
        for &(a, b) in runs.iter() {
            self.to_app(a as u64, b - a);
        }
    }
}

/// The one loud line for copies that did not happen (later ones are not repeated): the
/// application may now see stale bytes in a bounce region, and must be told so.
fn warn_once(e: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::AcqRel) {
        mrshim_core::stderr_line(&format!(
            "mrshim WARN bounce buffer copy failed: {e}; data in bounce regions may be stale"
        ));
    }
}

/// The bounce layer's part of a post or poll: a panic in it is caught (and counted), and, since
/// that call's copies did not happen, says loudly that data may be stale.
fn guarded_copies(what: &str, f: impl FnOnce()) {
    if guarded(what, f).is_none() {
        warn_once(&format!("an internal error in {what} skipped its copies"));
    }
}

/// The mappings behind a shadow (and its baseline, length 0 when there is none). Registrations
/// of memory inside an existing bounce region share them, as MRs of the same memory share its
/// pages on a NIC: Open MPI's one-sided component and UCX register a window once per device,
/// a peer puts through one MR and gets through another, and with a shadow each the get would
/// read bytes the put never reached. Unmapped (back to the pool) with the last region.
struct Maps {
    shadow: (usize, usize),
    baseline: (usize, usize),
}

impl Drop for Maps {
    fn drop(&mut self) {
        unmap(self.shadow);
        unmap(self.baseline);
    }
}

/// A live region with a baseline whose buffer contains [app, app+len): the new region shares
/// its shadow.
fn containing(app: u64, len: u64) -> Option<Arc<Region>> {
    let regions = REGIONS.lock();
    regions.iter().find(|r| r.has_baseline() && r.app <= app && app + len <= r.app + r.len).cloned()
}

/// A shadow built for an attempt, not yet backed by an MR.
pub struct Shadow {
    region: Region,
}

impl Shadow {
    /// The host address to register (same page offset as the caller's IOVA).
    pub fn addr(&self) -> u64 {
        self.region.shadow as u64
    }
}

/// Builds a shadow for [app, app+len) and fills it with the current contents.
pub fn prepare(app: u64, len: u64, iova: u64, access: u32) -> Result<Shadow, String> {
    if len == 0 || iova % PAGE != app % PAGE {
        return Err("length 0, or iova and address with different page offsets".into());
    }
    let engine: Box<dyn CopyEngine> = match super::gpu::device_engine(app) {
        Some(e) => e?,
        None if host_readable(app, len) => Box::new(HostCopy),
        None => {
            let disabled = super::gpu::disabled();
            return Err(if disabled.is_empty() {
                format!("{app:#x} is neither host memory nor device memory of a loaded GPU runtime (CUDA, HIP, MACA)")
            } else {
                format!("{app:#x} is not host memory and no trusted GPU runtime owns it: {}", disabled.join("; "))
            });
        }
    };
    let remote_write = access & mrshim_verbs::access::REMOTE_WRITE != 0;
    let remote_read = access & mrshim_verbs::access::REMOTE_READ != 0;
    let host = engine.app_is_host();
    let region = |shadow, baseline, maps, track| Region {
        ctx: 0,
        lkey: 0,
        iova,
        len,
        app,
        shadow,
        baseline,
        maps,
        remote_write,
        remote_read,
        engine,
        sync: ForkLock::new(Scratch::default()),
        folded: AtomicU64::new(u64::MAX),
        track,
    };
    if let Some(r) = containing(app, len) {
        // Peers may have written the shared shadow since its last sync: only the bytes the
        // application changed go over (a fold), not the whole buffer.
        let d = (app - r.app) as usize;
        let region = region(r.shadow + d, r.baseline + d, r.maps.clone(), None);
        region.fold_app_writes(false);
        return Ok(Shadow { region });
    }
    let off = app % PAGE;
    let maplen = ((off + len).div_ceil(PAGE) * PAGE) as usize;
    let with_baseline = remote_write || remote_read;
    let p = map_anon(maplen, "shadow")?;
    let b = if with_baseline { map_anon(maplen, "baseline").inspect_err(|_| unmap((p, maplen)))? } else { 0 };
    let maps = Arc::new(Maps { shadow: (p, maplen), baseline: (b, if with_baseline { maplen } else { 0 }) });
    // Tracked before the first copy: a write after it is either in the copy or reported.
    let track = if with_baseline && host { dirty::track(app, len) } else { None };
    let region = region(p + off as usize, b + off as usize, maps, track);
    region.to_shadow(0, len as usize);
    Ok(Shadow { region })
}

fn host_readable(addr: u64, len: u64) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut at = addr;
    let end = addr + len;
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (Some(r), Some(perm)) = (f.next(), f.next()) else { continue };
        let Some((s, e)) = r.split_once('-') else { continue };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else { continue };
        if s <= at && at < e && perm.starts_with('r') {
            at = e;
            if at >= end {
                return true;
            }
        }
    }
    false
}

/// The attempt failed: its shadow goes (its mappings with it, unless shared).
pub fn abandon(s: Shadow) {
    drop(s);
}

/// Mappings of deregistered shadows and baselines, kept for the next region of the same size
/// (up to [`POOL_MAX`] bytes): a job that registers and deregisters its buffers again and again
/// (each iteration, each communicator) would otherwise fault in and zero every page each time.
/// Only `try_lock`ed: a child forked while a parent thread held it maps afresh.
static POOL: ForkLock<Vec<(usize, usize)>> = ForkLock::new(Vec::new());
const POOL_MAX: usize = 256 << 20;

/// A private anonymous mapping of `n` bytes (from the pool, or fresh), owned by a region until
/// deregistration.
fn map_anon(n: usize, what: &str) -> Result<usize, String> {
    if let Some(mut pool) = POOL.try_lock() {
        if let Some(i) = pool.iter().position(|&(_, len)| len == n) {
            return Ok(pool.swap_remove(i).0);
        }
    }
    // SAFETY: a new mapping nobody else references; no address hint.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            n,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap of a {n}-byte {what} failed: {}", std::io::Error::last_os_error()));
    }
    Ok(p as usize)
}

/// Back to the pool (stale contents: a region fills all of its bytes before use, and its MR
/// covers only those), or unmapped when the pool is full.
fn unmap((p, n): (usize, usize)) {
    if n == 0 {
        return;
    }
    if let Some(mut pool) = POOL.try_lock() {
        if pool.iter().map(|e| e.1).sum::<usize>() + n <= POOL_MAX {
            pool.push((p, n));
            return;
        }
    }
    // SAFETY: unmapping a shadow this module mapped and nobody references any more.
    unsafe { libc::munmap(p as *mut libc::c_void, n) };
}

/// What an MR needs before and after the real ibv_dereg_mr.
enum Fix {
    /// mr->addr as rdma-core set it.
    Addr(u64),
    /// Plus a dmabuf fd the shim exported for it.
    AddrFd(u64, i32),
    Bounce(u64, Arc<Region>),
}

static FIXES: ForkLock<Vec<(usize, Fix)>> = ForkLock::new(Vec::new());
static REGIONS: ForkLock<Vec<Arc<Region>>> = ForkLock::new(Vec::new());
/// Number of live bounce regions: the post/poll wrappers' fast path checks it.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn mr_addr(mr: usize) -> &'static mut u64 {
    // SAFETY: mr is a live struct ibv_mr the real registration returned; addr is a plain field.
    unsafe { &mut *(std::ptr::addr_of_mut!((*(mr as *mut v::ibv_mr)).addr) as *mut u64) }
}

/// A strategy registered through another path: show the caller the `addr` it asked for.
pub fn adopt_addr(mr: usize, caller_addr: u64, exported_fd: Option<i32>) {
    let a = mr_addr(mr);
    let real = std::mem::replace(a, caller_addr);
    let fix = match exported_fd {
        Some(fd) => Fix::AddrFd(real, fd),
        None => Fix::Addr(real),
    };
    FIXES.lock().push((mr, fix));
}

/// The shadow's MR exists: the region goes live and its context gets the coherence wrappers.
pub fn adopt(s: Shadow, mr: usize) {
    let mut r = s.region;
    // SAFETY: mr is the live MR just registered on the shadow.
    let m = unsafe { &*(mr as *const v::ibv_mr) };
    r.ctx = m.context as usize;
    r.lkey = m.lkey;
    let real = std::mem::replace(mr_addr(mr), r.app);
    let r = Arc::new(r);
    REGIONS.lock().push(r.clone());
    lkey_slot(r.lkey).fetch_add(1, Ordering::AcqRel);
    LIVE.fetch_add(1, Ordering::AcqRel);
    patch(r.ctx);
    FIXES.lock().push((mr, Fix::Bounce(real, r)));
}

/// Before the real ibv_dereg_mr: give rdma-core its MR back. Returns what to clean up after.
pub fn before_dereg(mr: usize) -> Option<Box<dyn FnOnce(bool)>> {
    let fix = {
        let mut f = FIXES.lock();
        let i = f.iter().position(|(m, _)| *m == mr)?;
        f.swap_remove(i).1
    };
    Some(match fix {
        Fix::Addr(a) => {
            *mr_addr(mr) = a;
            Box::new(|_| {})
        }
        Fix::AddrFd(a, fd) => {
            *mr_addr(mr) = a;
            Box::new(move |ok| {
                if ok {
                    // SAFETY: closing the dmabuf fd this shim exported for the MR.
                    unsafe { libc::close(fd) };
                }
            })
        }
        Fix::Bounce(a, r) => {
            *mr_addr(mr) = a;
            Box::new(move |ok| {
                if !ok {
                    return; // the MR lives on: keep serving it
                }
                REGIONS.lock().retain(|x| !Arc::ptr_eq(x, &r));
                lkey_slot(r.lkey).fetch_sub(1, Ordering::AcqRel);
                LIVE.fetch_sub(1, Ordering::AcqRel);
                unpatch_if_unused(r.ctx);
                // The mappings go with the last reference (a pending range may hold one).
            })
        }
    })
}

// ----------------------------------------------------------------- context ops

type PostSend = unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_send_wr, *mut *mut v::ibv_send_wr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_recv_wr, *mut *mut v::ibv_recv_wr) -> c_int;
type PollCq = unsafe extern "C" fn(*mut v::ibv_cq, c_int, *mut mrshim_verbs::sys::ibv_wc) -> c_int;

/// An append-only list of leaked nodes: lookups from the post/poll wrappers take no lock, and
/// a wrapper that read a patched pointer just before it was restored still finds its provider.
/// Pushed to only under PATCHING.
struct Leaked<T: 'static> {
    head: AtomicPtr<Node<T>>,
}

struct Node<T: 'static> {
    item: T,
    next: *const Node<T>,
}

impl<T> Leaked<T> {
    const fn new() -> Self {
        Leaked { head: AtomicPtr::new(std::ptr::null_mut()) }
    }
    fn iter(&self) -> impl Iterator<Item = &'static T> {
        let mut p = self.head.load(Ordering::Acquire).cast_const();
        std::iter::from_fn(move || {
            // SAFETY: nodes are leaked Boxes published with Release, never freed.
            let n = unsafe { p.as_ref()? };
            p = n.next;
            Some(&n.item)
        })
    }
    fn push(&self, item: T) -> &'static T {
        let n = Box::leak(Box::new(Node { item, next: self.head.load(Ordering::Acquire) }));
        self.head.store(n, Ordering::Release);
        &n.item
    }
}

/// A provider function saved in `slot` by a patch.
fn provider<F>(slot: &AtomicUsize) -> F {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: only called for slots a patch filled with the provider's non-null function of
    // type F (a pointer-sized function pointer) before installing the wrapper that calls it.
    unsafe { std::mem::transmute_copy::<usize, F>(&slot.load(Ordering::Acquire)) }
}

/// The provider's own ops of one patched context.
struct Orig {
    ctx: usize,
    send: AtomicUsize,
    recv: AtomicUsize,
    poll: AtomicUsize,
}

static ORIGS: Leaked<Orig> = Leaked::new();
/// Serialises patching and restoring.
static PATCHING: ForkLock<()> = ForkLock::new(());

fn orig(ctx: usize) -> Option<&'static Orig> {
    ORIGS.iter().find(|o| o.ctx == ctx)
}

fn patch(ctx: usize) {
    let _g = PATCHING.lock();
    // SAFETY: ctx is a live ibv_context (from the MR); its ops are plain function pointers that
    // the static-inline verbs read on every call. Pointer-sized aligned stores are atomic.
    unsafe {
        let ops = &mut (*(ctx as *mut v::ibv_context)).ops;
        let (Some(send), Some(recv), Some(poll)) = (ops.post_send, ops.post_recv, ops.poll_cq) else { return };
        if is_patched(ctx) {
            return;
        }
        let o = orig(ctx).unwrap_or_else(|| {
            ORIGS.push(Orig { ctx, send: AtomicUsize::new(0), recv: AtomicUsize::new(0), poll: AtomicUsize::new(0) })
        });
        o.send.store(send as usize, Ordering::Release);
        o.recv.store(recv as usize, Ordering::Release);
        o.poll.store(poll as usize, Ordering::Release);
        ops.post_send = Some(post_send);
        ops.post_recv = Some(post_recv);
        ops.poll_cq = Some(poll_cq);
    }
    each_qpx(ctx, |n| n.patch());
}

fn unpatch_if_unused(ctx: usize) {
    let _g = PATCHING.lock();
    if REGIONS.lock().iter().any(|r| r.ctx == ctx) {
        return;
    }
    if let Some(o) = orig(ctx) {
        // SAFETY: as in patch(): restoring the provider's own pointers.
        unsafe {
            let ops = &mut (*(ctx as *mut v::ibv_context)).ops;
            ops.post_send = Some(provider(&o.send));
            ops.post_recv = Some(provider(&o.recv));
            ops.poll_cq = Some(provider(&o.poll));
        }
    }
    each_qpx(ctx, |n| n.unpatch());
}

/// Whether a context's ops are ours right now (it has a bounce region).
fn is_patched(ctx: usize) -> bool {
    // SAFETY: ctx is a live context (from a live QP); reading one function pointer.
    let send = unsafe { (*(ctx as *const v::ibv_context)).ops.post_send };
    send.is_some_and(|f| f as usize == post_send as PostSend as usize)
}

/// Live bounce lkeys, counted per hash slot: an SGE whose slot is empty is in no bounce region,
/// so WRs that touch none pass without a lock.
static LKEYS: [AtomicU32; 256] = [const { AtomicU32::new(0) }; 256];

fn lkey_slot(lkey: u32) -> &'static AtomicU32 {
    &LKEYS[((lkey ^ (lkey >> 8) ^ (lkey >> 16) ^ (lkey >> 24)) & 255) as usize]
}

/// SGE ranges of one WR that lie in bounce regions: (region, offset, length).
type Ranges = Vec<(Arc<Region>, u64, usize)>;

fn ranges(ctx: usize, sg: *mut v::ibv_sge, n: c_int) -> Ranges {
    if sg.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY: the WR's scatter/gather list as the application built it.
    let sges = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    if sges.iter().all(|s| lkey_slot(s.lkey).load(Ordering::Acquire) == 0) {
        return Vec::new();
    }
    let regions = REGIONS.lock();
    sges.iter()
        .filter_map(|s| {
            let r = regions.iter().find(|r| r.ctx == ctx && r.lkey == s.lkey)?;
            let (off, len) = r.range(s.addr, s.length as u64)?;
            Some((r.clone(), off, len))
        })
        .collect()
}

/// Ranges to copy to the application when a completion is polled, with a count of entries so
/// that completions with nothing pending skip the lock.
struct Pending<K> {
    map: ForkLock<Option<HashMap<K, Ranges>>>,
    len: AtomicUsize,
}

impl<K: std::hash::Hash + Eq> Pending<K> {
    const fn new() -> Self {
        Pending { map: ForkLock::new(None), len: AtomicUsize::new(0) }
    }
    fn add(&self, k: K, rs: Ranges) {
        let mut m = self.map.lock();
        let e = m.get_or_insert_with(HashMap::new).entry(k).or_default();
        if e.is_empty() {
            self.len.fetch_add(1, Ordering::AcqRel);
        }
        e.extend(rs);
    }
    fn take(&self, k: &K) -> Option<Ranges> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let r = self.map.lock().as_mut()?.remove(k)?;
        self.len.fetch_sub(1, Ordering::AcqRel);
        Some(r)
    }
}

/// Posted receives' ranges by (qp_num, wr_id); RDMA READs' by qp_num.
static PENDING_RECV: Pending<(u32, u64)> = Pending::new();
static PENDING_READ: Pending<u32> = Pending::new();

/// A send WR's ranges in bounce regions: an RDMA READ's are remembered until a completion of its
/// QP is polled; everything else (SEND, WRITE, WRITE_WITH_IMM) goes application → shadow now.
fn outgoing(qpn: u32, read: bool, rs: Ranges) {
    if read {
        PENDING_READ.add(qpn, rs);
    } else {
        for (reg, off, n) in &rs {
            reg.to_shadow(*off, *n);
        }
    }
}

/// Every bounce region peers can write (`read`: read), in any context: a process may learn of a
/// peer's write through another context than the region's, and the message after which a peer
/// reads may leave through another (Open MPI's one-sided component has its own UCX context; the
/// fence or barrier that announces a put or allows a get comes through the point-to-point one).
fn each_remote(read: bool, f: impl Fn(&Region)) {
    // a snapshot: `f` copies region bytes, other threads' posts need not wait for that
    let all: Vec<Arc<Region>> =
        REGIONS.lock().iter().filter(|r| if read { r.remote_read } else { r.remote_write }).cloned().collect();
    for r in &all {
        f(r);
    }
}

/// Before a post that may tell a peer to read (see [`announces`]): what the application wrote to
/// regions peers read reaches their shadows. Every time — the application may write between two
/// posts with no verb in between; the kernel's write tracking (crates/dirty) is what makes a fold
/// with nothing written cheap.
fn before_telling_peers() {
    each_remote(true, |r| r.fold_app_writes(false));
}

/// Whether a post of these opcodes may tell a peer it can now read: anything but RDMA READs and
/// atomics, which tell the peer nothing (no completion on its side).
fn announces(op: v::ibv_wr_opcode::Type) -> bool {
    !matches!(op, v::ibv_wr_opcode::IBV_WR_RDMA_READ) && !fetches(op)
}

/// Opcodes whose local SGE the NIC writes when the response comes (an atomic's original value):
/// copied to the application at the completion, like an RDMA READ's.
fn fetches(op: v::ibv_wr_opcode::Type) -> bool {
    matches!(op, v::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP | v::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD)
}

/// The fields of a send or receive WR that the bounce layer reads.
trait Wr {
    fn next(&self) -> *mut Self;
    fn sges(&self) -> (*mut v::ibv_sge, c_int);
}
impl Wr for v::ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn sges(&self) -> (*mut v::ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}
impl Wr for v::ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn sges(&self) -> (*mut v::ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

/// Calls `f` for every WR of the list that touches bounce regions, with those ranges.
fn each_wr<W: Wr>(ctx: usize, first: *mut W, mut f: impl FnMut(&W, Ranges)) {
    let mut w = first;
    while !w.is_null() {
        // SAFETY: walking the application's WR list, as the provider is about to.
        let r = unsafe { &*w };
        let (sg, n) = r.sges();
        let rs = ranges(ctx, sg, n);
        if !rs.is_empty() {
            f(r, rs);
        }
        w = r.next();
    }
}

unsafe extern "C" fn post_send(qp: *mut v::ibv_qp, wr: *mut v::ibv_send_wr, bad: *mut *mut v::ibv_send_wr) -> c_int {
    // SAFETY: qp is the application's live QP; its context is one we patched.
    let (ctx, qpn) = unsafe { ((*qp).context as usize, (*qp).qp_num) };
    let Some(o) = orig(ctx) else { return libc::EINVAL };
    guarded_copies("ibv_post_send", || {
        debug_panic();
        bump_epoch();
        if any_announces(wr) {
            before_telling_peers();
        }
        each_wr(ctx, wr, |r, rs| {
            let read = r.opcode == v::ibv_wr_opcode::IBV_WR_RDMA_READ || fetches(r.opcode);
            outgoing(qpn, read, rs)
        });
    });
    // SAFETY: the provider's own post_send with the application's arguments.
    unsafe { provider::<PostSend>(&o.send)(qp, wr, bad) }
}

/// Whether any WR of the list [`announces`].
fn any_announces(first: *mut v::ibv_send_wr) -> bool {
    let mut w = first;
    while !w.is_null() {
        // SAFETY: walking the application's WR list, as the provider is about to.
        let r = unsafe { &*w };
        if announces(r.opcode) {
            return true;
        }
        w = r.next;
    }
    false
}

unsafe extern "C" fn post_recv(qp: *mut v::ibv_qp, wr: *mut v::ibv_recv_wr, bad: *mut *mut v::ibv_recv_wr) -> c_int {
    // SAFETY: as in post_send.
    let (ctx, qpn) = unsafe { ((*qp).context as usize, (*qp).qp_num) };
    let Some(o) = orig(ctx) else { return libc::EINVAL };
    // What peers write after this receive must be told apart from what the application wrote.
    guarded_copies("ibv_post_recv", || {
        debug_panic();
        each_remote(false, |r| r.fold_app_writes(true));
        each_wr(ctx, wr, |r, rs| PENDING_RECV.add((qpn, r.wr_id), rs));
    });
    // SAFETY: the provider's own post_recv.
    unsafe { provider::<PostRecv>(&o.recv)(qp, wr, bad) }
}

unsafe extern "C" fn poll_cq(cq: *mut v::ibv_cq, n: c_int, wc: *mut mrshim_verbs::sys::ibv_wc) -> c_int {
    // SAFETY: cq is the application's live CQ.
    let ctx = unsafe { (*cq).context } as usize;
    let Some(o) = orig(ctx) else { return -1 };
    // SAFETY: the provider's own poll_cq.
    let got = unsafe { provider::<PollCq>(&o.poll)(cq, n, wc) };
    if got <= 0 || LIVE.load(Ordering::Acquire) == 0 {
        return got;
    }
    // SAFETY: the provider filled `got` entries; both ibv_wc types share rdma-core's layout.
    let wcs = unsafe { std::slice::from_raw_parts(wc.cast::<v::ibv_wc>(), got as usize) };
    guarded_copies("ibv_poll_cq", || completed(wcs));
    got
}

/// Completions just polled: what peers wrote reaches the application.
fn completed(wcs: &[v::ibv_wc]) {
    debug_panic();
    bump_epoch();
    let mut peer_wrote = false;
    for w in wcs {
        let ok = w.status == v::ibv_wc_status::IBV_WC_SUCCESS;
        match w.opcode {
            v::ibv_wc_opcode::IBV_WC_RECV | v::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => {
                let mine = PENDING_RECV.take(&(w.qp_num, w.wr_id));
                if ok {
                    let mut left = w.byte_len as usize;
                    for (r, off, len) in mine.unwrap_or_default() {
                        let k = len.min(left);
                        r.to_app(off, k);
                        left -= k;
                    }
                    peer_wrote = true;
                }
            }
            // RC completes in order: every READ posted on this QP before is done.
            _ => {
                if let Some(rs) = PENDING_READ.take(&w.qp_num).filter(|_| ok) {
                    for (r, off, len) in rs {
                        r.to_app(off, len);
                    }
                }
            }
        }
    }
    if peer_wrote {
        each_remote(false, Region::sync_peer_writes);
    }
}

// ----------------------------------------------------------------- ibv_qp_ex (ibv_wr_*)
//
// The builder API calls through function pointers in each QP's `ibv_qp_ex`, not the context's
// ops. The shim learns every `ibv_qp_ex` the application obtains (ibv_qp_to_qp_ex, the only way
// to one) and forgets it when its QP is destroyed; while the QP's context has a bounce region,
// four of its ops are wrapped: `wr_start` and `wr_rdma_read` track whether the WR being built
// reads, `wr_set_sge` / `wr_set_sge_list` copy outgoing ranges application → shadow (or
// remember a READ's ranges for the poll), exactly as post_send does for an `ibv_send_wr`.

type QxStart = unsafe extern "C" fn(*mut v::ibv_qp_ex);
type QxRead = unsafe extern "C" fn(*mut v::ibv_qp_ex, u32, u64);
type QxSge = unsafe extern "C" fn(*mut v::ibv_qp_ex, u32, u64, u32);
type QxSgeList = unsafe extern "C" fn(*mut v::ibv_qp_ex, usize, *const v::ibv_sge);

/// One `ibv_qp_ex` the application holds, with the provider's ops while they are wrapped.
/// Leaked and never unlinked (lock-free lookup from the wrappers); a destroyed QP's node is
/// reused for the next one.
struct Qpx {
    qpx: AtomicUsize,
    ctx: AtomicUsize,
    start: AtomicUsize,
    read: AtomicUsize,
    sge: AtomicUsize,
    sge_list: AtomicUsize,
    /// The WR being built is an RDMA READ.
    reading: std::sync::atomic::AtomicBool,
}

static QPXS: Leaked<Qpx> = Leaked::new();

fn qnode(q: *mut v::ibv_qp_ex) -> Option<&'static Qpx> {
    QPXS.iter().find(|n| n.qpx.load(Ordering::Acquire) == q as usize)
}

/// Under PATCHING.
fn each_qpx(ctx: usize, f: impl Fn(&Qpx)) {
    for n in QPXS.iter().filter(|n| n.qpx.load(Ordering::Acquire) != 0 && n.ctx.load(Ordering::Acquire) == ctx) {
        f(n);
    }
}

impl Qpx {
    fn q(&self) -> &'static mut v::ibv_qp_ex {
        // SAFETY: a live ibv_qp_ex (nodes of destroyed QPs have qpx 0 and are not visited).
        unsafe { &mut *(self.qpx.load(Ordering::Acquire) as *mut v::ibv_qp_ex) }
    }
    fn patch(&self) {
        let q = self.q();
        let (Some(start), Some(read), Some(sge), Some(list)) =
            (q.wr_start, q.wr_rdma_read, q.wr_set_sge, q.wr_set_sge_list)
        else {
            return;
        };
        if sge as usize == qx_set_sge as QxSge as usize {
            return;
        }
        self.start.store(start as usize, Ordering::Release);
        self.read.store(read as usize, Ordering::Release);
        self.sge.store(sge as usize, Ordering::Release);
        self.sge_list.store(list as usize, Ordering::Release);
        self.reading.store(false, Ordering::Release);
        // Pointer-sized aligned stores: a racing ibv_wr_* call sees the old or the new op.
        q.wr_start = Some(qx_start);
        q.wr_rdma_read = Some(qx_rdma_read);
        q.wr_set_sge = Some(qx_set_sge);
        q.wr_set_sge_list = Some(qx_set_sge_list);
    }
    fn unpatch(&self) {
        let q = self.q();
        if q.wr_set_sge.map(|f| f as usize) != Some(qx_set_sge as QxSge as usize) {
            return;
        }
        q.wr_start = Some(provider(&self.start));
        q.wr_rdma_read = Some(provider(&self.read));
        q.wr_set_sge = Some(provider(&self.sge));
        q.wr_set_sge_list = Some(provider(&self.sge_list));
    }
    /// The ranges of an SGE list in bounce regions: copied to the shadow now, or for an RDMA
    /// READ remembered until its completion is polled.
    fn sges(&self, q: *mut v::ibv_qp_ex, sg: *mut v::ibv_sge, n: c_int) {
        let rs = ranges(self.ctx.load(Ordering::Acquire), sg, n);
        if !rs.is_empty() {
            // SAFETY: q is the application's live ibv_qp_ex; qp_base is its ibv_qp.
            outgoing(unsafe { (*q).qp_base.qp_num }, self.reading.load(Ordering::Acquire), rs);
        }
    }
}

/// ibv_qp_to_qp_ex returned `qpx`: follow it (and wrap it now if its context has a bounce region).
pub fn note_qpx(qpx: usize) {
    // SAFETY: the provider just returned this live ibv_qp_ex; its qp_base.context is its context.
    let ctx = unsafe { (*(qpx as *const v::ibv_qp_ex)).qp_base.context } as usize;
    let _g = PATCHING.lock();
    let node = match QPXS.iter().find(|n| n.qpx.load(Ordering::Acquire) == qpx) {
        Some(n) => n,
        None => match QPXS.iter().find(|n| n.qpx.load(Ordering::Acquire) == 0) {
            Some(n) => {
                n.ctx.store(ctx, Ordering::Release);
                n.qpx.store(qpx, Ordering::Release);
                n
            }
            None => {
                let z = || AtomicUsize::new(0);
                QPXS.push(Qpx {
                    qpx: AtomicUsize::new(qpx),
                    ctx: AtomicUsize::new(ctx),
                    start: z(),
                    read: z(),
                    sge: z(),
                    sge_list: z(),
                    reading: Default::default(),
                })
            }
        },
    };
    if is_patched(ctx) {
        node.patch();
    }
}

/// Around the real ibv_destroy_qp: a destroyed QP's `ibv_qp_ex` is forgotten (its node freed
/// for reuse); one that survives (EBUSY) stays followed.
pub fn destroying_qp(qp: usize, destroy: impl FnOnce() -> c_int) -> c_int {
    if QPXS.iter().all(|n| n.qpx.load(Ordering::Acquire) != qp) {
        return destroy();
    }
    // Holding PATCHING: no patch of this object can start while it is being freed.
    let _g = PATCHING.lock();
    let rc = destroy();
    if rc == 0 {
        for n in QPXS.iter().filter(|n| n.qpx.load(Ordering::Acquire) == qp) {
            n.qpx.store(0, Ordering::Release);
        }
    }
    rc
}

unsafe extern "C" fn qx_start(q: *mut v::ibv_qp_ex) {
    let Some(n) = qnode(q) else { return };
    bump_epoch();
    // The batch's opcodes are not known yet: fold as for a post that may tell peers to read.
    guarded_copies("ibv_wr_start", before_telling_peers);
    n.reading.store(false, Ordering::Release);
    // SAFETY: the provider's wr_start with the application's QP.
    unsafe { provider::<QxStart>(&n.start)(q) }
}

unsafe extern "C" fn qx_rdma_read(q: *mut v::ibv_qp_ex, rkey: u32, raddr: u64) {
    let Some(n) = qnode(q) else { return };
    n.reading.store(true, Ordering::Release);
    // SAFETY: the provider's wr_rdma_read with the application's arguments.
    unsafe { provider::<QxRead>(&n.read)(q, rkey, raddr) }
}

unsafe extern "C" fn qx_set_sge(q: *mut v::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let Some(n) = qnode(q) else { return };
    let mut s = v::ibv_sge { addr, length, lkey };
    guarded_copies("ibv_wr_set_sge", || n.sges(q, &mut s, 1));
    n.reading.store(false, Ordering::Release);
    // SAFETY: the provider's wr_set_sge with the application's arguments.
    unsafe { provider::<QxSge>(&n.sge)(q, lkey, addr, length) }
}

unsafe extern "C" fn qx_set_sge_list(q: *mut v::ibv_qp_ex, num: usize, list: *const v::ibv_sge) {
    let Some(n) = qnode(q) else { return };
    guarded_copies("ibv_wr_set_sge_list", || n.sges(q, list.cast_mut(), num.min(c_int::MAX as usize) as c_int));
    n.reading.store(false, Ordering::Release);
    // SAFETY: the provider's wr_set_sge_list with the application's arguments.
    unsafe { provider::<QxSgeList>(&n.sge_list)(q, num, list) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A host copy engine behind which "the NIC" writes the next message into the shadow right
    /// after the first copy to the application: the window a streaming peer hits.
    struct NicWritesDuringCopy {
        shadow: usize,
        len: usize,
        fired: AtomicBool,
    }

    impl CopyEngine for NicWritesDuringCopy {
        fn name(&self) -> &'static str {
            "racy"
        }
        fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
            HostCopy.to_host(dst, src, n)
        }
        fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
            HostCopy.to_app(dst, src, n)?;
            if !self.fired.swap(true, Ordering::AcqRel) {
                // SAFETY: the region's live shadow, len bytes.
                unsafe { std::ptr::write_bytes(self.shadow as *mut u8, 0xee, self.len) };
            }
            Ok(())
        }
        fn app_is_host(&self) -> bool {
            true
        }
    }

    /// A shadow for `app` that peers may write (so it keeps a baseline).
    fn peer_writable(app: &mut [u8]) -> Shadow {
        let p = app.as_mut_ptr() as u64;
        prepare(p, app.len() as u64, p, mrshim_verbs::access::LOCAL_WRITE | mrshim_verbs::access::REMOTE_WRITE).unwrap()
    }

    #[test]
    fn a_peer_write_landing_during_a_sync_reaches_the_application_at_the_next_one() {
        let len = 8192;
        let mut app = vec![0u8; len];
        let mut s = peer_writable(&mut app);
        s.region.engine = Box::new(NicWritesDuringCopy { shadow: s.region.shadow, len, fired: AtomicBool::new(false) });
        let r = &s.region;
        // SAFETY: the region's live shadow; the peer's first message.
        unsafe { std::ptr::write_bytes(r.shadow as *mut u8, 0x11, len) };
        r.sync_peer_writes();
        assert!(app.iter().all(|&b| b == 0x11), "first message copied");
        r.sync_peer_writes(); // the completion of the message that landed meanwhile
        assert!(app.iter().all(|&b| b == 0xee), "the second message was lost");
        abandon(s);
    }

    /// Reads of the application's (device-like) buffer, counted.
    struct Counting(Arc<AtomicU32>);

    impl CopyEngine for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
            self.0.fetch_add(1, Ordering::AcqRel);
            HostCopy.to_host(dst, src, n)
        }
        fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
            HostCopy.to_app(dst, src, n)
        }
    }

    #[test]
    fn receives_posted_back_to_back_fold_the_application_writes_once() {
        let mut app = vec![0u8; 8192];
        let p = app.as_mut_ptr() as u64;
        let mut s = peer_writable(&mut app);
        let reads = Arc::new(AtomicU32::new(0));
        s.region.engine = Box::new(Counting(reads.clone()));
        let r = &s.region;
        // SAFETY: the region's live shadow, i < len.
        let shadow = |i: usize| unsafe { *((r.shadow + i) as *const u8) };
        // SAFETY: the application's own buffer, written through its pointer as a kernel would.
        unsafe { *(p as *mut u8) = 7 };
        r.fold_app_writes(true);
        r.fold_app_writes(true);
        assert_eq!(reads.load(Ordering::Acquire), 1, "the second receive, posted right after, reads nothing");
        assert_eq!(shadow(0), 7, "the application's write reached the shadow");
        // SAFETY: as above.
        unsafe { *((p + 1) as *mut u8) = 9 };
        bump_epoch(); // a post or a poll with completions in between
        r.fold_app_writes(true);
        assert_eq!(reads.load(Ordering::Acquire), 2);
        assert_eq!(shadow(1), 9);
        abandon(s);
    }
}
