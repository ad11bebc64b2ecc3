//! Free text: bug reports, chat transcripts and articles that quote the evidence (both seed incidents).
//! Split into sentences; each sentence is checked for a quoted registration failure and for the
//! comparisons people report in words ("TCP works", "GDR off works", "still fails with relaxed ordering 0").
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use mrshim_record::MemKind;

const OK_WORDS: [&str; 10] =
    ["works", "passed", "passes", "succeeded", "#wrong 0", "跑通", "通过", "正常", "成功", "fine"];
const FAIL_WORDS: [&str; 6] = ["fail", "still", "依然", "仍然", "失败", "报错"];

fn any(s: &str, words: &[&str]) -> bool {
    words.iter().any(|w| s.contains(w))
}

pub fn sentences(line: &str) -> impl Iterator<Item = &str> {
    line.split(['。', '；', '！', '？', '!', '?']).flat_map(|s| s.split(". ")).filter(|s| !s.trim().is_empty())
}

/// Words saying the memory is a read-only mapping (`PROT_READ` without `PROT_WRITE`, "read-only").
fn says_readonly(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    (line.contains("PROT_READ") && !line.contains("PROT_WRITE"))
        || ["read-only", "read only", "readonly"].iter().any(|w| l.contains(w))
}

/// "P2P" meaning GPU peer-to-peer, not Mooncake's peer-to-peer metadata exchange: its
/// `P2PHANDSHAKE` metadata mode ("Transfer Engine RPC using P2P handshake, listening on ...",
/// transfer_engine_impl.cpp), "Failed to exchange P2P segment metadata", "P2P: No valid port found
/// for local TCP service", "P2P: cached RDMA->TCP mapping", and its P2P Store — none says anything
/// of GPU memory.
fn gpu_p2p(s: &str) -> bool {
    s.match_indices("P2P").any(|(i, _)| {
        let after = &s[i + 3..];
        let metadata =
            ["HANDSHAKE", " handshake", " segment metadata", " Store", " store"].iter().any(|w| after.starts_with(w))
                || (after.starts_with(':') && after.contains("TCP"));
        !metadata
    })
}

/// The registration entry points a sentence can name: verbs' ibv_reg_*, librdmacm's rdma_reg_*, and the
/// kernel verb `ib_reg_mr` that older OFED stacks (Open MPI's openib BTL, uDAPL) and their users name —
/// as a word of its own, not inside a driver's function name (`mlx5_ib_reg_user_mr`).
fn reg_calls(s: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for stem in ["ibv_reg_", "rdma_reg_", "ib_reg_"] {
        let mut from = 0;
        while let Some(i) = s[from..].find(stem) {
            let at = from + i;
            let name: String = s[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            from = at + name.len();
            let word = !s[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            if super::is_reg_call(&name) || super::rdmacm_reg_access(&name).is_some() || (word && name == "ib_reg_mr") {
                out.push((at, name));
            }
        }
    }
    out
}

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    let mut hit = false;
    let host = ctx.host.clone();
    let mut seen: Vec<(String, Option<i32>)> = Vec::new();
    // a read-only mapping named anywhere on the line is the memory its failures registered
    let readonly = says_readonly(line).then_some(MemKind::FileReadonly);
    for s in sentences(line) {
        let fact = |f: Flag| Event::Fact { lib: Lib::Text, host: host.clone(), pid: None, fact: Fact::Flag(f) };
        let lower = s.to_ascii_lowercase();
        // quoted failures: every call named next to a failure word
        for (at, name) in reg_calls(s) {
            let window: String = s[at..].chars().take(90).collect();
            if any(&window, &["fail", "失败", "return -", "returned -", "error"]) {
                let e = errno::find(&window);
                if !seen.contains(&(name.clone(), e)) {
                    seen.push((name.clone(), e));
                    emit(Event::Reg(RegEv {
                        lib: Some(Lib::Text),
                        host: host.clone(),
                        access: super::rdmacm_reg_access(&name),
                        call: name,
                        errno: e,
                        mem: readonly,
                        ..Default::default()
                    }));
                }
                hit = true;
            }
        }
        let gdr = s.contains("GDR") || lower.contains("gpudirect") || lower.contains("gpu direct");
        if gdr || s.contains("显存") || gpu_p2p(s) {
            emit(fact(Flag::GpuContext));
            hit = true;
        }
        if gdr && any(s, &["关闭", "禁用"]) | any(&lower, &[" off", "disable", "=0", "=loc"]) && any(&lower, &OK_WORDS)
        {
            emit(fact(Flag::GdrOffWorks));
        }
        if (s.contains("IB_DISABLE=1") || s.contains("TCP"))
            && any(&lower, &OK_WORDS)
            && !any(&lower, &["slow", "慢", "代价"])
        {
            emit(fact(Flag::TcpWorks));
        }
        if s.contains("RELAXED_ORDERING=0") && any(&lower, &FAIL_WORDS) {
            emit(fact(Flag::RoOffStillFails));
        }
        if (s.contains("版本") && any(s, &["对不上", "不一致", "不匹配"])) || lower.contains("version mismatch")
        {
            emit(fact(Flag::VersionMismatchProse));
            hit = true;
        }
        if s.contains("PCIe 总线错误") || lower.contains("pcie bus error") {
            emit(fact(Flag::PcieError));
        }
        if let Some(i) = s.find("ulimit -l") {
            let rest: String = s[i + 9..].chars().take(24).collect();
            let num: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(kib) = num.parse::<u64>() {
                emit(Event::Fact {
                    lib: Lib::Text,
                    host: host.clone(),
                    pid: None,
                    fact: Fact::Memlock(Some(kib * 1024)),
                });
            } else if rest.contains("unlimited") {
                emit(Event::Fact { lib: Lib::Text, host: host.clone(), pid: None, fact: Fact::Memlock(None) });
            }
            hit = true;
        }
    }
    hit
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_kernel_verb_named_in_words_is_a_registration() {
        let calls = |s: &str| super::reg_calls(s).into_iter().map(|x| x.1).collect::<Vec<_>>();
        assert_eq!(calls("Then the ib_reg_mr for all the posted receives all fail as well"), ["ib_reg_mr"]);
        assert!(calls("mlx5_ib_reg_user_mr: failed").is_empty());
        // a driver entry point, not the verb
        assert!(calls("ib_reg_user_mr returned -14").is_empty());
    }

    #[test]
    fn p2p_metadata_is_no_gpu_context() {
        for (line, gpu) in [
            ("I1207 03:42:22.151726 28182 transfer_engine_impl.cpp:183] Transfer Engine RPC using P2P handshake, listening on 127.0.0.1:15620", false),
            ("E1207 03:42:22.151726 28182 transfer_metadata.cpp:700] Failed to exchange P2P segment metadata", false),
            ("E1207 03:42:22.151726 28182 transfer_engine_impl.cpp:144] P2P: No valid port found for local TCP service.", false),
            ("I1207 03:42:22.151726 28182 rdma_transport.cpp:500] P2P: cached RDMA->TCP mapping: 10.0.0.1:1 -> 10.0.0.1:2", false),
            ("metadata_server=P2PHANDSHAKE", false),
            ("I1207 03:42:22.151726 28182 transfer_engine_impl.cpp:300] HIP transport installed for intra-node GPU P2P", true),
            ("GPU P2P is enabled between GPU0 and the NIC", true),
        ] {
            assert_eq!(super::gpu_p2p(line), gpu, "{line}");
        }
    }
}
