//! Evidence over priors: what decides a cause, and what only ranks one.
use crate::errno::{EFAULT, EINVAL, ENOMEM, EOPNOTSUPP};
use crate::Analysis;

fn run(files: &[(&str, &str)]) -> Analysis {
    let inputs = files
        .iter()
        .map(|(n, t)| {
            let r: Box<dyn std::io::BufRead> = Box::new(std::io::Cursor::new(t.as_bytes().to_vec()));
            (n.to_string(), r)
        })
        .collect();
    crate::analyze_readers(inputs)
}

fn cats(a: &Analysis) -> Vec<&'static str> {
    a.findings.iter().map(|f| f.category).collect()
}

fn rec(seq: u64, call: &str, result: &str, extra: &str) -> String {
    format!(
        r#"{{"v":1,"kind":"reg","seq":{seq},"time_ns":{},"host":"n1","pid":77,"tid":77,"rank":0,"call":"{call}","result":"{result}","duration_ns":2100,"device":"mlx5_0","pd":"0x55d0a000","addr":"0x7f0000200000","length":2097152,"registered_bytes":0{extra}}}"#,
        1_764_700_000_000_000_000u64 + seq
    )
}

const HOST_RO_EINVAL: &str = r#","access":1048591,"relaxed_ordering":true,"mem_kind":"host-anon","mem_fully_mapped":true,"errno":22,"errno_name":"EINVAL""#;
const HOST_RO_EFAULT: &str = r#","access":1048591,"relaxed_ordering":true,"mem_kind":"host-anon","mem_fully_mapped":true,"errno":14,"errno_name":"EFAULT""#;

/// A strategy that rescued decides its cause; a range seen fully mapped is no invalid address.
#[test]
fn a_rescue_decides_and_a_mapped_range_rules_out_address_invalid() {
    for fail in [HOST_RO_EINVAL, HOST_RO_EFAULT] {
        let mut lines = Vec::new();
        for i in 0..4 {
            let s = 1 + i * 2;
            lines.push(rec(s, "ibv_reg_mr", "error", fail));
            lines.push(rec(
                s + 1,
                "ibv_reg_mr",
                "ok",
                r#","access":1048591,"mem_kind":"host-anon","attempt":1,"parent_seq":1,"strategy":"drop-relaxed-ordering","used_access":15"#,
            ));
        }
        let a = run(&[("n1.jsonl", &(lines.join("\n") + "\n"))]);
        let c = cats(&a);
        assert_eq!(c[0], "relaxed-ordering", "{c:?} {:?}", a.findings[0].explanation);
        assert!(
            a.findings[0].explanation.contains("drop-relaxed-ordering rescued 4 call(s)"),
            "{}",
            a.findings[0].explanation
        );
        assert_eq!(a.findings[0].basis, "evidence");
        assert!(!c.contains(&"address-invalid"), "{c:?}");
        assert!(a.ruled_out.iter().any(|r| r.category == "address-invalid" && r.reason.contains("mem_fully_mapped")));
    }
}

/// EFAULT on host memory whose mapping nobody observed is not asserted to be an unmapped range.
#[test]
fn efault_on_host_memory_is_not_asserted_unmapped() {
    let fail = r#","access":15,"mem_kind":"host-anon","errno":14,"errno_name":"EFAULT""#;
    let a = run(&[("n1.jsonl", &(rec(1, "ibv_reg_mr", "error", fail) + "\n"))]);
    let f = a.findings.iter().find(|f| f.category == "address-invalid").expect("still a candidate");
    assert_eq!(f.basis, "prior", "{}", f.explanation);
    assert!(!f.explanation.contains("the range is not fully mapped"), "{}", f.explanation);
    assert!(f.explanation.contains("nothing here shows the mapping"), "{}", f.explanation);
}

/// UCX's own output: relaxed ordering (bit 20 of access=0x10000f) on every failing host
/// registration puts relaxed-ordering among the first two, with the knobs that decide it and
/// what UCX's default means on other CPUs.
#[test]
fn ucx_access_mask_puts_relaxed_ordering_first_two() {
    for err in ["Invalid argument", "Bad address"] {
        let log = format!(
            "[1764700000.100000] [n1:4242:0]           ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f00a0000000, length=1048576, access=0x10000f) failed: {err}\n\
             [1764700000.100001] [n1:4242:0]          ucp_mm.c:70   UCX  ERROR failed to register address 0x7f00a0000000 mem_type bit 0x1 length 1048576 on md[4]=mlx5_0: Input/output error (md reg_mem_types 0x1)\n\
             [1764700000.200000] [n1:4242:0]           ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f00b0000000, length=65536, access=0x10000f) failed: {err}\n"
        );
        let a = run(&[("ucx.log", &log)]);
        let c = cats(&a);
        let i = c.iter().position(|c| *c == "relaxed-ordering").unwrap_or(99);
        assert!(i < 2, "{err}: {c:?}");
        let f = &a.findings[i];
        assert!(
            f.check.contains("UCX_IB_PCI_RELAXED_ORDERING=off") && f.check.contains("NCCL_IB_PCI_RELAXED_ORDERING=0"),
            "{}",
            f.check
        );
        assert!(f.explanation.contains("IBV_ACCESS_RELAXED_ORDERING (bit 20"), "{}", f.explanation);
        assert!(
            f.explanation.contains("AMD Naples/Rome/Milan") && f.explanation.contains("mixed fleet"),
            "{}",
            f.explanation
        );
        assert_eq!(a.failed(), 2);
    }
}

/// An engine that says it will request relaxed ordering; its failures name no memory kind. The
/// library's name (it registers GPU memory too) is no evidence of GPU memory.
#[test]
fn engine_announcing_relaxed_ordering_and_a_library_name_is_no_gpu_evidence() {
    let log = "I1206 06:00:00.100000 4242 rdma_transport.cpp:88] [RDMA TENT] Relaxed ordering is supported; IBV_ACCESS_RELAXED_ORDERING will be enabled for optimal GPUDirect RDMA performance.\n\
               I1206 06:00:00.100001 4242 transfer_engine.cpp:120] Mooncake Transfer Engine started\n\
               E1206 06:00:01.000000 4242 rdma_context.cpp:201] Failed to register memory 0x7f2a40000000: Invalid argument [22]\n\
               E1206 06:00:01.000100 4242 rdma_context.cpp:201] Failed to register memory 0x7f2a48000000: Invalid argument [22]\n";
    let a = run(&[("engine.log", log)]);
    let c = cats(&a);
    let i = c.iter().position(|c| *c == "relaxed-ordering").unwrap_or(99);
    assert!(i < 2, "{c:?}");
    assert!(a.findings[i].explanation.contains("said it would request"), "{}", a.findings[i].explanation);
    if let Some(g) = a.findings.iter().find(|f| f.category == "gpu-peer-memory") {
        assert_eq!(g.basis, "prior", "a library name is not evidence: {}", g.explanation);
    }
}

/// The kernel's answers on rxe/siw: ODP is its own cause, dmabuf EOPNOTSUPP is dmabuf-unsupported,
/// neither is an invalid address (implicit ODP registers address 0 on purpose, dmabuf has an offset).
#[test]
fn odp_and_dmabuf_answers_of_a_provider_without_them() {
    let odp = rec(
        1,
        "ibv_reg_mr",
        "error",
        r#","access":65,"mem_kind":"host-anon","mem_fully_mapped":true,"errno":22,"errno_name":"EINVAL""#,
    );
    let implicit = r#"{"v":1,"kind":"reg","seq":2,"time_ns":2,"host":"n1","pid":77,"tid":77,"call":"ibv_reg_mr","result":"error","duration_ns":1,"addr":"0x0","length":18446744073709551615,"access":65,"mem_kind":"unmapped","registered_bytes":0,"errno":22,"errno_name":"EINVAL"}"#;
    let a = run(&[("odp.jsonl", &format!("{odp}\n{implicit}\n"))]);
    assert_eq!(cats(&a)[0], "odp-unsupported", "{:?}", cats(&a));
    assert!(a.findings[0].check.contains("ibv_devinfo -v"), "{}", a.findings[0].check);
    let dmabuf = r#"{"v":1,"kind":"reg","seq":3,"time_ns":3,"host":"n1","pid":78,"tid":78,"call":"ibv_reg_dmabuf_mr","result":"error","duration_ns":1,"addr":"0x0","length":4096,"access":1,"dmabuf_fd":5,"dmabuf_offset":0,"mem_kind":"device","registered_bytes":0,"errno":95,"errno_name":"EOPNOTSUPP"}"#;
    let a = run(&[("dmabuf.jsonl", &format!("{dmabuf}\n"))]);
    assert_eq!(cats(&a)[0], "dmabuf-unsupported", "{:?}", cats(&a));
    assert!(!cats(&a).contains(&"address-invalid"), "{:?}", cats(&a));
}

