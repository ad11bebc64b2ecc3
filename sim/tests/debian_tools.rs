//! Debian's own, unmodified RDMA programs on the simulated device.
mod common;
use common::*;

#[test]
fn ibv_devices_lists_both_default_devices() {
    let out = Sim::new().run("ibv_devices", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("mlx5_0") && s.contains("b8cef60300a1b200"), "{s}");
    assert!(s.contains("mlx5_1") && s.contains("b8cef60300a1b202"), "{s}");
}

#[test]
fn ibv_devinfo_verbose_shows_both_roce_ports() {
    let out = Sim::new().run("ibv_devinfo", &["-v"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    for dev in ["hca_id:\tmlx5_0", "hca_id:\tmlx5_1"] {
        assert!(s.contains(dev), "{dev} missing:\n{s}");
    }
    for want in [
        "vendor_id:\t\t\t0x02c9",
        "vendor_part_id:\t\t\t4129",
        "fw_ver:\t\t\t\t28.39.1002",
        "board_id:\t\t\tMT_0000000838",
        "state:\t\t\tPORT_ACTIVE (4)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
        "GID[  3]:\t\t::ffff:192.0.2.10, RoCE v2",
        "GID[  3]:\t\t::ffff:192.0.2.11, RoCE v2",
    ] {
        assert!(s.contains(want), "{want:?} missing:\n{s}");
    }
    assert_eq!(s.matches("port:\t1").count(), 2);
}

#[test]
fn infiniband_variant_has_lids_and_ib_link_layer() {
    let out = Sim::new().with("MRSHIM_SIM_DEVICES", "mlx5_0:ib,mlx5_1:ib:mtu=2048").run("ibv_devinfo", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert_eq!(s.matches("link_layer:\t\tInfiniBand").count(), 2, "{s}");
    assert!(s.contains("port_lid:\t\t1") && s.contains("port_lid:\t\t2"), "{s}");
    assert!(s.contains("active_mtu:\t\t2048 (4)"), "{s}");
}

#[test]
fn bad_device_config_gives_one_clear_line() {
    let out = Sim::new().with("MRSHIM_SIM_DEVICES", "mlx5_0:token").run("ibv_devices", &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("mrshim-sim:")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(ours[0].contains("MRSHIM_SIM_DEVICES=\"mlx5_0:token\"") && ours[0].contains("LINK is roce or ib"), "{err}");
}

#[test]
fn bad_fault_config_names_the_variable() {
    let out = Sim::new().with("MRSHIM_SIM_FAULTS", "reg_mr:EWHAT").run("ibv_devices", &[]);
    let err = text(&out.stderr);
    assert!(err.contains("MRSHIM_SIM_FAULTS=\"reg_mr:EWHAT\"") && err.contains("CALL:ERRNO"), "{err}");
}

fn assert_pingpong(server: &std::process::Output, client: &std::process::Output) {
    for (who, o) in [("server", server), ("client", client)] {
        assert!(o.status.success(), "{who} failed: {}\n{}", text(&o.stdout), text(&o.stderr));
        let s = text(&o.stdout);
        assert!(s.contains("bytes in") && s.contains("iters in"), "{who}: {s}");
    }
}

#[test]
fn rc_pingpong_over_roce_gid_3_with_data_validation() {
    let sim = Sim::new();
    let args = ["-d", "mlx5_0", "-g", "3", "-c", "-n", "200", "-s", "4096"];
    let (s, c) = server_client(&sim, "ibv_rc_pingpong", &args, &args, free_port());
    assert_pingpong(&s, &c);
    assert!(text(&c.stdout).contains("GID ::ffff:192.0.2.10"), "{}", text(&c.stdout));
}

#[test]
fn rc_pingpong_over_infiniband_lids_across_devices() {
    let sim = Sim::new().with("MRSHIM_SIM_DEVICES", "mlx5_0:ib,mlx5_1:ib");
    let (s, c) = server_client(
        &sim,
        "ibv_rc_pingpong",
        &["-d", "mlx5_0", "-c", "-n", "100"],
        &["-d", "mlx5_1", "-c", "-n", "100"],
        free_port(),
    );
    assert_pingpong(&s, &c);
    assert!(text(&c.stdout).contains("LID 0x0002"), "{}", text(&c.stdout));
}

/// perftest with -a prints one line per size from 2 B to 8 MiB: check they are all there.
fn assert_bw(prog: &str) {
    let sim = Sim::new();
    let args = ["-d", "mlx5_0", "-x", "3", "-a", "-n", "40"];
    let cargs = ["-d", "mlx5_1", "-x", "3", "-a", "-n", "40"];
    let (s, c) = server_client(&sim, prog, &args, &cargs, free_port());
    assert!(s.status.success(), "{prog} server: {}\n{}", text(&s.stdout), text(&s.stderr));
    assert!(c.status.success(), "{prog} client: {}\n{}", text(&c.stdout), text(&c.stderr));
    let out = text(&c.stdout);
    for k in 1..=23 {
        let size = 1u64 << k;
        let line = out.lines().find(|l| l.split_whitespace().next() == Some(&size.to_string()));
        let line = line.unwrap_or_else(|| panic!("{prog}: no line for {size} bytes:\n{out}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[1], "40", "{line}");
        // Tiny messages on a loaded 2-core machine can round to 0.00 MB/s: check the rate.
        let avg: f64 = cols[3].parse().unwrap_or_else(|_| panic!("{line}"));
        let rate: f64 = cols[4].parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(avg >= 0.0 && rate > 0.0, "{prog}: no messages at {size}: {line}");
        if size >= 1 << 16 {
            assert!(avg > 1.0, "{prog}: {size} bytes at {avg} MB/s: {line}");
        }
    }
}

#[test]
fn perftest_ib_write_bw_all_sizes() {
    assert_bw("ib_write_bw");
}

#[test]
fn perftest_ib_read_bw_all_sizes() {
    assert_bw("ib_read_bw");
}

#[test]
fn perftest_ib_send_bw_all_sizes() {
    assert_bw("ib_send_bw");
}

/// UD QPs and address handles with a GRH (RoCE v2 over IPv4: the GRH area holds an IPv4
/// header), checked byte by byte (`-c`).
#[test]
fn ud_pingpong_over_roce_v2_with_data_validation() {
    let sim = Sim::new();
    let (s, c) = server_client(
        &sim,
        "ibv_ud_pingpong",
        &["-d", "mlx5_0", "-g", "3", "-c", "-n", "100", "-s", "2048"],
        &["-d", "mlx5_1", "-g", "3", "-c", "-n", "100", "-s", "2048"],
        free_port(),
    );
    assert_pingpong(&s, &c);
}

/// UD on InfiniBand: address handles by LID, no GRH (the first 40 bytes are left alone).
#[test]
fn ud_pingpong_over_infiniband_lids() {
    let sim = Sim::new().with("MRSHIM_SIM_DEVICES", "mlx5_0:ib,mlx5_1:ib");
    let (s, c) = server_client(
        &sim,
        "ibv_ud_pingpong",
        &["-d", "mlx5_0", "-c", "-n", "100"],
        &["-d", "mlx5_1", "-c", "-n", "100"],
        free_port(),
    );
    assert_pingpong(&s, &c);
}

/// Sixteen RC QPs receiving from one shared receive queue.
#[test]
fn srq_pingpong_sixteen_qps_on_one_srq() {
    let sim = Sim::new();
    let args = ["-d", "mlx5_0", "-g", "3", "-c", "-n", "100", "-q", "16"];
    let (s, c) = server_client(&sim, "ibv_srq_pingpong", &args, &args, free_port());
    assert_pingpong(&s, &c);
}
