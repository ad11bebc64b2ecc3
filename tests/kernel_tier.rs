//! The kernel tier: the Linux kernel's own RDMA stack (soft-RoCE `rxe0`, Debian 12's 6.1 kernel)
//! in a VM booted by scripts/rdma-vm. Real providers' answers, real data paths, real programs:
//! ibv_devinfo, ibv_rc_pingpong, ib_write_bw, rping, ucx_perftest, `mpirun --mca pml ucx`, the
//! NCCL-style all-reduce (examples/allreduce.rs: dlopen + dlvsym) — each plain and with the shim
//! recording, where every registration the kernel saw has exactly one record (read from kprobes
//! on the kernel's uverbs and rxe functions) — the all-reduce rescued from an injected failure
//! with MRSHIM_RETRY=auto, the registration table (tests/c/regmr_table.c) against
//! tests/fixtures/regmr_table.txt, rdma-core's pyverbs tests against tests/fixtures/pyverbs.txt
//! (plain and with the shim), the bounce checker's generated programs byte-exact through bounce
//! on rxe's own ops, `mrshim analyze` on records the shim wrote there, and `mrshim analyze` on the
//! stacks' own output without the shim (issue 29's generated truth on the real kernel): ib_write_bw,
//! ucx_perftest, rping, fi_pingpong, pyverbs and Mooncake refused for the memlock limit (uid 65534,
//! or root without CAP_IPC_LOCK, with a small `ulimit -l`), and pyverbs for REMOTE_WRITE without
//! LOCAL_WRITE, ON_DEMAND (no ODP in 6.1's rxe), dma-buf (none in rxe's provider) and a read-only
//! mapping registered writable — each cell's stdout and stderr alone, its cause first. A second
//! VM boots the same kernel's soft-iWARP (`siw0`, `--provider siw`): the registration table's
//! `siw0` column, `mrshim doctor`'s memlock verdict against the kernel's answer in both VMs (siw
//! honours RLIMIT_MEMLOCK for root with CAP_IPC_LOCK, rxe does not), and analyze on programs'
//! own output from the registrations only siw refuses.
//!
//! Every test here is `#[ignore]`d: `cargo test --workspace` never boots a VM. `scripts/test`
//! runs them (`cargo test --workspace --test kernel_tier -- --ignored`) after scripts/install-deps prepared
//! the kernel, and they fail — not skip — when the VM cannot boot. The first test boots the VM
//! once and runs this same binary's `guest_half` inside it, which runs every check and writes
//! one result line per check; each test then asserts its own line. docs/testbeds.md.

mod shim_util;
use shim_util::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const OUT_VAR: &str = "MRSHIM_KERNEL_TIER_OUT";
/// Runs only the checks whose names contain this (a developer's shortcut: the others fail with
/// "no result").
const ONLY_VAR: &str = "MRSHIM_KERNEL_TIER_ONLY";

/// The guests' results: check name → (passed, seconds, detail); the VMs that failed.
struct Tier {
    results: BTreeMap<String, (bool, f64, String)>,
    errors: Vec<String>,
}

fn tier() -> &'static Result<Tier, String> {
    static T: OnceLock<Result<Tier, String>> = OnceLock::new();
    T.get_or_init(|| {
        let out = tmp("kernel-tier");
        let bin = out.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        // C programs are compiled here: a compiler under TCG costs seconds per file.
        cc(&[
            "-O1",
            "-Wall",
            "-o",
            bin.join("regmr_table").to_str().unwrap(),
            src_c("regmr_table.c").to_str().unwrap(),
            "-libverbs",
        ]);
        cc(&[
            "-O1",
            "-Wall",
            "-o",
            bin.join("bounce_check").to_str().unwrap(),
            src_c("bounce_check.c").to_str().unwrap(),
            "-libverbs",
            "-lpthread",
        ]);
        let o = Command::new("mpicc")
            .args(["-O2", "-o"])
            .arg(bin.join("mpi_datacheck"))
            .arg(src_c("mpi_datacheck.c"))
            .output()
            .expect("mpicc (scripts/install-deps installs libopenmpi-dev)");
        assert!(o.status.success(), "mpicc: {}", stderr(&o));
        let allreduce = target_dir().join("examples/allreduce");
        if !allreduce.exists() {
            return Err(format!(
                "{} is not built: cargo build --example allreduce (scripts/test does)",
                allreduce.display()
            ));
        }
        // each provider's VM in turn; a VM that failed leaves its checks without a result, and
        // they fail with its error
        let mut results = BTreeMap::new();
        let errors: Vec<String> = ["rxe", "siw"].iter().filter_map(|p| boot(&out, p, &mut results).err()).collect();
        if results.is_empty() {
            return Err(errors.join("\n"));
        }
        for (name, (ok, s, _)) in &results {
            eprintln!("kernel tier: {} {name} {s:.1} s", if *ok { "PASS" } else { "FAIL" });
        }
        Ok(Tier { results, errors })
    })
}

/// One VM with `provider`'s device (scripts/rdma-vm --provider) running this binary's
/// `guest_half`, which writes `results-<provider>.txt`; its lines go into `results`.
fn boot(out: &Path, provider: &str, results: &mut BTreeMap<String, (bool, f64, String)>) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/rdma-vm");
    let t0 = Instant::now();
    let o = cmd(&script)
        .args(["--provider", provider, "--verbose", "--timeout", "900", "--rw"])
        .arg(out)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["guest_half", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(OUT_VAR, out)
        .env(ONLY_VAR, std::env::var(ONLY_VAR).unwrap_or_default())
        .output()
        .expect("spawn scripts/rdma-vm");
    let secs = t0.elapsed().as_secs_f64();
    let (so, se) = (stdout(&o), stderr(&o));
    std::fs::write(out.join(format!("vm-{provider}.stdout")), &so).unwrap();
    std::fs::write(out.join(format!("vm-{provider}.stderr")), &se).unwrap();
    let text = std::fs::read_to_string(out.join(format!("results-{provider}.txt"))).unwrap_or_default();
    let before = results.len();
    let mut failed = false;
    for l in text.lines() {
        let f: Vec<&str> = l.splitn(4, '|').collect();
        if f.len() == 4 {
            failed |= f[0] != "PASS";
            results.insert(f[1].to_string(), (f[0] == "PASS", f[2].parse().unwrap_or(0.0), f[3].replace("\\n", "\n")));
        }
    }
    eprintln!(
        "kernel tier: {provider} VM run {secs:.0} s ({}); results in {}",
        se.lines().last().unwrap_or(""),
        out.display()
    );
    if results.len() == before || !o.status.success() && !failed {
        return Err(format!(
            "scripts/rdma-vm --provider {provider} failed ({}) after {secs:.0} s:\n{so}\n{se}",
            o.status
        ));
    }
    Ok(())
}

fn assert_check(name: &str) {
    let t = tier().as_ref().unwrap_or_else(|e| panic!("the kernel tier did not run: {e}"));
    let (ok, _, detail) = t
        .results
        .get(name)
        .unwrap_or_else(|| panic!("no result for {name}: the guest stopped early\n{}", t.errors.join("\n")));
    assert!(ok, "{name}:\n{detail}");
}

macro_rules! kernel_checks {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        #[ignore = "boots a VM (scripts/rdma-vm); scripts/test runs it with --ignored"]
        fn $name() {
            assert_check(stringify!($name));
        }
    )*};
}

