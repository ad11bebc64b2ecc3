//! What the reporter says they tried: a setting, a module, a privilege, a version or a kind of memory
//! changed, and whether the job then worked ("after `ulimit -l unlimited` it runs", "loading
//! nvidia_peermem fixed it", "with NCCL_IB_PCI_RELAXED_ORDERING=0 it still fails", "it worked with
//! driver 535 and fails after upgrading"). One table of contrasts ([`CONTRASTS`]) and one reader
//! ([`parse`]): a change that made it work confirms the cause that change removes; a change the
//! failure survived ("still fails with ...", "didn't help") rules that cause out or lowers it. What
//! the flags weigh is findings/rules.rs' `TRIED`.
//!
//! Only the reporter's experience counts (I, we, it, the job — past or present): a question ("Does
//! it work as root?"), advice ("Try `ulimit -l unlimited`", "you should load nvidia_peermem"),
//! documentation and changelog lines are not evidence (the question/doc/changelog tests are
//! [`super::prose::hypothetical`]'s).
use super::prose::{has_start, has_word, marked_sentences, not_told};
use super::FileCtx;
use crate::event::{Event, Fact, Flag, Lib};
use std::ops::Range;

/// What a failure (not "still fails", just "fails") with the change in place says.
#[derive(Clone, Copy, PartialEq, Debug)]
enum OnFail {
    /// Nothing: the failure may be another one.
    Nothing,
    /// The cause survived the change: the `still` flag.
    Still,
    /// The change is what broke it (a regression after an upgrade): the `works` flag.
    Confirms,
}

/// One contrast: the change (any `topic` word in a clause, and, when `dir` is not empty, one of
/// `dir` there too: the way it was turned), the flag when it made the job work, the flag when the
/// failure survived it.
struct Contrast {
    topic: &'static [&'static str],
    dir: &'static [&'static str],
    works: Option<Flag>,
    still: Option<Flag>,
    on_fail: OnFail,
    /// The change is about GPU memory (the sentence is GPUDirect context).
    gpu: bool,
    /// Read in sentences in a CJK script too (the rows prose.rs read in Chinese before).
    cjk: bool,
}

/// Ways a switch is turned off, in env form and in words.
const OFF: &[&str] = &[
    "=0",
    "=off",
    "=n",
    "=no",
    "=false",
    "=loc",
    " off",
    "disabl",
    "without",
    "turn off",
    "turned off",
    "关闭",
    "禁用",
];

