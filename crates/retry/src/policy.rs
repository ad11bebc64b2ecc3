//! `MRSHIM_RETRY`: which strategies to try, in which order, for which calls and errnos.
//!
//! ```text
//! MRSHIM_RETRY = LIST [; KEY=VALUE ...]
//! LIST         = off | auto | STRATEGY[,STRATEGY...]
//! KEY=VALUE    : max_attempts=N (1..=16, default 6)     attempts after the original call
//!                sticky=on|off (default on)              remember what worked per memory kind
//!                calls=ENTRY,...                          only retry these entry points
//!                errnos=ERRNO,...                         only retry these errnos
//!                on.ERRNO=STRATEGY,...                    this list for this errno
//!                on.ENTRY=STRATEGY,...                    this list for this entry point
//! ```
//! `auto` is every strategy in the order of [`crate::strategy::Strategy::AUTO`].

use crate::strategy::{BounceRemote, Strategy};
use crate::Call;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub strategies: Vec<Strategy>,
    pub max_attempts: u32,
    pub sticky: bool,
    /// Empty: every registration entry point.
    pub calls: Vec<Call>,
    /// Empty: every errno.
    pub errnos: Vec<i32>,
    pub per_errno: Vec<(i32, Vec<Strategy>)>,
    pub per_call: Vec<(Call, Vec<Strategy>)>,
    /// MRSHIM_BOUNCE_REMOTE (its own variable, set by the shim's config): whether bounce may
    /// take regions peers can access one-sided.
    pub bounce_remote: BounceRemote,
}

impl Default for Policy {
    /// `off`.
    fn default() -> Policy {
        Policy {
            strategies: Vec::new(),
            max_attempts: 6,
            sticky: true,
            calls: Vec::new(),
            errnos: Vec::new(),
            per_errno: Vec::new(),
            per_call: Vec::new(),
            bounce_remote: BounceRemote::default(),
        }
    }
}

/// What MRSHIM_RETRY accepts (the text of its error line).
pub const HELP: &str = "off, auto, or a comma-separated list of drop-relaxed-ordering, raise-memlock, realign-iova, \
dmabuf-to-va, va-to-dmabuf, bounce; then optional ';'-separated max_attempts=1..16, sticky=on|off, calls=ENTRY,..., \
errnos=ERRNO,..., on.ERRNO=LIST, on.ENTRY=LIST (ENTRY: ibv_reg_mr, ibv_reg_mr_iova, ibv_reg_mr_iova2, ibv_reg_dmabuf_mr)";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub value: String,
    /// What exactly is wrong, when more precise than "not valid".
    pub detail: Option<String>,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MRSHIM_RETRY={:?} is not valid", self.value)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        write!(f, "; accepted: {HELP}")
    }
}

/// Adds an `on.KEY=LIST` rule; false if KEY already has one.
fn push_once<K: PartialEq>(rules: &mut Vec<(K, Vec<Strategy>)>, k: K, l: Vec<Strategy>) -> bool {
    let fresh = !rules.iter().any(|(x, _)| *x == k);
    if fresh {
        rules.push((k, l));
    }
    fresh
}

fn list(s: &str) -> Option<Vec<Strategy>> {
    match s.trim() {
        "off" | "" => Some(Vec::new()),
        "auto" => Some(Strategy::AUTO.to_vec()),
        l => {
            let mut out = Vec::new();
            for n in l.split(',').map(str::trim) {
                let st = Strategy::parse(n)?;
                if !out.contains(&st) {
                    out.push(st);
                }
            }
            Some(out)
        }
    }
}

