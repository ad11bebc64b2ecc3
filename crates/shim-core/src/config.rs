//! `MRSHIM_*` environment variables → a typed [`Config`], or one [`ConfigError`] per bad variable.

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
    /// MRSHIM_RETRY (default off).
    pub retry: mrshim_retry::policy::Policy,
    /// MRSHIM_INJECT, validated; the shim builds its rules (with their counters) from it.
    pub inject: String,
    /// MRSHIM_DEBUG_PANIC: make the shim panic at one point, to prove it never takes the
    /// application down (tests, and users who want to see it for themselves).
    pub debug_panic: Option<PanicAt>,
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
pub const DEBUG_PANIC_ACCEPTED: &str =
    "init, hook, call, record, exit, bounce (where the shim panics on purpose; unset in production)";

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
        format!("{}={:?} is not valid{detail}; accepted: {}", self.var, self.value, self.accepted)
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
];

/// Parses the configuration. `get` returns a variable's value (None when unset).
pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Config, Vec<ConfigError>> {
    let mut c = Config::default();
    let mut errs = Vec::new();
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
        match mrshim_retry::policy::Policy::parse(&v) {
            Ok(p) => c.retry = p,
            Err(e) => {
                errs.push(ConfigError { var: "MRSHIM_RETRY", value: v, accepted: RETRY_ACCEPTED, detail: e.detail })
            }
        }
    }
    if let Some(v) = get("MRSHIM_INJECT") {
        match mrshim_retry::inject::parse(&v) {
            Ok(_) => c.inject = v,
            Err(_) => {
                errs.push(ConfigError { var: "MRSHIM_INJECT", value: v, accepted: INJECT_ACCEPTED, detail: None })
            }
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
    if errs.is_empty() {
        Ok(c)
    } else {
        Err(errs)
    }
}

fn parse_onoff(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
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

/// Expands `%h`, `%p`, `%r` (rank, or `norank`), `%j` (job id, see [`crate::job::Job::file_name_id`]),
/// `%%`.
pub fn expand(pattern: &str, host: &str, pid: u32, rank: Option<i64>, job: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut it = pattern.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('h') => out.push_str(host),
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