/// The contrasts, by what was changed. Words are lower-case (the sentence is lower-cased).
const CONTRASTS: &[Contrast] = &[
    // the locked-memory limit raised: ulimit, limits.conf, systemd, docker, Kubernetes
    Contrast {
        topic: &[
            "ulimit -l",
            "ulimit -sl",
            "memlock",
            "locked memory",
            "locked-memory",
            "lockable memory",
            "max locked",
            "limitmemlock",
            "limits.conf",
            "锁定内存",
            "内存锁定",
        ],
        dir: &[],
        works: Some(Flag::MemlockRaiseWorks),
        still: Some(Flag::MemlockRaiseStillFails),
        // a failure that names the limit ("fails: insufficient lockable memory") is its cause,
        // not a change it survived: only "still", "even", "didn't help" say that
        on_fail: OnFail::Nothing,
        gpu: false,
        cjk: true,
    },
    // privileges that lift RLIMIT_MEMLOCK (CAP_IPC_LOCK) and open the devices
    Contrast {
        topic: &[
            "as root",
            "as the root",
            "root user",
            "with root",
            "under root",
            "with sudo",
            "using sudo",
            "under sudo",
            "sudo ",
            "privileged",
            "cap_ipc_lock",
            "ipc_lock",
            "root用户",
            "root 用户",
            "root权限",
            "root 权限",
            "特权模式",
        ],
        dir: &[],
        works: Some(Flag::PrivilegedWorks),
        still: Some(Flag::PrivilegedStillFails),
        // a failure that names the limit ("fails: insufficient lockable memory") is its cause,
        // not a change it survived: only "still", "even", "didn't help" say that
        on_fail: OnFail::Nothing,
        gpu: false,
        cjk: true,
    },
    // relaxed ordering off (NCCL/RCCL/MCCL_IB_PCI_RELAXED_ORDERING=0, UCX_IB_PCI_RELAXED_ORDERING=off)
    Contrast {
        topic: &["relaxed_ordering", "relaxed ordering", "relaxed-ordering", "relax order"],
        dir: OFF,
        works: Some(Flag::RoOffWorks),
        still: Some(Flag::RoOffStillFails),
        on_fail: OnFail::Still,
        gpu: false,
        cjk: true,
    },
    // dmabuf off: the registration by address works where dmabuf does not
    Contrast {
        topic: &["dmabuf", "dma-buf", "dma_buf"],
        dir: OFF,
        works: Some(Flag::DmabufOffWorks),
        still: Some(Flag::DmabufOffStillFails),
        on_fail: OnFail::Still,
        gpu: true,
        cjk: true,
    },
    // dmabuf on (NCCL_DMABUF_ENABLE=1): GPU memory registers through dmabuf, not by address
    Contrast {
        topic: &["dmabuf", "dma-buf", "dma_buf"],
        dir: &[
            "=1",
            "=y",
            "=on",
            "=true",
            "enabled dma",
            "enabling dma",
            "enable dma",
            "using dma",
            "with dma",
            "via dma",
            "through dma",
            "dmabuf is enabled",
            "dmabuf enabled",
        ],
        works: Some(Flag::DmabufWorks),
        still: None,
        on_fail: OnFail::Nothing,
        gpu: true,
        cjk: false,
    },
    // GPUDirect RDMA off: buffers in host memory (NCCL_NET_GDR_LEVEL=LOC, UCX_IB_GPU_DIRECT_RDMA=no,
    // FI_EFA_USE_DEVICE_RDMA=0, FI_HMEM_DISABLE_P2P=1, MV2_USE_CUDA=0)
    Contrast {
        topic: &["gdr", "gpudirect", "gpu direct", "gpu_direct", "device_rdma", "mv2_use_cuda"],
        dir: OFF,
        works: Some(Flag::GdrOffWorks),
        still: Some(Flag::GdrOffStillFails),
        on_fail: OnFail::Still,
        gpu: true,
        cjk: true,
    },
    Contrast {
        topic: &["fi_hmem_disable_p2p=1", "fi_hmem_disable_p2p=y", "fi_hmem_disable_p2p=true"],
        dir: &[],
        works: Some(Flag::GdrOffWorks),
        still: Some(Flag::GdrOffStillFails),
        on_fail: OnFail::Still,
        gpu: true,
        cjk: false,
    },
    // the peer-memory module loaded
    Contrast {
        topic: &[
            "nvidia_peermem",
            "nvidia-peermem",
            "nv_peer_mem",
            "nv-peer-mem",
            "nv_peer_memory",
            "peermem",
            "peer memory",
            "peer-memory",
            "amdgpu peer",
        ],
        dir: &[],
        works: Some(Flag::PeermemLoadWorks),
        still: Some(Flag::PeermemStillFails),
        on_fail: OnFail::Still,
        gpu: true,
        cjk: true,
    },
    // host memory instead of GPU memory (cudaMallocHost, malloc, system memory)
    Contrast {
        topic: &[
            "cudamallochost",
            "cudahostalloc",
            "hipmallochost",
            "hiphostmalloc",
            "host memory",
            "host buffer",
            "system memory",
            "cpu memory",
            "cpu buffer",
            "cpu tensor",
            "pinned memory",
            "malloc",
            "主机内存",
            "锁页内存",
            "cpu内存",
            "cpu 内存",
        ],
        dir: &[],
        works: Some(Flag::HostMemWorks),
        still: Some(Flag::HostMemStillFails),
        on_fail: OnFail::Nothing,
        gpu: true,
        cjk: true,
    },
    // TCP instead of RDMA: the network works, the registration does not
    Contrast {
        topic: &["ib_disable=1", "tcp", "socket", "btl ^openib", "btl ^uct"],
        dir: &[],
        works: Some(Flag::TcpWorks),
        still: None,
        on_fail: OnFail::Nothing,
        gpu: false,
        cjk: true,
    },
    // a version changed: kernel, driver, firmware, OFED, rdma-core, the library
    Contrast {
        topic: &[
            "upgrad",
            "downgrad",
            "roll back",
            "rolled back",
            "rolling back",
            "rollback",
            "revert",
            "older version",
            "newer version",
            "previous version",
            "older driver",
            "newer driver",
            "older kernel",
            "newer kernel",
            "older release",
            "newer release",
            "升级",
            "降级",
            "回滚",
            "回退",
            "换回",
            "旧版本",
            "新版本",
        ],
        dir: &[],
        works: Some(Flag::VersionChangeWorks),
        still: Some(Flag::VersionChangeStillFails),
        on_fail: OnFail::Confirms,
        gpu: false,
        cjk: true,
    },
    // the NIC's or a cache's registration resources (mlx4 log_num_mtt, UCX_RCACHE_*, FI_MR_CACHE_*)
    Contrast {
        topic: &["log_num_mtt", "log_mtts_per_seg", "num_mtt", "rcache", "mr_cache", "mr cache", "registration cache"],
        dir: &[],
        works: Some(Flag::ResourceTuneWorks),
        still: Some(Flag::ResourceTuneStillFails),
        on_fail: OnFail::Nothing,
        gpu: false,
        cjk: true,
    },
];

/// "Works on one node, fails on the other": the same program, another node.
const NODES: &[&str] = &[
    "one node",
    "other node",
    "another node",
    "some nodes",
    "other nodes",
    "one machine",
    "other machine",
    "another machine",
    "one host",
    "other host",
    "another host",
    "one server",
    "other server",
];

/// The words a contrast needs one of on its line: the rows' topics and the node words (a size
/// threshold and two versions side by side need none: [`gate`]). The one list of the line's pass
/// ([`topic_words`]) and of the format parsers' prefilter ([`needles`]).
fn topics() -> impl Iterator<Item = &'static str> {
    CONTRASTS.iter().flat_map(|r| r.topic.iter().copied()).chain(NODES.iter().copied())
}

/// Words the format parsers' prefilter (parse/mod.rs NEEDLES, case-sensitive) must let through for
/// this reader: every topic and node word as written, capitalised and in capitals.
pub fn needles() -> impl Iterator<Item = String> {
    // two versions side by side ([`version_contrast`]) name no topic
    const VERSIONS: [&str; 3] = ["kernel", "works", "worked"];
    topics().chain(VERSIONS).flat_map(|w| {
        let mut c = w.chars();
        let cap = c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default();
        [w.to_string(), cap, w.to_uppercase()]
    })
}

