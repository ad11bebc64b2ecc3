//! The simulator's "wire": RC packets between contexts over unix stream sockets. One message is
//! cut into packets of at most [`MAX_PAYLOAD`] bytes so a 64 MiB transfer never needs 64 MiB of
//! buffer; responses (ACK/NAK/READ data) travel back on the connection the request came in on.

pub const MAX_PAYLOAD: usize = 64 * 1024;
pub const HDR_LEN: usize = 56;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Send = 1,
    Write = 2,
    WriteImm = 3,
    ReadReq = 4,
    ReadResp = 5,
    Ack = 6,
    Nak = 7,
    /// One UD datagram: `rkey` carries the Q_Key, `raddr` the sender's SL << 16 | LID, and the
    /// payload starts with the 40-byte GRH area.
    UdSend = 8,
    /// A fence marker (`raddr`: its number): the receiving NIC answers FenceAck once it has
    /// handled everything that came before it on the connection (engine::Engine::fence).
    Fence = 9,
    FenceAck = 10,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Send,
            2 => Op::Write,
            3 => Op::WriteImm,
            4 => Op::ReadReq,
            5 => Op::ReadResp,
            6 => Op::Ack,
            7 => Op::Nak,
            8 => Op::UdSend,
            9 => Op::Fence,
            10 => Op::FenceAck,
            _ => return None,
        })
    }
}

pub const FIRST: u8 = 1;
pub const LAST: u8 = 2;
pub const IMM: u8 = 4;
/// UD: the GRH area of the payload holds a GRH (the receive completion gets IBV_WC_GRH).
pub const GRH: u8 = 8;

/// NAK reasons (carried in `status`): an ibv_wc_status for the requester, or NOT_READY.
pub const NAK_NOT_READY: u32 = 0xffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hdr {
    pub op: u8,
    pub flags: u8,
    pub dst_qpn: u32,
    pub src_qpn: u32,
    pub psn: u32,
    pub raddr: u64,
    pub rkey: u32,
    /// Immediate data, as the application gave it (network byte order, untouched).
    pub imm: u32,
    pub total_len: u64,
    pub offset: u64,
    pub payload_len: u32,
    pub status: u32,
}

impl Hdr {
    pub fn op(&self) -> Option<Op> {
        Op::from_u8(self.op)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.op);
        out.push(self.flags);
        out.extend_from_slice(&[0, 0]);
        for v in [self.dst_qpn, self.src_qpn, self.psn] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.raddr.to_le_bytes());
        out.extend_from_slice(&self.rkey.to_le_bytes());
        out.extend_from_slice(&self.imm.to_le_bytes());
        out.extend_from_slice(&self.total_len.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.payload_len.to_le_bytes());
        out.extend_from_slice(&self.status.to_le_bytes());
    }

    pub fn decode(b: &[u8]) -> Option<Hdr> {
        if b.len() < HDR_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Hdr {
            op: b[0],
            flags: b[1],
            dst_qpn: u32_at(4),
            src_qpn: u32_at(8),
            psn: u32_at(12),
            raddr: u64_at(16),
            rkey: u32_at(24),
            imm: u32_at(28),
            total_len: u64_at(32),
            offset: u64_at(40),
            payload_len: u32_at(48),
            status: u32_at(52),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let h = Hdr {
            op: Op::WriteImm as u8,
            flags: FIRST | LAST | IMM,
            dst_qpn: 0xabcdef,
            src_qpn: 7,
            psn: 99,
            raddr: 0x7f00_dead_beef,
            rkey: 0x1234,
            imm: 0xdeadbeef,
            total_len: 1 << 33,
            offset: 4096,
            payload_len: 65536,
            status: NAK_NOT_READY,
        };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(v.len(), HDR_LEN);
        assert_eq!(Hdr::decode(&v), Some(h));
        assert_eq!(h.op(), Some(Op::WriteImm));
        assert!(Hdr::decode(&v[..10]).is_none());
    }
}
