//! One engine per open device context: its memory-key table, its queue pairs, and a progress
//! thread that plays the NIC. Application threads only queue work and kick the thread; the thread
//! alone does socket I/O (non-blocking, so two engines streaming at each other never deadlock),
//! moves data between registered memory and the wire, and produces completions.

use crate::cq::CqInner;
use crate::device::{MAX_SRQ_SGE, MAX_SRQ_WR};
use crate::events::AsyncEvents;
use crate::wire::{self, Hdr, Op, FIRST, GRH, IMM, LAST, NAK_NOT_READY};
use mrshim_verbs::{self as v, ibv_qp_state as qps, ibv_wc, ibv_wc_opcode as wco, ibv_wc_status as wcs};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Stop generating packets for a connection above this much queued output.
const OUT_HIGH_WATER: usize = 1 << 20;

/// How long [`Engine::fence`] waits for the progress thread: above the longest
/// MRSHIM_SIM_NIC_DELAY_MS, so a slow NIC is waited for; a stopped one does not hang the CM.
const FENCE_LIMIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct MrEntry {
    pub pd: usize,
    pub iova: u64,
    pub len: u64,
    pub access: u32,
    /// Local address that corresponds to `iova`.
    pub base: usize,
}

impl MrEntry {
    /// The local pointer for [iova, iova+len) if it lies inside this region.
    pub fn translate(&self, iova: u64, len: u64) -> Option<*mut u8> {
        let end = iova.checked_add(len)?;
        (iova >= self.iova && end <= self.iova + self.len).then(|| (self.base + (iova - self.iova) as usize) as *mut u8)
    }
}

#[derive(Clone)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SendOp {
    Send,
    Write,
    WriteImm,
    Read,
}

/// The transport service of a QP.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

/// Where one UD send goes (from its address handle) and what the GRH a receiver finds in front
/// of the data is made of: source GID, its type, the route; `None` without one (InfiniBand AH
/// without `is_global`).
#[derive(Clone)]
pub struct UdDest {
    pub qpn: u32,
    pub qkey: u32,
    pub grh: Option<([u8; 16], crate::device::GidType, v::ibv_global_route)>,
    /// The sender's LID (0 on RoCE), reported as the receiver's `wc.slid`.
    pub slid: u16,
    /// The receiver's `wc.sl`: the service level on InfiniBand; on RoCE mlx5 reports the packet
    /// type there (bit 3: UDP, bits 2:0: 0 GRH, 1 IPv6, 2 IPv4), which UCX's ud_verbs reads.
    pub sl: u8,
}

pub struct SendWqe {
    pub wr_id: u64,
    pub op: SendOp,
    pub signaled: bool,
    pub sges: Vec<Sge>,
    /// Copied at post time for IBV_SEND_INLINE.
    pub inline: Option<Vec<u8>>,
    pub raddr: u64,
    pub rkey: u32,
    pub imm: Option<u32>,
    pub len: u64,
    pub psn: u32,
    pub retries: u32,
    pub ud: Option<UdDest>,
    /// Acknowledged by the responder (a READ: all its data arrived). Completions are
    /// generated in order, so an ACK of a later WR waits for an earlier READ's data.
    pub acked: bool,
}

pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// An incoming SEND / WRITE_WITH_IMM that found no receive WQE yet (infinite RNR retry).
struct Unmatched {
    data: Vec<u8>,
    imm: Option<u32>,
    is_write: bool,
    total: u64,
    src_qpn: u32,
}

/// The message a responder QP is receiving.
struct Rx {
    psn: u32,
    op: Op,
    total: u64,
    imm: Option<u32>,
    /// Where the data goes: a receive WQE, a buffer (no WQE yet), or remote-write memory.
    sink: Sink,
    failed: Option<u32>,
}

enum Sink {
    Recv(RecvWqe),
    Buffer(Vec<u8>),
    Mem { rkey: u32, raddr: u64 },
    Discard,
}

#[derive(Default)]
pub struct QpAttrs {
    pub port: u8,
    pub access: u32,
    pub pkey_index: u16,
    pub dest_qpn: u32,
    pub path_mtu: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub ah: Option<v::ibv_ah_attr>,
    pub qkey: u32,
}

pub struct QpState {
    pub state: u32,
    pub attrs: QpAttrs,
    pub sq: VecDeque<SendWqe>,
    /// Bytes of `sq.front()` already on the wire.
    tx_off: u64,
    inflight: VecDeque<SendWqe>,
    pub rq: VecDeque<RecvWqe>,
    rx: Option<Rx>,
    unmatched: VecDeque<Unmatched>,
    /// After a NOT_READY NAK: accept nothing but this PSN's first packet.
    resync: Option<u32>,
    retry_at: Option<Instant>,
    /// When the peer became unreachable: its transport retries run out only after the retry
    /// timer has expired retry_cnt + 1 times, as on a NIC, not at once.
    lost_since: Option<Instant>,
    peer: Option<String>,
    next_psn: u32,
}

pub struct QpInner {
    pub qpn: u32,
    pub pd: usize,
    pub ty: QpType,
    /// Receive WQEs come from this shared receive queue instead of the QP's own.
    pub srq: Option<Arc<SrqInner>>,
    pub sq_sig_all: bool,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    /// The longest message one WR may carry (UD: the port's MTU).
    pub max_msg: u32,
    pub send_cq: QpCq,
    pub recv_cq: QpCq,
    pub st: Mutex<QpState>,
}

/// A QP's view of one of its CQs: pushes stop once the QP is destroyed (an engine thread may
/// still hold the QP then), and [`QpCq::forget`] removes what it had queued.
pub struct QpCq {
    cq: Arc<CqInner>,
    gone: Arc<AtomicBool>,
}

impl std::ops::Deref for QpCq {
    type Target = CqInner;
    fn deref(&self) -> &CqInner {
        &self.cq
    }
}

impl QpCq {
    pub fn push(&self, wc: ibv_wc) {
        self.push_all([wc]);
    }

    pub fn push_all(&self, wcs: impl IntoIterator<Item = ibv_wc>) {
        self.cq.push_all_unless(&self.gone, wcs);
    }

    #[cfg(test)]
    pub fn clone_cq(&self) -> Arc<CqInner> {
        self.cq.clone()
    }

    /// At ibv_destroy_qp: nothing of this QP is pushed from now on, nothing it queued is left.
    pub fn forget(&self, qpn: u32) {
        self.gone.store(true, std::sync::atomic::Ordering::SeqCst);
        self.cq.forget_qp(qpn);
    }
}

impl QpState {
    pub fn inflight_len(&self) -> usize {
        self.inflight.len()
    }

    /// The next message's PSN (24 bits, from IBV_QP_SQ_PSN on).
    pub fn take_psn(&mut self) -> u32 {
        let p = self.next_psn;
        self.next_psn = (p + 1) & 0xff_ffff;
        p
    }
}

impl QpInner {
    pub fn new(
        qpn: u32,
        pd: usize,
        (ty, srq): (QpType, Option<Arc<SrqInner>>),
        sq_sig_all: bool,
        caps: (u32, u32, u32),
        send_cq: Arc<CqInner>,
        recv_cq: Arc<CqInner>,
    ) -> QpInner {
        let gone = Arc::new(AtomicBool::new(false));
        QpInner {
            qpn,
            pd,
            ty,
            srq,
            sq_sig_all,
            max_send_wr: caps.0,
            max_recv_wr: caps.1,
            max_msg: if ty == QpType::Ud { caps.2 } else { crate::device::MAX_MSG_SZ },
            send_cq: QpCq { cq: send_cq, gone: gone.clone() },
            recv_cq: QpCq { cq: recv_cq, gone },
            st: Mutex::new(QpState {
                state: qps::IBV_QPS_RESET,
                attrs: QpAttrs::default(),
                sq: VecDeque::new(),
                tx_off: 0,
                inflight: VecDeque::new(),
                rq: VecDeque::new(),
                rx: None,
                unmatched: VecDeque::new(),
                resync: None,
                retry_at: None,
                lost_since: None,
                peer: None,
                next_psn: 0,
            }),
        }
    }

