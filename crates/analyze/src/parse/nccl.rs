//! NCCL and its ports (RCCL keeps the `NCCL` tag, MCCL prints `MCCL`), any NCCL_DEBUG level:
//! `host:pid:tid [dev] [file.cc:line] NCCL LEVEL message`, plus the bare `NCCL version ...` banner.
use super::{is_reg_call, FileCtx};
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};

pub struct Prefix<'a> {
    pub host: Option<&'a str>,
    pub pid: Option<u32>,
    pub dev: Option<i64>,
    pub lib: Lib,
    pub msg: &'a str,
}

/// Position of the first `NCCL `/`MCCL `/`RCCL ` tag at the start of the line or after a space.
fn tag_at(line: &str) -> Option<(usize, Lib)> {
    static CCL: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new("CCL "));
    let b = line.as_bytes();
    let mut from = 0;
    while let Some(i) = CCL.find(&b[from..]) {
        let at = from + i;
        if at >= 1 && (at == 1 || b[at - 2] == b' ') {
            let lib = match b[at - 1] {
                b'N' => Some(Lib::Nccl),
                b'M' => Some(Lib::Mccl),
                b'R' => Some(Lib::Rccl),
                _ => None,
            };
            if let Some(lib) = lib {
                return Some((at - 1, lib));
            }
        }
        from = at + 4;
    }
    None
}

/// Messages worth a closer look; everything else (rings, channels, tuning) is skipped after one scan.
static INTERESTING: std::sync::LazyLock<aho_corasick::AhoCorasick> = std::sync::LazyLock::new(|| {
    aho_corasick::AhoCorasick::builder()
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .build([
            "Call to ",
            " set by environment to ",
            "GPU Direct RDMA",
            "[RO]",
            " nranks ",
            "Init COMPLETE",
            "version ",
            "ibv_",
            "register memory",
            "register MR",
            "cuMem",
        ])
        .expect("static patterns")
});

pub fn split(line: &str) -> Option<Prefix<'_>> {
    let (at, lib) = tag_at(line)?;
    let rest = &line[at + 5..];
    let (level, msg) = rest.split_once(' ').unwrap_or((rest, ""));
    if !matches!(level, "INFO" | "WARN" | "ERROR" | "TRACE" | "ABORT" | "version") {
        return None;
    }
    let msg = if level == "version" { rest } else { msg.trim_start() };
    let head = &line[..at];
    let mut toks = head.split_whitespace();
    let (mut host, mut pid, mut dev) = (None, None, None);
    if let Some(t) = toks.next() {
        let mut parts = t.rsplitn(3, ':');
        let (_tid, p, h) = (parts.next(), parts.next(), parts.next());
        if let (Some(h), Some(p)) = (h, p) {
            if let Ok(p) = p.parse::<u32>() {
                host = Some(h);
                pid = Some(p);
            }
        }
    }
    if let Some(t) = toks.next() {
        dev = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')).and_then(|t| t.parse().ok());
    }
    if host.is_none() && at != 0 {
        return None;
    }
    Some(Prefix { host, pid, dev, lib, msg })
}

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    match split(line) {
        Some(p) => parse_split(line, p, ctx, emit),
        None => false,
    }
}

