//! librdmacm programs on the simulated librdmacm through `mrshim sim`: Debian's rdmacm-utils
//! (rping with data verification, ucmatose, udaddy, rdma_server/rdma_client) and libfabric's
//! verbs provider (fi_pingpong over `verbs` MSG endpoints and `verbs;ofi_rxm` RDM endpoints,
//! data checked). Two processes each, with real exit codes; each run again with the shim
//! recording every registration and with MRSHIM_RETRY=auto, with the same results.

mod shim_util;
use shim_util::*;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Waits until an id of the test's fabric listens (its socket appears under run/cm), or the
/// server exited (then the client runs anyway and the test reports both).
fn wait_listening(w: &SimWorld, server: &mut std::process::Child) {
    let dir = w.dir.join("run/cm");
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let listening = std::fs::read_dir(&dir)
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".sock")))
            .unwrap_or(false);
        if listening || server.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Server and client of one program in every mode: both exit 0; returns (server, client)
/// outputs per mode, and checks each process's records against the device.
fn pair(
    name: &str,
    server: (&str, &[&str]),
    client: (&str, &[&str]),
    oob_retry: Option<&str>,
) -> Vec<(Output, Output)> {
    let mut outs = Vec::new();
    // ofi_rxm's teardown race (rxm_teardown_race) leaves a side waiting for a completion that
    // is gone: it is killed sooner than the default 150 s, and its records are checked without
    // the deregistrations and summary it never got to write. A run takes a few seconds.
    let secs = if name.starts_with("fi-rdm") { 45 } else { 150 };
    let cmd =
        |w: &SimWorld, mode, rank, (prog, args): (&str, &[&str])| stack_cmd_within(w, mode, rank, prog, args, secs);
    for mode in MODES {
        let w = SimWorld::new(&format!("rdmacm-{name}-{mode:?}"));
        let mut s = cmd(&w, mode, 0, server).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // fi_pingpong's server listens on its rdma_cm id only after the TCP exchange: the
        // client's retries stand in for waiting there.
        if oob_retry.is_none() {
            wait_listening(&w, &mut s);
        }
        let mut c = run(&mut cmd(&w, mode, 1, client));
        // fi_pingpong exchanges addresses over TCP first: retry while its server is not up yet.
        for _ in 0..100 {
            match oob_retry {
                Some(msg) if !c.status.success() && stderr(&c).contains(msg) => {
                    std::thread::sleep(Duration::from_millis(200));
                    c = run(&mut cmd(&w, mode, 1, client));
                }
                _ => break,
            }
        }
        let s = s.wait_with_output().unwrap();
        let who = format!("{name} {mode:?}");
        for (side, o) in [("client", &c), ("server", &s)] {
            let ok = o.status.success() || rping_teardown_race(name, o) || rxm_teardown_race(name, o);
            if !o.status.success() && ok {
                eprintln!(
                    "{who} {side}: a known teardown race of the program itself ({}); data lines checked",
                    o.status
                );
            }
            assert!(ok, "{who} {side} ({}): {}\n{}", o.status, stdout(o), stderr(o));
        }
        let killed: Vec<u32> = [(0, &s), (1, &c)]
            .into_iter()
            .filter(|(_, o)| rxm_teardown_race(name, o) && o.status.code() == Some(124))
            .map(|(rank, _)| rank)
            .collect();
        assert_stack_records_killed(&w, mode, 2, &killed, &who);
        outs.push((s, c));
    }
    outs
}

