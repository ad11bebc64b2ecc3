//! `MRSHIM_*` environment variables → a typed [`Config`], or one [`ConfigError`] per bad variable.
//!
//! Every variable libmrshim.so reads is parsed here and nowhere else (the simulator's
//! `MRSHIM_SIM_*` belong to the simulator, sim/src/config.rs). Adding one is four steps, each
//! next to its neighbours: a field in [`Config`] (and its default), a `*_ACCEPTED` text, a name in
//! [`VARS`] (that also echoes it in the config record), and a parse step in [`parse_as`] that
//! pushes a [`ConfigError`] for a bad value. On/off switches use [`parse_onoff`] (on/off, 1/0,
//! true/false, yes/no, any case; empty or anything else is an error, never a silent default).
//! `mrshim exec` runs the same parser before launch; README's table, docs/shim.md and
//! `exec::ENV_HELP` (`mrshim --help`) list every name in [`VARS`] (a test checks).

use std::fmt;

/// Where records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogDest {
    /// No records (WARN lines and the summary still go to stderr).
    Off,
    /// JSON lines on stderr.
    Stderr,
    /// A path pattern with `%h`, `%p`, `%r`, `%%`. After expansion, a path ending in `/` or naming an
    /// existing directory means "one file per process inside this directory".
    Path(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Every intercepted call is a record.
    All,
    /// Only failed calls (and probes) are records.
    Failures,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub log: LogDest,
    pub level: Level,
    /// A summary line on stderr at exit may be printed (MRSHIM_SUMMARY=off: never).
    pub summary: bool,
    /// MRSHIM_DEBUG=INFO (or MRSHIM_SUMMARY=on): the summary line of every process that made a
    /// call; otherwise (WARN, the default) only when something failed, was rescued or was lost.
    pub info: bool,
    /// Print a WARN line on stderr for every failed call.
    pub warn: bool,
    /// MRSHIM_RETRY (default off), with MRSHIM_BOUNCE_REMOTE in `retry.bounce_remote`.
    pub retry: mrshim_retry::policy::Policy,
    /// MRSHIM_INJECT, validated; the shim builds its rules (with their counters) from it.
    pub inject: String,
    /// MRSHIM_DEBUG_PANIC: make the shim panic at one point, to prove it never takes the
    /// application down (tests, and users who want to see it for themselves).
    pub debug_panic: Option<PanicAt>,
    /// MRSHIM_BOUNCE_TRACK (default on): the bounce layer tracks application writes through the
    /// kernel (off: every fold compares whole regions; docs/bounce.md).
    pub bounce_track: bool,
    /// MRSHIM_COPY_SELFTEST: `on`: every GPU copy engine proves itself before first use; `auto`
    /// (default) and `off`: only the engines whose ABI is not publicly confirmed (MACA), which
    /// are always proven (docs/bounce.md).
    pub copy_selftest: bool,
    /// MRSHIM_BOUNCE_ON_VIOLATION=abort: a bounce region used outside its contract aborts the
    /// process (default warn: a WARN line, a `violation` record, counted in the summary).
    pub bounce_abort: bool,
    /// MRSHIM_BOUNCE_WATCH (default 10 s; None: off): how long a process with bounce regions
    /// peers reach may stay passive (no post, no poll by any thread) while a peer's write sits
    /// undelivered in a shadow, or bytes it wrote are missing from a shadow peers read, before
    /// the bounce watcher reports it (docs/bounce.md, Run-time detection).
    pub bounce_watch: Option<std::time::Duration>,
}

/// Where MRSHIM_DEBUG_PANIC makes the shim panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicAt {
    /// Building the shim's state (first intercepted call).
    Init,
    /// In a hook, before the real function ran.
    Hook,
    /// In the shim's handling of a call, right after the caller's own real call returned and
    /// before anything is recorded (the fallback must hand back that outcome, not call again).
    Call,
    /// While recording, after the real function ran.
    Record,
    /// In the exit summary.
    Exit,
    /// In the bounce layer's post/poll wrappers (while a bounce region exists).
    Bounce,
}

