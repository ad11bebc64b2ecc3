//! What travels around a whole line, before any launcher prefix can be read: a UTF-8 byte-order
//! mark, typography a rich-text editor or a web page put in (no-break spaces, curly quotes), HTML
//! (a report copied from a web page or a mailing-list archive: `&lt;warn&gt;`, `<PRE>`, `<I>`,
//! `<A HREF="...">`), Markdown quoting (`> `, `> > ` in a GitHub or mail reply), what a paste puts
//! in front of or around each line (a list bullet, inline-code backticks, a chat's glued code
//! fence, a viewer's line-number gutter), Docker's json-file driver (`{"log":"...\n","stream":
//! "stderr","time":"..."}`), terminal colour (ANSI escape sequences) and trailing whitespace.
//! Undone outside in, each only when its first byte is there, so a plain line costs a few byte
//! tests and is never copied.
use std::borrow::Cow;

/// What [`unwrap`] took off the front of a line, which the join of re-broken lines
/// ([`super::rejoin`]) goes by: a mailer repeats the quote on every piece of a line it breaks,
/// and a bullet or a gutter's number starts a line of its own.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Front {
    /// How deep the line was quoted (`> > ` is 2).
    pub quote: u8,
    /// A list bullet or a line number was in front: the line is one of its own.
    pub marked: bool,
}

/// The line a program printed, from the line as it was stored or pasted.
pub fn line(s: &str) -> Cow<'_, str> {
    unwrap(s).0
}

/// [`line`], and what was in front of it.
pub fn unwrap(s: &str) -> (Cow<'_, str>, Front) {
    if plain(s) {
        return (Cow::Borrowed(s), Front::default());
    }
    undo(s)
}

/// [`unwrap`] of a line that may carry wrappers: each undone where its first byte is.
fn undo(s: &str) -> (Cow<'_, str>, Front) {
    let mut front = Front::default();
    let s = s.strip_prefix('\u{feff}').unwrap_or(s);
    // one pass tells whether the wrappers found anywhere in a line can be there at all
    let (mut amp, mut esc, mut lt, mut wide) = (false, false, false, false);
    for i in memchr::memchr3_iter(b'&', 0x1b, b'<', s.as_bytes()) {
        match s.as_bytes()[i] {
            b'&' => amp = true,
            b'<' => lt = true,
            _ => esc = true,
        }
        if amp && esc && lt {
            break;
        }
    }
    if memchr::memchr2(0xc2, 0xe2, s.as_bytes()).is_some() {
        wide = true;
    }
    let mut s = Cow::Borrowed(s);
    if wide {
        if let Some(u) = plain_typography(&s) {
            s = Cow::Owned(u);
        }
    }
    if lt {
        if let Some(u) = strip_tags(&s) {
            s = Cow::Owned(u);
        }
    }
    if amp {
        if let Some(u) = unescape_html(&s) {
            s = Cow::Owned(u);
        }
    }
    if let Some((q, depth)) = unquote(&s) {
        let cut = s.len() - q.len();
        front.quote = depth;
        if cut > 0 {
            let end = s.len();
            s = sub(s, cut, end);
        }
    }
    // a paste's marks, outside in: a bullet, inline code, a chat's glued fence, a line number
    for _ in 0..4 {
        let t: &str = &s;
        if let Some(r) = bullet(t).or_else(|| gutter(t)) {
            front.marked = true;
            let cut = t.len() - r.len();
            let end = s.len();
            s = sub(s, cut, end);
        } else if let Some((a, b)) = inline_code(t) {
            s = sub(s, a, b);
        } else {
            break;
        }
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
    // trailing blanks (an editor's, a mail's `format=flowed` soft break) are no part of the line
    let t = s.trim_end_matches([' ', '\t']).len();
    if t < s.len() {
        s = match s {
            Cow::Borrowed(b) => Cow::Borrowed(&b[..t]),
            Cow::Owned(mut o) => {
                o.truncate(t);
                Cow::Owned(o)
            }
        };
    }
    (s, front)
}

/// Whether none of the wrappers can be on `s` (most lines of a log): ASCII without `&`, ESC or
/// a `<` that opens an HTML tag, not starting with a blank, a control byte, a quote, a bullet, a gutter's number, a
/// backtick or a docker record, and not ending with a blank or a backtick. Two passes over the
/// bytes instead of a test of each wrapper.
fn plain(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else { return true };
    let front = match first {
        b'0'..=b'9' => gutter(s).is_some(),
        b'-' | b'*' => bullet(s).is_some(),
        // a shim record is JSON too: only docker's is a wrapper
        b'{' => s.starts_with("{\"log\":"),
        b'>' | b'`' => true,
        b'!'..=b'~' => false,
        _ => true,
    };
    // a `<` that opens none of the tags [`strip_tags`] undoes (libfabric's `<warn>`, `<module>`)
    // leaves the line as it is
    !front
        && !matches!(last, b' ' | b'\t' | b'`')
        && s.is_ascii()
        && memchr::memchr2(b'&', 0x1b, b).is_none()
        && (memchr::memchr(b'<', b).is_none() || strip_tags(s).is_none())
}

/// The bytes `a..b` of `s`, borrowed when `s` is.
fn sub(s: Cow<'_, str>, a: usize, b: usize) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(x) => Cow::Borrowed(&x[a..b]),
        Cow::Owned(o) => Cow::Owned(o[a..b].to_string()),
    }
}

