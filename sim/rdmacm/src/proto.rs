//! What arrives on the CM's sockets becomes events: a listener's new connections become ids
//! waiting for their REQ, and each message moves an id on as the IB CM state machine does
//! (REQ -> CONNECT_REQUEST, REP -> ESTABLISHED or CONNECT_RESPONSE, RTU -> ESTABLISHED,
//! REJ -> REJECTED, DREQ/DREP -> DISCONNECTED, SIDR REP -> ESTABLISHED or UNREACHABLE).

use crate::abi::{self as a, rdma_cm_event_type as et, rdma_port_space as ps};
use crate::cm::{Cm, Ev, IdBox, IdSt, St, K_CONN};
use crate::devices;
use crate::wire::{Kind, Msg, REJ_INVALID_SERVICE_ID};
use mrshim_verbs::{self as v, rc};
use std::os::fd::RawFd;

pub fn is_ud(ps_: u32) -> bool {
    ps_ == ps::RDMA_PS_UDP || ps_ == ps::RDMA_PS_IPOIB
}

pub fn send(fd: RawFd, m: &Msg) -> Result<(), i32> {
    let b = m.encode();
    // SAFETY: sends from a live buffer; MSG_NOSIGNAL so a gone peer is EPIPE, not SIGPIPE.
    let n = unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) };
    if n == b.len() as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EPIPE))
    }
}

/// A message from id `s` to its peer, with the port facts every CM message carries.
pub fn msg_from(s: &IdSt, kind: Kind) -> Msg {
    let src = s.src.unwrap_or(crate::addr::Addr::any(libc::AF_INET));
    let mut m = Msg::new(kind, src, s.dst.unwrap_or(src));
    if let (Ok(d), Some(i)) = (devices::get(), s.dev) {
        let dev = &d.devs[i];
        m.gid = dev.gids.get(dev.gid_index(&src.ip) as usize).copied().unwrap_or([0; 16]);
        m.lid = dev.lid;
        m.mtu = dev.mtu as u8;
    }
    m
}

/// The address vector from id `s`'s port to its peer (`gid`/`lid` of the peer).
pub fn ah_attr(s: &IdSt, gid: [u8; 16], lid: u16) -> v::ibv_ah_attr {
    let dev = devices::get().ok().and_then(|d| s.dev.map(|i| &d.devs[i]));
    match dev {
        Some(d) if d.roce => {
            let sgid_index = d.gid_index(&s.src.map_or(crate::addr::Ip::V4([0; 4]), |a| a.ip));
            rc::ah(1, 0, Some(rc::Grh { dgid: gid, sgid_index, hop_limit: 64 }))
        }
        _ => rc::ah(1, lid, None),
    }
}

/// Fills the id's public route (addresses, GIDs, P_Key, its device and port) from its state.
pub fn publish_route(s: &mut IdSt, dgid: [u8; 16], with_path: bool) {
    let Ok(d) = devices::get() else { return };
    // SAFETY: the id's public struct, owned by this library; written under the CM lock.
    let id = unsafe { &mut (*s.ptr).id };
    if let Some(i) = s.dev {
        // As rdma-core's ucma_get_device: an id bound to a device has its context and the
        // device's PD (programs create their QPs and AHs on `id->pd`); a QP made through the
        // id later puts its own PD there.
        if id.pd.is_null() || id.verbs != d.devs[i].ctx {
            id.pd = d.devs[i].default_pd();
        }
        id.verbs = d.devs[i].ctx;
        id.port_num = 1;
    }
    let r = &mut id.route;
    if let Some(src) = s.src {
        // SAFETY: the union's storage member holds any sockaddr.
        unsafe { src.write((&mut r.addr.__bindgen_anon_1.src_storage as *mut a::sockaddr_storage).cast()) };
    }
    if let Some(dst) = s.dst {
        // SAFETY: as above.
        unsafe { dst.write((&mut r.addr.__bindgen_anon_2.dst_storage as *mut a::sockaddr_storage).cast()) };
    }
    let m = msg_from(s, Kind::Req);
    // SAFETY: ibaddr is the only member of the address union.
    let ib = unsafe { r.addr.addr.ibaddr.as_mut() };
    ib.sgid.raw = m.gid;
    ib.dgid.raw = dgid;
    ib.pkey = 0xffffu16.to_be();
    if with_path {
        let p = &mut *s.path;
        p.sgid.raw = m.gid;
        p.dgid.raw = dgid;
        p.slid = m.lid.to_be();
        p.pkey = 0xffffu16.to_be();
        p.hop_limit = 64;
        p.reversible = 1;
        p.numb_path = 1;
        p.mtu_selector = 2;
        p.mtu = m.mtu;
        p.rate_selector = 2;
        p.rate = 16; // 100 Gb/s: what the port's IBV_RATE is closest to in ibv_rate's table
        p.packet_life_time_selector = 2;
        p.packet_life_time = 18;
        r.path_rec = (&mut *s.path as *mut a::ibv_sa_path_rec).cast();
        r.num_paths = 1;
    }
}

