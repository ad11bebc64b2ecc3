//! The prefixes launchers, loggers and collectors put in front of a program's own line: ISO and syslog
//! timestamps, journald, container runtimes (CRI `stdout F`, docker compose `svc  | `), `srun --label`
//! (`0: `), `mpirun --tag-output` (`[1,0]<stderr>:`), pdsh/clush (`host: `), dmesg (`[  12.345678] `) and
//! glog (`E0511 07:42:36.355509 10240 file.cc:198] `), ctime stamps (Open MPI's `--timestamp-output`,
//! `dmesg -T`: `[Sun Dec  6 21:40:01 2026] `), torchrun (`[rank3]:`), Ray (`(RayWorker pid=123,
//! ip=10.0.0.1) `) and Python logging (`- nixl - ERROR - `, `ERROR:nixl:`, vLLM's `ERROR 12-06
//! 21:40:01 [core.py:88] `). Peeled off one after another; the host comes only from where a host
//! really is (syslog's host column, pdsh's label, Ray's ip), never from a timestamp.

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Frame<'a> {
    pub host: Option<&'a str>,
    pub rank: Option<i64>,
    pub pid: Option<u32>,
    /// The program's own text.
    pub body: &'a str,
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

pub fn split(line: &str) -> Frame<'_> {
    let mut f = Frame { body: line, ..Default::default() };
    for _ in 0..8 {
        let b = f.body;
        let next = journal_iso(b, &mut f.host, &mut f.pid)
            .or_else(|| iso_timestamp(b))
            .or_else(|| clock(b))
            .or_else(|| kube_prefix(b))
            .or_else(|| ctime(b))
            .or_else(|| bracketed_timestamp(b))
            .or_else(|| syslog(b, &mut f.host, &mut f.pid))
            .or_else(|| cri_stream(b))
            .or_else(|| dmesg_time(b))
            .or_else(|| tag_output(b, &mut f.rank))
            .or_else(|| srun_label(b, &mut f.rank))
            .or_else(|| torchrun(b, &mut f.rank))
            .or_else(|| ray(b, &mut f.host, &mut f.pid))
            .or_else(|| pylog(b))
            .or_else(|| glog(b, &mut f.pid))
            .or_else(|| compose(b))
            .or_else(|| pdsh(b, &mut f.host));
        match next {
            Some(rest) if rest.len() < b.len() => f.body = rest,
            _ => break,
        }
    }
    f
}

/// The first `": "` in the first `window` bytes of `s` (labels are short: no search through the
/// whole line for them).
fn colon_space(s: &str, window: usize) -> Option<usize> {
    let b = &s.as_bytes()[..s.len().min(window)];
    memchr::memchr_iter(b':', b).find(|&i| s.as_bytes().get(i + 1) == Some(&b' '))
}

fn digits(s: &str, n: usize) -> bool {
    s.len() >= n && s.as_bytes()[..n].iter().all(u8::is_ascii_digit)
}

/// `2024-05-01T10:00:00.123456Z `, `2024-05-01 10:00:00,123 `, with an optional zone.
fn iso_timestamp(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if !(digits(s, 4) && b.get(4) == Some(&b'-') && digits(&s[5..], 2) && b.get(7) == Some(&b'-')) {
        return None;
    }
    if !(digits(s.get(8..)?, 2) && matches!(b.get(10), Some(b'T' | b' ')) && digits(s.get(11..)?, 2)) {
        return None;
    }
    // the date and time may be separated by a space: then the time is a token of its own
    let from = if b[10] == b' ' { 11 } else { 0 };
    let end = from + s[from..].find(char::is_whitespace)?;
    let rest = s[end..].trim_start();
    // an optional zone written apart ("+00:00", "UTC")
    let rest = match rest.split_once(' ') {
        Some((z, r)) if z == "UTC" || ((z.starts_with('+') || z.starts_with('-')) && digits(&z[1..], 2)) => r,
        _ => rest,
    };
    Some(rest)
}

