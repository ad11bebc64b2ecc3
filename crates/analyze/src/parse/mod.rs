//! Line dispatch: a cheap multi-pattern prefilter, then the format parsers in order. Per-file state
//! carries what a format spreads over several lines (current host, perftest GPU buffer, UCX follow-ups).
pub mod clean;
pub mod env;
pub mod facts;
pub mod frame;
pub mod generic;
pub mod kernel;
pub mod nccl;
pub mod ompi;
pub mod perftest;
pub mod prose;
pub mod pytrace;
pub mod rejoin;
pub mod shim;
pub mod shimline;
pub mod tried;
pub mod ucx;
pub mod verbs;
pub mod vocab;

use crate::event::{Event, Fact, Flag, Lib, RegEv};

#[derive(Default)]
pub struct FileCtx {
    pub host: Option<String>,
    pub flavor: Option<Lib>,
    pub gpu_buffer: Option<u64>,
    pub dmabuf: bool,
    pub perf_ro: Option<bool>,
    pub ucx_pending: Option<RegEv>,
    pub perf_pending: Option<RegEv>,
    /// Inside Open MPI's "failed ... to allocate some locked memory" help text.
    pub ompi_lockwarn: bool,
    /// Open MPI printed its "only part of physical memory can be registered" warning; its table follows.
    pub ompi_reglimit: bool,
    /// What the last line saying so called the memory being registered (true = GPU).
    pub device_hint: Option<bool>,
    /// The library the file has shown itself to be (Mooncake banner, NVSHMEM paths, ...).
    pub lib_hint: Option<Lib>,
    /// A failure whose errno may be on the next line.
    pub gen_pending: Option<RegEv>,
    /// Lines of a Python traceback's frames read since [`Self::gen_pending`] was held: they sit
    /// between the layers of one failure (the library's line, then the exception that carries it)
    /// and do not count toward the layers' distance.
    pub gen_pending_slack: u64,
    /// The lines (hashes of their text without the frame) of the held failure's layers so far.
    pub gen_layers: Vec<u64>,
    /// The line being read is an exception that carries another line (`RuntimeError: <the line>`):
    /// a layer of its own, not a repeat of the line it carries.
    pub carried: bool,
    /// `ulimit -l` / `cat /proc/sys/vm/max_map_count` printed without its answer: the next line has it.
    pub expect: Option<facts::Expect>,
    /// The last line a registration failure was seen on (the vocabulary's layers count once with it).
    pub vocab_recent: Option<u64>,
    /// The held failure came from the vocabulary, whose fields say all its line gives: no errno is
    /// taken from the next line (UCX's `Input/output error` status there is not EIO).
    pub gen_pending_final: bool,
    /// The held failure is a help text's headline whose `Error:` line may follow up to this line
    /// (vocabulary entries with `errno_block`): the lines between are the block's, not the errno's.
    pub gen_pending_block: Option<u64>,
    /// The kernel report (Oops, BUG, WARNING, or an allocation failure) whose call trace the next
    /// frames belong to (parse/kernel.rs [`kernel::trace`]).
    pub ktrace: kernel::KTrace,
    /// The last line that named a registration without a failure (a source line that calls it,
    /// prose about it) and the call: a sentence after it may say how "it" failed.
    pub reg_named: Option<(u64, String)>,
    /// The arguments that line printed (the call logged before its failure's own line).
    pub reg_args: Option<(u64, String, generic::Args)>,
    /// Inside a Python traceback (its frames so far).
    pub pytrace: Option<pytrace::PyTrace>,
    /// An errno a vocabulary line printed for the failure line that follows it (libfabric EFA's
    /// `Libfabric error: (-12) ...` before its `EFA internal error: ...`), with its line number.
    pub vocab_errno: Option<(u64, i32)>,
    /// The failure a traceback's exception stands for, when the exception carries a line of its
    /// own (`RuntimeError: <the library's line>`): emitted only if that line is not recognised.
    pub py_failure: Option<RegEv>,
    /// The rank whose lines the fields above are reading (from the launcher's label), and the
    /// state of the other ranks of the file: interleaved ranks are read as separate streams, so
    /// the lines of one process stay consecutive for the parsers.
    pub stream: Option<i64>,
    pub streams: std::collections::HashMap<i64, FileCtx>,
}

