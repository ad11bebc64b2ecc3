//! `mrshim doctor` on captured /proc + /sys trees (tests/fixtures/doctor, made by make_trees.py), on this
//! machine, and `--compare` of two reports.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/doctor").join(name)
}

fn doctor(args: &[&str]) -> (i32, String) {
    let out = Command::new(mrshim_test_support::mrshim_bin()).arg("doctor").args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap())
}

fn report(name: &str) -> (i32, Value) {
    let (code, s) = doctor(&["--json", "--root", tree(name).to_str().unwrap()]);
    (code, serde_json::from_str(&s).unwrap())
}

fn status(r: &Value, id: &str) -> String {
    r["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no check {id}"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn healthy_node_is_all_ok() {
    let (code, r) = report("healthy");
    assert_eq!(code, 0);
    for c in r["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "ok", "{c}");
    }
    assert_eq!(r["host"], "healthy");
}

#[test]
fn memlock_64k_fails_with_the_fix() {
    let (code, r) = report("memlock64k");
    assert_eq!(code, 1);
    assert_eq!(status(&r, "memlock"), "fail");
    assert_eq!(status(&r, "cap_ipc_lock"), "warn");
    assert_eq!(status(&r, "container"), "warn");
    let m = r["checks"].as_array().unwrap().iter().find(|c| c["id"] == "memlock").unwrap();
    assert_eq!(m["raw"]["soft"], 65536);
    let fix = m["fix"].as_str().unwrap();
    assert!(fix.contains("limits.conf") && fix.contains("LimitMEMLOCK") && fix.contains("memlock=-1"), "{fix}");
}

#[test]
fn missing_peermem_fails() {
    let (code, r) = report("no-peermem");
    assert_eq!(code, 1);
    assert_eq!(status(&r, "peer_memory"), "fail");
    assert_eq!(status(&r, "pcie"), "ok");
}

#[test]
fn acs_on_the_nic_gpu_path_fails() {
    let (code, r) = report("acs-on");
    assert_eq!(code, 1);
    assert_eq!(status(&r, "pcie"), "fail");
    let p = r["checks"].as_array().unwrap().iter().find(|c| c["id"] == "pcie").unwrap();
    let on: Vec<&str> = p["raw"]["acs_enabled"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(on.contains(&"0000:02:00.0") && on.contains(&"0000:02:01.0"), "{on:?}");
    assert!(p["fix"].as_str().unwrap().contains("setpci"));
}

#[test]
fn human_output_fits_80_columns() {
    // A tree deep in the file system too (a symlink to a fixture): the header names it
    // without overflowing.
    let deep = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("doctor-{}", std::process::id()))
        .join("a-directory-name-long-enough-to-push-the-header-past-eighty-columns");
    std::fs::create_dir_all(&deep).unwrap();
    let _ = std::fs::remove_file(deep.join("memlock64k"));
    std::os::unix::fs::symlink(tree("memlock64k"), deep.join("memlock64k")).unwrap();
    let trees =
        ["healthy", "memlock64k", "no-peermem", "acs-on"].map(tree).into_iter().chain([deep.join("memlock64k")]);
    for t in trees {
        let (_, s) = doctor(&["--root", t.to_str().unwrap()]);
        let t = t.display();
        assert!(!s.contains('\x1b'));
        for l in s.lines() {
            assert!(l.chars().count() <= 80, "{t}: {l}");
        }
    }
    let _ = std::fs::remove_dir_all(deep.parent().unwrap());
}

#[test]
fn this_machine_runs_and_says_when_there_is_no_rdma_device() {
    let (code, s) = doctor(&[]);
    assert!(code == 0 || code == 1, "{code}");
    let empty = std::fs::read_dir("/sys/class/infiniband").map(|d| d.count() == 0).unwrap_or(true);
    if empty {
        assert!(s.contains("no RDMA devices"), "{s}");
    }
}

#[test]
fn compare_shows_what_differs() {
    let dir = std::env::temp_dir().join(format!("mrshim-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for t in ["healthy", "memlock64k"] {
        let (_, s) = doctor(&["--json", "--root", tree(t).to_str().unwrap()]);
        let f = dir.join(format!("{t}.json"));
        std::fs::write(&f, s).unwrap();
        files.push(f.to_str().unwrap().to_string());
    }
    let (code, s) = doctor(&["--compare", &files[0], &files[1]]);
    assert_eq!(code, 1, "{s}");
    assert!(s.contains("memlock") && s.contains("64 KiB") && s.contains("unlimited"), "{s}");
    assert!(!s.contains("peer_memory"), "identical checks are not shown: {s}");
    let (code, _) = doctor(&["--compare", &files[0], &files[0]]);
    assert_eq!(code, 0);
    let (code, _) = doctor(&["--compare", &files[0], "/nonexistent.json"]);
    assert_eq!(code, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn analyze_uses_doctor_reports_next_to_logs() {
    // memlock 64 KiB from the failing node's doctor report, the NCCL log alone says only ENOMEM
    let dir = std::env::temp_dir().join(format!("mrshim-doctor-analyze-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, s) = doctor(&["--json", "--root", tree("memlock64k").to_str().unwrap()]);
    std::fs::write(dir.join("memlock64k.json"), s).unwrap();
    std::fs::write(
        dir.join("job.log"),
        "memlock64k:10:10 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\nmemlock64k:10:11 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n",
    )
    .unwrap();
    let out = Command::new(mrshim_test_support::mrshim_bin()).args(["analyze", "--json"]).arg(&dir).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["findings"][0]["category"], "memlock-limit", "{v}");
    assert!(v["findings"][0]["explanation"].as_str().unwrap().contains("64 KiB"));
    assert_eq!(v["summary"]["doctor_reports"], 1);
    let _ = std::fs::remove_dir_all(&dir);
}