    /// The next receive WQE: from the SRQ if the QP has one.
    fn take_recv(&self, st: &mut QpState) -> Option<RecvWqe> {
        match &self.srq {
            Some(s) => s.take(),
            None => st.rq.pop_front(),
        }
    }

    pub fn wc(&self, wr_id: u64, status: u32, opcode: u32, byte_len: u32) -> ibv_wc {
        // SAFETY: ibv_wc is plain old data; all-zero is valid.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        wc.wr_id = wr_id;
        wc.status = status;
        wc.opcode = opcode;
        wc.byte_len = byte_len;
        wc.qp_num = self.qpn;
        wc
    }

    /// Moves the QP to the error state: every outstanding WR completes with WR_FLUSH_ERR.
    pub fn flush(&self, st: &mut QpState) {
        st.state = qps::IBV_QPS_ERR;
        let send: Vec<_> = st
            .inflight
            .drain(..)
            .chain(st.sq.drain(..))
            .map(|w| self.wc(w.wr_id, wcs::IBV_WC_WR_FLUSH_ERR, send_opcode(w.op), 0))
            .collect();
        st.tx_off = 0;
        self.send_cq.push_all(send);
        let recv: Vec<_> =
            st.rq.drain(..).map(|w| self.wc(w.wr_id, wcs::IBV_WC_WR_FLUSH_ERR, wco::IBV_WC_RECV, 0)).collect();
        if let Some(Rx { sink: Sink::Recv(w), .. }) = st.rx.take() {
            self.recv_cq.push(self.wc(w.wr_id, wcs::IBV_WC_WR_FLUSH_ERR, wco::IBV_WC_RECV, 0));
        }
        self.recv_cq.push_all(recv);
    }

    /// Back to RESET: queues are emptied without completions, and the QP's completions not
    /// polled yet leave its CQs, as libmlx5's `mlx5_modify_qp` cleans them (`mlx5_cq_clean`)
    /// on a move to RESET: a QP brought back from ERR must not hand its new traffic's poller the
    /// flushed WRs of its previous life (pyverbs' test_mr_rereg_addr/test_mr_rereg_pd).
    pub fn reset(&self, st: &mut QpState) {
        self.send_cq.forget_qp(self.qpn);
        self.recv_cq.forget_qp(self.qpn);
        st.sq.clear();
        st.inflight.clear();
        st.rq.clear();
        st.rx = None;
        st.unmatched.clear();
        st.tx_off = 0;
        st.resync = None;
        st.retry_at = None;
        st.lost_since = None;
        st.peer = None;
        st.attrs = QpAttrs::default();
    }

    pub fn set_sq_psn(&self, st: &mut QpState, psn: u32) {
        st.next_psn = psn & 0xff_ffff;
    }
}

fn send_opcode(op: SendOp) -> u32 {
    match op {
        SendOp::Send => wco::IBV_WC_SEND,
        SendOp::Write | SendOp::WriteImm => wco::IBV_WC_RDMA_WRITE,
        SendOp::Read => wco::IBV_WC_RDMA_READ,
    }
}

struct Conn {
    /// Unique for the engine's life (descriptors are reused).
    id: u64,
    fd: RawFd,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    /// Socket path for connections this engine opened; responses never need it.
    peer: Option<String>,
    dead: bool,
    reads: VecDeque<ReadJob>,
}

impl Conn {
    fn pending_out(&self) -> usize {
        self.out.len() - self.out_pos
    }
}

/// RDMA READ data this engine streams back as responder.
struct ReadJob {
    dst_qpn: u32,
    src_qpn: u32,
    psn: u32,
    rkey: u32,
    raddr: u64,
    total: u64,
    off: u64,
}

pub struct Engine {
    pub sock_path: String,
    pub rundir: String,
    wake_fd: RawFd,
    listen_fd: RawFd,
    pub mrs: RwLock<HashMap<u32, MrEntry>>,
    pub qps: Mutex<HashMap<u32, Arc<QpInner>>>,
    next_key: AtomicU32,
    stop: AtomicBool,
    /// Doorbells rung so far, and whether the progress thread is (about to be) blocked in
    /// poll(2): a doorbell writes the eventfd only then, so a busy NIC costs its poster an
    /// atomic add, like a real doorbell's MMIO write, not a syscall and a wake-up.
    doorbells: AtomicU64,
    asleep: AtomicBool,
    /// The doorbell count the progress thread had read when it began its last finished
    /// transmit round: everything posted up to that doorbell has been processed ([`settle`]).
    transmitted: AtomicU64,
    /// Fences asked for and the last one done ([`Engine::fence`]).
    fence_req: AtomicU64,
    fence_done: AtomicU64,
    /// MRSHIM_SIM_NIC_DELAY_MS.
    nic_delay: Duration,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

fn set_nonblock(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

fn sockaddr(path: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = path.as_bytes();
    if b.len() >= a.sun_path.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("socket path too long: {path}")));
    }
    for (d, s) in a.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Ok((a, std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t))
}

fn tune_socket(fd: RawFd) {
    let sz: libc::c_int = 4 << 20;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads an int we own.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, opt, (&sz as *const libc::c_int).cast(), 4) };
    }
}