impl PanicAt {
    const NAMES: [(&'static str, PanicAt); 6] = [
        ("init", PanicAt::Init),
        ("hook", PanicAt::Hook),
        ("call", PanicAt::Call),
        ("record", PanicAt::Record),
        ("exit", PanicAt::Exit),
        ("bounce", PanicAt::Bounce),
    ];

    pub fn parse(v: &str) -> Option<PanicAt> {
        let v = v.trim().to_ascii_lowercase();
        Self::NAMES.iter().find(|(n, _)| *n == v).map(|(_, at)| *at)
    }
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, at)| *at == self).map_or("", |(n, _)| n)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            log: LogDest::Off,
            level: Level::All,
            summary: true,
            info: false,
            warn: true,
            retry: Default::default(),
            inject: String::new(),
            debug_panic: None,
            bounce_track: true,
            copy_selftest: false,
            bounce_abort: false,
            bounce_watch: Some(WATCH_DEFAULT),
        }
    }
}

pub const LOG_ACCEPTED: &str =
    "off, stderr, a file path or a directory (placeholders %h host, %p pid, %r rank, %j job id, %% percent)";
pub const LEVEL_ACCEPTED: &str = "all, failures";
pub const DEBUG_ACCEPTED: &str =
    "WARN (default: failure lines, and the summary of processes where something failed), INFO (also every summary)";
pub const ONOFF_ACCEPTED: &str = "on, off (also 1/0, true/false, yes/no)";
pub const RETRY_ACCEPTED: &str = mrshim_retry::policy::HELP;
pub const INJECT_ACCEPTED: &str = mrshim_retry::inject::HELP;
pub const BOUNCE_REMOTE_ACCEPTED: &str = mrshim_retry::strategy::BounceRemote::HELP;
pub const ON_VIOLATION_ACCEPTED: &str = "warn (default), abort";
pub const WATCH_ACCEPTED: &str =
    "10s (default), a time from 10ms to 3600s (500ms, 2s, 30s; a bare number is seconds), or off";
/// MRSHIM_BOUNCE_WATCH's default, and its bounds.
/// Ten seconds: a passive target stays passive far longer (a KV-cache target serves for the
/// job's life), while a job that announces its peers' writes late — an MPI rank computing
/// between two fences while peers put into its window — is taken for one only if it pauses for
/// longer than this (docs/bounce.md, "Run-time detection").
pub const WATCH_DEFAULT: std::time::Duration = std::time::Duration::from_secs(10);
pub const WATCH_MIN: std::time::Duration = std::time::Duration::from_millis(10);
pub const WATCH_MAX: std::time::Duration = std::time::Duration::from_secs(3600);
pub const DEBUG_PANIC_ACCEPTED: &str =
    "init, hook, call, record, exit, bounce (where the shim panics on purpose; unset in production)";
pub const BOUNCE_TRACK_ACCEPTED: &str = "on (default), off (also 1/0, true/false, yes/no)";
pub const COPY_SELFTEST_ACCEPTED: &str =
    "auto (default: only engines of unconfirmed ABI, MACA), on (every GPU copy engine), off (= auto; also 1/0, true/false, yes/no)";

/// One bad variable. Displayed as the single stderr line users see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub var: &'static str,
    pub value: String,
    pub accepted: &'static str,
    /// What exactly is wrong, when more precise than "not valid".
    pub detail: Option<String>,
}

impl ConfigError {
    /// `VAR="value" is not valid (detail); accepted: ...`: what is wrong, for any front end.
    pub fn problem(&self) -> String {
        let detail = self.detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default();
        format!("{}={:?} is not valid{detail}; accepted: {}", self.var, shorten(&self.value), self.accepted)
    }
}

/// The line the shim prints in a process (it then passes every call through).
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mrshim: {}; mrshim passes every call through unrecorded", self.problem())
    }
}

