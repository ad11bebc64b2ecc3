//! The vocabulary: registration-related messages of the stacks users run, as data
//! (`data/messages.json`, compiled in), each with its source and what its fields give, and the one
//! recogniser driven by that table. A pattern names a message family: literal text from the
//! source's format string with typed holes (`{addr}`, `{len}`, `{strerror}`, `{status}` ...) where
//! the format prints values, so every version and wording variant of one message is one entry.
//!
//! Entries with an `owner` are emitted at run time by that parser (UCX's ib_md line, NCCL's WARN,
//! perftest ...): the table documents and tests them. The others are recognised here: `failure`
//! lines are failed registrations; `layer` lines are an upper layer of a failure printed just
//! before them (UCX's rcache → ucp_mm → ucp_request, a transfer engine over its verbs line) and
//! count once with it (`alone: false`: never on their own); `limit` lines are start-up warnings
//! that stand for the registrations a limit refuses; `fact` lines give facts (memlock) and leave
//! the line to the other parsers.
use super::frame::Frame;
use super::{generic, FileCtx};
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use aho_corasick::AhoCorasick;
use mrshim_record::MemKind;
use serde::Deserialize;

const BUILTIN: &str = include_str!("../../data/messages.json");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Failure,
    Layer,
    Limit,
    Fact,
}

fn yes() -> bool {
    true
}

/// One message family, as `data/messages.json` describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    pub id: String,
    pub project: String,
    pub source: String,
    pub version: String,
    pub pattern: String,
    pub role: Role,
    /// The parser that emits this message at run time (the table only documents it).
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub lib: Option<String>,
    #[serde(default)]
    pub call: Option<String>,
    /// The errno the message stands for when it prints none.
    #[serde(default)]
    pub errno: Option<i32>,
    /// The access bits the message stands for when it prints none (a program's own ODP check that
    /// refuses before its IBV_ACCESS_ON_DEMAND registration).
    #[serde(default)]
    pub access: Option<u32>,
    #[serde(default)]
    pub mem: Option<String>,
    #[serde(default)]
    pub flags: Vec<String>,
    /// A layer that is also a failure when nothing failed just before it.
    #[serde(default = "yes")]
    pub alone: bool,
    /// A fact whose errno belongs to the failure line printed just after it (libfabric EFA prints
    /// `Libfabric error: (%zd) %s` on the line before its `EFA internal error: ...`).
    #[serde(default)]
    pub errno_next: bool,
    /// A failure whose errno is on a later line of the same help-text block (Open MPI's help texts
    /// print `Error: <strerror> (<rc>)` a few lines below their headline, before the closing rule).
    #[serde(default)]
    pub errno_block: bool,
    /// A failure that prints no errno of its own and whose errno, when there is one, is the whole
    /// next line (`perror("...!\\n")` puts `: <strerror>` on a line of its own: QEMU before 6.1).
    #[serde(default)]
    pub errno_after: bool,
    /// A fact that is the whole line: no other parser reads it (perftest's "Failed to attach shared
    /// memory region" is an allocation, not a failed registration).
    #[serde(default)]
    pub whole: bool,
    pub category: String,
    pub means: String,
    /// A line written from the format string (tests).
    pub sample: String,
    /// More lines of the same family (other versions, other values).
    #[serde(default)]
    pub also: Vec<String>,
    /// What the sample gives (tests).
    pub expect: serde_json::Value,
}

#[derive(Deserialize)]
struct File {
    messages: Vec<Entry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hole {
    Addr,
    Ptr,
    Len,
    Range,
    Access,
    /// An access mask printed in decimal (pyverbs: `access flags: 1048583`).
    AccessDec,
    Strerror,
    Errno,
    Code,
    Status,
    /// A return code printed by name with its library's prefix (DAOS `DER_NOMEM`, Mercury
    /// `HG_NOMEM`, NA `NA_FAULT`): the errno the name stands for.
    RcName,
    Kind,
    Membit,
    Kb,
    Int,
    Hex,
    Word,
    Call,
    Any,
}

impl Hole {
    fn parse(name: &str) -> Option<Hole> {
        Some(match name {
            "addr" => Hole::Addr,
            "ptr" => Hole::Ptr,
            "len" => Hole::Len,
            "range" => Hole::Range,
            "access" => Hole::Access,
            "access10" => Hole::AccessDec,
            "strerror" => Hole::Strerror,
            "errno" => Hole::Errno,
            "code" => Hole::Code,
            "status" => Hole::Status,
            "rcname" => Hole::RcName,
            "kind" => Hole::Kind,
            "membit" => Hole::Membit,
            "kb" => Hole::Kb,
            "int" => Hole::Int,
            "hex" => Hole::Hex,
            "word" => Hole::Word,
            "call" => Hole::Call,
            "*" => Hole::Any,
            _ => return None,
        })
    }
    /// Holes that are a run of characters of one class (the rest run up to the next literal).
    fn class(self) -> Option<fn(u8) -> bool> {
        fn num(b: u8) -> bool {
            b.is_ascii_hexdigit() || b == b'x' || b == b'-'
        }
        fn ident(b: u8) -> bool {
            b.is_ascii_alphanumeric() || b == b'_'
        }
        fn dec(b: u8) -> bool {
            b.is_ascii_digit()
        }
        fn range(b: u8) -> bool {
            b.is_ascii_hexdigit() || b == b'x' || b == b'.'
        }
        match self {
            Hole::Len | Hole::Access | Hole::Errno | Hole::Code | Hole::Kb | Hole::Int | Hole::Hex | Hole::Membit => {
                Some(num)
            }
            Hole::Range => Some(range),
            Hole::AccessDec => Some(dec),
            Hole::Call | Hole::RcName => Some(ident),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// Lower-cased literal text.
    Lit(String),
    Hole(Hole),
}

/// A pattern as tokens, or why it cannot be one.
fn compile(pattern: &str) -> Result<Vec<Tok>, String> {
    let mut toks = Vec::new();
    let mut rest = pattern;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(i) => {
                if i > 0 {
                    toks.push(Tok::Lit(rest[..i].to_ascii_lowercase()));
                }
                let close = rest[i..].find('}').ok_or_else(|| format!("unclosed hole in {pattern:?}"))? + i;
                let name = &rest[i + 1..close];
                let h = Hole::parse(name).ok_or_else(|| format!("unknown hole {{{name}}} in {pattern:?}"))?;
                if matches!(toks.last(), Some(Tok::Hole(_))) {
                    return Err(format!("two holes without text between them in {pattern:?}"));
                }
                toks.push(Tok::Hole(h));
                rest = &rest[close + 1..];
            }
            None => {
                toks.push(Tok::Lit(rest.to_ascii_lowercase()));
                rest = "";
            }
        }
    }
    match toks.iter().position(|t| matches!(t, Tok::Lit(_))) {
        None => Err(format!("no literal text in {pattern:?}")),
        Some(i) if i > 1 => Err(format!("more than one hole before the first text in {pattern:?}")),
        Some(i) if i == 1 && toks[0] != Tok::Hole(Hole::Call) && toks[0] != Tok::Hole(Hole::Word) => {
            Err(format!("a pattern may only start with {{call}} or {{word}}: {pattern:?}"))
        }
        Some(_) => Ok(toks),
    }
}

/// What a matched line gives.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Fields {
    pub call: Option<String>,
    pub addr: Option<u64>,
    pub length: Option<u64>,
    pub access: Option<u32>,
    pub errno: Option<i32>,
    pub mem: Option<MemKind>,
    /// Soft RLIMIT_MEMLOCK in bytes.
    pub memlock: Option<u64>,
}

fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    if matches!(s, "(nil)" | "nil" | "null" | "NULL") {
        return Some(0);
    }
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Addresses and pointers are hex with or without `0x` (`%p` and `%lx`).
fn hex(s: &str) -> Option<u64> {
    let s = s.trim();
    if matches!(s, "(nil)" | "nil" | "null" | "NULL") {
        return Some(0);
    }
    u64::from_str_radix(s.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()
}

/// An errno from a return code that may be negated (`-12`, `12`); only plausible errnos.
fn code(s: &str) -> Option<i32> {
    let n: i64 = s.trim().parse().ok()?;
    let n = n.checked_abs()?;
    (1..=133).contains(&n).then_some(n as i32)
}

/// UCX status strings (ucs_status_string) that say what was wrong with the request itself; the
/// others (`Input/output error` = the driver refused, whatever its errno) give no errno.
fn ucs_status(s: &str) -> Option<i32> {
    let l = s.trim().to_ascii_lowercase();
    if l.starts_with("invalid parameter") {
        Some(errno::EINVAL)
    } else if l.starts_with("out of memory") {
        Some(errno::ENOMEM)
    } else if l.starts_with("unsupported operation") {
        Some(errno::EOPNOTSUPP)
    } else {
        None
    }
}

/// The errno a prefixed return-code name stands for: DAOS `DER_*` (src/include/daos_errno.h),
/// Mercury `HG_*` and NA `NA_*` (mercury's hg_return_t / na_return_t names). Names of the
/// transport's own state (`DER_HG`, `HG_PROTOCOL_ERROR`, `DER_TIMEDOUT` ...) give none.
fn rc_name(s: &str) -> Option<i32> {
    let (_, name) = s.trim().split_once('_')?;
    // uGNI's gni_return_t names (`GNI_RC_INVALID_PARAM`): the errno libfabric's GNI provider maps each
    // to (gnix_rc_table, prov/gni/src/gnix_util.c, v1.14.0); RESOURCE is left to the entry that reads it
    if let Some(gni) = name.to_ascii_uppercase().strip_prefix("RC_") {
        return Some(match gni {
            "NOT_DONE" => errno::EAGAIN,
            "INVALID_PARAM" | "ALIGNMENT_ERROR" | "NO_MATCH" => errno::EINVAL,
            "PERMISSION_ERROR" => errno::EACCES,
            "ILLEGAL_OP" => errno::EOPNOTSUPP,
            "ERROR_NOMEM" => errno::ENOMEM,
            _ => return None,
        });
    }
    Some(match name.to_ascii_uppercase().as_str() {
        "NOMEM" => errno::ENOMEM,
        "INVAL" | "INVALID_ARG" | "INVALID_PARAM" => errno::EINVAL,
        "FAULT" => errno::EFAULT,
        "NO_PERM" | "PERMISSION" => errno::EPERM,
        "ACCESS" => errno::EACCES,
        "NOSPACE" => errno::ENOSPC,
        "BUSY" => errno::EBUSY,
        "AGAIN" => errno::EAGAIN,
        "OPNOTSUPPORTED" | "NOTSUPPORTED" => errno::EOPNOTSUPP,
        "PROTONOSUPPORT" => errno::EPROTONOSUPPORT,
        _ => return None,
    })
}

/// UCX memory type names (ucs_memory_type_names).
fn mem_kind(s: &str) -> Option<MemKind> {
    match s.trim().to_ascii_lowercase().as_str() {
        "host" => Some(MemKind::HostAnon),
        "cuda" | "cuda-managed" | "rocm" | "rocm-managed" | "ze-device" | "ze-shared" | "rdma" => Some(MemKind::Device),
        _ => None,
    }
}

fn mem_bit(s: &str) -> Option<MemKind> {
    match num(s)? {
        1 => Some(MemKind::HostAnon),
        0 => None,
        _ => Some(MemKind::Device),
    }
}

fn set(f: &mut Fields, h: Hole, v: &str) -> bool {
    let v = v.trim();
    match h {
        Hole::Addr => match hex(v) {
            Some(a) => f.addr = Some(a),
            None => return false,
        },
        Hole::Len => match num(v) {
            Some(n) => f.length = Some(n),
            None => return false,
        },
        Hole::Range => {
            let Some((a, b)) = v.split_once("..") else { return false };
            match (hex(a), hex(b)) {
                (Some(a), Some(b)) if b >= a => {
                    f.addr = Some(a);
                    f.length = Some(b - a);
                }
                _ => return false,
            }
        }
        Hole::Access => match hex(v) {
            Some(a) => f.access = Some(a as u32),
            None => return false,
        },
        Hole::AccessDec => match v.parse::<u32>() {
            Ok(a) => f.access = Some(a),
            Err(_) => return false,
        },
        Hole::Strerror => f.errno = errno::find(v),
        Hole::Errno | Hole::Code => match code(v) {
            Some(e) => f.errno = Some(e),
            None => return false,
        },
        Hole::Status => f.errno = ucs_status(v),
        Hole::RcName => f.errno = rc_name(v),
        Hole::Kind => f.mem = mem_kind(v),
        Hole::Membit => f.mem = mem_bit(v),
        Hole::Kb => match v.parse::<u64>() {
            Ok(k) => f.memlock = Some(k.saturating_mul(1024)),
            Err(_) => return false,
        },
        Hole::Int => return v.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) && !v.is_empty(),
        Hole::Hex => return hex(v).is_some(),
        Hole::Call => f.call = Some(v.to_string()),
        Hole::Ptr => return hex(v).is_some() || v.is_empty(),
        Hole::Word | Hole::Any => {}
    }
    true
}

