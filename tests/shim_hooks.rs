//! libmrshim.so on a tiny versioned stand-in libibverbs (tests/c/fakeverbs.c): real processes,
//! real files, real exit codes.

mod shim_util;
use mrshim_record::{Kind, MemKind};
use shim_util::*;
use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;

/// The nine calls tests/c/fake_linked.c makes, in order: each must be one record.
const PROGRAM_CALLS: [&str; 9] = [
    "ibv_reg_mr",
    "ibv_reg_mr_iova",
    "ibv_reg_mr_iova2",
    "ibv_reg_dmabuf_mr",
    "ibv_reg_dmabuf_mr",
    "ibv_dereg_mr",
    "ibv_dereg_mr",
    "ibv_dereg_mr",
    "ibv_dereg_mr",
];

#[test]
fn exports_only_the_hooks_and_needs_no_libibverbs() {
    let lib = shim_lib();
    let d = run(std::process::Command::new("readelf").arg("-d").arg(&lib));
    let needed: Vec<String> = stdout(&d).lines().filter(|l| l.contains("(NEEDED)")).map(String::from).collect();
    assert!(!needed.is_empty());
    assert!(needed.iter().all(|l| !l.contains("libibverbs")), "{needed:?}");
    let s = run(std::process::Command::new("readelf").args(["--dyn-syms", "-W"]).arg(&lib));
    let mut defined: Vec<String> = stdout(&s)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[6] != "UND" && f[4] == "GLOBAL").then(|| f[7].to_string())
        })
        .collect();
    defined.sort();
    // with the versions of the definitions they stand in front of
    assert_eq!(
        defined,
        [
            "_Exit@@GLIBC_2.2.5",
            "_exit@@GLIBC_2.2.5",
            "close@@GLIBC_2.2.5",
            "close_range@@GLIBC_2.34",
            "closefrom@@GLIBC_2.34",
            "dlclose@@GLIBC_2.34",
            "dlclose@GLIBC_2.2.5",
            "dlsym@@GLIBC_2.34",
            "dlsym@GLIBC_2.2.5",
            "dlvsym@@GLIBC_2.34",
            "dlvsym@GLIBC_2.2.5",
            "dup2@@GLIBC_2.2.5",
            "dup3@@GLIBC_2.9",
            "ibv_dereg_mr@@IBVERBS_1.1",
            "ibv_dereg_mr@IBVERBS_1.0",
            "ibv_destroy_cq@@IBVERBS_1.1",
            "ibv_destroy_qp@@IBVERBS_1.1",
            "ibv_open_device@@IBVERBS_1.1",
            "ibv_qp_to_qp_ex@@IBVERBS_1.6",
            "ibv_reg_dmabuf_mr@@IBVERBS_1.12",
            "ibv_reg_mr@@IBVERBS_1.1",
            "ibv_reg_mr@IBVERBS_1.0",
            "ibv_reg_mr_iova2@@IBVERBS_1.8",
            "ibv_reg_mr_iova@@IBVERBS_1.7",
            "ibv_rereg_mr@@IBVERBS_1.1",
        ]
    );
}

/// Pairs (call, args) from the fake library's own log: what it really received.
fn fake_log(p: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(p).unwrap().lines().map(String::from).collect()
}