/// Every variable the shim reads (echoed in the config record).
pub const VARS: &[&str] = &[
    "MRSHIM_LOG",
    "MRSHIM_LEVEL",
    "MRSHIM_DEBUG",
    "MRSHIM_SUMMARY",
    "MRSHIM_WARN",
    "MRSHIM_RETRY",
    "MRSHIM_INJECT",
    "MRSHIM_DEBUG_PANIC",
    "MRSHIM_BOUNCE_TRACK",
    "MRSHIM_COPY_SELFTEST",
    "MRSHIM_BOUNCE_REMOTE",
    "MRSHIM_BOUNCE_ON_VIOLATION",
    "MRSHIM_BOUNCE_WATCH",
];

/// Values longer than this are shown cut in messages and in the config record (a 1 MB value
/// must not become a 1 MB stderr line).
pub const SHOWN_MAX: usize = 200;

/// `s` as messages show it: whole up to [`SHOWN_MAX`] bytes, else its start and its length.
pub fn shorten(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= SHOWN_MAX {
        return s.into();
    }
    let mut end = SHOWN_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len()).into()
}

/// Marks a value that was not valid UTF-8 (see [`env_var`]); the environment never holds NUL.
const NOT_UTF8: char = '\0';

/// A variable as [`parse`] wants it: a value that is not UTF-8 comes back marked, so that it is
/// refused with a clear line instead of silently becoming a different path (U+FFFD).
pub fn env_var(name: &str) -> Option<String> {
    let v = std::env::var_os(name)?;
    Some(match v.into_string() {
        Ok(s) => s,
        Err(raw) => format!("{NOT_UTF8}{}", raw.to_string_lossy()),
    })
}