impl FileCtx {
    /// Makes `rank`'s stream the one the fields read.
    fn switch(&mut self, rank: i64) {
        let mut streams = std::mem::take(&mut self.streams);
        let cur = std::mem::take(self);
        if let Some(r) = cur.stream {
            streams.insert(r, cur);
        } else {
            // the lines before any rank label: the first labelled rank carries on from them
            *self = cur;
        }
        if let Some(next) = streams.remove(&rank) {
            *self = next;
        }
        self.stream = Some(rank);
        self.streams = streams;
    }
}

/// A failure the line's own text does not place is where the line's frame says it came from.
fn place(r: &mut RegEv, f: &frame::Frame) {
    if r.host.is_none() {
        r.host = f.host.map(String::from);
    }
    r.rank = r.rank.or(f.rank);
    r.pid = r.pid.or(f.pid);
}

/// The registration entry points mrshim knows.
pub fn is_reg_call(name: &str) -> bool {
    matches!(
        name,
        "ibv_reg_mr"
            | "ibv_reg_mr_iova"
            | "ibv_reg_mr_iova2"
            | "ibv_reg_dmabuf_mr"
            | "ibv_exp_reg_mr"
            | "ibv_rereg_mr"
            | "mlx5dv_reg_dmabuf_mr"
    )
}

/// librdmacm's registration helpers and the access each asks ibv_reg_mr for (include/rdma/rdma_verbs.h:
/// rdma_reg_msgs = LOCAL_WRITE, rdma_reg_read = LOCAL_WRITE|REMOTE_READ, rdma_reg_write =
/// LOCAL_WRITE|REMOTE_WRITE).
pub fn rdmacm_reg_access(name: &str) -> Option<u32> {
    use mrshim_access::{LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE};
    match name {
        "rdma_reg_msgs" => Some(LOCAL_WRITE),
        "rdma_reg_read" => Some(LOCAL_WRITE | REMOTE_READ),
        "rdma_reg_write" => Some(LOCAL_WRITE | REMOTE_WRITE),
        _ => None,
    }
}