/// Matches `toks` against `line` (and its lower-cased copy `low`, same byte offsets).
#[cfg(test)]
fn match_toks(toks: &[Tok], line: &str, low: &str) -> Option<Fields> {
    let first = toks.iter().position(|t| matches!(t, Tok::Lit(_)))?;
    let Tok::Lit(anchor) = &toks[first] else { return None };
    memchr::memmem::find_iter(low.as_bytes(), anchor.as_bytes()).take(8).find_map(|at| match_at(toks, line, low, at))
}

/// Matches `toks` with their first literal at byte `at` of `line`.
fn match_at(toks: &[Tok], line: &str, low: &str, at: usize) -> Option<Fields> {
    let first = toks.iter().position(|t| matches!(t, Tok::Lit(_)))?;
    let mut f = Fields::default();
    if first == 1 {
        let Tok::Hole(h) = toks[0] else { return None };
        let start =
            low[..at].bytes().rposition(|b| !(b.is_ascii_alphanumeric() || b == b'_')).map(|i| i + 1).unwrap_or(0);
        if start == at || !set(&mut f, h, &line[start..at]) {
            return None;
        }
    }
    match_rest(&toks[first..], line, low, at, &mut f).then_some(f)
}

/// The part of a literal before its first run of spaces (the whole literal when it has none or
/// starts with one).
fn first_run(l: &str) -> &str {
    memchr::memmem::find(l.as_bytes(), b"  ").filter(|&i| i > 0).map_or(l, |i| &l[..i])
}

/// A first piece shorter than this tells no lines apart (SOS's `]` before its aligned `mr_reg`
/// is in most lines of a log): the piece after its run of spaces is looked for instead.
const SHORTEST_ANCHOR: usize = 3;

/// What the line scanner looks for of a pattern's first literal `l`, and what must precede it
/// across a run of spaces (its lead, or ""): the part before the first run ([`first_run`]), or when
/// that is shorter than [`SHORTEST_ANCHOR`], the part after the run with that one as its lead.
fn anchor_of(l: &str) -> (&str, &str) {
    let head = first_run(l);
    let rest = l[head.len()..].trim_start_matches(' ');
    if head.len() >= SHORTEST_ANCHOR || rest.is_empty() {
        return ("", head);
    }
    (head, first_run(rest))
}

/// The bytes of `hay` the literal `l` takes at its start, or `None`: a run of two or more spaces
/// in the literal (a program's alignment, `ERR:  ioctl`) takes any run of spaces, as a web page
/// or a paste may collapse it to one.
fn literal_at(hay: &str, l: &str) -> Option<usize> {
    if hay.starts_with(l) {
        return Some(l.len());
    }
    // only a literal with a run of spaces matches otherwise than byte for byte
    memchr::memmem::find(l.as_bytes(), b"  ")?;
    let (h, p) = (hay.as_bytes(), l.as_bytes());
    let (mut i, mut j) = (0, 0);
    while j < p.len() {
        if p[j] == b' ' && p.get(j + 1) == Some(&b' ') {
            while p.get(j) == Some(&b' ') {
                j += 1;
            }
            if h.get(i) != Some(&b' ') {
                return None;
            }
            while h.get(i) == Some(&b' ') {
                i += 1;
            }
        } else if h.get(i) == Some(&p[j]) {
            i += 1;
            j += 1;
        } else {
            return None;
        }
    }
    Some(i)
}

fn match_rest(toks: &[Tok], line: &str, low: &str, mut c: usize, f: &mut Fields) -> bool {
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Lit(l) => match literal_at(&low[c..], l) {
                Some(n) => c += n,
                None => return false,
            },
            Tok::Hole(h) => {
                let next = toks.get(i + 1).and_then(|t| if let Tok::Lit(l) = t { Some(l.as_str()) } else { None });
                let end = match (h.class(), next) {
                    // a run of the hole's characters; `(nil)` for a NULL pointer
                    (Some(class), _) => {
                        let run = low[c..].bytes().take_while(|b| class(*b)).count();
                        if run == 0 && low[c..].starts_with("(nil)") {
                            c + 5
                        } else {
                            c + run
                        }
                    }
                    (None, Some(l)) => {
                        if matches!(h, Hole::Addr | Hole::Ptr)
                            && low[c..].starts_with("(nil)")
                            && low[c + 5..].starts_with(l)
                        {
                            c + 5
                        } else {
                            match memchr::memmem::find(&low.as_bytes()[c..], first_run(l).as_bytes()) {
                                Some(j) => c + j,
                                None => return false,
                            }
                        }
                    }
                    (None, None) => line.len(),
                };
                if end == c && !matches!(h, Hole::Any | Hole::Ptr) {
                    return false;
                }
                if !set(f, *h, &line[c..end]) {
                    return false;
                }
                c = end;
            }
        }
        i += 1;
    }
    true
}

/// The table, compiled: entries, their tokens and a prefilter on each entry's first literal.
pub struct Vocab {
    pub entries: Vec<Entry>,
    toks: Vec<Vec<Tok>>,
    pre: AhoCorasick,
    /// prefilter pattern (a distinct first literal) -> the entries it starts
    owners: Vec<Vec<usize>>,
    anchors: Vec<String>,
    /// entry -> the lead before its anchor ([`anchor_of`]), "" for most
    leads: Vec<String>,
}

