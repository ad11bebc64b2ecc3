//! The hot-path record writer: one `reg`/`dereg` line straight into a reusable byte buffer, no
//! allocation per record. It must produce exactly what `serde_json` would for the same
//! `mrshim_record::Reg` (checked by the tests below, field by field, by parsing it back).

use mrshim_record::{Kind, MemKind, Reg, SCHEMA_VERSION};
use std::sync::Arc;

/// Everything a `reg`/`dereg` line holds, borrowed.
#[derive(Debug, Clone, Default)]
pub struct RegLine<'a> {
    pub dereg: bool,
    pub seq: u64,
    pub time_ns: u64,
    pub host: &'a str,
    pub pid: u32,
    pub tid: u32,
    pub rank: Option<i64>,
    pub local_rank: Option<i64>,
    pub call: &'a str,
    pub symbol_version: Option<&'a str>,
    pub device: Option<&'a str>,
    pub pd: Option<u64>,
    pub addr: Option<u64>,
    pub length: Option<u64>,
    pub addr_page_offset: Option<u64>,
    pub addr_align: Option<u64>,
    pub iova: Option<u64>,
    pub iova_page_offset: Option<u64>,
    pub access: Option<u32>,
    pub dmabuf_fd: Option<i32>,
    pub dmabuf_offset: Option<u64>,
    pub mem_kind: Option<MemKind>,
    pub mem_region: Option<Arc<str>>,
    pub mem_fully_mapped: Option<bool>,
    pub memlock_soft: Option<u64>,
    pub memlock_hard: Option<u64>,
    pub registered_bytes: u64,
    pub registered_bytes_after: Option<u64>,
    pub ok: bool,
    pub mr: Option<u64>,
    pub lkey: Option<u32>,
    pub rkey: Option<u32>,
    pub errno: Option<i32>,
    pub errno_name: Option<&'a str>,
    pub duration_ns: u64,
    pub probe: bool,
    pub reg_seq: Option<u64>,
    /// How the record relates to the application's call (retry attempts, refusals, injection).
    pub meta: crate::Meta<'a>,
}

pub fn mem_kind_str(k: MemKind) -> &'static str {
    match k {
        MemKind::HostAnon => "host-anon",
        MemKind::HostStack => "host-stack",
        MemKind::Hugepage => "hugepage",
        MemKind::FileReadonly => "file-readonly",
        MemKind::FileWritable => "file-writable",
        MemKind::Device => "device",
        MemKind::Unmapped => "unmapped",
        MemKind::Unknown => "unknown",
    }
}

struct W<'b> {
    b: &'b mut Vec<u8>,
    first: bool,
}

impl W<'_> {
    fn key(&mut self, k: &str) {
        if !self.first {
            self.b.push(b',');
        }
        self.first = false;
        self.b.push(b'"');
        self.b.extend_from_slice(k.as_bytes());
        self.b.extend_from_slice(b"\":");
    }
    fn u(&mut self, k: &str, v: u64) {
        self.key(k);
        self.b.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
    fn i(&mut self, k: &str, v: i64) {
        self.key(k);
        self.b.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
    fn ou(&mut self, k: &str, v: Option<u64>) {
        if let Some(v) = v {
            self.u(k, v);
        }
    }
    fn b(&mut self, k: &str, v: bool) {
        self.key(k);
        self.b.extend_from_slice(if v { b"true" } else { b"false" });
    }
    fn s(&mut self, k: &str, v: &str) {
        self.key(k);
        escape(self.b, v);
    }
    fn os(&mut self, k: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.s(k, v);
        }
    }
    fn hex(&mut self, k: &str, v: Option<u64>) {
        let Some(v) = v else { return };
        self.key(k);
        let mut t = [0u8; 20];
        t[0] = b'"';
        t[1] = b'0';
        t[2] = b'x';
        let digits = if v == 0 { 1 } else { (64 - v.leading_zeros()).div_ceil(4) as usize };
        for i in 0..digits {
            t[3 + i] = b"0123456789abcdef"[((v >> ((digits - 1 - i) * 4)) & 0xf) as usize];
        }
        t[3 + digits] = b'"';
        self.b.extend_from_slice(&t[..4 + digits]);
    }
}

