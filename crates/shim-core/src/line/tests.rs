//! The hand writer against serde: worst-case bounds, every field parsed back (examples and a
//! property test over every field), decimal digits.

mod oracle {
    use super::super::*;

    fn check(l: &RegLine) {
        let mut b = Vec::new();
        l.write(&mut b);
        assert_eq!(*b.last().unwrap(), b'\n');
        assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), 1, "one line");
        let parsed: Reg = serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&b)));
        assert_eq!(parsed, l.to_reg(), "{}", String::from_utf8_lossy(&b));
        // and serde's own rendering of the same record parses to the same value
        let via_serde: Reg = serde_json::from_str(&l.to_reg().to_line()).unwrap();
        assert_eq!(parsed, via_serde);
    }

    #[test]
    fn the_fixed_part_stays_inside_its_bound() {
        let meta = crate::Meta {
            attempt: u32::MAX,
            parent_seq: Some(u64::MAX),
            strategy: Some(""),
            change: Some(""),
            injected: true,
            learned: true,
            refused: true,
        };
        let worst = RegLine {
            seq: u64::MAX,
            time_ns: u64::MAX,
            pid: u32::MAX,
            tid: u32::MAX,
            rank: Some(i64::MIN),
            local_rank: Some(i64::MIN),
            symbol_version: Some(""),
            device: Some(""),
            pd: Some(u64::MAX),
            addr: Some(u64::MAX),
            length: Some(u64::MAX),
            addr_page_offset: Some(u64::MAX),
            addr_align: Some(u64::MAX),
            iova: Some(u64::MAX),
            iova_page_offset: Some(u64::MAX),
            access: Some(u32::MAX),
            dmabuf_fd: Some(i32::MIN),
            dmabuf_offset: Some(u64::MAX),
            mem_kind: Some(MemKind::FileWritable),
            mem_region: Some(Arc::from("")),
            mem_fully_mapped: Some(false),
            memlock_soft: Some(u64::MAX),
            memlock_hard: Some(u64::MAX),
            registered_bytes: u64::MAX,
            registered_bytes_after: Some(u64::MAX),
            mr: Some(u64::MAX),
            lkey: Some(u32::MAX),
            rkey: Some(u32::MAX),
            errno: Some(i32::MIN),
            errno_name: Some("EOPNOTSUPP"),
            duration_ns: u64::MAX,
            probe: true,
            reg_seq: Some(u64::MAX),
            used_addr: Some(u64::MAX),
            used_length: Some(u64::MAX),
            used_access: Some(u32::MAX),
            used_mem_kind: Some(MemKind::FileWritable),
            rereg_flags: Some(i32::MIN),
            new_addr: Some(u64::MAX),
            new_length: Some(u64::MAX),
            new_access: Some(u32::MAX),
            new_pd: Some(u64::MAX),
            rereg_ret: Some(i32::MIN),
            rereg_ret_name: Some("IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW"),
            meta,
            ..Default::default()
        };
        let mut b = Vec::new();
        worst.write(&mut b);
        assert!(b.len() + 256 < FIXED_MAX, "{} bytes: raise FIXED_MAX", b.len());
        // strings at their worst (every byte escaped as \u00XX) fit their share of the bound
        let ctl = "\u{1}".repeat(300);
        let l = RegLine {
            host: &ctl,
            device: Some(&ctl),
            mem_region: Some(Arc::from(ctl.as_str())),
            meta: crate::Meta { change: Some(&ctl), ..meta },
            ..worst
        };
        let mut b = Vec::new();
        l.write(&mut b);
        assert!(b.len() <= l.bound());
        serde_json::from_slice::<serde_json::Value>(&b).unwrap();
    }

    #[test]
    fn minimal_and_full_lines_parse_back_exactly() {
        check(&RegLine { host: "h", call: "ibv_dereg_mr", kind: Kind::Dereg, ok: true, ..Default::default() });
        let full = RegLine {
            kind: Kind::Reg,
            seq: u64::MAX,
            time_ns: 1_796_236_603_877_497_093,
            host: "node-1.example",
            pid: 4_000_000,
            tid: 1,
            rank: Some(0),
            local_rank: Some(7),
            call: "ibv_reg_mr_iova2",
            symbol_version: Some("IBVERBS_1.0"),
            device: Some("mlx5_0"),
            pd: Some(0x5555_dead_beef),
            addr: Some(0),
            length: Some(1 << 40),
            addr_page_offset: Some(0),
            addr_align: Some(0),
            iova: Some(u64::MAX),
            iova_page_offset: Some(4095),
            access: Some(0xffff_ffff),
            dmabuf_fd: Some(-1),
            dmabuf_offset: Some(12),
            mem_kind: Some(MemKind::FileReadonly),
            mem_region: Some(Arc::from("/weird \"name\"\\\n\t\u{1}\u{7f}ü")),
            mem_fully_mapped: Some(false),
            memlock_soft: Some(65536),
            memlock_hard: None,
            registered_bytes: 3,
            registered_bytes_after: Some(4),
            ok: false,
            mr: None,
            lkey: None,
            rkey: None,
            errno: Some(-1),
            errno_name: None,
            duration_ns: 17,
            probe: true,
            reg_seq: Some(9),
            ..Default::default()
        };
        check(&full);
        check(&RegLine {
            kind: Kind::Rereg,
            call: "ibv_rereg_mr",
            rereg_flags: Some(5),
            new_addr: Some(0x7f00_0000_1000),
            new_length: Some(8192),
            new_access: Some(0x100007),
            new_pd: None,
            rereg_ret: Some(-4),
            rereg_ret_name: Some("IBV_REREG_MR_ERR_CMD"),
            errno: Some(95),
            errno_name: Some("EOPNOTSUPP"),
            meta: crate::Meta { strategy: Some("bounce"), change: Some("why"), refused: true, ..Default::default() },
            ..full.clone()
        });
        for k in [
            MemKind::HostAnon,
            MemKind::HostStack,
            MemKind::Hugepage,
            MemKind::FileWritable,
            MemKind::Device,
            MemKind::Unmapped,
            MemKind::Unknown,
        ] {
            check(&RegLine { mem_kind: Some(k), ..full.clone() });
        }
        for a in [0u32, 1, 0xf, 0x10000f, 0x400, 0x8000_0000] {
            check(&RegLine {
                access: Some(a),
                ok: true,
                mr: Some(0x10),
                lkey: Some(u32::MAX),
                rkey: Some(0),
                errno: None,
                ..full.clone()
            });
        }
        for v in [1u64, 0xf, 0x10, 0xabc, 1 << 63] {
            check(&RegLine { addr: Some(v), pd: Some(v), ..full.clone() });
        }
    }
}