#[test]
fn rping_moves_and_verifies_data_over_rdma_read_and_write() {
    require("rping", "rdmacm-utils");
    let port = free_port().to_string();
    let outs = pair(
        "rping",
        ("rping", &["-s", "-a", "127.0.0.1", "-p", &port, "-C", "20", "-V"]),
        ("rping", &["-c", "-a", "127.0.0.1", "-p", &port, "-C", "20", "-V", "-v"]),
        None,
    );
    let lines: Vec<String> = stdout(&outs[0].1).lines().map(String::from).collect();
    assert_eq!(lines.len(), 20, "{lines:?}");
    assert_eq!(lines[0], "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr");
    assert_eq!(lines[19], "ping data: rdma-ping-19: TUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzABCDEFGHIJ");
    for (s, c) in &outs[1..] {
        assert_eq!(stdout(c), stdout(&outs[0].1), "the shim changed what rping moved");
        assert!(stderr(s).contains("server DISCONNECT EVENT"), "{}", stderr(s));
    }
}

#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    require("rping", "rdmacm-utils");
    let w = SimWorld::new("rdmacm-rping-refused");
    let port = free_port().to_string();
    let o = run(&mut stack_cmd(&w, Mode::Plain, 0, "rping", &["-c", "-a", "127.0.0.1", "-p", &port, "-C", "1"]));
    assert!(!o.status.success());
    // The peer's CM answers REJ with reason 8 (invalid service ID), as rdma_cm reports it.
    assert!(stderr(&o).contains("cma event RDMA_CM_EVENT_REJECTED, error 8"), "{}", stderr(&o));
}

#[test]
fn ucmatose_two_connections_on_a_simulated_ports_address() {
    require("ucmatose", "rdmacm-utils");
    let port = free_port().to_string();
    // 192.0.2.11 is mlx5_1's address (its RoCE v2 IPv4 GID): both sides use that port.
    let args = ["-p", &port, "-c", "2", "-C", "10", "-S", "3000"];
    let mut sargs = vec!["-b", "192.0.2.11"];
    sargs.extend_from_slice(&args);
    let mut cargs = vec!["-s", "192.0.2.11"];
    cargs.extend_from_slice(&args);
    for (s, c) in pair("ucmatose", ("ucmatose", &sargs), ("ucmatose", &cargs), None) {
        for o in [&s, &c] {
            let out = stdout(o);
            assert!(out.contains("data transfers complete") && out.ends_with("return status 0\n"), "{out}");
        }
        assert!(stdout(&s).contains("disconnected"), "{}", stdout(&s));
    }
}

#[test]
fn udaddy_resolves_the_peer_to_an_address_handle_and_exchanges_datagrams() {
    require("udaddy", "rdmacm-utils");
    // udaddy has a fixed port (7174); every test has its own fabric (run directory).
    let args = ["-c", "2", "-C", "10", "-S", "512"];
    let mut cargs = vec!["-s", "127.0.0.1"];
    cargs.extend_from_slice(&args);
    for (s, c) in pair("udaddy", ("udaddy", &args), ("udaddy", &cargs), None) {
        for o in [&s, &c] {
            let out = stdout(o);
            assert!(out.contains("data transfers complete") && out.ends_with("return status 0\n"), "{out}");
        }
    }
}

#[test]
fn rdma_server_and_rdma_client_over_synchronous_endpoints() {
    require("rdma_server", "rdmacm-utils");
    let port = free_port().to_string();
    for (s, c) in
        pair("rdma-server", ("rdma_server", &["-p", &port]), ("rdma_client", &["-s", "127.0.0.1", "-p", &port]), None)
    {
        assert_eq!(stdout(&s), "rdma_server: start\nrdma_server: end 0\n");
        assert_eq!(stdout(&c), "rdma_client: start\nrdma_client: end 0\n");
    }
}

/// fi_pingpong with data checks (-c) at `size`: the final line reports every iteration.
fn pingpong(name: &str, prov: &str, ep: &str, size: &str, iters: &str) {
    require("fi_pingpong", "libfabric-bin");
    let port = free_port().to_string();
    let common = ["-p", prov, "-e", ep, "-S", size, "-I", iters, "-c"];
    let mut sargs = vec!["-B", &port];
    sargs.extend_from_slice(&common);
    let mut cargs = vec!["-P", &port];
    cargs.extend_from_slice(&common);
    cargs.push("127.0.0.1");
    for (s, c) in pair(name, ("fi_pingpong", &sargs), ("fi_pingpong", &cargs), Some("Connection refused")) {
        for o in [&s, &c] {
            let out = stdout(o);
            let last = out.lines().last().unwrap_or_default().to_string();
            let cols: Vec<&str> = last.split_whitespace().collect();
            assert!(cols.len() >= 3 && cols[1] == iters && cols[2] == format!("={iters}"), "{name}: {out}");
        }
    }
}

