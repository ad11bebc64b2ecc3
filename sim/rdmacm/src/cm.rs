//! The connection manager's state: ids, event channels and their queued events, behind one
//! lock that no thread holds while it waits. An event channel's fd is an epoll descriptor over
//! everything that can produce its events (an eventfd for events queued locally, a timerfd for
//! timeouts, its ids' listening and connection sockets), so poll/select/epoll on it see it
//! readable when an event is due, and rdma_get_cm_event turns what arrived into events.

use crate::abi::{self as a, rdma_cm_event_type as et};
use crate::addr::Addr;
use crate::wire::Msg;
use mrshim_verbs as v;
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// What the application holds: rdma-core's struct first, our handle after it.
#[repr(C)]
pub struct IdBox {
    pub id: a::rdma_cm_id,
    pub token: u64,
}

#[repr(C)]
pub struct ChanBox {
    pub ch: a::rdma_event_channel,
    pub token: u64,
}

/// An event as the application gets it, owning the private data it points to.
#[repr(C)]
pub struct Ev {
    pub ev: a::rdma_cm_event,
    pub private: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum St {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// Active side: REQ sent, waiting for REP / REJ.
    Connect,
    /// Passive side: connection accepted from a listener, its REQ not read yet.
    ReqWait,
    ReqRecv,
    /// REP sent, waiting for RTU.
    Accept,
    /// REP received on an id without a QP: rdma_establish sends the RTU.
    RepRecv,
    Connected,
    DiscSent,
    Disconnected,
}

pub struct IdSt {
    pub ptr: *mut IdBox,
    pub chan: u64,
    pub ps: u32,
    pub st: St,
    pub dev: Option<usize>,
    pub src: Option<Addr>,
    pub dst: Option<Addr>,
    pub claim: Option<PathBuf>,
    pub listen: Option<(RawFd, PathBuf)>,
    pub conn: Option<RawFd>,
    pub parent: Option<u64>,
    /// The peer's REQ or REP: its QPN, PSN, GID, LID, MTU, resources.
    pub remote: Option<Msg>,
    /// Our starting PSN (24 bits).
    pub psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Created without a channel: every call waits for its own outcome (rdma_create_ep).
    pub sync: bool,
    pub path: Box<a::ibv_sa_path_rec>,
    /// rdma_create_ep on a passive id: the QP rdma_get_request creates on each new id.
    pub ep_qp: Option<(usize, v::ibv_qp_init_attr)>,
    /// CQs and completion channels rdma_create_qp made (destroyed with the QP).
    pub own_cqs: bool,
    pub afonly: bool,
    /// RDMA_OPTION_ID_ACK_TIMEOUT: the QP's `timeout` at RTS instead of the default.
    pub ack_timeout: Option<u8>,
}

pub struct Chan {
    pub ptr: *mut ChanBox,
    pub epfd: RawFd,
    evfd: RawFd,
    timerfd: RawFd,
    queue: VecDeque<*mut Ev>,
    delayed: Vec<(Instant, *mut Ev)>,
    /// The private channel of a synchronous id: destroyed with it.
    pub private: bool,
}

pub struct Cm {
    pub ids: HashMap<u64, IdSt>,
    pub chans: HashMap<u64, Chan>,
    next: u64,
}

// SAFETY: the raw pointers are to heap objects this library owns; every access to them and to
// the maps is under the CM lock.
unsafe impl Send for Cm {}

static CM: Mutex<Option<Cm>> = Mutex::new(None);

pub struct Guard(MutexGuard<'static, Option<Cm>>);

impl std::ops::Deref for Guard {
    type Target = Cm;
    fn deref(&self) -> &Cm {
        self.0.as_ref().unwrap()
    }
}
impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Cm {
        self.0.as_mut().unwrap()
    }
}

pub fn lock() -> Guard {
    let mut g = CM.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(|| Cm { ids: HashMap::new(), chans: HashMap::new(), next: 1 });
    Guard(g)
}

/// epoll data: token << 3 | kind.
pub const K_EVFD: u64 = 0;
pub const K_TIMER: u64 = 1;
pub const K_LISTEN: u64 = 2;
pub const K_CONN: u64 = 3;

fn epoll_ctl(epfd: RawFd, op: i32, fd: RawFd, data: u64) {
    let mut e = libc::epoll_event { events: libc::EPOLLIN as u32, u64: data };
    // SAFETY: epoll_ctl on descriptors we own, with our event struct.
    unsafe { libc::epoll_ctl(epfd, op, fd, &mut e) };
}

pub fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most 4 bytes into b.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_le_bytes(b) & 0xff_ffff
}

