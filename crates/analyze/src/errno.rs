//! errno numbers, names and the strerror() texts libraries print in their place.

/// The errnos a failed registration reports and that this module recognises in text (names and
/// numbers from crates/errno's table; other numbers in a line are sizes, addresses, ports).
const RECOGNISED: &[&str] = &[
    "EPERM",
    "ENOENT",
    "EIO",
    "EAGAIN",
    "ENOMEM",
    "EACCES",
    "EFAULT",
    "EBUSY",
    "ENODEV",
    "EINVAL",
    "ENOSPC",
    "ERANGE",
    "ENOSYS",
    "EPROTONOSUPPORT",
    "EOPNOTSUPP",
    "EREMOTEIO",
    "ENOTSUPP",
    "ENOKEY",
];

fn recognised() -> impl Iterator<Item = &'static mrshim_errno::Errno> {
    mrshim_errno::TABLE.iter().filter(|e| RECOGNISED.contains(&e.name))
}

/// Names libraries print for an errno that glibc spells differently. libfabric's FI_ENOKEY is its own
/// number (266, include/rdma/fi_errno.h) with glibc's ENOKEY text. uGNI prints `gni_return_t` names
/// where others print an errno; libfabric's GNI provider maps them (prov/gni/src/gnix_util.c,
/// `gnix_rc_table`): INVALID_PARAM, ALIGNMENT_ERROR and NO_MATCH to EINVAL, PERMISSION_ERROR to EACCES,
/// ILLEGAL_OP to EOPNOTSUPP, ERROR_NOMEM to ENOMEM (ERROR_RESOURCE, EBUSY there, is read as a full
/// registration table by the vocabulary and is left out here).
const ALIASES: &[(&str, i32)] = &[
    ("ENOTSUP", 95),
    ("FI_EOPNOTSUPP", 95),
    ("FI_ENOMEM", 12),
    ("FI_EINVAL", 22),
    ("FI_ENOKEY", ENOKEY),
    ("GNI_RC_INVALID_PARAM", EINVAL),
    ("GNI_RC_ALIGNMENT_ERROR", EINVAL),
    ("GNI_RC_NO_MATCH", EINVAL),
    ("GNI_RC_PERMISSION_ERROR", EACCES),
    ("GNI_RC_ILLEGAL_OP", EOPNOTSUPP),
    ("GNI_RC_ERROR_NOMEM", ENOMEM),
];

/// Forms that put the number after a key: `errno 12`, `errno=12`, `errno: 12`, `errno = 12`, `error code: 14`,
/// `error_code=14`, `error=93`, `RC: -22`, `ret=-12`, `ret is:-12`, `status -95`, `code -14`, `err -12`,
/// `Os { code: 12`, `with code=22`. Longest keys first so `error code` wins over `error`.
const KEYED: &[&str] = &[
    "os { code",
    "error code",
    "error_code",
    "errno",
    "ret is",
    "retcode",
    "return code",
    "status",
    "error",
    "code",
    "ret",
    "rc",
    "err",
];

pub const EPERM: i32 = 1;
pub const EAGAIN: i32 = 11;
pub const ENOMEM: i32 = 12;
pub const EACCES: i32 = 13;
pub const EFAULT: i32 = 14;
pub const EBUSY: i32 = 16;
pub const ENOSPC: i32 = 28;
pub const EINVAL: i32 = 22;
pub const EPROTONOSUPPORT: i32 = 93;
pub const EOPNOTSUPP: i32 = 95;
/// The kernel-internal "not supported" that leaks to user space from some drivers (glibc prints
/// "Unknown error 524").
pub const ENOTSUPP: i32 = 524;
/// "Required key not available": the memory key asked for is in use or missing (libfabric's FI_ENOKEY).
pub const ENOKEY: i32 = 126;

/// An errno that says "not supported": EOPNOTSUPP (ENOTSUP), EPROTONOSUPPORT, or the kernel's
/// internal ENOTSUPP.
pub fn not_supported(e: Option<i32>) -> bool {
    matches!(e, Some(EOPNOTSUPP) | Some(EPROTONOSUPPORT) | Some(ENOTSUPP))
}

pub fn name(e: i32) -> String {
    mrshim_errno::name(e).map_or_else(|| format!("errno {e}"), String::from)
}

pub use mrshim_errno::text;

