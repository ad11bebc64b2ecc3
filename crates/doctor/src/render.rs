//! Human output for a doctor report: one line a check, details and fix indented, wrapped at 80 columns.
use crate::report::{Report, Status};
use std::fmt::Write;

pub fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut col = 0;
    let room = width.saturating_sub(indent).max(1);
    // A token wider than the room (a long path) is cut into pieces that fit.
    let pieces = text.split_whitespace().flat_map(|w| {
        let c: Vec<char> = w.chars().collect();
        c.chunks(room).map(|p| p.iter().collect::<String>()).collect::<Vec<_>>()
    });
    for word in pieces {
        let word = word.as_str();
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

/// A path cut to `max` columns by replacing its leading components with `…`, so the part that
/// names the tree (its last components) stays readable and the 80-column promise holds.
pub fn elide(path: &str, max: usize) -> String {
    if path.chars().count() <= max {
        return path.to_string();
    }
    let keep = max.saturating_sub(1);
    let tail: String = {
        let chars: Vec<char> = path.chars().collect();
        chars[chars.len() - keep..].iter().collect()
    };
    // Start the tail at a component boundary when there is one.
    match tail.find('/') {
        Some(i) if i + 1 < tail.len() => format!("…{}", &tail[i..]),
        _ => format!("…{tail}"),
    }
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
    let _ = writeln!(o, "mrshim doctor: {}", r.host);
    if let Some(p) = &r.root {
        let _ = writeln!(o, "  from {}", elide(p, 80 - 7));
    }
    for c in &r.checks {
        let body = wrap(&c.value, 22, 80);
        let _ = writeln!(o, "{} {:<14} {}", tag(c.status, color), c.id, body.trim_start());
        for d in &c.details {
            let _ = writeln!(o, "{}", wrap(d, 7, 80));
        }
        if let Some(f) = &c.fix {
            let _ = writeln!(o, "{}", wrap(&format!("fix: {f}"), 7, 80));
        }
    }
    let _ = writeln!(o, "{} ok, {} warn, {} fail", r.count(Status::Ok), r.count(Status::Warn), r.count(Status::Fail));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_every_line_inside_the_width() {
        let long = format!("see {} now", "/x".repeat(60));
        for l in wrap(&long, 7, 40).lines() {
            assert!(l.chars().count() <= 40, "{l}");
        }
        assert_eq!(wrap(&long, 7, 40).replace(['\n', ' '], ""), long.replace(' ', ""));
    }

    #[test]
    fn elide_keeps_the_tail_of_long_paths() {
        assert_eq!(elide("/a/b", 10), "/a/b");
        let p = "/check/work/main/tests/fixtures/doctor/memlock64k/";
        let e = elide(p, 30);
        assert!(e.chars().count() <= 30, "{e}");
        assert!(e.starts_with("…/") && e.ends_with("doctor/memlock64k/"), "{e}");
    }
}
