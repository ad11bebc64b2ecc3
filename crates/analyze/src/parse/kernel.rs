//! Kernel log lines (dmesg, journalctl -k, syslog): umem pinning failures, mlx5 command syndromes
//! (mkey/MR-cache limits), EFA registration errors, IOMMU faults, PCIe AER errors, peer-memory modules.
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use mrshim_record::MemKind;

/// Host from a syslog prefix: "Dec  2 10:00:01 nodeB kernel: ...".
fn syslog_host(line: &str) -> Option<&str> {
    let k = line.find(" kernel: ")?;
    line[..k].split_whitespace().last()
}

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    let flag = if line.contains("ib_umem_get") && line.contains("fail") || line.contains("umem get failed") {
        Flag::UmemGetFail
    } else if line.contains("limits exceeded") && (line.contains("MKEY") || line.contains("mkey")) {
        Flag::MkeyLimit
    } else if (line.contains("infiniband") || line.contains("mlx5") || line.contains("efa"))
        && (line.contains("reg mr failed") || line.contains("Failed to register mr") || line.contains("command REG_MR"))
        || line.contains("from rxe_umem_get")
    {
        Flag::KernelRegFail
    } else if line.contains("p2p_get_pages")
        && (line.contains("failed") || line.contains("Error") || line.contains("Invalid"))
        || line.contains("gdrdrv") && (line.contains("failed") || line.contains("error"))
    {
        Flag::P2pPinFail
    } else if line.contains("DMAR: DRHD: handling fault")
        || line.contains("DMAR: [DMA")
        || line.contains("IO_PAGE_FAULT")
    {
        Flag::IommuFault
    } else if line.contains("AER:") || line.contains("PCIe Bus Error") {
        Flag::PcieError
    } else if (line.contains("nvidia-peermem") || line.contains("nvidia_peermem") || line.contains("nv_peer_mem"))
        && line.contains("kernel")
    {
        if line.contains("Unknown symbol") || line.contains("failed") {
            Flag::PeermemMissing
        } else {
            Flag::PeermemLoaded
        }
    } else {
        return false;
    };
    if let Some(h) = syslog_host(line) {
        ctx.host = Some(h.to_string());
    }
    emit(Event::Fact { lib: Lib::Kernel, host: ctx.host.clone(), pid: None, fact: Fact::Flag(flag) });
    // kernel-only evidence stands for the failure it logged; the collector drops it again when the
    // user-space side of the same failures is in the input too
    let call = match flag {
        Flag::UmemGetFail => "ib_umem_get",
        Flag::MkeyLimit => "mlx5 CREATE_MKEY",
        Flag::KernelRegFail => "kernel reg_mr",
        Flag::P2pPinFail => "nvidia_p2p_get_pages",
        _ => return true,
    };
    let errno = match flag {
        Flag::MkeyLimit => Some(errno::ENOMEM),
        // "umem get failed (-131668346275144)" is a pointer, not an errno
        Flag::UmemGetFail => None,
        _ => errno::find(line),
    };
    emit(Event::Reg(RegEv {
        lib: Some(Lib::Kernel),
        host: ctx.host.clone(),
        call: call.into(),
        errno,
        mem: (flag == Flag::P2pPinFail).then_some(MemKind::Device),
        evid: Some((0, line.trim().to_string())),
        ..Default::default()
    }));
    true
}
