//! Device-side fault injection (MRSHIM_SIM_FAULTS): make a verb fail with a chosen errno on every
//! call, on the Nth call, or on calls matching a predicate — so tests can stage incidents like the
//! seed's "ibv_reg_mr_iova2 → EINVAL when relaxed ordering is set".
//!
//! Grammar: rules separated by `;`, each `CALL:ERRNO[:COND[,COND...]]`.

use std::sync::atomic::{AtomicU64, Ordering};

/// The verbs a rule can target. `Reg` matches every registration entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    RegMr,
    RegMrIova,
    RegMrIova2,
    RegDmabufMr,
    Reg,
    AllocPd,
    CreateCq,
    CreateQp,
    ModifyQp,
    OpenDevice,
}

const CALLS: &[(&str, Call)] = &[
    ("reg_mr", Call::RegMr),
    ("reg_mr_iova", Call::RegMrIova),
    ("reg_mr_iova2", Call::RegMrIova2),
    ("reg_dmabuf_mr", Call::RegDmabufMr),
    ("reg", Call::Reg),
    ("alloc_pd", Call::AllocPd),
    ("create_cq", Call::CreateCq),
    ("create_qp", Call::CreateQp),
    ("modify_qp", Call::ModifyQp),
    ("open_device", Call::OpenDevice),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// Only the Nth matching call (1-based).
    Nth(u64),
    /// Every call from the Nth matching one on.
    From(u64),
    /// Access flags include IBV_ACCESS_RELAXED_ORDERING.
    Relaxed,
    /// All of these access bits are set.
    Access(u32),
    MinLen(u64),
    MaxLen(u64),
    /// The address is simulated GPU memory / ordinary host memory.
    Device,
    Host,
}

#[derive(Debug)]
pub struct Rule {
    pub call: Call,
    pub errno: i32,
    pub conds: Vec<Cond>,
    seen: AtomicU64,
}

impl Clone for Rule {
    fn clone(&self) -> Self {
        Rule { call: self.call, errno: self.errno, conds: self.conds.clone(), seen: AtomicU64::new(0) }
    }
}

/// What the device knows about a call when it decides.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts {
    pub access: u32,
    pub length: u64,
    pub device_memory: bool,
}

pub const HELP: &str = "rules separated by ';', each CALL:ERRNO[:COND,...]; CALL is one of reg_mr, reg_mr_iova, \
reg_mr_iova2, reg_dmabuf_mr, reg (any registration), alloc_pd, create_cq, create_qp, modify_qp, open_device; \
ERRNO a name like EINVAL or a number; COND is nth=N, from=N, relaxed, access=0xMASK, min_len=SIZE, max_len=SIZE \
(SIZE may end in K, M or G), device, host; e.g. reg_mr_iova2:EINVAL:relaxed";

pub fn parse(s: &str) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for item in s.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let mut parts = item.splitn(3, ':');
        let call = parts.next().and_then(|c| CALLS.iter().find(|(n, _)| *n == c)).map(|(_, c)| *c);
        let errno = parts.next().and_then(mrshim_verbs::errno::parse);
        let (Some(call), Some(errno)) = (call, errno) else { return Err(HELP.into()) };
        let mut conds = Vec::new();
        if let Some(cs) = parts.next() {
            for c in cs.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                conds.push(parse_cond(c).ok_or_else(|| HELP.to_string())?);
            }
        }
        rules.push(Rule { call, errno, conds, seen: AtomicU64::new(0) });
    }
    Ok(rules)
}

fn parse_cond(c: &str) -> Option<Cond> {
    Some(match c.split_once('=') {
        None if c == "relaxed" => Cond::Relaxed,
        None if c == "device" => Cond::Device,
        None if c == "host" => Cond::Host,
        Some(("nth", n)) => Cond::Nth(n.parse().ok().filter(|n| *n > 0)?),
        Some(("from", n)) => Cond::From(n.parse().ok().filter(|n| *n > 0)?),
        Some(("access", m)) => Cond::Access(parse_u32(m)?),
        Some(("min_len", v)) => Cond::MinLen(parse_size(v)?),
        Some(("max_len", v)) => Cond::MaxLen(parse_size(v)?),
        _ => return None,
    })
}

