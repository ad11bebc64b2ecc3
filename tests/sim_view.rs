//! `mrshim sim` shows the simulated devices where UCX and Open MPI look for them — in a private
//! mount namespace, leaving the host's /sys and /dev untouched.

mod shim_util;
use shim_util::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

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

/// Who runs `mrshim sim` in the tests of its non-root path: the test's own user when that is not
/// root; as root, nobody (65534) through setpriv, with no capabilities left, running copies of
/// `mrshim` and the simulator's libraries in the test's directory (a target directory under a
/// private home may not be readable by nobody).
struct User {
    prefix: Vec<String>,
    mrshim: PathBuf,
    uid: u32,
}

fn unprivileged(w: &SimWorld) -> User {
    // SAFETY: a getter without preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return User { prefix: vec![], mrshim: mrshim_bin(), uid };
    }
    let bin = w.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut libs = ["libibverbs.so", "librdmacm.so"].map(|f| mrshim_test_support::built(f, "mrshim-sim")).to_vec();
    libs.push(mrshim_test_support::built("libmrshim_sim_audit.so", "mrshim-sim-audit"));
    for f in [mrshim_bin()].iter().chain(&libs) {
        let to = bin.join(f.file_name().unwrap());
        std::fs::copy(f, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The run directory and the simulator's library links go under the test's directory.
    for d in [w.dir.clone(), w.dir.join("run")] {
        std::os::unix::fs::chown(&d, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"];
    User { prefix: prefix.map(String::from).to_vec(), mrshim: bin.join("mrshim"), uid: NOBODY }
}

const NOBODY: u32 = 65534;

impl User {
    /// `mrshim sim SIM_ARGS -- sh -c SCRIPT` as this user, under timeout.
    fn command(&self, w: &SimWorld, sim_args: &[&str], script: &str) -> std::process::Command {
        let mut c = cmd("timeout");
        c.args(["-k", "5", "120"]).args(&self.prefix).arg(&self.mrshim).arg("sim").args(sim_args);
        c.args(["--", "sh", "-c", script]);
        c.env("MRSHIM_SIM_RUNDIR", w.dir.join("run")).env("XDG_RUNTIME_DIR", &w.dir).env("HOME", &w.dir);
        c
    }

    /// [`User::command`], run to its end.
    fn sim(&self, w: &SimWorld, sim_args: &[&str], script: &str) -> std::process::Output {
        let o = run(&mut self.command(w, sim_args, script));
        // `mrshim sim` says in one line when it could not make the view; here that can only be
        // a platform without unprivileged user namespaces.
        let err = stderr(&o);
        let refused = err.contains("no /sys/class/infiniband and /dev/infiniband view")
            || err.contains("the RoCE ports have no network interface (unshare")
            || (err.contains("mrshim sim: --netns:") && err.contains("unshare"));
        assert!(
            !refused,
            "unprivileged user namespaces are not available here, the non-root path of `mrshim sim` \
             cannot be tested: {err}\nIf this platform forbids them, build the tests with \
             MRSHIM_TEST_NO_USERNS=1: these tests are then reported ignored"
        );
        o
    }
}

/// The top-level names of a host directory, to show a view left no trace there.
fn names(dir: &str) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Not root: `mrshim sim` makes the view in a user namespace that maps the caller's own uid and
/// gid; ibv_devinfo and UCX see the devices and the uverbs nodes, the host sees nothing.
#[test]
#[cfg_attr(mrshim_no_userns, ignore = "MRSHIM_TEST_NO_USERNS: the platform forbids unprivileged user namespaces")]
fn an_unprivileged_user_gets_the_view_through_a_user_namespace() {
    require("ibv_devinfo", "ibverbs-utils");
    require("ucx_info", "ucx-utils");
    let w = SimWorld::new("view-user");
    let u = unprivileged(&w);
    let (sys, dev) = (names("/sys/class"), names("/dev"));
    let script = "id -u; id -g; ibv_devinfo | grep -E 'hca_id|state:'; \
                  stat -c '%n %F' /dev/infiniband/uverbs0 /dev/infiniband/uverbs1 /dev/infiniband/rdma_cm; \
                  cat /sys/class/infiniband/mlx5_1/ports/1/gid_attrs/types/3; \
                  test -r /dev/infiniband/uverbs0 && test -w /dev/infiniband/uverbs0 && echo uverbs0-rw; \
                  ucx_info -d | grep -A1 -E 'Transport: (rc|ud)_verbs'";
    let o = u.sim(&w, &[], script);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let id = u.uid.to_string();
    let want = format!(
        "{id}\n{id}\nhca_id:\tmlx5_0\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\nhca_id:\tmlx5_1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
         /dev/infiniband/uverbs0 character special file\n/dev/infiniband/uverbs1 character special file\n\
         /dev/infiniband/rdma_cm character special file\nRoCE v2\nuverbs0-rw\n"
    );
    assert!(out.starts_with(&want), "{out}");
    for d in ["mlx5_0:1", "mlx5_1:1"] {
        for tl in ["rc_verbs", "ud_verbs"] {
            assert!(out.contains(&format!("#      Transport: {tl}\n#         Device: {d}\n")), "no {tl} on {d}: {out}");
        }
    }
    assert_eq!(names("/sys/class"), sys, "the host's /sys/class changed");
    assert_eq!(names("/dev"), dev, "the host's /dev changed");
    assert!(!std::path::Path::new("/sys/class/infiniband").exists());
}

/// By default (and with `--netns`) each RoCE port has its interface (named by `gid_attrs/ndevs`,
/// MAC and fe80:: address of its link-local GID, the IPv4 of its IPv4-mapped GID), shown in
/// /sys/class/net and linked from `device/net/`; lo is up, and two `mrshim sim`s of one job
/// share the namespace: a UCX server in one and its client in another connect over loopback.
/// (UCX registers 36 MiB of receive buffers: as an unprivileged user that is over the usual 8 MiB
/// RLIMIT_MEMLOCK and fails with ENOMEM, as on a real host; MRSHIM_SIM_MEMLOCK=off lifts it.)
fn netns_view(w: &SimWorld, u: &User, sim_args: &[&str]) {
    require("ucx_perftest", "ucx-utils");
    let (sys, dev) = (names("/sys/class"), names("/dev"));
    let script = "ls /sys/class/net | tr '\\n' ' '; echo; \
                  for d in mlx5_0 mlx5_1; do \
                    echo $d $(ls /sys/class/infiniband/$d/device/net) $(cat /sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/3); \
                  done; \
                  cat /sys/class/infiniband/mlx5_1/device/net/mrsim1/address /sys/class/net/mrsim0/flags /sys/class/net/lo/flags; \
                  hostname -I; awk '/mrsim/ {print $1, $6}' /proc/net/if_inet6 | sort";
    let o = u.sim(w, sim_args, script);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        stdout(&o),
        "lo mrsim0 mrsim1 \nmlx5_0 mrsim0 mrsim0\nmlx5_1 mrsim1 mrsim1\nb8:ce:f6:a1:b2:02\n0x83\n0x9\n\
         192.0.2.10 192.0.2.11 \nfe80000000000000bacef6fffea1b200 mrsim0\nfe80000000000000bacef6fffea1b202 mrsim1\n"
    );
    assert_eq!(stderr(&o), "", "nothing to say when the view is complete");
    // A server and its client, each under its own `mrshim sim`, in one network namespace that
    // is not the host's.
    let ns = "readlink /proc/self/ns/net >\"$HOME/$0.ns\"; export MRSHIM_SIM_MEMLOCK=off; cd \"$HOME\"; ";
    let mut srv = u.command(w, sim_args, &format!("{ns}exec timeout 60 ucx_perftest -p 20000 >srv.out 2>&1"));
    srv.arg("server").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut srv = srv.spawn().unwrap();
    let client = format!(
        "{ns}for i in $(seq 150); do sleep 0.2; \
           ucx_perftest 127.0.0.1 -p 20000 -d mlx5_1:1 -x rc_verbs -t am_lat -s 8 -n 200 > cli.out 2>&1 && break; \
           grep -q 'connect() failed' cli.out || break; \
         done; grep -q '^Final:' cli.out && echo ucx-over-loopback || cat cli.out srv.out"
    );
    let o = run(u.command(w, sim_args, &client).arg("client"));
    let _ = srv.wait();
    assert_eq!(stdout(&o), "ucx-over-loopback\n", "{}", stderr(&o));
    let read = |f: &str| std::fs::read_to_string(w.dir.join(f)).unwrap();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap().to_string_lossy().into_owned();
    assert_eq!(read("server.ns"), read("client.ns"), "two `mrshim sim`s of one job, two network namespaces");
    assert_ne!(read("server.ns").trim(), host, "the host's network namespace");
    assert_eq!(names("/sys/class"), sys, "the host's /sys/class changed");
    assert_eq!(names("/dev"), dev, "the host's /dev changed");
    assert!(!names("/sys/class/net").iter().any(|n| n.starts_with("mrsim")), "an interface leaked to the host");
}

#[test]
fn the_default_view_gives_each_roce_port_its_interface_as_root() {
    let w = SimWorld::new("netns-root");
    // SAFETY: a getter without preconditions.
    let uid = unsafe { libc::geteuid() };
    netns_view(&w, &User { prefix: vec![], mrshim: mrshim_bin(), uid }, &[]);
}

#[test]
#[cfg_attr(mrshim_no_userns, ignore = "MRSHIM_TEST_NO_USERNS: the platform forbids unprivileged user namespaces")]
fn the_default_view_gives_each_roce_port_its_interface_as_an_unprivileged_user() {
    let w = SimWorld::new("netns-user");
    netns_view(&w, &unprivileged(&w), &[]);
}

#[test]
fn netns_requires_the_interfaces_and_gets_the_same_view() {
    let w = SimWorld::new("netns-flag");
    // SAFETY: a getter without preconditions.
    let uid = unsafe { libc::geteuid() };
    netns_view(&w, &User { prefix: vec![], mrshim: mrshim_bin(), uid }, &["--netns"]);
}

/// `--no-netns` keeps the host's network: its interfaces, none for the ports.
#[test]
fn no_netns_keeps_the_hosts_network() {
    let w = SimWorld::new("netns-off");
    // SAFETY: a getter without preconditions.
    let uid = unsafe { libc::geteuid() };
    let u = User { prefix: vec![], mrshim: mrshim_bin(), uid };
    let o = u.sim(
        &w,
        &["--no-netns"],
        "ls /sys/class/net; readlink /proc/self/ns/net; ls /sys/class/infiniband/mlx5_0/device",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut want: Vec<String> = names("/sys/class/net");
    want.push(std::fs::read_link("/proc/self/ns/net").unwrap().to_string_lossy().into_owned());
    let out = stdout(&o);
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(&got[..want.len()], &want.iter().map(String::as_str).collect::<Vec<_>>()[..], "{out}");
    assert!(!got[want.len()..].contains(&"net"), "a port interface without the namespace: {out}");
    assert_eq!(stderr(&o), "");
}

/// Where the namespace cannot be shared (here: a run directory others may write to, where
/// anyone could offer a namespace of their own), the command runs with the host's network and
/// one line says what is missing; `--netns` refuses with exit code 2 and one line.
#[test]
fn where_the_namespace_cannot_be_made_one_line_says_so() {
    let w = SimWorld::new("netns-cannot");
    std::fs::set_permissions(w.dir.join("run"), std::fs::Permissions::from_mode(0o777)).unwrap();
    // SAFETY: a getter without preconditions.
    let uid = unsafe { libc::geteuid() };
    let u = User { prefix: vec![], mrshim: mrshim_bin(), uid };
    let o = run(&mut u.command(&w, &[], "ls /sys/class/infiniband; test -e /sys/class/net/mrsim0 || echo no-mrsim0"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "mlx5_0\nmlx5_1\nno-mrsim0\n");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("mrshim sim: the RoCE ports have no network interface (")
            && err.contains("closed to others")
            && err.contains("UCX >= 1.23 will not reach them"),
        "{err}"
    );
    let o = run(&mut u.command(&w, &["--netns"], "echo ran"));
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(err.starts_with("mrshim sim: --netns: ") && err.lines().count() == 1, "{err}");
}

/// The shared namespace's holder (`mrshim-sim-net`) goes away once the namespace is empty:
/// nothing of `mrshim sim` outlives its jobs for more than a few seconds, and the next
/// `mrshim sim` starts a new one.
#[test]
fn the_namespace_holder_leaves_when_the_last_member_has_left() {
    let w = SimWorld::new("netns-holder");
    // SAFETY: a getter without preconditions.
    let uid = unsafe { libc::geteuid() };
    let u = User { prefix: vec![], mrshim: mrshim_bin(), uid };
    let holder = || {
        let pidfile = files(&w.dir.join("run")).into_iter().find(|p| p.extension().is_some_and(|e| e == "pid"))?;
        let pid = std::fs::read_to_string(pidfile).ok()?.split_whitespace().next()?.to_string();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm == "mrshim-sim-net\n").then_some(pid)
    };
    let o = u.sim(&w, &[], "sleep 1");
    assert!(o.status.success(), "{}", stderr(&o));
    let first = holder().expect("a holder right after the job");
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        holder().is_none()
    });
    assert!(gone, "holder {first} still there 10 s after its last member left");
    assert!(!std::path::Path::new(&format!("/proc/{first}")).exists() || holder().is_none());
    let o = u.sim(&w, &[], "ls /sys/class/net | grep -c mrsim");
    assert_eq!(stdout(&o), "2\n", "{}", stderr(&o));
    assert_ne!(holder().expect("a new holder"), first);
}