/// Is this process running with privileges its caller does not have (setuid, setgid, file
/// capabilities: the kernel's AT_SECURE, the flag glibc's own secure mode follows)?
pub fn secure_exec() -> bool {
    // SAFETY: getauxval has no preconditions; it returns 0 for an absent entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The line for a privileged process (AT_SECURE): the variables come from a less privileged
/// caller, so none of them is used (no caller-chosen path written by root, no retries raising
/// limits, no injected failures); values are not repeated.
pub fn secure_exec_line(ignored: &[&str]) -> String {
    format!(
        "mrshim: {} ignored: this program runs with privileges its caller does not have (setuid, setgid or file capabilities); mrshim passes every call through unrecorded",
        ignored.join(", ")
    )
}

/// Parses the configuration. `get` returns a variable's value (None when unset). In a privileged
/// process (see [`secure_exec`]) no variable is used: Err with no errors, after one line naming them.
pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Config, Vec<ConfigError>> {
    parse_as(get, secure_exec())
}

pub fn parse_as(get: impl Fn(&str) -> Option<String>, secure: bool) -> Result<Config, Vec<ConfigError>> {
    if secure {
        let set: Vec<&str> = VARS.iter().copied().filter(|v| get(v).is_some()).collect();
        if !set.is_empty() {
            crate::stderr_line(&secure_exec_line(&set));
        }
        return Err(vec![]);
    }
    let mut c = Config::default();
    let mut errs = Vec::new();
    let mut not_utf8 = Vec::new();
    for &var in VARS {
        if let Some(v) = get(var).and_then(|v| v.strip_prefix(NOT_UTF8).map(String::from)) {
            let detail = Some("not valid UTF-8".into());
            not_utf8.push(ConfigError { var, value: v, accepted: accepted(var), detail });
        }
    }
    let get = |k: &str| get(k).filter(|v| !v.starts_with(NOT_UTF8));
    if let Some(v) = get("MRSHIM_LOG") {
        match parse_log(&v) {
            Ok(d) => c.log = d,
            Err(detail) => errs.push(ConfigError { var: "MRSHIM_LOG", value: v, accepted: LOG_ACCEPTED, detail }),
        }
    }
    if let Some(v) = get("MRSHIM_LEVEL") {
        match v.trim().to_ascii_lowercase().as_str() {
            "all" => c.level = Level::All,
            "failures" | "failure" | "errors" => c.level = Level::Failures,
            _ => errs.push(ConfigError { var: "MRSHIM_LEVEL", value: v, accepted: LEVEL_ACCEPTED, detail: None }),
        }
    }
    if let Some(v) = get("MRSHIM_DEBUG") {
        match v.trim().to_ascii_uppercase().as_str() {
            "WARN" => c.info = false,
            "INFO" => c.info = true,
            _ => errs.push(ConfigError { var: "MRSHIM_DEBUG", value: v, accepted: DEBUG_ACCEPTED, detail: None }),
        }
    }
    for (var, slot) in [("MRSHIM_SUMMARY", &mut c.summary), ("MRSHIM_WARN", &mut c.warn)] {
        if let Some(v) = get(var) {
            match parse_onoff(&v) {
                Some(b) => *slot = b,
                None => errs.push(ConfigError { var, value: v, accepted: ONOFF_ACCEPTED, detail: None }),
            }
        }
    }
    // The older switch, kept as an alias: MRSHIM_SUMMARY=on asks for every summary (INFO's).
    if get("MRSHIM_SUMMARY").and_then(|v| parse_onoff(&v)) == Some(true) {
        c.info = true;
    }
    if let Some(v) = get("MRSHIM_RETRY") {
        match refuse_empty(&v).and_then(|_| mrshim_retry::policy::Policy::parse(&v).map_err(|e| e.detail)) {
            Ok(p) => c.retry = p,
            Err(detail) => errs.push(ConfigError { var: "MRSHIM_RETRY", value: v, accepted: RETRY_ACCEPTED, detail }),
        }
    }
    // After MRSHIM_RETRY, whose policy it belongs to (docs/bounce.md, "The contract").
    if let Some(v) = get("MRSHIM_BOUNCE_REMOTE") {
        match mrshim_retry::strategy::BounceRemote::parse(&v) {
            Some(b) => c.retry.bounce_remote = b,
            None => errs.push(ConfigError {
                var: "MRSHIM_BOUNCE_REMOTE",
                value: v,
                accepted: BOUNCE_REMOTE_ACCEPTED,
                detail: None,
            }),
        }
    }
    if let Some(v) = get("MRSHIM_INJECT") {
        match refuse_empty(&v).and_then(|_| mrshim_retry::inject::parse(&v).map_err(|_| None)) {
            Ok(_) => c.inject = v,
            Err(detail) => errs.push(ConfigError { var: "MRSHIM_INJECT", value: v, accepted: INJECT_ACCEPTED, detail }),
        }
    }
    if let Some(v) = get("MRSHIM_DEBUG_PANIC") {
        match PanicAt::parse(&v) {
            Some(at) => c.debug_panic = Some(at),
            None => errs.push(ConfigError {
                var: "MRSHIM_DEBUG_PANIC",
                value: v,
                accepted: DEBUG_PANIC_ACCEPTED,
                detail: None,
            }),
        }
    }
    if let Some(v) = get("MRSHIM_BOUNCE_TRACK") {
        match parse_onoff(&v) {
            Some(b) => c.bounce_track = b,
            None => errs.push(ConfigError {
                var: "MRSHIM_BOUNCE_TRACK",
                value: v,
                accepted: BOUNCE_TRACK_ACCEPTED,
                detail: None,
            }),
        }
    }
    if let Some(v) = get("MRSHIM_COPY_SELFTEST") {
        let parsed = if v.trim().eq_ignore_ascii_case("auto") { Some(false) } else { parse_onoff(&v) };
        match parsed {
            Some(b) => c.copy_selftest = b,
            None => errs.push(ConfigError {
                var: "MRSHIM_COPY_SELFTEST",
                value: v,
                accepted: COPY_SELFTEST_ACCEPTED,
                detail: None,
            }),
        }
    }
    if let Some(v) = get("MRSHIM_BOUNCE_ON_VIOLATION") {
        match v.trim().to_ascii_lowercase().as_str() {
            "warn" => c.bounce_abort = false,
            "abort" => c.bounce_abort = true,
            _ => errs.push(ConfigError {
                var: "MRSHIM_BOUNCE_ON_VIOLATION",
                value: v,
                accepted: ON_VIOLATION_ACCEPTED,
                detail: None,
            }),
        }
    }
    if let Some(v) = get("MRSHIM_BOUNCE_WATCH") {
        match parse_watch(&v) {
            Ok(w) => c.bounce_watch = w,
            Err(detail) => {
                errs.push(ConfigError { var: "MRSHIM_BOUNCE_WATCH", value: v, accepted: WATCH_ACCEPTED, detail })
            }
        }
    }
    errs.extend(not_utf8);
    errs.sort_by_key(|e| VARS.iter().position(|v| *v == e.var));
    if errs.is_empty() {
        Ok(c)
    } else {
        Err(errs)
    }
}

/// An empty value is a mistake (a script's unset variable), as for MRSHIM_LOG and MRSHIM_LEVEL.
fn refuse_empty(v: &str) -> Result<(), Option<String>> {
    if v.trim().is_empty() {
        Err(Some("empty".into()))
    } else {
        Ok(())
    }
}

fn accepted(var: &str) -> &'static str {
    match var {
        "MRSHIM_LOG" => LOG_ACCEPTED,
        "MRSHIM_LEVEL" => LEVEL_ACCEPTED,
        "MRSHIM_RETRY" => RETRY_ACCEPTED,
        "MRSHIM_INJECT" => INJECT_ACCEPTED,
        "MRSHIM_DEBUG_PANIC" => DEBUG_PANIC_ACCEPTED,
        "MRSHIM_BOUNCE_TRACK" => BOUNCE_TRACK_ACCEPTED,
        "MRSHIM_COPY_SELFTEST" => COPY_SELFTEST_ACCEPTED,
        "MRSHIM_BOUNCE_REMOTE" => BOUNCE_REMOTE_ACCEPTED,
        "MRSHIM_BOUNCE_ON_VIOLATION" => ON_VIOLATION_ACCEPTED,
        "MRSHIM_BOUNCE_WATCH" => WATCH_ACCEPTED,
        _ => ONOFF_ACCEPTED,
    }
}

