//! `mrshim analyze` on fixture logs in the real formats (and both seed incidents): the top finding must be
//! the category the fixture was written for, with the right hosts and ranks.
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs").join(p)
}

/// The two incidents that started the project, kept verbatim as fixtures.
fn seed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seeds").join(name)
}

pub fn analyze_json(args: &[&Path]) -> (i32, serde_json::Value) {
    let out = Command::new(mrshim_test_support::mrshim_bin())
        .arg("analyze")
        .arg("--json")
        .args(args)
        .output()
        .expect("run mrshim");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), v)
}

fn top(args: &[&str]) -> serde_json::Value {
    let paths: Vec<PathBuf> = args.iter().map(|a| fixture(a)).collect();
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let (code, v) = analyze_json(&refs);
    assert_eq!(code, 1, "findings exit with 1: {v}");
    v["findings"][0].clone()
}

fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|x| x.as_str().unwrap_or_default().to_string()).collect()).unwrap_or_default()
}

#[test]
fn nccl_memlock_on_one_host() {
    let f = top(&["memlock-limit/nccl-2.18-two-nodes.log"]);
    assert_eq!(f["category"], "memlock-limit");
    assert_eq!(strs(&f["hosts"]), ["gpu-b"]);
    assert_eq!(f["ranks"], serde_json::json!([2, 3]), "ranks from the 'comm ... rank R' lines, not the device index");
    assert_eq!(f["errno"], "ENOMEM");
    let ex = f["explanation"].as_str().unwrap();
    assert!(ex.contains("64 KiB") && ex.contains("gpu-a"), "{ex}");
    let fixes = f["fixes"].to_string();
    for knob in
        ["limits.conf", "LimitMEMLOCK", "--ulimit memlock=-1", "IPC_LOCK", "prolog", "MRSHIM_RETRY=raise-memlock"]
    {
        assert!(fixes.contains(knob), "fix names {knob}: {fixes}");
    }
}

#[test]
fn open_mpi_locked_memory_help_text() {
    let f = top(&["memlock-limit/ompi-openib-memlock.log"]);
    assert_eq!(f["category"], "memlock-limit");
    assert_eq!(strs(&f["hosts"]), ["comp003"]);
    assert!(f["explanation"].as_str().unwrap().contains("64 KiB"));
}

#[test]
fn perftest_use_cuda_buffer() {
    let f = top(&["gpu-peer-memory/perftest-use-cuda.log"]);
    assert_eq!(f["category"], "gpu-peer-memory");
    assert_eq!(f["errno"], "EFAULT");
    assert!(f["fixes"].to_string().contains("nvidia_peermem"));
}

#[test]
fn rccl_gpu_memory_without_peer_memory_module() {
    let f = top(&["gpu-peer-memory/rccl-amd-no-peermem.log", "gpu-peer-memory/mi-a.doctor.json"]);
    assert_eq!(f["category"], "gpu-peer-memory");
    assert_eq!(strs(&f["hosts"]), ["mi-a"]);
    assert!(f["explanation"].as_str().unwrap().contains("peer-memory client"));
}

#[test]
fn cuda_vmm_efault_needs_dmabuf() {
    let f = top(&["gpu-peer-memory/nccl-2.21-cumem-efault.log"]);
    assert_eq!(f["category"], "gpu-peer-memory");
    assert_eq!(f["errno"], "EFAULT");
    assert!(f["fixes"].to_string().contains("NCCL_DMABUF_ENABLE=1"));
}

#[test]
fn relaxed_ordering_runs_compared() {
    let f = top(&["relaxed-ordering"]);
    assert_eq!(f["category"], "relaxed-ordering");
    assert!(f["fixes"].to_string().contains("NCCL_IB_PCI_RELAXED_ORDERING=0"));
    assert!(f["fixes"].to_string().contains("drop-relaxed-ordering"));
}

#[test]
fn verbs_abi_mismatch() {
    let f = top(&["version-mismatch"]);
    assert_eq!(f["category"], "version-mismatch");
}

#[test]
fn ucx_bad_address_on_host_memory() {
    let f = top(&["address-invalid"]);
    assert_eq!(f["category"], "address-invalid");
    assert_eq!(f["call"], "ibv_reg_mr");
    assert_eq!(strs(&f["hosts"]), ["node-c1"]);
}

#[test]
fn mlx5_mkey_limit_with_memlock_unlimited() {
    let f = top(&["resource-exhaustion"]);
    assert_eq!(f["category"], "resource-exhaustion");
    assert!(f["evidence"].to_string().contains("limits exceeded"));
}

#[test]
fn eperm_in_container() {
    let f = top(&["permissions"]);
    assert_eq!(f["category"], "permissions");
}

/// An errno that says nothing on its own (EIO from NCCL, no other context) still gets a differential:
/// categories by prior, each marked as such and with the check that would decide it; never `unknown` alone.
#[test]
fn unexplained_errno_gets_a_prior_only_differential() {
    let paths = [fixture("unknown")];
    let (code, v) = analyze_json(&[paths[0].as_path()]);
    assert_eq!(code, 1);
    let fs = v["findings"].as_array().unwrap();
    assert!(fs.len() >= 2 && fs.len() <= 4, "{fs:?}");
    assert_eq!(fs[0]["category"], "gpu-peer-memory", "NCCL registers GPU buffers");
    for f in fs {
        assert_eq!(f["basis"], "prior", "{f}");
        assert_ne!(f["category"], "unknown");
        assert!(!f["check"].as_str().unwrap().is_empty());
        assert!(f["explanation"].as_str().unwrap().starts_with("Best guess"), "{f}");
    }
}

