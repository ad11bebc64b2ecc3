//! The one recogniser for registration failures whatever wrote the line: a line that names a memory
//! registration (verbs, libfabric and its providers, gdrcopy / peer-memory pinning, "register memory / MR /
//! memory region" in any casing, camelCase method names) together with a failure word, and an errno in any
//! form [`crate::errno::find`] knows (or on the next line). Memory kind and library come from the text
//! and from what the file said before (a `memoryType=2` line, a Mooncake banner).
use super::frame::Frame;
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Lib, RegEv};
use crate::parse::shim::parse_hex;
use crate::scan::{any_of, has, Lits};
use mrshim_record::MemKind;

/// Registration mentions, matched on the line lower-cased with everything but letters and digits removed,
/// so `register_memory`, `registerMemory`, `RegisterRdmaMemoryRegion` and "register memory" are one.
const MENTIONS: &[&str] = &[
    "regmr",
    "mrreg",
    "registermr",
    "registermem",
    "registeringmem",
    "registerthememory",
    "memoryregistration",
    "registergpumr",
    "registerhostmr",
    "allocatemr",
    "createmr",
    "mapmrbuffer",
    "gdrpinbuffer",
    "p2pgetpages",
    "cxilmap",
    "umemget",
    "registerdmabuf",
    "regdmabuf",
    "memreg",
    "registerrdma",
    "memoryregion",
    // NCCL's user-buffer registration (ncclCommRegister, ncclCommWindowRegister), Open MPI's
    // registration cache (rcache_register, mca_rcache_grdma_register). Not UCX's ucp_mem_map: its
    // failure lines are layers over UCX's own (data/messages.json), never a failure alone.
    "commregister",
    "windowregister",
    "rcacheregister",
    "grdmaregister",
    // the same in the other word orders people and programs use: "rdma register failed", "MR
    // allocation failed", "MR creation failed", RegMem(), the kernel's pin_user_pages
    "rdmaregister",
    "mralloc",
    "mrcreat",
    "regmem",
    "pinuserpages",
];

const FAIL_WORDS: &[&str] = &[
    "fail",
    "error",
    "unable",
    "couldn't",
    "could not",
    "cannot",
    "can't",
    "refused",
    "abort",
    "returned null",
    "return -",
    "returns -",
    "returned -",
    "ret=-",
    "ret = -",
    // how people say it in words: "returns NULL", "throws an exception"
    "returns null",
    "return null",
    "returns nullptr",
    "returned nullptr",
    "throws",
    "threw",
];

/// Call names people's tools print, longest first so `ibv_reg_mr_iova2` wins over `ibv_reg_mr`.
const CALLS: &[&str] = &[
    "ibv_reg_mr_iova2",
    "ibv_reg_mr_iova",
    "ibv_reg_dmabuf_mr",
    "ibv_exp_reg_mr",
    "ibv_rereg_mr",
    "ibv_reg_mr",
    "fi_mr_regattr",
    "fi_mr_regv",
    "fi_mr_reg",
    "efa_mr_reg",
    "cxil_map",
    "gdr_pin_buffer",
    "nvidia_p2p_get_pages",
    "nv_p2p_get_pages",
    "ib_umem_get",
];

/// True if `s` names a memory registration (not a deregistration, not a success line).
pub fn mentions_registration(s: &str) -> bool {
    mentions_lower(&s.to_ascii_lowercase())
}

/// [`mentions_registration`] of a line already lower-cased.
fn mentions_lower(l: &str) -> bool {
    static REGIST: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new("regist"));
    if REGIST.find_iter(l.as_bytes()).any(|i| !l[..i].ends_with("de") && !l[..i].ends_with("un"))
        && (has!(l, "memory") || has!(l, "buffer") || has!(l, " mr") || has!(l, "region"))
        && !has!(l, "registered ")
    {
        return true;
    }
    if pinning(l) || memory_noun(l) {
        return true;
    }
    // lower-cased, everything but letters and digits removed
    let q: String = l.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    // (searchers built once: `match_indices` builds one per call and word)
    static FIND: std::sync::LazyLock<Vec<memchr::memmem::Finder<'static>>> =
        std::sync::LazyLock::new(|| MENTIONS.iter().map(memchr::memmem::Finder::new).collect());
    MENTIONS.iter().zip(FIND.iter()).any(|(m, f)| {
        f.find_iter(q.as_bytes()).any(|i| !(q[..i].ends_with("de") || m.starts_with("reg") && q[..i].ends_with("un")))
    })
}

/// Nouns that stand for memory when a stack registers or pins them: QEMU's chunks and RAM blocks,
/// GASNet's and PGAS runtimes' segments, kernel pages, MPI windows, buffer pools, PSM/hfi1's TIDs
/// (expected-receive pinning), memory areas, the keys an MR gives.
const MEM_NOUNS: &[&str] = &[
    "chunk", "chunks", "block", "blocks", "segment", "segments", "page", "pages", "region", "regions", "window",
    "windows", "pool", "pools", "buffer", "buffers", "tid", "tids", "area", "areas", "rkey", "lkey", "memory", "mr",
    "mrs", "heap",
];

/// Words that make the thing registered something other than memory ("register the block device",
/// "pool handler", "register with the SM"): before the noun they end the search, right after it
/// they undo it.
const NOT_MEM_NOUN: &[&str] = &[
    "service",
    "services",
    "device",
    "devices",
    "driver",
    "drivers",
    "handler",
    "handlers",
    "callback",
    "callbacks",
    "plugin",
    "plugins",
    "client",
    "clients",
    "netdev",
    "interface",
    "listener",
    "notifier",
    "event",
    "events",
    "module",
    "class",
    "type",
    "types",
    "command",
    "commands",
    "signal",
    "thread",
    "threads",
    "mutex",
    "file",
    "files",
    "metric",
    "metrics",
    "with",
    "for",
    "as",
    "node",
    "nodes",
    "agent",
    "port",
    "name",
    "server",
];

