//! `mrshim doctor --json` reports given to analyze: each becomes facts about its host.
use crate::collect::Collector;
use crate::event::{Event, Fact, Flag, Lib};
use mrshim_doctor::{report::memlock_soft, Report, Status};
use std::io::{BufRead, Read};

const MAX_REPORT: u64 = 16 << 20;

/// A doctor report starts with `{` and names its schema near the top.
pub fn looks_like_report(r: &mut Box<dyn BufRead>) -> bool {
    let Ok(head) = r.fill_buf() else { return false };
    let t = head.iter().position(|b| !b.is_ascii_whitespace()).map(|i| &head[i..]).unwrap_or(&[]);
    t.first() == Some(&b'{') && memchr::memmem::find(&head[..head.len().min(4096)], b"\"mrshim_doctor\"").is_some()
}

pub fn ingest(r: Box<dyn BufRead>, idx: usize, col: &mut Collector) {
    let mut s = String::new();
    let name = col.files[idx].path.clone();
    if r.take(MAX_REPORT).read_to_string(&mut s).is_err() {
        col.note(format!("{name}: doctor report is not valid UTF-8; skipped"));
        return;
    }
    col.files[idx].bytes = s.len() as u64;
    col.files[idx].lines = s.lines().count() as u64;
    let rep: Report = match serde_json::from_str(&s) {
        Ok(r) => r,
        Err(e) => {
            col.note(format!("{name}: doctor report could not be read ({e}); skipped"));
            return;
        }
    };
    col.files[idx].recognised = 1;
    col.doctor_reports += 1;
    let host = Some(rep.host.clone());
    let mut add = |f: Fact, text: String| {
        col.add(Event::Fact { lib: Lib::Doctor, host: host.clone(), pid: None, fact: f }, idx, 1, &text)
    };
    if let Some(m) = memlock_soft(&rep) {
        add(
            Fact::Memlock(m),
            format!("doctor {}: memlock {}", rep.host, rep.check("memlock").map(|c| c.value.as_str()).unwrap_or("")),
        );
    }
    for c in &rep.checks {
        let text = format!("doctor {}: [{}] {}: {}", rep.host, c.status.label(), c.id, c.value);
        match c.id.as_str() {
            "max_map_count" => {
                if let Some(n) = c.raw.get("value").and_then(|v| v.as_u64()) {
                    add(Fact::MaxMapCount(n), text);
                }
            }
            "peer_memory" => {
                let gpu = c.raw.get("gpu_driver").and_then(|v| v.as_str()).unwrap_or("");
                let pm = c.raw.get("peermem").and_then(|v| v.as_bool()).unwrap_or(false);
                if !gpu.is_empty() {
                    add(Fact::Flag(if pm { Flag::PeermemLoaded } else { Flag::PeermemMissing }), text);
                }
            }
            "pcie" if c.status == Status::Fail => add(Fact::Flag(Flag::AcsOn), text),
            "iommu" if c.status == Status::Warn => add(Fact::Flag(Flag::IommuTranslated), text),
            "container" if c.raw.get("kind").map(|k| !k.is_null()).unwrap_or(false) => {
                add(Fact::Flag(Flag::Container), text)
            }
            "cap_ipc_lock" if c.raw.get("present").and_then(|v| v.as_bool()) == Some(false) => {
                add(Fact::Flag(Flag::NoIpcLock), text)
            }
            "versions" => {
                for k in ["kernel", "rdma_core", "mlx5_core"] {
                    if let Some(v) = c.raw.get(k).and_then(|v| v.as_str()) {
                        add(Fact::Version(k.replace('_', "-"), v.to_string()), text.clone());
                    }
                }
            }
            "env" => {
                if let Some(o) = c.raw.as_object() {
                    for (k, v) in o {
                        if let Some(v) = v.as_str() {
                            add(Fact::Env(k.clone(), v.to_string()), text.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