/// `journalctl -o short-iso`: `2026-12-07T10:00:00+0000 host prog[123]: ` (or `host kernel: `):
/// the host from its column.
fn journal_iso<'a>(s: &'a str, host: &mut Option<&'a str>, pid: &mut Option<u32>) -> Option<&'a str> {
    // the time and its zone are one token
    if !(digits(s, 4) && s.as_bytes().get(10) == Some(&b'T')) {
        return None;
    }
    let rest = iso_timestamp(s)?;
    let (h, p, r) = host_prog(rest)?;
    if !(p == "kernel" || p.ends_with(']')) {
        return None;
    }
    *host = Some(h);
    *pid = program_pid(p).or(*pid);
    Some(r)
}

/// `host prog[123]: rest` (syslog's and journald's columns after the time).
fn host_prog(t: &str) -> Option<(&str, &str, &str)> {
    let (h, rest) = t.split_once(' ')?;
    let (prog, rest) = rest.split_once(": ")?;
    (!prog.contains(' ') && !h.is_empty()).then_some((h, prog, rest))
}

/// The pid in `prog[123]`.
fn program_pid(prog: &str) -> Option<u32> {
    prog.split('[').nth(1).and_then(|p| p.strip_suffix(']')).and_then(|p| p.parse().ok())
}

/// A time of day alone in front of a line: `10:00:00  ` (Jenkins' timestamper, many loggers),
/// `10:00:00.123 `. Not `10:48:27: `, a label.
fn clock(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if !(digits(s, 2) && b.get(2) == Some(&b':') && digits(&s[3..], 2) && b.get(5) == Some(&b':')) {
        return None;
    }
    if !digits(&s[6..], 2) {
        return None;
    }
    let mut i = 8;
    if matches!(b.get(i), Some(b'.' | b',')) {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    (b.get(i) == Some(&b' ')).then(|| s[i..].trim_start())
}

/// `kubectl logs --prefix`: `[pod/trainer-0/main] ` (and stern's `[pod container] `-less forms are
/// not taken).
fn kube_prefix(s: &str) -> Option<&str> {
    let r = s.strip_prefix("[pod/")?;
    let end = r[..r.len().min(300)].find("] ")?;
    (!r[..end].contains(' ')).then(|| &r[end + 2..])
}

/// `Sun Dec  6 21:40:01 2026` (C's ctime: Open MPI's `--timestamp-output`, glued to its
/// `[1,0]<stderr>:` tag) and `[Sun Dec  6 21:40:01 2026] ` (`dmesg -T`).
fn ctime(s: &str) -> Option<&str> {
    const DAYS: [&str; 7] = ["Mon ", "Tue ", "Wed ", "Thu ", "Fri ", "Sat ", "Sun "];
    let (t, bracket) = match s.strip_prefix('[') {
        Some(t) => (t, true),
        None => (s, false),
    };
    if !DAYS.iter().any(|d| t.starts_with(d)) || !MONTHS.iter().any(|m| t[4..].starts_with(m)) {
        return None;
    }
    // `Dec  6 21:40:01 2026`: day, time, year
    let mut rest = t[7..].trim_start();
    let day = rest.find(' ')?;
    if !digits(rest, day) {
        return None;
    }
    rest = &rest[day + 1..];
    if !(digits(rest, 2) && rest.as_bytes().get(2) == Some(&b':') && rest.as_bytes().get(8) == Some(&b' ')) {
        return None;
    }
    rest = &rest[9..];
    if !digits(rest, 4) {
        return None;
    }
    rest = &rest[4..];
    if bracket {
        rest = rest.strip_prefix(']')?;
    }
    Some(rest.trim_start())
}

/// torchrun's `--tee`/`--log-line-prefix` label: `[rank3]:` (also `[rank3]: `).
fn torchrun<'a>(s: &'a str, rank: &mut Option<i64>) -> Option<&'a str> {
    let t = s.strip_prefix("[rank")?;
    let end = t.find("]:")?;
    *rank = Some(t[..end].parse().ok()?);
    Some(t[end + 2..].trim_start())
}

