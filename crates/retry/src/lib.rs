//! Turning a failing memory registration into a working one, by configuration.
//!
//! - [`policy`]: `MRSHIM_RETRY` parsed into a typed [`policy::Policy`].
//! - [`inject`]: `MRSHIM_INJECT`, failures the shim makes up so users can rehearse.
//! - [`strategy`]: what each strategy changes, and when it applies.
//! - [`engine`]: walks the strategies for one failed call, learns per memory kind.
//!
//! Everything here is plain logic over [`Req`]; the shim supplies the real calls and the
//! environment (memlock limits, dmabuf export) through [`engine::Env`].

pub mod engine;
pub mod inject;
pub mod policy;
pub mod strategy;

pub use mrshim_record::MemKind;

/// The entry points, shared with the shim (mrshim_verbs::Call).
pub use mrshim_verbs::Call;

/// One registration request: what the application asked for, or what a strategy makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    pub entry: Call,
    /// The virtual address (for dmabuf: the iova argument, the VA the MR will have).
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub access: u32,
    pub dmabuf_fd: i32,
    pub dmabuf_offset: u64,
}

impl Req {
    /// NCCL and UCX probe dmabuf support with fd -1 and read errno: never touched.
    pub fn is_probe(&self) -> bool {
        self.entry.is_dmabuf() && self.dmabuf_fd < 0
    }
}

pub const PAGE: u64 = 4096;