#[test]
fn linked_program_one_record_per_call_matching_what_the_library_received() {
    let d = tmp("linked");
    let flog = d.join("fake.log");
    let logs = d.join("logs");
    let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", format!("{}/", logs.display())).env("FAKE_LOG", &flog));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out,
        "reg_mr lkey=100 rkey=1100\nreg_mr_iova lkey=101\nreg_mr_iova2 lkey=102\nprobe failed errno=95\ndmabuf lkey=103\ndereg rc=0\n",
        "the program behaves exactly as without the shim"
    );
    let file = only_file(&logs);
    let pid = o.status.code().map(|_| ()).and(Some(()));
    assert!(pid.is_some());
    let name = file.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with(&format!("mrshim-{}-p", host())) && name.ends_with(".jsonl"), "{name}");
    let recs = records(&file);
    let kinds: Vec<Kind> = recs.iter().map(|r| r.kind.unwrap()).collect();
    use Kind::*;
    assert_eq!(kinds, [Config, Reg, Reg, Reg, Reg, Reg, Dereg, Dereg, Dereg, Dereg, Summary]);
    let calls: Vec<&str> = recs[1..10].iter().map(|r| r.call.as_str()).collect();
    assert_eq!(calls, PROGRAM_CALLS, "rdma-core-style internal ibv_reg_mr -> ibv_reg_mr_iova2 is not a second record");
    let seqs: Vec<u64> = recs[1..10].iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
    // compare with the library's own log
    let fl = fake_log(&flog);
    // ibv_reg_mr addr=0x... len=8192 access=0x3   (then the internal iova2 line)
    let first: Vec<&str> = fl[0].split(' ').collect();
    assert_eq!(first[0], "ibv_reg_mr");
    let r = &recs[1];
    assert_eq!(format!("addr={}", r.addr.as_ref().unwrap()), first[1]);
    assert_eq!(format!("len={}", r.length.unwrap()), first[2]);
    assert_eq!(format!("access={:#x}", r.access.unwrap()), first[3]);
    assert_eq!(r.device.as_deref(), Some("fake0"));
    assert_eq!((r.lkey, r.rkey), (Some(100), Some(1100)));
    assert_eq!(r.addr_page_offset, Some(0x10));
    assert_eq!(r.access_names, ["LOCAL_WRITE", "REMOTE_WRITE"]);
    assert_eq!(r.result, "ok");
    assert!(r.mem_kind.is_some() && r.mem_kind != Some(MemKind::Unmapped));
    // iova given explicitly
    let r = &recs[2];
    assert_eq!(r.iova.as_deref(), Some("0x10000"));
    assert!(fl[2].contains("iova=0x10000"), "{}", fl[2]);
    // relaxed ordering as requested by the caller
    let r = &recs[3];
    assert!(r.relaxed_ordering);
    assert_eq!(r.access, Some(0x100007));
    assert!(r.access_names.contains(&"RELAXED_ORDERING".to_string()));
    // the probe: passed through, errno intact, marked
    let r = &recs[4];
    assert!(r.probe);
    assert_eq!((r.errno, r.errno_name.as_deref()), (Some(95), Some("EOPNOTSUPP")));
    assert!(fl.iter().any(|l| l == "ibv_reg_dmabuf_mr offset=0 len=0 iova=0x0 fd=-1 access=0x0"));
    // dmabuf: VA is the iova argument, offset and fd recorded, device memory
    let r = &recs[5];
    assert_eq!(
        (r.addr.as_deref(), r.dmabuf_fd, r.dmabuf_offset, r.length),
        (Some("0x7e0000000000"), Some(5), Some(4096), Some(65536))
    );
    assert_eq!(r.mem_kind, Some(MemKind::Device));
    // deregs link back to their registrations, bytes return to 0
    assert_eq!(recs[6].reg_seq, Some(5));
    assert_eq!(recs[9].reg_seq, Some(1));
    assert_eq!(recs[9].registered_bytes_after, Some(0));
    let s = recs[10].summary.as_ref().unwrap();
    assert_eq!(
        (s.calls, s.failures, s.probes, s.registered_bytes, s.peak_registered_bytes),
        (9, 0, 1, 0, 8192 + 4096 + 4096 + 65536)
    );
    // quiet by default (MRSHIM_DEBUG=WARN): every call succeeded, so nothing on stderr
    assert_eq!(stderr(&o), "", "a job whose registrations all succeed prints nothing");
    let o = run(fake_cmd("fake_linked").env("MRSHIM_DEBUG", "INFO").env("MRSHIM_LOG", "off"));
    assert!(stderr(&o).contains("MRSHIM INFO summary: 9 calls"), "{}", stderr(&o));
}

#[test]
fn nccl_style_dlvsym_gets_the_wrappers_and_failures_warn_with_decoded_flags() {
    let d = tmp("nccl");
    let o = run(fake_cmd("nccl_style")
        .arg("compat10")
        .env("MRSHIM_LOG", d.join("%h-%r.jsonl"))
        .env("FAKE_FAIL_RELAXED", "1")
        .env("PMIX_RANK", "2"));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_wrapped(&out, &NCCL_REG_SYMS);
    assert_wrapped(&out, &["ibv_reg_mr@IBVERBS_1.0", "ibv_dereg_mr@IBVERBS_1.0"]);
    assert!(out.contains("probe failed errno=95\n"), "{out}");
    assert!(out.contains("iova2 failed errno=22\n"), "{out}");
    assert!(out.contains("reg_mr@1.0 ok\ndereg@1.0 rc=0\n"), "{out}");
    let recs = records(&d.join(format!("{}-2.jsonl", host())));
    let fail: Vec<_> = recs.iter().filter(|r| r.result == "error" && !r.probe).collect();
    assert_eq!(fail.len(), 1);
    let f = fail[0];
    assert_eq!(
        (f.call.as_str(), f.errno, f.errno_name.as_deref(), f.rank),
        ("ibv_reg_mr_iova2", Some(22), Some("EINVAL"), Some(2))
    );
    let err = stderr(&o);
    let warn: Vec<&str> = err.lines().filter(|l| l.contains("MRSHIM WARN")).collect();
    assert_eq!(warn.len(), 1, "{err}");
    let expect = format!(
        "[-] MRSHIM WARN ibv_reg_mr_iova2(addr={a}, len=1048576, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova={a}, mem={k}) failed: EINVAL (22)",
        a = f.addr.as_ref().unwrap(),
        k = f.mem_kind.expect("the record's memory kind").name()
    );
    assert_eq!(f.mem_kind, Some(MemKind::HostAnon), "the WARN line names the record's kind");
    assert!(warn[0].ends_with(&expect), "{}\n{expect}", warn[0]);
    assert!(warn[0].starts_with(&format!("{}:{}:", host(), f.pid)), "{}", warn[0]);
    // the 1.0 ABI is recorded with its version
    assert!(recs.iter().any(|r| r.call == "ibv_reg_mr" && r.symbol_version.as_deref() == Some("IBVERBS_1.0")));
    assert!(recs.iter().any(|r| r.call == "ibv_dereg_mr" && r.symbol_version.as_deref() == Some("IBVERBS_1.0")));
}