/// The registration table's whole log on rxe (one process, many causes): the ODP finding counts
/// and shows the two ON_DEMAND failures only, not the other EINVALs of the same call and memory
/// kind; the one dmabuf EOPNOTSUPP keeps its own finding.
#[test]
fn odp_failures_among_other_einvals_are_counted_alone() {
    let mut lines = Vec::new();
    for (i, access) in [65u32, 65, 0x8000, 0x8000, 0x8000, 0x8000, 0x8000, 2, 2].iter().enumerate() {
        let extra = format!(
            r#","access":{access},"mem_kind":"host-anon","mem_fully_mapped":true,"errno":22,"errno_name":"EINVAL""#
        );
        lines.push(rec(i as u64 + 1, "ibv_reg_mr", "error", &extra));
    }
    lines.push(r#"{"v":1,"kind":"reg","seq":20,"time_ns":20,"host":"n1","pid":77,"tid":77,"call":"ibv_reg_dmabuf_mr","result":"error","duration_ns":1,"addr":"0x0","length":4096,"access":1,"dmabuf_fd":5,"dmabuf_offset":0,"mem_kind":"device","registered_bytes":0,"errno":95,"errno_name":"EOPNOTSUPP"}"#.to_string());
    let a = run(&[("regmr.jsonl", &(lines.join("\n") + "\n"))]);
    let odp = a.findings.iter().find(|f| f.category == "odp-unsupported").expect("an ODP finding");
    assert_eq!(odp.count, 2, "{odp:?}");
    assert!(odp.evidence.iter().all(|e| e.text.contains("access=0x41")), "{:?}", odp.evidence);
    assert!(cats(&a).contains(&"dmabuf-unsupported"), "{:?}", cats(&a));
}

/// One process's stderr: each failure as a MRSHIM WARN line, NCCL's WARN and the application's
/// own line without a pid: 2 failures, not 6, and the memory kind of the WARN line is used.
#[test]
fn a_jobs_stderr_counts_each_failure_once() {
    let mut err = String::new();
    for addr in ["0x7f0000200000", "0x7f0000400000"] {
        err.push_str(&format!("n1:4242:4243 [0] MRSHIM WARN ibv_reg_mr_iova2(addr={addr}, len=2097152, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova={addr}, mem=host-anon) failed: EINVAL (22)\n"));
        err.push_str("n1:4242:4243 [0] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument\n");
        err.push_str("RuntimeError: NCCL error: unhandled system error, Last error: Call to ibv_reg_mr_iova2 failed with error Invalid argument\n");
    }
    let a = run(&[("job.err", &err)]);
    assert_eq!(a.failed(), 2, "{:?}", a.col.groups);
    assert_eq!(cats(&a)[0], "relaxed-ordering", "{:?}", cats(&a));
    assert!(!cats(&a).contains(&"address-invalid") || cats(&a)[0] != "address-invalid");
}

/// A failure after more than 1 MiB of `\r` progress output on the same physical line is found.
#[test]
fn a_failure_after_a_long_progress_bar_is_found() {
    let mut log = String::new();
    let mut i = 0;
    while log.len() < (3 << 20) / 2 {
        log.push_str(&format!("{:3}%|#####     | {i}/100000 [00:01<00:00, 9000.00it/s]\r", i % 100));
        i += 1;
    }
    log.push_str("ibv_reg_mr failed: Cannot allocate memory\n");
    let a = run(&[("train.log", &log)]);
    assert_eq!(a.failed(), 1);
    let e = &a.findings[0].evidence[0];
    assert_eq!((e.line, e.text.as_str()), (1, "ibv_reg_mr failed: Cannot allocate memory"));
}

/// Past the timeline's cap, more failures are counted, not kept, and cost nothing more each.
#[test]
fn the_timeline_cap_with_only_failures() {
    let mut c = crate::collect::Collector::default();
    for i in 0..50_000u64 {
        let r = crate::event::RegEv {
            host: Some("h".into()),
            pid: Some(1),
            call: "ibv_reg_mr".into(),
            errno: Some(12),
            time_ns: Some(i),
            ..Default::default()
        };
        c.add(crate::event::Event::Reg(r), 0, i + 1, "x");
    }
    assert_eq!(c.points.len(), 20_000);
    assert_eq!(c.points_dropped, 30_000);
    assert!(c.points.iter().all(|p| p.failed()));
}

/// Two processes writing to one terminal cut lines into each other: one garbled failure among
/// many whole UCX lines that all ask for relaxed ordering does not push relaxed ordering out of
/// first place; whole lines without it would.
#[test]
fn an_interleaved_line_does_not_hide_relaxed_ordering() {
    let ucx = |i: u64| {
        format!(
            "[1796550907.{i:06}] [vm:7602:0]          ib_log.c:254  UCX  ERROR ibv_reg_mr(address=0x7fc2acfd9000, length=19034112, access=0x10000f) failed: Bad address\n"
        )
    };
    let mut text: String = (0..200).map(ucx).collect();
    // a line whose end is another process's pool error: the status of that line
    text.push_str("[1796550947.421285] [vm:7603:0]          ib_log.c:254  UCX  ERROR ibv_reg_mr(address=0x7fea0aa00000, length=20971520, access=0x10000f) failed: Input/output error\n");
    let a = run(&[("job.out", &text)]);
    assert_eq!(cats(&a).first(), Some(&"relaxed-ordering"), "{:?}", cats(&a));
    // as many failures with another errno as with a refusal's are no strays
    let other: String = (0..200)
        .map(|i| format!("[1796550947.{i:06}] [vm:7603:0]          ib_log.c:254  UCX  ERROR ibv_reg_mr(address=0x7fc2acfd9000, length=19034112, access=0x10000f) failed: Input/output error\n"))
        .collect();
    let a = run(&[("job.out", &format!("{text}{other}"))]);
    assert_ne!(cats(&a).first(), Some(&"relaxed-ordering"), "{:?}", cats(&a));
}

/// A GPU pin refused by the kernel (gdrcopy's gdr_pin_buffer, nvidia_p2p_get_pages) leaves the driver and
/// kernel pairing as the second thing to check (gdrcopy's known issues), unless the GPU is a GeForce.
#[test]
fn a_refused_gpu_pin_also_points_at_the_driver_and_kernel() {
    let pin = "libfabric:1:1::core:core:cuda_gdrcopy_dev_register():320<warn> gdr_pin_buffer failed! error: Invalid argument ptr: 0xdc12000000 len: 146800640\n";
    let c = cats(&run(&[("job.log", pin)]));
    assert_eq!(&c[..2], ["gpu-peer-memory", "version-mismatch"], "{c:?}");
    let geforce = format!("GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-1)\n{pin}");
    let a = run(&[("job.log", &geforce)]);
    assert!(
        !a.findings.iter().any(|f| f.explanation.contains("driver's flavour")),
        "{:?}",
        a.findings.iter().map(|f| &f.explanation).collect::<Vec<_>>()
    );
}

/// A transfer library without GPU memory support (NIXL over a UCX without CUDA) is named as such:
/// GPU memory first, and the first fix is the library's GPU support, not a peer-memory module.
#[test]
fn a_stack_without_gpu_support_is_named_with_its_fix() {
    let log = "W1201 10:00:00.000001 4242 ucx_utils.cpp:713] ucx context 0x5555: 8 NVIDIA GPU(s) were detected, but UCX CUDA support was not found! GPU memory is not supported.\n\
E1201 10:00:01.000001 4242 ucx_utils.cpp:661] ucx context 0x5555: VRAM memory is detected as host by UCX. UCX is likely not configured with CUDA/ROCm support. VRAM registration cannot proceed.\n\
E1201 10:00:01.000002 4242 nixl_agent.cpp:470] registerMem: registration failed for the specified or all potential backends\n";
    let a = run(&[("nixl.log", log)]);
    assert_eq!(cats(&a).first(), Some(&"gpu-peer-memory"), "{:?}", cats(&a));
    let f = &a.findings[0];
    assert_eq!(f.basis, "evidence");
    assert!(f.fixes[0].contains("UCX_TLS") && f.fixes[0].contains("ucx_info"), "{:?}", f.fixes);
    assert!(f.explanation.contains("no GPU memory support"), "{}", f.explanation);
    // the agent's summary line is a layer of the same failure, also when the VRAM message was wrapped
    assert_eq!(f.count, 1, "{:?}", f);
    let wrapped = "E ucx_utils.cpp:592  VRAM memory is detected as host by UCX.\n                     UCX is likely not configured with CUDA support.\n                     VRAM registration cannot proceed.\nE nixl_agent.cpp:470 registerMem: registration failed for the specified or all potential backends\n";
    let w = run(&[("wrapped.log", wrapped)]);
    assert_eq!(w.findings[0].count, 1, "{:?}", w.findings[0]);
    // without the NIXL lines the first fix is the peer-memory module
    let b = run(&[(
        "plain.log",
        "E1201 10:00:00 1 rdma_context.cpp:198] Failed to register memory 0x7f0000000000: Bad address [14] (VRAM)\n",
    )]);
    assert!(!b.findings[0].fixes[0].contains("UCX_TLS"), "{:?}", b.findings[0].fixes);
}

/// The likelihood table: every row is a distribution over known categories, each cause once.
#[test]
fn likelihood_rows_are_distributions() {
    use super::likelihood::TABLE;
    for (_, _, _, row) in TABLE {
        let total: f64 = row.iter().map(|x| x.1).sum();
        assert!((total - 1.0).abs() < 1e-9, "{row:?} sums to {total}");
        for (i, (cat, p)) in row.iter().enumerate() {
            assert!(super::CATEGORIES.contains(cat), "{cat}");
            assert!(*p > 0.0);
            assert!(!row[..i].iter().any(|x| x.0 == *cat), "{cat} twice in {row:?}");
        }
        assert!(row.windows(2).all(|w| w[0].1 >= w[1].1), "most likely first: {row:?}");
    }
}

/// docs/analyze.md shows the table the code uses, number for number.
#[test]
fn the_docs_show_the_likelihood_table_in_use() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/analyze.md")).unwrap();
    let table = super::likelihood::markdown();
    assert!(docs.contains(&table), "docs/analyze.md must hold this table:\n{table}");
}

/// What the kernel's pinning gives decides the rows: EFAULT on host memory is an unmapped range or a
/// read-only mapping registered for writing; no errno keeps read-only memory among the first three;
/// ENOMEM is the memlock check's errno; fs-dax's EOPNOTSUPP is memory the kernel will not pin.
#[test]
fn likelihood_rows_follow_the_kernels_failure_modes() {
    use super::likelihood::{lookup, Mem};
    let top = |e, m, d, i| lookup(e, m, d, i).iter().take(3).map(|x| x.0).collect::<Vec<_>>();
    for m in [Mem::Host, Mem::Unknown] {
        assert!(top(Some(EFAULT), m, false, false).contains(&"access-flags"), "{m:?}");
        assert!(top(None, m, false, false).contains(&"access-flags"), "{m:?}");
    }
    assert_eq!(top(Some(EFAULT), Mem::Host, false, false), ["address-invalid", "access-flags", "version-mismatch"]);
    assert_eq!(top(Some(ENOMEM), Mem::Host, false, false)[0], "memlock-limit");
    assert_eq!(top(Some(EOPNOTSUPP), Mem::Host, false, false)[0], "address-invalid");
    assert_eq!(top(Some(EOPNOTSUPP), Mem::Host, true, false)[0], "dmabuf-unsupported");
    assert_eq!(top(Some(EINVAL), Mem::Host, false, true)[0], "iova-alignment");
    assert_eq!(top(Some(EFAULT), Mem::Device, false, false)[0], "gpu-peer-memory");
    // EINVAL with nothing naming the memory: a device limit is in reach
    let einval = top(Some(EINVAL), Mem::Unknown, false, false);
    assert!(einval.contains(&"resource-exhaustion"), "{einval:?}");
}

/// Evidence that decides one cause keeps the differential: a rule can be wrong about a report
/// nobody here read, so the failure's next most likely causes stay listed, as "prior".
#[test]
fn decided_evidence_still_lists_three_causes() {
    let log = "NVSHMEM: neither nv_peer_mem, or nvidia_peermem detected. Skipping transport.\n\
               Call to ibv_reg_mr failed with error Bad address\n";
    let a = run(&[("job.log", log)]);
    let c = cats(&a);
    assert_eq!(c[0], "gpu-peer-memory", "{c:?}");
    assert!(c.len() >= 3, "{c:?}");
    assert!(a.findings[1..3].iter().all(|f| f.basis == "prior"), "{c:?}");
}

