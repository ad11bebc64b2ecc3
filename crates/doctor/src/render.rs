//! Human output for a doctor report: one line a check, details and fix indented, wrapped at 80 columns.
use crate::report::{Report, Status};
use std::fmt::Write;

pub fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut col = 0;
    for word in text.split_whitespace() {
        if col > indent && col + 1 + word.chars().count() > width {
            out.push('\n');
            col = 0;
        }
        if col == 0 {
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += word.chars().count();
    }
    out
}

pub fn tag(s: Status, color: bool) -> String {
    let (t, c) = match s {
        Status::Ok => (" ok ", "32"),
        Status::Warn => ("WARN", "33"),
        Status::Fail => ("FAIL", "31"),
    };
    if color {
        format!("\x1b[{c}m[{t}]\x1b[0m")
    } else {
        format!("[{t}]")
    }
}

pub fn human(r: &Report, color: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "mrshim doctor: {}{}",
        r.host,
        r.root
            .as_ref()
            .map(|p| format!(" (from {p})"))
            .unwrap_or_default()
    );
    for c in &r.checks {
        let body = wrap(&c.value, 22, 80);
        let _ = writeln!(
            o,
            "{} {:<14} {}",
            tag(c.status, color),
            c.id,
            body.trim_start()
        );
        for d in &c.details {
            let _ = writeln!(o, "{}", wrap(d, 7, 80));
        }
        if let Some(f) = &c.fix {
            let _ = writeln!(o, "{}", wrap(&format!("fix: {f}"), 7, 80));
        }
    }
    let _ = writeln!(
        o,
        "{} ok, {} warn, {} fail",
        r.count(Status::Ok),
        r.count(Status::Warn),
        r.count(Status::Fail)
    );
    o
}
