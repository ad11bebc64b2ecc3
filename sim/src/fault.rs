//! Device-side fault injection (MRSHIM_SIM_FAULTS): make a verb fail with a chosen errno on every
//! call, on the Nth call, or on calls matching a predicate — so tests can stage incidents like the
//! seed's "ibv_reg_mr_iova2 → EINVAL when relaxed ordering is set".
//!
//! Grammar: [`mrshim_verbs::fault_rule`] (shared with MRSHIM_INJECT), with this module's calls
//! and the `device`/`host` conditions.

/// The verbs a rule can target. `Reg` matches every registration entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    RegMr,
    RegMrIova,
    RegMrIova2,
    RegDmabufMr,
    Reg,
    /// `ibv_rereg_mr`'s command (its input checks come first).
    ReregMr,
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
    ("rereg_mr", Call::ReregMr),
    ("alloc_pd", Call::AllocPd),
    ("create_cq", Call::CreateCq),
    ("create_qp", Call::CreateQp),
    ("modify_qp", Call::ModifyQp),
    ("open_device", Call::OpenDevice),
];

/// The simulator's own conditions, beside the shared ones of [`mrshim_verbs::fault_rule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// The address is simulated GPU memory / ordinary host memory.
    Device,
    Host,
}

pub type Rule = mrshim_verbs::fault_rule::Rule<Call, Where>;

/// What the device knows about a call when it decides.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts {
    pub access: u32,
    pub length: u64,
    pub device_memory: bool,
}

pub const HELP: &str = "rules separated by ';', each CALL:ERRNO[:COND,...]; CALL is one of reg_mr, reg_mr_iova, \
reg_mr_iova2, reg_dmabuf_mr, reg (any registration), rereg_mr, alloc_pd, create_cq, create_qp, modify_qp, open_device; \
ERRNO a name like EINVAL or a number; COND is nth=N, from=N, relaxed, access=0xMASK, min_len=SIZE, max_len=SIZE \
(SIZE may end in K, M or G), device, host; e.g. reg_mr_iova2:EINVAL:relaxed";

pub fn parse(s: &str) -> Result<Vec<Rule>, String> {
    let call = |c: &str| CALLS.iter().find(|(n, _)| *n == c).map(|(_, c)| *c);
    let own = |c: &str| match c {
        "device" => Some(Where::Device),
        "host" => Some(Where::Host),
        _ => None,
    };
    mrshim_verbs::fault_rule::parse(s, HELP, call, own)
}

fn targets(rule: Call, call: Call) -> bool {
    rule == call
        || (rule == Call::Reg && matches!(call, Call::RegMr | Call::RegMrIova | Call::RegMrIova2 | Call::RegDmabufMr))
}

/// The errno of the first rule that fires for this call, if any.
pub fn check(rules: &[Rule], call: Call, f: &Facts) -> Option<i32> {
    mrshim_verbs::fault_rule::first_errno(rules, |r| {
        let here = r.own.iter().all(|w| (*w == Where::Device) == f.device_memory);
        r.counts_and_fires(targets(r.call, call) && here, f.access, f.length)
    })
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
