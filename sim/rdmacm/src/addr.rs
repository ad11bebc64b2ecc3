//! IP addresses as rdma_cm sees them (sockaddr_in / sockaddr_in6), plain and unit-tested: parsing
//! from and writing to C sockaddrs, the names of listening sockets, and the wire encoding.

use std::os::raw::c_int;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Addr {
    pub ip: Ip,
    pub port: u16,
    pub scope: u32,
}

pub const WIRE_LEN: usize = 1 + 16 + 2 + 4;

impl Addr {
    pub fn any(family: c_int) -> Addr {
        let ip = if family == libc::AF_INET6 { Ip::V6([0; 16]) } else { Ip::V4([0; 4]) };
        Addr { ip, port: 0, scope: 0 }
    }

    /// `p` as rdma_bind_addr/rdma_resolve_addr take it; AF_IB and others are EAFNOSUPPORT.
    ///
    /// # Safety
    /// `p` points to a sockaddr of its family's full size.
    pub unsafe fn from_sockaddr(p: *const libc::sockaddr) -> Result<Addr, i32> {
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's sockaddr; its family tells its size.
        unsafe {
            match (*p).sa_family as c_int {
                libc::AF_INET => {
                    let s = &*p.cast::<libc::sockaddr_in>();
                    Ok(Addr { ip: Ip::V4(s.sin_addr.s_addr.to_ne_bytes()), port: u16::from_be(s.sin_port), scope: 0 })
                }
                libc::AF_INET6 => {
                    let s = &*p.cast::<libc::sockaddr_in6>();
                    Ok(Addr {
                        ip: Ip::V6(s.sin6_addr.s6_addr),
                        port: u16::from_be(s.sin6_port),
                        scope: s.sin6_scope_id,
                    })
                }
                _ => Err(libc::EAFNOSUPPORT),
            }
        }
    }

    pub fn family(&self) -> c_int {
        match self.ip {
            Ip::V4(_) => libc::AF_INET,
            Ip::V6(_) => libc::AF_INET6,
        }
    }

    pub fn sockaddr_len(&self) -> usize {
        match self.ip {
            Ip::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
            Ip::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
        }
    }

    /// Writes the sockaddr into `out`, which must hold at least `sockaddr_len()` bytes.
    ///
    /// # Safety
    /// `out` is writable for `sockaddr_len()` bytes.
    pub unsafe fn write(&self, out: *mut libc::sockaddr) {
        // SAFETY: the caller gives room for the family's sockaddr; zeroed is valid for both.
        unsafe {
            match self.ip {
                Ip::V4(a) => {
                    let mut s: libc::sockaddr_in = std::mem::zeroed();
                    s.sin_family = libc::AF_INET as libc::sa_family_t;
                    s.sin_port = self.port.to_be();
                    s.sin_addr.s_addr = u32::from_ne_bytes(a);
                    out.cast::<libc::sockaddr_in>().write_unaligned(s);
                }
                Ip::V6(a) => {
                    let mut s: libc::sockaddr_in6 = std::mem::zeroed();
                    s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                    s.sin6_port = self.port.to_be();
                    s.sin6_addr.s6_addr = a;
                    s.sin6_scope_id = self.scope;
                    out.cast::<libc::sockaddr_in6>().write_unaligned(s);
                }
            }
        }
    }

    pub fn is_any(&self) -> bool {
        match self.ip {
            Ip::V4(a) => a == [0; 4],
            Ip::V6(a) => a == [0; 16],
        }
    }

    pub fn is_loopback(&self) -> bool {
        match self.ip {
            Ip::V4(a) => a[0] == 127,
            Ip::V6(a) => a == std::net::Ipv6Addr::LOCALHOST.octets() || v4_mapped(&a).is_some_and(|v| v[0] == 127),
        }
    }

    /// The address without its port, as a file-name-safe text ("4-192.0.2.10", "6-fe80..").
    pub fn ip_key(&self) -> String {
        match self.ip {
            Ip::V4(a) => format!("4-{}", std::net::Ipv4Addr::from(a)),
            Ip::V6(a) => format!("6-{}", a.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self.ip {
            Ip::V4(a) => {
                out.push(4);
                out.extend_from_slice(&a);
                out.extend_from_slice(&[0; 12]);
            }
            Ip::V6(a) => {
                out.push(6);
                out.extend_from_slice(&a);
            }
        }
        out.extend_from_slice(&self.port.to_le_bytes());
        out.extend_from_slice(&self.scope.to_le_bytes());
    }

    pub fn decode(b: &[u8]) -> Option<Addr> {
        if b.len() < WIRE_LEN {
            return None;
        }
        let ip = match b[0] {
            4 => Ip::V4(b[1..5].try_into().unwrap()),
            6 => Ip::V6(b[1..17].try_into().unwrap()),
            _ => return None,
        };
        Some(Addr {
            ip,
            port: u16::from_le_bytes([b[17], b[18]]),
            scope: u32::from_le_bytes(b[19..23].try_into().unwrap()),
        })
    }
}

/// The IPv4 address inside an IPv4-mapped IPv6 address (::ffff:a.b.c.d), as RoCE GIDs carry it.
pub fn v4_mapped(g: &[u8; 16]) -> Option<[u8; 4]> {
    (g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff).then(|| g[12..].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_roundtrip_both_families() {
        for a in [
            Addr { ip: Ip::V4([192, 0, 2, 10]), port: 7174, scope: 0 },
            Addr { ip: Ip::V6(std::net::Ipv6Addr::LOCALHOST.octets()), port: 1, scope: 3 },
        ] {
            // SAFETY: storage is large enough for either family.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let p = (&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
            // SAFETY: p points to 128 writable bytes.
            unsafe { a.write(p) };
            // SAFETY: written just above.
            assert_eq!(unsafe { Addr::from_sockaddr(p) }, Ok(a));
            let mut w = Vec::new();
            a.encode(&mut w);
            assert_eq!(w.len(), WIRE_LEN);
            assert_eq!(Addr::decode(&w), Some(a));
        }
    }

    #[test]
    fn other_families_are_refused_and_keys_name_the_address() {
        // SAFETY: zeroed sockaddr_storage is valid.
        let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        st.ss_family = libc::AF_UNIX as libc::sa_family_t;
        // SAFETY: a valid sockaddr.
        let r = unsafe { Addr::from_sockaddr((&st as *const libc::sockaddr_storage).cast()) };
        assert_eq!(r, Err(libc::EAFNOSUPPORT));
        let a = Addr { ip: Ip::V4([127, 0, 0, 1]), port: 5, scope: 0 };
        assert!(a.is_loopback() && !a.is_any());
        assert_eq!(a.ip_key(), "4-127.0.0.1");
        assert!(Addr::any(libc::AF_INET6).is_any());
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&[192, 0, 2, 11]);
        assert_eq!(v4_mapped(&m), Some([192, 0, 2, 11]));
    }
}