/// Ray's prefix on a worker's or actor's output: `(RayWorker pid=123, ip=10.0.0.1) `, `(pid=123) `,
/// `(raylet, ip=10.0.0.1) `.
fn ray<'a>(s: &'a str, host: &mut Option<&'a str>, pid: &mut Option<u32>) -> Option<&'a str> {
    let inner = s.strip_prefix('(')?;
    let head = &inner.as_bytes()[..inner.len().min(200)];
    let end = memchr::memmem::find(head, b") ")?;
    let inner = &inner[..end];
    let mut found = false;
    for part in inner.split([',', ' ']) {
        if let Some(p) = part.strip_prefix("pid=") {
            *pid = p.parse().ok();
            found = true;
        } else if let Some(ip) = part.strip_prefix("ip=") {
            *host = Some(ip);
            found = true;
        }
    }
    found.then(|| &s[end + 3..])
}

const LEVELS: [&str; 7] = ["DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"];

/// Python logging's usual formats, after the timestamp is gone: `- name - LEVEL - ` and `name -
/// LEVEL - ` (the logging cookbook's), `LEVEL:name:` (`basicConfig`'s default) and vLLM's `LEVEL
/// 12-06 21:40:01 [file.py:88] `.
fn pylog(s: &str) -> Option<&str> {
    let t = s.strip_prefix("- ").unwrap_or(s);
    // `name - LEVEL - `
    static SEP: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(" - "));
    if let Some(i) = SEP.find(&t.as_bytes()[..t.len().min(100)]) {
        let name = &t[..i];
        let rest = &t[i + 3..];
        if !name.is_empty() && !name.contains(' ') {
            for l in LEVELS {
                if let Some(r) = rest.strip_prefix(l).and_then(|r| r.strip_prefix(" - ")) {
                    return Some(r);
                }
            }
        }
    }
    for l in LEVELS {
        let Some(r) = s.strip_prefix(l) else { continue };
        // `LEVEL:name:text`
        if let Some(r) = r.strip_prefix(':') {
            let end = r.find(':')?;
            return (end > 0 && !r[..end].contains(' ')).then(|| &r[end + 1..]);
        }
        // `LEVEL MM-DD hh:mm:ss [file.py:88] ` or `... file.py:88] `
        let r = r.strip_prefix(' ')?;
        let b = r.as_bytes();
        if digits(r, 2)
            && b.get(2) == Some(&b'-')
            && digits(&r[3..], 2)
            && b.get(5) == Some(&b' ')
            && digits(&r[6..], 2)
        {
            let close = r.find("] ")?;
            return Some(&r[close + 2..]);
        }
        return None;
    }
    None
}

/// `[2024-05-01 10:00:00] ` (Python logging, many launchers).
fn bracketed_timestamp(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('[')?;
    // a date first (UCX's `[1764700000.123456]` and dmesg's stamps are not): no copy for those
    if inner.as_bytes().get(4) != Some(&b'-') {
        return None;
    }
    let end = inner.find(']')?;
    (iso_timestamp(&format!("{} x", &inner[..end])).is_some()).then(|| inner[end + 1..].trim_start())
}

/// `Dec  2 10:00:01 nodeB kernel: `, `Dec  2 10:00:01 nodeB app[123]: ` (syslog, journald short format).
fn syslog<'a>(s: &'a str, host: &mut Option<&'a str>, pid: &mut Option<u32>) -> Option<&'a str> {
    if s.len() < 16 || !MONTHS.iter().any(|m| s.starts_with(m)) || s.as_bytes()[3] != b' ' {
        return None;
    }
    let t = s[4..].trim_start();
    let day_end = t.find(' ')?;
    if !t[..day_end].bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let t = t[day_end..].trim_start();
    if !(digits(t, 2) && t.as_bytes().get(2) == Some(&b':')) {
        return None;
    }
    let t = t[t.find(' ')?..].trim_start();
    let (h, prog, rest) = host_prog(t)?;
    *host = Some(h);
    if let Some(p) = program_pid(prog) {
        *pid = Some(p);
    }
    // the kernel keeps its own `[ 123.456]` stamp, peeled next
    Some(rest)
}

/// CRI log files: `<ts> stdout F <text>` (the timestamp is already gone).
fn cri_stream(s: &str) -> Option<&str> {
    for p in ["stdout F ", "stderr F ", "stdout P ", "stderr P "] {
        if let Some(r) = s.strip_prefix(p) {
            return Some(r);
        }
    }
    None
}

