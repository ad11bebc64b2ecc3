//! The shim's JSON-lines records (crate mrshim-record). Unknown fields are ignored; records of a newer
//! schema version are read leniently, with a note.
use crate::event::{Event, Fact, Lib, RegEv, Source};
use mrshim_record::{CallResult, MemKind, Reg, SCHEMA_VERSION};
use serde_json::Value;

/// Parses one record line. Returns false if it is not a shim record at all (caller may try other formats).
pub fn parse(line: &str, st: &mut ShimState, lineno: u64, emit: &mut dyn FnMut(Event)) -> bool {
    let Some(kind) = field_str(line, "\"kind\":\"") else {
        return false;
    };
    match kind {
        "reg" | "dereg" => match serde_json::from_str::<Reg>(line) {
            Ok(r) => {
                st.version(r.v, emit);
                if kind == "reg" {
                    // learned/attempt records of older shims described the shadow in addr/access/mem_kind;
                    // newer ones keep the caller's request there and put the shadow in used_*
                    let caller_fields = !r.learned
                        || r.used_addr.is_some()
                        || r.used_length.is_some()
                        || r.used_access.is_some()
                        || r.used_mem_kind.is_some();
                    reg(r, caller_fields, lineno, emit);
                } else {
                    let fact = Fact::Dereg { time_ns: r.time_ns, rank: r.rank };
                    emit(Event::Fact { lib: Lib::Shim, host: Some(r.host), pid: Some(r.pid), fact });
                }
                true
            }
            Err(_) => lenient(line, kind, st, emit),
        },
        "rereg" => match serde_json::from_str::<Reg>(line) {
            Ok(r) => {
                st.version(r.v, emit);
                let fact = Fact::Rereg { result: r.result };
                emit(Event::Fact { lib: Lib::Shim, host: Some(r.host.clone()), pid: Some(r.pid), fact });
                // a rereg the provider failed is a failed call of the application's; a refusal
                // (reg() skips it) or a success is not a registration
                if r.result == CallResult::Error {
                    reg(r, true, lineno, emit);
                }
                true
            }
            Err(_) => lenient(line, kind, st, emit),
        },
        "violation" => {
            let r: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            let host = r.get("host").and_then(Value::as_str).map(String::from);
            let pid = r.get("pid").and_then(Value::as_u64).map(|p| p as u32);
            let kind = r.get("call").and_then(Value::as_str).unwrap_or("violation").to_string();
            st.records += 1;
            emit(Event::Fact { lib: Lib::Shim, host, pid, fact: Fact::BounceViolation { kind, record: true } });
            true
        }
        "config" | "summary" | "policy" | "error" => lenient(line, kind, st, emit),
        _ => {
            st.malformed += 1;
            true
        }
    }
}

#[derive(Default)]
pub struct ShimState {
    pub records: u64,
    pub malformed: u64,
    pub newer: Vec<u32>,
}

impl ShimState {
    fn version(&mut self, v: u32, emit: &mut dyn FnMut(Event)) {
        self.records += 1;
        if v > SCHEMA_VERSION && !self.newer.contains(&v) {
            self.newer.push(v);
            emit(Event::Note(format!(
                "shim records of schema version {v} (this mrshim reads {SCHEMA_VERSION}): read leniently, new fields ignored"
            )));
        }
    }
}

/// Value of `"key":"value"` without parsing the whole object (fast dispatch).
fn field_str<'a>(line: &'a str, pat: &str) -> Option<&'a str> {
    static KIND: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new("\"kind\":\""));
    let i = if pat == "\"kind\":\"" { KIND.find(line.as_bytes())? } else { line.find(pat)? } + pat.len();
    let end = line[i..].find('"')?;
    Some(&line[i..i + end])
}

pub fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    let h = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u64::from_str_radix(h, 16).ok()
}

