//! Regression tests for the bounce defects of issue 28 item 4 that the bfix branch left open
//! (docs/bounce.md): each runs tests/c/bounce_defects.c in one process on the simulator, every
//! registration a bounce region (the device refuses relaxed ordering), remote access declared
//! announced (`MRSHIM_BOUNCE_REMOTE=announced`: the program announces every peer access).
mod shim_util;
use shim_util::*;
use std::path::PathBuf;
use std::process::Output;

fn prog() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let p = tmp("c-bounce-defects").join("bounce_defects");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        cc(&[
            "-O1",
            "-o",
            p.to_str().unwrap(),
            src_c("bounce_defects.c").to_str().unwrap(),
            &format!("-L{}", sim_lib_dir().display()),
            "-libverbs",
        ]);
        p
    })
    .clone()
}

fn world(name: &str) -> SimWorld {
    SimWorld::new(name)
        .with("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed")
        .with("MRSHIM_RETRY", "bounce")
        .with("MRSHIM_BOUNCE_REMOTE", "announced")
}

/// `mode` run with its records in the world's `logs/`: (output, records).
fn run_mode(w: &SimWorld, mode: &str, env: &[(&str, &str)]) -> (Output, Vec<mrshim_record::Reg>) {
    let logs = w.dir.join(format!("logs-{mode}"));
    let _ = std::fs::remove_dir_all(&logs);
    let o = run(w.cmd(prog()).arg(mode).env("MRSHIM_LOG", format!("{}/", logs.display())).envs(env.iter().copied()));
    let recs = files(&logs).iter().flat_map(|f| records(f)).collect();
    (o, recs)
}

fn all(o: &Output) -> String {
    format!("{:?}\n{}{}", o.status, stdout(o), stderr(o))
}

fn violations<'a>(recs: &'a [mrshim_record::Reg], kind: &str) -> Vec<&'a mrshim_record::Reg> {
    recs.iter().filter(|r| r.call == kind).collect()
}

/// N8: a PROT_NONE guard page inside a REMOTE_WRITE bounce region, made after the registration.
/// The shim never touches it (before: SIGSEGV in ibv_post_recv's fold): the SEND's bytes arrive
/// exact, and the peer's write into the guard page, which the application cannot be given, is a
/// violation — one WARN line and a record naming the page.
#[test]
fn a_guard_page_inside_a_bounce_region_is_never_touched() {
    let w = world("bd-guard");
    let (o, recs) = run_mode(&w, "guard", &[]);
    assert!(o.status.success() && stdout(&o).contains("guard: ok"), "{}", all(&o));
    assert!(stderr(&o).contains("bounce rescued") || stderr(&o).contains("rescued by bounce"), "{}", all(&o));
    let v = violations(&recs, "inaccessible_pages");
    assert_eq!(v.len(), 1, "{recs:?}\n{}", all(&o));
    let err = stderr(&o);
    let lines = err.lines().filter(|l| l.contains("bounce coherence violation (inaccessible_pages)")).count();
    assert_eq!(lines, 1, "{}", all(&o));
}

/// Extended CQs: a receiver whose CQ is made with `ibv_create_cq_ex` (in a context that already
/// has a bounce region) and polled with `ibv_start_poll`/`ibv_end_poll`. Every SEND's bytes and
/// every WRITE_WITH_IMM's are in the application's buffer when its completion is polled (before:
/// they stayed in the shadow — the extended poll was not wrapped).
#[test]
fn completions_of_an_extended_cq_bring_the_bytes_over() {
    extended_cq_exact("cqex");
}

/// `mode` of bounce_defects.c's extended-CQ test: every byte exact, rescued, no violation.
fn extended_cq_exact(mode: &str) {
    let w = world(&format!("bd-{mode}"));
    let (o, recs) = run_mode(&w, mode, &[]);
    assert!(o.status.success() && stdout(&o).contains("cqex: ok"), "{}", all(&o));
    assert!(stderr(&o).contains("rescued by bounce"), "{}", all(&o));
    assert!(recs.iter().all(|r| r.kind != Some(mrshim_record::Kind::Violation)), "{recs:?}");
}

/// The same with the extended CQ made before the context had any bounce region (UCX and NCCL
/// make their CQs before they register buffers). Before: that CQ was made by the provider alone,
/// its polls never wrapped — every received byte stayed in the shadow.
#[test]
fn an_extended_cq_made_before_the_first_bounce_region_is_followed() {
    extended_cq_exact("cqex-early");
}