/// A line worth reading: a topic (or node word) and an outcome, in any casing.
fn gate(line: &str) -> bool {
    use aho_corasick::AhoCorasick;
    use std::sync::LazyLock;
    fn build(ws: Vec<&str>) -> AhoCorasick {
        AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .ascii_case_insensitive(true)
            .build(ws)
            .expect("static patterns")
    }
    static OUTCOMES: LazyLock<AhoCorasick> = LazyLock::new(|| {
        build(NOT_HELPED.iter().chain(GONE).chain(WORKS).chain(WORKS_CJK).chain(FAILS).copied().collect())
    });
    // the topics are looked for in the line's one pass (crate::scan), the outcomes only then
    let mut topic = false;
    crate::scan::each(line, crate::scan::Set::Tried, |_, _| topic = true);
    if topic {
        return OUTCOMES.is_match(line);
    }
    // a size threshold ("above 4 GB it fails") needs a size told, a number and its unit
    if OUTCOMES.is_match(line) && sizes_told(line).next().is_some() {
        return true;
    }
    // two versions side by side: [`version_contrast`] needs a word that it worked (most failure
    // lines have a fail word and dotted numbers, none of these)
    static WORKED: LazyLock<AhoCorasick> =
        LazyLock::new(|| build(WORKS.iter().chain(&["ok", "good"]).copied().collect()));
    line.contains('.') && WORKED.is_match(line) && versions(line) >= 2
}

/// The words [`gate`] needs one of before the outcomes ([`crate::scan::Set::Tried`]): [`topics`].
pub fn topic_words() -> Vec<String> {
    topics().map(String::from).collect()
}

/// How many distinct version numbers a text names (`5.4`, `5.10.0-rc1`, `v2.19.3`, `535.104.05`): two
/// numbers or more joined by dots, not a size (`1.5 GB`), an address or a time. A version alone, a
/// return code (`rc=-22`) or an errno is none.
fn versions(t: &str) -> usize {
    let b = t.as_bytes();
    let mut seen: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit()
            || (i > 0 && (b[i - 1].is_ascii_alphanumeric() && b[i - 1] != b'v' || b[i - 1] == b'.'))
        {
            i += 1;
            continue;
        }
        let end = t[i..].find(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(t.len(), |j| i + j);
        let v = t[i..end].trim_end_matches('.');
        let parts = v.split('.').count();
        let after: String = t[end..].trim_start().chars().take(4).collect::<String>().to_ascii_lowercase();
        let unit = UNITS.iter().chain(&["kb", "kib", "%", "ms", "s ", "sec", "x "]).any(|u| after.starts_with(u));
        let addr = parts == 4 || t[end..].starts_with(':') || t[end..].starts_with('/');
        if (2..=4).contains(&parts) && !unit && !addr && !seen.contains(&v) {
            seen.push(v);
        }
        i = end.max(i + 1);
    }
    seen.len()
}

/// Two versions side by side, one working and one failing ("5.4 ok, 5.10 fails", "works on 5.15,
/// fails on 6.1", "NCCL 2.18.3 works but 2.19.3 hangs"): the version decides it, with or without an
/// upgrade told.
fn version_contrast(t: &str) -> bool {
    let ok = WORKS.iter().any(|w| has_start(t, w)) || has_word(t, "ok") || has_word(t, "good");
    let fails = FAILS.iter().any(|w| has_start(t, w)) || t.contains("not ok");
    ok && fails && versions(t) >= 2
}

/// Size units of a threshold ("above 4 GB"), with their factors (binary: a threshold is compared
/// with a limit within a factor, not to the byte).
const UNITS: [&str; 8] = ["gb", "gib", "mb", "mib", "tb", "tib", "kb", "kib"];
const UNIT_BYTES: [u64; 8] = [1 << 30, 1 << 30, 1 << 20, 1 << 20, 1 << 40, 1 << 40, 1 << 10, 1 << 10];

/// A clause's outcome.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Outcome {
    Works,
    Still,
    Fails,
}

/// "Didn't help", "no luck", "same error": the change did not make it work.
const NOT_HELPED: &[&str] = &[
    "doesn't work",
    "does not work",
    "didn't work",
    "did not work",
    "don't work",
    "won't work",
    "not working",
    "doesn't help",
    "does not help",
    "didn't help",
    "did not help",
    "no luck",
    "same error",
    "same failure",
    "same problem",
    "same issue",
    "same result",
    "no effect",
    "no difference",
    "to no avail",
    "nothing changed",
    "not fix",
    "n't fix",
    "not solve",
    "n't solve",
    "not resolve",
    "n't resolve",
    "依然",
    "仍然",
    "还是",
    "照样",
    "没用",
    "没有用",
    "无效",
    "不管用",
    "不起作用",
    "没有效果",
    "没效果",
    "没解决",
    "没有解决",
    "未解决",
    "不能解决",
    "无法解决",
    "不可以",
    "不行",
    "不能正常",
    "无法正常",
    "不正常",
];

/// A failure that is gone: "no longer fails", "doesn't fail anymore".
const GONE: &[&str] = &["no longer", "not fail", "n't fail", "never fail", "went away", "goes away", "anymore"];

