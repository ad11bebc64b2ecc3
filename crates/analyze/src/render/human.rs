//! The one-screen answer: most likely cause first, wrapped to 80 columns.
use super::ranges;
use crate::Analysis;
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
    for word in text.split_whitespace() {
        let wl = width(word);
        if col + 1 + wl > W && col > indent {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            col = indent;
        } else if col > indent && !line.ends_with(' ') {
            line.push(' ');
            col += 1;
        }
        line.push_str(word);
        col += wl;
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
    let lines: u64 = a.col.files.iter().map(|f| f.lines).sum();
    let hosts = a.col.hosts.keys().filter(|h| !h.is_empty()).count();
    let head = format!(
        "mrshim analyze: {} input(s), {lines} line(s), {hosts} host(s); {} failed and {} successful registration(s)",
        a.col.files.len(),
        a.failed(),
        a.ok()
    );
    wrap(&mut o, &head, 2, "");
    if a.findings.is_empty() {
        let _ = writeln!(o, "\nNo failed memory registrations found.");
    }
    for (i, f) in a.findings.iter().enumerate() {
        o.push('\n');
        let head = format!("{}. {}", i + 1, printable(f.category));
        let _ =
            writeln!(o, "{}  (confidence {:.2})", paint(&head, if i == 0 { "1;31" } else { "1" }, color), f.confidence);
        let mut what = String::new();
        if !f.calls.is_empty() {
            what.push_str(&f.calls.join(", "));
        }
        if let Some(e) = &f.errno {
            what.push_str(&format!(" -> {}", f.errnos.join("/")));
            let _ = e;
        }
        what.push_str(&format!(" x{}", f.count));
        if !f.hosts.is_empty() {
            what.push_str(&format!(" on {}", f.hosts.join(", ")));
        }
        if !f.ranks.is_empty() {
            what.push_str(&format!(" (ranks {})", ranges(&f.ranks)));
        }
        wrap(&mut o, what.trim(), 3, "   ");
        wrap(&mut o, &f.explanation, 3, "   ");
        if !f.evidence.is_empty() {
            let _ = writeln!(o, "   evidence:");
            for e in &f.evidence {
                let loc = format!("{}:{}", printable(&short_path(&e.file)), e.line);
                let text = printable(&e.text);
                let one = format!("{loc}  {text}");
                if width(&one) <= W - 5 {
                    let _ = writeln!(o, "     {one}");
                } else {
                    let _ = writeln!(o, "     {}", clip(&loc, W - 5));
                    let _ = writeln!(o, "       {}", clip(&text, W - 7));
                }
            }
        }
        let _ = writeln!(o, "   fix:");
        for fx in &f.fixes {
            wrap(&mut o, fx, 7, "     - ");
        }
    }
    if !a.col.notes.is_empty() {
        let _ = writeln!(o, "\nnotes:");
        for n in &a.col.notes {
            wrap(&mut o, n, 4, "  - ");
        }
    }
    o
}

fn short_path(p: &str) -> String {
    let parts: Vec<&str> = p.rsplit('/').take(2).collect();
    if parts.len() == 2 && p.matches('/').count() > 1 {
        format!("{}/{}", parts[1], parts[0])
    } else {
        p.to_string()
    }
}