/// A line in an RDMA context: a word that only verbs, RDMA storage and HPC fabrics use (the stacks'
/// own names for what they register through: verbs, ibv_*, rdma_*, MR/lkey/rkey, HCA, RoCE, iWARP,
/// uDAPL, PSM/OPX/hfi1/qib, FRWR/FMR fast registration, iSER/SRP/RDS/xprtrdma/svcrdma, mlx4/mlx5,
/// UCX/UCT, libfabric/OFI).
fn rdma_context(l: &str) -> bool {
    l.split(|c: char| !c.is_ascii_alphanumeric()).any(|t| {
        t.starts_with("rdma")
            || t.starts_with("ibv")
            || t.ends_with("rdma")
            || matches!(
                t,
                "verbs"
                    | "infiniband"
                    | "ib"
                    | "mr"
                    | "mrs"
                    | "lkey"
                    | "rkey"
                    | "hca"
                    | "roce"
                    | "iwarp"
                    | "dapl"
                    | "udapl"
                    | "psm"
                    | "psm2"
                    | "psm3"
                    | "opx"
                    | "hfi1"
                    | "qib"
                    | "ipath"
                    | "infinipath"
                    | "frwr"
                    | "fmr"
                    | "fastreg"
                    | "iser"
                    | "isert"
                    | "srp"
                    | "srpt"
                    | "rds"
                    | "xprtrdma"
                    | "svcrdma"
                    | "mlx4"
                    | "mlx5"
                    | "ucx"
                    | "uct"
                    | "ofi"
                    | "libfabric"
            )
    })
}

/// "Failed to register chunk", "unable to pin the TID pages", "segment registration failed", "error
/// registering window": a registration, pinning or locking of a noun that stands for memory
/// ([`MEM_NOUNS`], not [`NOT_MEM_NOUN`]), on a line in an RDMA context ([`rdma_context`]) — the same words name services,
/// devices and handlers everywhere else, so the gate is the line's own RDMA words.
fn memory_noun(l: &str) -> bool {
    if !(has!(l, "regist") || has!(l, "pin") || has!(l, "lock")) || !rdma_context(l) {
        return false;
    }
    let toks: Vec<&str> =
        l.split(|c: char| !c.is_ascii_alphanumeric() && c != '\'').filter(|t| !t.is_empty()).collect();
    let noun = |t: &str| MEM_NOUNS.contains(&t);
    let not_mem = |t: &str| NOT_MEM_NOUN.contains(&t);
    // the noun within the next words after the verb (articles and adjectives between), not undone
    let object = |from: usize| {
        for (k, t) in toks.iter().enumerate().skip(from).take(5) {
            if not_mem(t) {
                return false;
            }
            if noun(t) {
                return toks.get(k + 1).is_none_or(|n| !not_mem(n) || matches!(*n, "with" | "for" | "as"));
            }
        }
        false
    };
    let fail =
        |t: &str| matches!(t, "failed" | "fail" | "fails" | "unable" | "couldn't" | "cannot" | "can't" | "error");
    let after_fail = |i: usize| i > 0 && fail(toks[i - 1]) && object(i + 1);
    let noun_first = |i: usize| {
        i > 0
            && noun(toks[i - 1])
            && toks.get(i + 1).is_some_and(|n| fail(n) || *n == "failure")
            && !(i > 1 && not_mem(toks[i - 2]))
    };
    toks.iter().enumerate().any(|(i, t)| match *t {
        // (failed | unable | couldn't | could not | cannot) to register / pin / lock <noun>
        "register" | "pin" | "lock" => {
            let before = |n: usize| i.checked_sub(n).map(|j| toks[j]);
            let to_form = before(1) == Some("to")
                && (before(2).is_some_and(fail) || before(3) == Some("could") && before(2) == Some("not"));
            let bare = before(1).is_some_and(fail) || before(2) == Some("could") && before(1) == Some("not");
            (to_form || bare) && object(i + 1)
        }
        // error / failed registering <noun>; <noun> registration / pinning failed
        "registering" => after_fail(i),
        "registration" => noun_first(i),
        "pinning" | "locking" => after_fail(i) || noun_first(i),
        _ => false,
    })
}

/// "pinning the buffer / pin the GPU pages / host memory": the pages of a registration pinned (not
/// threads or CPUs pinned to cores, not a version pinned).
fn pinning(l: &str) -> bool {
    if !has!(l, "pin") {
        return false;
    }
    let verb = |i: usize| l[..i].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
    l.match_indices("pinning ").chain(l.match_indices("pin ").filter(|(i, _)| verb(*i))).any(|(i, w)| {
        for t in l[i + w.len()..].split(' ').take(4) {
            let t = t.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            match t {
                "memory" | "buffer" | "buffers" | "pages" | "mr" | "region" => return true,
                "cpu" | "cpus" | "thread" | "threads" | "core" | "cores" | "version" | "process" => return false,
                _ => {}
            }
        }
        false
    })
}

pub fn has_failure_word(lower: &str) -> bool {
    static W: std::sync::LazyLock<Lits> = std::sync::LazyLock::new(|| Lits::new(FAIL_WORDS));
    W.any_in(lower)
}

/// The call a line names, or a neutral name for "register memory" wording.
pub fn call_in(s: &str) -> String {
    call_in_lower(&s.to_ascii_lowercase())
}