#[test]
fn another_preload_using_rtld_next_works_in_both_orders() {
    let f = fake();
    let other = f.dir.join("libother.so");
    let shim = shim_lib();
    for (order, next) in [
        (format!("{} {}", other.display(), shim.display()), "libmrshim.so"),
        (format!("{} {}", shim.display(), other.display()), "libibverbs.so.1"),
    ] {
        let d = tmp("rtldnext");
        let o = run(fake_cmd("fake_linked").env("LD_PRELOAD", &order).env("MRSHIM_LOG", &d));
        assert!(o.status.success(), "{order}: {:?} {}", o.status, stderr(&o));
        let err = stderr(&o);
        let line =
            err.lines().find(|l| l.starts_with("other: ibv_reg_mr next=")).unwrap_or_else(|| panic!("{order}: {err}"));
        assert!(line.ends_with(next), "{order}: {line}");
        let recs = records(&only_file(&d));
        assert_eq!(recs.iter().filter(|r| r.call == "ibv_reg_mr").count(), 1, "{order}");
    }
    // a non-verbs function through RTLD_NEXT, with mrshim first and second
    for order in [format!("{} {}", shim.display(), other.display()), format!("{} {}", other.display(), shim.display())]
    {
        let o = run(cmd("python3")
            .args(["-c", "import ctypes; print(ctypes.CDLL(None).rand())"])
            .env("LD_PRELOAD", &order));
        assert!(o.status.success(), "{order}: {}", stderr(&o));
        assert_eq!(stdout(&o), "1804289383\n");
        assert_eq!(stderr(&o), "");
    }
}

#[test]
fn a_preload_constructor_calling_dlsym_before_ours_runs_works() {
    // Constructors of independent preloads run last-listed first: with mrshim listed first,
    // the other library's constructor calls dlsym before mrshim's constructor has run.
    let f = fake();
    let other = f.dir.join("libother.so");
    let shim = shim_lib();
    for order in [format!("{} {}", shim.display(), other.display()), format!("{} {}", other.display(), shim.display())]
    {
        let o = run(cmd("/bin/true").env("LD_PRELOAD", &order).env("OTHER_CTOR_REPORT", "1"));
        assert!(o.status.success(), "{order}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.starts_with("other: ctor next rand in ") && e.contains("libc.so.6, getpid ok"), "{order}: {e}");
    }
}

#[test]
fn dlvsym_rtld_default_from_a_plugin_with_a_private_libibverbs_is_recorded() {
    let f = fake();
    let d = tmp("local-plugin");
    // no LD_LIBRARY_PATH: the plugin finds its libibverbs through its own rpath, privately
    let o = run(cmd(f.prog("local_plugin"))
        .arg(f.dir.join("liblocal_plugin.so"))
        .env("LD_PRELOAD", shim_lib())
        .env("MRSHIM_LOG", &d));
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
    assert_eq!(stdout(&o), "plugin lkey=100\n");
    let recs = records(&only_file(&d));
    let calls: Vec<&str> = recs
        .iter()
        .filter(|r| r.kind == Some(Kind::Reg) || r.kind == Some(Kind::Dereg))
        .map(|r| r.call.as_str())
        .collect();
    assert_eq!(calls, ["ibv_reg_mr", "ibv_dereg_mr"]);
}

#[test]
fn a_binary_linked_against_the_1_0_abi_gets_the_1_0_wrappers() {
    let d = tmp("v10");
    let flog = d.join("fake.log");
    let o = run(fake_cmd("fake_linked").arg("v10").env("MRSHIM_LOG", d.join("r.jsonl")).env("FAKE_LOG", &flog));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "v10 lkey=100\n");
    // the library's 1.0 functions were reached (not the 1.1 ones with a 1.0 pd)
    let reached = std::fs::read_to_string(&flog).unwrap();
    assert!(reached.starts_with("ibv_reg_mr@1.0 ") && reached.contains("\nibv_dereg_mr@1.0 lkey=100"), "{reached}");
    let recs = records(&d.join("r.jsonl"));
    let v: Vec<(&str, Option<&str>)> = recs
        .iter()
        .filter(|r| r.kind == Some(Kind::Reg) || r.kind == Some(Kind::Dereg))
        .map(|r| (r.call.as_str(), r.symbol_version.as_deref()))
        .collect();
    assert_eq!(v, [("ibv_reg_mr", Some("IBVERBS_1.0")), ("ibv_dereg_mr", Some("IBVERBS_1.0"))]);
}

/// `fake_linked` as it runs without the shim: what every run with it is compared against.
fn without_shim() -> std::process::Output {
    let f = fake();
    run(cmd(f.prog("fake_linked")).env("LD_LIBRARY_PATH", f.lib_dir()))
}