kernel_checks!(
    devinfo_shows_rxe0_port_active,
    rc_pingpong,
    rc_pingpong_shim,
    write_bw,
    write_bw_shim,
    rping,
    rping_shim,
    ucx_perftest_tag_bw,
    ucx_perftest_tag_bw_shim,
    mpirun_pml_ucx_datacheck,
    mpirun_pml_ucx_datacheck_shim,
    allreduce_dlvsym,
    allreduce_dlvsym_shim,
    allreduce_dlvsym_injected_failure_rescued,
    allreduce_dlvsym_memlock_as_non_root_rescued,
    allreduce_dlvsym_through_bounce_buffers,
    regmr_table_matches_the_kernel_column,
    doctor_says_memlock_is_not_enforced_on_rxe,
    pyverbs,
    pyverbs_shim,
    bounce_checker_programs_byte_exact_on_rxe,
    analyze_reads_the_kernels_answers,
    analyze_reads_the_stacks_own_output_on_rxe,
    devinfo_shows_siw0_port_active,
    regmr_table_matches_the_siw0_column,
    doctor_says_memlock_is_enforced_on_siw,
    analyze_reads_the_stacks_own_output_on_siw,
);

/// The half that runs inside the VM (scripts/rdma-vm passes this process's environment on,
/// with MRSHIM_KERNEL_TIER_OUT); on the host it has nothing to do.
#[test]
#[ignore = "the guest half of the kernel tier: runs inside scripts/rdma-vm"]
fn guest_half() {
    let Some(out) = std::env::var_os(OUT_VAR) else { return };
    for provider in ["rxe", "siw"] {
        if Path::new(&format!("/sys/class/infiniband/{provider}0")).exists() {
            guest::run(Path::new(&out), provider);
        }
    }
}

mod guest {
    use super::*;

    /// One check's working directory and the run's shared paths.
    pub struct Ctx {
        pub dir: PathBuf,
        pub bin: PathBuf,
    }

    impl Ctx {
        pub fn logs(&self) -> PathBuf {
            self.dir.join("logs")
        }
        /// `prog` with the shim preloaded and recording into logs/.
        pub fn shim(&self, c: &mut Command) {
            c.env("LD_PRELOAD", shim_lib()).env("MRSHIM_LOG", format!("{}/", self.logs().display()));
        }
    }

    type Check = fn(&Ctx) -> Result<String, String>;

