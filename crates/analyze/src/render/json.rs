//! `--json`: one object; schema in docs/analyze.md. `schema` bumps on incompatible changes.
use crate::Analysis;
use serde_json::{json, Value};

pub const SCHEMA: u32 = 1;

pub fn render(a: &Analysis) -> Value {
    let hosts: Vec<&String> = a.col.hosts.keys().filter(|h| !h.is_empty()).collect();
    let retries: Vec<Value> =
        a.col.retries.iter().map(|((s, ok), n)| json!({"strategy": s, "ok": ok, "count": n})).collect();
    json!({
        "mrshim_analyze": SCHEMA,
        "summary": {
            "inputs": a.col.files.len(),
            "lines": a.col.files.iter().map(|f| f.lines).sum::<u64>(),
            "bytes": a.col.files.iter().map(|f| f.bytes).sum::<u64>(),
            "failed": a.failed(),
            "ok": a.ok(),
            "rescued": a.col.rescued_failures,
            "learned": a.col.learned_ok,
            "hosts": hosts,
            "doctor_reports": a.col.doctor_reports,
            "top": a.findings.first().map(|f| f.category),
        },
        "findings": a.findings,
        "hosts": a.hosts,
        "job": a.ranks,
        "ruled_out": a.ruled_out,
        "retries": retries,
        "inputs": a.col.files,
        "notes": a.col.notes,
    })
}

/// Pretty JSON text with a trailing newline.
pub fn to_string(a: &Analysis) -> String {
    let mut s = serde_json::to_string_pretty(&render(a)).unwrap_or_default();
    s.push('\n');
    s
}