/// The one on/off grammar of every switch: on/off, 1/0, true/false, yes/no, in any case, spaces
/// around ignored. Anything else (empty too) is None: the caller reports it.
pub fn parse_onoff(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// MRSHIM_BOUNCE_WATCH: `off` (None), `on` (the default), or a time: a number with `ms` or `s`
/// (a bare number is seconds), from [`WATCH_MIN`] to [`WATCH_MAX`].
fn parse_watch(v: &str) -> Result<Option<std::time::Duration>, Option<String>> {
    match parse_onoff(v) {
        Some(false) => return Ok(None),
        Some(true) if !v.trim().starts_with(['0', '1']) => return Ok(Some(WATCH_DEFAULT)),
        _ => {}
    }
    let t = v.trim().to_ascii_lowercase();
    let (num, scale) = match (t.strip_suffix("ms"), t.strip_suffix('s')) {
        (Some(n), _) => (n, 1e-3),
        (None, Some(n)) => (n, 1.0),
        (None, None) => (t.as_str(), 1.0),
    };
    let secs: f64 = num.trim().parse().map_err(|_| None)?;
    if !secs.is_finite() {
        return Err(None);
    }
    let d = std::time::Duration::from_secs_f64((secs * scale).max(0.0));
    if d < WATCH_MIN || d > WATCH_MAX {
        return Err(Some("out of range".into()));
    }
    Ok(Some(d))
}

fn parse_log(v: &str) -> Result<LogDest, Option<String>> {
    match v {
        "off" | "OFF" | "none" => return Ok(LogDest::Off),
        "stderr" | "STDERR" | "-" => return Ok(LogDest::Stderr),
        "" => return Err(Some("empty".into())),
        _ => {}
    }
    if v.contains('\0') {
        return Err(Some("contains a NUL byte".into()));
    }
    check_placeholders(v).map_err(Some)?;
    Ok(LogDest::Path(v.to_string()))
}

fn check_placeholders(p: &str) -> Result<(), String> {
    let mut it = p.chars();
    while let Some(c) = it.next() {
        if c == '%' {
            match it.next() {
                Some('h' | 'p' | 'r' | 'j' | '%') => {}
                Some(o) => return Err(format!("unknown placeholder %{o}")),
                None => return Err("a lone % at the end".into()),
            }
        }
    }
    Ok(())
}

/// The host name as a file-name part: characters other than letters, digits, `-`, `_` and `.` become
/// `_`, and a leading `.` too, so that no host name (set in a UTS namespace, it can be anything)
/// makes `..` or a `/`.
pub fn host_part(host: &str) -> String {
    let mut s: String =
        host.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    if s.starts_with('.') {
        s.replace_range(..1, "_");
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}

/// Expands `%h` (see [`host_part`]), `%p`, `%r` (rank, or `norank`), `%j` (job id, see
/// [`crate::job::Job::file_name_id`]), `%%`.
pub fn expand(pattern: &str, host: &str, pid: u32, rank: Option<i64>, job: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut it = pattern.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('h') => out.push_str(&host_part(host)),
            Some('p') => out.push_str(&pid.to_string()),
            Some('r') => match rank {
                Some(r) => out.push_str(&r.to_string()),
                None => out.push_str("norank"),
            },
            Some('j') => out.push_str(job),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o)
            }
            None => out.push('%'),
        }
    }
    out
}