/// The errno `s` reports, in any of the forms people's tools print: strerror text, errno names, the keyed
/// forms in [`KEYED`], `[14]`/`(22)` after a failure, negative returns (`failed -12`, `return -22`,
/// `: -22`) and libfabric's negative FI_ errno. Numbers that are no errno this table knows are ignored.
pub fn find(s: &str) -> Option<i32> {
    if let Some(n) = named(s) {
        return Some(n);
    }
    let lower = s.to_ascii_lowercase();
    for key in KEYED {
        let mut from = 0;
        while let Some(i) = lower[from..].find(key) {
            let at = from + i;
            from = at + key.len();
            // a key is a word of its own ("rc" not in "source", "ret" not in "secret")
            if at > 0 && (lower.as_bytes()[at - 1].is_ascii_alphanumeric() || lower.as_bytes()[at - 1] == b'_') {
                continue;
            }
            // a process's exit code is no errno (`Process completed with exit code 1.`)
            if lower[..at].trim_end().ends_with("exit") {
                continue;
            }
            if let Some(n) = after_key(key, &lower[from..]) {
                return Some(n);
            }
        }
    }
    bracketed(s).or_else(|| negative_return(s))
}

/// The texts and names of [`RECOGNISED`] and the [`ALIASES`], found in one pass: a strerror text in
/// any casing, an errno name as a word of its own in capitals. The first errno of the table that
/// occurs wins (as if each were looked for in turn), then the aliases.
struct Names {
    /// word -> (priority, errno, is a name: exact case and word boundaries required)
    what: Vec<(usize, i32, bool)>,
    words: Vec<&'static str>,
}

fn names() -> &'static Names {
    static N: std::sync::LazyLock<Names> = std::sync::LazyLock::new(|| {
        let mut words: Vec<&'static str> = Vec::new();
        let mut what = Vec::new();
        for (i, e) in recognised().enumerate() {
            words.push(e.text);
            what.push((i, e.number, false));
            words.push(e.name);
            what.push((i, e.number, true));
        }
        for (i, (nm, n)) in ALIASES.iter().enumerate() {
            words.push(nm);
            what.push((RECOGNISED.len() + i, *n, true));
        }
        Names { what, words }
    });
    &N
}

/// The words [`find`] looks for first, for the line scanner ([`crate::scan`]).
pub fn words() -> Vec<String> {
    names().words.iter().map(|w| w.to_string()).collect()
}

/// The errno a line names by its symbolic name (`EFAULT`, a word of its own) or its strerror text
/// (`Bad address`), without the numeric forms [`find`] also reads.
pub fn named(s: &str) -> Option<i32> {
    let n = names();
    let b = s.as_bytes();
    let mut best: Option<(usize, i32)> = None;
    crate::scan::each(s, crate::scan::Set::Errno, |w, r| {
        let (prio, num, word) = n.what[w as usize];
        if best.is_some_and(|(p, _)| p <= prio) {
            return;
        }
        if word {
            let exact = b[r.clone()] == *n.words[w as usize].as_bytes();
            let before = r.start == 0 || !b[r.start - 1].is_ascii_alphanumeric();
            let after = r.end >= b.len() || !b[r.end].is_ascii_alphanumeric();
            if !(exact && before && after) {
                return;
            }
        }
        best = Some((prio, num));
    });
    best.map(|b| b.1)
}

/// The known errno right after a key of [`KEYED`] (`rest`, lower-case, follows the key): `12` in
/// `err 12`, `errno=12`, `errno is 12`.
pub fn after_key(key: &str, rest: &str) -> Option<i32> {
    number_after(rest).or_else(|| in_words(key, rest))
}

/// The number a sentence gives after `errno` or a return code's name in words: `errno is 12`, `errno
/// was 22`, `errno set to 14`, `errno == 12`, `return code is -22`.
fn in_words(key: &str, rest: &str) -> Option<i32> {
    if !matches!(key, "errno" | "error code" | "return code" | "retcode") {
        return None;
    }
    let t = rest.trim_start();
    let t = ["is ", "was ", "set to ", "== ", "equals ", "of "].iter().find_map(|w| t.strip_prefix(w))?;
    let t = t.trim_start();
    let t = t.strip_prefix('-').unwrap_or(t);
    known(t)
}

/// A known errno right after a key: separators ` `, `:`, `=`, `(` and an optional minus, then digits.
fn number_after(rest: &str) -> Option<i32> {
    let t = rest.trim_start_matches([' ', ':', '=', '\t']);
    if t.len() == rest.len() && !rest.starts_with('-') {
        return None;
    }
    let t = t.strip_prefix('-').unwrap_or(t);
    known(t)
}

