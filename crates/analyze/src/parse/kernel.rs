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

/// The kernel report a call trace belongs to: its header line says what happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KTrace {
    /// No report seen yet: frames pasted without their header count as a crash's.
    #[default]
    None,
    /// Oops, BUG, WARNING, a lockup or a sanitizer report: a kernel bug. `true` once its
    /// registration frame was reported (one finding per trace).
    Bug(bool),
    /// A report that is no bug (`page allocation failure`, the OOM killer): the memory ran out,
    /// its trace says only where.
    NotBug,
}

/// Headers of kernel reports that are bugs (lib/bug.c `BUG:`/`WARNING:` and `cut here`, the
/// architectures' oops/die paths, the lockup and hung-task detectors, KASAN/UBSAN, list and
/// refcount debugging).
const BUG_HEADERS: &[&str] = &[
    "------------[ cut here ]------------",
    "WARNING: CPU:",
    "WARNING: at ",
    "BUG: ",
    "kernel BUG at",
    "Oops: ",
    "Oops[",
    "Internal error: Oops",
    "general protection fault",
    "Unable to handle kernel",
    "unable to handle kernel",
    "Kernel panic",
    "soft lockup",
    "hard LOCKUP",
    "blocked for more than",
    "KASAN:",
    "UBSAN:",
    "refcount_t:",
    "list_add corruption",
    "list_del corruption",
];

/// Headers of kernel reports whose trace is no bug: an allocation that failed (mm/page_alloc.c
/// `warn_alloc`) or the OOM killer — memory ran out inside the call, the cause is the memory.
const NOT_BUG_HEADERS: &[&str] = &["page allocation failure", "invoked oom-killer", "Out of memory"];

/// Every kernel report's header, bug or not (the parser's prefilter lets their lines through).
pub const REPORT_HEADERS: [&[&str]; 2] = [BUG_HEADERS, NOT_BUG_HEADERS];

/// What a kernel report's other lines carry: a frame's offset, the release line, its end.
pub const TRACE_WORDS: [&str; 3] = ["+0x", "ainted", "end trace"];

/// Functions of the memory registration path, as call-trace frames name them (drivers/infiniband/
/// core/umem.c, umem_dmabuf.c, umem_odp.c, uverbs_cmd.c, uverbs_std_types_mr.c; each provider's
/// reg_user_mr / reg_user_mr_dmabuf: hw/mlx5/mr.c, hw/mlx4/mr.c, sw/rxe/rxe_mr.c and rxe_verbs.c,
/// sw/siw/siw_verbs.c and siw_mem.c, sw/rdmavt/mr.c, hw/efa/efa_verbs.c, hw/irdma/verbs.c,
/// hw/bnxt_re/ib_verbs.c, hw/hns/hns_roce_mr.c, hw/erdma/erdma_verbs.c, hw/qedr/verbs.c,
/// hw/mana/mr.c, hw/ocrdma, hw/vmw_pvrdma, hw/usnic; the PSM drivers' pinning: hw/qib/qib_user_pages.c,
/// hw/hfi1/user_pages.c).
fn reg_frame(f: &str) -> bool {
    f.starts_with("ib_umem_")
        || f.starts_with("ib_uverbs_reg_")
        || f.starts_with("ib_uverbs_rereg_")
        || f.starts_with("ib_uverbs_handler_UVERBS_METHOD_REG_")
        || f.starts_with("ib_uverbs_handler_UVERBS_METHOD_DM_MR_REG")
        || f.ends_with("_reg_user_mr")
        || f.ends_with("_reg_user_mr_dmabuf")
        || f.ends_with("_rereg_user_mr")
        || matches!(
            f,
            "ib_reg_user_mr"
                | "mlx5_ib_reg_dmabuf_mr"
                | "mlx5_ib_init_odp_mr"
                | "mlx5_ib_init_dmabuf_mr"
                | "rxe_mr_init_user"
                | "siw_umem_get"
                | "efa_reg_mr"
                | "usnic_ib_reg_mr"
                | "usnic_uiom_reg_get"
                | "qib_get_user_pages"
                | "hfi1_acquire_user_pages"
        )
}

