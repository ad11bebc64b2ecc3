//! Memory kind of an address range, from /proc/self/maps.
//!
//! Reading /proc/self/maps costs tens of microseconds, so successful calls use a snapshot that is
//! re-read when the range is not covered by it or when it is older than [`MAX_AGE`]; failed calls
//! always read it fresh (that is where the answer matters).

use mrshim_record::MemKind;
use std::sync::Arc;

use std::time::Duration;

pub const MAX_AGE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
    pub shared: bool,
    pub path: Arc<str>,
}

impl Region {
    pub fn kind(&self) -> MemKind {
        let p: &str = &self.path;
        if p.contains("anon_hugepage") || p.starts_with("/dev/hugepages") || p.starts_with("/hugetlbfs") {
            MemKind::Hugepage
        } else if p.is_empty() || p == "[heap]" || p.starts_with("[anon") {
            MemKind::HostAnon
        } else if p == "[stack]" || p.starts_with("[stack:") {
            MemKind::HostStack
        } else if p.starts_with('[') {
            // [vdso], [vvar], [vsyscall]
            MemKind::Unknown
        } else if let Some((_, m)) = crate::device_files::classify(p, self.readable || self.writable) {
            m.mem_kind()
        } else if p.starts_with("/dev/")
            && !p.starts_with("/dev/shm/")
            && p != "/dev/zero"
            && !p.starts_with("/dev/zero ")
        {
            // A device file no vendor rule knows (a frame buffer, a vendor's own node): the NIC
            // cannot pin it like RAM either.
            MemKind::Device
        } else if self.writable {
            MemKind::FileWritable
        } else {
            MemKind::FileReadonly
        }
    }
}

/// Parses the text of /proc/<pid>/maps. Malformed lines are skipped.
pub fn parse(text: &str) -> Vec<Region> {
    let mut v = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let _off = f.next();
        let _dev = f.next();
        let _inode = f.next();
        let path = f.next().map(|s| s.trim_start()).unwrap_or("");
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        let pb = perms.as_bytes();
        if pb.len() < 4 {
            continue;
        }
        v.push(Region {
            start,
            end,
            readable: pb[0] == b'r',
            writable: pb[1] == b'w',
            shared: pb[3] == b's',
            path: Arc::from(path),
        });
    }
    v.sort_by_key(|r| r.start);
    v
}

/// What the shim says about [addr, addr+len).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub kind: MemKind,
    pub path: Option<Arc<str>>,
    /// false when some byte of the range is not mapped.
    pub fully_mapped: bool,
}

/// Classifies [addr, addr+len) by the mapping holding `addr`; `None` when the snapshot does not
/// cover `addr` (callers re-read and then report [`MemKind::Unmapped`]).
pub fn lookup(regions: &[Region], addr: u64, len: u64) -> Option<Lookup> {
    let i = regions.partition_point(|r| r.end <= addr);
    let r = regions.get(i)?;
    if r.start > addr {
        return None;
    }
    let want_end = addr.saturating_add(len.max(1));
    let mut covered = r.end;
    let mut j = i + 1;
    while covered < want_end {
        match regions.get(j) {
            Some(n) if n.start == covered => {
                covered = n.end;
                j += 1;
            }
            _ => break,
        }
    }
    Some(Lookup { kind: r.kind(), path: Some(r.path.clone()), fully_mapped: covered >= want_end })
}

/// True if every byte of [addr, addr+len) is in readable mappings of `regions` (sorted, as
/// [`parse`] returns them).
pub fn readable(regions: &[Region], addr: u64, len: u64) -> bool {
    covered(regions, addr, len, |r| r.readable)
}

/// True if every byte of [addr, addr+len) is in private anonymous mappings of `regions` (no file;
/// `[heap]`, `[stack]`, `[anon:...]` names allowed): the only memory whose writes all go through
/// this process's page tables, so the only memory the kernel's write tracking can vouch for
/// (crates/dirty). A shared mapping or a file another process writes would bypass them.
pub fn private_anonymous(regions: &[Region], addr: u64, len: u64) -> bool {
    covered(regions, addr, len, |r| {
        let p: &str = &r.path;
        !r.shared && (p.is_empty() || p == "[heap]" || p == "[stack]" || p.starts_with("[anon:"))
    })
}

