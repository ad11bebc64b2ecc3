//! Verify against what nobody here chose: the evidence `mrshim analyze` already reads right, re-emitted
//! through the wrappers real deployments and pastes add — launcher prefixes (srun -l, mpirun
//! --tag-output and --timestamp-output, pdsh, torchrun, Ray), collectors (journald/syslog, dmesg -T,
//! Kubernetes CRI files, docker's json-file driver), terminals (ANSI colour, CRLF, tqdm `\r`),
//! Python (logging, a traceback around the error), CI and orchestration (docker compose, `kubectl
//! logs --prefix`, GitHub Actions, Jenkins, journald short-iso), the way reports travel (GitHub
//! quoting and code fences, HTML escaping, a mailing-list archive's page, 80-column email wrapping
//! and a reply re-flowed at 60-72 columns with its quote on every piece, a chat's glued fence) and
//! what a copy and paste leaves (a line-number gutter, collapsed spaces, no-break spaces, curly
//! quotes, Windows-1252, bullets, inline code, trailing blanks, a UTF-8 BOM, gzip) and two ranks
//! interleaved — one at a time and in random combinations. The first finding and the number of failures (one failure
//! counts once) must be the same as on the unwrapped input; a wrapper that names a host or a rank must
//! be where the finding's host/rank comes from when the evidence names none.
//!
//! Evidence: every failure sample of the message vocabulary (crates/analyze/data/messages.json), the
//! category fixtures (tests/fixtures/logs) and the training half of the real reports — never the
//! held-out ones. Seeds are reproducible: `MRSHIM_WRAP_SEED=N` reruns with another seed (a failure
//! prints the seed and the case to rerun it). The bulk runs through the library on real files; a
//! sample runs through the `mrshim analyze` process (run `cargo build -p mrshim-cli` first).
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// splitmix64: small, fast and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Evidence {
    name: String,
    lines: Vec<String>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The evidence analyze is known to read: vocabulary samples, category fixtures, training reports.
/// `## ` lines are the fixtures' own headers, not part of what a user pastes.
fn evidence() -> Vec<Evidence> {
    let mut out = Vec::new();
    let vocab: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("crates/analyze/data/messages.json")).unwrap())
            .unwrap();
    for e in vocab["messages"].as_array().unwrap() {
        if e["role"] != "failure" {
            continue;
        }
        let id = e["id"].as_str().unwrap();
        let also = e["also"].as_array().map(|a| a.iter().filter_map(|s| s.as_str()).collect()).unwrap_or(vec![]);
        for (i, s) in std::iter::once(e["sample"].as_str().unwrap()).chain(also).enumerate() {
            out.push(Evidence { name: format!("vocab:{id}#{i}"), lines: s.lines().map(String::from).collect() });
        }
    }
    let mut files = Vec::new();
    for d in std::fs::read_dir(root().join("tests/fixtures/logs")).unwrap() {
        for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|x| x == "log") {
                files.push(p);
            }
        }
    }
    let split = std::fs::read_to_string(root().join("tests/fixtures/real-split.txt")).unwrap();
    for l in split.lines().filter(|l| !l.starts_with('#')) {
        if let Some((name, "train")) = l.split_once(' ') {
            files.push(root().join("tests/fixtures/real").join(name));
        }
    }
    files.sort();
    for p in files {
        let text = std::fs::read_to_string(&p).unwrap();
        let lines = text.lines().filter(|l| !l.starts_with("## ")).map(String::from).collect();
        let name = p.strip_prefix(root()).unwrap().display().to_string();
        out.push(Evidence { name, lines });
    }
    out
}

/// The wrappers, innermost first: a combination applies them in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum W {
    PyLog,
    Traceback,
    Ansi,
    Tqdm,
    Interleave,
    Srun,
    TagOutput,
    Torchrun,
    Ray,
    Timestamp,
    Pdsh,
    Syslog,
    DmesgT,
    Cri,
    Docker,
    Compose,
    KubePrefix,
    GhActions,
    Jenkins,
    JournalIso,
    Gutter,
    Spaces,
    Nbsp,
    SmartQuotes,
    Bullet,
    Backtick,
    TrailingWs,
    Html,
    Quote,
    Fence,
    SlackFence,
    ListFence,
    Email80,
    MailNarrow,
    ArchiveHtml,
    Cp1252,
    Crlf,
    Bom,
    Gzip,
}