fn call_in_lower(lower: &str) -> String {
    static C: std::sync::LazyLock<Lits> = std::sync::LazyLock::new(|| Lits::new(CALLS));
    if let Some(i) = C.first_in(lower) {
        return CALLS[i].to_string();
    }
    if has!(lower, "reg_dmabuf") || has!(lower, "dmabuf_mr") || dmabuf_in_use(lower) {
        return "ibv_reg_dmabuf_mr".into();
    }
    "register memory".into()
}

/// A line that says its registration went through DMA-BUF without naming the verb: a flag that it
/// was used (`useDmaBuf = true`, `use_dmabuf=1`), the dmabuf file descriptor it passed (`dmabuf_fd 518`,
/// UCX's ucp_mm.c failure line), or the words ("dmabuf registration", "via dma-buf"). A flag that
/// DMA-BUF is merely supported or enabled (`dmaBufSupport = true`), or a negative fd (NCCL's and
/// UCX's probes pass -1), is not a registration through it.
fn dmabuf_in_use(lower: &str) -> bool {
    if !(has!(lower, "dmabuf") || has!(lower, "dma-buf") || has!(lower, "dma_buf")) {
        return false;
    }
    if ["dmabuf registration", "dma-buf registration", "via dmabuf", "via dma-buf", "using dmabuf", "using dma-buf"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return true;
    }
    // key = value / key value / key: value, the key holding dmabuf
    let toks: Vec<&str> = lower
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|t| !t.is_empty())
        .collect();
    for (i, t) in toks.iter().enumerate() {
        let key = t.trim_end_matches([':', '=']);
        let k: String = key.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        if !k.contains("dmabuf") {
            continue;
        }
        // the value: after '=' in the token, or the next token(s) past a lone '=' / ':'
        let inline = t.split_once('=').map(|(_, v)| v).filter(|v| !v.is_empty());
        let next = toks.get(i + 1).copied();
        let v = match (inline, next) {
            (Some(v), _) => v,
            (None, Some("=")) | (None, Some(":")) => toks.get(i + 2).copied().unwrap_or(""),
            (None, Some(n)) => n,
            (None, None) => "",
        };
        let v = v.trim_end_matches([';', '.']);
        if k.starts_with("use") && matches!(v, "true" | "1" | "yes" | "on") {
            return true;
        }
        if k.ends_with("fd") && v.parse::<i64>().is_ok_and(|n| n >= 0) {
            return true;
        }
    }
    false
}

/// MSCCL++'s debug line "cuMemAlloc: 0, dmaBufSupported: 0" describes a host buffer, and an RDMA
/// buffer's name holds dma-buf's spellings (librdmacm's rping: "rdma_buf reg_mr failed"): words
/// inside these say nothing.
const NOT_MEM: &[&str] = &["cumemalloc: 0", "dmabufsupported: 0", "rdma_buf", "rdma-buf", "rdmabuf"];
const HOST_MEM: &[&str] = &[
    "(host)",
    "(type = 1)",
    "fi_hmem_system",
    "memorytype=0",
    "mem_type bit 0x1",
    "host memory",
    "dram",
    // CUDA's and HIP's pinned host allocations
    "cudamallochost",
    "cudahostalloc",
    "hipmallochost",
    "hiphostmalloc",
];
const DEVICE_MEM: &[&str] = &[
    "dmabuf",
    "dma-buf",
    "dma_buf",
    "fi_hmem_cuda",
    "fi_hmem_rocr",
    "fi_hmem_ze",
    "iface=cuda",
    "iface=rocr",
    "iface=ze",
    "(cuda)",
    "(rocm)",
    "(gpu)",
    "gpu mr",
    "gpu buffer",
    "gpu memory",
    "gpu address",
    // "register a buffer on GPU" / "on the GPU": how people describe device memory in prose
    "on gpu",
    "on the gpu",
    "memorytype=2",
    "cuda_mem_device",
    "cumemalloc",
    "cumemcreate",
    "cumem",
    "vmm",
    "expandable_segments",
    "vram",
    "(type = 2)",
    "mem_type bit 0x2",
    "device memory",
    "hipmalloc",
    "cudamalloc",
    // the other GPU runtimes' device allocators: MetaX MACA (mcMalloc, mcMallocAsync: MCCL's),
    // oneAPI Level Zero (zeMemAllocDevice) and SYCL (malloc_device)
    "mcmalloc",
    "zememallocdevice",
    "malloc_device",
    "cuda buffer",
    "cuda memory",
    "gpu tensor",
    "p2p_get_pages",
    "gdr_pin",
    "gdrdrv",
];

/// The words of [`mem_hint`], for the line scanner ([`crate::scan`]): not, host, device.
pub fn mem_words() -> Vec<String> {
    NOT_MEM.iter().chain(HOST_MEM).chain(DEVICE_MEM).map(|w| w.to_string()).collect()
}

/// The kinds of host memory a sentence names in words, which [`mem_hint`]'s host and device words
/// do not tell apart: a read-only mapping (`PROT_READ` without `PROT_WRITE`, "read-only", not a
/// "read-only file system"), huge pages, a file's mapping. Read in a failure's own line only.
fn mem_in_words(lower: &str) -> Option<MemKind> {
    // (each kind below needs one of these words)
    let words = any_of!(
        lower,
        [
            "prot_read",
            "read-only",
            "read only",
            "readonly",
            "hugepage",
            "huge page",
            "hugetlb",
            "mmap'ed file",
            "mmaped file",
            "mmapped file",
            "file mapped",
            "mapped file",
            "file-backed",
        ]
    );
    if !words {
        return None;
    }
    let readonly = (has!(lower, "prot_read") && !has!(lower, "prot_write"))
        || (has!(lower, "read-only") || has!(lower, "read only") || has!(lower, "readonly"))
            && !has!(lower, "read-only file system");
    if readonly {
        return Some(MemKind::FileReadonly);
    }
    if has!(lower, "hugepage") || has!(lower, "huge page") || has!(lower, "hugetlb") {
        return Some(MemKind::Hugepage);
    }
    static FILE: std::sync::LazyLock<Lits> = std::sync::LazyLock::new(|| {
        Lits::new(&["mmap'ed file", "mmaped file", "mmapped file", "file mapped", "mapped file", "file-backed"])
    });
    FILE.first_in(lower).is_some().then_some(MemKind::FileWritable)
}

