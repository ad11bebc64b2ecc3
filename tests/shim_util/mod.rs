//! Helpers shared by the tests/shim_*.rs integration tests: artifact paths, C programs compiled
//! at test time, running processes, reading records.
#![allow(dead_code, unused_imports)]

pub mod bounce_check;
pub mod pyverbs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub use mrshim_test_support::{
    cc, free_port, mrshim_bin, shim_lib, sim_gpu_lib_dir, sim_lib_dir, sim_runtime_lib_dir, target_dir, tmp,
};

pub fn src_c(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(name)
}

/// The fake versioned libibverbs and the C programs, built once per test binary.
pub struct Fake {
    pub dir: PathBuf,
}

impl Fake {
    pub fn lib_dir(&self) -> &Path {
        &self.dir
    }
    pub fn prog(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

pub fn fake() -> &'static Fake {
    static F: OnceLock<Fake> = OnceLock::new();
    F.get_or_init(|| {
        let dir = mrshim_test_support::own_dir("fake");
        let d = dir.to_str().unwrap();
        let lib = format!("{d}/libibverbs.so.1");
        let map = format!("-Wl,--version-script={}", src_c("fakeverbs.map").display());
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            &lib,
            "-Wl,-soname,libibverbs.so.1",
            &map,
            src_c("fakeverbs.c").to_str().unwrap(),
        ]);
        std::os::unix::fs::symlink("libibverbs.so.1", format!("{d}/libibverbs.so")).unwrap();
        let rpath = format!("-Wl,-rpath,{d}");
        let ldir = format!("-L{d}");
        cc(&[
            "-O1",
            "-o",
            &format!("{d}/fake_linked"),
            src_c("fake_linked.c").to_str().unwrap(),
            &ldir,
            "-libverbs",
            &rpath,
            "-lpthread",
        ]);
        cc(&["-O1", "-o", &format!("{d}/hostile"), src_c("hostile.c").to_str().unwrap(), &ldir, "-libverbs", &rpath]);
        cc(&["-O1", "-o", &format!("{d}/nccl_style"), src_c("nccl_style.c").to_str().unwrap(), "-ldl"]);
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &format!("{d}/libother.so"),
            src_c("other_preload.c").to_str().unwrap(),
            "-ldl",
        ]);
        cc(&["-shared", "-fPIC", "-o", &format!("{d}/libregpre.so"), src_c("reg_preload.c").to_str().unwrap(), "-ldl"]);
        let plugin = src_c("local_plugin.c");
        cc(&[
            "-shared",
            "-fPIC",
            "-DPLUGIN",
            "-o",
            &format!("{d}/liblocal_plugin.so"),
            plugin.to_str().unwrap(),
            &ldir,
            "-libverbs",
            &rpath,
            "-ldl",
        ]);
        cc(&["-O1", "-o", &format!("{d}/local_plugin"), plugin.to_str().unwrap(), "-ldl"]);
        Fake { dir }
    })
}

/// A command with a clean MRSHIM_* environment and the third-party defaults of [`pinned_env`].
pub fn cmd(prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(prog);
    for (k, _) in std::env::vars() {
        if k.starts_with("MRSHIM_")
            || k.starts_with("FAKE_")
            || k == "LD_PRELOAD"
            || k.ends_with("_RANK")
            || k == "RANK"
        {
            c.env_remove(k);
        }
    }
    c.envs(pinned_env());
    c
}

/// Which side of the machine-dependent defaults the tests run on: `MRSHIM_TEST_VARIANT=flipped`
/// (scripts/test's second pass over the stack tests) runs the fallback side of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Default,
    Flipped,
}

pub fn variant() -> Variant {
    match std::env::var("MRSHIM_TEST_VARIANT").as_deref() {
        Err(_) | Ok("" | "default") => Variant::Default,
        Ok("flipped") => Variant::Flipped,
        Ok(v) => panic!("MRSHIM_TEST_VARIANT={v:?}: accepted: default, flipped"),
    }
}

/// Whether the stack programs (UCX) ask for relaxed ordering in this run: the tests whose point
/// is a device refusing it inject the fault by another trait when they do not.
pub fn ucx_requests_relaxed_ordering() -> bool {
    variant() == Variant::Default
}

