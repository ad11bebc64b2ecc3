//! Free text: bug reports, chat transcripts and articles that quote the evidence (both seed incidents).
//! Split into sentences; each sentence is checked for a quoted registration failure and for facts
//! told in words (GPU context, a version mismatch, PCIe errors, `ulimit -l`). What the reporter
//! tried ("TCP works", "GDR off works", "still fails with relaxed ordering 0") is parse/tried.rs'.
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use mrshim_record::MemKind;

fn any(s: &str, words: &[&str]) -> bool {
    words.iter().any(|w| s.contains(w))
}

pub fn sentences(line: &str) -> impl Iterator<Item = &str> {
    line.split(['。', '；', '！', '？', '!', '?']).flat_map(|s| s.split(". ")).filter(|s| !s.trim().is_empty())
}

/// The sentences of a line with their end marks (`?` tells a question), cut after `.`, `?` or `!`
/// followed by a space.
pub(super) fn marked_sentences(line: &str) -> impl Iterator<Item = &str> {
    let b = line.as_bytes();
    let mut marks = memchr::memchr3_iter(b'.', b'?', b'!', b);
    let mut from = Some(0);
    std::iter::from_fn(move || {
        let start = from?;
        for i in marks.by_ref() {
            if b.get(i + 1) == Some(&b' ') {
                from = Some(i + 1);
                return Some(&line[start..=i]);
            }
        }
        from = None;
        Some(&line[start..])
    })
    .filter(|s| !s.trim().is_empty())
}

fn word_at(l: &str, i: usize, w: &str) -> bool {
    let before = l[..i].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
    let after = l[i + w.len()..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric());
    before && after
}

/// Where `w` is in `l`, left to right and not overlapping (as `match_indices`), found by its first
/// byte: a sentence is short, and the searcher `match_indices` builds on every call cost more than
/// the search (dozens of words per sentence).
fn occurrences<'a>(l: &'a str, w: &'a str) -> impl Iterator<Item = usize> + 'a {
    let (b, w) = (l.as_bytes(), w.as_bytes());
    let mut from = 0;
    std::iter::from_fn(move || {
        let first = *w.first()?;
        while let Some(i) = memchr::memchr(first, &b[from..]) {
            let at = from + i;
            if b[at..].starts_with(w) {
                from = at + w.len();
                return Some(at);
            }
            from = at + 1;
        }
        None
    })
}

pub(super) fn has_word(l: &str, w: &str) -> bool {
    occurrences(l, w).any(|i| word_at(l, i, w))
}

/// Whether `l` has `w` starting a word ("on error", not "registration errors"; "fail" in "fails").
pub(super) fn has_start(l: &str, w: &str) -> bool {
    occurrences(l, w)
        .any(|i| w.starts_with("n't") || l[..i].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric()))
}

/// `any_start!(l, WORDS)`: whether a word of the list `WORDS` (a `const`) starts a word of `l`
/// ([`has_start`]), tried only when one pass over `l` ([`crate::scan::any_of`]) found any of them:
/// most sentences have none.
macro_rules! any_start {
    ($l:expr, $words:expr) => {
        crate::scan::any_of!($l, $words) && $words.iter().any(|w| has_start($l, w))
    };
}

/// Documentation's words for a failure that may happen ([`asks_or_documents`]).
const DOCS: &[&str] = &[
    "on failure",
    "on error",
    "upon failure",
    "in case of failure",
    "in case of error",
    "or null if",
    "null if the",
    "is set to indicate",
    "on success",
    "negative errno",
    "negative error code",
    "what happens if",
    "what happens when",
    "how to handle",
    "how do i handle",
];
/// A failure gone or denied ([`hypothetical`]).
const GONE: &[&str] = &[
    "no longer",
    "not fail",
    "n't fail",
    "never fail",
    "not return",
    "n't return",
    "without error",
    "without any error",
    "no errors",
    "not get",
    "n't get",
    "not see",
    "n't see",
    "anymore",
    "went away",
    "goes away",
    "succeeded",
    "successfully",
];