#[test]
fn programs_without_verbs_run_unchanged() {
    let d = tmp("noverbs");
    for (prog, args, code, out) in [
        ("/bin/true", vec![], 0, ""),
        ("/bin/false", vec![], 1, ""),
        ("/bin/sh", vec!["-c", "echo hello; echo err >&2; exit 7"], 7, "hello\n"),
        (
            "python3",
            vec!["-c", "import sys, ctypes; print('py', sys.version_info[0]); ctypes.CDLL('libc.so.6')"],
            0,
            "py 3\n",
        ),
    ] {
        let base = run(cmd(prog).args(&args));
        let o = run(cmd(prog).args(&args).env("LD_PRELOAD", shim_lib()).env("MRSHIM_LOG", &d));
        assert_eq!(o.status.code(), Some(code), "{prog}");
        assert_eq!(stdout(&o), out, "{prog}");
        assert_eq!(o.stdout, base.stdout, "{prog}");
        assert_eq!(o.stderr, base.stderr, "{prog}: no shim output for a program that makes no call");
    }
    assert!(files(&d).is_empty(), "no log files for programs that never register");
}

#[test]
fn bad_values_print_one_line_and_pass_through() {
    let cases = [
        ("MRSHIM_LEVEL", "verbose", "mrshim: MRSHIM_LEVEL=\"verbose\" is not valid; accepted: all, failures; mrshim passes every call through unrecorded"),
        ("MRSHIM_LOG", "/tmp/%q", "mrshim: MRSHIM_LOG=\"/tmp/%q\" is not valid (unknown placeholder %q); accepted: off, stderr, a file path or a directory (placeholders %h host, %p pid, %r rank, %j job id, %% percent); mrshim passes every call through unrecorded"),
        ("MRSHIM_LOG", "", "mrshim: MRSHIM_LOG=\"\" is not valid (empty); accepted: off, stderr, a file path or a directory (placeholders %h host, %p pid, %r rank, %j job id, %% percent); mrshim passes every call through unrecorded"),
        ("MRSHIM_SUMMARY", "sometimes", "mrshim: MRSHIM_SUMMARY=\"sometimes\" is not valid; accepted: on, off (also 1/0, true/false, yes/no); mrshim passes every call through unrecorded"),
        ("MRSHIM_WARN", "loud", "mrshim: MRSHIM_WARN=\"loud\" is not valid; accepted: on, off (also 1/0, true/false, yes/no); mrshim passes every call through unrecorded"),
        ("MRSHIM_DEBUG_PANIC", "always", "mrshim: MRSHIM_DEBUG_PANIC=\"always\" is not valid; accepted: init, hook, call, record, exit, bounce (where the shim panics on purpose; unset in production); mrshim passes every call through unrecorded"),
        // switches read by the bounce layer and the GPU copy engines: never "on" by mistake
        ("MRSHIM_BOUNCE_TRACK", "bogus", "mrshim: MRSHIM_BOUNCE_TRACK=\"bogus\" is not valid; accepted: on (default), off (also 1/0, true/false, yes/no); mrshim passes every call through unrecorded"),
        ("MRSHIM_BOUNCE_TRACK", "", "mrshim: MRSHIM_BOUNCE_TRACK=\"\" is not valid; accepted: on (default), off (also 1/0, true/false, yes/no); mrshim passes every call through unrecorded"),
        ("MRSHIM_COPY_SELFTEST", "always", "mrshim: MRSHIM_COPY_SELFTEST=\"always\" is not valid; accepted: auto (default: only engines of unconfirmed ABI, MACA), on (every GPU copy engine), off (= auto; also 1/0, true/false, yes/no); mrshim passes every call through unrecorded"),
    ];
    use mrshim_core::config::{INJECT_ACCEPTED, RETRY_ACCEPTED};
    let long = |var: &str, val: &str, acc: &str| {
        format!("mrshim: {var}={val:?} is not valid; accepted: {acc}; mrshim passes every call through unrecorded")
    };
    let retry = long("MRSHIM_RETRY", "drop-everything", RETRY_ACCEPTED);
    let inject = long("MRSHIM_INJECT", "ibv_reg_mr:EWHAT", INJECT_ACCEPTED);
    let cases = cases
        .into_iter()
        .map(|(a, b, c)| (a, b, c.to_string()))
        .chain([("MRSHIM_RETRY", "drop-everything", retry), ("MRSHIM_INJECT", "ibv_reg_mr:EWHAT", inject)]);
    let base = without_shim();
    for (var, val, line) in cases {
        let d = tmp("badenv");
        let mut c = fake_cmd("fake_linked");
        c.env("MRSHIM_LOG", d.join("x.jsonl")).env(var, val);
        let o = run(&mut c);
        assert!(o.status.success(), "{var}");
        assert_eq!(stdout(&o), stdout(&base), "{var}: calls pass through");
        assert_eq!(stderr(&o), format!("{line}\n"), "{var}");
        assert!(files(&d).is_empty(), "{var}: nothing recorded");
    }
}

