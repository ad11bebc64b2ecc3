//! `enum ibv_access_flags` bits by name, decoded the way logs print them
//! (`LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|RELAXED_ORDERING`).

use crate::ibv_access_flags as F;

pub const LOCAL_WRITE: u32 = F::IBV_ACCESS_LOCAL_WRITE.0;
pub const REMOTE_WRITE: u32 = F::IBV_ACCESS_REMOTE_WRITE.0;
pub const REMOTE_READ: u32 = F::IBV_ACCESS_REMOTE_READ.0;
pub const REMOTE_ATOMIC: u32 = F::IBV_ACCESS_REMOTE_ATOMIC.0;
pub const MW_BIND: u32 = F::IBV_ACCESS_MW_BIND.0;
pub const ZERO_BASED: u32 = F::IBV_ACCESS_ZERO_BASED.0;
pub const ON_DEMAND: u32 = F::IBV_ACCESS_ON_DEMAND.0;
pub const HUGETLB: u32 = F::IBV_ACCESS_HUGETLB.0;
pub const FLUSH_GLOBAL: u32 = F::IBV_ACCESS_FLUSH_GLOBAL.0;
pub const FLUSH_PERSISTENT: u32 = F::IBV_ACCESS_FLUSH_PERSISTENT.0;
pub const RELAXED_ORDERING: u32 = F::IBV_ACCESS_RELAXED_ORDERING.0;
/// Bits 20..=29: "optional" access bits a device may ignore (IB_UVERBS_ACCESS_OPTIONAL_RANGE).
pub const OPTIONAL_RANGE: u32 = ((crate::extra_consts::IB_UVERBS_ACCESS_OPTIONAL_LAST << 1) - 1)
    & !(crate::extra_consts::IB_UVERBS_ACCESS_OPTIONAL_FIRST - 1);
/// Bits the kernel knows as mandatory; anything else outside the optional range is EINVAL.
pub const MANDATORY_KNOWN: u32 = (FLUSH_PERSISTENT << 1) - 1;

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
        assert_eq!(OPTIONAL_RANGE, 0x3ff0_0000);
        assert_eq!(MANDATORY_KNOWN, 0x3ff);
        assert_eq!(RELAXED_ORDERING, 0x10_0000);
    }
}
