//! The strategies: what each changes about a failed request, and when it applies (decided from
//! the call, its arguments, the memory kind and the errno).

use crate::{Call, MemKind, Req, PAGE};
use mrshim_verbs::access;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// Clear IBV_ACCESS_RELAXED_ORDERING and the rest of the optional access range.
    DropRelaxedOrdering,
    /// Raise the soft RLIMIT_MEMLOCK to the hard limit (once per process), then retry.
    RaiseMemlock,
    /// Make the IOVA's page offset match the address' — refused: see [`Strategy::plan`].
    RealignIova,
    /// Register the dmabuf's memory through its virtual address instead.
    DmabufToVa,
    /// Register device memory through a dmabuf fd its runtime exports.
    VaToDmabuf,
    /// Register a host shadow buffer in place of the region (host bounce buffers).
    Bounce,
}

impl Strategy {
    pub const ALL: [Strategy; 6] = [
        Strategy::DropRelaxedOrdering,
        Strategy::RaiseMemlock,
        Strategy::RealignIova,
        Strategy::DmabufToVa,
        Strategy::VaToDmabuf,
        Strategy::Bounce,
    ];
    /// `MRSHIM_RETRY=auto`: cheapest and least intrusive first, the bounce buffer last.
    pub const AUTO: &'static [Strategy] = &Strategy::ALL;

    pub fn name(self) -> &'static str {
        match self {
            Strategy::DropRelaxedOrdering => "drop-relaxed-ordering",
            Strategy::RaiseMemlock => "raise-memlock",
            Strategy::RealignIova => "realign-iova",
            Strategy::DmabufToVa => "dmabuf-to-va",
            Strategy::VaToDmabuf => "va-to-dmabuf",
            Strategy::Bounce => "bounce",
        }
    }

    pub fn parse(s: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The NCCL/MCCL setting with the same effect for the whole job, for the exit summary.
    pub fn global_equivalent(self) -> &'static str {
        match self {
            Strategy::DropRelaxedOrdering => "NCCL_IB_PCI_RELAXED_ORDERING=0 (MCCL_IB_PCI_RELAXED_ORDERING=0)",
            Strategy::RaiseMemlock => {
                "ulimit -l unlimited (limits.conf memlock, docker --ulimit memlock=-1, systemd LimitMEMLOCK=infinity)"
            }
            Strategy::RealignIova => "none: register with iova equal to the address modulo the page size",
            Strategy::DmabufToVa => "NCCL_DMABUF_ENABLE=0",
            Strategy::VaToDmabuf => "NCCL_DMABUF_ENABLE=1 (needs a dmabuf-capable kernel and driver)",
            Strategy::Bounce => "NCCL_NET_GDR_LEVEL=0 (MCCL_NET_GDR_LEVEL=0): GPUDirect RDMA off for the whole job",
        }
    }
}

/// What the environment can do for a strategy (real calls in the shim, fakes in tests).
pub struct Facts {
    pub kind: MemKind,
    /// Soft and hard RLIMIT_MEMLOCK (u64::MAX = unlimited).
    pub memlock: (u64, u64),
    /// raise-memlock already ran in this process.
    pub memlock_raised: bool,
    /// A dmabuf fd can be exported for this memory (its runtime is loaded and knows it).
    pub can_export_dmabuf: bool,
}

/// A strategy's verdict for one failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Does not apply to this call, memory or errno.
    Skip,
    /// Would apply, but is not done; the reason goes into the record.
    Refused(String),
    /// Try this request. `change` says what differs, for the record.
    Try { req: Req, change: String },
    /// Needs the environment first: raise the memlock limit, export a dmabuf, build a bounce
    /// buffer; the engine asks [`crate::engine::Env`] and then tries.
    Prepare,
}

impl Strategy {
    pub fn plan(self, r: &Req, errno: i32, f: &Facts) -> Plan {
        match self {
            Strategy::DropRelaxedOrdering => {
                if r.access & access::OPTIONAL_RANGE == 0 {
                    return Plan::Skip;
                }
                let mut n = *r;
                n.access &= !access::OPTIONAL_RANGE;
                Plan::Try {
                    req: n,
                    change: format!(
                        "access {:#x} -> {:#x} (without {})",
                        r.access,
                        n.access,
                        access::describe(r.access & access::OPTIONAL_RANGE)
                    ),
                }
            }
            Strategy::RaiseMemlock => {
                let (soft, hard) = f.memlock;
                if !(errno == libc::ENOMEM || errno == libc::EPERM) || r.entry.is_dmabuf() {
                    Plan::Skip
                } else if f.memlock_raised || soft >= hard {
                    Plan::Refused(format!(
                        "soft RLIMIT_MEMLOCK is already the hard limit ({}); raise the hard limit: ulimit -l unlimited",
                        fmt_limit(hard)
                    ))
                } else {
                    Plan::Prepare
                }
            }
            Strategy::RealignIova => {
                if r.entry == Call::RegMr || r.iova % PAGE == r.addr % PAGE {
                    return Plan::Skip;
                }
                let want = r.iova - r.iova % PAGE + r.addr % PAGE;
                // Peers address this MR by IOVA with the rkey the caller hands out; a different
                // IOVA would silently move every remote access, and the caller's own SGEs too.
                Plan::Refused(format!(
                    "iova {:#x} has page offset {:#x}, addr {:#x} has {:#x}; realigning to {want:#x} would change the addresses \
                     remote peers and the caller's SGEs use with this MR, so it is not done: register with iova \u{2261} addr (mod {PAGE})",
                    r.iova, r.iova % PAGE, r.addr, r.addr % PAGE
                ))
            }
            Strategy::DmabufToVa => {
                if !r.entry.is_dmabuf() || r.is_probe() {
                    return Plan::Skip;
                }
                match f.kind {
                    MemKind::Unmapped | MemKind::Unknown => Plan::Refused(format!(
                        "the dmabuf's virtual address {:#x} is not mapped in this process",
                        r.addr
                    )),
                    _ => {
                        let n = Req {
                            entry: Call::RegMrIova2,
                            addr: r.addr,
                            length: r.length,
                            iova: r.iova,
                            access: r.access,
                            dmabuf_fd: -1,
                            dmabuf_offset: 0,
                        };
                        Plan::Try {
                            req: n,
                            change: format!(
                                "ibv_reg_dmabuf_mr(fd {}) -> ibv_reg_mr_iova2(addr {:#x})",
                                r.dmabuf_fd, r.addr
                            ),
                        }
                    }
                }
            }
            Strategy::VaToDmabuf => {
                if r.entry.is_dmabuf() || f.kind != MemKind::Device {
                    Plan::Skip
                } else if !f.can_export_dmabuf {
                    Plan::Refused("device memory, but no loaded GPU runtime can export it as a dmabuf".into())
                } else {
                    Plan::Prepare
                }
            }
            Strategy::Bounce => {
                if r.is_probe() {
                    Plan::Skip
                } else {
                    Plan::Prepare
                }
            }
        }
    }
}