impl Engine {
    pub fn start(rundir: &str, dev_name: &str, nic_delay: Duration) -> io::Result<Arc<Engine>> {
        std::fs::create_dir_all(format!("{rundir}/qp"))?;
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let sock_path =
            format!("{rundir}/{dev_name}-{}-{}.sock", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let _ = std::fs::remove_file(&sock_path);
        // SAFETY: plain socket/bind/listen/eventfd syscalls on descriptors we create.
        let (listen_fd, wake_fd) = unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(last_err());
            }
            let (a, len) = sockaddr(&sock_path)?;
            if libc::bind(fd, (&a as *const libc::sockaddr_un).cast(), len) != 0 || libc::listen(fd, 512) != 0 {
                let e = last_err();
                libc::close(fd);
                return Err(e);
            }
            set_nonblock(fd);
            let w = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            if w < 0 {
                libc::close(fd);
                return Err(last_err());
            }
            (fd, w)
        };
        let e = Arc::new(Engine {
            sock_path,
            rundir: rundir.into(),
            wake_fd,
            listen_fd,
            mrs: RwLock::new(HashMap::new()),
            qps: Mutex::new(HashMap::new()),
            next_key: AtomicU32::new(0x100),
            stop: AtomicBool::new(false),
            doorbells: AtomicU64::new(0),
            asleep: AtomicBool::new(false),
            transmitted: AtomicU64::new(0),
            fence_req: AtomicU64::new(0),
            fence_done: AtomicU64::new(0),
            nic_delay,
            thread: Mutex::new(None),
        });
        let e2 = e.clone();
        let h = std::thread::Builder::new().name("mrshim-sim-nic".into()).spawn(move || Progress::new(e2).run())?;
        *e.thread.lock().unwrap() = Some(h);
        Ok(e)
    }

    /// Rings the doorbell: the progress thread looks at the queues again. SeqCst pairs with
    /// [`Progress::sleep_unless_rung`]: either it sees this doorbell's count before blocking,
    /// or this sees it asleep and wakes it.
    pub fn kick(&self) {
        self.ring();
    }

    /// [`kick`], returning the doorbell count including this one.
    fn ring(&self) -> u64 {
        let n = self.doorbells.fetch_add(1, Ordering::SeqCst) + 1;
        if self.asleep.load(Ordering::SeqCst) && self.asleep.swap(false, Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes to our eventfd.
            unsafe { libc::write(self.wake_fd, (&one as *const u64).cast(), 8) };
        }
        n
    }

    /// Returns once the progress thread has gone through every work request posted before the
    /// call. A verbs command that goes through the kernel to the firmware (resizing a CQ) finds
    /// the WQEs posted before it executed on real hardware, which takes about a microsecond
    /// each; the simulated NIC is a thread that a loaded machine may not have run yet. At most
    /// a second: a stopped or starved thread does not hang the caller.
    pub fn settle(&self) {
        let target = self.ring();
        let until = Instant::now() + Duration::from_secs(1);
        while self.transmitted.load(Ordering::SeqCst) < target
            && !self.stop.load(Ordering::Acquire)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The fabric's order for a message that travels outside the data path (the CM's DREQ and
    /// DREP, a peer's exit): on a NIC every packet between two ports takes the same wire, and a
    /// NIC handles a packet as it arrives, so a DREQ sent after an ACK arrives after it, when the
    /// peer's NIC has long handled the ACK and written the send's completion. Here the data and
    /// the CM take different sockets and threads, and a progress thread may run late on a loaded
    /// machine, so both ends call this. It returns once this NIC has handled every packet already
    /// waiting in its sockets (those a peer sent before its DREQ), and every peer NIC it is
    /// connected to has handled everything this one sent before the call (the ACKs of what the
    /// application has seen arrive): a fence marker goes out on each connection, behind those
    /// packets, and each peer answers it in order. False if the progress thread stopped or not
    /// every peer answered within [`FENCE_LIMIT`].
    pub fn fence(&self) -> bool {
        let target = self.fence_req.fetch_add(1, Ordering::SeqCst) + 1;
        self.ring();
        let until = Instant::now() + FENCE_LIMIT;
        while self.fence_done.load(Ordering::SeqCst) < target {
            if self.stop.load(Ordering::Acquire) || Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }

    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick();
        if let Some(h) = self.thread.lock().unwrap().take() {
            let _ = h.join();
        }
        // SAFETY: closing descriptors only this engine owns, after its thread has exited.
        unsafe {
            libc::close(self.listen_fd);
            libc::close(self.wake_fd);
        }
        let _ = std::fs::remove_file(&self.sock_path);
    }

    pub fn new_key(&self) -> u32 {
        // mlx5-like keys: index in the upper 24 bits, a variant byte below.
        let idx = self.next_key.fetch_add(1, Ordering::Relaxed);
        (idx << 8) | (idx.wrapping_mul(0x9d) & 0xff)
    }

    /// Claims a host-wide unique QP number: a symlink rundir/qp/<qpn> -> our socket.
    pub fn claim_qpn(&self) -> io::Result<u32> {
        let mut n = (std::process::id().wrapping_mul(2_654_435_761)
            ^ self.next_key.load(Ordering::Relaxed).wrapping_mul(40503))
            & 0xff_ffff;
        for _ in 0..100_000 {
            n = (n + 1) & 0xff_ffff;
            if n < 0x100 {
                continue;
            }
            match std::os::unix::fs::symlink(&self.sock_path, format!("{}/qp/{n}", self.rundir)) {
                Ok(()) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::from_raw_os_error(libc::ENOMEM))
    }

    pub fn release_qpn(&self, qpn: u32) {
        let _ = std::fs::remove_file(format!("{}/qp/{qpn}", self.rundir));
    }
}

/// The progress thread's own state: connections are touched by nobody else.
struct Progress {
    e: Arc<Engine>,
    conns: Vec<Conn>,
    by_peer: HashMap<String, usize>,
    scratch: Vec<u8>,
    next_conn: u64,
    /// The fence being done: its number, and the connections whose peer has not answered its
    /// marker yet.
    fence: Option<(u64, Vec<u64>)>,
}

impl Progress {
    fn new(e: Arc<Engine>) -> Progress {
        Progress {
            e,
            conns: Vec::new(),
            by_peer: HashMap::new(),
            scratch: Vec::with_capacity(wire::MAX_PAYLOAD),
            next_conn: 0,
            fence: None,
        }
    }

    fn new_conn(&mut self, fd: RawFd, peer: Option<String>) {
        self.next_conn += 1;
        self.conns.push(Conn {
            id: self.next_conn,
            fd,
            inbuf: Vec::with_capacity(1 << 17),
            out: Vec::new(),
            out_pos: 0,
            peer,
            dead: false,
            reads: VecDeque::new(),
        });
    }

    /// Starts fence `n` ([`Engine::fence`]): handles every packet already waiting (on
    /// connections not accepted yet too), then sends a marker behind what each connection has
    /// queued.
    fn begin_fence(&mut self, n: u64) {
        self.accept();
        for i in 0..self.conns.len() {
            if !self.conns[i].dead {
                self.receive(i);
            }
        }
        let mut waiting = Vec::new();
        for i in 0..self.conns.len() {
            if !self.conns[i].dead {
                self.emit(i, Hdr { op: Op::Fence as u8, raddr: n, ..Default::default() }, &[]);
                waiting.push(self.conns[i].id);
            }
        }
        self.fence = Some((n, waiting));
    }

    /// A peer's answer to fence marker `n` on connection `conn`.
    fn on_fence_ack(&mut self, conn: usize, n: u64) {
        let id = self.conns[conn].id;
        if let Some((cur, waiting)) = &mut self.fence {
            if *cur == n {
                waiting.retain(|&w| w != id);
            }
        }
    }

    /// Marks the fence done once every peer answered its marker (or its connection died).
    fn check_fence(&mut self) {
        let Some((n, waiting)) = &self.fence else { return };
        if waiting.iter().all(|&id| self.conns.iter().find(|c| c.id == id).is_none_or(|c| c.dead)) {
            self.e.fence_done.store(*n, Ordering::SeqCst);
            self.fence = None;
        }
    }

    fn run(mut self) {
        let mut pfds: Vec<libc::pollfd> = Vec::new();
        while !self.e.stop.load(Ordering::Acquire) {
            let rung = self.e.doorbells.load(Ordering::SeqCst);
            let fence = self.e.fence_req.load(Ordering::SeqCst);
            if fence > self.e.fence_done.load(Ordering::SeqCst) && self.fence.as_ref().is_none_or(|f| f.0 < fence) {
                // A later fence covers an earlier one still waiting: it owes at least as much.
                self.begin_fence(fence);
            }
            let busy = self.transmit();
            self.flush_out();
            self.check_fence();
            self.e.transmitted.store(rung, Ordering::SeqCst);
            self.conns.retain(|c| {
                if c.dead {
                    // SAFETY: closing a connection descriptor owned by this thread.
                    unsafe { libc::close(c.fd) };
                }
                !c.dead
            });
            self.by_peer = self.conns.iter().enumerate().filter_map(|(i, c)| c.peer.clone().map(|p| (p, i))).collect();

            pfds.clear();
            pfds.push(libc::pollfd { fd: self.e.wake_fd, events: libc::POLLIN, revents: 0 });
            pfds.push(libc::pollfd { fd: self.e.listen_fd, events: libc::POLLIN, revents: 0 });
            for c in &self.conns {
                let mut ev = libc::POLLIN;
                if c.pending_out() > 0 {
                    ev |= libc::POLLOUT;
                }
                pfds.push(libc::pollfd { fd: c.fd, events: ev, revents: 0 });
            }
            let timeout = if busy { 0 } else { self.retry_timeout().map_or(200, |d| d.as_millis().min(200) as i32) };
            let timeout = self.sleep_unless_rung(timeout, rung);
            // SAFETY: pfds is a live Vec of pollfd for the duration of the call.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
            self.e.asleep.store(false, Ordering::SeqCst);
            if n < 0 {
                continue;
            }
            if pfds[0].revents != 0 {
                let mut buf = 0u64;
                // SAFETY: reads 8 bytes into a local.
                unsafe { libc::read(self.e.wake_fd, (&mut buf as *mut u64).cast(), 8) };
            }
            if pfds[1].revents != 0 {
                self.accept();
            }
            for i in 0..self.conns.len() {
                let re = pfds.get(i + 2).map_or(0, |p| p.revents);
                if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                    self.receive(i);
                }
            }
        }
        self.drain_out(Duration::from_secs(1));
        for c in &self.conns {
            // SAFETY: closing descriptors owned by this thread on exit.
            unsafe { libc::close(c.fd) };
        }
    }

    /// At device close: what is queued (ACKs of messages the application already received) goes
    /// out before the connections close, as a NIC's would, for at most `limit`. A peer that never
    /// got the ACK would resend to a QP that is gone and fail its send with a retry error.
    fn drain_out(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            self.flush_out();
            let waiting: Vec<libc::pollfd> = self
                .conns
                .iter()
                .filter(|c| !c.dead && c.pending_out() > 0)
                .map(|c| libc::pollfd { fd: c.fd, events: libc::POLLOUT, revents: 0 })
                .collect();
            let left = until.saturating_duration_since(Instant::now());
            if waiting.is_empty() || left.is_zero() {
                return;
            }
            let mut pfds = waiting;
            // SAFETY: pfds is a live Vec of pollfd for the duration of the call.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, left.as_millis().max(1) as i32) };
        }
    }

    /// Before blocking for `timeout` ms: announce it, then look whether a doorbell rang since
    /// `rung` was read (before this round's transmit); if one did, do not block.
    fn sleep_unless_rung(&self, timeout: i32, rung: u64) -> i32 {
        if timeout == 0 {
            return 0;
        }
        self.e.asleep.store(true, Ordering::SeqCst);
        if self.e.doorbells.load(Ordering::SeqCst) != rung {
            self.e.asleep.store(false, Ordering::SeqCst);
            return 0;
        }
        timeout
    }

    fn retry_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        self.e
            .qps
            .lock()
            .unwrap()
            .values()
            .filter_map(|q| q.st.lock().unwrap().retry_at)
            .map(|t| t.saturating_duration_since(now))
            .min()
    }

    fn accept(&mut self) {
        loop {
            // SAFETY: accept4 on our listening socket.
            let fd = unsafe {
                libc::accept4(
                    self.e.listen_fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                return;
            }
            tune_socket(fd);
            self.new_conn(fd, None);
        }
    }

    fn connect(&mut self, peer: &str) -> Option<usize> {
        if let Some(&i) = self.by_peer.get(peer) {
            if !self.conns[i].dead {
                return Some(i);
            }
        }
        let (a, len) = sockaddr(peer).ok()?;
        // SAFETY: socket + connect with a sockaddr we built; fd closed on failure.
        let fd = unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return None;
            }
            tune_socket(fd);
            if libc::connect(fd, (&a as *const libc::sockaddr_un).cast(), len) != 0 {
                libc::close(fd);
                return None;
            }
            fd
        };
        set_nonblock(fd);
        self.new_conn(fd, Some(peer.into()));
        let i = self.conns.len() - 1;
        self.by_peer.insert(peer.into(), i);
        Some(i)
    }

    fn flush_out(&mut self) {
        for i in 0..self.conns.len() {
            self.flush_conn(i);
        }
    }

    /// Writes what connection `i` has queued, as far as the socket takes it.
    fn flush_conn(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.pending_out() == 0 || c.dead {
            return;
        }
        loop {
            let rest = &c.out[c.out_pos..];
            if rest.is_empty() {
                break;
            }
            // SAFETY: writes from a live slice; MSG_NOSIGNAL so a dead peer is EPIPE, not SIGPIPE.
            let n = unsafe { libc::send(c.fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
            if n > 0 {
                c.out_pos += n as usize;
            } else {
                if n < 0 && last_err().kind() != io::ErrorKind::WouldBlock {
                    c.dead = true;
                }
                break;
            }
        }
        if c.out_pos == c.out.len() {
            c.out.clear();
            c.out_pos = 0;
        } else if c.out_pos > (1 << 20) {
            c.out.drain(..c.out_pos);
            c.out_pos = 0;
        }
    }

    fn receive(&mut self, i: usize) {
        let mut progressed = true;
        while progressed {
            progressed = false;
            let c = &mut self.conns[i];
            if c.inbuf.capacity() - c.inbuf.len() < wire::MAX_PAYLOAD + wire::HDR_LEN {
                c.inbuf.reserve(wire::MAX_PAYLOAD * 2);
            }
            let spare = c.inbuf.capacity() - c.inbuf.len();
            // SAFETY: reads into the Vec's spare capacity, then extends len by what was read.
            let n = unsafe { libc::read(c.fd, c.inbuf.as_mut_ptr().add(c.inbuf.len()).cast(), spare) };
            if n > 0 {
                // SAFETY: the kernel initialised n bytes of spare capacity.
                unsafe { c.inbuf.set_len(c.inbuf.len() + n as usize) };
                progressed = n as usize == spare;
                if !self.e.nic_delay.is_zero() {
                    std::thread::sleep(self.e.nic_delay);
                }
            } else if n == 0 || last_err().kind() != io::ErrorKind::WouldBlock {
                c.dead = true;
            }
            // Parse every complete packet.
            let mut at = 0;
            let buf = std::mem::take(&mut self.conns[i].inbuf);
            while let Some(h) = Hdr::decode(&buf[at..]) {
                let plen = h.payload_len as usize;
                if buf.len() - at < wire::HDR_LEN + plen {
                    break;
                }
                let payload = &buf[at + wire::HDR_LEN..at + wire::HDR_LEN + plen];
                self.handle(i, &h, payload);
                at += wire::HDR_LEN + plen;
            }
            let mut buf = buf;
            buf.drain(..at);
            self.conns[i].inbuf = buf;
        }
    }

    fn emit(&mut self, conn: usize, h: Hdr, payload: &[u8]) {
        let c = &mut self.conns[conn];
        h.encode(&mut c.out);
        c.out.extend_from_slice(payload);
    }

    fn reply(&mut self, conn: usize, req: &Hdr, op: Op, status: u32) {
        let h = Hdr {
            op: op as u8,
            dst_qpn: req.src_qpn,
            src_qpn: req.dst_qpn,
            psn: req.psn,
            status,
            ..Default::default()
        };
        self.emit(conn, h, &[]);
    }

    fn qp(&self, qpn: u32) -> Option<Arc<QpInner>> {
        self.e.qps.lock().unwrap().get(&qpn).cloned()
    }

    fn handle(&mut self, conn: usize, h: &Hdr, payload: &[u8]) {
        match h.op() {
            Some(Op::Send | Op::Write | Op::WriteImm) => self.on_request(conn, h, payload),
            Some(Op::ReadReq) => self.on_read_req(conn, h),
            Some(Op::ReadResp) => self.on_read_resp(h, payload),
            Some(Op::Ack) => self.on_ack(h),
            Some(Op::Nak) => self.on_nak(h),
            Some(Op::UdSend) => self.on_datagram(h, payload),
            // Everything before the marker on this connection has been handled: answer it.
            Some(Op::Fence) => {
                self.emit(conn, Hdr { op: Op::FenceAck as u8, raddr: h.raddr, ..Default::default() }, &[]);
                self.flush_conn(conn);
            }
            Some(Op::FenceAck) => self.on_fence_ack(conn, h.raddr),
            None => self.conns[conn].dead = true,
        }
    }

    /// Responder: SEND, RDMA WRITE, WRITE_WITH_IMM packets.
    fn on_request(&mut self, conn: usize, h: &Hdr, payload: &[u8]) {
        let Some(qp) = self.qp(h.dst_qpn) else {
            if h.flags & FIRST != 0 {
                self.reply(conn, h, Op::Nak, NAK_NOT_READY);
            }
            return;
        };
        let mut st = qp.st.lock().unwrap();
        let op = h.op().unwrap();
        if h.flags & FIRST != 0 {
            let ready = st.state == qps::IBV_QPS_RTR || st.state == qps::IBV_QPS_RTS;
            if !ready || st.resync.is_some_and(|p| p != h.psn) {
                if !ready {
                    st.resync = Some(h.psn);
                }
                drop(st);
                self.reply(conn, h, Op::Nak, NAK_NOT_READY);
                return;
            }
            st.resync = None;
            let imm = (h.flags & IMM != 0).then_some(h.imm);
            let mut failed = None;
            let sink = match op {
                Op::Send => match qp.take_recv(&mut st) {
                    Some(w) if recv_capacity(&w) < h.total_len => {
                        qp.recv_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_LEN_ERR, wco::IBV_WC_RECV, 0));
                        failed = Some(wcs::IBV_WC_REM_INV_REQ_ERR);
                        Sink::Discard
                    }
                    Some(w) => Sink::Recv(w),
                    None => Sink::Buffer(Vec::with_capacity(h.total_len.min(1 << 24) as usize)),
                },
                _ => {
                    // A zero-length RDMA WRITE checks no R_Key (IBTA C9-88): UCX flushes with one.
                    let ok = h.total_len == 0
                        || st.attrs.access & mrshim_verbs::access::REMOTE_WRITE != 0
                            && self.e.mrs.read().unwrap().get(&h.rkey).is_some_and(|m| {
                                m.pd == qp.pd
                                    && m.access & mrshim_verbs::access::REMOTE_WRITE != 0
                                    && m.translate(h.raddr, h.total_len).is_some()
                            });
                    if ok {
                        Sink::Mem { rkey: h.rkey, raddr: h.raddr }
                    } else {
                        failed = Some(wcs::IBV_WC_REM_ACCESS_ERR);
                        Sink::Discard
                    }
                }
            };
            st.rx = Some(Rx { psn: h.psn, op, total: h.total_len, imm, sink, failed });
        }
        let Some(rx) = st.rx.as_mut().filter(|rx| rx.psn == h.psn) else { return };
        if rx.failed.is_none() {
            rx.failed = self.deliver(&qp, rx, h.offset, payload);
        }
        if h.flags & LAST == 0 {
            return;
        }
        let rx = st.rx.take().unwrap();
        if let Some(status) = rx.failed {
            if let Sink::Recv(w) = rx.sink {
                qp.recv_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_PROT_ERR, wco::IBV_WC_RECV, 0));
            }
            drop(st);
            self.reply(conn, h, Op::Nak, status);
            return;
        }
        // The ACK is on the wire before the receive completes, as a NIC sends it: a responder
        // that sees the completion and exits at once has still acknowledged the message.
        self.reply(conn, h, Op::Ack, 0);
        self.flush_conn(conn);
        match rx.sink {
            Sink::Recv(w) => complete_recv(&qp, w.wr_id, rx.total, rx.imm, rx.op != Op::Send, h.src_qpn),
            Sink::Buffer(data) => {
                st.unmatched.push_back(Unmatched {
                    data,
                    imm: rx.imm,
                    is_write: false,
                    total: rx.total,
                    src_qpn: h.src_qpn,
                });
                self.e.match_unmatched(&qp, &mut st);
            }
            Sink::Mem { .. } if rx.op == Op::WriteImm => match qp.take_recv(&mut st) {
                Some(w) => complete_recv(&qp, w.wr_id, rx.total, rx.imm, true, h.src_qpn),
                None => st.unmatched.push_back(Unmatched {
                    data: Vec::new(),
                    imm: rx.imm,
                    is_write: true,
                    total: rx.total,
                    src_qpn: h.src_qpn,
                }),
            },
            _ => {}
        }
    }

    /// Copies one packet's payload to where the message goes; a status on protection errors.
    fn deliver(&self, qp: &QpInner, rx: &mut Rx, off: u64, payload: &[u8]) -> Option<u32> {
        match &mut rx.sink {
            Sink::Mem { rkey, raddr } => {
                let mrs = self.e.mrs.read().unwrap();
                let m = mrs.get(rkey).filter(|m| m.pd == qp.pd)?;
                match m.translate(*raddr + off, payload.len() as u64) {
                    // SAFETY: translate() checked the range lies inside a live registration, which
                    // cannot be deregistered while we hold the table's read lock.
                    Some(p) => unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), p, payload.len()) },
                    None => return Some(wcs::IBV_WC_REM_ACCESS_ERR),
                }
                None
            }
            Sink::Recv(w) => {
                let mrs = self.e.mrs.read().unwrap();
                scatter(&mrs, qp.pd, &w.sges, off, payload, true).err().map(|_| wcs::IBV_WC_REM_OP_ERR)
            }
            Sink::Buffer(b) => {
                b.extend_from_slice(payload);
                None
            }
            Sink::Discard => None,
        }
    }

    fn on_read_req(&mut self, conn: usize, h: &Hdr) {
        let Some(qp) = self.qp(h.dst_qpn) else {
            return self.reply(conn, h, Op::Nak, NAK_NOT_READY);
        };
        let st = qp.st.lock().unwrap();
        if !(st.state == qps::IBV_QPS_RTR || st.state == qps::IBV_QPS_RTS) {
            drop(st);
            return self.reply(conn, h, Op::Nak, NAK_NOT_READY);
        }
        let ok = qp.ty == QpType::Rc
            && (h.total_len == 0 // no R_Key check for a zero-length READ either
                || st.attrs.access & mrshim_verbs::access::REMOTE_READ != 0
                    && self.e.mrs.read().unwrap().get(&h.rkey).is_some_and(|m| {
                m.pd == qp.pd
                    && m.access & mrshim_verbs::access::REMOTE_READ != 0
                    && m.translate(h.raddr, h.total_len).is_some()
            }));
        drop(st);
        if !ok {
            return self.reply(conn, h, Op::Nak, wcs::IBV_WC_REM_ACCESS_ERR);
        }
        self.conns[conn].reads.push_back(ReadJob {
            dst_qpn: h.src_qpn,
            src_qpn: h.dst_qpn,
            psn: h.psn,
            rkey: h.rkey,
            raddr: h.raddr,
            total: h.total_len,
            off: 0,
        });
    }

    /// Requester: READ response data lands in the WR's scatter list.
    fn on_read_resp(&mut self, h: &Hdr, payload: &[u8]) {
        let Some(qp) = self.qp(h.dst_qpn) else { return };
        let mut st = qp.st.lock().unwrap();
        let Some(pos) = st.inflight.iter().position(|w| w.psn == h.psn && w.op == SendOp::Read) else { return };
        let res = {
            let mrs = self.e.mrs.read().unwrap();
            scatter(&mrs, qp.pd, &st.inflight[pos].sges, h.offset, payload, true)
        };
        if res.is_err() {
            return self.fail_wr(&qp, &mut st, h.psn, wcs::IBV_WC_LOC_PROT_ERR);
        }
        if h.flags & LAST != 0 {
            self.complete_through(&qp, &mut st, h.psn);
        }
    }

    fn on_ack(&mut self, h: &Hdr) {
        let Some(qp) = self.qp(h.dst_qpn) else { return };
        let mut st = qp.st.lock().unwrap();
        self.complete_through(&qp, &mut st, h.psn);
    }

    fn on_nak(&mut self, h: &Hdr) {
        let Some(qp) = self.qp(h.dst_qpn) else { return };
        let mut st = qp.st.lock().unwrap();
        if h.status != NAK_NOT_READY {
            return self.fail_wr(&qp, &mut st, h.psn, h.status);
        }
        // The peer was not ready: go back to this message and resend it and all after it once the
        // retry timer (4.096 us * 2^timeout, at least 1 ms here) expires, up to retry_cnt times.
        let Some(pos) = st.inflight.iter().position(|w| w.psn == h.psn) else { return };
        let mut back: Vec<SendWqe> = st.inflight.drain(pos..).collect();
        if st.tx_off > 0 {
            st.tx_off = 0; // the head of sq was partly sent after the NAKed one: resend it whole
        }
        let head = &mut back[0];
        head.retries += 1;
        if head.retries > st.attrs.retry_cnt as u32 {
            let first = back.remove(0);
            for w in back.into_iter().rev() {
                st.sq.push_front(w);
            }
            qp.send_cq.push(qp.wc(first.wr_id, wcs::IBV_WC_RETRY_EXC_ERR, send_opcode(first.op), 0));
            return qp.flush(&mut st);
        }
        for w in back.into_iter().rev() {
            st.sq.push_front(w);
        }
        st.retry_at = Some(Instant::now() + retry_timer(&st.attrs));
    }

    fn fail_wr(&self, qp: &QpInner, st: &mut QpState, psn: u32, status: u32) {
        let Some(pos) = st.inflight.iter().position(|w| w.psn == psn) else { return };
        // Earlier WRs were acknowledged implicitly.
        self.complete_before(qp, st, pos);
        let w = st.inflight.pop_front().unwrap();
        qp.send_cq.push(qp.wc(w.wr_id, status, send_opcode(w.op), 0));
        qp.flush(st);
    }

    fn complete_before(&self, qp: &QpInner, st: &mut QpState, n: usize) {
        let sig_all = qp.sq_sig_all;
        let wcs: Vec<_> = st
            .inflight
            .drain(..n)
            .filter(|w| w.signaled || sig_all)
            .map(|w| {
                qp.wc(
                    w.wr_id,
                    wcs::IBV_WC_SUCCESS,
                    send_opcode(w.op),
                    if w.op == SendOp::Read { w.len as u32 } else { 0 },
                )
            })
            .collect();
        qp.send_cq.push_all(wcs);
    }

    /// An ACK (coalesced: it covers every earlier WR) or the last READ response for `psn`. The
    /// responder streams READ data after replying to later requests, so an ACK can overtake a
    /// READ's data here where the fabric keeps them in order: a READ is acknowledged only by
    /// its own last response, and completions stop at the first WR not acknowledged yet.
    fn complete_through(&self, qp: &QpInner, st: &mut QpState, psn: u32) {
        let Some(pos) = st.inflight.iter().position(|w| w.psn == psn) else { return };
        let read_done = st.inflight[pos].op == SendOp::Read;
        for (i, w) in st.inflight.iter_mut().enumerate().take(pos + 1) {
            if w.op != SendOp::Read || (read_done && i == pos) {
                w.acked = true;
            }
        }
        let n = st.inflight.iter().position(|w| !w.acked).unwrap_or(st.inflight.len());
        self.complete_before(qp, st, n);
    }

    /// Generates outgoing packets while connections have room. True if more work is queued.
    fn transmit(&mut self) -> bool {
        let mut busy = false;
        for c in 0..self.conns.len() {
            busy |= self.stream_reads(c);
        }
        let qps: Vec<Arc<QpInner>> = self.e.qps.lock().unwrap().values().cloned().collect();
        for qp in qps {
            busy |= self.transmit_qp(&qp);
        }
        busy
    }

    fn stream_reads(&mut self, c: usize) -> bool {
        while self.conns[c].pending_out() < OUT_HIGH_WATER {
            let Some(job) = self.conns[c].reads.front_mut() else { return false };
            let n = (job.total - job.off).min(wire::MAX_PAYLOAD as u64);
            let mut h = Hdr {
                op: Op::ReadResp as u8,
                dst_qpn: job.dst_qpn,
                src_qpn: job.src_qpn,
                psn: job.psn,
                total_len: job.total,
                offset: job.off,
                payload_len: n as u32,
                ..Default::default()
            };
            if job.off == 0 {
                h.flags |= FIRST;
            }
            if job.off + n == job.total {
                h.flags |= LAST;
            }
            let (rkey, addr) = (job.rkey, job.raddr + job.off);
            job.off += n;
            let done = job.off == job.total;
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            let ok = {
                let mrs = self.e.mrs.read().unwrap();
                let zero = (n == 0).then_some(std::ptr::NonNull::<u8>::dangling().as_ptr());
                match zero.or_else(|| mrs.get(&rkey).and_then(|m| m.translate(addr, n))) {
                    Some(p) => {
                        // SAFETY: translate() bounds-checked a live registration held by the read lock.
                        buf.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n as usize) });
                        true
                    }
                    None => false,
                }
            };
            if ok {
                self.emit(c, h, &buf);
            } else {
                let req = Hdr { src_qpn: h.dst_qpn, dst_qpn: h.src_qpn, psn: h.psn, ..Default::default() };
                self.reply(c, &req, Op::Nak, wcs::IBV_WC_REM_ACCESS_ERR);
            }
            self.scratch = buf;
            if done || !ok {
                self.conns[c].reads.pop_front();
            }
        }
        true
    }

    fn transmit_qp(&mut self, qp: &Arc<QpInner>) -> bool {
        let mut st = qp.st.lock().unwrap();
        if st.state != qps::IBV_QPS_RTS || st.sq.is_empty() {
            return false;
        }
        if qp.ty == QpType::Ud {
            return self.transmit_datagrams(qp, &mut st);
        }
        if let Some(t) = st.retry_at {
            if Instant::now() < t {
                return false;
            }
            st.retry_at = None;
        }
        let peer = match st.peer.clone() {
            Some(p) => p,
            None => match std::fs::read_link(format!("{}/qp/{}", self.e.rundir, st.attrs.dest_qpn)) {
                Ok(p) => {
                    let p = p.to_string_lossy().into_owned();
                    st.peer = Some(p.clone());
                    p
                }
                Err(_) => return self.unreachable(qp, &mut st),
            },
        };
        let Some(c) = self.connect(&peer) else { return self.unreachable(qp, &mut st) };
        st.lost_since = None;
        while self.conns[c].pending_out() < OUT_HIGH_WATER {
            let off = st.tx_off;
            let Some(w) = st.sq.front() else { return false };
            if off == 0 && !self.local_ok(qp, w) {
                let w = st.sq.pop_front().unwrap();
                qp.send_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_PROT_ERR, send_opcode(w.op), 0));
                qp.flush(&mut st);
                return false;
            }
            let op = match w.op {
                SendOp::Send => Op::Send,
                SendOp::Write => Op::Write,
                SendOp::WriteImm => Op::WriteImm,
                SendOp::Read => Op::ReadReq,
            };
            let n = if w.op == SendOp::Read { 0 } else { (w.len - off).min(wire::MAX_PAYLOAD as u64) };
            let mut h = Hdr {
                op: op as u8,
                dst_qpn: st.attrs.dest_qpn,
                src_qpn: qp.qpn,
                psn: w.psn,
                raddr: w.raddr,
                rkey: w.rkey,
                total_len: w.len,
                offset: off,
                payload_len: n as u32,
                ..Default::default()
            };
            if off == 0 {
                h.flags |= FIRST;
            }
            if off + n == w.len || w.op == SendOp::Read {
                h.flags |= LAST; // a READ request is a single packet
            }
            if let Some(imm) = w.imm {
                h.flags |= IMM;
                h.imm = imm;
            }
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            let gathered = match &w.inline {
                Some(d) => {
                    buf.extend_from_slice(&d[off as usize..(off + n) as usize]);
                    true
                }
                None => gather(&self.e.mrs.read().unwrap(), qp.pd, &w.sges, off, n as usize, &mut buf).is_ok(),
            };
            if !gathered {
                self.scratch = buf;
                st.tx_off = 0;
                let w = st.sq.pop_front().unwrap();
                qp.send_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_PROT_ERR, send_opcode(w.op), 0));
                qp.flush(&mut st);
                return false;
            }
            self.emit(c, h, &buf);
            self.scratch = buf;
            if h.flags & LAST != 0 {
                st.tx_off = 0;
                let w = st.sq.pop_front().unwrap();
                st.inflight.push_back(w);
            } else {
                st.tx_off = off + n;
            }
        }
        !st.sq.is_empty()
    }

    /// UD: every WR is one datagram to the QP its address handle names; it completes once on
    /// the wire. A destination nobody owns drops it silently, as a real fabric does.
    fn transmit_datagrams(&mut self, qp: &QpInner, st: &mut QpState) -> bool {
        while let Some(w) = st.sq.front() {
            let dest = w.ud.clone().expect("UD WRs carry a destination");
            let peer = std::fs::read_link(format!("{}/qp/{}", self.e.rundir, dest.qpn)).ok();
            let conn = peer.and_then(|p| self.connect(&p.to_string_lossy()));
            if conn.is_some_and(|c| self.conns[c].pending_out() >= OUT_HIGH_WATER) {
                return true;
            }
            let w = st.sq.pop_front().unwrap();
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            let grh =
                dest.grh.as_ref().map(|(sgid, ty, route)| crate::grh::build_grh(sgid, *ty, route, w.len as usize));
            buf.extend_from_slice(&grh.unwrap_or([0; crate::grh::GRH_LEN]));
            let gathered = match &w.inline {
                Some(d) => {
                    buf.extend_from_slice(d);
                    true
                }
                None => gather(&self.e.mrs.read().unwrap(), qp.pd, &w.sges, 0, w.len as usize, &mut buf).is_ok(),
            };
            if !gathered {
                self.scratch = buf;
                qp.send_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_PROT_ERR, wco::IBV_WC_SEND, 0));
                qp.flush(st);
                return false;
            }
            if let Some(c) = conn {
                let mut h = Hdr {
                    op: Op::UdSend as u8,
                    flags: FIRST | LAST,
                    dst_qpn: dest.qpn,
                    src_qpn: qp.qpn,
                    raddr: ((dest.sl as u64) << 16) | dest.slid as u64,
                    rkey: dest.qkey,
                    total_len: w.len,
                    payload_len: buf.len() as u32,
                    ..Default::default()
                };
                if dest.grh.is_some() {
                    h.flags |= GRH;
                }
                if let Some(imm) = w.imm {
                    h.flags |= IMM;
                    h.imm = imm;
                }
                self.emit(c, h, &buf);
            }
            self.scratch = buf;
            if w.signaled || qp.sq_sig_all {
                qp.send_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_SUCCESS, wco::IBV_WC_SEND, 0));
            }
        }
        false
    }

    /// UD responder: a datagram lands in the next receive WQE behind the 40-byte GRH area, or is
    /// dropped (no WQE, wrong Q_Key, QP not ready), never retried.
    fn on_datagram(&mut self, h: &Hdr, payload: &[u8]) {
        let Some(qp) = self.qp(h.dst_qpn).filter(|q| q.ty == QpType::Ud) else { return };
        let mut st = qp.st.lock().unwrap();
        if !(st.state == qps::IBV_QPS_RTR || st.state == qps::IBV_QPS_RTS) || st.attrs.qkey != h.rkey {
            return;
        }
        let Some(w) = qp.take_recv(&mut st) else { return };
        if recv_capacity(&w) < payload.len() as u64 {
            qp.recv_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_LEN_ERR, wco::IBV_WC_RECV, 0));
            return qp.flush(&mut st);
        }
        // Without a GRH the first 40 bytes of the buffer are left as they were.
        let skip = if h.flags & GRH != 0 { 0 } else { crate::grh::GRH_LEN };
        let placed = scatter_pinned(&self.e.mrs.read().unwrap(), qp.pd, &w.sges, skip as u64, &payload[skip..]);
        if placed.is_err() {
            qp.recv_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_PROT_ERR, wco::IBV_WC_RECV, 0));
            return qp.flush(&mut st);
        }
        let mut wc = qp.wc(w.wr_id, wcs::IBV_WC_SUCCESS, wco::IBV_WC_RECV, payload.len() as u32);
        wc.src_qp = h.src_qpn;
        wc.slid = h.raddr as u16;
        wc.sl = (h.raddr >> 16) as u8;
        if h.flags & GRH != 0 {
            wc.wc_flags |= v::ibv_wc_flags::IBV_WC_GRH.0;
        }
        if h.flags & IMM != 0 {
            wc.__bindgen_anon_1.imm_data = h.imm;
            wc.wc_flags |= v::ibv_wc_flags::IBV_WC_WITH_IMM.0;
        }
        qp.recv_cq.push(wc);
    }

    /// Nobody owns the destination QP number: the transport retries run out once the retry
    /// timer has expired retry_cnt + 1 times. Until then the QP waits, as a NIC resending into
    /// silence does, so the error never overtakes the ACKs the peer sent before it went.
    fn unreachable(&self, qp: &QpInner, st: &mut QpState) -> bool {
        let now = Instant::now();
        let since = *st.lost_since.get_or_insert(now);
        let give_up = since + retry_timer(&st.attrs) * (st.attrs.retry_cnt as u32 + 1);
        if now < give_up {
            st.retry_at = Some(give_up);
            return false;
        }
        st.lost_since = None;
        if let Some(w) = st.sq.pop_front() {
            qp.send_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_RETRY_EXC_ERR, send_opcode(w.op), 0));
        }
        qp.flush(st);
        false
    }

    /// Local protection checks of a WR's scatter/gather list (lkey, PD, range, LOCAL_WRITE for READ).
    fn local_ok(&self, qp: &QpInner, w: &SendWqe) -> bool {
        if w.inline.is_some() {
            return true;
        }
        let mrs = self.e.mrs.read().unwrap();
        w.sges.iter().all(|s| {
            mrs.get(&s.lkey).is_some_and(|m| {
                m.pd == qp.pd
                    && m.translate(s.addr, s.len as u64).is_some()
                    && (w.op != SendOp::Read || m.access & mrshim_verbs::access::LOCAL_WRITE != 0)
            })
        })
    }
}