/// A NULL MR without errno (perftest's own line): nothing decides it, so the ranking is the table's
/// (memlock, resources, read-only memory with write access), said so, with the checks that decide.
#[test]
fn no_errno_says_nothing_decides_and_gives_the_checks() {
    let a = run(&[("perftest.log", "Couldn't allocate MR\n")]);
    assert_eq!(cats(&a)[..3], ["memlock-limit", "resource-exhaustion", "access-flags"], "{:?}", cats(&a));
    let f = &a.findings[0];
    assert_eq!(f.basis, "prior");
    assert!(
        f.explanation.starts_with("Best guess") && f.explanation.contains(super::NOTHING_DECIDES),
        "{}",
        f.explanation
    );
    assert!(f.explanation.contains("no errno"), "{}", f.explanation);
    // the three listed first, then the row's causes not listed at all (an invalid range)
    assert_eq!(f.decide.len(), 4, "{:?}", f.decide);
    assert!(f.decide[3].starts_with("address-invalid (less likely, not listed): "), "{:?}", f.decide);
    assert!(f.decide[0].starts_with("memlock-limit: ") && f.decide[0].contains("ulimit -l"), "{:?}", f.decide);
    assert!(f.decide[1].contains("max_mr"), "{:?}", f.decide);
    assert!(f.decide[2].contains("/proc/<pid>/maps"), "{:?}", f.decide);
    assert!(a.findings[1..].iter().all(|f| f.decide.is_empty()));
}

/// EFAULT on host memory nobody saw mapped: an unmapped range or a read-only one, both listed, neither
/// asserted; the statement names what was observed.
#[test]
fn host_efault_lists_read_only_memory_and_says_nothing_decides() {
    let fail = r#","access":15,"mem_kind":"host-anon","errno":14,"errno_name":"EFAULT""#;
    let a = run(&[("n1.jsonl", &(rec(1, "ibv_reg_mr", "error", fail) + "\n"))]);
    assert_eq!(cats(&a)[..2], ["address-invalid", "access-flags"], "{:?}", cats(&a));
    let e = &a.findings[0].explanation;
    assert!(
        e.contains(super::NOTHING_DECIDES) && e.contains("ibv_reg_mr, EFAULT (Bad address), host-anon memory"),
        "{e}"
    );
}

/// Decisive evidence keeps its cause first and no "nothing decides" statement: a memlock value, a rescue.
#[test]
fn decisive_evidence_has_no_undecided_statement() {
    let a = run(&[("job.log", "$ ulimit -l\n65536\nibv_reg_mr failed: Cannot allocate memory\n")]);
    assert_eq!(cats(&a)[0], "memlock-limit");
    assert_eq!(a.findings[0].basis, "evidence");
    assert!(a.findings.iter().all(|f| f.decide.is_empty() && !f.explanation.contains(super::NOTHING_DECIDES)));
    let lines = [
        rec(1, "ibv_reg_mr", "error", HOST_RO_EFAULT),
        rec(
            2,
            "ibv_reg_mr",
            "ok",
            r#","access":1048591,"mem_kind":"host-anon","attempt":1,"parent_seq":1,"strategy":"drop-relaxed-ordering","used_access":15"#,
        ),
    ];
    let a = run(&[("n1.jsonl", &(lines.join("\n") + "\n"))]);
    assert_eq!(cats(&a)[0], "relaxed-ordering");
    assert!(a.findings[0].decide.is_empty());
}

/// A message that names its own remedy (LNet's map_on_demand / use_fastreg_gaps, Ceph's send pool
/// over max_mr_size) leads with its cause and that remedy, by the vocabulary's sample line alone.
#[test]
fn a_message_that_names_its_fix_leads_with_it() {
    let v = crate::parse::vocab::table();
    for (id, cat, issue, knob) in [
        ("lustre.o2iblnd.map_on_demand", "version-mismatch", "lustre-o2iblnd-map-on-demand", "map_on_demand=256"),
        ("lustre.o2iblnd.fastreg_gaps", "version-mismatch", "lustre-o2iblnd-fastreg-gaps", "use_fastreg_gaps=1"),
        ("ceph.rdma.out_of_max_mr_size", "resource-exhaustion", "ceph-rdma-max-mr-size", "ms_async_rdma_send_buffers"),
    ] {
        let e = v.entries.iter().find(|e| e.id == id).expect(id);
        let a = run(&[("log", &format!("{}\n", e.sample))]);
        let f = a.findings.first().unwrap_or_else(|| panic!("{id}: no finding"));
        assert_eq!(f.category, cat, "{id}: {:?}", cats(&a));
        assert_eq!(f.known_issue.as_ref().map(|k| k.id.as_str()), Some(issue), "{id}");
        assert!(f.fixes.first().is_some_and(|x| x.contains(knob)), "{id}: {:?}", f.fixes);
    }
}

/// A dmabuf registration pins nothing against RLIMIT_MEMLOCK (the kernel's umem_dmabuf.c): its ENOMEM
/// is never put on `ulimit -l`, even when the limit is unknown; the kernel-internal ENOTSUPP (524,
/// "Unknown error 524" in glibc's words) from a dmabuf mapping reads as "not supported".
#[test]
fn dmabuf_enomem_is_no_memlock_and_errno_524_is_not_supported() {
    let nomem = "host1:7:7 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Cannot allocate memory\n";
    let c = cats(&run(&[("job.log", nomem)]));
    assert!(!c.contains(&"memlock-limit"), "{c:?}");
    assert!(c[..2].contains(&"resource-exhaustion"), "{c:?}");
    let va =
        "host1:7:7 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n";
    assert_eq!(cats(&run(&[("job.log", va)])).first(), Some(&"memlock-limit"));
    let e524 = "[1796550947.000001] [h:9:0] ib_md.c:310 UCX ERROR ibv_reg_dmabuf_mr(address=0x7f0000000000, length=4194304, access=0xf) failed: Unknown error 524\n";
    let c = cats(&run(&[("job.log", e524)]));
    assert_eq!(&c[..2], ["dmabuf-unsupported", "version-mismatch"], "{c:?}");
}

/// ibv_reg_dmabuf_mr uses no peer-memory client — the kernel imports the exporter's buffer
/// (ib_umem_dmabuf_get) — so its failures of GPU memory rank the dmabuf path's own causes (uverbs'
/// offset/iova check, the exporter's and provider's resources, dmabuf support, versions) and never
/// gpu-peer-memory; the same memory registered by address still ranks peer memory first.
#[test]
fn dmabuf_failures_are_not_peer_memory() {
    let einval = "[1796550947.000001] [h:9:0] ib_md.c:301 UCX ERROR ibv_reg_dmabuf_mr(address=0x7f0000000000, length=4194304, access=0x10000f) failed: Invalid argument\n\
                  [1796550947.000002] [h:9:0] ucp_mm.c:81 UCX ERROR failed to register address 0x7f0000000000 (cuda) length 4194304 dmabuf_fd 12 on md[1]=mlx5_0: Input/output error (md supports: host|cuda)\n";
    let c = cats(&run(&[("job.log", einval)]));
    assert_eq!(c.first(), Some(&"iova-alignment"), "{c:?}");
    assert!(!c.contains(&"gpu-peer-memory"), "{c:?}");
    let nomem = "host1:7:7 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Cannot allocate memory\n";
    let c = cats(&run(&[("job.log", nomem)]));
    assert_eq!(c.first(), Some(&"resource-exhaustion"), "{c:?}");
    assert!(!c.contains(&"gpu-peer-memory"), "{c:?}");
    let efault =
        "host1:7:7 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Bad address\n";
    let c = cats(&run(&[("job.log", efault)]));
    assert_eq!(c.first(), Some(&"dmabuf-unsupported"), "{c:?}");
    assert!(!c.contains(&"gpu-peer-memory"), "{c:?}");
    let va = "[1796550947.000001] [h:9:0] ib_md.c:301 UCX ERROR ibv_reg_mr(address=0x7f0000000000, length=4194304, access=0x10000f) failed: Bad address\n\
              [1796550947.000002] [h:9:0] ucp_mm.c:81 UCX ERROR failed to register address 0x7f0000000000 (cuda) length 4194304 on md[1]=mlx5_0: Input/output error (md supports: host|cuda)\n";
    assert_eq!(cats(&run(&[("job.log", va)])).first(), Some(&"gpu-peer-memory"));
}

/// UCX's mlx5 memory domain failing to set up its UMR queue pair or the indirect key over a
/// registration (ib_mlx5dv_md.c) is a failed registration whose memory was never refused: the stack
/// against the NIC's driver/firmware/port, ranked version-mismatch first — with or without UCX's prefix.
#[test]
fn ucx_umr_and_indirect_key_failures_are_version_first() {
    for line in [
        "[1754890927.298391] [decode-0:270  :0]    ib_mlx5dv_md.c:1100 UCX  ERROR mlx5_7: ibv_modify_qp(UMR QP 0x9b5e) failed to modify to RTR: No such device\n",
        "ibv_modify_qp(UMR QP) failed to modify to RTR: No such device\n",
        "[1700000000.000000] [n1:9:0] ib_mlx5dv_md.c:1165 UCX  ERROR mlx5_0: mlx5dv_create_qp() failed to create UMR QP: Operation not supported\n",
        "[1651871131.827338] [swx-ucx02:9673 :0]    ib_mlx5dv_md.c:457  UCX  ERROR   mlx5_bond_0: LRU push returned Unsupported operation\n",
    ] {
        let a = run(&[("job.log", line)]);
        assert!(!a.findings.is_empty(), "not recognised: {line}");
        assert_eq!(cats(&a).first(), Some(&"version-mismatch"), "{line}: {:?}", cats(&a));
    }
}