/// Every field, retry fields and `refused` included: the hand writer's line parses back to
/// exactly the record serde reads, for any values.
mod property {
    use super::super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = Option<MemKind>> {
        proptest::option::of(proptest::sample::select(&MemKind::ALL[..]))
    }

    /// The line kinds the hand writer writes.
    fn line_kind() -> impl Strategy<Value = Kind> {
        proptest::sample::select(vec![Kind::Reg, Kind::Dereg, Kind::Rereg])
    }

    /// The `ibv_rereg_mr` fields: flags, new addr/length/access/pd, return code and its name.
    type Rereg = (Option<i32>, Option<u64>, Option<u64>, Option<u32>, Option<u64>, Option<i32>, Option<String>);

    fn rereg() -> impl Strategy<Value = Rereg> {
        use proptest::option::of;
        let u = any::<u64>;
        (of(any::<i32>()), of(u()), of(u()), of(any::<u32>()), of(u()), of(any::<i32>()), of(name()))
    }

    fn text() -> impl Strategy<Value = String> {
        // any Unicode, control characters and quotes included
        "\\PC{0,12}|[\\x00-\\x1f\"\\\\ü]{0,6}"
    }

    #[derive(Debug, Clone)]
    struct Strings {
        host: String,
        call: String,
        symbol_version: Option<String>,
        device: Option<String>,
        mem_region: Option<String>,
        errno_name: Option<String>,
        strategy: Option<String>,
        change: Option<String>,
    }

