//! The exported event channel and id calls. Each has the safety contract of its rdma-core
//! namesake (valid channels, ids and events from this library; sockaddrs of their family's size).
#![allow(clippy::missing_safety_doc)]

use crate::abi::{self as a, rdma_cm_event_type as et, rdma_port_space as ps};
use crate::addr::{Addr, Ip};
use crate::cm::{self, lock, ChanBox, Cm, Ev, IdBox, IdSt, St, K_CONN, K_LISTEN};
use crate::devices;
use crate::ports;
use crate::proto::{self, is_ud, msg_from, publish_route, send};
use crate::wire::{Kind, Msg, REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID};
use crate::{err, ffi, status};
use mrshim_verbs as v;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// The device's limit on RDMA reads outstanding (max_qp_rd_atom); RDMA_MAX_RESP_RES and
/// RDMA_MAX_INIT_DEPTH ask for it.
const MAX_RD_ATOM: u8 = 16;

pub(crate) unsafe fn token(id: *mut a::rdma_cm_id) -> u64 {
    // SAFETY: ids come from rdma_create_id: an IdBox whose first member is the rdma_cm_id.
    unsafe { (*id.cast::<IdBox>()).token }
}

unsafe fn chan_token(ch: *mut a::rdma_event_channel) -> u64 {
    // SAFETY: channels come from rdma_create_event_channel: a ChanBox.
    unsafe { (*ch.cast::<ChanBox>()).token }
}

/// The shape of the calls that return `int`: `f` behind the panic boundary; 0, or -1 with errno.
fn int_call(f: impl FnOnce() -> Result<(), i32>) -> c_int {
    ffi(-1, || status(f()))
}

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut a::rdma_event_channel {
    ffi(null_mut(), || {
        if let Err(e) = devices::get() {
            return err(e, null_mut());
        }
        let mut cm = lock();
        match cm.new_chan(false) {
            Ok(t) => cm.chans[&t].ptr.cast(),
            Err(e) => err(e, null_mut()),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut a::rdma_event_channel) {
    ffi((), || {
        // SAFETY: the caller's channel.
        let t = unsafe { chan_token(ch) };
        lock().drop_chan(t);
    })
}

/// A new id on channel `chan` (None: synchronous, with a private channel).
pub(crate) fn new_id(cm: &mut Cm, chan: Option<u64>, context: *mut c_void, ps_: u32) -> Result<u64, i32> {
    let qp_type = match ps_ {
        ps::RDMA_PS_TCP | ps::RDMA_PS_IB => v::ibv_qp_type::IBV_QPT_RC,
        ps::RDMA_PS_UDP | ps::RDMA_PS_IPOIB => v::ibv_qp_type::IBV_QPT_UD,
        _ => return Err(libc::EINVAL),
    };
    let (chan, sync) = match chan {
        Some(c) => (c, false),
        None => (cm.new_chan(true)?, true),
    };
    let token = cm.token();
    // SAFETY: rdma_cm_id is plain old data; all-zero is valid.
    let mut id: a::rdma_cm_id = unsafe { std::mem::zeroed() };
    id.channel = cm.chans[&chan].ptr.cast();
    id.context = context;
    id.ps = ps_;
    id.qp_type = qp_type;
    let ptr = Box::into_raw(Box::new(IdBox { id, token }));
    let mut s = IdSt::new(ptr, chan, ps_);
    s.sync = sync;
    cm.ids.insert(token, s);
    Ok(token)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut a::rdma_event_channel,
    out: *mut *mut a::rdma_cm_id,
    context: *mut c_void,
    ps_: a::rdma_port_space::Type,
) -> c_int {
    ffi(-1, || {
        if let Err(e) = devices::get() {
            return err(e, -1);
        }
        // SAFETY: the caller's channel, if any.
        let chan = (!ch.is_null()).then(|| unsafe { chan_token(ch) });
        let mut cm = lock();
        match new_id(&mut cm, chan, context, ps_) {
            Ok(t) => {
                // SAFETY: the caller's output pointer.
                unsafe { *out = cm.ids[&t].ptr.cast() };
                0
            }
            Err(e) => err(e, -1),
        }
    })
}

/// Closes what id `t` holds (connection, listener, port) and frees it.
pub(crate) fn destroy(cm: &mut Cm, t: u64) {
    let Some(s) = cm.ids.get(&t) else { return };
    if matches!(s.st, St::Connected | St::Accept | St::RepRecv) && !is_ud(s.ps) {
        crate::qp::fence(s);
        if let Some(fd) = s.conn {
            let _ = send(fd, &msg_from(s, Kind::Dreq));
        }
    }
    for fd in s.conn.into_iter().chain(s.listen.iter().map(|(fd, _)| *fd)) {
        cm.unwatch(t, fd);
        // SAFETY: our sockets, no longer watched.
        unsafe { libc::close(fd) };
    }
    let s = cm.ids.remove(&t).unwrap();
    if let Some((_, p)) = &s.listen {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = &s.claim {
        let _ = std::fs::remove_file(p);
    }
    cm.forget_events(s.chan, s.ptr);
    if cm.chans.get(&s.chan).is_some_and(|c| c.private) && !cm.ids.values().any(|o| o.chan == s.chan) {
        cm.drop_chan(s.chan);
    }
    // SAFETY: the box made by new_id / on_listen; the caller gives up the id.
    let b = unsafe { Box::from_raw(s.ptr) };
    if !b.id.event.is_null() {
        // SAFETY: the last synchronous call's event, ours.
        drop(unsafe { Box::from_raw(b.id.event.cast::<Ev>()) });
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut a::rdma_cm_id) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let mut cm = lock();
        cm.id(t)?;
        destroy(&mut cm, t);
        Ok(())
    })
}

/// Binds id `t` to `addr` (port 0: an ephemeral one).
fn bind(cm: &mut Cm, t: u64, mut addr: Addr) -> Result<(), i32> {
    let d = devices::get()?;
    let s = cm.id(t)?;
    if s.st != St::Idle {
        return Err(libc::EINVAL);
    }
    let dev = d.for_local(&addr)?;
    let claim = if addr.port == 0 {
        ports::claim_ephemeral(&d.rundir, s.ps, &mut addr)?
    } else {
        ports::claim(&d.rundir, s.ps, &addr)?
    };
    let s = cm.ids.get_mut(&t).unwrap();
    s.claim = Some(claim);
    s.src = Some(addr);
    // Bound to the wildcard, an id has no device yet (as the kernel's).
    s.dev = (!addr.is_any()).then_some(dev);
    s.st = St::Bound;
    publish_route(s, [0; 16], false);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut a::rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        // SAFETY: the caller's sockaddr.
        let a = unsafe { Addr::from_sockaddr(addr) }?;
        bind(&mut lock(), t, a)
    })
}

