//! `MRSHIM_INJECT`: failures the shim makes up, so a healthy cluster can rehearse an incident.
//! The real function is not called; the record says `injected`.
//!
//! ```text
//! MRSHIM_INJECT = RULE[;RULE...]
//! RULE          = CALL:ERRNO[:COND,...]
//! CALL          = ibv_reg_mr | ibv_reg_mr_iova | ibv_reg_mr_iova2 | ibv_reg_dmabuf_mr | reg (any)
//! COND          = nth=N | from=N | p=0.0..1 | seed=N | relaxed | access=0xMASK
//!                 | min_len=SIZE | max_len=SIZE | kind=KIND      (SIZE: K/M/G suffixes)
//! ```
//! Every attempt is a call: a rule that matches relaxed ordering stops matching once
//! `drop-relaxed-ordering` clears it, which is how rehearsals exercise the retry engine.

use crate::{Call, MemKind, RegArgs};
use std::sync::atomic::{AtomicU64, Ordering};

/// The shim's own conditions, beside the shared ones of [`mrshim_verbs::fault_rule`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Own {
    /// Fail with this probability, drawn after `nth`/`from`.
    P(f64),
    /// Seed of the rule's reproducible stream for `p`.
    Seed(u64),
    Kind(MemKind),
}

/// `None` as the call means any registration (`reg`).
type Shared = mrshim_verbs::fault_rule::Rule<Option<Call>, Own>;

#[derive(Debug)]
pub struct Rule {
    rule: Shared,
    rng: AtomicU64,
}

/// What MRSHIM_INJECT accepts (the text of its error line).
pub const HELP: &str = "rules separated by ';', each CALL:ERRNO[:COND,...]; CALL: ibv_reg_mr, ibv_reg_mr_iova, \
ibv_reg_mr_iova2, ibv_reg_dmabuf_mr or reg (any); ERRNO: a name like EINVAL or a number; COND: nth=N, from=N, \
p=PROBABILITY, seed=N, relaxed, access=0xMASK, min_len=SIZE, max_len=SIZE (K/M/G), kind=host-anon|host-stack|\
hugepage|file-readonly|file-writable|device|unmapped";

pub fn parse(s: &str) -> Result<Vec<Rule>, String> {
    let call = |c: &str| if c == "reg" { Some(None) } else { Call::parse_registration(c).map(Some) };
    let own = |c: &str| match c.split_once('=')? {
        ("p", p) => p.parse().ok().filter(|p: &f64| (0.0..=1.0).contains(p)).map(Own::P),
        ("seed", n) => n.parse().ok().map(Own::Seed),
        ("kind", k) => MemKind::from_name(k).filter(|k| *k != MemKind::Unknown).map(Own::Kind),
        _ => None,
    };
    let rules = mrshim_verbs::fault_rule::parse(s, HELP, call, own)?;
    Ok(rules
        .into_iter()
        .map(|rule| {
            let seed = rule.own.iter().find_map(|o| if let Own::Seed(n) = o { Some(*n) } else { None });
            Rule { rng: AtomicU64::new(seed.unwrap_or(0x9e37_79b9_7f4a_7c15)), rule }
        })
        .collect())
}

/// splitmix64: a seeded, reproducible stream per rule.
fn next(state: &AtomicU64) -> u64 {
    let s = state.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed).wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rule {
    fn fires(&self, r: &RegArgs, kind: MemKind) -> bool {
        let applies = self.rule.call.is_none_or(|e| e == r.call())
            && !r.is_probe()
            && self.rule.own.iter().all(|o| !matches!(o, Own::Kind(k) if *k != kind));
        self.rule.counts_and_fires(applies, r.access, r.length)
            && self.rule.own.iter().all(|o| match o {
                Own::P(p) => ((next(&self.rng) >> 11) as f64 / (1u64 << 53) as f64) < *p,
                _ => true,
            })
    }
}

/// The errno to fail this attempt with, if a rule fires (every matching rule counts the call).
pub fn check(rules: &[Rule], r: &RegArgs, kind: MemKind) -> Option<i32> {
    let mut hit = None;
    for rule in rules {
        if rule.fires(r, kind) && hit.is_none() {
            hit = Some(rule.rule.errno);
        }
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;
    const RO: u32 = mrshim_verbs::access::RELAXED_ORDERING;

    fn req(entry: Call, access: u32, length: u64) -> RegArgs {
        RegArgs { call: Some(entry), addr: 0x1000, length, iova: Some(0x1000), access, ..Default::default() }
    }

    #[test]
    fn seed_rehearsal() {
        let r = parse("ibv_reg_mr_iova2:EINVAL:relaxed").unwrap();
        assert_eq!(check(&r, &req(Call::RegMrIova2, 0xf | RO, 4096), MemKind::HostAnon), Some(libc::EINVAL));
        assert_eq!(check(&r, &req(Call::RegMrIova2, 0xf, 4096), MemKind::HostAnon), None);
        assert_eq!(check(&r, &req(Call::RegMr, 0xf | RO, 4096), MemKind::HostAnon), None);
    }

    #[test]
    fn nth_kind_length_and_probes() {
        let r = parse("reg:ENOMEM:nth=2;reg:EFAULT:kind=device,min_len=1M").unwrap();
        let h = req(Call::RegMr, 0xf, 4096);
        assert_eq!(check(&r, &h, MemKind::HostAnon), None);
        assert_eq!(check(&r, &h, MemKind::HostAnon), Some(libc::ENOMEM));
        assert_eq!(check(&r, &h, MemKind::HostAnon), None);
        assert_eq!(check(&r, &req(Call::RegMr, 0xf, 2 << 20), MemKind::Device), Some(libc::EFAULT));
        let probe = RegArgs { call: Some(Call::RegDmabufMr), dmabuf_fd: Some(-1), dmabuf_offset: Some(0), ..h };
        assert_eq!(check(&parse("reg:EINVAL").unwrap(), &probe, MemKind::Unknown), None, "probes pass through");
    }

    #[test]
    fn probability_is_seeded_and_reproducible() {
        let run = || {
            let r = parse("reg:EIO:p=0.3,seed=42").unwrap();
            (0..1000).filter(|_| check(&r, &req(Call::RegMr, 0xf, 64), MemKind::HostAnon).is_some()).count()
        };
        let a = run();
        assert_eq!(a, run());
        assert!((200..400).contains(&a), "{a}");
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "reg",
            "ibv_post_send:EINVAL",
            "reg:EWHAT",
            "reg:EINVAL:p=2",
            "reg:EINVAL:kind=gpu",
            "reg:EINVAL:nth=0",
            "reg:EINVAL:bogus",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