/// The first registration entry point named in `s`.
pub fn reg_call_in(s: &str) -> Option<&str> {
    let i = s.find("ibv_reg_").or_else(|| s.find("ibv_exp_reg_mr"))?;
    let end = s[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map(|e| i + e).unwrap_or(s.len());
    let name = &s[i..end];
    is_reg_call(name).then_some(name)
}

pub struct Parser {
    /// The launcher's origin (host, rank, pid) of the physical line being read: the pieces of a
    /// line split at `\r` carry it only on the first (`3: 45%|###   |\r<the failure>`).
    piece: (u64, Option<String>, Option<i64>, Option<u32>),
    pub shim: shim::ShimState,
    pub known: crate::known::Matcher,
}

const NEEDLES: &[&str] = &[
    "NCCL",
    "MCCL",
    "RCCL",
    "UCX",
    "ibv_",
    "libibverbs",
    "mlx5",
    "umem",
    "infiniband",
    "MR",
    "ulimit",
    "GDR",
    "GPUDirect",
    "GPU Direct",
    "OpenFabrics",
    "openib",
    "Local host:",
    "Hostname:",
    "Memlock",
    "locked memory",
    "DMAR",
    "IO_PAGE_FAULT",
    "AER:",
    "PCIe",
    "peermem",
    "peer_mem",
    "Open MPI",
    "cuMemAlloc",
    "hipMalloc",
    "mcMalloc",
    "zeMemAllocDevice",
    "malloc_device",
    "initializing ",
    "ERRNO:",
    "#bytes",
    "failed to create mr",
    "MRSHIM_",
    // libcxi's fork-safe pinning and libfabric's MR cache bounds (env.rs)
    "CXI_FORK_SAFE",
    "FI_MR_CACHE",
    "P2P",
    "显存",
    "版本",
    "TCP",
    "kernel:",
    "Max locked memory",
    "egist",
    "EGIST",
    "reg_",
    "REG_",
    "_reg",
    "reg mr",
    "MR ",
    "memory",
    "Memory",
    "pin_buffer",
    "get_pages",
    "cxil",
    "GPU",
    "cuda",
    "CUDA",
    "VRAM",
    "dmabuf",
    "DMA_BUF",
    "dma-buf",
    "mooncake",
    "Mooncake",
    "transfer_engine",
    "nixl",
    "mscclpp",
    "nvshmem",
    "libfabric",
    "max_map_count",
    "max_mr_size",
    "Cma",
    "peermem",
    "GeForce",
    "RTX",
    "MRSHIM",
    "Version",
    "version",
    "uname",
    "SMP",
    "GNU/Linux",
    "fw_ver",
    // version lines of packages (dpkg -l, rpm -q): facts.rs
    "rdma-core",
    "Python platform",
    "ulimit",
    "locked memory",
    "IPC_LOCK",
    "gdr",
    "OFED",
    "errno",
    "Errno",
    "RLIMIT_MEMLOCK",
    "mkey",
    "mem_map",
    "RELAXED_ORDERING",
    "EFA internal error",
    "hugepage",
    "HOST_MEMORY",
    "work buf",
    // a kernel report's call trace (its other words: `regression_words`)
    "Call Trace",
];

/// The words [`facts::read_dev_release`], [`prose::regression_told`] and [`kernel::trace`] start
/// from (a superset: each still checks its own): the prefilter's and the gate's.
fn regression_words() -> impl Iterator<Item = &'static str> {
    ["-rc", "next-20", "Fixes: "]
        .into_iter()
        .chain(prose::REGRESSION_WORDS)
        .chain(kernel::TRACE_WORDS)
        .chain(kernel::REPORT_HEADERS.into_iter().flatten().copied())
}

/// The [`regression_words`] as the line's one pass ([`crate::scan`]) takes its lists.
pub fn regression_word_list() -> Vec<String> {
    regression_words().map(String::from).collect()
}

/// Whether a line holds one of the [`regression_words`] (case-sensitive), from the line's one pass.
fn may_tell_a_regression(line: &str) -> bool {
    static W: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(regression_word_list);
    crate::scan::has_exact(line, crate::scan::Set::Regress, &W)
}

/// The prefilter's words: [`NEEDLES`], the [`regression_words`] and the topics of what a reporter
/// tried ([`tried::needles`]).
pub fn prefilter_words() -> Vec<String> {
    NEEDLES.iter().copied().chain(regression_words()).map(String::from).chain(tried::needles()).collect()
}

/// The prefilter: whether `s` holds one of the [`prefilter_words`] (case-sensitive), from the
/// line's one pass ([`crate::scan`]; no automaton of its own to build and walk).
fn prefilter(s: &str) -> bool {
    static W: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(prefilter_words);
    crate::scan::has_exact(s, crate::scan::Set::Pre, &W)
}

impl Default for Parser {
    fn default() -> Self {
        Parser {
            piece: (0, None, None, None),
            shim: Default::default(),
            known: crate::known::Matcher::new(crate::known::table()),
        }
    }
}

impl Parser {
    /// Whether `s` holds any word evidence starts from (the prefilter's).
    pub fn may_be_evidence(&self, s: &str) -> bool {
        prefilter(s) || s.trim_start().starts_with('{')
    }

    /// A piece of a physical line that is not read (a progress bar's state): what its frame says
    /// about the line's origin is kept for the pieces after it.
    pub fn skip_piece(&mut self, line: &str, lineno: u64) {
        let f = frame::split(line);
        if self.piece.0 != lineno {
            self.piece = (lineno, f.host.map(String::from), f.rank, f.pid);
        }
    }

