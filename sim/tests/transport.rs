//! The RC transport: data moves byte-exact, completions carry the right fields, the QP state
//! machine and remote access checks fail the way mlx5 does.
mod common;
use common::*;

fn simcheck(sim: &Sim, what: &str) -> String {
    let prog = c_program("simcheck", &["-libverbs"]);
    let out = sim.run(&prog, &[what]);
    assert!(out.status.success(), "simcheck {what}: {}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn send_write_imm_read_and_remote_access_errors() {
    let out = simcheck(&Sim::new(), "transport");
    let want = "\
send_requester status=success opcode=0 byte_len=0 wr_id=42
send_responder status=success opcode=128 byte_len=4096 wr_id=7
send_data equal
write_imm_requester status=success opcode=1 byte_len=0 wr_id=42
write_imm_responder status=success opcode=129 byte_len=40000 wr_id=7 imm=0xc0ffee
write_data equal
read status=success opcode=2 byte_len=30000 wr_id=42
read_data equal
write_no_remote_write status=remote access error opcode=1 byte_len=0 wr_id=42
after_error_flushed status=Work Request Flushed Error opcode=0 byte_len=0 wr_id=42
write_bad_rkey status=remote access error opcode=1 byte_len=0 wr_id=42
write_out_of_bounds status=remote access error opcode=1 byte_len=0 wr_id=42
read_no_remote_read status=remote access error opcode=2 byte_len=0 wr_id=42
write_qp_access_denied status=remote access error opcode=1 byte_len=0 wr_id=42
send_bad_lkey status=local protection error opcode=0 byte_len=0 wr_id=42
send_too_long_requester status=remote invalid request error opcode=0 byte_len=0 wr_id=42
send_too_long_responder status=local length error opcode=128 byte_len=0 wr_id=7
";
    assert_eq!(out, want);
}

#[test]
fn qp_state_machine_rejects_what_the_kernel_rejects() {
    let out = simcheck(&Sim::new(), "qpstate");
    let want = "\
post_send_in_reset=22
post_recv_in_reset=22
reset_to_rtr=22
init_missing_access=22
init_bad_port=22
init=0
post_recv_in_init=0
post_send_in_init=22
init_to_rts=22
rtr_missing_dest_qpn=22
rtr=0
rtr_to_rts_missing_timeout=22
rts=0
state_field=3
query_state=3 dest_ok=1
to_err=0
cq_busy=16
";
    assert_eq!(out, want);
}

#[test]
fn multiple_sges_unaligned_ranges_concurrent_qps() {
    let out = simcheck(&Sim::new(), "multi");
    assert_eq!(out, "multi_sge equal\nconcurrent_qps equal\nafter_other_dereg equal\nread_unaligned equal\n");
}

/// The ACK of a WRITE posted after a 16 MiB READ overtakes the READ's data on the simulator's
/// wire; the READ must still complete first and only once all of its data is in place (Open
/// MPI's rendezvous once received unwritten bytes when it did not).
#[test]
fn read_completes_after_its_data_even_when_a_later_ack_arrives_first() {
    let out = simcheck(&Sim::new(), "read-order");
    assert_eq!(out, "first opcode=2 status=success data equal\nsecond opcode=1 status=success\n");
}

/// A send to a QP that is gone fails with a retry error only once the retry timer has expired
/// retry_cnt + 1 times, as on a NIC: an error at once would overtake the ACKs of what the peer
/// received before it went (ibv_srq_pingpong's last sends of a run failed so).
#[test]
fn a_send_to_a_gone_qp_fails_only_when_its_retries_run_out() {
    let out = simcheck(&Sim::new(), "lost-peer");
    assert_eq!(
        out,
        "completions_within_250ms=0\n\
         send_to_gone_qp status=transport retry counter exceeded opcode=0 byte_len=0 wr_id=42\n\
         waited_for_8_timers=1\n"
    );
}

/// A datagram for a receive whose buffer was unmapped while registered (a teardown in the wrong
/// order; ucx_perftest's UD server once crashed the simulator so): a NIC writes into the pinned
/// pages and completes (byte_len counts the 40-byte GRH); the process must not crash.
#[test]
fn a_datagram_into_a_registered_but_unmapped_buffer_does_not_crash() {
    let out = simcheck(&Sim::new(), "ud-unmapped");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "recv_into_unmapped status=success opcode=128 byte_len=1064 wr_id=7",
            "send status=success opcode=0 byte_len=0 wr_id=42"
        ],
        "{out}"
    );
}