fn set_conn_param(ev: &mut Ev, m: &Msg) {
    ev.private = m.padded_private();
    // SAFETY: writing the conn member of the event's parameter union.
    let c = unsafe { ev.ev.param.conn.as_mut() };
    c.private_data = ev.private.as_ptr().cast();
    c.private_data_len = ev.private.len() as u8;
    c.responder_resources = m.initiator_depth;
    c.initiator_depth = m.responder_resources;
    c.flow_control = 1;
    c.retry_count = m.retry_count;
    c.rnr_retry_count = m.rnr_retry_count;
    c.srq = m.srq;
    c.qp_num = m.qpn;
}

fn set_ud_param(ev: &mut Ev, m: &Msg, ah: v::ibv_ah_attr) {
    ev.private = m.padded_private();
    // SAFETY: writing the ud member of the event's parameter union.
    let u = unsafe { ev.ev.param.ud.as_mut() };
    u.private_data = ev.private.as_ptr().cast();
    u.private_data_len = ev.private.len() as u8;
    u.ah_attr = ah;
    u.qp_num = m.qpn;
    u.qkey = m.qkey;
}

/// New connections on listener `lid`'s socket: each one an id waiting for its REQ.
pub fn on_listen(cm: &mut Cm, lid: u64) {
    let Some((lfd, _)) = cm.ids.get(&lid).and_then(|s| s.listen.clone()) else { return };
    loop {
        // SAFETY: accept on our listening socket; no peer address wanted.
        let fd = unsafe {
            libc::accept4(lfd, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        };
        if fd < 0 {
            return;
        }
        let l = &cm.ids[&lid];
        // SAFETY: the listener's public struct.
        let lpub = unsafe { &(*l.ptr).id };
        let (chan, ps_, sync, afonly) = (l.chan, l.ps, l.sync, l.afonly);
        let token = cm.token();
        // SAFETY: rdma_cm_id is plain old data; all-zero is valid.
        let mut id: a::rdma_cm_id = unsafe { std::mem::zeroed() };
        id.context = lpub.context;
        id.channel = lpub.channel;
        id.ps = ps_;
        id.qp_type = lpub.qp_type;
        let ptr = Box::into_raw(Box::new(IdBox { id, token }));
        let mut st = IdSt::new(ptr, chan, ps_);
        st.st = St::ReqWait;
        st.conn = Some(fd);
        st.parent = Some(lid);
        st.sync = sync;
        st.afonly = afonly;
        cm.ids.insert(token, st);
        cm.watch(token, fd, K_CONN);
    }
}

/// Messages (or the end) on id `id`'s connection.
pub fn on_conn(cm: &mut Cm, id: u64) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Some(fd) = cm.ids.get(&id).and_then(|s| s.conn) else { return };
        // SAFETY: receives one message into our buffer.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            return;
        }
        if n <= 0 {
            return eof(cm, id);
        }
        if let Some(m) = Msg::decode(&buf[..n as usize]) {
            handle(cm, id, m);
        }
    }
}

