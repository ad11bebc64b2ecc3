//! `mrshim analyze` on failures told in prose (docs/analyze.md, "What it reads", free text): a
//! generated set, not the corpus. A template grammar combines the registration entry points of the
//! stacks (verbs, libfabric, UCX, NCCL, Open MPI, uGNI, CXI, Mooncake, NIXL) and plain words
//! ("memory registration", "pinning the buffer"), the ways people say it failed, the errno in every
//! form (name, number, negative return, strerror text, words), the memory it registered, and the
//! contexts a report puts the sentence in (backticks, a code block and then the sentence, a mail
//! re-wrapped at 60 to 72 columns, a quote). Negatives say the same words without a failure: a
//! question, a success, documentation, a changelog line, a failure that went away. Each document is
//! analysed on its own: a failure must be read once, with the errno and memory kind its sentence
//! gives; a negative must give no failure. Fixed seed; the pass rate of each part is printed.
use mrshim_record::MemKind;
use std::fmt::Write as _;

/// xorshift64*: the same documents on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[(self.next() % xs.len() as u64) as usize]
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A registration entry point as people write it, and the source line that calls it.
struct Subject {
    say: &'static [&'static str],
    code: &'static str,
}

const SUBJECTS: &[Subject] = &[
    Subject {
        say: &["ibv_reg_mr", "`ibv_reg_mr`", "ibv_reg_mr()", "the call to ibv_reg_mr(pd, buf, len, access)"],
        code: "struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);",
    },
    Subject {
        say: &["ibv_reg_mr_iova2", "`ibv_reg_dmabuf_mr`"],
        code: "mr = ibv_reg_dmabuf_mr(pd, 0, len, (uint64_t)buf, fd, access);",
    },
    Subject {
        say: &["fi_mr_reg", "`fi_mr_reg()`", "fi_mr_regattr"],
        code: "ret = fi_mr_reg(domain, buf, len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);",
    },
    // (not ucp_mem_map: its failure lines are layers over UCX's own, data/messages.json)
    Subject {
        say: &["uct_md_mem_reg", "`uct_md_mem_reg()`"],
        code: "status = uct_md_mem_reg(md, buf, len, UCT_MD_MEM_ACCESS_ALL, &memh);",
    },
    Subject {
        say: &["ncclCommRegister", "`ncclCommRegister`"],
        code: "NCCLCHECK(ncclCommRegister(comm, buf, size, &handle));",
    },
    Subject {
        say: &["Open MPI's openib_reg_mr", "mca_rcache_grdma_register in Open MPI"],
        code: "rc = rcache->rcache_register(rcache, base, size, 0, MCA_RCACHE_ACCESS_ANY, &reg);",
    },
    Subject {
        say: &["GNI_MemRegister", "`GNI_MemRegister`"],
        code: "status = GNI_MemRegister(nic, (uint64_t)buf, len, NULL, flags, -1, &hndl);",
    },
    Subject {
        say: &["cxil_map", "`cxil_map()`"],
        code: "ret = cxil_map(lni, buf, len, CXI_MAP_PIN | CXI_MAP_READ | CXI_MAP_WRITE, NULL, &md);",
    },
    Subject {
        say: &["Mooncake's registerLocalMemory", "engine.register_memory"],
        code: "ret = engine->registerLocalMemory(addr, size, \"cuda:0\");",
    },
    Subject { say: &["nixl's registerMem", "agent.register_memory"], code: "status = agent.registerMem(dlist);" },
    Subject { say: &["memory registration", "Memory registration", "MR registration"], code: "" },
    Subject { say: &["registering the buffer", "Registering the buffer"], code: "" },
    Subject { say: &["pinning the buffer for RDMA", "pinning the GPU pages"], code: "" },
];

/// An errno as a report gives it; the verb phrases choose which forms they take.
#[derive(Clone, Copy)]
struct Errno {
    n: i32,
    name: &'static str,
    text: &'static str,
    /// Other words for it ("out of memory").
    words: &'static [&'static str],
}

