//! The exported verbs: rdma-core's public functions and the context ops behind its static-inline
//! ones. Names listed in both IBVERBS_1.0 and IBVERBS_1.1 are plain Rust functions here and get
//! their versioned names in compat.rs; all others are exported as they are.
//!
//! Every `unsafe extern "C"` function here has exactly the safety contract of the rdma-core
//! function of the same name (its man page: pointers the library itself returned, buffers of the
//! stated sizes), so they carry no `# Safety` section of their own.
#![allow(clippy::missing_safety_doc)]

use crate::engine::{Engine, QpInner, RecvWqe, SendOp, SendWqe, Sge};
use crate::fault::{self, Call, Facts};
use crate::memory::{self, Limits, Request, Walk};
use crate::objects::{ctx, outer, registry, Chan, Cq, Ctx, Mr, Pd, Qp};
use crate::{errno_ret, ffi, set_errno, simlog};
use mrshim_verbs::{self as v, ibv_qp_attr_mask as m, ibv_qp_state as qps};
use std::cell::Cell;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

// ---------------------------------------------------------------- devices

pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut v::ibv_device {
    ffi(null_mut(), || {
        let reg = match registry() {
            Ok(r) => r,
            Err(_) => {
                set_errno(libc::EINVAL);
                return null_mut();
            }
        };
        let n = reg.devices.len();
        // SAFETY: calloc'd array of n+1 pointers, freed by ibv_free_device_list.
        let list = unsafe { libc::calloc(n + 1, std::mem::size_of::<*mut v::ibv_device>()) } as *mut *mut v::ibv_device;
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return null_mut();
        }
        for (i, (_, ib)) in reg.devices.iter().enumerate() {
            // SAFETY: i < n+1 slots.
            unsafe { *list.add(i) = (&**ib as *const v::ibv_device).cast_mut() };
        }
        if !num.is_null() {
            // SAFETY: caller-provided out pointer.
            unsafe { *num = n as c_int };
        }
        list
    })
}

pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut v::ibv_device) {
    // SAFETY: list came from ibv_get_device_list's calloc.
    unsafe { libc::free(list.cast()) }
}

pub unsafe extern "C" fn ibv_get_device_name(dev: *mut v::ibv_device) -> *const c_char {
    // SAFETY: dev is one of our ibv_device structs (or the caller's bug, as with rdma-core).
    unsafe { (*dev).name.as_ptr() }
}

pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut v::ibv_device) -> u64 {
    registry().ok().and_then(|r| r.device_index(dev).map(|i| r.devices[i].0.node_guid.to_be())).unwrap_or(0)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut v::ibv_device) -> c_int {
    registry().ok().and_then(|r| r.device_index(dev)).map_or(-1, |i| i as c_int)
}

fn device_of(c: &Ctx) -> &'static crate::device::Device {
    &registry().expect("a context exists only with a registry").devices[c.dev].0
}

pub unsafe extern "C" fn ibv_open_device(dev: *mut v::ibv_device) -> *mut v::ibv_context {
    ffi(null_mut(), || {
        let Ok(reg) = registry() else { return errno_ret(libc::EINVAL, null_mut()) };
        let Some(idx) = reg.device_index(dev) else { return errno_ret(libc::ENODEV, null_mut()) };
        if let Some(e) = fault::check(&reg.config.faults, Call::OpenDevice, &Facts::default()) {
            return errno_ret(e, null_mut());
        }
        let engine = match Engine::start(&reg.config.rundir, &reg.devices[idx].0.spec.name) {
            Ok(e) => e,
            Err(e) => {
                eprintln!(
                    "mrshim-sim: cannot start device {} in {}: {e}",
                    reg.devices[idx].0.spec.name, reg.config.rundir
                );
                return errno_ret(e.raw_os_error().unwrap_or(libc::EIO), null_mut());
            }
        };
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills our array.
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        // SAFETY: verbs_context is plain old data (pointers, ints, Option<fn>); zero is valid.
        let mut vctx: v::verbs_context = unsafe { std::mem::zeroed() };
        vctx.sz = std::mem::size_of::<v::verbs_context>();
        vctx.query_port = Some(op_query_port);
        vctx.query_device_ex = Some(op_query_device_ex);
        vctx.create_qp_ex = Some(op_create_qp_ex);
        let c = &mut vctx.context;
        c.device = dev;
        c.cmd_fd = -1;
        c.async_fd = fds[0];
        c.num_comp_vectors = 8;
        c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
        c.ops.poll_cq = Some(op_poll_cq);
        c.ops.req_notify_cq = Some(op_req_notify_cq);
        c.ops.post_send = Some(op_post_send);
        c.ops.post_recv = Some(op_post_recv);
        c.ops.post_srq_recv = Some(op_post_srq_recv);
        let b = Box::new(Ctx { vctx, dev: idx, engine, async_wfd: fds[1] });
        let p = Box::into_raw(b);
        // SAFETY: p is a live Box we just leaked; hand out its embedded ibv_context.
        unsafe { &mut (*p).vctx.context as *mut v::ibv_context }
    })
}

pub unsafe extern "C" fn ibv_close_device(c: *mut v::ibv_context) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: c came from ibv_open_device; we take back the Box leaked there.
        let b = unsafe { Box::from_raw(c.cast::<u8>().sub(crate::objects::CTX_OFFSET).cast::<Ctx>()) };
        b.engine.shutdown();
        // SAFETY: closing the pipe this context created.
        unsafe {
            libc::close(b.vctx.context.async_fd);
            libc::close(b.async_wfd);
        }
        0
    })
}

pub unsafe extern "C" fn ibv_query_device(c: *mut v::ibv_context, attr: *mut v::ibv_device_attr) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: c is our context, attr the caller's buffer.
        let (cx, a) = unsafe { (ctx(c), &mut *attr) };
        device_of(cx).fill_device_attr(a);
        0
    })
}

unsafe extern "C" fn op_query_device_ex(
    c: *mut v::ibv_context,
    _input: *const v::ibv_query_device_ex_input,
    attr: *mut v::ibv_device_attr_ex,
    size: usize,
) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: ibv_device_attr_ex is plain old data.
        let mut full: v::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: c is our context.
        device_of(unsafe { ctx(c) }).fill_device_attr(&mut full.orig_attr);
        full.phys_port_cnt_ex = 1;
        full.device_cap_flags_ex = full.orig_attr.device_cap_flags as u64;
        copy_prefix(&full, attr, size);
        0
    })
}