fn recv_capacity(w: &RecvWqe) -> u64 {
    w.sges.iter().map(|s| s.len as u64).sum()
}

/// Walks a scatter/gather list from byte `off` for `len` bytes, yielding local pointers.
fn walk_sges(
    mrs: &HashMap<u32, MrEntry>,
    pd: usize,
    sges: &[Sge],
    mut off: u64,
    len: usize,
    need_write: bool,
    mut f: impl FnMut(*mut u8, usize, usize),
) -> Result<(), ()> {
    let mut done = 0usize;
    for s in sges {
        if done == len {
            break;
        }
        let sl = s.len as u64;
        if off >= sl {
            off -= sl;
            continue;
        }
        let take = ((sl - off) as usize).min(len - done);
        let m = mrs
            .get(&s.lkey)
            .filter(|m| m.pd == pd && (!need_write || m.access & mrshim_verbs::access::LOCAL_WRITE != 0))
            .ok_or(())?;
        let p = m.translate(s.addr + off, take as u64).ok_or(())?;
        f(p, done, take);
        done += take;
        off = 0;
    }
    if done == len {
        Ok(())
    } else {
        Err(())
    }
}

fn gather(
    mrs: &HashMap<u32, MrEntry>,
    pd: usize,
    sges: &[Sge],
    off: u64,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    walk_sges(mrs, pd, sges, off, len, false, |p, _, n| {
        // SAFETY: walk_sges bounds-checked p..p+n against a live registration (read lock held).
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) })
    })
}

