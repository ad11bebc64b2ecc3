//! Names for access flags and errno values, as every part of mrshim prints them.
//! Plain tables, no allocation on the lookup paths.

/// `IBV_ACCESS_*` bits in ascending order, with the name mrshim prints (the suffix after
/// `IBV_ACCESS_`). Bits not listed print as hex (`0x40000`).
pub const ACCESS_FLAGS: &[(u32, &str)] = &[
    (1 << 0, "LOCAL_WRITE"),
    (1 << 1, "REMOTE_WRITE"),
    (1 << 2, "REMOTE_READ"),
    (1 << 3, "REMOTE_ATOMIC"),
    (1 << 4, "MW_BIND"),
    (1 << 5, "ZERO_BASED"),
    (1 << 6, "ON_DEMAND"),
    (1 << 7, "HUGETLB"),
    (1 << 8, "FLUSH_GLOBAL"),
    (1 << 9, "FLUSH_PERSISTENT"),
    (1 << 20, "RELAXED_ORDERING"),
];

pub const ACCESS_RELAXED_ORDERING: u32 = 1 << 20;
/// rdma-core's IBV_ACCESS_OPTIONAL_RANGE: bits the library may silently drop.
pub const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

/// Calls `f` with each set bit's name, lowest bit first; unknown bits as `0x...` in one piece.
pub fn for_each_access_name(access: u32, mut f: impl FnMut(AccessName)) {
    let mut rest = access;
    for &(bit, name) in ACCESS_FLAGS {
        if access & bit != 0 {
            f(AccessName::Known(name));
            rest &= !bit;
        }
    }
    if rest != 0 {
        f(AccessName::Unknown(rest));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessName {
    Known(&'static str),
    /// The bits no name covers.
    Unknown(u32),
}

impl std::fmt::Display for AccessName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessName::Known(n) => f.write_str(n),
            AccessName::Unknown(b) => write!(f, "{b:#x}"),
        }
    }
}

/// Decoded names, e.g. `["LOCAL_WRITE", "REMOTE_WRITE", "RELAXED_ORDERING"]`.
pub fn access_names(access: u32) -> Vec<String> {
    let mut v = Vec::new();
    for_each_access_name(access, |n| v.push(n.to_string()));
    v
}

/// `LOCAL_WRITE|REMOTE_WRITE|...`; `0` when no bit is set.
pub fn access_string(access: u32) -> String {
    let mut s = String::new();
    for_each_access_name(access, |n| {
        if !s.is_empty() {
            s.push('|');
        }
        s.push_str(&n.to_string());
    });
    if s.is_empty() {
        s.push('0');
    }
    s
}

/// Parses one flag name (with or without the `IBV_ACCESS_` prefix, any case) to its bit.
pub fn access_flag_by_name(name: &str) -> Option<u32> {
    let n = name.trim();
    let n = n.strip_prefix("IBV_ACCESS_").or_else(|| n.strip_prefix("ibv_access_")).unwrap_or(n);
    ACCESS_FLAGS.iter().find(|(_, f)| f.eq_ignore_ascii_case(n)).map(|&(b, _)| b)
}

