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
//!   application wrote to its own buffer meanwhile stays.

use super::copy::{CopyEngine, Cuda, HostCopy};
use mrshim_verbs as v;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

const PAGE: u64 = 4096;

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
    /// written by a peer (so only those go to the application's buffer).
    baseline: usize,
    map: (usize, usize),
    base_map: (usize, usize),
    remote_write: bool,
    engine: Box<dyn CopyEngine>,
}

impl Region {
    fn range(&self, addr: u64, len: u64) -> Option<(u64, usize)> {
        let end = addr.checked_add(len)?;
        (addr >= self.iova && end <= self.iova + self.len).then(|| (addr - self.iova, len as usize))
    }
    fn to_shadow(&self, off: u64, n: usize) {
        if let Err(e) = self.engine.to_host((self.shadow + off as usize) as *mut u8, self.app + off, n) {
            warn_once(&format!("{} engine: {e}", self.engine.name()));
        }
        self.settle(off, n);
    }
    fn to_app(&self, off: u64, n: usize) {
        if let Err(e) = self.engine.to_app(self.app + off, (self.shadow + off as usize) as *const u8, n) {
            warn_once(&format!("{} engine: {e}", self.engine.name()));
        }
        self.settle(off, n);
    }
    /// Shadow and application agree on [off, off+n): remember it.
    fn settle(&self, off: u64, n: usize) {
        // SAFETY: both mappings cover the region's length; off+n is within it.
        unsafe { std::ptr::copy_nonoverlapping((self.shadow + off as usize) as *const u8, (self.baseline + off as usize) as *mut u8, n) };
    }
    /// Before a receive is posted: bytes the application changed in its buffer since the last
    /// sync go to the shadow (and the baseline), so that what a peer writes next is told apart
    /// from them even where it writes the value the shadow held before.
    fn fold_app_writes(&self) {
        let len = self.len as usize;
        let mut now = vec![0u8; len];
        if let Err(e) = self.engine.to_host(now.as_mut_ptr(), self.app, len) {
            return warn_once(&format!("{} engine: {e}", self.engine.name()));
        }
        // SAFETY: shadow and baseline are live mappings of at least len bytes.
        let (sh, ba) = unsafe { (std::slice::from_raw_parts_mut(self.shadow as *mut u8, len), std::slice::from_raw_parts_mut(self.baseline as *mut u8, len)) };
        for (a, b) in diff_runs(&now, ba) {
            sh[a..b].copy_from_slice(&now[a..b]);
            ba[a..b].copy_from_slice(&now[a..b]);
        }
    }
    /// Copies to the application only the bytes a peer changed in the shadow since the last sync,
    /// so what the application wrote to its buffer meanwhile is not overwritten.
    fn sync_peer_writes(&self) {
        let len = self.len as usize;
        // SAFETY: shadow and baseline are live mappings of at least len bytes.
        let (sh, ba) = unsafe { (std::slice::from_raw_parts(self.shadow as *const u8, len), std::slice::from_raw_parts(self.baseline as *const u8, len)) };
        for (a, b) in diff_runs(sh, ba) {
            self.to_app(a as u64, b - a);
        }
    }
}

