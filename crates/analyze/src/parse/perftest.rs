//! perftest (ib_write_bw & co.): "Couldn't allocate MR" (with "error=N" or a following "ERRNO:" line),
//! "failed to create mr" alone (the buffer could not be allocated, no registration was made),
//! GPU buffers (--use_cuda / --use_rocm), "PCIe relax order", and the result table as success.
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use crate::scan::{find, has};
use mrshim_record::MemKind;

pub fn flush(ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) {
    if let Some(ev) = ctx.perf_pending.take() {
        emit(Event::Reg(ev));
    }
}

pub fn parse(line: &str, ctx: &mut FileCtx, lineno: u64, emit: &mut dyn FnMut(Event)) -> bool {
    let t = line.trim();
    if let Some(e) = t.strip_prefix("ERRNO:") {
        if let Some(p) = ctx.perf_pending.as_mut() {
            p.errno = p.errno.or_else(|| errno::find(e));
        }
        return true;
    }
    if t == "Failed to create MR" {
        return true;
    }
    let host = ctx.host.clone();
    let mem =
        ctx.gpu_buffer.map(|_| MemKind::Device).or_else(|| ctx.device_hint.and_then(|d| d.then_some(MemKind::Device)));
    if t == "failed to create mr" {
        // create_mr (src/perftest_resources.c) prints this whenever create_single_mr fails: after its
        // own "Couldn't allocate MR" line (the registration, held above), or alone when the buffer
        // could not even be allocated (host_memory.c / cuda_memory.c print why): the MR failed
        // before any registration call, with no errno
        if ctx.perf_pending.is_none() {
            ctx.perf_pending = Some(RegEv {
                lib: Some(Lib::Perftest),
                host,
                call: "create mr".into(),
                mem,
                length: ctx.gpu_buffer,
                evid: Some((lineno, line.to_string())),
                ..Default::default()
            });
        }
        return true;
    }
    flush(ctx, emit);
    if t.starts_with("Couldn't allocate MR")
        || t.starts_with("Couldn't create MR")
        || t.starts_with("Couldn't register MR")
        || t.starts_with("Failed to register MR")
    {
        ctx.perf_pending = Some(RegEv {
            lib: Some(Lib::Perftest),
            host,
            call: if ctx.dmabuf { "ibv_reg_dmabuf_mr".into() } else { "ibv_reg_mr".into() },
            errno: errno::find(t),
            mem,
            length: ctx.gpu_buffer,
            relaxed: ctx.perf_ro,
            evid: Some((lineno, line.to_string())),
            ..Default::default()
        });
        return true;
    }
    if let Some(i) = find!(t, "cuMemAlloc() of a ").or_else(|| find!(t, "hipMalloc() of a ")) {
        let n: String = t[i + 18..].chars().take_while(|c| c.is_ascii_digit()).collect();
        ctx.gpu_buffer = Some(n.parse().unwrap_or(0));
        emit(Event::Fact { lib: Lib::Perftest, host, pid: None, fact: Fact::Flag(Flag::GpuContext) });
        return true;
    }
    if t.starts_with("initializing CUDA") || t.starts_with("initializing ROCm") {
        ctx.gpu_buffer.get_or_insert(0);
        return true;
    }
    if has!(t, "use_cuda_dmabuf") || t.starts_with("using DMA-BUF") {
        ctx.dmabuf = true;
    }
    if let Some(v) = t.strip_prefix("PCIe relax order:") {
        let on = v.trim().starts_with("ON");
        ctx.perf_ro = Some(on);
        if on {
            emit(Event::Fact { lib: Lib::Perftest, host, pid: None, fact: Fact::Flag(Flag::RoAdvertised) });
        }
        return true;
    }
    if t.starts_with("#bytes") {
        emit(Event::Fact { lib: Lib::Perftest, host, pid: None, fact: Fact::Done });
        return true;
    }
    false
}