/// Host memory in a sentence's words ("a malloc'd buffer", "a CPU buffer"): weaker than
/// [`mem_hint`]'s words, read in a failure's own line when it names no other kind.
fn host_in_words(lower: &str) -> bool {
    // " malloc'd": not hipMalloc'd / cudaMalloc'd
    any_of!(
        lower,
        [
            "host buffer",
            "cpu buffer",
            "cpu memory",
            "system memory",
            " malloc'd",
            " malloced",
            "from malloc",
            "with malloc",
            "posix_memalign",
        ]
    )
}

/// Memory kind from the words on the line (any casing): device for dmabuf, FI_HMEM/iface=cuda|rocr|ze,
/// `(cuda)`, "GPU MR/buffer/memory", `memoryType=2`, `CUDA_MEM_DEVICE`, cuMem/VMM/expandable_segments,
/// VRAM, aws-ofi-nccl's `type = 2` (NCCL_PTR_CUDA); host for `(host)`, `type = 1`, FI_HMEM_SYSTEM,
/// `memoryType=0`. Host words win.
pub fn mem_hint(s: &str) -> Option<MemKind> {
    let (not, host) = (NOT_MEM.len() as u32, (NOT_MEM.len() + HOST_MEM.len()) as u32);
    let mut hits: Vec<(u32, std::ops::Range<usize>)> = Vec::new();
    crate::scan::each(s, crate::scan::Set::Mem, |i, r| hits.push((i, r)));
    if hits.is_empty() {
        return None;
    }
    let masked =
        |r: &std::ops::Range<usize>| hits.iter().any(|(p, n)| *p < not && n.start <= r.start && r.end <= n.end);
    let kind = |lo: u32, hi: u32| hits.iter().any(|(p, r)| (lo..hi).contains(p) && !masked(r));
    if kind(not, host) {
        return Some(MemKind::HostAnon);
    }
    if kind(host, u32::MAX) {
        return Some(MemKind::Device);
    }
    None
}

const LIBS: &[(&str, Lib)] = &[
    ("mscclpp", Lib::Mscclpp),
    ("nvshmem", Lib::Nvshmem),
    ("deep_ep", Lib::Deepep),
    ("deepep", Lib::Deepep),
    ("mooncake", Lib::Mooncake),
    ("transfer_engine", Lib::Mooncake),
    ("rdma_context.cpp", Lib::Mooncake),
    ("rdma_transport.cpp", Lib::Mooncake),
    ("efa_context.cpp", Lib::Mooncake),
    ("nixl", Lib::Nixl),
    ("net/ofi", Lib::Nccl),
    ("ncclsystemerror", Lib::Nccl),
    ("rccl", Lib::Rccl),
    ("mccl", Lib::Mccl),
    ("nccl", Lib::Nccl),
    ("libfabric", Lib::Libfabric),
    ("fi_mr_", Lib::Libfabric),
    ("cxil_map", Lib::Libfabric),
    ("cxip_", Lib::Libfabric),
    ("ofi error", Lib::Libfabric),
    ("gdrdrv", Lib::Gdrcopy),
    ("gdr_pin", Lib::Gdrcopy),
    ("gdrcopy", Lib::Gdrcopy),
    ("nvidia-fs", Lib::Kernel),
    ("mori", Lib::Mori),
    ("ucx", Lib::Ucx),
    ("ompi", Lib::Ompi),
    ("open mpi", Lib::Ompi),
];

/// The words of [`lib_hint`], for the line scanner ([`crate::scan`]).
pub fn lib_words() -> Vec<String> {
    LIBS.iter().map(|p| p.0.to_string()).collect()
}

/// The library a line comes from, by its names and source files (any casing): the first of the
/// list that occurs anywhere.
pub fn lib_hint(s: &str) -> Option<Lib> {
    let mut first: Option<u32> = None;
    crate::scan::each(s, crate::scan::Set::Lib, |i, _| first = Some(first.map_or(i, |f| f.min(i))));
    first.map(|i| LIBS[i as usize].1)
}

/// Keys of the arguments [`recognise`] reads, each list in order of preference.
const ADDR_KEYS: &[&str] = &["addr=", "addr:", "address=", "address ", "buf ", "memory "];
const LEN_KEYS: &[&str] = &["length=", "length:", "length ", "len=", "size=", "size:", "size = "];
const ACCESS_KEYS: &[&str] = &["access=", "access:", "access_flags = ", "accessflag:"];
const IOVA_KEYS: &[&str] = &["iova=", "iova:", "hca_va="];

/// A registration's arguments as a line prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Args {
    pub addr: Option<u64>,
    pub length: Option<u64>,
    pub access: Option<u32>,
    /// The iova printed beside the address has another offset within a 4 KiB page: uverbs'
    /// ib_uverbs_reg_mr refuses `(start ^ hca_va) & ~PAGE_MASK` with EINVAL (the low 12 bits differ on
    /// every page size; offsets that agree there but not within a 64 KiB page are not read).
    pub iova_misaligned: bool,
}