const ERRNOS: &[Errno] = &[
    Errno { n: 22, name: "EINVAL", text: "Invalid argument", words: &["invalid argument"] },
    Errno { n: 14, name: "EFAULT", text: "Bad address", words: &["bad address"] },
    Errno {
        n: 12,
        name: "ENOMEM",
        text: "Cannot allocate memory",
        words: &["out of memory", "cannot allocate memory"],
    },
    Errno { n: 13, name: "EACCES", text: "Permission denied", words: &["permission denied"] },
    Errno { n: 95, name: "EOPNOTSUPP", text: "Operation not supported", words: &["operation not supported"] },
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    Name,
    Number,
    Negative,
    Strerror,
    Words,
}
const FORMS: [Form; 5] = [Form::Name, Form::Number, Form::Negative, Form::Strerror, Form::Words];

fn render(e: &Errno, form: Form, r: &mut Rng) -> String {
    let n = e.n;
    match form {
        Form::Name => r.pick(&[e.name.to_string(), format!("`{}`", e.name), format!("errno {}", e.name)]).clone(),
        Form::Number => r
            .pick(&[
                format!("errno {n}"),
                format!("errno = {n}"),
                format!("errno is {n}"),
                format!("errno was {n}"),
                format!("error code {n}"),
                format!("(errno {n})"),
            ])
            .clone(),
        Form::Negative => r.pick(&[format!("-{n}"), format!("-{}", e.name), format!("a return value of -{n}")]).clone(),
        Form::Strerror => r.pick(&[e.text.to_string(), format!("\"{}\"", e.text), format!("`{}`", e.text)]).clone(),
        Form::Words => r.pick(e.words).to_string(),
    }
}

/// Verb phrases that carry the errno ({E}).
const VERBS_E: &[&str] = &[
    "fails with {E}",
    "failed with {E}",
    "gives me {E}",
    "errors out with {E}",
    "is failing with {E}",
    "keeps failing with {E}",
    "throws an error: {E}",
    "returns an error ({E})",
    "fails: {E}",
];
/// Verb phrases with no errno.
const VERBS: &[&str] = &[
    "fails",
    "failed",
    "returns NULL",
    "returns nullptr",
    "returns -1",
    "returns an error",
    "throws an exception",
    "errors out",
    "keeps failing",
];

/// A memory phrase and the kind it names.
const MEMS: &[(&str, Option<MemKind>)] = &[
    ("GPU memory", Some(MemKind::Device)),
    ("a buffer allocated with cudaMalloc", Some(MemKind::Device)),
    ("CUDA device memory", Some(MemKind::Device)),
    ("VRAM", Some(MemKind::Device)),
    ("a hipMalloc'd buffer", Some(MemKind::Device)),
    ("a 1 GiB cuda buffer", Some(MemKind::Device)),
    ("a torch tensor on the GPU", Some(MemKind::Device)),
    ("host memory", Some(MemKind::HostAnon)),
    ("a malloc'd buffer", Some(MemKind::HostAnon)),
    ("a buffer from malloc", Some(MemKind::HostAnon)),
    ("pinned host memory from cudaMallocHost", Some(MemKind::HostAnon)),
    ("a CPU buffer", Some(MemKind::HostAnon)),
    ("hugepages", Some(MemKind::Hugepage)),
    ("a 2 MB hugepage buffer", Some(MemKind::Hugepage)),
    ("an mmap'ed file", Some(MemKind::FileWritable)),
    ("a file mapped with mmap", Some(MemKind::FileWritable)),
    ("a read-only buffer", Some(MemKind::FileReadonly)),
    ("memory mapped with PROT_READ", Some(MemKind::FileReadonly)),
    ("a 2 GB buffer", None),
    ("the buffer", None),
];

/// Sentences around the failure that say nothing of it.
const FILLER: &[&str] = &[
    "Hi all, I am setting up a small cluster with two nodes and ConnectX-6 adapters.",
    "We run Ubuntu 22.04 with the inbox rdma-core and a recent kernel.",
    "Any help would be appreciated, thanks in advance.",
    "The same program ran for weeks on the old machines without any change.",
    "I have attached the full output below in case it helps to see the setup.",
    "",
];

