//! What one intercepted call is, shared by the FFI layer and the logic: its entry point, the
//! arguments as the application passed them, what the real function answered, and the
//! [`Backend`] through which the logic reaches the real functions.

/// The intercepted entry points (shared with the retry engine and the analyzer).
pub use mrshim_verbs::Call;

/// The arguments of one call, as the application passed them — or as a retry strategy changed
/// them: the one request type of the shim and its retry engine (defined there).
pub use mrshim_retry::RegArgs;

/// What the real function answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The returned `struct ibv_mr *` (0 on failure; unused for dereg).
    pub mr: usize,
    pub lkey: u32,
    pub rkey: u32,
    /// 0 on success, else the errno (registrations) / the return value (dereg).
    pub err: i32,
    /// errno as the real function left it (restored for the caller before returning).
    pub errno_after: i32,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.err == 0
    }
}

/// The real functions, as the FFI layer reaches them.
pub trait Backend {
    /// Calls the real function once.
    fn invoke(&self, args: &RegArgs) -> Outcome;
    /// `pd->context->device->name`.
    fn device_name(&self, pd: usize) -> Option<DevName>;
    /// Memory of a loaded GPU runtime (cuPointerGetAttribute), for memory kinds and strategies.
    fn is_device_memory(&self, _addr: u64) -> bool {
        false
    }
    /// A dmabuf fd for device memory, from its runtime: (fd, offset of addr in it).
    fn export_dmabuf(&self, _addr: u64, _len: u64) -> Result<(i32, u64), String> {
        Err("no GPU runtime is loaded".into())
    }
    /// Whether [addr, addr+len) lies in a live bounce region: another registration of it goes
    /// through the same shadow (crates/bounce, `live::covers`).
    fn in_bounce_region(&self, _addr: u64, _len: u64) -> bool {
        false
    }
    /// A host shadow for the region (bounce strategy), to be registered at its `addr()`.
    fn bounce_shadow(&self, _args: &RegArgs) -> Result<Box<dyn StagedShadow>, String> {
        Err("host bounce buffers are not available here".into())
    }
    /// The attempt's MR goes to the caller: make it look like the caller's own call. `shadow`:
    /// the attempt's own, when it registered one ([`Backend::bounce_shadow`]).
    fn adopt(&self, _strategy: Strategy, _orig: &RegArgs, _attempt: &RegArgs, _mr: usize, shadow: Staged) {
        if let Some(s) = shadow {
            s.abandon();
        }
    }
    /// A failed attempt: release what export_dmabuf / bounce_shadow made for it.
    fn discard(&self, _strategy: Strategy, _attempt: &RegArgs, shadow: Staged) {
        if let Some(s) = shadow {
            s.abandon();
        }
    }
    /// Retries may call other entry points (false for the IBVERBS_1.0 ABI).
    fn can_retry(&self) -> bool {
        true
    }
}

use mrshim_retry::strategy::Strategy;

/// A host shadow a backend prepared for one bounce attempt. The retry path hands it back with
/// that attempt's outcome ([`Backend::adopt`] or [`Backend::discard`]): never found again by
/// address.
pub trait StagedShadow {
    /// Where the attempt registers (the page offset of the caller's iova).
    fn addr(&self) -> u64;
    /// The attempt's MR `mr` registered the shadow and goes to the caller.
    fn adopt(self: Box<Self>, mr: usize);
    /// The attempt failed: release the shadow.
    fn abandon(self: Box<Self>);
}

/// The shadow of the attempt at hand, if it made one.
pub type Staged = Option<Box<dyn StagedShadow>>;

/// A device name (rdma-core's `char name[IBV_SYSFS_NAME_MAX]`), copied without allocating.
#[derive(Clone, Copy)]
pub struct DevName {
    buf: [u8; 64],
    len: u8,
}

impl DevName {
    /// Up to the first NUL, at most 64 bytes, cut to valid UTF-8.
    pub fn new(bytes: &[u8]) -> DevName {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len()).min(64);
        let valid = std::str::from_utf8(&bytes[..end]).map_or_else(|e| e.valid_up_to(), str::len);
        let mut buf = [0u8; 64];
        buf[..valid].copy_from_slice(&bytes[..valid]);
        DevName { buf, len: valid as u8 }
    }
    pub fn as_str(&self) -> &str {
        // new() keeps only a valid UTF-8 prefix.
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

/// How a record relates to the application's call (all zero: it is the call).
#[derive(Debug, Default, Clone, Copy)]
pub struct Meta<'a> {
    pub attempt: u32,
    pub parent_seq: Option<u64>,
    pub strategy: Option<&'a str>,
    pub change: Option<&'a str>,
    pub injected: bool,
    pub learned: bool,
    pub refused: bool,
}