impl Policy {
    pub fn parse(value: &str) -> Result<Policy, PolicyError> {
        let err = || PolicyError { value: value.into(), detail: None };
        let mut parts = value.split(';');
        let mut p = Policy { strategies: list(parts.next().unwrap_or_default()).ok_or_else(err)?, ..Policy::default() };
        for kv in parts.map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(err)?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "max_attempts" => p.max_attempts = v.parse().ok().filter(|n| (1..=16).contains(n)).ok_or_else(err)?,
                "sticky" => {
                    p.sticky = match v {
                        "on" | "1" | "yes" => true,
                        "off" | "0" | "no" => false,
                        _ => return Err(err()),
                    }
                }
                "calls" => {
                    p.calls = v
                        .split(',')
                        .map(|c| Call::parse_registration(c.trim()))
                        .collect::<Option<_>>()
                        .ok_or_else(err)?
                }
                "errnos" => {
                    p.errnos = v.split(',').map(mrshim_verbs::errno::parse).collect::<Option<_>>().ok_or_else(err)?
                }
                _ => {
                    let target = k.strip_prefix("on.").ok_or_else(err)?;
                    let l = list(v).ok_or_else(err)?;
                    let twice = || PolicyError { value: value.into(), detail: Some(format!("{k} is given twice")) };
                    let fresh = if let Some(e) = mrshim_verbs::errno::parse(target) {
                        push_once(&mut p.per_errno, e, l)
                    } else if let Some(c) = Call::parse_registration(target) {
                        push_once(&mut p.per_call, c, l)
                    } else {
                        return Err(err());
                    };
                    if !fresh {
                        return Err(twice());
                    }
                }
            }
        }
        Ok(p)
    }

    pub fn is_off(&self) -> bool {
        self.every_strategy().next().is_none()
    }

    /// Whether `s` is in the policy for some failure (the list, or an `on.ERRNO`/per-call one).
    pub fn uses(&self, s: Strategy) -> bool {
        self.every_strategy().any(|x| *x == s)
    }

    fn every_strategy(&self) -> impl Iterator<Item = &Strategy> {
        let per_errno = self.per_errno.iter().flat_map(|(_, l)| l);
        self.strategies.iter().chain(per_errno).chain(self.per_call.iter().flat_map(|(_, l)| l))
    }

    /// The strategies to walk for this failure, in order; empty when the policy does not retry it.
    pub fn for_failure(&self, entry: Call, errno: i32) -> &[Strategy] {
        if (!self.calls.is_empty() && !self.calls.contains(&entry))
            || (!self.errnos.is_empty() && !self.errnos.contains(&errno))
        {
            return &[];
        }
        if let Some((_, l)) = self.per_errno.iter().find(|(e, _)| *e == errno) {
            return l;
        }
        if let Some((_, l)) = self.per_call.iter().find(|(c, _)| *c == entry) {
            return l;
        }
        &self.strategies
    }

    /// Short form for the config record and the summary.
    pub fn describe(&self) -> String {
        if self.is_off() {
            return "off".into();
        }
        let names: Vec<&str> = self.strategies.iter().map(|s| s.name()).collect();
        format!(
            "{} (max_attempts={}, sticky={})",
            names.join(","),
            self.max_attempts,
            if self.sticky { "on" } else { "off" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{prop_assert_eq, proptest};

    #[test]
    fn off_auto_and_lists() {
        assert!(Policy::parse("off").unwrap().is_off());
        let auto = Policy::parse("auto").unwrap();
        assert_eq!(auto.strategies, Strategy::AUTO.to_vec());
        let p = Policy::parse("drop-relaxed-ordering,raise-memlock; max_attempts=2; sticky=off").unwrap();
        assert_eq!(p.strategies, vec![Strategy::DropRelaxedOrdering, Strategy::RaiseMemlock]);
        assert_eq!((p.max_attempts, p.sticky), (2, false));
    }

    #[test]
    fn per_errno_and_per_call_rules() {
        let p =
            Policy::parse("auto;on.ENOMEM=raise-memlock;on.ibv_reg_dmabuf_mr=dmabuf-to-va;errnos=EINVAL,ENOMEM,EFAULT")
                .unwrap();
        assert_eq!(p.for_failure(Call::RegMr, libc::ENOMEM), &[Strategy::RaiseMemlock]);
        assert_eq!(p.for_failure(Call::RegDmabufMr, libc::EINVAL), &[Strategy::DmabufToVa]);
        assert_eq!(p.for_failure(Call::RegMrIova2, libc::EINVAL), Strategy::AUTO);
        assert!(p.for_failure(Call::RegMr, libc::EPERM).is_empty(), "EPERM not listed");
        let only = Policy::parse("auto;calls=reg_mr_iova2").unwrap();
        assert!(only.for_failure(Call::RegMr, libc::EINVAL).is_empty());
        assert!(!only.for_failure(Call::RegMrIova2, libc::EINVAL).is_empty());
    }

    #[test]
    fn bad_values_list_what_is_accepted() {
        for bad in [
            "sometimes",
            "auto;max_attempts=0",
            "auto;max_attempts=99",
            "auto;sticky=maybe",
            "auto;calls=ibv_post_send",
            "auto;errnos=EWHAT",
            "auto;on.EWHAT=auto",
            "drop-relaxed-ordering,teleport",
            "auto;nonsense",
        ] {
            let e = Policy::parse(bad).unwrap_err();
            let line = e.to_string();
            assert!(
                line.starts_with("MRSHIM_RETRY=")
                    && line.contains("drop-relaxed-ordering")
                    && line.contains("max_attempts"),
                "{line}"
            );
        }
    }

    #[test]
    fn help_names_every_strategy_and_entry_point_and_a_rule_given_twice_is_refused() {
        for n in Strategy::ALL.iter().map(|s| s.name()).chain(Call::REGISTRATIONS.iter().map(|e| e.name())) {
            assert!(HELP.contains(n), "{n}");
        }
        for bad in [
            "auto;on.EINVAL=bounce;on.EINVAL=raise-memlock",
            "auto;on.ibv_reg_mr=bounce;on.reg_mr=bounce",
            "auto;on.22=bounce;on.EINVAL=bounce",
        ] {
            let e = Policy::parse(bad).unwrap_err();
            assert!(e.detail.as_deref().unwrap_or_default().ends_with("is given twice"), "{bad}: {e}");
            assert!(e.to_string().contains("; accepted: off, auto"), "{e}");
        }
    }

    const ERRNOS: [(&str, i32); 5] = [
        ("EINVAL", libc::EINVAL),
        ("ENOMEM", libc::ENOMEM),
        ("EFAULT", libc::EFAULT),
        ("EPERM", libc::EPERM),
        ("14", 14),
    ];

    /// A list as the parser keeps it: first occurrence of each strategy, in order.
    fn dedup(v: &[Strategy]) -> Vec<Strategy> {
        let mut d = Vec::new();
        for s in v {
            if !d.contains(s) {
                d.push(*s);
            }
        }
        d
    }

    fn arb_strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
        proptest::sample::select(Strategy::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn any_valid_list_roundtrips(v in proptest::collection::vec(arb_strategy(), 1..6), max in 1u32..=16, sticky: bool) {
            let names: Vec<&str> = v.iter().map(|s| s.name()).collect();
            let text = format!("{};max_attempts={max};sticky={}", names.join(","), if sticky { "on" } else { "off" });
            let p = Policy::parse(&text).unwrap();
            prop_assert_eq!(p.strategies, dedup(&v));
            prop_assert_eq!(p.max_attempts, max);
            prop_assert_eq!(p.sticky, sticky);
        }

        /// calls=, errnos=, on.ERRNO= and on.ENTRY= rules, generated, against a model of what
        /// they mean: the per-errno list wins over the per-call list over the main list; the
        /// calls/errnos filters retry nothing outside them.
        #[test]
        fn rules_mean_what_they_say(
            main in proptest::collection::vec(arb_strategy(), 0..4),
            calls in proptest::collection::vec(0usize..4, 0..3),
            errnos in proptest::collection::vec(0usize..4, 0..3),
            on_errno in proptest::option::of((0usize..4, proptest::collection::vec(arb_strategy(), 0..3))),
            on_call in proptest::option::of((0usize..4, proptest::collection::vec(arb_strategy(), 0..3))),
            entry in 0usize..4, errno in 0usize..5,
        ) {
            let names = |v: &[Strategy]| if v.is_empty() { "off".to_string() } else { v.iter().map(|s| s.name()).collect::<Vec<_>>().join(",") };
            let mut text = names(&main);
            if !calls.is_empty() {
                text += &format!(";calls={}", calls.iter().map(|&c| Call::REGISTRATIONS[c].name()).collect::<Vec<_>>().join(","));
            }
            if !errnos.is_empty() {
                text += &format!(";errnos={}", errnos.iter().map(|&e| ERRNOS[e].0).collect::<Vec<_>>().join(","));
            }
            if let Some((e, l)) = &on_errno {
                text += &format!("; on.{}={}", ERRNOS[*e].0, names(l));
            }
            if let Some((c, l)) = &on_call {
                text += &format!(";on.{}={}", Call::REGISTRATIONS[*c].name(), names(l));
            }
            let p = Policy::parse(&text).unwrap();
            let (en, er) = (Call::REGISTRATIONS[entry], ERRNOS[errno].1);
            let filtered = (!calls.is_empty() && !calls.iter().any(|&c| Call::REGISTRATIONS[c] == en)) || (!errnos.is_empty() && !errnos.iter().any(|&e| ERRNOS[e].1 == er));
            let want = if filtered {
                Vec::new()
            } else if let Some((_, l)) = on_errno.as_ref().filter(|(e, _)| ERRNOS[*e].1 == er) {
                dedup(l)
            } else if let Some((_, l)) = on_call.as_ref().filter(|(c, _)| Call::REGISTRATIONS[*c] == en) {
                dedup(l)
            } else {
                dedup(&main)
            };
            prop_assert_eq!(p.for_failure(en, er).to_vec(), want, "{}", text);
        }

        #[test]
        fn parser_never_panics(s in ".{0,80}") {
            let _ = Policy::parse(&s);
        }
    }
}
