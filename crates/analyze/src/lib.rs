//! `mrshim analyze`: reads shim records, NCCL/MCCL/RCCL/UCX/Open MPI/perftest/libibverbs/kernel logs and
//! doctor reports in any mix, groups and correlates the evidence, and ranks root causes with fixes.
//! Streaming: memory is bounded by the number of distinct groups, not by input size.

pub mod collect;
pub mod doctor_report;
pub mod errno;
pub mod event;
pub mod findings;
pub mod fixes;
pub mod gen;
pub mod hosts;
pub mod input;
pub mod known;
pub mod parse;
pub mod ranks;
pub mod render;
pub mod scan;

use collect::{Collector, FileStat};
use findings::Finding;
use input::{Lines, Source};
use std::borrow::Cow;

pub struct Analysis {
    pub col: Collector,
    pub findings: Vec<Finding>,
    /// Every named host, failing ones first.
    pub hosts: Vec<hosts::HostRow>,
    /// First failing, killed and missing ranks.
    pub ranks: ranks::RankReport,
    /// Categories the evidence ruled out, with why.
    pub ruled_out: Vec<findings::RuledOut>,
    /// Sources that could not be opened or read at all.
    pub unreadable: usize,
}

impl Analysis {
    fn new(col: Collector, unreadable: usize) -> Analysis {
        let (findings, ruled_out) = findings::diagnose(&col);
        let ranks = ranks::RankReport::new(&col.procs);
        let hosts = hosts::rows(&col, &ranks);
        Analysis { col, findings, ruled_out, hosts, ranks, unreadable }
    }
    /// Hosts that failed, in the order of [`Analysis::hosts`].
    pub fn failing_hosts(&self) -> impl Iterator<Item = &hosts::HostRow> {
        self.hosts.iter().filter(|h| h.failing())
    }
    pub fn failed(&self) -> u64 {
        self.col.groups.iter().filter(|g| !g.0.ok).map(|g| g.1.count).sum()
    }
    /// True when no input line was recognised as any evidence at all.
    pub fn nothing_recognised(&self) -> bool {
        self.col.groups.is_empty()
            && self.col.doctor_reports == 0
            && self.col.hosts.values().all(|h| h.flags.is_empty() && h.memlock.is_empty())
            && self.col.files.iter().all(|f| f.recognised == 0)
    }
    /// Successful registrations of the caller's own memory (learned strategies not included).
    pub fn ok(&self) -> u64 {
        self.col.groups.iter().filter(|g| g.0.ok).map(|g| g.1.count).sum()
    }
    /// The application's registration calls: failed, ok, and registered through a learned strategy.
    pub fn registrations(&self) -> u64 {
        self.failed() + self.ok() + self.col.learned_ok
    }
}

/// Analyzes the given paths (files, directories, `-` for stdin).
pub fn analyze(paths: &[String]) -> Analysis {
    analyze_with_progress(paths, &mut |_, _, _| {})
}

/// [`analyze`], calling `progress(inputs done, inputs, bytes read)` after each input.
pub fn analyze_with_progress(paths: &[String], progress: &mut dyn FnMut(usize, usize, u64)) -> Analysis {
    let mut col = Collector::default();
    let mut notes = Vec::new();
    let sources = input::expand(paths, &mut notes);
    let mut unreadable =
        paths.len().saturating_sub(paths.iter().filter(|p| *p == "-" || std::path::Path::new(p).exists()).count());
    for n in notes {
        col.note(n);
    }
    let mut parser = parse::Parser::default();
    let mut bytes = 0;
    for (i, src) in sources.iter().enumerate() {
        if !read_source(src, &mut parser, &mut col) {
            unreadable += 1;
        }
        bytes += col.files.last().map_or(0, |f| f.bytes);
        progress(i + 1, sources.len(), bytes);
    }
    col.finish();
    if parser.shim.malformed > 0 {
        col.note(format!("skipped {} malformed shim record(s)", parser.shim.malformed));
    }
    Analysis::new(col, unreadable)
}

/// Analyzes already-open streams (benchmarks, embedding); names are used in evidence.
pub fn analyze_readers(inputs: Vec<(String, Box<dyn std::io::BufRead>)>) -> Analysis {
    let mut col = Collector::default();
    let mut parser = parse::Parser::default();
    for (name, r) in inputs {
        read_stream(&name, r, &mut parser, &mut col);
    }
    col.finish();
    Analysis::new(col, 0)
}

