//! The simulated NICs: what `ibv_devinfo -v` shows. Modelled on a ConnectX-7 (vendor 0x02c9,
//! part 4129) with one port each; RoCE ports carry the usual four-entry GID table
//! (RoCE v1/v2 link-local, RoCE v1/v2 IPv4-mapped, so RoCE v2 IPv4 is index 3).

use crate::config::{DeviceSpec, LinkLayer};
use mrshim_verbs as v;

pub const VENDOR_ID: u32 = 0x02c9;
pub const VENDOR_PART_ID: u32 = 4129;
pub const HW_VER: u32 = 0;
pub const FW_VER: &str = "28.39.1002";
pub const BOARD_ID: &str = "MT_0000000838";
pub const PORT: u8 = 1;
pub const MAX_MSG_SZ: u32 = 1 << 30;
pub const MAX_SGE: i32 = 30;
pub const MAX_QP_WR: i32 = 32768;
pub const MAX_CQE: i32 = 4_194_303;
pub const MAX_INLINE: u32 = 220;
pub const MAX_RD_ATOM: i32 = 16;
/// Shared receive queues (srq.rs): the largest queue and SGE list mlx5 accepts.
pub const MAX_SRQ_WR: u32 = 32767;
pub const MAX_SRQ_SGE: u32 = 31;
/// PCI ids of a ConnectX-7 (Mellanox's PCI vendor id; 0x02c9 is its IEEE OUI, the verbs vendor_id).
pub const PCI_VENDOR: &str = "0x15b3";
pub const PCI_DEVICE: &str = "0x1021";

/// What a ConnectX-7 reports (0x2536_1c36) without what the simulator does not implement:
/// memory windows (MEM_WINDOW, TYPE_2A/2B), XRC, memory management extensions (fast
/// registration), SRQ resize (mlx5 has none either).
pub const DEVICE_CAP_FLAGS: u32 = {
    const MEM_WINDOW: u32 = 1 << 17;
    const XRC: u32 = 1 << 20;
    const MEM_MGT_EXTENSIONS: u32 = 1 << 21;
    const MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
    const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
    const SRQ_RESIZE: u32 = 1 << 13;
    0x2536_1c36 & !(MEM_WINDOW | XRC | MEM_MGT_EXTENSIONS | MEM_WINDOW_TYPE_2A | MEM_WINDOW_TYPE_2B | SRQ_RESIZE)
};

/// GID type as `ibv_query_gid_type` reports it (enum ibv_gid_type_sysfs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GidType {
    IbRoceV1 = 0,
    RoceV2 = 1,
}

#[derive(Clone, Debug)]
pub struct Device {
    pub index: usize,
    pub spec: DeviceSpec,
    pub node_guid: u64,
    pub gids: Vec<([u8; 16], GidType)>,
    pub lid: u16,
}

impl Device {
    pub fn new(index: usize, spec: DeviceSpec) -> Device {
        // 0xb8cef6 is a Mellanox OUI; the low bytes tell the devices apart.
        let node_guid = 0xb8ce_f603_00a1_b200u64 + index as u64 * 2;
        let mut gids = Vec::new();
        let lid = match spec.link {
            LinkLayer::InfiniBand => {
                gids.push((ipv6_link_local(node_guid), GidType::IbRoceV1));
                index as u16 + 1
            }
            LinkLayer::Ethernet => {
                // EUI-64 from the MAC b8:ce:f6:a1:b2:xx (RFC 4291), then IPv4 from TEST-NET-1.
                let mac = [0xb8, 0xce, 0xf6, 0xa1, 0xb2, index as u8 * 2];
                let eui = u64::from_be_bytes([mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]);
                let ll = ipv6_link_local(eui);
                let mut v4 = [0u8; 16];
                v4[10] = 0xff;
                v4[11] = 0xff;
                v4[12..].copy_from_slice(&[192, 0, 2, 10 + index as u8]);
                gids.push((ll, GidType::IbRoceV1));
                gids.push((ll, GidType::RoceV2));
                gids.push((v4, GidType::IbRoceV1));
                gids.push((v4, GidType::RoceV2));
                0
            }
        };
        Device { index, spec, node_guid, gids, lid }
    }

    pub fn is_roce(&self) -> bool {
        self.spec.link == LinkLayer::Ethernet
    }

    pub fn fill_device_attr(&self, a: &mut v::ibv_device_attr) {
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        *a = unsafe { std::mem::zeroed() };
        copy_cstr(&mut a.fw_ver, FW_VER);
        a.node_guid = self.node_guid.to_be();
        a.sys_image_guid = self.node_guid.to_be();
        a.max_mr_size = u64::MAX;
        a.page_size_cap = 0xffff_ffff_ffff_f000;
        a.vendor_id = VENDOR_ID;
        a.vendor_part_id = VENDOR_PART_ID;
        a.hw_ver = HW_VER;
        a.max_qp = 131_072;
        a.max_qp_wr = MAX_QP_WR;
        a.device_cap_flags = DEVICE_CAP_FLAGS;
        a.max_sge = MAX_SGE;
        a.max_sge_rd = 30;
        a.max_cq = 16_777_216;
        a.max_cqe = MAX_CQE;
        a.max_mr = 16_777_216;
        a.max_pd = 16_777_216;
        a.max_qp_rd_atom = MAX_RD_ATOM;
        a.max_ee_rd_atom = 0;
        a.max_res_rd_atom = 2_097_152;
        a.max_qp_init_rd_atom = MAX_RD_ATOM;
        // Not implemented, so reported absent: atomics, memory windows, multicast.
        a.atomic_cap = v::IBV_ATOMIC_NONE;
        a.max_mw = 0;
        a.max_mcast_grp = 0;
        a.max_mcast_qp_attach = 0;
        a.max_total_mcast_qp_attach = 0;
        a.max_ah = i32::MAX;
        a.max_srq = 8_388_608;
        a.max_srq_wr = MAX_SRQ_WR as i32;
        a.max_srq_sge = MAX_SRQ_SGE as i32;
        a.max_pkeys = 128;
        a.local_ca_ack_delay = 16;
        a.phys_port_cnt = 1;
    }

