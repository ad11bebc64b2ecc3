//! UCX: `[ts] [host:pid:tid] file.c:line UCX LEVEL message`. A failed `ibv_reg_mr(address=, length=,
//! access=)` is usually followed by `failed to register address ... mem_type bit 0x2` (or `(cuda)`), which
//! tells host from GPU memory; the failure is held back one line to pick that up.
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Lib, RegEv};
use crate::parse::shim::parse_hex;
use crate::scan::{find, has};
use mrshim_record::MemKind;

pub(super) fn header(line: &str) -> Option<(Option<f64>, &str, u32, &str)> {
    let ucx = find!(line, " UCX ")?;
    let head = &line[..ucx];
    let rest = line[ucx + 5..].trim_start();
    let (_level, msg) = rest.split_once(' ')?;
    let mut ts = None;
    let mut hp = None;
    for part in head.split('[').skip(1) {
        let inner = part.split(']').next().unwrap_or("");
        if ts.is_none() && hp.is_none() {
            if let Ok(t) = inner.trim().parse::<f64>() {
                ts = Some(t);
                continue;
            }
        }
        let mut it = inner.rsplitn(3, ':');
        let (_tid, pid, host) = (it.next(), it.next(), it.next());
        // UCX pads the pid: "[std1707:2850 :0]"
        if let (Some(h), Some(p)) = (host, pid.and_then(|p| p.trim().parse::<u32>().ok())) {
            hp = Some((h, p));
            break;
        }
    }
    let (h, p) = hp?;
    Some((ts, h, p, msg.trim_start()))
}

/// `arg!(m, "key=")`: the value after the key (a searcher built once per key).
macro_rules! arg {
    ($m:expr, $key:literal) => {
        find!($m, $key).and_then(|i| arg_at($m, i + $key.len()))
    };
}

/// UCX prints `call(key=value, key=value)`: a value is closed by `,` or `)`. One ended by a space
/// or by the end of the line was cut by another process's output on the same terminal
/// (`address=0        ib_log.c:254 ...`): it is not the value, so it is no value.
fn arg_at(m: &str, i: usize) -> Option<&str> {
    let end = m[i..].find([',', ')', ' '])?;
    matches!(m.as_bytes()[i + end], b',' | b')').then(|| &m[i..i + end])
}

fn num(s: &str) -> Option<u64> {
    parse_hex(s).or_else(|| s.parse().ok())
}

pub fn flush(ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) {
    if let Some(ev) = ctx.ucx_pending.take() {
        emit(Event::Reg(ev));
    }
}

