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