/// MRSHIM_DEBUG_PANIC makes the shim panic on purpose at each point of its own code: the program
/// must see exactly what it sees without the shim (same output, exit code, lkeys), stderr gets one
/// line naming the panic, and the log says what happened.
#[test]
fn a_panic_inside_the_shim_never_reaches_the_application() {
    let base = without_shim();
    assert!(base.status.success());
    for stage in ["init", "hook", "call", "record", "exit"] {
        let d = tmp(&format!("panic-{stage}"));
        let log = d.join("x.jsonl");
        let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", &log).env("MRSHIM_DEBUG_PANIC", stage));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{stage}: {err}");
        assert_eq!(stdout(&o), stdout(&base), "{stage}: every call answered as without the shim");
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("internal error")).collect();
        assert_eq!(
            lines.len(),
            if stage == "exit" || stage == "init" { 1 } else { 2 },
            "{stage}: one line, plus the summary's count: {err}"
        );
        assert!(
            lines[0].starts_with("mrshim: internal error in ")
                && lines[0].contains(&format!("MRSHIM_DEBUG_PANIC={stage} at ")),
            "{stage}: {err}"
        );
        assert!(lines[0].contains("the call was passed through to the real function"), "{stage}: {err}");
        assert!(!err.contains("panicked"), "{stage}: no Rust panic message: {err}");
        if stage == "init" {
            assert!(!log.exists(), "init: a shim that could not start records nothing");
            continue;
        }
        let recs = records(&log);
        let errors: Vec<_> = recs.iter().filter(|r| r.kind == Some(Kind::Error)).collect();
        let kinds: Vec<Kind> = recs.iter().map(|r| r.kind.unwrap()).collect();
        match stage {
            // nine intercepted calls, each one an error record instead of its reg/dereg record
            "hook" | "call" | "record" => {
                assert_eq!(errors.len(), 9, "{stage}: {kinds:?}");
                assert!(errors.iter().all(|r| r
                    .error
                    .as_deref()
                    .unwrap()
                    .starts_with(&format!("MRSHIM_DEBUG_PANIC={stage} at "))));
                let calls: HashSet<&str> = errors.iter().map(|r| r.call.as_str()).collect();
                assert_eq!(
                    calls,
                    HashSet::from([
                        "ibv_reg_mr",
                        "ibv_reg_mr_iova",
                        "ibv_reg_mr_iova2",
                        "ibv_reg_dmabuf_mr",
                        "ibv_dereg_mr"
                    ]),
                    "{stage}"
                );
                let sum = recs.last().unwrap().summary.as_ref().unwrap_or_else(|| panic!("{stage}: {kinds:?}"));
                assert_eq!(sum.internal_errors, 9, "{stage}");
                // hook, call: the shim never got to count the calls; record: it did, then failed
                // to write
                assert_eq!(sum.calls, if stage == "record" { 9 } else { 0 }, "{stage}");
                assert!(err.contains(", 9 internal errors (each call passed through)"), "{stage}: {err}");
                let report = stdout(&run(cmd(mrshim_bin()).arg("analyze").arg(&log)));
                assert!(
                    report.contains("libmrshim.so caught an internal error in ibv_reg_mr on "),
                    "{stage}: analyze says so: {report}"
                );
            }
            _ => {
                assert_eq!(errors.len(), 1, "exit: {kinds:?}");
                assert_eq!(errors[0].call, "the exit summary");
                assert!(!kinds.contains(&Kind::Summary), "exit: {kinds:?}");
                assert_eq!(
                    kinds.iter().filter(|k| matches!(k, Kind::Reg | Kind::Dereg)).count(),
                    9,
                    "exit: every call recorded"
                );
            }
        }
    }
}

/// Registrations during start-up (a preload's constructor that runs before the shim's own) and
/// from inside malloc (so also from the shim's own allocations, while it is inside a hook): the
/// program runs as without the shim, nothing recurses, every call of the program is recorded
/// once, and the constructor's registration is on record first.
#[test]
fn registrations_at_start_up_and_from_inside_malloc() {
    let f = fake();
    let pre = f.dir.join("libregpre.so");
    let shim = shim_lib();
    let base = without_shim();
    for order in [format!("{} {}", shim.display(), pre.display()), format!("{} {}", pre.display(), shim.display())] {
        let d = tmp("early");
        let o = run(fake_cmd("fake_linked")
            .env("LD_PRELOAD", &order)
            .env("MRSHIM_LOG", &d)
            .env("MRSHIM_SUMMARY", "off")
            .env("REG_PRELOAD_CTOR", "1")
            .env("REG_PRELOAD_MALLOC", "200"));
        let err = stderr(&o);
        assert!(o.status.success(), "{order}: {:?} {err}", o.status);
        // the preload's registrations take lkeys of their own: compare the rest
        let shape = |s: String| s.lines().map(|l| l.split(" lkey=").next().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(shape(stdout(&o)), shape(stdout(&base)), "{order}");
        let made: u64 = err
            .lines()
            .find_map(|l| {
                l.strip_prefix("reg_preload: ")?.strip_suffix(" registered and deregistered, 0 failed")?.parse().ok()
            })
            .unwrap_or_else(|| panic!("{order}: {err}"));
        assert!(made >= 2, "{order}: {err}");
        let recs = records(&only_file(&d));
        let regs: Vec<_> = recs.iter().filter(|r| matches!(r.kind, Some(Kind::Reg) | Some(Kind::Dereg))).collect();
        assert!(regs.iter().all(|r| (r.result == "ok" || r.probe) && r.attempt == 0), "{order}");
        assert_eq!(
            (regs[0].call.as_str(), regs[0].length, regs[1].call.as_str()),
            ("ibv_reg_mr", Some(4096), "ibv_dereg_mr"),
            "{order}: the constructor's calls come first"
        );
        // the program's own nine calls, each recorded once, whatever the preload did in between
        let mine: Vec<&str> = regs.iter().filter(|r| r.addr != regs[0].addr).map(|r| r.call.as_str()).collect();
        assert_eq!(mine, PROGRAM_CALLS, "{order}");
        assert!(regs.len() as u64 <= 2 * made + 9, "{order}: at most one record per call");
    }
}

/// A full disk: one warning line, the program unaffected, and the summary says how many records
/// were lost (the config line, nine calls, the summary itself). MRSHIM_LOG=off: no file anywhere, the summary still printed.
#[test]
fn a_full_disk_warns_once_and_off_writes_nothing() {
    let base = without_shim();
    let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", "/dev/full"));
    assert!(o.status.success());
    assert_eq!(stdout(&o), stdout(&base));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(lines[0], "mrshim: writing a record failed: No space left on device (os error 28); this and possibly later records are lost, calls pass through");
    assert!(
        lines[1].contains("MRSHIM INFO summary: 9 calls") && lines[1].ends_with(", 0 records written, 11 lost"),
        "{err}"
    );
    let d = tmp("off");
    let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", "off").current_dir(&d));
    assert!(o.status.success());
    assert_eq!(stdout(&o), stdout(&base));
    let err = stderr(&o);
    assert_eq!(err, "", "off, nothing failed: quiet");
    assert!(files(&d).is_empty(), "off: nothing written");
}

#[test]
fn unwritable_log_warns_once_and_the_program_works() {
    let d = tmp("unwritable");
    std::fs::write(d.join("file"), "").unwrap();
    let dest = d.join("file/sub/x.jsonl");
    let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", &dest).env("MRSHIM_SUMMARY", "off"));
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 6);
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with(&format!("mrshim: cannot open the log {:?}", dest.display().to_string())), "{err}");
    assert!(lines[0].ends_with("Not a directory (os error 20); records are not written, calls pass through"), "{err}");
}