/// Third-party defaults that depend on the machine, set for every program a test starts so that
/// a test means the same on every machine of this kind whatever its CPU, core count, hugepages:
/// - UCX's `UCX_IB_PCI_RELAXED_ORDERING` default (`auto`/`try`) asks for relaxed ordering only
///   on the CPU models UCX prefers it for (AMD Naples/Rome/Milan/Genoa, Fujitsu ARM): `on`, and
///   `off` in the flipped pass;
/// - UCX allocates its buffers from SysV hugetlb pages or transparent huge pages first where
///   the machine has them (`huge,thp` in `UCX_*_ALLOC`): plain mmap/heap memory always;
/// - UCX warns about any variable no component it loaded reads (a test asserts no WARN);
/// - the bounce layer's write tracking (userfaultfd write-protect, kernel >= 6.7): the product
///   default, and off in the flipped pass (whole-region compares, the fallback of a kernel
///   without it).
pub fn pinned_env() -> Vec<(&'static str, &'static str)> {
    let flipped = variant() == Variant::Flipped;
    let mut env = vec![
        ("UCX_IB_PCI_RELAXED_ORDERING", if flipped { "off" } else { "on" }),
        ("UCX_WARN_UNUSED_ENV_VARS", "n"),
        ("UCX_ALLOC_PRIO", "md:sysv,md:posix,md:*,mmap,heap"),
        ("UCX_RC_VERBS_ALLOC", "md,mmap,heap"),
        ("UCX_UD_VERBS_ALLOC", "md,mmap,heap"),
        ("UCX_SELF_ALLOC", "md,mmap,heap"),
        ("UCX_TCP_ALLOC", "md,mmap,heap"),
        ("UCX_SYSV_HUGETLB_MODE", "n"),
        ("UCX_POSIX_HUGETLB_MODE", "n"),
    ];
    if flipped {
        env.push(("MRSHIM_BOUNCE_TRACK", "off"));
    }
    env
}

/// The simulator fault that makes the device refuse every registration the UCX-based stacks
/// make while it accepts the bounce layer's shadow (registered without relaxed ordering and
/// without remote atomics): relaxed ordering where UCX asks for it, remote atomics otherwise.
pub fn refuse_every_ucx_registration() -> &'static str {
    if ucx_requests_relaxed_ordering() {
        "reg:EFAULT:relaxed"
    } else {
        "reg:EFAULT:access=0x8"
    }
}

/// `cmd` on the fake library with the shim preloaded.
pub fn fake_cmd(prog: &str) -> Command {
    let f = fake();
    let mut c = cmd(f.prog(prog));
    c.env("LD_LIBRARY_PATH", f.lib_dir()).env("LD_PRELOAD", shim_lib());
    c
}

pub fn run(c: &mut Command) -> Output {
    c.output().expect("spawn")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The registration entry points (name@version) NCCL's net_ib looks up with `dlvsym`.
pub const NCCL_REG_SYMS: [&str; 4] = [
    "ibv_reg_mr@IBVERBS_1.1",
    "ibv_reg_mr_iova2@IBVERBS_1.8",
    "ibv_reg_dmabuf_mr@IBVERBS_1.12",
    "ibv_dereg_mr@IBVERBS_1.1",
];

/// tests/c/nccl_style prints where each `dlvsym` lookup landed: every one of `syms` must have
/// landed in libmrshim.so's wrappers.
pub fn assert_wrapped(out: &str, syms: &[&str]) {
    for f in syms {
        assert!(out.contains(&format!("{f} from libmrshim.so\n")), "{f}: {out}");
    }
}

/// Every line of a log, parsed (panics on a line that is not a record).
/// The records of one log. Every line the shim wrote in any test must also validate against the
/// JSON Schema shipped in docs/ (generated from crates/record), so the schema users get is checked
/// against real output, retries, refusals and summaries included.
pub fn records(p: &Path) -> Vec<mrshim_record::Reg> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(text.ends_with('\n'), "log ends with a complete line");
    text.lines()
        .map(|l| {
            let value: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            let errors: Vec<String> = record_schema().iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "docs/record.schema.json rejects {l}: {errors:?}");
            serde_json::from_value(value).unwrap_or_else(|e| panic!("{l}: {e}"))
        })
        .collect()
}

fn record_schema() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/record.schema.json");
        let schema = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        jsonschema::validator_for(&schema).unwrap()
    })
}

pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|r| r.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    v.sort();
    v
}

pub fn only_file(dir: &Path) -> PathBuf {
    let v = files(dir);
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

pub fn host() -> String {
    let mut b = [0u8; 256];
    // SAFETY: b is writable for its length minus the terminating NUL we keep.
    assert_eq!(unsafe { libc::gethostname(b.as_mut_ptr().cast(), 255) }, 0);
    let end = b.iter().position(|&c| c == 0).unwrap();
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Fails the test unless `prog` is on PATH (scripts/install-deps installs `pkg`).
pub fn require(prog: &str, pkg: &str) {
    let found = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()));
    assert!(found, "{prog} not installed (scripts/install-deps installs {pkg})");
}