fn args(lower: &str) -> Args {
    static ADDR: std::sync::LazyLock<Finders> = std::sync::LazyLock::new(|| finders(ADDR_KEYS));
    static LEN: std::sync::LazyLock<Finders> = std::sync::LazyLock::new(|| finders(LEN_KEYS));
    static ACCESS: std::sync::LazyLock<Finders> = std::sync::LazyLock::new(|| finders(ACCESS_KEYS));
    static IOVA: std::sync::LazyLock<Finders> = std::sync::LazyLock::new(|| finders(IOVA_KEYS));
    let addr = arg_num(lower, &ADDR).filter(|a| *a > 4096);
    let iova = if has!(lower, "iova") || has!(lower, "hca_va") { arg_num(lower, &IOVA) } else { None };
    Args {
        addr,
        length: arg_num(lower, &LEN),
        access: arg_num(lower, &ACCESS).map(|a| a as u32),
        iova_misaligned: matches!((addr, iova), (Some(a), Some(i)) if (a ^ i) & 0xfff != 0),
    }
}

type Finders = Vec<memchr::memmem::Finder<'static>>;

fn finders(keys: &'static [&'static str]) -> Finders {
    keys.iter().map(|k| memchr::memmem::Finder::new(k.as_bytes())).collect()
}

/// The number after the first key of `keys` that has one, in hex (`0x`) or decimal.
fn arg_num(l: &str, keys: &Finders) -> Option<u64> {
    for k in keys {
        if let Some(i) = k.find(l.as_bytes()) {
            let v = l[i + k.needle().len()..].trim_start_matches([' ', '=', ':']);
            let v = &v[..v.bytes().take_while(|c| c.is_ascii_hexdigit() || *c == b'x').count()];
            if let Some(n) = parse_hex(v).or_else(|| v.parse().ok()) {
                return Some(n);
            }
        }
    }
    None
}

/// ENOMEM in words other than its strerror text ("fails with out of memory"), on a line that
/// names a registration.
fn errno_in_words(lower: &str) -> Option<i32> {
    (has!(lower, "out of memory") || has!(lower, "not enough memory")).then_some(errno::ENOMEM)
}

/// What a line says of a registration.
enum Read {
    /// It failed.
    Failure(Box<RegEv>),
    /// It is named, with no failure (a source line that calls it, prose about it): the call.
    Named(String),
    Nothing,
}

/// A registration failure on `body`, or None.
pub fn recognise(body: &str) -> Option<RegEv> {
    match read(body) {
        Read::Failure(ev) => Some(*ev),
        _ => None,
    }
}

/// A line of source code (a program's, pasted into a report), not its output: what it prints is
/// a format (`printf(`, `perror(`, `strerror(`, `<< "`, a `\n"` in a literal).
pub fn source_code(lower: &str) -> bool {
    any_of!(lower, ["printf(", "perror(", "strerror(", "<< \"", "\\n\""])
}

fn read(body: &str) -> Read {
    // prose in CJK scripts is read sentence by sentence by the prose parser
    if body.len() > 4096 || !body.is_ascii() && body.chars().any(|c| c >= '\u{2e80}') {
        return Read::Nothing;
    }
    let lower = body.to_ascii_lowercase();
    if !mentions_lower(&lower) {
        return Read::Nothing;
    }
    let call = call_in_lower(&lower);
    // a failure word, or an errno named in words ("got an errno `EFAULT`", "returns Bad address"):
    // reports quote the errno of a failed call without saying "failed"
    let errno_told = errno::named(body).is_some()
        || errno_in_words(&lower).is_some()
        || has!(&lower, "errno") && errno::find(body).is_some()
        || err_number(&lower);
    if !(has_failure_word(&lower) || errno_told) || source_code(&lower) {
        return Read::Named(call);
    }
    // a count of failures ("0 failures") is a summary, not a failure
    if has!(&lower, " failures") && !has!(&lower, "failed") {
        return Read::Nothing;
    }
    // prose that names a failure without reporting one (a question whether it could fail, the
    // documentation of the return value, a changelog's fix): what the other sentences say
    if let Some(told) = super::prose::asserted(body) {
        return match read(&told) {
            Read::Failure(ev) => Read::Failure(ev),
            _ => Read::Named(call),
        };
    }
    let mut mem = mem_hint(body);
    // a kind of host memory named in words (a DMA-BUF registration's memory is the GPU's)
    if mem != Some(MemKind::Device) || !call.contains("dmabuf") {
        mem = mem_in_words(&lower).or(mem);
    }
    if mem.is_none() && host_in_words(&lower) {
        mem = Some(MemKind::HostAnon);
    }
    if mem.is_none() && matches!(call.as_str(), "gdr_pin_buffer" | "nvidia_p2p_get_pages" | "nv_p2p_get_pages") {
        mem = Some(MemKind::Device);
    }
    let a = args(&lower);
    let errno = errno::find(body).or_else(|| errno_in_words(&lower));
    Read::Failure(Box::new(RegEv {
        lib: lib_hint(body),
        call,
        ok: false,
        errno,
        mem,
        addr: a.addr,
        length: a.length,
        access: a.access,
        iova_misaligned: a.iova_misaligned && matches!(errno, Some(errno::EINVAL) | None),
        ..Default::default()
    }))
}

/// `err N` / `err=N` / `err: N` with a known errno after the word `err`: a logger's shorthand for the
/// failure (GPFS's `VERBS RDMA ibv_reg_mr err 12 device mlx4_0 ...`), not `stderr` or an `err 0`.
fn err_number(lower: &str) -> bool {
    if !has!(lower, "err") {
        return false;
    }
    lower.match_indices("err").any(|(i, _)| {
        let word = i == 0 || !lower.as_bytes()[i - 1].is_ascii_alphanumeric() && lower.as_bytes()[i - 1] != b'_';
        let rest = &lower[i + 3..];
        let n = rest.trim_start_matches([' ', ':', '=']);
        word && n.len() < rest.len() && errno::after_key("err", rest).is_some()
    })
}

