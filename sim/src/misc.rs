//! The small public verbs: strings, rates, sysfs, fork support, async events, and the ones the
//! simulated device does not offer (multicast, imports, ECE, the kernel-struct copies), which fail
//! the way rdma-core does for a provider without them. (Address handles: ah.rs; SRQs: srq.rs.)
//!
//! As in api.rs: each function's safety contract is its rdma-core namesake's.
#![allow(clippy::missing_safety_doc)]

use crate::device::sysfs_root;
use crate::errno_ret;
use crate::objects::registry;
use mrshim_verbs as v;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;

macro_rules! cstr_table {
    ($name:ident, $ty:ty, $unknown:expr, [$($k:expr => $s:expr),* $(,)?]) => {
        #[no_mangle]
        pub extern "C" fn $name(x: $ty) -> *const c_char {
            let s: &'static std::ffi::CStr = match x as i64 { $(k if k == $k as i64 => $s,)* _ => $unknown };
            s.as_ptr()
        }
    };
}

cstr_table!(ibv_wc_status_str, u32, c"unknown", [
    0 => c"success", 1 => c"local length error", 2 => c"local QP operation error",
    3 => c"local EE context operation error", 4 => c"local protection error",
    5 => c"Work Request Flushed Error", 6 => c"memory management operation error",
    7 => c"bad response error", 8 => c"local access error", 9 => c"remote invalid request error",
    10 => c"remote access error", 11 => c"remote operation error",
    12 => c"transport retry counter exceeded", 13 => c"RNR retry counter exceeded",
    14 => c"local RDD violation error", 15 => c"remote invalid RD request",
    16 => c"aborted error", 17 => c"invalid EE context number",
    18 => c"invalid EE context state", 19 => c"fatal error", 20 => c"response timeout error",
    21 => c"general error", 22 => c"TM error", 23 => c"TM rendezvous incomplete",
]);
cstr_table!(ibv_node_type_str, i32, c"unknown", [
    1 => c"InfiniBand channel adapter", 2 => c"InfiniBand switch", 3 => c"InfiniBand router",
    4 => c"iWARP NIC", 5 => c"usNIC", 6 => c"usNIC UDP", 7 => c"unspecified",
]);
cstr_table!(ibv_port_state_str, u32, c"unknown", [
    0 => c"PORT_NOP", 1 => c"PORT_DOWN", 2 => c"PORT_INIT", 3 => c"PORT_ARMED",
    4 => c"PORT_ACTIVE", 5 => c"PORT_ACTIVE_DEFER",
]);
cstr_table!(ibv_event_type_str, u32, c"unknown", [
    0 => c"CQ error", 1 => c"local work queue catastrophic error", 2 => c"invalid request local work queue error",
    3 => c"local access violation work queue error", 4 => c"communication established",
    5 => c"send queue drained", 6 => c"path migrated", 7 => c"path migration request error",
    8 => c"local catastrophic error", 9 => c"port active", 10 => c"port error", 11 => c"LID change",
    12 => c"P_Key change", 13 => c"SM change", 14 => c"SRQ catastrophic error", 15 => c"SRQ limit reached",
    16 => c"last WQE reached", 17 => c"client reregistration", 18 => c"GID table change",
]);

/// enum ibv_rate → (multiple of 2.5 Gb/s, Mb/s).
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 81, 206250),
    (18, 121, 309375),
    (19, 162, 412500),
    (20, 20, 50000),
    (21, 160, 400000),
    (22, 240, 600000),
    (23, 80, 200000),
    (24, 320, 800000),
];

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    sysfs_root().as_ptr()
}

/// Reads `dir/file`; for the simulated devices' /sys/class/infiniband/<name> directories the
/// content comes from the device model (there is no kernel device behind them).
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    crate::ffi(-1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return errno_ret(libc::EINVAL, -1);
        }
        // SAFETY: NUL-terminated strings from the caller.
        let (d, f) = unsafe {
            (std::ffi::CStr::from_ptr(dir).to_string_lossy(), std::ffi::CStr::from_ptr(file).to_string_lossy())
        };
        let simulated = registry().ok().and_then(|r| {
            let name = d.strip_prefix(&format!("{}/class/infiniband/", sysfs_root().to_string_lossy()))?;
            let dev = r.devices.iter().find(|(dv, _)| dv.spec.name == name.trim_end_matches('/'))?;
            crate::device::sysfs_file(&dev.0, &f)
        });
        let text = match simulated {
            Some(t) => t + "\n",
            None => match std::fs::read_to_string(format!("{d}/{f}")) {
                Ok(t) => t,
                Err(e) => return errno_ret(e.raw_os_error().unwrap_or(libc::ENOENT), -1),
            },
        };
        let bytes = text.trim_end_matches('\n').as_bytes();
        let n = bytes.len().min(size - 1);
        // SAFETY: buf holds `size` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        n as c_int
    })
}

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}
/// IBV_FORK_UNNEEDED: the (simulated) kernel copies pinned pages on fork.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

pub unsafe extern "C" fn ibv_get_async_event(c: *mut v::ibv_context, ev: *mut v::ibv_async_event) -> c_int {
    // SAFETY: the caller's context and event struct.
    unsafe { crate::events::read_event((*c).async_fd, &mut *ev) }
}
pub unsafe extern "C" fn ibv_ack_async_event(_ev: *mut v::ibv_async_event) {}

// Multicast is not offered (max_mcast_grp 0).
pub unsafe extern "C" fn ibv_attach_mcast(_qp: *mut v::ibv_qp, _gid: *const v::ibv_gid, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}
pub unsafe extern "C" fn ibv_detach_mcast(_qp: *mut v::ibv_qp, _gid: *const v::ibv_gid, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut v::ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut v::ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

// Sharing objects between processes by kernel handle needs a kernel: not simulated.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut v::ibv_context {
    errno_ret(libc::EOPNOTSUPP, null_mut())
}
#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(_c: *mut v::ibv_context, _h: u32) -> *mut v::ibv_pd {
    errno_ret(libc::EOPNOTSUPP, null_mut())
}
#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut v::ibv_pd, _h: u32) -> *mut v::ibv_mr {
    errno_ret(libc::EOPNOTSUPP, null_mut())
}
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(_c: *mut v::ibv_context, _h: u32) -> *mut c_void {
    errno_ret(libc::EOPNOTSUPP, null_mut())
}
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut v::ibv_pd) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut v::ibv_mr) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

// Kernel ABI struct converters (used by librdmacm's kernel-CM paths, which need a kernel).
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(_dst: *mut c_void, _src: *mut c_void) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(_dst: *mut c_void, _src: *mut c_void) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *mut c_void) {}
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *mut c_void) {}

/// Old-style provider registration: there are no providers to load.
pub unsafe extern "C" fn ibv_register_driver(_name: *const c_char, _init: *mut c_void) {}