/// A simulated fabric private to one test (its own MRSHIM_SIM_RUNDIR).
pub struct SimWorld {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    /// LD_LIBRARY_PATH: the simulated NIC, and with `gpu` the simulated GPU too.
    pub lib_dir: &'static Path,
}

impl SimWorld {
    pub fn new(name: &str) -> SimWorld {
        let dir = tmp(name);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        SimWorld { dir, env: vec![], lib_dir: sim_lib_dir() }
    }
    /// A world with the simulated GPU runtime (libcuda.so.1) next to the simulated NIC.
    pub fn gpu(name: &str) -> SimWorld {
        SimWorld { lib_dir: sim_gpu_lib_dir(), ..SimWorld::new(name) }
    }
    pub fn with(mut self, k: &str, v: impl Into<String>) -> SimWorld {
        self.env.push((k.into(), v.into()));
        self
    }
    /// `prog` under timeout, on the simulator, with the shim preloaded.
    pub fn cmd(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = cmd("timeout");
        c.args(["-k", "5", "120"]).arg(prog);
        c.env("LD_LIBRARY_PATH", self.lib_dir)
            .env("MRSHIM_SIM_RUNDIR", self.dir.join("run"))
            .env("LD_PRELOAD", shim_lib());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }
}

/// Server + client of a perftest-style tool (`-p PORT`, client gets the server address last).
/// `per_side` lets each side have its own env (e.g. its own simulator log).
pub fn server_client(
    w: &SimWorld,
    prog: &str,
    args: &[&str],
    server_env: &[(&str, String)],
    client_env: &[(&str, String)],
) -> (Output, Output) {
    let side = |env: &[(&str, String)]| {
        let mut c = w.cmd(prog);
        c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        c
    };
    mrshim_test_support::server_client(side(server_env), || side(client_env), free_port())
}

/// The simulator's own log (MRSHIM_SIM_LOG): what the device really received.
pub fn sim_log(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Every registration the device saw has exactly one shim record with the same arguments and keys
/// (for a retry, what the shim used in place of the request: `used_*`).
pub fn assert_records_match_device(recs: &[mrshim_record::Reg], dev: &[serde_json::Value], who: &str) {
    assert_registrations_match_device(recs, dev, who);
    let regs = recs.iter().filter(|r| r.kind == Some(mrshim_record::Kind::Reg));
    let deregs = recs.iter().filter(|r| r.kind == Some(mrshim_record::Kind::Dereg)).count();
    assert_eq!(deregs, regs.filter(|r| r.result == "ok").count(), "{who}: every MR deregistered");
    assert!(recs
        .iter()
        .filter(|r| r.kind == Some(mrshim_record::Kind::Dereg))
        .all(|r| r.reg_seq.is_some() && r.result == "ok"));
    let s = recs.last().unwrap().summary.as_ref().expect("summary last");
    assert_eq!(s.registered_bytes, 0);
    assert_eq!(s.records_lost, 0);
}

/// The registrations of [`assert_records_match_device`] alone: for a process killed before it
/// could deregister and exit (a program's own hang, cut short by the test's timeout).
pub fn assert_registrations_match_device(recs: &[mrshim_record::Reg], dev: &[serde_json::Value], who: &str) {
    let mut regs: Vec<&mrshim_record::Reg> = recs.iter().filter(|r| r.kind == Some(mrshim_record::Kind::Reg)).collect();
    assert!(!dev.is_empty(), "{who}: the device saw no registration");
    assert_eq!(regs.len(), dev.len(), "{who}: one record per registration");
    let addr = |r: &mrshim_record::Reg| r.used_addr.clone().or_else(|| r.addr.clone());
    let length = |r: &mrshim_record::Reg| r.used_length.or(r.length);
    let access = |r: &mrshim_record::Reg| r.used_access.or(r.access);
    // Threads registering at once (UCX's) may log in a different order on each side: compare
    // the two as sets, each sorted by what identifies a call.
    regs.sort_by_key(|r| (addr(r), length(r), access(r), r.lkey, r.errno));
    let mut dev: Vec<&serde_json::Value> = dev.iter().collect();
    dev.sort_by_key(|d| {
        let n = |k: &str| d[k].as_u64();
        (
            d["addr"].as_str().map(String::from),
            n("length"),
            n("access").map(|a| a as u32),
            n("lkey").map(|k| k as u32),
            d["errno"].as_i64().map(|e| e as i32),
        )
    });
    for (r, d) in regs.iter().zip(dev) {
        assert_eq!(addr(r).as_deref(), d["addr"].as_str(), "{who}: {d}");
        assert_eq!(length(r), d["length"].as_u64(), "{who}: {d}");
        assert_eq!(r.iova.as_deref(), d["iova"].as_str(), "{who}: {d}");
        assert_eq!(access(r).map(u64::from), d["access"].as_u64(), "{who}: {d}");
        assert_eq!(r.result, d["result"].as_str().unwrap(), "{who}: {d}");
        if r.result == "ok" {
            assert_eq!(r.lkey.map(u64::from), d["lkey"].as_u64(), "{who}: {d}");
        } else {
            assert_eq!(r.errno.map(i64::from), d["errno"].as_i64(), "{who}: {d}");
        }
        assert!(r.device.as_deref().is_some_and(|n| n.starts_with("mlx5_")), "{who}: {:?}", r.device);
        assert_eq!(r.addr_page_offset, Some(u64::from_str_radix(&r.addr.as_ref().unwrap()[2..], 16).unwrap() % 4096));
        assert!(r.duration_ns > 0);
    }
}

/// How a third-party program runs in the stack tests: on the simulator alone, with the shim
/// recording every registration, or with the shim and MRSHIM_RETRY=auto. Results must not
/// differ between the three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Shim,
    Retry,
}