/// Linux errno values mrshim can name.
pub const ERRNO_NAMES: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::ESRCH, "ESRCH"),
    (libc::EINTR, "EINTR"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::E2BIG, "E2BIG"),
    (libc::ENOEXEC, "ENOEXEC"),
    (libc::EBADF, "EBADF"),
    (libc::ECHILD, "ECHILD"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::ENOTBLK, "ENOTBLK"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::EXDEV, "EXDEV"),
    (libc::ENODEV, "ENODEV"),
    (libc::ENOTDIR, "ENOTDIR"),
    (libc::EISDIR, "EISDIR"),
    (libc::EINVAL, "EINVAL"),
    (libc::ENFILE, "ENFILE"),
    (libc::EMFILE, "EMFILE"),
    (libc::ENOTTY, "ENOTTY"),
    (libc::ETXTBSY, "ETXTBSY"),
    (libc::EFBIG, "EFBIG"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::ESPIPE, "ESPIPE"),
    (libc::EROFS, "EROFS"),
    (libc::EMLINK, "EMLINK"),
    (libc::EPIPE, "EPIPE"),
    (libc::EDOM, "EDOM"),
    (libc::ERANGE, "ERANGE"),
    (libc::EDEADLK, "EDEADLK"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG"),
    (libc::ENOLCK, "ENOLCK"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::ENOTEMPTY, "ENOTEMPTY"),
    (libc::ELOOP, "ELOOP"),
    (libc::ENOMSG, "ENOMSG"),
    (libc::EIDRM, "EIDRM"),
    (libc::ENODATA, "ENODATA"),
    (libc::ETIME, "ETIME"),
    (libc::ENOLINK, "ENOLINK"),
    (libc::EPROTO, "EPROTO"),
    (libc::EBADMSG, "EBADMSG"),
    (libc::EOVERFLOW, "EOVERFLOW"),
    (libc::EILSEQ, "EILSEQ"),
    (libc::ENOTSOCK, "ENOTSOCK"),
    (libc::EMSGSIZE, "EMSGSIZE"),
    (libc::EPROTOTYPE, "EPROTOTYPE"),
    (libc::ENOPROTOOPT, "ENOPROTOOPT"),
    (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
    (libc::ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::EAFNOSUPPORT, "EAFNOSUPPORT"),
    (libc::EADDRINUSE, "EADDRINUSE"),
    (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
    (libc::ENETDOWN, "ENETDOWN"),
    (libc::ENETUNREACH, "ENETUNREACH"),
    (libc::ECONNABORTED, "ECONNABORTED"),
    (libc::ECONNRESET, "ECONNRESET"),
    (libc::ENOBUFS, "ENOBUFS"),
    (libc::EISCONN, "EISCONN"),
    (libc::ENOTCONN, "ENOTCONN"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
    (libc::ECONNREFUSED, "ECONNREFUSED"),
    (libc::EHOSTUNREACH, "EHOSTUNREACH"),
    (libc::EALREADY, "EALREADY"),
    (libc::EINPROGRESS, "EINPROGRESS"),
    (libc::ESTALE, "ESTALE"),
    (libc::EDQUOT, "EDQUOT"),
    (libc::ECANCELED, "ECANCELED"),
    (libc::EOWNERDEAD, "EOWNERDEAD"),
    (libc::ENOTRECOVERABLE, "ENOTRECOVERABLE"),
    (libc::EHWPOISON, "EHWPOISON"),
];

/// `EINVAL` for 22; `None` for numbers not in [`ERRNO_NAMES`].
pub fn errno_name(errno: i32) -> Option<&'static str> {
    ERRNO_NAMES.iter().find(|(n, _)| *n == errno).map(|&(_, s)| s)
}

/// 22 for `EINVAL` (case-insensitive).
pub fn errno_by_name(name: &str) -> Option<i32> {
    ERRNO_NAMES.iter().find(|(_, s)| s.eq_ignore_ascii_case(name.trim())).map(|&(n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_access_with_relaxed_ordering() {
        assert_eq!(
            access_string(0x10000f),
            "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING"
        );
        assert_eq!(access_names(0x7), vec!["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ"]);
        assert_eq!(ACCESS_RELAXED_ORDERING, 0x100000);
    }

    #[test]
    fn unknown_bits_are_hex_and_zero_is_zero() {
        assert_eq!(access_string(0), "0");
        assert_eq!(access_string(0x1 | 0x40000 | 0x80000000), "LOCAL_WRITE|0x80040000");
        assert!(access_names(0).is_empty());
    }

    #[test]
    fn table_matches_rdma_core_constants() {
        use crate::ibv_access_flags as f;
        assert_eq!(access_flag_by_name("LOCAL_WRITE"), Some(f::IBV_ACCESS_LOCAL_WRITE.0));
        assert_eq!(access_flag_by_name("IBV_ACCESS_REMOTE_ATOMIC"), Some(f::IBV_ACCESS_REMOTE_ATOMIC.0));
        assert_eq!(access_flag_by_name("relaxed_ordering"), Some(f::IBV_ACCESS_RELAXED_ORDERING.0));
        assert_eq!(access_flag_by_name("FLUSH_PERSISTENT"), Some(f::IBV_ACCESS_FLUSH_PERSISTENT.0));
        assert_eq!(access_flag_by_name("HUGETLB"), Some(f::IBV_ACCESS_HUGETLB.0));
        assert_eq!(access_flag_by_name("NOPE"), None);
        assert_eq!(crate::extra::IBV_ACCESS_OPTIONAL_FIRST, ACCESS_RELAXED_ORDERING);
        // ascending, distinct bits
        for w in ACCESS_FLAGS.windows(2) {
            assert!(w[0].0 < w[1].0);
        }
    }

    #[test]
    fn errno_round_trip() {
        assert_eq!(errno_name(22), Some("EINVAL"));
        assert_eq!(errno_name(12), Some("ENOMEM"));
        assert_eq!(errno_name(95), Some("EOPNOTSUPP"));
        assert_eq!(errno_name(9999), None);
        assert_eq!(errno_by_name("eperm"), Some(1));
        for &(n, s) in ERRNO_NAMES {
            assert_eq!(errno_by_name(s), Some(n));
            assert_eq!(errno_name(n), Some(s));
        }
    }
}
