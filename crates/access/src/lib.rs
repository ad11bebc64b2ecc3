//! `enum ibv_access_flags` bits by name, printed and parsed the way logs show them
//! (`LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|RELAXED_ORDERING`).
//!
//! The values are rdma-core's ABI (verbs.h), written here as numbers so that crates without
//! bindgen (the analyzer) share the table; mrshim-verbs re-exports it and checks every value
//! against its bindgen constants.

pub const LOCAL_WRITE: u32 = 1;
pub const REMOTE_WRITE: u32 = 1 << 1;
pub const REMOTE_READ: u32 = 1 << 2;
pub const REMOTE_ATOMIC: u32 = 1 << 3;
pub const MW_BIND: u32 = 1 << 4;
pub const ZERO_BASED: u32 = 1 << 5;
pub const ON_DEMAND: u32 = 1 << 6;
pub const HUGETLB: u32 = 1 << 7;
pub const FLUSH_GLOBAL: u32 = 1 << 8;
pub const FLUSH_PERSISTENT: u32 = 1 << 9;
pub const RELAXED_ORDERING: u32 = 1 << 20;
/// Bits 20..=29: "optional" access bits a device may ignore (IB_UVERBS_ACCESS_OPTIONAL_RANGE).
pub const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
/// Bits the kernel knows as mandatory; anything else outside the optional range is EINVAL.
pub const MANDATORY_KNOWN: u32 = (FLUSH_PERSISTENT << 1) - 1;

/// Why `access` is invalid by the verbs specification on every device (the kernel's
/// `ib_check_mr_access`: EINVAL on rxe, siw, mlx5, ...), or None.
pub fn spec_violation(access: u32) -> Option<String> {
    let needs_local = access & (REMOTE_WRITE | REMOTE_ATOMIC);
    if needs_local != 0 && access & LOCAL_WRITE == 0 {
        return Some(format!("{} without LOCAL_WRITE", describe(needs_local)));
    }
    let undefined = access & !(MANDATORY_KNOWN | OPTIONAL_RANGE);
    if undefined != 0 {
        return Some(format!("undefined access bits {undefined:#x}"));
    }
    None
}

pub const NAMES: &[(&str, u32)] = &[
    ("LOCAL_WRITE", LOCAL_WRITE),
    ("REMOTE_WRITE", REMOTE_WRITE),
    ("REMOTE_READ", REMOTE_READ),
    ("REMOTE_ATOMIC", REMOTE_ATOMIC),
    ("MW_BIND", MW_BIND),
    ("ZERO_BASED", ZERO_BASED),
    ("ON_DEMAND", ON_DEMAND),
    ("HUGETLB", HUGETLB),
    ("FLUSH_GLOBAL", FLUSH_GLOBAL),
    ("FLUSH_PERSISTENT", FLUSH_PERSISTENT),
    ("RELAXED_ORDERING", RELAXED_ORDERING),
];

/// Names of the set bits; unknown bits come out as hex (`0x400`).
pub fn names(access: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = access;
    for (n, bit) in NAMES {
        if access & bit != 0 {
            out.push((*n).to_string());
            rest &= !bit;
        }
    }
    for b in 0..32 {
        if rest & (1 << b) != 0 {
            out.push(format!("{:#x}", 1u32 << b));
        }
    }
    out
}

/// `LOCAL_WRITE|REMOTE_READ`, or `0` for no bits.
pub fn describe(access: u32) -> String {
    let n = names(access);
    if n.is_empty() {
        "0".into()
    } else {
        n.join("|")
    }
}

/// The inverse of [`describe`]: `NAME|NAME|0x400`, a hex mask, or `0`; None for an unknown name.
pub fn parse(s: &str) -> Option<u32> {
    let hex = |t: &str| t.strip_prefix("0x").and_then(|h| u32::from_str_radix(h, 16).ok());
    s.split('|').map(str::trim).try_fold(0, |bits, t| {
        let bit = match t {
            "0" => 0,
            _ => NAMES.iter().find(|(n, _)| *n == t).map(|(_, b)| *b).or_else(|| hex(t))?,
        };
        Some(bits | bit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_nccl_mask() {
        assert_eq!(
            describe(0xf | RELAXED_ORDERING),
            "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING"
        );
        assert_eq!(describe(0), "0");
        assert_eq!(describe(0x1 | 0x400), "LOCAL_WRITE|0x400");
        assert_eq!(MANDATORY_KNOWN, 0x3ff);
    }

    #[test]
    fn spec_violations_are_the_kernels_einval_rules() {
        assert_eq!(spec_violation(REMOTE_ATOMIC).as_deref(), Some("REMOTE_ATOMIC without LOCAL_WRITE"));
        assert_eq!(spec_violation(REMOTE_WRITE | REMOTE_READ).as_deref(), Some("REMOTE_WRITE without LOCAL_WRITE"));
        assert_eq!(spec_violation(LOCAL_WRITE | 0x400).as_deref(), Some("undefined access bits 0x400"));
        assert_eq!(spec_violation(LOCAL_WRITE | 0x4000_0000).as_deref(), Some("undefined access bits 0x40000000"));
        for ok in [0, REMOTE_READ, 0xf, 0xf | RELAXED_ORDERING, LOCAL_WRITE | OPTIONAL_RANGE, MW_BIND] {
            assert_eq!(spec_violation(ok), None, "{}", describe(ok));
        }
    }

    #[test]
    fn parse_inverts_describe() {
        for a in [0, 0xf, 0xf | RELAXED_ORDERING, FLUSH_GLOBAL | FLUSH_PERSISTENT, 0x1 | 0x400, 0x8000_0000] {
            assert_eq!(parse(&describe(a)), Some(a), "{}", describe(a));
        }
        assert_eq!(parse("0x10000f"), Some(0xf | RELAXED_ORDERING));
        assert_eq!(parse("LOCAL_WRITE|BOGUS"), None);
    }
}
