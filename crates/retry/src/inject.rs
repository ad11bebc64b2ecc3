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

use crate::{Call, MemKind, Req};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct Rule {
    pub entry: Option<Call>,
    pub errno: i32,
    nth: Option<u64>,
    from: Option<u64>,
    p: Option<f64>,
    relaxed: bool,
    access: u32,
    min_len: u64,
    max_len: u64,
    kind: Option<MemKind>,
    seen: AtomicU64,
    rng: AtomicU64,
}

/// What MRSHIM_INJECT accepts (the text of its error line).
pub const HELP: &str = "rules separated by ';', each CALL:ERRNO[:COND,...]; CALL: ibv_reg_mr, ibv_reg_mr_iova, \
ibv_reg_mr_iova2, ibv_reg_dmabuf_mr or reg (any); ERRNO: a name like EINVAL or a number; COND: nth=N, from=N, \
p=PROBABILITY, seed=N, relaxed, access=0xMASK, min_len=SIZE, max_len=SIZE (K/M/G), kind=host-anon|host-stack|\
hugepage|file-readonly|file-writable|device|unmapped";

use mrshim_verbs::units::parse_size as size;

pub fn parse(s: &str) -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    for item in s.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let mut parts = item.splitn(3, ':');
        let call = parts.next().unwrap_or_default();
        let entry =
            if call == "reg" { None } else { Some(Call::parse_registration(call).ok_or_else(|| HELP.to_string())?) };
        let errno = parts.next().and_then(mrshim_verbs::errno::parse).ok_or_else(|| HELP.to_string())?;
        let mut r = Rule {
            entry,
            errno,
            nth: None,
            from: None,
            p: None,
            relaxed: false,
            access: 0,
            min_len: 0,
            max_len: u64::MAX,
            kind: None,
            seen: AtomicU64::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        };
        for c in parts.next().unwrap_or_default().split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let bad = || HELP.to_string();
            match c.split_once('=') {
                None if c == "relaxed" => r.relaxed = true,
                Some(("nth", n)) => r.nth = Some(n.parse().ok().filter(|n| *n > 0).ok_or_else(bad)?),
                Some(("from", n)) => r.from = Some(n.parse().ok().filter(|n| *n > 0).ok_or_else(bad)?),
                Some(("p", p)) => r.p = Some(p.parse().ok().filter(|p: &f64| (0.0..=1.0).contains(p)).ok_or_else(bad)?),
                Some(("seed", n)) => r.rng = AtomicU64::new(n.parse().map_err(|_| bad())?),
                Some(("access", m)) => {
                    r.access = m
                        .strip_prefix("0x")
                        .map_or_else(|| m.parse().ok(), |h| u32::from_str_radix(h, 16).ok())
                        .ok_or_else(bad)?
                }
                Some(("min_len", v)) => r.min_len = size(v).ok_or_else(bad)?,
                Some(("max_len", v)) => r.max_len = size(v).ok_or_else(bad)?,
                Some(("kind", k)) => {
                    r.kind = Some(MemKind::from_name(k).filter(|k| *k != MemKind::Unknown).ok_or_else(bad)?)
                }
                _ => return Err(bad()),
            }
        }
        out.push(r);
    }
    Ok(out)
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
    fn fires(&self, r: &Req, kind: MemKind) -> bool {
        if self.entry.is_some_and(|e| e != r.entry)
            || r.is_probe()
            || (self.relaxed && r.access & mrshim_verbs::access::RELAXED_ORDERING == 0)
            || r.access & self.access != self.access
            || r.length < self.min_len
            || r.length > self.max_len
            || self.kind.is_some_and(|k| k != kind)
        {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.nth.is_some_and(|k| n != k) || self.from.is_some_and(|k| n < k) {
            return false;
        }
        self.p.is_none_or(|p| ((next(&self.rng) >> 11) as f64 / (1u64 << 53) as f64) < p)
    }
}

/// The errno to fail this attempt with, if a rule fires (every matching rule counts the call).
pub fn check(rules: &[Rule], r: &Req, kind: MemKind) -> Option<i32> {
    let mut hit = None;
    for rule in rules {
        if rule.fires(r, kind) && hit.is_none() {
            hit = Some(rule.errno);
        }
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;
    const RO: u32 = mrshim_verbs::access::RELAXED_ORDERING;

    fn req(entry: Call, access: u32, length: u64) -> Req {
        Req { entry, addr: 0x1000, length, iova: 0x1000, access, dmabuf_fd: -1, dmabuf_offset: 0 }
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
        let probe = Req { entry: Call::RegDmabufMr, dmabuf_fd: -1, ..h };
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