/// `[  123.456789] `
fn dmesg_time(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('[')?;
    let end = inner.find(']')?;
    let t = inner[..end].trim();
    let (a, b) = t.split_once('.')?;
    (digits(a, a.len()) && !a.is_empty() && digits(b, b.len()) && !b.is_empty()).then(|| inner[end + 1..].trim_start())
}

/// `[1,0]<stderr>:` (mpirun --tag-output): job, rank.
fn tag_output<'a>(s: &'a str, rank: &mut Option<i64>) -> Option<&'a str> {
    let inner = s.strip_prefix('[')?;
    let end = inner.find(']')?;
    let (_job, r) = inner[..end].split_once(',')?;
    let after = &inner[end + 1..];
    let after = after
        .strip_prefix("<stderr>:")
        .or_else(|| after.strip_prefix("<stdout>:"))
        .or_else(|| after.strip_prefix("<stddiag>:"))?;
    *rank = Some(r.trim().parse().ok()?);
    Some(after.trim_start())
}

/// `0: ` / ` 12: ` (srun --label, torchrun's `[rank]:` is handled by the NCCL prefix parser).
fn srun_label<'a>(s: &'a str, rank: &mut Option<i64>) -> Option<&'a str> {
    let t = s.trim_start();
    let end = colon_space(t, 7)?;
    if end == 0 || end > 6 || !t[..end].bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    *rank = t[..end].parse().ok();
    Some(&t[end + 2..])
}

/// glog: `E0511 07:42:36.355509 10240 rdma_context.cpp:198] ` (severity, date, time, thread id, file).
fn glog<'a>(s: &'a str, pid: &mut Option<u32>) -> Option<&'a str> {
    // indented in a pasted code block or after a label
    let s = s.trim_start();
    let b = s.as_bytes();
    if s.len() < 30 || !matches!(b[0], b'I' | b'W' | b'E' | b'F') || !digits(&s[1..], 4) || b[5] != b' ' {
        return None;
    }
    let close = s.find("] ")?;
    let mut it = s[6..close].split_whitespace();
    let (_time, tid, _file) = (it.next()?, it.next()?, it.next()?);
    *pid = tid.parse().ok();
    Some(&s[close + 2..])
}

/// docker compose: `service-1  | text`.
fn compose(s: &str) -> Option<&str> {
    // names are padded to the longest service name: the separator is near the start
    let head = &s.as_bytes()[..s.len().min(160)];
    static SEP: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(" | "));
    let at = SEP.find(head)?;
    let (name, rest) = (&s[..at], &s[at + 3..]);
    let name = name.trim_end();
    (!name.is_empty() && !name.contains(' ') && name.len() < 64).then_some(rest)
}

