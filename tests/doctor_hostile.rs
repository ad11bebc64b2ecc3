//! `mrshim doctor --root` on a captured tree someone else made (issue 20): a FIFO, a huge sparse
//! file and symbolic links that point out of the tree.
use std::path::{Path, PathBuf};
use std::process::Command;

/// A copy of the healthy tree, to be spoiled.
fn copy_of(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrshim-hostile-doctor-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/doctor/healthy");
    let st = Command::new("cp").arg("-a").arg(&src).arg(&d).status().unwrap();
    assert!(st.success());
    d
}

/// `mrshim doctor --json --root ROOT` with a minute to finish: (exit code, stdout).
fn doctor_on(root: &Path) -> (Option<i32>, String) {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "2", "60"]).arg(mrshim_test_support::mrshim_bin()).args(["doctor", "--json", "--root"]).arg(root);
    let o = cmd.output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
}

fn finishes_with_a_report(root: &Path, what: &str) -> String {
    let (code, out) = doctor_on(root);
    assert!(matches!(code, Some(0 | 1)), "{what}: exit {code:?}");
    serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
    out
}

#[test]
fn links_out_of_the_tree_are_resolved_inside_it() {
    let root = copy_of("links");
    let outside = root.with_extension("outside");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    let fw = root.join("sys/class/infiniband/mlx5_0/fw_ver");
    std::fs::remove_file(&fw).unwrap();
    std::os::unix::fs::symlink(&outside, &fw).unwrap();
    let hostname = root.join("proc/sys/kernel/hostname");
    std::fs::remove_file(&hostname).unwrap();
    std::os::unix::fs::symlink(format!("../../../../../../../../../..{}", outside.display()), &hostname).unwrap();
    let out = finishes_with_a_report(&root, "links");
    assert!(!out.contains("OUTSIDE-SECRET"), "{out}");
    let _ = std::fs::remove_file(&outside);
}

#[test]
fn a_fifo_in_the_tree_does_not_hang_doctor() {
    let root = copy_of("fifo");
    let meminfo = root.join("proc/meminfo");
    std::fs::remove_file(&meminfo).unwrap();
    let c = std::ffi::CString::new(meminfo.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    finishes_with_a_report(&root, "fifo");
}

#[test]
fn a_huge_sparse_file_is_not_read_into_memory() {
    let root = copy_of("huge");
    let status = std::fs::File::create(root.join("proc/self/status")).unwrap();
    status.set_len(1 << 30).unwrap();
    finishes_with_a_report(&root, "huge");
    // the largest child this test process waited for (doctor, timeout, cp: all small unless one
    // read the gigabyte)
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is writable.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) }, 0);
    assert!(ru.ru_maxrss < 256 << 10, "a child used {} MiB", ru.ru_maxrss >> 10);
}
