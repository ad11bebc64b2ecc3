//! `--prometheus FILE`: per-host counters in the Prometheus text exposition format, for node_exporter's
//! textfile collector (`--collector.textfile.directory`). Written to FILE.tmp and renamed, so that the
//! collector never reads half a file.
use crate::errno;
use crate::Analysis;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A label value with `\`, `"` and newlines escaped as the format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn head(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub fn render(a: &Analysis) -> String {
    let mut o = String::new();
    let mut failures: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    let mut calls: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (k, g) in &a.col.groups {
        if k.host.is_empty() {
            continue;
        }
        *calls.entry((k.host.clone(), k.call.clone())).or_default() += g.count;
        if !k.ok {
            let mem = k
                .mem
                .and_then(|m| serde_json::to_value(m).ok())
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_else(|| "unknown".into());
            let e = k.errno.map(errno::name).unwrap_or_else(|| "unknown".into());
            *failures.entry((k.host.clone(), k.call.clone(), e, mem)).or_default() += g.count;
        }
    }
    head(
        &mut o,
        "mrshim_reg_failures_total",
        "counter",
        "Failed RDMA memory registrations (application calls) by host, call, errno and memory kind.",
    );
    for ((h, c, e, m), n) in &failures {
        let _ = writeln!(
            o,
            "mrshim_reg_failures_total{{host=\"{}\",call=\"{}\",errno=\"{}\",mem_kind=\"{}\"}} {n}",
            label(h),
            label(c),
            label(e),
            label(m)
        );
    }
    head(&mut o, "mrshim_reg_calls_total", "counter", "RDMA memory registration calls by host and call.");
    for ((h, c), n) in &calls {
        let _ = writeln!(o, "mrshim_reg_calls_total{{host=\"{}\",call=\"{}\"}} {n}", label(h), label(c));
    }
    head(&mut o, "mrshim_reg_rescued_total", "counter", "Failed registrations a retry strategy of the shim rescued.");
    for h in &a.hosts {
        let _ = writeln!(o, "mrshim_reg_rescued_total{{host=\"{}\"}} {}", label(&h.host), h.rescued);
    }
    head(&mut o, "mrshim_ranks", "gauge", "Ranks seen per host in the logs.");
    for h in &a.hosts {
        let _ = writeln!(o, "mrshim_ranks{{host=\"{}\"}} {}", label(&h.host), h.ranks.len());
    }
    head(
        &mut o,
        "mrshim_ranks_without_summary",
        "gauge",
        "Ranks whose shim log ends without the exit summary (killed, crashed, or _exit()).",
    );
    for h in &a.hosts {
        let _ = writeln!(o, "mrshim_ranks_without_summary{{host=\"{}\"}} {}", label(&h.host), h.no_summary);
    }
    head(&mut o, "mrshim_ranks_killed", "gauge", "Deprecated: mrshim_ranks_without_summary under its first name.");
    for h in &a.hosts {
        let _ = writeln!(o, "mrshim_ranks_killed{{host=\"{}\"}} {}", label(&h.host), h.no_summary);
    }
    head(
        &mut o,
        "mrshim_memlock_soft_bytes",
        "gauge",
        "Smallest soft RLIMIT_MEMLOCK seen on the host (+Inf: unlimited).",
    );
    for h in &a.hosts {
        let smallest = h.memlock.iter().filter_map(|m| *m).min();
        let v = match (smallest, h.memlock.is_empty()) {
            (Some(m), _) => m.to_string(),
            (None, false) => "+Inf".into(),
            (None, true) => continue,
        };
        let _ = writeln!(o, "mrshim_memlock_soft_bytes{{host=\"{}\"}} {v}", label(&h.host));
    }
    head(&mut o, "mrshim_analyze_finding_confidence", "gauge", "Confidence of each finding of the last analysis.");
    for f in &a.findings {
        let _ = writeln!(o, "mrshim_analyze_finding_confidence{{category=\"{}\"}} {}", f.category, f.confidence);
    }
    o
}

/// Writes the export next to `path` and renames it into place.
pub fn write(a: &Analysis, path: &std::path::Path) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, render(a))?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