/// pdsh/clush: `node017: text` — a host-like label (has a digit, `-` or `.`, no spaces, not a time).
fn pdsh<'a>(s: &'a str, host: &mut Option<&'a str>) -> Option<&'a str> {
    let end = colon_space(s, 64)?;
    let h = &s[..end];
    let hostlike = !h.is_empty()
        && h.len() <= 63
        && h.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
        && h.bytes().any(|c| c.is_ascii_digit() || c == b'-' || c == b'.')
        && h.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && !h.bytes().all(|c| c.is_ascii_digit())
        // code locations and errno names are not hosts
        && !h.ends_with(".c")
        && !h.ends_with(".cc")
        && !h.ends_with(".cpp")
        && !h.ends_with(".py")
        // hostnames are lower case; `mscclpp._mscclpp.IbError:` and `ERRNO:` are not hosts
        && !h.bytes().any(|c| c.is_ascii_uppercase());
    if !hostlike {
        return None;
    }
    *host = Some(h);
    Some(&s[end + 2..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &str) -> (Option<&str>, Option<i64>, Option<u32>, &str) {
        let f = split(s);
        (f.host, f.rank, f.pid, f.body)
    }

    #[test]
    fn framings() {
        let w = "gpu-b:5202:5290 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed";
        // none
        assert_eq!(f(w), (None, None, None, w));
        // srun --label
        assert_eq!(f(&format!("3: {w}")), (None, Some(3), None, w));
        // mpirun --tag-output
        assert_eq!(f(&format!("[1,7]<stderr>:{w}")), (None, Some(7), None, w));
        // pdsh / clush, twice (pdsh through a jump host)
        assert_eq!(f(&format!("10.0.87.143: 10.0.87.143: {w}")), (Some("10.0.87.143"), None, None, w));
        assert_eq!(f(&format!("node017: {w}")), (Some("node017"), None, None, w));
        // ISO timestamps, with and without zone; the host is never taken from them
        assert_eq!(f(&format!("2024-05-01T10:00:00.123456Z {w}")), (None, None, None, w));
        assert_eq!(f(&format!("2024-05-01 10:00:00,123 {w}")), (None, None, None, w));
        assert_eq!(f(&format!("2024-05-01T10:00:00+02:00 {w}")), (None, None, None, w));
        // container runtime (CRI) and docker compose
        assert_eq!(f(&format!("2024-05-01T10:00:00.123456789Z stderr F {w}")), (None, None, None, w));
        assert_eq!(f(&format!("trainer-1  | {w}")), (None, None, None, w));
        // syslog / journald short: host from its column
        let k = "Dec  2 10:00:01 nodeB kernel: [ 1234.567890] infiniband mlx5_0: reg mr failed";
        assert_eq!(f(k), (Some("nodeB"), None, None, "infiniband mlx5_0: reg mr failed"));
        let j = "Jul  7 13:48:56 myhost kernel: [169336.898388] gdrdrv:__gdrdrv_pin_buffer:nvidia_p2p_get_pages(va=1) failed [ret = -22]";
        assert_eq!(f(j).0, Some("myhost"));
        assert!(f(j).3.starts_with("gdrdrv:"));
        let a = "May 13 11:04:17 n1 python3[4242]: Failed to register memory";
        assert_eq!(f(a), (Some("n1"), None, Some(4242), "Failed to register memory"));
        // dmesg
        assert_eq!(f("[79199.665302] ib_umem_get: failed").3, "ib_umem_get: failed");
        // glog (Mooncake)
        let g = "E0511 07:42:36.355509 10240 rdma_context.cpp:198] Failed to register memory 0x2e1cbac200: Bad address [14]";
        assert_eq!(f(g), (None, None, Some(10240), "Failed to register memory 0x2e1cbac200: Bad address [14]"));
        // srun label + pdsh + timestamp stacked
        assert_eq!(f(&format!("0: 2024-05-01T10:00:00Z {w}")), (None, Some(0), None, w));
        // journalctl -o short-iso: the host from its column
        let j = format!("2026-12-07T10:00:00+0000 gpu-a12 python3[4242]: {w}");
        assert_eq!(f(&j), (Some("gpu-a12"), None, Some(4242), w));
        assert_eq!(f(&format!("2026-12-07T10:00:00+0000 cn0042 kernel: {w}")).0, Some("cn0042"));
        // GitHub Actions' 7-digit stamps, Jenkins' timestamper, kubectl logs --prefix
        assert_eq!(f(&format!("2026-12-07T10:00:00.1234567Z {w}")).3, w);
        assert_eq!(f(&format!("10:00:00  {w}")).3, w);
        assert_eq!(f(&format!("[2026-12-07T10:00:00.123Z] {w}")).3, w);
        assert_eq!(f(&format!("[pod/trainer-0/main] 2026-12-07T10:00:00.123456789Z {w}")).3, w);
        // an ISO stamp before a line of its own is no journal's
        let s = "2026-12-07T10:00:00Z ERROR nixl: failed";
        assert_eq!(f(s).0, None);
        // what is not a prefix stays
        for s in [
            "ERRNO: Bad address.",
            "Local host: comp003",
            "misc/ibvwrap.cc:278 NCCL WARN Call",
            "E0511: text",
            "CUDA device 0: PCIe address is 1B:00",
            "10:48:27: foo",
            "mscclpp._mscclpp.IbError: (14, 'ibv_reg_mr failed (errno 14)')",
        ] {
            assert_eq!(f(s).3, s, "{s}");
            assert_eq!(f(s).0, None, "{s}");
        }
    }
}
