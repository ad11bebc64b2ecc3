//! errno numbers, names and the strerror() texts libraries print in their place.

const TABLE: &[(i32, &str, &str)] = &[
    (1, "EPERM", "Operation not permitted"),
    (2, "ENOENT", "No such file or directory"),
    (5, "EIO", "Input/output error"),
    (11, "EAGAIN", "Resource temporarily unavailable"),
    (12, "ENOMEM", "Cannot allocate memory"),
    (13, "EACCES", "Permission denied"),
    (14, "EFAULT", "Bad address"),
    (16, "EBUSY", "Device or resource busy"),
    (19, "ENODEV", "No such device"),
    (22, "EINVAL", "Invalid argument"),
    (28, "ENOSPC", "No space left on device"),
    (38, "ENOSYS", "Function not implemented"),
    (93, "EPROTONOSUPPORT", "Protocol not supported"),
    (95, "EOPNOTSUPP", "Operation not supported"),
];

pub const EPERM: i32 = 1;
pub const EAGAIN: i32 = 11;
pub const ENOMEM: i32 = 12;
pub const EACCES: i32 = 13;
pub const EFAULT: i32 = 14;
pub const EINVAL: i32 = 22;
pub const EPROTONOSUPPORT: i32 = 93;
pub const EOPNOTSUPP: i32 = 95;

pub fn name(e: i32) -> String {
    TABLE.iter().find(|t| t.0 == e).map(|t| t.1.to_string()).unwrap_or_else(|| format!("errno {e}"))
}

pub fn text(e: i32) -> &'static str {
    TABLE.iter().find(|t| t.0 == e).map(|t| t.2).unwrap_or("")
}

/// The first strerror text, errno name, or "errno N"/"-N"/"error=N" that `s` contains.
pub fn find(s: &str) -> Option<i32> {
    for (n, nm, txt) in TABLE {
        if s.contains(txt) || contains_word(s, nm) {
            return Some(*n);
        }
    }
    for pat in ["errno ", "errno=", "error=", "error ", "return -", "returned -", "failed -", "status -", "err -", "[-"]
    {
        if let Some(i) = s.find(pat) {
            let digits: String = s[i + pat.len()..].chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(n) = digits.parse::<i32>() {
                if TABLE.iter().any(|t| t.0 == n) {
                    return Some(n);
                }
            }
        }
    }
    None
}

fn contains_word(s: &str, w: &str) -> bool {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(i) = s[from..].find(w) {
        let at = from + i;
        let before = at == 0 || !b[at - 1].is_ascii_alphanumeric();
        let end = at + w.len();
        let after = end >= b.len() || !b[end].is_ascii_alphanumeric();
        if before && after {
            return true;
        }
        from = end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn finds() {
        assert_eq!(find("failed with error Invalid argument"), Some(22));
        assert_eq!(find("ibv_reg_mr_iova2 failed -12"), Some(12));
        assert_eq!(find("Couldn't allocate MR with error=93"), Some(93));
        assert_eq!(find("EFAULTS"), None);
        assert_eq!(find("got EFAULT here"), Some(14));
    }
}
