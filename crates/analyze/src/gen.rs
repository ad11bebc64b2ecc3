//! A synthetic mixed log (NCCL INFO/WARN, UCX, shim records, kernel lines, application noise) for the
//! throughput benchmark and the bounded-memory streaming test. Deterministic; no randomness crate needed.
use std::io::{self, Read};

/// One block of mixed lines, about `target` bytes; host/rank/pid vary with the line number.
pub fn block(target: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target + 4096);
    let mut i: u64 = 0;
    while out.len() < target {
        i += 1;
        let host = if i.is_multiple_of(2) { "gpu-a" } else { "gpu-b" };
        let rank = i % 16;
        let pid = 4000 + rank;
        let line = match i % 10 {
            0..=2 => format!(
                "{{\"v\":1,\"kind\":\"reg\",\"seq\":{i},\"time_ns\":{},\"host\":\"{host}\",\"pid\":{pid},\"tid\":{pid},\"rank\":{rank},\"call\":\"ibv_reg_mr\",\"device\":\"mlx5_0\",\"addr\":\"0x7f{:010x}\",\"length\":{},\"access\":15,\"mem_kind\":\"host-anon\",\"registered_bytes\":0,\"result\":\"ok\",\"mr\":\"0x55{:06x}\",\"lkey\":{i},\"rkey\":{i},\"duration_ns\":2100}}\n",
                1_764_700_000_000_000_000u64 + i * 1000,
                i * 4096,
                4096u64 << (i % 12),
                i % 0xffffff
            ),
            3 | 4 => format!("{host}:{pid}:{} [{}] NCCL INFO Channel {:02}/32 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15\n", pid + 70, rank % 8, i % 32),
            5 => format!("{host}:{pid}:{} [{}] NCCL INFO {} [receive] via NET/IB/0/GDRDMA\n", pid + 70, rank % 8, i % 32),
            6 => format!("[1643394930.{:06}] [{host}:{pid}:0]           ib_md.c:816  UCX  DEBUG registered memory 0x7f56f0f20ba0..0x7f56f12750e0 on mlx5_0 lkey 0xc0563 rkey 0xc0563 access 0xf flags 0x368\n", i % 1_000_000),
            7 => format!("step {i}: loss 2.{:04} lr 3.0e-4 tokens/s 182345 mem 61.2GB\n", i % 10_000),
            8 => format!("[{}.{:06}] systemd[1]: Started session-{}.scope - Session of user train.\n", i % 100_000, i % 1_000_000, i % 977),
            _ => {
                if i % 1000 == 9 {
                    format!("{host}:{pid}:{} [{}] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n", pid + 70, rank % 8)
                } else {
                    format!("{host}:{pid}:{} [{}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.{}<0>\n", pid + 70, rank % 8, i % 250)
                }
            }
        };
        out.extend_from_slice(line.as_bytes());
    }
    out
}

/// A block of failure lines only, about `target` bytes, in the forms a failing job prints them:
/// shim records, MRSHIM WARN lines, NCCL WARN lines, UCX errors, libfabric/application lines.
/// Each form has its own processes (so none is a duplicate of another), over 4096 pids.
pub fn failure_block(target: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target + 4096);
    let mut i: u64 = 0;
    while out.len() < target {
        i += 1;
        let host = format!("node{:04}", i % 512);
        let pid = 10_000 + (i % 4096) * 5;
        let addr = 0x7f00_0000_0000u64 + (i % 100_000) * 0x20_0000;
        let line = match i % 5 {
            0 => format!(
                "{{\"v\":1,\"kind\":\"reg\",\"seq\":{i},\"time_ns\":{},\"host\":\"{host}\",\"pid\":{pid},\"tid\":{pid},\"rank\":{},\"call\":\"ibv_reg_mr_iova2\",\"device\":\"mlx5_0\",\"addr\":\"{addr:#x}\",\"length\":2097152,\"access\":1048591,\"relaxed_ordering\":true,\"mem_kind\":\"device\",\"registered_bytes\":0,\"result\":\"error\",\"errno\":22,\"errno_name\":\"EINVAL\",\"duration_ns\":2100}}\n",
                1_764_700_000_000_000_000u64 + i * 1000,
                i % 4096
            ),
            1 => format!("{host}:{}:{} [0] MRSHIM WARN ibv_reg_mr_iova2(addr={addr:#x}, len=2097152, access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|RELAXED_ORDERING, iova={addr:#x}, mem=device) failed: EINVAL (22)\n", pid + 1, pid + 1),
            2 => format!("{host}:{}:{} [3] misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument\n", pid + 2, pid + 3),
            3 => format!("[1764700000.{:06}] [{host}:{}:0]           ib_md.c:293  UCX  ERROR ibv_reg_mr(address={addr:#x}, length=1048576, access=0x10000f) failed: Invalid argument\n", i % 1_000_000, pid + 3),
            _ => format!("libfabric:{}:1764700000::verbs:mr:vrb_mr_reg_common():83<warn> Unable to register memory region: Cannot allocate memory (12)\n", pid + 4),
        };
        out.extend_from_slice(line.as_bytes());
    }
    out
}