pub fn fmt_limit(v: u64) -> String {
    if v == u64::MAX {
        "unlimited".into()
    } else {
        format!("{} KiB", v / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(entry: Call, access: u32) -> Req {
        Req {
            entry,
            addr: 0x7f00_0000_1000,
            length: 1 << 20,
            iova: 0x7f00_0000_1000,
            access,
            dmabuf_fd: -1,
            dmabuf_offset: 0,
        }
    }
    fn facts(kind: MemKind) -> Facts {
        Facts { kind, memlock: (64 << 10, u64::MAX), memlock_raised: false, can_export_dmabuf: false }
    }

    #[test]
    fn drop_relaxed_ordering_only_with_optional_bits() {
        let r = req(Call::RegMrIova2, 0xf | access::RELAXED_ORDERING);
        match Strategy::DropRelaxedOrdering.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon)) {
            Plan::Try { req, change } => {
                assert_eq!(req.access, 0xf);
                assert!(change.contains("RELAXED_ORDERING"), "{change}");
            }
            p => panic!("{p:?}"),
        }
        assert_eq!(
            Strategy::DropRelaxedOrdering.plan(&req(Call::RegMr, 0xf), libc::EINVAL, &facts(MemKind::HostAnon)),
            Plan::Skip
        );
    }

    #[test]
    fn raise_memlock_on_enomem_while_soft_below_hard() {
        let r = req(Call::RegMr, 0xf);
        assert_eq!(Strategy::RaiseMemlock.plan(&r, libc::ENOMEM, &facts(MemKind::HostAnon)), Plan::Prepare);
        assert_eq!(Strategy::RaiseMemlock.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon)), Plan::Skip);
        let mut f = facts(MemKind::HostAnon);
        f.memlock = (u64::MAX, u64::MAX);
        assert!(matches!(Strategy::RaiseMemlock.plan(&r, libc::ENOMEM, &f), Plan::Refused(_)));
        f = facts(MemKind::HostAnon);
        f.memlock_raised = true;
        assert!(matches!(Strategy::RaiseMemlock.plan(&r, libc::ENOMEM, &f), Plan::Refused(_)));
    }

    #[test]
    fn realign_iova_is_refused_with_the_reason() {
        let mut r = req(Call::RegMrIova2, 0xf);
        r.iova = 0x10_0010;
        match Strategy::RealignIova.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon)) {
            Plan::Refused(why) => assert!(why.contains("remote peers") && why.contains("0x100010"), "{why}"),
            p => panic!("{p:?}"),
        }
        r.iova = 0x10_0000;
        assert_eq!(
            Strategy::RealignIova.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon)),
            Plan::Skip,
            "offsets already match"
        );
    }

    #[test]
    fn path_switches() {
        let mut d = req(Call::RegDmabufMr, 0xf);
        d.dmabuf_fd = 7;
        match Strategy::DmabufToVa.plan(&d, libc::EOPNOTSUPP, &facts(MemKind::HostAnon)) {
            Plan::Try { req, .. } => assert_eq!((req.entry, req.addr, req.iova), (Call::RegMrIova2, d.addr, d.iova)),
            p => panic!("{p:?}"),
        }
        d.dmabuf_fd = -1;
        assert_eq!(
            Strategy::DmabufToVa.plan(&d, libc::EOPNOTSUPP, &facts(MemKind::HostAnon)),
            Plan::Skip,
            "probes are never rescued"
        );
        let v = req(Call::RegMr, 0xf);
        assert_eq!(Strategy::VaToDmabuf.plan(&v, libc::EINVAL, &facts(MemKind::HostAnon)), Plan::Skip);
        assert!(matches!(Strategy::VaToDmabuf.plan(&v, libc::EINVAL, &facts(MemKind::Device)), Plan::Refused(_)));
        let mut f = facts(MemKind::Device);
        f.can_export_dmabuf = true;
        assert_eq!(Strategy::VaToDmabuf.plan(&v, libc::EINVAL, &f), Plan::Prepare);
    }
}