#[test]
fn symlinked_log_file_is_not_followed() {
    let d = tmp("symlink");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, d.join("log.jsonl")).unwrap();
    let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", d.join("log.jsonl")).env("MRSHIM_SUMMARY", "off"));
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(stderr(&o).contains("Too many levels of symbolic links"), "{}", stderr(&o));
}

#[test]
fn created_files_are_0640_or_stricter() {
    use std::os::unix::fs::PermissionsExt;
    let d = tmp("mode");
    let o = run(fake_cmd("fake_linked").env("MRSHIM_LOG", &d));
    assert!(o.status.success());
    let mode = std::fs::metadata(only_file(&d)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o640, 0, "{mode:o}");
}

/// Both writers: a per-process file (a directory: the shared mapping, grown ahead with blank
/// lines that nobody trims after a SIGKILL) and a name several processes may share (write(2)).
#[test]
fn sigkill_right_after_a_registration_keeps_the_record() {
    for per_process in [true, false] {
        let d = tmp(if per_process { "sigkill" } else { "sigkill-shared" });
        let log = if per_process { d.clone() } else { d.join("shared.jsonl") };
        let o = run(fake_cmd("fake_linked").arg("kill").env("MRSHIM_LOG", &log));
        assert_eq!(o.status.signal(), Some(9));
        assert_eq!(stdout(&o), "reg_mr lkey=100 rkey=1100\n");
        let f = only_file(&d);
        let text = std::fs::read_to_string(&f).unwrap();
        let end = text.trim_end_matches('\n').len() + 1;
        if per_process {
            // the records, then at most one chunk (256 KiB) of newlines: never a NUL byte
            assert!(text.len() > end && text.len() - end <= 256 << 10, "{} of {}", end, text.len());
        } else {
            assert_eq!(end, text.len(), "write(2): nothing after the records");
        }
        let records_only = tmp(if per_process { "sigkill-r" } else { "sigkill-shared-r" }).join("log.jsonl");
        std::fs::write(&records_only, &text[..end]).unwrap();
        let recs = records(&records_only);
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[1].call.as_str(), recs[1].lkey, recs[1].result.as_str()), ("ibv_reg_mr", Some(100), "ok"));
    }
}

/// `_exit` skips exit handlers (forked children end so): the mapped log's blank end is trimmed
/// by the `_exit`/`_Exit` hooks — but not by a `vfork` child's `_exit`, which shares the parent's
/// mapping while the parent goes on writing.
#[test]
fn a_log_ends_with_its_last_record_after_exit_without_handlers() {
    for mode in ["_exit", "_Exit", "vfork"] {
        let d = tmp(&format!("exit{mode}"));
        let o = run(fake_cmd("fake_linked").arg(mode).env("MRSHIM_LOG", &d));
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stderr(&o));
        let f = only_file(&d);
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.ends_with("}\n"), "{mode}: the file ends with {} blank bytes", text.len() - text.trim_end().len());
        let recs = records(&f);
        let regs = recs.iter().filter(|r| r.call == "ibv_reg_mr" && r.result.as_str() == "ok").count();
        assert_eq!(regs, if mode == "vfork" { 2 } else { 1 }, "{mode}");
    }
}