/// The runs [start, end) of bytes where `x` and `y` differ (page by page, so equal pages cost one
/// comparison).
fn diff_runs(x: &[u8], y: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let len = x.len().min(y.len());
    let mut page = 0;
    while page < len {
        let end = (page + PAGE as usize).min(len);
        if x[page..end] != y[page..end] {
            let mut i = page;
            while i < end {
                if x[i] == y[i] {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < end && x[i] != y[i] {
                    i += 1;
                }
                runs.push((start, i));
            }
        }
        page = end;
    }
    runs
}

fn warn_once(e: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| mrshim_core::stderr_line(&format!("mrshim WARN bounce buffer copy failed: {e}; data in bounce regions may be stale")));
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
    let engine: Box<dyn CopyEngine> = match Cuda::get() {
        Some(cu) if cu.is_device(app) => Box::new(cu.engine(app)?),
        _ if host_readable(app, len) => Box::new(HostCopy),
        _ => return Err(format!("{app:#x} is neither host memory nor memory of a loaded GPU runtime (CUDA); HIP/MACA engines are not wired")),
    };
    let off = app % PAGE;
    let maplen = ((off + len).div_ceil(PAGE) * PAGE) as usize;
    // SAFETY: a fresh private anonymous mapping, owned by the region until deregistration.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), maplen, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap of a {maplen}-byte shadow failed: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: as above, for the baseline copy.
    let b = unsafe { libc::mmap(std::ptr::null_mut(), maplen, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if b == libc::MAP_FAILED {
        unmap((p as usize, maplen));
        return Err(format!("mmap of a {maplen}-byte baseline failed: {}", std::io::Error::last_os_error()));
    }
    let region = Region {
        ctx: 0,
        lkey: 0,
        iova,
        len,
        app,
        shadow: p as usize + off as usize,
        baseline: b as usize + off as usize,
        map: (p as usize, maplen),
        base_map: (b as usize, maplen),
        remote_write: access & mrshim_verbs::access::REMOTE_WRITE != 0,
        engine,
    };
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

pub fn abandon(s: Shadow) {
    unmap(s.region.map);
    unmap(s.region.base_map);
}

fn unmap((p, n): (usize, usize)) {
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

static FIXES: Mutex<Vec<(usize, Fix)>> = Mutex::new(Vec::new());
static REGIONS: RwLock<Vec<Arc<Region>>> = RwLock::new(Vec::new());
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
    FIXES.lock().unwrap().push((mr, fix));
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
    patch(r.ctx);
    REGIONS.write().unwrap().push(r.clone());
    LIVE.fetch_add(1, Ordering::AcqRel);
    FIXES.lock().unwrap().push((mr, Fix::Bounce(real, r)));
}

/// Before the real ibv_dereg_mr: give rdma-core its MR back. Returns what to clean up after.
pub fn before_dereg(mr: usize) -> Option<Box<dyn FnOnce(bool)>> {
    let fix = {
        let mut f = FIXES.lock().unwrap();
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
                REGIONS.write().unwrap().retain(|x| !Arc::ptr_eq(x, &r));
                LIVE.fetch_sub(1, Ordering::AcqRel);
                unpatch_if_unused(r.ctx);
                unmap(r.map);
                unmap(r.base_map);
            })
        }
    })
}

// ----------------------------------------------------------------- context ops

type PostSend = unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_send_wr, *mut *mut v::ibv_send_wr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut v::ibv_qp, *mut v::ibv_recv_wr, *mut *mut v::ibv_recv_wr) -> c_int;
type PollCq = unsafe extern "C" fn(*mut v::ibv_cq, c_int, *mut mrshim_verbs::sys::ibv_wc) -> c_int;

#[derive(Clone, Copy)]
struct Orig {
    ctx: usize,
    send: PostSend,
    recv: PostRecv,
    poll: PollCq,
}

static ORIG: RwLock<Vec<Orig>> = RwLock::new(Vec::new());

fn orig(ctx: usize) -> Option<Orig> {
    ORIG.read().unwrap().iter().find(|o| o.ctx == ctx).copied()
}

fn patch(ctx: usize) {
    let mut o = ORIG.write().unwrap();
    if o.iter().any(|x| x.ctx == ctx) {
        return;
    }
    // SAFETY: ctx is a live ibv_context (from the MR); its ops are plain function pointers that
    // the static-inline verbs read on every call. Pointer-sized aligned stores are atomic.
    unsafe {
        let ops = &mut (*(ctx as *mut v::ibv_context)).ops;
        let (Some(send), Some(recv), Some(poll)) = (ops.post_send, ops.post_recv, ops.poll_cq) else { return };
        o.push(Orig { ctx, send, recv, poll });
        ops.post_send = Some(post_send);
        ops.post_recv = Some(post_recv);
        ops.poll_cq = Some(poll_cq);
    }
}

fn unpatch_if_unused(ctx: usize) {
    if REGIONS.read().unwrap().iter().any(|r| r.ctx == ctx) {
        return;
    }
    let mut o = ORIG.write().unwrap();
    if let Some(i) = o.iter().position(|x| x.ctx == ctx) {
        let x = o.swap_remove(i);
        // SAFETY: as in patch(): restoring the provider's own pointers.
        unsafe {
            let ops = &mut (*(ctx as *mut v::ibv_context)).ops;
            ops.post_send = Some(x.send);
            ops.post_recv = Some(x.recv);
            ops.poll_cq = Some(x.poll);
        }
    }
}