#[test]
fn fi_pingpong_verbs_msg_endpoints() {
    pingpong("fi-msg-1k", "verbs", "msg", "1024", "100");
    pingpong("fi-msg-64k", "verbs", "msg", "65536", "20");
}

#[test]
fn fi_pingpong_verbs_rxm_rdm_endpoints_eager_and_rendezvous() {
    // ofi_rxm sends 16 B eagerly and 64 KiB (above its 16 KiB eager limit) by rendezvous.
    pingpong("fi-rdm-16", "verbs;ofi_rxm", "rdm", "16", "100");
    pingpong("fi-rdm-64k", "verbs;ofi_rxm", "rdm", "65536", "20");
}

/// Multicast and ECE are not simulated, but pyverbs (rdma-core's Python tests) and others link
/// them: the program loads and each call fails as rdma-core does on hardware without them —
/// argument errors first, then EOPNOTSUPP; leaving a group never joined EADDRNOTAVAIL; the
/// peer's ECE is none. And a bound id has its device's PD in `id->pd`, as rdma-core's (pyverbs'
/// test_rdmacm makes QPs and AHs on it; it was NULL).
#[test]
fn multicast_and_ece_calls_load_and_report_unsupported_and_a_bound_id_has_a_pd() {
    let w = SimWorld::new("rdmacm-absent");
    let prog = w.dir.join("rdmacm_absent");
    cc(&["-O1", "-o", prog.to_str().unwrap(), src_c("rdmacm_absent.c").to_str().unwrap(), "-lrdmacm", "-libverbs"]);
    let o = run(&mut stack_cmd(&w, Mode::Plain, 0, prog.to_str().unwrap(), &[]));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let (inval, nosup) = (libc::EINVAL, libc::EOPNOTSUPP);
    assert_eq!(
        stdout(&o),
        format!(
            "bind 0 0\nverbs=1 pd=1 pd_on_verbs=1\njoin -1 {nosup}\njoin_null -1 {inval}\njoin_ex -1 {nosup}\njoin_ex_no_flags -1 {inval}\n\
             join_ex_reserved -1 {nosup}\nleave -1 {}\nset_local_ece -1 {nosup}\nset_local_ece_no_vendor -1 {inval}\n\
             get_remote_ece 0 0\nremote_ece 0 0 0\n",
            libc::EADDRNOTAVAIL
        )
    );
    assert!(stderr(&o).contains("multicast is not simulated"), "{}", stderr(&o));
}

/// RDMA_OPTION_ID_ACK_TIMEOUT (rdma-core's test_rdmacm_async_traffic sets it and checks the QP):
/// each side's value is its QP's `timeout` once connected; a UD id refuses it (EINVAL), as the
/// kernel's rdma_set_ack_timeout.
#[test]
fn ack_timeout_option_is_the_connected_qps_timeout() {
    let w = SimWorld::new("rdmacm-ack-timeout");
    let prog = w.dir.join("rdmacm_ack_timeout");
    cc(&[
        "-O1",
        "-o",
        prog.to_str().unwrap(),
        src_c("rdmacm_ack_timeout.c").to_str().unwrap(),
        "-lrdmacm",
        "-libverbs",
    ]);
    let o = run(&mut stack_cmd(&w, Mode::Plain, 0, prog.to_str().unwrap(), &[]));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), format!("ud_ack_timeout {}\nactive_qp_timeout 21\npassive_qp_timeout 19\n", libc::EINVAL));
}