/// No-break spaces (U+00A0, U+2007, U+202F) as spaces and typographic quotes (`‘’‚‛`, `“”„`) as
/// the ASCII ones programs print: a page renders runs of spaces as `&nbsp;`, a word processor
/// or a chat client curls `Couldn't`. `None` when the line has none of them.
fn plain_typography(s: &str) -> Option<String> {
    let hit = |c: char| matches!(c, '\u{a0}' | '\u{2007}' | '\u{202f}' | '\u{2018}'..='\u{201e}');
    if !s.contains(hit) {
        return None;
    }
    Some(
        s.chars()
            .map(|c| match c {
                '\u{a0}' | '\u{2007}' | '\u{202f}' => ' ',
                '\u{2018}' | '\u{2019}' | '\u{201a}' | '\u{201b}' => '\'',
                '\u{201c}' | '\u{201d}' | '\u{201e}' => '"',
                c => c,
            })
            .collect(),
    )
}

/// The HTML tags a web page or a mailing-list archive puts around text (pipermail's and MHonArc's
/// `<PRE>`, `<I>`, `<B>`, `<TT>`, `<A HREF="...">`, `<BR>`, a forum's `<code>`, `<span ...>`,
/// `<font ...>`), any case; `None` when the line has none. Other `<word>`s are a log's own text
/// (libfabric's `<warn>`, Open MPI's `<stderr>`, a traceback's `<module>`).
fn strip_tags(s: &str) -> Option<String> {
    const TAGS: [&str; 14] =
        ["a", "b", "i", "u", "tt", "em", "pre", "code", "strong", "span", "font", "br", "kbd", "samp"];
    let b = s.as_bytes();
    let mut out: Option<String> = None;
    let mut from = 0;
    for i in memchr::memchr_iter(b'<', b) {
        if i < from {
            continue;
        }
        let mut j = i + 1;
        if b.get(j) == Some(&b'/') {
            j += 1;
        }
        let name_end = b[j..].iter().position(|c| !c.is_ascii_alphabetic()).map_or(b.len(), |p| j + p);
        let name = &s[j..name_end];
        if name.is_empty() || !TAGS.iter().any(|t| t.eq_ignore_ascii_case(name)) {
            continue;
        }
        // `<name>`, `<name/>`, `<name attr="...">`: the tag ends at its `>`
        let end = match b.get(name_end) {
            Some(b'>') => name_end,
            Some(b'/') if b.get(name_end + 1) == Some(&b'>') => name_end + 1,
            Some(b' ') => match memchr::memchr(b'>', &b[name_end..]) {
                Some(p) => name_end + p,
                None => continue,
            },
            _ => continue,
        };
        let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
        o.push_str(&s[from..i]);
        from = end + 1;
    }
    let mut o = out?;
    o.push_str(&s[from..]);
    Some(o)
}