impl Vocab {
    pub fn new(json: &str) -> Result<Vocab, String> {
        let file: File = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let mut toks = Vec::new();
        let mut anchors: Vec<String> = Vec::new();
        let mut owners: Vec<Vec<usize>> = Vec::new();
        let mut leads = Vec::new();
        for (i, e) in file.messages.iter().enumerate() {
            let t = compile(&e.pattern).map_err(|m| format!("{}: {m}", e.id))?;
            // (up to a run of spaces, which the line may have collapsed: [`literal_at`])
            let first = t.iter().find_map(|t| if let Tok::Lit(l) = t { Some(l.as_str()) } else { None });
            let (lead, anchor) = anchor_of(first.unwrap_or_default());
            leads.push(lead.to_string());
            let anchor = anchor.to_string();
            match anchors.iter().position(|a| *a == anchor) {
                Some(p) => owners[p].push(i),
                None => {
                    anchors.push(anchor);
                    owners.push(vec![i]);
                }
            }
            toks.push(t);
        }
        let pre = AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .ascii_case_insensitive(true)
            .build(&anchors)
            .map_err(|e| e.to_string())?;
        Ok(Vocab { entries: file.messages, toks, pre, owners, anchors, leads })
    }

    /// Where entry `e`'s first literal would start in `line` when its anchor is at byte `at`:
    /// there, or before the run of spaces before `at` when the entry's anchor has a lead (which
    /// must be there).
    fn start(&self, e: usize, line: &str, at: usize) -> Option<usize> {
        let lead = self.leads[e].as_bytes();
        if lead.is_empty() {
            return Some(at);
        }
        let b = line.as_bytes();
        let run = b[..at].iter().rev().take_while(|&&c| c == b' ').count();
        let end = at - run;
        let from = end.checked_sub(lead.len()).filter(|_| run > 0)?;
        b[from..end].eq_ignore_ascii_case(lead).then_some(from)
    }

    /// The distinct anchors of the first literals ([`anchor_of`], lower case), for the line
    /// scanner ([`crate::scan`]).
    pub fn anchors(&self) -> &[String] {
        &self.anchors
    }

    /// Every entry whose pattern matches `line`, in table order, with what each gives. The
    /// prefilter's hits are where each entry's first literal is: tried there (the first 8 of an
    /// entry), so a line without any of them costs one automaton pass and no allocation.
    pub fn matches(&self, line: &str) -> Vec<(usize, Fields)> {
        let mut starts: Vec<(usize, usize)> = Vec::new();
        if std::ptr::eq(self, table()) {
            // the built-in table's first literals are in the line scanner's pass
            crate::scan::each(line, crate::scan::Set::Vocab, |a, r| {
                starts.extend(self.owners[a as usize].iter().filter_map(|e| Some((*e, self.start(*e, line, r.start)?))))
            });
        } else {
            for m in self.pre.find_overlapping_iter(line) {
                let owners = self.owners[m.pattern().as_usize()].iter();
                starts.extend(owners.filter_map(|e| Some((*e, self.start(*e, line, m.start())?))));
            }
        }
        if starts.is_empty() {
            return Vec::new();
        }
        starts.sort_unstable();
        let low = line.to_ascii_lowercase();
        let mut out = Vec::new();
        for group in starts.chunk_by(|a, b| a.0 == b.0) {
            let e = group[0].0;
            if let Some(f) = group.iter().take(8).find_map(|(_, at)| match_at(&self.toks[e], line, &low, *at)) {
                out.push((e, f));
            }
        }
        out
    }
}

/// Whether a first literal of the built-in table occurs in `body` (from the line scanner's pass).
pub fn anchored(body: &str) -> bool {
    let mut any = false;
    crate::scan::each(body, crate::scan::Set::Vocab, |_, _| any = true);
    any
}

pub fn table() -> &'static Vocab {
    static T: std::sync::LazyLock<Vocab> =
        std::sync::LazyLock::new(|| Vocab::new(BUILTIN).expect("data/messages.json is valid (tested)"));
    &T
}

pub fn lib_named(name: &str) -> Option<Lib> {
    Some(match name {
        "ucx" => Lib::Ucx,
        "nccl" => Lib::Nccl,
        "rccl" => Lib::Rccl,
        "ompi" => Lib::Ompi,
        "perftest" => Lib::Perftest,
        "verbs" => Lib::Verbs,
        "kernel" => Lib::Kernel,
        "libfabric" => Lib::Libfabric,
        "nvshmem" => Lib::Nvshmem,
        "mooncake" => Lib::Mooncake,
        "nixl" => Lib::Nixl,
        "gdrcopy" => Lib::Gdrcopy,
        _ => return None,
    })
}

pub fn flag_named(name: &str) -> Option<Flag> {
    Some(match name {
        "locked-mem-warn" => Flag::LockedMemWarn,
        "reg-limit-warn" => Flag::RegLimitWarn,
        "memlock-warned" => Flag::MemlockWarned,
        "kernel-reg-fail" => Flag::KernelRegFail,
        "mkey-limit" => Flag::MkeyLimit,
        "umem-get-fail" => Flag::UmemGetFail,
        "mr-size-exceeded" => Flag::MrSizeExceeded,
        "dmabuf-unsupported" => Flag::DmabufUnsupported,
        "p2p-pin-fail" => Flag::P2pPinFail,
        "peermem-missing" => Flag::PeermemMissing,
        "gpu-dmabuf-unavailable" => Flag::GpuDmabufUnavailable,
        "gpu-support-missing" => Flag::GpuSupportMissing,
        "buffer-alloc-fail" => Flag::BufferAllocFail,
        "reg-table-full" => Flag::RegTableFull,
        "ro-requested" => Flag::RoRequested,
        "access-refused" => Flag::AccessRefused,
        "mkey-setup-fail" => Flag::MkeySetupFail,
        "mr-cache-limit" => Flag::MrCacheLimit,
        "mlx4-hca" => Flag::Mlx4Hca,
        "umr-fail" => Flag::UmrFail,
        "odp-xlt-fail" => Flag::OdpXltFail,
        "pinnable-short" => Flag::PinnableShort,
        _ => return None,
    })
}