/// JSON string with serde_json's escaping.
fn escape(b: &mut Vec<u8>, s: &str) {
    b.push(b'"');
    if s.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\') {
        b.extend_from_slice(s.as_bytes());
        b.push(b'"');
        return;
    }
    for &c in s.as_bytes() {
        match c {
            b'"' => b.extend_from_slice(b"\\\""),
            b'\\' => b.extend_from_slice(b"\\\\"),
            b'\n' => b.extend_from_slice(b"\\n"),
            b'\r' => b.extend_from_slice(b"\\r"),
            b'\t' => b.extend_from_slice(b"\\t"),
            0x08 => b.extend_from_slice(b"\\b"),
            0x0c => b.extend_from_slice(b"\\f"),
            c if c < 0x20 => {
                b.extend_from_slice(b"\\u00");
                b.push(b"0123456789abcdef"[(c >> 4) as usize]);
                b.push(b"0123456789abcdef"[(c & 0xf) as usize]);
            }
            c => b.push(c),
        }
    }
    b.push(b'"');
}

impl RegLine<'_> {
    /// Appends the line (with its '\n') to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.reserve(1024);
        out.push(b'{');
        let mut w = W { b: out, first: true };
        w.u("v", SCHEMA_VERSION as u64);
        w.s("kind", if self.dereg { "dereg" } else { "reg" });
        w.u("seq", self.seq);
        w.u("time_ns", self.time_ns);
        w.s("host", self.host);
        w.u("pid", self.pid as u64);
        w.u("tid", self.tid as u64);
        if let Some(r) = self.rank {
            w.i("rank", r);
        }
        if let Some(r) = self.local_rank {
            w.i("local_rank", r);
        }
        w.s("call", self.call);
        w.os("symbol_version", self.symbol_version);
        w.os("device", self.device);
        w.hex("pd", self.pd);
        w.hex("addr", self.addr);
        w.ou("length", self.length);
        w.ou("addr_page_offset", self.addr_page_offset);
        w.ou("addr_align", self.addr_align);
        w.hex("iova", self.iova);
        w.ou("iova_page_offset", self.iova_page_offset);
        if let Some(a) = self.access {
            w.u("access", a as u64);
            w.key("access_names");
            w.b.push(b'[');
            let mut first = true;
            let mut rest = a;
            for (n, bit) in mrshim_verbs::access::NAMES {
                if a & bit != 0 {
                    if !first {
                        w.b.push(b',');
                    }
                    first = false;
                    escape(w.b, n);
                    rest &= !bit;
                }
            }
            for i in 0..32 {
                if rest & (1 << i) != 0 {
                    if !first {
                        w.b.push(b',');
                    }
                    first = false;
                    w.b.extend_from_slice(b"\"0x");
                    let v = 1u32 << i;
                    let digits = (32 - v.leading_zeros()).div_ceil(4);
                    for d in (0..digits).rev() {
                        w.b.push(b"0123456789abcdef"[((v >> (d * 4)) & 0xf) as usize]);
                    }
                    w.b.push(b'"');
                }
            }
            w.b.push(b']');
        }
        w.b("relaxed_ordering", self.access.unwrap_or(0) & mrshim_verbs::access::RELAXED_ORDERING != 0);
        if let Some(fd) = self.dmabuf_fd {
            w.i("dmabuf_fd", fd as i64);
        }
        w.ou("dmabuf_offset", self.dmabuf_offset);
        if let Some(k) = self.mem_kind {
            w.s("mem_kind", mem_kind_str(k));
        }
        w.os("mem_region", self.mem_region.as_deref());
        if let Some(f) = self.mem_fully_mapped {
            w.b("mem_fully_mapped", f);
        }
        w.ou("memlock_soft", self.memlock_soft);
        w.ou("memlock_hard", self.memlock_hard);
        w.u("registered_bytes", self.registered_bytes);
        w.ou("registered_bytes_after", self.registered_bytes_after);
        w.s("result", if self.meta.refused { "refused" } else if self.ok { "ok" } else { "error" });
        w.hex("mr", self.mr);
        w.ou("lkey", self.lkey.map(u64::from));
        w.ou("rkey", self.rkey.map(u64::from));
        if let Some(e) = self.errno {
            w.i("errno", e as i64);
        }
        w.os("errno_name", self.errno_name);
        w.u("duration_ns", self.duration_ns);
        if self.probe {
            w.b("probe", true);
        }
        let m = &self.meta;
        if m.injected {
            w.b("injected", true);
        }
        w.u("attempt", m.attempt as u64);
        w.ou("parent_seq", m.parent_seq);
        w.os("strategy", m.strategy);
        w.os("change", m.change);
        if m.learned {
            w.b("learned", true);
        }
        w.ou("reg_seq", self.reg_seq);
        out.extend_from_slice(b"}\n");
    }

    /// The same record as the schema type (what the line must parse back to).
    pub fn to_reg(&self) -> Reg {
        let hex = |v: Option<u64>| v.map(|v| format!("{v:#x}"));
        Reg {
            v: SCHEMA_VERSION,
            kind: Some(if self.dereg { Kind::Dereg } else { Kind::Reg }),
            seq: self.seq,
            time_ns: self.time_ns,
            host: self.host.into(),
            pid: self.pid,
            tid: self.tid,
            rank: self.rank,
            local_rank: self.local_rank,
            call: self.call.into(),
            device: self.device.map(Into::into),
            pd: hex(self.pd),
            addr: hex(self.addr),
            length: self.length,
            addr_page_offset: self.addr_page_offset,
            addr_align: self.addr_align,
            iova: hex(self.iova),
            iova_page_offset: self.iova_page_offset,
            access: self.access,
            access_names: self.access.map(mrshim_verbs::access::names).unwrap_or_default(),
            relaxed_ordering: self.access.unwrap_or(0) & mrshim_verbs::access::RELAXED_ORDERING != 0,
            dmabuf_fd: self.dmabuf_fd,
            dmabuf_offset: self.dmabuf_offset,
            mem_kind: self.mem_kind,
            memlock_soft: self.memlock_soft,
            memlock_hard: self.memlock_hard,
            registered_bytes: self.registered_bytes,
            result: if self.ok { "ok" } else { "error" }.into(),
            mr: hex(self.mr),
            lkey: self.lkey,
            rkey: self.rkey,
            errno: self.errno,
            errno_name: self.errno_name.map(Into::into),
            duration_ns: self.duration_ns,
            probe: self.probe,
            symbol_version: self.symbol_version.map(Into::into),
            reg_seq: self.reg_seq,
            mem_region: self.mem_region.as_deref().map(Into::into),
            mem_fully_mapped: self.mem_fully_mapped,
            registered_bytes_after: self.registered_bytes_after,
            ..Reg::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn minimal_and_full_lines_parse_back_exactly() {
        check(&RegLine { host: "h", call: "ibv_dereg_mr", dereg: true, ok: true, ..Default::default() });
        let full = RegLine {
            dereg: false,
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
        for k in [MemKind::HostAnon, MemKind::HostStack, MemKind::Hugepage, MemKind::FileWritable, MemKind::Device, MemKind::Unmapped, MemKind::Unknown] {
            check(&RegLine { mem_kind: Some(k), ..full.clone() });
        }
        for a in [0u32, 1, 0xf, 0x10000f, 0x400, 0x8000_0000] {
            check(&RegLine { access: Some(a), ok: true, mr: Some(0x10), lkey: Some(u32::MAX), rkey: Some(0), errno: None, ..full.clone() });
        }
        for v in [1u64, 0xf, 0x10, 0xabc, 1 << 63] {
            check(&RegLine { addr: Some(v), pd: Some(v), ..full.clone() });
        }
    }
}