/// Versions the input names decide a known issue with a version range (data/known-issues.json): a
/// kernel without DMA-BUF memory regions (< 5.12) puts dmabuf-unsupported first with the issue; a
/// kernel that has them rules the issue out (not reported, and said); with no kernel named, an issue
/// that requires a version is not claimed.
#[test]
fn known_issue_versions_confirm_or_rule_out() {
    let fail =
        "host1:7:7 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Invalid argument\n";
    let old = format!("[    0.000000] Linux version 5.4.0-150-generic (buildd@lcy02-amd64-100)\n{fail}");
    let a = run(&[("job.log", &old)]);
    assert_eq!(cats(&a).first(), Some(&"dmabuf-unsupported"), "{:?}", cats(&a));
    assert_eq!(
        a.findings[0].known_issue.as_ref().map(|k| k.id.as_str()),
        Some("dmabuf-mr-kernel-before-5.12"),
        "{:?}",
        a.findings[0]
    );
    let new = format!("$ uname -r\n6.8.0-45-generic\n{fail}");
    let a = run(&[("job.log", &new)]);
    assert!(a.findings.iter().all(|f| f.known_issue.is_none()), "{:?}", a.findings);
    assert!(
        a.findings.iter().any(|f| f.explanation.contains("Not known issue dmabuf-mr-kernel-before-5.12")),
        "{:?}",
        a.findings
    );
    let a = run(&[("job.log", fail)]);
    assert!(a.findings.iter().all(|f| f.known_issue.is_none()), "{:?}", a.findings);
    // a named version in an issue's range puts its category first or second even against evidence
    // (EFA installer before 1.29.1 with NCCL's OFI plugin on CUDA memory)
    let efa = "EFA installer version: 1.28.0\n\
               ip-10-0-0-1:7:7 [4] register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 4. RC: -22, Error: Invalid argument\n";
    let a = run(&[("job.log", efa)]);
    let c = cats(&a);
    assert!(c.iter().take(2).any(|x| *x == "version-mismatch"), "{c:?}");
    let fixed = efa.replace("1.28.0", "1.30.0");
    let a = run(&[("job.log", &fixed)]);
    assert!(
        a.findings.iter().all(|f| f.known_issue.as_ref().is_none_or(|k| k.id != "efa-cuda-sync-memops")),
        "{:?}",
        a.findings
    );
}

/// A registration refused with "Required key not available" (ENOKEY; libfabric's FI_ENOKEY from its MR
/// map or a provider's key check) never reached the memory: the caller's memory-key handling against the
/// provider, version-mismatch first, and no peer-memory claim for GPU memory — from a shim record and
/// from a line with fi_strerror's text for -FI_ENOKEY.
#[test]
fn refused_memory_key_is_no_memory_cause() {
    let enokey = r#","access":15,"mem_kind":"device","errno":126,"errno_name":"ENOKEY""#;
    let a = run(&[("n1.jsonl", &format!("{}\n", rec(1, "fi_mr_regattr", "error", enokey)))]);
    let c = cats(&a);
    assert_eq!(c.first(), Some(&"version-mismatch"), "{c:?}");
    assert_eq!(a.findings[0].basis, "evidence");
    // peer memory may stay a prior of the likelihood table, never evidence
    assert!(a.findings.iter().all(|f| f.category != "gpu-peer-memory" || f.basis == "prior"), "{c:?}");
    // libfabric's own text for -FI_ENOKEY (fi_strerror), on a GPU buffer the line names
    let line = "fi_mr_regattr failed for GPU buffer 0x7f2a00000000 len 65536: Required key not available\n";
    let a = run(&[("job.log", line)]);
    let c = cats(&a);
    assert_eq!(c.first(), Some(&"version-mismatch"), "{c:?}");
    assert!(a.findings.iter().all(|f| f.category != "gpu-peer-memory" || f.basis == "prior"), "{c:?}");
}

/// Open MPI's help texts print the errno on their `Error:` line a few lines below the headline
/// (help-mtl-ofi.txt): it is the headline's errno; a block closed before any `Error:` line leaves the
/// failure without one, and a block's own lines are no second failure.
#[test]
fn a_help_texts_error_line_is_its_headlines_errno() {
    let block = |err: &str| {
        format!(
            "--------------------------------------------------------------------------\nOpen MPI failed to register your buffer.\nThis error is fatal, your job will abort\n\n  Buffer Type: rocm\n  Buffer Address: 0x154beaa00000\n  Buffer Length: 131072\n{err}--------------------------------------------------------------------------\n"
        )
    };
    for (err, want) in [
        ("  Error: Invalid argument (-22)\n", Some("EINVAL")),
        ("  Error: Cannot allocate memory (-12)\n", Some("ENOMEM")),
        ("", None),
    ] {
        let a = run(&[("job.log", &block(err))]);
        let f = &a.findings[0];
        assert_eq!(f.errno.as_deref(), want, "{err:?}: {:?}", cats(&a));
        assert_eq!(f.count, 1, "{err:?}");
    }
}

/// UCX's cuda_copy memory domain page-locks only what it called host memory: CUDA refusing it is
/// UCX's memory-type detection (or a double lock), ranked version-mismatch first with UCX's own switch
/// — in every form UCX printed it (v1.7's `is failed. ret:`, v1.10's `() failed:`, v1.17's cuMem form).
#[test]
fn cuda_copy_page_lock_refused_is_ucxs_memory_type_detection() {
    for line in [
        "[1570000000.100000] [n1:4242:0]   cuda_copy_md.c:86   UCX  ERROR cudaHostRegister(address, length, 0x01) is failed. ret:invalid argument",
        "[1650000000.100000] [n1:4242:0]   cuda_copy_md.c:157  UCX  ERROR cudaHostRegister(address, length, cudaHostRegisterPortable)() failed: invalid argument",
        "[1733000000.100000] [n1:4242:0]   cuda_copy_md.c:169  UCX  ERROR cuMemHostRegister(address, length, CU_MEMHOSTREGISTER_PORTABLE) failed: invalid argument",
    ] {
        let a = run(&[("job.log", &format!("{line}\n"))]);
        assert_eq!(cats(&a).first(), Some(&"version-mismatch"), "{line}: {:?}", cats(&a));
        assert!(a.findings[0].fixes[0].contains("UCX_MEMTYPE_CACHE=n"), "{:?}", a.findings[0].fixes);
    }
}

/// Open MPI's own CUDA page-locking (common_cuda's non-fatal help text) has no memory-type detection
/// behind it: CUDA refusing it is not UCX's row, and UCX's switch is not its fix.
#[test]
fn ompi_cuda_page_lock_refused_is_not_ucxs_memory_type_detection() {
    let text = "The call to cuMemHostRegister(0x7f2a40000000, 4194304, 0) failed.\n  Host:  node1\n  cuMemHostRegister return value:  712\n  Registration cache:  smcuda\n";
    let a = run(&[("job.log", text)]);
    assert!(!a.findings.is_empty(), "not recognised");
    for f in &a.findings {
        assert!(f.fixes.iter().all(|x| !x.contains("UCX_MEMTYPE_CACHE")), "{:?}", a.findings);
    }
}

fn known_ids(a: &Analysis) -> Vec<&str> {
    a.findings.iter().filter_map(|f| f.known_issue.as_ref().map(|k| k.id.as_str())).collect()
}

/// The first finding's category and known issue.
fn first_known(a: &Analysis) -> (Option<&'static str>, Option<&str>) {
    let f = a.findings.first();
    (f.map(|f| f.category), f.and_then(|f| f.known_issue.as_ref().map(|k| k.id.as_str())))
}

/// Known issues read from the stacks' own fixes (data/known-issues.json), each named from the lines
/// its stack prints: a version the input names inside the range puts the issue first, one at or past
/// the fix (or before the regression) rules it out, and an issue whose lines are only a failure a
/// version bug shares with other causes counts only when an affected version is named.
#[test]
fn known_issues_from_the_stacks_fixes() {
    // libfabric EFA before 2.6.0: a refusal before ibv_reg_mr printed with errno 0
    let efa = "libfabric:31337:1733560000::efa:mr:efa_mr_reg_impl():978<warn> Unable to register MR of 4194304 bytes: Success, flags 0, ibv pd: 0x55d0c0a0b0c0, total mr reg size 0, mr reg count 0\n";
    let id = Some("efa-mr-reg-errno-success");
    let a = run(&[("job.log", &format!("libfabric: 2.4.0\n{efa}"))]);
    assert_eq!(first_known(&a), (Some("version-mismatch"), id), "{:?}", a.findings);
    let a = run(&[("job.log", efa)]);
    assert_eq!(first_known(&a).1, id, "no version named: the message alone names it");
    let a = run(&[("job.log", &format!("libfabric: 2.6.0\n{efa}"))]);
    assert!(!known_ids(&a).contains(&"efa-mr-reg-errno-success"), "{:?}", a.findings);

    // NIXL 0.10.0 to 1.0.x: a later GPU of a multi-GPU process registered without its device current
    let nixl = |v: &str| {
        format!(
            "I1207 10:00:00.000000 4242 nixl_log.cpp:80] NIXL version: {v}\n\
             W1207 10:00:01.000000 4242 libfabric_backend.cpp:713] CUDA address workaround failed for device 1, disabling workaround for multi-GPU support\n\
             E1207 10:00:01.100000 4242 libfabric_rail.cpp:1385] fi_mr_key returned FI_KEY_NOTAVAIL on rail 0\n\
             E1207 10:00:01.100100 4242 libfabric_rail_manager.cpp:728] Failed to register memory on rail 0\n"
        )
    };
    let a = run(&[("job.log", &nixl("0.10.1"))]);
    assert_eq!(first_known(&a), (Some("version-mismatch"), Some("nixl-libfabric-multi-gpu-mr")), "{:?}", a.findings);
    for v in ["1.1.0", "0.9.0"] {
        let a = run(&[("job.log", &nixl(v))]);
        assert!(!known_ids(&a).contains(&"nixl-libfabric-multi-gpu-mr"), "NIXL {v}: {:?}", a.findings);
    }

    // UCX 1.13 to 1.15: a merged cache region with unmapped pages; EFAULT on host memory is also an
    // ordinary bad address, so only a named UCX version in range (UCP's INFO banner) claims it
    let ucx = |banner: &str, mem: &str| {
        format!(
            "{banner}[1733560001.000001] [node1:4242:0]          ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f1c2a000000, length=1052672, access=0xf) failed: Bad address\n\
             [1733560001.000002] [node1:4242:0]         ucp_mm.c:62   UCX  ERROR failed to register address 0x7f1c2a000000 ({mem}) length 1052672 on md[4]=mlx5_0: Input/output error (md supports: host)\n"
        )
    };
    let banner = |v: &str| {
        format!("[1733560000.000001] [node1:4242:0]     ucp_context.c:2190 UCX  INFO  Version {v} (loaded from /opt/ucx/lib/libucp.so.0)\n")
    };
    let id = "ucx-rcache-merge-unmapped";
    let a = run(&[("job.log", &ucx(&banner("1.15.0"), "host"))]);
    assert_eq!(first_known(&a), (Some("version-mismatch"), Some(id)), "{:?}", a.findings);
    for (b, mem) in [(banner("1.16.0"), "host"), (String::new(), "host"), (banner("1.15.0"), "cuda")] {
        let a = run(&[("job.log", &ucx(&b, mem))]);
        assert!(!known_ids(&a).contains(&id), "{b} {mem}: {:?}", a.findings);
    }

    // Mooncake shrinking an MR to max_mr_size while advertising the whole buffer
    let mc = "W1207 10:00:00.000000 4242 rdma_context.cpp:229] The buffer length exceeds device max_mr_size, shrink it to 2147483648\n";
    let a = run(&[("job.log", mc)]);
    assert_eq!(
        first_known(&a),
        (Some("resource-exhaustion"), Some("mooncake-mr-shrunk-to-max-mr-size")),
        "{:?}",
        a.findings
    );

    // Mooncake exporting GPU memory as DMA-BUF from a thread without a CUDA context; another CUDA
    // error on the same line is another cause
    let ctx = |err: &str| {
        format!(
            "E1207 10:00:00.000000 4242 rdma_context.cpp:262] Failed to retrieve dmabuf for 139872000000000 cuda error={err}\n\
             E1207 10:00:00.000100 4242 transfer_engine.cpp:400] Failed to register memory 0x7f3900000000: Failed to register memory region\n"
        )
    };
    let a = run(&[("job.log", &ctx("invalid device context"))]);
    assert_eq!(first_known(&a), (Some("gpu-peer-memory"), Some("mooncake-dmabuf-no-cuda-context")), "{:?}", a.findings);
    let a = run(&[("job.log", &ctx("invalid argument"))]);
    assert!(!known_ids(&a).contains(&"mooncake-dmabuf-no-cuda-context"), "{:?}", a.findings);
}