/// It worked.
const WORKS: &[&str] = &[
    "works",
    "worked",
    "work fine",
    "work now",
    "it work",
    "to work",
    "succeeds",
    "succeeded",
    "successful",
    "successfully",
    "fixed",
    "fixes",
    "solved",
    "solves",
    "resolved",
    "resolves",
    "helped",
    "helps",
    "disappeared",
    "is gone",
    "fine",
    "#wrong 0",
];
const WORKS_CJK: &[&str] =
    &["跑通", "通过", "正常", "成功", "解决", "好了", "可以了", "可以", "没问题", "恢复", "消失"];

const FAILS: &[&str] =
    &["fail", "error", "crash", "hang", "einval", "efault", "enomem", "eperm", "eacces", "broken", "失败", "报错"];

fn outcome(cl: &str) -> Option<Outcome> {
    let any = |ws: &[&str]| ws.iter().any(|w| has_start(cl, w));
    let works = any(WORKS) || WORKS_CJK.iter().any(|w| cl.contains(w));
    if NOT_HELPED.iter().any(|w| cl.contains(w)) {
        return Some(Outcome::Still);
    }
    if any(GONE) {
        return Some(Outcome::Works);
    }
    let again = ["still", "even", "too", "also", "as well"].iter().any(|w| has_word(cl, w));
    if again && !works && any(FAILS) {
        return Some(Outcome::Still);
    }
    if works {
        return Some(Outcome::Works);
    }
    any(FAILS).then_some(Outcome::Fails)
}

/// Advice, not experience: "Try ...", "you should ...", "make sure ...", "it should work".
fn advice(t: &str) -> bool {
    let first = t.split([' ', ':', ',', '`']).next().unwrap_or("");
    const IMPERATIVE: &[&str] = &[
        "try",
        "please",
        "set",
        "use",
        "add",
        "load",
        "make",
        "ensure",
        "consider",
        "check",
        "export",
        "increase",
        "raise",
        "disable",
        "enable",
        "install",
        "upgrade",
        "downgrade",
        "modprobe",
        "to",
        "you",
        "maybe",
        "perhaps",
    ];
    const PHRASES: &[&str] = &[
        "you should",
        "you can",
        "you could",
        "you need",
        "you may",
        "you might",
        "you have to",
        "you must",
        "if you",
        "make sure",
        "should work",
        "should fix",
        "should help",
        "would work",
        "would fix",
        "would help",
        "might work",
        "might fix",
        "might help",
        "may work",
        "may fix",
        "may help",
        "could work",
        "could fix",
        "could help",
        "will work",
        "will fix",
        "will help",
        "recommend",
        "suggest",
        "如果",
        "假如",
        "要是",
        "建议",
        "可以尝试",
        "试试",
        "尝试一下",
        "需要",
        "应该",
        "请",
        "是否",
        "能否",
        "可否",
        "吗",
        "文档",
    ];
    IMPERATIVE.contains(&first) || PHRASES.iter().any(|p| t.contains(p))
}

/// The reporter's own run: I, we, it, my, our, the job ... (or a sentence in a CJK script).
fn experience(t: &str) -> bool {
    const WHO: &[&str] = &[
        "i",
        "i'm",
        "i've",
        "we",
        "we're",
        "we've",
        "it",
        "it's",
        "my",
        "our",
        "me",
        "us",
        "everything",
        "this",
        "that",
        "job",
        "jobs",
        "test",
        "tests",
        "training",
        "program",
        "container",
        "pod",
        "application",
        "app",
        "benchmark",
        "registration",
        "registrations",
    ];
    // a sentence that starts with its verb ("Works in docker ..."), names the call, or tells
    // what happened in the past tense
    let first = t.split([' ', ',']).next().unwrap_or("");
    let told = ["works", "worked", "fails", "failed", "still", "even", "same"].contains(&first)
        || ["reg_mr", "regist", "didn't", "did not", "worked", "fixed", "solved", "resolved", "helped", "succeeded"]
            .iter()
            .any(|w| t.contains(w));
    told || WHO.iter().any(|w| has_word(t, w)) || t.chars().any(|c| c >= '\u{2e80}')
}