#[test]
fn fork_gives_the_child_its_own_file_and_pid() {
    let d = tmp("fork");
    let o = run(fake_cmd("fake_linked").arg("fork").env("MRSHIM_LOG", &d));
    assert!(o.status.success(), "{}", stderr(&o));
    let fs = files(&d);
    assert_eq!(fs.len(), 2, "{fs:?}");
    let all: Vec<Vec<mrshim_record::Reg>> = fs.iter().map(|f| records(f)).collect();
    let pids: HashSet<u32> = all.iter().map(|r| r[0].pid).collect();
    assert_eq!(pids.len(), 2);
    for recs in &all {
        let pid = recs[0].pid;
        assert_eq!(recs[0].kind, Some(Kind::Config));
        assert!(recs.iter().all(|r| r.pid == pid), "every record of a file has that file's pid");
        assert!(recs.iter().any(|r| r.call == "ibv_reg_mr"));
        assert!(fs.iter().any(|f| f.to_str().unwrap().ends_with(&format!("-p{pid}.jsonl"))));
    }
}

#[test]
fn children_forked_while_other_threads_are_inside_the_shim_never_hang() {
    // Every fork lands while four threads register through the shim (locks held for a few ns
    // at a time); each child registers, fails a registration and exit()s with its summary.
    let d = tmp("fork-busy");
    let o = run(fake_cmd("fake_linked")
        .args(["fork-busy", "100"])
        .env("MRSHIM_LOG", &d)
        .env("FAKE_FAIL_RELAXED", "1")
        .env("MRSHIM_WARN", "off"));
    assert_eq!(stdout(&o), "forks 100 hung 0 failed 0\n", "{}", stderr(&o));
    assert!(o.status.success());
    // each child wrote its own file, ending with its summary
    let fs = files(&d);
    assert_eq!(fs.len(), 101, "one file per process");
    let child = fs
        .iter()
        .map(|f| records(f))
        .find(|r| r.len() == 5)
        .expect("a child's file: config, reg, dereg, failure, summary");
    let s = child.last().unwrap().summary.as_ref().unwrap();
    assert_eq!((s.calls, s.failures, s.registered_bytes), (3, 1, 0));
}

/// The fork-busy hang: the child's first registration looked up the GPU runtimes by listing the
/// loaded objects (dl_iterate_phdr), whose lock glibc 2.36 does not give back to a child forked
/// while another thread held it — as the parent's threads did, building the same lookup. The
/// lookup now happens before the fork (atfork prepare); the fork waits for the thread instead.
#[test]
fn a_child_forked_while_another_thread_lists_the_loaded_objects_never_hangs() {
    let d = tmp("fork-in-loader");
    let o = run(fake_cmd("fake_linked").arg("fork-in-loader").env("MRSHIM_LOG", &d).env("MRSHIM_WARN", "off"));
    assert_eq!(stdout(&o), "child exit 0\n", "{}", stderr(&o));
    assert!(o.status.success());
}

#[test]
fn a_fifo_at_the_per_process_name_blocks_neither_the_thread_nor_a_forked_child() {
    // The parent's log is a FIFO nobody reads: opening it used to block the registering thread
    // inside the shim, holding the lock that serialises opening (see tests/shim_hostile.rs).
    let d = tmp("fork-opening");
    let o = run(fake_cmd("fake_linked")
        .args(["fork-opening", d.to_str().unwrap()])
        .env("MRSHIM_LOG", d.join("log-p%p.jsonl")));
    assert_eq!(stdout(&o), "child ok, parent wrote nothing\n", "{}", stderr(&o));
    let fs = files(&d);
    assert_eq!(fs.len(), 1, "{fs:?}");
    let recs = records(&fs[0]);
    assert_eq!(recs.iter().filter(|r| r.kind == Some(Kind::Reg)).count(), 1);
    assert!(recs.last().unwrap().summary.is_some());
}

#[test]
fn eight_threads_lose_no_record() {
    let d = tmp("threads");
    let o = run(fake_cmd("fake_linked").args(["threads", "500"]).env("MRSHIM_LOG", d.join("t.jsonl")));
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = records(&d.join("t.jsonl"));
    assert_eq!(recs.len(), 2 + 8 * 500 * 2);
    let seqs: HashSet<u64> = recs[1..recs.len() - 1].iter().map(|r| r.seq).collect();
    assert_eq!(seqs.len(), 8000);
    let tids: HashSet<u32> = recs.iter().filter(|r| r.kind == Some(Kind::Reg)).map(|r| r.tid).collect();
    assert_eq!(tids.len(), 8);
    let s = recs.last().unwrap().summary.as_ref().unwrap();
    assert_eq!((s.calls, s.records_lost, s.registered_bytes), (8000, 0, 0));
}

#[test]
fn stderr_destination_and_failures_level() {
    let o = run(fake_cmd("fake_linked")
        .env("MRSHIM_LOG", "stderr")
        .env("MRSHIM_LEVEL", "failures")
        .env("FAKE_FAIL_RELAXED", "1")
        .env("MRSHIM_SUMMARY", "off"));
    assert!(o.status.success());
    assert!(stdout(&o).contains("reg_mr_iova2 failed errno=22\n"));
    let err = stderr(&o);
    let json: Vec<mrshim_record::Reg> =
        err.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<Kind> = json.iter().map(|r| r.kind.unwrap()).collect();
    // MRSHIM_SUMMARY=off silences the stderr line only; the log keeps its summary record
    assert_eq!(kinds, [Kind::Config, Kind::Reg, Kind::Reg, Kind::Summary], "config, the failure, the probe: {err}");
    assert!(!err.contains("INFO summary"));
    assert_eq!(json[1].errno_name.as_deref(), Some("EINVAL"));
    assert!(json[2].probe);
    assert_eq!(err.lines().filter(|l| l.contains("MRSHIM WARN")).count(), 1);
}