/// N14, answered by the contract (docs/bounce.md): one userfaultfd per page, so the
/// application's own `UFFDIO_REGISTER` on a buffer the shim tracks fails with EBUSY — and with
/// `MRSHIM_BOUNCE_TRACK=off` (what the contract tells such applications to run with) it
/// succeeds. Either way the SENDs before and after carry the application's bytes.
#[test]
fn an_applications_own_userfaultfd_on_a_tracked_buffer_is_ebusy_and_works_with_tracking_off() {
    let w = world("bd-uffd");
    let (o, _) = run_mode(&w, "uffd", &[]);
    if o.status.code() == Some(3) {
        assert!(stdout(&o).contains("not available here"), "{}", all(&o));
        eprintln!("userfaultfd is not available to this process: nothing to check");
        return;
    }
    assert!(o.status.success() && stdout(&o).contains("uffd: ok"), "{}", all(&o));
    assert!(stdout(&o).contains(&format!("uffd: register errno={} ", libc::EBUSY)), "{}", all(&o));
    let (o, _) = run_mode(&w, "uffd", &[("MRSHIM_BOUNCE_TRACK", "off")]);
    assert!(o.status.success() && stdout(&o).contains("uffd: ok"), "{}", all(&o));
    assert!(stdout(&o).contains("uffd: register errno=0 (registered)"), "{}", all(&o));
}

/// N4: a buffer the kernel writes through io_uring's fixed-buffer pin (`IORING_OP_READ_FIXED`,
/// raw system calls as liburing makes them: no page fault, so write tracking sees nothing), a
/// SEND announcing it, the peer's RDMA READ. With tracking (the default) the fold before the
/// SEND compares the whole buffer (it is due: a second after the last check), finds bytes no
/// fault reported, folds them — the peer reads the file's bytes — and reports the
/// `untracked_write` violation (tracking of the buffer stops). Before: every byte stale. With
/// `MRSHIM_BOUNCE_TRACK=off`: exact, no violation. Where io_uring is disabled
/// (kernel.io_uring_disabled) the program says so and the test checks only the fallback.
#[test]
fn kernel_writes_through_io_uring_fixed_buffers_are_found_and_reported() {
    let w = world("bd-uring");
    let dir = w.dir.to_str().unwrap().to_string();
    let uring = |track: &str| {
        let logs = w.dir.join(format!("logs-uring-{track}"));
        let _ = std::fs::remove_dir_all(&logs);
        let o = run(w
            .cmd(prog())
            .args(["uring", &dir])
            .env("MRSHIM_LOG", format!("{}/", logs.display()))
            .env("MRSHIM_BOUNCE_TRACK", track));
        let recs: Vec<mrshim_record::Reg> = files(&logs).iter().flat_map(|f| records(f)).collect();
        (o, recs)
    };
    let (o, recs) = uring("off");
    if o.status.code() == Some(3) {
        assert!(stdout(&o).contains("io_uring not available here"), "{}", all(&o));
        eprintln!("io_uring is disabled on this machine: only the program's fallback was checked");
        return;
    }
    assert!(o.status.success() && stdout(&o).contains("uring: ok"), "tracking off: {}", all(&o));
    assert!(violations(&recs, "untracked_write").is_empty(), "{recs:?}");
    let (o, recs) = uring("on");
    assert!(o.status.success() && stdout(&o).contains("uring: ok"), "tracking on: {}", all(&o));
    assert_eq!(violations(&recs, "untracked_write").len(), 1, "{recs:?}\n{}", all(&o));
    assert!(stderr(&o).contains("bounce coherence violation (untracked_write)"), "{}", all(&o));
}

/// Bytes both a peer (not announced yet) and the application wrote since the last sync, found
/// by the fold before a SEND: the application's are kept and the shim says so — a
/// `write_conflict` violation (WARN line, record, the exit summary's count, analyze's
/// `bounce-violation`); before, the peer's bytes were dropped in silence. Peer bytes the
/// application left alone, in a gap of the fold's run, reach the application at the next RECV
/// completion (before: the fold put the old bytes back over them in the shadow).
#[test]
fn bytes_both_a_peer_and_the_application_wrote_are_a_write_conflict() {
    let w = world("bd-conflict");
    let (o, recs) = run_mode(&w, "conflict", &[]);
    assert!(o.status.success() && stdout(&o).contains("conflict: ok"), "{}", all(&o));
    let v = violations(&recs, "write_conflict");
    assert_eq!(v.len(), 1, "{recs:?}\n{}", all(&o));
    assert!(v[0].error.as_deref().unwrap_or("").starts_with("10 bytes of the bounce region"), "{:?}", v[0]);
    let err = stderr(&o);
    assert!(err.contains("bounce coherence violation (write_conflict): 10 bytes"), "{}", all(&o));
    assert!(err.contains("1 bounce coherence violations"), "the exit summary counts it: {}", all(&o));
    let a = run(cmd(mrshim_bin()).arg("analyze").arg(w.dir.join("logs-conflict")));
    let report = stdout(&a);
    assert!(report.contains("bounce-violation") && report.contains("write_conflict"), "{report}\n{}", stderr(&a));
}

/// An unsignalled READ into a bounce region followed by a signalled WRITE from plain memory on
/// the same QP: the WRITE takes the wrappers' slow path while a READ is pending, so its completion,
/// the only one polled, releases the READ's bytes to the application (before: stale bytes).
#[test]
fn a_write_outside_bounce_regions_completes_a_pending_read() {
    let w = world("bd-readwrite");
    let (o, _) = run_mode(&w, "readwrite", &[]);
    assert!(o.status.success() && stdout(&o).contains("readwrite: ok"), "{}", all(&o));
}