/// Repeats a block until `total` bytes were produced (cut at a line boundary at the end).
pub struct Repeat {
    block: Vec<u8>,
    pos: usize,
    left: u64,
}

impl Repeat {
    pub fn new(block: Vec<u8>, total: u64) -> Repeat {
        Repeat { block, pos: 0, left: total }
    }
}

impl Read for Repeat {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        if self.pos == self.block.len() {
            self.pos = 0;
        }
        let n = buf.len().min(self.block.len() - self.pos).min(self.left as usize);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        self.left -= n as u64;
        Ok(n)
    }
}

/// A synthetic job for the cluster-scale tests and the `analyze-bench job` measurement: one shim record
/// file per rank (`HOST-rRANK.jsonl`), as `MRSHIM_LOG=dir/%h-%r.jsonl` writes them.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub hosts: usize,
    pub ranks_per_host: usize,
    /// Host indices whose soft memlock is 64 KiB: every registration above it fails with ENOMEM.
    pub failing_hosts: Vec<usize>,
    /// Application registrations per rank (each followed by its deregistration).
    pub regs_per_rank: usize,
    /// Ranks whose log stops after half of their registrations, without a summary (killed).
    pub killed: Vec<usize>,
    /// Ranks that wrote their config record but never reached a registration (and were killed).
    pub stalled: Vec<usize>,
    /// Ranks that wrote no file at all.
    pub absent: Vec<usize>,
    pub job_id: &'static str,
}

impl JobSpec {
    /// The case: 512 hosts x 8 ranks, hosts 17, 233 and 400 failing, ~110 KB per rank.
    pub fn cluster(regs_per_rank: usize) -> JobSpec {
        JobSpec {
            hosts: 512,
            ranks_per_host: 8,
            failing_hosts: vec![17, 233, 400],
            regs_per_rank,
            killed: vec![],
            stalled: vec![],
            absent: vec![],
            job_id: "812345",
        }
    }
    pub fn host_name(i: usize) -> String {
        format!("node{i:04}")
    }
    pub fn world(&self) -> usize {
        self.hosts * self.ranks_per_host
    }
}

const T0: u64 = 1_764_700_000_000_000_000;