/// The function of a call-trace frame on the line (`ib_umem_get+0x1a/0x300 [ib_core]`, `RIP:
/// 0010:mlx5_ib_reg_user_mr+0x6e/0x890`, arm64's `pc : ib_umem_get+0x3c/0x2d0`, `[<ffff...>]
/// rxe_mr_init_user+0x...`), without its compiler suffix (`.isra.0`, `.cold`). Unreliable frames
/// (`? foo+0x...`) are none.
fn frame_fn(line: &str) -> Option<&str> {
    let at = line.find("+0x")?;
    // the offset/size of a frame: `+0x1a/0x300`
    let rest = &line[at + 3..];
    let hex = rest.bytes().take_while(|b| b.is_ascii_hexdigit()).count();
    if hex == 0 || !rest[hex..].starts_with("/0x") {
        return None;
    }
    let head = &line[..at];
    let start = head.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).map_or(0, |i| i + 1);
    let name = &head[start..];
    if head[..start].trim_end().ends_with('?') {
        return None;
    }
    let name = name.split('.').next().unwrap_or("");
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
}

/// The kernel release a report's header prints (`CPU: 3 PID: 1 Comm: x Not tainted 5.10.0-rc1+ #2`,
/// `Tainted: G        W  OE     6.1.0-13-amd64 #1 Debian ...`; lib/dump_stack.c).
fn tainted_release(line: &str) -> Option<&str> {
    let i = line.find("Not tainted ").map(|i| i + 12).or_else(|| line.find("Tainted: ").map(|i| i + 9))?;
    line[i..].split_whitespace().find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))
}