/// A positive: the document, the errno and memory kind its failure must be read with.
struct Case {
    part: &'static str,
    ctx: &'static str,
    text: String,
    want: Option<(Option<i32>, Option<MemKind>)>,
}

fn sentence(r: &mut Rng, subj: &str, verb: &str, mem: &str) -> String {
    let subj_cap = {
        let mut c = subj.chars();
        match c.next() {
            // a sentence's first word, not a name (`ncclCommRegister`, `mca_rcache_base_register`)
            Some(f)
                if subj.split(' ').next().is_some_and(|w| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'\'')) =>
            {
                f.to_ascii_uppercase().to_string() + c.as_str()
            }
            _ => subj.to_string(),
        }
    };
    match r.below(7) {
        0 => format!("{subj_cap} {verb} when I register {mem}."),
        1 => format!("When I register {mem}, {subj} {verb}."),
        2 => format!("I'm trying to register {mem} and {subj} {verb}."),
        3 => format!("{subj_cap} on {mem} {verb}."),
        4 => format!("On our new nodes {subj} {verb} for {mem}."),
        5 => format!("After upgrading the driver to 560, {subj} {verb} for {mem}."),
        _ => format!("{subj_cap} {verb} for {mem}, but only on the CX-6 nodes."),
    }
}

/// Re-wraps `text` greedily at `width` columns, as mail software does.
fn wrap(text: &str, width: usize, quote: &str) -> String {
    let mut out = String::new();
    for para in text.split('\n') {
        if para.is_empty() || para.starts_with("```") || para.starts_with("    ") || para.contains(';') {
            let _ = writeln!(out, "{quote}{para}");
            continue;
        }
        let mut line = String::new();
        for w in para.split(' ') {
            if !line.is_empty() && quote.len() + line.len() + 1 + w.len() > width {
                let _ = writeln!(out, "{quote}{line}");
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(w);
        }
        let _ = writeln!(out, "{quote}{line}");
    }
    out
}

/// Puts the sentence in a context: plain, a quote, a mail re-wrapped at 60 to 72 columns, both.
fn context(r: &mut Rng, body: &str) -> (&'static str, String) {
    let before = r.pick(FILLER);
    let after = r.pick(FILLER);
    // a list item (a changelog's line) is a line of its own
    let para = if body.starts_with(['-', '*']) || body.starts_with("fix:") {
        body.to_string()
    } else {
        [*before, body, *after].iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join(" ")
    };
    match r.below(4) {
        0 => ("plain", format!("{para}\n")),
        1 => ("quoted", wrap(&para, 1000, r.pick::<&str>(&["> ", ">> ", "> > "]))),
        2 => {
            let w = 60 + r.below(13);
            ("wrapped", wrap(&para, w, ""))
        }
        _ => {
            let w = 60 + r.below(13);
            ("wrapped+quoted", wrap(&para, w, "> "))
        }
    }
}

/// A memory phrase for `subj`: a DMA-BUF registration is of device memory.
fn mem_for(r: &mut Rng, subj: &str) -> (&'static str, Option<MemKind>) {
    loop {
        let m = *r.pick(MEMS);
        if !subj.contains("dmabuf") || m.1 == Some(MemKind::Device) {
            return m;
        }
    }
}

fn positives(r: &mut Rng, out: &mut Vec<Case>) {
    for _ in 0..360 {
        let s = r.pick(SUBJECTS);
        let subj = *r.pick(s.say);
        let (mem, kind) = mem_for(r, subj);
        let with_errno = r.below(3) > 0;
        let (verb, want) = if with_errno {
            let e = r.pick(ERRNOS);
            let form = *r.pick(&FORMS);
            let v = r.pick(VERBS_E).replace("{E}", &render(e, form, r));
            (v, Some(e.n))
        } else {
            (r.pick(VERBS).to_string(), None)
        };
        let body = sentence(r, subj, &verb, mem);
        let (ctx, text) = context(r, &body);
        let part = if with_errno { "errno" } else { "no errno" };
        out.push(Case { part, ctx, text, want: Some((want, kind)) });
    }
    // the errno in a sentence of its own, and the errno-keyed forms of a NULL return
    for _ in 0..60 {
        let s = r.pick(SUBJECTS);
        let subj = *r.pick(s.say);
        let (mem, kind) = mem_for(r, subj);
        let e = r.pick(ERRNOS);
        let n = e.n;
        let body = match r.below(4) {
            0 => {
                format!("{subj} returns NULL for {mem} and errno is {}.", r.pick(&[e.name.to_string(), n.to_string()]))
            }
            1 => format!("{subj} returns NULL with errno {} for {mem}.", r.pick(&[e.name.to_string(), n.to_string()])),
            2 => format!(
                "{subj} failed for {mem}. The errno is {}.",
                render(e, *r.pick(&[Form::Name, Form::Strerror]), r)
            ),
            _ => format!(
                "I get {} from {subj} when I register {mem}.",
                render(e, *r.pick(&[Form::Name, Form::Strerror]), r)
            ),
        };
        let (ctx, text) = context(r, &body);
        out.push(Case { part: "errno apart", ctx, text, want: Some((Some(n), kind)) });
    }
    // questions that report a failure
    for _ in 0..30 {
        let s = r.pick(SUBJECTS);
        let subj = *r.pick(s.say);
        let (mem, kind) = mem_for(r, subj);
        let e = r.pick(ERRNOS);
        let body = match r.below(3) {
            0 => format!("Why does {subj} fail with {} on {mem}?", e.name),
            1 => format!("Does anyone know why {subj} fails with {} for {mem}?", e.name),
            _ => format!("Any idea why {subj} returns {} when I register {mem}?", render(e, Form::Strerror, r)),
        };
        let (ctx, text) = context(r, &body);
        out.push(Case { part: "question (a report)", ctx, text, want: Some((Some(e.n), kind)) });
    }
    // a code block, then the sentence that says how it failed
    for _ in 0..60 {
        let s = loop {
            let s = r.pick(SUBJECTS);
            if !s.code.is_empty() {
                break s;
            }
        };
        let (mem, kind) = mem_for(r, s.code);
        let e = r.pick(ERRNOS);
        let err = render(e, *r.pick(&FORMS), r);
        let check = r.pick(&[
            "if (!mr) {\n    perror(\"ibv_reg_mr\");\n    return -1;\n}",
            "if (ret) {\n    fprintf(stderr, \"registration failed: %s\\n\", strerror(-ret));\n    goto out;\n}",
            "if (status != UCS_OK) {\n    return status;\n}",
        ]);
        let said = match r.below(5) {
            0 => format!("This fails with {err} when buf is {mem}."),
            1 => format!("It returns an error ({err}) for {mem}."),
            2 => format!("The call above fails with {err} if I pass {mem}."),
            3 => format!("The registration fails with {err} for {mem}."),
            _ => format!("With {mem} I always get {}.", render(e, *r.pick(&[Form::Name, Form::Strerror]), r)),
        };
        let want_errno = Some(e.n);
        let text = format!("Here is what I do:\n\n```c\n{}\n{check}\n```\n\n{said}\n", s.code);
        out.push(Case { part: "code, then a sentence", ctx: "code", text, want: Some((want_errno, kind)) });
    }
}

fn negatives(r: &mut Rng, out: &mut Vec<Case>) {
    for _ in 0..240 {
        let s = r.pick(SUBJECTS);
        let subj = *r.pick(s.say);
        let (mem, _) = *r.pick(MEMS);
        let e = r.pick(ERRNOS);
        let (part, body) = match r.below(5) {
            0 => (
                "question",
                match r.below(4) {
                    0 => format!("Does {subj} fail if the buffer is not page aligned?"),
                    1 => format!("Can {subj} fail with {} if I pass {mem}?", e.name),
                    2 => format!("Will {subj} return NULL if the length is larger than max_mr_size?"),
                    _ => format!("Should {subj} fail when {mem} is freed before deregistration?"),
                },
            ),
            1 => (
                "success",
                match r.below(5) {
                    0 => format!("{subj} succeeded for {mem}."),
                    1 => format!("Memory registration of {mem} succeeded."),
                    2 => format!("{subj} completes without error for {mem}."),
                    3 => format!("Registered 2 GB of {mem} successfully."),
                    _ => format!("{subj} works fine with {mem} now, with no errors."),
                },
            ),
            2 => (
                "documentation",
                match r.below(5) {
                    0 => format!("{subj} returns NULL on failure."),
                    1 => "On failure, errno is set to indicate the error.".to_string(),
                    2 => format!("{subj} returns a pointer to the registered MR, or NULL if the request fails."),
                    3 => format!("If {subj} fails, the function returns -1 and sets errno."),
                    _ => {
                        format!("Returns 0 on success; on error, {subj} returns a negative errno such as -{}.", e.name)
                    }
                },
            ),
            3 => (
                "changelog",
                match r.below(4) {
                    0 => format!("- Fix {subj} failure when the buffer is not page aligned (#1234)"),
                    1 => format!("* Fixed memory registration failure on {mem}"),
                    2 => format!("fix: handle {subj} returning NULL for {mem}"),
                    _ => format!("- Fixes a crash when {subj} fails with {} on {mem}.", e.name),
                },
            ),
            _ => (
                "gone",
                match r.below(3) {
                    0 => format!("After raising ulimit -l, {subj} no longer fails."),
                    1 => format!("With the new driver {subj} does not fail anymore for {mem}."),
                    _ => format!("{subj} never fails on {mem} here."),
                },
            ),
        };
        let (ctx, text) = context(r, &body);
        out.push(Case { part, ctx, text, want: None });
    }
    // code alone: the source that prints a failure is not one
    for _ in 0..20 {
        let s = r.pick(&SUBJECTS[..10]);
        let text = format!(
            "```c\n{}\nif (!mr) {{\n    fprintf(stderr, \"ibv_reg_mr failed: %s\\n\", strerror(errno));\n    perror(\"ibv_reg_mr\");\n}}\n```\n",
            s.code
        );
        out.push(Case { part: "source code", ctx: "code", text, want: None });
    }
}

fn check(c: &Case) -> Result<(), String> {
    let a = mrshim_analyze::analyze_readers(vec![(
        "report.txt".to_string(),
        Box::new(std::io::Cursor::new(c.text.clone().into_bytes())) as Box<dyn std::io::BufRead>,
    )]);
    let fails: Vec<_> = a.col.groups.iter().filter(|g| !g.0.ok).collect();
    let n = a.failed();
    match c.want {
        None if n == 0 => Ok(()),
        None => {
            Err(format!("{n} failure(s) read from a negative: {:?}", fails.iter().map(|g| &g.0).collect::<Vec<_>>()))
        }
        Some(_) if n != 1 => Err(format!("{n} failures")),
        Some((errno, mem)) => {
            let k = &fails[0].0;
            if k.errno != errno || k.mem != mem {
                Err(format!("read errno {:?} mem {:?}, want {errno:?} {mem:?}", k.errno, k.mem))
            } else {
                Ok(())
            }
        }
    }
}

/// The pass rate of each part of the generated set, and of the whole against its floor.
#[test]
fn generated_prose() {
    // PROSE_SEED draws another set from the same grammar
    let seed = std::env::var("PROSE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x2912_07de_c0de_0013);
    let mut r = Rng(seed);
    let mut cases = Vec::new();
    positives(&mut r, &mut cases);
    negatives(&mut r, &mut cases);
    let mut parts: Vec<(&str, usize, usize, Vec<String>)> = Vec::new();
    for c in &cases {
        let res = check(c);
        let i = match parts.iter().position(|p| p.0 == c.part) {
            Some(i) => i,
            None => {
                parts.push((c.part, 0, 0, Vec::new()));
                parts.len() - 1
            }
        };
        parts[i].1 += 1;
        match res {
            Ok(()) => parts[i].2 += 1,
            Err(e) => parts[i].3.push(format!("[{}] {e}\n{}", c.ctx, c.text)),
        }
    }
    let (mut all, mut ok) = (0, 0);
    for (part, n, pass, errs) in &parts {
        println!("{part:<22} {pass:>4}/{n:<4}");
        let show: usize = std::env::var("PROSE_SHOW").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
        for e in errs.iter().take(show) {
            println!("  --- {e}");
        }
        all += n;
        ok += pass;
    }
    println!("total {ok}/{all}");
    // measured 2026-12-07 14:18 UTC (docs/analyze.md): 764/770; the six misses are breaks of a
    // narrow mail wrap before a name (`agent.register_memory`, `PROT_READ`) or between two
    // capitalised words ("Open / MPI"), which the join cannot tell from a line of its own. 763/770
    // after the merge with wrap13's join (14:30 UTC): the join reads the cleaned text, where a
    // quoted piece that starts with inline code (`Operation not supported`) has lost its backticks
    let floor: usize = std::env::var("PROSE_FLOOR").ok().and_then(|v| v.parse().ok()).unwrap_or(763);
    assert!(ok >= floor, "{ok}/{all} generated reports read right");
}

/// A failure line that tells no errno (or one that names no cause): the tried contrast decides.
const UNTELLING_FAILURES: &[&str] = &[
    "ibv_reg_mr failed",
    "Couldn't allocate MR",
    "[E] registerMemory failed",
    "ERROR: memory registration failed for the receive buffer",
    "ibv_reg_mr returned NULL",
];

/// What the reporter tried, as people write it, and the cause it names: a change that made it work
/// (docs/analyze.md, "What the reporter tried"; parse/tried.rs).
const TRIED_WORKS: &[(&str, &[&str])] = &[
    (
        "memlock-limit",
        &[
            "After `ulimit -l unlimited` it works.",
            "It works when I set memlock to unlimited in /etc/security/limits.conf.",
            "With LimitMEMLOCK=infinity in the unit file the job works.",
            "It works in docker with --ulimit memlock=-1 but not in Kubernetes.",
            "I raised ulimit -l to unlimited and it worked.",
            "It works when I run it as root.",
            // a setting that made it work is no fact of the failing run (read so, it ruled memlock out)
            "After ulimit -l unlimited it works.",
            "After adding CAP_IPC_LOCK to the pod it works.",
        ],
    ),
    (
        "gpu-peer-memory",
        &[
            "Loading nvidia_peermem fixed it.",
            "After modprobe nvidia-peermem everything works.",
            "It works with cudaMallocHost but not with cudaMalloc.",
            "With NCCL_NET_GDR_LEVEL=LOC it works.",
            "We set UCX_IB_GPU_DIRECT_RDMA=no and the job runs fine.",
            "With NCCL_DMABUF_ENABLE=1 it works.",
        ],
    ),
    (
        "relaxed-ordering",
        &[
            "Setting NCCL_IB_PCI_RELAXED_ORDERING=0 makes it work.",
            "With UCX_IB_PCI_RELAXED_ORDERING=off the job works.",
            "We disabled relaxed ordering and it worked.",
        ],
    ),
    ("dmabuf-unsupported", &["With NCCL_DMABUF_ENABLE=0 it works.", "We disabled dmabuf and it worked."]),
    (
        "version-mismatch",
        &[
            "It worked with driver 535 and fails after upgrading to 550.",
            "Downgrading MLNX_OFED to 5.8 fixes it.",
            "We rolled back the kernel to 5.15 and it works again.",
            "After upgrading rdma-core it works.",
        ],
    ),
    (
        "resource-exhaustion",
        &[
            "Raising log_num_mtt to 24 fixed it.",
            "With UCX_RCACHE_MAX_REGIONS=1000 it works.",
            "Small buffers register fine, but above 4 GB it fails.",
        ],
    ),
];

/// A change the failure survived: the cause it removes is ruled out.
const TRIED_STILL: &[(&str, &[&str])] = &[
    (
        "memlock-limit",
        &[
            "I set ulimit -l unlimited, but it still fails.",
            "Even as root it fails.",
            "Raising the memlock limit didn't help.",
        ],
    ),
    (
        "relaxed-ordering",
        &[
            "With NCCL_IB_PCI_RELAXED_ORDERING=0 it still fails.",
            "Setting UCX_IB_PCI_RELAXED_ORDERING=off did not help.",
        ],
    ),
];

/// The same words as advice, a question or documentation: nobody's experience, no evidence.
const TRIED_NOT_TOLD: &[&str] = &[
    "Try `ulimit -l unlimited`.",
    "Does it work with NCCL_IB_PCI_RELAXED_ORDERING=0?",
    "You should load nvidia_peermem, then it will work.",
    "Set NCCL_NET_GDR_LEVEL=LOC to disable GPUDirect RDMA.",
    "Did you try downgrading the driver?",
    "Increase log_num_mtt if you register more than 32 GB.",
];

fn tried_doc(r: &mut Rng, sentence: &str) -> (&'static str, String) {
    let fail = r.pick(UNTELLING_FAILURES);
    let (ctx, para) = context(r, sentence);
    let intro = r.pick(&FILLER[..5]);
    (ctx, format!("{intro}\n\n```\n{fail}\n```\n\n{para}"))
}

/// Documents whose only evidence is a failure line that names no cause and a sentence of what the
/// reporter tried: the cause the contrast names is first, a cause the failure survived is not
/// listed, and advice or a question confirms nothing.
#[test]
fn tried_contrasts() {
    let mut r = Rng(0x2912_07de_c0de_0014);
    let analyze = |text: &str| {
        mrshim_analyze::analyze_readers(vec![(
            "report.txt".to_string(),
            Box::new(std::io::Cursor::new(text.as_bytes().to_vec())) as Box<dyn std::io::BufRead>,
        )])
    };
    let (mut all, mut ok) = (0, 0);
    let mut misses = Vec::new();
    for _ in 0..4 {
        for (cause, sentences) in TRIED_WORKS {
            for s in *sentences {
                let (ctx, text) = tried_doc(&mut r, s);
                let a = analyze(&text);
                let first = a.findings.first().map(|f| f.category);
                all += 1;
                if first == Some(*cause) && a.failed() >= 1 {
                    ok += 1;
                } else {
                    misses.push(format!("[works, {ctx}] want {cause} first, got {first:?}\n{text}"));
                }
            }
        }
        for (cause, sentences) in TRIED_STILL {
            for s in *sentences {
                let (ctx, text) = tried_doc(&mut r, s);
                let a = analyze(&text);
                all += 1;
                let listed = a.findings.iter().any(|f| f.category == *cause);
                if !listed && a.failed() == 1 {
                    ok += 1;
                } else {
                    misses.push(format!("[still, {ctx}] {cause} listed\n{text}"));
                }
            }
        }
        for s in TRIED_NOT_TOLD {
            let (ctx, text) = tried_doc(&mut r, s);
            let a = analyze(&text);
            all += 1;
            let told = a.findings.iter().find(|f| f.explanation.contains("The report says"));
            if told.is_none() && a.failed() == 1 {
                ok += 1;
            } else {
                misses.push(format!("[not told, {ctx}] read as a contrast: {:?}\n{text}", told.map(|f| f.category)));
            }
        }
    }
    for m in misses.iter().take(6) {
        println!("  --- {m}");
    }
    println!("tried contrasts {ok}/{all}");
    // measured 2026-12-07 17:22 UTC: 146/148 (docs/analyze.md, "What the reporter tried"); the misses
    // are contrasts re-wrapped between the setting and "works", which the join leaves apart
    let floor: usize = std::env::var("TRIED_FLOOR").ok().and_then(|v| v.parse().ok()).unwrap_or(146);
    assert!(ok >= floor, "{ok}/{all} tried contrasts read right");
}