    pub fn run(out: &Path, provider: &str) {
        let ktrace = ktrace::setup(provider);
        let rxe: &[(&str, Check)] = &[
            ("devinfo_shows_rxe0_port_active", |_| devinfo("rxe0", &["link_layer:\t\tEthernet"])),
            ("rc_pingpong", |c| rc_pingpong(c, false)),
            ("rc_pingpong_shim", |c| rc_pingpong(c, true)),
            ("write_bw", |c| write_bw(c, false)),
            ("write_bw_shim", |c| write_bw(c, true)),
            ("rping", |c| rping(c, false)),
            ("rping_shim", |c| rping(c, true)),
            ("ucx_perftest_tag_bw", |c| ucx(c, false)),
            ("ucx_perftest_tag_bw_shim", |c| ucx(c, true)),
            ("mpirun_pml_ucx_datacheck", |c| mpi(c, false)),
            ("mpirun_pml_ucx_datacheck_shim", |c| mpi(c, true)),
            ("allreduce_dlvsym", |c| allreduce(c, Allreduce::Plain)),
            ("allreduce_dlvsym_shim", |c| allreduce(c, Allreduce::Shim)),
            ("allreduce_dlvsym_injected_failure_rescued", |c| allreduce(c, Allreduce::Rescue)),
            ("allreduce_dlvsym_memlock_as_non_root_rescued", allreduce_memlock),
            ("allreduce_dlvsym_through_bounce_buffers", |c| allreduce(c, Allreduce::Bounce)),
            ("regmr_table_matches_the_kernel_column", |c| regmr_table_on(c, "rxe0")),
            ("doctor_says_memlock_is_not_enforced_on_rxe", doctor_memlock),
            ("pyverbs", |c| pyverbs(c, false)),
            ("pyverbs_shim", |c| pyverbs(c, true)),
            ("bounce_checker_programs_byte_exact_on_rxe", bounce_programs),
            ("analyze_reads_the_kernels_answers", analyze_kernel_answers),
            ("analyze_reads_the_stacks_own_output_on_rxe", output_matrix),
        ];
        let siw: &[(&str, Check)] = &[
            ("devinfo_shows_siw0_port_active", |_| devinfo("siw0", &["transport:\t\t\tiWARP (1)"])),
            ("regmr_table_matches_the_siw0_column", |c| regmr_table_on(c, "siw0")),
            ("doctor_says_memlock_is_enforced_on_siw", doctor_memlock),
            ("analyze_reads_the_stacks_own_output_on_siw", output_matrix_siw),
        ];
        let checks = if provider == "siw" { siw } else { rxe };
        let mut results = std::fs::File::create(out.join(format!("results-{provider}.txt"))).unwrap();
        let only = std::env::var(ONLY_VAR).unwrap_or_default();
        for (name, f) in checks.iter().filter(|(n, _)| n.contains(&only)) {
            let dir = out.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let ctx = Ctx { dir, bin: out.join("bin") };
            let t0 = Instant::now();
            let r = match &ktrace {
                Err(e) => Err(format!("kprobes: {e}")),
                Ok(()) => {
                    ktrace::clear();
                    std::panic::catch_unwind(|| f(&ctx)).unwrap_or_else(|p| {
                        Err(p
                            .downcast_ref::<String>()
                            .cloned()
                            .or(p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default())
                    })
                }
            };
            let (tag, detail) = match r {
                Ok(d) => ("PASS", d),
                Err(d) => ("FAIL", d),
            };
            use std::io::Write;
            writeln!(results, "{tag}|{name}|{:.1}|{}", t0.elapsed().as_secs_f64(), detail.replace('\n', "\\n"))
                .unwrap();
            eprintln!("kernel tier (guest): {tag} {name} {:.1} s", t0.elapsed().as_secs_f64());
        }
    }

    fn ok(o: &Output, who: &str) -> Result<(), String> {
        if o.status.success() {
            Ok(())
        } else {
            Err(format!("{who} ({}):\n{}\n{}", o.status, stdout(o), stderr(o)))
        }
    }

    /// `prog` under timeout, without cargo's LD_LIBRARY_PATH: target/debug holds the
    /// simulator's libibverbs.so, which a program that dlopen()s "libibverbs.so" would find first.
    fn timeout(secs: u32, prog: &str) -> Command {
        let mut c = cmd("timeout");
        c.args(["-k", "5", &secs.to_string(), prog]).env_remove("LD_LIBRARY_PATH");
        c
    }

    fn spawn(c: &mut Command) -> Child {
        c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")
    }

    /// Waits until something listens on TCP `port` (from /proc/net/tcp*), or `server` exited.
    fn wait_tcp(port: u16, server: &mut Child) {
        let hex = format!(":{port:04X} ");
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until && server.try_wait().unwrap().is_none() {
            let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
                std::fs::read_to_string(f).unwrap_or_default().lines().any(|l| {
                    l.split_whitespace().nth(1).is_some_and(|a| format!("{a} ").ends_with(&hex))
                        && l.split_whitespace().nth(3) == Some("0A")
                })
            });
            if listening {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until an rdma_cm id listens (the kernel lists it), or `server` exited.
    fn wait_cm_listen(server: &mut Child) {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until && server.try_wait().unwrap().is_none() {
            let o = cmd("rdma").args(["resource", "show", "cm_id"]).output().unwrap();
            if stdout(&o).contains("LISTEN") {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Server, then (once it listens) client; both must succeed.
    fn pair(server: &mut Command, client: &mut Command, port: u16) -> Result<(Output, Output), String> {
        let mut s = spawn(server);
        wait_tcp(port, &mut s);
        let c = client.output().unwrap();
        let s = s.wait_with_output().unwrap();
        ok(&c, "client")?;
        ok(&s, "server")?;
        Ok((s, c))
    }

    /// With the shim: records = the kernel's calls (ktrace), and nothing alarming on stderr.
    fn recorded(ctx: &Ctx, shim: bool, procs: usize) -> Result<String, String> {
        if !shim {
            return Ok(String::new());
        }
        let logs = files(&ctx.logs());
        if logs.len() != procs {
            return Err(format!("{} logs, expected {procs}: {logs:?}", logs.len()));
        }
        let recs: Vec<_> = logs.iter().flat_map(|f| records(f)).collect();
        ktrace::matches(&recs, &ktrace::take())
    }

    /// `ibv_devinfo -d DEV` shows every line of `want`: rxe0 a RoCE (Ethernet) port, siw0 an iWARP
    /// device (soft-iWARP over TCP on the guest's dummy interface), each PORT_ACTIVE.
    fn devinfo(dev: &str, want: &[&str]) -> Result<String, String> {
        let o = timeout(30, "ibv_devinfo").args(["-d", dev]).output().unwrap();
        ok(&o, "ibv_devinfo")?;
        let out = stdout(&o);
        for w in [&format!("hca_id:\t{dev}"), "PORT_ACTIVE (4)"].into_iter().chain(want.iter().copied()) {
            if !out.contains(w) {
                return Err(format!("no {w:?} in:\n{out}"));
            }
        }
        Ok(out)
    }

    /// Root (CAP_IPC_LOCK kept) with a soft `ulimit -l 64`: `mrshim doctor --json`'s memlock
    /// verdict against the kernel's own answer to a 1 MiB registration (tests/c/pyverbs_reg.py)
    /// from the same limits. The claim of docs/doctor.md checked on the real kernel: rxe pins
    /// through ib_umem_get, which skips RLIMIT_MEMLOCK for CAP_IPC_LOCK ("not enforced", ok); siw
    /// pins with its own check, which the capability does not lift (enforced: the limit fails).
    fn doctor_memlock(_: &Ctx) -> Result<String, String> {
        let o = root_limited(64, mrshim_bin().to_str().unwrap()).args(["doctor", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_str(&stdout(&o))
            .map_err(|e| format!("doctor --json: {e}\n{}{}", stdout(&o), stderr(&o)))?;
        let check = v["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == "memlock"))
            .cloned()
            .ok_or_else(|| format!("no memlock check in:\n{v}"))?;
        let reg = root_limited(64, pyverbs::PYTHON).arg(src_c("pyverbs_reg.py")).output().unwrap();
        let registered = reg.status.success();
        let (status, enforced_by) = (check["status"].as_str().unwrap_or("-"), &check["raw"]["enforced_by"]);
        let detail = format!(
            "doctor: {status} ({}), enforced_by {enforced_by}; the kernel: 1 MiB under a 64 KiB limit as root {}",
            check["value"].as_str().unwrap_or("-"),
            if registered { "registered".to_string() } else { format!("refused:\n{}", text(&reg)) }
        );
        let said_not_enforced = status == "ok";
        if said_not_enforced != registered {
            return Err(format!("doctor's verdict disagrees with the kernel: {detail}"));
        }
        Ok(detail)
    }

    /// Server and client of a perftest-style tool on TCP `-p PORT` (client: `127.0.0.1` first,
    /// which every one of them takes), with `env`, both with the shim when `shim`. Returns the
    /// client's stdout.
    fn tool_pair(ctx: &Ctx, shim: bool, prog: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
        let port = free_port();
        let p = port.to_string();
        let (mut s, mut c) = (timeout(180, prog), timeout(180, prog));
        s.args(args).args(["-p", &p]).envs(env.iter().copied());
        c.arg("127.0.0.1").args(args).args(["-p", &p]).envs(env.iter().copied());
        if shim {
            ctx.shim(&mut s);
            ctx.shim(&mut c);
        }
        let (_, c) = pair(&mut s, &mut c, port)?;
        Ok(stdout(&c))
    }

    fn rc_pingpong(ctx: &Ctx, shim: bool) -> Result<String, String> {
        let out = tool_pair(ctx, shim, "ibv_rc_pingpong", &["-d", "rxe0", "-g", "0", "-n", "200", "-s", "4096"], &[])?;
        if !out.contains("200 iters in") {
            return Err(out);
        }
        Ok(format!("{out}{}", recorded(ctx, shim, 2)?))
    }

    fn write_bw(ctx: &Ctx, shim: bool) -> Result<String, String> {
        let out = tool_pair(ctx, shim, "ib_write_bw", &["-d", "rxe0", "-x", "0", "-s", "65536", "-n", "200"], &[])?;
        // the result row: bytes, iterations, ...
        if !out.lines().any(|l| l.split_whitespace().take(2).eq(["65536", "200"])) {
            return Err(out);
        }
        Ok(format!("{out}{}", recorded(ctx, shim, 2)?))
    }

    /// rping over rdma_cm to the veth's link-local address, data verified (-V).
    fn rping(ctx: &Ctx, shim: bool) -> Result<String, String> {
        let p = free_port().to_string();
        let (mut s, mut c) = (timeout(180, "rping"), timeout(180, "rping"));
        s.args(["-s", "-a", "169.254.78.1", "-p", &p, "-C", "10", "-V"]);
        c.args(["-c", "-a", "169.254.78.1", "-p", &p, "-C", "10", "-V", "-v"]);
        if shim {
            ctx.shim(&mut s);
            ctx.shim(&mut c);
        }
        let mut server = spawn(&mut s);
        wait_cm_listen(&mut server);
        let c = c.output().unwrap();
        let s = server.wait_with_output().unwrap();
        for (side, o) in [("client", &c), ("server", &s)] {
            if !(o.status.success() || rping_teardown_race("rping", o)) {
                return Err(format!("{side} ({}): {}\n{}", o.status, stdout(o), stderr(o)));
            }
        }
        let pings = stdout(&c).lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count();
        if pings != 10 {
            return Err(format!("{pings} pings:\n{}", stdout(&c)));
        }
        Ok(format!("{} pings verified\n{}", pings, recorded(ctx, shim, 2)?))
    }

    /// UCX 1.13 on rxe: UD needs the fe80:: GID (index 0; its wire-up times out on the IPv4
    /// one); relaxed ordering pinned off (the default `try` depends on the CPU).
    const UCX_ENV: [(&str, &str); 5] = [
        ("UCX_NET_DEVICES", "rxe0:1"),
        ("UCX_TLS", "rc_verbs,ud_verbs,self"),
        ("UCX_IB_GID_INDEX", "0"),
        ("UCX_IB_PCI_RELAXED_ORDERING", "off"),
        ("UCX_WARN_UNUSED_ENV_VARS", "n"),
    ];

    fn ucx(ctx: &Ctx, shim: bool) -> Result<String, String> {
        let out = tool_pair(ctx, shim, "ucx_perftest", &["-t", "tag_bw", "-s", "65536", "-n", "100"], &UCX_ENV)?;
        let fin = out.lines().find(|l| l.starts_with("Final:")).ok_or_else(|| out.clone())?;
        if fin.split_whitespace().nth(1) != Some("100") {
            return Err(out);
        }
        Ok(format!("{fin}\n{}", recorded(ctx, shim, 2)?))
    }

    fn mpi(ctx: &Ctx, shim: bool) -> Result<String, String> {
        let mut c = timeout(240, "mpirun");
        c.args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "pml", "ucx", "--mca", "osc", "ucx"]);
        c.args(["--mca", "btl", "^openib"]);
        for (k, v) in UCX_ENV {
            c.env(k, v).args(["-x", k]);
        }
        c.env("UCX_TLS", "rc,self");
        if shim {
            ctx.shim(&mut c);
            c.args(["-x", "LD_PRELOAD", "-x", "MRSHIM_LOG"]);
        }
        c.arg(ctx.bin.join("mpi_datacheck")).args(["--max-size", "262144", "--iters", "1"]);
        let o = c.output().unwrap();
        ok(&o, "mpirun")?;
        let out = stdout(&o);
        for r in 0..2 {
            if !out.contains(&format!("mpi_datacheck: rank {r} ok")) {
                return Err(out);
            }
        }
        Ok(format!("{out}{}", recorded(ctx, shim, 2)?))
    }

    #[derive(PartialEq)]
    enum Allreduce {
        Plain,
        Shim,
        Rescue,
        /// Every relaxed-ordering registration fails (EFAULT, injected) and only `bounce` may
        /// rescue it: the ring runs on host shadows, post/poll wrapped on rxe's own ops.
        Bounce,
    }

    /// examples/allreduce: dlopen("libibverbs.so") + dlvsym, RC WRITE_WITH_IMM around a ring,
    /// every element checked; RoCE GID index 0 (NCCL_IB_GID_INDEX, as NCCL's knob).
    fn allreduce(ctx: &Ctx, mode: Allreduce) -> Result<String, String> {
        let mut c = timeout(180, target_dir().join("examples/allreduce").to_str().unwrap());
        c.args(["--ranks", "2", "--host-mem", "--size", "1M", "--iters", "2"]);
        c.env("NCCL_IB_GID_INDEX", "0").env("NCCL_IB_PCI_RELAXED_ORDERING", "1");
        if mode != Allreduce::Plain {
            ctx.shim(&mut c);
        }
        if mode == Allreduce::Rescue {
            c.env("MRSHIM_INJECT", "ibv_reg_mr_iova2:EINVAL:relaxed").env("MRSHIM_RETRY", "auto");
        }
        if mode == Allreduce::Bounce {
            // The NCCL-style ring announces every WRITE with an immediate it polls: the bounce
            // contract's declaration (docs/bounce.md).
            c.env("MRSHIM_INJECT", "reg:EFAULT:relaxed")
                .env("MRSHIM_RETRY", "bounce")
                .env("MRSHIM_BOUNCE_REMOTE", "announced");
        }
        let o = c.output().unwrap();
        ok(&o, "allreduce")?;
        let out = stdout(&o);
        if !out.contains("all-reduce: 2 ranks, 1048576 bytes, 2 iterations: OK") {
            return Err(out);
        }
        let mut detail = format!("{out}{}", stderr(&o));
        if mode == Allreduce::Plain {
            // on rxe0, not on anything else that answers to dlopen("libibverbs.so")
            let n = ktrace::take().lines().filter(|l| l.contains(" uverbs_reg: ") && l.ends_with("ret=0")).count();
            if n == 0 {
                return Err(format!("the kernel saw no registration of the all-reduce:\n{detail}"));
            }
            return Ok(format!("{detail}the kernel saw {n} registrations\n"));
        }
        detail += &recorded(ctx, true, 2)?;
        if mode == Allreduce::Bounce {
            let err = stderr(&o);
            if !err.contains("rescued by bounce") {
                return Err(format!("no rescue by bounce on stderr:\n{err}"));
            }
        }
        if mode == Allreduce::Rescue {
            let err = stderr(&o);
            for want in ["MRSHIM WARN", "rescued by drop-relaxed-ordering", "NCCL_IB_PCI_RELAXED_ORDERING=0"] {
                if !err.contains(want) {
                    return Err(format!("no {want:?} on stderr:\n{err}"));
                }
            }
            for f in files(&ctx.logs()) {
                let recs = records(&f);
                let injected = recs.iter().filter(|r| r.injected).count();
                let rescued = recs
                    .iter()
                    .filter(|r| r.strategy.as_deref() == Some("drop-relaxed-ordering") && r.result == "ok")
                    .count();
                if injected == 0 || rescued == 0 {
                    return Err(format!("{}: {injected} injected, {rescued} rescued", f.display()));
                }
            }
        }
        Ok(detail)
    }

    /// A real failure, not an injected one: the all-reduce as uid 65534 with a soft
    /// RLIMIT_MEMLOCK of 64 KiB (the hard one stays the kernel's 8 MiB). The kernel refuses its
    /// 1 MiB buffers (ENOMEM) and the job dies; with MRSHIM_RETRY=auto `raise-memlock` lifts
    /// the soft limit to the hard one and the job completes, data verified.
    fn allreduce_memlock(ctx: &Ctx) -> Result<String, String> {
        use std::os::unix::fs::PermissionsExt;
        let run = |logs: &Path, retry: bool| {
            std::fs::create_dir_all(logs).unwrap();
            std::fs::set_permissions(logs, std::fs::Permissions::from_mode(0o1777)).unwrap();
            let mut c = timeout(180, "setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                "ulimit -S -l 64 && exec \"$@\"",
                "sh",
            ]);
            c.arg(target_dir().join("examples/allreduce")).args([
                "--ranks",
                "2",
                "--host-mem",
                "--size",
                "1M",
                "--iters",
                "2",
            ]);
            c.env("NCCL_IB_GID_INDEX", "0")
                .env("LD_PRELOAD", shim_lib())
                .env("MRSHIM_LOG", format!("{}/", logs.display()));
            if retry {
                c.env("MRSHIM_RETRY", "auto");
            }
            c.output().unwrap()
        };
        let o = run(&ctx.dir.join("logs-without-retry"), false);
        let err = stderr(&o);
        if o.status.success() || !(err.contains("ENOMEM") || err.contains("Cannot allocate memory")) {
            return Err(format!("without MRSHIM_RETRY the job should die of ENOMEM ({}):\n{err}", o.status));
        }
        ktrace::clear();
        let o = run(&ctx.logs(), true);
        ok(&o, "allreduce with MRSHIM_RETRY=auto")?;
        let (out, err) = (stdout(&o), stderr(&o));
        if !out.contains("all-reduce: 2 ranks, 1048576 bytes, 2 iterations: OK")
            || !err.contains("rescued by raise-memlock")
        {
            return Err(format!("{out}\n{err}"));
        }
        Ok(format!("{out}{err}{}", recorded(ctx, true, 2)?))
    }

    /// tests/c/regmr_table as root (and its memlock cases as root dropping to uid 65534 in a
    /// child) against the fixture's rxe0 column.
    fn regmr_table_on(ctx: &Ctx, dev: &str) -> Result<String, String> {
        let o = timeout(120, ctx.bin.join("regmr_table").to_str().unwrap()).args(["--device", dev]).output().unwrap();
        ok(&o, "regmr_table")?;
        let got = stdout(&o);
        std::fs::write(ctx.dir.join(format!("{dev}.txt")), &got).unwrap();
        // which answers came from the kernel (uverbs_reg ret=-errno) and which from rdma-core
        std::fs::write(ctx.dir.join("kernel-trace.txt"), ktrace::take()).unwrap();
        regmr_compare(&got, dev).map(|n| format!("{n} cases as in the fixture\n{got}"))
    }

    /// rdma-core's own tests on rxe0 with the simulator's runner (tests/shim_util/pyverbs.rs):
    /// outcomes as tests/fixtures/pyverbs.txt's `rxe0` rows; with the shim, records = calls.
    fn pyverbs(ctx: &Ctx, shim: bool) -> Result<String, String> {
        let mut c = timeout(300, pyverbs::PYTHON);
        c.args(pyverbs::args("rxe0"));
        if shim {
            ctx.shim(&mut c);
        }
        let o = c.output().unwrap();
        // unittest writes its report on stderr
        let out = stderr(&o);
        if !o.status.success() {
            return Err(format!("pyverbs ({}):\n{}\n{out}", o.status, stdout(&o)));
        }
        let mut detail = pyverbs::compare(&out, "rxe0")?;
        if shim {
            detail += &recorded(ctx, true, 1)?;
        }
        Ok(detail)
    }

    /// Seeds of the bounce checker's programs run on rxe0 (each ~5 s, plain + bounce, under TCG).
    const BOUNCE_SEEDS: u64 = 10;
    const BOUNCE_TXNS: &str = "40";

    /// The bounce checker's generated programs (tests/c/bounce_check.c, issue 28 item 6) on
    /// rxe0: each seed run plain and through bounce — its RELAXED_ORDERING registrations fail
    /// (injected: rxe ignores the bit) and `MRSHIM_RETRY=bounce` registers host shadows, post
    /// and poll wrapped on rxe's own ops — and the traces compared byte for byte (but for slots a
    /// labelled contract exclusion taints). Features: the simulator's set without `rereg` (rxe
    /// has no ibv_rereg_mr). Then a byte flipped behind the program's back in one bounce run
    /// (BOUNCE_CHECK_CORRUPT) must be seen: the oracle works on this bed too.
    fn bounce_programs(ctx: &Ctx) -> Result<String, String> {
        use shim_util::bounce_check::{compare, DEFAULT_FEATURES};
        let features: Vec<&str> = DEFAULT_FEATURES.split(',').filter(|f| *f != "rereg").collect();
        let features = features.join(",");
        let prog = ctx.bin.join("bounce_check");
        let run = |seed: u64, bounce: bool, corrupt: Option<&str>| {
            let mut c = timeout(120, prog.to_str().unwrap());
            c.args([&seed.to_string(), BOUNCE_TXNS, &features]).env("BOUNCE_CHECK_GID", "0");
            let mut how = format!("BOUNCE_CHECK_GID=0 {} {seed} {BOUNCE_TXNS} {features}", prog.display());
            if bounce {
                let env = [
                    ("LD_PRELOAD", shim_lib().to_str().unwrap().to_string()),
                    ("MRSHIM_INJECT", "reg:EFAULT:relaxed".into()),
                    ("MRSHIM_RETRY", "bounce".into()),
                    ("MRSHIM_BOUNCE_REMOTE", "announced".into()),
                    ("MRSHIM_LOG", "off".into()),
                    // every other program without write tracking, as on the simulator
                    ("MRSHIM_BOUNCE_TRACK", if seed % 2 == 1 { "off" } else { "on" }.into()),
                ];
                c.envs(env.iter().map(|(k, v)| (k, v)));
                how = format!("{} {how}", env.map(|(k, v)| format!("{k}={v}")).join(" "));
                if let Some(k) = corrupt {
                    c.env("BOUNCE_CHECK_CORRUPT", k);
                    how = format!("BOUNCE_CHECK_CORRUPT={k} {how}");
                }
            }
            (c.output().unwrap(), format!("scripts/rdma-vm -- env {how}"))
        };
        let mut excluded = 0;
        for seed in 1..=BOUNCE_SEEDS {
            let (plain, how_plain) = run(seed, false, None);
            ok(&plain, &format!("seed {seed}, plain ({how_plain})"))?;
            let (b, how) = run(seed, true, None);
            ok(&b, &format!("seed {seed}, through bounce ({how})"))?;
            if !stderr(&b).contains("rescued by bounce") {
                return Err(format!("seed {seed}: the bounce run did not bounce ({how}):\n{}", stderr(&b)));
            }
            excluded += compare(&stdout(&plain), &stdout(&b)).map_err(|d| {
                format!(
                    "bounce changed application-visible bytes on rxe0: seed {seed} ({BOUNCE_TXNS} transactions, \
                     features {features})\n{d}\nreproduce:\n  {how_plain}\n  {how}\nplain trace:\n{}\nbounce trace:\n{}",
                    stdout(&plain),
                    stdout(&b)
                )
            })?;
        }
        let (plain, _) = run(5, false, None);
        let (b, how) = run(5, true, Some("11"));
        match compare(&stdout(&plain), &stdout(&b)) {
            Err(d) if d.contains("slot 0.0 is") => {}
            r => return Err(format!("a byte flipped in the bounce run went unnoticed ({how}): {r:?}")),
        }
        Ok(format!(
            "{BOUNCE_SEEDS} programs of {BOUNCE_TXNS} transactions ({features}) byte-exact through bounce on rxe0 \
             ({excluded} slot digests differed under a labelled exclusion); a flipped byte was caught\n"
        ))
    }

    /// `mrshim analyze` on records the shim wrote on rxe0 (tests/c/regmr_table.c with the shim):
    /// the kernel's answers read right (issue 30 item 5) — ODP refused with 6.1's EINVAL is
    /// odp-unsupported, not an invalid address; dmabuf's EOPNOTSUPP from a provider without it is
    /// dmabuf-unsupported; the memlock cases' children that end with `_exit()` leave logs without
    /// a summary, which are not called killed.
    fn analyze_kernel_answers(ctx: &Ctx) -> Result<String, String> {
        let mut c = timeout(120, ctx.bin.join("regmr_table").to_str().unwrap());
        c.args(["--device", "rxe0"]);
        ctx.shim(&mut c);
        c.env("MRSHIM_WARN", "off");
        let o = c.output().unwrap();
        ok(&o, "regmr_table with the shim")?;
        // one input per cause, of the records the shim wrote here (a whole log shows its top
        // four causes only), and the whole logs for the processes' ends
        let lines: Vec<String> = files(&ctx.logs())
            .iter()
            .flat_map(|f| std::fs::read_to_string(f).unwrap_or_default().lines().map(String::from).collect::<Vec<_>>())
            .collect();
        let pick = |name: &str, keep: &dyn Fn(&serde_json::Value) -> bool| {
            let mut out = String::new();
            for l in &lines {
                let r: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
                if r["kind"] == "reg" && r["result"] == "error" && keep(&r) {
                    out += l;
                    out += "\n";
                }
            }
            let p = ctx.dir.join(name);
            std::fs::write(&p, out).unwrap();
            p
        };
        let odp = pick("odp.jsonl", &|r| r["access"].as_u64().is_some_and(|a| a & 0x40 != 0));
        let dmabuf = pick("dmabuf.jsonl", &|r| r["call"] == "ibv_reg_dmabuf_mr" && r["dmabuf_fd"] != -1);
        let analyze = |input: &Path, json: bool| {
            let mut a = timeout(120, mrshim_bin().to_str().unwrap());
            a.arg("analyze");
            if json {
                a.arg("--json");
            }
            a.arg(input).output().unwrap()
        };
        let top = |input: &Path| -> Result<serde_json::Value, String> {
            let o = analyze(input, true);
            let v: serde_json::Value = serde_json::from_str(&stdout(&o))
                .map_err(|e| format!("analyze --json {}: {e}:\n{}", input.display(), stderr(&o)))?;
            Ok(v["findings"][0].clone())
        };
        let mut bad = vec![];
        let f = top(&odp)?;
        if !(f["category"] == "odp-unsupported" && f["count"] == 2 && f["errno"] == "EINVAL") {
            bad.push(format!("the two ON_DEMAND registrations (6.1's EINVAL) are not odp-unsupported x2: {f}"));
        }
        let f = top(&dmabuf)?;
        if !(f["category"] == "dmabuf-unsupported" && f["errno"] == "EOPNOTSUPP") {
            bad.push(format!("rxe's dmabuf EOPNOTSUPP is not dmabuf-unsupported: {f}"));
        }
        let text = stdout(&analyze(&ctx.logs(), false));
        if !text.contains("without exit summary (kill, crash or _exit())") || text.contains("killed") {
            bad.push("the _exit()ed children are not reported as logs without a summary, or are called killed".into());
        }
        if bad.is_empty() {
            Ok(text)
        } else {
            Err(format!("{}\n\n{text}", bad.join("\n")))
        }
    }

    /// One cell of the output-only matrix on rxe0: a real stack, run without the shim, that the
    /// kernel (or rdma-core's rxe provider) refuses for `cause`.
    struct Cell {
        stack: &'static str,
        cause: &'static str,
        /// What makes it fail (the row's third column).
        how: &'static str,
        /// The errno the kernel's uverbs answered (from the kprobe), or 0: refused before the
        /// kernel (rdma-core's provider without dma-buf).
        kernel: i32,
        /// 1; more only where the output cannot tell (the simulator matrix's AMBIGUOUS cell,
        /// tests/analyze_matrix.rs, says why).
        within: usize,
        job: Job,
    }

    enum Job {
        /// Runs the cell's programs and returns their output.
        Run(fn(&Ctx) -> String),
        /// tests/c/pyverbs_reg.py MODE as root, one of [`pyverbs_batch`]'s.
        Pyverbs(&'static str),
    }

    /// The memlock cells' user: uid/gid 65534, no groups, no inheritable capabilities (no
    /// CAP_IPC_LOCK, so ib_umem_get honours RLIMIT_MEMLOCK), soft `ulimit -l KIB`.
    fn nobody(kib: u32, prog: &str) -> Command {
        let mut c = timeout(30, "setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "sh", "-c"])
            .arg(format!("ulimit -S -l {kib} && exec \"$@\""))
            .args(["sh", prog]);
        c
    }

    /// Root without CAP_IPC_LOCK (as a container without IPC_LOCK), soft `ulimit -l KIB`: for
    /// the venv of the Python-wheel clients, which lives under /root (mode 700 here).
    fn no_ipc_lock(kib: u32, prog: &str) -> Command {
        let mut c = timeout(40, "setpriv");
        c.args(["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "sh", "-c"])
            .arg(format!("ulimit -S -l {kib} && exec \"$@\""))
            .args(["sh", prog]);
        c
    }

    /// The programs' own output: stdout, then stderr.
    fn text(o: &Output) -> String {
        format!("{}{}", stdout(o), stderr(o))
    }

    /// A two-process job: the server, then (once `ready` returns) the client; a server still
    /// waiting 2 s after the client ended (for a peer that died before connecting) is stopped,
    /// as a user would. The client's output, then the server's.
    fn job(server: &mut Command, client: &mut Command, ready: &dyn Fn(&mut Child)) -> String {
        let mut s = spawn(server);
        ready(&mut s);
        let c = client.output().unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && s.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if s.try_wait().unwrap().is_none() {
            // SAFETY: kill(2) on our own child's pid (`timeout`, which passes SIGTERM on).
            unsafe { libc::kill(s.id() as i32, libc::SIGTERM) };
        }
        format!("{}{}", text(&c), text(&s.wait_with_output().unwrap()))
    }

    /// tests/c/pyverbs_reg.py (1 MiB, LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ) under Debian's
    /// python3 (pyverbs 44) as [`nobody`] with `ulimit -l 64`.
    fn pyverbs_memlock(_: &Ctx) -> String {
        let mut c = nobody(64, pyverbs::PYTHON);
        c.arg(src_c("pyverbs_reg.py"));
        text(&c.output().unwrap())
    }

    /// tests/c/pyverbs_reg.py's MODEs as root in one python3 (tests/py/pyverbs_cells.py: a
    /// python3 start costs seconds under TCG), each in its own process writing to `dir/MODE.out`
    /// what `python3 pyverbs_reg.py MODE` prints. Per mode: that output and the errnos uverbs
    /// answered that process.
    fn pyverbs_batch(dir: &Path, modes: &[&str]) -> Result<BTreeMap<String, (String, Vec<i32>)>, String> {
        let file = |m: &str| dir.join(format!("pyverbs-{m}.out"));
        ktrace::clear();
        let mut c = timeout(120, pyverbs::PYTHON);
        c.arg(src_py("pyverbs_cells.py")).arg(src_c("pyverbs_reg.py"));
        c.args(modes.iter().map(|m| format!("{m}={}", file(m).display())));
        let o = c.output().unwrap();
        ok(&o, "tests/py/pyverbs_cells.py")?;
        let trace = ktrace::take();
        let mut got = BTreeMap::new();
        for l in stdout(&o).lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let (Some(m), Some(pid)) = (f.first(), f.get(1).and_then(|p| p.parse().ok())) else { continue };
            let out = std::fs::read_to_string(file(m)).unwrap_or_default();
            got.insert(m.to_string(), (out, ktrace::refusals(&trace, Some(pid))));
        }
        Ok(got)
    }

    /// UCX as the simulator matrix pins it (rc, relaxed ordering asked for, the rendezvous
    /// threshold), on rxe0's port with the fe80:: GID (as [`UCX_ENV`]).
    const UCX_MATRIX_ENV: [(&str, &str); 6] = [
        ("UCX_NET_DEVICES", "rxe0:1"),
        ("UCX_TLS", "rc"),
        ("UCX_IB_GID_INDEX", "0"),
        ("UCX_IB_PCI_RELAXED_ORDERING", "on"),
        ("UCX_RNDV_THRESH", "65536"),
        ("UCX_WARN_UNUSED_ENV_VARS", "n"),
    ];

    fn ucx_memlock(_: &Ctx) -> String {
        let port = free_port();
        let p = port.to_string();
        let (mut s, mut c) = (nobody(64, "ucx_perftest"), nobody(64, "ucx_perftest"));
        s.args(["-p", &p]).envs(UCX_MATRIX_ENV);
        c.args(["127.0.0.1", "-p", &p, "-t", "tag_bw", "-s", "1048576", "-n", "4", "-w", "1"]).envs(UCX_MATRIX_ENV);
        job(&mut s, &mut c, &|s| wait_tcp(port, s))
    }

    fn write_bw_memlock(_: &Ctx) -> String {
        let port = free_port();
        let p = port.to_string();
        let args = ["-d", "rxe0", "-x", "0", "-s", "65536", "-n", "5", "-p", &p];
        let (mut s, mut c) = (nobody(64, "ib_write_bw"), nobody(64, "ib_write_bw"));
        s.args(args);
        c.args(args).arg("127.0.0.1");
        job(&mut s, &mut c, &|s| wait_tcp(port, s))
    }

    /// rping's client registers its buffers before it connects (rping_setup_buffers, then
    /// rping_connect_client): the job is its failure and a server left waiting.
    fn rping_memlock(kib: u32) -> String {
        let p = free_port().to_string();
        let (mut s, mut c) = (nobody(kib, "rping"), nobody(kib, "rping"));
        s.args(["-s", "-a", "169.254.78.1", "-p", &p, "-C", "2", "-V"]);
        c.args(["-c", "-a", "169.254.78.1", "-p", &p, "-C", "2", "-V"]);
        job(&mut s, &mut c, &wait_cm_listen)
    }

    /// libfabric's verbs provider over rdma_cm; its client registers after the out-of-band
    /// TCP handshake, before it connects.
    fn fi_pingpong_memlock(_: &Ctx) -> String {
        let port = free_port();
        let p = port.to_string();
        let (mut s, mut c) = (nobody(64, "fi_pingpong"), nobody(64, "fi_pingpong"));
        s.args(["-p", "verbs", "-e", "msg", "-B", &p, "-S", "65536", "-I", "2"]);
        c.args(["-p", "verbs", "-e", "msg", "-P", &p, "-S", "65536", "-I", "2", "169.254.78.1"]);
        job(&mut s, &mut c, &|s| wait_tcp(port, s))
    }

    /// Mooncake's Transfer Engine (tests/py/mooncake_kv.py: a passive target and an initiator,
    /// P2PHANDSHAKE) on rxe0 with GID 0, relaxed ordering asked for and glog's INFO lines kept,
    /// as the simulator matrix pins them; both register 4 MiB.
    fn mooncake_memlock(ctx: &Ctx) -> String {
        let kv = ctx.dir.join("kv");
        std::fs::create_dir_all(&kv).unwrap();
        let (py, script) = (pyclients_python(), src_py("mooncake_kv.py"));
        let env = [
            ("MOONCAKE_KV_DEVICE", "rxe0"),
            ("MC_GID_INDEX", "0"),
            ("MC_IB_PCI_RELAXED_ORDERING", "1"),
            ("GLOG_minloglevel", "0"),
        ];
        let run = |role: &str| {
            let mut c = no_ipc_lock(64, py.to_str().unwrap());
            c.arg(&script).arg(role).arg(&kv).arg("4194304").envs(env);
            c
        };
        let (mut s, mut c) = (run("target"), run("initiator"));
        job(&mut s, &mut c, &|_| {})
    }

    fn src_py(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(name)
    }

    /// Issue 29's generated truth on the kernel bed: real stacks without the shim, each refused
    /// by the real rxe0 for one cause — the memlock limit as a user without CAP_IPC_LOCK (uid
    /// 65534; Mooncake: root without it, its venv being under /root) (ib_umem_get: ENOMEM past
    /// RLIMIT_MEMLOCK, EPERM at 0 from can_do_mlock), REMOTE_WRITE
    /// without LOCAL_WRITE (ib_check_mr_access: EINVAL), a PROT_READ mapping registered writable
    /// (pin_user_pages_fast with FOLL_WRITE: EFAULT), ON_DEMAND (6.1's rxe has no ODP:
    /// ib_check_mr_access's EINVAL), dma-buf (rdma-core's rxe provider has no reg_dmabuf_mr:
    /// EOPNOTSUPP before the kernel; the guest kernel has no dma-buf exporter, so the descriptor
    /// is a memfd, which the provider never looks at). Each cell's own stdout and stderr go to
    /// its file and `mrshim analyze` reads only that: its first finding must be the cause, and
    /// the kernel's uverbs must have answered the cell's errno (kprobe), so the cause is the
    /// kernel's, not made up.
    /// As root, CAP_IPC_LOCK kept, soft `ulimit -l KIB`: the case only siw refuses.
    fn root_limited(kib: u32, prog: &str) -> Command {
        let mut c = timeout(60, "sh");
        c.arg("-c").arg(format!("ulimit -S -l {kib} && exec \"$@\"")).args(["sh", prog]);
        c
    }

    /// siw: the stacks' own output when root's registrations hit the memlock limit that
    /// CAP_IPC_LOCK lifts on every other provider here — analyze must still name the limit.
    fn output_matrix_siw(ctx: &Ctx) -> Result<String, String> {
        use Job::Run;
        let cell = |stack, cause, how, kernel, job| Cell { stack, cause, how, kernel, within: 1, job };
        let cells = [
            cell(
                "pyverbs",
                "memlock-limit",
                "root +IPC_LOCK, ulimit -l 64",
                libc::ENOMEM,
                Run(|_| {
                    let mut c = root_limited(64, pyverbs::PYTHON);
                    c.arg(src_c("pyverbs_reg.py"));
                    text(&c.output().unwrap())
                }),
            ),
            cell(
                "rping",
                "memlock-limit",
                "root +IPC_LOCK, ulimit -l 8",
                libc::ENOMEM,
                Run(|_| {
                    let p = free_port().to_string();
                    let (mut s, mut c) = (root_limited(8, "rping"), root_limited(8, "rping"));
                    s.args(["-s", "-a", "169.254.78.1", "-p", &p, "-C", "2", "-V"]);
                    c.args(["-c", "-a", "169.254.78.1", "-p", &p, "-C", "2", "-V"]);
                    job(&mut s, &mut c, &wait_cm_listen)
                }),
            ),
        ];
        run_cells(ctx, &cells)
    }

    fn output_matrix(ctx: &Ctx) -> Result<String, String> {
        use Job::{Pyverbs, Run};
        let cell = |stack, cause, how, kernel, job| Cell { stack, cause, how, kernel, within: 1, job };
        let cells = [
            cell("ib_write_bw", "memlock-limit", "uid 65534, ulimit -l 64", libc::ENOMEM, Run(write_bw_memlock)),
            cell("ucx_perftest", "memlock-limit", "uid 65534, ulimit -l 64", libc::ENOMEM, Run(ucx_memlock)),
            cell("rping", "memlock-limit", "uid 65534, ulimit -l 8", libc::ENOMEM, Run(|_| rping_memlock(8))),
            cell("rping", "memlock-limit", "uid 65534, ulimit -l 0", libc::EPERM, Run(|_| rping_memlock(0))),
            cell("fi_pingpong", "memlock-limit", "uid 65534, ulimit -l 64", libc::ENOMEM, Run(fi_pingpong_memlock)),
            cell("pyverbs", "memlock-limit", "uid 65534, ulimit -l 64", libc::ENOMEM, Run(pyverbs_memlock)),
            cell("mooncake", "memlock-limit", "root -IPC_LOCK, ulimit -l 64", libc::ENOMEM, Run(mooncake_memlock)),
            cell("pyverbs", "access-flags", "REMOTE_WRITE alone", libc::EINVAL, Pyverbs("remote")),
            Cell {
                within: 3,
                ..cell("pyverbs", "access-flags", "PROT_READ, writable", libc::EFAULT, Pyverbs("readonly"))
            },
            cell("pyverbs", "odp-unsupported", "ON_DEMAND", libc::EINVAL, Pyverbs("odp")),
            cell("pyverbs", "dmabuf-unsupported", "DmaBufMR (a memfd)", 0, Pyverbs("memfd")),
        ];
        run_cells(ctx, &cells)
    }

    /// Runs `cells` (their pyverbs modes in one batch), then `mrshim analyze --json` on each
    /// cell's output: a table row per cell; an error when a cause is not where the cell wants it,
    /// nothing failed, or the kernel did not answer the cell's errno.
    fn run_cells(ctx: &Ctx, cells: &[Cell]) -> Result<String, String> {
        use Job::{Pyverbs, Run};
        let modes: Vec<&str> =
            cells.iter().filter_map(|c| if let Pyverbs(m) = c.job { Some(m) } else { None }).collect();
        let t0 = Instant::now();
        let batch = pyverbs_batch(&ctx.dir, &modes)?;
        let batch_secs = t0.elapsed().as_secs_f64();
        // each cell's output, file, the kernel's refusals and seconds; then analyze on them all at once
        let mut ran = vec![];
        for (i, c) in cells.iter().enumerate() {
            let file = ctx.dir.join(format!("{i:02}-{}-{}.out", c.stack, c.cause));
            let (out, refused, secs) = match c.job {
                Run(f) => {
                    ktrace::clear();
                    let t0 = Instant::now();
                    let out = f(ctx);
                    let secs = t0.elapsed().as_secs_f64();
                    (out, ktrace::refusals(&ktrace::take(), None), secs)
                }
                Pyverbs(m) => {
                    let (out, refused) = batch.get(m).cloned().ok_or_else(|| format!("pyverbs_cells.py ran no {m}"))?;
                    (out, refused, batch_secs / modes.len() as f64)
                }
            };
            std::fs::write(&file, &out).unwrap();
            ran.push((file, out, refused, secs));
        }
        let analyses: Vec<Child> = ran
            .iter()
            .map(|(file, ..)| spawn(timeout(120, mrshim_bin().to_str().unwrap()).args(["analyze", "--json"]).arg(file)))
            .collect();
        let (mut rows, mut bad) = (String::new(), vec![]);
        for (c, ((file, out, refused, secs), a)) in cells.iter().zip(ran.into_iter().zip(analyses)) {
            let o = a.wait_with_output().unwrap();
            let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_default();
            let findings = v["findings"].as_array().cloned().unwrap_or_default();
            let first = findings.first().and_then(|f| f["category"].as_str()).unwrap_or("-");
            let place = findings.iter().position(|f| f["category"] == c.cause).map(|n| n + 1);
            let failed = v["summary"]["failed"].as_u64().unwrap_or(0);
            let kernel = match c.kernel {
                0 if refused.is_empty() => "no uverbs call".to_string(),
                0 => format!("the kernel answered {refused:?}, expected no call"),
                e if refused.contains(&e) => format!("uverbs -{e}"),
                e => format!("uverbs answered {refused:?}, expected -{e}"),
            };
            let row = format!(
                "{:<13} {:<18} {:<28} -> {first} (basis {}, {failed} failures, {kernel}; {secs:.1} s){}",
                c.stack,
                c.cause,
                c.how,
                findings.first().map_or("-", |f| f["basis"].as_str().unwrap_or("-")),
                match place {
                    Some(1) => String::new(),
                    Some(n) => format!("; the cause is finding {n}"),
                    None => "; the cause is not found".into(),
                }
            );
            rows += &row;
            rows.push('\n');
            let kernel_ok = if c.kernel == 0 { refused.is_empty() } else { refused.contains(&c.kernel) };
            if place.is_none_or(|n| n > c.within) || failed == 0 || !kernel_ok {
                let head: String = out.lines().take(12).map(|l| format!("  {l}\n")).collect();
                bad.push(format!("{row}\n  ({}):\n{head}{}", file.display(), stderr(&o)));
            }
        }
        if bad.is_empty() {
            Ok(rows)
        } else {
            Err(format!("{rows}\n{}", bad.join("\n")))
        }
    }

    /// The kernel's own view of registrations: kprobes on the uverbs command handlers (every
    /// call that reached the kernel, with its result) and, on rxe, on its reg/dereg (arguments,
    /// lkey).
    pub mod ktrace {
        use super::*;

        const T: &str = "/sys/kernel/tracing";
        const PROBES: &str = "p:mrshim/reg rxe_reg_user_mr start=%si:x64 length=%dx:u64 iova=%cx:x64 access=%r8:x32
r:mrshim/reg_ret rxe_reg_user_mr ret=$retval:x64 lkey=+16($retval):x32
r:mrshim/uverbs_reg ib_uverbs_reg_mr ret=$retval:s32
r:mrshim/uverbs_dmabuf ib_uverbs_handler_UVERBS_METHOD_REG_DMABUF_MR ret=$retval:s32
p:mrshim/dereg rxe_dereg_mr lkey=+16(%di):x32
";

        pub fn setup(provider: &str) -> Result<(), String> {
            // siw: only the uverbs handlers (its own functions are not what these probes read)
            let probes: String = PROBES
                .lines()
                .filter(|l| provider == "rxe" || l.contains("uverbs"))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(format!("{T}/kprobe_events"), probes).map_err(|e| format!("{T}/kprobe_events: {e}"))?;
            std::fs::write(format!("{T}/events/mrshim/enable"), "1").map_err(|e| e.to_string())?;
            std::fs::write(format!("{T}/buffer_size_kb"), "8192").map_err(|e| e.to_string())
        }

        pub fn clear() {
            let _ = std::fs::write(format!("{T}/trace"), "");
        }

        pub fn take() -> String {
            std::fs::read_to_string(format!("{T}/trace")).unwrap_or_default()
        }

        /// The errnos of the registrations uverbs refused (positive), of process `pid` or all.
        pub fn refusals(trace: &str, pid: Option<u32>) -> Vec<i32> {
            // a line begins with the task, `comm-pid`
            let of = |l: &str| {
                pid.is_none_or(|p| {
                    l.split(" [").next().and_then(|t| t.trim().rsplit('-').next()) == Some(&p.to_string())
                })
            };
            trace
                .lines()
                .filter(|l| (l.contains(" uverbs_reg: ") || l.contains(" uverbs_dmabuf: ")) && of(l))
                .filter_map(|l| field(l, "ret").map(|r| -(r as i64) as i32))
                .filter(|e| *e != 0)
                .collect()
        }

        /// A registration as the kernel saw it.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
        struct Call {
            addr: u64,
            length: u64,
            iova: u64,
            access: u32,
            lkey: u32,
        }

        fn field(l: &str, k: &str) -> Option<u64> {
            let v = l.split_whitespace().find_map(|w| w.strip_prefix(k)?.strip_prefix('='))?;
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => v.parse::<i64>().ok().map(|n| n as u64),
            }
        }

        /// Bits 20-29 are the optional range: rdma-core drops RELAXED_ORDERING itself where the
        /// device lacks it, so the kernel never sees what the application asked there.
        const MANDATORY: u32 = 0x000f_ffff;

        /// Every registration that reached the kernel has exactly one record (same address,
        /// length, iova, access, lkey; failures: same errno), every failure the shim recorded
        /// without the kernel seeing it was made up by MRSHIM_INJECT or is rdma-core's own
        /// EOPNOTSUPP for dmabuf on a provider without it, and deregistrations match.
        pub fn matches(recs: &[mrshim_record::Reg], trace: &str) -> Result<String, String> {
            use mrshim_record::Kind;
            if let Some(l) = trace.lines().find(|l| l.contains("entries-in-buffer/entries-written:")) {
                let n: Vec<&str> = l.rsplit(' ').next().unwrap_or("").split('/').collect();
                if n.len() == 2 && n[0] != n[1] {
                    return Err(format!("the kernel's trace buffer lost events: {l}"));
                }
            }
            let mut pending: BTreeMap<String, (Option<Call>, Option<u32>)> = BTreeMap::new();
            let (mut kernel_ok, mut kernel_failed, mut kernel_deregs) = (vec![], vec![], 0usize);
            for l in trace.lines().filter(|l| !l.starts_with('#')) {
                let task = l.split(" [").next().unwrap_or("").trim().to_string();
                let p = pending.entry(task.clone()).or_default();
                if l.contains(" reg: ") {
                    p.0 = Some(Call {
                        addr: field(l, "start").unwrap_or(0),
                        length: field(l, "length").unwrap_or(0),
                        iova: field(l, "iova").unwrap_or(0),
                        access: field(l, "access").unwrap_or(0) as u32 & MANDATORY,
                        lkey: 0,
                    });
                } else if l.contains(" reg_ret: ") {
                    p.1 = field(l, "lkey").map(|k| k as u32);
                } else if l.contains(" uverbs_reg: ") || l.contains(" uverbs_dmabuf: ") {
                    let ret = field(l, "ret").unwrap_or(0) as i64;
                    let (call, lkey) = std::mem::take(p);
                    if ret == 0 {
                        let mut c = call.ok_or_else(|| format!("a registration without rxe's arguments: {l}"))?;
                        c.lkey = lkey.unwrap_or(0);
                        kernel_ok.push(c);
                    } else {
                        kernel_failed.push(-ret as i32);
                    }
                } else if l.contains(" dereg: ") {
                    kernel_deregs += 1;
                }
            }
            let num = |s: &Option<String>| {
                s.as_deref().and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            };
            let regs: Vec<_> =
                recs.iter().filter(|r| r.kind == Some(Kind::Reg) && !r.injected && r.result != "refused").collect();
            let mut shim_ok: Vec<Call> = regs
                .iter()
                .filter(|r| r.result == "ok")
                .map(|r| {
                    let addr = num(&r.used_addr).or(num(&r.addr)).unwrap_or(0);
                    Call {
                        addr,
                        length: r.used_length.or(r.length).unwrap_or(0),
                        // a bounce shadow is registered at the caller's iova (docs/bounce.md)
                        iova: num(&r.iova).or(num(&r.addr)).unwrap_or(addr),
                        access: r.used_access.or(r.access).unwrap_or(0) & MANDATORY,
                        lkey: r.lkey.unwrap_or(0),
                    }
                })
                .collect();
            let mut shim_failed: Vec<i32> = regs
                .iter()
                .filter(|r| r.result != "ok")
                .filter(|r| !(r.call == "ibv_reg_dmabuf_mr" && r.errno == Some(libc::EOPNOTSUPP)))
                .map(|r| r.errno.unwrap_or(0))
                .collect();
            kernel_ok.sort();
            shim_ok.sort();
            kernel_failed.sort();
            shim_failed.sort();
            if kernel_ok.is_empty() {
                return Err(format!("the kernel saw no registration:\n{trace}"));
            }
            if shim_ok != kernel_ok {
                return Err(format!("successful registrations differ:\nrecords {shim_ok:x?}\nkernel  {kernel_ok:x?}"));
            }
            if shim_failed != kernel_failed {
                return Err(format!("failed registrations differ: records {shim_failed:?}, kernel {kernel_failed:?}"));
            }
            let shim_deregs = recs.iter().filter(|r| r.kind == Some(Kind::Dereg) && r.result == "ok").count();
            if shim_deregs != kernel_deregs {
                return Err(format!("{shim_deregs} dereg records, the kernel saw {kernel_deregs}"));
            }
            Ok(format!(
                "records = the kernel's calls: {} registrations, {} failures, {} deregistrations\n",
                kernel_ok.len(),
                kernel_failed.len(),
                kernel_deregs
            ))
        }
    }
}
