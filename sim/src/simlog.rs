//! MRSHIM_SIM_LOG: one JSON line per registration the device saw, written with a single
//! O_APPEND write, so tests can compare what an interposer recorded with what really arrived.

use crate::fault::Call;
use crate::objects::registry;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

fn file() -> Option<&'static std::fs::File> {
    static F: OnceLock<Option<std::fs::File>> = OnceLock::new();
    F.get_or_init(|| {
        let path = registry().ok()?.config.log.clone()?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(&path)
            .map_err(|e| eprintln!("mrshim-sim: MRSHIM_SIM_LOG={path}: {e}"))
            .ok()
    })
    .as_ref()
}

pub fn call_name(c: Call) -> &'static str {
    match c {
        Call::RegMr => "ibv_reg_mr",
        Call::RegMrIova => "ibv_reg_mr_iova",
        Call::RegMrIova2 => "ibv_reg_mr_iova2",
        Call::RegDmabufMr => "ibv_reg_dmabuf_mr",
        _ => "other",
    }
}

pub fn reg<T>(entry: Call, addr: u64, len: u64, iova: u64, access: u32, fd: Option<i32>, r: &Result<*mut T, i32>) {
    let Some(mut f) = file() else { return };
    let fd = fd.map_or(String::new(), |fd| format!(",\"fd\":{fd}"));
    let res = match r {
        Ok(mr) => {
            // SAFETY: on success the pointer is a live ibv_mr (the first field of every Mr).
            let key = unsafe { (*mr.cast::<mrshim_verbs::ibv_mr>()).lkey };
            format!("\"result\":\"ok\",\"lkey\":{key}")
        }
        Err(e) => format!("\"result\":\"error\",\"errno\":{e}"),
    };
    let line = format!(
        "{{\"pid\":{},\"entry\":\"{}\",\"addr\":\"{addr:#x}\",\"length\":{len},\"iova\":\"{iova:#x}\",\"access\":{access}{fd},{res}}}\n",
        std::process::id(),
        call_name(entry)
    );
    let _ = f.write_all(line.as_bytes());
}