const ALL: [W; 39] = [
    W::PyLog,
    W::Traceback,
    W::Ansi,
    W::Tqdm,
    W::Interleave,
    W::Srun,
    W::TagOutput,
    W::Torchrun,
    W::Ray,
    W::Timestamp,
    W::Pdsh,
    W::Syslog,
    W::DmesgT,
    W::Cri,
    W::Docker,
    W::Compose,
    W::KubePrefix,
    W::GhActions,
    W::Jenkins,
    W::JournalIso,
    W::Gutter,
    W::Spaces,
    W::Nbsp,
    W::SmartQuotes,
    W::Bullet,
    W::Backtick,
    W::TrailingWs,
    W::Html,
    W::Quote,
    W::Fence,
    W::SlackFence,
    W::ListFence,
    W::Email80,
    W::MailNarrow,
    W::ArchiveHtml,
    W::Cp1252,
    W::Crlf,
    W::Bom,
    W::Gzip,
];

/// Wrappers of which a real log has at most one: one launcher labels the ranks, one thing names the
/// host, one collector stores the lines, one thing re-breaks them, one page shows them, one
/// Markdown construct holds them.
const EXCLUSIVE: [&[W]; 7] = [
    &[W::Interleave, W::Srun, W::TagOutput, W::Torchrun, W::Timestamp],
    &[W::Pdsh, W::Syslog, W::Ray, W::JournalIso],
    &[W::Syslog, W::DmesgT, W::Cri, W::Docker, W::Compose, W::KubePrefix, W::GhActions, W::Jenkins, W::JournalIso],
    &[W::Email80, W::MailNarrow, W::Quote],
    &[W::Html, W::ArchiveHtml],
    &[W::Fence, W::SlackFence, W::ListFence, W::Backtick, W::Bullet],
    &[W::Gutter, W::Srun, W::Interleave],
];

/// Two to five wrappers, at most one of each exclusive group, innermost first.
fn combination(rng: &mut Rng) -> Vec<W> {
    let k = 2 + rng.below(4) as usize;
    let mut c: Vec<W> = Vec::new();
    while c.len() < k {
        let w = *rng.pick(&ALL);
        let clash = c.contains(&w) || EXCLUSIVE.iter().any(|g| g.contains(&w) && c.iter().any(|x| g.contains(x)));
        if !clash {
            c.push(w);
        }
    }
    c.sort();
    c
}

/// What a wrapper says about where a line came from.
#[derive(Default, Debug, Clone)]
struct Origin {
    host: Option<String>,
    rank: Option<i64>,
}

const HOSTS: &[&str] = &["node017", "gpu-a12", "dgx-b200-03.cluster.local", "10.0.87.143", "cn-0042"];

fn stamp(rng: &mut Rng) -> (u32, u32, u32, u32) {
    (rng.below(24) as u32, rng.below(60) as u32, rng.below(60) as u32, rng.below(1000) as u32)
}

/// A lower-case-led failure-looking line: the one a traceback's exception message carries.
fn is_failure_line(l: &str) -> bool {
    let l = l.to_ascii_lowercase();
    ["fail", "error", "unable", "cannot", "couldn", "can't"].iter().any(|w| l.contains(w))
}

