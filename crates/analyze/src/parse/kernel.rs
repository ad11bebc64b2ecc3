//! Kernel log lines (dmesg, journalctl -k, syslog): umem pinning failures, mlx5 command syndromes
//! (mkey/MR-cache limits), EFA registration errors, IOMMU faults, PCIe AER errors, peer-memory modules.
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use crate::scan::has;
use mrshim_record::MemKind;

/// Host from a syslog prefix: "Dec  2 10:00:01 nodeB kernel: ...".
fn syslog_host(line: &str) -> Option<&str> {
    let k = line.find(" kernel: ")?;
    line[..k].split_whitespace().last()
}

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    let flag = if has!(line, "ib_umem_get") && has!(line, "fail") || has!(line, "umem get failed") {
        Flag::UmemGetFail
    } else if has!(line, "limits exceeded") && (has!(line, "MKEY") || has!(line, "mkey")) {
        Flag::MkeyLimit
    } else if (has!(line, "infiniband") || has!(line, "mlx5") || has!(line, "efa"))
        && (has!(line, "reg mr failed") || has!(line, "Failed to register mr") || has!(line, "command REG_MR"))
        || has!(line, "from rxe_umem_get")
    {
        Flag::KernelRegFail
    } else if has!(line, "p2p_get_pages") && (has!(line, "failed") || has!(line, "Error") || has!(line, "Invalid"))
        || has!(line, "gdrdrv") && (has!(line, "failed") || has!(line, "error"))
    {
        Flag::P2pPinFail
    } else if has!(line, "DMAR: DRHD: handling fault") || has!(line, "DMAR: [DMA") || has!(line, "IO_PAGE_FAULT") {
        Flag::IommuFault
    } else if has!(line, "AER:") || has!(line, "PCIe Bus Error") {
        Flag::PcieError
    } else if (has!(line, "nvidia-peermem") || has!(line, "nvidia_peermem") || has!(line, "nv_peer_mem"))
        && has!(line, "kernel")
    {
        if has!(line, "Unknown symbol") || has!(line, "failed") {
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
