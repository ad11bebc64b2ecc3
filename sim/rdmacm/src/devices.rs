//! The devices rdma_cm works on: every device of the (simulated) libibverbs, opened once as
//! librdmacm does, with the IP addresses its port answers to. Address mapping (docs/sim.md):
//! a RoCE port has its GID table's addresses (the IPv4-mapped entries: 192.0.2.10 + device
//! index; the link-local IPv6 entry); an InfiniBand port has its GID as IPv6 address and, as
//! IPoIB would give it, 192.0.2.10 + index as IPv4. The loopback (127.0.0.0/8, ::1) and the
//! wildcard map to the first active device, as the kernel's rdma_cm binds loopback.

use crate::addr::{v4_mapped, Addr, Ip};
use mrshim_verbs as v;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::sync::{Mutex, OnceLock};

extern "C" {
    fn ibv_query_gid_type(ctx: *mut v::ibv_context, port: u8, index: u32, ty: *mut u32) -> c_int;
}

/// enum ibv_gid_type_sysfs: RoCE v2.
const GID_TYPE_ROCE_V2: u32 = 1;

pub struct Dev {
    pub ctx: *mut v::ibv_context,
    pub name: String,
    pub roce: bool,
    pub active: bool,
    pub lid: u16,
    /// ibv_mtu of the port.
    pub mtu: u32,
    pub gids: Vec<[u8; 16]>,
    pub v4: [u8; 4],
    /// The PD rdma_create_qp uses when given none (librdmacm allocates one per device).
    pd: Mutex<usize>,
}

// SAFETY: the context pointer is only handed to libibverbs, which is thread-safe.
unsafe impl Send for Dev {}
// SAFETY: as above; the PD slot is behind a mutex.
unsafe impl Sync for Dev {}

pub struct Devices {
    pub rundir: String,
    pub devs: Vec<Dev>,
    /// The simulator's `mrshim_sim_fence` (crate::qp::fence).
    pub fence: Option<Fence>,
}

pub type Fence = unsafe extern "C" fn(*mut v::ibv_context) -> c_int;

static DEVICES: OnceLock<Result<Devices, i32>> = OnceLock::new();

/// The devices, or the errno rdma_create_event_channel / rdma_create_id fail with: ENODEV when
/// libibverbs is not the simulator's or has no device.
pub fn get() -> Result<&'static Devices, i32> {
    DEVICES.get_or_init(open_all).as_ref().map_err(|e| *e)
}

