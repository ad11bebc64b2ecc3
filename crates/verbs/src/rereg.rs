//! `ibv_rereg_mr`'s flags and return codes (rdma-core's `enum ibv_rereg_mr_flags` and `enum
//! ibv_rereg_mr_err_code`, verbs.h) with the names mrshim prints, and the input checks
//! libibverbs makes before it asks the provider (verbs.c), so the shim can tell a request
//! rdma-core would reject from one it would carry out.

use ibverbs_sys as sys;

pub const CHANGE_TRANSLATION: i32 = sys::IBV_REREG_MR_CHANGE_TRANSLATION as i32;
pub const CHANGE_PD: i32 = sys::IBV_REREG_MR_CHANGE_PD as i32;
pub const CHANGE_ACCESS: i32 = sys::IBV_REREG_MR_CHANGE_ACCESS as i32;
/// Every flag rdma-core knows; other bits are IBV_REREG_MR_ERR_INPUT.
pub const FLAGS_SUPPORTED: i32 = sys::IBV_REREG_MR_FLAGS_SUPPORTED as i32;

/// Old MR valid, input rejected by libibverbs.
pub const ERR_INPUT: i32 = sys::IBV_REREG_MR_ERR_INPUT;
pub const ERR_DONT_FORK_NEW: i32 = sys::IBV_REREG_MR_ERR_DONT_FORK_NEW;
/// The new translation is in place; only madvise on the old range failed.
pub const ERR_DO_FORK_OLD: i32 = sys::IBV_REREG_MR_ERR_DO_FORK_OLD;
/// The provider's command failed (a provider without rereg: errno EOPNOTSUPP); the caller must
/// not use the MR any more, only deregister it.
pub const ERR_CMD: i32 = sys::IBV_REREG_MR_ERR_CMD;
pub const ERR_CMD_AND_DO_FORK_NEW: i32 = sys::IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW;

const FLAG_NAMES: [(&str, i32); 3] =
    [("CHANGE_TRANSLATION", CHANGE_TRANSLATION), ("CHANGE_PD", CHANGE_PD), ("CHANGE_ACCESS", CHANGE_ACCESS)];

/// `CHANGE_TRANSLATION|CHANGE_ACCESS`; unknown bits in hex, `0` for none.
pub fn describe_flags(flags: i32) -> String {
    let mut parts: Vec<String> =
        FLAG_NAMES.iter().filter(|(_, b)| flags & b != 0).map(|(n, _)| n.to_string()).collect();
    let rest = flags & !FLAGS_SUPPORTED;
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join("|")
    }
}

/// The name of a return code (`IBV_REREG_MR_ERR_CMD`); None for 0 and codes rdma-core does not
/// define.
pub fn ret_name(ret: i32) -> Option<&'static str> {
    Some(match ret {
        ERR_INPUT => "IBV_REREG_MR_ERR_INPUT",
        ERR_DONT_FORK_NEW => "IBV_REREG_MR_ERR_DONT_FORK_NEW",
        ERR_DO_FORK_OLD => "IBV_REREG_MR_ERR_DO_FORK_OLD",
        ERR_CMD => "IBV_REREG_MR_ERR_CMD",
        ERR_CMD_AND_DO_FORK_NEW => "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW",
        _ => return None,
    })
}

/// True when the MR has the new translation after the call returned `ret` (success, or only
/// the old range's fork state could not be restored).
pub fn translated(flags: i32, ret: i32) -> bool {
    flags & CHANGE_TRANSLATION != 0 && (ret == 0 || ret == ERR_DO_FORK_OLD)
}

/// True when the call changed the MR (`ret` 0 or IBV_REREG_MR_ERR_DO_FORK_OLD).
pub fn applied(ret: i32) -> bool {
    ret == 0 || ret == ERR_DO_FORK_OLD
}

/// libibverbs' own checks (verbs.c, before the provider is asked; the MR type check aside):
/// unknown flags, a new translation without address or length, access flags without
/// CHANGE_ACCESS. True: rdma-core answers IBV_REREG_MR_ERR_INPUT with errno EINVAL.
pub fn input_rejected(flags: i32, addr: u64, length: u64, access: i32) -> bool {
    flags & !FLAGS_SUPPORTED != 0
        || (flags & CHANGE_TRANSLATION != 0 && (addr == 0 || length == 0))
        || (access != 0 && flags & CHANGE_ACCESS == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_rdma_cores() {
        assert_eq!((CHANGE_TRANSLATION, CHANGE_PD, CHANGE_ACCESS, FLAGS_SUPPORTED), (1, 2, 4, 7));
        assert_eq!(
            [ERR_INPUT, ERR_DONT_FORK_NEW, ERR_DO_FORK_OLD, ERR_CMD, ERR_CMD_AND_DO_FORK_NEW],
            [-1, -2, -3, -4, -5]
        );
        assert_eq!(ret_name(-4), Some("IBV_REREG_MR_ERR_CMD"));
        assert_eq!((ret_name(0), ret_name(-6)), (None, None));
    }

    #[test]
    fn flags_read_as_names() {
        assert_eq!(describe_flags(5), "CHANGE_TRANSLATION|CHANGE_ACCESS");
        assert_eq!(describe_flags(0), "0");
        assert_eq!(describe_flags(0x12), "CHANGE_PD|0x10");
    }

    #[test]
    fn input_checks_are_libibverbs() {
        assert!(!input_rejected(CHANGE_TRANSLATION, 0x1000, 4096, 0));
        assert!(input_rejected(CHANGE_TRANSLATION, 0, 4096, 0), "no address");
        assert!(input_rejected(CHANGE_TRANSLATION, 0x1000, 0, 0), "no length");
        assert!(input_rejected(CHANGE_PD, 0, 0, 1), "access without CHANGE_ACCESS");
        assert!(!input_rejected(CHANGE_ACCESS, 0, 0, 1));
        assert!(input_rejected(8, 0, 0, 0), "unknown flag");
        assert!(!input_rejected(0, 0, 0, 0));
        assert!(translated(CHANGE_TRANSLATION, ERR_DO_FORK_OLD) && !translated(CHANGE_TRANSLATION, ERR_CMD));
        assert!(!translated(CHANGE_PD, 0) && applied(0) && !applied(ERR_INPUT));
    }
}