/// The first words of a changelog's entry: the fix of a failure, not the failure.
const FIXES: &[&str] = &[
    "fix",
    "fixed",
    "fixes",
    "fixing",
    "bugfix",
    "hotfix",
    "avoid",
    "avoids",
    "prevent",
    "prevents",
    "handle",
    "handles",
    "workaround",
    "resolve",
    "resolves",
];
/// The first words of a question whether something happens.
const ASKS: &[&str] =
    &["does", "do", "did", "can", "could", "will", "would", "should", "is", "are", "may", "might", "shall"];
/// The words of a condition's clause ([`hypothetical`]; "when" stands for "whenever" too).
const CONDITIONS: &[&str] = &["if", "when", "whenever", "unless", "whether"];

/// Whether `sentence` can be [`hypothetical`] at all: its first word starts a changelog's entry
/// or a question (with its `?`), or a word of [`DOCS`], [`GONE`] or [`CONDITIONS`] is in it, in
/// any casing. Each way [`hypothetical`] says yes needs one of them; most failure lines have none,
/// and are spared the lowered copy and the rules. The words are looked for in the line's one pass
/// ([`crate::scan`]): a sentence of the line being read is answered from it.
fn may_be_hypothetical(sentence: &str) -> bool {
    let t = sentence.trim().trim_start_matches(['-', '*', '+', '>', ' ']);
    let first = t.split([' ', ':', '(']).next().unwrap_or("");
    if FIXES.iter().any(|w| first.eq_ignore_ascii_case(w))
        || (ASKS.iter().any(|w| first.eq_ignore_ascii_case(w)) && sentence.contains('?'))
    {
        return true;
    }
    let mut any = false;
    crate::scan::each(sentence, crate::scan::Set::Prose, |_, _| any = true);
    any
}

/// The words [`may_be_hypothetical`] looks for ([`crate::scan::Set::Prose`]).
pub fn gate_words() -> Vec<String> {
    DOCS.iter().chain(GONE).chain(CONDITIONS).map(|w| w.to_string()).collect()
}

/// A question whether something happens ("Does it fail if ...?", not "Why does ...?"), a line of
/// documentation ("on failure", "on success") or a changelog's entry ("Fix ...") — `t` lower-case,
/// trimmed.
fn asks_or_documents(t: &str) -> bool {
    let first = t.split([' ', ':', '(']).next().unwrap_or("");
    // a changelog's entry: the fix of a failure, not the failure
    if FIXES.contains(&first) {
        return true;
    }
    let question = t.trim_end_matches(['"', ')', '`', '\'', ' ']).ends_with('?');
    let why = ["anyone", "anybody", "someone", "somebody", "why", "any idea", "normal", "expected", "a bug", "known"];
    if question && ASKS.contains(&first) && !why.iter().any(|w| has_word(t, w)) {
        return true;
    }
    any_start!(t, DOCS)
}

/// A sentence that tells nobody's experience, whatever contrast it names ("Does it still fail
/// with ...?", "Fixes ... when ...", documentation): [`hypothetical`]'s questions, documentation and
/// changelog entries, without its exception for "but"/"still", and any question that does not ask
/// why.
/// A regression told: the failure bisected to a commit (`git bisect`, `first bad commit`,
/// "bisected to"), a commit's `Fixes:` tag (Documentation/process/submitting-patches.rst: `Fixes:`
/// and 12+ hex digits), "regression"/"regressed", "since commit ...". Not: regression tests or
/// suites, statistics' regressions (linear, logistic), a regression denied, a question or advice.
/// The words a regression told in prose starts from (besides a `Fixes: ` trailer).
pub const REGRESSION_WORDS: [&str; 4] = ["egress", "isect", "first bad commit", "since commit"];

pub fn regression_told(line: &str) -> bool {
    let t = line.trim().trim_start_matches(['-', '*', '+', '>', ' ', '|']);
    // the trailer of a commit message: `Fixes: 0c16d9635e3a ("RDMA/umem: Move to allocate SG table from pages")`
    if let Some(r) = t.strip_prefix("Fixes: ") {
        let hex = r.bytes().take_while(|b| b.is_ascii_hexdigit()).count();
        return hex >= 8 && r[hex..].trim_start().starts_with("(\"");
    }
    if line.len() > 2048 || !crate::scan::any_of!(line, REGRESSION_WORDS) {
        return false;
    }
    marked_sentences(line).any(|s| {
        let l = s.to_ascii_lowercase();
        let bisect = has_start(&l, "bisect") || l.contains("first bad commit");
        let since = l.contains("since commit");
        let regress = (has_start(&l, "regression") || has_start(&l, "regressed"))
            && ![
                "regression test",
                "regression-test",
                "regression suite",
                "non-regression",
                "no regression",
                "not a regression",
                "n't a regression",
                "not regress",
                "n't regress",
                "linear regression",
                "logistic regression",
                "regression model",
                "regression task",
                "regression loss",
            ]
            .iter()
            .any(|w| l.contains(w));
        (bisect || since || regress) && !not_told(s)
    })
}

