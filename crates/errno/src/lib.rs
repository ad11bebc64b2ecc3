//! Linux errno numbers, their names and glibc's strerror() texts, both ways: the one table the shim
//! (record `errno_name`, MRSHIM_RETRY/MRSHIM_INJECT values), the simulator (fault values) and the
//! analyzer (texts other libraries print in a number's place) share. Numbers are Linux's generic
//! ones (x86_64 and aarch64 alike), so logs from any such host read the same; a test checks them
//! against libc on the build host.

pub struct Errno {
    pub number: i32,
    pub name: &'static str,
    /// What glibc's strerror() prints for it.
    pub text: &'static str,
}

const fn e(number: i32, name: &'static str, text: &'static str) -> Errno {
    Errno { number, name, text }
}

/// The errno values memory registration and the verbs around it report.
pub const TABLE: &[Errno] = &[
    e(1, "EPERM", "Operation not permitted"),
    e(2, "ENOENT", "No such file or directory"),
    e(4, "EINTR", "Interrupted system call"),
    e(5, "EIO", "Input/output error"),
    e(6, "ENXIO", "No such device or address"),
    e(7, "E2BIG", "Argument list too long"),
    e(9, "EBADF", "Bad file descriptor"),
    e(11, "EAGAIN", "Resource temporarily unavailable"),
    e(12, "ENOMEM", "Cannot allocate memory"),
    e(13, "EACCES", "Permission denied"),
    e(14, "EFAULT", "Bad address"),
    e(16, "EBUSY", "Device or resource busy"),
    e(17, "EEXIST", "File exists"),
    e(19, "ENODEV", "No such device"),
    e(22, "EINVAL", "Invalid argument"),
    e(23, "ENFILE", "Too many open files in system"),
    e(24, "EMFILE", "Too many open files"),
    e(28, "ENOSPC", "No space left on device"),
    e(34, "ERANGE", "Numerical result out of range"),
    e(38, "ENOSYS", "Function not implemented"),
    e(93, "EPROTONOSUPPORT", "Protocol not supported"),
    e(95, "EOPNOTSUPP", "Operation not supported"),
    e(98, "EADDRINUSE", "Address already in use"),
    e(110, "ETIMEDOUT", "Connection timed out"),
    e(111, "ECONNREFUSED", "Connection refused"),
    e(121, "EREMOTEIO", "Remote I/O error"),
    e(125, "ECANCELED", "Operation canceled"),
    // A memory key the caller asked for is in use or missing: libfabric's FI_ENOKEY (266, with the
    // same text in fi_strerror) from its MR map and providers, glibc's ENOKEY for the same words.
    e(126, "ENOKEY", "Required key not available"),
    // The kernel-internal "not supported" (include/linux/errno.h: not for user space) that some
    // drivers still return from a registration (e.g. a dmabuf mapping); glibc has no text for it.
    e(524, "ENOTSUPP", "Unknown error 524"),
];

pub fn lookup(number: i32) -> Option<&'static Errno> {
    TABLE.iter().find(|e| e.number == number)
}

pub fn name(number: i32) -> Option<&'static str> {
    lookup(number).map(|e| e.name)
}

/// glibc's strerror() text, "" for a number outside the table.
pub fn text(number: i32) -> &'static str {
    lookup(number).map_or("", |e| e.text)
}

/// `EINVAL`, `einval` or `22` (a positive number below 4096, known or not).
pub fn parse(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (n > 0 && n < 4096).then_some(n);
    }
    TABLE.iter().find(|e| e.name.eq_ignore_ascii_case(s)).map(|e| e.number)
}

/// The accepted spellings, for error messages.
pub fn names_help() -> String {
    let names: Vec<&str> = TABLE.iter().map(|e| e.name).collect();
    format!("{} (or a positive number)", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_texts_are_this_hosts() {
        for e in TABLE {
            // SAFETY: strerror returns a valid NUL-terminated string; the test is single-threaded
            // in what it reads before the next call.
            let text = unsafe { std::ffi::CStr::from_ptr(libc::strerror(e.number)) };
            assert_eq!(text.to_str().unwrap(), e.text, "{}", e.name);
        }
        let libc_values = [
            (libc::EPERM, "EPERM"),
            (libc::EINTR, "EINTR"),
            (libc::EBADF, "EBADF"),
            (libc::ENOMEM, "ENOMEM"),
            (libc::EFAULT, "EFAULT"),
            (libc::EINVAL, "EINVAL"),
            (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
            (libc::EOPNOTSUPP, "EOPNOTSUPP"),
            (libc::ETIMEDOUT, "ETIMEDOUT"),
            (libc::ECONNREFUSED, "ECONNREFUSED"),
            (libc::EREMOTEIO, "EREMOTEIO"),
            (libc::ECANCELED, "ECANCELED"),
            (libc::ENOKEY, "ENOKEY"),
        ];
        for (n, name) in libc_values {
            assert_eq!(super::name(n), Some(name));
        }
    }

    #[test]
    fn both_ways() {
        assert_eq!(name(22), Some("EINVAL"));
        assert_eq!(text(14), "Bad address");
        assert_eq!(parse("enomem"), Some(12));
        assert_eq!(parse("14"), Some(14));
        assert_eq!(parse("0"), None);
        assert_eq!(parse("EWHAT"), None);
        for e in TABLE {
            assert!(names_help().contains(e.name));
            assert_eq!(parse(e.name), Some(e.number));
        }
    }
}