/// File name used inside a log directory: `mrshim-<host>-r<rank>-p<pid>.jsonl`
/// (`mrshim-<host>-p<pid>.jsonl` without a rank).
pub fn dir_file_name(host: &str, pid: u32, rank: Option<i64>) -> String {
    let host = host_part(host);
    match rank {
        Some(r) => format!("mrshim-{host}-r{r}-p{pid}.jsonl"),
        None => format!("mrshim-{host}-p{pid}.jsonl"),
    }
}

/// Does the destination change with the pid (so a forked child needs its own file)?
pub fn pid_dependent(pattern: &str, is_dir: bool) -> bool {
    is_dir || pattern.contains("%p")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn debug_panic_names_are_the_accepted_ones() {
        for (n, at) in PanicAt::NAMES {
            assert!(DEBUG_PANIC_ACCEPTED.contains(n), "{n}");
            assert_eq!(PanicAt::parse(&n.to_uppercase()), Some(at));
            assert_eq!(at.name(), n);
        }
    }

    fn p(vars: &[(&str, &str)]) -> Result<Config, Vec<ConfigError>> {
        let m: HashMap<String, String> = vars.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        parse(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults() {
        assert_eq!(p(&[]).unwrap(), Config::default());
        assert_eq!(Config::default().log, LogDest::Off);
        assert_eq!(Config::default().level, Level::All);
    }

    #[test]
    fn good_values() {
        let c = p(&[("MRSHIM_LOG", "/tmp/x/%h-%p-%r.jsonl"), ("MRSHIM_LEVEL", "failures"), ("MRSHIM_SUMMARY", "off")])
            .unwrap();
        assert_eq!(c.log, LogDest::Path("/tmp/x/%h-%p-%r.jsonl".into()));
        assert_eq!(c.level, Level::Failures);
        assert!(!c.summary);
        assert_eq!(p(&[("MRSHIM_LOG", "stderr")]).unwrap().log, LogDest::Stderr);
        assert_eq!(p(&[("MRSHIM_LOG", "off")]).unwrap().log, LogDest::Off);
        assert_eq!(p(&[("MRSHIM_LEVEL", " ALL ")]).unwrap().level, Level::All);
        assert!(!p(&[("MRSHIM_WARN", "0")]).unwrap().warn);
        assert!(p(&[("MRSHIM_DEBUG", "info")]).unwrap().info);
        assert!(!p(&[("MRSHIM_DEBUG", "WARN")]).unwrap().info);
        assert!(p(&[("MRSHIM_SUMMARY", "on")]).unwrap().info, "the alias");
        assert!(p(&[("MRSHIM_DEBUG", "TRACE")]).is_err());
        use mrshim_retry::strategy::BounceRemote;
        assert_eq!(p(&[]).unwrap().retry.bounce_remote, BounceRemote::Refuse, "safe for an unknown client");
        let c = p(&[("MRSHIM_BOUNCE_REMOTE", "announced"), ("MRSHIM_RETRY", "bounce")]).unwrap();
        assert_eq!(c.retry.bounce_remote, BounceRemote::Announced, "whatever the order of the variables");
        let e = p(&[("MRSHIM_BOUNCE_REMOTE", "on")]).unwrap_err();
        assert!(e[0].to_string().contains("accepted: refuse (default"), "{}", e[0]);
    }

    #[test]
    fn bad_values_name_the_variable_value_and_accepted() {
        let e = p(&[("MRSHIM_LEVEL", "verbose")]).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].to_string(),
            "mrshim: MRSHIM_LEVEL=\"verbose\" is not valid; accepted: all, failures; mrshim passes every call through unrecorded"
        );
        let e = p(&[("MRSHIM_LOG", "/tmp/%x.log")]).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "mrshim: MRSHIM_LOG=\"/tmp/%x.log\" is not valid (unknown placeholder %x); accepted: off, stderr, a file path or a directory (placeholders %h host, %p pid, %r rank, %j job id, %% percent); mrshim passes every call through unrecorded"
        );
        assert_eq!(p(&[("MRSHIM_LOG", "")]).unwrap_err()[0].detail.as_deref(), Some("empty"));
        assert_eq!(p(&[("MRSHIM_LOG", "a%")]).unwrap_err()[0].detail.as_deref(), Some("a lone % at the end"));
        let e = p(&[("MRSHIM_SUMMARY", "maybe"), ("MRSHIM_WARN", "x"), ("MRSHIM_LEVEL", "")]).unwrap_err();
        let vars: Vec<_> = e.iter().map(|e| e.var).collect();
        assert_eq!(vars, vec!["MRSHIM_LEVEL", "MRSHIM_SUMMARY", "MRSHIM_WARN"]);
    }

    #[test]
    fn host_names_cannot_make_paths_and_long_values_are_cut() {
        assert_eq!(host_part("../x"), "_._x");
        assert_eq!(host_part("node-1.cluster"), "node-1.cluster");
        assert_eq!(host_part("a/b c\u{e9}"), "a_b_c_");
        assert_eq!(host_part(""), "_");
        assert_eq!(expand("/l/%h.log", "../../etc", 1, None, "j"), "/l/_._.._etc.log");
        assert_eq!(shorten("short"), "short");
        let long = "\u{e9}".repeat(150);
        let s = shorten(&long);
        assert!(s.len() < SHOWN_MAX + 30 && s.ends_with("... (300 bytes)"), "{s}");
    }

    #[test]
    fn secure_exec_uses_no_variable_and_empty_or_non_utf8_values_are_refused() {
        let m = |k: &str| (k == "MRSHIM_LOG").then(|| "/x".to_string());
        assert_eq!(parse_as(m, true), Err(vec![]));
        for var in ["MRSHIM_RETRY", "MRSHIM_INJECT"] {
            assert_eq!(p(&[(var, " ")]).unwrap_err()[0].detail.as_deref(), Some("empty"), "{var}");
        }
        let e = p(&[("MRSHIM_WARN", "\0o\u{fffd}"), ("MRSHIM_LOG", "\0/x")]).unwrap_err();
        let got: Vec<_> = e.iter().map(|e| (e.var, e.value.as_str(), e.detail.as_deref())).collect();
        let bad = Some("not valid UTF-8");
        assert_eq!(got, [("MRSHIM_LOG", "/x", bad), ("MRSHIM_WARN", "o\u{fffd}", bad)]);
    }

    #[test]
    fn switches_share_one_grammar_and_never_fail_open() {
        for var in ["MRSHIM_WARN", "MRSHIM_SUMMARY", "MRSHIM_BOUNCE_TRACK", "MRSHIM_COPY_SELFTEST"] {
            for off in ["off", "OFF", "0", "false", "False", "no", " NO "] {
                let c = p(&[(var, off)]).unwrap_or_else(|e| panic!("{var}={off}: {e:?}"));
                let got = match var {
                    "MRSHIM_WARN" => c.warn,
                    "MRSHIM_SUMMARY" => c.summary,
                    "MRSHIM_BOUNCE_TRACK" => c.bounce_track,
                    _ => c.copy_selftest,
                };
                assert!(!got, "{var}={off:?} must be off");
            }
            for on in ["on", "On", "1", "true", "TRUE", "yes"] {
                assert!(p(&[(var, on)]).is_ok(), "{var}={on}");
            }
            for bad in ["", " ", "bogus", "enable", "2"] {
                let e = p(&[(var, bad)]).unwrap_err();
                assert_eq!((e.len(), e[0].var), (1, var), "{var}={bad:?}");
                assert!(e[0].to_string().contains("passes every call through"), "{}", e[0]);
            }
        }
        assert!(p(&[("MRSHIM_BOUNCE_TRACK", "on")]).unwrap().bounce_track);
        assert!(Config::default().bounce_track, "tracking is on by default");
        assert!(p(&[("MRSHIM_COPY_SELFTEST", "on")]).unwrap().copy_selftest);
        assert!(!p(&[("MRSHIM_COPY_SELFTEST", "Auto")]).unwrap().copy_selftest);
        assert_eq!(accepted("MRSHIM_BOUNCE_TRACK"), BOUNCE_TRACK_ACCEPTED);
    }

    #[test]
    fn the_watch_interval_is_a_time_or_off() {
        use std::time::Duration;
        assert_eq!(Config::default().bounce_watch, Some(Duration::from_secs(10)), "on by default");
        let w = |v: &str| p(&[("MRSHIM_BOUNCE_WATCH", v)]).map(|c| c.bounce_watch);
        assert_eq!(w("off").unwrap(), None);
        assert_eq!(w("OFF").unwrap(), None);
        assert_eq!(w("0").unwrap(), None, "the on/off grammar");
        assert_eq!(w("on").unwrap(), Some(WATCH_DEFAULT));
        assert_eq!(w("500ms").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(w(" 2s ").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(w("1").unwrap(), Some(Duration::from_secs(1)), "a bare number is seconds");
        assert_eq!(w("0.25").unwrap(), Some(Duration::from_millis(250)));
        for bad in ["", "soon", "5ms", "0.001", "2h", "-1s", "4000s", "nan", "inf"] {
            let e = w(bad).unwrap_err();
            assert_eq!(e[0].var, "MRSHIM_BOUNCE_WATCH", "{bad:?}");
            assert!(e[0].to_string().contains(WATCH_ACCEPTED), "{}", e[0]);
        }
    }

    #[test]
    fn expansion() {
        assert_eq!(expand("/l/%h.%p.%r.%%.jsonl", "n1", 42, Some(3), "j"), "/l/n1.42.3.%.jsonl");
        assert_eq!(expand("%r", "n1", 42, None, "j"), "norank");
        assert_eq!(expand("/l/%j/%h-%r.jsonl", "n1", 42, Some(0), "4242"), "/l/4242/n1-0.jsonl");
        assert_eq!(dir_file_name("n1", 42, Some(0)), "mrshim-n1-r0-p42.jsonl");
        assert_eq!(dir_file_name("n1", 42, None), "mrshim-n1-p42.jsonl");
        assert!(pid_dependent("/x/%p", false));
        assert!(!pid_dependent("/x/%r", false));
        assert!(pid_dependent("/x", true));
    }
}
