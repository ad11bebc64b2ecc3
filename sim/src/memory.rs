//! What the kernel checks when memory is registered (ib_uverbs_reg_mr → ib_check_mr_access →
//! ib_umem_get), with the errno each check gives. Pure functions over a snapshot of the address
//! space so the rules are unit-tested without a device.

use mrshim_verbs::access as acc;

pub const PAGE: u64 = 4096;

/// Name of the memfd behind simulated GPU memory (the GPU runtime maps it PROT_NONE at the
/// address the application holds).
pub const GPU_MEMFD: &str = "mrshim-gpu";
/// Name prefix of other memfds tests may hand in as dmabufs (GPU memory fds are dmabufs too).
pub const DMABUF_MEMFD: &str = "mrshim-dmabuf";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    /// File offset of `start` (for memfd-backed GPU memory).
    pub offset: u64,
    pub path: String,
}

impl Mapping {
    pub fn is_gpu(&self) -> bool {
        self.path.starts_with(&format!("/memfd:{GPU_MEMFD}"))
    }
}

/// Parses /proc/self/maps text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let (s, e) = f.next()?.split_once('-')?;
            let perms = f.next()?.as_bytes();
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let path = f.nth(2).map(|p| {
                // The path is the rest of the line (it may contain spaces, e.g. "(deleted)").
                let at = l.find(p).unwrap_or(l.len());
                l[at..].to_string()
            });
            Some(Mapping {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                read: perms.first() == Some(&b'r'),
                write: perms.get(1) == Some(&b'w'),
                offset,
                path: path.unwrap_or_default(),
            })
        })
        .collect()
}

pub fn current_maps() -> Vec<Mapping> {
    parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap_or_default())
}

/// What the page walk finds for [addr, addr+len).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    Host,
    /// Some page is simulated GPU memory.
    Device,
    /// A page is missing, or not writable while write access was asked for.
    Fault,
}

pub fn walk(maps: &[Mapping], addr: u64, len: u64, writable: bool) -> Walk {
    let start = addr & !(PAGE - 1);
    let Some(end) = addr.checked_add(len).and_then(|e| e.checked_add(PAGE - 1)).map(|e| e & !(PAGE - 1)) else {
        return Walk::Fault;
    };
    let mut at = start;
    let mut device = false;
    for m in maps.iter().filter(|m| m.end > start && m.start < end) {
        if m.start > at {
            return Walk::Fault; // hole
        }
        if m.is_gpu() {
            device = true;
        } else if writable && !m.write {
            // Only a writable pin needs the mapping writable. A read-only pin of a PROT_NONE
            // page succeeds: get_user_pages checks VM_MAYREAD, not VM_READ (as rxe shows).
            return Walk::Fault;
        }
        at = at.max(m.end);
        if at >= end {
            break;
        }
    }
    if at < end {
        return Walk::Fault;
    }
    if device {
        Walk::Device
    } else {
        Walk::Host
    }
}

/// Everything the checks need to know, gathered by the caller.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub access: u32,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// RLIMIT_MEMLOCK soft limit in bytes (u64::MAX = unlimited).
    pub memlock: u64,
    /// Whether the limit applies (no CAP_IPC_LOCK, or forced by MRSHIM_SIM_MEMLOCK=enforce).
    pub enforced: bool,
    /// Pages already pinned by this process.
    pub pinned_pages: u64,
}

/// Pages a registration pins.
pub fn pages(addr: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = addr / PAGE;
    let last = (addr + len - 1) / PAGE;
    last - first + 1
}

