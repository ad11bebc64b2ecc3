//! A line re-broken by mail or forum software: a report pasted through it comes back with every line
//! longer than the software's width (72 to 80 columns) broken at the last space before the width,
//! and the pieces after the first carry no prefix of their own. The pieces are joined back with one
//! space before the line is read (in `read_stream`), when all of these hold:
//! - the physical line is at most 80 columns ([`may_break`]), and the next line's first word would
//!   not have fitted on it within 72 (the software would not have broken it there otherwise);
//! - the next line does not start like a line of its own: no launcher's or logger's frame, no NCCL
//!   tag, not indented (help texts' tables, traceback frames), no quote, markup or list item;
//! - the sentence is visibly not over: the first line leaves a parenthesis or bracket open, ends in
//!   `:`, `,`, `;`, `=`, a logger's level (`UCX  ERROR`, libfabric's `<warn>`, whose message may start
//!   with the provider's `HOST: `), a frame with only its tags (`...cpp:619] [EP IBGDA]`) or a
//!   lower-case word (`with`, `to`, `dma-buf`), or the next line starts with one; or both sides of
//!   the break are `key=value` fields of one list; a bracketed errno alone (`[14]`) goes with the line
//!   before it;
//! - the first line is not a table's row (its last column after a run of spaces).
//!
//! A value or a name at the end of a line followed by a capitalised line (`pointer=0x10013000000` /
//! `Couldn't allocate MR`) stays two lines. Open MPI's help texts, wrapped at about 75 columns by
//! their authors, may be joined into longer prose lines: their parsers look for phrases, which a
//! join keeps whole, and their key lines (`Local host:`) are indented.

/// The narrowest width mail and forum software breaks lines at (a reply's mailer re-flows the
/// quote at 60 to 72 columns, the quote's `> ` counted).
const NARROWEST: usize = 60;
/// The narrowest width most of them use: below it only prose is re-broken.
const COMMON: usize = 72;
/// The widest.
const WIDEST: usize = 80;

/// Columns of `b` (UTF-8 characters; an invalid byte counts as one).
fn columns(b: &[u8]) -> usize {
    // (most lines are ASCII: one byte each, told by a word-at-a-time test)
    if b.is_ascii() {
        return b.len();
    }
    b.iter().filter(|&&c| c & 0xc0 != 0x80).count()
}

/// Whether the physical line whose text is `b` (its wrappers undone) may be the first piece of a
/// line broken by mail or forum software: `cols` (what the software saw, a quote's `> ` counted) at
/// most [`WIDEST`] columns and long enough to be broken at [`NARROWEST`] before a long word.
pub fn may_break(b: &[u8], cols: usize) -> bool {
    (NARROWEST / 2..=WIDEST).contains(&cols)
        && b.last().is_some_and(|c| !c.is_ascii_whitespace())
        && memchr::memchr(0, b).is_none()
}

/// The line's sentence is not over: a parenthesis or bracket left open, a label or a list whose
/// value follows (`failed:`, `length=16,`), or a last word in lower case.
fn pending(b: &[u8]) -> bool {
    let (mut paren, mut bracket) = (0i32, 0i32);
    for &c in b {
        match c {
            b'(' => paren += 1,
            b')' => paren -= 1,
            b'[' => bracket += 1,
            b']' => bracket -= 1,
            _ => {}
        }
    }
    if paren > 0 || bracket > 0 || matches!(b.last(), Some(b':' | b',' | b';' | b'=' | b'(' | b'-' | b'/')) {
        return true;
    }
    // a logger's level: its message follows (`UCX  ERROR` / `ibv_reg_mr(...) failed`, libfabric's
    // `efa_mr_reg_impl():850<warn>`); a value (`pointer=0x10013000000`), a name or an ended sentence
    // may be the whole line
    let last = b.rsplit(|c| *c == b' ').next().unwrap_or(b);
    word(last)
        || matches!(last, b"ERROR" | b"WARN" | b"WARNING" | b"INFO" | b"DEBUG" | b"FATAL")
        || level_tag(last)
        || only_tags(b)
}

/// libfabric's level tag ending its frame (`efa_mr_reg_impl():850<warn>`): the message follows,
/// and may start with the provider's own `HOST: ` (cxi).
fn level_tag(last: &[u8]) -> bool {
    last.strip_suffix(b">")
        .and_then(|l| l.rsplit(|c| *c == b'<').next())
        .is_some_and(|l| last.len() > l.len() + 2 && word(l))
}

/// A logger's frame whose message has not started: after the frame only bracketed tags
/// (`... ibgda_device_transport.cpp:619] [EP IBGDA]`).
fn only_tags(b: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(b) else { return false };
    let body = super::frame::split(s).body.trim();
    if body.len() == s.trim().len() || !body.starts_with('[') {
        return false;
    }
    let mut rest = body;
    while let Some(r) = rest.strip_prefix('[') {
        let Some(end) = r.find(']') else { return false };
        rest = r[end + 1..].trim_start();
    }
    rest.is_empty()
}

