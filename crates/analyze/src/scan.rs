//! One automaton pass per line for every fixed word list the parsers look for: errno texts and
//! names ([`crate::errno`]), memory-kind and library words ([`crate::parse::generic`]) and the
//! vocabulary's first literals ([`crate::parse::vocab`]), the known issues' patterns ([`crate::known`])
//! and the sentence rules' and the tried contrasts' words ([`crate::parse::prose`], [`crate::parse::tried`]). Each of them used to walk the line on its
//! own, several times per line; now the first question about a line scans it once (all
//! occurrences of all words, any casing) and the questions about it or any part of it are answered
//! from that scan. The last line scanned is kept per thread, with its text: a part of it is
//! recognised by address and checked byte for byte, so a reused buffer is never mistaken for it.
use aho_corasick::{AhoCorasick, AhoCorasickKind};

/// `find!(hay, "literal")`: the first position of a fixed literal in `hay` through a searcher built
/// once per call site (`str::find`/`contains` with a `&str` build a new one on every call);
/// `rfind!` the last one.
macro_rules! find {
    ($hay:expr, $lit:literal) => {{
        static F: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($lit));
        F.find(::core::primitive::str::as_bytes($hay))
    }};
}
/// `has!(hay, "literal")`: whether the literal occurs in `hay` (`find!(..).is_some()`).
macro_rules! has {
    ($hay:expr, $lit:literal) => {
        $crate::scan::find!($hay, $lit).is_some()
    };
}
macro_rules! rfind {
    ($hay:expr, $lit:literal) => {{
        static F: std::sync::LazyLock<memchr::memmem::FinderRev<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::FinderRev::new($lit));
        F.rfind(::core::primitive::str::as_bytes($hay))
    }};
}
/// `any_of!(hay, WORDS)`: whether one of a fixed list of words (a `const` slice or a literal array)
/// occurs in `hay`, in one pass of an automaton built once per call site ([`one_pass`]).
macro_rules! any_of {
    ($hay:expr, $words:expr) => {{
        static AC: std::sync::LazyLock<aho_corasick::AhoCorasick> =
            std::sync::LazyLock::new(|| $crate::scan::one_pass(&$words));
        AC.is_match($hay)
    }};
}

/// The automaton that tells in one pass whether any of `words` occurs (leftmost-first: whether any
/// is there is the same, and its prefilter is the SIMD one; a standard automaton's rare-byte
/// prefilter restarts on every other byte of prose). A searcher per word costs more than that pass.
pub fn one_pass(words: &[&str]) -> AhoCorasick {
    AhoCorasick::builder().match_kind(aho_corasick::MatchKind::LeftmostFirst).build(words).expect("fixed words")
}

/// Prebuilt searchers for a fixed list of literals (`str::contains` with a `&str` builds one on
/// every call), behind one pass that tells whether any of them is there at all.
pub struct Lits(Vec<memchr::memmem::Finder<'static>>, AhoCorasick);

impl Lits {
    pub fn new(words: &[&'static str]) -> Lits {
        Lits(words.iter().map(|w| memchr::memmem::Finder::new(w.as_bytes())).collect(), one_pass(words))
    }
    /// Whether any literal of the list occurs in `hay`.
    pub fn any_in(&self, hay: &str) -> bool {
        self.1.is_match(hay)
    }
    /// The number in the list of the first literal (in list order) that occurs in `hay`.
    pub fn first_in(&self, hay: &str) -> Option<usize> {
        if !self.any_in(hay) {
            return None;
        }
        self.0.iter().position(|f| f.find(hay.as_bytes()).is_some())
    }
}

use std::cell::RefCell;
use std::ops::Range;
pub(crate) use {any_of, find, has, rfind};

/// The word lists, each with its own pattern numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    Errno,
    Mem,
    Lib,
    Vocab,
    Known,
    /// The words without which no sentence is [`crate::parse::prose::hypothetical`].
    Prose,
    /// The topics of what a reporter tried ([`crate::parse::tried`]).
    Tried,
    /// The prefilter's words ([`crate::parse::prefilter_words`]; case-sensitive: [`has_exact`]).
    Pre,
    /// The words a regression or a kernel report starts from ([`crate::parse::regression_word_list`];
    /// case-sensitive: [`has_exact`]).
    Regress,
}

struct Combined {
    ac: AhoCorasick,
    /// distinct word -> the (list, number in the list) it stands for
    owners: Vec<Vec<(Set, u32)>>,
}

fn combined() -> &'static Combined {
    static C: std::sync::LazyLock<Combined> = std::sync::LazyLock::new(|| {
        let mut words: Vec<String> = Vec::new();
        let mut owners: Vec<Vec<(Set, u32)>> = Vec::new();
        let lists: [(Set, Vec<String>); SETS] = [
            (Set::Errno, crate::errno::words()),
            (Set::Mem, crate::parse::generic::mem_words()),
            (Set::Lib, crate::parse::generic::lib_words()),
            (Set::Vocab, crate::parse::vocab::table().anchors().to_vec()),
            (Set::Known, crate::known::words()),
            (Set::Prose, crate::parse::prose::gate_words()),
            (Set::Tried, crate::parse::tried::topic_words()),
            (Set::Pre, crate::parse::prefilter_words()),
            (Set::Regress, crate::parse::regression_word_list()),
        ];
        for (set, list) in lists {
            for (i, w) in list.into_iter().enumerate() {
                let lw = w.to_ascii_lowercase();
                match words.iter().position(|x| *x == lw) {
                    Some(p) => owners[p].push((set, i as u32)),
                    None => {
                        words.push(lw);
                        owners.push(vec![(set, i as u32)]);
                    }
                }
            }
        }
        let ac = AhoCorasick::builder()
            .kind(Some(AhoCorasickKind::DFA))
            .ascii_case_insensitive(true)
            .build(&words)
            .expect("static word lists");
        Combined { ac, owners }
    });
    &C
}