pub const MODES: [Mode; 3] = [Mode::Plain, Mode::Shim, Mode::Retry];

/// `mrshim sim -- env [shim settings] PROG ARGS` under timeout: the program sees the simulated
/// devices in /sys/class and /dev; with the shim, its records go to `<dir>/logs/` (rank
/// `rank`) and the device's own log to `<dir>/sim-r<rank>.jsonl`.
pub fn stack_cmd(w: &SimWorld, mode: Mode, rank: u32, prog: &str, args: &[&str]) -> Command {
    stack_cmd_within(w, mode, rank, prog, args, 150)
}

/// [`stack_cmd`], killed after `secs` seconds.
pub fn stack_cmd_within(w: &SimWorld, mode: Mode, rank: u32, prog: &str, args: &[&str], secs: u32) -> Command {
    let mut c = cmd("timeout");
    c.args(["-k", "5", &secs.to_string()]).arg(mrshim_bin()).args(["sim", "--", "env"]);
    c.env("MRSHIM_SIM_RUNDIR", w.dir.join("run"));
    for (k, v) in &w.env {
        c.env(k, v);
    }
    if mode != Mode::Plain {
        c.arg(format!("LD_PRELOAD={}", shim_lib().display()));
        c.arg(format!("MRSHIM_LOG={}/", w.dir.join("logs").display()));
        c.arg(format!("MRSHIM_SIM_LOG={}", w.dir.join(format!("sim-r{rank}.jsonl")).display()));
        c.arg(format!("RANK={rank}"));
    }
    if mode == Mode::Retry {
        c.arg("MRSHIM_RETRY=auto");
    }
    c.arg(prog).args(args);
    c
}

/// A directory of its own for one mpirun's session files (`--mca orte_tmpdir_base`): Open MPI
/// 4.1's mpiruns started at the same moment race to create `/tmp/ompi.<host>.<uid>` and one
/// of them fails at start-up with "mkdir ... File exists".
pub fn ompi_session_dir(w: &SimWorld) -> String {
    let d = w.dir.join("ompi");
    std::fs::create_dir_all(&d).unwrap();
    d.to_str().unwrap().to_string()
}

/// With the shim: one log per process, and each one's registrations are exactly what the
/// simulated device saw in that process.
pub fn assert_stack_records(w: &SimWorld, mode: Mode, ranks: u32, who: &str) {
    assert_stack_records_killed(w, mode, ranks, &[], who)
}

/// [`assert_stack_records`] where the ranks in `killed` were killed by the test's timeout: their
/// registrations are checked, not their deregistrations and exit summary.
pub fn assert_stack_records_killed(w: &SimWorld, mode: Mode, ranks: u32, killed: &[u32], who: &str) {
    if mode == Mode::Plain {
        return;
    }
    let h = host();
    let fs = files(&w.dir.join("logs"));
    assert_eq!(fs.len(), ranks as usize, "{who} {mode:?}: {fs:?}");
    for rank in 0..ranks {
        let f = fs
            .iter()
            .find(|f| f.file_name().unwrap().to_str().unwrap().starts_with(&format!("mrshim-{h}-r{rank}-p")))
            .unwrap_or_else(|| panic!("{who} {mode:?}: no log of rank {rank}: {fs:?}"));
        let dev = sim_log(&w.dir.join(format!("sim-r{rank}.jsonl")));
        let who = format!("{who} {mode:?} rank {rank}");
        if killed.contains(&rank) {
            assert_registrations_match_device(&records(f), &dev, &who);
        } else {
            assert_records_match_device(&records(f), &dev, &who);
        }
    }
}