/// A failed record as a reader wants to see it in the evidence, instead of the raw JSON.
fn describe(r: &Reg) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(r.host.len() + r.call.len() + 96);
    s.push_str(&r.host);
    // writing into a String cannot fail
    let _ = match r.rank {
        Some(rank) => write!(s, " rank {rank}: "),
        None => write!(s, " pid {}: ", r.pid),
    };
    s.push_str(&r.call);
    if let Some(l) = r.length {
        let _ = write!(s, " {}", crate::findings::human_size(l));
    }
    let _ = write!(s, " {}", r.mem_kind.map_or("unknown", MemKind::name));
    if let Some(a) = r.access {
        let _ = write!(s, " access={a:#x}");
    }
    if let Some(e) = r.errno {
        s.push_str(" -> ");
        match &r.errno_name {
            Some(n) => s.push_str(n),
            None => s.push_str(&crate::errno::name(e)),
        }
    }
    if let Some(m) = r.memlock_soft {
        let _ = write!(s, ", memlock {}", crate::findings::human_size(m));
    }
    if r.injected {
        s.push_str(", injected");
    }
    if let Some(a) = &r.addr {
        let _ = write!(s, ", addr {a}");
    }
    s
}

fn reg(r: Reg, caller_fields: bool, lineno: u64, emit: &mut dyn FnMut(Event)) {
    // A refusal records a strategy that was not tried: no call reached the device. One that
    // kept a region out of bounce (its contract) carries the fix: a note, once per wording.
    if r.probe || r.result == CallResult::Refused {
        if let Some(why) = r.change.as_deref().filter(|c| c.starts_with(mrshim_record::REFUSED_OUTSIDE_BOUNCE_CONTRACT))
        {
            let kind = r.mem_kind.map_or("unknown", |k| k.name());
            emit(Event::Note(format!("{} of {kind} memory was not bounced by mrshim, {why}", r.call)));
        }
        return;
    }
    // Linked to an application call (a retry attempt, or a learned strategy that no longer
    // worked, tried before the call): a retry, not one of the application's calls.
    let attempt = if r.parent_seq.is_some() { r.attempt.max(1) } else { r.attempt };
    let evid = (r.result != CallResult::Ok).then(|| (lineno, describe(&r)));
    let addr = r.addr.as_deref().and_then(parse_hex);
    let relaxed = r.relaxed_ordering || r.access.map(|a| a & mrshim_access::RELAXED_ORDERING != 0).unwrap_or(false);
    let iova_misaligned =
        matches!((r.iova_page_offset, r.addr_page_offset), (Some(a), Some(b)) if a != b) && r.call.contains("iova");
    // a range not fully covered by mappings is an invalid address whatever the kind of its start
    let mem = if r.mem_fully_mapped == Some(false) && r.mem_kind != Some(MemKind::Device) {
        Some(MemKind::Unmapped)
    } else {
        r.mem_kind
    };
    let memlock = match (r.memlock_soft, r.memlock_hard) {
        (Some(s), _) => Some(Some(s)),
        (None, Some(_)) => Some(None),
        _ => None,
    };
    let over = matches!((r.memlock_soft, r.length), (Some(m), Some(l)) if r.registered_bytes.saturating_add(l) > m);
    let learned = r.learned;
    emit(Event::Reg(RegEv {
        lib: Some(Lib::Shim),
        host: Some(r.host),
        pid: Some(r.pid),
        rank: r.rank,
        call: r.call,
        ok: r.result == CallResult::Ok,
        errno: r.errno,
        mem: mem.filter(|_| caller_fields),
        access: r.access.filter(|_| caller_fields),
        length: r.length,
        addr: addr.filter(|_| caller_fields),
        relaxed: caller_fields.then_some(relaxed),
        mapped: r.mem_fully_mapped.filter(|_| caller_fields),
        source: Source::Record,
        learned,
        iova_misaligned,
        over_memlock: over,
        memlock,
        time_ns: Some(r.time_ns),
        injected: r.injected,
        strategy: r.strategy,
        attempt,
        evid,
        ..Default::default()
    }));
}

fn mem_kind(s: &str) -> Option<MemKind> {
    serde_json::from_value(Value::String(s.to_string())).ok()
}

