//! `--report out.html`: one self-contained page (no scripts, no network): findings, a per-rank timeline
//! and a size histogram of the registrations, both inline SVG.
use super::ranges;
use crate::findings::human_size;
use crate::Analysis;
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

const MAX_ROWS: usize = 64;

fn timeline(a: &Analysis) -> String {
    let pts = &a.col.points;
    let mut rows: BTreeMap<(String, Option<i64>), usize> = BTreeMap::new();
    for p in pts {
        let n = rows.len();
        if n < MAX_ROWS || rows.contains_key(&(p.host.clone(), p.rank)) {
            rows.entry((p.host.clone(), p.rank)).or_insert(n);
        }
    }
    // rows in (host, rank) order
    let order: Vec<(String, Option<i64>)> = rows.keys().cloned().collect();
    let index: BTreeMap<&(String, Option<i64>), usize> = order.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let (w, row_h, left) = (900.0, 14.0, 170.0);
    let h = 30.0 + row_h * order.len().max(1) as f64;
    let (t0, t1) = pts.iter().fold((u64::MAX, 0u64), |(a, b), p| (a.min(p.t), b.max(p.t)));
    let span = (t1.saturating_sub(t0)).max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="registrations per rank over time">"##
    );
    if pts.is_empty() {
        s.push_str(r##"<text x="10" y="20">no registrations in the input</text>"##);
    }
    for (i, (host, rank)) in order.iter().enumerate() {
        let y = 20.0 + row_h * i as f64;
        let label = format!(
            "{} r{}",
            if host.is_empty() { "?" } else { host },
            rank.map(|r| r.to_string()).unwrap_or_else(|| "?".into())
        );
        let _ = write!(
            s,
            r##"<text x="4" y="{:.1}" font-size="11">{}</text><line x1="{left}" x2="{w}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/>"##,
            y + 4.0,
            esc(&label)
        );
    }
    // successes first so failures are drawn on top
    for ok in [true, false] {
        for p in pts.iter().filter(|p| !p.failed() == ok) {
            let Some(&row) = index.get(&(p.host.clone(), p.rank)) else {
                continue;
            };
            let x = left + (w - left - 10.0) * (p.t - t0) as f64 / span;
            let y = 20.0 + row_h * row as f64;
            let (r, col) = if ok { (2.0, "#2a9d3f") } else { (4.0, "#d62828") };
            let _ = write!(
                s,
                r##"<circle class="{}" cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{col}"/>"##,
                if ok { "ok" } else { "fail" }
            );
        }
    }
    let unit = if pts.iter().any(|p| p.timed) { format!("{:.3} s", span / 1e9) } else { "input order".into() };
    let _ = write!(s, r##"<text x="{left}" y="{:.1}" font-size="11">time span: {}</text></svg>"##, h - 2.0, esc(&unit));
    s
}

fn histogram(a: &Analysis) -> String {
    let hist = &a.col.hist;
    let used: Vec<usize> = (0..hist.len()).filter(|&b| hist[b][0] + hist[b][1] > 0).collect();
    let (w, h, bottom) = (900.0, 220.0, 190.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg id="histogram" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="registration sizes">"##
    );
    if used.is_empty() {
        s.push_str(r##"<text x="10" y="20">no registration sizes in the input</text></svg>"##);
        return s;
    }
    let (lo, hi) = (used[0], *used.last().unwrap_or(&used[0]));
    let n = hi - lo + 1;
    let max = (lo..=hi).map(|b| hist[b][0] + hist[b][1]).max().unwrap_or(1).max(1) as f64;
    let bw = (w - 20.0) / n as f64;
    for (i, b) in (lo..=hi).enumerate() {
        let (fail, ok) = (hist[b][0] as f64, hist[b][1] as f64);
        // log scale so a few failures stay visible next to many successes
        let scale = |v: f64| {
            if v <= 0.0 {
                0.0
            } else {
                170.0 * (1.0 + v).ln() / (1.0 + max).ln()
            }
        };
        let x = 10.0 + bw * i as f64;
        let ht = scale(ok + fail);
        let hf = if ok + fail > 0.0 { ht * fail / (ok + fail) } else { 0.0 };
        let _ = write!(
            s,
            r##"<rect class="ok" x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#2a9d3f"><title>{}: {} ok</title></rect>"##,
            bottom - ht,
            (bw - 2.0).max(1.0),
            ht - hf,
            esc(&human_size(1 << b)),
            ok
        );
        if hf > 0.0 {
            let _ = write!(
                s,
                r##"<rect class="fail" x="{x:.1}" y="{:.1}" width="{:.1}" height="{hf:.1}" fill="#d62828"><title>{}: {} failed</title></rect>"##,
                bottom - hf,
                (bw - 2.0).max(1.0),
                esc(&human_size(1 << b)),
                fail
            );
        }
        if n <= 24 || i % 2 == 0 {
            let _ = write!(
                s,
                r##"<text x="{x:.1}" y="{:.1}" font-size="9">{}</text>"##,
                bottom + 14.0,
                esc(&human_size(1 << b))
            );
        }
    }
    s.push_str("</svg>");
    s
}

pub fn render(a: &Analysis) -> String {
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mrshim analyze report</title>");
    o.push_str("<style>body{font-family:sans-serif;max-width:960px;margin:1em auto;color:#222}h2{border-bottom:1px solid #ccc}.finding{border-left:4px solid #999;padding:0 1em;margin:1em 0}.finding.top{border-color:#d62828}code,pre{background:#f5f5f5}pre{white-space:pre-wrap;padding:.5em}.conf{color:#666}</style></head><body>\n");
    let _ = write!(o, "<h1>mrshim analyze</h1><p id=\"summary\">{} input(s), {} failed and {} successful registration(s), {} host(s).</p>", a.col.files.len(), a.failed(), a.ok(), a.col.hosts.keys().filter(|h| !h.is_empty()).count());
    o.push_str("<h2>Findings</h2>\n");
    if a.findings.is_empty() {
        o.push_str("<p>No failed memory registrations found.</p>");
    }
    for (i, f) in a.findings.iter().enumerate() {
        let _ = write!(o, "<div class=\"finding{}\" data-category=\"{}\"><h3>{}. {} <span class=\"conf\">confidence {:.2}</span></h3>", if i == 0 { " top" } else { "" }, f.category, i + 1, f.category, f.confidence);
        let _ = write!(
            o,
            "<p><b>{}</b> {} x{} {} {}</p>",
            esc(&f.calls.join(", ")),
            esc(&f.errnos.join("/")),
            f.count,
            esc(&f.hosts.join(", ")),
            if f.ranks.is_empty() { String::new() } else { format!("(ranks {})", esc(&ranges(&f.ranks))) }
        );
        let _ = write!(o, "<p>{}</p>", esc(&f.explanation));
        if !f.evidence.is_empty() {
            o.push_str("<pre>");
            for e in &f.evidence {
                let _ = writeln!(o, "{}:{}  {}", esc(&e.file), e.line, esc(&e.text));
            }
            o.push_str("</pre>");
        }
        o.push_str("<ul>");
        for fx in &f.fixes {
            let _ = write!(o, "<li>{}</li>", esc(fx));
        }
        o.push_str("</ul></div>\n");
    }
    o.push_str("<h2>Registrations per rank over time</h2>\n");
    o.push_str(&timeline(a));
    o.push_str("\n<p>green: succeeded, red: failed (a sample when there are many).</p><h2>Registration sizes</h2>\n");
    o.push_str(&histogram(a));
    if !a.col.notes.is_empty() {
        o.push_str("\n<h2>Notes</h2><ul>");
        for n in &a.col.notes {
            let _ = write!(o, "<li>{}</li>", esc(n));
        }
        o.push_str("</ul>");
    }
    o.push_str("\n</body></html>\n");
    o
}