/// Host and pid from the prefixes the stacks print: the launcher/logger frame, NCCL's
/// `host:pid:tid [dev]`, UCX's `[host:pid:tid]`.
fn origin<'a>(f: &Frame<'a>, body: &'a str) -> (Option<&'a str>, Option<u32>) {
    if f.host.is_some() || f.pid.is_some() {
        return (f.host, f.pid);
    }
    if let Some(p) = super::nccl::split(body) {
        return (p.host, p.pid);
    }
    if let Some((_, h, p, _)) = super::ucx::header(body) {
        return (Some(h), Some(p));
    }
    (None, None)
}

/// A failure printed within this many lines before is the one an upper layer reports.
const LAYER_REACH: u64 = 3;

/// Tries `f.body` against the vocabulary; true when the line was consumed here.
pub fn parse(f: &Frame, ctx: &mut FileCtx, lineno: u64, line: &str, emit: &mut dyn FnMut(Event)) -> bool {
    // a failure another parser holds back (UCX's, the generic recogniser's) was on the line before
    if ctx.ucx_pending.is_some() || ctx.gen_pending.is_some() {
        ctx.vocab_recent = Some(lineno.saturating_sub(1));
    }
    let body = f.body;
    let v = table();
    // the entries that can match are those whose first literal occurs; when each of them belongs
    // to an owner's parser (NCCL's `Call to`, UCX's `(address=`: the bulk of a failing job's
    // lines), nothing below uses what they match
    let mut owned_only = true;
    crate::scan::each(body, crate::scan::Set::Vocab, |a, _| {
        owned_only &= v.owners[a as usize].iter().all(|e| v.entries[*e].owner.is_some())
    });
    if owned_only {
        return false;
    }
    let hits = v.matches(body);
    if hits.is_empty() {
        return false;
    }
    let (host, pid) = origin(f, body);
    let host = host.map(String::from).or_else(|| ctx.host.clone());
    let mut owned = false;
    let mut whole = false;
    let mut chosen = None;
    // the layers of the same failure on the same line (a line the pasting software wrapped, joined
    // back) flag what they observed too
    let mut also: Vec<Flag> = Vec::new();
    for (i, fields) in hits {
        let e = &v.entries[i];
        if let Some(o) = &e.owner {
            // NCCL's messages are its parser's on a line with NCCL's frame; elsewhere they are
            // not NCCL's (Open MPI's `The call to cuIpcGetMemHandle failed.` reads as NCCL's bare
            // `Call to X failed`) and leave the line to the entries that are its own
            owned |= o != "parse/nccl.rs" || super::nccl::split(body).is_some();
            continue;
        }
        if e.role == Role::Fact {
            let lib = e.lib.as_deref().and_then(lib_named).unwrap_or(Lib::Text);
            if let Some(m) = fields.memlock {
                emit(Event::fact(lib, host.as_deref(), pid, Fact::Memlock(Some(m))));
            }
            for fl in e.flags.iter().filter_map(|n| flag_named(n)) {
                emit(Event::fact(lib, host.as_deref(), pid, Fact::Flag(fl)));
            }
            if e.errno_next {
                ctx.vocab_errno = fields.errno.map(|n| (lineno, n));
            }
            whole |= e.whole;
        } else if chosen.is_none() {
            chosen = Some((i, fields));
        } else if e.role == Role::Layer {
            also.extend(e.flags.iter().filter_map(|n| flag_named(n)));
        }
    }
    // the owner parses this line (facts on it were emitted above)
    let Some((i, fields)) = chosen.filter(|_| !owned) else { return whole && !owned };
    let e = &v.entries[i];
    let lib = e.lib.as_deref().and_then(lib_named).or_else(|| generic::lib_hint(body)).or(ctx.lib_hint);
    let zero = fields.length == Some(0);
    let mut flags: Vec<Flag> = e.flags.iter().filter_map(|n| flag_named(n)).collect();
    for f in also {
        if !flags.contains(&f) {
            flags.push(f);
        }
    }
    if zero {
        // an empty range is an invalid request, not a size the device refused
        flags.retain(|f| *f != Flag::MrSizeExceeded);
    }
    let is_layer = e.role == Role::Layer;
    // what a layer flags is observed even when the layer itself counts with the failure below it
    // (mlx5's `Failed to update mkey page tables` after its `reg umr failed`)
    let flag_layer = |emit: &mut dyn FnMut(Event)| {
        for fl in &flags {
            emit(Event::fact(lib.unwrap_or(Lib::Text), host.as_deref(), pid, Fact::Flag(*fl)));
        }
    };
    // UCX's own parser holds the driver's line back for the memory kind: its upper layers are its
    if lib == Some(Lib::Ucx) && ctx.ucx_pending.is_some() {
        if is_layer {
            flag_layer(emit);
        }
        ctx.vocab_recent = Some(lineno);
        // a layer in another program's words (Realm's, Mercury's `ucp_mem_map ... failed`) is the
        // failure UCX's parser holds: consumed here, or a later parser would count it again
        return is_layer && !body.contains(" UCX ");
    }
    let recent = ctx.vocab_recent.is_some_and(|r| lineno <= r + LAYER_REACH);
    if is_layer && ctx.gen_pending.is_none() && recent {
        // the failure below this layer was already counted
        flag_layer(emit);
        ctx.vocab_recent = Some(lineno);
        return true;
    }
    if is_layer && ctx.gen_pending.is_none() && !e.alone {
        return false;
    }
    let kind_hint = fields.mem.or(match e.mem.as_deref() {
        Some("device") => Some(MemKind::Device),
        Some("host") => Some(MemKind::HostAnon),
        _ => None,
    });
    let mut mem = kind_hint.or_else(|| generic::mem_hint(body));
    if mem.is_none() && !zero {
        mem = ctx.device_hint.map(|d| if d { MemKind::Device } else { MemKind::HostAnon });
    }
    for fl in &flags {
        emit(Event::fact(lib.unwrap_or(Lib::Text), host.as_deref(), pid, Fact::Flag(*fl)));
    }
    // an errno the line before printed for this failure
    let carried = ctx.vocab_errno.take().filter(|(at, _)| lineno <= at + LAYER_REACH).map(|(_, n)| n);
    let ev = RegEv {
        lib,
        host,
        pid,
        rank: f.rank,
        call: fields.call.clone().or_else(|| e.call.clone()).unwrap_or_else(|| "register memory".into()),
        ok: false,
        errno: fields.errno.or(e.errno).or(carried).or(if zero { Some(errno::EINVAL) } else { None }),
        mem,
        access: fields.access.or(e.access),
        length: fields.length,
        addr: fields.addr,
        evid: Some((lineno, line.to_string())),
        ..Default::default()
    };
    ctx.vocab_recent = Some(lineno);
    let block = e.errno_block && ev.errno.is_none();
    generic::hold(ev, ctx, lineno, body, emit);
    ctx.gen_pending_final = !block && !e.errno_after;
    if block {
        ctx.gen_pending_block = Some(lineno + BLOCK_REACH);
    }
    true
}