/// Copies the first `size` bytes of `src` to `dst` (callers built against other headers pass
/// shorter or longer structs, as the extensible verbs ABI allows).
fn copy_prefix<T>(src: &T, dst: *mut T, size: usize) {
    let n = size.min(std::mem::size_of::<T>());
    // SAFETY: dst is the caller's buffer of at least `size` bytes; src is a live T.
    unsafe { std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst.cast::<u8>(), n) }
}

unsafe extern "C" fn op_query_port(c: *mut v::ibv_context, port: u8, attr: *mut v::ibv_port_attr, len: usize) -> c_int {
    ffi(libc::EINVAL, || {
        if port != crate::device::PORT {
            return libc::EINVAL;
        }
        // SAFETY: c is our context.
        let p = device_of(unsafe { ctx(c) }).port_attr();
        copy_prefix(&p, attr, len);
        0
    })
}

/// The exported (non-inline) ibv_query_port fills rdma-core's legacy `_compat_ibv_port_attr`:
/// ibv_port_attr up to `flags`, before port_cap_flags2 was added (padded to 4 bytes).
const COMPAT_PORT_ATTR_LEN: usize = (std::mem::offset_of!(v::ibv_port_attr, port_cap_flags2) + 3) & !3;

pub unsafe extern "C" fn ibv_query_port(
    c: *mut v::ibv_context,
    port: u8,
    attr: *mut v::_compat_ibv_port_attr,
) -> c_int {
    // SAFETY: same context; the compat struct is a prefix of ibv_port_attr.
    unsafe { op_query_port(c, port, attr.cast(), COMPAT_PORT_ATTR_LEN) }
}

