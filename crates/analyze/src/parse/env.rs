//! Environment dumps (`env`, `printenv`, `export NCCL_...=...` lines in job scripts).
use super::FileCtx;
use crate::event::{Event, Fact, Lib};

/// Settings the stacks read; libfabric's FI_* (FI_MR_CACHE_MAX_COUNT ...) and libcxi's CXI_* (CXI_FORK_SAFE)
/// decide how registrations are kept and pinned.
const PREFIXES: [&str; 7] = ["NCCL_", "MCCL_", "RCCL_", "UCX_", "MRSHIM_", "FI_", "CXI_"];

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    let t = line.trim_start();
    // a captured /proc/PID/limits
    if let Some(rest) = t.strip_prefix("Max locked memory") {
        let soft = rest.split_whitespace().next().unwrap_or("");
        let m = if soft == "unlimited" { Some(None) } else { soft.parse::<u64>().ok().map(Some) };
        if let Some(m) = m {
            emit(Event::Fact { lib: Lib::Text, host: ctx.host.clone(), pid: None, fact: Fact::Memlock(m) });
            return true;
        }
    }
    let t = t.strip_prefix("export ").unwrap_or(t).trim_start();
    if !PREFIXES.iter().any(|p| t.starts_with(p)) {
        return false;
    }
    let Some((k, v)) = t.split_once('=') else {
        return false;
    };
    if !k.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') {
        return false;
    }
    let v = v.trim().trim_matches(['"', '\'']);
    emit(Event::Fact {
        lib: Lib::Text,
        host: ctx.host.clone(),
        pid: None,
        fact: Fact::Env(k.to_string(), v.to_string()),
    });
    true
}
