//! The strategies: what each changes about a failed request, and when it applies (decided from
//! the call, its arguments, the memory kind and the errno).

use crate::policy::Policy;
use crate::{Call, MemKind, RegArgs, PAGE};
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

    /// Sticky learning may apply it before the caller's own call: it changes how the same
    /// memory is registered, at no cost to a registration that would have worked (docs/retry.md).
    /// Bounce (a shadow and copies) and raise-memlock (a process limit) only ever follow a
    /// failure of the caller's own call.
    pub fn up_front(self) -> bool {
        matches!(self, Strategy::DropRelaxedOrdering | Strategy::DmabufToVa | Strategy::VaToDmabuf)
    }

    /// The setting with the same effect for the whole job (NCCL's, and where the stack has its own,
    /// its own), for the exit summary.
    pub fn global_equivalent(self) -> &'static str {
        match self {
            Strategy::DropRelaxedOrdering => {
                "NCCL_IB_PCI_RELAXED_ORDERING=0 (MCCL_IB_PCI_RELAXED_ORDERING=0; UCX: UCX_IB_PCI_RELAXED_ORDERING=off; \
                 Mooncake: MC_IB_PCI_RELAXED_ORDERING=0)"
            }
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
    Try { req: RegArgs, change: String },
    /// Needs the environment first: raise the memlock limit, export a dmabuf, build a bounce
    /// buffer; the engine asks [`crate::engine::Env`] and then tries.
    Prepare,
}

impl Strategy {
    pub fn plan(self, r: &RegArgs, errno: i32, f: &Facts, p: &Policy) -> Plan {
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
                if !(errno == libc::ENOMEM || errno == libc::EPERM) || r.call().is_dmabuf() {
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
                let iova = r.iova();
                if r.call() == Call::RegMr || iova % PAGE == r.addr % PAGE {
                    return Plan::Skip;
                }
                let want = iova - iova % PAGE + r.addr % PAGE;
                // Peers address this MR by IOVA with the rkey the caller hands out; a different
                // IOVA would silently move every remote access, and the caller's own SGEs too.
                Plan::Refused(format!(
                    "iova {:#x} has page offset {:#x}, addr {:#x} has {:#x}; realigning to {want:#x} would change the addresses \
                     remote peers and the caller's SGEs use with this MR, so it is not done: register with iova \u{2261} addr (mod {PAGE})",
                    iova, iova % PAGE, r.addr, r.addr % PAGE
                ))
            }
            Strategy::DmabufToVa => {
                if !r.call().is_dmabuf() || r.is_probe() {
                    return Plan::Skip;
                }
                match f.kind {
                    MemKind::Unmapped | MemKind::Unknown => Plan::Refused(format!(
                        "the dmabuf's virtual address {:#x} is not mapped in this process",
                        r.addr
                    )),
                    _ => Plan::Try {
                        req: r.via_va(r.addr, r.access),
                        change: format!(
                            "ibv_reg_dmabuf_mr(fd {}) -> ibv_reg_mr_iova2(addr {:#x})",
                            r.dmabuf_fd.unwrap_or(-1),
                            r.addr
                        ),
                    },
                }
            }
            Strategy::VaToDmabuf => {
                if r.call().is_dmabuf() || f.kind != MemKind::Device {
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
                } else if let Some(why) = outside_bounce_contract(r.access, f.kind, p.bounce_remote) {
                    Plan::Refused(why)
                } else {
                    Plan::Prepare
                }
            }
        }
    }

    /// va-to-dmabuf, once the runtime exported the memory as `fd` (the address at `offset`).
    pub fn dmabuf_request(r: &RegArgs, fd: i32, offset: u64) -> (RegArgs, String) {
        (
            r.via_dmabuf(fd, offset),
            format!(
                "{}(addr {:#x}) -> ibv_reg_dmabuf_mr(fd {fd}, offset {offset:#x}) exported by the GPU runtime",
                r.call().name(),
                r.addr
            ),
        )
    }

    /// bounce, once a host shadow exists at `shadow` (same page offset as the caller's iova):
    /// registered with the caller's iova, so its SGE addresses and the rkey it hands to peers
    /// keep working. A peer's atomic on the shadow would not be atomic with the application's
    /// own accesses to its buffer, nor reach it before a later completion: the shadow is
    /// registered without REMOTE_ATOMIC, so such an atomic fails at the peer with a remote
    /// access error instead of silently losing an update (docs/bounce.md).
    pub fn bounce_request(r: &RegArgs, shadow: u64) -> (RegArgs, String) {
        let atomic = r.access & access::REMOTE_ATOMIC;
        let n = r.via_va(shadow, r.access & !access::OPTIONAL_RANGE & !atomic);
        let change = format!(
            "host shadow at {shadow:#x} registered with iova {:#x} in place of {:#x} ({} bytes){}",
            r.iova(),
            r.addr,
            r.length,
            if atomic != 0 { ", without REMOTE_ATOMIC (peers' atomics are refused on bounce regions)" } else { "" }
        );
        (n, change)
    }

    /// What the MR handed to the caller must show instead of what the attempt registered: its
    /// `addr` (and the dmabuf fd the shim exported, closed at deregistration). None: as
    /// registered (bounce regions are fixed up by their shadow, docs/bounce.md).
    pub fn shown(self, orig: &RegArgs, attempt: &RegArgs) -> Option<(u64, Option<i32>)> {
        match self {
            Strategy::VaToDmabuf => Some((orig.addr, attempt.dmabuf_fd)),
            // rdma-core's dmabuf MRs carry the offset in addr.
            Strategy::DmabufToVa => Some((orig.dmabuf_offset.unwrap_or(0), None)),
            _ => None,
        }
    }
}