/// Lines that set the file's memory-kind or library context without being failures themselves.
pub fn note_context(body: &str, ctx: &mut FileCtx) {
    if let Some(m) = mem_hint(body) {
        ctx.device_hint = Some(m == MemKind::Device);
    }
    if let Some(l) = lib_hint(body) {
        if ctx.lib_hint.is_none() || !matches!(l, Lib::Ucx | Lib::Ompi | Lib::Libfabric) {
            ctx.lib_hint = Some(l);
        }
    }
}

/// Emits a held failure (no errno on its own line, none on the next).
pub fn flush(ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) {
    if let Some(ev) = ctx.gen_pending.take() {
        emit(Event::Reg(ev));
    }
}

/// Tries `body` as a registration failure. Layers of one failure printed on consecutive lines (a wrapper's
/// "registration failed" above the library's line with the errno) count once.
pub fn parse(f: &Frame, ctx: &mut FileCtx, lineno: u64, line: &str, emit: &mut dyn FnMut(Event)) -> bool {
    let read = match read(f.body) {
        Read::Failure(ev) => Some(*ev),
        Read::Named(call) => {
            // (a line that names the call without its arguments — the source line of a traceback
            // that raised it — keeps the arguments logged before it)
            let a = args(&f.body.to_ascii_lowercase());
            if a.addr.is_some() {
                ctx.reg_args = Some((lineno, call.clone(), a));
            }
            ctx.reg_named = Some((lineno, call));
            None
        }
        Read::Nothing => told_after(f, ctx, lineno),
    };
    let Some(mut ev) = read else {
        // a help text's `Error:` line below its headline, within the block (before its closing rule)
        if let (Some(p), Some(end)) = (ctx.gen_pending.as_mut(), ctx.gen_pending_block) {
            let b = f.body.trim();
            if lineno <= end && p.errno.is_none() && !b.starts_with("---") {
                // Open MPI v1.5's openib [mem-reg-fail] prints `Errno says:`, and its call shifts the
                // table by one field so the strerror lands on `Function:` (btl_openib_component.c)
                let told = b.strip_prefix("Error:").or_else(|| b.strip_prefix("Errno says:")).map(errno::find);
                match told.or_else(|| b.strip_prefix("Function:").and_then(errno::find).map(Some)) {
                    Some(n) => p.errno = n,
                    None => return false,
                }
            }
            ctx.gen_pending_block = None;
            flush(ctx, emit);
            return false;
        }
        // the errno on the line after the failure
        if let Some(p) = ctx.gen_pending.as_mut() {
            if p.errno.is_none() && !ctx.gen_pending_final {
                p.errno = errno::find(f.body);
            }
        }
        flush(ctx, emit);
        return false;
    };
    ev.host = f.host.map(String::from).or_else(|| ctx.host.clone());
    ev.pid = f.pid;
    ev.rank = f.rank;
    ev.lib = ev.lib.or(ctx.lib_hint);
    if ev.mem.is_none() {
        ev.mem = ctx.device_hint.map(|d| if d { MemKind::Device } else { MemKind::HostAnon });
    }
    ev.evid = Some((lineno, line.to_string()));
    // the call's arguments printed on the line just before its failure (a program that logs the
    // call, then its error): the address, length, access and the iova's page offset
    if let Some((at, named, a)) = ctx.reg_args.take() {
        let same = named == ev.call || ev.call == "register memory";
        if lineno <= at + ARGS_BEFORE && same && ev.addr.is_none() {
            ev.addr = a.addr;
            ev.length = ev.length.or(a.length);
            ev.access = ev.access.or(a.access);
            ev.iova_misaligned |= a.iova_misaligned && matches!(ev.errno, Some(errno::EINVAL) | None);
        }
    }
    ctx.reg_named = None;
    hold(ev, ctx, lineno, f.body, emit);
    ctx.gen_pending_final = false;
    true
}

/// How many lines before its failure a call's logged arguments may be (a Python traceback's frames
/// come between a script's log of the call and the exception that reports its failure).
const ARGS_BEFORE: u64 = 6;

/// How many lines after a registration is named (a code block that calls it) a sentence may say
/// how "it" failed.
const TOLD_AFTER: u64 = 12;

/// A sentence of prose, shortly after a line that named a registration without a failure (the
/// call in a code block, a sentence about it), that tells how it failed without naming it again:
/// "This fails with EFAULT when buf is GPU memory", "With VRAM I always get `Bad address`"
/// ([`super::prose::told_failure`]). The failure is the named call's.
fn told_after(f: &Frame, ctx: &mut FileCtx, lineno: u64) -> Option<RegEv> {
    let (at, call) = ctx.reg_named.as_ref()?;
    if lineno > at + TOLD_AFTER || f.host.is_some() || f.pid.is_some() || f.rank.is_some() {
        return None;
    }
    let told = super::prose::told_failure(f.body)?;
    let lower = told.to_ascii_lowercase();
    let errno = errno::find(&told).or_else(|| errno_in_words(&lower));
    let mut mem = mem_in_words(&lower).or_else(|| mem_hint(&told));
    if mem.is_none() && host_in_words(&lower) {
        mem = Some(MemKind::HostAnon);
    }
    if call.contains("dmabuf") {
        mem = Some(MemKind::Device);
    }
    let call = call.clone();
    Some(RegEv { lib: lib_hint(&told), call, ok: false, errno, mem, ..Default::default() })
}