pub(super) fn not_told(sentence: &str) -> bool {
    let l = sentence.to_lowercase();
    let t = l.trim().trim_start_matches(['-', '*', '+', '>', ' ']);
    let why = ["anyone", "anybody", "someone", "somebody", "why", "any idea", "normal", "expected", "a bug", "known"];
    let question = t.trim_end_matches(['"', ')', '`', '\'', ' ', '.']).ends_with('?');
    asks_or_documents(t) || (question && !why.iter().any(|w| has_word(t, w)))
}

/// A sentence that names a failure without reporting one: a question whether it could fail ("Does
/// ibv_reg_mr fail if ...?"), documentation ("returns NULL on failure", "On failure, errno is set"),
/// a changelog's entry ("Fix ibv_reg_mr failure when ..."), a failure gone or denied ("no longer
/// fails", "completes without error"), or one only in a condition ("If ibv_reg_mr fails, ...").
/// A contrast ("but", "still", "however") keeps it a report, and so do the questions that ask
/// why it fails ("Why does ...", "Does anyone know why ...").
pub fn hypothetical(sentence: &str) -> bool {
    may_be_hypothetical(sentence) && rules(sentence)
}

/// [`hypothetical`]'s rules, on a sentence [`may_be_hypothetical`] let through.
fn rules(sentence: &str) -> bool {
    let l = sentence.to_ascii_lowercase();
    let t = l.trim().trim_start_matches(['-', '*', '+', '>', ' ']);
    if has_word(t, "but") || has_word(t, "still") || has_word(t, "however") {
        return false;
    }
    if asks_or_documents(t) {
        return true;
    }
    if any_start!(t, GONE) {
        return true;
    }
    // every failure word inside a condition's clause ("if it fails", "when the call fails") that
    // is nobody's experience (no I, we, my, our)
    let fails: Vec<usize> = occurrences(t, "fail").chain(occurrences(t, "error")).collect();
    !fails.is_empty()
        && fails.iter().all(|&i| {
            let clause = &t[t[..i].rfind([',', ';', ':']).map_or(0, |c| c + 1)..i];
            CONDITIONS.iter().any(|w| has_word(clause, w))
                && !["i", "i'm", "we", "my", "our", "me"].iter().any(|w| has_word(clause, w))
        })
}

/// The sentences of `line` that tell how a registration named before failed, without naming it:
/// its subject is the call ("This fails with EFAULT", "It returns an error (-14)", "The call above
/// fails", "The registration fails") or the writer gets the errno ("With VRAM I always get `Bad
/// address`"). A failure word alone ("this error") is not enough: the sentence has the errno or
/// says the call failed or returned NULL.
pub fn told_failure(line: &str) -> Option<String> {
    let subjects = ["this ", "it ", "that ", "which ", "the call", "this call", "the registration", "the function"];
    let gets =
        ["i get ", "i got ", "i always get ", "i'm getting ", "i am getting ", "we get ", "we got ", "it gives "];
    let told: String = marked_sentences(line)
        .filter(|s| {
            let l = s.trim().to_ascii_lowercase();
            let l = l.trim_start_matches(['>', ' ']);
            if hypothetical(s) || !(subjects.iter().any(|w| l.starts_with(w)) || gets.iter().any(|w| l.contains(w))) {
                return false;
            }
            let errno = crate::errno::find(s).is_some() || l.contains("out of memory");
            errno || ["fail", "returns null", "returned null", "returns nullptr"].iter().any(|w| l.contains(w))
        })
        .collect();
    (!told.is_empty()).then_some(told)
}

/// `line` without its [`hypothetical`] sentences, or None if it has none.
pub fn asserted(line: &str) -> Option<String> {
    if !marked_sentences(line).any(hypothetical) {
        return None;
    }
    Some(marked_sentences(line).filter(|s| !hypothetical(s)).collect())
}

