//! A stream: an in-order queue of operations run by one worker thread, like a GPU queue.

use crate::Fault;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Condvar, Mutex};

pub type Op = Box<dyn FnOnce() + Send>;

/// The non-blocking stream flag: the same bit in CUDA (`CU_STREAM_NON_BLOCKING`), HIP
/// (`hipStreamNonBlocking`) and MACA (`mcStreamNonBlocking`).
pub const NON_BLOCKING: u32 = 0x1;

/// Submitted and finished operation counts, shared with the worker.
#[derive(Default)]
struct Progress {
    counts: Mutex<(u64, u64)>,
    cv: Condvar,
}

pub struct Stream {
    /// The CUDA context or HIP/MACA device the stream belongs to.
    pub owner: usize,
    pub flags: u32,
    tx: Mutex<Option<mpsc::Sender<Op>>>,
    progress: Arc<Progress>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stream {
    pub fn new(owner: usize, flags: u32) -> Result<Stream, Fault> {
        let (tx, rx) = mpsc::channel::<Op>();
        let progress = Arc::new(Progress::default());
        let p = progress.clone();
        std::thread::Builder::new()
            .name("mrshim-gpu-stream".into())
            .spawn(move || {
                for op in rx {
                    // A failing operation must not take the queue down with it.
                    let _ = catch_unwind(AssertUnwindSafe(op));
                    lock(&p.counts).1 += 1;
                    p.cv.notify_all();
                }
            })
            .map_err(|_| Fault::OutOfMemory)?;
        Ok(Stream { owner, flags, tx: Mutex::new(Some(tx)), progress })
    }

    /// Blocking streams synchronise with the legacy default stream.
    pub fn blocking(&self) -> bool {
        self.flags & NON_BLOCKING == 0
    }

    pub fn submit(&self, op: Op) -> Result<(), Fault> {
        let tx = lock(&self.tx);
        let tx = tx.as_ref().ok_or(Fault::BadHandle)?;
        lock(&self.progress.counts).0 += 1;
        tx.send(op).map_err(|_| Fault::BadHandle)
    }

    /// Waits for everything submitted so far.
    pub fn synchronize(&self) {
        let mut c = lock(&self.progress.counts);
        let target = c.0;
        while c.1 < target {
            c = self.progress.cv.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub fn idle(&self) -> bool {
        let c = lock(&self.progress.counts);
        c.1 >= c.0
    }

    /// cuStreamDestroy/hipStreamDestroy: queued work still completes, then the worker exits.
    pub fn close(&self) {
        lock(&self.tx).take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn in_order_and_synchronize_waits() {
        let s = Stream::new(0, 0).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..50 {
            let seen = seen.clone();
            s.submit(Box::new(move || seen.lock().unwrap().push(i))).unwrap();
        }
        s.synchronize();
        assert!(s.idle());
        assert_eq!(*seen.lock().unwrap(), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn panicking_op_does_not_stop_the_queue() {
        let s = Stream::new(0, NON_BLOCKING).unwrap();
        assert!(!s.blocking());
        let n = Arc::new(AtomicU32::new(0));
        s.submit(Box::new(|| panic!("op failed"))).unwrap();
        let m = n.clone();
        s.submit(Box::new(move || {
            m.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
        s.synchronize();
        assert_eq!(n.load(Ordering::SeqCst), 1);
        s.close();
        assert_eq!(s.submit(Box::new(|| {})), Err(Fault::BadHandle));
    }
}
