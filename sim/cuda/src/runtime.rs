//! The process-wide runtime: devices, contexts, streams and allocations, and the rules for
//! where an operation runs (legacy default stream vs. a stream's queue).

use crate::abi::*;
use crate::config::Config;
use crate::context::{self, Ctx};
use crate::memory::{self, Alloc};
use crate::stream::{Op, Stream};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub struct Device {
    pub name: String,
    pub total: u64,
    pub used: Mutex<u64>,
    pub primary: Arc<Ctx>,
}

pub struct Runtime {
    pub devices: Vec<Device>,
    ctxs: Mutex<HashMap<usize, Arc<Ctx>>>,
    streams: Mutex<HashMap<usize, Arc<Stream>>>,
    allocs: Mutex<BTreeMap<u64, Arc<Alloc>>>,
    next_buffer_id: AtomicU64,
}

static RT: OnceLock<Result<Runtime, CUresult>> = OnceLock::new();

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn device_name(ordinal: usize) -> String {
    format!("NVIDIA H100 (simulated {ordinal})")
}

/// PCI bus of device `i`: 0000:BB:00.0 with BB = 0x20 + 8·i.
pub fn pci_bus(i: i32) -> i32 {
    0x20 + 8 * i
}

/// cuInit: reads the environment once; a bad value is one stderr line and a sticky error.
pub fn init() -> CUresult {
    let r = RT.get_or_init(|| {
        let cfg = Config::from_env().map_err(|e| {
            eprintln!("{e}");
            CUDA_ERROR_INVALID_VALUE
        })?;
        if cfg.gpus == 0 {
            return Err(CUDA_ERROR_NO_DEVICE);
        }
        Ok(Runtime::new(&cfg))
    });
    match r {
        Ok(_) => CUDA_SUCCESS,
        Err(e) => *e,
    }
}

pub fn rt() -> Result<&'static Runtime, CUresult> {
    match RT.get() {
        Some(Ok(r)) => Ok(r),
        _ => Err(CUDA_ERROR_NOT_INITIALIZED),
    }
}

/// Where an operation runs.
pub enum Target {
    /// The legacy default stream: waits for the blocking streams of the current context,
    /// then runs on the calling thread.
    Legacy,
    /// The per-thread default stream: runs on the calling thread.
    PerThread,
    Queue(Arc<Stream>),
}

impl Runtime {
    fn new(cfg: &Config) -> Runtime {
        let devices: Vec<Device> = (0..cfg.gpus as usize)
            .map(|i| Device {
                name: device_name(i),
                total: cfg.mem,
                used: Mutex::new(0),
                primary: Arc::new(Ctx::new(i as i32, true)),
            })
            .collect();
        let ctxs = devices.iter().map(|d| (Arc::as_ptr(&d.primary) as usize, d.primary.clone())).collect();
        Runtime {
            devices,
            ctxs: Mutex::new(ctxs),
            streams: Mutex::new(HashMap::new()),
            allocs: Mutex::new(BTreeMap::new()),
            next_buffer_id: AtomicU64::new(1),
        }
    }

