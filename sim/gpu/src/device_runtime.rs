//! The model of a CUDA-runtime-shaped API (HIP, MACA): a current device per thread
//! (hipSetDevice/mcSetDevice), streams per device, a null stream that synchronises with the
//! device's blocking streams, copies by direction (`*MemcpyKind`). Errors are [`Fault`]s each
//! runtime turns into its own codes.

use crate::heap::Heap;
use crate::stream::{Op, Stream, NON_BLOCKING};
use crate::{lock, Fault};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct DeviceRuntime {
    pub gpus: i32,
    pub heap: Heap,
    streams: Mutex<HashMap<usize, Arc<Stream>>>,
}

/// The copy directions of hipMemcpyKind / cudaMemcpyKind (and MACA's, as the engine assumes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    /// From the addresses (unified addressing).
    Default,
}

/// The special stream handle `((stream_t)2)`: the per-thread default stream.
pub const STREAM_PER_THREAD: usize = 2;

thread_local! {
    /// hipSetDevice is per thread; a thread starts on device 0.
    static CURRENT: Cell<i32> = const { Cell::new(0) };
}

/// Where an operation runs.
pub enum Target {
    /// The null stream: waits for the blocking streams of the current device, then runs on the
    /// calling thread.
    Null,
    PerThread,
    Queue(Arc<Stream>),
}

impl DeviceRuntime {
    pub fn new(gpus: u32, mem: u64) -> DeviceRuntime {
        DeviceRuntime { gpus: gpus as i32, heap: Heap::new(gpus as usize, mem), streams: Mutex::new(HashMap::new()) }
    }

    pub fn current(&self) -> i32 {
        CURRENT.with(|c| c.get())
    }

    pub fn set_current(&self, dev: i32) -> Result<(), Fault> {
        if !(0..self.gpus).contains(&dev) {
            return Err(Fault::InvalidDevice);
        }
        CURRENT.with(|c| c.set(dev));
        Ok(())
    }

    pub fn alloc(&self, bytes: u64) -> Result<u64, Fault> {
        let dev = self.current();
        self.heap.alloc(dev as usize, dev, bytes)
    }

    pub fn create_stream(&self, flags: u32) -> Result<usize, Fault> {
        if flags & !NON_BLOCKING != 0 {
            return Err(Fault::Invalid);
        }
        let s = Arc::new(Stream::new(self.current() as usize, flags)?);
        let h = Arc::as_ptr(&s) as usize;
        lock(&self.streams).insert(h, s);
        Ok(h)
    }

    pub fn destroy_stream(&self, h: usize) -> Result<(), Fault> {
        lock(&self.streams).remove(&h).ok_or(Fault::BadHandle)?.close();
        Ok(())
    }

    pub fn target(&self, h: usize) -> Result<Target, Fault> {
        match h {
            0 => Ok(Target::Null),
            STREAM_PER_THREAD => Ok(Target::PerThread),
            _ => lock(&self.streams).get(&h).cloned().map(Target::Queue).ok_or(Fault::BadHandle),
        }
    }

    /// Waits for the streams of `dev` (all of them, or only the blocking ones: the null
    /// stream's implicit synchronisation).
    pub fn sync_device(&self, dev: i32, blocking_only: bool) {
        let streams: Vec<Arc<Stream>> = lock(&self.streams)
            .values()
            .filter(|s| s.owner == dev as usize && (!blocking_only || s.blocking()))
            .cloned()
            .collect();
        streams.iter().for_each(|s| s.synchronize());
    }

    pub fn run(&self, t: Target, op: Op) -> Result<(), Fault> {
        match t {
            Target::Null => {
                self.sync_device(self.current(), true);
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

    /// The operation of a copy in direction `dir`.
    pub fn copy_op(&self, dst: usize, src: usize, n: u64, dir: Direction) -> Result<Op, Fault> {
        let dev = |p: usize| self.heap.find(p as u64).is_some();
        let dir = match dir {
            Direction::Default => match (dev(dst), dev(src)) {
                (false, false) => Direction::HostToHost,
                (true, false) => Direction::HostToDevice,
                (false, true) => Direction::DeviceToHost,
                (true, true) => Direction::DeviceToDevice,
            },
            d => d,
        };
        let h = &self.heap;
        match dir {
            Direction::HostToDevice => h.htod(dst as u64, src, n),
            Direction::DeviceToHost => h.dtoh(dst, src as u64, n),
            Direction::DeviceToDevice => h.dtod(dst as u64, src as u64, n),
            _ => {
                h.host_range(dst, n).and(h.host_range(src, n))?;
                // SAFETY: two host ranges the caller passed for n bytes (memmove semantics).
                Ok(Box::new(move || unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n as usize) }))
            }
        }
    }
}
