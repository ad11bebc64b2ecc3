//! `mrshim doctor`: this node's evidence for RDMA memory registration, each check ok/warn/fail with its fix.
//! Everything is read below a root directory ("/" normally, a captured tree in tests), so a report can be
//! produced from a copy of /sys and /proc taken on another machine.

pub mod checks;
pub mod compare;
pub mod gpu;
pub mod pci;
pub mod probe;
pub mod render;
pub mod report;
pub mod sys;
pub mod ucx;

pub use report::{Check, Report, Status};

/// Runs every check below `root` and returns the report. On the live system (`/`) the dmabuf
/// probe runs too; a captured tree has no NIC to ask.
pub fn collect(root: &std::path::Path) -> Report {
    let fs = sys::Fs::new(root);
    let probe = fs.is_real_root().then(probe::run);
    checks::run_all(&fs, probe.as_ref())
}

/// Pretty JSON of a report, newline-terminated.
pub fn to_json(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(r).unwrap_or_default();
    s.push('\n');
    s
}

/// Reads reports written by `mrshim doctor --json`.
pub fn load(path: &std::path::Path) -> Result<Report, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&s).map_err(|e| format!("{}: not a doctor report: {e}", path.display()))
}

/// `--compare` as JSON.
pub fn compare_json(d: &[compare::Diff]) -> String {
    let mut s = serde_json::to_string_pretty(&serde_json::json!({ "differences": d })).unwrap_or_default();
    s.push('\n');
    s
}
