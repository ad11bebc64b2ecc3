//! The one-screen answer: most likely cause first, wrapped to 80 columns.
use super::{clip_list, first_failure, job_lines, ranges, rescue_clause};
use crate::hosts::HostRow;
use crate::Analysis;
use mrshim_hostlist::{compress, counted};
use std::fmt::Write;

const W: usize = 80;

/// Text from the logs as the terminal may see it: control characters (an escape sequence can
/// clear the screen, move the cursor, retitle the window or hide lines) and bidirectional
/// overrides (they reorder what is shown) become visible escapes such as `\x1b`.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !s.chars().any(unsafe_char) {
        return s.into();
    }
    let mut t = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if (c as u32) < 0x100 && unsafe_char(c) => {
                let _ = write!(t, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(t, "\\u{{{:04x}}}", c as u32);
            }
            c => t.push(c),
        }
    }
    t.into()
}

fn wrap(out: &mut String, text: &str, indent: usize, first: &str) {
    let text = printable(text);
    let mut line = String::from(first);
    let mut col = width(first);
    // whether the line has a word yet (a short first word may end before the indent)
    let mut words = false;
    for word in text.split_whitespace() {
        let wl = width(word);
        if col + 1 + wl > W && words {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            col = indent;
        } else if words && !line.ends_with(' ') {
            line.push(' ');
            col += 1;
        }
        line.push_str(word);
        col += wl;
        words = true;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

/// Terminal columns of a character: East Asian wide characters take two.
fn cw(c: char) -> usize {
    let u = c as u32;
    let wide = matches!(u, 0x1100..=0x115F | 0x2E80..=0xA4CF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF | 0xFE30..=0xFE4F | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6 | 0x20000..=0x3FFFD);
    if wide {
        2
    } else {
        1
    }
}

pub fn width(s: &str) -> usize {
    s.chars().map(cw).sum()
}

fn clip(s: &str, n: usize) -> String {
    if width(s) <= n {
        return s.to_string();
    }
    let mut t = String::new();
    let mut w = 0;
    for c in s.chars() {
        if w + cw(c) > n.saturating_sub(3) {
            break;
        }
        w += cw(c);
        t.push(c);
    }
    t.push_str("...");
    t
}

fn paint(s: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

pub fn render(a: &Analysis, color: bool) -> String {
    let mut o = String::new();
    let mut head = format!(
        "mrshim analyze: {}, {}: {} of {} failed",
        plural(a.col.files.len() as u64, "input"),
        plural(a.hosts.len() as u64, "host"),
        a.failed(),
        plural(a.registrations(), "registration")
    );
    if let Some(r) = rescue_clause(a) {
        head.push_str(&format!("; {r}"));
    }
    wrap(&mut o, &head, 2, "");
    // with a host table, the first failure heads it
    for l in job_lines(a, !has_host_table(a)) {
        wrap(&mut o, &l, 2, "");
    }
    if a.findings.is_empty() {
        let _ = writeln!(o, "\nNo failed memory registrations found.");
    }
    for (i, f) in a.findings.iter().enumerate() {
        o.push('\n');
        let head = format!("{}. {}", i + 1, printable(f.category));
        let _ =
            writeln!(o, "{}  (confidence {:.2})", paint(&head, if i == 0 { "1;31" } else { "1" }, color), f.confidence);
        let mut what = f.calls.join(", ");
        if f.errno.is_some() {
            what.push_str(&format!(" -> {}", f.errnos.join("/")));
        }
        if f.warning {
            what = "no failed registration seen; the stack warned".into();
        } else {
            what.push_str(&format!(" x{}", f.count));
        }
        if !f.hosts.is_empty() {
            what.push_str(&format!(" on {}", counted(f.hosts.iter().map(String::as_str), a.hosts.len())));
        }
        // with a host table below, the ranks are there, per host
        if !f.ranks.is_empty() && a.hosts.len() < 2 {
            what.push_str(&format!(" (ranks {})", clip_list(&ranges(&f.ranks), 60)));
        }
        wrap(&mut o, what.trim(), 3, "   ");
        wrap(&mut o, &f.explanation, 3, "   ");
        if !f.decide.is_empty() {
            let _ = writeln!(o, "   checks that would decide:");
            for d in &f.decide {
                wrap(&mut o, d, 7, "     - ");
            }
        }
        evidence(&mut o, &f.evidence);
        fixes(&mut o, &f.fixes, f.retry.is_some());
    }
    host_table(&mut o, a);
    if !a.col.notes.is_empty() {
        let _ = writeln!(o, "\nnotes:");
        for n in &a.col.notes {
            wrap(&mut o, n, 4, "  - ");
        }
    }
    o
}

/// Evidence lines the text shows per finding; `--json` and `--report` have all of them.
const MAX_EVIDENCE: usize = 2;
/// Fixes the text shows before the shim's retry fix; the rest are counted.
const MAX_FIXES: usize = 2;

/// One line per piece of evidence, cut to the width; the rest counted.
fn evidence(o: &mut String, ev: &[crate::collect::Evid]) {
    if ev.is_empty() {
        return;
    }
    let more = ev.len().saturating_sub(MAX_EVIDENCE);
    let _ = writeln!(
        o,
        "   evidence{}:",
        if more > 0 { format!(" ({more} more in --json/--report)") } else { String::new() }
    );
    for e in ev.iter().take(MAX_EVIDENCE) {
        let text = printable(&super::evidence_text(&e.text)).into_owned();
        let loc = printable(&short_path(&e.file)).into_owned();
        let _ = writeln!(o, "     {}", clip(&format!("{loc}:{}  {text}", e.line), W - 5));
    }
}

/// The first fixes and the shim's retry fix (the last one when `retry`); the count of the others.
fn fixes(o: &mut String, fixes: &[String], retry: bool) {
    let (main, last) =
        if retry && fixes.len() > MAX_FIXES + 1 { fixes.split_at(fixes.len() - 1) } else { (fixes, &[][..]) };
    let shown = if last.is_empty() { main.len() } else { MAX_FIXES };
    match main.len() - shown {
        0 => o.push_str("   fix:\n"),
        n => o.push_str(&format!("   fix ({n} more in --json/--report):\n")),
    }
    for fx in main.iter().take(shown).chain(last) {
        wrap(o, fx, 7, "     - ");
    }
}

/// Failing hosts shown one per line in the text; the rest are a host list.
const MAX_HOST_LINES: usize = 8;

/// The per-host table, when there is more than one host and something failed: failing hosts first,
/// one line each, then the healthy ones as one host list.
fn has_host_table(a: &Analysis) -> bool {
    a.hosts.len() >= 2 && a.failing_hosts().next().is_some()
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn host_table(o: &mut String, a: &Analysis) {
    if !has_host_table(a) {
        return;
    }
    let failing: Vec<&HostRow> = a.failing_hosts().collect();
    let mut head = format!("hosts: {} of {} failing", failing.len(), a.hosts.len());
    if let Some(first) = first_failure(a) {
        head.push_str(&format!("; first failure: {first}"));
    }
    o.push('\n');
    wrap(o, &head, 2, "");
    let hw = failing.iter().take(MAX_HOST_LINES).map(|h| width(&h.host)).max().unwrap_or(4).clamp(4, 24);
    for h in failing.iter().take(MAX_HOST_LINES) {
        let top = h.failures.iter().max_by_key(|x| x.1).map(|(k, _)| k.clone()).unwrap_or_default();
        let memlock = match h.memlock.iter().find(|m| m.is_some()).or(h.memlock.first()) {
            Some(Some(m)) => format!("  memlock {}", crate::findings::human_size(*m)),
            Some(None) => "  memlock unlimited".into(),
            None => String::new(),
        };
        let line = format!(
            "  {:<hw$}  ranks {:<9} {}/{} failed  {top}{memlock}",
            printable(&h.host),
            clip(&ranges(&h.ranks), 9),
            h.failed,
            h.calls,
        );
        let _ = writeln!(o, "{}", clip(&line, W));
    }
    if failing.len() > MAX_HOST_LINES {
        let rest = compress(failing[MAX_HOST_LINES..].iter().map(|h| h.host.as_str()));
        wrap(o, &format!("and {} more failing: {}", failing.len() - MAX_HOST_LINES, clip_list(&rest, 150)), 4, "  ");
    }
    let healthy: Vec<&str> = a.hosts.iter().filter(|h| !h.failing()).map(|h| h.host.as_str()).collect();
    if !healthy.is_empty() {
        let list = clip_list(&compress(healthy.iter().copied()), 150);
        wrap(o, &format!("{} without failures: {list}", healthy.len()), 4, "  ");
    }
}

fn short_path(p: &str) -> String {
    let parts: Vec<&str> = p.rsplit('/').take(2).collect();
    if parts.len() == 2 && p.matches('/').count() > 1 {
        format!("{}/{}", parts[1], parts[0])
    } else {
        p.to_string()
    }
}