/// Reads one source into the collector; false if it could not be opened.
fn read_source(src: &Source, parser: &mut parse::Parser, col: &mut Collector) -> bool {
    match input::open(src) {
        Ok(r) => {
            read_stream(&src.name(), r, parser, col);
            true
        }
        Err(e) => {
            col.note(format!("{}: skipped: {e}", src.name()));
            col.files.push(FileStat { path: src.name(), error: Some(e.to_string()), ..Default::default() });
            false
        }
    }
}

fn read_stream(name: &str, mut r: Box<dyn std::io::BufRead>, parser: &mut parse::Parser, col: &mut Collector) {
    let idx = col.files.len();
    col.files.push(FileStat { path: name.to_string(), ..Default::default() });
    if doctor_report::looks_like_report(&mut r) {
        doctor_report::ingest(r, idx, col);
        return;
    }
    let mut lines = Lines::new(r);
    let mut st = Stream { idx, ctx: parse::FileCtx::default(), evs: Vec::new(), binary: 0, lossy: 0, recognised: 0 };
    let mut n = 0u64;
    // a physical line that may go on on the next one (re-broken by mail or forum software): its
    // number, its text so far (wrappers undone), where its last piece starts, how wide that piece
    // was and how deep it was quoted
    let mut held: Option<Held> = None;
    // the widest line so far the software would have broken had it been narrower
    let mut widest = 0;
    loop {
        match lines.next_piece() {
            Ok(Some((no, overwritten, b))) => {
                // pieces of one physical line (split at `\r`) share its number; only whole lines join
                let whole = !overwritten && no != n;
                n = no;
                if memchr::memchr(0, b).is_some() {
                    if let Some(h) = held.take() {
                        st.read(parser, col, h.no, false, &h.text);
                    }
                    st.binary += 1;
                    continue;
                }
                let (text, front) = st.decode(b);
                let (cols, fit_cols) = parse::rejoin::width(b, text.as_bytes(), front.quote);
                // the line itself, if it is a piece, fits within the width too
                if whole {
                    widest = widest.max(parse::rejoin::unbroken(text.as_bytes(), cols));
                }
                let mut at = no;
                let mut start = 0;
                let mut joined: Option<String> = None;
                if let Some(mut h) = held.take() {
                    if whole
                        && h.quote == front.quote
                        && !front.marked
                        && parse::rejoin::continues(
                            &h.text.as_bytes()[h.last..],
                            h.cols,
                            widest,
                            h.quote > 0,
                            text.as_bytes(),
                        )
                    {
                        h.text.push(' ');
                        start = h.text.len();
                        h.text.push_str(&text);
                        joined = Some(h.text);
                        at = h.no;
                    } else {
                        st.read(parser, col, h.no, false, &h.text);
                    }
                }
                let cur: &str = joined.as_deref().unwrap_or(&text);
                if whole && cur.len() <= JOINED_MAX && parse::rejoin::may_break(text.as_bytes(), cols) {
                    let text = joined.unwrap_or_else(|| text.into_owned());
                    held = Some(Held { no: at, text, last: start, cols: fit_cols, quote: front.quote });
                    continue;
                }
                st.read(parser, col, at, overwritten, cur);
            }
            Ok(None) => break,
            Err(e) => {
                col.note(format!("{name}: read error after line {n} ({e}); the rest of it was skipped"));
                break;
            }
        }
    }
    if let Some(h) = held.take() {
        st.read(parser, col, h.no, false, &h.text);
    }
    let Stream { mut ctx, mut evs, binary, lossy, recognised, .. } = st;
    parser.end_file(&mut ctx, &mut |e| evs.push(e));
    for e in evs.drain(..) {
        col.add(e, idx, n, "");
    }
    if binary > 0 {
        col.note(format!("{name}: skipped {binary} binary line(s) (NUL bytes)"));
    }
    if lines.truncated > 0 {
        col.note(format!("{name}: {} line(s) longer than {} MiB were cut", lines.truncated, input::MAX_LINE >> 20));
    }
    if lossy > 0 {
        col.note(format!("{name}: {lossy} line(s) were not valid UTF-8 (their other bytes read as Windows-1252)"));
    }
    if n == 0 {
        col.note(format!("{name}: empty"));
    } else if recognised == 0 {
        col.note(format!("{name}: no recognised evidence in {n} line(s)"));
    }
    let f = &mut col.files[idx];
    f.lines = n;
    f.bytes = lines.bytes;
    f.recognised = recognised;
    f.binary_lines = binary;
    f.lossy_lines = lossy;
    f.truncated_lines = lines.truncated;
}