/// Reads a kernel report: its header (what kind of report), the release it names, and the frames
/// of its call trace. A bug report whose trace runs through the registration path is a kernel bug
/// in that path ([`Flag::RegPathCrash`]), and stands for the registration it broke.
pub fn trace(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    // most lines are none of a kernel report's (the caller's `may_tell_a_regression` gate)
    if !crate::scan::any_of!(line, TRACE_WORDS)
        && !crate::scan::any_of!(line, BUG_HEADERS)
        && !crate::scan::any_of!(line, NOT_BUG_HEADERS)
    {
        return false;
    }
    let host = syslog_host(line).map(String::from).or_else(|| ctx.host.clone());
    let fact = |f: Fact, emit: &mut dyn FnMut(Event)| emit(Event::fact(Lib::Kernel, host.as_deref(), None, f));
    let mut header = false;
    if crate::scan::any_of!(line, NOT_BUG_HEADERS) {
        ctx.ktrace = KTrace::NotBug;
        header = true;
    } else if crate::scan::any_of!(line, BUG_HEADERS) {
        // one report may print several headers (`cut here`, then `WARNING: CPU:`)
        if !matches!(ctx.ktrace, KTrace::Bug(_)) {
            ctx.ktrace = KTrace::Bug(false);
        }
        header = true;
    } else if line.contains("---[ end trace") {
        ctx.ktrace = KTrace::None;
        return true;
    }
    if let Some(v) = tainted_release(line) {
        fact(Fact::Version("kernel".into(), v.trim_end_matches('+').to_string()), emit);
        return true;
    }
    let Some(f) = frame_fn(line) else { return false };
    match ctx.ktrace {
        // memory that ran out: the trace says where, the frames are no failure of their own
        KTrace::NotBug => return header,
        // the trace's further frames (the callers of the one reported)
        KTrace::Bug(true) => return true,
        _ => {}
    }
    if !reg_frame(f) {
        // a frame elsewhere (the page pinning of mm/gup.c included: io_uring, vfio and DRM pin
        // pages too): no registration of its own, left to the other readers as before
        return false;
    }
    ctx.ktrace = KTrace::Bug(true);
    fact(Fact::Flag(Flag::RegPathCrash), emit);
    emit(Event::Reg(RegEv {
        lib: Some(Lib::Kernel),
        host: host.clone(),
        call: f.to_string(),
        evid: Some((0, line.trim().to_string())),
        ..Default::default()
    }));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the trace reader emits for `lines`, read in order: `RegPathCrash <call>` per finding,
    /// `kernel <release>` per release read.
    fn read(lines: &[&str]) -> Vec<String> {
        let mut ctx = FileCtx::default();
        let mut out = Vec::new();
        for l in lines {
            trace(l, &mut ctx, &mut |e| match e {
                Event::Fact { fact: Fact::Flag(f), .. } => out.push(format!("{f:?}")),
                Event::Fact { fact: Fact::Version(k, v), .. } => out.push(format!("{k} {v}")),
                Event::Reg(r) => out.push(format!("call {}", r.call)),
                _ => {}
            });
        }
        out
    }

    /// A WARNING whose location is a driver's reg_user_mr, and an oops whose RIP is in ib_umem_get
    /// with the verbs' handler below it: one finding per trace, the frame's function as the call.
    #[test]
    fn a_crash_in_the_registration_path_is_read_once() {
        let warn = [
            "[ 1203.441122] ------------[ cut here ]------------",
            "[ 1203.441130] WARNING: CPU: 12 PID: 5521 at drivers/infiniband/hw/mlx5/mr.c:1042 mlx5_ib_reg_user_mr+0x3c1/0x5a0 [mlx5_ib]",
            "[ 1203.441190] CPU: 12 PID: 5521 Comm: all_reduce_perf Not tainted 6.8.0-rc4+ #3",
            "[ 1203.441200] Call Trace:",
            "[ 1203.441210]  ib_uverbs_reg_mr+0x15a/0x2b0 [ib_uverbs]",
            "[ 1203.441220] ---[ end trace 0000000000000000 ]---",
        ];
        assert_eq!(read(&warn), ["RegPathCrash", "call mlx5_ib_reg_user_mr", "kernel 6.8.0-rc4"]);
        let oops = [
            "Mar 3 09:12:01 gpu7 kernel: BUG: unable to handle page fault for address: ffffc90000f12000",
            "Mar 3 09:12:01 gpu7 kernel: CPU: 2 PID: 881 Comm: ib_write_bw Tainted: G           OE     5.15.0-91-generic #101-Ubuntu",
            "Mar 3 09:12:01 gpu7 kernel: RIP: 0010:rxe_mr_init_user+0x1d4/0x2f0 [rdma_rxe]",
            "Mar 3 09:12:01 gpu7 kernel: Call Trace:",
            "Mar 3 09:12:01 gpu7 kernel:  rxe_reg_user_mr+0x5b/0xa0 [rdma_rxe]",
            "Mar 3 09:12:01 gpu7 kernel:  ib_uverbs_reg_mr+0x14b/0x2a0 [ib_uverbs]",
        ];
        assert_eq!(read(&oops), ["kernel 5.15.0-91-generic", "RegPathCrash", "call rxe_mr_init_user"]);
        // arm64's oops: `pc : ` and a compiler suffix
        assert_eq!(
            read(&["Internal error: Oops: 96000005 [#1] SMP", "pc : ib_umem_dmabuf_get.part.0+0x54/0x1e0 [ib_uverbs]"]),
            ["RegPathCrash", "call ib_umem_dmabuf_get"]
        );
    }

    /// A crash elsewhere, the page pinning of another subsystem, an allocation failure whose trace
    /// passes the registration (the memory ran out), unreliable `?` frames, and a failure line
    /// naming the function without a frame are no crash in the registration path.
    #[test]
    fn a_crash_elsewhere_is_not_a_registration_bug() {
        let elsewhere = [
            "[  77.1] BUG: kernel NULL pointer dereference, address: 0000000000000010",
            "[  77.1] RIP: 0010:ext4_da_write_begin+0x1c2/0x4a0",
            "[  77.1] Call Trace:",
            "[  77.1]  pin_user_pages_fast+0x2a/0x40",
            "[  77.1]  io_sqe_buffer_register+0x160/0x640",
        ];
        assert!(!read(&elsewhere).iter().any(|f| f == "RegPathCrash"), "{:?}", read(&elsewhere));
        let alloc = [
            "[ 912.3] ib_write_bw: page allocation failure: order:10, mode:0x40dc0(GFP_KERNEL|__GFP_COMP|__GFP_ZERO)",
            "[ 912.3] Call Trace:",
            "[ 912.3]  mlx4_ib_reg_user_mr+0x9d/0x2c0 [mlx4_ib]",
        ];
        assert!(read(&alloc).is_empty(), "{:?}", read(&alloc));
        assert!(read(&["WARNING: CPU: 1 PID: 3 at x.c:1 foo+0x1/0x2", " ? ib_umem_get+0x1a/0x300"]).is_empty());
        assert!(read(&["mlx5_ib: ib_umem_get failed: -14", "ibv_reg_mr failed, rc=-22"]).is_empty());
    }
}