/// How far below its headline a help text's `Error:` line may be.
const BLOCK_REACH: u64 = 8;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn patterns_compile_and_holes_read_values() {
        let t = compile("{call}(address={addr}, length={len}) failed: {strerror}").unwrap();
        let line = "x ibv_reg_mr(address=0x7f00, length=4096) failed: Bad address";
        let f = match_toks(&t, line, &line.to_ascii_lowercase()).unwrap();
        assert_eq!(
            (f.call.as_deref(), f.addr, f.length, f.errno),
            (Some("ibv_reg_mr"), Some(0x7f00), Some(4096), Some(14))
        );
        assert!(compile("{addr}{len}").is_err());
        assert!(compile("{nope} x").is_err());
        assert!(compile("{addr} x").is_err(), "only {{call}}/{{word}} may lead");
        let t = compile("region {ptr} [{range}]: {status}").unwrap();
        let line = "region 0x1 [0x1000..0x3000]: Invalid parameter";
        let f = match_toks(&t, line, line).unwrap();
        assert_eq!((f.addr, f.length, f.errno), (Some(0x1000), Some(0x2000), Some(22)));
        // return codes printed by name: DAOS DER_*, Mercury HG_* / NA_*
        let t = compile("rc: {rcname}({int})").unwrap();
        for (line, want) in [
            ("rc: DER_NOMEM(-1009)", Some(12)),
            ("rc: HG_INVALID_ARG(3)", Some(22)),
            ("rc: NA_FAULT(8)", Some(14)),
            ("rc: DER_NO_PERM(-1001)", Some(1)),
            ("rc: DER_HG(-1020)", None),
            ("rc: GNI_RC_INVALID_PARAM(2)", Some(22)),
            ("rc: GNI_RC_PERMISSION_ERROR(5)", Some(13)),
            ("rc: GNI_RC_DESCRIPTOR_ERROR(6)", None),
        ] {
            let f = match_toks(&t, line, &line.to_ascii_lowercase()).unwrap();
            assert_eq!(f.errno, want, "{line}");
        }
    }

    #[test]
    fn the_table_loads_and_every_entry_is_documented() {
        let v = table();
        assert!(v.entries.len() >= 40, "{} entries", v.entries.len());
        let mut ids = std::collections::BTreeSet::new();
        for e in &v.entries {
            assert!(ids.insert(e.id.as_str()), "duplicate id {}", e.id);
            for (what, s) in [
                ("project", &e.project),
                ("source", &e.source),
                ("version", &e.version),
                ("means", &e.means),
                ("category", &e.category),
            ] {
                assert!(!s.trim().is_empty(), "{}: no {what}", e.id);
            }
            if let Some(l) = &e.lib {
                assert!(lib_named(l).is_some(), "{}: unknown lib {l}", e.id);
            }
            for fl in &e.flags {
                assert!(flag_named(fl).is_some(), "{}: unknown flag {fl}", e.id);
            }
        }
    }

    /// Each entry's sample (and its other lines of the same family) is recognised by that entry.
    #[test]
    fn each_entry_recognises_its_own_family() {
        let v = table();
        let mut bad = Vec::new();
        for (i, e) in v.entries.iter().enumerate() {
            for s in std::iter::once(&e.sample).chain(&e.also) {
                if !v.matches(s).iter().any(|(j, _)| *j == i) {
                    bad.push(format!("{}: {s}", e.id));
                }
            }
        }
        assert!(bad.is_empty(), "not recognised by their own entry:\n{}", bad.join("\n"));
    }

    /// A first literal whose piece before its run of spaces is too short to look for (SOS's `]`
    /// before its aligned `mr_reg`) is found by the piece after the run, with the short piece
    /// before it, the run as printed or collapsed; a line with only the short piece is not one
    /// the vocabulary may hold (the cheap path of the dispatch stays open to it).
    #[test]
    fn a_short_first_piece_leads_the_anchor() {
        assert_eq!(anchor_of("]        mr_reg "), ("]", "mr_reg "));
        assert_eq!(anchor_of("err:  ioctl error (errno="), ("", "err:"));
        assert_eq!(anchor_of("]"), ("", "]"));
        let v = table();
        let sos = v.entries.iter().position(|e| e.id == "sos.ofi.mr_reg_old").expect("the SOS entry");
        let hit = |s: &str| v.matches(s).iter().any(|(j, _)| *j == sos);
        for s in ["[0000]        mr_reg heap failed", "[0000] mr_reg data failed", "x [0001]  MR_REG heap failed"] {
            assert!(hit(s), "{s}");
        }
        for s in ["[0000]mr_reg heap failed", "[0000]   x mr_reg heap failed", "mr_reg heap failed"] {
            assert!(!hit(s), "{s}");
        }
        assert!(!anchored("systemd[1]: Started session-17.scope - Session of user train."));
    }

    /// `lines` as one file through the whole parser: every event.
    pub(crate) fn run(lines: &[&str]) -> Vec<Event> {
        let mut p = crate::parse::Parser::default();
        let mut ctx = FileCtx::default();
        let mut out = Vec::new();
        for (n, l) in lines.iter().enumerate() {
            p.line(&mut ctx, l, n as u64 + 1, &mut |e| out.push(e));
        }
        p.end_file(&mut ctx, &mut |e| out.push(e));
        out
    }

    fn kind(m: Option<MemKind>) -> Option<&'static str> {
        m.map(|m| if m == MemKind::Device { "device" } else { "host" })
    }

    /// One check per entry: its sample line, run through the whole parser (whichever parser owns
    /// it), gives what the entry says: a failed registration or none, the call, errno, length,
    /// address, access mask, memory kind, memlock and flags.
    #[test]
    fn each_entry_gives_its_fields() {
        let mut bad = Vec::new();
        for e in &table().entries {
            let out = run(&[e.sample.as_str()]);
            let fails: Vec<&RegEv> =
                out.iter().filter_map(|x| if let Event::Reg(r) = x { (!r.ok).then_some(r) } else { None }).collect();
            let x = &e.expect;
            let mut why = Vec::new();
            let want_fail = x["failure"].as_bool().unwrap_or(false);
            if want_fail == fails.is_empty() || fails.len() > 1 {
                why.push(format!("{} failure(s), expected {}", fails.len(), if want_fail { 1 } else { 0 }));
            }
            if let Some(r) = fails.first() {
                if let Some(c) = x.get("call").and_then(|c| c.as_str()) {
                    if r.call != c {
                        why.push(format!("call {} != {c}", r.call));
                    }
                }
                if let Some(v) = x.get("errno") {
                    let want = v.as_i64().map(|n| n as i32);
                    if r.errno != want {
                        why.push(format!("errno {:?} != {want:?}", r.errno));
                    }
                }
                for (k, got) in [("length", r.length), ("addr", r.addr), ("access", r.access.map(u64::from))] {
                    if let Some(v) = x.get(k) {
                        if got != v.as_u64() {
                            why.push(format!("{k} {got:?} != {v}"));
                        }
                    }
                }
                if let Some(m) = x.get("mem").and_then(|m| m.as_str()) {
                    if kind(r.mem) != Some(m) {
                        why.push(format!("mem {:?} != {m}", r.mem));
                    }
                }
            }
            if let Some(m) = x.get("memlock").and_then(|m| m.as_u64()) {
                if !out.iter().any(|ev| matches!(ev, Event::Fact { fact: Fact::Memlock(Some(n)), .. } if *n == m)) {
                    why.push(format!("no memlock fact {m}"));
                }
            }
            for fl in x.get("flags").and_then(|f| f.as_array()).into_iter().flatten() {
                let f = flag_named(fl.as_str().unwrap_or("")).expect("known flag");
                if !out.iter().any(|ev| matches!(ev, Event::Fact { fact: Fact::Flag(g), .. } if *g == f)) {
                    why.push(format!("no flag {fl}"));
                }
            }
            if !why.is_empty() {
                bad.push(format!("{}: {}\n    {}", e.id, why.join("; "), e.sample));
            }
        }
        assert!(bad.is_empty(), "{} of {} entries:\n{}", bad.len(), table().entries.len(), bad.join("\n"));
    }

    /// Layers of one failure count once; a layer that may not stand alone is no failure by itself.
    #[test]
    fn layers_count_once() {
        let count = |lines: &[&str]| run(lines).iter().filter(|e| matches!(e, Event::Reg(r) if !r.ok)).count();
        // UCX 1.13: driver line, md line (memory kind), request line
        assert_eq!(count(&[
            "[1.0] [h:1:0] ib_md.c:349  UCX  ERROR ibv_reg_mr(address=0x7f724fa00000, length=4096, access=0xf) failed: Bad address",
            "[1.1] [h:1:0] ucp_mm.c:164  UCX  ERROR failed to register address 0x7f724fa00000 mem_type bit 0x2 length 4096 on md[5]=mlx5_0: Input/output error (md reg_mem_types 0x3)",
            "[1.2] [h:1:0] ucp_request.c:526  UCX  ERROR failed to register user buffer datatype 0x8 address 0x7f724fa00000 len 4096: Input/output error",
        ]), 1);
        // UCX 1.3: the cache, the md and the request
        assert_eq!(count(&[
            "[1.0] [h:1:0] rcache.c:481  UCX  WARN  failed to register region 0xc5c5f0 [0x7fff7d47c000..0x7ffffd47c000]: Input/output error",
            "[1.1] [h:1:0] ucp_mm.c:105  UCX  ERROR failed to register address 0x7fff7d47c000 length 2147483644 on md[0]=ib/mlx5_2: Input/output error",
            "[1.2] [h:1:0] ucp_request.c:259  UCX  ERROR failed to register user buffer datatype 0x8 address 0x7fff7d47c000 len 2147483644: Input/output error",
        ]), 1);
        // a region that failed and the pool that needed it
        assert_eq!(count(&[
            "[1.0] [s:2:0] rcache.c:534  UCX  WARN  failed to register region 0x563b3f909550 [0x7fae34a00000..0x7fae35000000]: Input/output error",
            "[1.1] [s:2:0] mpool.c:176  UCX  ERROR Failed to allocate memory pool (name=ud_tx_skb) chunk: Input/output error",
        ]), 1);
        assert_eq!(count(&["[1.1] [s:2:0] mpool.c:176  UCX  ERROR Failed to allocate memory pool (name=ud_tx_skb) chunk: Input/output error"]), 0);
        // the NCCL UCX plugin over UCX's own line
        assert_eq!(count(&[
            "[1.0] [node02:10366:1]          rcache.c:985  UCX  ERROR failed to insert region 0x1479900ba210 [0x0..0x0]: Invalid parameter",
            "",
            "node02:10366:10377 [0] ucx_plugin.c:498 NCCL WARN Failed: UCX error ucx_plugin.c:498 '-5' Invalid parameter",
        ]), 1);
        // LNet: the short map, then the transfer that needed it
        assert_eq!(
            count(&[
                "LNetError: 3120:0:(o2iblnd.c:2027:kiblnd_fmr_pool_map()) Failed to map mr 255/256 elements: rc = -22",
                "LNetError: 3120:0:(o2iblnd_cb.c:610:kiblnd_fmr_map_tx()) Can't map 1048576 bytes (256/256)s: rc = -22",
            ]),
            1
        );
        // brpc: the pool region's registration, then the pool that needed it; the pool alone when its
        // region table is full (a fact, then the layer on its own)
        assert_eq!(count(&[
            "W1207 10:11:12.345601 23456 rdma_helper.cpp:205] Do not support IBV_ACCESS_RELAXED_ORDERING for RDMA!!!: Invalid argument",
            "E1207 10:11:12.345678 23456 rdma_helper.cpp:210] Fail to register memory: Cannot allocate memory",
            "E1207 10:11:12.400100 23456 block_pool.cpp:331] Fail to extend new region. You can set the size of memory pool larger. Refer to the help message of these flags: rdma_memory_pool_initial_size_mb, rdma_memory_pool_increase_size_mb, rdma_memory_pool_max_regions.",
        ]), 1);
        assert_eq!(count(&[
            "I1207 10:11:12.400000 23456 block_pool.cpp:143] Memory pool reaches max regions",
            "E1207 10:11:12.400100 23456 block_pool.cpp:331] Fail to extend new region. You can set the size of memory pool larger. Refer to the help message of these flags: rdma_memory_pool_initial_size_mb, rdma_memory_pool_increase_size_mb, rdma_memory_pool_max_regions.",
        ]), 1);
        // QEMU v1.6-v6.0: the errno of the pin-all registration on the line after it
        let ev = run(&["Failed to register local dest ram block!", ": Cannot allocate memory"]);
        let errs: Vec<_> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Reg(r) if !r.ok => Some(r.errno),
                _ => None,
            })
            .collect();
        assert_eq!(errs, vec![Some(12)]);
        // NVSHMEM's heap over its IB transport
        assert_eq!(count(&[
            "/src/modules/transport/common/transport_ib_common.cpp:98: non-zero status: 7 mem registration failed. Reason: Bad address",
            "/src/host/mem/mem_heap.cpp:972: non-zero status: 7 register_heap_memory_handle failed for remote ",
        ]), 1);
        // NVSHMEM IBGDA's handle over the common IB registration
        assert_eq!(count(&[
            "/src/modules/transport/common/transport_ib_common.cpp:129: non-zero status: 7 mem registration failed. Reason: Cannot allocate memory",
            "/src/modules/transport/ibgda/ibgda.cpp:755: non-zero status: 7 Unable to register memory handle.",
        ]), 1);
        // DAOS: Mercury's NA line, its bulk layer, CaRT's two lines
        assert_eq!(count(&[
            "# na_ofi_mem_register(): fi_mr_regattr(mr_iov[0].iov_base=0x7f2a1c000000, mr_iov[0].iov_len=1048576, iov_count=1, access=0xf00, iface=0, requested_key=0) failed, rc: -12 (Cannot allocate memory), mr_reg_count=4096",
            "# hg_bulk_create(): NA_Mem_register() failed (NA_NOMEM)",
            "12/07-01:02:03.45 node1 DAOS[12345/12350/0] hg   ERR  src/cart/crt_hg.c:2056 crt_hg_bulk_create() HG_Bulk_create failed, hg_ret: 6 (HG_NOMEM)",
            "12/07-01:02:03.45 node1 DAOS[12345/12350/0] rpc  ERR  src/cart/crt_bulk.c:143 crt_bulk_create() crt_hg_bulk_create() failed, rc: DER_NOMEM(-1009): 'Out of memory'",
        ]), 1);
        // NCCL's user-buffer registration over its verbs wrapper's line
        assert_eq!(count(&[
            "gpu1:2345:2400 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Bad address",
            "gpu1:2345:2400 [0] NCCL INFO rank 0 failed to NET register userbuff 0x7f2a40000000 buffSize 8388608 GDR flag 1",
        ]), 1);
        // OpenSHMEM's segment over UCX's driver line
        assert_eq!(count(&[
            "[1714000000.1] [h:1:0] ib_md.c:309  UCX  ERROR ibv_reg_mr(address=0x7f0000000000, length=4096, access=0xf) failed: Cannot allocate memory",
            "[h:1] Error memheap_base_register.c:131 - _reg_segment() Failed to register segment",
        ]), 1);
        // Realm and Mercury over UCX's own driver line
        for upper in [
            "[0 - 7f3c2a5fe740]    1.204518 {5}{ucp}: ucp_mem_map failed",
            "[1714000000.2] [h:1:0]  # na_ucx_mem_register(): ucp_mem_map() failed (Input/output error)",
        ] {
            assert_eq!(count(&[
                "[1714000000.1] [h:1:0] ib_md.c:309  UCX  ERROR ibv_reg_mr(address=0x7f0000000000, length=4096, access=0xf) failed: Bad address",
                upper,
            ]), 1, "{upper}");
        }
        // the transfer engine's own line after its verbs line gives the length
        let out = run(&[
            "E0326 14:23:05.675921 18944 rdma_context.cpp:265] Failed to register memory 0x7f105035d000: Input/output error [5]",
            "W0326 14:23:05.734648 1307 rdma_transport.cpp:400] RdmaTransport: Failed to register memory: addr 0x7f105035d000 length 4885774336",
        ]);
        let fails: Vec<&RegEv> =
            out.iter().filter_map(|e| if let Event::Reg(r) = e { (!r.ok).then_some(r) } else { None }).collect();
        assert_eq!(fails.len(), 1);
        assert_eq!((fails[0].errno, fails[0].length), (Some(5), Some(4885774336)));
    }

    /// A UCX status is not an errno: the request line after a cache failure does not turn it into EIO.
    #[test]
    fn ucx_status_is_not_an_errno() {
        let out = run(&[
            "[1.0] [h:1:0] rcache.c:460  UCX  WARN  failed to register region 0x31797f0 [0x7fffda8d3000..0x7fffe28d4000]: Input/output error",
            "[h:1] pml_ucx.c:860  Error: ucx send failed: Input/output error",
        ]);
        let r = out.iter().find_map(|e| if let Event::Reg(r) = e { Some(r) } else { None }).unwrap();
        assert_eq!(r.errno, None);
    }

    /// A zero-length registration is an empty request, not memory of any kind, whatever the file said.
    #[test]
    fn zero_length_is_no_memory_kind() {
        let out = run(&[
            "cuMemAlloc of a GPU buffer",
            "libfabric:1188:1763515454::efa:mr:efa_mr_reg_ibv_mr():519<warn> Unable to register MR of 0 bytes: Operation not supported, flags 0, ibv pd: 0x55d0c0de10, total mr reg size 0, mr reg count 0",
        ]);
        let r = out.iter().find_map(|e| if let Event::Reg(r) = e { (!r.ok).then_some(r) } else { None }).unwrap();
        assert_eq!((r.length, r.mem, r.errno), (Some(0), None, Some(95)));
    }
}