pub fn parse_split(line: &str, p: Prefix<'_>, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    if !INTERESTING.is_match(p.msg) {
        if let Some(h) = p.host {
            if ctx.host.as_deref() != Some(h) {
                ctx.host = Some(h.to_string());
            }
        }
        return true;
    }
    // RCCL prints the NCCL tag; its banner tells them apart
    let lib = if p.lib == Lib::Nccl { ctx.flavor.unwrap_or(Lib::Nccl) } else { p.lib };
    if let Some(h) = p.host {
        if ctx.host.as_deref() != Some(h) {
            ctx.host = Some(h.to_string());
        }
    }
    let host = p.host.map(String::from).or_else(|| ctx.host.clone());
    let fact = |f: Fact| Event::Fact { lib, host: host.clone(), pid: p.pid, fact: f };
    let m = p.msg;
    if let Some(v) = m
        .strip_prefix("version ")
        .or_else(|| m.strip_prefix("NCCL version "))
        .or_else(|| m.strip_prefix("RCCL version "))
        .or_else(|| m.strip_prefix("MCCL version "))
    {
        let ver = v.split_whitespace().next().unwrap_or("").to_string();
        let banner = if line.contains("RCCL version") {
            Lib::Rccl
        } else if line.contains("MCCL version") {
            Lib::Mccl
        } else {
            lib
        };
        if banner != Lib::Nccl {
            ctx.flavor = Some(banner);
        }
        emit(Event::Fact {
            lib: banner,
            host: host.clone(),
            pid: p.pid,
            fact: Fact::Version(banner.name().into(), ver),
        });
        return true;
    }
    if let Some(call_at) = m.find("Call to ") {
        let rest = &m[call_at + 8..];
        let call = rest.split_whitespace().next().unwrap_or("");
        if is_reg_call(call) {
            let err = errno::find(rest);
            // ibv_reg_dmabuf_mr, and mlx5dv_reg_dmabuf_mr over a Data Direct NIC
            let dmabuf = call.ends_with("reg_dmabuf_mr");
            if dmabuf && errno::not_supported(err) {
                emit(fact(Fact::Flag(Flag::DmabufUnsupported)));
            }
            let ev = RegEv {
                lib: Some(lib),
                host: host.clone(),
                pid: p.pid,
                rank_hint: p.dev,
                call: call.to_string(),
                ok: false,
                errno: err,
                mem: dmabuf.then_some(mrshim_record::MemKind::Device),
                ..Default::default()
            };
            if err.is_none() {
                // a hard-wrapped line: the error text may be on the next line
                ctx.gen_pending = Some(ev);
                ctx.gen_layers.clear();
            } else {
                emit(Event::Reg(ev));
            }
        }
        return true;
    }
    if let Some(i) = m.find(" set by environment to ") {
        let key = m[..i].split_whitespace().last().unwrap_or("");
        let val = m[i + 23..].trim().trim_end_matches('.');
        emit(fact(Fact::Env(key.to_string(), val.to_string())));
        return true;
    }
    if m.contains("GPU Direct RDMA") {
        let l = m.to_ascii_lowercase();
        if l.contains("enabled") {
            emit(fact(Fact::Flag(Flag::GdrOn)));
        } else if l.contains("disabled") {
            emit(fact(Fact::Flag(Flag::GdrOff)));
        }
        return true;
    }
    if m.starts_with("NET/IB") && m.contains("Using") && m.contains("[RO]") {
        emit(fact(Fact::Flag(Flag::RoAdvertised)));
        return true;
    }
    if let Some(i) = m.find(" rank ") {
        if m.contains(" nranks ") {
            if let Ok(r) = m[i + 6..].split_whitespace().next().unwrap_or("").parse::<i64>() {
                emit(fact(Fact::RankOf(r)));
            }
        }
    }
    if m.contains("Init COMPLETE") {
        emit(fact(Fact::Done));
        return true;
    }
    if m.contains("cuMem") && m.contains("enable") {
        emit(fact(Fact::Flag(Flag::CudaVmm)));
    }
    // other wordings: "ibv: ibv_reg_mr_iova2 failed -12", "NET/IB : Unable to register memory",
    // aws-ofi-nccl's "NET/OFI Unable to register memory (type = 2) ... RC: -22"
    if let Some(mut ev) = super::generic::recognise(m) {
        ev.lib = Some(lib);
        ev.host = host;
        ev.pid = p.pid;
        ev.rank_hint = p.dev;
        if ev.call == "register memory" {
            ev.call = "ibv_reg_mr".into();
        }
        emit(Event::Reg(ev));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn prefixes() {
        let p = split("node1:1234:1299 [3] misc/ibvwrap.cc:182 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument").unwrap();
        assert_eq!((p.host, p.pid, p.dev, p.lib), (Some("node1"), Some(1234), Some(3), Lib::Nccl));
        assert!(p.msg.starts_with("Call to"));
        let p = split("MCCL WARN Call to ibv_reg_mr failed with error Invalid argument").unwrap();
        assert_eq!((p.host, p.lib), (None, Lib::Mccl));
        assert!(split("the NCCL library is great").is_none());
        assert!(split("NCCL version 2.8.3+cuda11.0").is_some());
    }
}