fn parse_u32(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

pub use mrshim_verbs::units::parse_size;

impl Rule {
    fn targets(&self, call: Call) -> bool {
        self.call == call
            || (self.call == Call::Reg
                && matches!(call, Call::RegMr | Call::RegMrIova | Call::RegMrIova2 | Call::RegDmabufMr))
    }

    fn predicates_hold(&self, f: &Facts) -> bool {
        self.conds.iter().all(|c| match c {
            Cond::Relaxed => f.access & mrshim_verbs::access::RELAXED_ORDERING != 0,
            Cond::Access(m) => f.access & m == *m,
            Cond::MinLen(n) => f.length >= *n,
            Cond::MaxLen(n) => f.length <= *n,
            Cond::Device => f.device_memory,
            Cond::Host => !f.device_memory,
            Cond::Nth(_) | Cond::From(_) => true,
        })
    }

    /// Counts this call if it matches and says whether it must fail.
    fn fires(&self, call: Call, f: &Facts) -> bool {
        if !self.targets(call) || !self.predicates_hold(f) {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        self.conds.iter().all(|c| match c {
            Cond::Nth(k) => n == *k,
            Cond::From(k) => n >= *k,
            _ => true,
        })
    }
}

/// The errno of the first rule that fires for this call, if any.
pub fn check(rules: &[Rule], call: Call, f: &Facts) -> Option<i32> {
    let mut hit = None;
    for r in rules {
        // Every matching rule counts the call, so `nth` means the same whatever the order.
        if r.fires(call, f) && hit.is_none() {
            hit = Some(r.errno);
        }
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;
    const RO: u32 = 0x100000;

    #[test]
    fn seed_rule_fires_only_with_relaxed_ordering() {
        let r = parse("reg_mr_iova2:EINVAL:relaxed").unwrap();
        assert_eq!(check(&r, Call::RegMrIova2, &Facts { access: 0xf | RO, ..Default::default() }), Some(22));
        assert_eq!(check(&r, Call::RegMrIova2, &Facts { access: 0xf, ..Default::default() }), None);
        assert_eq!(check(&r, Call::RegMr, &Facts { access: 0xf | RO, ..Default::default() }), None);
    }

    #[test]
    fn nth_from_and_any_registration() {
        let r = parse("reg:ENOMEM:nth=2; create_qp:12:from=3").unwrap();
        let f = Facts::default();
        assert_eq!(check(&r, Call::RegMr, &f), None);
        assert_eq!(check(&r, Call::RegDmabufMr, &f), Some(libc::ENOMEM));
        assert_eq!(check(&r, Call::RegMr, &f), None);
        let got: Vec<_> = (0..4).map(|_| check(&r, Call::CreateQp, &f)).collect();
        assert_eq!(got, vec![None, None, Some(12), Some(12)]);
    }

    #[test]
    fn length_access_and_memory_kind() {
        let r = parse("reg:EFAULT:min_len=1M,access=0x2,device").unwrap();
        let mut f = Facts { access: 0x3, length: 1 << 20, device_memory: true };
        assert_eq!(check(&r, Call::RegMr, &f), Some(libc::EFAULT));
        f.device_memory = false;
        assert_eq!(check(&r, Call::RegMr, &f), None);
        f = Facts { access: 0x1, length: 1 << 20, device_memory: true };
        assert_eq!(check(&r, Call::RegMr, &f), None);
    }

    #[test]
    fn rejects_garbage() {
        for bad in
            ["reg_mr", "nope:EINVAL", "reg_mr:EWHAT", "reg_mr:EINVAL:nth=0", "reg:EINVAL:min_len=1T", "reg:EINVAL:blue"]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