/// rdma-core's providers each gained ibv_reg_dmabuf_mr in a release of their own (irdma v45, bnxt_re
/// v48, mana v57, efa v38): a named older rdma-core with that provider's device and a DMA-BUF failure
/// is the provider's missing verb; the same failure with a later rdma-core, or with no version named,
/// is not claimed. NIXL's warning of a UCX older than 1.19 explains a GPU registration failure.
#[test]
fn known_issues_of_versions_without_a_feature() {
    let dmabuf = |pkg: &str, dev: &str| {
        format!(
            "{pkg}[1733560001.000001] [node1:4242:0]          ib_md.c:293  UCX  ERROR ibv_reg_dmabuf_mr(address=0x7f1c2a000000, length=1048576, access=0xf) failed: Operation not supported\n\
             [1733560001.000002] [node1:4242:0]         ucp_mm.c:62   UCX  ERROR failed to register address 0x7f1c2a000000 (cuda) length 1048576 dmabuf_fd 42 on md[3]={dev}: Unsupported operation (md supports: host, cuda)\n"
        )
    };
    let id = "rdma-core-irdma-dmabuf-before-45";
    let a = run(&[("job.log", &dmabuf("ii  rdma-core        44.0-2     amd64\n", "irdma0"))]);
    assert_eq!(first_known(&a), (Some("dmabuf-unsupported"), Some(id)), "{:?}", a.findings);
    for (pkg, dev) in [
        ("ii  rdma-core        45.0-1     amd64\n", "irdma0"),
        ("", "irdma0"),
        ("ii  rdma-core        44.0-2     amd64\n", "mlx5_0"),
    ] {
        let a = run(&[("job.log", &dmabuf(pkg, dev))]);
        assert!(!known_ids(&a).contains(&id), "{pkg} {dev}: {:?}", a.findings);
    }
    let a = run(&[("job.log", &dmabuf("ii  rdma-core        47.0-1     amd64\n", "bnxt_re0"))]);
    assert_eq!(first_known(&a).1, Some("rdma-core-bnxt-re-dmabuf-before-48"), "{:?}", a.findings);

    let nixl = |mem: &str| {
        format!(
            "W1207 10:00:00.000000 4242 ucx_utils.cpp:424] UCX version is 1.18.0 which is less than 1.19, CUDA support is limited, including the lack of support for multi-GPU within a single process.\n\
             [1733560001.000001] [node1:4242:0]          ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f1c2a000000, length=1048576, access=0xf) failed: Bad address\n\
             [1733560001.000002] [node1:4242:0]         ucp_mm.c:62   UCX  ERROR failed to register address 0x7f1c2a000000 ({mem}) length 1048576 on md[3]=mlx5_0: Input/output error (md supports: host, cuda)\n"
        )
    };
    let a = run(&[("job.log", &nixl("cuda"))]);
    let c = cats(&a);
    assert!(c.iter().take(2).any(|x| *x == "version-mismatch"), "{c:?}");
    assert!(known_ids(&a).contains(&"nixl-ucx-before-1.19-multi-gpu"), "{:?}", a.findings);
    let a = run(&[("job.log", &nixl("host"))]);
    assert!(!known_ids(&a).contains(&"nixl-ucx-before-1.19-multi-gpu"), "{:?}", a.findings);
}

/// EFA's driver names the access bits it refused: access-flags first, not the EOPNOTSUPP row's
/// fs-dax guess.
#[test]
fn a_driver_refusing_the_access_bits_is_access_flags() {
    let log = "[ 100.31] infiniband efa_0: Unsupported access flags[0x7], supported[0x5]\n\
               libfabric:4242:1701000000::efa:mr:efa_mr_reg_impl():1034<warn> Unable to register MR: Operation not supported\n";
    let a = run(&[("job.log", log)]);
    assert_eq!(cats(&a)[0], "access-flags", "{:?}", cats(&a));
    assert_eq!(a.findings[0].basis, "evidence");
}

/// Device and provider limits that print no limit (session 13): CXI's cxil_map ENOSPC is the Slingshot
/// driver's "no address context / IOVA left" (shs-cxi-driver cass_atu.c) and its MR buffer IDs run out
/// at 64k (cxip_dom.c); uGNI's GNI_RC_ERROR_RESOURCE is the NIC's descriptors. Each is resource-exhaustion
/// on evidence, and the fix names the knob of that stack.
#[test]
fn provider_limits_are_resources_with_their_knobs() {
    let pre = "libfabric:4242:1700000000::cxi:mr:cxip_do_map():121<warn> x1000c0s0b0n0: ";
    for (name, log, knob) in [
        (
            "cxil_map ENOSPC",
            format!("{pre}cxil_map lni: 17 base: 0x0x7f3a5c200000 len: 2097152 map_flags: 0xD failure: -28, No space left on device\n"),
            "Slingshot CXI",
        ),
        (
            "CXI MR buffer IDs",
            "libfabric:4242:1700000000::cxi:domain:cxip_domain_ctrl_id_alloc():331<warn> x1000c0s0b0n0: Failed to allocate MR buffer ID: 65536\n\
             libfabric:4242:1700000000::cxi:mr:cxip_mr_init():1684<warn> x1000c0s0b0n0: Failed to allocate MR buffer ID: -28\n"
                .to_string(),
            "64k per domain",
        ),
        (
            "uGNI resource",
            "libfabric:8123:1600000000:gni:mr:__gnix_generic_register():650<info> failed to register memory with uGNI, ret=GNI_RC_ERROR_RESOURCE\n"
                .to_string(),
            "MPICH_GNI_NDREG_ENTRIES",
        ),
    ] {
        let a = run(&[("job.log", &log)]);
        let f = a.findings.first().unwrap_or_else(|| panic!("{name}: no finding"));
        assert_eq!(f.category, "resource-exhaustion", "{name}: {:?}", cats(&a));
        assert_eq!(f.basis, "evidence", "{name}: {}", f.explanation);
        assert_eq!(f.count, 1, "{name}: two lines of one failure count once");
        assert!(f.fixes.first().is_some_and(|x| x.contains(knob)), "{name}: {:?}", f.fixes);
    }
}

/// cxil_map's EFAULT and EINVAL are the range and the page-size hints in the Slingshot driver, not its
/// resources: they stay with their rows, and resources are not made evidence by the provider's name.
#[test]
fn cxi_efault_is_no_resource_evidence() {
    let log = "libfabric:4242:1700000000::cxi:mr:cxip_map_nocache():513<warn> x1000c0s0b0n0: cxil_map failed: -14:Bad address\n";
    let a = run(&[("job.log", log)]);
    let c = cats(&a);
    assert_ne!(c.first(), Some(&"resource-exhaustion"), "{c:?}");
    if let Some(f) = a.findings.iter().find(|f| f.category == "resource-exhaustion") {
        assert_eq!(f.basis, "prior", "{}", f.explanation);
    }
}

/// UCX's failures over ENOMEM with memlock unlimited: resources, and the fix names UCX's cache bounds.
#[test]
fn ucx_resources_name_the_rcache_knobs() {
    let log = "[1764700000.1] [n1:4242:0]           ib_md.c:293  UCX  ERROR ibv_reg_mr(address=0x7f00a0000000, length=1048576, access=0xf) failed: Cannot allocate memory\n\
               [1764700000.2] [n1:4242:0] mlx5_core 0000:01:00.0: mlx5_cmd_check:794:(pid 4242): CREATE_MKEY(0x200) op_mod(0x0) failed, status limits exceeded(0x8), syndrome (0x5fa2c4)\n";
    let a = run(&[("job.log", log)]);
    let f = a.findings.iter().find(|f| f.category == "resource-exhaustion").expect("resources");
    assert!(f.fixes.iter().any(|x| x.contains("UCX_RCACHE_MAX_REGIONS")), "{:?}", f.fixes);
    assert!(!f.fixes.iter().any(|x| x.contains("Slingshot")), "{:?}", f.fixes);
}

/// With CXI_FORK_SAFE set, libcxi answers EFAULT when madvise(MADV_DONTFORK) fails — past
/// vm.max_map_count as registered ranges split the mappings, or for a range not mapped (shs-libcxi
/// cxil_map → cxil_dontfork_range): resources become a hypothesis with the map-count check, a reading,
/// never evidence; without the setting a CXI EFAULT does not name them.
#[test]
fn cxi_fork_safe_efault_reads_as_a_possible_map_count_limit() {
    let fail = "libfabric:4242:1700000000::cxi:mr:cxip_do_map():121<warn> x1000c0s0b0n0: cxil_map lni: 17 base: 0x0x7f3a5c200000 len: 2097152 map_flags: 0xD failure: -14, Bad address\n";
    let a = run(&[("job.log", &format!("export CXI_FORK_SAFE=1\n{fail}"))]);
    let f = a.findings.iter().find(|f| f.category == "resource-exhaustion").unwrap_or_else(|| {
        panic!("listed with CXI_FORK_SAFE: {:?} {:?}", cats(&a), a.findings.first().map(|f| &f.explanation))
    });
    assert_eq!(f.basis, "prior", "{}", f.explanation);
    assert!(f.explanation.contains("vm.max_map_count"), "{}", f.explanation);
    let a = run(&[("job.log", fail)]);
    assert!(
        !a.findings.iter().any(|f| f.category == "resource-exhaustion" && f.explanation.contains("CXI_FORK_SAFE")),
        "{:?}",
        cats(&a)
    );
}