/// Splits a sentence into clauses: "it works as root, but fails as a normal user".
fn clauses(t: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut from = 0;
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let cut = if matches!(b[i], b',' | b';' | b'(' | b')') {
            Some(1)
        } else {
            [" but ", " and ", " while ", " whereas ", " however ", " then ", " so "]
                .iter()
                .find(|w| t[i..].starts_with(**w))
                .map(|w| w.len() - 1)
        };
        match cut {
            Some(n) => {
                out.push(&t[from..i]);
                i += n;
                from = i;
            }
            None => i += t[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push(&t[from..]);
    // CJK clauses: ，、
    out.into_iter().flat_map(|c| c.split(['，', '、'])).filter(|c| !c.trim().is_empty()).collect()
}

/// How a sentence names a contrast row in a clause: turned the row's way, or only named.
fn names(row: &Contrast, cl: &str) -> (bool, bool) {
    let topic = row.topic.iter().any(|w| has_start(cl, w));
    (topic && (row.dir.is_empty() || row.dir.iter().any(|d| cl.contains(d))), topic)
}

/// The contrasts one sentence reports, as flags (and whether the sentence is about GPU memory).
fn sentence(s: &str) -> Vec<Flag> {
    let mut out = Vec::new();
    if not_told(s) || !s.contains(|c: char| c.is_alphabetic()) {
        return out;
    }
    let t = s.trim().to_lowercase();
    let t = t.trim_start_matches(['-', '*', '+', '>', ' ']);
    if advice(t) {
        return out;
    }
    if version_contrast(t) {
        out.push(Flag::VersionChangeWorks);
    }
    if !experience(t) {
        return out;
    }
    let cjk = t.chars().any(|c| c >= '\u{2e80}');
    let slow = t.contains("slow") || t.contains('慢') || t.contains("代价");
    let mut carry: Vec<usize> = Vec::new();
    for cl in clauses(t) {
        let mut named = Vec::new();
        let mut blocked = false;
        for (i, row) in CONTRASTS.iter().enumerate().filter(|(_, r)| r.cjk || !cjk) {
            match names(row, cl) {
                (true, _) => named.push(i),
                (false, true) => blocked = true,
                _ => {}
            }
        }
        // two rows of one topic (dmabuf off, dmabuf on): the first that names it
        // (compared by value: two equal literals need not share an address)
        let mut topics: Vec<&[&str]> = Vec::new();
        named.retain(|&i| {
            let t = CONTRASTS[i].topic;
            let first = !topics.contains(&t);
            topics.push(t);
            first
        });
        // the TCP row: slower, but TCP works — "slow" is no contrast of the registration
        if slow {
            named.retain(|&i| CONTRASTS[i].works != Some(Flag::TcpWorks));
        }
        let rows = if !named.is_empty() {
            named.clone()
        } else if blocked {
            Vec::new()
        } else {
            carry.clone()
        };
        let Some(o) = outcome(cl) else {
            if !named.is_empty() {
                carry = named;
            }
            continue;
        };
        for i in rows {
            let row = &CONTRASTS[i];
            let f = match (o, row.on_fail) {
                (Outcome::Works, _) | (Outcome::Fails, OnFail::Confirms) => row.works,
                (Outcome::Still, _) | (Outcome::Fails, OnFail::Still) => row.still,
                (Outcome::Fails, OnFail::Nothing) => None,
            };
            if let Some(f) = f {
                if !out.contains(&f) {
                    out.push(f);
                }
                if row.gpu && !out.contains(&Flag::GpuContext) {
                    out.push(Flag::GpuContext);
                }
            }
        }
        carry.clear();
    }
    // two runs side by side: "small buffers register, above 4 GB it fails"; "works on one node,
    // fails on the other" (the same program: not its buffers)
    let ok = WORKS.iter().any(|w| has_start(t, w)) || has_start(t, "register fine") || has_start(t, "registers");
    let fails = FAILS.iter().any(|w| has_start(t, w)) || NOT_HELPED.iter().any(|w| t.contains(w));
    if ok && fails && !cjk {
        if threshold(t) {
            out.push(Flag::SizeThreshold);
        }
        if NODES.iter().any(|w| t.contains(w)) {
            out.push(Flag::OtherNodeWorks);
        }
    }
    out
}

/// Two sizes, or a size and "small(er)/large(r)": a threshold the registrations cross.
fn threshold(t: &str) -> bool {
    let n = sizes_told(t).count();
    let words = ["small", "large", "big", "above", "below", "beyond", "larger than", "more than", "less than"];
    n >= 2 || (n >= 1 && words.iter().any(|w| has_start(t, w)))
}

/// The sizes a text tells, a number and a unit of [`UNITS`] in any casing ("4 MB", "1.5GiB"), in
/// bytes; `None` for a number that does not parse ("1.2.3 GB").
fn sizes_told(t: &str) -> impl Iterator<Item = Option<u64>> + '_ {
    let b = t.as_bytes();
    t.match_indices(|c: char| c.is_ascii_digit()).filter_map(move |(i, _)| {
        if b.get(i + 1).is_some_and(|c| c.is_ascii_digit() || *c == b'.') {
            return None;
        }
        let unit = t[i + 1..].trim_start().as_bytes();
        let k = UNITS.iter().position(|u| unit.get(..u.len()).is_some_and(|p| p.eq_ignore_ascii_case(u.as_bytes())))?;
        let start = t[..=i].rfind(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(0, |j| j + 1);
        Some(t[start..=i].parse::<f64>().ok().map(|n| (n * UNIT_BYTES[k] as f64) as u64))
    })
}

/// The sizes a sentence states, in bytes ("works with 4 MB, fails with 16 MB": 4 MiB and 16 MiB).
pub fn stated_sizes(t: &str) -> Vec<u64> {
    sizes_told(t).flatten().collect()
}

/// Whether a size threshold the reporter states is near a locked-memory limit: registrations pin
/// against RLIMIT_MEMLOCK cumulatively, so the first size that fails lies at or below the limit
/// (less what is already pinned) — within a factor of 16 below it or 2 above it.
pub fn near_limit(sizes: &[u64], limit: u64) -> bool {
    sizes.iter().any(|&s| s >= limit / 16 && s <= limit.saturating_mul(2))
}

/// Whether a flag tells a change that made the job work (a row's `works`): the settings its
/// sentence names are the changed run's, not the failing one's ("after `ulimit -l unlimited` it
/// runs": no limit the failures had). TCP's too: `NCCL_IB_DISABLE=1`, `btl ^openib`, `UCX_TLS=tcp`
/// are the run that worked.
fn made_it_work(f: Flag) -> bool {
    CONTRASTS.iter().any(|r| r.works == Some(f))
}

/// The sentences of a line (parts of it), with CJK full stops as cuts too.
fn sentences(line: &str) -> impl Iterator<Item = &str> + '_ {
    marked_sentences(line).flat_map(|s| s.split_inclusive(['。', '；', '！', '？']))
}

/// What [`parse`] read on a line: where it tells a change that made the job work ([`made_it_work`]).
#[derive(Default, Debug)]
pub struct Worked(Vec<Range<usize>>);

impl Worked {
    /// A change made the job work: the line's settings are the changed run's, not facts of the
    /// failing one (the caller does not read them as such).
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether `part` (a part of the line [`parse`] read) is in a sentence that tells a change that
    /// made the job work.
    pub fn covers(&self, line: &str, part: &str) -> bool {
        let at = (part.as_ptr() as usize).wrapping_sub(line.as_ptr() as usize);
        self.0.iter().any(|r| at < r.end && at + part.len() > r.start)
    }
}

/// Reads the contrasts of a line, and where one made the job work.
pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> Worked {
    let mut worked = Worked::default();
    if !gate(line) {
        return worked;
    }
    for s in sentences(line) {
        let at = s.as_ptr() as usize - line.as_ptr() as usize;
        for f in sentence(&s.replace('？', "?")) {
            if made_it_work(f) && worked.0.last() != Some(&(at..at + s.len())) {
                worked.0.push(at..at + s.len());
            }
            emit(Event::Fact { lib: Lib::Text, host: ctx.host.clone(), pid: None, fact: Fact::Flag(f) });
        }
    }
    worked
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The topics looked for in the line's one pass are found where an automaton of their own
    /// finds them, on every line of the fixtures.
    #[test]
    fn the_topics_from_the_lines_pass_are_the_topics() {
        let own = aho_corasick::AhoCorasick::builder().ascii_case_insensitive(true).build(topic_words()).unwrap();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
        let mut dirs = vec![std::path::PathBuf::from(root)];
        let mut found = 0;
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&p) else { continue };
                for line in text.lines().chain(["RELAXED ORDERING", "with Sudo it works", "above 4 GB"]) {
                    crate::scan::prime(line);
                    let mut topic = false;
                    crate::scan::each(line, crate::scan::Set::Tried, |_, _| topic = true);
                    assert_eq!(topic, own.is_match(line), "{line}");
                    found += usize::from(topic);
                }
            }
        }
        assert!(found > 100, "{found}");
    }

    /// A size threshold needs a size told (a number, then its unit): a unit's letters inside a
    /// word ("number", "symbol") are no topic that lets a failure line through.
    #[test]
    fn a_size_is_a_number_and_its_unit() {
        for l in ["Above 4 GB it fails.", "It works with 1GiB, fails with 8 gib"] {
            crate::scan::prime(l);
            assert!(gate(l), "{l}");
        }
        for l in ["symbol lookup failed", "the number of MRs works out, the next call fails", "ib_umem_get failed"] {
            crate::scan::prime(l);
            assert!(!gate(l), "{l}");
        }
    }

    fn flags(s: &str) -> Vec<Flag> {
        let mut out = Vec::new();
        parse(s, &mut FileCtx::default(), &mut |e| {
            if let Event::Fact { fact: Fact::Flag(f), .. } = e {
                if f != Flag::GpuContext {
                    out.push(f)
                }
            }
        });
        out
    }

    /// Each row: sentences that confirm, sentences the failure survived, and the questions, advice
    /// and documentation that say the same words without anyone's experience.
    fn row(works: &[&str], still: &[&str], none: &[&str], want: Flag, want_still: Option<Flag>) {
        for s in works {
            assert_eq!(flags(s), [want], "{s}");
        }
        for s in still {
            assert_eq!(flags(s), want_still.into_iter().collect::<Vec<_>>(), "{s}");
        }
        for s in none {
            assert!(!flags(s).contains(&want), "{s}: {:?}", flags(s));
            assert!(want_still.is_none_or(|f| !flags(s).contains(&f)), "{s}: {:?}", flags(s));
        }
    }

    #[test]
    fn memlock_raised() {
        row(
            &[
                "After `ulimit -l unlimited` it runs fine.",
                "It works when I set memlock to unlimited in /etc/security/limits.conf.",
                "With LimitMEMLOCK=infinity in the unit file everything works.",
                "Works in docker with --ulimit memlock=-1 but not in k8s.",
                "I raised ulimit -l to unlimited and it worked.",
            ],
            &[
                "I set ulimit -l unlimited, but it still fails.",
                "Even with memlock unlimited the registration fails with ENOMEM.",
                "Raising the memlock limit didn't help.",
            ],
            &[
                "Try `ulimit -l unlimited`.",
                // the limit named as the failure's cause is no change it survived
                "The benchmark hangs when run over the openib BTL if there is insufficient lockable memory.",
                "ibv_reg_mr fails with ENOMEM because the memlock limit is 64 KiB.",
                "You should raise the memlock limit, then it will work.",
                "Does it work with ulimit -l unlimited?",
                "Setting memlock to unlimited should fix it.",
            ],
            Flag::MemlockRaiseWorks,
            Some(Flag::MemlockRaiseStillFails),
        );
    }

    #[test]
    fn privileged() {
        row(
            &[
                "It works when I run as root.",
                "It works as root, but fails as a normal user.",
                "With --privileged the container works.",
                "After adding CAP_IPC_LOCK to the pod it works.",
            ],
            &["Even as root it fails with EINVAL.", "Running with sudo didn't help."],
            &[
                "Did you try running as root?",
                "Running as root, ibv_reg_mr fails with ENOMEM.",
                "You need CAP_IPC_LOCK for this to work.",
                "root@node1:~# ulimit -l",
            ],
            Flag::PrivilegedWorks,
            Some(Flag::PrivilegedStillFails),
        );
    }

    #[test]
    fn relaxed_ordering_off() {
        row(
            &[
                "Setting NCCL_IB_PCI_RELAXED_ORDERING=0 makes it work.",
                "With UCX_IB_PCI_RELAXED_ORDERING=off the test passes fine.",
                "We disabled relaxed ordering and the job succeeded.",
            ],
            &[
                "With NCCL_IB_PCI_RELAXED_ORDERING=0 it still fails.",
                "I set MCCL_IB_PCI_RELAXED_ORDERING=0, but ibv_reg_mr fails the same way.",
                "设置 NCCL_IB_PCI_RELAXED_ORDERING=0 后依然失败。",
            ],
            &[
                "Does NCCL_IB_PCI_RELAXED_ORDERING=0 work for you?",
                "Try UCX_IB_PCI_RELAXED_ORDERING=off.",
                "NCCL_IB_PCI_RELAXED_ORDERING=1 works.",
            ],
            Flag::RoOffWorks,
            Some(Flag::RoOffStillFails),
        );
    }

    #[test]
    fn gdr_off() {
        row(
            &[
                "With NCCL_NET_GDR_LEVEL=LOC it works.",
                "We set UCX_IB_GPU_DIRECT_RDMA=no and the job runs fine.",
                "关闭 GDR 后可以跑通。",
                "FI_EFA_USE_DEVICE_RDMA=0 fixed it for me.",
            ],
            &["With GDR disabled it still fails.", "Turning GPUDirect off didn't help."],
            &["Set NCCL_NET_GDR_LEVEL=LOC to disable GPUDirect RDMA.", "Would it work with GDR off?"],
            Flag::GdrOffWorks,
            Some(Flag::GdrOffStillFails),
        );
    }

    #[test]
    fn peer_memory_loaded() {
        row(
            &[
                "Loading nvidia_peermem fixed it.",
                "After modprobe nvidia-peermem it works.",
                "I installed nv_peer_mem and now it works fine.",
            ],
            &["nvidia_peermem is loaded, but it still fails.", "Loading nv_peer_mem did not help."],
            &["You need nvidia_peermem for GPUDirect RDMA to work.", "Is nvidia_peermem loaded?"],
            Flag::PeermemLoadWorks,
            Some(Flag::PeermemStillFails),
        );
    }

    #[test]
    fn dmabuf() {
        row(
            &["With NCCL_DMABUF_ENABLE=0 it works.", "We disabled dmabuf and it worked."],
            &["With NCCL_DMABUF_ENABLE=0 it still fails."],
            &["Try NCCL_DMABUF_ENABLE=0."],
            Flag::DmabufOffWorks,
            Some(Flag::DmabufOffStillFails),
        );
        row(
            &["With NCCL_DMABUF_ENABLE=1 it works.", "Registering through dma-buf works for me."],
            &[],
            &["Should it work with NCCL_DMABUF_ENABLE=1?"],
            Flag::DmabufWorks,
            None,
        );
    }

    #[test]
    fn host_memory() {
        row(
            &[
                "It works with cudaMallocHost but not with cudaMalloc.",
                "Registering host memory works, GPU memory fails with EFAULT.",
            ],
            &["It fails with host memory too, even with cudaMallocHost."],
            &["Use cudaMallocHost to make it work."],
            Flag::HostMemWorks,
            Some(Flag::HostMemStillFails),
        );
    }

    #[test]
    fn tcp() {
        row(
            &["With NCCL_IB_DISABLE=1 it works.", "It works over TCP."],
            &[],
            &["It works over TCP but it is very slow.", "Try NCCL_IB_DISABLE=1."],
            Flag::TcpWorks,
            None,
        );
    }

    /// Two versions side by side, one working and one failing, decide it without an upgrade told;
    /// one version, two sizes, a return code or advice do not.
    #[test]
    fn versions_side_by_side() {
        for s in
            ["5.4 ok, 5.10 fails", "Works on 5.15, fails on 6.1.", "NCCL 2.18.3 works but 2.19.3 fails with EINVAL."]
        {
            assert!(flags(s).contains(&Flag::VersionChangeWorks), "{s}: {:?}", flags(s));
        }
        for s in [
            "It fails on 5.10.",
            "ibv_reg_mr fails with rc=-22 on 5.10.0",
            "1.5 GB works, 2.5 GB fails.",
            "Try 5.4, it works there but 5.10 fails.",
            "It works on 10.0.0.1 and fails on 10.0.0.2.",
        ] {
            assert!(!flags(s).contains(&Flag::VersionChangeWorks), "{s}: {:?}", flags(s));
        }
    }

    #[test]
    fn version_changed() {
        row(
            &[
                "It worked with driver 535 and fails after upgrading to 550.",
                "Downgrading to OFED 5.8 fixes it.",
                "After upgrading the kernel to 6.8 ibv_reg_mr fails with EINVAL.",
                "We rolled back rdma-core to v44 and it works again.",
            ],
            &["I upgraded to the latest NCCL, but it still fails.", "Downgrading the firmware did not help."],
            &["Upgrade to NCCL 2.19.", "You should upgrade your driver.", "Would downgrading the kernel help?"],
            Flag::VersionChangeWorks,
            Some(Flag::VersionChangeStillFails),
        );
    }

    #[test]
    fn resource_knobs() {
        row(
            &["Raising log_num_mtt to 24 fixed it.", "With UCX_RCACHE_MAX_REGIONS=1000 it works."],
            &["Increasing FI_MR_CACHE_MAX_COUNT didn't help."],
            &["Increase log_num_mtt if you register more than 32 GB."],
            Flag::ResourceTuneWorks,
            Some(Flag::ResourceTuneStillFails),
        );
    }

    #[test]
    fn sizes_and_nodes() {
        row(
            &["Small buffers register fine, but above 4 GB it fails.", "It works with 1 GB and fails with 8 GB."],
            &[],
            &["Can I register more than 4 GB?", "It fails with 8 GB."],
            Flag::SizeThreshold,
            None,
        );
        row(
            &["It works on one node but fails on the other.", "The job works on node A and fails on another node."],
            &[],
            &["Does it fail on the other node too?"],
            Flag::OtherNodeWorks,
            None,
        );
    }

    /// Chinese sentences of the other rows, in general usage: the change, 后/之后 ("after"), and
    /// the outcome (正常, 解决, 可以, 好了; 还是, 依然, 没用, 不行, 没有解决 for a failure that
    /// stayed); advice (需要, 请, 建议) and questions (吗, 是否) confirm nothing.
    #[test]
    fn chinese_contrasts() {
        row(
            &["调大 ulimit -l 后正常了。", "把 memlock 设置为 unlimited 之后就可以了。"],
            &["调大 ulimit -l 后还是失败。", "设置了 ulimit -l unlimited，没用。"],
            &["需要调大 ulimit -l。", "ulimit -l 是 64，注册失败。", "调大 ulimit -l 能解决吗？"],
            Flag::MemlockRaiseWorks,
            Some(Flag::MemlockRaiseStillFails),
        );
        row(
            &["用 root 用户运行就正常。", "开启特权模式后可以了。"],
            &["用 root 权限运行还是失败。"],
            &["需要 root 权限。"],
            Flag::PrivilegedWorks,
            Some(Flag::PrivilegedStillFails),
        );
        row(
            &["加载 nvidia_peermem 后解决。", "装了 nv_peer_mem 之后好了。"],
            &["加载 nvidia_peermem 后依然报错。"],
            &["请加载 nvidia_peermem。"],
            Flag::PeermemLoadWorks,
            Some(Flag::PeermemStillFails),
        );
        row(
            &["升级驱动后解决。", "回退到旧版本就正常了。"],
            &["升级驱动后问题没有解决。"],
            &["建议升级驱动。", "是否需要升级驱动？"],
            Flag::VersionChangeWorks,
            Some(Flag::VersionChangeStillFails),
        );
        row(&["换成 TCP 可以。"], &[], &["换成 TCP 也不行。", "TCP 可以吗？"], Flag::TcpWorks, None);
        row(&["关闭 GDR 后正常。"], &["关闭 GDR 后还是不行。"], &[], Flag::GdrOffWorks, Some(Flag::GdrOffStillFails));
        row(&["关闭 dmabuf 后正常。"], &[], &[], Flag::DmabufOffWorks, Some(Flag::DmabufOffStillFails));
    }

    /// The sizes a threshold sentence states, and whether one is near a locked-memory limit.
    #[test]
    fn stated_sizes_near_a_limit() {
        assert_eq!(stated_sizes("Registering 4 MB works, but 16 MB fails."), [4 << 20, 16 << 20]);
        assert_eq!(stated_sizes("works with 1.5 GB"), [3 << 29]);
        assert_eq!(stated_sizes("below 64 KiB"), [64 << 10]);
        assert!(near_limit(&[4 << 20, 16 << 20], 8 << 20));
        assert!(!near_limit(&[1 << 30, 8 << 30], 64 << 10));
        assert!(!near_limit(&[], 8 << 20));
    }

    /// A change that made the job work, TCP's too, is where the line's settings are the changed
    /// run's: the sentence that tells it, not the others on the line.
    #[test]
    fn a_change_that_worked_is_not_the_failing_run() {
        let worked = |l: &str| parse(l, &mut FileCtx::default(), &mut |_| {});
        for l in ["After `ulimit -l unlimited` it runs fine.", "With NCCL_IB_DISABLE=1 it works.", "It works over TCP."]
        {
            assert!(worked(l).any(), "{l}");
            assert!(worked(l).covers(l, &l[6..12]), "{l}");
        }
        for l in ["ulimit -l is unlimited and it still fails.", "$ ulimit -l", "It works over TCP but it is very slow."]
        {
            assert!(!worked(l).any(), "{l}");
        }
        let l = "ulimit -l is 64 here. After raising ulimit -l to unlimited it works.";
        let w = worked(l);
        assert!(!w.covers(l, &l[..10]) && w.covers(l, &l[30..40]), "{w:?}");
    }
}