    pub fn line(&mut self, ctx: &mut FileCtx, line: &str, lineno: u64, emit: &mut dyn FnMut(Event)) -> bool {
        let t = line.trim_start();
        // "##" lines are comments (fixture headers, annotations) and never evidence; a markdown
        // heading of level 3 or more (`#### `cxil_map: write error` when ...`) is a pasted line, and
        // so is a level-2 heading made of a log line's timestamp (`## [1757995046.794816] [host:pid:0]
        // ... UCX ERROR ...`: UCX's and other loggers' `[seconds.micros]` prefix)
        if t.starts_with("##") && !t.starts_with("###") && !logged_heading(t) {
            return false;
        }
        if t.starts_with('{') && shim::parse(t, &mut self.shim, lineno, emit) {
            return true;
        }
        // every fixed word list in one pass over the line (see crate::scan)
        crate::scan::prime(line);
        for k in self.known.scan(line) {
            emit(Event::Known(k));
        }
        let inherited: Option<String>;
        let mut f = frame::split(line);
        if self.piece.0 != lineno {
            self.piece = (lineno, f.host.map(String::from), f.rank, f.pid);
        } else if f.host.is_none() && f.rank.is_none() && f.pid.is_none() {
            // a later piece of the line: the first one's frame is its origin
            inherited = self.piece.1.clone();
            f.host = inherited.as_deref();
            f.rank = self.piece.2;
            f.pid = self.piece.3;
        }
        if let Some(r) = f.rank {
            if ctx.stream != Some(r) {
                ctx.switch(r);
            }
        }
        if let Some(h) = f.host {
            if ctx.host.as_deref() != Some(h) {
                ctx.host = Some(h.to_string());
            }
        }
        // a Python traceback: frames, then the exception (cheap test first)
        if ctx.pytrace.is_some() || f.body.starts_with("Traceback") || f.body.trim_start().starts_with("File \"") {
            if pytrace::parse(&f, ctx, lineno, line, emit) {
                return true;
            }
            if ctx.pytrace.is_some() {
                // a frame of the traceback (header, `File ...`, source line): no failure and no
                // errno of the held one; the layers around it stay one failure
                ctx.gen_pending_slack += 1;
                ctx.vocab_recent = ctx.vocab_recent.map(|r| r + 1);
                ctx.vocab_errno = ctx.vocab_errno.map(|(at, n)| (at + 1, n));
                return false;
            }
        }
        // an exception that carries a library's own line (`RuntimeError: <the line>`): the line,
        // with whatever frame it has of its own
        ctx.carried = false;
        if let Some(msg) = pytrace::message(f.body) {
            let g = frame::split(msg);
            f = frame::Frame { host: f.host.or(g.host), rank: f.rank.or(g.rank), pid: f.pid.or(g.pid), body: g.body };
            ctx.carried = true;
        }
        // what the launcher's or logger's frame says about the line's origin goes to every event of it
        // the line's own text does not place, and to the failure it holds back for the next line
        let mut emit = |mut e: Event| {
            match &mut e {
                Event::Reg(r) => place(r, &f),
                Event::Fact { host, pid, .. } => {
                    *host = host.take().or_else(|| f.host.map(String::from));
                    *pid = pid.or(f.pid);
                }
                _ => {}
            }
            emit(e)
        };
        let mut done = self.dispatch(ctx, &f, line, lineno, &mut emit);
        if let Some(ev) = ctx.py_failure.take() {
            if !done {
                emit(Event::Reg(ev));
                done = true;
            }
        }
        for r in [&mut ctx.ucx_pending, &mut ctx.perf_pending, &mut ctx.gen_pending].into_iter().flatten() {
            if r.evid.as_ref().is_some_and(|(n, _)| *n == lineno) {
                place(r, &f);
            }
        }
        done
    }

