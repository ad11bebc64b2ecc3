//! `mrshim sim` shows the simulated devices where UCX and Open MPI look for them — in a private
//! mount namespace, leaving the host's /sys and /dev untouched.

mod shim_util;
use shim_util::*;

#[test]
fn sysfs_and_dev_view_inside_and_nothing_outside() {
    let w = SimWorld::new("view");
    let script = "cat /sys/class/infiniband/mlx5_1/ports/1/gid_attrs/types/3 \
                  /sys/class/infiniband/mlx5_0/device/vendor /sys/class/infiniband_verbs/uverbs1/ibdev; \
                  readlink /sys/class/infiniband/mlx5_0/device/driver; \
                  stat -c '%n %F' /dev/infiniband/uverbs0 /dev/infiniband/uverbs1 /dev/infiniband/rdma_cm; \
                  test -e /sys/class/net/lo && test -c /dev/null && echo host-entries-kept";
    let o = run(&mut stack_cmd(&w, Mode::Plain, 0, "sh", &["-c", script]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "RoCE v2\n0x15b3\nmlx5_1\n/sys/bus/pci/drivers/mlx5_core\n\
         /dev/infiniband/uverbs0 character special file\n/dev/infiniband/uverbs1 character special file\n\
         /dev/infiniband/rdma_cm character special file\nhost-entries-kept\n"
    );
    assert!(!std::path::Path::new("/sys/class/infiniband").exists(), "the host's /sys was changed");
    assert!(!std::path::Path::new("/dev/infiniband").exists(), "the host's /dev was changed");
}

#[test]
fn write_sysfs_writes_the_view_of_the_given_devices_under_a_directory() {
    let w = SimWorld::new("view-dir");
    let dir = w.dir.join("sys");
    let o = run(cmd(mrshim_bin()).args(["sim", "--devices", "a0:roce,b1:ib", "--write-sysfs"]).arg(&dir));
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
    assert_eq!(read("class/infiniband/b1/ports/1/link_layer"), "InfiniBand\n");
    assert_eq!(read("class/infiniband_verbs/uverbs0/ibdev"), "a0\n");
}