#[test]
fn shim_multirank_injected_memlock_on_one_host() {
    let f = top(&["shim/multirank-memlock.jsonl"]);
    assert_eq!(f["category"], "memlock-limit");
    assert_eq!(strs(&f["hosts"]), ["nodeB"]);
    assert_eq!(f["ranks"], serde_json::json!([4, 5, 6, 7]));
    let ex = f["explanation"].as_str().unwrap();
    assert!(ex.contains("injected") && ex.contains("nodeA"), "{ex}");
}

#[test]
fn shim_categories() {
    for (file, cat) in [
        ("shim/device-einval.jsonl", "gpu-peer-memory"),
        ("shim/iova-misaligned.jsonl", "iova-alignment"),
        ("shim/readonly-file.jsonl", "access-flags"),
        ("shim/unmapped.jsonl", "address-invalid"),
        ("shim/relaxed-only.jsonl", "relaxed-ordering"),
    ] {
        assert_eq!(top(&[file])["category"], cat, "{file}");
    }
    let f = top(&["shim/device-einval.jsonl"]);
    assert!(f["explanation"].as_str().unwrap().contains("Relaxed ordering is not the cause"));
}

#[test]
fn shim_newer_schema_is_read_with_a_note() {
    let (code, v) = analyze_json(&[&fixture("shim/newer-schema.jsonl")]);
    assert_eq!(code, 1);
    let notes = v["notes"].to_string();
    assert!(notes.contains("schema version 2"), "{notes}");
    assert!(notes.contains("malformed"), "{notes}");
    assert_eq!(v["findings"][0]["category"], "memlock-limit");
}

#[test]
fn seed_000_mccl_metax_is_peer_memory_not_relaxed_ordering() {
    let p = seed("000_b86d6e1b93bb2c05.txt");
    let (code, v) = analyze_json(&[&p]);
    assert_eq!(code, 1);
    let f = &v["findings"][0];
    assert_eq!(f["category"], "gpu-peer-memory");
    assert_eq!(f["errno"], "EINVAL");
    let calls = strs(&f["calls"]);
    assert!(calls.contains(&"ibv_reg_mr".into()) && calls.contains(&"ibv_reg_mr_iova2".into()), "{calls:?}");
    let ex = f["explanation"].as_str().unwrap();
    assert!(ex.contains("Relaxed ordering is not the cause"), "{ex}");
    let fixes = f["fixes"].to_string();
    assert!(fixes.contains("MCCL_NET_GDR_LEVEL"));
    // MetaX's own module and knobs, not NVIDIA's
    assert!(fixes.contains("MetaX's peer-memory module") && fixes.contains("mcMemGetHandleForAddressRange"), "{fixes}");
    assert!(!fixes.contains("nvidia_peermem") && !fixes.contains("NCCL_"), "{fixes}");
    assert!(v["findings"].as_array().unwrap().iter().all(|f| f["category"] != "relaxed-ordering"));
    assert!(
        v["ruled_out"].as_array().unwrap().iter().any(|r| r["category"] == "relaxed-ordering"),
        "relaxed ordering is ruled out, with why: {}",
        v["ruled_out"]
    );
}

#[test]
fn seed_001_article_is_memlock_first() {
    let p = seed("001_d69ba7302aad3a30.txt");
    let (code, v) = analyze_json(&[&p]);
    assert_eq!(code, 1);
    assert_eq!(v["findings"][0]["category"], "memlock-limit");
    assert_eq!(v["findings"][0]["errno"], "ENOMEM");
    // the article's own incident ends in a driver/user-space mismatch: reported too
    assert!(v["findings"].as_array().unwrap().iter().any(|f| f["category"] == "version-mismatch"));
}

#[test]
fn human_output_fits_80_columns_without_colour() {
    let out = Command::new(mrshim_test_support::mrshim_bin())
        .args(["analyze"])
        .arg(fixture("memlock-limit"))
        .arg(seed("000_b86d6e1b93bb2c05.txt"))
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("1. memlock-limit") || s.contains("1. gpu-peer-memory"), "{s}");
    assert!(!s.contains('\x1b'), "no colour when stdout is not a terminal");
    for l in s.lines() {
        let w: usize = l
            .chars()
            .map(|c| if (c as u32) >= 0x1100 && !(0x2000..0x2E80).contains(&(c as u32)) { 2 } else { 1 })
            .sum();
        assert!(w <= 80, "line wider than 80 columns ({w}): {l}");
    }
}

/// Provider limits that print no limit (session 13; fixtures written from the sources' format strings):
/// CXI's cxil_map ENOSPC after its MR-cache start-up lines, and uGNI's GNI_RC_ERROR_RESOURCE. Each is
/// resource-exhaustion on evidence, and the first fix names the knob of that stack.
#[test]
fn provider_limits_name_their_knobs() {
    for (file, knob) in [
        ("resource-exhaustion/cxi-mr-cache-enospc.log", "`cxi_service list`"),
        ("resource-exhaustion/gni-memregister-resource.log", "MPICH_GNI_NDREG_ENTRIES"),
    ] {
        let f = top(&[file]);
        assert_eq!(f["category"], "resource-exhaustion", "{file}: {f}");
        assert_eq!(f["basis"], "evidence", "{file}: {f}");
        let first = f["fixes"][0].as_str().unwrap_or_default();
        assert!(first.contains(knob), "{file}: first fix names {knob}: {first}");
    }
}