/// Applies one wrapper to the lines (bytes-level wrappers: CRLF, BOM, gzip, are applied in [`bytes`]).
fn wrap(w: W, lines: Vec<String>, rng: &mut Rng, o: &mut Origin) -> Vec<String> {
    let each = |lines: Vec<String>, f: &mut dyn FnMut(String) -> String| lines.into_iter().map(f).collect();
    match w {
        W::PyLog => {
            let logger = *rng.pick(&["nixl", "vllm.distributed", "mooncake", "root", "deepspeed"]);
            let level = *rng.pick(&["ERROR", "WARNING", "INFO"]);
            let form = rng.below(3);
            each(lines, &mut |l| {
                let (h, m, s, ms) = stamp(rng);
                match form {
                    0 => format!("2026-12-06 {h:02}:{m:02}:{s:02},{ms:03} - {logger} - {level} - {l}"),
                    1 => format!("{level}:{logger}:{l}"),
                    // vLLM's
                    _ => format!("{level} 12-06 {h:02}:{m:02}:{s:02} [core.py:{ms}] {l}"),
                }
            })
        }
        W::Traceback => {
            let Some(i) = lines.iter().rposition(|l| is_failure_line(l)) else { return lines };
            let exc = *rng.pick(&["RuntimeError", "nixl._api.nixlBackendError", "torch.distributed.DistBackendError"]);
            // the line repeated word for word just before it is another attempt (a retry loop),
            // which an exception carrying it would make a layer of one failure: the exception
            // then carries the repeat, kept, instead of standing for it
            let repeat =
                lines[..i].iter().rev().find(|l| is_failure_line(l)).is_some_and(|p| p.trim() == lines[i].trim());
            let mut out = lines[..i + usize::from(repeat)].to_vec();
            out.push("Traceback (most recent call last):".into());
            out.push("  File \"/opt/app/train.py\", line 212, in <module>".into());
            out.push("    agent.register_memory(descs)".into());
            out.push("  File \"/usr/lib/python3/dist-packages/engine/core.py\", line 88, in register_memory".into());
            out.push("    raise self._error(ret)".into());
            out.push(format!("{exc}: {}", lines[i].trim_start()));
            out.extend_from_slice(&lines[i + 1..]);
            out
        }
        W::Ansi => {
            let colour = *rng.pick(&["\x1b[31m", "\x1b[1;31m", "\x1b[33m", "\x1b[0;91m", "\x1b[38;5;196m"]);
            let whole = rng.chance(50);
            each(lines, &mut |l| {
                if whole {
                    format!("{colour}{l}\x1b[0m")
                } else {
                    // colour one word (a level name, a tag)
                    match l.split_once(' ') {
                        Some((a, b)) => format!("{colour}{a}\x1b[m {b}\x1b[K"),
                        None => format!("\x1b[1m{l}\x1b[22m"),
                    }
                }
            })
        }
        W::Tqdm => {
            let mut n = 0;
            each(lines, &mut |l| {
                n += 1;
                if n % 3 != 1 {
                    return l;
                }
                let mut bar = String::new();
                for p in [10, 45, 99] {
                    bar.push_str(&format!(
                        "Loading: {p:>3}%|{:<10}| {p}/100 [00:0{}<00:02, 31.4it/s]\r",
                        "█".repeat(p / 10),
                        p / 40
                    ));
                }
                bar + &l
            })
        }
        W::Interleave => {
            // another rank's ordinary output between the lines; both ranks labelled as srun does
            let (a, b) = (rng.below(8) as i64, 8 + rng.below(8) as i64);
            o.rank = Some(a);
            let mut out = Vec::new();
            for (i, l) in lines.into_iter().enumerate() {
                if rng.chance(60) {
                    out.push(format!("{b}: step {i} loss 2.{:03} lr 3.0e-04 tokens/s 41523", rng.below(1000)));
                }
                out.push(format!("{a}: {l}"));
            }
            out.push(format!("{b}: step done"));
            out
        }
        W::Srun => {
            let r = rng.below(16) as i64;
            let pad = rng.chance(50);
            o.rank = Some(r);
            each(lines, &mut |l| if pad { format!("{r:>2}: {l}") } else { format!("{r}: {l}") })
        }
        W::TagOutput => {
            let r = rng.below(16) as i64;
            let five = rng.chance(50);
            o.rank = Some(r);
            let s = *rng.pick(&["stderr", "stdout"]);
            each(lines, &mut |l| if five { format!("[1,{r}]<{s}>: {l}") } else { format!("[1,{r}]<{s}>:{l}") })
        }
        W::Torchrun => {
            let r = rng.below(16) as i64;
            let form = rng.below(2);
            o.rank = Some(r);
            each(lines, &mut |l| if form == 0 { format!("[rank{r}]:{l}") } else { format!("[rank{r}]: {l}") })
        }
        W::Ray => {
            let pid = 1000 + rng.below(60000);
            let ip = format!("10.0.{}.{}", rng.below(255), 1 + rng.below(254));
            let actor = *rng.pick(&["RayWorker", "RayWorkerWrapper", "PrefillWorker"]);
            o.host = Some(ip.clone());
            each(lines, &mut |l| format!("({actor} pid={pid}, ip={ip}) {l}"))
        }
        W::Timestamp => {
            // Open MPI --timestamp-output (with and without --tag-output)
            let r = rng.below(4);
            let tag = rng.chance(50);
            if tag {
                o.rank = Some(r as i64);
            }
            each(lines, &mut |l| {
                let (h, m, s, _) = stamp(rng);
                if tag {
                    format!("Sun Dec  6 {h:02}:{m:02}:{s:02} 2026[1,{r}]<stderr>:{l}")
                } else {
                    format!("Sun Dec  6 {h:02}:{m:02}:{s:02} 2026 {l}")
                }
            })
        }
        W::Pdsh => {
            let h = *rng.pick(HOSTS);
            o.host = Some(h.into());
            each(lines, &mut |l| format!("{h}: {l}"))
        }
        W::Syslog => {
            let h = *rng.pick(&["node017", "gpu-a12", "cn0042", "worker-3"]);
            o.host = Some(h.into());
            let kernel = rng.chance(30);
            let prog =
                format!("{}[{}]", rng.pick(&["python3", "mpirun", "ucx_perftest", "train"]), 1000 + rng.below(60000));
            let day = 1 + rng.below(28);
            each(lines, &mut |l| {
                let (h2, m, s, ms) = stamp(rng);
                if kernel {
                    format!("Dec {day:>2} {h2:02}:{m:02}:{s:02} {h} kernel: [{}.{ms:03}456] {l}", 12345 + m)
                } else {
                    format!("Dec {day:>2} {h2:02}:{m:02}:{s:02} {h} {prog}: {l}")
                }
            })
        }
        W::DmesgT => each(lines, &mut |l| {
            let (h, m, s, _) = stamp(rng);
            format!("[Sun Dec  6 {h:02}:{m:02}:{s:02} 2026] {l}")
        }),
        W::Cri => {
            let s = *rng.pick(&["stderr", "stdout"]);
            each(lines, &mut |l| {
                let (h, m, sec, ms) = stamp(rng);
                format!("2026-12-06T{h:02}:{m:02}:{sec:02}.{ms:03}456789Z {s} F {l}")
            })
        }
        W::Docker => {
            let s = *rng.pick(&["stderr", "stdout"]);
            each(lines, &mut |l| {
                let (h, m, sec, ms) = stamp(rng);
                let log = serde_json::to_string(&format!("{l}\n")).unwrap();
                format!("{{\"log\":{log},\"stream\":\"{s}\",\"time\":\"2026-12-06T{h:02}:{m:02}:{sec:02}.{ms:03}456789Z\"}}")
            })
        }
        W::Html => each(lines, &mut |l| {
            l.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
        }),
        W::Quote => {
            let nested = rng.chance(20);
            each(lines, &mut |l| {
                let q = if nested { "> > " } else { "> " };
                if l.is_empty() {
                    q.trim_end().into()
                } else {
                    format!("{q}{l}")
                }
            })
        }
        W::Fence => {
            let lang = *rng.pick(&["", "text", "console", "shell"]);
            let mut out = vec!["I get this when I start the job:".to_string(), String::new(), format!("```{lang}")];
            out.extend(lines);
            out.push("```".into());
            out.push("Any idea?".into());
            out
        }
        W::ListFence => {
            let indent = *rng.pick(&["  ", "   ", "    "]);
            let mut out = vec!["Steps to reproduce:".to_string(), "1. start the job".into(), format!("2. it fails:")];
            out.push(format!("{indent}```"));
            out.extend(lines.into_iter().map(|l| format!("{indent}{l}")));
            out.push(format!("{indent}```"));
            out
        }
        W::Email80 => {
            let width = *rng.pick(&[72usize, 76, 80]);
            let mut out = Vec::new();
            for l in lines {
                // break at the last space before the width, as mail and forum software does
                let mut rest = l.as_str();
                while rest.chars().count() > width {
                    let cut = rest.char_indices().nth(width).map_or(rest.len(), |(i, _)| i);
                    let Some(sp) = rest[..cut].rfind(' ').filter(|&i| i > 0) else { break };
                    out.push(rest[..sp].to_string());
                    rest = &rest[sp + 1..];
                }
                out.push(rest.to_string());
            }
            out
        }
        W::Compose => {
            // docker compose v2: the service name padded to the longest one, coloured on a terminal
            let name = *rng.pick(&["trainer-1", "vllm-prefill-1", "worker-2", "mooncake-store-1"]);
            let colour = rng.chance(30);
            each(lines, &mut |l| {
                if colour {
                    format!("\x1b[36m{name:<18}|\x1b[0m {l}")
                } else {
                    format!("{name:<18}| {l}")
                }
            })
        }
        W::KubePrefix => {
            // `kubectl logs --prefix [--timestamps]`, `stern`'s is alike
            let pod = *rng.pick(&["pod/trainer-0/main", "pod/vllm-decode-7f9c6b-x2k4q/vllm", "pod/lws-1-3/worker"]);
            let ts = rng.chance(50);
            each(lines, &mut |l| {
                let (h, m, s, ms) = stamp(rng);
                if ts {
                    format!("[{pod}] 2026-12-07T{h:02}:{m:02}:{s:02}.{ms:03}456789Z {l}")
                } else {
                    format!("[{pod}] {l}")
                }
            })
        }
        W::GhActions => {
            // a GitHub Actions job log as downloaded: 7-digit fractions, groups and annotations
            let stamp7 = |rng: &mut Rng| {
                let (h, m, s, ms) = stamp(rng);
                format!("2026-12-07T{h:02}:{m:02}:{s:02}.{ms:03}{:04}Z", rng.below(10000))
            };
            let mut out = vec![format!("{} ##[group]Run python -m pytest tests/test_rdma.py", stamp7(rng))];
            out.push(format!("{} python -m pytest tests/test_rdma.py", stamp7(rng)));
            out.push(format!("{} ##[endgroup]", stamp7(rng)));
            for l in lines {
                out.push(format!("{} {l}", stamp7(rng)));
            }
            out.push(format!("{} ##[error]Process completed with exit code 1.", stamp7(rng)));
            out
        }
        W::Jenkins => {
            // a pipeline's console: `[Pipeline]` steps around the shell's output, which the
            // timestamper plugin prefixes (ISO in brackets, or its `HH:mm:ss` form)
            let iso = rng.chance(50);
            let mut out = vec!["[Pipeline] stage".to_string(), "[Pipeline] { (Test)".into(), "[Pipeline] sh".into()];
            out.push("+ srun python train.py".into());
            for l in lines {
                let (h, m, s, ms) = stamp(rng);
                out.push(if iso {
                    format!("[2026-12-07T{h:02}:{m:02}:{s:02}.{ms:03}Z] {l}")
                } else {
                    format!("{h:02}:{m:02}:{s:02}  {l}")
                });
            }
            out.push("[Pipeline] }".into());
            out.push("[Pipeline] // stage".into());
            out.push("ERROR: script returned exit code 1".into());
            out.push("Finished: FAILURE".into());
            out
        }
        W::JournalIso => {
            // `journalctl -o short-iso`: ISO time with zone, host, program
            let h = *rng.pick(&["node017", "gpu-a12", "cn0042", "worker-3"]);
            o.host = Some(h.into());
            let kernel = rng.chance(30);
            let prog =
                format!("{}[{}]", rng.pick(&["python3", "mpirun", "ucx_perftest", "train"]), 1000 + rng.below(60000));
            each(lines, &mut |l| {
                let (h2, m, s, _) = stamp(rng);
                let who = if kernel { "kernel" } else { &prog };
                format!("2026-12-07T{h2:02}:{m:02}:{s:02}+0000 {h} {who}: {l}")
            })
        }
        W::Gutter => {
            // copied from a viewer that numbers the lines (a pastebin, an editor, `cat -n`, `nl`)
            let start = 1 + rng.below(400);
            let form = rng.below(3);
            let mut n = start;
            each(lines, &mut |l| {
                n += 1;
                match form {
                    0 => format!("{:>5} | {l}", n - 1),
                    1 => format!("{:>6}\t{l}", n - 1),
                    _ => format!("{:>4} │ {l}", n - 1),
                }
            })
        }
        W::Spaces => {
            // whitespace as a web page renders it and a paste keeps it: runs of spaces collapsed
            // to one, or leading spaces turned into tabs by an editor
            let collapse = rng.chance(50);
            each(lines, &mut |l| {
                if collapse {
                    let lead = l.len() - l.trim_start_matches(' ').len();
                    let mut out = " ".repeat(lead);
                    let mut sp = false;
                    for c in l[lead..].chars() {
                        if c == ' ' && sp {
                            continue;
                        }
                        sp = c == ' ';
                        out.push(c);
                    }
                    out
                } else {
                    let lead = l.len() - l.trim_start_matches(' ').len();
                    format!("{}{}{}", "\t".repeat(lead / 4), " ".repeat(lead % 4), &l[lead..])
                }
            })
        }
        W::Nbsp => {
            // a page that keeps runs of spaces as `&nbsp;`, copied as U+00A0 (and some single
            // spaces of the text, as rich-text editors do)
            each(lines, &mut |l| {
                let mut out = String::new();
                let mut prev_sp = true;
                for c in l.chars() {
                    if c == ' ' && (prev_sp || rng.chance(15)) {
                        out.push('\u{a0}');
                    } else {
                        out.push(c);
                    }
                    prev_sp = c == ' ';
                }
                out
            })
        }
        W::SmartQuotes => each(lines, &mut smart_quotes),
        W::Bullet => {
            let b = *rng.pick(&["- ", "* ", "• "]);
            each(lines, &mut |l| if l.is_empty() { l } else { format!("{b}{l}") })
        }
        W::Backtick => {
            // each line as inline code (chat, forum posts)
            each(lines, &mut |l| if l.trim().is_empty() { l } else { format!("`{l}`") })
        }
        W::TrailingWs => each(lines, &mut |l| {
            let t = *rng.pick(&[" ", "  ", "\t", "   "]);
            format!("{l}{t}")
        }),
        W::SlackFence => {
            // Slack and Discord: the fence glued to the first and the last line of the block
            let n = lines.len();
            let mut out = vec!["hey, anyone seen this?".to_string()];
            for (i, l) in lines.into_iter().enumerate() {
                let mut l = l;
                if i == 0 {
                    l = format!("```{l}");
                }
                if i + 1 == n {
                    l.push_str("```");
                }
                out.push(l);
            }
            out
        }
        W::MailNarrow => {
            // a reply's mailer re-flows the quote at 60-72 columns; every piece carries the quote
            let width = *rng.pick(&[60usize, 66, 72]);
            let q = match rng.below(10) {
                0..=2 => "",
                3..=7 => "> ",
                _ => "> > ",
            };
            let mut out = vec!["On 12/7/26 09:12, Jane Doe wrote:".to_string()];
            for l in lines {
                if l.is_empty() {
                    out.push(q.trim_end().into());
                    continue;
                }
                let mut rest = l.as_str();
                let room = width - q.len();
                while rest.chars().count() > room {
                    let cut = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
                    let Some(sp) = rest[..cut].rfind(' ').filter(|&i| i > 0) else { break };
                    out.push(format!("{q}{}", &rest[..sp]));
                    rest = &rest[sp + 1..];
                }
                out.push(format!("{q}{rest}"));
            }
            out
        }
        W::ArchiveHtml => {
            // a mailing-list archive's page (pipermail, MHonArc): the message in a <PRE> block,
            // escaped, addresses and URLs made links, quoted lines in italics
            let mut out = vec!["<!--beginarticle-->".to_string()];
            let n = lines.len();
            for (i, l) in lines.into_iter().enumerate() {
                let e = l.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
                let e = linkify(&e);
                let e = if l.starts_with('>') { format!("<I>{e}</I>") } else { e };
                let e = if i == 0 { format!("<PRE>{e}") } else { e };
                out.push(if i + 1 == n { format!("{e}\n</PRE>") } else { e });
            }
            out.push("<!--endarticle-->".into());
            out.join("\n").lines().map(String::from).collect()
        }
        W::Cp1252 => each(lines, &mut smart_quotes),
        W::Crlf | W::Bom | W::Gzip => lines,
    }
}