    /// Names the shim itself chooses (entry points, versions, errno and strategy names): written
    /// without escaping.
    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_.-]{0,16}"
    }

    fn strings() -> impl Strategy<Value = Strings> {
        use proptest::option::of;
        (text(), name(), of(name()), of(text()), of(text()), of(name()), of(name()), of(text())).prop_map(
            |(host, call, symbol_version, device, mem_region, errno_name, strategy, change)| Strings {
                host,
                call,
                symbol_version,
                device,
                mem_region,
                errno_name,
                strategy,
                change,
            },
        )
    }

    type Nums = (
        (Kind, u64, u64, u32, u32, Option<i64>, Option<i64>, Option<u64>),
        (Option<u64>, Option<u64>, Option<u64>, Option<u64>, Option<u64>, Option<u64>, Option<u32>, Option<i32>),
        (Option<u64>, Option<bool>, Option<u64>, Option<u64>, u64, Option<u64>, bool, Option<u64>),
        (Option<u32>, Option<u32>, Option<i32>, u64, bool, Option<u64>, Option<u64>, Option<u64>),
        (Option<u32>, u32, Option<u64>, bool, bool, bool),
    );

    fn nums() -> impl Strategy<Value = Nums> {
        use proptest::option::of;
        let u = any::<u64>;
        (
            (line_kind(), u(), u(), any::<u32>(), any::<u32>(), of(any::<i64>()), of(any::<i64>()), of(u())),
            (of(u()), of(u()), of(u()), of(u()), of(u()), of(u()), of(any::<u32>()), of(any::<i32>())),
            (of(u()), of(any::<bool>()), of(u()), of(u()), u(), of(u()), any::<bool>(), of(u())),
            (of(any::<u32>()), of(any::<u32>()), of(any::<i32>()), u(), any::<bool>(), of(u()), of(u()), of(u())),
            (of(any::<u32>()), any::<u32>(), of(u()), any::<bool>(), any::<bool>(), any::<bool>()),
        )
    }

    proptest! {
        #[test]
        fn every_field_parses_back_exactly(s in strings(), n in nums(), k in kind(), uk in kind(), rr in rereg()) {
            let (rereg_flags, new_addr, new_length, new_access, new_pd, rereg_ret, rereg_ret_name) = rr;
            let ((kind, seq, time_ns, pid, tid, rank, local_rank, pd), a, b, c, d) = n;
            let (addr, length, addr_page_offset, addr_align, iova, iova_page_offset, access, dmabuf_fd) = a;
            let (dmabuf_offset, mem_fully_mapped, memlock_soft, memlock_hard, registered_bytes, registered_bytes_after, ok, mr) = b;
            let (lkey, rkey, errno, duration_ns, probe, reg_seq, used_addr, used_length) = c;
            let (used_access, attempt, parent_seq, injected, learned, refused) = d;
            let l = RegLine {
                kind, seq, time_ns, host: &s.host, pid, tid, rank, local_rank, call: &s.call,
                symbol_version: s.symbol_version.as_deref(), device: s.device.as_deref(), pd, addr, length,
                addr_page_offset, addr_align, iova, iova_page_offset, access, dmabuf_fd, dmabuf_offset,
                mem_kind: k, mem_region: s.mem_region.as_deref().map(Arc::from), mem_fully_mapped,
                memlock_soft, memlock_hard, registered_bytes, registered_bytes_after, ok, mr, lkey, rkey,
                errno, errno_name: s.errno_name.as_deref(), duration_ns, probe, reg_seq, used_addr,
                used_length, used_access, used_mem_kind: uk,
                rereg_flags, new_addr, new_length, new_access, new_pd, rereg_ret,
                rereg_ret_name: rereg_ret_name.as_deref(),
                meta: crate::Meta {
                    attempt, parent_seq, strategy: s.strategy.as_deref(), change: s.change.as_deref(),
                    injected, learned, refused,
                },
            };
            let mut buf = Vec::new();
            l.write(&mut buf);
            prop_assert!(buf.len() <= l.bound());
            let parsed: Reg = serde_json::from_slice(&buf).map_err(|e| TestCaseError::fail(format!("{e}")))?;
            prop_assert_eq!(&parsed, &l.to_reg());
            let via_serde: Reg = serde_json::from_str(&l.to_reg().to_line()).unwrap();
            prop_assert_eq!(parsed, via_serde);
        }
    }
}

mod numbers {
    use super::super::*;

    fn dec(v: u64) -> String {
        let mut b = [0u8; 32];
        let mut w = LineWriter { b: &mut b, n: 0 };
        w.dec(v);
        let n = w.n;
        String::from_utf8(b[..n].to_vec()).unwrap()
    }

    #[test]
    fn decimal_digits_match_std() {
        let mut v = 1u64;
        for _ in 0..64 {
            for x in [v - 1, v, v + 1, v.wrapping_mul(10).wrapping_sub(1)] {
                assert_eq!(dec(x), x.to_string());
            }
            v = v.wrapping_mul(3);
        }
        for p in 0..20 {
            let x = 10u64.pow(p);
            assert_eq!(dec(x), x.to_string());
            assert_eq!(dec(x - 1), (x - 1).to_string());
        }
        assert_eq!(dec(u64::MAX), u64::MAX.to_string());
    }
}
