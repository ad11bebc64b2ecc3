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
    /// What a retry attempt registered instead of what was asked, where it differs.
    pub used_addr: Option<u64>,
    pub used_length: Option<u64>,
    pub used_access: Option<u32>,
    pub used_mem_kind: Option<MemKind>,
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

/// The `result` field: a strategy the retry engine refused to try, or the call's outcome.
fn result(refused: bool, ok: bool) -> &'static str {
    if refused {
        "refused"
    } else if ok {
        "ok"
    } else {
        "error"
    }
}

/// `,"name":` as bytes: every key after the first ("v") starts with the comma.
macro_rules! k {
    ($k:literal) => {
        concat!(",\"", $k, "\":").as_bytes()
    };
}

/// Upper bound of a line without its variable strings (checked by the tests below); each
/// variable string adds at most six bytes per byte (`\u00XX`) plus quotes.
const FIXED_MAX: usize = 2048;

/// Writes into a slice already long enough for the line (see [`RegLine::bound`]): plain indexed
/// copies, no capacity check or growth per field (a Vec's were most of the formatting cost).
struct W<'b> {
    b: &'b mut [u8],
    n: usize,
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const DIGIT_PAIRS: &[u8; 200] = b"00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

impl W<'_> {
    #[inline(always)]
    fn put(&mut self, s: &[u8]) {
        let e = self.n + s.len();
        // SAFETY: write_into checked once that b holds bound() bytes, more than any line.
        unsafe { self.b.get_unchecked_mut(self.n..e) }.copy_from_slice(s);
        self.n = e;
    }
    #[inline(always)]
    fn byte(&mut self, c: u8) {
        // SAFETY: as in put.
        unsafe { *self.b.get_unchecked_mut(self.n) = c };
        self.n += 1;
    }
    #[inline(always)]
    fn u(&mut self, k: &[u8], v: u64) {
        self.put(k);
        self.dec(v);
    }
    #[inline(always)]
    fn i(&mut self, k: &[u8], v: i64) {
        self.put(k);
        if v < 0 {
            self.byte(b'-');
        }
        self.dec(v.unsigned_abs());
    }
    #[inline(always)]
    fn ou(&mut self, k: &[u8], v: Option<u64>) {
        if let Some(v) = v {
            self.u(k, v);
        }
    }
    #[inline(always)]
    fn b(&mut self, k: &[u8], v: bool) {
        self.put(k);
        self.put(if v { b"true" } else { b"false" });
    }
    #[inline(always)]
    fn s(&mut self, k: &[u8], v: &str) {
        self.put(k);
        self.escape(v);
    }
    #[inline(always)]
    fn os(&mut self, k: &[u8], v: Option<&str>) {
        if let Some(v) = v {
            self.s(k, v);
        }
    }
    /// A string the shim itself chose (call, kind, errno and strategy names): never needs
    /// escaping, so it is copied as is.
    #[inline(always)]
    fn lit(&mut self, k: &[u8], v: &str) {
        debug_assert!(v.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\'), "{v}");
        self.put(k);
        self.byte(b'"');
        self.put(v.as_bytes());
        self.byte(b'"');
    }
    #[inline(always)]
    fn olit(&mut self, k: &[u8], v: Option<&str>) {
        if let Some(v) = v {
            self.lit(k, v);
        }
    }
    /// Decimal digits, written straight into place (no intermediate buffer, no memcpy call per
    /// number); four digits per step so the division chain stays short.
    #[inline(always)]
    fn dec(&mut self, mut v: u64) {
        let len = v.checked_ilog10().map_or(1, |l| l as usize + 1);
        // SAFETY: as in put.
        let d = unsafe { self.b.get_unchecked_mut(self.n..self.n + len) };
        let mut i = len;
        let pair = |x: u32| {
            let p = x as usize * 2;
            [DIGIT_PAIRS[p], DIGIT_PAIRS[p + 1]]
        };
        while i >= 4 {
            let r = (v % 10_000) as u32;
            v /= 10_000;
            d[i - 4..i - 2].copy_from_slice(&pair(r / 100));
            d[i - 2..i].copy_from_slice(&pair(r % 100));
            i -= 4;
        }
        let mut v = v as u32;
        if i >= 2 {
            d[i - 2..i].copy_from_slice(&pair(v % 100));
            v /= 100;
            i -= 2;
        }
        if i == 1 {
            d[0] = b'0' + v as u8;
        }
        self.n += len;
    }
    /// `"0x…"`, lower case, no leading zeros.
    fn hex_str(&mut self, mut v: u64) {
        let digits = if v == 0 { 1 } else { (64 - v.leading_zeros()).div_ceil(4) as usize };
        self.put(b"\"0x");
        // SAFETY: as in put.
        let d = unsafe { self.b.get_unchecked_mut(self.n..self.n + digits) };
        for c in d.iter_mut().rev() {
            *c = HEX[(v & 0xf) as usize];
            v >>= 4;
        }
        self.n += digits;
        self.byte(b'"');
    }
    #[inline(always)]
    fn hex(&mut self, k: &[u8], v: Option<u64>) {
        if let Some(v) = v {
            self.put(k);
            self.hex_str(v);
        }
    }
    /// JSON string with serde_json's escaping.
    fn escape(&mut self, s: &str) {
        self.byte(b'"');
        if s.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\') {
            self.put(s.as_bytes());
            self.byte(b'"');
            return;
        }
        for &c in s.as_bytes() {
            match c {
                b'"' => self.put(b"\\\""),
                b'\\' => self.put(b"\\\\"),
                b'\n' => self.put(b"\\n"),
                b'\r' => self.put(b"\\r"),
                b'\t' => self.put(b"\\t"),
                0x08 => self.put(b"\\b"),
                0x0c => self.put(b"\\f"),
                c if c < 0x20 => {
                    self.put(b"\\u00");
                    self.byte(HEX[(c >> 4) as usize]);
                    self.byte(HEX[(c & 0xf) as usize]);
                }
                c => self.byte(c),
            }
        }
        self.byte(b'"');
    }
}

