//! What the shim tells the user on stderr and at exit: the NCCL-style `MRSHIM WARN` line of a
//! failed call, `MRSHIM INFO` lines, the exit summary (record and line).

use crate::config::{LogDest, PanicAt};
use crate::ident::tid;
use crate::{clock, internal, log, Call, Outcome, RegArgs, Shim};
use mrshim_record::{CallStats, Kind, Summary};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

/// Writes one line to stderr with a single write(2) (no std lock, usable anywhere).
pub fn stderr_line(s: &str) {
    let mut b = Vec::with_capacity(s.len() + 1);
    b.extend_from_slice(s.as_bytes());
    b.push(b'\n');
    let _ = log::write_all_once(2, &b);
}

/// How to ask for the GPU device current on the calling thread: set once by the preload, which
/// knows the runtimes the application loaded; unset (tests, the CLI) means no device.
static DEVICE_PROBE: OnceLock<fn() -> Option<i32>> = OnceLock::new();

/// Installs the device query used by [`Shim::say`] and the WARN line (first call wins).
pub fn set_device_probe(probe: fn() -> Option<i32>) {
    let _ = DEVICE_PROBE.set(probe);
}

/// `host:pid:tid [dev] MRSHIM`: NCCL's own prefix, so the lines of both sort and grep together.
/// `[dev]` is what NCCL puts there, the calling thread's GPU device, `[-]` without one; the rank
/// is in every record, and launchers label stderr lines with it (`srun -l`, `mpirun
/// --tag-output`).
pub fn line_prefix(host: &str, pid: u32, tid: u32, device: Option<i32>) -> String {
    let dev = device.map_or("-".to_string(), |d| d.to_string());
    format!("{host}:{pid}:{tid} [{dev}] MRSHIM")
}

impl Shim {
    /// `host:pid:tid [dev] MRSHIM <level> <msg>` on stderr (one write).
    pub fn say(&self, level: &str, msg: &str) {
        stderr_line(&format!("{} {level} {msg}", self.prefix()));
    }

    pub(crate) fn prefix(&self) -> String {
        self.prefix_with(DEVICE_PROBE.get().and_then(|probe| probe()))
    }

    fn prefix_with(&self, device: Option<i32>) -> String {
        line_prefix(&self.host, self.pid.load(Relaxed), tid(), device)
    }

    /// `host:pid:tid [dev] MRSHIM WARN ibv_reg_mr_iova2(addr=0x..., len=..., access=..., iova=0x...,
    /// mem=host-anon) failed: EINVAL (22)`. `mem` is the memory kind of the range as a record names
    /// it, with ` (not fully mapped)` when part of the range has no mapping: the line alone (a job's
    /// stderr) then tells host from GPU memory, as the record does.
    pub fn warn_line(&self, a: &RegArgs, out: &Outcome, mem: Option<(mrshim_record::MemKind, Option<bool>)>) -> String {
        let acc = mrshim_verbs::access::describe(a.access);
        let args = match a.call() {
            Call::RegMr => format!("addr={:#x}, len={}, access={acc}", a.addr, a.length),
            Call::RegMrIova | Call::RegMrIova2 => {
                format!("addr={:#x}, len={}, access={acc}, iova={:#x}", a.addr, a.length, a.iova.unwrap_or(a.addr))
            }
            Call::RegDmabufMr => format!(
                "offset={}, len={}, iova={:#x}, fd={}, access={acc}",
                a.dmabuf_offset.unwrap_or(0),
                a.length,
                a.iova.unwrap_or(a.addr),
                a.dmabuf_fd.unwrap_or(-1)
            ),
            Call::DeregMr | Call::ReregMr => format!("mr={:#x}", a.mr),
        };
        let args = match mem {
            Some((k, Some(false))) if k != mrshim_record::MemKind::Unmapped => {
                format!("{args}, mem={} (not fully mapped)", k.name())
            }
            Some((k, _)) => format!("{args}, mem={}", k.name()),
            None => args,
        };
        let e = match mrshim_verbs::errno::name(out.err) {
            Some(n) => format!("{n} ({})", out.err),
            None => format!("errno {}", out.err),
        };
        format!("{} WARN {}({args}) failed: {e}", self.prefix(), a.call().name())
    }

