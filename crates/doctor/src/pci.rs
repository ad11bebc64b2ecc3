//! PCIe facts from sysfs: which bridges lie between a NIC and a GPU, their ACS control bits, and whether a
//! device has relaxed ordering enabled. Config space is read from each device's `config` file (the extended
//! part, where ACS lives, is readable by root only).
use std::path::{Path, PathBuf};

/// A PCI function's sysfs directory, e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0.
#[derive(Debug, Clone)]
pub struct Func {
    pub dir: PathBuf,
    pub bdf: String,
}

pub fn is_bdf(s: &str) -> bool {
    // dddd:bb:dd.f
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// The PCI functions from the root complex down to `dev` (inclusive), from its canonical sysfs path.
pub fn path_to(dev: &Path) -> Vec<Func> {
    let mut out = Vec::new();
    let mut p = PathBuf::new();
    for comp in dev.components() {
        p.push(comp);
        let name = comp.as_os_str().to_string_lossy();
        if is_bdf(&name) {
            out.push(Func { dir: p.clone(), bdf: name.into_owned() });
        }
    }
    out
}

/// Bridges a peer-to-peer transfer between `a` and `b` crosses: every upstream function of either path below
/// the deepest common one, plus that common one (the switch or root port where the traffic turns around).
pub fn bridges_between(a: &[Func], b: &[Func]) -> Vec<Func> {
    let common = a.iter().zip(b).take_while(|(x, y)| x.bdf == y.bdf).count();
    let mut out: Vec<Func> = Vec::new();
    if common > 0 {
        out.push(a[common - 1].clone());
    }
    // the endpoints themselves are not bridges
    for f in a[common..a.len().saturating_sub(1)].iter().chain(b[common..b.len().saturating_sub(1)].iter()) {
        if !out.iter().any(|o| o.bdf == f.bdf) {
            out.push(f.clone());
        }
    }
    out
}

fn u16_at(c: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*c.get(off)?, *c.get(off + 1)?]))
}
fn u32_at(c: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes([*c.get(off)?, *c.get(off + 1)?, *c.get(off + 2)?, *c.get(off + 3)?]))
}

/// Offset of a standard capability (e.g. 0x10 = PCI Express).
pub fn find_cap(c: &[u8], id: u8) -> Option<usize> {
    let status = u16_at(c, 0x06)?;
    if status & 0x10 == 0 {
        return None;
    }
    let mut off = *c.get(0x34)? as usize & !3;
    for _ in 0..48 {
        if off < 0x40 {
            return None;
        }
        if *c.get(off)? == id {
            return Some(off);
        }
        off = *c.get(off + 1)? as usize & !3;
    }
    None
}

/// Offset of an extended capability (e.g. 0x000d = ACS).
pub fn find_ext_cap(c: &[u8], id: u16) -> Option<usize> {
    let mut off = 0x100usize;
    for _ in 0..256 {
        let h = u32_at(c, off)?;
        if h == 0 || h == 0xffff_ffff {
            return None;
        }
        if (h & 0xffff) as u16 == id {
            return Some(off);
        }
        off = (h >> 20) as usize & !3;
        if off < 0x100 {
            return None;
        }
    }
    None
}

/// ACS control register: None when the function has no ACS capability (or extended config is unreadable).
pub fn acs_ctrl(c: &[u8]) -> Option<u16> {
    let off = find_ext_cap(c, 0x000d)?;
    u16_at(c, off + 6)
}

/// Names of the ACS control bits that are set. Request/completion redirect are what send P2P upstream.
pub fn acs_names(ctrl: u16) -> Vec<&'static str> {
    const N: [&str; 7] = ["SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"];
    (0..7).filter(|i| ctrl & (1 << i) != 0).map(|i| N[i]).collect()
}

pub fn acs_redirects(ctrl: u16) -> bool {
    ctrl & 0b1100 != 0
}

/// PCIe Device Control "Enable Relaxed Ordering" bit.
pub fn relaxed_ordering(c: &[u8]) -> Option<bool> {
    let off = find_cap(c, 0x10)?;
    Some(u16_at(c, off + 8)? & 0x10 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(acs: Option<u16>, ro: bool) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0x06] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = 0x10; // PCIe cap, next 0
        if ro {
            c[0x48] = 0x10;
        }
        if let Some(a) = acs {
            c[0x100..0x104].copy_from_slice(&0x0001_000du32.to_le_bytes());
            c[0x106..0x108].copy_from_slice(&a.to_le_bytes());
        }
        c
    }

    #[test]
    fn reads_acs_and_ro() {
        assert_eq!(acs_ctrl(&cfg(Some(0x1d), true)), Some(0x1d));
        assert!(acs_redirects(0x1d));
        assert_eq!(relaxed_ordering(&cfg(None, true)), Some(true));
        assert_eq!(acs_ctrl(&cfg(None, false)), None);
        assert_eq!(acs_ctrl(&[0u8; 64]), None);
    }

    #[test]
    fn bridges() {
        let a = path_to(Path::new("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"));
        let b = path_to(Path::new("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"));
        let br: Vec<String> = bridges_between(&a, &b).into_iter().map(|f| f.bdf).collect();
        assert_eq!(br, ["0000:01:00.0", "0000:02:00.0", "0000:02:01.0"]);
    }
}
