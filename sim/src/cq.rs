//! Completion queues and completion channels.

use mrshim_verbs::ibv_wc;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

pub struct CqInner {
    entries: Mutex<VecDeque<ibv_wc>>,
    /// `entries.len()`, kept under its lock: an application busy-polling an empty CQ reads this
    /// and never takes the lock the NIC thread needs to push (as a CPU reads a real CQE's owner
    /// bit without stalling the device).
    queued: AtomicUsize,
    pub capacity: usize,
    armed: AtomicBool,
    /// Write end of the completion channel's pipe, -1 without a channel.
    channel_wfd: AtomicI32,
    /// The `struct ibv_cq *` the application holds, written into the channel on an event.
    cq_ptr: AtomicUsize,
    /// Live QPs using this CQ (the kernel's usecnt): destroy refuses with EBUSY while > 0. Not
    /// the Arc's count: an engine thread finishing a message may still hold a clone briefly
    /// after ibv_destroy_qp returned, and the application must not see that.
    pub users: std::sync::atomic::AtomicU32,
}

impl CqInner {
    pub fn new(capacity: usize, channel_wfd: i32) -> CqInner {
        CqInner {
            entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            queued: AtomicUsize::new(0),
            capacity,
            armed: AtomicBool::new(false),
            channel_wfd: AtomicI32::new(channel_wfd),
            cq_ptr: AtomicUsize::new(0),
            users: Default::default(),
        }
    }

    pub fn set_ptr(&self, p: usize) {
        self.cq_ptr.store(p, Ordering::Release);
    }

    /// Pushes unless `gone` is set, checked under the queue's lock: [`CqInner::forget_qp`] after
    /// setting it leaves no entry of that QP behind, whichever thread pushes.
    pub fn push_all_unless(&self, gone: &AtomicBool, wcs: impl IntoIterator<Item = ibv_wc>) {
        let mut q = self.entries.lock().unwrap();
        if gone.load(Ordering::SeqCst) {
            return;
        }
        let before = q.len();
        q.extend(wcs);
        let added = q.len() > before;
        // SeqCst with arm(): either it sees this entry or notify() sees it armed.
        self.queued.store(q.len(), Ordering::SeqCst);
        drop(q);
        if added {
            self.notify();
        }
    }

    /// Drops the completions of a destroyed QP, as libmlx5's `mlx5_destroy_qp` cleans its CQs
    /// (`__mlx5_cq_clean`): after `ibv_destroy_qp` returns, polling never yields one — a
    /// consumer would take its `wr_id` for an object it freed with the QP.
    pub fn forget_qp(&self, qpn: u32) {
        let mut q = self.entries.lock().unwrap();
        q.retain(|wc| wc.qp_num != qpn);
        self.queued.store(q.len(), Ordering::SeqCst);
    }

    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
        // A completion that arrived before the request still raises an event, like hardware
        // with a non-empty CQ at arm time.
        if self.queued.load(Ordering::SeqCst) > 0 {
            self.notify();
        }
    }

    fn notify(&self) {
        let fd = self.channel_wfd.load(Ordering::Acquire);
        if fd >= 0 && self.armed.swap(false, Ordering::SeqCst) {
            let p = self.cq_ptr.load(Ordering::Acquire).to_ne_bytes();
            // SAFETY: writes 8 bytes from a local array to a pipe we own.
            unsafe { libc::write(fd, p.as_ptr().cast(), p.len()) };
        }
    }

    /// Completions not polled yet.
    pub fn pending(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    pub fn poll(&self, out: &mut [ibv_wc]) -> usize {
        if self.queued.load(Ordering::Acquire) == 0 || out.is_empty() {
            return 0;
        }
        let mut q = self.entries.lock().unwrap();
        let n = out.len().min(q.len());
        for (slot, wc) in out.iter_mut().zip(q.drain(..n)) {
            *slot = wc;
        }
        self.queued.store(q.len(), Ordering::Release);
        n
    }
}
