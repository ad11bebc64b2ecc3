//! The process-wide runtime: devices, contexts, streams and allocations, and the rules for
//! where an operation runs (legacy default stream vs. a stream's queue).

use crate::abi::*;
use crate::config::Config;
use crate::context::{self, Ctx};
use crate::memory::Alloc;
use crate::stream::{Op, Stream};
pub use simgpu::lock;
use simgpu::{heap::Heap, Fault};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub struct Device {
    pub name: String,
    pub total: u64,
    pub primary: Arc<Ctx>,
}

pub struct Runtime {
    pub devices: Vec<Device>,
    ctxs: Mutex<HashMap<usize, Arc<Ctx>>>,
    streams: Mutex<HashMap<usize, Arc<Stream>>>,
    pub heap: Heap,
}

static RT: OnceLock<Result<Runtime, CUresult>> = OnceLock::new();

/// The CUresult of a memory-model fault.
pub fn cu(f: Fault) -> CUresult {
    match f {
        Fault::Invalid => CUDA_ERROR_INVALID_VALUE,
        Fault::OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY,
        Fault::System => CUDA_ERROR_OPERATING_SYSTEM,
        Fault::BadHandle => CUDA_ERROR_INVALID_HANDLE,
        Fault::InvalidDevice => CUDA_ERROR_INVALID_DEVICE,
    }
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
        let cfg = Config::from_env("mrshim-sim-cuda").map_err(|e| {
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
            .map(|i| Device { name: device_name(i), total: cfg.mem, primary: Arc::new(Ctx::new(i as i32, true)) })
            .collect();
        let ctxs = devices.iter().map(|d| (Arc::as_ptr(&d.primary) as usize, d.primary.clone())).collect();
        Runtime {
            devices,
            ctxs: Mutex::new(ctxs),
            streams: Mutex::new(HashMap::new()),
            heap: Heap::new(cfg.gpus as usize, cfg.mem),
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
        for d in self.heap.owned_by(h) {
            let _ = self.free(d);
        }
        context::forget(h);
        Ok(())
    }

    pub fn alloc(&self, bytes: u64) -> Result<u64, CUresult> {
        let (h, c) = self.current()?;
        self.heap.alloc(h, c.device, bytes).map_err(cu)
    }

    /// cuMemFree: `dptr` must be the start of an allocation.
    pub fn free(&self, dptr: u64) -> Result<(), CUresult> {
        self.heap.free(dptr).map_err(cu)
    }

    /// The allocation holding `p`.
    pub fn find(&self, p: u64) -> Option<Arc<Alloc>> {
        self.heap.find(p)
    }

    pub fn create_stream(&self, flags: u32) -> Result<usize, CUresult> {
        if flags & !CU_STREAM_NON_BLOCKING != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (h, c) = self.current()?;
        let s = Arc::new(Stream::new(h, flags).map_err(cu)?);
        let sh = Arc::as_ptr(&s) as usize;
        lock(&c.streams).push(s.clone());
        lock(&self.streams).insert(sh, s);
        Ok(sh)
    }

    pub fn destroy_stream(&self, h: usize) -> Result<(), CUresult> {
        let s = lock(&self.streams).remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Ok(c) = self.ctx(s.owner) {
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
            Target::Queue(s) => s.submit(op).map_err(cu),
        }
    }
}