/// Records that do not fit `Reg` (config/summary/policy, or a newer schema): take what is recognisable.
fn lenient(line: &str, kind: &str, st: &mut ShimState, emit: &mut dyn FnMut(Event)) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        st.malformed += 1;
        return true;
    };
    st.version(v.get("v").and_then(Value::as_u64).unwrap_or(0) as u32, emit);
    let host = v.get("host").and_then(Value::as_str).map(String::from);
    let pid = v.get("pid").and_then(Value::as_u64).map(|p| p as u32);
    let fact = |f: Fact| Event::Fact { lib: Lib::Shim, host: host.clone(), pid, fact: f };
    if let Some(r) = v.get("rank").and_then(Value::as_i64) {
        emit(fact(Fact::RankOf(r)));
    }
    match kind {
        "config" => {
            emit(fact(job_of(&v)));
            match (v.get("memlock_soft").and_then(Value::as_u64), v.get("memlock_hard")) {
                (Some(m), _) => emit(fact(Fact::Memlock(Some(m)))),
                (None, Some(_)) => emit(fact(Fact::Memlock(None))),
                _ => {}
            }
            if let Some(Value::Object(env)) = v.get("env") {
                for (k, val) in env {
                    if let Some(s) = val.as_str() {
                        emit(fact(Fact::Env(k.clone(), s.to_string())));
                    }
                }
            }
        }
        "reg" => {
            let s = |k: &str| v.get(k).and_then(Value::as_str);
            let u = |k: &str| v.get(k).and_then(Value::as_u64);
            if v.get("probe").and_then(Value::as_bool) == Some(true) {
                return true;
            }
            let access = u("access").map(|a| a as u32);
            emit(Event::Reg(RegEv {
                lib: Some(Lib::Shim),
                host: host.clone(),
                pid,
                rank: v.get("rank").and_then(Value::as_i64),
                call: s("call").unwrap_or("ibv_reg_mr").to_string(),
                ok: s("result") == Some("ok"),
                errno: v.get("errno").and_then(Value::as_i64).map(|e| e as i32),
                mem: s("mem_kind").and_then(mem_kind),
                access,
                length: u("length"),
                addr: s("addr").and_then(parse_hex),
                relaxed: Some(
                    v.get("relaxed_ordering").and_then(Value::as_bool).unwrap_or(false)
                        || access.map(|a| a & mrshim_access::RELAXED_ORDERING != 0).unwrap_or(false),
                ),
                memlock: u("memlock_soft").map(Some),
                time_ns: u("time_ns"),
                injected: v.get("injected").and_then(Value::as_bool).unwrap_or(false),
                strategy: s("strategy").map(String::from),
                attempt: u("attempt").unwrap_or(0) as u32,
                source: Source::Record,
                ..Default::default()
            }));
        }
        "summary" => {
            let calls = v.pointer("/summary/calls").and_then(Value::as_u64).unwrap_or(0);
            emit(fact(Fact::Exit { calls }));
        }
        "error" => {
            let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?");
            emit(Event::Note(format!(
                "libmrshim.so caught an internal error in {} on {} (pid {}): {}; the call was passed through to the real function",
                s("call"),
                host.as_deref().unwrap_or("?"),
                pid.map_or("?".into(), |p| p.to_string()),
                s("error")
            )));
        }
        _ => {}
    }
    true
}

