//! `mrshim analyze` on what users paste (issue 13): each framing, each error form, each fact, kernel-only
//! evidence, mrshim's own lines, de-duplication across records/stderr/library lines, a 0-failure summary,
//! retry records, the `basis`/ranked --json fields and the exit codes. Real processes, real files.
use std::path::PathBuf;
use std::process::Command;

fn run(files: &[(&str, &str)], env: &[(&str, &str)]) -> (i32, serde_json::Value, String) {
    let dir = std::env::temp_dir().join(format!(
        "mrshim-pasted-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|(name, text)| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect();
    let mut cmd = Command::new(mrshim_test_support::mrshim_bin());
    cmd.arg("analyze").arg("--json").args(&paths);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn one(text: &str) -> (i32, serde_json::Value) {
    let (c, v, _) = run(&[("pasted.log", text)], &[]);
    (c, v)
}

/// The first finding of `text`, which must be a failure (exit 1).
fn first_finding(text: &str) -> serde_json::Value {
    let (c, v) = one(text);
    assert_eq!(c, 1, "{text}\n{v}");
    v["findings"][0].clone()
}

fn cats(v: &serde_json::Value) -> Vec<String> {
    v["findings"].as_array().map(|a| a.iter().map(|f| f["category"].as_str().unwrap().to_string()).collect()).unwrap()
}

const WARN: &str =
    "gpu-b:5202:5290 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory";

/// Each framing of (2): the failure is recognised, counted once, and the host comes from where a host is.
#[test]
fn framings() {
    for (framed, host) in [
        (WARN.to_string(), Some("gpu-b")),
        (format!("2024-05-01T10:00:00.123456Z {WARN}"), Some("gpu-b")),
        (format!("[2024-05-01 10:00:00] {WARN}"), Some("gpu-b")),
        (format!("3: {WARN}"), Some("gpu-b")),
        (format!("[1,3]<stderr>:{WARN}"), Some("gpu-b")),
        (format!("node017: {WARN}"), Some("gpu-b")),
        (format!("2024-05-01T10:00:00.000000001Z stderr F {WARN}"), Some("gpu-b")),
        (format!("trainer-1  | {WARN}"), Some("gpu-b")),
        (
            "May 13 11:04:17 n17 python3[4242]: Call to ibv_reg_mr failed with error Cannot allocate memory".into(),
            Some("n17"),
        ),
        ("node017: Call to ibv_reg_mr failed with error Cannot allocate memory".into(), Some("node017")),
        ("2024-05-01T10:00:00Z Call to ibv_reg_mr failed with error Cannot allocate memory".into(), None),
    ] {
        let (code, v) = one(&framed);
        assert_eq!(code, 1, "{framed}: {v}");
        assert_eq!(v["summary"]["failed"], 1, "{framed}");
        let hosts: Vec<String> = serde_json::from_value(v["summary"]["hosts"].clone()).unwrap();
        match host {
            Some(h) => assert!(hosts.contains(&h.to_string()), "{framed}: {hosts:?}"),
            None => assert!(hosts.is_empty(), "{framed}: a timestamp is no host: {hosts:?}"),
        }
        assert_eq!(v["findings"][0]["errno"], "ENOMEM", "{framed}");
    }
}

/// A UCX failure whose `mem_type` follow-up comes after interleaved DEBUG lines, with a padded pid.
#[test]
fn ucx_padded_pid_and_interleaved_follow_up() {
    let log = "\
[1592245902.211846] [std1707:2850 :0]          ib_md.c:325  UCX  ERROR ibv_reg_mr(address=0x7f724fa00000, length=4096, access=0xf) failed: Bad address
[1592245902.211850] [std1707:2850 :0]          mpool.c:100  UCX  DEBUG mpool pending-ops: align 1, maxelems 4294967295, elemsize 112
[1592245902.211969] [std1707:2850 :0]         ucp_mm.c:131  UCX  ERROR failed to register address 0x7f724fa00000 mem_type bit 0x2 length 4096 on md[5]=mlx5_0: Input/output error (md reg_mem_types 0x15)
";
    let (code, v) = one(log);
    assert_eq!(code, 1);
    assert_eq!(v["summary"]["failed"], 1);
    let f = &v["findings"][0];
    assert_eq!((f["category"].as_str(), f["errno"].as_str()), (Some("gpu-peer-memory"), Some("EFAULT")), "{f}");
    assert_eq!(v["summary"]["hosts"], serde_json::json!(["std1707"]));
}

/// Each error form of (1) gives the errno, and so the category a maintainer would name first.
#[test]
fn error_forms() {
    for (line, errno) in [
        ("ibv_reg_mr failed: Cannot allocate memory", "ENOMEM"),
        ("ibv_reg_mr failed: ENOMEM", "ENOMEM"),
        ("register memory failed errno:12", "ENOMEM"),
        ("register memory failed errno = 12", "ENOMEM"),
        ("register memory failed errno: 12", "ENOMEM"),
        ("ibv_reg_mr failed [error code: 12]", "ENOMEM"),
        ("Failed to register memory 0x7f0000000000: [12]", "ENOMEM"),
        ("register MR failed (12)", "ENOMEM"),
        ("ibv_reg_mr_iova2 failed -12", "ENOMEM"),
        ("fi_mr_reg failed ret=-12", "ENOMEM"),
        ("NET/OFI Unable to register memory (type = 1) for device 0. RC: -12, Error:", "ENOMEM"),
        ("reg_mr failed status -12", "ENOMEM"),
        ("libfabric:1:1::verbs:mr:vrb_mr_reg():90<warn> fi_mr_reg failed: -12", "ENOMEM"),
        ("register_memory failed: Os { code: 12, kind: OutOfMemory, message: \"Cannot allocate memory\" }", "ENOMEM"),
        ("ibv_reg_mr failed: Bad address", "EFAULT"),
        ("ibv_reg_mr failed: Invalid argument", "EINVAL"),
        ("ibv_reg_mr failed: Operation not permitted", "EPERM"),
        ("ibv_reg_mr failed: Permission denied", "EACCES"),
        ("ibv_reg_mr failed: Resource temporarily unavailable", "EAGAIN"),
        ("ibv_reg_dmabuf_mr failed status -95", "EOPNOTSUPP"),
    ] {
        let (code, v) = one(line);
        assert_eq!(code, 1, "{line}");
        assert_eq!(v["findings"][0]["errno"], errno, "{line}: {v}");
    }
    // the errno on the next line
    let (_, v) = one("registerMemory(addr=0x7f0000000000) failed\nerrno = 13\n");
    assert_eq!(v["findings"][0]["errno"], "EACCES");
    assert_eq!(v["summary"]["failed"], 1);
    // a hard-wrapped NCCL WARN and a hard-wrapped call: one failure each, with the errno of the next line
    let (_, v) =
        one("n1:7:7 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error\nCannot allocate memory\n");
    assert_eq!((v["summary"]["failed"].as_u64(), v["findings"][0]["errno"].as_str()), (Some(1), Some("ENOMEM")), "{v}");
    let (_, v) = one("rdma_utils.h:119: Check failed: mr = ibv_reg_mr(pd_\n, p, size, IBV_ACCESS_LOCAL_WRITE) Failed to register the memory region: Cannot allocate memory\n");
    assert_eq!((v["summary"]["failed"].as_u64(), v["findings"][0]["errno"].as_str()), (Some(1), Some("ENOMEM")), "{v}");
}

/// The maintainer's order per errno (5): the first category for each errno and memory kind.
#[test]
fn differential_order_by_errno() {
    for (line, first) in [
        ("ibv_reg_mr failed: Cannot allocate memory", "memlock-limit"),
        ("ibv_reg_mr failed: Resource temporarily unavailable", "resource-exhaustion"),
        // EPERM from a registration is ib_umem_get's can_do_mlock: a memlock limit of 0 without
        // CAP_IPC_LOCK (session 15; "permissions" first where a missing capability is seen)
        ("ibv_reg_mr failed: Operation not permitted", "memlock-limit"),
        ("ibv_reg_mr failed: Permission denied", "permissions"),
        ("register GPU memory (cuda) failed: Bad address", "gpu-peer-memory"),
        ("register GPU memory (cuda) failed: Invalid argument", "gpu-peer-memory"),
        ("register host memory failed: Bad address", "address-invalid"),
        ("ibv_reg_dmabuf_mr failed: Operation not supported", "dmabuf-unsupported"),
    ] {
        let (_, v) = one(line);
        assert_eq!(cats(&v)[0], first, "{line}: {:?}", cats(&v));
    }
    let (_, v) = one("ibv_reg_mr failed: Cannot allocate memory");
    // a regression (3 of the corpus's 13 ENOMEM reports) before the old read-only-mapping path
    assert_eq!(cats(&v), ["memlock-limit", "resource-exhaustion", "version-mismatch", "access-flags"]);
}

/// Facts of (4) where users paste them move the ranking.
#[test]
fn facts_move_the_ranking() {
    let fail = "ibv_reg_mr failed: Cannot allocate memory\n";
    // memlock unlimited (the answer on the next line) rules memlock out
    let (_, v) = one(&format!("$ ulimit -l\nunlimited\n{fail}"));
    assert_eq!(cats(&v)[0], "resource-exhaustion");
    assert_eq!(v["ruled_out"][0]["category"], "memlock-limit");
    // a 64 KiB limit in `ulimit -a` form is evidence, not a prior
    let (_, v) = one(&format!("max locked memory       (kbytes, -l) 64\n{fail}"));
    assert_eq!(
        (v["findings"][0]["category"].as_str(), v["findings"][0]["basis"].as_str()),
        (Some("memlock-limit"), Some("evidence"))
    );
    // Max locked memory from /proc/PID/limits
    let (_, v) = one(&format!("Max locked memory         65536                65536                bytes\n{fail}"));
    assert_eq!(v["findings"][0]["basis"], "evidence");
    // vm.max_map_count in sysctl form, with memlock unlimited: resource exhaustion on evidence
    let (_, v) = one(&format!("vm.max_map_count = 65530\nulimit -l unlimited\n{fail}"));
    assert_eq!(
        (v["findings"][0]["category"].as_str(), v["findings"][0]["basis"].as_str()),
        (Some("resource-exhaustion"), Some("evidence"))
    );
    // a GeForce GPU named anywhere makes an EFAULT of unknown memory a peer-memory problem
    let (_, v) = one("GPU id:0; name: GeForce RTX 2070; Bus id: 0000:01:00\nibv_reg_mr failed: Bad address\n");
    assert_eq!(cats(&v)[0], "gpu-peer-memory");
    assert_eq!(v["findings"][0]["known_issue"]["id"], "geforce-no-gpudirect-rdma");
    // lsmod output and dmabuf flags are read (peer memory loaded + EFAULT on cuMem memory)
    let (_, v) =
        one("nvidia_peermem         16384  0\ncuMemAlloc: 1, dmaBufSupported: 0\nibv_reg_mr failed (errno 14)\n");
    assert_eq!(cats(&v)[0], "gpu-peer-memory");
    assert_eq!(v["findings"][0]["basis"], "evidence");
}

/// Kernel-only evidence (4) produces a finding on its own; next to the user-space line it adds no count.
#[test]
fn kernel_only_evidence() {
    for (k, first) in [
        ("[1452510.275798] mlx5_core 0000:41:00.0: mlx5_cmd_out_err:800:(pid 0): CREATE_MKEY(0x200) op_mod(0x0) failed, status limits exceeded(0x8), syndrome (0x18af6), err(-12)", "resource-exhaustion"),
        ("[79199.669653] mlx5_0:mr_umem_get:709:(pid 15855): umem get failed (-131668346275144)", "memlock-limit"),
        ("Jul  7 13:48:56 myhost kernel: [169336.898388] gdrdrv:__gdrdrv_pin_buffer:nvidia_p2p_get_pages(va=7ff512200000 len=65536 p2p_token=0 va_space=0) failed [ret = -22]", "gpu-peer-memory"),
        ("[1038619.687627] infiniband efa_0: Failed to process command REG_MR (opcode 7) comp_status 1 err -12", "memlock-limit"),
    ] {
        let (code, v) = one(k);
        assert_eq!(code, 1, "{k}: {v}");
        assert!(cats(&v).iter().any(|c| c == first), "{k}: {:?}", cats(&v));
    }
    let (_, v) = one("[1.0] infiniband mlx5_0: create_mkey_callback:131:(pid 0): async reg mr failed. status -12\nucx: ibv_reg_mr failed: Cannot allocate memory\n");
    assert_eq!(v["summary"]["failed"], 1, "the kernel line is the same failure seen from below");
    assert_eq!(cats(&v)[0], "resource-exhaustion");
}

fn rec(seq: u64, pid: u32, call: &str, result: &str, extra: &str) -> String {
    format!(
        r#"{{"v":1,"kind":"reg","seq":{seq},"time_ns":{},"host":"n1","pid":{pid},"tid":{pid},"rank":0,"call":"{call}","result":"{result}","duration_ns":2100,"device":"mlx5_0","pd":"0x55d0a000","length":2097152,"registered_bytes":0{extra}}}"#,
        1_764_700_000_000_000_000u64 + seq
    )
}

/// mrshim's own lines (6) and de-duplication: records + MRSHIM WARN + NCCL WARN + summary of one job
/// give the failure count of the records alone; a summary with 0 failures is no failure.
#[test]
fn own_lines_and_one_count_per_failure() {
    let fail = r#","addr":"0x7f0000200000","access":1048591,"relaxed_ordering":true,"mem_kind":"device","errno":22,"errno_name":"EINVAL""#;
    let records: String = (1..=4).map(|i| rec(i, 4242, "ibv_reg_mr_iova2", "error", fail) + "\n").collect();
    let mut stderr = String::new();
    for _ in 0..4 {
        stderr.push_str("n1:4242:4243 [0] MRSHIM WARN ibv_reg_mr_iova2(addr=0x7f0000200000, len=2097152, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova=0x7f0000200000) failed: EINVAL (22)\n");
        stderr.push_str("n1:4242:4243 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument\n");
    }
    stderr.push_str("n1:4242:4242 [0] MRSHIM INFO summary: 4 calls (ibv_reg_mr_iova2 4), 4 failures (ibv_reg_mr_iova2 EINVAL x4), 0 probes, 0 bytes registered in total, peak 0 bytes, 0 bytes still registered\n");
    let (_, alone, _) = run(&[("n1.jsonl", &records)], &[]);
    let (code, mixed, _) = run(&[("n1.jsonl", &records), ("job.err", &stderr)], &[]);
    assert_eq!(code, 1);
    assert_eq!(alone["summary"]["failed"], 4);
    assert_eq!(mixed["summary"]["failed"], 4, "records + stderr + NCCL WARN count each failure once");
    assert_eq!(cats(&mixed)[0], "gpu-peer-memory");
    // the stderr alone: MRSHIM WARN lines are evidence
    let (code, v, _) = run(&[("job.err", &stderr)], &[]);
    assert_eq!((code, v["summary"]["failed"].as_u64()), (1, Some(4)));
    // a summary line with 0 failures alone: no failure, exit 0
    let (code, v) = one("n1:7:7 [-] MRSHIM INFO summary: 3 calls (ibv_reg_mr 3), 0 failures, 0 probes, 12288 bytes registered in total, peak 12288 bytes, 0 bytes still registered\n");
    assert_eq!((code, v["summary"]["failed"].as_u64()), (0, Some(0)), "{v}");
}

/// A successful perftest run is a success.
#[test]
fn successful_perftest_run_is_success() {
    let out = "\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 PCIe relax order: ON
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      5000             11610.46            11608.60\t\t   0.185738
---------------------------------------------------------------------------------------
";
    let (code, v) = one(out);
    assert_eq!((code, v["summary"]["failed"].as_u64()), (0, Some(0)), "{v}");
}

/// Retry records (7): addr/access/mem_kind are the caller's, used_* what the shim registered; a rescued job
/// is one finding, and a failed drop-relaxed-ordering attempt rules relaxed ordering out.
#[test]
fn retry_records_describe_the_callers_request() {
    let dev = r#","addr":"0x7f0000200000","access":1048591,"relaxed_ordering":true,"mem_kind":"device""#;
    let lines = [
        rec(1, 9, "ibv_reg_mr", "error", &format!(r#"{dev},"errno":14,"errno_name":"EFAULT""#)),
        rec(
            2,
            9,
            "ibv_reg_mr",
            "error",
            &format!(
                r#"{dev},"errno":14,"attempt":1,"parent_seq":1,"strategy":"drop-relaxed-ordering","used_access":15"#
            ),
        ),
        rec(
            3,
            9,
            "ibv_reg_mr",
            "ok",
            &format!(
                r#"{dev},"attempt":2,"parent_seq":1,"strategy":"bounce","used_addr":"0x7f0000900000","used_access":15,"used_mem_kind":"host-anon""#
            ),
        ),
        rec(
            4,
            9,
            "ibv_reg_mr",
            "ok",
            &format!(
                r#"{dev},"learned":true,"strategy":"bounce","used_addr":"0x7f0000a00000","used_access":15,"used_mem_kind":"host-anon""#
            ),
        ),
    ];
    let text = lines.join("\n") + "\n";
    let (code, v, _) = run(&[("n1.jsonl", &text)], &[]);
    assert_eq!(code, 1);
    assert_eq!(cats(&v), ["gpu-peer-memory"], "a rescued job is one finding: {v}");
    assert!(v["findings"][0]["explanation"].as_str().unwrap().contains("with retry strategy bounce"));
    // the application made two calls, both registered: one rescued after failing, one learned
    assert_eq!((v["summary"]["failed"].as_u64(), v["summary"]["rescued"].as_u64()), (Some(1), Some(1)), "{v}");
    assert_eq!((v["summary"]["learned"].as_u64(), v["hosts"][0]["calls"].as_u64()), (Some(1), Some(2)), "{v}");
    let dir = std::env::temp_dir().join(format!("mrshim-pasted-rescued-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("n1.jsonl"), &text).unwrap();
    let out = Command::new(mrshim_test_support::mrshim_bin()).arg("analyze").arg(&dir).output().unwrap();
    let head = String::from_utf8_lossy(&out.stdout).split("\n\n").next().unwrap().replace("\n  ", " ");
    assert!(
        head.contains("1 of 2 registrations failed; mrshim rescued it: the application saw no failure; 1 more registered through a learned strategy"),
        "{head}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        v["ruled_out"].as_array().unwrap().iter().any(|r| r["category"] == "relaxed-ordering"),
        "{}",
        v["ruled_out"]
    );
    // an older shim put the shadow into addr/access/mem_kind of the learned record: those fields are not trusted
    let old = rec(
        5,
        9,
        "ibv_reg_mr",
        "ok",
        r#","addr":"0x7f0000a00000","access":15,"mem_kind":"host-anon","learned":true,"strategy":"bounce""#,
    );
    let (_, v, _) = run(&[("n1.jsonl", &format!("{}\n{}\n{old}\n", lines[0], lines[2]))], &[]);
    assert_eq!(cats(&v), ["gpu-peer-memory"], "no relaxed-ordering finding from the shadow's access: {v}");
}

/// --json: each finding has basis, check and its rank (the array order); at most four.
#[test]
fn json_basis_and_ranked_list() {
    let (_, v) = one("misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Input/output error\n");
    let fs = v["findings"].as_array().unwrap();
    assert!((1..=4).contains(&fs.len()));
    for f in fs {
        assert!(matches!(f["basis"].as_str(), Some("prior") | Some("evidence")), "{f}");
        assert!(f["check"].as_str().is_some_and(|c| !c.is_empty()));
    }
    let conf: Vec<f64> = fs.iter().map(|f| f["confidence"].as_f64().unwrap()).collect();
    assert!(conf.windows(2).all(|w| w[0] >= w[1]), "ranked most likely first: {conf:?}");
    assert!(v["ruled_out"].is_array());
}

/// Exit codes: 1 = failures found, 0 = registrations seen and none failed, 2 = nothing recognised (said so).
#[test]
fn exit_codes() {
    let (code, _) = one("ibv_reg_mr failed: Invalid argument\n");
    assert_eq!(code, 1);
    let (code, _) = one("[1643394930.913056] [cirrus3:1292923:0]           ib_md.c:816  UCX  DEBUG registered memory 0x7f56f0f20ba0..0x7f56f12750e0 on mlx5_0 lkey 0xc0563 rkey 0xc0563 access 0xf flags 0x368\n");
    assert_eq!(code, 0);
    let (code, _, err) = run(&[("notes.txt", "hello world\nnothing to see here\n")], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("nothing recognised"), "{err}");
}

/// Known issues as data (8): the built-in table matches, and a user's table is appended.
#[test]
fn known_issues_table_and_user_extension() {
    let (_, v) = one("register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 4. RC: -22, Error: Invalid argument\n");
    let k = &v["findings"].as_array().unwrap().iter().find(|f| !f["known_issue"].is_null()).unwrap()["known_issue"];
    assert_eq!(k["id"], "efa-cuda-sync-memops");
    let dir = std::env::temp_dir().join(format!("mrshim-known-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let table = dir.join("mine.json");
    std::fs::write(&table, r#"[{"id":"site-42","title":"our old OFED","category":"version-mismatch","match":[["OFED-4.1"]],"source":"https://example.org/site-42","fix":"upgrade OFED"}]"#).unwrap();
    let (_, v, _) = run(
        &[("job.log", "MLNX_OFED_LINUX-4.1-1.0.2.0 (OFED-4.1-1.0.2)\nibv_reg_mr failed: Invalid argument\n")],
        &[("MRSHIM_KNOWN_ISSUES", table.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(v["findings"][0]["category"], "version-mismatch", "{v}");
    assert_eq!(v["findings"][0]["known_issue"]["id"], "site-42");
}

/// Message families read from the stacks' sources (issue 29, session 5): libfabric EFA prints the
/// errno of an internal error on the line before `EFA internal error: (4112) ...` (efa_base_ep.c),
/// perftest's buffer allocation fails before any registration (host_memory.c, then create_mr's
/// "failed to create mr"), librdmacm's helpers register with LOCAL_WRITE (rdma_verbs.h) so a
/// read-only mapping named next to them is the memory they failed on.
#[test]
fn fabric_families_from_the_sources() {
    let first = |text: &str| {
        let f = first_finding(text);
        (f["category"].as_str().unwrap().to_string(), f["errno"].clone(), f["count"].as_u64().unwrap())
    };
    // the errno comes from the line before; one failure; locked memory first for ENOMEM on host memory
    let efa = "Libfabric EFA provider has encountered an internal error:\n\nLibfabric error: (-12) Cannot allocate memory\nEFA internal error: (4112) Failure to post internal receive buffers\n\nYour application will now abort().\n";
    assert_eq!(first(efa), ("memlock-limit".into(), serde_json::json!("ENOMEM"), 1));
    // the pool's own warning and the internal error are one failure
    let efa_log = "libfabric:77:1745000000::efa:cq:efa_rdm_ep_grow_rx_pools():921<warn> cannot allocate memory for EFA's RX packet pool. error: Cannot allocate memory\nLibfabric error: (-12) Cannot allocate memory\nEFA internal error: (4112) Failure to post internal receive buffers\n";
    assert_eq!(first(efa_log).2, 1);
    // an errno printed far before is not this failure's
    let far = format!("Libfabric error: (-12) Cannot allocate memory\n{}EFA internal error: (4112) Failure to post internal receive buffers\n", "x\n".repeat(5));
    assert_eq!(first(&far).1, serde_json::Value::Null);
    // perftest: the hugepage buffer was never allocated; no registration, one failure, resources first
    let perf = "Failed to allocate hugepages. Please configure hugepages\nFailed to allocate hugepage region.\nfailed to create mr\nFailed to create MR\nCouldn't create IB resources\n";
    assert_eq!(first(perf), ("resource-exhaustion".into(), serde_json::Value::Null, 1));
    // the registration itself failing stays a registration failure, counted once
    let (c, v) = one("Couldn't allocate MR\nfailed to create mr\nFailed to create MR\n");
    assert_eq!(
        (c, v["findings"][0]["count"].as_u64(), v["findings"][0]["calls"][0].as_str()),
        (1, Some(1), Some("ibv_reg_mr"))
    );
    // "failed to create mr" without the allocation message is a failure of unknown cause, not resources
    assert_ne!(first("failed to create mr\nFailed to create MR\n").0, "resource-exhaustion");
    // EFA's RxR layer repeats the core registration with the length it asked for: once, and 0 is empty
    let rxr = "libfabric:5464:efa:mr:efa_mr_reg():267<warn> Unable to register MR: Invalid argument\nlibfabric:5464:efa:mr:rxr_mr_regattr():169<warn> Unable to register MR buf (Invalid argument): 0x7ffc94c94c40 len: 0\n";
    assert_eq!(first(rxr), ("address-invalid".into(), serde_json::json!("EINVAL"), 1));
    // PSM3's UD buffer pool (host memory) registration
    let (c, v) = one("n7:rank3.a.out: Unable to alloc send buffer MR on mlx5_0: Cannot allocate memory\n");
    assert_eq!(
        (c, v["findings"][0]["calls"][0].as_str(), v["findings"][0]["errno"].as_str()),
        (1, Some("ibv_reg_mr"), Some("ENOMEM"))
    );
    // words: a librdmacm helper failing on a PROT_READ mapping
    let prose = "The buffer comes from mmap with PROT_READ and rdma_reg_msgs returns an error every time.\n";
    assert_eq!(first(prose).0, "access-flags");
    // the same helper on writable memory is not called an access problem first
    assert_ne!(first("rdma_reg_msgs returns an error every time.\n").0, "access-flags");
}

/// HPC runtimes' own registration messages (issue 29, session 5, branch v6), composed from their
/// sources' format strings: Chapel's ugni layer when its region table is full (comm-ugni.c), Charm++'s
/// gni layer refused for resources (machine-onesided.C, GNI_RC_CHECK), MVAPICH2's vbuf pool
/// (gen2/vbuf.c), GASNet's AM receive buffers (ibv-conduit/gasnet_core_sndrcv.c), Mercury's NA OFI
/// registration with the count it had (na_ofi.c). Each is a registration failure with its cause first.
#[test]
fn hpc_runtime_families_from_the_sources() {
    let first = |text: &str| {
        let f = first_finding(text);
        (
            f["category"].as_str().unwrap().to_string(),
            f["count"].as_u64().unwrap(),
            f["calls"][0].as_str().unwrap_or("").to_string(),
        )
    };
    // Chapel: the region table is full, then the allocation that needed a region fails
    let chapel = "executing on node 0 of 8 node(s): nid00012\nwarning: no more registered memory region table entries (max is 2048).\n         Change using CHPL_RT_COMM_UGNI_MAX_MEM_REGIONS.\n<internal>: error: Out of memory allocating \"array elements\"\n";
    assert_eq!(first(chapel), ("resource-exhaustion".into(), 1, "GNI_MemRegister".into()));
    // Charm++ over GNI: registration refused with GNI_RC_ERROR_RESOURCE, then the abort banner
    let charm = "Charm++> Running in non-SMP mode: 64 processes\nCharm++> memory pool registered memory limit: 200000MB, send limit: 100000MB\n[7] Error! Memory registration failed inside LrtsRegisterMemory!; err=GNI_RC_ERROR_RESOURCE\n------------- Processor 7 Exiting: Called CmiAbort ------------\nReason: GNI_RC_CHECK\n";
    assert_eq!(first(charm), ("resource-exhaustion".into(), 1, "GNI_MemRegister".into()));
    // MVAPICH2: a vbuf region could not be registered (no errno printed), once per rank that says so
    let (c, v) = one("[cn01:mpi_rank_3][error_sighandler] Caught error\n[src/mpid/ch3/channels/mrail/src/gen2/vbuf.c 510] Cannot register vbuf region\n");
    assert_eq!(
        (c, v["findings"][0]["count"].as_u64(), v["findings"][0]["calls"][0].as_str()),
        (1, Some(1), Some("ibv_reg_mr"))
    );
    // GASNet ibv: the AM receive buffers could not be pinned at start-up
    let gasnet = "GASNet gasnetc_sndrcv_init returning an error code: GASNET_ERR_RESOURCE (Problem with requested resource)\n  at /opt/GASNet-2023.9.0/ibv-conduit/gasnet_core_sndrcv.c:3311\n  reason: Unable to allocate pinned memory for AM recv buffers\n";
    assert_eq!(first(gasnet).2, "ibv_reg_mr");
    // Mercury NA OFI: a provider's registration limit reached after thousands of regions (ENOSPC is a size, not a bad buffer)
    let mercury = "# NA -- Error -- /src/mercury/src/na/na_ofi.c:9521\n # na_ofi_mem_register(): fi_mr_regattr(mr_iov[0].iov_base=0x7f2a1c000000, mr_iov[0].iov_len=1048576, iov_count=1, access=0x300, iface=0, requested_key=0) failed, rc: -28 (No space left on device), mr_reg_count=16384\n# HG -- Error -- /src/mercury/src/mercury_bulk.c:435\n # hg_bulk_create(): NA_Mem_register() failed (NA_NOMEM)\n";
    let (cat, n, call) = first(mercury);
    assert_eq!((n, call.as_str()), (1, "fi_mr_regattr"), "{cat}");
    // UCC's ucp_mem_map line after UCX's own driver line is the same failure, with UCX's errno
    let ucx = "[1700000000.000001] [cn07:4321:0]          ib_md.c:309  UCX  ERROR ibv_reg_mr(address=0x7f00a0000000, length=1073741824, access=0xf) failed: Cannot allocate memory\n[1700000000.000002] [cn07:4321:0] tl_ucp_context.c:480  TL_UCP ERROR ucp_mem_map failed with error code: -4\n";
    let (c, v) = one(ucx);
    assert_eq!(
        (c, v["findings"][0]["count"].as_u64(), v["findings"][0]["errno"].as_str()),
        (1, Some(1), Some("ENOMEM"))
    );
}

/// Logs composed from the format strings of branch v8's vocabulary (GPU, collective and storage
/// stacks: NCCL GIN, UCX, DeepEP, NVSHMEM IBGDA, DAOS, TensorPipe, PSM3), as `mrshim analyze --json`
/// sees them: each is recognised, counted once, and its first finding is the cause the line names.
#[test]
fn gpu_collective_storage_families_from_the_sources() {
    // (category, count, errno) of the first finding
    let first = |text: &str| {
        let f = first_finding(text);
        let s = |k: &str| f[k].as_str().map(String::from);
        (s("category").unwrap(), f["count"].as_u64().unwrap(), s("errno"))
    };
    // NCCL's GPU-initiated networking without peer memory or dmabuf
    let gin = "gpu1:2345:2345 [0] NCCL INFO NCCL version 2.28.3+cuda12.9\ngpu1:2345:2400 [0] transport/net_ib/gin.cc:42 NCCL WARN Unable to use GIN: Peermem is not supported, and device 3 does not support DMA-BUF.\n";
    assert_eq!(first(gin).0, "gpu-peer-memory");
    // UCX told to require GPUDirect RDMA on a node without a peer-memory module
    let ucx = "[1733000000.1] [gpu-a:2412:0]           ib_md.c:1449 UCX  ERROR mlx5_0: Couldn't enable GPUDirect RDMA. Please make sure nv_peer_mem, amdgpu plugin, or Intel Xe driver is installed correctly, or dmabuf is supported.\n";
    assert_eq!(first(ucx).0, "gpu-peer-memory");
    // DeepEP's symmetric buffer on a GPU without GPUDirect RDMA for VMM memory
    let deepep = "Traceback (most recent call last):\n  File \"test_internode.py\", line 240, in <module>\nRuntimeError: Assertion exception (/opt/DeepEP/csrc/kernels/backend/symmetric.hpp:59): flag and \"GPUDirect RDMA with CUDA VMM is not supported on this device\"\n";
    assert_eq!(first(deepep).0, "gpu-peer-memory");
    // NVSHMEM IBGDA over its common IB registration: one failure, the kernel's errno
    let ibgda = "/src/modules/transport/common/transport_ib_common.cpp:129: non-zero status: 7 mem registration failed. Reason: Cannot allocate memory\n/src/modules/transport/ibgda/ibgda.cpp:755: non-zero status: 7 Unable to register memory handle.\n";
    let (_, n, e) = first(ibgda);
    assert_eq!((n, e.as_deref()), (1, Some("ENOMEM")));
    // DAOS: Mercury's NA line, its bulk layer and CaRT's two lines are one failure
    let daos = "# na_ofi_mem_register(): fi_mr_regattr(mr_iov[0].iov_base=0x7f2a1c000000, mr_iov[0].iov_len=1048576, iov_count=1, access=0xf00, iface=0, requested_key=0) failed, rc: -12 (Cannot allocate memory), mr_reg_count=4096\n# hg_bulk_create(): NA_Mem_register() failed (NA_NOMEM)\n12/07-01:02:03.45 node1 DAOS[12345/12350/0] hg   ERR  src/cart/crt_hg.c:2056 crt_hg_bulk_create() HG_Bulk_create failed, hg_ret: 6 (HG_NOMEM)\n12/07-01:02:03.45 node1 DAOS[12345/12350/0] rpc  ERR  src/cart/crt_bulk.c:143 crt_bulk_create() crt_hg_bulk_create() failed, rc: DER_NOMEM(-1009): 'Out of memory'\n";
    let (_, n, e) = first(daos);
    assert_eq!((n, e.as_deref()), (1, Some("ENOMEM")));
    // DAOS's CaRT line alone: the DER_ name is the errno
    let der = "12/07-01:02:03.45 node1 DAOS[12345/12350/0] rpc  ERR  src/cart/crt_bulk.c:143 crt_bulk_create() crt_hg_bulk_create() failed, rc: DER_NOMEM(-1009): 'Out of memory'\n";
    assert_eq!(first(der).2.as_deref(), Some("ENOMEM"));
    // TensorPipe's reg_mr line (and only that line of ibv.h) is a registration
    let tp = "RuntimeError: In operator() at /opt/pytorch/third_party/tensorpipe/tensorpipe/common/ibv.h:193 \"\": Cannot allocate memory\n";
    let f = first_finding(tp);
    assert_eq!((f["calls"][0].as_str(), f["errno"].as_str()), (Some("ibv_reg_mr"), Some("ENOMEM")));
    let (c, _) = one("RuntimeError: In operator() at tensorpipe/common/ibv.h:137 \"\": Cannot allocate memory\n");
    assert_ne!(c, 1, "another verbs call of ibv.h is no failed registration");
    // PSM3 refusing a rendezvous registration longer than the device's max_fmr_size
    let psm3 = "node7.rank3.xhpl: Req MR 0x7f3a40000000:0x7f3a7fffffff (len 0x40000000) access 0x80000007 too large: max_fmr_size(0x20000000)\n";
    assert_eq!(first(psm3).0, "resource-exhaustion");
}

/// `mrshim analyze` as a user runs it (text output) on composed logs whose output decides nothing:
/// the causes are ranked by the likelihood table (read-only memory registered for writing among the
/// first three), the first finding says that nothing in the output decides it and lists the checks
/// that would; decisive evidence in the same kind of log has no such statement.
#[test]
fn undecided_failures_are_ranked_said_so_with_the_checks() {
    let text = |log: &str| {
        let dir = std::env::temp_dir().join(format!("mrshim-undecided-{}-{}", std::process::id(), log.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("job.log");
        std::fs::write(&p, log).unwrap();
        let out = Command::new(mrshim_test_support::mrshim_bin()).arg("analyze").arg(&p).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // the text is wrapped to the terminal's width: compare words
        let words = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        (out.status.code(), words)
    };
    // a NULL MR without errno (perftest's own lines)
    let null_mr = "Couldn't allocate MR\nfailed to create mr\nFailed to create MR\n";
    let (_, v) = one(null_mr);
    assert_eq!(cats(&v)[..3], ["memlock-limit", "resource-exhaustion", "access-flags"], "{v}");
    let d = v["findings"][0]["decide"].as_array().expect("checks that would decide");
    // the first three, then the row's cause not listed at all (an invalid range)
    assert_eq!(d.len(), 4, "{v}");
    let (code, out) = text(null_mr);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("Nothing in this output decides it"), "{out}");
    assert!(out.contains("checks that would decide:"), "{out}");
    for check in ["ulimit -l", "max_mr", "/proc/<pid>/maps"] {
        assert!(out.contains(check), "{check}: {out}");
    }
    // EFAULT on host memory (UCX names the memory type): an unmapped range or a read-only mapping
    let efault = "[1764700000.100000] [n1:4242:0]           ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f00a0000000, length=1048576, access=0xf) failed: Bad address\n\
                  [1764700000.100001] [n1:4242:0]          ucp_mm.c:70   UCX  ERROR failed to register address 0x7f00a0000000 mem_type bit 0x1 length 1048576 on md[4]=mlx5_0: Input/output error (md reg_mem_types 0x1)\n";
    let (_, v) = one(efault);
    let c = cats(&v);
    assert_eq!(c[0], "address-invalid", "{c:?}");
    assert!(c.iter().take(3).any(|x| x == "access-flags"), "{c:?}");
    let (_, out) = text(efault);
    assert!(out.contains("Nothing in this output decides it"), "{out}");
    // a memlock value decides: no such statement
    let (_, v) = one(&format!("$ ulimit -l\n64\n{null_mr}"));
    assert_eq!(cats(&v)[0], "memlock-limit", "{v}");
    assert!(v["findings"][0].get("decide").is_none(), "{v}");
    let (_, out) = text(&format!("$ ulimit -l\n64\n{null_mr}"));
    assert!(!out.contains("Nothing in this output decides it"), "{out}");
}
