//! Kernel log lines (dmesg, journalctl -k, syslog): umem pinning failures, mlx5 command syndromes
//! (mkey/MR-cache limits), EFA registration errors, IOMMU faults, PCIe AER errors, peer-memory modules.
use super::FileCtx;
use crate::event::{Event, Fact, Flag, Lib};

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
    } else if (line.contains("infiniband") || line.contains("mlx5"))
        && (line.contains("reg mr failed") || line.contains("Failed to register mr"))
    {
        Flag::KernelRegFail
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
    true
}