fn close_conn(cm: &mut Cm, id: u64) {
    if let Some(fd) = cm.ids.get(&id).and_then(|s| s.conn) {
        cm.unwatch(id, fd);
        // SAFETY: our socket, no longer watched.
        unsafe { libc::close(fd) };
        cm.ids.get_mut(&id).unwrap().conn = None;
    }
}

fn set_state(cm: &mut Cm, id: u64, st: St) {
    if let Some(s) = cm.ids.get_mut(&id) {
        s.st = st;
    }
}

fn eof(cm: &mut Cm, id: u64) {
    close_conn(cm, id);
    let Some(st) = cm.ids.get(&id).map(|s| s.st) else { return };
    match st {
        St::ReqWait => {
            // A connection that never sent its REQ: nobody saw this id.
            let s = cm.ids.remove(&id).unwrap();
            // SAFETY: the box made in on_listen, never handed out.
            drop(unsafe { Box::from_raw(s.ptr) });
        }
        St::Connect => {
            let ev = cm.event(id, et::RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT);
            set_state(cm, id, St::RouteResolved);
            cm.push(id, ev);
        }
        St::Connected | St::Accept | St::RepRecv | St::DiscSent => {
            let ud = cm.ids.get(&id).is_some_and(|s| is_ud(s.ps));
            set_state(cm, id, St::Disconnected);
            if !ud {
                // The peer's process is gone: what it sent before is handled first.
                crate::qp::fence(&cm.ids[&id]);
                cm.notify(id, et::RDMA_CM_EVENT_DISCONNECTED, 0);
            }
        }
        _ => {}
    }
}

fn handle(cm: &mut Cm, id: u64, m: Msg) {
    let Some(st) = cm.ids.get(&id).map(|s| s.st) else { return };
    match (st, m.kind) {
        (St::ReqWait, Kind::Req | Kind::SidrReq) => on_req(cm, id, m),
        (St::Connect, Kind::Rep) => on_rep(cm, id, m),
        (St::Connect, Kind::SidrRep) => on_sidr_rep(cm, id, m),
        (St::Connect, Kind::Rej) => {
            let mut ev = cm.event(id, et::RDMA_CM_EVENT_REJECTED, m.status as i32);
            set_conn_param(&mut ev, &m);
            set_state(cm, id, St::RouteResolved);
            close_conn(cm, id);
            cm.push(id, ev);
        }
        (St::Accept, Kind::Rtu) => {
            let ev = cm.event(id, et::RDMA_CM_EVENT_ESTABLISHED, 0);
            set_state(cm, id, St::Connected);
            cm.push(id, ev);
        }
        (St::Connected | St::Accept | St::RepRecv | St::DiscSent, Kind::Dreq) | (St::DiscSent, Kind::Drep) => {
            // Whatever the peer's NIC sent before this message (the ACKs of our sends) is
            // handled before the DISCONNECTED event, as one wire delivers them in order.
            crate::qp::fence(&cm.ids[&id]);
            if m.kind == Kind::Dreq {
                let s = &cm.ids[&id];
                if let Some(fd) = s.conn {
                    let _ = send(fd, &msg_from(s, Kind::Drep));
                }
            }
            set_state(cm, id, St::Disconnected);
            cm.notify(id, et::RDMA_CM_EVENT_DISCONNECTED, 0);
        }
        _ => {}
    }
}

/// Refuses a request the way the passive side's CM does when nobody can take it.
fn refuse(fd: RawFd, m: &Msg) {
    let kind = if m.kind == Kind::SidrReq { Kind::SidrRep } else { Kind::Rej };
    let mut r = Msg::new(kind, m.dst, m.src);
    r.status = if kind == Kind::SidrRep { SIDR_UNSUPPORTED } else { REJ_INVALID_SERVICE_ID };
    let _ = send(fd, &r);
}

/// SIDR REP statuses (the UNREACHABLE event's status on the UD active side).
pub const SIDR_UNSUPPORTED: u32 = 1;
pub const SIDR_REJECT: u32 = 2;

