//! Address handles for UD QPs (`ibv_create_ah`, `ibv_create_ah_from_wc`, `ibv_init_ah_from_wc`)
//! and the 40-byte GRH a UD receive buffer starts with. On RoCE the GRH area holds what the
//! NIC puts there: an IPv6 header (RoCE v1, or v2 over IPv6) or, for RoCE v2 between
//! IPv4-mapped GIDs, 20 unused bytes and the IPv4 header.
//!
//! The exported functions have the safety contracts of rdma-core's functions of the same name.
#![allow(clippy::missing_safety_doc)]

use crate::device::{Device, GidType, PORT};
use crate::engine::UdDest;
use crate::objects::{ctx, device_of, outer, Pd};
use crate::{errno_ret, ffi, set_errno};
use mrshim_verbs as v;
use std::os::raw::c_int;
use std::ptr::null_mut;

pub const GRH_LEN: usize = 40;
/// IPv6 next header of a RoCE v1 / InfiniBand GRH: the IB base transport header.
const NEXT_HDR_BTH: u8 = 0x1b;
const NEXT_HDR_UDP: u8 = 17;

#[repr(C)]
pub struct Ah {
    pub ah: v::ibv_ah,
    pub attr: v::ibv_ah_attr,
}

fn is_v4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
}

/// The kernel's checks of an address vector: port, a GRH whose source GID exists (mandatory on
/// RoCE), a destination LID on InfiniBand without GRH.
pub fn check_ah_attr(dev: &Device, a: &v::ibv_ah_attr) -> Result<(), i32> {
    if a.port_num != PORT {
        return Err(libc::EINVAL);
    }
    if dev.is_roce() && a.is_global == 0 {
        return Err(libc::EINVAL);
    }
    if a.is_global != 0 && a.grh.sgid_index as usize >= dev.gids.len() {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// The GRH the receiver of a `payload_len`-byte datagram from `sgid` (of type `ty`) sees.
pub fn build_grh(sgid: &[u8; 16], ty: GidType, route: &v::ibv_global_route, payload_len: usize) -> [u8; GRH_LEN] {
    // SAFETY: ibv_gid is a 16-byte union; raw is always valid.
    let dgid = unsafe { route.dgid.raw };
    let mut g = [0u8; GRH_LEN];
    if ty == GidType::RoceV2 && is_v4_mapped(sgid) {
        let ip = &mut g[20..];
        let total = (20 + 8 + 12 + 8 + payload_len + 4) as u16; // IP, UDP, BTH, DETH, data, ICRC
        ip[0] = 0x45;
        ip[1] = route.traffic_class;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40; // don't fragment
        ip[8] = route.hop_limit;
        ip[9] = NEXT_HDR_UDP;
        ip[12..16].copy_from_slice(&sgid[12..]);
        ip[16..20].copy_from_slice(&dgid[12..]);
        let sum = ip.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = (sum & 0xffff) + (sum >> 16);
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    } else {
        let word = (6u32 << 28) | ((route.traffic_class as u32) << 20) | (route.flow_label & 0xf_ffff);
        g[..4].copy_from_slice(&word.to_be_bytes());
        g[4..6].copy_from_slice(&((payload_len + 12 + 8 + 4) as u16).to_be_bytes());
        g[6] = if ty == GidType::RoceV2 { NEXT_HDR_UDP } else { NEXT_HDR_BTH };
        g[7] = route.hop_limit;
        g[8..24].copy_from_slice(sgid);
        g[24..40].copy_from_slice(&dgid);
    }
    g
}

/// What a received GRH says.
#[derive(Debug, PartialEq, Eq)]
pub struct GrhFields {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub ty: GidType,
    pub traffic_class: u8,
    pub flow_label: u32,
}

pub fn parse_grh(g: &[u8; GRH_LEN]) -> Option<GrhFields> {
    if g[20] == 0x45 && g[..20].iter().all(|&b| b == 0) {
        let mapped = |ip: &[u8]| {
            let mut x = [0u8; 16];
            x[10] = 0xff;
            x[11] = 0xff;
            x[12..].copy_from_slice(ip);
            x
        };
        return Some(GrhFields {
            sgid: mapped(&g[32..36]),
            dgid: mapped(&g[36..40]),
            ty: GidType::RoceV2,
            traffic_class: g[21],
            flow_label: 0,
        });
    }
    let word = u32::from_be_bytes(g[..4].try_into().unwrap());
    if word >> 28 != 6 {
        return None;
    }
    let ty = if g[6] == NEXT_HDR_UDP { GidType::RoceV2 } else { GidType::IbRoceV1 };
    Some(GrhFields {
        sgid: g[8..24].try_into().unwrap(),
        dgid: g[24..40].try_into().unwrap(),
        ty,
        traffic_class: (word >> 20) as u8,
        flow_label: word & 0xf_ffff,
    })
}

/// The destination of a UD work request: its address handle (checked at creation), the remote
/// QP number and Q_Key. `None` without an address handle.
///
/// # Safety
/// `ah` is NULL or an address handle this library created.
pub unsafe fn ud_dest(ah: *mut v::ibv_ah, remote_qpn: u32, remote_qkey: u32) -> Option<UdDest> {
    // SAFETY: as the caller guarantees.
    let a = unsafe { ah.cast::<Ah>().as_ref() }?;
    // SAFETY: its context is ours.
    let dev = device_of(unsafe { ctx(a.ah.context) });
    let grh = (a.attr.is_global != 0).then(|| {
        let (gid, ty) = dev.gids[a.attr.grh.sgid_index as usize];
        (gid, ty, a.attr.grh)
    });
    let sl = match &grh {
        Some((gid, GidType::RoceV2, _)) if dev.is_roce() => 0x8 | if is_v4_mapped(gid) { 0x2 } else { 0x1 },
        _ if dev.is_roce() => 0,
        _ => a.attr.sl,
    };
    Some(UdDest { qpn: remote_qpn & 0xff_ffff, qkey: remote_qkey, grh, slid: dev.lid, sl })
}

pub unsafe extern "C" fn ibv_create_ah(pd: *mut v::ibv_pd, attr: *mut v::ibv_ah_attr) -> *mut v::ibv_ah {
    ffi(null_mut(), || {
        // SAFETY: the caller's PD (its context is ours) and attribute struct.
        let (p, a) = unsafe { (outer::<Pd, _>(pd), *attr) };
        // SAFETY: as above.
        let dev = device_of(unsafe { ctx(p.pd.context) });
        if let Err(e) = check_ah_attr(dev, &a) {
            return errno_ret(e, null_mut());
        }
        let ah = v::ibv_ah { context: p.pd.context, pd, handle: p.id as u32 };
        // SAFETY: pd is the caller's live PD.
        unsafe { Pd::count(pd, 1) };
        Box::into_raw(Box::new(Ah { ah, attr: a })).cast()
    })
}

pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut v::ibv_ah) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: ah came from ibv_create_ah.
        let b = unsafe { Box::from_raw(ah.cast::<Ah>()) };
        // SAFETY: the AH's PD outlives it.
        unsafe { Pd::count(b.ah.pd, -1) };
        0
    })
}