pub unsafe extern "C" fn ibv_query_gid(c: *mut v::ibv_context, port: u8, index: c_int, gid: *mut v::ibv_gid) -> c_int {
    ffi(-1, || {
        // SAFETY: c is our context.
        let d = device_of(unsafe { ctx(c) });
        let tbl = d.port_attr().gid_tbl_len;
        if port != crate::device::PORT || index < 0 || index >= tbl {
            return errno_ret(libc::EINVAL, -1);
        }
        let raw = d.gids.get(index as usize).map_or([0u8; 16], |g| g.0);
        // SAFETY: gid is the caller's out buffer; ibv_gid is a 16-byte union.
        unsafe { (*gid).raw = raw };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(c: *mut v::ibv_context, port: u8, index: c_uint, ty: *mut c_uint) -> c_int {
    ffi(-1, || {
        // SAFETY: c is our context.
        let d = device_of(unsafe { ctx(c) });
        if port != crate::device::PORT {
            return errno_ret(libc::EINVAL, -1);
        }
        let t = d.gids.get(index as usize).map_or(0, |g| g.1 as c_uint);
        // SAFETY: caller's out pointer.
        unsafe { *ty = t };
        0
    })
}

fn gid_entry(d: &crate::device::Device, index: usize) -> Option<v::ibv_gid_entry> {
    let (raw, ty) = *d.gids.get(index)?;
    // SAFETY: plain old data.
    let mut e: v::ibv_gid_entry = unsafe { std::mem::zeroed() };
    e.gid.raw = raw;
    e.gid_index = index as u32;
    e.port_num = 1;
    e.gid_type = match (d.is_roce(), ty) {
        (false, _) => 0,                               // IBV_GID_TYPE_IB
        (true, crate::device::GidType::IbRoceV1) => 1, // IBV_GID_TYPE_ROCE_V1
        (true, crate::device::GidType::RoceV2) => 2,   // IBV_GID_TYPE_ROCE_V2
    };
    e.ndev_ifindex = if d.is_roce() { 1 } else { 0 };
    Some(e)
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    c: *mut v::ibv_context,
    port: u32,
    index: u32,
    entry: *mut v::ibv_gid_entry,
    flags: u32,
    size: usize,
) -> c_int {
    ffi(libc::EINVAL, || {
        if flags != 0 {
            return libc::EINVAL;
        }
        if port != crate::device::PORT as u32 {
            return libc::EINVAL;
        }
        // SAFETY: c is our context.
        let d = device_of(unsafe { ctx(c) });
        match gid_entry(d, index as usize) {
            Some(e) => {
                copy_prefix(&e, entry, size);
                0
            }
            None if (index as i32) < d.port_attr().gid_tbl_len => libc::ENODATA,
            None => libc::EINVAL,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    c: *mut v::ibv_context,
    entries: *mut v::ibv_gid_entry,
    max: usize,
    flags: u32,
    size: usize,
) -> isize {
    ffi(-(libc::EINVAL as isize), || {
        if flags != 0 || size < std::mem::size_of::<v::ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: c is our context.
        let d = device_of(unsafe { ctx(c) });
        let n = d.gids.len().min(max);
        for i in 0..n {
            let e = gid_entry(d, i).unwrap();
            // SAFETY: entries holds max entries of `size` bytes each.
            copy_prefix(&e, unsafe { entries.cast::<u8>().add(i * size).cast() }, size);
        }
        n as isize
    })
}

pub unsafe extern "C" fn ibv_query_pkey(_c: *mut v::ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int {
    if port != crate::device::PORT || index != 0 {
        return errno_ret(libc::EINVAL, -1);
    }
    // SAFETY: caller's out pointer.
    unsafe { *pkey = 0xffff };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(_c: *mut v::ibv_context, port: u8, pkey: u16) -> c_int {
    if port == crate::device::PORT && pkey == 0xffff {
        0
    } else {
        errno_ret(libc::ENOENT, -1)
    }
}

// ---------------------------------------------------------------- protection domains

static NEXT_PD: AtomicUsize = AtomicUsize::new(1);

pub unsafe extern "C" fn ibv_alloc_pd(c: *mut v::ibv_context) -> *mut v::ibv_pd {
    ffi(null_mut(), || {
        let reg = registry().expect("context implies registry");
        if let Some(e) = fault::check(&reg.config.faults, Call::AllocPd, &Facts::default()) {
            return errno_ret(e, null_mut());
        }
        let id = NEXT_PD.fetch_add(1, Ordering::Relaxed);
        let b = Box::new(Pd { pd: v::ibv_pd { context: c, handle: id as u32 }, id });
        Box::into_raw(b).cast()
    })
}

pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut v::ibv_pd) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: pd came from ibv_alloc_pd.
        drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
        0
    })
}

// ---------------------------------------------------------------- memory registration

thread_local! {
    /// Which public entry point the application used (ibv_reg_mr reaches ibv_reg_mr_iova2
    /// through the PLT, like rdma-core, so a preloaded shim sees that inner call too).
    static ENTRY: Cell<Option<Call>> = const { Cell::new(None) };
}

/// Pages pinned by this process (the kernel's mm->pinned_vm).
static PINNED: AtomicU64 = AtomicU64::new(0);

type RegIova2 = unsafe extern "C" fn(*mut v::ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut v::ibv_mr;

/// `ibv_reg_mr_iova2` as the dynamic linker resolves it for us: a preloaded definition wins,
/// as it would for rdma-core's PLT call. When this library was opened RTLD_LOCAL and nothing
/// is preloaded, the global scope has no such symbol and we call our own.
fn plt_reg_mr_iova2() -> RegIova2 {
    static CACHE: AtomicUsize = AtomicUsize::new(0);
    let mut p = CACHE.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: dlsym with a NUL-terminated name; the result, if any, has this signature.
        p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ibv_reg_mr_iova2".as_ptr()) } as usize;
        if p == 0 {
            p = ibv_reg_mr_iova2 as *const () as usize;
        }
        CACHE.store(p, Ordering::Release);
    }
    // SAFETY: p is either our own ibv_reg_mr_iova2 or an interposer with its signature.
    unsafe { std::mem::transmute::<usize, RegIova2>(p) }
}

fn via_plt(
    entry: Call,
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut v::ibv_mr {
    let outer_call = ENTRY.with(|e| e.get().is_none());
    if outer_call {
        ENTRY.with(|e| e.set(Some(entry)));
    }
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { plt_reg_mr_iova2()(pd, addr, len, iova, access) };
    if outer_call {
        ENTRY.with(|e| e.set(None));
    }
    r
}

pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut v::ibv_mr {
    via_plt(Call::RegMr, pd, addr, len, addr as u64, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut v::ibv_mr {
    via_plt(Call::RegMrIova, pd, addr, len, iova, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut v::ibv_mr {
    ffi(null_mut(), || {
        let entry = ENTRY.with(|e| e.take()).unwrap_or(Call::RegMrIova2);
        let r = reg_va(entry, pd, addr as u64, len as u64, iova, access);
        simlog::reg(entry, addr as u64, len as u64, iova, access, None, &r);
        match r {
            Ok(mr) => mr,
            Err(e) => errno_ret(e, null_mut()),
        }
    })
}

fn has_cap_ipc_lock() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0) // bit 14: CAP_IPC_LOCK
}

fn limits() -> Limits {
    let reg = registry().expect("registry");
    // SAFETY: getrlimit fills a local struct.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above: rl is ours and writable.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    let enforced = match reg.config.memlock {
        crate::config::Memlock::Enforce => true,
        crate::config::Memlock::Off => false,
        crate::config::Memlock::Auto => !has_cap_ipc_lock(),
    };
    let memlock = if rl.rlim_cur == libc::RLIM_INFINITY { u64::MAX } else { rl.rlim_cur };
    Limits { memlock, enforced, pinned_pages: PINNED.load(Ordering::Relaxed) }
}

#[allow(clippy::too_many_arguments)] // one MR's facts, gathered by three registration paths
fn new_mr(
    pd: *mut v::ibv_pd,
    addr: u64,
    len: u64,
    iova: u64,
    access: u32,
    base: usize,
    pinned_pages: u64,
    alias: Option<(usize, usize)>,
) -> *mut v::ibv_mr {
    // SAFETY: pd is the caller's PD from ibv_alloc_pd; its context is ours.
    let (p, cx) = unsafe { (outer::<Pd, _>(pd), ctx((*pd).context)) };
    let key = cx.engine.new_key();
    cx.engine.mrs.write().unwrap().insert(key, crate::engine::MrEntry { pd: p.id, iova, len, access, base });
    PINNED.fetch_add(pinned_pages, Ordering::Relaxed);
    let mr = Mr {
        mr: v::ibv_mr {
            context: p.pd.context,
            pd,
            addr: addr as *mut c_void,
            length: len as usize,
            handle: key,
            lkey: key,
            rkey: key,
        },
        pinned_pages,
        alias,
    };
    Box::into_raw(Box::new(mr)).cast()
}

fn reg_va(entry: Call, pd: *mut v::ibv_pd, addr: u64, len: u64, iova: u64, access: u32) -> Result<*mut v::ibv_mr, i32> {
    let reg = registry().map_err(|_| libc::EINVAL)?;
    if pd.is_null() {
        return Err(libc::EINVAL);
    }
    let maps = memory::current_maps();
    let device_memory = memory::walk(&maps, addr, len.max(1), false) == Walk::Device;
    if let Some(e) = fault::check(&reg.config.faults, entry, &Facts { access, length: len, device_memory }) {
        return Err(e);
    }
    let req = Request { addr, length: len, iova, access };
    let walk = memory::check_va(&req, &limits(), &maps, reg.config.peer_memory, reg.config.device_mem_errno)?;
    let (base, alias, pinned) = match walk {
        Walk::Device => {
            let (alias, ptr) = gpu_alias(&maps, addr, len).ok_or(libc::EFAULT)?;
            (ptr, Some(alias), 0)
        }
        _ => (addr as usize, None, memory::pages(addr, len)),
    };
    Ok(new_mr(pd, addr, len, iova, access, base, pinned, alias))
}

/// Peer memory: reach simulated GPU memory through its memfd (the application's own mapping is
/// PROT_NONE, like device memory the CPU cannot touch). Returns (alias mapping, pointer to addr).
fn gpu_alias(maps: &[memory::Mapping], addr: u64, len: u64) -> Option<((usize, usize), usize)> {
    let map = maps.iter().find(|x| x.start <= addr && addr + len <= x.end && x.is_gpu())?;
    let path = std::ffi::CString::new(format!("/proc/self/map_files/{:x}-{:x}", map.start, map.end)).ok()?;
    // SAFETY: open + mmap of the memfd behind the mapping; the fd is closed right after mapping.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let size = (map.end - map.start) as usize;
        let p = libc::mmap(
            null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            map.offset as libc::off_t,
        );
        libc::close(fd);
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(((p as usize, size), p as usize + (addr - map.start) as usize))
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut v::ibv_pd,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut v::ibv_mr {
    ffi(null_mut(), || {
        let r = reg_dmabuf(pd, offset, len as u64, iova, fd, access as u32);
        simlog::reg(Call::RegDmabufMr, offset, len as u64, iova, access as u32, Some(fd), &r);
        match r {
            Ok(mr) => mr,
            Err(e) => errno_ret(e, null_mut()),
        }
    })
}

fn reg_dmabuf(
    pd: *mut v::ibv_pd,
    offset: u64,
    len: u64,
    iova: u64,
    fd: c_int,
    access: u32,
) -> Result<*mut v::ibv_mr, i32> {
    let reg = registry().map_err(|_| libc::EINVAL)?;
    if !reg.config.dmabuf {
        return Err(libc::EOPNOTSUPP);
    }
    let size = memory::dmabuf_size(fd);
    if let Some(e) = fault::check(
        &reg.config.faults,
        Call::RegDmabufMr,
        &Facts { access, length: len, device_memory: size.is_some() },
    ) {
        return Err(e);
    }
    memory::check_dmabuf(offset, len, iova, access, memory::fd_valid(fd), size)?;
    let start = offset & !(memory::PAGE - 1);
    let maplen = (offset + len - start) as usize;
    // SAFETY: maps the dmabuf (a memfd) so the simulated NIC can reach it; unmapped at dereg.
    let p = unsafe {
        libc::mmap(null_mut(), maplen, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, start as libc::off_t)
    };
    if p == libc::MAP_FAILED {
        return Err(libc::EINVAL);
    }
    let base = p as usize + (offset - start) as usize;
    Ok(new_mr(pd, offset, len, iova, access, base, 0, Some((p as usize, maplen))))
}

pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut v::ibv_mr) -> c_int {
    ffi(libc::EINVAL, || {
        if mr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: mr came from one of our registration functions.
        let b = unsafe { Box::from_raw(mr.cast::<Mr>()) };
        // SAFETY: its context is ours.
        let cx = unsafe { ctx(b.mr.context) };
        cx.engine.mrs.write().unwrap().remove(&b.mr.lkey);
        PINNED.fetch_sub(b.pinned_pages, Ordering::Relaxed);
        if let Some((p, n)) = b.alias {
            // SAFETY: unmapping the alias this registration created.
            unsafe { libc::munmap(p as *mut c_void, n) };
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    _mr: *mut v::ibv_mr,
    _flags: c_int,
    _pd: *mut v::ibv_pd,
    _addr: *mut c_void,
    _len: usize,
    _access: c_int,
) -> c_int {
    libc::EOPNOTSUPP
}

// ---------------------------------------------------------------- completion queues

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(c: *mut v::ibv_context) -> *mut v::ibv_comp_channel {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return null_mut();
    }
    let b = Box::new(Chan { ch: v::ibv_comp_channel { context: c, fd: fds[0], refcnt: 0 }, wfd: fds[1] });
    Box::into_raw(b).cast()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut v::ibv_comp_channel) -> c_int {
    // SAFETY: ch came from ibv_create_comp_channel.
    let b = unsafe { Box::from_raw(ch.cast::<Chan>()) };
    if b.ch.refcnt > 0 {
        let _ = Box::into_raw(b);
        return libc::EBUSY;
    }
    // SAFETY: closing the pipe we created.
    unsafe {
        libc::close(b.ch.fd);
        libc::close(b.wfd);
    }
    0
}

pub unsafe extern "C" fn ibv_create_cq(
    c: *mut v::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut v::ibv_comp_channel,
    _vector: c_int,
) -> *mut v::ibv_cq {
    ffi(null_mut(), || {
        let reg = registry().expect("registry");
        if let Some(e) = fault::check(&reg.config.faults, Call::CreateCq, &Facts::default()) {
            return errno_ret(e, null_mut());
        }
        if !(1..=crate::device::MAX_CQE).contains(&cqe) {
            return errno_ret(libc::EINVAL, null_mut());
        }
        let wfd = if channel.is_null() {
            -1
        } else {
            // SAFETY: channel came from ibv_create_comp_channel.
            let ch = unsafe { &mut *channel.cast::<Chan>() };
            ch.ch.refcnt += 1;
            ch.wfd
        };
        let inner = Arc::new(crate::cq::CqInner::new(cqe as usize, wfd));
        // SAFETY: ibv_cq is plain old data (zeroed pthread objects are their static initialisers).
        let mut cq: v::ibv_cq = unsafe { std::mem::zeroed() };
        cq.context = c;
        cq.channel = channel;
        cq.cq_context = cq_context;
        cq.cqe = (cqe as u32).next_power_of_two() as c_int - 1;
        cq.cqe = cq.cqe.max(cqe);
        let p = Box::into_raw(Box::new(Cq { cq, inner }));
        // SAFETY: p is live.
        unsafe { (*p).inner.set_ptr(p as usize) };
        p.cast()
    })
}

pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut v::ibv_cq) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: cq came from ibv_create_cq.
        let b = unsafe { Box::from_raw(cq.cast::<Cq>()) };
        if b.inner.users.load(Ordering::Acquire) > 0 {
            let _ = Box::into_raw(b);
            return libc::EBUSY; // still used by a QP
        }
        if !b.cq.channel.is_null() {
            // SAFETY: the channel outlives its CQs (destroy_comp_channel refuses while refcnt > 0).
            unsafe { (*b.cq.channel).refcnt -= 1 };
        }
        0
    })
}

pub unsafe extern "C" fn ibv_resize_cq(_cq: *mut v::ibv_cq, cqe: c_int) -> c_int {
    if !(1..=crate::device::MAX_CQE).contains(&cqe) {
        libc::EINVAL
    } else {
        0
    }
}

unsafe extern "C" fn op_poll_cq(cq: *mut v::ibv_cq, n: c_int, wc: *mut mrshim_verbs::sys::ibv_wc) -> c_int {
    if n <= 0 {
        return 0;
    }
    // SAFETY: cq is ours; wc has room for n entries (the two ibv_wc types share one layout).
    let (c, out) = unsafe { (outer::<Cq, _>(cq), std::slice::from_raw_parts_mut(wc.cast::<v::ibv_wc>(), n as usize)) };
    c.inner.poll(out) as c_int
}

unsafe extern "C" fn op_req_notify_cq(cq: *mut v::ibv_cq, _solicited: c_int) -> c_int {
    // SAFETY: cq is ours.
    unsafe { outer::<Cq, _>(cq) }.inner.arm();
    0
}

pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut v::ibv_comp_channel,
    cq: *mut *mut v::ibv_cq,
    cq_ctx: *mut *mut c_void,
) -> c_int {
    let mut buf = [0u8; 8];
    // SAFETY: reads 8 bytes from the channel pipe into a local buffer.
    let n = unsafe { libc::read((*ch).fd, buf.as_mut_ptr().cast(), 8) };
    if n != 8 {
        return -1;
    }
    let p = usize::from_ne_bytes(buf) as *mut v::ibv_cq;
    // SAFETY: p is the CQ pointer our engine wrote; out pointers are the caller's.
    unsafe {
        *cq = p;
        *cq_ctx = (*p).cq_context;
    }
    0
}

pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut v::ibv_cq, n: c_uint) {
    // SAFETY: cq is ours; the counter is informational.
    unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(n) };
}

// ---------------------------------------------------------------- queue pairs

/// Init attributes of an RC QP on one CQ with `max_wr` WRs and one SGE each way: what the
/// crate's own tests and benchmarks create (applications build theirs).
pub fn rc_init_attr(cq: *mut v::ibv_cq, max_wr: u32) -> v::ibv_qp_init_attr {
    // SAFETY: ibv_qp_init_attr is plain old data; all-zero is valid.
    let mut ia: v::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = v::ibv_qp_type::IBV_QPT_RC;
    ia.cap.max_send_wr = max_wr;
    ia.cap.max_recv_wr = max_wr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia
}

pub unsafe extern "C" fn ibv_create_qp(pd: *mut v::ibv_pd, init: *mut v::ibv_qp_init_attr) -> *mut v::ibv_qp {
    ffi(null_mut(), || create_qp(pd, init, false))
}

/// verbs_context.create_qp_ex, behind the static-inline ibv_create_qp_ex.
unsafe extern "C" fn op_create_qp_ex(_c: *mut v::ibv_context, attr: *mut v::ibv_qp_init_attr_ex) -> *mut v::ibv_qp {
    ffi(null_mut(), || {
        // SAFETY: the caller's attribute struct.
        let a = unsafe { &mut *attr };
        const PD: u32 = 1 << 0; // IBV_QP_INIT_ATTR_PD
        const SEND_OPS: u32 = 1 << 6; // IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        if a.comp_mask & PD == 0 || a.pd.is_null() {
            return errno_ret(libc::EINVAL, null_mut());
        }
        if a.comp_mask & !(PD | SEND_OPS) != 0 || a.create_flags != 0 {
            return errno_ret(libc::EOPNOTSUPP, null_mut());
        }
        // SAFETY: ibv_qp_init_attr_ex starts with the fields of ibv_qp_init_attr.
        create_qp(a.pd, attr.cast(), a.comp_mask & SEND_OPS != 0)
    })
}