fn on_req(cm: &mut Cm, id: u64, m: Msg) {
    let parent = cm.ids[&id].parent.unwrap_or(0);
    let listening = cm.ids.get(&parent).is_some_and(|l| l.st == St::Listen);
    let dev = devices::get().ok().and_then(|d| d.for_local(&m.dst).ok());
    let fd = cm.ids[&id].conn.unwrap();
    let (Some(dev), true) = (dev, listening) else {
        refuse(fd, &m);
        return eof(cm, id);
    };
    let lptr = cm.ids[&parent].ptr;
    let s = cm.ids.get_mut(&id).unwrap();
    s.dev = Some(dev);
    s.src = Some(m.dst);
    s.dst = Some(m.src);
    s.responder_resources = m.initiator_depth;
    s.initiator_depth = m.responder_resources;
    s.remote = Some(m.clone());
    s.st = St::ReqRecv;
    publish_route(s, m.gid, true);
    let ud = is_ud(s.ps);
    let ah = ah_attr(s, m.gid, m.lid);
    let mut ev = cm.event(id, et::RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    ev.ev.listen_id = lptr.cast();
    if ud {
        set_ud_param(&mut ev, &m, ah);
    } else {
        set_conn_param(&mut ev, &m);
    }
    cm.push(id, ev);
}

fn on_rep(cm: &mut Cm, id: u64, m: Msg) {
    let s = cm.ids.get_mut(&id).unwrap();
    s.remote = Some(m.clone());
    // SAFETY: the id's public struct.
    let qp = unsafe { (*s.ptr).id.qp };
    if qp.is_null() {
        s.st = St::RepRecv;
        let mut ev = cm.event(id, et::RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
        set_conn_param(&mut ev, &m);
        return cm.push(id, ev);
    }
    if let Err(e) = crate::qp::connect(s, qp) {
        let mut rej = msg_from(s, Kind::Rej);
        rej.status = crate::wire::REJ_CONSUMER_DEFINED;
        if let Some(fd) = s.conn {
            let _ = send(fd, &rej);
        }
        s.st = St::RouteResolved;
        close_conn(cm, id);
        let ev = cm.event(id, et::RDMA_CM_EVENT_CONNECT_ERROR, -e);
        return cm.push(id, ev);
    }
    let rtu = msg_from(s, Kind::Rtu);
    if let Some(fd) = s.conn {
        let _ = send(fd, &rtu);
    }
    s.st = St::Connected;
    let mut ev = cm.event(id, et::RDMA_CM_EVENT_ESTABLISHED, 0);
    set_conn_param(&mut ev, &m);
    cm.push(id, ev);
}

fn on_sidr_rep(cm: &mut Cm, id: u64, m: Msg) {
    close_conn(cm, id);
    let s = cm.ids.get_mut(&id).unwrap();
    if m.status != 0 {
        s.st = St::RouteResolved;
        let mut ev = cm.event(id, et::RDMA_CM_EVENT_UNREACHABLE, m.status as i32);
        set_ud_param(&mut ev, &m, zeroed_ah());
        return cm.push(id, ev);
    }
    s.remote = Some(m.clone());
    s.st = St::Connected;
    let ah = ah_attr(s, m.gid, m.lid);
    let mut ev = cm.event(id, et::RDMA_CM_EVENT_ESTABLISHED, 0);
    set_ud_param(&mut ev, &m, ah);
    cm.push(id, ev);
}

fn zeroed_ah() -> v::ibv_ah_attr {
    // SAFETY: ibv_ah_attr is plain old data; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

impl IdSt {
    pub fn new(ptr: *mut IdBox, chan: u64, ps_: u32) -> IdSt {
        IdSt {
            ptr,
            chan,
            ps: ps_,
            st: St::Idle,
            dev: None,
            src: None,
            dst: None,
            claim: None,
            listen: None,
            conn: None,
            parent: None,
            remote: None,
            psn: crate::cm::random_psn(),
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            sync: false,
            // SAFETY: the path record is plain old data; all-zero is valid.
            path: Box::new(unsafe { std::mem::zeroed() }),
            ep_qp: None,
            own_cqs: false,
            afonly: false,
            ack_timeout: None,
        }
    }
}