/// A DISCONNECTED event never overtakes the ACKs the peer's NIC sent before its DREQ, as one
/// wire delivers them in order: the sender's last send has completed as a success before the
/// event can be seen, even on a NIC that takes 300 ms for each batch of packets
/// (MRSHIM_SIM_NIC_DELAY_MS). Through the simulated librdmacm, between the two devices of one
/// process; the passive side disconnects as soon as it sees the receive, the active side polls
/// its CQ and then its event channel as ofi_rxm does. fi_pingpong over `verbs;ofi_rxm`
/// (tests/stacks_rdmacm.rs) tore its connection down on that event, dropping the completion, and
/// failed with its last send flushed, or hung.
#[test]
fn a_disconnect_never_overtakes_the_acks_sent_before_it() {
    let prog = c_program("cm_disconnect", &["-lrdmacm", "-libverbs"]);
    for delay in ["0", "300"] {
        let sim =
            Sim::new().with("LD_LIBRARY_PATH", cm_lib_dir().to_str().unwrap()).with("MRSHIM_SIM_NIC_DELAY_MS", delay);
        let out = sim.run(&prog, &[]);
        assert!(out.status.success(), "delay {delay}: {}\n{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "two_devices 1\n\
             recv success wr_id=7 data_equal=1\n\
             send success wr_id=42\n\
             RDMA_CM_EVENT_DISCONNECTED after the send completed\n",
            "delay {delay}: {}",
            text(&out.stderr)
        );
    }
}

fn nccl_style(sim: &Sim, args: &[&str]) -> std::process::Output {
    let prog = c_program("nccl_style", &["-ldl"]);
    sim.run(&prog, args)
}

#[test]
fn nccl_style_dlvsym_consumer_exchanges_byte_exact() {
    for args in [
        &["--size", "1"][..],
        &["--size", "4095", "--iters", "20"],
        &["--size", "1048576", "--relaxed"],
        &["--size", "67108864", "--iters", "1"],
    ] {
        let out = nccl_style(&Sim::new(), args);
        let s = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {s}\n{}", text(&out.stderr));
        assert_eq!(s.matches(": verified").count(), 2, "{s}");
        assert_eq!(s.matches("dmabuf probe: supported").count(), 2, "{s}");
    }
}

#[test]
fn nccl_style_over_infiniband() {
    let out = nccl_style(&Sim::new().with("MRSHIM_SIM_DEVICES", "mlx5_0:ib"), &["--size", "100000"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
}

#[test]
fn seed_incident_reproduced_by_device_fault_injection() {
    let sim = Sim::new().with("MRSHIM_SIM_FAULTS", "reg_mr_iova2:EINVAL:relaxed");
    let out = nccl_style(&sim, &["--relaxed"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument"),
        "{}",
        text(&out.stderr)
    );
    // Without relaxed ordering (MCCL_IB_PCI_RELAXED_ORDERING=0 in the seed) this rule lets it pass.
    let out = nccl_style(&sim, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The dmabuf probe sees "unsupported" when the device has no dmabuf.
    let out = nccl_style(&Sim::new().with("MRSHIM_SIM_DMABUF", "off"), &["--size", "64"]);
    assert_eq!(text(&out.stdout).matches("dmabuf probe: unsupported").count(), 2);
}

/// rdma-core's test_resize_cq, in C: the CQ is resized below the completions of sends posted
/// just before — without polling — and that is EINVAL however late the simulated NIC's thread
/// runs (it was 29 failures in 30 under load before the resize waited for it).
#[test]
fn resize_cq_below_the_completions_of_sends_just_posted_is_einval() {
    let out = simcheck(&Sim::new(), "resize");
    assert_eq!(
        out,
        "shrink_empty=0 cqe=1\ngrow=0 cqe=7\nshrink_below_unpolled=22\npolled=6 shrink_after_poll=0 cqe=1\n"
    );
}

/// The context's command descriptor is a real one (pyverbs dup()s it for test_shared_pd), and
/// importing a context through it is reported unsupported.
#[test]
fn cmd_fd_is_a_real_descriptor_and_importing_through_it_is_eopnotsupp() {
    let out = simcheck(&Sim::new(), "cmdfd");
    assert_eq!(out, "cmd_fd_open=1 rdwr=1 cloexec=1\ndup=1 import=NULL errno=95\nclose=0 closed=1\n");
}