fn scatter(
    mrs: &HashMap<u32, MrEntry>,
    pd: usize,
    sges: &[Sge],
    off: u64,
    data: &[u8],
    need_write: bool,
) -> Result<(), ()> {
    walk_sges(mrs, pd, sges, off, data.len(), need_write, |p, at, n| {
        // SAFETY: walk_sges bounds-checked p..p+n against a live writable registration.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(at), p, n) }
    })
}

/// [`scatter`] for datagrams, which keep arriving while a process tears down: a registration
/// pins its pages, so a NIC writes into them even after the application unmapped the range (the
/// process just no longer sees them). Here the copy goes through `process_vm_writev` to this
/// process, which returns EFAULT for an unmapped page where a plain copy would crash; the
/// datagram then counts as delivered, as on a NIC. Where the call is not allowed, a plain copy.
fn scatter_pinned(mrs: &HashMap<u32, MrEntry>, pd: usize, sges: &[Sge], off: u64, data: &[u8]) -> Result<(), ()> {
    static PLAIN: AtomicBool = AtomicBool::new(false);
    walk_sges(mrs, pd, sges, off, data.len(), true, |p, at, n| {
        if !PLAIN.load(Ordering::Relaxed) {
            let local = libc::iovec { iov_base: data[at..].as_ptr() as *mut libc::c_void, iov_len: n };
            let remote = libc::iovec { iov_base: p.cast(), iov_len: n };
            // walk_sges keeps at + n <= data.len(); the kernel checks the destination (EFAULT, no fault).
            // SAFETY: reads `n` bytes of `data` from `at`; the kernel, not this thread, writes `p`.
            let r = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
            if r >= 0 || last_err().raw_os_error() == Some(libc::EFAULT) {
                return;
            }
            PLAIN.store(true, Ordering::Relaxed);
        }
        // SAFETY: walk_sges bounds-checked p..p+n against a live writable registration.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(at), p, n) }
    })
}

