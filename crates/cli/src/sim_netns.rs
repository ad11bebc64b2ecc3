//! `mrshim sim --netns`: the simulated RoCE ports get network interfaces of their own, in a
//! private network namespace, as a real mlx5 port has its netdev (`eth0`, `ens1f0np0`).
//! rdma-core's tests, `rdma_cm` users and tools that follow `device/net/<ifname>` to
//! `ip addr show` find the port's address there.
//!
//! Each port gets an `ifb` interface (the kernel's "intermediate functional block": a netdev
//! with nothing behind it, up and with carrier, like `dummy`, which many kernels — this one —
//! are built without) named as the port's `gid_attrs/ndevs` say, with the MAC its link-local
//! GID was made from (so the kernel's own fe80:: address equals that GID) and the IPv4 address
//! of its IPv4-mapped GID, /24. `lo` is brought up so loopback TCP (MPI, UCX, perftest's
//! out-of-band exchange) keeps working. Everything is done over rtnetlink, without `ip`.

use std::path::Path;

// From <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_link.h>, <linux/if_addr.h>.
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFF_UP: u32 = 1;

/// One port's interface: name, MAC, IPv4 address.
#[derive(Debug, PartialEq, Eq)]
pub struct Netdev {
    pub name: String,
    pub mac: [u8; 6],
    pub ipv4: [u8; 4],
}

/// A netlink attribute (type, payload), padded to 4 bytes.
fn attr(out: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// A request: nlmsghdr (length, type, flags, seq, pid 0) then `body`.
fn message(ty: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + body.len());
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// struct ifinfomsg: family AF_UNSPEC, type, index, flags, change mask.
fn ifinfo(index: i32, up: bool) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    b.extend_from_slice(&index.to_ne_bytes());
    let flags = if up { IFF_UP } else { 0 };
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b
}

/// RTM_NEWLINK creating `d` as an ifb interface, up.
fn new_link(d: &Netdev, seq: u32) -> Vec<u8> {
    let mut body = ifinfo(0, true);
    let mut name = d.name.as_bytes().to_vec();
    name.push(0);
    attr(&mut body, IFLA_IFNAME, &name);
    attr(&mut body, IFLA_ADDRESS, &d.mac);
    let mut info = Vec::new();
    attr(&mut info, IFLA_INFO_KIND, b"ifb\0");
    attr(&mut body, IFLA_LINKINFO, &info);
    message(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, seq, &body)
}

/// RTM_NEWADDR: `ip`/24 on interface `index`.
fn new_addr(index: u32, ip: [u8; 4], seq: u32) -> Vec<u8> {
    // struct ifaddrmsg: family, prefix length, flags, scope (universe), index.
    let mut body = vec![libc::AF_INET as u8, 24, 0, 0];
    body.extend_from_slice(&index.to_ne_bytes());
    attr(&mut body, IFA_LOCAL, &ip);
    attr(&mut body, IFA_ADDRESS, &ip);
    message(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, seq, &body)
}

/// A NETLINK_ROUTE socket that sends one request at a time and waits for its acknowledgement.
struct Rtnl(std::os::fd::OwnedFd);

impl Rtnl {
    fn open() -> Result<Rtnl, String> {
        // SAFETY: socket(2) with constant arguments; the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
        if fd < 0 {
            return Err(format!("netlink socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        Ok(Rtnl(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    fn request(&self, msg: &[u8], what: &str) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let fd = self.0.as_raw_fd();
        // SAFETY: msg is a readable buffer of its length (the kernel is the default destination).
        if unsafe { libc::send(fd, msg.as_ptr().cast(), msg.len(), 0) } != msg.len() as isize {
            return Err(format!("{what}: {}", std::io::Error::last_os_error()));
        }
        let mut buf = [0u8; 4096];
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 20 {
            return Err(format!("{what}: no acknowledgement from the kernel"));
        }
        ack_errno(&buf[..n as usize])
            .map_or(Ok(()), |e| Err(format!("{what}: {}", std::io::Error::from_raw_os_error(e))))
    }
}

/// The errno of an NLMSG_ERROR acknowledgement (its struct nlmsgerr's negative error), None
/// for success.
fn ack_errno(reply: &[u8]) -> Option<i32> {
    let ty = u16::from_ne_bytes([reply[4], reply[5]]);
    let err = i32::from_ne_bytes(reply[16..20].try_into().unwrap());
    (ty == NLMSG_ERROR && err != 0).then_some(-err)
}

fn if_index(name: &str) -> Result<u32, String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("bad interface name {name:?}"))?;
    // SAFETY: a NUL-terminated name.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(format!("{name}: {}", std::io::Error::last_os_error())),
        i => Ok(i),
    }
}

