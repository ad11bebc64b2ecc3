//! UCX 1.13 (Debian's ucx-utils) on the simulated NIC through `mrshim sim`: the devices appear
//! in `ucx_info -d` with rc_verbs and ud_verbs, and ucx_perftest moves data between two
//! processes over both, at UCT level and through UCP's eager and rendezvous protocols. Each run
//! is repeated with the shim recording every registration and with MRSHIM_RETRY=auto; the
//! results must be the same.

mod shim_util;
use shim_util::*;
use std::path::PathBuf;
use std::process::Stdio;

/// 1 KiB goes eager, 1 MiB rendezvous: the threshold is set, not left to UCX's heuristics.
const RNDV_THRESH: &str = "65536";

#[test]
fn ucx_info_lists_rc_verbs_and_ud_verbs_on_both_devices() {
    require("ucx_info", "ucx-utils");
    for mode in MODES {
        let w = SimWorld::new(&format!("ucx-info-{mode:?}"));
        let o = run(&mut stack_cmd(&w, mode, 0, "ucx_info", &["-d"]));
        assert!(o.status.success(), "{mode:?}: {}", stderr(&o));
        let out = stdout(&o);
        for dev in ["mlx5_0:1", "mlx5_1:1"] {
            for tl in ["rc_verbs", "ud_verbs"] {
                let block = format!("#      Transport: {tl}\n#         Device: {dev}\n");
                assert!(out.contains(&block), "{mode:?}: no {tl} on {dev}:\n{out}");
            }
        }
        // UCX probes each device with registrations (relaxed ordering, then without).
        assert_stack_records(&w, mode, 1, "ucx_info");
    }
}

/// ucx_perftest server and client (client retried until the server listens); asserts both
/// succeed, prints nothing alarming, and the client's final line reports every iteration.
fn perftest(name: &str, env: &[(&str, &str)], args: &[&str], iters: u32) {
    perftest_in(&MODES, name, env, args, iters);
}

/// [`perftest`] in the given modes only; returns the last one's client "Final:" line and its
/// directory (logs).
fn perftest_in(modes: &[Mode], name: &str, env: &[(&str, &str)], args: &[&str], iters: u32) -> (String, PathBuf) {
    require("ucx_perftest", "ucx-utils");
    let mut last = (String::new(), PathBuf::new());
    for &mode in modes {
        let mut w = SimWorld::new(&format!("ucx-{name}-{mode:?}"));
        for (k, v) in env {
            w = w.with(k, *v);
        }
        let port = free_port().to_string();
        let n = iters.to_string();
        let mut s = stack_cmd(&w, mode, 0, "ucx_perftest", &["-p", &port]);
        if let Some((_, dev)) = env.iter().find(|(k, _)| *k == "UCX_NET_DEVICES") {
            // The server listens on the other device: traffic crosses from mlx5_1 to mlx5_0.
            s.env("UCX_NET_DEVICES", dev.replace("mlx5_1", "mlx5_0"));
        }
        let server = s.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut client = None;
        // Up to a minute: a loaded CI machine starts UCX slowly.
        for _ in 0..300 {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let mut cargs = vec!["127.0.0.1", "-p", &port, "-n", &n];
            if !args.contains(&"-w") {
                cargs.extend(["-w", "5"]);
            }
            cargs.extend_from_slice(args);
            let o = run(&mut stack_cmd(&w, mode, 1, "ucx_perftest", &cargs));
            if o.status.success() || !stderr(&o).contains("connect() failed") {
                client = Some(o);
                break;
            }
        }
        let c = client.expect("ucx_perftest client never connected");
        let s = server.wait_with_output().unwrap();
        let who = format!("{name} {mode:?}");
        assert!(c.status.success(), "{who} client: {}\n{}", stdout(&c), stderr(&c));
        assert!(s.status.success(), "{who} server: {}\n{}", stdout(&s), stderr(&s));
        for (side, o) in [("client", &c), ("server", &s)] {
            let err = stderr(o);
            assert!(!err.contains(" ERROR ") && !err.contains(" WARN "), "{who} {side}: {err}");
        }
        let out = stdout(&c);
        let fin = out.lines().find(|l| l.starts_with("Final:")).unwrap_or_else(|| panic!("{who}: {out}"));
        let cols: Vec<&str> = fin.split_whitespace().collect();
        assert_eq!(cols[1], n, "{who}: {fin}");
        assert_stack_records(&w, mode, 2, &who);
        last = (fin.to_string(), w.dir.clone());
    }
    last
}