fn complete_recv(qp: &QpInner, wr_id: u64, total: u64, imm: Option<u32>, is_write: bool, src_qpn: u32) {
    let op = if is_write { wco::IBV_WC_RECV_RDMA_WITH_IMM } else { wco::IBV_WC_RECV };
    let mut wc = qp.wc(wr_id, wcs::IBV_WC_SUCCESS, op, total as u32);
    wc.src_qp = src_qpn;
    if let Some(i) = imm {
        wc.__bindgen_anon_1.imm_data = i;
        wc.wc_flags = v::ibv_wc_flags::IBV_WC_WITH_IMM.0;
    }
    qp.recv_cq.push(wc);
}

/// Matches messages that arrived before a receive WQE with the WQEs posted since.
fn drain_unmatched(qp: &QpInner, st: &mut QpState, mrs: &HashMap<u32, MrEntry>) {
    while !st.unmatched.is_empty() {
        let Some(w) = qp.take_recv(st) else { break };
        let u = st.unmatched.pop_front().unwrap();
        if !u.is_write {
            if recv_capacity(&w) < u.total {
                qp.recv_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_LEN_ERR, wco::IBV_WC_RECV, 0));
                continue;
            }
            if scatter(mrs, qp.pd, &w.sges, 0, &u.data, true).is_err() {
                qp.recv_cq.push(qp.wc(w.wr_id, wcs::IBV_WC_LOC_PROT_ERR, wco::IBV_WC_RECV, 0));
                continue;
            }
        }
        complete_recv(qp, w.wr_id, u.total, u.imm, u.is_write, u.src_qpn);
    }
}