fn known(t: &str) -> Option<i32> {
    let digits = &t[..t.bytes().take_while(u8::is_ascii_digit).count()];
    let n: i32 = digits.parse().ok()?;
    // a longer number (an address, a size, a version) is not an errno; a sentence's full stop ends it
    let rest = &t[digits.len()..];
    let decimal = rest.strip_prefix('.').is_some_and(|r| r.starts_with(|c: char| c.is_ascii_alphanumeric()));
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric()) || decimal {
        return None;
    }
    recognised().any(|e| e.number == n).then_some(n)
}

/// `[14]`, `[-22]`, `(22)` holding only a known errno.
fn bracketed(s: &str) -> Option<i32> {
    for (open, close) in [('[', ']'), ('(', ')')] {
        for part in s.split(open).skip(1) {
            let Some(inner) = part.split(close).next() else { continue };
            let inner = inner.trim();
            let inner = inner.strip_prefix('-').unwrap_or(inner);
            if !inner.is_empty() && inner.len() <= 3 && inner.bytes().all(|b| b.is_ascii_digit()) {
                if let Some(n) = known(inner) {
                    return Some(n);
                }
            }
        }
    }
    None
}

/// `failed -12`, `return -22`, `returned -14`, `: -22` (libfabric's `-FI_E*` are the errno negated).
/// A return of -1 is C's "failed, see errno", not EPERM.
fn negative_return(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    for (i, _) in s.match_indices('-') {
        let before_ok = i == 0 || matches!(b[i - 1], b' ' | b':' | b'=' | b'(' | b'[');
        let minus_one = s[i + 1..].starts_with('1') && !s[i + 2..].starts_with(|c: char| c.is_ascii_digit());
        if before_ok && !minus_one {
            if let Some(n) = known(&s[i + 1..]) {
                return Some(n);
            }
        }
    }
    None
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

    /// Every form the issue lists, as people's tools print them.
    #[test]
    fn forms() {
        for (s, e) in [
            ("ibv_reg_mr failed: bad address", 14),
            ("RegisterRdmaMemoryRegion failed! errno:22 (Invalid argument)", 22),
            ("reg_mr failed errno = 12", 12),
            ("reg_mr failed errno: 12", 12),
            ("ibv_reg_mr failed [error code: 14]", 14),
            ("ibv_reg_mr() failed error_code=14", 14),
            ("Failed to register memory 0x2e1cbac200: [14]", 14),
            ("register mr failed (12)", 12),
            ("RC: -14, Error:", 14),
            ("Unable to register memory (type = 1) for device 0. RC: 12, Error:", 12),
            ("fi_mr_reg failed, ret is:-12", 12),
            ("ret=-12", 12),
            ("reg mr status -95", 95),
            ("Failed to map MR buffer: -22", 22),
            ("Failed to set up initiator: ... code -14", 14),
            ("register_memory: Os { code: 12, kind: OutOfMemory, message: \"Cannot allocate memory\" }", 12),
            ("register_memory: Os { code: 14, kind: Uncategorized }", 14),
            ("error in gdr_pin_buffer with code=22", 22),
            ("nvidia_p2p_get_pages(va=7ff512200000 len=65536) failed [ret = -22]", 22),
            ("infiniband efa_0: Failed to register mr [-12]", 12),
            ("fi_mr_regattr failed: Operation not supported", 95),
            ("returned ENOTSUP", 95),
            ("Failed to process command REG_MR (opcode 7) comp_status 1 err -12", 12),
            ("failed to register memory with uGNI, ret=GNI_RC_INVALID_PARAM", 22),
            ("GNI_MemRegister returned GNI_RC_PERMISSION_ERROR", 13),
            ("Error: Required key not available (4294967030)", 126),
            ("fi_mr_regattr returned -FI_ENOKEY", 126),
        ] {
            assert_eq!(find(s), Some(e), "{s}");
        }
        // a sentence's words around the number
        for (s, e) in [
            ("ibv_reg_mr returns NULL and errno is 22", 22),
            ("the errno was 14.", 14),
            ("errno set to 12", 12),
            ("errno == 12", 12),
            ("the return code is -22", 22),
            ("ibv_reg_mr fails with errno 95.", 95),
            ("fi_mr_reg failed with -12.", 12),
        ] {
            assert_eq!(find(s), Some(e), "{s}");
        }
        for s in [
            "addr 0x7f0000001000 len=4096",
            "ibv_reg_mr returns -1",
            "errno 12.5",
            "version 14.0.1",
            "fi_mr_reg returned -1 (see errno)",
            "the errno is unknown, 12 ranks failed",
            "##[error]Process completed with exit code 1.",
            "size:943718400",
            "device 4",
            "GPU 0: [123456]",
            "source 12",
            "XGNI_RC_INVALID_PARAMS",
        ] {
            assert_eq!(find(s), None, "{s}");
        }
    }
}