/// The access checks both registration paths share (ib_check_mr_access).
pub fn check_access(access: u32) -> Result<(), i32> {
    let remote_needs_local = acc::REMOTE_WRITE | acc::REMOTE_ATOMIC;
    if access & remote_needs_local != 0 && access & acc::LOCAL_WRITE == 0 {
        return Err(libc::EINVAL);
    }
    if access & !(acc::MANDATORY_KNOWN | acc::OPTIONAL_RANGE) != 0 {
        return Err(libc::EINVAL);
    }
    if access & acc::ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP); // the simulated device has no ODP
    }
    if access & acc::ZERO_BASED != 0 {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Writable pin (FOLL_WRITE) as ib_access_writable() decides it.
pub fn writable(access: u32) -> bool {
    access & (acc::LOCAL_WRITE | acc::REMOTE_WRITE | acc::REMOTE_ATOMIC | acc::MW_BIND) != 0
}

/// The VA path, in the kernel's order. `Ok(Walk)` says what memory it is.
pub fn check_va(
    r: &Request,
    lim: &Limits,
    maps: &[Mapping],
    peer_memory: bool,
    device_errno: i32,
) -> Result<Walk, i32> {
    if r.addr % PAGE != r.iova % PAGE {
        return Err(libc::EINVAL); // ib_uverbs_reg_mr: start and hca_va page offsets differ
    }
    check_access(r.access)?;
    if r.addr.checked_add(r.length).is_none() || r.iova.checked_add(r.length).is_none() {
        return Err(libc::EINVAL);
    }
    if lim.enforced && lim.memlock == 0 {
        return Err(libc::EPERM); // can_do_mlock()
    }
    let npages = pages(r.addr, r.length);
    if npages == 0 {
        return Err(libc::EINVAL);
    }
    if lim.enforced && lim.memlock != u64::MAX && (lim.pinned_pages + npages) > lim.memlock / PAGE {
        return Err(libc::ENOMEM);
    }
    match walk(maps, r.addr, r.length, writable(r.access)) {
        Walk::Fault => Err(libc::EFAULT),
        Walk::Device if !peer_memory => Err(device_errno),
        w => Ok(w),
    }
}

/// The dmabuf path (ib_umem_dmabuf_get): `size` is the dmabuf's size, `None` if the fd is not a
/// dmabuf; `fd_valid` false for a closed/negative fd.
pub fn check_dmabuf(
    offset: u64,
    length: u64,
    iova: u64,
    access: u32,
    fd_valid: bool,
    size: Option<u64>,
) -> Result<(), i32> {
    if offset % PAGE != iova % PAGE {
        return Err(libc::EINVAL);
    }
    check_access(access)?;
    let end = offset.checked_add(length).ok_or(libc::EINVAL)?;
    if !fd_valid {
        return Err(libc::EBADF);
    }
    let size = size.ok_or(libc::EINVAL)?;
    if length == 0 || end > size {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// The size of a dmabuf fd exported by the simulated GPU runtime, `None` if it is something else.
pub fn dmabuf_size(fd: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let link = link.to_string_lossy();
    if ![GPU_MEMFD, DMABUF_MEMFD].iter().any(|p| link.starts_with(&format!("/memfd:{p}"))) {
        return None;
    }
    // SAFETY: fstat writes into the zeroed stat buffer we own; fd validity is checked by the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above: st is ours and writable; a bad fd is an error return.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_size as u64)
}

pub fn fd_valid(fd: i32) -> bool {
    // SAFETY: F_GETFD only queries the descriptor table.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
}

#[cfg(test)]
mod tests {
    use super::*;
    const RW: u32 = acc::LOCAL_WRITE | acc::REMOTE_WRITE | acc::REMOTE_READ;

    fn maps() -> Vec<Mapping> {
        parse_maps(
            "10000-20000 rw-p 00000000 00:00 0 \n\
             20000-30000 r--p 00000000 08:01 12 /usr/lib/libx.so\n\
             30000-40000 ---p 00000000 00:00 0 \n\
             50000-60000 rw-s 00000000 00:01 99 /memfd:mrshim-gpu (deleted)\n",
        )
    }
    fn unlimited() -> Limits {
        Limits { memlock: u64::MAX, enforced: false, pinned_pages: 0 }
    }
    fn va(addr: u64, length: u64, iova: u64, access: u32) -> Result<Walk, i32> {
        check_va(&Request { addr, length, iova, access }, &unlimited(), &maps(), false, libc::EINVAL)
    }

    #[test]
    fn maps_paths_with_spaces() {
        assert_eq!(maps()[3].path, "/memfd:mrshim-gpu (deleted)");
        assert!(maps()[3].is_gpu());
    }

    #[test]
    fn kernel_rules_and_errnos() {
        assert_eq!(va(0x10000, 0x1000, 0x10000, RW), Ok(Walk::Host));
        assert_eq!(va(0x10000, 0, 0x10000, RW), Err(libc::EINVAL), "length 0");
        assert_eq!(va(0x10000, 64, 0x10000, acc::REMOTE_WRITE), Err(libc::EINVAL), "remote write w/o local write");
        assert_eq!(va(0x10000, 64, 0x10000, acc::REMOTE_ATOMIC), Err(libc::EINVAL));
        assert_eq!(va(0x10000, 64, 0x10000, acc::REMOTE_READ), Ok(Walk::Host));
        assert_eq!(va(0x10000, 64, 0x10000, acc::LOCAL_WRITE | 0x400), Err(libc::EINVAL), "unknown mandatory bit");
        assert_eq!(
            va(0x10000, 64, 0x10000, RW | acc::RELAXED_ORDERING | 0x200_0000),
            Ok(Walk::Host),
            "optional bits ignored"
        );
        assert_eq!(va(0x10010, 64, 0x20000, RW), Err(libc::EINVAL), "page offsets differ");
        assert_eq!(va(0x10010, 64, 0x7000_0010, RW), Ok(Walk::Host), "same page offset, other iova");
        assert_eq!(va(0x40000, 64, 0x40000, RW), Err(libc::EFAULT), "unmapped");
        assert_eq!(va(0x30000, 64, 0x30000, acc::REMOTE_READ), Ok(Walk::Host), "PROT_NONE, read-only pin");
        assert_eq!(va(0x30000, 64, 0x30000, 0), Ok(Walk::Host), "PROT_NONE, access 0");
        assert_eq!(va(0x30000, 64, 0x30000, acc::LOCAL_WRITE), Err(libc::EFAULT), "PROT_NONE, writable pin");
        assert_eq!(va(0x20000, 64, 0x20000, RW), Err(libc::EFAULT), "read-only mapping with write access");
        assert_eq!(va(0x20000, 64, 0x20000, acc::REMOTE_READ), Ok(Walk::Host), "read-only mapping, read access");
        assert_eq!(va(0x1f000, 0x2000, 0x1f000, acc::REMOTE_READ), Ok(Walk::Host), "spans two mappings");
        assert_eq!(va(0x2f000, 0x2000, 0x2f000, acc::REMOTE_READ), Ok(Walk::Host), "runs into PROT_NONE, read-only");
        assert_eq!(va(0x2f000, 0x2000, 0x2f000, RW), Err(libc::EFAULT), "runs into PROT_NONE, writable");
        assert_eq!(va(0x50000, 64, 0x50000, RW), Err(libc::EINVAL), "device memory without peer memory");
        assert_eq!(va(u64::MAX - 10, 64, u64::MAX - 10, RW), Err(libc::EINVAL), "wraps");
    }

    #[test]
    fn device_memory_with_peer_memory_and_configured_errno() {
        let r = Request { addr: 0x50000, length: 64, iova: 0x50000, access: RW };
        assert_eq!(check_va(&r, &unlimited(), &maps(), true, libc::EINVAL), Ok(Walk::Device));
        assert_eq!(check_va(&r, &unlimited(), &maps(), false, libc::EFAULT), Err(libc::EFAULT));
    }

    #[test]
    fn memlock() {
        let r = Request { addr: 0x10000, length: 0x3000, iova: 0x10000, access: RW };
        let m = maps();
        let lim = |memlock, enforced, pinned_pages| Limits { memlock, enforced, pinned_pages };
        assert_eq!(check_va(&r, &lim(0x4000, true, 0), &m, false, 22), Ok(Walk::Host));
        assert_eq!(check_va(&r, &lim(0x4000, true, 2), &m, false, 22), Err(libc::ENOMEM));
        assert_eq!(check_va(&r, &lim(0x4000, false, 2), &m, false, 22), Ok(Walk::Host), "CAP_IPC_LOCK");
        assert_eq!(check_va(&r, &lim(0, true, 0), &m, false, 22), Err(libc::EPERM), "memlock 0");
        assert_eq!(pages(0xfff, 2), 2);
        assert_eq!(pages(0x1000, 0x1000), 1);
    }

    #[test]
    fn dmabuf_rules() {
        assert_eq!(check_dmabuf(0, 4096, 0x1000, RW, true, Some(8192)), Ok(()));
        assert_eq!(check_dmabuf(0, 4096, 0x1000, RW, false, None), Err(libc::EBADF));
        assert_eq!(check_dmabuf(0, 4096, 0x1000, RW, true, None), Err(libc::EINVAL), "not a dmabuf");
        assert_eq!(check_dmabuf(4096, 8192, 0x1000, RW, true, Some(8192)), Err(libc::EINVAL), "beyond the buffer");
        assert_eq!(check_dmabuf(16, 64, 0x1000, RW, true, Some(8192)), Err(libc::EINVAL), "page offsets differ");
        assert_eq!(check_dmabuf(0, 64, 0, acc::REMOTE_WRITE, true, Some(8192)), Err(libc::EINVAL));
    }
}
