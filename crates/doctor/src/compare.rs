//! `mrshim doctor --compare a.json b.json ...`: the checks whose value or status differs between nodes,
//! grouped by value with host lists, so that 3 odd nodes among 500 read as one line, not 500.
use crate::report::Report;
use mrshim_hostlist::compress;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub struct Diff {
    pub check: String,
    /// (host, status, value) for every report, in argument order.
    pub nodes: Vec<(String, String, String)>,
    /// The same, grouped by (status, value): smallest group first, so the odd ones lead.
    pub groups: Vec<Group>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Group {
    pub status: String,
    pub value: String,
    pub count: usize,
    /// Slurm hostlist notation (`node[017,233,400]`).
    pub hosts: String,
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
        if nodes.windows(2).any(|w| w[0].1 != w[1].1 || w[0].2 != w[1].2) {
            let groups = group(&nodes);
            out.push(Diff { check: id, nodes, groups });
        }
    }
    out
}

fn group(nodes: &[(String, String, String)]) -> Vec<Group> {
    let mut by: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (h, st, v) in nodes {
        by.entry((st.as_str(), v.as_str())).or_default().push(h.as_str());
    }
    let mut g: Vec<Group> = by
        .into_iter()
        .map(|((status, value), hosts)| Group {
            status: status.to_string(),
            value: value.to_string(),
            count: hosts.len(),
            hosts: compress(hosts),
        })
        .collect();
    g.sort_by(|a, b| a.count.cmp(&b.count).then_with(|| a.hosts.cmp(&b.hosts)));
    g
}

/// Host lists longer than this are cut in the text (the JSON has them whole).
const MAX_LIST: usize = 160;

pub fn human(diffs: &[Diff], n: usize) -> String {
    let mut o = String::new();
    if diffs.is_empty() {
        o.push_str(&format!("mrshim doctor --compare: the {n} reports agree on every check\n"));
        return o;
    }
    o.push_str(&format!("mrshim doctor --compare: {} check(s) differ across {n} reports\n", diffs.len()));
    for d in diffs {
        o.push_str(&format!("{}\n", d.check));
        let last = d.groups.len() - 1;
        for (i, g) in d.groups.iter().enumerate() {
            // the largest group, when it is most of the nodes, is "the others"
            let on = if i == last && d.groups.len() > 1 && g.count * 2 > n {
                format!("on {} others", g.count)
            } else {
                format!("on {} ({})", clip(&g.hosts, MAX_LIST), g.count)
            };
            // "  fail " then the value and hosts, continuation lines indented under the value
            let body = crate::render::wrap(&format!("{}: {on}", g.value), 7, 80);
            o.push_str(&format!("  {:<4} {}\n", g.status, body.trim_start()));
        }
    }
    o
}

/// A host list cut at a top-level comma.
fn clip(list: &str, max: usize) -> String {
    if list.len() <= max {
        return list.to_string();
    }
    let mut depth = 0i32;
    let mut cut = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 && i <= max => cut = i,
            _ => {}
        }
    }
    if cut == 0 {
        return list.to_string();
    }
    format!("{},...", &list[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Check, Status};

    fn report(host: &str, memlock: &str, status: Status) -> Report {
        let check = |id: &str, st: Status, v: &str| Check {
            id: id.into(),
            title: id.into(),
            status: st,
            value: v.into(),
            details: vec![],
            fix: None,
            raw: serde_json::Value::Null,
        };
        Report {
            mrshim_doctor: 1,
            host: host.into(),
            root: None,
            checks: vec![check("memlock", status, memlock), check("thp", Status::Ok, "madvise")],
        }
    }

    fn cluster() -> Vec<Report> {
        (0..500)
            .map(|i| {
                let odd = [17, 233, 400].contains(&i);
                let h = format!("node{i:03}");
                if odd {
                    report(&h, "soft 64 KiB / hard 64 KiB", Status::Fail)
                } else {
                    report(&h, "unlimited", Status::Ok)
                }
            })
            .collect()
    }

    #[test]
    fn groups_by_value_with_host_lists() {
        let d = compare(&cluster());
        assert_eq!(d.len(), 1, "only memlock differs");
        assert_eq!(
            d[0].groups,
            vec![
                Group {
                    status: "fail".into(),
                    value: "soft 64 KiB / hard 64 KiB".into(),
                    count: 3,
                    hosts: "node[017,233,400]".into()
                },
                Group {
                    status: "ok".into(),
                    value: "unlimited".into(),
                    count: 497,
                    hosts: "node[000-016,018-232,234-399,401-499]".into()
                },
            ]
        );
        let text = human(&d, 500);
        assert_eq!(
            text,
            "mrshim doctor --compare: 1 check(s) differ across 500 reports\nmemlock\n  fail soft 64 KiB / hard 64 KiB: on node[017,233,400] (3)\n  ok   unlimited: on 497 others\n"
        );
    }

    #[test]
    fn no_majority_lists_every_group() {
        let r = vec![
            report("a1", "unlimited", Status::Ok),
            report("a2", "soft 8 MiB", Status::Warn),
            report("a3", "soft 64 KiB", Status::Fail),
        ];
        let text = human(&compare(&r), 3);
        assert!(text.contains("on a1 (1)") && text.contains("on a2 (1)") && text.contains("on a3 (1)"), "{text}");
    }
}