fn create_qp(pd: *mut v::ibv_pd, init: *mut v::ibv_qp_init_attr, ex: bool) -> *mut v::ibv_qp {
    let reg = registry().expect("registry");
    // SAFETY: pd and init are the caller's valid objects.
    let (p, ia) = unsafe { (outer::<Pd, _>(pd), &mut *init) };
    if let Some(e) = fault::check(&reg.config.faults, Call::CreateQp, &Facts::default()) {
        return errno_ret(e, null_mut());
    }
    let uc = match ia.qp_type {
        v::ibv_qp_type::IBV_QPT_RC => false,
        v::ibv_qp_type::IBV_QPT_UC => true,
        _ => return errno_ret(libc::EOPNOTSUPP, null_mut()),
    };
    if !ia.srq.is_null() {
        return errno_ret(libc::EOPNOTSUPP, null_mut());
    }
    let cap = &mut ia.cap;
    if ia.send_cq.is_null()
        || ia.recv_cq.is_null()
        || cap.max_send_wr > crate::device::MAX_QP_WR as u32
        || cap.max_recv_wr > crate::device::MAX_QP_WR as u32
        || cap.max_send_sge > crate::device::MAX_SGE as u32
        || cap.max_recv_sge > crate::device::MAX_SGE as u32
        || cap.max_inline_data > crate::device::MAX_INLINE
    {
        return errno_ret(libc::EINVAL, null_mut());
    }
    cap.max_send_wr = cap.max_send_wr.max(1);
    cap.max_recv_wr = cap.max_recv_wr.max(1);
    cap.max_send_sge = cap.max_send_sge.max(1);
    cap.max_recv_sge = cap.max_recv_sge.max(1);
    cap.max_inline_data = crate::device::MAX_INLINE;
    // SAFETY: the PD's context is ours; CQs are ours.
    let (cx, scq, rcq) = unsafe { (ctx(p.pd.context), outer::<Cq, _>(ia.send_cq), outer::<Cq, _>(ia.recv_cq)) };
    let qpn = match cx.engine.claim_qpn() {
        Ok(n) => n,
        Err(e) => return errno_ret(e.raw_os_error().unwrap_or(libc::ENOMEM), null_mut()),
    };
    scq.inner.users.fetch_add(1, Ordering::AcqRel);
    rcq.inner.users.fetch_add(1, Ordering::AcqRel);
    let inner = Arc::new(QpInner::new(
        qpn,
        p.id,
        uc,
        ia.sq_sig_all != 0,
        (cap.max_send_wr, cap.max_recv_wr),
        scq.inner.clone(),
        rcq.inner.clone(),
    ));
    cx.engine.qps.lock().unwrap().insert(qpn, inner.clone());
    // SAFETY: ibv_qp_ex is plain old data (pointers, ints, Option<fn>).
    let mut qpx: v::ibv_qp_ex = unsafe { std::mem::zeroed() };
    if ex {
        crate::qpex::install(&mut qpx);
    }
    let qp = &mut qpx.qp_base;
    qp.context = p.pd.context;
    qp.qp_context = ia.qp_context;
    qp.pd = pd;
    qp.send_cq = ia.send_cq;
    qp.recv_cq = ia.recv_cq;
    qp.srq = ia.srq;
    qp.handle = qpn;
    qp.qp_num = qpn;
    qp.state = qps::IBV_QPS_RESET;
    qp.qp_type = ia.qp_type;
    Box::into_raw(Box::new(Qp { qpx, ex, inner, cap: *cap, batch: Default::default() })).cast()
}

pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut v::ibv_qp) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: qp came from ibv_create_qp.
        let b = unsafe { Box::from_raw(qp.cast::<Qp>()) };
        // SAFETY: its context is ours.
        let cx = unsafe { ctx(b.qpx.qp_base.context) };
        cx.engine.qps.lock().unwrap().remove(&b.inner.qpn);
        cx.engine.release_qpn(b.inner.qpn);
        b.inner.send_cq.users.fetch_sub(1, Ordering::AcqRel);
        b.inner.recv_cq.users.fetch_sub(1, Ordering::AcqRel);
        0
    })
}

/// Required and optional attribute masks per transition (the kernel's qp_state_table, RC/UC).
fn transition_masks(cur: u32, next: u32, uc: bool) -> Option<(u32, u32)> {
    use qps::*;
    let a = |x: v::ibv_qp_attr_mask| x.0;
    let path_opt = a(m::IBV_QP_ALT_PATH) | a(m::IBV_QP_ACCESS_FLAGS) | a(m::IBV_QP_PKEY_INDEX);
    Some(match (cur, next) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (a(m::IBV_QP_PKEY_INDEX) | a(m::IBV_QP_PORT) | a(m::IBV_QP_ACCESS_FLAGS), 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, a(m::IBV_QP_PKEY_INDEX) | a(m::IBV_QP_PORT) | a(m::IBV_QP_ACCESS_FLAGS)),
        (IBV_QPS_INIT, IBV_QPS_RTR) => {
            let base = a(m::IBV_QP_AV) | a(m::IBV_QP_PATH_MTU) | a(m::IBV_QP_DEST_QPN) | a(m::IBV_QP_RQ_PSN);
            let rc = a(m::IBV_QP_MAX_DEST_RD_ATOMIC) | a(m::IBV_QP_MIN_RNR_TIMER);
            if uc {
                (base, path_opt)
            } else {
                (base | rc, path_opt)
            }
        }
        (IBV_QPS_RTR, IBV_QPS_RTS) => {
            let rc =
                a(m::IBV_QP_TIMEOUT) | a(m::IBV_QP_RETRY_CNT) | a(m::IBV_QP_RNR_RETRY) | a(m::IBV_QP_MAX_QP_RD_ATOMIC);
            let opt = a(m::IBV_QP_CUR_STATE)
                | a(m::IBV_QP_ALT_PATH)
                | a(m::IBV_QP_ACCESS_FLAGS)
                | a(m::IBV_QP_MIN_RNR_TIMER)
                | a(m::IBV_QP_PATH_MIG_STATE);
            if uc {
                (a(m::IBV_QP_SQ_PSN), opt)
            } else {
                (a(m::IBV_QP_SQ_PSN) | rc, opt)
            }
        }
        (IBV_QPS_RTS, IBV_QPS_RTS) => (
            0,
            a(m::IBV_QP_CUR_STATE)
                | a(m::IBV_QP_ACCESS_FLAGS)
                | a(m::IBV_QP_ALT_PATH)
                | a(m::IBV_QP_PATH_MIG_STATE)
                | a(m::IBV_QP_MIN_RNR_TIMER),
        ),
        _ => return None,
    })
}