fn open_all() -> Result<Devices, i32> {
    // SAFETY: dlsym on the global scope with a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mrshim_sim_rundir".as_ptr()) };
    if f.is_null() {
        eprintln!("mrshim-sim librdmacm: libibverbs.so.1 is not the simulator's (run under `mrshim sim`); no devices");
        return Err(libc::ENODEV);
    }
    // SAFETY: the simulator exports it as `const char *mrshim_sim_rundir(void)`.
    let rundir = unsafe {
        let f: extern "C" fn() -> *const c_char = std::mem::transmute(f);
        let p = f();
        if p.is_null() {
            return Err(libc::ENODEV);
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    // SAFETY: dlsym on the global scope with a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mrshim_sim_fence".as_ptr()) };
    // SAFETY: the simulator exports it as `int mrshim_sim_fence(struct ibv_context *)`.
    let fence = (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, Fence>(f) });
    let mut n: c_int = 0;
    // SAFETY: libibverbs' device list; freed below, the opened contexts stay open for good.
    let list = unsafe { v::ibv_get_device_list(&mut n) };
    if list.is_null() || n <= 0 {
        return Err(libc::ENODEV);
    }
    let mut devs = Vec::new();
    for i in 0..n as usize {
        // SAFETY: i < n entries of the list.
        let d = unsafe { *list.add(i) };
        // SAFETY: a device from the list.
        let ctx = unsafe { v::ibv_open_device(d) };
        if ctx.is_null() {
            continue;
        }
        // SAFETY: the device's NUL-terminated name.
        let name = unsafe { CStr::from_ptr(v::ibv_get_device_name(d)) }.to_string_lossy().into_owned();
        // SAFETY: a zeroed port attribute is valid output space.
        let mut pa: v::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and our output struct: the exported (non-inline)
        // ibv_query_port fills rdma-core's legacy layout, a prefix of ibv_port_attr that has
        // every field used here.
        if unsafe { v::ibv_query_port(ctx, 1, (&mut pa as *mut v::ibv_port_attr).cast()) } != 0 {
            continue;
        }
        let mut gids = Vec::new();
        for g in 0..pa.gid_tbl_len.min(16) {
            // SAFETY: a zeroed gid is valid output space.
            let mut gid: v::ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: an open context, port 1, an index within its table.
            if unsafe { v::ibv_query_gid(ctx, 1, g, &mut gid) } != 0 {
                break;
            }
            // SAFETY: raw is always a valid view of the union.
            let raw = unsafe { gid.raw };
            if raw == [0; 16] {
                break;
            }
            gids.push(raw);
        }
        let roce = pa.link_layer == v::IBV_LINK_LAYER_ETHERNET as u8;
        let v4 = gids.iter().find_map(v4_mapped).unwrap_or([192, 0, 2, 10 + i as u8]);
        devs.push(Dev {
            ctx,
            name,
            roce,
            active: pa.state == v::ibv_port_state::IBV_PORT_ACTIVE,
            lid: pa.lid,
            mtu: pa.active_mtu,
            gids,
            v4,
            pd: Mutex::new(0),
        });
    }
    // SAFETY: the list from ibv_get_device_list; the contexts outlive it.
    unsafe { v::ibv_free_device_list(list) };
    if devs.is_empty() {
        return Err(libc::ENODEV);
    }
    Ok(Devices { rundir, devs, fence })
}

impl Dev {
    pub fn owns(&self, ip: &Ip) -> bool {
        match ip {
            Ip::V4(a) => *a == self.v4,
            Ip::V6(a) => self.gids.iter().any(|g| g == a),
        }
    }

    /// The source GID index for traffic from `ip`: RoCE v2 entry of the address's kind (the
    /// default GID type of rdma_cm on mlx5), the port GID on InfiniBand.
    pub fn gid_index(&self, ip: &Ip) -> u8 {
        if !self.roce {
            return 0;
        }
        let want_v4 = matches!(ip, Ip::V4(_)) || matches!(ip, Ip::V6(a) if v4_mapped(a).is_some());
        (0..self.gids.len())
            .find(|&i| {
                let mut ty = 0u32;
                // SAFETY: an open context, port 1, an index within its table.
                let ok = unsafe { ibv_query_gid_type(self.ctx, 1, i as u32, &mut ty) } == 0;
                ok && ty == GID_TYPE_ROCE_V2 && v4_mapped(&self.gids[i]).is_some() == want_v4
            })
            .unwrap_or(0) as u8
    }

    pub fn default_pd(&self) -> *mut v::ibv_pd {
        let mut pd = self.pd.lock().unwrap();
        if *pd == 0 {
            // SAFETY: an open context.
            *pd = unsafe { v::ibv_alloc_pd(self.ctx) } as usize;
        }
        *pd as *mut v::ibv_pd
    }
}

impl Devices {
    /// The device a local address belongs to: ENODEV for an address of the host that no
    /// simulated port has, EADDRNOTAVAIL for an address of no interface at all.
    pub fn for_local(&self, a: &Addr) -> Result<usize, i32> {
        if a.is_any() || a.is_loopback() {
            return self.devs.iter().position(|d| d.active).ok_or(libc::ENODEV);
        }
        if let Some(i) = self.devs.iter().position(|d| d.owns(&a.ip)) {
            return Ok(i);
        }
        Err(if host_has(&a.ip) { libc::ENODEV } else { libc::EADDRNOTAVAIL })
    }

    /// The device reached at `a` (every simulated port is on this host): None off the host.
    pub fn for_remote(&self, a: &Addr) -> Option<usize> {
        self.for_local(a).ok()
    }
}

/// Whether a network interface of the host has this address (getifaddrs).
fn host_has(ip: &Ip) -> bool {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates the list; freed below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return false;
    }
    let mut found = false;
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let n = unsafe { &*p };
        if !n.ifa_addr.is_null() {
            // SAFETY: ifa_addr is a sockaddr of its family's size.
            if let Ok(a) = unsafe { Addr::from_sockaddr(n.ifa_addr) } {
                found |= a.ip == *ip;
            }
        }
        p = n.ifa_next;
    }
    // SAFETY: the list getifaddrs returned.
    unsafe { libc::freeifaddrs(ifa) };
    found
}