impl Cm {
    /// Id `t`'s state; EINVAL for an id that is not (or no longer) ours.
    pub fn id(&self, t: u64) -> Result<&IdSt, i32> {
        self.ids.get(&t).ok_or(libc::EINVAL)
    }

    /// As [`Cm::id`], to change it.
    pub fn id_mut(&mut self, t: u64) -> Result<&mut IdSt, i32> {
        self.ids.get_mut(&t).ok_or(libc::EINVAL)
    }

    pub fn token(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    pub fn new_chan(&mut self, private: bool) -> Result<u64, i32> {
        // SAFETY: plain descriptor-creating syscalls; each result is checked.
        let (epfd, evfd, timerfd) = unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            let ev = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            let t = libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC);
            if ep < 0 || ev < 0 || t < 0 {
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE);
                for fd in [ep, ev, t].into_iter().filter(|&f| f >= 0) {
                    libc::close(fd);
                }
                return Err(e);
            }
            (ep, ev, t)
        };
        let token = self.token();
        epoll_ctl(epfd, libc::EPOLL_CTL_ADD, evfd, token << 3 | K_EVFD);
        epoll_ctl(epfd, libc::EPOLL_CTL_ADD, timerfd, token << 3 | K_TIMER);
        let ptr = Box::into_raw(Box::new(ChanBox { ch: a::rdma_event_channel { fd: epfd }, token }));
        self.chans
            .insert(token, Chan { ptr, epfd, evfd, timerfd, queue: VecDeque::new(), delayed: Vec::new(), private });
        Ok(token)
    }

    pub fn drop_chan(&mut self, token: u64) {
        if let Some(c) = self.chans.remove(&token) {
            for e in c.queue.into_iter().chain(c.delayed.into_iter().map(|(_, e)| e)) {
                // SAFETY: queued events are ours, never handed out.
                drop(unsafe { Box::from_raw(e) });
            }
            // SAFETY: the channel's descriptors and box, owned here and now unreachable.
            unsafe {
                libc::close(c.evfd);
                libc::close(c.timerfd);
                libc::close(c.epfd);
                drop(Box::from_raw(c.ptr));
            }
        }
    }

    /// Watches `fd` for id `id` on its channel.
    pub fn watch(&self, id: u64, fd: RawFd, kind: u64) {
        if let Some(c) = self.ids.get(&id).and_then(|s| self.chans.get(&s.chan)) {
            epoll_ctl(c.epfd, libc::EPOLL_CTL_ADD, fd, id << 3 | kind);
        }
    }

    pub fn unwatch(&self, id: u64, fd: RawFd) {
        if let Some(c) = self.ids.get(&id).and_then(|s| self.chans.get(&s.chan)) {
            epoll_ctl(c.epfd, libc::EPOLL_CTL_DEL, fd, 0);
        }
    }

    /// A new event for `id` (its public pointer filled in), not yet queued.
    pub fn event(&self, id: u64, kind: et::Type, status: i32) -> Box<Ev> {
        // SAFETY: rdma_cm_event is plain old data; all-zero is valid.
        let mut ev: a::rdma_cm_event = unsafe { std::mem::zeroed() };
        ev.id = self.ids.get(&id).map_or(std::ptr::null_mut(), |s| s.ptr.cast());
        ev.event = kind;
        ev.status = status;
        Box::new(Ev { ev, private: Vec::new() })
    }

    /// Queues an event without private data or extra fields for `id`.
    pub fn notify(&mut self, id: u64, kind: et::Type, status: i32) {
        let ev = self.event(id, kind, status);
        self.push(id, ev);
    }

    pub fn push(&mut self, id: u64, ev: Box<Ev>) {
        let Some(c) = self.ids.get(&id).and_then(|s| self.chans.get_mut(&s.chan)) else { return };
        c.queue.push_back(Box::into_raw(ev));
        let one: u64 = 1;
        // SAFETY: 8 bytes to our eventfd.
        unsafe { libc::write(c.evfd, (&one as *const u64).cast(), 8) };
    }

    /// Queues `ev` for when `at` comes (address resolution that times out).
    pub fn push_at(&mut self, id: u64, at: Instant, ev: Box<Ev>) {
        let Some(c) = self.ids.get(&id).and_then(|s| self.chans.get_mut(&s.chan)) else { return };
        c.delayed.push((at, Box::into_raw(ev)));
        c.arm();
    }

    /// The oldest queued event of channel `chan`, after due timeouts.
    pub fn pop(&mut self, chan: u64) -> Option<*mut Ev> {
        let c = self.chans.get_mut(&chan)?;
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = c.delayed.drain(..).partition(|(t, _)| *t <= now);
        c.delayed = later;
        c.queue.extend(due.into_iter().map(|(_, e)| e));
        let mut n: u64 = 0;
        // SAFETY: drains the timer's expiry count (non-blocking); arm() sets the next one.
        unsafe { libc::read(c.timerfd, (&mut n as *mut u64).cast(), 8) };
        let e = c.queue.pop_front();
        if c.queue.is_empty() {
            let mut n: u64 = 0;
            // SAFETY: reads our eventfd's counter (non-blocking) to show the queue empty.
            unsafe { libc::read(c.evfd, (&mut n as *mut u64).cast(), 8) };
        }
        c.arm();
        e
    }

    /// Events of a destroyed id may not be delivered afterwards.
    pub fn forget_events(&mut self, chan: u64, id: *mut IdBox) {
        if let Some(c) = self.chans.get_mut(&chan) {
            let mine = |e: &*mut Ev| {
                // SAFETY: queued events are ours.
                let ev = unsafe { &(**e).ev };
                ev.id == id.cast() || ev.listen_id == id.cast()
            };
            let (drop_q, keep): (Vec<_>, Vec<_>) = c.queue.drain(..).partition(|e| mine(e));
            c.queue = keep.into();
            let (drop_d, keep): (Vec<_>, Vec<_>) = c.delayed.drain(..).partition(|(_, e)| mine(e));
            c.delayed = keep;
            for e in drop_q.into_iter().chain(drop_d.into_iter().map(|(_, e)| e)) {
                // SAFETY: never handed out.
                drop(unsafe { Box::from_raw(e) });
            }
        }
    }

    /// Moves id `id`'s watched descriptors and queued events to channel `to`.
    pub fn move_id(&mut self, id: u64, to: u64) {
        let Some(s) = self.ids.get(&id) else { return };
        let (from, fds): (u64, Vec<(RawFd, u64)>) =
            (s.chan, s.listen.iter().map(|(fd, _)| (*fd, K_LISTEN)).chain(s.conn.map(|fd| (fd, K_CONN))).collect());
        for (fd, _) in &fds {
            self.unwatch(id, *fd);
        }
        let ptr = s.ptr;
        let mut moved = Vec::new();
        if let Some(c) = self.chans.get_mut(&from) {
            // SAFETY: queued events are ours.
            let (m, keep): (Vec<_>, Vec<_>) = c.queue.drain(..).partition(|e| unsafe { (**e).ev.id } == ptr.cast());
            c.queue = keep.into();
            moved = m;
        }
        self.ids.get_mut(&id).unwrap().chan = to;
        for (fd, k) in fds {
            self.watch(id, fd, k);
        }
        let to_ptr = self.chans.get(&to).map_or(std::ptr::null_mut(), |c| c.ptr);
        // SAFETY: the id's public struct; the channel pointer stays valid while it is used.
        unsafe { (*ptr).id.channel = to_ptr.cast() };
        for e in moved {
            // SAFETY: re-boxing our own event to queue it again.
            self.push(id, unsafe { Box::from_raw(e) });
        }
    }
}