/// The kernel's checks for one ibv_modify_qp call; Ok(next state).
pub fn check_modify(
    cur: u32,
    uc: bool,
    attr: &v::ibv_qp_attr,
    mask: u32,
    dev: &crate::device::Device,
) -> Result<u32, i32> {
    let state_bit = m::IBV_QP_STATE.0;
    let next = if mask & state_bit != 0 { attr.qp_state } else { cur };
    if next > qps::IBV_QPS_ERR {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_CUR_STATE.0 != 0 && attr.cur_qp_state != cur {
        return Err(libc::EINVAL);
    }
    let (req, opt) = transition_masks(cur, next, uc).ok_or(libc::EINVAL)?;
    let given = mask & !state_bit;
    if given & req != req || given & !(req | opt | m::IBV_QP_CUR_STATE.0) != 0 {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_PORT.0 != 0 && attr.port_num != crate::device::PORT {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_PKEY_INDEX.0 != 0 && attr.pkey_index as i32 >= dev.port_attr().pkey_tbl_len as i32 {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_PATH_MTU.0 != 0 && (attr.path_mtu < 1 || attr.path_mtu > dev.port_attr().active_mtu) {
        return Err(libc::EINVAL);
    }
    if mask & m::IBV_QP_AV.0 != 0 {
        let ah = &attr.ah_attr;
        if dev.is_roce() && (ah.is_global == 0 || ah.grh.sgid_index as usize >= dev.gids.len()) {
            return Err(libc::EINVAL); // RoCE needs a GRH with a valid source GID
        }
        if !dev.is_roce() && ah.dlid == 0 {
            return Err(libc::EINVAL);
        }
    }
    if mask & m::IBV_QP_DEST_QPN.0 != 0 && attr.dest_qp_num > 0xff_ffff {
        return Err(libc::EINVAL);
    }
    if (mask & m::IBV_QP_MAX_QP_RD_ATOMIC.0 != 0 && attr.max_rd_atomic as i32 > crate::device::MAX_RD_ATOM)
        || (mask & m::IBV_QP_MAX_DEST_RD_ATOMIC.0 != 0 && attr.max_dest_rd_atomic as i32 > crate::device::MAX_RD_ATOM)
        || (mask & m::IBV_QP_TIMEOUT.0 != 0 && attr.timeout > 31)
        || (mask & m::IBV_QP_RETRY_CNT.0 != 0 && attr.retry_cnt > 7)
        || (mask & m::IBV_QP_RNR_RETRY.0 != 0 && attr.rnr_retry > 7)
    {
        return Err(libc::EINVAL);
    }
    Ok(next)
}

pub unsafe extern "C" fn ibv_modify_qp(qp: *mut v::ibv_qp, attr: *mut v::ibv_qp_attr, mask: c_int) -> c_int {
    ffi(libc::EINVAL, || {
        let reg = registry().expect("registry");
        // SAFETY: qp and attr are the caller's valid objects.
        let (q, a) = unsafe { (&mut *qp.cast::<Qp>(), &*attr) };
        if let Some(e) = fault::check(&reg.config.faults, Call::ModifyQp, &Facts::default()) {
            return e;
        }
        // SAFETY: the QP's context is ours.
        let dev = device_of(unsafe { ctx(q.qpx.qp_base.context) });
        let inner = q.inner.clone();
        let mut st = inner.st.lock().unwrap();
        let mask = mask as u32;
        let next = match check_modify(st.state, inner.uc, a, mask, dev) {
            Ok(n) => n,
            Err(e) => return e,
        };
        let has = |b: v::ibv_qp_attr_mask| mask & b.0 != 0;
        let t = &mut st.attrs;
        if has(m::IBV_QP_PORT) {
            t.port = a.port_num;
        }
        if has(m::IBV_QP_ACCESS_FLAGS) {
            t.access = a.qp_access_flags;
        }
        if has(m::IBV_QP_PKEY_INDEX) {
            t.pkey_index = a.pkey_index;
        }
        if has(m::IBV_QP_AV) {
            t.ah = Some(a.ah_attr);
        }
        if has(m::IBV_QP_PATH_MTU) {
            t.path_mtu = a.path_mtu;
        }
        if has(m::IBV_QP_DEST_QPN) {
            t.dest_qpn = a.dest_qp_num;
        }
        if has(m::IBV_QP_RQ_PSN) {
            t.rq_psn = a.rq_psn;
        }
        if has(m::IBV_QP_MAX_DEST_RD_ATOMIC) {
            t.max_dest_rd_atomic = a.max_dest_rd_atomic;
        }
        if has(m::IBV_QP_MIN_RNR_TIMER) {
            t.min_rnr_timer = a.min_rnr_timer;
        }
        if has(m::IBV_QP_TIMEOUT) {
            t.timeout = a.timeout;
        }
        if has(m::IBV_QP_RETRY_CNT) {
            t.retry_cnt = a.retry_cnt;
        }
        if has(m::IBV_QP_RNR_RETRY) {
            t.rnr_retry = a.rnr_retry;
        }
        if has(m::IBV_QP_MAX_QP_RD_ATOMIC) {
            t.max_rd_atomic = a.max_rd_atomic;
        }
        if has(m::IBV_QP_SQ_PSN) {
            t.sq_psn = a.sq_psn;
            inner.set_sq_psn(&mut st, a.sq_psn);
        }
        match next {
            qps::IBV_QPS_RESET => inner.reset(&mut st),
            qps::IBV_QPS_ERR if st.state != qps::IBV_QPS_ERR => inner.flush(&mut st),
            _ => {}
        }
        st.state = next;
        q.qpx.qp_base.state = next;
        drop(st);
        // SAFETY: the QP's context is ours.
        unsafe { ctx(q.qpx.qp_base.context) }.engine.kick();
        0
    })
}

pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut v::ibv_qp,
    attr: *mut v::ibv_qp_attr,
    _mask: c_int,
    init: *mut v::ibv_qp_init_attr,
) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: caller's valid objects.
        let (q, a) = unsafe { (outer::<Qp, _>(qp), &mut *attr) };
        let st = q.inner.st.lock().unwrap();
        // SAFETY: plain old data.
        *a = unsafe { std::mem::zeroed() };
        a.qp_state = st.state;
        a.cur_qp_state = st.state;
        a.path_mtu = st.attrs.path_mtu;
        a.rq_psn = st.attrs.rq_psn;
        a.sq_psn = st.attrs.sq_psn;
        a.dest_qp_num = st.attrs.dest_qpn;
        a.qp_access_flags = st.attrs.access;
        a.cap = q.cap;
        if let Some(ah) = st.attrs.ah {
            a.ah_attr = ah;
        }
        a.pkey_index = st.attrs.pkey_index;
        a.max_rd_atomic = st.attrs.max_rd_atomic;
        a.max_dest_rd_atomic = st.attrs.max_dest_rd_atomic;
        a.min_rnr_timer = st.attrs.min_rnr_timer;
        a.port_num = st.attrs.port;
        a.timeout = st.attrs.timeout;
        a.retry_cnt = st.attrs.retry_cnt;
        a.rnr_retry = st.attrs.rnr_retry;
        if !init.is_null() {
            // SAFETY: caller's out struct.
            let ia = unsafe { &mut *init };
            ia.qp_context = q.qpx.qp_base.qp_context;
            ia.send_cq = q.qpx.qp_base.send_cq;
            ia.recv_cq = q.qpx.qp_base.recv_cq;
            ia.srq = q.qpx.qp_base.srq;
            ia.cap = q.cap;
            ia.qp_type = q.qpx.qp_base.qp_type;
            ia.sq_sig_all = q.inner.sq_sig_all as c_int;
        }
        0
    })
}