/// Typographic quotes as a word processor or a rich-text editor puts them (`’` in `Couldn’t`).
fn smart_quotes(l: String) -> String {
    let mut out = String::with_capacity(l.len());
    let mut prev = ' ';
    for c in l.chars() {
        out.push(match c {
            '\'' if prev.is_alphanumeric() => '\u{2019}',
            '\'' => '\u{2018}',
            '"' if prev.is_whitespace() || "([{=:".contains(prev) => '\u{201c}',
            '"' => '\u{201d}',
            c => c,
        });
        prev = c;
    }
    out
}

/// An archive's links around URLs and mail addresses (`<A HREF="...">...</A>`).
fn linkify(e: &str) -> String {
    e.split(' ')
        .map(|w| {
            if w.starts_with("http://") || w.starts_with("https://") {
                format!("<A HREF=\"{w}\">{w}</A>")
            } else if w.contains('@') && w.contains('.') && !w.starts_with('@') {
                format!("<A HREF=\"mailto:{w}\">{w}</A>")
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Windows-1252 for the characters it has (a paste saved by an editor in the legacy code page);
/// what it lacks stays UTF-8, as in a file pieced together from both.
fn cp1252(s: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(s.len());
    for c in s.chars() {
        let x = match c {
            '\u{2018}' => Some(0x91),
            '\u{2019}' => Some(0x92),
            '\u{201c}' => Some(0x93),
            '\u{201d}' => Some(0x94),
            '\u{2013}' => Some(0x96),
            '\u{2014}' => Some(0x97),
            '\u{a0}'..='\u{ff}' => Some(c as u32 as u8),
            _ => None,
        };
        match x {
            Some(x) => b.push(x),
            None => b.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    b
}

/// The input file: the lines joined, then the byte-level wrappers.
fn bytes(lines: &[String], ws: &[W]) -> Vec<u8> {
    let eol = if ws.contains(&W::Crlf) { "\r\n" } else { "\n" };
    let mut b = Vec::new();
    if ws.contains(&W::Bom) {
        b.extend_from_slice("\u{feff}".as_bytes());
    }
    for l in lines {
        if ws.contains(&W::Cp1252) {
            b.extend_from_slice(&cp1252(l));
        } else {
            b.extend_from_slice(l.as_bytes());
        }
        b.extend_from_slice(eol.as_bytes());
    }
    if ws.contains(&W::Gzip) {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&b).unwrap();
        b = z.finish().unwrap();
    }
    b
}

#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    first: Option<&'static str>,
    failed: u64,
    hosts: Vec<String>,
    ranks: Vec<i64>,
}

fn outcome(path: &Path) -> Outcome {
    let a = mrshim_analyze::analyze(&[path.display().to_string()]);
    let f = a.findings.first();
    Outcome {
        first: f.map(|f| f.category),
        failed: a.failed(),
        hosts: f.map(|f| f.hosts.clone()).unwrap_or_default(),
        ranks: f.map(|f| f.ranks.clone()).unwrap_or_default(),
    }
}

/// The same through the `mrshim analyze --json` process.
fn outcome_cli(path: &Path) -> (Option<String>, u64) {
    let out = std::process::Command::new(mrshim_test_support::mrshim_bin())
        .args(["analyze", "--json"])
        .arg(path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (v["findings"][0]["category"].as_str().map(String::from), v["summary"]["failed"].as_u64().unwrap_or(0))
}

/// The share of inputs each wrapper must read the same: all of them, except the known gaps
/// (measured with seed 29 on 2026-12-07): a line broken at 72-80 columns by mail or forum software
/// (136/139 since analyze joins the pieces back, parse/rejoin.rs; 131/139 before a hyphenated word,
/// libfabric's `<warn>` tag, a frame with only its tags, `key=value` lists, a `;` and a bracketed
/// errno alone counted as an unfinished line; 92/139 before the join: what is left are layers of one
/// failure whose joined lines are more than two physical lines apart, and pieces the join cannot tell
/// from lines of their own, `(prov_key ? 0 : i), ...` / `mem_reg: addr=...`), and a traceback whose
/// exception carries a line of a multi-line report (131/139: the traceback's lines stand between the
/// layers of one failure, so the exception is counted beside it). A reply re-flowed at 60-72 columns
/// (MailNarrow, 230/247 at 13:55 UTC; 166/247 before the join read unwrapped text, went by the
/// quote's depth and broke from 60 columns): at 60-66 columns many more pieces end where a line of
/// their own could, a sentence (`access flags: 7.` / `Errno: 95, ...`), a value before a `name:`
/// field (`len: 93533504` / `map_flags: 0xD ...`), a device before a frame-like line (`mlx5_core
/// 0000:01:00.0:` / `mlx5_cmd_check:794:...`), a path before a quoted string; and a logger's tag
/// before its level (`UCX` / `ERROR ibv_reg_mr(...)`), which a rule could still join. Combinations
/// include all three (1326/1482; 918/1482 before this session's fixes, with 39 wrappers). After the
/// merge with prose13 and limits13 (14:33 UTC): 235/256 (91.8 %) — nine more vocabulary samples, and
/// outside a quote a break below 72 columns is joined only inside prose (a program's two short lines,
/// mkernel-26's, stay two). Session 13 (merge of mpi14, vocab14, evid14, perf14, 17:40 UTC): 280 pieces
/// (46 more vocabulary entries), so the seeded combinations are drawn anew: Email80 276/280, MailNarrow
/// 260/280 (92.9 %), Traceback 277/280, combined 1492/1680 (88.8 %; 1369/1536, 89.1 %, on the old
/// draw) — the new entries' 144 combinations pass at 90 %, Open MPI's `[host][[job,1],rank]` frames
/// inside a launcher's prefix lose the wrapper's host or rank in most of the rest.
fn floor(wrapper: &str) -> f64 {
    match wrapper {
        "Email80" => 0.97,
        "Traceback" => 0.98,
        "MailNarrow" => 0.91,
        "(combined)" => 0.88,
        _ => 1.0,
    }
}

struct Tally {
    pass: u64,
    total: u64,
}

fn write(dir: &Path, n: usize, data: &[u8]) -> PathBuf {
    let p = dir.join(format!("case-{n}.log"));
    std::fs::write(&p, data).unwrap();
    p
}

#[test]
fn wrapped_evidence_reads_the_same() {
    let seed: u64 = std::env::var("MRSHIM_WRAP_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(29);
    let only: Option<String> = std::env::var("MRSHIM_WRAP_ONLY").ok();
    let dir = std::env::temp_dir().join(format!("mrshim-wrapped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ev = evidence();
    let mut per: BTreeMap<String, Tally> = BTreeMap::new();
    let mut fails: Vec<(String, String)> = Vec::new();
    let (mut n, mut cli_runs, mut baselines) = (0usize, 0u64, 0u64);
    for (ei, e) in ev.iter().enumerate() {
        let base_path = write(&dir, 0, &bytes(&e.lines, &[]));
        let base = outcome(&base_path);
        if base.first.is_none() || base.failed == 0 {
            continue;
        }
        baselines += 1;
        // every wrapper alone, then random combinations of two to five
        let mut plans: Vec<Vec<W>> = ALL.iter().map(|w| vec![*w]).collect();
        let mut rng = Rng(seed ^ (ei as u64).wrapping_mul(0x2545f4914f6cdd1d));
        for _ in 0..6 {
            plans.push(combination(&mut rng));
        }
        for (pi, plan) in plans.iter().enumerate() {
            let label = plan.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join("+");
            if only.as_deref().is_some_and(|o| o != label) {
                continue;
            }
            let mut rng = Rng(seed.wrapping_add((ei as u64) << 20 | pi as u64));
            let mut origin = Origin::default();
            let mut lines = e.lines.clone();
            for w in plan {
                lines = wrap(*w, lines, &mut rng, &mut origin);
            }
            n += 1;
            let path = write(&dir, 1 + n % 4, &bytes(&lines, plan));
            let got = outcome(&path);
            let mut why = Vec::new();
            if got.first != base.first {
                why.push(format!("first finding {:?}, unwrapped {:?}", got.first, base.first));
            }
            if got.failed != base.failed {
                why.push(format!("{} failures, unwrapped {}", got.failed, base.failed));
            }
            if let Some(h) = &origin.host {
                if base.hosts.is_empty() && got.first == base.first && !got.hosts.contains(h) {
                    why.push(format!("hosts {:?}, the wrapper names {h}", got.hosts));
                }
            }
            if let Some(r) = origin.rank {
                if base.ranks.is_empty() && got.first == base.first && !got.ranks.contains(&r) {
                    why.push(format!("ranks {:?}, the wrapper names {r}", got.ranks));
                }
            }
            // a sample through the real process: the same answer as the library
            if n % 37 == 0 || plan.contains(&W::Gzip) && n % 5 == 0 {
                cli_runs += 1;
                let (cat, failed) = outcome_cli(&path);
                if cat.as_deref() != got.first || failed != got.failed {
                    why.push(format!("mrshim analyze said {cat:?} with {failed} failures"));
                }
            }
            let keys = if plan.len() == 1 { vec![label.clone()] } else { vec!["(combined)".to_string()] };
            for k in keys {
                let t = per.entry(k).or_insert(Tally { pass: 0, total: 0 });
                t.total += 1;
                t.pass += u64::from(why.is_empty());
            }
            if !why.is_empty() {
                let text = String::from_utf8_lossy(&bytes(&lines, &plan[..0])).into_owned();
                fails.push((
                    label.clone(),
                    format!(
                        "{} [{label}] seed {seed}: {}\n{}",
                        e.name,
                        why.join("; "),
                        text.lines()
                            .take(6)
                            .map(|l| format!("    | {}", l.escape_debug()))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ),
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    for (label, f) in &fails {
        let c = shown.entry(label.as_str()).or_default();
        *c += 1;
        // all of them when one wrapper is asked for
        if *c <= 2 || only.is_some() {
            println!("{f}");
        }
    }
    println!(
        "analyze_wrapped: seed {seed}, {baselines} pieces of evidence, {n} wrapped inputs, {cli_runs} through the CLI"
    );
    println!("{:<16} {:>6} {:>6}", "wrapper", "pass", "of");
    for (k, t) in &per {
        let mark = if t.pass == t.total {
            ""
        } else if (t.pass as f64) < floor(k) * t.total as f64 {
            "  FAIL"
        } else {
            "  (known gap)"
        };
        println!("{k:<16} {:>6} {:>6}{mark}", t.pass, t.total);
    }
    assert!(baselines >= 100, "only {baselines} pieces of evidence analyze reads");
    let low: Vec<String> = per
        .iter()
        .filter(|(k, t)| (t.pass as f64) < floor(k) * t.total as f64)
        .map(|(k, t)| format!("{k} {}/{} (floor {:.0} %)", t.pass, t.total, floor(k) * 100.0))
        .collect();
    assert!(
        low.is_empty(),
        "{} of {n} wrapped inputs read differently (two per wrapper above); below the floor: {}",
        fails.len(),
        low.join(", ")
    );
}
