//! A host shadow built for a bounce attempt, before an MR backs it: the region's memory, filled
//! with the application's bytes. The attempt registers it at [`Shadow::addr`]; then either the
//! MR adopts it ([`crate::fixes::adopt`]) or it is [`Shadow::abandon`]ed.

use crate::copy::{CopyEngine, HostCopy};
use crate::live;
use crate::pool::{map_anon, unmap};
use crate::region::{Maps, Region, View};
use mrshim_forklock::ForkLock;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

pub const PAGE: u64 = 4096;

pub struct Shadow {
    pub(crate) region: Region,
}

/// Where the application's buffer lives, as the FFI layer found out: which engine copies it.
pub enum Memory {
    /// Device memory of a loaded GPU runtime: its engine, or why it cannot be used.
    Device(Result<Box<dyn CopyEngine>, String>),
    /// Host memory the shim can read.
    Host,
    /// Neither; the reasons GPU runtimes that are loaded were not trusted (may be empty).
    Unknown { disabled: Vec<String> },
}

impl Shadow {
    /// The host address to register (same page offset as the caller's IOVA).
    pub fn addr(&self) -> u64 {
        self.region.shadow as u64
    }

    /// Builds a shadow for [app, app+len) and fills it with the current contents. `memory` is
    /// asked only once the request itself is valid.
    pub fn prepare(
        app: u64,
        len: u64,
        iova: u64,
        access: u32,
        memory: impl FnOnce() -> Memory,
    ) -> Result<Shadow, String> {
        if len == 0 || iova % PAGE != app % PAGE {
            return Err("length 0, or iova and address with different page offsets".into());
        }
        let engine: Box<dyn CopyEngine> = match memory() {
            Memory::Device(e) => e?,
            Memory::Host => Box::new(HostCopy),
            Memory::Unknown { disabled } => {
                return Err(if disabled.is_empty() {
                    format!(
                        "{app:#x} is neither host memory nor device memory of a loaded GPU runtime (CUDA, HIP, MACA)"
                    )
                } else {
                    format!("{app:#x} is not host memory and no trusted GPU runtime owns it: {}", disabled.join("; "))
                });
            }
        };
        let remote_write = access & mrshim_verbs::access::REMOTE_WRITE != 0;
        let remote_read = access & mrshim_verbs::access::REMOTE_READ != 0;
        let region = |shadow, baseline, maps| Region {
            ctx: 0,
            lkey: 0,
            iova,
            len,
            app,
            shadow,
            baseline,
            maps,
            remote_write,
            remote_read,
            engine,
            folded: AtomicU64::new(u64::MAX),
            gone: AtomicBool::new(false),
            said_inaccessible: AtomicBool::new(false),
            pid: std::process::id(),
            born: crate::state::STATE.epoch.load(std::sync::atomic::Ordering::Acquire),
        };
        if let Some(r) = live::containing(app, len) {
            // Peers may have written the shared shadow since its last sync: only the bytes the
            // application changed go over (a fold), not the whole buffer.
            let d = (app - r.app) as usize;
            let region = region(r.shadow + d, r.baseline + d, r.maps.clone());
            region.fold_app_writes(false);
            return Ok(Shadow { region });
        }
        let off = app % PAGE;
        let maplen = ((off + len).div_ceil(PAGE) * PAGE) as usize;
        let with_baseline = remote_write || remote_read;
        let p = map_anon(maplen, "shadow")?;
        let b = if with_baseline { map_anon(maplen, "baseline").inspect_err(|_| unmap((p, maplen)))? } else { 0 };
        let (shadow, baseline) = (p + off as usize, b + off as usize);
        let maps = Arc::new(Maps {
            shadow: (p, maplen),
            baseline: (b, if with_baseline { maplen } else { 0 }),
            span: View { app, shadow, baseline, len: len as usize },
            track: Default::default(),
            track_lost: AtomicBool::new(false),
            sync: ForkLock::new(Default::default()),
        });
        let region = region(shadow, baseline, maps);
        region.to_shadow(0, len as usize);
        Ok(Shadow { region })
    }

    /// The attempt failed: its memory goes back to the pool (unless shared with a live region).
    pub fn abandon(self) {
        drop(self);
    }
}

/// True if [addr, addr+len) is readable memory of this process (/proc/self/maps).
pub fn host_readable(addr: u64, len: u64) -> bool {
    mrshim_core::maps::readable(&mrshim_core::maps::read_self(), addr, len)
}