fn sges(list: *mut v::ibv_sge, n: c_int) -> Vec<Sge> {
    if n <= 0 || list.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's WR holds n SGEs.
    unsafe { std::slice::from_raw_parts(list, n as usize) }
        .iter()
        .map(|s| Sge { addr: s.addr, len: s.length, lkey: s.lkey })
        .collect()
}

/// One send work request, from either post API (ibv_post_send or the ibv_wr_* builders).
pub struct WrDesc {
    pub wr_id: u64,
    pub op: SendOp,
    pub imm: Option<u32>,
    pub flags: c_uint,
    pub sges: Vec<Sge>,
    /// Set by ibv_wr_set_inline_data: the bytes, copied at build time.
    pub inline_data: Option<Vec<u8>>,
    pub raddr: u64,
    pub rkey: u32,
}

/// The driver's checks at post time, then the WR goes on the send queue (or is flushed at once
/// in the error state). An errno for ibv_post_send's return value otherwise.
pub fn enqueue(q: &Qp, st: &mut crate::engine::QpState, w: WrDesc) -> Result<(), c_int> {
    let inner = &q.inner;
    let len: u64 = match &w.inline_data {
        Some(d) => d.len() as u64,
        None => w.sges.iter().map(|s| s.len as u64).sum(),
    };
    let inline =
        (w.flags & v::ibv_send_flags::IBV_SEND_INLINE.0 != 0 || w.inline_data.is_some()) && w.op != SendOp::Read;
    if (w.op == SendOp::Read && inner.uc)
        || w.sges.len() > q.cap.max_send_sge as usize
        || len > crate::device::MAX_MSG_SZ as u64
        || (inline && len > q.cap.max_inline_data as u64)
    {
        return Err(libc::EINVAL);
    }
    if (st.state < qps::IBV_QPS_RTS && st.state != qps::IBV_QPS_ERR) || st.state == qps::IBV_QPS_SQD {
        return Err(libc::EINVAL);
    }
    if st.sq.len() + st.inflight_len() >= inner.max_send_wr as usize {
        return Err(libc::ENOMEM);
    }
    if st.state == qps::IBV_QPS_ERR {
        inner.send_cq.push(inner.wc(w.wr_id, v::ibv_wc_status::IBV_WC_WR_FLUSH_ERR, 0, 0));
        return Ok(());
    }
    let inline_data = match w.inline_data {
        Some(d) => Some(d),
        None if inline => {
            let mut d = Vec::with_capacity(len as usize);
            for s in &w.sges {
                // SAFETY: inline data is read from the caller's buffers at post time, as the verb specifies.
                d.extend_from_slice(unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.len as usize) });
            }
            Some(d)
        }
        None => None,
    };
    let psn = st.take_psn();
    st.sq.push_back(SendWqe {
        wr_id: w.wr_id,
        op: w.op,
        signaled: w.flags & v::ibv_send_flags::IBV_SEND_SIGNALED.0 != 0,
        sges: w.sges,
        inline: inline_data,
        raddr: w.raddr,
        rkey: w.rkey,
        imm: w.imm,
        len,
        psn,
        retries: 0,
    });
    Ok(())
}