impl RegLine<'_> {
    /// How many bytes [`RegLine::write_into`] may need.
    pub fn bound(&self) -> usize {
        let m = &self.meta;
        let strs = [
            self.host,
            self.call,
            self.symbol_version.unwrap_or(""),
            self.device.unwrap_or(""),
            self.mem_region.as_deref().unwrap_or(""),
            self.errno_name.unwrap_or(""),
            m.strategy.unwrap_or(""),
            m.change.unwrap_or(""),
        ];
        FIXED_MAX + strs.iter().map(|s| 6 * s.len() + 2).sum::<usize>()
    }

    /// Appends the line (with its '\n') to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.bound(), 0);
        let n = self.write_into(&mut out[start..]);
        out.truncate(start + n);
    }

    /// Writes the line (with its '\n') at the start of `b`, which must hold [`RegLine::bound`]
    /// bytes (a reused scratch buffer: no zeroing per record); returns its length.
    pub fn write_into(&self, b: &mut [u8]) -> usize {
        // The one bounds check: every write below stays within bound() (tested with the
        // longest values), so W writes without checking each field.
        if b.len() < self.bound() {
            return 0;
        }
        let mut w = W { b, n: 0 };
        w.put(b"{\"v\":");
        w.dec(SCHEMA_VERSION as u64);
        w.lit(k!("kind"), if self.dereg { "dereg" } else { "reg" });
        w.u(k!("seq"), self.seq);
        w.u(k!("time_ns"), self.time_ns);
        w.s(k!("host"), self.host);
        w.u(k!("pid"), self.pid as u64);
        w.u(k!("tid"), self.tid as u64);
        if let Some(r) = self.rank {
            w.i(k!("rank"), r);
        }
        if let Some(r) = self.local_rank {
            w.i(k!("local_rank"), r);
        }
        w.lit(k!("call"), self.call);
        w.olit(k!("symbol_version"), self.symbol_version);
        w.os(k!("device"), self.device);
        w.hex(k!("pd"), self.pd);
        w.hex(k!("addr"), self.addr);
        w.ou(k!("length"), self.length);
        w.ou(k!("addr_page_offset"), self.addr_page_offset);
        w.ou(k!("addr_align"), self.addr_align);
        w.hex(k!("iova"), self.iova);
        w.ou(k!("iova_page_offset"), self.iova_page_offset);
        if let Some(a) = self.access {
            w.u(k!("access"), a as u64);
            w.put(k!("access_names"));
            w.byte(b'[');
            let mut first = true;
            let mut rest = a;
            for (n, bit) in mrshim_verbs::access::NAMES {
                if a & bit != 0 {
                    if !first {
                        w.byte(b',');
                    }
                    first = false;
                    w.byte(b'"');
                    w.put(n.as_bytes());
                    w.byte(b'"');
                    rest &= !bit;
                }
            }
            // unknown bits as hex strings, lowest first
            while rest != 0 {
                let bit = rest & rest.wrapping_neg();
                rest &= rest - 1;
                if !first {
                    w.byte(b',');
                }
                first = false;
                w.hex_str(bit as u64);
            }
            w.byte(b']');
        }
        w.b(k!("relaxed_ordering"), self.access.unwrap_or(0) & mrshim_verbs::access::RELAXED_ORDERING != 0);
        if let Some(fd) = self.dmabuf_fd {
            w.i(k!("dmabuf_fd"), fd as i64);
        }
        w.ou(k!("dmabuf_offset"), self.dmabuf_offset);
        if let Some(kd) = self.mem_kind {
            w.lit(k!("mem_kind"), mem_kind_str(kd));
        }
        w.os(k!("mem_region"), self.mem_region.as_deref());
        if let Some(f) = self.mem_fully_mapped {
            w.b(k!("mem_fully_mapped"), f);
        }
        w.ou(k!("memlock_soft"), self.memlock_soft);
        w.ou(k!("memlock_hard"), self.memlock_hard);
        w.u(k!("registered_bytes"), self.registered_bytes);
        w.ou(k!("registered_bytes_after"), self.registered_bytes_after);
        w.lit(k!("result"), result(self.meta.refused, self.ok));
        w.hex(k!("mr"), self.mr);
        w.ou(k!("lkey"), self.lkey.map(u64::from));
        w.ou(k!("rkey"), self.rkey.map(u64::from));
        if let Some(e) = self.errno {
            w.i(k!("errno"), e as i64);
        }
        w.olit(k!("errno_name"), self.errno_name);
        w.u(k!("duration_ns"), self.duration_ns);
        if self.probe {
            w.b(k!("probe"), true);
        }
        let m = &self.meta;
        if m.injected {
            w.b(k!("injected"), true);
        }
        w.u(k!("attempt"), m.attempt as u64);
        w.ou(k!("parent_seq"), m.parent_seq);
        w.olit(k!("strategy"), m.strategy);
        w.os(k!("change"), m.change);
        if m.learned {
            w.b(k!("learned"), true);
        }
        w.ou(k!("reg_seq"), self.reg_seq);
        w.hex(k!("used_addr"), self.used_addr);
        w.ou(k!("used_length"), self.used_length);
        w.ou(k!("used_access"), self.used_access.map(u64::from));
        if let Some(kd) = self.used_mem_kind {
            w.lit(k!("used_mem_kind"), mem_kind_str(kd));
        }
        w.put(b"}\n");
        w.n
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
            result: result(self.meta.refused, self.ok).into(),
            mr: hex(self.mr),
            lkey: self.lkey,
            rkey: self.rkey,
            errno: self.errno,
            errno_name: self.errno_name.map(Into::into),
            duration_ns: self.duration_ns,
            probe: self.probe,
            injected: self.meta.injected,
            attempt: self.meta.attempt,
            parent_seq: self.meta.parent_seq,
            strategy: self.meta.strategy.map(Into::into),
            learned: self.meta.learned,
            change: self.meta.change.map(Into::into),
            symbol_version: self.symbol_version.map(Into::into),
            reg_seq: self.reg_seq,
            mem_region: self.mem_region.as_deref().map(Into::into),
            mem_fully_mapped: self.mem_fully_mapped,
            registered_bytes_after: self.registered_bytes_after,
            used_addr: hex(self.used_addr),
            used_length: self.used_length,
            used_access: self.used_access,
            used_mem_kind: self.used_mem_kind,
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
#[cfg(test)]
mod property_tests {
    use super::*;
    use proptest::prelude::*;

    const KINDS: [MemKind; 8] = [
        MemKind::HostAnon,
        MemKind::HostStack,
        MemKind::Hugepage,
        MemKind::FileReadonly,
        MemKind::FileWritable,
        MemKind::Device,
        MemKind::Unmapped,
        MemKind::Unknown,
    ];

    fn kind() -> impl Strategy<Value = Option<MemKind>> {
        proptest::option::of(proptest::sample::select(&KINDS[..]))
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
        (bool, u64, u64, u32, u32, Option<i64>, Option<i64>, Option<u64>),
        (Option<u64>, Option<u64>, Option<u64>, Option<u64>, Option<u64>, Option<u64>, Option<u32>, Option<i32>),
        (Option<u64>, Option<bool>, Option<u64>, Option<u64>, u64, Option<u64>, bool, Option<u64>),
        (Option<u32>, Option<u32>, Option<i32>, u64, bool, Option<u64>, Option<u64>, Option<u64>),
        (Option<u32>, u32, Option<u64>, bool, bool, bool),
    );

    fn nums() -> impl Strategy<Value = Nums> {
        use proptest::option::of;
        let u = any::<u64>;
        (
            (any::<bool>(), u(), u(), any::<u32>(), any::<u32>(), of(any::<i64>()), of(any::<i64>()), of(u())),
            (of(u()), of(u()), of(u()), of(u()), of(u()), of(u()), of(any::<u32>()), of(any::<i32>())),
            (of(u()), of(any::<bool>()), of(u()), of(u()), u(), of(u()), any::<bool>(), of(u())),
            (of(any::<u32>()), of(any::<u32>()), of(any::<i32>()), u(), any::<bool>(), of(u()), of(u()), of(u())),
            (of(any::<u32>()), any::<u32>(), of(u()), any::<bool>(), any::<bool>(), any::<bool>()),
        )
    }

    proptest! {
        #[test]
        fn every_field_parses_back_exactly(s in strings(), n in nums(), k in kind(), uk in kind()) {
            let ((dereg, seq, time_ns, pid, tid, rank, local_rank, pd), a, b, c, d) = n;
            let (addr, length, addr_page_offset, addr_align, iova, iova_page_offset, access, dmabuf_fd) = a;
            let (dmabuf_offset, mem_fully_mapped, memlock_soft, memlock_hard, registered_bytes, registered_bytes_after, ok, mr) = b;
            let (lkey, rkey, errno, duration_ns, probe, reg_seq, used_addr, used_length) = c;
            let (used_access, attempt, parent_seq, injected, learned, refused) = d;
            let l = RegLine {
                dereg, seq, time_ns, host: &s.host, pid, tid, rank, local_rank, call: &s.call,
                symbol_version: s.symbol_version.as_deref(), device: s.device.as_deref(), pd, addr, length,
                addr_page_offset, addr_align, iova, iova_page_offset, access, dmabuf_fd, dmabuf_offset,
                mem_kind: k, mem_region: s.mem_region.as_deref().map(Arc::from), mem_fully_mapped,
                memlock_soft, memlock_hard, registered_bytes, registered_bytes_after, ok, mr, lkey, rkey,
                errno, errno_name: s.errno_name.as_deref(), duration_ns, probe, reg_seq, used_addr,
                used_length, used_access, used_mem_kind: uk,
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

#[cfg(test)]
mod number_tests {
    use super::*;

    fn dec(v: u64) -> String {
        let mut b = [0u8; 32];
        let mut w = W { b: &mut b, n: 0 };
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