pub fn parse(line: &str, ctx: &mut FileCtx, lineno: u64, emit: &mut dyn FnMut(Event)) -> bool {
    let Some((ts, host, pid, m)) = header(line) else {
        return false;
    };
    if ctx.host.as_deref() != Some(host) {
        ctx.host = Some(host.to_string());
    }
    if let Some(rest) = m.strip_prefix("failed to register address") {
        // matched to its failure by address, not by adjacency (DEBUG lines may come in between)
        let addr = rest.split_whitespace().next().and_then(parse_hex);
        let same = ctx.ucx_pending.as_ref().is_some_and(|p| p.addr.is_none() || addr.is_none() || p.addr == addr);
        if let Some(ev) = ctx.ucx_pending.as_mut().filter(|_| same) {
            let cuda = m.contains("mem_type bit 0x2")
                || m.contains("mem_type bit 0x4")
                || m.contains("(cuda")
                || m.contains("mem_type bit 0x8")
                || m.contains("(rocm");
            let host_mem = m.contains("mem_type bit 0x1 ") || m.contains("(host)");
            if cuda {
                ev.mem = Some(MemKind::Device);
            } else if host_mem && ev.mem.is_none() {
                ev.mem = Some(MemKind::HostAnon);
            }
        }
        flush(ctx, emit);
        return true;
    }
    // ucs_mpool_grow (ucs/datastruct/mpool.c) after a failed chunk registration: a transport's
    // pool (uct_iface_mp_chunk_alloc -> uct_iface_mem_alloc, UCS_MEMORY_TYPE_HOST: receive and send
    // descriptors) is host memory, whatever library runs UCX; UCP's `ucp_rndv_frags` pool is
    // allocated per memory type (GPU memory too) and says nothing
    if let Some(rest) = m.strip_prefix("Failed to allocate memory pool (name=") {
        let name = rest.split(')').next().unwrap_or("");
        // another process's pool line leaves this process's failure waiting for its own lines
        if let Some(ev) = ctx.ucx_pending.as_mut().filter(|p| p.pid == Some(pid)) {
            if ev.mem.is_none() && name != "ucp_rndv_frags" && !name.is_empty() {
                ev.mem = Some(MemKind::HostAnon);
            }
            flush(ctx, emit);
        }
        return true;
    }
    let time_ns = ts.map(|t| (t * 1e9) as u64);
    if let Some(open) = find!(m, "reg_mr(").or_else(|| find!(m, "reg_dmabuf_mr(")) {
        let call_start = m[..open].rfind(|c: char| c.is_whitespace()).map(|i| i + 1).unwrap_or(0);
        let call = &m[call_start..m[open..].find('(').map(|i| open + i).unwrap_or(open)];
        let failed = has!(m, ") failed");
        let ev = RegEv {
            lib: Some(Lib::Ucx),
            host: Some(host.to_string()),
            pid: Some(pid),
            call: call.to_string(),
            ok: !failed,
            errno: if failed { errno::find(&m[find!(m, ") failed").unwrap_or(0)..]) } else { None },
            addr: arg!(m, "address=").and_then(num),
            length: arg!(m, "length=").and_then(num),
            access: arg!(m, "access=").and_then(num).map(|a| a as u32),
            time_ns,
            evid: Some((lineno, line.to_string())),
            ..Default::default()
        };
        if failed {
            flush(ctx, emit);
            ctx.ucx_pending = Some(ev);
        }
        return true;
    }
    // DEBUG: "registered memory 0x7f..0x7f.. on mlx5_0 lkey ..."
    if let Some(r) = m.strip_prefix("registered memory ") {
        let range = r.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = range.split_once("..") {
            let (a, b) = (parse_hex(a), parse_hex(b));
            emit(Event::Reg(RegEv {
                lib: Some(Lib::Ucx),
                host: Some(host.to_string()),
                pid: Some(pid),
                call: "ibv_reg_mr".into(),
                ok: true,
                addr: a,
                length: match (a, b) {
                    (Some(a), Some(b)) if b > a => Some(b - a),
                    _ => None,
                },
                time_ns,
                ..Default::default()
            }));
        }
    }
    // UCP's INFO banner at ucp_init: the UCX version in use (read by facts.rs)
    if let Some(v) = super::facts::ucx_banner(m) {
        emit(Event::Fact {
            lib: Lib::Ucx,
            host: Some(host.to_string()),
            pid: Some(pid),
            fact: Fact::Version("UCX".into(), v),
        });
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn reg_failure_with_mem_type() {
        let mut ctx = FileCtx::default();
        let mut out = Vec::new();
        let l1 = "[1647516906.396315] [node-rtx3080:82049:0]           ib_md.c:349  UCX  ERROR ibv_reg_mr(address=0x7f724fa00000, length=4096, access=0xf) failed: Bad address";
        let l2 = "[1647516906.396356] [node-rtx3080:82049:0]          ucp_mm.c:164  UCX  ERROR failed to register address 0x7f724fa00000 mem_type bit 0x2 length 4096 on md[5]=mlx5_0: Input/output error (md reg_mem_types 0x3)";
        assert!(parse(l1, &mut ctx, 1, &mut |e| out.push(e)));
        assert!(out.is_empty());
        parse(l2, &mut ctx, 2, &mut |e| out.push(e));
        let Event::Reg(r) = &out[0] else { panic!() };
        assert_eq!((r.errno, r.length, r.access, r.mem), (Some(14), Some(4096), Some(0xf), Some(MemKind::Device)));
        assert_eq!(r.host.as_deref(), Some("node-rtx3080"));
    }

    /// UCT's interface pools are host memory (uct_iface_mem_alloc); UCP's fragment pool is
    /// allocated per memory type, and another process's pool says nothing of this failure.
    #[test]
    fn a_transport_pool_chunk_is_host_memory() {
        let fail = "[1796615160.496586] [vm:20811:0]           ib_md.c:323  UCX  ERROR ibv_reg_mr(address=0x7f76a4400000, length=39845888, access=0x10000f) failed: Invalid argument";
        let pool = |name: &str, pid: u32| {
            format!("[1796615160.496769] [vm:{pid}:0]           mpool.c:246  UCX  ERROR Failed to allocate memory pool (name={name}) chunk: Input/output error")
        };
        for (name, pid, mem) in [
            ("rc_recv_desc", 20811, Some(MemKind::HostAnon)),
            ("ud_recv_skb", 20811, Some(MemKind::HostAnon)),
            ("ucp_rndv_frags", 20811, None),
            ("rc_recv_desc", 20812, None),
        ] {
            let (mut ctx, mut out) = (FileCtx::default(), Vec::new());
            parse(fail, &mut ctx, 1, &mut |e| out.push(e));
            parse(&pool(name, pid), &mut ctx, 2, &mut |e| out.push(e));
            flush(&mut ctx, &mut |e| out.push(e));
            let Event::Reg(r) = &out[0] else { panic!() };
            assert_eq!((r.mem, r.access, r.errno), (mem, Some(0x10000f), Some(22)), "{name} in {pid}");
        }
    }

    #[test]
    fn a_value_cut_by_another_line_is_no_value() {
        // two ranks on one terminal: the first line stops mid-argument and the second follows it
        let cut = "[1796576660.903854] [vm:4875 :0]          ib_log.c:254  UCX  ERROR ibv_reg_mr(address=0        ib_log.c:254  UCX  ERROR ibv_reg_mr(address=0x7fbe52a00000, length=20971520, access=0x10000f) failed: Bad address";
        assert_eq!(arg!(cut, "address="), None, "a cut address is not address 0");
        assert_eq!(arg_at("length=2097152", 7), None, "a value at the end of the line is cut");
        assert_eq!(arg_at("access=0x10000f)", 7), Some("0x10000f"));
        assert_eq!(arg_at("length=16, access", 7), Some("16"));
    }
}