/// Words saying the memory is a read-only mapping (`PROT_READ` without `PROT_WRITE`, "read-only").
fn says_readonly(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    (line.contains("PROT_READ") && !line.contains("PROT_WRITE"))
        || ["read-only", "read only", "readonly"].iter().any(|w| l.contains(w))
}

/// "P2P" meaning GPU peer-to-peer, not Mooncake's peer-to-peer metadata exchange: its
/// `P2PHANDSHAKE` metadata mode ("Transfer Engine RPC using P2P handshake, listening on ...",
/// transfer_engine_impl.cpp), "Failed to exchange P2P segment metadata", "P2P: No valid port found
/// for local TCP service", "P2P: cached RDMA->TCP mapping", and its P2P Store — none says anything
/// of GPU memory.
fn gpu_p2p(s: &str) -> bool {
    s.match_indices("P2P").any(|(i, _)| {
        let after = &s[i + 3..];
        let metadata =
            ["HANDSHAKE", " handshake", " segment metadata", " Store", " store"].iter().any(|w| after.starts_with(w))
                || (after.starts_with(':') && after.contains("TCP"));
        !metadata
    })
}

/// The registration entry points a sentence can name: verbs' ibv_reg_*, librdmacm's rdma_reg_*, and the
/// kernel verb `ib_reg_mr` that older OFED stacks (Open MPI's openib BTL, uDAPL) and their users name —
/// as a word of its own, not inside a driver's function name (`mlx5_ib_reg_user_mr`).
fn reg_calls(s: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for stem in ["ibv_reg_", "rdma_reg_", "ib_reg_"] {
        let mut from = 0;
        while let Some(i) = s[from..].find(stem) {
            let at = from + i;
            let name: String = s[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            from = at + name.len();
            let word = !s[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            if super::is_reg_call(&name) || super::rdmacm_reg_access(&name).is_some() || (word && name == "ib_reg_mr") {
                out.push((at, name));
            }
        }
    }
    out
}

/// Reads the sentences of a line; `worked` is where [`super::tried::parse`] read a change that made
/// the job work on it.
pub fn parse(line: &str, ctx: &mut FileCtx, worked: &super::tried::Worked, emit: &mut dyn FnMut(Event)) -> bool {
    let mut hit = false;
    let host = ctx.host.clone();
    let mut seen: Vec<(String, Option<i32>)> = Vec::new();
    // a read-only mapping named anywhere on the line is the memory its failures registered
    let readonly = says_readonly(line).then_some(MemKind::FileReadonly);
    // (what the sentences report is read only for the calls they name: [`reg_calls`]' stems all
    // have `_reg_`, a line without it is spared the sentence rules)
    let named = crate::scan::has!(line, "_reg_");
    let told = if named { asserted(line) } else { None };
    // a source line (`perror("ibv_reg_mr")`) prints no failure of its own
    let told = if !named || super::generic::source_code(&line.to_ascii_lowercase()) {
        ""
    } else {
        told.as_deref().unwrap_or(line)
    };
    for s in sentences(line) {
        let fact = |f: Flag| Event::Fact { lib: Lib::Text, host: host.clone(), pid: None, fact: Fact::Flag(f) };
        let lower = s.to_ascii_lowercase();
        // quoted failures: every call named next to a failure word, in a sentence that reports one
        let calls = if !told.is_empty() && told.contains(s) { reg_calls(s) } else { Vec::new() };
        for (at, name) in calls {
            let window: String = s[at..].chars().take(90).collect();
            if any(&window, &["fail", "失败", "return -", "returned -", "error"]) {
                let e = errno::find(&window);
                if !seen.contains(&(name.clone(), e)) {
                    seen.push((name.clone(), e));
                    emit(Event::Reg(RegEv {
                        lib: Some(Lib::Text),
                        host: host.clone(),
                        access: super::rdmacm_reg_access(&name),
                        call: name,
                        errno: e,
                        mem: readonly,
                        ..Default::default()
                    }));
                }
                hit = true;
            }
        }
        let gdr = s.contains("GDR") || lower.contains("gpudirect") || lower.contains("gpu direct");
        if gdr || s.contains("显存") || gpu_p2p(s) {
            emit(fact(Flag::GpuContext));
            hit = true;
        }
        // what the reporter tried ("GDR off works", "RELAXED_ORDERING=0 still fails"): parse/tried.rs
        if (s.contains("版本") && any(s, &["对不上", "不一致", "不匹配"])) || lower.contains("version mismatch")
        {
            emit(fact(Flag::VersionMismatchProse));
            hit = true;
        }
        if s.contains("PCIe 总线错误") || lower.contains("pcie bus error") {
            emit(fact(Flag::PcieError));
        }
        // a limit the reporter set and then ran fine with is not the failing run's (tried.rs)
        if let Some(i) = s.find("ulimit -l").filter(|_| !worked.covers(line, s)) {
            let rest: String = s[i + 9..].chars().take(24).collect();
            let num: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(kib) = num.parse::<u64>() {
                emit(Event::Fact {
                    lib: Lib::Text,
                    host: host.clone(),
                    pid: None,
                    fact: Fact::Memlock(Some(kib * 1024)),
                });
            } else if rest.contains("unlimited") {
                emit(Event::Fact { lib: Lib::Text, host: host.clone(), pid: None, fact: Fact::Memlock(None) });
            }
            hit = true;
        }
    }
    hit
}

#[cfg(test)]
mod tests {

    /// A regression told: bisected, a `Fixes:` tag, "regression", "since commit"; not regression
    /// tests, statistics, a regression denied or asked about, or a `Fixes:` without a commit.
    #[test]
    fn regressions_told() {
        for s in [
            "I bisected it to commit 0c16d9635e3a.",
            "git bisect says the first bad commit is 5a7a9e038b03",
            "Fixes: 0c16d9635e3a (\"RDMA/umem: Move to allocate SG table from pages\")",
            "This is a regression since commit 1234567.",
            "ibv_reg_mr regressed in 6.2, it returns EINVAL now.",
            "Looks like a regression in the rxe driver.",
        ] {
            assert!(super::regression_told(s), "{s}");
        }
        for s in [
            "We ran the regression tests and all passed.",
            "This is not a regression.",
            "Is this a regression?",
            "The model is a linear regression over the batch sizes.",
            "Fixes: #1234",
            "ibv_reg_mr failed with rc=-22 on 5.10.",
        ] {
            assert!(!super::regression_told(s), "{s}");
        }
    }
    /// The search the sentence rules use finds what `match_indices` finds: left to right, not
    /// overlapping.
    #[test]
    fn occurrences_are_match_indices() {
        for (l, w) in [
            ("aaaaa", "aa"),
            ("it fails, then fails again", "fail"),
            ("n't fail and don't fail", "n't fail"),
            ("", "x"),
            ("überfail — fail", "fail"),
            ("ababab", "abab"),
        ] {
            let want: Vec<usize> = l.match_indices(w).map(|(i, _)| i).collect();
            assert_eq!(super::occurrences(l, w).collect::<Vec<_>>(), want, "{w} in {l}");
        }
    }

    /// The gate says no only where the rules say no: every sentence of every fixture, with the
    /// sentences of the rules' own tests, in its own buffer and as a part of its line (the line's
    /// one pass answers the gate then).
    #[test]
    fn the_gate_lets_every_hypothetical_sentence_through() {
        let mut lines: Vec<String> = [
            "Does ibv_reg_mr fail if the buffer is not page aligned?",
            "ibv_reg_mr returns NULL ON FAILURE.",
            "- Fix ibv_reg_mr failure when the buffer is not page aligned (#1234)",
            "HANDLE: ibv_reg_mr returning NULL",
            "After raising ulimit -l, ibv_reg_mr No Longer fails.",
            "It didn't fail after that. It WENT AWAY.",
            "Whenever ibv_reg_mr fails, we retry.",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
        let mut dirs = vec![std::path::PathBuf::from(root)];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if let Ok(text) = std::fs::read_to_string(&p) {
                    lines.extend(text.lines().map(String::from));
                }
            }
        }
        let mut passed = 0;
        for line in &lines {
            crate::scan::prime(line);
            for s in super::marked_sentences(line) {
                let rules = super::rules(s);
                passed += usize::from(rules);
                assert!(!rules || super::may_be_hypothetical(s), "{s}");
                // (its own buffer: the gate scans it)
                let own = String::from(s);
                assert!(!rules || super::may_be_hypothetical(&own), "{s}");
            }
        }
        assert!(passed >= 7, "{passed} hypothetical sentences");
        // and it spares the failure lines
        for l in [
            "libfabric:10004:1764700000::verbs:mr:vrb_mr_reg_common():83<warn> Unable to register memory region: Cannot allocate memory (12)",
            "ibv_reg_mr failed: Bad address",
        ] {
            assert!(!super::may_be_hypothetical(l), "{l}");
        }
    }

    #[test]
    fn the_kernel_verb_named_in_words_is_a_registration() {
        let calls = |s: &str| super::reg_calls(s).into_iter().map(|x| x.1).collect::<Vec<_>>();
        assert_eq!(calls("Then the ib_reg_mr for all the posted receives all fail as well"), ["ib_reg_mr"]);
        assert!(calls("mlx5_ib_reg_user_mr: failed").is_empty());
        // a driver entry point, not the verb
        assert!(calls("ib_reg_user_mr returned -14").is_empty());
    }

    /// Sentences that name a failure without reporting one, and the reports that look like them.
    #[test]
    fn hypothetical_sentences() {
        for s in [
            "Does ibv_reg_mr fail if the buffer is not page aligned?",
            "Can fi_mr_reg fail with EINVAL if I pass GPU memory?",
            "ibv_reg_mr returns NULL on failure.",
            "On failure, errno is set to indicate the error.",
            "ibv_reg_mr returns a pointer to the registered MR, or NULL if the request fails.",
            "If ibv_reg_mr fails, the function returns -1 and sets errno.",
            "- Fix ibv_reg_mr failure when the buffer is not page aligned (#1234)",
            "fix: handle ibv_reg_mr returning NULL",
            "After raising ulimit -l, ibv_reg_mr no longer fails.",
            "ibv_reg_mr completes without error for GPU memory.",
        ] {
            assert!(super::hypothetical(s), "{s}");
        }
        for s in [
            "Why does ibv_reg_mr fail with EINVAL on GPU memory?",
            "Does anyone know why ibv_reg_mr fails with EFAULT?",
            "When I register GPU memory, ibv_reg_mr fails with EFAULT.",
            "When I call ibv_reg_mr on GPU memory it fails with EFAULT.",
            "Fixed the alignment, but ibv_reg_mr still fails with EINVAL.",
            "On our new nodes memory registration errors out for a 2 GB buffer.",
            "ibv_reg_mr fails with EINVAL if I pass GPU memory.",
        ] {
            assert!(!super::hypothetical(s), "{s}");
        }
    }

    /// "It"/"This" failing after a line that named the call; a failure word alone is not enough.
    #[test]
    fn told_failures() {
        for s in [
            "This fails with EFAULT when buf is GPU memory.",
            "With VRAM I always get `Bad address`.",
            "It returns NULL.",
        ] {
            assert!(super::told_failure(s).is_some(), "{s}");
        }
        for s in ["This error is fatal.", "It took 3 seconds.", "If it fails, retry with a smaller buffer."] {
            assert!(super::told_failure(s).is_none(), "{s}");
        }
    }

    #[test]
    fn p2p_metadata_is_no_gpu_context() {
        for (line, gpu) in [
            ("I1207 03:42:22.151726 28182 transfer_engine_impl.cpp:183] Transfer Engine RPC using P2P handshake, listening on 127.0.0.1:15620", false),
            ("E1207 03:42:22.151726 28182 transfer_metadata.cpp:700] Failed to exchange P2P segment metadata", false),
            ("E1207 03:42:22.151726 28182 transfer_engine_impl.cpp:144] P2P: No valid port found for local TCP service.", false),
            ("I1207 03:42:22.151726 28182 rdma_transport.cpp:500] P2P: cached RDMA->TCP mapping: 10.0.0.1:1 -> 10.0.0.1:2", false),
            ("metadata_server=P2PHANDSHAKE", false),
            ("I1207 03:42:22.151726 28182 transfer_engine_impl.cpp:300] HIP transport installed for intra-node GPU P2P", true),
            ("GPU P2P is enabled between GPU0 and the NIC", true),
        ] {
            assert_eq!(super::gpu_p2p(line), gpu, "{line}");
        }
    }
}
