//! The rule grammar MRSHIM_INJECT (failures the shim makes up) and MRSHIM_SIM_FAULTS (failures
//! the simulated NIC makes up) share, so one spelling works in both:
//!
//! ```text
//! RULES = RULE[;RULE...]
//! RULE  = CALL:ERRNO[:COND[,COND...]]
//! COND  = nth=N | from=N | relaxed | access=0xMASK | min_len=SIZE | max_len=SIZE   (SIZE: K/M/G)
//!         | a condition of the side's own (the shim: p=, seed=, kind=; the simulator: device, host)
//! ```
//! Each side names its calls. A rule counts a call when the call, the request and the side's own
//! predicates match; `nth`/`from` then pick among the counted calls.

use std::sync::atomic::{AtomicU64, Ordering};

/// The conditions both sides understand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct When {
    nth: Option<u64>,
    from: Option<u64>,
    relaxed: bool,
    access: u32,
    min_len: u64,
    max_len: u64,
}

impl Default for When {
    fn default() -> Self {
        When { nth: None, from: None, relaxed: false, access: 0, min_len: 0, max_len: u64::MAX }
    }
}

impl When {
    /// Takes `cond` if it is a shared condition: Some(true) taken, Some(false) malformed, None not ours.
    fn take(&mut self, cond: &str) -> Option<bool> {
        let count = |n: &str| n.parse().ok().filter(|n| *n > 0);
        let ok = match cond.split_once('=') {
            None if cond == "relaxed" => {
                self.relaxed = true;
                true
            }
            Some(("nth", n)) => count(n).map(|n| self.nth = Some(n)).is_some(),
            Some(("from", n)) => count(n).map(|n| self.from = Some(n)).is_some(),
            Some(("access", m)) => parse_mask(m).map(|m| self.access = m).is_some(),
            Some(("min_len", v)) => crate::units::parse_size(v).map(|v| self.min_len = v).is_some(),
            Some(("max_len", v)) => crate::units::parse_size(v).map(|v| self.max_len = v).is_some(),
            _ => return None,
        };
        Some(ok)
    }

    fn request_matches(&self, access: u32, length: u64) -> bool {
        (!self.relaxed || access & crate::access::RELAXED_ORDERING != 0)
            && access & self.access == self.access
            && (self.min_len..=self.max_len).contains(&length)
    }
}

fn parse_mask(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// One rule: the side's call selector `C`, its own conditions `X`.
#[derive(Debug)]
pub struct Rule<C, X> {
    pub call: C,
    pub errno: i32,
    pub when: When,
    pub own: Vec<X>,
    seen: AtomicU64,
}

/// A copy starts counting again.
impl<C: Clone, X: Clone> Clone for Rule<C, X> {
    fn clone(&self) -> Self {
        Rule {
            call: self.call.clone(),
            errno: self.errno,
            when: self.when.clone(),
            own: self.own.clone(),
            seen: AtomicU64::new(0),
        }
    }
}

impl<C, X> Rule<C, X> {
    /// Counts the call when `applies` (the side's call and own predicates) and the request match,
    /// and says whether `nth`/`from` let it fail.
    pub fn counts_and_fires(&self, applies: bool, access: u32, length: u64) -> bool {
        if !applies || !self.when.request_matches(access, length) {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        self.when.nth.is_none_or(|k| n == k) && self.when.from.is_none_or(|k| n >= k)
    }
}

/// Parses `s`; `call` names the side's calls, `own` its own conditions; any error is `help`.
pub fn parse<C, X>(
    s: &str,
    help: &str,
    call: impl Fn(&str) -> Option<C>,
    own: impl Fn(&str) -> Option<X>,
) -> Result<Vec<Rule<C, X>>, String> {
    let bad = || help.to_string();
    let mut rules = Vec::new();
    for item in s.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let mut parts = item.splitn(3, ':');
        let call = parts.next().and_then(&call).ok_or_else(bad)?;
        let errno = parts.next().and_then(crate::errno::parse).ok_or_else(bad)?;
        let mut rule = Rule { call, errno, when: When::default(), own: Vec::new(), seen: AtomicU64::new(0) };
        for c in parts.next().unwrap_or_default().split(',').map(str::trim).filter(|c| !c.is_empty()) {
            match rule.when.take(c) {
                Some(true) => {}
                Some(false) => return Err(bad()),
                None => rule.own.push(own(c).ok_or_else(bad)?),
            }
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// The errno of the first rule that fires; every rule is asked, so each counts the call and
/// `nth` means the same whatever the order of the rules.
pub fn first_errno<C, X>(rules: &[Rule<C, X>], mut fires: impl FnMut(&Rule<C, X>) -> bool) -> Option<i32> {
    rules.iter().fold(None, |hit, r| if fires(r) { hit.or(Some(r.errno)) } else { hit })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(s: &str) -> Result<Vec<Rule<String, String>>, String> {
        parse(s, "help", |c| (!c.is_empty()).then(|| c.to_string()), |x| (x == "mine").then(|| x.to_string()))
    }

    #[test]
    fn shared_and_own_conditions() {
        let r = rules("a:EINVAL:relaxed,min_len=1K,mine; b:12:nth=2").unwrap();
        assert_eq!((r[0].call.as_str(), r[0].errno, r[0].own.as_slice()), ("a", 22, &["mine".to_string()][..]));
        let ro = crate::access::RELAXED_ORDERING;
        assert!(!r[0].counts_and_fires(true, ro, 512), "shorter than min_len");
        assert!(!r[0].counts_and_fires(true, 0, 4096), "no relaxed ordering");
        assert!(r[0].counts_and_fires(true, ro, 4096));
        let fired: Vec<bool> = (0..3).map(|_| r[1].counts_and_fires(true, 0, 1)).collect();
        assert_eq!(fired, [false, true, false]);
        assert_eq!(
            first_errno(&r, |r| r.counts_and_fires(r.call == "b", 0, 1)),
            None,
            "b's third and later calls do not fire"
        );
    }

    #[test]
    fn rejects_garbage() {
        for bad in
            ["a", ":EINVAL", "a:EWHAT", "a:EINVAL:nth=0", "a:EINVAL:min_len=1T", "a:EINVAL:blue", "a:1:access=0xg"]
        {
            assert_eq!(rules(bad).err().as_deref(), Some("help"), "{bad}");
        }
    }
}
