//! The exported verbs: rdma-core's public functions and the context ops behind its static-inline
//! ones. Names listed in both IBVERBS_1.0 and IBVERBS_1.1 are plain Rust functions here and get
//! their versioned names in compat.rs; all others are exported as they are.
//!
//! Every `unsafe extern "C"` function here has exactly the safety contract of the rdma-core
//! function of the same name (its man page: pointers the library itself returned, buffers of the
//! stated sizes), so they carry no `# Safety` section of their own.
#![allow(clippy::missing_safety_doc)]

use crate::engine::Engine;
use crate::events::AsyncEvents;
use crate::fault::{self, Call, Facts};
use crate::memory::{self, Limits, Request, Walk};
use crate::objects::{ctx, device_of, outer, registry, Chan, Cq, Ctx, Mr, Pd};
use crate::{errno_ret, ffi, set_errno, simlog};
use mrshim_verbs as v;
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

/// Completion vectors a context offers (ibv_create_cq's `comp_vector` must be below).
const NUM_COMP_VECTORS: c_int = 8;

pub unsafe extern "C" fn ibv_open_device(dev: *mut v::ibv_device) -> *mut v::ibv_context {
    ffi(null_mut(), || {
        let Ok(reg) = registry() else { return errno_ret(libc::EINVAL, null_mut()) };
        let Some(idx) = reg.device_index(dev) else { return errno_ret(libc::ENODEV, null_mut()) };
        if let Some(e) = fault::check(&reg.config.faults, Call::OpenDevice, &Facts::default()) {
            return errno_ret(e, null_mut());
        }
        let engine = match Engine::start(
            &reg.config.rundir,
            &reg.devices[idx].0.spec.name,
            std::time::Duration::from_millis(reg.config.nic_delay_ms),
        ) {
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
        vctx.create_qp_ex = Some(crate::qp::op_create_qp_ex);
        vctx.create_srq_ex = Some(crate::srq::op_create_srq_ex);
        vctx.create_cq_ex = Some(crate::cqex::op_create_cq_ex);
        let c = &mut vctx.context;
        c.device = dev;
        c.cmd_fd = cmd_fd();
        c.async_fd = fds[0];
        c.num_comp_vectors = NUM_COMP_VECTORS;
        c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
        c.ops.poll_cq = Some(op_poll_cq);
        c.ops.req_notify_cq = Some(op_req_notify_cq);
        c.ops.post_send = Some(crate::post::op_post_send);
        c.ops.post_recv = Some(crate::post::op_post_recv);
        c.ops.post_srq_recv = Some(crate::srq::op_post_srq_recv);
        let b = Box::new(Ctx { vctx, dev: idx, engine, events: AsyncEvents(fds[1]) });
        let p = Box::into_raw(b);
        // SAFETY: p is a live Box we just leaked; hand out its embedded ibv_context.
        unsafe { &mut (*p).vctx.context as *mut v::ibv_context }
    })
}

/// The context's command descriptor: rdma-core's is /dev/infiniband/uverbsN opened read-write,
/// close-on-exec. Nothing goes through it here, but programs hold it as a real descriptor —
/// pyverbs dup()s it to import the context elsewhere (ibv_import_device then reports
/// EOPNOTSUPP) — so it is /dev/null opened the same way; -1 only if that cannot be opened.
fn cmd_fd() -> c_int {
    // SAFETY: open with a NUL-terminated path.
    unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
}

pub unsafe extern "C" fn ibv_close_device(c: *mut v::ibv_context) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: c came from ibv_open_device; we take back the Box leaked there.
        let b = unsafe { Box::from_raw(c.cast::<u8>().sub(crate::objects::CTX_OFFSET).cast::<Ctx>()) };
        b.engine.shutdown();
        // SAFETY: closing the pipe this context created.
        unsafe {
            libc::close(b.vctx.context.async_fd);
            libc::close(b.events.0);
            if b.vctx.context.cmd_fd >= 0 {
                libc::close(b.vctx.context.cmd_fd);
            }
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
        // The kernel refuses a buffer too small for the whole table rather than truncating it.
        let n = d.gids.len();
        if max < n {
            return -(libc::EINVAL as isize);
        }
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
        let b = Box::new(Pd { pd: v::ibv_pd { context: c, handle: id as u32 }, id, users: Default::default() });
        Box::into_raw(b).cast()
    })
}

pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut v::ibv_pd) -> c_int {
    ffi(libc::EINVAL, || {
        // SAFETY: pd came from ibv_alloc_pd.
        if unsafe { outer::<Pd, _>(pd) }.users.load(Ordering::Acquire) > 0 {
            return libc::EBUSY;
        }
        // SAFETY: as above; no object refers to it any more.
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
pub(crate) static PINNED: AtomicU64 = AtomicU64::new(0);

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

pub(crate) fn limits() -> Limits {
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
    // SAFETY: as above.
    unsafe { Pd::count(pd, 1) };
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
        dmabuf: false,
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
    let (base, alias, pinned) = reach_va(&maps, &Request { addr, length: len, iova, access }, limits())?;
    Ok(new_mr(pd, addr, len, iova, access, base, pinned, alias))
}

/// How the NIC reaches a registered range: the local pointer for its address, a mapping the
/// simulator made for it (GPU memory: (addr, len)), pages pinned.
pub(crate) type Reach = (usize, Option<(usize, usize)>, u64);

/// How the NIC reaches [addr, addr+len) of a registration (or a rereg's new translation).
pub(crate) fn reach_va(maps: &[memory::Mapping], req: &Request, lim: Limits) -> Result<Reach, i32> {
    let reg = registry().map_err(|_| libc::EINVAL)?;
    let walk = memory::check_va(req, &lim, maps, reg.config.peer_memory, reg.config.device_mem_errno)?;
    Ok(match walk {
        Walk::Device => {
            let (alias, ptr) = gpu_alias(maps, req.addr, req.length).ok_or(libc::EFAULT)?;
            (ptr, Some(alias), 0)
        }
        _ => (req.addr as usize, None, memory::pages(req.addr, req.length)),
    })
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
    let mr = new_mr(pd, offset, len, iova, access, base, 0, Some((p as usize, maplen)));
    // SAFETY: new_mr returns our live Mr.
    unsafe { (*mr.cast::<Mr>()).dmabuf = true };
    Ok(mr)
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
        // SAFETY: the MR's PD outlives it (dealloc is EBUSY until now).
        unsafe { Pd::count(b.mr.pd, -1) };
        if let Some((p, n)) = b.alias {
            // SAFETY: unmapping the alias this registration created.
            unsafe { libc::munmap(p as *mut c_void, n) };
        }
        0
    })
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
    vector: c_int,
) -> *mut v::ibv_cq {
    ffi(null_mut(), || {
        let reg = registry().expect("registry");
        if let Some(e) = fault::check(&reg.config.faults, Call::CreateCq, &Facts::default()) {
            return errno_ret(e, null_mut());
        }
        if !(1..=crate::device::MAX_CQE).contains(&cqe) || !(0..NUM_COMP_VECTORS).contains(&vector) {
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
        // SAFETY: ibv_cq_ex is plain old data (zeroed pthread objects are their static
        // initialisers, None ops); so is ibv_wc.
        let (mut cq, current): (v::ibv_cq_ex, v::ibv_wc) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        cq.context = c;
        cq.channel = channel;
        cq.cq_context = cq_context;
        cq.cqe = cq_size(cqe);
        let p = Box::into_raw(Box::new(Cq { cq, inner, current: current.into() }));
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

/// Like mlx5: the new size is rounded up to 2^n - 1 and reported in `cq->cqe`; smaller than
/// the completions not polled yet is EINVAL. Those include the completions of everything posted
/// before the call, as on hardware, whose NIC has executed it by the time the command reaches
/// the firmware: the simulated NIC is let through its queues first. (The simulated CQ's queue
/// grows on demand, so only the reported size changes.)
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut v::ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: cq is the caller's CQ, made on one of our contexts.
    unsafe { ctx((*cq).context) }.engine.settle();
    // SAFETY: cq is the caller's CQ.
    let pending = unsafe { outer::<Cq, _>(cq) }.inner.pending();
    if !(1..=crate::device::MAX_CQE).contains(&cqe) || (cqe as usize) < pending {
        return libc::EINVAL;
    }
    // SAFETY: cq is the caller's CQ.
    unsafe { (*cq).cqe = cq_size(cqe) };
    0
}

/// The size mlx5 gives a CQ asked for `cqe` entries.
fn cq_size(cqe: c_int) -> c_int {
    (((cqe as u32) + 1).next_power_of_two() as c_int - 1).max(cqe)
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