impl Chan {
    fn arm(&self) {
        // SAFETY: itimerspec is plain old data.
        let mut t: libc::itimerspec = unsafe { std::mem::zeroed() };
        if let Some(first) = self.delayed.iter().map(|(t, _)| *t).min() {
            let d = first.saturating_duration_since(Instant::now()).max(std::time::Duration::from_micros(1));
            t.it_value.tv_sec = d.as_secs() as libc::time_t;
            t.it_value.tv_nsec = d.subsec_nanos() as libc::c_long;
        }
        // SAFETY: sets (or, all-zero, disarms) our timerfd.
        unsafe { libc::timerfd_settime(self.timerfd, 0, &t, std::ptr::null_mut()) };
    }
}

/// The next event of channel `chan`: waits (without the lock) unless the channel's fd is
/// non-blocking, then EAGAIN, like reading /dev/infiniband/rdma_cm.
pub fn get_event(chan: u64) -> Result<*mut Ev, i32> {
    let mut waited = false;
    loop {
        let epfd = {
            let mut cm = lock();
            if let Some(e) = cm.pop(chan) {
                return Ok(e);
            }
            match cm.chans.get(&chan) {
                // A descriptor of our own for the wait: the channel may be destroyed meanwhile.
                Some(c) => {
                    // SAFETY: the channel's descriptor is open while we hold the lock that closes it.
                    let live = unsafe { std::os::fd::BorrowedFd::borrow_raw(c.epfd) };
                    live.try_clone_to_owned().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?
                }
                // librdmacm's read(2) on a channel another thread destroyed while this one
                // waited never returns (the open file lives on under the read): rping's CM
                // thread sits there while its main thread tears down and exits.
                None if waited => loop {
                    // SAFETY: pause(2) has no preconditions.
                    unsafe { libc::pause() };
                },
                None => return Err(libc::EBADF),
            }
        };
        let epfd = std::os::fd::AsRawFd::as_raw_fd(&epfd);
        waited = true;
        // SAFETY: F_GETFL on our descriptor (its status flags are the channel's).
        let nonblock = unsafe { libc::fcntl(epfd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
        // SAFETY: zeroed epoll_event is valid output space.
        let mut evs: [libc::epoll_event; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: waits on our epoll descriptor into our array.
        let n = unsafe { libc::epoll_wait(epfd, evs.as_mut_ptr(), 16, if nonblock { 0 } else { -1 }) };
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        let mut cm = lock();
        for e in &evs[..n as usize] {
            let (token, kind) = (e.u64 >> 3, e.u64 & 7);
            match kind {
                K_LISTEN => crate::proto::on_listen(&mut cm, token),
                K_CONN => crate::proto::on_conn(&mut cm, token),
                _ => {}
            }
        }
        if let Some(e) = cm.pop(chan) {
            return Ok(e);
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rping's CM thread waits again right after DISCONNECTED while its main thread destroys the
    /// channel: as with librdmacm's read(2), that wait never returns (and never fails with EBADF);
    /// a call on a channel already gone is EBADF.
    #[test]
    fn a_wait_outlives_the_channel_destroyed_under_it() {
        let chan = lock().new_chan(false).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(get_event(chan).map(|_| ()));
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        lock().drop_chan(chan);
        let r = rx.recv_timeout(std::time::Duration::from_millis(500));
        assert!(r.is_err(), "the waiting thread returned {r:?}");
        assert_eq!(get_event(chan).map(|_| ()), Err(libc::EBADF));
    }
}