unsafe extern "C" fn op_post_send(
    qp: *mut v::ibv_qp,
    mut wr: *mut v::ibv_send_wr,
    bad: *mut *mut v::ibv_send_wr,
) -> c_int {
    ffi(libc::EINVAL, || {
        use v::ibv_wr_opcode::*;
        // SAFETY: qp is ours.
        let q = unsafe { outer::<Qp, _>(qp) };
        let mut st = q.inner.st.lock().unwrap();
        let mut rc = 0;
        while !wr.is_null() {
            // SAFETY: walking the caller's WR list.
            let w = unsafe { &*wr };
            let (op, imm) = match w.opcode {
                IBV_WR_SEND => (SendOp::Send, None),
                // SAFETY: imm_data is the active union member for *_WITH_IMM.
                IBV_WR_SEND_WITH_IMM => (SendOp::Send, Some(unsafe { w.__bindgen_anon_1.imm_data })),
                IBV_WR_RDMA_WRITE => (SendOp::Write, None),
                // SAFETY: as above.
                IBV_WR_RDMA_WRITE_WITH_IMM => (SendOp::WriteImm, Some(unsafe { w.__bindgen_anon_1.imm_data })),
                IBV_WR_RDMA_READ => (SendOp::Read, None),
                _ => {
                    rc = libc::EINVAL;
                    break;
                }
            };
            if w.num_sge < 0 {
                rc = libc::EINVAL;
                break;
            }
            // SAFETY: rdma is the active union member for RDMA opcodes (ignored otherwise).
            let rdma = unsafe { w.wr.rdma };
            let d = WrDesc {
                wr_id: w.wr_id,
                op,
                imm,
                flags: w.send_flags,
                sges: sges(w.sg_list, w.num_sge),
                inline_data: None,
                raddr: rdma.remote_addr,
                rkey: rdma.rkey,
            };
            if let Err(e) = enqueue(q, &mut st, d) {
                rc = e;
                break;
            }
            wr = w.next;
        }
        drop(st);
        if rc != 0 && !bad.is_null() {
            // SAFETY: caller's out pointer.
            unsafe { *bad = wr };
        }
        // SAFETY: the QP's context is ours.
        unsafe { ctx(q.qpx.qp_base.context) }.engine.kick();
        rc
    })
}

unsafe extern "C" fn op_post_recv(
    qp: *mut v::ibv_qp,
    mut wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: qp is ours.
        let q = unsafe { outer::<Qp, _>(qp) };
        let inner = &q.inner;
        let mut st = inner.st.lock().unwrap();
        let mut rc = 0;
        while !wr.is_null() {
            // SAFETY: walking the caller's WR list.
            let w = unsafe { &*wr };
            if st.state == qps::IBV_QPS_RESET || w.num_sge < 0 || w.num_sge as u32 > q.cap.max_recv_sge {
                rc = libc::EINVAL;
                break;
            }
            if st.rq.len() >= inner.max_recv_wr as usize {
                rc = libc::ENOMEM;
                break;
            }
            if st.state == qps::IBV_QPS_ERR {
                inner.recv_cq.push(inner.wc(
                    w.wr_id,
                    v::ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
                    v::ibv_wc_opcode::IBV_WC_RECV,
                    0,
                ));
            } else {
                st.rq.push_back(RecvWqe { wr_id: w.wr_id, sges: sges(w.sg_list, w.num_sge) });
            }
            wr = w.next;
        }
        // SAFETY: the QP's context is ours.
        let cx = unsafe { ctx(q.qpx.qp_base.context) };
        cx.engine.match_unmatched(inner, &mut st);
        drop(st);
        if rc != 0 && !bad.is_null() {
            // SAFETY: caller's out pointer.
            unsafe { *bad = wr };
        }
        rc
    })
}

unsafe extern "C" fn op_post_srq_recv(
    _srq: *mut v::ibv_srq,
    _wr: *mut v::ibv_recv_wr,
    _bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut v::ibv_qp) -> *mut v::ibv_qp_ex {
    // SAFETY: qp is ours. Only QPs created through ibv_create_qp_ex with send_ops_flags have one.
    let q = unsafe { &mut *qp.cast::<Qp>() };
    if q.ex {
        &mut q.qpx
    } else {
        null_mut()
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(_qp: *mut v::ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's usecnt, not the Arc's count, decides whether a CQ is busy: the progress
    /// thread may still hold a clone of a destroyed QP (finishing a message) when the
    /// application destroys the CQ, and that must not be EBUSY. Here the clone is held on
    /// purpose, so the moment the race needs is certain.
    #[test]
    fn destroy_cq_after_destroy_qp_succeeds_while_the_engine_still_holds_the_qp() {
        let dir = std::env::temp_dir().join(format!("mrshim-sim-unit-{}", std::process::id()));
        std::env::set_var("MRSHIM_SIM_RUNDIR", &dir);
        // SAFETY: the verbs calls below are used as an application uses them, on objects they
        // returned, each checked before use.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert!(!list.is_null() && n > 0);
            let ctx = ibv_open_device(*list);
            assert!(!ctx.is_null());
            let pd = ibv_alloc_pd(ctx);
            let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
            assert!(!pd.is_null() && !cq.is_null());
            let qp = ibv_create_qp(pd, &mut rc_init_attr(cq, 4));
            assert!(!qp.is_null());
            assert_eq!(ibv_destroy_cq(cq), libc::EBUSY, "a live QP uses the CQ");
            let held = (*qp.cast::<Qp>()).inner.clone();
            assert_eq!(ibv_destroy_qp(qp), 0);
            assert_eq!(ibv_destroy_cq(cq), 0, "only the engine's clone of the destroyed QP is left");
            drop(held);
            assert_eq!(ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_close_device(ctx), 0);
            ibv_free_device_list(list);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