#[derive(Default)]
struct Last {
    /// Address of the text scanned last (only compared, never dereferenced) and a copy of it.
    addr: usize,
    text: String,
    /// Per list ([`Set`] as index): (number in the list, start, end) of every occurrence of its
    /// words, in the order the automaton reported them (a question about one list reads only its own).
    hits: [Vec<(u32, usize, usize)>; SETS],
}

/// The number of [`Set`]s.
const SETS: usize = 9;
const _: () = assert!(Set::Regress as usize + 1 == SETS, "a Set past SETS");

thread_local! {
    static LAST: RefCell<Last> = RefCell::default();
}

/// Calls `f(number in the list, range in s)` for every occurrence in `s` of a word of `set`
/// (overlapping occurrences included, in the order the automaton reports them).
pub fn each(s: &str, set: Set, mut f: impl FnMut(u32, Range<usize>)) {
    let c = combined();
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        let addr = s.as_ptr() as usize;
        let inside = addr >= l.addr
            && addr + s.len() <= l.addr + l.text.len()
            && l.text.as_bytes()[addr - l.addr..addr - l.addr + s.len()] == *s.as_bytes();
        let off = if inside {
            addr - l.addr
        } else {
            let l = &mut *l;
            l.addr = addr;
            l.text.clear();
            l.text.push_str(s);
            for h in &mut l.hits {
                h.clear();
            }
            for m in c.ac.find_overlapping_iter(s) {
                for &(st, i) in &c.owners[m.pattern().as_usize()] {
                    l.hits[st as usize].push((i, m.start(), m.end()));
                }
            }
            0
        };
        for &(i, start, end) in &l.hits[set as usize] {
            if start >= off && end <= off + s.len() {
                f(i, start - off..end - off);
            }
        }
    })
}

/// Whether a word of `set` occurs in `s` spelt exactly as in `words`, the list `set` was built
/// from: the one pass matches any casing, and a case-sensitive question checks the bytes of its
/// hits (the same answer as a case-sensitive automaton of its own, without a second pass).
pub fn has_exact(s: &str, set: Set, words: &[String]) -> bool {
    let mut found = false;
    each(s, set, |i, r| found = found || s.as_bytes()[r] == *words[i as usize].as_bytes());
    found
}

/// Scans `s` now, so that the questions about it and its parts that follow are answered from
/// one pass.
pub fn prime(s: &str) {
    each(s, Set::Errno, |_, _| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &str, set: Set) -> Vec<(u32, Range<usize>)> {
        let mut v = Vec::new();
        each(s, set, |i, r| v.push((i, r)));
        v.sort_by_key(|x| (x.1.start, x.0));
        v
    }

    /// A part of the line scanned last gets the occurrences inside it, in its own offsets, the same
    /// as a scan of that part alone; a buffer reused for other text is scanned again.
    #[test]
    fn parts_of_the_last_line_answer_like_a_scan_of_their_own() {
        let line = String::from("x UCX ERROR ibv_reg_mr failed: Invalid argument (EINVAL) on cuda memory");
        for part in [&line[..], &line[2..40], &line[12..], &line[30..47], &line[31..46]] {
            prime(&line);
            let from_line = all(part, Set::Errno);
            prime(&line);
            let lib_from_line = all(part, Set::Lib);
            let own = {
                let copy = part.to_string();
                all(&copy, Set::Errno)
            };
            assert_eq!(from_line, own, "{part:?}");
            let copy = part.to_string();
            assert_eq!(lib_from_line, all(&copy, Set::Lib), "{part:?}");
        }
        let mut buf = line.clone();
        prime(&buf);
        assert!(!all(&buf, Set::Errno).is_empty());
        buf.replace_range(.., &"z".repeat(line.len()));
        assert!(all(&buf, Set::Errno).is_empty(), "the same buffer with other text");
    }
}
