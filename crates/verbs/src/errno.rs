//! errno names as users see them in logs (`EINVAL (22)`), both ways.

/// The errno values that memory registration and the verbs around it report.
pub const TABLE: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("EBADF", libc::EBADF),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("ENFILE", libc::ENFILE),
    ("EMFILE", libc::EMFILE),
    ("ENOSPC", libc::ENOSPC),
    ("ERANGE", libc::ERANGE),
    ("ENOSYS", libc::ENOSYS),
    ("EPROTONOSUPPORT", libc::EPROTONOSUPPORT),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("EADDRINUSE", libc::EADDRINUSE),
    ("ECONNREFUSED", libc::ECONNREFUSED),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("ECANCELED", libc::ECANCELED),
];

/// Accepted spellings, for error messages.
pub const NAMES_HELP: &str = "EPERM, ENOENT, EINTR, EIO, ENXIO, E2BIG, EBADF, EAGAIN, ENOMEM, EACCES, EFAULT, \
EBUSY, EEXIST, ENODEV, EINVAL, ENFILE, EMFILE, ENOSPC, ERANGE, ENOSYS, EPROTONOSUPPORT, EOPNOTSUPP, \
EADDRINUSE, ECONNREFUSED, ETIMEDOUT, ECANCELED (or a positive number)";

pub fn name(errno: i32) -> Option<&'static str> {
    TABLE.iter().find(|(_, n)| *n == errno).map(|(s, _)| *s)
}

/// `EINVAL`, `einval` or `22`.
pub fn parse(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (n > 0 && n < 4096).then_some(n);
    }
    TABLE.iter().find(|(k, _)| k.eq_ignore_ascii_case(s)).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ways() {
        assert_eq!(name(22), Some("EINVAL"));
        assert_eq!(parse("enomem"), Some(12));
        assert_eq!(parse("14"), Some(14));
        assert_eq!(parse("0"), None);
        assert_eq!(parse("EWHAT"), None);
        for (n, v) in TABLE {
            assert!(NAMES_HELP.contains(n));
            assert_eq!(parse(n), Some(*v));
        }
    }
}
