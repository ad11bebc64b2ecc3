//! `mrshim doctor --compare a.json b.json ...`: the checks whose value or status differs between nodes.
use crate::report::Report;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Diff {
    pub check: String,
    /// (host, status, value) for every report, in argument order.
    pub nodes: Vec<(String, String, String)>,
}

pub fn compare(reports: &[Report]) -> Vec<Diff> {
    let mut ids: Vec<String> = Vec::new();
    for r in reports {
        for c in &r.checks {
            if !ids.contains(&c.id) {
                ids.push(c.id.clone());
            }
        }
    }
    let mut out = Vec::new();
    for id in ids {
        let nodes: Vec<(String, String, String)> = reports
            .iter()
            .map(|r| match r.check(&id) {
                Some(c) => (r.host.clone(), c.status.label().to_string(), c.value.clone()),
                None => (r.host.clone(), "-".into(), "(not checked)".into()),
            })
            .collect();
        // env lists and rdma details legitimately differ in order only; compare what is shown
        if nodes.windows(2).any(|w| w[0].1 != w[1].1 || w[0].2 != w[1].2) {
            out.push(Diff { check: id, nodes });
        }
    }
    out
}

pub fn human(diffs: &[Diff], n: usize) -> String {
    let mut o = String::new();
    if diffs.is_empty() {
        o.push_str(&format!("mrshim doctor --compare: the {n} reports agree on every check\n"));
        return o;
    }
    o.push_str(&format!("mrshim doctor --compare: {} check(s) differ\n", diffs.len()));
    for d in diffs {
        o.push_str(&format!("{}\n", d.check));
        for (host, st, val) in &d.nodes {
            let line = format!("  {host:<16} {st:<4} {val}");
            o.push_str(&crate::render::wrap(&line, 0, 80).replace('\n', "\n                        "));
            o.push('\n');
        }
    }
    o
}
