//! The verbs objects handed to applications. Each wraps the rdma-core struct the application
//! reads (first field, or `verbs_context` for contexts, so pointer casts are the ABI) together
//! with the simulator's own state.

use crate::config::Config;
use crate::cq::CqInner;
use crate::device::Device;
use crate::engine::{Engine, QpInner};
use mrshim_verbs as v;
use std::sync::{Arc, OnceLock};

#[repr(C)]
pub struct Ctx {
    pub vctx: v::verbs_context,
    pub dev: usize,
    pub engine: Arc<Engine>,
    /// Write end of the async event pipe (SRQ limit events; ports never change state).
    pub events: crate::events::AsyncEvents,
}

#[repr(C)]
pub struct Pd {
    pub pd: v::ibv_pd,
    pub id: usize,
    /// The kernel's `pd->usecnt`: MRs, QPs, SRQs and AHs on this PD. ibv_dealloc_pd is EBUSY
    /// while any is alive (as on rxe: the uverbs core refuses, whatever the provider).
    pub users: std::sync::atomic::AtomicUsize,
}

impl Pd {
    /// One more (`+1`) or one fewer (`-1`) object on the PD `pd` points at.
    ///
    /// # Safety
    /// `pd` is a PD this library returned and has not freed.
    pub unsafe fn count(pd: *mut v::ibv_pd, delta: isize) {
        use std::sync::atomic::Ordering;
        // SAFETY: the caller's promise.
        let p = unsafe { outer::<Pd, _>(pd) };
        if delta > 0 {
            p.users.fetch_add(1, Ordering::AcqRel);
        } else {
            p.users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[repr(C)]
pub struct Mr {
    pub mr: v::ibv_mr,
    pub pinned_pages: u64,
    /// A mapping the simulator made to reach the memory (dmabuf or GPU memory): (addr, len).
    pub alias: Option<(usize, usize)>,
    /// Registered with ibv_reg_dmabuf_mr (rdma-core's IBV_MR_TYPE_DMABUF_MR: no rereg).
    pub dmabuf: bool,
}

/// Every CQ is laid out as rdma-core's `struct ibv_cq_ex` (whose head is `struct ibv_cq`), as
/// providers allocate a `verbs_cq`: one made by `ibv_create_cq_ex` has its poll ops set (cqex.rs).
#[repr(C)]
pub struct Cq {
    pub cq: v::ibv_cq_ex,
    pub inner: Arc<CqInner>,
    /// The completion `ibv_start_poll`/`ibv_next_poll` returned last (one poller at a time, as
    /// rdma-core requires of extended CQs).
    pub current: std::cell::UnsafeCell<v::ibv_wc>,
}

#[repr(C)]
pub struct Chan {
    pub ch: v::ibv_comp_channel,
    pub wfd: i32,
}

#[repr(C)]
pub struct Qp {
    /// `qp_base` (the `struct ibv_qp` applications hold) comes first.
    pub qpx: v::ibv_qp_ex,
    /// Created through ibv_create_qp_ex with send_ops_flags: the ibv_wr_* API is available.
    pub ex: bool,
    pub inner: Arc<QpInner>,
    pub cap: v::ibv_qp_cap,
    /// WRs built by ibv_wr_* since ibv_wr_start, and the first error among them.
    pub batch: std::sync::Mutex<(Vec<crate::wr::WrDesc>, i32)>,
}

/// The process-wide device table, built on first use from the environment.
pub struct Registry {
    pub config: Config,
    pub devices: Vec<(Device, Box<v::ibv_device>)>,
}

// SAFETY: the ibv_device structs are written once at start-up and only read afterwards.
unsafe impl Send for Registry {}
// SAFETY: as above: immutable after construction.
unsafe impl Sync for Registry {}

static REGISTRY: OnceLock<Result<Registry, String>> = OnceLock::new();

pub fn registry() -> Result<&'static Registry, &'static str> {
    REGISTRY
        .get_or_init(|| {
            let config = Config::from_env().map_err(|e| {
                let line = e.to_string();
                eprintln!("{line}");
                line
            })?;
            let devices = config
                .devices
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let d = Device::new(i, spec.clone());
                    // SAFETY: ibv_device is plain old data; all-zero is valid.
                    let mut ib: Box<v::ibv_device> = Box::new(unsafe { std::mem::zeroed() });
                    ib.node_type = v::IBV_NODE_CA;
                    ib.transport_type = v::IBV_TRANSPORT_IB;
                    crate::device::copy_cstr(&mut ib.name, &spec.name);
                    crate::device::copy_cstr(&mut ib.dev_name, &format!("uverbs{i}"));
                    let sys = crate::device::sysfs_root().to_string_lossy();
                    crate::device::copy_cstr(&mut ib.dev_path, &format!("{sys}/class/infiniband_verbs/uverbs{i}"));
                    crate::device::copy_cstr(&mut ib.ibdev_path, &format!("{sys}/class/infiniband/{}", spec.name));
                    (d, ib)
                })
                .collect();
            Ok(Registry { config, devices })
        })
        .as_ref()
        .map_err(|s| s.as_str())
}

impl Registry {
    pub fn device_index(&self, p: *const v::ibv_device) -> Option<usize> {
        self.devices.iter().position(|(_, ib)| std::ptr::eq(&**ib, p))
    }
}

/// The device model behind a context.
pub fn device_of(c: &Ctx) -> &'static Device {
    &registry().expect("a context exists only with a registry").devices[c.dev].0
}

pub const CTX_OFFSET: usize = std::mem::offset_of!(v::verbs_context, context);

/// # Safety
/// `c` must be a context this library created (from `ibv_open_device`).
pub unsafe fn ctx<'a>(c: *mut v::ibv_context) -> &'a Ctx {
    // SAFETY: the caller guarantees c points at Ctx.vctx.context; Ctx is repr(C) with vctx first.
    unsafe { &*(c.cast::<u8>().sub(CTX_OFFSET).cast::<Ctx>()) }
}

/// # Safety
/// `p` must point at the first field of `T` allocated by this library.
pub unsafe fn outer<'a, T, F>(p: *mut F) -> &'a T {
    // SAFETY: every wrapper is repr(C) with the rdma-core struct as first field.
    unsafe { &*(p.cast::<T>()) }
}