/// A Markdown list item's bullet (`- `, `* `, `• `) in front of a line: the rest.
fn bullet(s: &str) -> Option<&str> {
    let r = s.strip_prefix("- ").or_else(|| s.strip_prefix("* ")).or_else(|| s.strip_prefix("• "))?;
    // a rule or an empty item is no line of a program's
    (!r.trim().is_empty()).then_some(r)
}

/// A viewer's line number in front of a line (a pastebin's or an editor's `  12 | `, `bat`'s
/// `  12 │ `, `cat -n`'s `    12\t`): the rest. (`12: ` is `srun --label`'s, a rank.)
fn gutter(s: &str) -> Option<&str> {
    let t = s.trim_start_matches(' ');
    let d = t.bytes().take_while(u8::is_ascii_digit).count();
    if d == 0 || d > 7 {
        return None;
    }
    let r = &t[d..];
    r.strip_prefix(" | ")
        .or_else(|| r.strip_prefix(" │ "))
        .or_else(|| r.strip_prefix('\t'))
        .or_else(|| (r == " |" || r == " │").then_some(""))
}

/// Inline code around a line (`` `text` ``) or a chat's fence glued to a block's first or last
/// line (```` ```text ````, ```` text``` ````): the byte range of the text. Each end goes on its
/// own, as a line re-broken by mail has only one of them (the opening one on the first piece, the
/// closing one on the last); a backtick with another one in the line is the line's own
/// (`` `ibv_reg_mr` failed ``).
fn inline_code(s: &str) -> Option<(usize, usize)> {
    let (mut a, mut b) = (0, s.len());
    if let Some(r) = s.strip_prefix("```") {
        // a lone fence, or one with a language, is a line of its own
        if r.is_empty() || r.bytes().all(|c| c.is_ascii_alphanumeric()) {
            return None;
        }
        a = 3;
    } else if s.starts_with('`') && memchr::memchr_iter(b'`', s.as_bytes()).count() == 1 {
        a = 1;
    }
    let t = &s[a..];
    if t.len() > 3 && t.ends_with("```") && !t.ends_with("````") {
        b = s.len() - 3;
    } else if t.len() > 1 && t.ends_with('`') && memchr::memchr(b'`', &t.as_bytes()[..t.len() - 1]).is_none() {
        b = s.len() - 1;
    } else if a == 0 && s.len() > 2 && s.starts_with('`') && s.ends_with('`') {
        // `text`: the only two backticks of the line
        if memchr::memchr_iter(b'`', s.as_bytes()).count() == 2 {
            (a, b) = (1, s.len() - 1);
        }
    }
    (a > 0 || b < s.len()).then_some((a, b))
}

