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

/// The registration entry points a strategy can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Entry {
    RegMr,
    RegMrIova,
    RegMrIova2,
    RegDmabufMr,
}

impl Entry {
    pub const ALL: [Entry; 4] = [Entry::RegMr, Entry::RegMrIova, Entry::RegMrIova2, Entry::RegDmabufMr];

    pub fn name(self) -> &'static str {
        match self {
            Entry::RegMr => "ibv_reg_mr",
            Entry::RegMrIova => "ibv_reg_mr_iova",
            Entry::RegMrIova2 => "ibv_reg_mr_iova2",
            Entry::RegDmabufMr => "ibv_reg_dmabuf_mr",
        }
    }

    pub fn parse(s: &str) -> Option<Entry> {
        let s = s.strip_prefix("ibv_").unwrap_or(s);
        Entry::ALL.into_iter().find(|e| &e.name()[4..] == s)
    }

    pub fn is_dmabuf(self) -> bool {
        self == Entry::RegDmabufMr
    }
}

/// One registration request: what the application asked for, or what a strategy makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    pub entry: Entry,
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