    pub fn summary(&self) -> Summary {
        let mut by_call = BTreeMap::new();
        let errnos = self.stats.errnos.lock().clone();
        let mut calls = 0;
        let mut failures = 0;
        for c in Call::ALL {
            let n = self.stats.calls[c.index()].load(Relaxed);
            if n == 0 {
                continue;
            }
            let f = self.stats.failures[c.index()].load(Relaxed);
            calls += n;
            failures += f;
            let mut e = BTreeMap::new();
            for ((cc, errno), k) in &errnos {
                if *cc == c {
                    let name = mrshim_verbs::errno::name(*errno).map_or_else(|| errno.to_string(), Into::into);
                    e.insert(name, *k);
                }
            }
            by_call.insert(c.name().to_string(), CallStats { calls: n, failures: f, errnos: e });
        }
        let rescued = self.retry.rescued();
        Summary {
            calls,
            failures,
            probes: self.stats.probes.load(Relaxed),
            by_call,
            bytes_registered_total: self.stats.bytes_total.load(Relaxed),
            registered_bytes: self.mrs.current(),
            peak_registered_bytes: self.mrs.peak.load(Relaxed),
            records_written: self.log.written.load(Relaxed),
            records_lost: self.log.lost.load(Relaxed),
            rescued: rescued.iter().map(|(s, n)| (s.name().to_string(), *n)).collect(),
            equivalents: rescued
                .iter()
                .map(|(s, _)| (s.name().to_string(), s.global_equivalent().to_string()))
                .collect(),
            internal_errors: internal::count(),
            violations: crate::violation::count(),
        }
    }

    /// `host:pid:tid [-] MRSHIM INFO summary: ...`: the process's, not one device's (and at exit
    /// the GPU runtime may be gone already, so it is not asked).
    pub fn summary_line(&self, s: &Summary) -> String {
        let mut fails = Vec::new();
        for (c, st) in &s.by_call {
            for (e, n) in &st.errnos {
                fails.push(format!("{c} {e} x{n}"));
            }
        }
        let f = if fails.is_empty() { String::new() } else { format!(" ({})", fails.join(", ")) };
        let calls: Vec<String> = s.by_call.iter().map(|(c, st)| format!("{c} {}", st.calls)).collect();
        let mut line = format!(
            "{} INFO summary: {} calls ({}), {} failures{f}, {} probes, {} bytes registered in total, peak {} bytes, {} bytes still registered",
            self.prefix_with(None),
            s.calls,
            calls.join(", "),
            s.failures,
            s.probes,
            s.bytes_registered_total,
            s.peak_registered_bytes,
            s.registered_bytes
        );
        if let LogDest::Path(_) | LogDest::Stderr = self.log.dest() {
            line.push_str(&format!(", {} records written, {} lost", s.records_written, s.records_lost));
        }
        if s.internal_errors > 0 {
            line.push_str(&format!(", {} internal errors (each call passed through)", s.internal_errors));
        }
        if s.violations > 0 {
            line.push_str(&format!(
                ", {} bounce coherence violations (stale bytes possible: see the WARN lines)",
                s.violations
            ));
        }
        for (name, n) in &s.rescued {
            let eq = s.equivalents.get(name).map_or("", String::as_str);
            line.push_str(&format!("; {name} rescued {n} registrations (job-wide equivalent: {eq})"));
        }
        line
    }

    /// At normal process exit: the summary record and line, once, if the process made any call;
    /// then a mapped log's blank end is trimmed (crate::logmap).
    pub fn at_exit(&self) {
        self.summarize();
        self.log.finish();
    }

    fn summarize(&self) {
        let Some(cfg) = &self.cfg else { return };
        self.debug_panic(PanicAt::Exit);
        let s = self.summary();
        if (s.calls == 0 && s.internal_errors == 0 && s.violations == 0) || self.summarized.swap(true, Relaxed) {
            return;
        }
        if self.log.enabled() {
            let mut r = self.base(Kind::Summary, clock::wall_now_ns());
            r.seq = self.seq.load(Relaxed);
            r.summary = Some(s.clone());
            r.registered_bytes = s.registered_bytes;
            self.emit(&r);
        }
        // Quiet by default, as NCCL: a process whose calls all went well prints nothing.
        let eventful =
            s.failures > 0 || s.internal_errors > 0 || s.violations > 0 || s.records_lost > 0 || !s.rescued.is_empty();
        if cfg.summary && (cfg.info || eventful) {
            // records_written now includes the summary record itself.
            stderr_line(&self.summary_line(&self.summary()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::line_prefix;

    #[test]
    fn prefix_is_nccls_with_the_device() {
        assert_eq!(line_prefix("gpu-a", 4242, 4250, Some(3)), "gpu-a:4242:4250 [3] MRSHIM");
        assert_eq!(line_prefix("cpu-b", 7, 7, None), "cpu-b:7:7 [-] MRSHIM");
    }
}