/// An id operation that queues an event: `body`, then, on a synchronous id, waiting for that
/// event.
fn queued(t: u64, body: impl FnOnce() -> Result<(), i32>) -> Result<(), i32> {
    body()?;
    complete(t)
}

/// For a synchronous id: waits for the event the call started and turns it into the result, as
/// rdma-core's librdmacm does (REJECTED: ECONNREFUSED; other failures: their status).
pub(crate) fn complete(t: u64) -> Result<(), i32> {
    let chan = {
        let cm = lock();
        match cm.ids.get(&t) {
            Some(s) if s.sync => s.chan,
            _ => return Ok(()),
        }
    };
    let ev = cm::get_event(chan)?;
    let cm = lock();
    let s = cm.id(t)?;
    // SAFETY: the id's public struct; its previous event is ours and replaced.
    let id = unsafe { &mut (*s.ptr).id };
    if !id.event.is_null() {
        // SAFETY: as above.
        drop(unsafe { Box::from_raw(id.event.cast::<Ev>()) });
    }
    id.event = ev.cast();
    // SAFETY: our event.
    let e = unsafe { &(*ev).ev };
    match (e.event, e.status) {
        (et::RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
        (_, st) if st < 0 => Err(-st),
        (_, st) if st > 0 => Err(st),
        (et::RDMA_CM_EVENT_ADDR_ERROR | et::RDMA_CM_EVENT_ROUTE_ERROR | et::RDMA_CM_EVENT_UNREACHABLE, _) => {
            Err(libc::EHOSTUNREACH)
        }
        _ => Ok(()),
    }
}

/// The local source for reaching `dst` from a wildcard or unbound id: the loopback itself, or
/// the simulated port that has the address (all of them are on this host); None off the host.
fn source_for(d: &devices::Devices, dst: &Addr) -> Option<(Ip, usize)> {
    if dst.is_any() || dst.is_loopback() {
        let ip = match dst.ip {
            Ip::V4(_) => Ip::V4([127, 0, 0, 1]),
            Ip::V6(_) => Ip::V6(std::net::Ipv6Addr::LOCALHOST.octets()),
        };
        return d.for_local(dst).ok().map(|i| (ip, i));
    }
    d.for_remote(dst).map(|i| (dst.ip, i))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut a::rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        // SAFETY: the caller's sockaddrs.
        let (dst, src) = unsafe { (Addr::from_sockaddr(dst), (!src.is_null()).then(|| Addr::from_sockaddr(src))) };
        queued(t, || {
            let dst = dst?;
            let d = devices::get()?;
            let mut cm = lock();
            let st = cm.id(t)?.st;
            match (st, src) {
                (St::Idle, Some(s)) => bind(&mut cm, t, s?)?,
                (St::Idle, None) => bind(&mut cm, t, Addr::any(dst.family()))?,
                (St::Bound, _) => {}
                _ => return Err(libc::EINVAL),
            }
            let s = cm.ids.get_mut(&t).unwrap();
            let bound = s.src.unwrap();
            let found = if bound.is_any() {
                source_for(d, &dst)
            } else {
                d.for_remote(&dst).map(|_| (bound.ip, s.dev.unwrap()))
            };
            let Some((ip, dev)) = found else {
                // No route off the simulated host: the address query times out.
                let ev = cm.event(t, et::RDMA_CM_EVENT_ADDR_ERROR, -libc::ETIMEDOUT);
                let at = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
                cm.push_at(t, at, ev);
                return Ok(());
            };
            s.src = Some(Addr { ip, ..bound });
            s.dst = Some(dst);
            s.dev = Some(dev);
            s.st = St::AddrResolved;
            let rd = &d.devs[d.for_remote(&dst).unwrap_or(dev)];
            let dgid = rd.gids.get(rd.gid_index(&dst.ip) as usize).copied().unwrap_or([0; 16]);
            publish_route(s, dgid, false);
            cm.notify(t, et::RDMA_CM_EVENT_ADDR_RESOLVED, 0);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut a::rdma_cm_id, _timeout_ms: c_int) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        queued(t, || {
            let mut cm = lock();
            let s = cm.id_mut(t)?;
            if s.st != St::AddrResolved {
                return Err(libc::EINVAL);
            }
            // SAFETY: the id's public struct.
            let dgid = unsafe { (*s.ptr).id.route.addr.addr.ibaddr.as_ref().dgid.raw };
            publish_route(s, dgid, true);
            s.st = St::RouteResolved;
            cm.notify(t, et::RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut a::rdma_cm_id, backlog: c_int) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let d = devices::get()?;
        let mut cm = lock();
        let s = cm.id(t)?;
        if s.st == St::Listen {
            return Ok(());
        }
        if s.st != St::Bound {
            return Err(libc::EINVAL);
        }
        let path = ports::listen_path(&d.rundir, s.ps, &s.src.unwrap());
        let fd = unix_socket()?;
        let _ = std::fs::remove_file(&path);
        let (sa, len) = sockaddr_un(&path)?;
        // SAFETY: bind/listen on our new socket with our address.
        let ok = unsafe {
            libc::bind(fd, (&sa as *const libc::sockaddr_un).cast(), len) == 0
                && libc::listen(fd, backlog.clamp(1, 4096)) == 0
        };
        if !ok {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            // SAFETY: our socket.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        // accept4 in on_listen loops until EAGAIN.
        set_nonblock(fd);
        let s = cm.ids.get_mut(&t).unwrap();
        s.listen = Some((fd, path));
        s.st = St::Listen;
        cm.watch(t, fd, K_LISTEN);
        Ok(())
    })
}

fn unix_socket() -> Result<c_int, i32> {
    // SAFETY: creates a socket.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
    }
    Ok(fd)
}

fn sockaddr_un(p: &std::path::Path) -> Result<(libc::sockaddr_un, libc::socklen_t), i32> {
    // SAFETY: sockaddr_un is plain old data.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = p.as_os_str().as_encoded_bytes();
    if b.len() >= a.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    for (d, s) in a.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Ok((a, std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t))
}

fn set_nonblock(fd: c_int) {
    // SAFETY: fcntl on our socket.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
}

/// The listener `dst` names, connected: None when no id listens there.
fn connect_listener(rundir: &str, ps_: u32, dst: &Addr) -> Option<c_int> {
    for p in ports::listener_candidates(rundir, ps_, dst) {
        let Ok(fd) = unix_socket() else { return None };
        let ok = sockaddr_un(&p).is_ok_and(|(sa, len)| {
            // SAFETY: connect on our socket with our address.
            unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_un).cast(), len) == 0 }
        });
        if ok {
            set_nonblock(fd);
            return Some(fd);
        }
        // SAFETY: our socket.
        unsafe { libc::close(fd) };
    }
    None
}

/// RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH: the device's limit; above it: EINVAL.
fn rd_atom(x: u8) -> Result<u8, i32> {
    match x {
        0xff => Ok(MAX_RD_ATOM),
        x if x <= MAX_RD_ATOM => Ok(x),
        _ => Err(libc::EINVAL),
    }
}

fn private_of(p: *const c_void, len: u8, kind: Kind) -> Result<Vec<u8>, i32> {
    if len as usize > kind.private_max() {
        return Err(libc::EINVAL);
    }
    if p.is_null() || len == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's private data of `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) }.to_vec())
}

/// The REQ or REP (SIDR REQ/REP) id `s` sends: its QP's number (without one, the number the
/// parameters name), its PSN, rdma_cm's Q_Key, the negotiated RDMA read resources and retry
/// counts, and the private data.
fn conn_msg(s: &IdSt, kind: Kind, qp: *mut v::ibv_qp, p: Option<&a::rdma_conn_param>, private: Vec<u8>) -> Msg {
    let mut m = msg_from(s, kind);
    // SAFETY: the id's QP, if any, is the caller's.
    m.qpn = if qp.is_null() { p.map_or(0, |p| p.qp_num) } else { unsafe { (*qp).qp_num } };
    m.psn = s.psn;
    m.qkey = crate::abi::RDMA_UDP_QKEY;
    m.responder_resources = s.responder_resources;
    m.initiator_depth = s.initiator_depth;
    m.retry_count = s.retry_count;
    m.rnr_retry_count = s.rnr_retry_count;
    m.private = private;
    m
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut a::rdma_cm_id, param: *mut a::rdma_conn_param) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        // SAFETY: the caller's optional parameters.
        let p = unsafe { param.as_ref() };
        queued(t, || {
            let d = devices::get()?;
            let mut cm = lock();
            let s = cm.id_mut(t)?;
            if s.st != St::RouteResolved {
                return Err(libc::EINVAL);
            }
            let ud = is_ud(s.ps);
            let kind = if ud { Kind::SidrReq } else { Kind::Req };
            let private = p.map_or(Ok(Vec::new()), |p| private_of(p.private_data, p.private_data_len, kind))?;
            if let Some(p) = p {
                s.responder_resources = rd_atom(p.responder_resources)?;
                s.initiator_depth = rd_atom(p.initiator_depth)?;
                s.retry_count = p.retry_count.min(7);
                s.rnr_retry_count = p.rnr_retry_count.min(7);
            }
            // SAFETY: the id's public struct; its QP, if any, is the caller's.
            let qp = unsafe { (*s.ptr).id.qp };
            let mut m = conn_msg(s, kind, qp, p, private);
            m.srq = p.map_or(0, |p| p.srq);
            let Some(fd) = connect_listener(&d.rundir, s.ps, &s.dst.unwrap()) else {
                // Nobody listens: the peer's CM refuses (REJ: invalid service ID; SIDR:
                // unsupported).
                let ev = if ud {
                    cm.event(t, et::RDMA_CM_EVENT_UNREACHABLE, proto::SIDR_UNSUPPORTED as i32)
                } else {
                    cm.event(t, et::RDMA_CM_EVENT_REJECTED, REJ_INVALID_SERVICE_ID as i32)
                };
                cm.push(t, ev);
                return Ok(());
            };
            send(fd, &m)?;
            s.conn = Some(fd);
            s.st = St::Connect;
            cm.watch(t, fd, K_CONN);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut a::rdma_cm_id, param: *mut a::rdma_conn_param) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        // SAFETY: the caller's optional parameters.
        let p = unsafe { param.as_ref() };
        queued(t, || {
            let mut cm = lock();
            let s = cm.id_mut(t)?;
            if s.st != St::ReqRecv {
                return Err(libc::EINVAL);
            }
            let ud = is_ud(s.ps);
            let kind = if ud { Kind::SidrRep } else { Kind::Rep };
            let private = p.map_or(Ok(Vec::new()), |p| private_of(p.private_data, p.private_data_len, kind))?;
            let remote = s.remote.clone().unwrap();
            if let Some(p) = p {
                s.responder_resources = rd_atom(p.responder_resources)?;
                s.initiator_depth = rd_atom(p.initiator_depth)?;
                s.rnr_retry_count = p.rnr_retry_count.min(7);
            }
            s.retry_count = remote.retry_count;
            // SAFETY: the id's public struct; its QP, if any, is the caller's.
            let qp = unsafe { (*s.ptr).id.qp };
            if !qp.is_null() && !ud {
                crate::qp::connect(s, qp)?;
            }
            let m = conn_msg(s, kind, qp, p, private);
            let fd = s.conn.ok_or(libc::ECONNRESET)?;
            send(fd, &m)?;
            s.st = if ud { St::Connected } else { St::Accept };
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(id: *mut a::rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let mut cm = lock();
        let s = cm.id_mut(t)?;
        if s.st != St::ReqRecv {
            return Err(libc::EINVAL);
        }
        let ud = is_ud(s.ps);
        let kind = if ud { Kind::SidrRep } else { Kind::Rej };
        let mut m = msg_from(s, kind);
        m.private = private_of(data, len, kind)?;
        m.status = if ud { proto::SIDR_REJECT } else { REJ_CONSUMER_DEFINED };
        if let Some(fd) = s.conn {
            send(fd, &m)?;
        }
        s.st = St::Idle;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut a::rdma_cm_id, _event: c_int) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let mut cm = lock();
        match cm.id(t)?.st {
            // Data arrived before the RTU: the connection is established (IB_EVENT_COMM_EST).
            St::Accept => {
                cm.id_mut(t)?.st = St::Connected;
                cm.notify(t, et::RDMA_CM_EVENT_ESTABLISHED, 0);
                Ok(())
            }
            St::Connected => Ok(()),
            _ => Err(libc::EINVAL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut a::rdma_cm_id) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let mut cm = lock();
        let s = cm.id_mut(t)?;
        // As rdma-core's librdmacm: the id's QP goes to ERR first, whatever the connection's
        // state, so its posted work requests complete as flushed.
        // SAFETY: the id's public struct; its QP, if any.
        let qp = unsafe { (*s.ptr).id.qp };
        if !qp.is_null() && !is_ud(s.ps) {
            crate::qp::to_error(qp);
        }
        match s.st {
            St::Connected | St::Accept | St::RepRecv if !is_ud(s.ps) => {
                crate::qp::fence(s);
                if let Some(fd) = s.conn {
                    let _ = send(fd, &msg_from(s, Kind::Dreq));
                }
                s.st = St::DiscSent;
                Ok(())
            }
            // The peer disconnected first, or we already did: the kernel answers 0 too.
            St::Disconnected | St::DiscSent | St::Connected => Ok(()),
            _ => Err(libc::EINVAL),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut a::rdma_cm_id) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let mut cm = lock();
        let s = cm.id_mut(t)?;
        if s.st != St::RepRecv {
            return Err(libc::EINVAL);
        }
        if let Some(fd) = s.conn {
            send(fd, &msg_from(s, Kind::Rtu))?;
        }
        s.st = St::Connected;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut a::rdma_cm_id,
    attr: *mut v::ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        // SAFETY: the caller's output structs.
        let (attr, mask) = unsafe { (&mut *attr, &mut *mask) };
        (*attr, *mask) = crate::qp::attr(lock().id(t)?, attr.qp_state)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(ch: *mut a::rdma_event_channel, out: *mut *mut a::rdma_cm_event) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller's channel.
        let c = unsafe { chan_token(ch) };
        match cm::get_event(c) {
            Ok(e) => {
                // SAFETY: the caller's output pointer; the event is handed over until acked.
                unsafe { *out = e.cast() };
                0
            }
            Err(e) => err(e, -1),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(ev: *mut a::rdma_cm_event) -> c_int {
    ffi(-1, || {
        if ev.is_null() {
            return err(libc::EINVAL, -1);
        }
        // SAFETY: an event rdma_get_cm_event handed out (an Ev box), returned to us.
        drop(unsafe { Box::from_raw(ev.cast::<Ev>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(id: *mut a::rdma_cm_id, ch: *mut a::rdma_event_channel) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        // SAFETY: the caller's optional channel.
        let to = (!ch.is_null()).then(|| unsafe { chan_token(ch) });
        let mut cm = lock();
        let from = cm.id(t)?.chan;
        let to = match to {
            Some(c) => c,
            None => cm.new_chan(true)?,
        };
        cm.move_id(t, to);
        let sync = cm.chans.get(&to).is_some_and(|c| c.private);
        cm.ids.get_mut(&t).unwrap().sync = sync;
        if cm.chans.get(&from).is_some_and(|c| c.private) && !cm.ids.values().any(|o| o.chan == from) {
            cm.drop_chan(from);
        }
        Ok(())
    })
}

unsafe fn port_of(sa: *const libc::sockaddr) -> u16 {
    // SAFETY: the route's sockaddr storage.
    unsafe { Addr::from_sockaddr(sa) }.map_or(0, |a| a.port.to_be())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut a::rdma_cm_id) -> u16 {
    // SAFETY: the caller's id; reading its public route.
    ffi(0, || unsafe { port_of((&(*id).route.addr.__bindgen_anon_1.src_storage as *const a::sockaddr_storage).cast()) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut a::rdma_cm_id) -> u16 {
    // SAFETY: the caller's id; reading its public route.
    ffi(0, || unsafe { port_of((&(*id).route.addr.__bindgen_anon_2.dst_storage as *const a::sockaddr_storage).cast()) })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut a::rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    // SAFETY: the caller's id.
    let t = unsafe { token(id) };
    int_call(|| {
        let mut cm = lock();
        let s = cm.id_mut(t)?;
        let lv = level as u32;
        let nm = name as u32;
        match (lv, nm) {
            (a::RDMA_OPTION_ID, a::RDMA_OPTION_ID_TOS) if len == 1 => Ok(()),
            // The kernel's rdma_set_ack_timeout: RC ids only.
            (a::RDMA_OPTION_ID, a::RDMA_OPTION_ID_ACK_TIMEOUT) if len == 1 && !is_ud(s.ps) => {
                // SAFETY: the caller's byte.
                s.ack_timeout = Some(unsafe { *val.cast::<u8>() });
                Ok(())
            }
            (a::RDMA_OPTION_ID, a::RDMA_OPTION_ID_REUSEADDR) if len == 4 => Ok(()),
            (a::RDMA_OPTION_ID, a::RDMA_OPTION_ID_AFONLY) if len == 4 => {
                // SAFETY: the caller's int.
                s.afonly = unsafe { *val.cast::<c_int>() } != 0;
                Ok(())
            }
            (a::RDMA_OPTION_ID, _) | (a::RDMA_OPTION_IB, a::RDMA_OPTION_IB_PATH) => Err(libc::EINVAL),
            _ => Err(libc::ENOSYS),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut v::ibv_context {
    ffi(null_mut(), || {
        let d = match devices::get() {
            Ok(d) => d,
            Err(e) => return err(e, null_mut()),
        };
        let n = d.devs.len();
        // SAFETY: a malloc'd array of n + 1 pointers, freed by rdma_free_devices.
        let list = unsafe { libc::calloc(n + 1, std::mem::size_of::<usize>()) }.cast::<*mut v::ibv_context>();
        if list.is_null() {
            return err(libc::ENOMEM, null_mut());
        }
        for (i, dev) in d.devs.iter().enumerate() {
            // SAFETY: i < n + 1 entries.
            unsafe { *list.add(i) = dev.ctx };
        }
        if !num.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num = n as c_int };
        }
        list
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut v::ibv_context) {
    // SAFETY: a list from rdma_get_devices.
    ffi((), || unsafe { libc::free(list.cast()) })
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // Without rsockets every descriptor is an ordinary one: rsocket's rpoll is poll(2) then.
    // SAFETY: the caller's pollfd array of n entries.
    ffi(-1, || unsafe { libc::poll(fds, n, timeout) })
}