    pub fn device(&self, dev: CUdevice) -> Result<&Device, CUresult> {
        usize::try_from(dev).ok().and_then(|i| self.devices.get(i)).ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    pub fn ctx(&self, h: usize) -> Result<Arc<Ctx>, CUresult> {
        lock(&self.ctxs).get(&h).cloned().ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    pub fn current(&self) -> Result<(usize, Arc<Ctx>), CUresult> {
        let h = context::current().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        Ok((h, self.ctx(h)?))
    }

    pub fn create_ctx(&self, dev: CUdevice) -> Result<usize, CUresult> {
        self.device(dev)?;
        let c = Arc::new(Ctx::new(dev, false));
        let h = Arc::as_ptr(&c) as usize;
        lock(&self.ctxs).insert(h, c);
        Ok(h)
    }

    /// cuCtxDestroy: its streams drain and go away, its allocations are freed.
    pub fn destroy_ctx(&self, h: usize) -> Result<(), CUresult> {
        let c = self.ctx(h)?;
        if c.primary {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        lock(&self.ctxs).remove(&h);
        for s in c.streams() {
            lock(&self.streams).remove(&(Arc::as_ptr(&s) as usize));
            s.close();
        }
        let dead: Vec<u64> = lock(&self.allocs).values().filter(|a| a.ctx == h).map(|a| a.dptr).collect();
        for d in dead {
            let _ = self.free(d);
        }
        context::forget(h);
        Ok(())
    }

    pub fn alloc(&self, bytes: u64) -> Result<u64, CUresult> {
        let (h, c) = self.current()?;
        let size = memory::round_up(bytes).filter(|s| *s > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let dev = &self.devices[c.device as usize];
        let mut used = lock(&dev.used);
        if size > dev.total - *used {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let id = self.next_buffer_id.fetch_add(1, Ordering::Relaxed);
        let a = Alloc::new(size, h, c.device, id).map_err(|e| {
            if e == libc::ENOMEM {
                CUDA_ERROR_OUT_OF_MEMORY
            } else {
                CUDA_ERROR_OPERATING_SYSTEM
            }
        })?;
        *used += size;
        let d = a.dptr;
        lock(&self.allocs).insert(d, Arc::new(a));
        Ok(d)
    }

    /// cuMemFree: `dptr` must be the start of an allocation.
    pub fn free(&self, dptr: u64) -> Result<(), CUresult> {
        let a = lock(&self.allocs).remove(&dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        a.release_address();
        *lock(&self.devices[a.device as usize].used) -= a.size;
        Ok(())
    }

    /// The allocation holding `p`.
    pub fn find(&self, p: u64) -> Option<Arc<Alloc>> {
        lock(&self.allocs).range(..=p).next_back().map(|(_, a)| a.clone()).filter(|a| a.contains(p))
    }

    /// The allocation starting exactly at `p`.
    pub fn exact(&self, p: u64) -> Option<Arc<Alloc>> {
        lock(&self.allocs).get(&p).cloned()
    }

    /// [p, p+len) inside one allocation: (allocation, offset).
    pub fn span(&self, p: u64, len: u64) -> Result<(Arc<Alloc>, u64), CUresult> {
        let a = self.find(p).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let off = p - a.dptr;
        if len > a.size - off {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok((a, off))
    }

    /// Host memory given to a copy must not be device memory (the CPU would fault on it).
    pub fn host_range(&self, p: usize, len: u64) -> Result<(), CUresult> {
        let (p, len) = (p as u64, len);
        if p == 0 && len > 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let end = p.checked_add(len).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let hit = lock(&self.allocs).range(..end).next_back().is_some_and(|(_, a)| a.dptr + a.size > p);
        if hit && len > 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }

    pub fn create_stream(&self, flags: u32) -> Result<usize, CUresult> {
        if flags & !CU_STREAM_NON_BLOCKING != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (h, c) = self.current()?;
        let s = Arc::new(Stream::new(h, flags)?);
        let sh = Arc::as_ptr(&s) as usize;
        lock(&c.streams).push(s.clone());
        lock(&self.streams).insert(sh, s);
        Ok(sh)
    }

    pub fn destroy_stream(&self, h: usize) -> Result<(), CUresult> {
        let s = lock(&self.streams).remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Ok(c) = self.ctx(s.ctx) {
            lock(&c.streams).retain(|x| !Arc::ptr_eq(x, &s));
        }
        s.close();
        Ok(())
    }

    pub fn target(&self, h: usize) -> Result<Target, CUresult> {
        match h {
            0 | CU_STREAM_LEGACY => Ok(Target::Legacy),
            CU_STREAM_PER_THREAD => Ok(Target::PerThread),
            _ => lock(&self.streams).get(&h).cloned().map(Target::Queue).ok_or(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    /// Waits for the blocking streams of the current context (the legacy stream's implicit sync).
    pub fn sync_blocking(&self) {
        if let Ok((_, c)) = self.current() {
            c.streams().iter().filter(|s| s.blocking()).for_each(|s| s.synchronize());
        }
    }

    pub fn run(&self, t: Target, op: Op) -> Result<(), CUresult> {
        match t {
            Target::Legacy => {
                self.sync_blocking();
                op();
                Ok(())
            }
            Target::PerThread => {
                op();
                Ok(())
            }
            Target::Queue(s) => s.submit(op),
        }
    }
}
