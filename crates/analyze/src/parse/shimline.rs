//! mrshim's own stderr lines: `host:pid:tid [dev] MRSHIM WARN call(args) failed: ENAME (N)`, and the INFO
//! lines `summary: ... F failures (call ENAME xN, ...)`, `call rescued by strategy: ...`, `learned: ...`.
//! A summary with 0 failures marks a process that completed; one with failures stands for them only as far
//! as no record or WARN line of the same process already counted them (see the collector).
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Lib, RegEv, Source};
use crate::parse::shim::parse_hex;
use crate::scan::{find, rfind};
use mrshim_record::MemKind;

/// The access mask as the shim prints it (`LOCAL_WRITE|REMOTE_READ`, or hex).
fn access_bits(s: &str) -> Option<u32> {
    parse_hex(s).map(|h| h as u32).or_else(|| mrshim_access::parse(s))
}

/// The `, `-separated arguments, split once per line.
fn split_args(args: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(8);
    let mut start = 0;
    loop {
        let end = find!(&args[start..], ", ").map_or(args.len(), |i| start + i);
        out.push(&args[start..end]);
        if end == args.len() {
            return out;
        }
        start = end + 2;
    }
}

/// `key=value` among the arguments (the first that has the key).
fn arg<'a>(args: &[&'a str], key: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