/// Writes the job's files into `dir` (created); returns the number of bytes written.
pub fn job(dir: &std::path::Path, spec: &JobSpec) -> io::Result<u64> {
    use mrshim_record::{CallResult, Kind, MemKind, Reg, Summary};
    use std::collections::BTreeMap;
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut total = 0u64;
    for rank in 0..spec.world() {
        if spec.absent.contains(&rank) {
            continue;
        }
        let hi = rank / spec.ranks_per_host;
        let host = JobSpec::host_name(hi);
        let failing = spec.failing_hosts.contains(&hi);
        let memlock = failing.then_some(64u64 << 10);
        let pid = 10_000 + (rank % spec.ranks_per_host) as u32;
        let mut seq = 0u64;
        let mut t = T0 + rank as u64 * 1_000;
        let mut rec = |kind: Kind, t: u64| {
            seq += 1;
            Reg {
                v: 1,
                kind: Some(kind),
                seq,
                time_ns: t,
                host: host.clone(),
                pid,
                tid: pid,
                rank: Some(rank as i64),
                local_rank: Some((rank % spec.ranks_per_host) as i64),
                result: CallResult::Ok,
                memlock_soft: memlock,
                memlock_hard: memlock,
                ..Default::default()
            }
        };
        let mut out = io::BufWriter::new(std::fs::File::create(dir.join(format!("{host}-r{rank}.jsonl")))?);
        let mut env = BTreeMap::new();
        for (k, v) in [
            ("OMPI_COMM_WORLD_RANK", rank.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", (rank % spec.ranks_per_host).to_string()),
            ("OMPI_COMM_WORLD_SIZE", spec.world().to_string()),
            ("SLURM_JOB_ID", spec.job_id.to_string()),
            ("MRSHIM_LOG", "/shared/mrshim/%h-%r.jsonl".to_string()),
        ] {
            env.insert(k.to_string(), v);
        }
        let mut cfg = rec(Kind::Config, t);
        cfg.env = Some(env);
        cfg.shim_version = Some(env!("CARGO_PKG_VERSION").into());
        cfg.exe = Some("/opt/train/bin/python3".into());
        let mut lines = vec![cfg.to_line()];
        let regs = if spec.stalled.contains(&rank) {
            0
        } else if spec.killed.contains(&rank) {
            spec.regs_per_rank / 2
        } else {
            spec.regs_per_rank
        };
        let (mut calls, mut failures, mut bytes) = (0u64, 0u64, 0u64);
        let mut by_call: BTreeMap<String, mrshim_record::CallStats> = BTreeMap::new();
        for i in 0..regs {
            t += 1_000_000 + (i as u64 * 7919 + rank as u64 * 104_729) % 400_000;
            let length = 4096u64 << (i % 11);
            let addr = 0x7f00_0000_0000u64 + ((rank as u64) << 24) + ((i as u64) << 16);
            let device = i % 3 == 0;
            let mut r = rec(Kind::Reg, t);
            r.call = if device { "ibv_reg_mr_iova2" } else { "ibv_reg_mr" }.into();
            r.device = Some("mlx5_0".into());
            r.pd = Some("0x55d0a000".into());
            r.addr = Some(format!("{addr:#x}"));
            r.length = Some(length);
            r.addr_page_offset = Some(0);
            r.access = Some(15);
            r.access_names = vec!["LOCAL_WRITE".into(), "REMOTE_WRITE".into(), "REMOTE_READ".into()];
            r.mem_kind = Some(if device { MemKind::Device } else { MemKind::HostAnon });
            r.mem_region = Some(if device { "/dev/nvidia0" } else { "[heap]" }.into());
            r.mem_fully_mapped = Some(true);
            r.duration_ns = 2_100 + (i as u64 % 50) * 100;
            let st = by_call.entry(r.call.clone()).or_default();
            st.calls += 1;
            calls += 1;
            // GPU memory pinned through peer memory does not count against RLIMIT_MEMLOCK
            if !device && memlock.is_some_and(|m| length > m) {
                r.result = CallResult::Error;
                r.errno = Some(12);
                r.errno_name = Some("ENOMEM".into());
                failures += 1;
                st.failures += 1;
                *st.errnos.entry("ENOMEM".into()).or_default() += 1;
                r.registered_bytes_after = Some(0);
                lines.push(r.to_line());
                continue;
            }
            r.mr = Some(format!("{:#x}", 0x5600_0000u64 + i as u64));
            r.lkey = Some(i as u32);
            r.rkey = Some(i as u32);
            r.registered_bytes_after = Some(length);
            bytes += length;
            lines.push(r.to_line());
            let reg_seq = r.seq;
            let mut d = rec(Kind::Dereg, t + 400_000);
            d.call = "ibv_dereg_mr".into();
            d.mr = r.mr.clone();
            d.reg_seq = Some(reg_seq);
            d.registered_bytes_after = Some(0);
            d.duration_ns = 900;
            calls += 1;
            lines.push(d.to_line());
        }
        if regs == spec.regs_per_rank {
            let mut s = rec(Kind::Summary, t + 1_000_000);
            s.summary = Some(Summary {
                calls,
                failures,
                by_call,
                bytes_registered_total: bytes,
                records_written: lines.len() as u64 + 1,
                ..Default::default()
            });
            lines.push(s.to_line());
        }
        for l in &lines {
            out.write_all(l.as_bytes())?;
            total += l.len() as u64;
        }
        out.flush()?;
    }
    Ok(total)
}