/// True if [addr, addr+len) lies in adjacent mappings of `regions`, each of them `ok`.
fn covered(regions: &[Region], addr: u64, len: u64, ok: impl Fn(&Region) -> bool) -> bool {
    let end = addr.saturating_add(len);
    let mut at = addr;
    let mut i = regions.partition_point(|r| r.end <= at);
    while let Some(r) = regions.get(i) {
        if r.start > at || !ok(r) {
            return false;
        }
        at = r.end;
        if at >= end {
            return true;
        }
        i += 1;
    }
    false
}

pub fn read_self() -> Vec<Region> {
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(t) => parse(&t),
        Err(_) => Vec::new(),
    }
}

struct Snap {
    /// Monotonic ns it was read at.
    at: u64,
    regions: Arc<Vec<Region>>,
}

thread_local! {
    /// Per-thread snapshot: no lock and no shared cache line on the hot path (8 threads
    /// registering at once would otherwise all contend on one mutex).
    static SNAP: std::cell::RefCell<Option<Snap>> = const { std::cell::RefCell::new(None) };
}

/// A cached view of this process's mappings (per thread, at most [`MAX_AGE`] old).
#[derive(Default)]
pub struct MapsCache {
    _private: (),
}

impl MapsCache {
    pub const fn new() -> Self {
        MapsCache { _private: () }
    }