    /// Fills the first `len` bytes of an `ibv_port_attr` (callers built against older headers
    /// pass a shorter struct).
    pub fn port_attr(&self) -> v::ibv_port_attr {
        // SAFETY: ibv_port_attr is plain old data; all-zero is a valid value.
        let mut p: v::ibv_port_attr = unsafe { std::mem::zeroed() };
        p.state = if self.spec.active { v::ibv_port_state::IBV_PORT_ACTIVE } else { v::ibv_port_state::IBV_PORT_DOWN };
        p.max_mtu = 5;
        p.active_mtu = if self.spec.active { self.spec.mtu } else { 5 };
        p.gid_tbl_len = if self.is_roce() { 256 } else { 128 };
        p.port_cap_flags = if self.is_roce() { 0x0401_0000 } else { 0x0251_e848 };
        p.max_msg_sz = MAX_MSG_SZ;
        p.bad_pkey_cntr = 0;
        p.qkey_viol_cntr = 0;
        p.pkey_tbl_len = if self.is_roce() { 1 } else { 128 };
        p.lid = self.lid;
        p.sm_lid = if self.is_roce() { 0 } else { 1 };
        p.lmc = 0;
        p.max_vl_num = if self.is_roce() { 0 } else { 4 };
        p.sm_sl = 0;
        p.subnet_timeout = if self.is_roce() { 0 } else { 18 };
        p.init_type_reply = 0;
        p.active_width = 2; // 4X
        p.active_speed = if self.is_roce() { 0x80 } else { 0x40 }; // NDR (400G at 4X) / HDR
        p.phys_state = if self.spec.active { 5 } else { 3 }; // LINK_UP / DISABLED
        p.link_layer =
            if self.is_roce() { v::IBV_LINK_LAYER_ETHERNET as u8 } else { v::IBV_LINK_LAYER_INFINIBAND as u8 };
        p
    }
}

fn ipv6_link_local(iid: u64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&iid.to_be_bytes());
    g
}

pub fn copy_cstr(dst: &mut [std::os::raw::c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as std::os::raw::c_char;
    }
    dst[n] = 0;
}

/// `SYSFS_PATH` (trailing slashes dropped) or /sys, read once, as rdma-core does.
pub fn sysfs_root() -> &'static std::ffi::CStr {
    static ROOT: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let env = std::env::var("SYSFS_PATH").ok().map(|s| s.trim_end_matches('/').to_string());
        let root = env.filter(|s| !s.is_empty()).unwrap_or_else(|| "/sys".into());
        std::ffi::CString::new(root).unwrap_or_else(|_| c"/sys".into())
    })
}

/// The files under /sys/class/infiniband/<dev>/ that tools read through `ibv_read_sysfs_file`.
pub fn sysfs_file(dev: &Device, file: &str) -> Option<String> {
    Some(match file {
        "board_id" => BOARD_ID.into(),
        "fw_ver" => FW_VER.into(),
        "hca_type" => format!("MT{VENDOR_PART_ID}"),
        "hw_rev" => "0x0".into(),
        "node_type" => "1: CA".into(),
        "node_desc" => format!("mrshim-sim {}", dev.spec.name),
        "node_guid" => fmt_guid(dev.node_guid),
        "sys_image_guid" => fmt_guid(dev.node_guid),
        "device/vendor" => PCI_VENDOR.into(),
        "device/device" => PCI_DEVICE.into(),
        _ => return None,
    })
}

pub fn fmt_guid(g: u64) -> String {
    format!("{:04x}:{:04x}:{:04x}:{:04x}", g >> 48, (g >> 32) & 0xffff, (g >> 16) & 0xffff, g & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_devices;

    #[test]
    fn roce_gid_index_3_is_v2_ipv4() {
        let d = Device::new(0, parse_devices("mlx5_0:roce").unwrap().remove(0));
        assert_eq!(d.gids.len(), 4);
        assert_eq!(d.gids[3].1, GidType::RoceV2);
        assert_eq!(&d.gids[3].0[10..], &[0xff, 0xff, 192, 0, 2, 10]);
        assert_eq!(d.port_attr().link_layer, v::IBV_LINK_LAYER_ETHERNET as u8);
        assert_eq!(d.port_attr().active_mtu, 5);
    }

    #[test]
    fn ib_port_has_lid_and_one_gid() {
        let d = Device::new(1, parse_devices("x:roce,mlx5_1:ib").unwrap().remove(1));
        assert_eq!(d.lid, 2);
        assert_eq!(d.gids.len(), 1);
        assert_eq!(d.port_attr().link_layer, v::IBV_LINK_LAYER_INFINIBAND as u8);
    }
}
