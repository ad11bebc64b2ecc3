//! The 40-byte GRH a UD receive buffer starts with, as the NIC writes it (the engine) and
//! `ibv_create_ah_from_wc` reads it (ah.rs). On RoCE the GRH area holds an IPv6 header (RoCE v1,
//! or v2 over IPv6) or, for RoCE v2 between IPv4-mapped GIDs, 20 unused bytes and the IPv4 header.

use crate::device::GidType;
use mrshim_verbs as v;

pub const GRH_LEN: usize = 40;
/// IPv6 next header of a RoCE v1 / InfiniBand GRH: the IB base transport header.
pub const NEXT_HDR_BTH: u8 = 0x1b;
const NEXT_HDR_UDP: u8 = 17;

pub fn is_v4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
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