    /// `fresh`: ignore the snapshot (used for failed calls). `now`: monotonic ns (the call's
    /// own start time: no extra clock read).
    pub fn classify(&self, addr: u64, len: u64, fresh: bool, now: u64) -> Lookup {
        if !fresh {
            let hit = SNAP
                .try_with(|c| {
                    let c = c.try_borrow().ok()?;
                    let s = c.as_ref().filter(|s| now.wrapping_sub(s.at) < MAX_AGE.as_nanos() as u64)?;
                    lookup(&s.regions, addr, len).filter(|l| l.fully_mapped)
                })
                .ok()
                .flatten();
            if let Some(l) = hit {
                return l;
            }
        }
        let regions = Arc::new(read_self());
        let l =
            lookup(&regions, addr, len).unwrap_or(Lookup { kind: MemKind::Unmapped, path: None, fully_mapped: false });
        let _ = SNAP.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                *c = Some(Snap { at: now, regions });
            }
        });
        l
    }

    /// After fork (in the child's only thread): drop the snapshot.
    pub fn forget(&self) {
        let _ = SNAP.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                *c = None;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0002000 r--p 00000000 08:01 131 /usr/bin/prog
55d0c0002000-55d0c0003000 rw-p 00002000 08:01 131 /usr/bin/prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 
7f0000200000-7f0000400000 rw-p 00000000 00:00 0 
7f1000000000-7f1000200000 rw-s 00000000 00:0f 4242                       /anon_hugepage (deleted)
7f2000000000-7f2000100000 rw-s 00000000 00:05 77                         /dev/nvidia0
7f3000000000-7f3000001000 rw-s 00000000 00:1a 9                          /dev/shm/nccl-abc
7f4000000000-7f4000001000 rw-s 00000000 00:05 12                         /dev/infiniband/uverbs0
7f5000000000-7f5000200000 rw-s 00000000 00:05 13                         /dev/nvidiactl
7f6000000000-7f6000200000 ---s 00000000 00:05 14                         /dev/dri/renderD128
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
garbage line
";

    #[test]
    fn kinds() {
        let r = parse(MAPS);
        assert_eq!(r.len(), 13);
        let k = |a: u64| lookup(&r, a, 8).map(|l| l.kind);
        assert_eq!(k(0x55d0c0000010), Some(MemKind::FileReadonly));
        assert_eq!(k(0x55d0c0002010), Some(MemKind::FileWritable));
        assert_eq!(k(0x55d0c1000100), Some(MemKind::HostAnon));
        assert_eq!(k(0x7f0000000000), Some(MemKind::HostAnon));
        assert_eq!(k(0x7f1000000000), Some(MemKind::Hugepage));
        assert_eq!(k(0x7f2000000000), Some(MemKind::Device));
        assert_eq!(k(0x7f3000000000), Some(MemKind::FileWritable));
        // vendor rules (device_files): NIC doorbell, GPU-pinned host memory, a render node's VRAM
        assert_eq!(k(0x7f4000000000), Some(MemKind::Unknown));
        assert_eq!(k(0x7f5000000000), Some(MemKind::HostAnon));
        assert_eq!(k(0x7f6000000000), Some(MemKind::Device));
        assert_eq!(k(0x7ffd00000100), Some(MemKind::HostStack));
        assert_eq!(k(0xffffffffff600000), Some(MemKind::Unknown));
        assert_eq!(k(0x1000), None);
        assert_eq!(k(0x55d0c0003000), None);
        assert_eq!(lookup(&r, 0x55d0c1000000, 8).unwrap().path.as_deref(), Some("[heap]"));
    }

    #[test]
    fn coverage_across_adjacent_mappings() {
        let r = parse(MAPS);
        // spans two adjacent anonymous mappings: fully mapped
        assert!(lookup(&r, 0x7f00001ff000, 0x2000).unwrap().fully_mapped);
        // runs past the end of the second one
        assert!(!lookup(&r, 0x7f00003ff000, 0x2000).unwrap().fully_mapped);
        // zero length counts as one byte
        assert!(lookup(&r, 0x7f0000000000, 0).unwrap().fully_mapped);
    }

    #[test]
    fn readable_ranges() {
        let r = parse(MAPS);
        // across two adjacent readable mappings, and up to the last byte
        assert!(readable(&r, 0x7f00001ff000, 0x2000));
        assert!(readable(&r, 0x55d0c0000000, 0x3000));
        // a gap after the second one, an unreadable mapping, nothing mapped
        assert!(!readable(&r, 0x7f00003ff000, 0x2000));
        assert!(!readable(&r, 0x7f6000000000, 8));
        assert!(!readable(&r, 0x1000, 8));
    }

    #[test]
    fn private_anonymous_mappings_only_and_no_holes() {
        let r = parse(MAPS);
        assert!(private_anonymous(&r, 0x55d0c1000000, 0x1000), "heap");
        assert!(private_anonymous(&r, 0x7ffd00000000, 0x1000), "stack");
        assert!(private_anonymous(&r, 0x7f00001ff000, 0x2000), "two adjacent anonymous mappings");
        assert!(!private_anonymous(&r, 0x7f00003ff000, 0x2000), "a hole after them");
        assert!(!private_anonymous(&r, 0x7f1000000000, 0x1000), "shared (anonymous huge pages)");
        assert!(!private_anonymous(&r, 0x7f5000000000, 0x1000), "a device's shared mapping");
        assert!(!private_anonymous(&r, 0x55d0c0002000, 0x100), "a file's private mapping");
        let one = |line: &str| parse(&format!("7f0000000000-7f0000010000 {line}\n"));
        assert!(!private_anonymous(&one("rw-p 00000000 00:01 4712 /memfd:x (deleted)"), 0x7f0000000000, 8), "memfd");
        assert!(!private_anonymous(&one("rw-s 00000000 00:00 0"), 0x7f0000000000, 8), "shared, no name");
        let named = one("rw-p 00000000 00:00 0 [anon:ucx]");
        assert!(private_anonymous(&named, 0x7f0000000000, 0x10000), "a named anonymous mapping");
    }

    #[test]
    fn live_process() {
        let v = vec![0u8; 1 << 20];
        let c = MapsCache::new();
        let l = c.classify(v.as_ptr() as u64, v.len() as u64, false, crate::clock::mono_ns());
        assert_eq!(l.kind, MemKind::HostAnon);
        assert!(l.fully_mapped);
        let s = 7u64;
        // test threads run on mmap'ed stacks (anonymous); only the main thread's is [stack]
        let k = c.classify(&s as *const u64 as u64, 8, true, crate::clock::mono_ns()).kind;
        assert!(matches!(k, MemKind::HostStack | MemKind::HostAnon), "{k:?}");
        assert_eq!(c.classify(0x10, 8, false, crate::clock::mono_ns()).kind, MemKind::Unmapped);
    }
}
