//! `--report out.html`: one self-contained page (no scripts, no network), readable at 1280 px: a header
//! with the job, time range, version and inputs; who failed first and who is missing; the findings with
//! their fixes as code; a host x (call, errno) failure matrix; the timeline and size histogram (svg.rs);
//! a per-host table and the retry strategies.
use super::{ranges, rank_refs, svg, utc};
use crate::findings::human_size;
use crate::hosts::HostRow;
use crate::Analysis;
use mrshim_hostlist::{compress, counted};
use std::collections::BTreeMap;
use std::fmt::Write;

pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Text with `backtick` spans as <code>.
fn with_code(s: &str) -> String {
    if s.matches('`').count() % 2 == 1 {
        return esc(s);
    }
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", esc(part));
        } else {
            out.push_str(&esc(part));
        }
    }
    out
}

/// Failing hosts in the matrix and table; the healthy ones add a few rows for comparison.
const MAX_FAILING_ROWS: usize = 60;
const HEALTHY_ROWS: usize = 6;

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1200px;margin:1em auto;padding:0 16px;color:#222;line-height:1.4}\
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:1.6em}\
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;margin:.5em 0}dl.meta dt{color:#666}dl.meta dd{margin:0;overflow-wrap:anywhere}\
.finding{border-left:4px solid #999;padding:0 1em;margin:1em 0}.finding.top{border-color:#d62828}\
code,pre{background:#f3f3f3;font-family:ui-monospace,monospace;font-size:.92em}code{padding:0 .25em;border-radius:3px}\
pre{white-space:pre-wrap;overflow-wrap:anywhere;padding:.5em}.conf{color:#666;font-weight:normal}\
.box{background:#fff6e5;border:1px solid #f0c36d;padding:.4em 1em;margin:1em 0}.box.ok{background:#eef8f0;border-color:#9bd3a8}\
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;font-size:.9em}th,td{border:1px solid #ddd;padding:.2em .5em;text-align:right;white-space:nowrap}\
th{background:#f5f5f5}td.host,th.host{text-align:left}tr.failing td.host{color:#b00020;font-weight:bold}tr.sep td{border-top:2px dashed #999}\
td.wrap{white-space:normal;text-align:left;max-width:28em;overflow-wrap:anywhere}.note{color:#555;font-size:.9em}\
.legend span{margin-right:1.2em}.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}";

pub fn render(a: &Analysis) -> String {
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>mrshim analyze report</title><style>");
    o.push_str(STYLE);
    o.push_str("</style></head><body>\n");
    header(&mut o, a);
    ranks_box(&mut o, a);
    findings(&mut o, a);
    matrix(&mut o, a);
    let (tl, tl_note) = svg::timeline(a);
    o.push_str("<h2 id=\"timeline-title\">Registrations over time</h2>\n<p class=\"legend\"><span><svg width=\"10\" height=\"10\"><circle cx=\"5\" cy=\"5\" r=\"3\" fill=\"#2a9d3f\"/></svg> succeeded</span><span><svg width=\"10\" height=\"10\"><path d=\"M1 1l8 8m0 -8l-8 8\" stroke=\"#d62828\" stroke-width=\"2\"/></svg> failed</span><span><svg width=\"10\" height=\"10\"><path d=\"M5 0l5 5l-5 5l-5 -5z\" fill=\"#1f6feb\"/></svg> rescued by a retry strategy (or registered through a learned one)</span><span><svg width=\"14\" height=\"10\"><line x1=\"0\" x2=\"14\" y1=\"5\" y2=\"5\" stroke=\"#9bd3a8\" stroke-width=\"3\"/></svg> first to last registration of the rank</span><span><svg width=\"10\" height=\"10\"><line x1=\"5\" x2=\"5\" y1=\"0\" y2=\"10\" stroke=\"#888\"/></svg> deregistered</span></p>\n");
    o.push_str(&tl);
    let _ = writeln!(o, "\n<p class=\"note\" id=\"timeline-note\">{}</p>", esc(&tl_note));
    let (hist, hist_note) = svg::histogram(a);
    o.push_str("<h2>Registration sizes</h2>\n<p class=\"legend\"><span><i class=\"sw\" style=\"background:#2a9d3f\"></i>succeeded</span><span><i class=\"sw\" style=\"background:#d62828\"></i>failed</span>");
    if a.col.hist.iter().any(|b| b[crate::collect::RESCUED] > 0) {
        o.push_str("<span><i class=\"sw\" style=\"background:#1f6feb\"></i>rescued by mrshim (a retry, or a learned strategy)</span>");
    }
    o.push_str("</p>\n");
    o.push_str(&hist);
    if !hist_note.is_empty() {
        let _ = writeln!(o, "\n<p class=\"note\" id=\"histogram-note\">{}</p>", esc(&hist_note));
    }
    host_table(&mut o, a);
    retries(&mut o, a);
    if !a.col.notes.is_empty() || !a.ranks.notes.is_empty() {
        o.push_str("\n<h2>Notes</h2><ul>");
        for n in a.col.notes.iter().chain(&a.ranks.notes) {
            let _ = write!(o, "<li>{}</li>", esc(n));
        }
        o.push_str("</ul>");
    }
    o.push_str("\n</body></html>\n");
    o
}

fn header(o: &mut String, a: &Analysis) {
    let title = match &a.ranks.job_id {
        Some(j) => format!("mrshim analyze: job {j}"),
        None => "mrshim analyze".into(),
    };
    let _ = write!(o, "<h1>{}</h1><dl class=\"meta\" id=\"summary\">", esc(&title));
    let mut item = |k: &str, v: String| {
        let _ = write!(o, "<dt>{}</dt><dd>{v}</dd>", esc(k));
    };
    item(
        "result",
        esc(&format!(
            "{} of {} registration(s) failed on {} of {} host(s){}",
            a.failed(),
            a.registrations(),
            a.failing_hosts().count(),
            a.hosts.len(),
            super::rescue_clause(a).map(|r| format!("; {r}")).unwrap_or_default()
        )),
    );
    if let Some(w) = a.ranks.world_size {
        let logged: std::collections::BTreeSet<i64> = a.col.procs.map.values().filter_map(|p| p.rank).collect();
        item("ranks", esc(&format!("{} of {w} logged", logged.len())));
    }
    if let Some((t0, t1)) = a.col.time_range {
        item("time range", esc(&format!("{} – {} ({:.3} s)", utc(t0), &utc(t1)[11..], (t1 - t0) as f64 / 1e9)));
    }
    let bytes: u64 = a.col.files.iter().map(|f| f.bytes).sum();
    let names: Vec<String> = a.col.files.iter().take(4).map(|f| f.path.clone()).collect();
    let more = a.col.files.len().saturating_sub(names.len());
    item(
        "inputs",
        format!(
            "{} file(s), {}: {}{}",
            a.col.files.len(),
            esc(&human_size(bytes)),
            names.iter().map(|n| format!("<code>{}</code>", esc(n))).collect::<Vec<_>>().join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ),
    );
    item("mrshim", esc(env!("CARGO_PKG_VERSION")));
    o.push_str("</dl>\n");
}

fn ranks_box(o: &mut String, a: &Analysis) {
    let r = &a.ranks;
    if r.first_failure.is_none() && r.is_empty() {
        return;
    }
    // green only when it has nothing but good news; a first failure is not
    let ok = r.is_empty() && r.first_failure.is_none();
    let _ = write!(o, "<div class=\"box{}\" id=\"ranks\"><ul>", if ok { " ok" } else { "" });
    if let Some(f) = super::first_failure(a) {
        let _ = write!(o, "<li id=\"first-failure\">first failure: <b>{}</b></li>", esc(&f));
    }
    if !r.no_summary.is_empty() {
        let _ = write!(
            o,
            "<li id=\"no-summary\"><b>{} rank(s) ended without the exit summary</b> (killed, crashed, or left through _exit()): {}</li>",
            r.no_summary.len(),
            esc(&rank_refs(&r.no_summary, 20))
        );
    }
    if !r.no_registration.is_empty() {
        let _ = write!(
            o,
            "<li id=\"no-registration\"><b>{} rank(s) never reached a registration</b> (log without calls): {}</li>",
            r.no_registration.len(),
            esc(&rank_refs(&r.no_registration, 20))
        );
    }
    if !r.no_log.is_empty() {
        let _ = write!(
            o,
            "<li id=\"no-log\"><b>{} rank(s) never reached a registration</b> (no log of {} ranks): {}</li>",
            r.no_log.len(),
            r.world_size.unwrap_or(0),
            esc(&super::clip_list(&ranges(&r.no_log), 400))
        );
    }
    o.push_str("</ul></div>\n");
}

fn findings(o: &mut String, a: &Analysis) {
    o.push_str("<h2>Findings</h2>\n");
    if a.findings.is_empty() {
        o.push_str("<p>No failed memory registrations found.</p>");
    }
    for (i, f) in a.findings.iter().enumerate() {
        let _ = write!(
            o,
            "<div class=\"finding{}\" data-category=\"{}\"><h3>{}. {} <span class=\"conf\">confidence {:.2}</span></h3>",
            if i == 0 { " top" } else { "" },
            f.category,
            i + 1,
            f.category,
            f.confidence
        );
        let mut what = if f.warning {
            "<b>no failed registration seen; the stack warned</b>".to_string()
        } else {
            format!("<b>{}</b> {} x{}", esc(&f.calls.join(", ")), esc(&f.errnos.join("/")), f.count)
        };
        if !f.hosts.is_empty() {
            let _ = write!(what, " on {}", esc(&counted(f.hosts.iter().map(String::as_str), a.hosts.len())));
        }
        if !f.ranks.is_empty() {
            let _ = write!(what, " (ranks {})", esc(&super::clip_list(&ranges(&f.ranks), 200)));
        }
        let _ = write!(o, "<p>{what}</p><p>{}</p>", with_code(&f.explanation));
        if !f.evidence.is_empty() {
            o.push_str("<pre>");
            for e in &f.evidence {
                let _ = writeln!(o, "{}:{}  {}", esc(&e.file), e.line, esc(&super::evidence_text(&e.text)));
            }
            o.push_str("</pre>");
        }
        o.push_str("<p>Fix:</p><ul class=\"fixes\">");
        for fx in &f.fixes {
            let _ = write!(o, "<li>{}</li>", with_code(fx));
        }
        o.push_str("</ul></div>\n");
    }
}

/// Rows of the matrix and the host table: failing hosts (most failures first), then a few healthy ones
/// spread over the job. Returns the rows and how many failing hosts were left out.
fn host_rows(a: &Analysis) -> (Vec<&HostRow>, usize) {
    let failing: Vec<&HostRow> = a.failing_hosts().collect();
    let healthy: Vec<&HostRow> = a.hosts.iter().filter(|h| !h.failing()).collect();
    let mut rows: Vec<&HostRow> = failing.iter().take(MAX_FAILING_ROWS).copied().collect();
    let take = HEALTHY_ROWS.min(healthy.len());
    rows.extend((0..take).map(|i| healthy[i * healthy.len() / take]));
    (rows, failing.len().saturating_sub(MAX_FAILING_ROWS))
}

fn shown_note(a: &Analysis, rows: &[&HostRow], left_out: usize) -> String {
    let failing = a.failing_hosts().count();
    let mut s = format!("{} of {} host(s) shown", rows.len(), a.hosts.len());
    if failing > 0 {
        let _ = write!(s, ": {} of {failing} failing", failing - left_out);
        let healthy = rows.iter().filter(|h| !h.failing()).count();
        if healthy > 0 {
            let _ = write!(s, ", then {healthy} without failures for comparison");
        }
    }
    if left_out > 0 {
        let rest: Vec<&str> = a.failing_hosts().skip(MAX_FAILING_ROWS).map(|h| h.host.as_str()).collect();
        let _ = write!(s, "; failing hosts not shown: {}", super::clip_list(&compress(rest), 300));
    }
    s.push('.');
    s
}

fn matrix(o: &mut String, a: &Analysis) {
    if a.failing_hosts().next().is_none() {
        return;
    }
    let (rows, left_out) = host_rows(a);
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for h in a.failing_hosts() {
        for (k, n) in &h.failures {
            *totals.entry(k.as_str()).or_default() += n;
        }
    }
    let mut cols: Vec<(&str, u64)> = totals.into_iter().collect();
    cols.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
    let max = rows.iter().flat_map(|h| h.failures.values()).copied().max().unwrap_or(1).max(1) as f64;
    let any_rescued = rows.iter().any(|h| h.rescued > 0);
    o.push_str("<h2>Failures by host</h2>\n<div class=\"scroll\"><table id=\"matrix\"><thead><tr><th class=\"host\">host</th><th>ranks</th><th>calls</th>");
    for (c, _) in &cols {
        let _ = write!(o, "<th>{}</th>", esc(c));
    }
    if any_rescued {
        o.push_str("<th>rescued</th>");
    }
    o.push_str("</tr></thead><tbody>");
    for (i, h) in rows.iter().enumerate() {
        let sep = i > 0 && !h.failing() && rows[i - 1].failing();
        let _ = write!(
            o,
            "<tr class=\"{}{}\" data-host=\"{}\"><td class=\"host\">{}</td><td>{}</td><td>{}</td>",
            if h.failing() { "failing" } else { "healthy" },
            if sep { " sep" } else { "" },
            esc(&h.host),
            esc(&h.host),
            esc(&super::clip_list(&ranges(&h.ranks), 24)),
            h.calls
        );
        for (c, _) in &cols {
            match h.failures.get(*c) {
                Some(&n) => {
                    // heat: the share of the largest cell, never so pale that a single failure vanishes
                    let alpha = 0.2 + 0.8 * (n as f64 / max);
                    let fg = if alpha > 0.55 { "#fff" } else { "#222" };
                    let _ = write!(
                        o,
                        "<td class=\"cell\" style=\"background:rgba(214,40,40,{alpha:.2});color:{fg}\" title=\"{} {}: {n}\">{n}</td>",
                        esc(&h.host),
                        esc(c)
                    );
                }
                None => o.push_str("<td class=\"cell zero\" style=\"color:#bbb\">0</td>"),
            }
        }
        if any_rescued {
            let _ = write!(o, "<td class=\"rescued\" style=\"color:#1f6feb;font-weight:bold\">{}</td>", h.rescued);
        }
        o.push_str("</tr>");
    }
    let _ = write!(
        o,
        "</tbody></table></div>\n<p class=\"note\" id=\"matrix-note\">{}</p>\n",
        esc(&shown_note(a, &rows, left_out))
    );
}

fn memlock_text(h: &HostRow) -> String {
    h.memlock.iter().map(|m| m.map_or("unlimited".to_string(), human_size)).collect::<Vec<_>>().join(", ")
}

fn host_table(o: &mut String, a: &Analysis) {
    if a.hosts.is_empty() {
        return;
    }
    let (rows, left_out) = host_rows(a);
    // Versions come from doctor reports only: without one the column would be blank.
    let with_versions = rows.iter().any(|h| !h.versions.is_empty());
    o.push_str("<h2>Hosts</h2>\n<div class=\"scroll\"><table id=\"hosts\"><thead><tr><th class=\"host\">host</th><th>ranks</th><th>calls</th><th>failed</th><th>rescued</th><th>no summary</th><th class=\"host\">memlock</th><th class=\"host\">memory kinds</th>");
    if with_versions {
        o.push_str("<th class=\"host\">versions</th>");
    }
    o.push_str("</tr></thead><tbody>");
    for (i, h) in rows.iter().enumerate() {
        let sep = i > 0 && !h.failing() && rows[i - 1].failing();
        let kinds: Vec<String> = h.mem_kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = write!(
            o,
            "<tr class=\"{}{}\" data-host=\"{}\"><td class=\"host\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{}</td><td class=\"wrap\">{}</td>",
            if h.failing() { "failing" } else { "healthy" },
            if sep { " sep" } else { "" },
            esc(&h.host),
            esc(&h.host),
            esc(&super::clip_list(&ranges(&h.ranks), 24)),
            h.calls,
            h.failed,
            h.rescued,
            h.no_summary,
            esc(&memlock_text(h)),
            esc(&kinds.join(", "))
        );
        if with_versions {
            let versions: Vec<String> = h.versions.iter().map(|(k, v)| format!("{k} {}", v.join("/"))).collect();
            let _ = write!(o, "<td class=\"wrap\">{}</td>", esc(&versions.join("; ")));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table></div>\n");
    let healthy: Vec<&str> = a.hosts.iter().filter(|h| !h.failing()).map(|h| h.host.as_str()).collect();
    let mut note = shown_note(a, &rows, left_out);
    if !healthy.is_empty() {
        let _ = write!(note, " Without failures: {}.", super::clip_list(&counted(healthy, a.hosts.len()), 400));
    }
    let _ = writeln!(o, "<p class=\"note\" id=\"hosts-note\">{}</p>", esc(&note));
}

fn retries(o: &mut String, a: &Analysis) {
    if a.col.retries.is_empty() {
        return;
    }
    let mut by: BTreeMap<&str, [u64; 2]> = BTreeMap::new();
    for ((s, ok), n) in &a.col.retries {
        by.entry(s.as_str()).or_default()[*ok as usize] += n;
    }
    o.push_str("<h2>Retry strategies</h2>\n<div class=\"scroll\"><table id=\"retries\"><thead><tr><th class=\"host\">strategy</th><th>rescued</th><th>failed</th></tr></thead><tbody>");
    for (s, [failed, ok]) in by {
        let _ = write!(
            o,
            "<tr><td class=\"host\"><code>{}</code></td><td style=\"color:#1f6feb\">{ok}</td><td style=\"color:#d62828\">{failed}</td></tr>",
            esc(s)
        );
    }
    o.push_str("</tbody></table></div>\n<p class=\"note\">Attempts the shim made after a failed call (MRSHIM_RETRY), by strategy.</p>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backticks_become_code() {
        assert_eq!(with_code("run `ulimit -l` <now>"), "run <code>ulimit -l</code> &lt;now&gt;");
        assert_eq!(with_code("a `b"), "a `b", "an unpaired backtick stays");
    }
}