/// NVSHMEM registers its symmetric heap (GPU memory) first at start-up: a NULL MR from its IB
/// transports keeps GPU peer memory first; the 2.7-era common code's own words name GPU memory; the
/// IBDEVX dummy buffer is host memory and is not called GPU memory.
#[test]
fn nvshmem_registration_failures_keep_gpu_peer_memory_first() {
    // ibrc.cpp (NVSHMEMI_NULL_ERROR_JMP: "%s:%d: NULL value " + the message), no errno
    let a = run(&[("pe0.err", "src/modules/transport/ibrc/ibrc.cpp:405: NULL value mem registration failed \n")]);
    assert_eq!(cats(&a).first(), Some(&"gpu-peer-memory"), "{:?}", cats(&a));
    assert_eq!(a.findings[0].count, 1);
    // transport_ib_common.cpp (2.7-2.x): ibv_reg_mr failed, no dmabuf fallback, peer memory named,
    // then the NULL MR: one failure of GPU memory
    let p = "/build/nvshmem/src/modules/transport/common/transport_ib_common.cpp";
    let log = format!(
        "{p}:nvshmemt_ib_common_reg_mem_handle:25: ibv_reg_mr failed.\n\
         {p}:nvshmemt_ib_common_reg_mem_handle:62: Unable to fall back to ibv_reg_dmabuf_mr. Not supported by the current configuration.\n\
         {p}:nvshmemt_ib_common_reg_mem_handle:63: In order to register memory, please load nv_peer_mem or nvidia_peermem.\n\
         {p}:nvshmemt_ib_common_reg_mem_handle:66: Unable to fall back to ibv_reg_dmabuf_mr.\n\
         {p}:82: NULL value mem registration failed \n"
    );
    let a = run(&[("pe0.err", &log)]);
    assert_eq!(cats(&a).first(), Some(&"gpu-peer-memory"), "{:?}", cats(&a));
    assert_eq!(a.findings[0].count, 1, "one failure through its layers");
    // the IBDEVX dummy word is malloc'd host memory: not GPU memory
    let a = run(&[(
        "pe0.err",
        "/opt/nvshmem/src/modules/transport/ibdevx/ibdevx.cpp:847: NULL value mem registration failed \n",
    )]);
    assert_ne!(cats(&a).first(), Some(&"gpu-peer-memory"), "{:?}", cats(&a));
}

/// Open MPI 1.5.5-1.6's openib [mem-reg-fail] help text: the errno is in its block (`Errno says:`,
/// or `Function: <strerror>()` in the first, shifted form); on an mlx4 HCA ENOMEM/EAGAIN reads as
/// the MTT table first — unless a memlock limit or the locked-memory warning is shown.
#[test]
fn openib_registration_failures_on_mlx4_read_as_the_mtt() {
    let block = |fields: &str| {
        format!(
            "--------------------------------------------------------------------------\n\
             The OpenFabrics (openib) BTL failed to register memory in the driver.\n\
             Please check /var/log/messages or dmesg for driver specific failure\n\
             reason.\n\
             The failure occured here:\n\
             \n\
             {fields}\n\
             \n\
             You may need to consult with your system administrator to get this\n\
             problem fixed.\n\
             --------------------------------------------------------------------------\n"
        )
    };
    let fixed = block("  Local host:    n17\n  Device:        mlx4_0\n  Function:      openib_reg_mr()\n  Errno says:    Cannot allocate memory (errno=12)");
    let shifted = block("  Local host:    mlx4_0\n  Device:        openib_reg_mr\n  Function:      Resource temporarily unavailable()\n  Errno says:    ");
    for (name, log, errno) in [("fixed", &fixed, ENOMEM), ("shifted", &shifted, crate::errno::EAGAIN)] {
        let a = run(&[("job.err", log)]);
        assert_eq!(cats(&a).first(), Some(&"resource-exhaustion"), "{name}: {:?}", cats(&a));
        assert_eq!(a.findings[0].count, 1, "{name}");
        assert!(cats(&a).contains(&"memlock-limit"), "{name}: memlock stays listed: {:?}", cats(&a));
        let want = crate::errno::name(errno);
        assert!(
            a.findings[0].errnos.iter().any(|e| e.contains(want.as_str()))
                || a.findings[0].errno.as_deref().is_some_and(|e| e.contains(want.as_str())),
            "{name}: errno {want} read from the block: {:?} {:?}",
            a.findings[0].errno,
            a.findings[0].errnos
        );
    }
    // a memlock limit shown keeps memlock first
    let limited = format!("{fixed}  Memlock limit: 65536\n");
    let a = run(&[("job.err", &limited)]);
    assert_eq!(cats(&a).first(), Some(&"memlock-limit"), "{:?}", cats(&a));
    // without an mlx4 device the ENOMEM row's order stands (memlock first)
    let other = block("  Local host:    n17\n  Device:        qib0\n  Function:      openib_reg_mr()\n  Errno says:    Cannot allocate memory (errno=12)");
    let a = run(&[("job.err", &other)]);
    assert_eq!(cats(&a).first(), Some(&"memlock-limit"), "{:?}", cats(&a));
}

/// libcxi's `cxil_map: write error` (no errno): the Slingshot driver's refusals, never memlock (the
/// driver does no RLIMIT_MEMLOCK accounting); a markdown heading that quotes it is still read.
#[test]
fn cxil_map_write_error_is_the_drivers_refusal_never_memlock() {
    for log in ["cxil_map: write error\n", "#### `\"cxil_map: write error\"` when sending from a buffer\n"] {
        let a = run(&[("job.err", log)]);
        let c = cats(&a);
        assert_eq!(
            c.iter().take(3).copied().collect::<Vec<_>>(),
            ["resource-exhaustion", "access-flags", "version-mismatch"],
            "{log}"
        );
        assert!(!c.contains(&"memlock-limit"), "{c:?}");
    }
}

/// mlx5's UMR completing in error and an ODP page fault that could not update the mkey's translation
/// are the driver or firmware (version-mismatch), with ODP itself second — not the job's resources.
#[test]
fn mlx5_umr_and_odp_translation_failures_are_the_driver() {
    let a = run(&[(
        "dmesg",
        "infiniband mlx5_0: mlx5r_umr_post_send_wait:326:(pid 4242): reg umr failed (6)\n\
         infiniband mlx5_0: pagefault_real_mr:661:(pid 4242): Failed to update mkey page tables\n",
    )]);
    assert_eq!(cats(&a)[..2], ["version-mismatch", "odp-unsupported"], "{:?}", cats(&a));
    assert_eq!(a.findings[0].basis, "evidence");
    // a UMR failure without ODP: the driver first, no ODP hypothesis
    let a = run(&[("dmesg", "infiniband mlx5_0: mlx5r_umr_post_send_wait:326:(pid 4242): reg umr failed (4)\n")]);
    assert_eq!(cats(&a)[0], "version-mismatch", "{:?}", cats(&a));
    assert!(!cats(&a).contains(&"odp-unsupported"), "{:?}", cats(&a));
}

/// A kernel oops or WARNING whose call trace runs through the registration path is a kernel bug
/// there: version-mismatch first, with the frame as its evidence, beside the library's failure
/// line; the same trace after an allocation failure is the memory running out, not a bug.
#[test]
fn a_crash_in_the_registration_path_is_a_regression() {
    let trace = "[ 1203.441122] ------------[ cut here ]------------\n\
[ 1203.441130] WARNING: CPU: 12 PID: 5521 at drivers/infiniband/hw/mlx5/mr.c:1042 mlx5_ib_reg_user_mr+0x3c1/0x5a0 [mlx5_ib]\n\
[ 1203.441200] Call Trace:\n\
[ 1203.441210]  ib_uverbs_reg_mr+0x15a/0x2b0 [ib_uverbs]\n";
    let app = "n1:5521:5521 [0] transport/net_ib.cc:462 NCCL WARN Call to ibv_reg_mr failed with error Bad address\n";
    for files in [vec![("dmesg.txt", trace)], vec![("dmesg.txt", trace), ("job.log", app)]] {
        let a = run(&files);
        assert_eq!(cats(&a)[0], "version-mismatch", "{:?}", cats(&a));
        assert!(a.findings[0].fixes[0].contains("newest stable kernel"), "{:?}", a.findings[0].fixes);
        // the frame is shown once, with its line
        let ev = &a.findings[0].evidence;
        assert!(ev.iter().all(|e| e.line > 0), "{ev:?}");
        assert_eq!(ev.iter().filter(|e| e.text.contains("mlx5_ib_reg_user_mr+")).count(), 1, "{ev:?}");
        assert!(
            a.findings[0].explanation.contains("crashed or warned inside memory registration"),
            "{}",
            a.findings[0].explanation
        );
    }
    let alloc = trace
        .replace("------------[ cut here ]------------", "ib_write_bw: page allocation failure: order:10")
        .replace("WARNING: CPU: 12 PID: 5521 at drivers/infiniband/hw/mlx5/mr.c:1042 ", "");
    let a = run(&[("dmesg.txt", &alloc), ("job.log", app)]);
    assert!(a.findings.iter().all(|f| !f.explanation.contains("crashed or warned")), "{:?}", cats(&a));
}

/// A kernel fix as a known issue with its version range: the 5.10.y stable kernels whose
/// ib_umem_get dereferences the software drivers' NULL dma_device (5.10.6 to 5.10.23) — keyed on
/// the oops' frames, confirmed only by a kernel release inside the range (the oops' own header).
#[test]
fn a_stable_kernel_missing_a_backport_is_a_known_issue() {
    let oops = |release: &str| {
        format!(
            "[  52.1] BUG: kernel NULL pointer dereference, address: 0000000000000268\n\
             [  52.1] CPU: 0 PID: 310 Comm: ibv_rc_pingpong Not tainted {release} #1\n\
             [  52.1] RIP: 0010:ib_umem_get+0x1f5/0x3c0 [ib_uverbs]\n\
             [  52.1] Call Trace:\n\
             [  52.1]  rxe_mr_init_user+0x5b/0x2d0 [rdma_rxe]\n\
             [  52.1]  rxe_reg_user_mr+0x6a/0xa0 [rdma_rxe]\n"
        )
    };
    let id = "linux-5.10.y-umem-null-dma-device";
    let a = run(&[("dmesg.txt", &oops("5.10.19"))]);
    assert_eq!(first_known(&a), (Some("version-mismatch"), Some(id)), "{:?}", a.findings);
    for release in ["5.10.24", "5.10.4", "5.15.0-91-generic"] {
        let a = run(&[("dmesg.txt", &oops(release))]);
        assert!(!known_ids(&a).contains(&id), "{release}: {:?}", a.findings);
        // still a crash in the registration path
        assert_eq!(cats(&a)[0], "version-mismatch", "{release}");
    }
}

