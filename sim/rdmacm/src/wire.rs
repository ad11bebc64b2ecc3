//! The simulated CM's messages between two ids (one SOCK_SEQPACKET message each): the IB CM's
//! REQ/REP/RTU/REJ/DREQ/DREP and SIDR REQ/REP, carrying what the kernel's CM carries in them
//! for rdma_cm (QPN, starting PSN, responder resources, initiator depth, retry counts, the
//! sender's GID/LID and MTU, the IP addresses, private data).

use crate::addr::{Addr, WIRE_LEN};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kind {
    Req = 1,
    Rep = 2,
    Rtu = 3,
    Rej = 4,
    Dreq = 5,
    Drep = 6,
    SidrReq = 7,
    SidrRep = 8,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Req,
            2 => Kind::Rep,
            3 => Kind::Rtu,
            4 => Kind::Rej,
            5 => Kind::Dreq,
            6 => Kind::Drep,
            7 => Kind::SidrReq,
            8 => Kind::SidrRep,
            _ => return None,
        })
    }

    /// The private data a user may send in this message (IB CM sizes; REQ and SIDR REQ less
    /// the 36-byte header rdma_cm puts in front), which the receiver also sees, zero-padded.
    pub fn private_max(self) -> usize {
        match self {
            Kind::Req => 56,
            Kind::Rep => 196,
            Kind::Rtu => 224,
            Kind::Rej => 148,
            Kind::Dreq => 52,
            Kind::Drep => 52,
            Kind::SidrReq => 180,
            Kind::SidrRep => 136,
        }
    }
}

/// IB CM reject reasons rdma_cm reports as the REJECTED event's status.
pub const REJ_INVALID_SERVICE_ID: u32 = 8;
pub const REJ_CONSUMER_DEFINED: u32 = 28;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Msg {
    pub kind: Kind,
    pub qpn: u32,
    pub psn: u32,
    pub qkey: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub mtu: u8,
    pub lid: u16,
    pub gid: [u8; 16],
    pub src: Addr,
    pub dst: Addr,
    pub status: u32,
    pub private: Vec<u8>,
}

const FIXED: usize = 1 + 4 * 3 + 6 + 2 + 16 + 2 * WIRE_LEN + 4;

impl Msg {
    pub fn new(kind: Kind, src: Addr, dst: Addr) -> Msg {
        Msg {
            kind,
            qpn: 0,
            psn: 0,
            qkey: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            mtu: 0,
            lid: 0,
            gid: [0; 16],
            src,
            dst,
            status: 0,
            private: Vec::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(FIXED + self.private.len());
        o.push(self.kind as u8);
        for v in [self.qpn, self.psn, self.qkey] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        o.extend_from_slice(&[
            self.responder_resources,
            self.initiator_depth,
            self.retry_count,
            self.rnr_retry_count,
            self.srq,
            self.mtu,
        ]);
        o.extend_from_slice(&self.lid.to_le_bytes());
        o.extend_from_slice(&self.gid);
        self.src.encode(&mut o);
        self.dst.encode(&mut o);
        o.extend_from_slice(&self.status.to_le_bytes());
        o.extend_from_slice(&self.private);
        o
    }

    pub fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() < FIXED {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        const SRC: usize = 37;
        Some(Msg {
            kind: Kind::from_u8(b[0])?,
            qpn: u32_at(1),
            psn: u32_at(5),
            qkey: u32_at(9),
            responder_resources: b[13],
            initiator_depth: b[14],
            retry_count: b[15],
            rnr_retry_count: b[16],
            srq: b[17],
            mtu: b[18],
            lid: u16::from_le_bytes([b[19], b[20]]),
            gid: b[21..37].try_into().unwrap(),
            src: Addr::decode(&b[SRC..])?,
            dst: Addr::decode(&b[SRC + WIRE_LEN..])?,
            status: u32_at(FIXED - 4),
            private: b[FIXED..].to_vec(),
        })
    }

    /// The private data as the receiver's event shows it: padded to the message's size.
    pub fn padded_private(&self) -> Vec<u8> {
        let mut p = self.private.clone();
        p.resize(self.kind.private_max().max(p.len()), 0);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Ip;

    #[test]
    fn roundtrip_and_padding() {
        let src = Addr { ip: Ip::V4([192, 0, 2, 10]), port: 40000, scope: 0 };
        let dst = Addr { ip: Ip::V6([7; 16]), port: 7174, scope: 2 };
        let mut m = Msg::new(Kind::Req, src, dst);
        m.qpn = 0xabcdef;
        m.psn = 0x123456;
        m.qkey = 0x01234567;
        m.responder_resources = 1;
        m.initiator_depth = 2;
        m.retry_count = 7;
        m.rnr_retry_count = 6;
        m.mtu = 5;
        m.lid = 9;
        m.gid = [0xfe; 16];
        m.status = 28;
        m.private = b"hello".to_vec();
        let b = m.encode();
        assert_eq!(b.len(), FIXED + 5);
        let d = Msg::decode(&b).unwrap();
        assert_eq!(d, m);
        let p = d.padded_private();
        assert_eq!(p.len(), 56);
        assert_eq!(&p[..5], b"hello");
        assert!(p[5..].iter().all(|&x| x == 0));
        assert!(Msg::decode(&b[..FIXED - 1]).is_none());
    }
}