#[test]
fn mrshim_exec_preloads_the_shim_next_to_it() {
    let d = tmp("exec");
    let f = fake();
    let o = run(cmd(mrshim_bin())
        .args(["exec", "--log"])
        .arg(&d)
        .arg("--")
        .arg(f.prog("fake_linked"))
        .env("LD_LIBRARY_PATH", f.lib_dir())
        .env("OMPI_COMM_WORLD_RANK", "4"));
    assert!(o.status.success(), "{}", stderr(&o));
    let file = only_file(&d);
    assert!(file.file_name().unwrap().to_str().unwrap().starts_with(&format!("mrshim-{}-r4-p", host())));
    assert_eq!(records(&file).len(), 11);
    // exit code and missing command
    let o = run(cmd(mrshim_bin()).args(["exec", "--log"]).arg(&d).args(["--", "/bin/sh", "-c", "exit 5"]));
    assert_eq!(o.status.code(), Some(5));
    let o = run(cmd(mrshim_bin()).args(["exec", "--log"]).arg(&d).args(["--", "/no/such/cmd"]));
    assert_eq!(o.status.code(), Some(127));
    assert!(
        stderr(&o).starts_with("mrshim exec: cannot run /no/such/cmd: No such file or directory"),
        "{}",
        stderr(&o)
    );
    let help = run(cmd(mrshim_bin()).args(["exec", "--help"]));
    for v in ["MRSHIM_LOG", "MRSHIM_LEVEL", "MRSHIM_WARN", "MRSHIM_SUMMARY", "%h", "%p", "%r"] {
        assert!(stdout(&help).contains(v), "{v}");
    }
}

/// Every variable the shim reads is documented where users look: `mrshim --help`,
/// `mrshim exec --help` and README.md.
#[test]
fn every_variable_is_in_the_help_and_the_readme() {
    let help = stdout(&run(cmd(mrshim_bin()).arg("--help")));
    let exec_help = stdout(&run(cmd(mrshim_bin()).args(["exec", "--help"])));
    let readme = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim_md = std::fs::read_to_string(root.join("docs/shim.md")).unwrap();
    for v in mrshim_core::config::VARS {
        assert!(help.contains(v), "mrshim --help lacks {v}");
        assert!(exec_help.contains(v), "mrshim exec --help lacks {v}");
        assert!(readme.contains(&format!("`{v}`")), "README.md lacks {v}");
        assert!(shim_md.contains(&format!("`{v}`")), "docs/shim.md lacks {v}");
    }
    // The simulator's own variables: `mrshim sim --help` and README.
    let sim_help = stdout(&run(cmd(mrshim_bin()).args(["sim", "--help"])));
    for v in mrshim_names(&root.join("sim"), &|p| p.components().any(|c| c.as_os_str() == "src")) {
        assert!(v.starts_with("MRSHIM_SIM_"), "{v}: the simulator reads only MRSHIM_SIM_* variables");
        assert!(sim_help.contains(&v), "mrshim sim --help lacks {v}");
        assert!(readme.contains(&format!("`{v}`")), "README.md lacks {v}");
    }
}

/// The `MRSHIM_*` names read from the environment by the Rust sources under `dir` that `keep`
/// selects (`var("…")`, `var_os("…")`, `getenv`).
fn mrshim_names(dir: &std::path::Path, keep: &dyn Fn(&std::path::Path) -> bool) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "target" && n != "tests" && n != "benches") {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && keep(&p) {
                let text = std::fs::read_to_string(&p).unwrap();
                for pat in ["var(\"MRSHIM_", "var_os(\"MRSHIM_", "getenv(\"MRSHIM_"] {
                    for (i, _) in text.match_indices(pat) {
                        let rest = &text[i + pat.len() - "MRSHIM_".len()..];
                        let name: String = rest
                            .chars()
                            .take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit())
                            .collect();
                        out.insert(name);
                    }
                }
            }
        }
    }
    out
}

/// The shim reads its environment in one place: crates/shim-core/src/config.rs. A `MRSHIM_*`
/// read anywhere else in libmrshim.so's sources (src/, the crates it links) bypasses the one
/// grammar, `mrshim exec`'s check and the config record.
#[test]
fn the_shim_reads_no_variable_outside_its_config_module() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim_crates = ["shim-core", "bounce", "retry", "dirty", "forklock", "access", "verbs", "errno"];
    let mut stray = Vec::new();
    for dir in
        std::iter::once(root.join("src")).chain(shim_crates.iter().map(|c| root.join("crates").join(c).join("src")))
    {
        let keep = |p: &std::path::Path| !p.ends_with("shim-core/src/config.rs");
        stray.extend(mrshim_names(&dir, &keep).into_iter().map(|n| format!("{n} under {}", dir.display())));
    }
    assert!(stray.is_empty(), "read outside crates/shim-core/src/config.rs: {stray:?}");
}