pub fn parse(body: &str, ctx: &mut FileCtx, lineno: u64, emit: &mut dyn FnMut(Event)) -> bool {
    let Some(at) = find!(body, " MRSHIM ").or_else(|| body.starts_with("MRSHIM ").then_some(0)) else {
        return false;
    };
    let head = &body[..at];
    let msg = body[at..].trim_start().trim_start_matches("MRSHIM ").trim_start();
    let mut toks = head.split_whitespace();
    let (mut host, mut pid) = (None, None);
    if let Some(t) = toks.next() {
        let mut p = t.rsplitn(3, ':');
        let (_tid, pd, h) = (p.next(), p.next(), p.next());
        if let (Some(h), Some(pd)) = (h, pd.and_then(|p| p.parse::<u32>().ok())) {
            host = Some(h.to_string());
            pid = Some(pd);
        }
    }
    // `[dev]` is the GPU device, as in NCCL's lines: a rank guess only (older mrshim put the rank
    // there, which the guess covers too).
    let rank_hint = toks.next().and_then(|r| r.strip_prefix('[')?.strip_suffix(']')?.parse::<i64>().ok());
    let host = host.or_else(|| ctx.host.clone());
    if let Some(rest) = msg.strip_prefix("WARN bounce coherence violation (") {
        let kind = rest.split(')').next().unwrap_or("violation").to_string();
        emit(Event::Fact { lib: Lib::Shim, host, pid, fact: Fact::BounceViolation { kind, record: false } });
        return true;
    }
    if let Some(rest) = msg.strip_prefix("WARN ") {
        let open = rest.find('(').unwrap_or(rest.len());
        let call = rest[..open].trim().to_string();
        let close = rfind!(rest, ") failed").unwrap_or(rest.len());
        let args = rest.get(open + 1..close).unwrap_or("");
        let tail = rest.get(close..).unwrap_or("");
        let args = split_args(args);
        let access = arg(&args, "access").and_then(access_bits);
        // `mem=host-anon`, `mem=host-anon (not fully mapped)` (mrshim since the WARN line has it)
        let mapped = arg(&args, "mem").and_then(|m| {
            let host = m.starts_with("host") || m.starts_with("hugepage") || m.starts_with("file");
            host.then(|| !m.contains("not fully mapped"))
        });
        let mem = arg(&args, "mem").and_then(|m| {
            let kind = MemKind::from_name(m.split_whitespace().next()?)?;
            Some(if m.contains("not fully mapped") && kind != MemKind::Device { MemKind::Unmapped } else { kind })
        });
        emit(Event::Reg(RegEv {
            lib: Some(Lib::Shim),
            host,
            pid,
            rank_hint,
            call,
            ok: false,
            errno: errno::find(tail),
            addr: arg(&args, "addr").and_then(parse_hex),
            length: arg(&args, "len").and_then(|l| l.parse().ok()),
            access,
            mem,
            mapped,
            relaxed: access.map(|a| a & mrshim_access::RELAXED_ORDERING != 0),
            source: Source::ShimWarn,
            evid: Some((lineno, body.to_string())),
            ..Default::default()
        }));
        return true;
    }
    let Some(info) = msg.strip_prefix("INFO ") else { return true };
    if let Some(s) = info.strip_prefix("summary: ") {
        let failures = s
            .split(", ")
            .find_map(|p| {
                p.strip_suffix(" failures").or_else(|| p.split(" failures").next().filter(|_| p.contains(" failures")))
            })
            .and_then(|n| n.trim().parse::<u64>().ok());
        match failures {
            Some(0) => emit(Event::Fact { lib: Lib::Shim, host, pid, fact: Fact::Done }),
            Some(_) => {
                // "(ibv_reg_mr_iova2 EINVAL x4, ibv_reg_mr EINVAL x4)"
                let list = s.split_once(" failures (").map(|x| x.1).and_then(|x| x.split(')').next()).unwrap_or("");
                for item in list.split(", ") {
                    let mut it = item.split_whitespace();
                    let (Some(call), Some(e), Some(n)) = (it.next(), it.next(), it.next()) else { continue };
                    let n: u64 = n.trim_start_matches('x').parse().unwrap_or(0);
                    for _ in 0..n.min(100_000) {
                        emit(Event::Reg(RegEv {
                            lib: Some(Lib::Shim),
                            host: host.clone(),
                            pid,
                            rank_hint,
                            call: call.to_string(),
                            errno: errno::find(e),
                            source: Source::ShimSummary,
                            evid: Some((lineno, body.to_string())),
                            ..Default::default()
                        }));
                    }
                }
            }
            None => {}
        }
        return true;
    }
    // "ibv_reg_mr rescued by bounce: ..." (a retry that worked), "learned: ..." (not a call)
    if let Some((call, rest)) = info.split_once(" rescued by ") {
        let strategy = rest.split(':').next().unwrap_or("").trim().to_string();
        emit(Event::Reg(RegEv {
            lib: Some(Lib::Shim),
            host,
            pid,
            rank_hint,
            call: call.trim().to_string(),
            ok: true,
            strategy: Some(strategy),
            attempt: 1,
            source: Source::ShimWarn,
            ..Default::default()
        }));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(lines: &[&str]) -> Vec<RegEv> {
        let mut ctx = FileCtx::default();
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            assert!(parse(l, &mut ctx, i as u64 + 1, &mut |e| if let Event::Reg(r) = e {
                out.push(r)
            }));
        }
        out
    }

    #[test]
    fn warn_line() {
        let r = regs(&["gpu-a:4242:4243 [5] MRSHIM WARN ibv_reg_mr_iova2(addr=0x7f0000001000, len=4096, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova=0x7f0000001000) failed: EINVAL (22)"]);
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!((r.host.as_deref(), r.pid, r.rank, r.rank_hint), (Some("gpu-a"), Some(4242), None, Some(5)));
        assert_eq!(
            (r.call.as_str(), r.errno, r.length, r.addr),
            ("ibv_reg_mr_iova2", Some(22), Some(4096), Some(0x7f0000001000))
        );
        assert_eq!((r.access, r.relaxed, r.source), (Some(0x10000f), Some(true), Source::ShimWarn));
        assert_eq!(r.mem, None, "a line of an older mrshim names no memory kind");
        let kinds = regs(&[
            "n:1:1 [-] MRSHIM WARN ibv_reg_mr(addr=0x1000, len=4096, access=LOCAL_WRITE, mem=host-anon) failed: EFAULT (14)",
            "n:1:1 [0] MRSHIM WARN ibv_reg_mr(addr=0x1000, len=4096, access=LOCAL_WRITE, mem=device) failed: EFAULT (14)",
            "n:1:1 [-] MRSHIM WARN ibv_reg_mr(addr=0x1000, len=8192, access=LOCAL_WRITE, mem=host-anon (not fully mapped)) failed: EFAULT (14)",
        ]);
        let kinds: Vec<_> = kinds.iter().map(|r| (r.mem, r.length)).collect();
        assert_eq!(
            kinds,
            [
                (Some(MemKind::HostAnon), Some(4096)),
                (Some(MemKind::Device), Some(4096)),
                (Some(MemKind::Unmapped), Some(8192))
            ]
        );
    }

    #[test]
    fn summary_lines() {
        assert!(regs(&["n1:7:7 [-] MRSHIM INFO summary: 3 calls (ibv_reg_mr 3), 0 failures, 0 probes, 12288 bytes registered in total, peak 12288 bytes, 0 bytes still registered"]).is_empty());
        let r = regs(&["n1:7:7 [0] MRSHIM INFO summary: 8 calls (ibv_reg_mr 4, ibv_reg_mr_iova2 4), 8 failures (ibv_reg_mr EINVAL x4, ibv_reg_mr_iova2 EINVAL x4), 0 probes, 0 bytes registered in total, peak 0 bytes, 0 bytes still registered"]);
        assert_eq!(r.len(), 8);
        assert!(r.iter().all(|r| r.errno == Some(22) && r.source == Source::ShimSummary));
    }
}