/// The address vector that answers the sender of a received datagram.
fn ah_from_wc(dev: &Device, port: u8, wc: &v::ibv_wc, grh: Option<&[u8; GRH_LEN]>) -> Result<v::ibv_ah_attr, i32> {
    if port != PORT {
        return Err(libc::EINVAL);
    }
    // SAFETY: plain old data.
    let mut a: v::ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port;
    let has_grh = wc.wc_flags & v::ibv_wc_flags::IBV_WC_GRH.0 != 0;
    if let (true, Some(g)) = (has_grh, grh) {
        let f = parse_grh(g).ok_or(libc::EINVAL)?;
        let idx = dev.gids.iter().position(|(gid, t)| *gid == f.dgid && *t == f.ty).ok_or(libc::ENOENT)?;
        a.is_global = 1;
        a.grh.dgid.raw = f.sgid;
        a.grh.sgid_index = idx as u8;
        a.grh.hop_limit = 0xff;
        a.grh.traffic_class = f.traffic_class;
        a.grh.flow_label = f.flow_label;
    } else if dev.is_roce() {
        return Err(libc::EINVAL);
    }
    Ok(a)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut v::ibv_context,
    port: u8,
    wc: *mut v::ibv_wc,
    grh: *mut v::ibv_grh,
    out: *mut v::ibv_ah_attr,
) -> c_int {
    ffi(-1, || {
        // SAFETY: the caller's context, completion, and received GRH (40 bytes) or NULL.
        let (dev, wc, grh) = unsafe { (device_of(ctx(c)), &*wc, grh.cast::<[u8; GRH_LEN]>().as_ref()) };
        match ah_from_wc(dev, port, wc, grh) {
            Ok(a) => {
                // SAFETY: the caller's out struct.
                unsafe { *out = a };
                0
            }
            Err(e) => errno_ret(e, -1),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut v::ibv_pd,
    wc: *mut v::ibv_wc,
    grh: *mut v::ibv_grh,
    port: u8,
) -> *mut v::ibv_ah {
    // SAFETY: plain old data.
    let mut a: v::ibv_ah_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's objects, passed on.
    if unsafe { ibv_init_ah_from_wc((*pd).context, port, wc, grh, &mut a) } != 0 {
        return null_mut();
    }
    // SAFETY: as above.
    unsafe { ibv_create_ah(pd, &mut a) }
}

/// rdma-core's ibv_resolve_eth_l2_from_gid asks the kernel's neighbour table; the simulated
/// ports have no netdev, so there is nothing to resolve.
#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _c: *mut v::ibv_context,
    _attr: *mut v::ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_devices;

    fn route(dgid: [u8; 16]) -> v::ibv_global_route {
        // SAFETY: plain old data.
        let mut r: v::ibv_global_route = unsafe { std::mem::zeroed() };
        r.dgid.raw = dgid;
        r.hop_limit = 64;
        r.traffic_class = 0x20;
        r.flow_label = 0x12345;
        r
    }

    #[test]
    fn roce_v2_ipv4_grh_is_an_ipv4_header_and_answers_back() {
        let a = Device::new(0, parse_devices("mlx5_0:roce").unwrap().remove(0));
        let b = Device::new(1, parse_devices("x:roce,mlx5_1:roce").unwrap().remove(1));
        let g = build_grh(&a.gids[3].0, GidType::RoceV2, &route(b.gids[3].0), 100);
        assert_eq!(&g[20..22], &[0x45, 0x20]);
        assert_eq!(&g[32..40], &[192, 0, 2, 10, 192, 0, 2, 11]);
        // The IPv4 header checksum verifies (sums to 0xffff).
        let s: u32 = g[20..].chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        assert_eq!((s & 0xffff) + (s >> 16), 0xffff);
        // SAFETY: plain old data.
        let mut wc: v::ibv_wc = unsafe { std::mem::zeroed() };
        wc.wc_flags = v::ibv_wc_flags::IBV_WC_GRH.0;
        let back = ah_from_wc(&b, 1, &wc, Some(&g)).unwrap();
        // SAFETY: raw is always valid.
        assert_eq!(unsafe { back.grh.dgid.raw }, a.gids[3].0);
        assert_eq!(back.grh.sgid_index, 3);
        assert_eq!(check_ah_attr(&b, &back), Ok(()));
    }

    #[test]
    fn roce_v1_grh_is_ipv6_with_bth_next_header() {
        let a = Device::new(0, parse_devices("mlx5_0:roce").unwrap().remove(0));
        let g = build_grh(&a.gids[0].0, GidType::IbRoceV1, &route(a.gids[0].0), 10);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(g[6], NEXT_HDR_BTH);
        let want = GrhFields {
            sgid: a.gids[0].0,
            dgid: a.gids[0].0,
            ty: GidType::IbRoceV1,
            traffic_class: 0x20,
            flow_label: 0x12345,
        };
        assert_eq!(parse_grh(&g), Some(want));
    }

    #[test]
    fn roce_needs_a_grh_with_a_known_source_gid() {
        let a = Device::new(0, parse_devices("mlx5_0:roce").unwrap().remove(0));
        // SAFETY: plain old data.
        let mut at: v::ibv_ah_attr = unsafe { std::mem::zeroed() };
        at.port_num = 1;
        assert_eq!(check_ah_attr(&a, &at), Err(libc::EINVAL));
        at.is_global = 1;
        at.grh.sgid_index = 4;
        assert_eq!(check_ah_attr(&a, &at), Err(libc::EINVAL));
        at.grh.sgid_index = 3;
        assert_eq!(check_ah_attr(&a, &at), Ok(()));
        at.port_num = 2;
        assert_eq!(check_ah_attr(&a, &at), Err(libc::EINVAL));
    }
}