/// Longest line the pieces of a line re-broken by mail or forum software are joined back into.
const JOINED_MAX: usize = 64 << 10;

/// One stream's reading state: what [`read_stream`] hands each line to.
struct Stream {
    idx: usize,
    ctx: parse::FileCtx,
    evs: Vec<event::Event>,
    binary: u64,
    lossy: u64,
    recognised: u64,
}

/// A physical line [`read_stream`] holds back: the software that re-broke it may have put its rest
/// on the next line.
struct Held {
    no: u64,
    text: String,
    /// Where the last piece starts in `text`.
    last: usize,
    /// How wide the last piece was ([`parse::rejoin::width`]) and how deep it was quoted.
    cols: usize,
    quote: u8,
}

impl Stream {
    /// The text of a line (no NUL in it) with its wrappers undone ([`parse::clean::unwrap`]).
    /// Bytes that are not UTF-8 are read as Windows-1252, the code page of the editors and mail
    /// clients a paste that is not UTF-8 comes from (its curly quotes are 0x91-0x94, its no-break
    /// space 0xa0).
    fn decode<'a>(&mut self, b: &'a [u8]) -> (Cow<'a, str>, parse::clean::Front) {
        match std::str::from_utf8(b) {
            Ok(s) => parse::clean::unwrap(s),
            Err(_) => {
                self.lossy += 1;
                let s = windows_1252(b);
                let (t, f) = parse::clean::unwrap(&s);
                (Cow::Owned(t.into_owned()), f)
            }
        }
    }

    /// Reads one line (or one piece of it, split at `\r`), its wrappers undone, numbered `no`.
    fn read(&mut self, parser: &mut parse::Parser, col: &mut Collector, no: u64, overwritten: bool, s: &str) {
        // a progress bar's earlier states, redrawn over on the same line, are not evidence
        // (and do not part the lines around them) unless they look like it
        if overwritten && !parser.may_be_evidence(s) {
            parser.skip_piece(s, no);
            return;
        }
        let evs = &mut self.evs;
        if parser.line(&mut self.ctx, s, no, &mut |e| evs.push(e)) {
            self.recognised += 1;
        }
        for e in evs.drain(..) {
            col.add(e, self.idx, no, s);
        }
    }
}

/// `b` read as UTF-8 where it is, each other byte as the Windows-1252 character it stands for.
fn windows_1252(b: &[u8]) -> String {
    // 0x80..0x9f; the five bytes Windows-1252 leaves undefined read as U+FFFD
    const HIGH: [char; 32] = [
        '€', '\u{fffd}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{fffd}', 'Ž', '\u{fffd}',
        '\u{fffd}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{fffd}', 'ž', 'Ÿ',
    ];
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        for &c in chunk.invalid() {
            out.push(if (0x80..0xa0).contains(&c) { HIGH[usize::from(c - 0x80)] } else { char::from(c) });
        }
    }
    out
}

/// The fuzz harness (fuzz/fuzz_targets/parse.rs and the stable smoke test): analyzes `data` as a file,
/// plain or gzip, and renders every output. Must never panic.
pub fn fuzz_one(data: &[u8]) {
    let mut r: Box<dyn std::io::BufRead> = Box::new(std::io::Cursor::new(data.to_vec()));
    if data.starts_with(&[0x1f, 0x8b]) {
        r = Box::new(std::io::BufReader::new(flate2::bufread::MultiGzDecoder::new(std::io::Cursor::new(
            data.to_vec(),
        ))));
    }
    let a = analyze_readers(vec![("fuzz".into(), r)]);
    let _ = render::human::render(&a, true);
    let _ = render::json::to_string(&a);
    let _ = render::html::render(&a);
}
