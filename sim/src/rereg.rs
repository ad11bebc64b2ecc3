//! `ibv_rereg_mr`: libibverbs' own input checks (rdma-core's verbs.c), then the command as a
//! provider that has it carries it out: a new translation (new pages pinned, the old ones
//! released, new keys, as mlx5 when it cannot modify the mkey in place), a new PD, new access
//! flags. A failed command is IBV_REREG_MR_ERR_CMD with the provider's errno, and the MR keeps
//! its old state. `MRSHIM_SIM_FAULTS=rereg_mr:EOPNOTSUPP` makes the device a provider without
//! the command (rdma-core's dummy op answers EOPNOTSUPP).

use crate::api::{limits, reach_va, PINNED};
use crate::engine::MrEntry;
use crate::fault::{self, Call, Facts};
use crate::memory::{self, Request};
use crate::objects::{ctx, outer, registry, Mr, Pd};
use crate::{errno_ret, ffi};
use mrshim_verbs as v;
use mrshim_verbs::rereg::{CHANGE_ACCESS, CHANGE_PD, CHANGE_TRANSLATION, ERR_CMD, ERR_INPUT};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;

/// # Safety
/// rdma-core's contract: `mr` is an MR this library returned (or null), `pd` one of its PDs
/// when CHANGE_PD is set.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut v::ibv_mr,
    flags: c_int,
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    ffi(ERR_CMD, || {
        if mr.is_null() {
            return errno_ret(libc::EINVAL, ERR_INPUT);
        }
        // SAFETY: mr came from one of our registration functions (the caller's contract).
        let m = unsafe { &mut *mr.cast::<Mr>() };
        // libibverbs: only plain MRs, known flags, a translation with address and length, access
        // flags only with CHANGE_ACCESS.
        if m.dmabuf || mrshim_verbs::rereg::input_rejected(flags, addr as u64, len as u64, access) {
            return errno_ret(libc::EINVAL, ERR_INPUT);
        }
        if flags == 0 {
            return 0;
        }
        match command(m, flags, pd, addr as u64, len as u64, access as u32) {
            Ok(()) => 0,
            Err(e) => errno_ret(e, ERR_CMD),
        }
    })
}

/// The provider's part; on error nothing changed.
fn command(m: &mut Mr, flags: c_int, pd: *mut v::ibv_pd, addr: u64, len: u64, access: u32) -> Result<(), i32> {
    let reg = registry().map_err(|_| libc::EINVAL)?;
    // SAFETY: the MR's context is ours.
    let cx = unsafe { ctx(m.mr.context) };
    let old = cx.engine.mrs.read().unwrap().get(&m.mr.lkey).copied().ok_or(libc::EINVAL)?;
    let translate = flags & CHANGE_TRANSLATION != 0;
    let new_access = if flags & CHANGE_ACCESS != 0 { access } else { old.access };
    let (addr, len) = if translate { (addr, len) } else { (m.mr.addr as u64, m.mr.length as u64) };
    let facts = Facts { access: new_access, length: len, device_memory: false };
    if let Some(e) = fault::check(&reg.config.faults, Call::ReregMr, &facts) {
        return Err(e);
    }
    let new_pd = if flags & CHANGE_PD != 0 {
        if pd.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: pd is the caller's PD from ibv_alloc_pd.
        unsafe { (outer::<Pd, _>(pd).id, pd) }
    } else {
        (old.pd, m.mr.pd)
    };
    if flags & CHANGE_ACCESS != 0 {
        memory::check_access(new_access)?; // a registration's access rules (ib_check_mr_access)
    }
    let (iova, base, alias, pinned) = if translate {
        // the old pages are released as the new ones are pinned
        let lim = limits();
        let lim = memory::Limits { pinned_pages: lim.pinned_pages.saturating_sub(m.pinned_pages), ..lim };
        let maps = memory::current_maps();
        let (base, alias, pinned) =
            reach_va(&maps, &Request { addr, length: len, iova: addr, access: new_access }, lim)?;
        (addr, base, alias, pinned)
    } else {
        (old.iova, old.base, m.alias, m.pinned_pages)
    };
    let entry = MrEntry { pd: new_pd.0, iova, len, access: new_access, base };
    if translate {
        let key = cx.engine.new_key();
        {
            let mut mrs = cx.engine.mrs.write().unwrap();
            mrs.remove(&m.mr.lkey);
            mrs.insert(key, entry);
        }
        PINNED.fetch_add(pinned, Ordering::Relaxed);
        PINNED.fetch_sub(m.pinned_pages, Ordering::Relaxed);
        if let Some((p, n)) = std::mem::replace(&mut m.alias, alias) {
            // SAFETY: unmapping the alias the old translation used; the table no longer points at it.
            unsafe { libc::munmap(p as *mut c_void, n) };
        }
        m.pinned_pages = pinned;
        m.mr.lkey = key;
        m.mr.rkey = key;
        m.mr.addr = addr as *mut c_void;
        m.mr.length = len as usize;
    } else {
        cx.engine.mrs.write().unwrap().insert(m.mr.lkey, entry);
    }
    if new_pd.1 != m.mr.pd {
        // SAFETY: both are live PDs of this library (the MR holds the old one).
        unsafe {
            Pd::count(new_pd.1, 1);
            Pd::count(m.mr.pd, -1);
        }
    }
    m.mr.pd = new_pd.1;
    Ok(())
}
