//! The bounce contract (docs/bounce.md, "The contract"), tried with a client bounce cannot keep
//! coherent: a passive one-sided target (tests/c/passive_target.c, the KV-cache transfer
//! pattern). Two processes on the simulator, host memory the device refuses (relaxed ordering)
//! and simulated GPU memory without peer memory, under `MRSHIM_RETRY=auto` and `=bounce`: each
//! run ends byte-exact, or with the target's registration refused with its original errno, a
//! WARN line and a `refused` record — never "rescued" with stale bytes.
mod shim_util;
use shim_util::*;
use std::path::PathBuf;
use std::process::Output;

fn passive() -> PathBuf {
    mrshim_test_support::c_program(&src_c("passive_target.c"), "c", &["-libverbs", "-ldl"])
}

/// Target and initiator, each its own process and log directory, 16 MiB (4096 pages).
struct Run {
    target: Output,
    initiator: Output,
    target_recs: Vec<mrshim_record::Reg>,
}

fn run_pair(w: &SimWorld, mem: &str) -> Run {
    let exchange = w.dir.join("files");
    let _ = std::fs::remove_dir_all(&exchange);
    std::fs::create_dir_all(&exchange).unwrap();
    let side = |role: &str| {
        let logs = w.dir.join(format!("logs-{role}"));
        let _ = std::fs::remove_dir_all(&logs);
        let mut c = w.cmd(passive());
        c.args([role, exchange.to_str().unwrap(), mem, "16777216"])
            .env("MRSHIM_LOG", format!("{}/", logs.display()))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let t = side("target").spawn().expect("target");
    let i = side("initiator").spawn().expect("initiator");
    let (target, initiator) = (t.wait_with_output().unwrap(), i.wait_with_output().unwrap());
    let target_recs = files(&w.dir.join("logs-target")).iter().flat_map(|f| records(f)).collect();
    Run { target, initiator, target_recs }
}

fn both(r: &Run) -> String {
    format!(
        "target: {:?}\n{}{}\ninitiator: {:?}\n{}{}",
        r.target.status,
        stdout(&r.target),
        stderr(&r.target),
        r.initiator.status,
        stdout(&r.initiator),
        stderr(&r.initiator)
    )
}

/// Byte-exact both ways: the target saw the WRITE, the initiator read every refill.
fn assert_exact(r: &Run, what: &str) {
    assert!(r.target.status.success() && r.initiator.status.success(), "{what}: {}", both(r));
    assert!(stdout(&r.target).contains("target: ok") && stdout(&r.initiator).contains("initiator: ok"), "{what}");
}

/// The target's registration refused with `errno`: its own errno, one WARN line saying why, a
/// `refused` record naming bounce and the contract; the initiator stops before any transfer.
fn assert_refused(r: &Run, errno: &str, what: &str) {
    let (out, err) = (stdout(&r.target), stderr(&r.target));
    assert_eq!(r.target.status.code(), Some(2), "{what}: {}", both(r));
    assert!(
        out.contains("target: registration refused: errno ") && out.contains(&format!("({errno})")),
        "{what}: {out}"
    );
    let why: Vec<&str> = err.lines().filter(|l| l.contains("not bounced, outside the bounce contract")).collect();
    assert_eq!(why.len(), 1, "{what}: one line saying why: {err}");
    assert!(why[0].contains(" MRSHIM WARN ") && why[0].contains("MRSHIM_BOUNCE_REMOTE=announced"), "{}", why[0]);
    assert!(!err.contains("rescued by bounce"), "{what}: {err}");
    let refused: Vec<_> =
        r.target_recs.iter().filter(|x| x.result == "refused" && x.strategy.as_deref() == Some("bounce")).collect();
    assert_eq!(refused.len(), 1, "{what}: {:?}", r.target_recs);
    assert!(refused[0]
        .change
        .as_deref()
        .unwrap_or("")
        .starts_with("outside the bounce contract: access REMOTE_WRITE|REMOTE_READ"));
    let call = r.target_recs.iter().find(|x| Some(x.seq) == refused[0].parent_seq).expect("the failed call");
    assert_eq!((call.result.as_str(), call.errno_name.as_deref()), ("error", Some(errno)), "{what}");
    assert_eq!(r.initiator.status.code(), Some(2), "{what}: {}", both(r));
    assert!(stdout(&r.initiator).contains("initiator: target refused"), "{what}");
}

fn host_world(name: &str, retry: &str) -> SimWorld {
    // UCX-like access with relaxed ordering, which this device refuses.
    SimWorld::new(name).with("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed").with("MRSHIM_RETRY", retry)
}

fn gpu_world(name: &str, retry: &str, dmabuf: &str) -> SimWorld {
    SimWorld::gpu(name).with("MRSHIM_RETRY", retry).with("MRSHIM_SIM_DMABUF", dmabuf)
}

#[test]
fn passive_target_in_host_memory_is_exact_under_auto_and_refused_under_bounce() {
    // auto: drop-relaxed-ordering registers the memory itself, no shadow: byte-exact.
    let r = run_pair(&host_world("pt-host-auto", "auto"), "host");
    assert_exact(&r, "host, auto");
    assert!(stderr(&r.target).contains("rescued by drop-relaxed-ordering"), "{}", both(&r));
    // bounce only: the initiator's local-only buffer is bounced (inside the contract), the
    // target's is refused with the device's own errno.
    let r = run_pair(&host_world("pt-host-bounce", "bounce"), "host");
    assert_refused(&r, "EFAULT", "host, bounce");
    assert!(stderr(&r.initiator).contains("rescued by bounce"), "{}", both(&r));
}

#[test]
fn passive_target_in_gpu_memory_is_exact_through_dmabuf_and_refused_without() {
    // The runtime exports a dmabuf: auto registers the device memory itself, byte-exact.
    let r = run_pair(&gpu_world("pt-gpu-dmabuf", "auto", "on"), "cuda");
    assert_exact(&r, "GPU, auto, dmabuf");
    assert!(stderr(&r.target).contains("rescued by va-to-dmabuf"), "{}", both(&r));
    // No dmabuf, no peer memory: only bounce is left, and the target is refused with EINVAL
    // (the simulated NIC's answer for device memory), under auto and bounce alike.
    for retry in ["auto", "bounce"] {
        let r = run_pair(&gpu_world(&format!("pt-gpu-{retry}"), retry, "off"), "cuda");
        assert_refused(&r, "EINVAL", &format!("GPU, {retry}, no dmabuf"));
    }
}

/// What the refusal keeps out: declared announced, the same client is bounced and reads and
/// serves stale bytes — every page, as the issue measured. (So this test fails if the client
/// stops being one bounce cannot serve, and the refusals above are what keeps the bytes right.)
#[test]
fn declared_announced_the_passive_target_serves_stale_bytes() {
    let w = host_world("pt-host-announced", "bounce").with("MRSHIM_BOUNCE_REMOTE", "announced");
    let r = run_pair(&w, "host");
    assert!(stderr(&r.target).contains("rescued by bounce"), "{}", both(&r));
    assert_eq!(r.target.status.code(), Some(1), "{}", both(&r));
    assert!(
        stdout(&r.target).contains("target: after the initiator's WRITE: stale: 4096 of 4096 pages"),
        "{}",
        both(&r)
    );
    assert!(
        stdout(&r.initiator).contains("initiator: READ after the target's refill: stale: 4096 of 4096 pages"),
        "{}",
        both(&r)
    );
}