/// `key=value`: one field of a list a program prints on one line (`ret=2 mtype=2 base=0x7f5e...`).
fn field(w: &[u8]) -> bool {
    let Some(eq) = w.iter().position(|&c| c == b'=') else { return false };
    eq > 0 && eq + 1 < w.len() && w[..eq].iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A value in brackets alone (`[14]`: the errno glog-style loggers print after its text).
fn bracketed_number(b: &[u8]) -> bool {
    b.len() > 2 && b[0] == b'[' && b[b.len() - 1] == b']' && b[1..b.len() - 1].iter().all(u8::is_ascii_digit)
}

/// A word of prose in lower case (`to`, `with`, `argument`, `memory.`, `dma-buf`), not a name
/// (`ibv_reg_mr`, `libfabric:9:...`).
fn word(w: &[u8]) -> bool {
    let w = w.strip_suffix(b".").or_else(|| w.strip_suffix(b",")).or_else(|| w.strip_suffix(b":")).unwrap_or(w);
    let w = w.strip_suffix(b"?").or_else(|| w.strip_suffix(b"!")).unwrap_or(w);
    // quoted in prose: "Bad / address", `EINVAL`
    let w = w.strip_suffix(b"\"").or_else(|| w.strip_suffix(b"`")).unwrap_or(w);
    let w = w.strip_prefix(b"\"").or_else(|| w.strip_prefix(b"`")).unwrap_or(w);
    !w.is_empty()
        && w.iter().all(|&c| c.is_ascii_lowercase() || c == b'-' || c == b'\'')
        && w.first().is_some_and(u8::is_ascii_lowercase)
        && w.last().is_some_and(u8::is_ascii_lowercase)
}

/// A table's row (`/proc/PID/limits`, `ulimit -a`): its last column comes after a run of spaces,
/// and the row ends where the line does. (Two spaces are a logger's alignment: `UCX  WARN  failed`.)
fn table_row(b: &[u8]) -> bool {
    let last = b.rsplit(|c| *c == b' ').next().unwrap_or(b);
    b[..b.len() - last.len()].ends_with(b"   ")
}

/// The columns of a physical line as the software that broke it saw them: its text with the
/// quote's `> `s (`text`, `quote`); and the line as stored (`raw`: HTML-escaped text broken
/// before it was unescaped is wider), which only the test of whether the next word would have
/// fitted goes by (terminal colour, never seen by such software, would widen it wrongly).
pub fn width(raw: &[u8], text: &[u8], quote: u8) -> (usize, usize) {
    // cheap length test first: a long line is out of range by its byte count alone
    if text.len() > WIDEST * 4 {
        return (usize::MAX, usize::MAX);
    }
    let t = columns(text) + 2 * usize::from(quote);
    let raw = raw.trim_ascii_end();
    // a line without wrappers is its own text: as wide as `t` (the test below would give `t`)
    if raw == text {
        return (t, t);
    }
    // (wider than any such software breaks at: not what it broke, a docker json-file record)
    let r = match raw.len() > WIDEST * 4 || memchr::memchr(0x1b, raw).is_some() {
        true => t,
        false => Some(columns(raw)).filter(|&r| r <= WIDEST).map_or(t, |r| r.max(t)),
    };
    (t, r)
}

/// What an unbroken physical line of `cols` columns ([`width`]) whose text is `b` says about the
/// width the software broke the input's lines at: at least `cols` when the line has a space the
/// software could have broken it at, whatever its width (0 when it has none).
pub fn unbroken(b: &[u8], cols: usize) -> usize {
    // a `##` comment (a fixture's header) is no part of what was pasted
    if b.starts_with(b"##") {
        return 0;
    }
    let head = &b[..b.len().min(NARROWEST)];
    if cols > NARROWEST && memchr::memchr(b' ', head).is_some_and(|i| i > 0) {
        cols
    } else {
        0
    }
}

/// Whether `next` is the rest of the physical line `prev` (for which [`may_break`] held), `cols`
/// columns wide as the software saw it ([`width`]), in an input whose earlier lines show it was
/// not broken narrower than `widest` columns ([`unbroken`]); `quoted`: both inside a mail quote.
pub fn continues(prev: &[u8], cols: usize, widest: usize, quoted: bool, next: &[u8]) -> bool {
    let Some(&c) = next.first() else { return false };
    // indented (help text, a traceback's frame), quoted, markup, a JSON record, colour; a value in
    // brackets alone is no line of its own
    if (c.is_ascii_whitespace() || b">[{<#|`\x1b".contains(&c) || c >= 0x80) && !bracketed_number(next) {
        return false;
    }
    if next.starts_with(b"- ") || next.starts_with(b"* ") || next.len() > 1 << 16 || memchr::memchr(0, next).is_some() {
        return false;
    }
    // a rule (help texts' `-----` frame, a table's `=====`) is a line of its own
    if prev.iter().all(|c| b"-=_*~".contains(c)) {
        return false;
    }
    let first = next.split(|c| *c == b' ').next().unwrap_or(next);
    let last = prev.rsplit(|c| *c == b' ').next().unwrap_or(prev);
    // a sentence broken by hand (a mail wrapped as its writer typed it): its line ends in a word no
    // sentence ends in (`for all the` / `posted receives all fail`), whatever the width
    if dangling(last) && word(first) && !table_row(prev) {
        return !own_line(next, last);
    }
    // the software breaks before a word that would not have fitted: within its width, which is
    // no narrower than any line it left whole
    let width = cols + 1 + columns(first);
    if width < NARROWEST.max(widest.saturating_add(1)) || table_row(prev) {
        return false;
    }
    // the first line's sentence goes on, or the next line starts in the middle of one (a word, or
    // the next field of a `key=value` list); below the common widths only prose is broken, with a
    // word of it on one side of the break and no program's name (`ibv_reg_mr(...`, a path, a
    // field) starting the next line, which starts a line of its own there — except inside a mail
    // quote, which a reply's mailer re-flows at 60 to 72 whatever it holds (a log too)
    let goes_on = if width < COMMON && !quoted {
        let name = first.iter().any(|c| b"_(=/:[{<".contains(c));
        // a program's line ending in a value (`size: 2097152`) before a line of its own
        let t = last.strip_suffix(b".").or_else(|| last.strip_suffix(b",")).unwrap_or(last);
        let value = !t.is_empty()
            && t.iter().all(|c| c.is_ascii_hexdigit() || b"xX-".contains(c))
            && t.iter().any(u8::is_ascii_digit);
        !value && (word(first) || pending(prev) && !name)
    } else {
        pending(prev) || word(first) || field(last) && field(first)
    };
    goes_on && !own_line(next, last)
}

/// `next` starts a line of its own: a logger's frame (unless `last`, the line before's last word,
/// is a level tag whose message it is), an NCCL tag, a traceback.
fn own_line(next: &[u8], last: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(next) else { return true };
    let own_frame = super::frame::split(s).body.len() != s.len() && !level_tag(last);
    own_frame || super::nccl::split(s).is_some() || s.starts_with("Traceback")
}

/// A word no English sentence ends in: an article, a preposition, a conjunction, an auxiliary
/// (`the`, `for`, `and`, `is`). Lower case only: a program's line never ends in one.
fn dangling(w: &[u8]) -> bool {
    const WORDS: [&[u8]; 24] = [
        b"the", b"a", b"an", b"of", b"to", b"for", b"with", b"from", b"by", b"in", b"on", b"at", b"into", b"and",
        b"or", b"but", b"that", b"which", b"is", b"are", b"was", b"were", b"its", b"their",
    ];
    WORDS.contains(&w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn may_break(b: &[u8]) -> bool {
        super::may_break(b, columns(b))
    }

    fn continues(prev: &[u8], next: &[u8]) -> bool {
        super::continues(prev, columns(prev), 0, false, next)
    }

    const UCX: &[u8] = b"[1707768585.533429] [nodeA:4242:0] ib_md.c:293 UCX ERROR ibv_reg_mr(address=";

    #[test]
    fn joins_what_the_software_broke() {
        assert!(may_break(UCX));
        // Open MPI's help-text frame is no broken sentence
        let rule = [b'-'; 74];
        assert!(may_break(&rule) && !continues(&rule, b"Open MPI failed to register your buffer."));
        assert!(continues(UCX, b"0x7f001000, length=16) failed: Invalid argument"));
        let a = b"[nodeA:4242:0] rcache.c:460 UCX WARN failed to register region 0x55: Invalid";
        assert!(may_break(a) && continues(a, b"argument"));
        let a = b"h100-1:9100:9180 [0] misc/ibvwrap.cc:198 NCCL WARN Call to ibv_reg_mr_iova2";
        assert!(continues(a, b"failed with error Bad address"));
        let a = b"[1584981156.953034] [dgx2h0194:33577:1]          ib_md.c:330  UCX  ERROR";
        assert!(continues(a, b"ibv_exp_reg_mr(address=0x7fb7c609e000, length=2630912) failed:"));
        let a = b"[1494406705.883770] [node7:14213:0]         rcache.c:460  UCX  WARN  failed";
        assert!(continues(a, b"to register region 0x31797f0"));
        // a hyphenated word, a logger's level tag, a frame with only its tags, a list of fields,
        // a clause ended by `;`, the errno in brackets alone
        let a = b"pyverbs.pyverbs_error.PyverbsRDMAError: Failed to register a dma-buf";
        assert!(continues(a, b"MR. length: 65536, access flags: 7. Errno: 95, Operation not supported"));
        let a = b"libfabric:53673:1693359811::cxi:mr:cxip_map_cache():313<warn>";
        assert!(continues(a, b"x1922c2s2b0n0: Failed to acquire mapping (0x1000000200000, 16777216):"));
        let a = b"E1201 10:00:00.000001 4242 ibgda_device_transport.cpp:619] [EP IBGDA]";
        assert!(continues(a, b"Control UMEM registration failed for per-QP GPU-VA region: Bad address"));
        let a = b"[0 - 7f81d4ffe740]    0.000000 {2}{gexbind}: segment_create failed?  ret=2";
        assert!(continues(a, b"mtype=2 base=0x7f5e40000000 size=17179869184 extra=0x55a0e8c3c2f0"));
        let a = b"[7] Error! Memory registration failed inside LrtsRegisterMemory!;";
        assert!(continues(a, b"err=GNI_RC_ERROR_RESOURCE"));
        let a = b"Control UMEM registration failed for per-QP GPU-VA region: Bad address";
        assert!(continues(a, b"[14]"));
    }

    /// Prose re-wrapped at 60 to 72 columns: below 72 a line starting with a program's name, or
    /// after a program's value, stays a line of its own (prose13's cases; quotes: analyze_wrapped).
    #[test]
    fn joins_narrow_prose_only() {
        let a = b"change. ibv_reg_dmabuf_mr on CUDA device memory gives me errno";
        assert!(continues(a, b"was 22."));
        let a = b"ibv_reg_dmabuf_mr failed on the buffer we gave";
        assert!(!continues(a, b"ibv_reg_mr(gpu_buf, 65536) returned EFAULT too"));
        let a = b"addr: 7fd9d2800000, pages: 512, pagesize: 4096, size: 2097152";
        assert!(!continues(a, b"terminate called after throwing an instance of 'mscclpp::IbError'"));
        assert!(!continues(b"a line of forty-four columns that ends in words", b"word"));
        // a sentence broken by hand wherever its writer pressed return (ompi-devel-4364's mail)
        let a = b"wait on a pending list. Then the ib_reg_mr for all the";
        assert!(super::continues(a, columns(a), 71, false, b"posted receives all fail as well due to the"));
        assert!(!super::continues(a, columns(a), 71, false, b"ibv_reg_mr failed: Bad address"));
        assert!(!super::continues(b"the list of the", 15, 71, false, b"[1707768585.533429] more"));
        // mkernel-26: two lines of a program, each short
        assert!(!continues(
            b"ibv_reg_dmabuf_mr (retain) failed: Invalid argument",
            b"ibv_reg_mr(gpu) failed: Bad address"
        ));
    }

    #[test]
    fn leaves_lines_of_their_own() {
        // a line of its own after it: a frame, an NCCL tag, an indented or quoted line
        for next in [
            &b"[1707768585.533429] [nodeA:4242:0] ib_md.c:293 UCX ERROR"[..],
            b"nodeA:4242:4242 [0] NCCL INFO NET/IB : Using",
            b"2026-12-06T21:40:01Z more",
            b"  Local host: nodeA",
            b"> quoted",
            b"",
        ] {
            assert!(!continues(UCX, next), "{}", String::from_utf8_lossy(next));
        }
        // a value ends the line and the next starts a sentence
        let a = b"allocated GPU buffer address at 0000010013000000 pointer=0x10013000000";
        assert!(may_break(a) && !continues(a, b"Couldn't allocate MR"));
        // the next word would have fitted: the software did not break there
        let a = b"a line of fifty columns that ends in a failed:";
        assert!(!continues(a, b"x"));
        // longer than any width the software breaks at
        assert!(!may_break(&[b'a'; 81]));
        // a table's row, then a line of a program whose name starts it
        let a = b"Max locked memory         65536                65536                bytes";
        assert!(may_break(a) && !continues(a, b"ibv_reg_mr failed: Cannot allocate memory"));
        let a = b"libfabric:9:1700000000::efa:mr:efa_mr_reg_impl():850<warn> Unable to reg MR";
        assert!(!continues(a, b"libfabric:9:1700000000::efa:mr:efa_mr_regattr():982<warn> Unable"));
        // a bracketed frame, not a value; a field after a sentence
        assert!(!continues(UCX, b"[1707768585.533429]"));
        let a = b"the registration of the whole segment failed after several attempts, see FAQ";
        assert!(!continues(a, b"ret=2 and more"));
    }
}