/// `MRSHIM_BOUNCE_REMOTE`: may bounce regions that peers can access one-sided (docs/bounce.md,
/// "The contract").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BounceRemote {
    /// Only regions without peer access are bounced (the default: safe for any client).
    #[default]
    Refuse,
    /// The user declares that every peer's one-sided access to this process's memory is
    /// announced by a completion it polls or a message it posts (NCCL, MPI).
    Announced,
}

impl BounceRemote {
    pub const HELP: &'static str = "refuse (default: regions peers can write or read one-sided are not bounced), \
announced (every peer's RDMA WRITE/READ of this process's memory is announced by a completion it polls or a message it \
posts: NCCL/RCCL/MCCL, MPI)";

    pub fn parse(v: &str) -> Option<BounceRemote> {
        match v.trim().to_ascii_lowercase().as_str() {
            "refuse" => Some(BounceRemote::Refuse),
            "announced" => Some(BounceRemote::Announced),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BounceRemote::Refuse => "refuse",
            BounceRemote::Announced => "announced",
        }
    }
}

/// Access bits through which peers reach a region with no verb of this process: RDMA WRITE and
/// READ, and memory windows bound over it. (REMOTE_ATOMIC is not registered on a shadow.)
pub const PEER_ACCESS: u32 = access::REMOTE_WRITE | access::REMOTE_READ | access::MW_BIND;

/// The words every contract refusal starts with (the record schema's; analyze recognises them).
pub use mrshim_record::REFUSED_OUTSIDE_BOUNCE_CONTRACT as OUTSIDE_CONTRACT;