/// rping before rdma-core v59 exits 255 after a successful run when its main thread destroys the
/// CM event channel between the CM thread's handling of the last event (DISCONNECTED) and its
/// next rdma_get_cm_event (EBADF, as on a NIC): upstream's f3ae6534a ("rping: terminate CM event
/// thread before exiting", v59) fixed the program. Debian 12 ships v44; seen here in full runs. The
/// data lines are still checked by the caller.
pub fn rping_teardown_race(name: &str, o: &Output) -> bool {
    let err = stderr(o);
    name == "rping"
        && o.status.code() == Some(255)
        && err.contains("DISCONNECT EVENT...")
        && err.trim_end().ends_with("rdma_get_cm_event: Bad file descriptor")
}

/// libfabric 1.17's ofi_rxm (Debian 12) handles a peer's DISCONNECTED by closing the endpoint and
/// draining its CQ afterwards: a completion already in the CQ is dropped with the QP (libmlx5 cleans
/// a destroyed QP's CQEs, as the simulator does), so after a complete run fi_pingpong's client may
/// report `cq_readerr: Work Request Flushed Error`, or a side wait for a completion that is gone
/// until it is killed (exit 124). Upstream's 697688386 drains before the close (in no 1.17–1.21
/// release). The data lines are still checked by the caller; measured and traced in docs/perf.md.
pub fn rxm_teardown_race(name: &str, o: &Output) -> bool {
    name.starts_with("fi-rdm") && (stderr(o).contains("Work Request Flushed Error") || o.status.code() == Some(124))
}

/// tests/fixtures/regmr_table.txt, rows of `case|rxe0|sim|siw0|why`: what the kernel's rxe, the
/// simulator and the kernel's siw answer to each case of tests/c/regmr_table.c; `why` says, where
/// they differ, which provider-specific behaviour (mlx5, which the simulator models, vs rxe; siw's
/// own pinning) makes them differ.
pub fn regmr_fixture() -> Vec<[String; 5]> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/regmr_table.txt");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty() && !l.starts_with("case|"))
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, '|').collect();
            assert_eq!(f.len(), 5, "{}: {l}", p.display());
            [f[0], f[1], f[2], f[3], f[4]].map(|s| s.trim().to_string())
        })
        .collect()
}

/// Compares regmr_table's output (`case NAME RESULT` lines) with one column of the fixture
/// (`rxe0`, `sim` or `siw0`): every case printed and every row answered, all equal. Returns how many.
pub fn regmr_compare(got: &str, column: &str) -> Result<usize, String> {
    let col = match column {
        "rxe0" => 1,
        "sim" => 2,
        "siw0" => 3,
        _ => panic!("column {column}"),
    };
    let got: Vec<(&str, &str)> =
        got.lines().filter_map(|l| l.strip_prefix("case ")).filter_map(|l| l.split_once(' ')).collect();
    let rows = regmr_fixture();
    let mut bad = vec![];
    for (case, result) in &got {
        match rows.iter().find(|r| r[0] == *case) {
            None => bad.push(format!("{case}: {result}, not in the fixture")),
            Some(r) if r[col] != *result => bad.push(format!("{case}: {result}, the fixture says {}", r[col])),
            Some(_) => {}
        }
    }
    for r in &rows {
        if !got.iter().any(|(c, _)| *c == r[0]) {
            bad.push(format!("{}: not run", r[0]));
        }
    }
    if bad.is_empty() {
        Ok(got.len())
    } else {
        Err(format!("{column} differs from tests/fixtures/regmr_table.txt:\n{}", bad.join("\n")))
    }
}

/// Where scripts/install-deps keeps what it installs outside Debian's packages
/// (scripts/lib/tools.sh: `MRSHIM_TOOLS`, by default `$XDG_CACHE_HOME/mrshim-tools`).
pub fn tools_dir() -> PathBuf {
    std::env::var_os("MRSHIM_TOOLS").filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
            .join("mrshim-tools")
    })
}

/// The Python of the venv of the Python-wheel clients (scripts/lib/tools.sh: `MRSHIM_PYCLIENTS`):
/// NIXL's wheel, mpi4py, Mooncake's Transfer Engine, numpy.
pub fn pyclients_python() -> PathBuf {
    tools_dir().join("pyclients/bin/python3")
}