/// SGE ranges of one WR that lie in bounce regions: (region, offset, length).
type Ranges = Vec<(Arc<Region>, u64, usize)>;

fn ranges(ctx: usize, sg: *mut v::ibv_sge, n: c_int) -> Ranges {
    if sg.is_null() || n <= 0 {
        return Vec::new();
    }
    let regions = REGIONS.read().unwrap();
    // SAFETY: the WR's scatter/gather list as the application built it.
    let sges = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    sges.iter()
        .filter_map(|s| {
            let r = regions.iter().find(|r| r.ctx == ctx && r.lkey == s.lkey)?;
            let (off, len) = r.range(s.addr, s.length as u64)?;
            Some((r.clone(), off, len))
        })
        .collect()
}

static PENDING_RECV: Mutex<Option<HashMap<(u32, u64), Ranges>>> = Mutex::new(None);
static PENDING_READ: Mutex<Option<HashMap<u32, Ranges>>> = Mutex::new(None);

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
    each_wr(ctx, wr, |r, rs| {
        if r.opcode == v::ibv_wr_opcode::IBV_WR_RDMA_READ {
            PENDING_READ.lock().unwrap().get_or_insert_with(HashMap::new).entry(qpn).or_default().extend(rs);
        } else {
            for (reg, off, n) in &rs {
                reg.to_shadow(*off, *n);
            }
        }
    });
    // SAFETY: the provider's own post_send with the application's arguments.
    unsafe { (o.send)(qp, wr, bad) }
}

unsafe extern "C" fn post_recv(qp: *mut v::ibv_qp, wr: *mut v::ibv_recv_wr, bad: *mut *mut v::ibv_recv_wr) -> c_int {
    // SAFETY: as in post_send.
    let (ctx, qpn) = unsafe { ((*qp).context as usize, (*qp).qp_num) };
    let Some(o) = orig(ctx) else { return libc::EINVAL };
    // What peers write after this receive must be told apart from what the application wrote.
    let regions: Vec<Arc<Region>> = REGIONS.read().unwrap().iter().filter(|r| r.ctx == ctx && r.remote_write).cloned().collect();
    for r in regions {
        r.fold_app_writes();
    }
    each_wr(ctx, wr, |r, rs| {
        PENDING_RECV.lock().unwrap().get_or_insert_with(HashMap::new).insert((qpn, r.wr_id), rs);
    });
    // SAFETY: the provider's own post_recv.
    unsafe { (o.recv)(qp, wr, bad) }
}

unsafe extern "C" fn poll_cq(cq: *mut v::ibv_cq, n: c_int, wc: *mut mrshim_verbs::sys::ibv_wc) -> c_int {
    // SAFETY: cq is the application's live CQ.
    let ctx = unsafe { (*cq).context } as usize;
    let Some(o) = orig(ctx) else { return -1 };
    // SAFETY: the provider's own poll_cq.
    let got = unsafe { (o.poll)(cq, n, wc) };
    if got <= 0 || LIVE.load(Ordering::Acquire) == 0 {
        return got;
    }
    // SAFETY: the provider filled `got` entries; both ibv_wc types share rdma-core's layout.
    let wcs = unsafe { std::slice::from_raw_parts(wc.cast::<v::ibv_wc>(), got as usize) };
    let mut peer_wrote = false;
    for w in wcs {
        let ok = w.status == v::ibv_wc_status::IBV_WC_SUCCESS;
        match w.opcode {
            v::ibv_wc_opcode::IBV_WC_RECV | v::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => {
                let mine = PENDING_RECV.lock().unwrap().as_mut().and_then(|m| m.remove(&(w.qp_num, w.wr_id)));
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
            _ => {
                // RC completes in order: every READ posted on this QP before is done.
                if let Some(rs) = PENDING_READ.lock().unwrap().as_mut().and_then(|m| m.remove(&w.qp_num)) {
                    if ok {
                        for (r, off, len) in rs {
                            r.to_app(off, len);
                        }
                    }
                }
            }
        }
    }
    if peer_wrote {
        let regions: Vec<Arc<Region>> = REGIONS.read().unwrap().iter().filter(|r| r.ctx == ctx && r.remote_write).cloned().collect();
        for r in regions {
            r.sync_peer_writes();
        }
    }
    got
}