/// Brings `lo` up and creates `devs` in the current (fresh) network namespace.
pub fn create(devs: &[&Netdev]) -> Result<(), String> {
    let nl = Rtnl::open()?;
    let lo = if_index("lo")?;
    nl.request(&message(RTM_NEWLINK, 0, 1, &ifinfo(lo as i32, true)), "bringing lo up")?;
    for (i, d) in devs.iter().enumerate() {
        let seq = 2 + 2 * i as u32;
        let kind = "an ifb interface (CONFIG_IFB)";
        nl.request(&new_link(d, seq), &format!("creating {} as {kind}", d.name))?;
        nl.request(&new_addr(if_index(&d.name)?, d.ipv4, seq + 1), &format!("adding an address to {}", d.name))?;
    }
    Ok(())
}

/// The interfaces the view's RoCE ports name: `gid_attrs/ndevs/0`, the MAC from the
/// link-local GID 0 (EUI-64, RFC 4291), the first IPv4-mapped GID's address.
pub fn from_sysfs(class_ib: &Path) -> Vec<(String, Netdev)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(class_ib) else { return out };
    let mut names: Vec<String> = dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for dev in names {
        let port = class_ib.join(&dev).join("ports/1");
        let read = |rel: &str| std::fs::read_to_string(port.join(rel)).ok().map(|s| s.trim().to_string());
        let Some(name) = read("gid_attrs/ndevs/0") else { continue };
        let gids: Vec<[u8; 16]> =
            (0..).map_while(|i| read(&format!("gids/{i}"))).filter_map(|g| parse_gid(&g)).collect();
        let (Some(mac), Some(ipv4)) = (gids.first().and_then(mac_of), gids.iter().find_map(v4_mapped)) else {
            continue;
        };
        out.push((dev, Netdev { name, mac, ipv4 }));
    }
    out
}

fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(g)
}

/// The MAC a link-local fe80::/64 address was made from by EUI-64 (ff:fe in the middle, the
/// universal/local bit flipped).
fn mac_of(g: &[u8; 16]) -> Option<[u8; 6]> {
    let iid = &g[8..];
    (g[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0] && iid[3] == 0xff && iid[4] == 0xfe)
        .then(|| [iid[0] ^ 2, iid[1], iid[2], iid[5], iid[6], iid[7]])
}

fn v4_mapped(g: &[u8; 16]) -> Option<[u8; 4]> {
    (g[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).then(|| [g[12], g[13], g[14], g[15]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_link_is_an_ifb_request_with_name_mac_and_up() {
        let d = Netdev { name: "mrsim0".into(), mac: [0xb8, 0xce, 0xf6, 0xa1, 0xb2, 0], ipv4: [192, 0, 2, 10] };
        let m = new_link(&d, 7);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize, m.len());
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_NEWLINK);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x605);
        // ifinfomsg flags and change: IFF_UP.
        assert_eq!(&m[24..32], &[1, 0, 0, 0, 1, 0, 0, 0]);
        // IFLA_IFNAME "mrsim0\0" padded to 8, IFLA_ADDRESS 6 bytes padded to 8, the nested kind.
        assert_eq!(&m[32..44], &[11, 0, 3, 0, b'm', b'r', b's', b'i', b'm', b'0', 0, 0]);
        assert_eq!(&m[44..56], &[10, 0, 1, 0, 0xb8, 0xce, 0xf6, 0xa1, 0xb2, 0, 0, 0]);
        assert_eq!(&m[56..], &[12, 0, 18, 0, 8, 0, 1, 0, b'i', b'f', b'b', 0]);
        assert_eq!(m.len() % 4, 0);
    }

    #[test]
    fn new_addr_carries_the_address_as_local_and_peer() {
        let m = new_addr(3, [192, 0, 2, 11], 1);
        assert_eq!(&m[16..24], &[libc::AF_INET as u8, 24, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&m[24..], &[8, 0, 2, 0, 192, 0, 2, 11, 8, 0, 1, 0, 192, 0, 2, 11]);
    }

    #[test]
    fn ack_errno_reads_the_negative_error() {
        let mut r = vec![0u8; 36];
        r[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(ack_errno(&r), None);
        r[16..20].copy_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
        assert_eq!(ack_errno(&r), Some(libc::EOPNOTSUPP));
    }

    #[test]
    fn interfaces_come_from_the_ports_gid_table() {
        let d = std::env::temp_dir().join(format!("mrshim-netns-unit-{}", std::process::id()));
        let port = d.join("mlx5_1/ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
        std::fs::write(port.join("gid_attrs/ndevs/0"), "mrsim1\n").unwrap();
        std::fs::write(port.join("gids/0"), "fe80:0000:0000:0000:bace:f6ff:fea1:b202\n").unwrap();
        std::fs::write(port.join("gids/1"), "0000:0000:0000:0000:0000:ffff:c000:020b\n").unwrap();
        // An InfiniBand port has no ndevs: no interface.
        std::fs::create_dir_all(d.join("ib0/ports/1/gids")).unwrap();
        let got = from_sysfs(&d);
        std::fs::remove_dir_all(&d).unwrap();
        let want = Netdev { name: "mrsim1".into(), mac: [0xb8, 0xce, 0xf6, 0xa1, 0xb2, 2], ipv4: [192, 0, 2, 11] };
        assert_eq!(got, vec![("mlx5_1".to_string(), want)]);
    }
}