/// A stack's warning with no failed registration is a warning-only diagnosis: the cause it points
/// at first, labelled as no failure (count 0, no call), the warning line as evidence, the fix.
#[test]
fn a_warning_without_a_failure_is_a_warning_only_finding() {
    // libibverbs' check_memlock_limit (rdma-core libibverbs/init.c)
    let a = run(&[(
        "job.err",
        "libibverbs: Warning: RLIMIT_MEMLOCK is 32768 bytes.\n    This will severely limit memory registrations.\n",
    )]);
    assert_eq!(a.failed(), 0);
    let f = &a.findings[0];
    assert_eq!((f.category, f.warning, f.count, f.call.as_deref()), ("memlock-limit", true, 0, None));
    assert!(f.explanation.starts_with("No failed registration seen; the stack warned that"), "{}", f.explanation);
    assert!(f.evidence.iter().any(|e| e.text.contains("RLIMIT_MEMLOCK is 32768")), "{:?}", f.evidence);
    assert!(f.fixes.iter().any(|x| x.contains("memlock")), "{:?}", f.fixes);
    assert!(a.findings.iter().all(|f| f.warning));
    // UCX's memlock hint after a failed CQ creation (uct_ib_memlock_limit_msg): no registration failed
    let a = run(&[(
        "ucx.log",
        "[1668000000.1] [n2:5:0]        ib_iface.c:1328 UCX  ERROR mlx5_0: ibv_create_cq() failed: Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n",
    )]);
    assert_eq!((a.failed(), a.findings[0].category, a.findings[0].warning), (0, "memlock-limit", true));
    // Open MPI's [reg mem limit low] without its table: the translation table first, by evidence
    let a = run(&[(
        "mpi.out",
        "WARNING: It appears that your OpenFabrics subsystem is configured to only\nallow registering part of your physical memory.  This can cause MPI jobs to\nrun with erratic performance, hang, and/or crash.\n",
    )]);
    let f = &a.findings[0];
    assert_eq!((f.category, f.basis, f.warning), ("resource-exhaustion", "evidence", true), "{:?}", cats(&a));
    // a warning whose limit the reporter then raised and the job worked: memlock, still a warning
    let a = run(&[(
        "r.txt",
        "libibverbs: Warning: RLIMIT_MEMLOCK is 65536 bytes.\nAfter I set ulimit -l unlimited it works.\n",
    )]);
    assert_eq!((a.findings[0].category, a.findings[0].warning), ("memlock-limit", true));
    // GPUDirect RDMA in use makes no GPU-memory cause of a memlock warning
    let a = run(&[(
        "nccl.log",
        "gpu-a:2412:2430 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0> and a long tail\nlibibverbs: Warning: RLIMIT_MEMLOCK is 32768 bytes.\ngpu-a:2412:2430 [0] NCCL INFO GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n",
    )]);
    assert_eq!(a.findings[0].category, "memlock-limit");
    assert!(!cats(&a).contains(&"gpu-peer-memory"), "{:?}", cats(&a));
}

/// When registrations failed the warnings stay evidence of the failure diagnosis (no warning-only
/// findings), and a warning-less input without failures has no finding at all.
#[test]
fn warnings_next_to_failures_are_evidence_not_findings_of_their_own() {
    let a = run(&[(
        "job.err",
        "libibverbs: Warning: RLIMIT_MEMLOCK is 32768 bytes.\nibv_reg_mr failed: Cannot allocate memory\n",
    )]);
    assert_eq!(a.failed(), 1);
    let f = &a.findings[0];
    assert_eq!((f.category, f.warning, f.count), ("memlock-limit", false, 1));
    assert!(a.findings.iter().all(|f| !f.warning));
    let a = run(&[("ok.log", "ulimit -l 64\nNCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n")]);
    assert!(a.findings.is_empty(), "{:?}", cats(&a));
}

/// A size threshold near the memlock limit the input shows is that limit, not the device's
/// resources; far from it (or with no limit shown) it stays a resource limit.
#[test]
fn a_size_threshold_near_the_memlock_limit_is_memlock() {
    let expl = |a: &Analysis, cat: &str| {
        a.findings.iter().find(|f| f.category == cat).map(|f| f.explanation.clone()).unwrap_or_default()
    };
    let near = run(&[(
        "r.txt",
        "ulimit -l 8192\nibv_reg_mr failed: Resource temporarily unavailable\nRegistering 4 MB works, but 16 MB fails.\n",
    )]);
    assert!(expl(&near, "memlock-limit").contains("at about the locked-memory limit"), "{:?}", cats(&near));
    assert!(!expl(&near, "resource-exhaustion").contains("smaller registrations work"), "{:?}", cats(&near));
    let far = run(&[(
        "r.txt",
        "ulimit -l 64\nibv_reg_mr failed: Resource temporarily unavailable\nRegistering 1 GB works, but 8 GB fails.\n",
    )]);
    assert!(expl(&far, "resource-exhaustion").contains("smaller registrations work"), "{:?}", cats(&far));
    assert!(!expl(&far, "memlock-limit").contains("at about the locked-memory limit"));
    let none = run(&[(
        "r.txt",
        "ibv_reg_mr failed: Resource temporarily unavailable\nRegistering 4 MB works, but 16 MB fails.\n",
    )]);
    assert!(expl(&none, "resource-exhaustion").contains("smaller registrations work"), "{:?}", cats(&none));
}

/// GASNet-EX's physmem probe report (ibv-conduit gasnet_core.c gasnetc_physmem_report) when the nodes'
/// pinnable memory differs: no registration failed, so it is a warning-only finding, and its line is
/// the evidence.
#[test]
fn gasnet_varying_pinnable_memory_is_a_warning_only_finding() {
    let a = run(&[(
        "job.err",
        "WARNING: Probe of max pinnable memory completed in 41.2s.\n\
         WARNING:   Probe of max pinnable memory found varying results\n\
         WARNING:   Physical memory   MEAN/MIN/MAX = 251 GB / 251 GB / 251 GB\n",
    )]);
    assert_eq!(a.failed(), 0);
    let f = a.findings.first().unwrap_or_else(|| panic!("no finding: {:?}", cats(&a)));
    assert!(f.warning && f.count == 0, "{:?}", cats(&a));
    assert!(f.explanation.contains("some nodes able to pin"), "{}", f.explanation);
    assert!(f.evidence.iter().any(|e| e.text.contains("found varying results")), "{:?}", f.evidence);
}

/// The HPC runtimes' own settings are named in the fixes of the failures their lines report.
#[test]
fn hpc_runtime_failures_name_their_own_knobs() {
    for (name, log, knob) in [
        (
            "Chapel comm=ofi heap registration",
            "internal error: 0: /opt/chapel/runtime/src/comm/ofi/comm-ofi.c:2812: OFI error: fi_mr_reg(ofi_domain, memTab[i].addr, memTab[i].size, bufAcc, 0, 0, 0, &ofiMrTab[i], NULL): Cannot allocate memory\n",
            "CHPL_RT_MAX_HEAP_SIZE",
        ),
        (
            "GASNet firehose pinning",
            "*** FATAL ERROR (proc 5): ibv_reg_mr failed in firehose_move_callback errno=12 (Cannot allocate memory)\n",
            "GASNET_PHYSMEM_MAX",
        ),
        (
            "OPX TID update",
            "libfabric:40213:1733000000::opx:mr:opx_hfi_update_tid():1160<warn> IOCTL FAILED ERR -1 errno 12 \"Cannot allocate memory\" requested range=0x7f0a20000000-0x7f0a20200000 (2097152 bytes, 512 pages)\n",
            "FI_OPX_TID_DISABLE",
        ),
        (
            "Charm++ mempool limit",
            "Error: there is attempt to allocate memory block with size 268435456 which is greater than the maximum mempool allowed 134217728.\n",
            "+ofi-mempool-max-size",
        ),
    ] {
        let a = run(&[("job.log", log)]);
        assert_eq!(a.failed(), 1, "{name}");
        let f = a
            .findings
            .iter()
            .find(|f| matches!(f.category, "memlock-limit" | "resource-exhaustion"))
            .unwrap_or_else(|| panic!("{name}: {:?}", cats(&a)));
        assert!(f.fixes.iter().any(|x| x.contains(knob)), "{name}: {:?}", f.fixes);
    }
    // another stack's failure gets none of them
    let a = run(&[("ucx.log", "[1733000000.5] [n1:77:0]           ib_md.c:309  UCX  ERROR ibv_reg_mr(address=0x7f0000000000, length=1048576, access=0xf) failed: Cannot allocate memory\n")]);
    for f in &a.findings {
        assert!(
            !f.fixes.iter().any(|x| x.contains("GASNET_") || x.contains("CHPL_RT_") || x.contains("FI_OPX_")),
            "{:?}",
            f.fixes
        );
    }
    // Slingshot's knob for not pinning at all (fi_cxi(7) FI_CXI_ODP) is in the CXI resource fix
    let a = run(&[("job.log", "libfabric:4242:1700000000::cxi:mr:cxip_do_map():121<warn> x1000c0s0b0n0: cxil_map lni: 17 base: 0x0x7f3a5c200000 len: 2097152 map_flags: 0xD failure: -28, No space left on device\n")]);
    let f = a.findings.iter().find(|f| f.category == "resource-exhaustion").expect("resource finding");
    assert!(f.fixes.iter().any(|x| x.contains("FI_CXI_ODP=1")), "{:?}", f.fixes);
}

fn first_evidence(a: &Analysis) -> Vec<String> {
    a.findings.first().map(|f| f.evidence.iter().map(|e| e.text.clone()).collect()).unwrap_or_default()
}

/// ENOMEM on a registration of gigabytes with no small locked-memory limit shown is a device limit
/// (findings/order.rs `enomem`); a small limit shown next to it keeps memlock first; the line with
/// the size is the first finding's evidence.
#[test]
fn a_registration_far_beyond_any_memlock_limit_is_resources() {
    let seg = "*** FATAL ERROR (proc 0): in gasnetc_segment_register() at gasnet_core.c:1125: Unexpected error Cannot allocate memory (errno=12) when registering a 37.70 GB segment\n";
    let big = run(&[("r.txt", seg)]);
    assert_eq!(cats(&big).first(), Some(&"resource-exhaustion"), "{:?}", cats(&big));
    assert!(first_evidence(&big).iter().any(|e| e.contains("37.70 GB")), "{:?}", first_evidence(&big));
    assert!(big.findings[0].explanation.contains("far beyond the default locked-memory limits"));
    // a small limit printed with it: the registration crossed that limit
    let small = run(&[("r.txt", &format!("ulimit -l 64\n{seg}"))]);
    assert_eq!(cats(&small).first(), Some(&"memlock-limit"), "{:?}", cats(&small));
    // a small registration: the order stays the ENOMEM row's (memlock first)
    let little = seg.replace("37.70 GB", "4.00 MB");
    let little = run(&[("r.txt", &little)]);
    assert_eq!(cats(&little).first(), Some(&"memlock-limit"), "{:?}", cats(&little));
}