/// World size and job id of a config record: its own fields when the shim writes them, else the launcher
/// variables it echoed in `env`.
fn job_of(v: &Value) -> Fact {
    const WORLD: &[&str] = &[
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "MV2_COMM_WORLD_SIZE",
        "SLURM_NTASKS",
        "SLURM_NPROCS",
        "WORLD_SIZE",
    ];
    const JOB: &[&str] = &["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "JOB_ID"];
    let env = |keys: &[&str]| keys.iter().find_map(|k| v.pointer(&format!("/env/{k}")).and_then(Value::as_str));
    let world_size = v
        .get("world_size")
        .and_then(Value::as_u64)
        .or_else(|| env(WORLD).and_then(|s| s.trim().parse().ok()))
        .filter(|n| *n > 0);
    let job_id = v
        .get("job_id")
        .and_then(|j| j.as_str().map(String::from).or_else(|| j.as_u64().map(|n| n.to_string())))
        .or_else(|| env(JOB).map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty());
    Fact::Started { world_size, job_id }
}

#[cfg(test)]
mod rereg_tests {
    /// Rereg records are counted; a refusal is no failure, a provider's failure is the
    /// application's failed call.
    #[test]
    fn rereg_records_are_counted_and_only_real_failures_fail() {
        let base = r#"{"v":1,"kind":"rereg","seq":5,"time_ns":1,"host":"h","pid":7,"tid":7,"call":"ibv_rereg_mr","addr":"0x1000","length":4096,"duration_ns":1,"rereg_flags":1,"new_addr":"0x9000","new_length":8192"#;
        let refused = format!(r#"{base},"result":"refused","errno":95,"strategy":"bounce","rereg_ret":-4}}"#);
        let ok = format!(r#"{base},"result":"ok","rereg_ret":0}}"#);
        let failed = format!(r#"{base},"result":"error","errno":95,"errno_name":"EOPNOTSUPP","rereg_ret":-4}}"#);
        let run = |lines: &[&str]| {
            let text = lines.join("\n") + "\n";
            crate::analyze_readers(vec![("log".into(), Box::new(std::io::Cursor::new(text.into_bytes())))])
        };
        let a = run(&[&refused, &ok]);
        assert_eq!(a.col.rereg, [2, 1, 0]);
        assert!(a.col.groups.is_empty(), "neither is a registration: {:?}", a.col.groups);
        assert!(a.col.notes.iter().any(|n| n.contains("1 refused by mrshim")), "{:?}", a.col.notes);
        let a = run(&[&failed]);
        assert_eq!(a.col.rereg, [1, 0, 1]);
        let (k, g) = a.col.groups.iter().next().unwrap();
        assert_eq!((k.call.as_str(), k.errno, k.ok, g.count), ("ibv_rereg_mr", Some(95), false, 1));
    }
}

#[cfg(test)]
mod bounce_contract_tests {
    /// A registration bounce would not take (outside its contract): the application's failure
    /// counts, and the refusal's fix is a note, once however many processes refused it.
    #[test]
    fn a_contract_refusal_gives_its_fix_once() {
        let call = r#"{"v":1,"kind":"reg","seq":1,"time_ns":1,"host":"h","pid":7,"tid":7,"call":"ibv_reg_mr","addr":"0x1000","length":4096,"access":7,"mem_kind":"device","duration_ns":1,"result":"error","errno":22,"errno_name":"EINVAL"}"#;
        let why = "outside the bounce contract: access REMOTE_WRITE|REMOTE_READ lets peers ... Fix: register it through dmabuf or GPU peer memory (nvidia_peermem, amdgpu peer memory)";
        let refused = |pid: u32| {
            format!(
                r#"{{"v":1,"kind":"reg","seq":2,"time_ns":1,"host":"h","pid":{pid},"tid":7,"call":"ibv_reg_mr","addr":"0x1000","length":4096,"access":7,"mem_kind":"device","duration_ns":0,"result":"refused","parent_seq":1,"strategy":"bounce","change":"{why}"}}"#
            )
        };
        let text = [call.to_string(), refused(7), call.replace("\"pid\":7", "\"pid\":8"), refused(8)].join("\n") + "\n";
        let a = crate::analyze_readers(vec![("log".into(), Box::new(std::io::Cursor::new(text.into_bytes())))]);
        let notes: Vec<&String> = a.col.notes.iter().filter(|n| n.contains("not bounced")).collect();
        assert_eq!(notes.len(), 1, "{:?}", a.col.notes);
        assert!(
            notes[0].starts_with("ibv_reg_mr of device memory was not bounced by mrshim, outside the bounce contract")
        );
        assert!(notes[0].contains("nvidia_peermem"), "{}", notes[0]);
    }
}