    /// The format parsers, in order, on a line whose frame is known.
    fn dispatch(
        &mut self,
        ctx: &mut FileCtx,
        f: &frame::Frame,
        line: &str,
        lineno: u64,
        emit: &mut dyn FnMut(Event),
    ) -> bool {
        let body = f.body;
        // NCCL-family lines are the bulk of most job logs: recognised by their tag, no prefilter needed
        if let Some(p) = nccl::split(body) {
            // the vocabulary's NCCL-family messages (net plugins, gdrwrap, GIN, the GDR checks): its
            // failures are consumed there, its facts leave the line to NCCL's own parser too
            if vocab::anchored(p.msg) && vocab::parse(f, ctx, lineno, line, emit) {
                return true;
            }
            ucx::flush(ctx, emit);
            generic::flush(ctx, emit);
            // a failure NCCL's own parser counts is one the vocabulary's layers printed after it
            // (NCCL's user-buffer line, a plugin's) stand on
            let mut failed = false;
            let done = nccl::parse_split(body, p, ctx, &mut |e| {
                failed |= matches!(&e, Event::Reg(r) if !r.ok);
                emit(e)
            });
            if failed {
                ctx.vocab_recent = Some(lineno);
            }
            return done;
        }
        if ctx.expect.is_some() && facts::parse(body, ctx, emit) {
            return true;
        }
        // a line the word list misses still reaches the vocabulary when one of its messages may be
        // in it (LNet's `Failed to map mr`, Realm's `mk_create failed?`)
        if !prefilter(body) && !vocab::anchored(body) {
            generic::parse(f, ctx, lineno, line, emit);
            return false;
        }
        // a kernel report's lines (its header, the frames of its call trace) before any reader that
        // takes a frame naming a registration call for a failure of that call
        // development releases, regressions told, kernel reports: one pass says whether the line
        // holds any word they start from (failure lines hold none)
        if may_tell_a_regression(line) {
            facts::read_dev_release(body, ctx, emit);
            if prose::regression_told(body) {
                emit(Event::fact(Lib::Text, ctx.host.as_deref(), None, Fact::Flag(Flag::RegressionTold)));
            }
            if kernel::trace(line, ctx, emit) {
                return true;
            }
        }
        generic::note_context(body, ctx);
        if vocab::parse(f, ctx, lineno, line, emit) {
            return true;
        }
        if shimline::parse(body, ctx, lineno, emit) {
            return true;
        }
        static UCX: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(" UCX "));
        if UCX.find(line.as_bytes()).is_some() {
            if ucx::parse(line, ctx, lineno, emit) {
                return true;
            }
        } else {
            ucx::flush(ctx, emit);
        }
        // what the reporter tried and how it went: a change that made it work leaves settings on the
        // line that are not the failing run's, so they are not read as its facts
        let worked = tried::parse(body, ctx, emit);
        let changed = worked.any();
        verbs::parse(body, ctx, emit)
            || kernel::parse(line, ctx, emit)
            || ompi::parse(body, ctx, emit)
            || perftest::parse(body, ctx, lineno, emit)
            || (!changed && env::parse(body, ctx, emit))
            || generic::parse(f, ctx, lineno, line, emit)
            || (!changed && facts::parse(body, ctx, emit))
            || prose::parse(body, ctx, &worked, emit)
            || changed
    }

    pub fn end_file(&mut self, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) {
        self.piece = (0, None, None, None);
        let mut streams: Vec<_> = std::mem::take(&mut ctx.streams).into_iter().collect();
        streams.sort_by_key(|s| s.0);
        for c in std::iter::once(ctx).chain(streams.iter_mut().map(|s| &mut s.1)) {
            ucx::flush(c, emit);
            generic::flush(c, emit);
            perftest::flush(c, emit);
        }
    }
}