/// Why a region with this access may not be bounced, or None. Registration is the last moment
/// the shim can decide (the rkey goes to peers right after), and it sees the access flags only:
/// a region peers can write or read one-sided is bounced only when the user declares the
/// accesses announced (docs/bounce.md, "The contract").
pub fn outside_bounce_contract(acc: u32, kind: MemKind, setting: BounceRemote) -> Option<String> {
    let peer = acc & PEER_ACCESS;
    if peer == 0 || setting == BounceRemote::Announced {
        return None;
    }
    let fix = if kind == MemKind::Device {
        "register it through dmabuf or GPU peer memory (nvidia_peermem, amdgpu peer memory), or stage GPU buffers \
         through host memory for the job (NCCL_NET_GDR_LEVEL=0, UCX_TLS without rc, FI_HMEM_DISABLE_P2P=1)"
    } else {
        "fix what the device refused (the failure line above: relaxed ordering NCCL_IB_PCI_RELAXED_ORDERING=0, \
         UCX_IB_PCI_RELAXED_ORDERING=off or Mooncake's MC_IB_PCI_RELAXED_ORDERING=0, memlock ulimit -l), or keep \
         this memory off RDMA for the job (UCX_TLS without rc, FI_PROVIDER=tcp, NCCL_IB_DISABLE=1)"
    };
    Some(format!(
        "{OUTSIDE_CONTRACT}: access {} lets peers write or read this memory with no verb of this process, and a host \
         shadow is coherent for that only when a completion this process polls or a message it posts announces each \
         access; nothing shows this client does (a passive target, as a KV-cache transfer engine's, would serve stale \
         bytes). Fix: {fix}; if every peer access of this job is announced (NCCL/RCCL/MCCL, MPI), \
         MRSHIM_BOUNCE_REMOTE=announced",
        access::describe(peer)
    ))
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

    fn req(entry: Call, access: u32) -> RegArgs {
        let dmabuf = entry.is_dmabuf();
        RegArgs {
            call: Some(entry),
            addr: 0x7f00_0000_1000,
            length: 1 << 20,
            iova: Some(0x7f00_0000_1000),
            access,
            dmabuf_fd: dmabuf.then_some(-1),
            dmabuf_offset: dmabuf.then_some(0),
            ..Default::default()
        }
    }
    fn policy() -> Policy {
        Policy::default()
    }
    fn facts(kind: MemKind) -> Facts {
        Facts { kind, memlock: (64 << 10, u64::MAX), memlock_raised: false, can_export_dmabuf: false }
    }

    #[test]
    fn drop_relaxed_ordering_only_with_optional_bits() {
        let r = req(Call::RegMrIova2, 0xf | access::RELAXED_ORDERING);
        match Strategy::DropRelaxedOrdering.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon), &policy()) {
            Plan::Try { req, change } => {
                assert_eq!(req.access, 0xf);
                assert!(change.contains("RELAXED_ORDERING"), "{change}");
            }
            p => panic!("{p:?}"),
        }
        assert_eq!(
            Strategy::DropRelaxedOrdering.plan(
                &req(Call::RegMr, 0xf),
                libc::EINVAL,
                &facts(MemKind::HostAnon),
                &policy()
            ),
            Plan::Skip
        );
    }

    #[test]
    fn raise_memlock_on_enomem_while_soft_below_hard() {
        let r = req(Call::RegMr, 0xf);
        assert_eq!(Strategy::RaiseMemlock.plan(&r, libc::ENOMEM, &facts(MemKind::HostAnon), &policy()), Plan::Prepare);
        assert_eq!(Strategy::RaiseMemlock.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon), &policy()), Plan::Skip);
        let mut f = facts(MemKind::HostAnon);
        f.memlock = (u64::MAX, u64::MAX);
        assert!(matches!(Strategy::RaiseMemlock.plan(&r, libc::ENOMEM, &f, &policy()), Plan::Refused(_)));
        f = facts(MemKind::HostAnon);
        f.memlock_raised = true;
        assert!(matches!(Strategy::RaiseMemlock.plan(&r, libc::ENOMEM, &f, &policy()), Plan::Refused(_)));
    }

    #[test]
    fn realign_iova_is_refused_with_the_reason() {
        let mut r = req(Call::RegMrIova2, 0xf);
        r.iova = Some(0x10_0010);
        match Strategy::RealignIova.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon), &policy()) {
            Plan::Refused(why) => assert!(why.contains("remote peers") && why.contains("0x100010"), "{why}"),
            p => panic!("{p:?}"),
        }
        r.iova = Some(0x10_0000);
        assert_eq!(
            Strategy::RealignIova.plan(&r, libc::EINVAL, &facts(MemKind::HostAnon), &policy()),
            Plan::Skip,
            "offsets already match"
        );
    }

    #[test]
    fn path_switches() {
        let mut d = req(Call::RegDmabufMr, 0xf);
        d.dmabuf_fd = Some(7);
        match Strategy::DmabufToVa.plan(&d, libc::EOPNOTSUPP, &facts(MemKind::HostAnon), &policy()) {
            Plan::Try { req, .. } => assert_eq!((req.call(), req.addr, req.iova), (Call::RegMrIova2, d.addr, d.iova)),
            p => panic!("{p:?}"),
        }
        d.dmabuf_fd = Some(-1);
        assert_eq!(
            Strategy::DmabufToVa.plan(&d, libc::EOPNOTSUPP, &facts(MemKind::HostAnon), &policy()),
            Plan::Skip,
            "probes are never rescued"
        );
        let v = req(Call::RegMr, 0xf);
        assert_eq!(Strategy::VaToDmabuf.plan(&v, libc::EINVAL, &facts(MemKind::HostAnon), &policy()), Plan::Skip);
        assert!(matches!(
            Strategy::VaToDmabuf.plan(&v, libc::EINVAL, &facts(MemKind::Device), &policy()),
            Plan::Refused(_)
        ));
        let mut f = facts(MemKind::Device);
        f.can_export_dmabuf = true;
        assert_eq!(Strategy::VaToDmabuf.plan(&v, libc::EINVAL, &f, &policy()), Plan::Prepare);
    }

    #[test]
    fn bounce_takes_regions_peers_cannot_reach_unless_announced() {
        let host = facts(MemKind::HostAnon);
        let local = req(Call::RegMr, access::LOCAL_WRITE | access::RELAXED_ORDERING);
        assert_eq!(Strategy::Bounce.plan(&local, libc::EFAULT, &host, &policy()), Plan::Prepare, "local SGEs only");
        let atomic_only = req(Call::RegMr, access::LOCAL_WRITE | access::REMOTE_ATOMIC);
        assert_eq!(Strategy::Bounce.plan(&atomic_only, libc::EFAULT, &host, &policy()), Plan::Prepare);
        for peer in [access::REMOTE_WRITE, access::REMOTE_READ, access::MW_BIND, 0xf] {
            let r = req(Call::RegMr, access::LOCAL_WRITE | peer);
            match Strategy::Bounce.plan(&r, libc::EFAULT, &host, &policy()) {
                Plan::Refused(why) => {
                    assert!(
                        why.starts_with(OUTSIDE_CONTRACT) && why.contains("MRSHIM_BOUNCE_REMOTE=announced"),
                        "{why}"
                    );
                    assert!(why.contains("RELAXED_ORDERING=0"), "host memory: the host fixes: {why}");
                }
                p => panic!("{}: {p:?}", access::describe(peer)),
            }
            match Strategy::Bounce.plan(&r, libc::EINVAL, &facts(MemKind::Device), &policy()) {
                Plan::Refused(why) => {
                    assert!(why.contains("nvidia_peermem") && why.contains("NCCL_NET_GDR_LEVEL=0"), "{why}")
                }
                p => panic!("{p:?}"),
            }
            let announced = Policy { bounce_remote: BounceRemote::Announced, ..policy() };
            assert_eq!(Strategy::Bounce.plan(&r, libc::EFAULT, &host, &announced), Plan::Prepare);
        }
        assert_eq!(BounceRemote::parse(" Announced "), Some(BounceRemote::Announced));
        assert_eq!(BounceRemote::parse("on"), None);
    }

    #[test]
    fn rewritten_requests_keep_the_iova_peers_use() {
        let r = req(Call::RegMr, 0xf | access::RELAXED_ORDERING);
        let (b, change) = Strategy::bounce_request(&r, 0x5000_1000);
        assert_eq!((b.call(), b.addr, b.iova, b.access), (Call::RegMrIova2, 0x5000_1000, Some(r.addr), 0x7));
        assert!(change.contains("without REMOTE_ATOMIC"), "{change}");
        let (d, _) = Strategy::dmabuf_request(&r, 9, 0x1000);
        assert_eq!(
            (d.call(), d.dmabuf_fd, d.dmabuf_offset, d.iova),
            (Call::RegDmabufMr, Some(9), Some(0x1000), Some(r.addr))
        );
        assert_eq!(Strategy::VaToDmabuf.shown(&r, &d), Some((r.addr, Some(9))));
        assert_eq!(Strategy::Bounce.shown(&r, &b), None);
    }
}
