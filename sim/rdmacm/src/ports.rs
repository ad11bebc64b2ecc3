//! Port numbers host-wide, as the kernel's rdma_cm keeps them per port space: a claim is a file
//! `<rundir>/cm/port/<ps>-<port>-<address>` holding the owner's pid (a dead owner's claim is
//! taken over), and a listening id is a unix socket `<rundir>/cm/<ps>-<port>-<address>.sock`
//! that connecting ids find by the address they resolved.

use crate::addr::Addr;
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn cm_dir(rundir: &str) -> PathBuf {
    Path::new(rundir).join("cm")
}

fn claim_prefix(ps: u32, port: u16) -> String {
    format!("{ps:x}-{port}-")
}

fn owner_alive(p: &Path) -> bool {
    let pid: i32 = std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Claims `addr`'s port in port space `ps`: EADDRINUSE when a live claim covers it (the same
/// address, or a wildcard on either side). RDMA_OPTION_ID_REUSEADDR changes nothing here.
pub fn claim(rundir: &str, ps: u32, addr: &Addr) -> Result<PathBuf, i32> {
    let dir = cm_dir(rundir).join("port");
    std::fs::create_dir_all(&dir).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let prefix = claim_prefix(ps, addr.port);
    let mine = addr.ip_key();
    let wildcard = Addr::any(addr.family()).ip_key();
    for e in std::fs::read_dir(&dir).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(other) = name.strip_prefix(&prefix) else { continue };
        let conflicts = other == mine || addr.is_any() || other == wildcard;
        if conflicts && owner_alive(&e.path()) {
            return Err(libc::EADDRINUSE);
        }
    }
    let path = dir.join(format!("{prefix}{mine}"));
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            libc::EADDRINUSE
        } else {
            libc::EIO
        }
    })?;
    let _ = write!(f, "{}", std::process::id());
    Ok(path)
}

/// Claims a free ephemeral port (the kernel's default ip_local_port_range) for `addr`.
pub fn claim_ephemeral(rundir: &str, ps: u32, addr: &mut Addr) -> Result<PathBuf, i32> {
    let start = (std::process::id().wrapping_mul(2_654_435_761) >> 8) % 28232;
    for i in 0..28232 {
        addr.port = 32768 + ((start + i) % 28232) as u16;
        match claim(rundir, ps, addr) {
            Err(libc::EADDRINUSE) => continue,
            r => return r,
        }
    }
    Err(libc::EADDRINUSE)
}

pub fn listen_path(rundir: &str, ps: u32, addr: &Addr) -> PathBuf {
    cm_dir(rundir).join(format!("{}{}.sock", claim_prefix(ps, addr.port), addr.ip_key()))
}

/// Where an id connecting to `dst` may find its listener: bound to that address, or to the
/// wildcard of its family, or (IPv4) to the IPv6 wildcard, which listens on both.
pub fn listener_candidates(rundir: &str, ps: u32, dst: &Addr) -> Vec<PathBuf> {
    let mut v = vec![listen_path(rundir, ps, dst)];
    let any = Addr { port: dst.port, ..Addr::any(dst.family()) };
    v.push(listen_path(rundir, ps, &any));
    if dst.family() == libc::AF_INET {
        v.push(listen_path(rundir, ps, &Addr { port: dst.port, ..Addr::any(libc::AF_INET6) }));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Ip;

    #[test]
    fn same_port_conflicts_with_same_address_and_wildcards_only() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().to_str().unwrap();
        let a = Addr { ip: Ip::V4([192, 0, 2, 10]), port: 7000, scope: 0 };
        let b = Addr { ip: Ip::V4([192, 0, 2, 11]), port: 7000, scope: 0 };
        let p = claim(run, 0x106, &a).unwrap();
        assert_eq!(claim(run, 0x106, &a), Err(libc::EADDRINUSE));
        assert!(claim(run, 0x106, &b).is_ok(), "another address, same port");
        assert_eq!(claim(run, 0x106, &Addr { port: 7000, ..Addr::any(libc::AF_INET) }), Err(libc::EADDRINUSE));
        assert!(claim(run, 0x111, &a).is_ok(), "another port space");
        std::fs::remove_file(p).unwrap();
        std::fs::write(d.path().join("cm/port/106-7000-4-192.0.2.10"), "999999999").unwrap();
        assert!(claim(run, 0x106, &a).is_ok(), "a dead owner's claim is taken over");
        let mut e = a;
        e.port = 0;
        claim_ephemeral(run, 0x106, &mut e).unwrap();
        assert!((32768..61000).contains(&e.port));
        let c = listener_candidates(run, 0x106, &a);
        assert_eq!(c.len(), 3);
        assert!(c[1].to_str().unwrap().ends_with("106-7000-4-0.0.0.0.sock"));
    }
}
