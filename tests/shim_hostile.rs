//! libmrshim.so in hostile conditions (issue 20): file-size limits, FIFOs, descriptors the
//! application closes and reuses, log paths other users control, privileged programs, strange
//! host names and values. Real processes on the fake libibverbs; every test names what a user sees.

mod shim_util;
use mrshim_record::Kind;
use shim_util::*;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

fn lchown_nobody(p: &Path) {
    std::os::unix::fs::lchown(p, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// Each line of `text` is a complete record.
fn all_complete(text: &str) -> usize {
    assert!(text.is_empty() || text.ends_with('\n'), "a torn last line: {:?}", &text[text.len().saturating_sub(80)..]);
    for l in text.lines() {
        serde_json::from_str::<mrshim_record::Reg>(l).unwrap_or_else(|e| panic!("{l}: {e}"));
    }
    text.lines().count()
}

/// Item 2: past RLIMIT_FSIZE write(2) raises SIGXFSZ (exit 153) and cuts the record that straddles
/// the limit. The shim writes only what fits, says why the rest is lost, and the program finishes.
#[test]
fn a_file_size_limit_never_kills_the_job_and_the_lost_records_are_counted() {
    let d = tmp("fsize");
    let log = d.join("x.jsonl");
    let mut c = fake_cmd("hostile");
    c.args(["loop", "200"]).env("MRSHIM_LOG", &log);
    // SAFETY: setrlimit is async-signal-safe; the closure runs in the child before exec.
    unsafe {
        c.pre_exec(|| {
            let r = libc::rlimit { rlim_cur: 8192, rlim_max: libc::RLIM_INFINITY };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let o = run(&mut c);
    assert_eq!(o.status.signal(), None, "killed: {}", stderr(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "done 200\n");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.len() <= 8192, "{}", text.len());
    let written = all_complete(&text) as u64;
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(
        lines[0],
        "mrshim: writing a record failed: the log reached the file-size limit (RLIMIT_FSIZE, `ulimit -f`) of 8192 bytes; this and possibly later records are lost, calls pass through"
    );
    // config + 400 calls + summary, written or lost, nothing else
    let lost = 402 - written;
    assert!(lines[1].ends_with(&format!(", {written} records written, {lost} lost")), "{err}");
}

/// Item 3: a FIFO at the log's name (made by a careless script, or by another user at the
/// predictable per-process name) must not hang the job at its first registration, and nothing is
/// written into it even when someone reads it.
#[test]
fn a_fifo_as_the_log_never_blocks_and_gets_nothing() {
    let d = tmp("fifo");
    let fifo = d.join("x.jsonl");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    for reader in [false, true] {
        // with a reader the open succeeds (O_NONBLOCK); without one it fails at once (ENXIO)
        let r =
            reader.then(|| std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap());
        let t = Instant::now();
        let mut c = cmd("timeout");
        c.args(["-k", "1", "20"]).arg(fake().prog("hostile")).args(["loop", "3"]);
        c.env("LD_LIBRARY_PATH", fake().lib_dir()).env("LD_PRELOAD", shim_lib()).env("MRSHIM_LOG", &fifo);
        let o = run(&mut c);
        assert!(o.status.success(), "reader {reader}: {:?} {}", o.status, stderr(&o));
        assert!(t.elapsed() < Duration::from_secs(10));
        let err = stderr(&o);
        let want = if reader {
            "it is a FIFO: records go only to regular files"
        } else {
            "it is a FIFO or a device without a reader: records go only to regular files"
        };
        assert!(err.lines().next().unwrap().contains(want), "{err}");
        if let Some(r) = r {
            let mut got = Vec::new();
            let _ = std::io::Read::read_to_end(&mut &r, &mut got);
            assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
        }
    }
}

/// Item 4: a daemon that closes every inherited descriptor and then reuses the numbers must not
/// get records in its own file; the shim reopens its log and loses nothing.
#[test]
fn closing_and_reusing_descriptors_never_puts_records_in_the_applications_files() {
    let d = tmp("closefds");
    let app = d.join("app.txt");
    let logs = d.join("logs");
    let o = run(fake_cmd("hostile")
        .args(["closefds", app.to_str().unwrap()])
        .env("MRSHIM_LOG", format!("{}/", logs.display())));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&app).unwrap(), "app data\n", "the application's file holds only its data");
    let recs = records(&only_file(&logs));
    let kinds: Vec<Kind> = recs.iter().map(|r| r.kind.unwrap()).collect();
    use Kind::*;
    assert_eq!(kinds, [Config, Reg, Dereg, Reg, Dereg, Reg, Dereg, Summary]);
    let s = recs.last().unwrap().summary.as_ref().unwrap();
    // (the summary record counts what was written before it)
    assert_eq!((s.records_written, s.records_lost), (7, 0));
    let err = stderr(&o);
    assert!(
        err.lines().next().unwrap().starts_with("mrshim: the application closed or replaced the log's descriptor "),
        "{err}"
    );
    assert!(err.lines().next().unwrap().ends_with(" was reopened"), "{err}");
}

/// Item 6: a directory on the log's path that is a symbolic link planted by another user is not
/// followed (O_NOFOLLOW on every component); one that root or the user made is.
#[test]
fn a_symlinked_directory_of_another_user_is_not_followed() {
    let d = tmp("dirlink");
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = d.join("logs");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    lchown_nobody(&link);
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", link.join("x.jsonl")));
    assert!(o.status.success());
    assert!(files(&elsewhere).is_empty(), "{:?}", files(&elsewhere));
    let err = stderr(&o);
    let why = "is a symbolic link that belongs to uid 65534 (neither root nor this process's uid 0): not followed";
    assert!(err.contains(&format!("{} {why}; records are not written", link.display())), "{err}");
    // the same link owned by root (an administrator's /scratch -> /lustre/scratch): followed
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", link.join("x.jsonl")));
    assert!(o.status.success());
    assert_eq!(records(&elsewhere.join("x.jsonl")).len(), 4, "{}", stderr(&o));
}

/// Issue 31 item 4: a directory in the middle of MRSHIM_LOG that another user owns (or that anyone
/// may write, without the sticky bit) is not used: that user could move root's records away and
/// plant a directory of its own for the next process. One line, calls pass through. The same
/// directory owned by root, or world-writable but sticky like /tmp, is used.
#[test]
fn a_log_directory_another_user_owns_or_anyone_may_write_is_not_used() {
    let d = tmp("dirowner");
    let mid = d.join("mid");
    std::fs::create_dir_all(mid.join("logs")).unwrap();
    std::os::unix::fs::chown(&mid, Some(NOBODY), Some(NOBODY)).unwrap();
    let base = run(fake_cmd("hostile").args(["loop", "1"]));
    for log in [mid.join("logs/x.jsonl").display().to_string(), format!("{}/", mid.join("logs/new").display())] {
        let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", &log));
        assert!(o.status.success());
        assert_eq!(o.stdout, base.stdout, "calls pass through");
        let err = stderr(&o);
        // one line, then the exit summary counting the records lost
        assert!(err.lines().nth(1).is_none_or(|l| l.contains("MRSHIM INFO summary")), "{err}");
        let why = format!(
            "the directory {} belongs to uid 65534 (neither root nor this process's uid 0): not used; records are not written, calls pass through",
            mid.display()
        );
        assert!(err.lines().next().unwrap().contains(&why), "{log}: {err}");
        assert!(!mid.join("logs/x.jsonl").exists() && !mid.join("logs/new").exists(), "{log}");
    }
    // owned by root but writable by anyone, not sticky: refused too
    std::os::unix::fs::chown(&mid, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&mid, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", mid.join("logs/x.jsonl")));
    assert!(stderr(&o).contains("is writable by others and not sticky (mode 0777): not used"), "{}", stderr(&o));
    assert!(!mid.join("logs/x.jsonl").exists());
    // sticky, as /tmp: used
    std::fs::set_permissions(&mid, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", mid.join("logs/x.jsonl")));
    assert_eq!(records(&mid.join("logs/x.jsonl")).len(), 4, "{}", stderr(&o));
    // the last directory of a file pattern, owned by another user: refused as well
    std::os::unix::fs::chown(mid.join("logs"), Some(NOBODY), Some(NOBODY)).unwrap();
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", mid.join("logs/y.jsonl")));
    assert!(stderr(&o).contains("/mid/logs belongs to uid 65534"), "{}", stderr(&o));
    assert!(!mid.join("logs/y.jsonl").exists());
}

/// Item 6: a file another user created at the log's (predictable) name is not appended to by
/// root: that would hand them addresses, the executable and environment values, and let them
/// poison the records.
#[test]
fn a_log_file_another_user_created_is_not_appended_to() {
    let d = tmp("planted");
    let planted = d.join("x.jsonl");
    std::fs::write(&planted, "planted\n").unwrap();
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).unwrap();
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", &planted));
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "planted\n");
    let err = stderr(&o);
    assert!(err.contains("it belongs to uid 65534, not to this process's uid 0: not appended to"), "{err}");
    // a hard link to someone else's file: refused too (one link only)
    let victim = d.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::hard_link(&victim, d.join("y.jsonl")).unwrap();
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", d.join("y.jsonl")));
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(stderr(&o).contains("it has 2 hard links: not appended to"), "{}", stderr(&o));
}

/// Runs `prog` as user nobody (setpriv), with the fake library and the shim preloaded.
fn as_nobody(prog: &Path) -> std::process::Command {
    let mut c = cmd("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(prog);
    c
}

/// Item 7: in a setuid program (the shim loaded through a DT_NEEDED entry, as /etc/ld.so.preload
/// would) the unprivileged caller's MRSHIM_LOG must not make root create or append to a path of
/// its choosing; the caller's values are not used, the program works.
#[test]
fn a_setuid_program_ignores_the_callers_variables() {
    let d = tmp("setuid");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for lib in ["libibverbs.so.1", "libibverbs.so"] {
        std::fs::copy(fake().lib_dir().join("libibverbs.so.1"), d.join(lib)).unwrap();
    }
    std::fs::copy(shim_lib(), d.join("libmrshim.so")).unwrap();
    let prog = d.join("suid");
    let dd = d.to_str().unwrap();
    cc(&[
        "-O1",
        "-o",
        prog.to_str().unwrap(),
        src_c("hostile.c").to_str().unwrap(),
        &format!("-L{dd}"),
        "-l:libmrshim.so",
        "-libverbs",
        &format!("-Wl,-rpath,{dd}"),
    ]);
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let target = d.join("root-only");
    std::fs::create_dir(&target).unwrap();
    let o = run(as_nobody(&prog)
        .args(["loop", "2"])
        .env("MRSHIM_LOG", target.join("chosen-by-caller"))
        .env("MRSHIM_RETRY", "on")
        .env("RANK", "1\u{1b}[2J"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "done 2\n");
    assert!(files(&target).is_empty(), "root wrote where the caller chose: {:?}", files(&target));
    assert_eq!(
        stderr(&o),
        "mrshim: MRSHIM_LOG, MRSHIM_RETRY ignored: this program runs with privileges its caller does not have (setuid, setgid or file capabilities); mrshim passes every call through unrecorded\n"
    );
    // the same program without the setuid bit records as usual
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run(cmd(&prog).args(["loop", "2"]).env("MRSHIM_LOG", target.join("mine")));
    assert!(o.status.success());
    assert_eq!(records(&target.join("mine")).len(), 6);
}

/// Item 10: `%h` is the host name as a file-name part: a name set in a UTS namespace (`../x`)
/// does not move the log out of its directory.
#[test]
fn a_host_name_cannot_move_the_log_out_of_its_directory() {
    let d = tmp("hostname");
    let sub = d.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let mut c = cmd("unshare");
    c.args(["--uts", "sh", "-c", "printf %s ../x >/proc/sys/kernel/hostname && exec \"$0\" loop 1"])
        .arg(fake().prog("hostile"));
    c.env("LD_LIBRARY_PATH", fake().lib_dir()).env("LD_PRELOAD", shim_lib());
    c.env("MRSHIM_LOG", sub.join("%h.jsonl"));
    let o = run(&mut c);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files(&d), std::slice::from_ref(&sub), "nothing next to sub/");
    assert_eq!(records(&sub.join("_._x.jsonl")).len(), 4);
    // and in a log directory's per-process names
    let mut c2 = cmd("unshare");
    c2.args(["--uts", "sh", "-c", "printf %s ../y >/proc/sys/kernel/hostname && exec \"$0\" loop 1"])
        .arg(fake().prog("hostile"));
    c2.env("LD_LIBRARY_PATH", fake().lib_dir()).env("LD_PRELOAD", shim_lib());
    c2.env("MRSHIM_LOG", format!("{}/", sub.display()));
    assert!(run(&mut c2).status.success());
    let names: Vec<String> = files(&sub).iter().map(|p| p.file_name().unwrap().to_str().unwrap().to_string()).collect();
    assert!(names.iter().any(|n| n.starts_with("mrshim-_._y-p")), "{names:?}");
    assert_eq!(files(&d), [sub]);
}

/// Item 10: a log directory that cannot be created says why (EACCES), not ENOENT.
#[test]
fn a_log_directory_that_cannot_be_created_says_why() {
    let d = tmp("eacces");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let want = d.join("new/deeper/");
    let mut c = as_nobody(&fake().prog("hostile"));
    c.args(["loop", "1"]).env("LD_LIBRARY_PATH", fake().lib_dir()).env("LD_PRELOAD", shim_lib());
    c.env("MRSHIM_LOG", format!("{}/", want.display())).env("MRSHIM_SUMMARY", "off");
    let o = run(&mut c);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "creating {}/new: Permission denied (os error 13); records are not written",
            d.display()
        )),
        "{err}"
    );
}

/// Item 10: a value that is not UTF-8 is refused (not silently turned into another path), a huge
/// one is shown cut, an empty MRSHIM_RETRY / MRSHIM_INJECT is refused like an empty MRSHIM_LEVEL.
#[test]
fn odd_values_are_refused_in_one_short_line() {
    use std::os::unix::ffi::OsStrExt;
    let d = tmp("oddvalues");
    let bad = std::ffi::OsStr::from_bytes(b"x\xff.jsonl");
    let o = run(fake_cmd("hostile").args(["loop", "1"]).env("MRSHIM_LOG", bad).current_dir(&d));
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(
        err.starts_with("mrshim: MRSHIM_LOG=\"x\u{fffd}.jsonl\" is not valid (not valid UTF-8); accepted: "),
        "{err}"
    );
    assert!(files(&d).is_empty(), "{:?}", files(&d));
    let huge = "a".repeat(100_000); // (one variable is at most 128 KiB: MAX_ARG_STRLEN)
    for (var, val) in [("MRSHIM_LEVEL", huge.clone()), ("MRSHIM_LOG", format!("{}/{huge}", d.display()))] {
        let o = run(fake_cmd("hostile").args(["loop", "1"]).env(var, &val).env("MRSHIM_SUMMARY", "off"));
        assert!(o.status.success());
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{var}");
        assert!(err.len() < 1000, "{var}: a {} byte line", err.len());
        assert!(err.contains(&format!("... ({} bytes)", val.len())), "{var}: {err}");
    }
    for var in ["MRSHIM_RETRY", "MRSHIM_INJECT"] {
        let o = run(fake_cmd("hostile").args(["loop", "1"]).env(var, "").env("MRSHIM_LOG", d.join("e.jsonl")));
        assert!(o.status.success());
        assert!(
            stderr(&o).starts_with(&format!("mrshim: {var}=\"\" is not valid (empty); accepted: ")),
            "{}",
            stderr(&o)
        );
        assert!(!d.join("e.jsonl").exists());
    }
}

/// Item 1 (the reload half): a program that dlopens a libibverbs, looks the registration functions
/// up with dlvsym, registers, dlcloses it and repeats once the old range is taken by something
/// else. The copy's ibv_reg_mr calls ibv_reg_mr_iova2 through its PLT (as rdma-core does), which
/// reaches the shim; the shim must call the new copy's, not the unloaded one's (SIGSEGV).
#[test]
fn a_libibverbs_unloaded_and_loaded_again_is_called_where_it_is_now() {
    let d = tmp("reload");
    let prog = d.join("reload");
    cc(&["-O1", "-o", prog.to_str().unwrap(), src_c("reload.c").to_str().unwrap(), "-ldl"]);
    let logs = d.join("logs");
    let mut c = cmd(&prog);
    c.arg(fake().lib_dir().join("libibverbs.so.1")).arg("3");
    c.env("LD_PRELOAD", shim_lib()).env("MRSHIM_LOG", format!("{}/", logs.display()));
    let o = run(&mut c);
    assert_eq!(o.status.signal(), None, "{}", stderr(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "cycle 1 ok\ncycle 2 ok\ncycle 3 ok\n");
    let recs = records(&only_file(&logs));
    let calls: Vec<&str> = recs.iter().filter(|r| r.kind != Some(Kind::Config)).map(|r| r.call.as_str()).collect();
    assert_eq!(calls.iter().filter(|c| **c == "ibv_reg_mr").count(), 3, "{calls:?}");
    assert_eq!(calls.iter().filter(|c| **c == "ibv_dereg_mr").count(), 3, "{calls:?}");
}

/// Item 1 (the two-copies half): a program linked against one libibverbs (the simulated NIC) that
/// also opens a different private copy RTLD_LOCAL (a vendored plugin's) and looks its
/// registration functions up. Each call reaches its own copy — the linked ones the simulator, the
/// looked-up ones the private copy, including that copy's internal ibv_reg_mr → ibv_reg_mr_iova2
/// call, which lands in the shim's export — also after the private copy is closed, and every call
/// has its record with its own device.
#[test]
fn two_different_libibverbs_in_one_process_each_get_their_own_calls() {
    let d = tmp("two-copies");
    let prog = d.join("two_copies");
    let sim = format!("-L{}", sim_lib_dir().display());
    cc(&["-O1", "-o", prog.to_str().unwrap(), src_c("two_copies.c").to_str().unwrap(), &sim, "-libverbs", "-ldl"]);
    let (sim_log_path, fake_log, logs) = (d.join("sim.jsonl"), d.join("fake.log"), d.join("logs"));
    let w = SimWorld::new("two-copies-sim").with("MRSHIM_SIM_LOG", sim_log_path.to_str().unwrap());
    let mut c = w.cmd(&prog);
    c.arg(fake().lib_dir().join("libibverbs.so.1"))
        .env("FAKE_LOG", &fake_log)
        .env("MRSHIM_LOG", format!("{}/", logs.display()));
    let o = run(&mut c);
    assert_eq!(o.status.signal(), None, "{}", stderr(&o));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "both copies ok\nafter dlclose ok\n");
    // the private copy received its two registrations (each with its internal iova2 call) and
    // its two deregistrations, nothing of the linked copy's
    let fake_calls: Vec<String> = std::fs::read_to_string(&fake_log)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(
        fake_calls,
        ["ibv_reg_mr", "ibv_reg_mr_iova2", "ibv_reg_mr", "ibv_reg_mr_iova2", "ibv_dereg_mr", "ibv_dereg_mr"]
    );
    // the simulated NIC received the three linked registrations, all accepted
    let dev = sim_log(&sim_log_path);
    assert_eq!(dev.len(), 3, "{dev:?}");
    assert!(dev.iter().all(|r| r["entry"] == "ibv_reg_mr" && r["result"] == "ok"), "{dev:?}");
    let recs = records(&only_file(&logs));
    let reg_devices: Vec<&str> = recs
        .iter()
        .filter(|r| r.kind == Some(Kind::Reg) && r.call == "ibv_reg_mr")
        .map(|r| r.device.as_deref().unwrap_or("?"))
        .collect();
    assert_eq!(reg_devices.len(), 5, "{reg_devices:?}");
    assert_eq!(reg_devices.iter().filter(|d| **d == "fake0").count(), 2, "{reg_devices:?}");
    let deregs = recs.iter().filter(|r| r.call == "ibv_dereg_mr" && r.errno.unwrap_or(0) == 0).count();
    assert_eq!(deregs, 5);
}