/// `> text`, `> > text`, `>text` (up to three spaces before, as Markdown allows): the text and how
/// deep it is quoted. A lone `>` is an empty quoted line.
fn unquote(s: &str) -> Option<(&str, u8)> {
    let t = s.trim_start_matches(' ');
    if !t.starts_with('>') || s.len() - t.len() > 3 {
        return None;
    }
    let mut t = t;
    let mut depth = 0u8;
    while let Some(r) = t.strip_prefix('>') {
        depth = depth.saturating_add(1);
        t = r.strip_prefix(' ').unwrap_or(r);
        // a nested quote: `> > text`
        if !t.starts_with('>') {
            break;
        }
    }
    Some((t, depth))
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

    /// Trailing blanks (an editor's, a mail's `format=flowed` soft break) come off every line,
    /// plain or unwrapped, borrowed or rebuilt: a line's last byte decides whether it may be the
    /// first piece of one re-broken by mail ([`super::super::rejoin::may_break`]).
    #[test]
    fn trailing_blanks_come_off() {
        let w = "ibv_reg_mr failed: Cannot allocate memory";
        let html = "ibv_reg_mr failed: it&#39;s out of memory \t";
        for (s, want, owned) in [
            (format!("{w} "), w, false),
            (format!("{w} \t "), w, false),
            (format!("> {w}  "), w, false),
            (html.to_string(), "ibv_reg_mr failed: it's out of memory", true),
            (format!("\x1b[31m{w}\x1b[0m "), w, true),
        ] {
            let (t, _) = unwrap(&s);
            assert_eq!(t, want, "{s:?}");
            assert_eq!(matches!(t, Cow::Owned(_)), owned, "{s:?}");
        }
        assert_eq!(line(" \t "), "");
        assert!(crate::parse::rejoin::may_break(line(&format!("{w}, ")).as_bytes(), 60));
    }

    /// What the byte test lets through untouched is what undoing every wrapper leaves as it is.
    #[test]
    fn plain_lines_have_no_wrapper() {
        let lines = [
            "libfabric:1:efa:mr:efa_mr_reg_impl():850 Unable to register MR",
            "[1643394930.000016] [gpu-a:4006:0]           ib_md.c:816  UCX  DEBUG registered memory",
            "gpu-b:5202:5290 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed",
            "2026-12-07T10:00:00Z x",
            "12 |not a gutter",
            "12: rank twelve's line",
            "a `quoted` word",
            "{\"v\":1,\"kind\":\"reg\",\"call\":\"ibv_reg_mr\",\"result\":\"error\",\"errno\":12}",
            "-1 is no bullet",
            "*ptr is none either",
            "-",
            "x",
            "",
            "libfabric:10004:1764700000::verbs:mr:vrb_mr_reg_common():83<warn> Unable to register memory region",
            "File \"x.py\", line 1, in <module>",
            "a < b and c<d> <",
        ];
        for l in lines {
            assert!(plain(l), "{l}");
            assert_eq!(undo(l), (Cow::Borrowed(l), Front::default()), "{l}");
        }
        for l in
            ["  12 | x", "12 | x", "> x", "- x", "`x", "x`", "x ", "\tx", "{\"log\":1}", "a &amp; b", "<b>x</b>", "é"]
        {
            assert!(!plain(l), "{l}");
        }
    }

    #[test]
    fn what_pages_and_pastes_add_comes_off() {
        let w = "libfabric:1:efa:mr:efa_mr_reg_impl():850<warn> Couldn't register MR: \"Cannot allocate memory\"";
        // typography: no-break spaces, curly quotes
        let typo =
            w.replace(' ', "\u{a0}").replace('\'', "\u{2019}").replacen('"', "\u{201c}", 1).replace('"', "\u{201d}");
        assert_eq!(line(&typo), w);
        // a mailing-list archive's page: <PRE>, italics around a quote, escaping, a link
        let html = format!("<PRE><I>&gt; {}</I>", w.replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;"));
        assert_eq!(unwrap(&html), (Cow::Borrowed(w), Front { quote: 1, marked: false }));
        let a = "see <A HREF=\"http://www.open-mpi.org/faq/\">http://www.open-mpi.org/faq/</A> now";
        assert_eq!(line(a), "see http://www.open-mpi.org/faq/ now");
        // a bullet, a gutter's number, inline code, a chat's glued fence, trailing blanks
        for p in [
            format!("- {w}"),
            format!("* {w}"),
            format!("   12 | {w}"),
            format!("  7 │ {w}"),
            format!("    12\t{w}"),
            format!("`{w}`"),
            format!("```{w}"),
            format!("{w}```"),
            format!("> > {w} \t"),
        ] {
            assert_eq!(line(&p), w, "{p}");
        }
        assert!(unwrap(&format!("- {w}")).1.marked && unwrap(&format!("  3 | {w}")).1.marked);
        assert_eq!(unwrap(&format!("> > {w}")).1.quote, 2);
        // a line's own backticks, tags, numbers and dashes stay
        for s in [
            "`ibv_reg_mr` failed: Cannot allocate memory",
            "[1,0]<stderr>:x",
            "  File \"a.py\", line 3, in <module>",
            "--------------------------------------------------------------------------",
            "```",
            "```text",
            "12: rank twelve's line",
        ] {
            assert_eq!(line(s), s, "{s}");
        }
    }
}