impl Engine {
    /// post_recv's hook: a new WQE may complete a message that was waiting for it.
    pub fn match_unmatched(&self, qp: &QpInner, st: &mut QpState) {
        if !st.unmatched.is_empty() {
            let mrs = self.mrs.read().unwrap();
            drain_unmatched(qp, st, &mrs);
        }
    }

    /// post_srq_recv's hook: messages that arrived for the SRQ's QPs before any WQE was there.
    pub fn srq_refilled(&self, srq: &Arc<SrqInner>) {
        let users: Vec<Arc<QpInner>> = self
            .qps
            .lock()
            .unwrap()
            .values()
            .filter(|q| q.srq.as_ref().is_some_and(|s| Arc::ptr_eq(s, srq)))
            .cloned()
            .collect();
        for q in users {
            let mut st = q.st.lock().unwrap();
            self.match_unmatched(&q, &mut st);
        }
    }
}

/// A shared receive queue's WQEs (the ABI object is srq.rs's `Srq`): QPs attached to it take
/// their RECV WQEs from here.
struct SrqQueue {
    wqes: VecDeque<RecvWqe>,
    /// Armed limit (0: not armed): when fewer WQEs remain, one SRQ_LIMIT_REACHED event fires.
    limit: u32,
}

pub struct SrqInner {
    q: Mutex<SrqQueue>,
    pub max_wr: u32,
    pub max_sge: u32,
    events: AsyncEvents,
    /// The `struct ibv_srq *` the application holds (the event's element).
    pub(crate) ptr: AtomicUsize,
    /// QPs attached (the kernel's usecnt): destroy refuses with EBUSY while > 0.
    pub users: AtomicU32,
}

