//! Turning a failing memory registration into a working one, by configuration.
//!
//! - [`policy`]: `MRSHIM_RETRY` parsed into a typed [`policy::Policy`].
//! - [`inject`]: `MRSHIM_INJECT`, failures the shim makes up so users can rehearse.
//! - [`strategy`]: what each strategy changes, and when it applies.
//! - [`engine`]: walks the strategies for one failed call, learns per memory kind.
//!
//! Everything here is plain logic over [`RegArgs`]; the shim supplies the real calls and the
//! environment (memlock limits, dmabuf export) through [`engine::Env`].

pub mod engine;
pub mod inject;
pub mod policy;
pub mod strategy;

pub use mrshim_record::MemKind;

/// The entry points, shared with the shim (mrshim_verbs::Call).
pub use mrshim_verbs::Call;

/// One registration request: what the application passed, or what a retry strategy makes of
/// it. The one request type of the shim (mrshim-core re-exports it) and of this engine: the
/// shim's records, the real call and every strategy read the same value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegArgs {
    pub call: Option<Call>,
    /// Set when the caller asked for a non-default symbol version (`IBVERBS_1.0`).
    pub symbol_version: Option<&'static str>,
    pub pd: usize,
    /// The virtual address. For `ibv_reg_dmabuf_mr` this is the `iova` argument (the VA the MR
    /// will have); the dmabuf offset is in `dmabuf_offset`. For `ibv_dereg_mr`: `mr->addr`.
    pub addr: u64,
    pub length: u64,
    /// The IOVA: the argument for iova/iova2/dmabuf; None for plain `ibv_reg_mr` (= `addr`).
    pub iova: Option<u64>,
    pub access: u32,
    /// Set exactly for `ibv_reg_dmabuf_mr`.
    pub dmabuf_fd: Option<i32>,
    pub dmabuf_offset: Option<u64>,
    /// `ibv_dereg_mr`: the MR being deregistered.
    pub mr: usize,
}

impl RegArgs {
    pub fn call(&self) -> Call {
        self.call.unwrap_or(Call::RegMr)
    }

    /// NCCL and UCX probe dmabuf support with fd -1 and read errno: never touched.
    pub fn is_probe(&self) -> bool {
        self.call().is_dmabuf() && self.dmabuf_fd.is_some_and(|fd| fd < 0)
    }

    /// The IOVA the MR gets (`addr` for plain `ibv_reg_mr`).
    pub fn iova(&self) -> u64 {
        self.iova.unwrap_or(self.addr)
    }

    /// The same request through `ibv_reg_mr_iova2` at `addr`, keeping the IOVA peers use.
    pub fn via_va(&self, addr: u64, access: u32) -> RegArgs {
        RegArgs {
            call: Some(Call::RegMrIova2),
            addr,
            iova: Some(self.iova()),
            access,
            dmabuf_fd: None,
            dmabuf_offset: None,
            ..*self
        }
    }

    /// The same request through `ibv_reg_dmabuf_mr` on `fd` at `offset`.
    pub fn via_dmabuf(&self, fd: i32, offset: u64) -> RegArgs {
        RegArgs {
            call: Some(Call::RegDmabufMr),
            iova: Some(self.iova()),
            dmabuf_fd: Some(fd),
            dmabuf_offset: Some(offset),
            ..*self
        }
    }

    /// Why the request is invalid by the verbs specification on every device (the kernel's
    /// `ib_check_mr_access` and `ib_uverbs_reg_mr` rules), or None. Such a request is never
    /// rescued: no strategy may turn it into a registration the caller did not ask for.
    pub fn spec_violation(&self) -> Option<String> {
        if let Some(why) = mrshim_verbs::access::spec_violation(self.access) {
            return Some(why);
        }
        if self.call() == Call::DeregMr || self.call() == Call::ReregMr {
            return None;
        }
        if self.length == 0 {
            return Some("length 0".into());
        }
        // The start the device translates: the dmabuf's offset, else the address.
        let start = if self.call().is_dmabuf() { self.dmabuf_offset.unwrap_or(0) } else { self.addr };
        if start.checked_add(self.length).is_none() || self.iova().checked_add(self.length).is_none() {
            return Some(format!("length {:#x} wraps the address space", self.length));
        }
        if self.iova() % PAGE != start % PAGE {
            let what = if self.call().is_dmabuf() { "the dmabuf offset" } else { "addr" };
            return Some(format!(
                "iova {:#x} has page offset {:#x}, {what} {start:#x} has {:#x} (they must be equal)",
                self.iova(),
                self.iova() % PAGE,
                start % PAGE
            ));
        }
        None
    }
}
pub const PAGE: u64 = 4096;
