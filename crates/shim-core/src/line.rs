//! The hot-path record writer: one `reg`/`dereg`/`rereg` line straight into a reusable byte buffer, no
//! allocation per record. It must produce exactly what `serde_json` would for the same
//! `mrshim_record::Reg` (checked by the tests below, field by field, by parsing it back).

use mrshim_record::{CallResult, Kind, MemKind, Reg, SCHEMA_VERSION};
use std::sync::Arc;

/// Everything a `reg`/`dereg`/`rereg` line holds, borrowed.
#[derive(Debug, Clone, Default)]
pub struct RegLine<'a> {
    pub kind: Kind,
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
    /// `ibv_rereg_mr`: its flags, the changes asked for, its return code and that code's name.
    pub rereg_flags: Option<i32>,
    pub new_addr: Option<u64>,
    pub new_length: Option<u64>,
    pub new_access: Option<u32>,
    pub new_pd: Option<u64>,
    pub rereg_ret: Option<i32>,
    pub rereg_ret_name: Option<&'a str>,
    /// How the record relates to the application's call (retry attempts, refusals, injection).
    pub meta: crate::Meta<'a>,
}

/// The `result` field: a strategy the retry engine refused to try, or the call's outcome.
fn result(refused: bool, ok: bool) -> CallResult {
    if refused {
        CallResult::Refused
    } else if ok {
        CallResult::Ok
    } else {
        CallResult::Error
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
const FIXED_MAX: usize = 2304;

/// Writes into a slice already long enough for the line (see [`RegLine::bound`]): plain indexed
/// copies, no capacity check or growth per field (a Vec's were most of the formatting cost).
struct LineWriter<'b> {
    b: &'b mut [u8],
    n: usize,
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const DIGIT_PAIRS: &[u8; 200] = b"00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

impl LineWriter<'_> {
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
    fn uint(&mut self, k: &[u8], v: u64) {
        self.put(k);
        self.dec(v);
    }
    #[inline(always)]
    fn int(&mut self, k: &[u8], v: i64) {
        self.put(k);
        if v < 0 {
            self.byte(b'-');
        }
        self.dec(v.unsigned_abs());
    }
    #[inline(always)]
    fn opt_uint(&mut self, k: &[u8], v: Option<u64>) {
        if let Some(v) = v {
            self.uint(k, v);
        }
    }
    #[inline(always)]
    fn boolean(&mut self, k: &[u8], v: bool) {
        self.put(k);
        self.put(if v { b"true" } else { b"false" });
    }
    #[inline(always)]
    fn string(&mut self, k: &[u8], v: &str) {
        self.put(k);
        self.escape(v);
    }
    #[inline(always)]
    fn opt_string(&mut self, k: &[u8], v: Option<&str>) {
        if let Some(v) = v {
            self.string(k, v);
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
    fn opt_lit(&mut self, k: &[u8], v: Option<&str>) {
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
            self.rereg_ret_name.unwrap_or(""),
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
        // longest values), so LineWriter writes without checking each field.
        if b.len() < self.bound() {
            return 0;
        }
        let mut w = LineWriter { b, n: 0 };
        w.put(b"{\"v\":");
        w.dec(SCHEMA_VERSION as u64);
        w.lit(k!("kind"), self.kind.name());
        w.uint(k!("seq"), self.seq);
        w.uint(k!("time_ns"), self.time_ns);
        w.string(k!("host"), self.host);
        w.uint(k!("pid"), self.pid as u64);
        w.uint(k!("tid"), self.tid as u64);
        if let Some(r) = self.rank {
            w.int(k!("rank"), r);
        }
        if let Some(r) = self.local_rank {
            w.int(k!("local_rank"), r);
        }
        w.lit(k!("call"), self.call);
        w.opt_lit(k!("symbol_version"), self.symbol_version);
        w.opt_string(k!("device"), self.device);
        w.hex(k!("pd"), self.pd);
        w.hex(k!("addr"), self.addr);
        w.opt_uint(k!("length"), self.length);
        w.opt_uint(k!("addr_page_offset"), self.addr_page_offset);
        w.opt_uint(k!("addr_align"), self.addr_align);
        w.hex(k!("iova"), self.iova);
        w.opt_uint(k!("iova_page_offset"), self.iova_page_offset);
        if let Some(a) = self.access {
            w.uint(k!("access"), a as u64);
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
        w.boolean(k!("relaxed_ordering"), self.access.unwrap_or(0) & mrshim_verbs::access::RELAXED_ORDERING != 0);
        if let Some(fd) = self.dmabuf_fd {
            w.int(k!("dmabuf_fd"), fd as i64);
        }
        w.opt_uint(k!("dmabuf_offset"), self.dmabuf_offset);
        if let Some(kd) = self.mem_kind {
            w.lit(k!("mem_kind"), kd.name());
        }
        w.opt_string(k!("mem_region"), self.mem_region.as_deref());
        if let Some(f) = self.mem_fully_mapped {
            w.boolean(k!("mem_fully_mapped"), f);
        }
        w.opt_uint(k!("memlock_soft"), self.memlock_soft);
        w.opt_uint(k!("memlock_hard"), self.memlock_hard);
        w.uint(k!("registered_bytes"), self.registered_bytes);
        w.opt_uint(k!("registered_bytes_after"), self.registered_bytes_after);
        w.lit(k!("result"), result(self.meta.refused, self.ok).name());
        w.hex(k!("mr"), self.mr);
        w.opt_uint(k!("lkey"), self.lkey.map(u64::from));
        w.opt_uint(k!("rkey"), self.rkey.map(u64::from));
        if let Some(e) = self.errno {
            w.int(k!("errno"), e as i64);
        }
        w.opt_lit(k!("errno_name"), self.errno_name);
        w.uint(k!("duration_ns"), self.duration_ns);
        if self.probe {
            w.boolean(k!("probe"), true);
        }
        let m = &self.meta;
        if m.injected {
            w.boolean(k!("injected"), true);
        }
        w.uint(k!("attempt"), m.attempt as u64);
        w.opt_uint(k!("parent_seq"), m.parent_seq);
        w.opt_lit(k!("strategy"), m.strategy);
        w.opt_string(k!("change"), m.change);
        if m.learned {
            w.boolean(k!("learned"), true);
        }
        w.opt_uint(k!("reg_seq"), self.reg_seq);
        w.hex(k!("used_addr"), self.used_addr);
        w.opt_uint(k!("used_length"), self.used_length);
        w.opt_uint(k!("used_access"), self.used_access.map(u64::from));
        if let Some(kd) = self.used_mem_kind {
            w.lit(k!("used_mem_kind"), kd.name());
        }
        if let Some(f) = self.rereg_flags {
            w.int(k!("rereg_flags"), f as i64);
        }
        w.hex(k!("new_addr"), self.new_addr);
        w.opt_uint(k!("new_length"), self.new_length);
        w.opt_uint(k!("new_access"), self.new_access.map(u64::from));
        w.hex(k!("new_pd"), self.new_pd);
        if let Some(r) = self.rereg_ret {
            w.int(k!("rereg_ret"), r as i64);
        }
        w.opt_lit(k!("rereg_ret_name"), self.rereg_ret_name);
        w.put(b"}\n");
        w.n
    }

    /// The same record as the schema type (what the line must parse back to).
    pub fn to_reg(&self) -> Reg {
        let hex = |v: Option<u64>| v.map(|v| format!("{v:#x}"));
        Reg {
            v: SCHEMA_VERSION,
            kind: Some(self.kind),
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
            result: result(self.meta.refused, self.ok),
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
            rereg_flags: self.rereg_flags,
            new_addr: hex(self.new_addr),
            new_length: self.new_length,
            new_access: self.new_access,
            new_pd: hex(self.new_pd),
            rereg_ret: self.rereg_ret,
            rereg_ret_name: self.rereg_ret_name.map(Into::into),
            ..Reg::default()
        }
    }
}

#[cfg(test)]
mod tests;