impl SrqInner {
    /// mlx5 sizes the queue to a power of two and reports one less as max_wr.
    pub fn new(attr: &v::ibv_srq_attr, events: AsyncEvents) -> Result<SrqInner, i32> {
        if attr.max_wr > MAX_SRQ_WR || attr.max_sge > MAX_SRQ_SGE {
            return Err(libc::EINVAL);
        }
        let max_wr = (attr.max_wr + 1).next_power_of_two() - 1;
        Ok(SrqInner {
            q: Mutex::new(SrqQueue { wqes: VecDeque::new(), limit: 0 }),
            max_wr: max_wr.max(1),
            max_sge: attr.max_sge.max(1),
            events,
            ptr: AtomicUsize::new(0),
            users: AtomicU32::new(0),
        })
    }

    pub fn post(&self, w: RecvWqe) -> Result<(), i32> {
        if w.sges.len() > self.max_sge as usize {
            return Err(libc::EINVAL);
        }
        let mut q = self.q.lock().unwrap();
        if q.wqes.len() >= self.max_wr as usize {
            return Err(libc::ENOMEM);
        }
        q.wqes.push_back(w);
        Ok(())
    }

    pub fn take(&self) -> Option<RecvWqe> {
        let mut q = self.q.lock().unwrap();
        let w = q.wqes.pop_front()?;
        if q.limit > 0 && (q.wqes.len() as u32) < q.limit {
            q.limit = 0;
            drop(q);
            self.events.post(self.ptr.load(Ordering::Acquire), v::IBV_EVENT_SRQ_LIMIT_REACHED);
        }
        Some(w)
    }

    pub fn modify(&self, attr: &v::ibv_srq_attr, mask: u32) -> Result<(), i32> {
        if mask & !(v::IBV_SRQ_MAX_WR | v::IBV_SRQ_LIMIT) != 0 || mask & v::IBV_SRQ_MAX_WR != 0 {
            return Err(libc::EINVAL);
        }
        if mask & v::IBV_SRQ_LIMIT != 0 {
            if attr.srq_limit > self.max_wr {
                return Err(libc::EINVAL);
            }
            self.q.lock().unwrap().limit = attr.srq_limit;
        }
        Ok(())
    }

    pub fn query(&self) -> v::ibv_srq_attr {
        v::ibv_srq_attr { max_wr: self.max_wr, max_sge: self.max_sge, srq_limit: self.q.lock().unwrap().limit }
    }
}

/// The local ACK timeout: 4.096 us * 2^timeout, here between 1 ms and 100 ms.
fn retry_timer(a: &QpAttrs) -> Duration {
    let t = a.timeout.min(20);
    Duration::from_nanos(4096u64 << t).max(Duration::from_millis(1)).min(Duration::from_millis(100))
}