/// Holds a failure back one line for its errno and for the layers of the same failure printed next to
/// it (a wrapper's "registration failed" above or below the library's line), which count once. A
/// line (`body`, without its frame) that repeats one of the held failure's layers word for word is
/// the next failure (a retry loop printing each attempt), not another layer of this one; an
/// exception that carries the line (`RuntimeError: <the line>`) is a layer of its own.
pub fn hold(mut ev: RegEv, ctx: &mut FileCtx, lineno: u64, body: &str, emit: &mut dyn FnMut(Event)) {
    use std::hash::BuildHasher;
    let sig = rustc_hash::FxBuildHasher.hash_one((ctx.carried, body.trim()));
    if let Some(p) = ctx.gen_pending.take() {
        let same = lineno <= p.evid.as_ref().map_or(0, |e| e.0) + 2 + ctx.gen_pending_slack
            && (p.errno.is_none() || ev.errno.is_none() || p.errno == ev.errno)
            && !matches!((p.addr, ev.addr), (Some(a), Some(b)) if a != b)
            && !ctx.gen_layers.contains(&sig);
        if same {
            // one failure seen through two layers: keep the most specific of each field
            ev.errno = ev.errno.or(p.errno);
            ev.mem = ev.mem.or(p.mem);
            ev.lib = p.lib.or(ev.lib);
            ev.addr = ev.addr.or(p.addr);
            ev.length = ev.length.or(p.length);
            ev.access = ev.access.or(p.access);
            ev.iova_misaligned |= p.iova_misaligned;
            // an upper layer printed right after its library's line is the same process's (the
            // application's own line names none; the engine's glog line does)
            ev.pid = ev.pid.or(p.pid);
            ev.host = ev.host.or(p.host);
            ev.rank = ev.rank.or(p.rank);
            if ev.call == "register memory" {
                ev.call = p.call;
            }
        } else {
            emit(Event::Reg(p));
            ctx.gen_layers.clear();
        }
    } else {
        ctx.gen_layers.clear();
    }
    if ctx.gen_layers.len() < 8 {
        ctx.gen_layers.push(sig);
    }
    ctx.gen_pending = Some(ev);
    ctx.gen_pending_slack = 0;
    ctx.gen_pending_block = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way of naming a registration the issue lists, with a failure word.
    #[test]
    fn names() {
        for s in [
            "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
            "ibv_exp_reg_mr(address=0xf154610, length=6544, access=0xf) failed: Resource temporarily unavailable",
            "ibv_reg_dmabuf_mr failed with error Operation not supported",
            "fi_mr_reg failed, ret is:-12, Cannot allocate memory",
            "fi_mr_regattr failed for GPU memory 0x726d08000000 (device 3): Operation not supported",
            "libfabric:1:efa:mr:efa_mr_reg_impl():850<warn> Unable to register MR: Cannot allocate memory",
            "cxil_map() failed: -22",
            "infiniband efa_0: Failed to process command REG_MR (opcode 7) comp_status 1 err -12",
            "Failed to register memory 0x7f105035d000: Input/output error [5]",
            "RegisterRdmaMemoryRegion failed! addr:0x..., size:943718400, accessFlag:15, errno:22 (Invalid argument)",
            "self.agent.registerMem(reg_descs, handle_list) failed",
            "Couldn't register GPU MR",
            "error in gdr_pin_buffer with code=22",
            "nvidia_p2p_get_pages(va=7ff512200000 len=65536) failed [ret = -22]",
            "Error ret -22 invoking nvidia_p2p_get_pages",
            "Memory Region registration failed",
            "registering memory region failed: Bad address",
            // other word orders and verbs: pinning the pages, an MR created or allocated, -1 returned
            "register_memory() returned -1",
            "rdma register failed",
            "MR allocation failed",
            "RegMem failed",
            "could not pin memory",
            "Unable to pin user pages",
            // a logger's `err N` after the call (GPFS)
            "VERBS RDMA ibv_reg_mr err 12 device mlx4_0 addr 0x4000000000 len 8388608 KB. Try increasing device MTTs.",
        ] {
            let ev = recognise(s).unwrap_or_else(|| panic!("not recognised: {s}"));
            assert!(!ev.ok, "{s}");
        }
        for s in [
            "ibv_dereg_mr failed: Invalid argument",
            "registered memory 0x7f56f0f20ba0..0x7f56f12750e0 on mlx5_0",
            "Registered memory of size 75497472 for ibv pd",
            "MRSHIM INFO summary: 3 calls (ibv_reg_mr 3), 0 failures, 0 probes",
            "ibv_reg_mr returned an MR",
            // pinned threads and cudaMallocHost's pinned memory are no registration
            "failed to pin threads to cores",
            "failed to allocate pinned memory",
            // no errno after `err`: a stream's name, a count
            "ibv_reg_mr output redirected to stderr 12 times",
            "ibv_reg_mr calls: 4, err 0",
        ] {
            assert!(recognise(s).is_none(), "{s}");
        }
    }

    /// Memory under other nouns (chunks, blocks, segments, pages, windows, pools, TIDs, keys) in both
    /// word orders counts on a line in an RDMA context; the same words for services, devices,
    /// handlers, clients or the SM do not, and neither do they without RDMA words on the line.
    #[test]
    fn memory_nouns_in_an_rdma_context() {
        for s in [
            // QEMU's chunk and RAM-block registrations, GASNet's segment, MPI windows, buffer pools
            "RDMA ERROR: Failed to register chunk!: Bad address",
            "rdma migration: failed to register the local dest ram block",
            "ibv: unable to pin the segment (errno=12)",
            "[rdma] Couldn't register buffer pool: Cannot allocate memory",
            "RDMA: error registering block 3: Bad address",
            "ib: could not lock pages for the MR: Cannot allocate memory",
            // the other word order
            "rdma window registration failed: Invalid argument",
            "hfi1_0: TID pinning failed (-14)",
            "rkey registration failed on mlx5_0",
        ] {
            let ev = recognise(s).unwrap_or_else(|| panic!("not recognised: {s}"));
            assert!(!ev.ok, "{s}");
        }
        for s in [
            // RDMA words on the line, but not memory
            "rdma: failed to register service",
            "mlx5_core: failed to register netdev",
            "ib_srp: failed to register block device",
            "RDMA: failed to register client",
            "ibv: failed to register with the SM",
            "rdma_cm: failed to register event handler",
            "rdma: failed to register pool handler",
            "ib_core: failed to register device mlx5_0",
            // memory nouns without RDMA words (a database's chunks, a tiering segment, CPU pinning,
            // a window class, a block device)
            "Failed to register chunk in DB",
            "Failed to register segment with tiering",
            "cores: failed to pin tid 12 to core 3",
            "Window Registration Failed!",
            "Failed to register block device: -16",
        ] {
            assert!(recognise(s).is_none(), "{s}");
        }
    }

    /// Reports quote a failed call's errno without a failure word: the errno named in words (its
    /// symbolic name or strerror text) makes the line a failure; a number alone does not.
    #[test]
    fn an_errno_named_in_words_is_a_failure() {
        for (s, e) in [
            ("I try to register `buf` using `ibv_reg_mr`, but got an errno `EFAULT`.", 14),
            ("ibv_reg_mr returns EINVAL for this buffer", 22),
            ("registering the memory region gives Cannot allocate memory", 12),
        ] {
            let ev = recognise(s).unwrap_or_else(|| panic!("not recognised: {s}"));
            assert_eq!(ev.errno, Some(e), "{s}");
        }
        for s in ["ibv_reg_mr(pd, buf, 4096, 0xf) returned 0x55d0c0de10", "ibv_reg_mr with errno checking enabled"] {
            assert!(recognise(s).is_none(), "{s}");
        }
    }

    /// The call is the first of the list that occurs, wherever it is on the line (the longer
    /// name over its prefix, verbs over the libfabric call a wrapper names first).
    #[test]
    fn call_names_by_list_order() {
        assert_eq!(call_in("Call to ibv_reg_mr_iova2 failed"), "ibv_reg_mr_iova2");
        assert_eq!(call_in("fi_mr_reg -> IBV_REG_MR failed"), "ibv_reg_mr");
        assert_eq!(call_in("gdr_pin_buffer: nvidia_p2p_get_pages failed"), "gdr_pin_buffer");
        assert_eq!(call_in("ib_umem_get via nv_p2p_get_pages"), "nv_p2p_get_pages");
        assert_eq!(call_in("register dmabuf_mr failed"), "ibv_reg_dmabuf_mr");
        // a registration through DMA-BUF that does not name the verb (CTRAN's buffer-registration
        // line, torchcomms comms/ctran/backends/ib/CtranIb.cc; UCX's ucp_mm.c with its dmabuf fd)
        assert_eq!(
            call_in("CTRAN-IB: buffer registration failed: buf = 0x640000000, len = 4096, dmaBufSupport = true, useDmaBuf = true"),
            "ibv_reg_dmabuf_mr"
        );
        assert_eq!(
            call_in("failed to register address 0x7f00 (cuda) length 16384 dmabuf_fd 518 on md[7]=mlx5_7"),
            "ibv_reg_dmabuf_mr"
        );
        // supported, enabled or probed with fd -1 is not a registration through it
        assert_eq!(call_in("buffer registration failed: dmaBufSupport = true, useDmaBuf = false"), "register memory");
        assert_eq!(call_in("failed to register address 0x7f00 (cuda) dmabuf_fd -1 on md[7]"), "register memory");
        assert_eq!(call_in("register memory failed"), "register memory");
    }

    #[test]
    fn memory_kind_and_library() {
        let ev = recognise("register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 0. RC: -22, Error: Invalid argument").unwrap();
        assert_eq!((ev.mem, ev.lib, ev.errno), (Some(MemKind::Device), Some(Lib::Nccl), Some(22)));
        let ev = recognise(
            "NET/OFI Unable to register memory (type = 1) for device 0. RC: 12, Error: Cannot allocate memory",
        )
        .unwrap();
        assert_eq!((ev.mem, ev.errno), (Some(MemKind::HostAnon), Some(12)));
        for s in [
            "fi_mr_regattr iface=cuda failed: Bad address",
            "fi_mr_regattr FI_HMEM_ZE failed: -22",
            "register memory (rocm) failed: -22",
            "Couldn't register GPU MR",
            "register memory failed memoryType=2 errno 14",
            "register memory of type CUDA_MEM_DEVICE failed: Bad address",
            "cuMemCreate buffer: register memory failed: Bad address",
            "ibv_reg_dmabuf_mr failed: Operation not supported",
        ] {
            assert_eq!(recognise(s).and_then(|e| e.mem), Some(MemKind::Device), "{s}");
        }
        // an RDMA buffer, not a dma-buf (librdmacm's rping registers host memory)
        assert_eq!(recognise("rdma_buf reg_mr failed").map(|e| e.mem), Some(None));
        assert_eq!(
            recognise("rdma_context.cpp:198] Failed to register memory 0x2e1cbac200: Bad address [14]").unwrap().lib,
            Some(Lib::Mooncake)
        );
    }
}