/// A `## ` line whose text is a logger's timestamp in brackets (`## [1757995046.794816] ...`): a
/// pasted log line a markdown editor turned into a heading, not a comment.
fn logged_heading(t: &str) -> bool {
    let r = t.trim_start_matches('#').trim_start();
    r.strip_prefix('[').is_some_and(|r| {
        let n = r.bytes().take_while(|b| b.is_ascii_digit()).count();
        n >= 9 && r.as_bytes().get(n) == Some(&b'.')
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_heading_made_of_a_log_line_is_pasted() {
        assert!(super::logged_heading("## [1757995046.794816] [amdgpu05:194643:0]  ib_md.c:309  UCX  ERROR x"));
        assert!(!super::logged_heading("## source: https://example.org"));
        assert!(!super::logged_heading("## [RO] relaxed ordering"));
    }

    use super::*;
    use aho_corasick::AhoCorasick;

    /// The one-pass gate lets through every line its three readers take: a development release, a
    /// regression told, a kernel report's header, frame or release line.
    #[test]
    fn the_regression_gate_passes_what_its_readers_take() {
        let lines = [
            "Linux version 5.10.0-rc1+ (root@build) (gcc 10.2.0) #3 SMP",
            "fails on v5.10-rc4 with EINVAL",
            "tested on next-20201016",
            "Fixes: 0c16d9635e3a (\"RDMA/umem: Move to allocate SG table from pages\")",
            "git bisect points at the umem rework",
            "The first bad commit is 0c16d9635e3a",
            "This is a regression since 5.9.",
            "It broke since commit 0c16d9635e3a.",
            "[ 1203.441130] WARNING: CPU: 12 PID: 5521 at drivers/infiniband/hw/mlx5/mr.c:1042",
            "BUG: kernel NULL pointer dereference, address: 0000000000000268",
            "ib_write_bw: page allocation failure: order:10",
            "RIP: 0010:ib_umem_get+0x1f5/0x3c0 [ib_uverbs]",
            "CPU: 0 PID: 310 Comm: ibv_rc_pingpong Not tainted 5.10.19 #1",
        ];
        for l in lines {
            // a header alone changes the reader's state (the report its frames belong to)
            let mut ctx = FileCtx::default();
            let read = facts::dev_release(l).is_some()
                || prose::regression_told(l)
                || kernel::trace(l, &mut ctx, &mut |_| {})
                || ctx.ktrace != kernel::KTrace::None;
            assert!(read, "no reader takes {l:?}: the test's line is wrong");
            assert!(may_tell_a_regression(l), "the gate drops {l:?}");
        }
        let failure = "node0001:10005:10005 [3] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument";
        assert!(!may_tell_a_regression(failure));
    }

    /// The prefilter and the regression gate, read from the line's one pass (any casing), answer
    /// as case-sensitive automata of their own words: a word in another casing (`mr` for `MR`,
    /// `call trace` for `Call Trace`) lets no line through.
    #[test]
    fn the_gates_from_the_one_pass_keep_their_casing() {
        let pre = AhoCorasick::new(prefilter_words()).unwrap();
        let reg = AhoCorasick::new(regression_word_list()).unwrap();
        let any_case = |w: Vec<String>| AhoCorasick::builder().ascii_case_insensitive(true).build(w).unwrap();
        let (pre_ci, reg_ci) = (any_case(prefilter_words()), any_case(regression_word_list()));
        let lines = [
            "node0001:10006:10006 [0] MRSHIM WARN ibv_reg_mr_iova2(addr=0x7f0000200000) failed: EINVAL (22)",
            "libfabric:10009:1764700000::verbs:mr:vrb_mr_reg_common():83<warn> Unable to register memory region",
            "[1764700000.000003] [node0003:10018:0] ib_md.c:293  UCX  ERROR ibv_reg_mr() failed",
            "mr. smith wrote a ucx test",
            "nothing here at all",
            "Call Trace:",
            "call trace: none",
            "a bisect of it",
            "[ 12.3] warning: cpu: 1 pid: 2 at drivers/infiniband/core/umem.c:9",
        ];
        for l in lines {
            assert_eq!(prefilter(l), pre.is_match(l), "prefilter: {l:?}");
            assert_eq!(may_tell_a_regression(l), reg.is_match(l), "regression gate: {l:?}");
        }
        // the lines put the casing to the test
        assert!(lines.iter().any(|l| pre_ci.is_match(l) && !pre.is_match(l)), "no line for the prefilter's casing");
        assert!(lines.iter().any(|l| reg_ci.is_match(l) && !reg.is_match(l)), "no line for the gate's casing");
    }
}
