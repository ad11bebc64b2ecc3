//! What travels around a whole line, before any launcher prefix can be read: a UTF-8 byte-order
//! mark, HTML escaping (a report copied from a web page or a mail: `&lt;warn&gt;`), Markdown quoting
//! (`> `, `> > ` in a GitHub reply), Docker's json-file driver (`{"log":"...\n","stream":"stderr",
//! "time":"..."}`) and terminal colour (ANSI escape sequences). Undone outside in, each only when its
//! first byte is there, so a plain line costs a few byte tests and is never copied.
use std::borrow::Cow;

/// The line a program printed, from the line as it was stored or pasted.
pub fn line(s: &str) -> Cow<'_, str> {
    let s = s.strip_prefix('\u{feff}').unwrap_or(s);
    // one pass tells whether the two wrappers found anywhere in a line can be there at all
    let (amp, esc) = match memchr::memchr2(b'&', 0x1b, s.as_bytes()) {
        None => (false, false),
        Some(i) => {
            let rest = &s.as_bytes()[i..];
            (memchr::memchr(b'&', rest).is_some(), memchr::memchr(0x1b, rest).is_some())
        }
    };
    let mut s = Cow::Borrowed(s);
    if amp {
        if let Some(u) = unescape_html(&s) {
            s = Cow::Owned(u);
        }
    }
    // the quote's text is a suffix of the line
    if let Some(cut) = unquote(&s).map(|q| s.len() - q.len()).filter(|&c| c > 0) {
        s = match s {
            Cow::Borrowed(b) => Cow::Borrowed(&b[cut..]),
            Cow::Owned(o) => Cow::Owned(o[cut..].to_string()),
        };
    }
    let mut log_decoded = false;
    if let Some(log) = docker_log(&s) {
        s = Cow::Owned(log);
        log_decoded = true;
    }
    // (docker's json-file escapes ESC as \u001b: decoded, it is there now)
    if esc || log_decoded && memchr::memchr(0x1b, s.as_bytes()).is_some() {
        s = Cow::Owned(strip_ansi(&s));
    }
    s
}

/// `> text`, `> > text`, `>text` (up to three spaces before, as Markdown allows): the text. A lone
/// `>` is an empty quoted line.
fn unquote(s: &str) -> Option<&str> {
    let t = s.trim_start_matches(' ');
    if !t.starts_with('>') || s.len() - t.len() > 3 {
        return None;
    }
    let mut t = t;
    while let Some(r) = t.strip_prefix('>') {
        t = r.strip_prefix(' ').unwrap_or(r);
        // a nested quote: `> > text`
        if !t.starts_with('>') {
            break;
        }
    }
    Some(t)
}

/// HTML's character references for the characters logs print (`&lt;` `&gt;` `&amp;` `&quot;` `&#39;`
/// `&#x27;` `&nbsp;`); `None` when the line has none of them.
fn unescape_html(s: &str) -> Option<String> {
    const REFS: [(&str, char); 8] = [
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&amp;", '&'),
        ("&quot;", '"'),
        ("&#39;", '\''),
        ("&#x27;", '\''),
        ("&#34;", '"'),
        ("&nbsp;", ' '),
    ];
    let mut out: Option<String> = None;
    let mut rest = s;
    while let Some(i) = memchr::memchr(b'&', rest.as_bytes()) {
        let (head, tail) = rest.split_at(i);
        let hit = REFS.iter().find(|(r, _)| tail.starts_with(r));
        let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
        o.push_str(head);
        match hit {
            Some((r, c)) => {
                o.push(*c);
                rest = &tail[r.len()..];
            }
            None => {
                o.push('&');
                rest = &tail[1..];
            }
        }
    }
    let mut o = out?;
    o.push_str(rest);
    (o.len() != s.len()).then_some(o)
}

/// Docker's json-file log driver: one JSON object per line, the program's line (with its `\n`) in
/// `log`.
fn docker_log(s: &str) -> Option<String> {
    let t = s.trim_start();
    if !t.starts_with("{\"log\":") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        log: String,
    }
    let e: Entry = serde_json::from_str(t).ok()?;
    let log = e.log.strip_suffix('\n').unwrap_or(&e.log);
    Some(log.strip_suffix('\r').unwrap_or(log).to_string())
}

/// The text without ANSI escape sequences: CSI (`ESC [ params final`, colours and erase), OSC
/// (`ESC ] ... BEL` or `ESC \`, titles and links) and the two-byte ones.
fn strip_ansi(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != 0x1b {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'[') => {
                i += 2;
                while i < b.len() && !(0x40..=0x7e).contains(&b[i]) {
                    i += 1;
                }
                i += 1;
            }
            Some(b']') => {
                i += 2;
                while i < b.len() && b[i] != 0x07 && !(b[i] == 0x1b && b.get(i + 1) == Some(&b'\\')) {
                    i += 1;
                }
                i += if b.get(i) == Some(&0x1b) { 2 } else { 1 };
            }
            Some(_) => i += 2,
            None => i += 1,
        }
    }
    // only ASCII bytes were removed: what is left is still UTF-8
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_come_off() {
        let w = "libfabric:1:efa:mr:efa_mr_reg_impl():850<warn> Unable to register MR: Cannot allocate memory";
        assert_eq!(line(w), w);
        assert!(matches!(line(w), Cow::Borrowed(_)), "a plain line is not copied");
        assert_eq!(line(&format!("\u{feff}{w}")), w);
        assert_eq!(line(&w.replace('<', "&lt;").replace('>', "&gt;")), w);
        assert_eq!(line(&format!("> {w}")), w);
        assert_eq!(line(&format!("> > {w}")), w);
        assert_eq!(line(">"), "");
        assert_eq!(line(&format!("\x1b[0;31m{w}\x1b[0m\x1b[K")), w);
        assert_eq!(line(&format!("\x1b]0;title\x07{w}")), w);
        let d = format!(
            "{{\"log\":{},\"stream\":\"stderr\",\"time\":\"2026-12-06T21:40:01.1Z\"}}",
            serde_json::json!(format!("{w}\n"))
        );
        assert_eq!(line(&d), w);
        // all at once: the quoted, HTML-escaped docker line of a coloured program
        let coloured = format!("\x1b[31m{w}\x1b[0m\n");
        let d = format!("{{\"log\":{},\"stream\":\"stderr\"}}", serde_json::json!(coloured));
        let pasted =
            format!("> {}", d.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;"));
        assert_eq!(line(&pasted), w);
        // what is not a wrapper stays
        for s in ["a && b", "x -> y", "&lt", "{\"v\":1,\"call\":\"ibv_reg_mr\"}", "    > not a quote"] {
            assert_eq!(line(s), s, "{s}");
        }
    }
}