#[test]
fn uct_rc_verbs_am_latency_and_put_get_bandwidth() {
    perftest("uct-rc-am-lat", &[], &["-d", "mlx5_1:1", "-x", "rc_verbs", "-t", "am_lat", "-s", "8"], 200);
    perftest(
        "uct-rc-put-bw",
        &[],
        &["-d", "mlx5_1:1", "-x", "rc_verbs", "-t", "put_bw", "-D", "zcopy", "-s", "65536"],
        100,
    );
    perftest(
        "uct-rc-get-bw",
        &[],
        &["-d", "mlx5_1:1", "-x", "rc_verbs", "-t", "get", "-D", "zcopy", "-s", "65536"],
        100,
    );
}

#[test]
fn uct_ud_verbs_am_latency_and_bandwidth() {
    perftest("uct-ud-am-lat", &[], &["-d", "mlx5_1:1", "-x", "ud_verbs", "-t", "am_lat", "-s", "8"], 200);
    perftest(
        "uct-ud-am-bw",
        &[],
        &["-d", "mlx5_1:1", "-x", "ud_verbs", "-t", "am_bw", "-D", "bcopy", "-s", "4000"],
        200,
    );
}

/// UCP over RC (UCX_TLS=rc: rc_verbs for data, ud_verbs as wire-up helper): tag matching eager
/// and rendezvous, put and get bandwidth.
#[test]
fn ucp_rc_tag_eager_rndv_put_get() {
    let env = [("UCX_TLS", "rc"), ("UCX_NET_DEVICES", "mlx5_1:1"), ("UCX_RNDV_THRESH", RNDV_THRESH)];
    perftest("ucp-rc-tag-lat-eager", &env, &["-t", "tag_lat", "-s", "1024"], 200);
    perftest("ucp-rc-tag-bw-rndv", &env, &["-t", "tag_bw", "-s", "1048576"], 50);
    perftest("ucp-rc-put-bw", &env, &["-t", "ucp_put_bw", "-s", "1048576"], 50);
    perftest("ucp-rc-get-bw", &env, &["-t", "ucp_get", "-s", "1048576"], 50);
}

/// UCP over UD only: eager and rendezvous tag matching.
#[test]
fn ucp_ud_tag_eager_rndv() {
    let env = [("UCX_TLS", "ud_verbs"), ("UCX_NET_DEVICES", "mlx5_1:1"), ("UCX_RNDV_THRESH", RNDV_THRESH)];
    perftest("ucp-ud-tag-lat-eager", &env, &["-t", "tag_lat", "-s", "1024"], 200);
    perftest("ucp-ud-tag-bw-rndv", &env, &["-t", "tag_bw", "-s", "1048576"], 20);
}

/// Issue 18: with the device refusing every registration UCX makes (relaxed ordering), every
/// buffer of ucx_perftest is a bounce region; UCP get (the peer RDMA-READs the shadow), tag
/// bandwidth through rendezvous and put bandwidth complete. Put: the receiver polls the last
/// byte of its buffer for a plain RDMA WRITE no completion announces, while it spins on empty
/// CQ polls (crates/bounce idle.rs). One run, no warm-up: between runs ucx_perftest resets that
/// byte with no verb and the peer's next write brings back the value it held before, which no
/// copy can tell from "unchanged" (docs/bounce.md, not supported). Figures: docs/bounce.md.
#[test]
fn ucp_rc_get_tag_and_put_bandwidth_through_bounce_buffers() {
    let env = [
        ("UCX_TLS", "rc"),
        ("UCX_NET_DEVICES", "mlx5_1:1"),
        ("UCX_RNDV_THRESH", RNDV_THRESH),
        ("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed"),
        ("MRSHIM_RETRY", "bounce"),
        ("MRSHIM_WARN", "off"),
    ];
    for (name, t, warmup) in [("get", "ucp_get", "5"), ("tag", "tag_bw", "5"), ("put", "ucp_put_bw", "0")] {
        let args = ["-t", t, "-s", "1048576", "-w", warmup];
        let (fin, dir) = perftest_in(&[Mode::Shim], &format!("ucp-rc-{name}-bounce"), &env, &args, 50);
        let bounced = files(&dir.join("logs"))
            .iter()
            .flat_map(|f| records(f))
            .filter(|r| r.strategy.as_deref() == Some("bounce") && r.result == "ok")
            .count();
        assert!(bounced >= 2, "{name}: both sides' buffers through bounce: {bounced} ({fin})");
        eprintln!("{name} through bounce: {fin}");
    }
}