/// The stack's own failure line naming the HCA's translation table (IBM Storage Scale's hint,
/// libvma's) puts resources first, with that line as evidence.
#[test]
fn a_failure_line_naming_the_mtt_is_resources() {
    let l = "Mon Dec  7 10:00:00.123 2026: [E] VERBS RDMA ibv_reg_mr err 12 device mlx5_0 addr 0x4000000 len 4096 KB. Try increasing device MTTs.\n";
    let a = run(&[("r.txt", l)]);
    assert_eq!(cats(&a).first(), Some(&"resource-exhaustion"), "{:?}", cats(&a));
    assert!(a.findings[0].explanation.contains("translation table (MTT)"), "{}", a.findings[0].explanation);
    assert!(first_evidence(&a).iter().any(|e| e.contains("device MTTs")));
    assert!(super::order::names_translation_table("This might happen due to low MTT entries"));
    assert!(super::order::names_translation_table("log_num_mtt"));
    assert!(!super::order::names_translation_table("ib_umem_get failed: mttx"));
}

/// Sizes a line prints, with their units; rates are not sizes.
#[test]
fn printed_sizes_read_units_not_rates() {
    use super::order::printed_sizes;
    assert_eq!(printed_sizes("registering a 4.00 GB segment"), [4u64 << 30]);
    assert_eq!(printed_sizes("len 8388608 KB. Try"), [8u64 << 30]);
    assert_eq!(printed_sizes("Unable to register MR of 11279546368 bytes"), [11_279_546_368u64]);
    assert!(printed_sizes("link 200 Gb/s, 100 Gbps, errno 12").is_empty());
}

/// EFAULT registering a gdrcopy mapping (gdr_map: the GPU's BAR as VM_IO | VM_PFNMAP) is the
/// address, not missing peer memory (findings/order.rs `efault_bar_mapping`).
#[test]
fn efault_on_a_gdr_map_mapping_is_the_address() {
    let body = "cuMemAlloc() of a 2097152 bytes GPU buffer\ngdr_map(g, mh, &map_ptr, size) returned 0\nibv_reg_mr failed: Bad address\n";
    let a = run(&[("r.txt", body)]);
    assert_eq!(cats(&a).first(), Some(&"address-invalid"), "{:?}", cats(&a));
    assert!(first_evidence(&a).iter().any(|e| e.contains("gdr_map")), "{:?}", first_evidence(&a));
    // without the mapping the same GPU memory is the peer-memory path
    let gpu = run(&[("r.txt", "cuMemAlloc() of a 2097152 bytes GPU buffer\nibv_reg_mr failed: Bad address\n")]);
    assert_eq!(cats(&gpu).first(), Some(&"gpu-peer-memory"), "{:?}", cats(&gpu));
    // gdr_map failing is no mapping
    assert!(!crate::parse::facts::gdr_bar_mapping("error: gdr_map failed"));
    assert!(!crate::parse::facts::gdr_bar_mapping("cannot do gdr_map as expected"));
    assert!(crate::parse::facts::gdr_bar_mapping("ibv_reg_mr on the gdr_map'ed pointer failed"));
}

/// The size is read from the whole failure line, not the clipped evidence: a long prefix (journald,
/// kubectl's timestamps) does not hide it.
#[test]
fn a_size_at_the_end_of_a_long_line_is_read() {
    let l = "2026-12-07T10:00:00+0000 node017 python3[1234]: *** FATAL ERROR (proc 0): in gasnetc_segment_register() at gasnet_core.c:1125: Unexpected error Cannot allocate memory (errno=12) when registering a 4.00 GB segment\n";
    let a = run(&[("r.txt", l)]);
    assert_eq!(cats(&a).first(), Some(&"resource-exhaustion"), "{:?}", cats(&a));
}

/// The kernel's own RDMA consumers (NFS/RDMA, the storage targets and initiators, o2iblnd) register
/// through the kernel API, charged to no process's RLIMIT_MEMLOCK and with access bits they choose:
/// their failures never lead with memlock or the access bits, and the messages that name their own
/// remedy (the R/W API's MR pool, NFS/RDMA without FRWR, SPDK's unregistered buffer, BeeGFS's rkey
/// type) lead with it, by the vocabulary's sample line alone.
#[test]
fn kernel_consumers_and_storage_messages_lead_with_their_cause() {
    let v = crate::parse::vocab::table();
    let sample = |id: &str| v.entries.iter().find(|e| e.id == id).unwrap_or_else(|| panic!("{id}")).sample.clone();
    for id in [
        "linux.xprtrdma.map_mr",
        "linux.xprtrdma.trace_frwr_alloc",
        "linux.isert.prepare_rdma_res",
        "linux.svcrdma.trace_dma_map_rw_err",
        "linux.nvme_rdma.mr_pool",
    ] {
        let a = run(&[("dmesg.txt", &format!("{}\n", sample(id)))]);
        let c = cats(&a);
        assert!(!c.is_empty(), "{id}: no finding");
        assert!(!c.contains(&"memlock-limit") && !c.contains(&"access-flags"), "{id}: {c:?}");
    }
    for (id, cat, issue, knob) in [
        ("linux.rw.init_mrs", "resource-exhaustion", "linux-rdma-rw-mr-pool", "--queue-size"),
        ("linux.xprtrdma.frwr_unsupported", "version-mismatch", "linux-xprtrdma-frwr-unsupported", "proto=tcp"),
        ("spdk.rdma.no_translation", "address-invalid", "spdk-buffer-not-registered", "spdk_dma_malloc"),
        ("beegfs.ibv.dma_key_unsupported", "version-mismatch", "beegfs-rdma-keytype-dma", "connRDMAKeyType"),
        ("beegfs.gds.rkey_type", "version-mismatch", "beegfs-gds-keytype-register", "connRDMAKeyType"),
        ("beegfs.gds.mixed_pages", "address-invalid", "beegfs-gds-mixed-pages", "wholly in GPU memory"),
    ] {
        let a = run(&[("log", &format!("{}\n", sample(id)))]);
        let f = a.findings.first().unwrap_or_else(|| panic!("{id}: no finding"));
        assert_eq!(f.category, cat, "{id}: {:?}", cats(&a));
        assert_eq!(f.known_issue.as_ref().map(|k| k.id.as_str()), Some(issue), "{id}");
        assert!(f.fixes.first().is_some_and(|x| x.contains(knob)), "{id}: {:?}", f.fixes);
    }
}

/// EPERM from a registration is ib_umem_get's can_do_mlock refusal (a locked-memory limit of 0
/// without CAP_IPC_LOCK): the limit first when nothing shows a missing capability or device node;
/// EACCES is the device node's permissions.
#[test]
fn eperm_from_a_registration_is_the_zero_memlock_limit() {
    let a = run(&[("r.txt", "rdma_reg_msgs for recv_msg: Operation not permitted\nrdma_client: end -1\n")]);
    assert_eq!(cats(&a).first(), Some(&"memlock-limit"), "{:?}", cats(&a));
    let a = run(&[("r.txt", "misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Permission denied\n")]);
    assert_eq!(cats(&a).first(), Some(&"permissions"), "{:?}", cats(&a));
}

/// A buffer from another GPU runtime's device allocator (MetaX MACA's mcMalloc, Level Zero's
/// zeMemAllocDevice) registered with EFAULT is GPU memory without peer memory, as for cudaMalloc.
#[test]
fn other_gpu_runtimes_allocations_are_device_memory() {
    for alloc in
        ["mcMalloc(268435456) -> 0, ptr 0x7fe35d1f9000", "zeMemAllocDevice(ctx, &desc, 268435456, 64, dev, &ptr) -> 0"]
    {
        let body = format!("{alloc}\n[mlx5_0] register mem failed, addr 0x7fe35d1f9000 len 268435456: Bad address\n");
        let a = run(&[("r.txt", body.as_str())]);
        assert_eq!(cats(&a).first(), Some(&"gpu-peer-memory"), "{alloc}: {:?}", cats(&a));
    }
}

/// An address and an iova printed with the call (on its failure line, or logged just before it) whose
/// offsets within the page differ are uverbs' EINVAL: iova-alignment first; offsets that agree are not.
#[test]
fn printed_address_and_iova_with_other_page_offsets_are_the_iova() {
    let one = "ibv_reg_mr_iova2(addr=0x7f3a00001050, length=65536, iova=0x0, access=0x7) failed: Invalid argument\n";
    let two = "ibv_reg_mr_iova2(addr=0x7f3a00001050, length=65536, iova=0x0, access=0x7)\nTraceback (most recent call last):\n  File \"reg.py\", line 23, in <module>\n    raise OSError(e, 'ibv_reg_mr_iova2 failed: ' + os.strerror(e))\nOSError: [Errno 22] ibv_reg_mr_iova2 failed: Invalid argument\n";
    for body in [one, two] {
        let a = run(&[("r.txt", body)]);
        assert_eq!(cats(&a).first(), Some(&"iova-alignment"), "{body}: {:?}", cats(&a));
    }
    let agrees = one.replace("iova=0x0", "iova=0x10000050");
    let a = run(&[("r.txt", agrees.as_str())]);
    assert!(!cats(&a).contains(&"iova-alignment"), "{:?}", cats(&a));
}

/// A registration's range printed as an interval is its size: GASNet-EX's ofi segment binding names
/// `[start, end)`, and ENOMEM on tens of GB with no small limit shown is a device limit.
#[test]
fn a_printed_address_interval_is_a_size() {
    use crate::findings::order::printed_sizes;
    assert_eq!(printed_sizes("binding segment [0x602000000, 0xecc000000) to EP 2"), [0xecc000000u64 - 0x602000000]);
    assert_eq!(printed_sizes("range [0x1000-0x3000]"), [0x2000u64]);
    assert!(printed_sizes("rank [0] [1, 2)").is_empty());
    let l = "*** WARNING (proc 1): Unexpected error 12 (Cannot allocate memory) from fi_mr_regattr() when binding segment [0x7f0000000000, 0x7f0800000000) to EP 2\n";
    let a = run(&[("r.txt", l)]);
    assert_eq!(cats(&a).first(), Some(&"resource-exhaustion"), "{:?}", cats(&a));
}
