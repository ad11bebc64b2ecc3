//! Asynchronous events (`ibv_get_async_event`): each context has a pipe; the simulated device
//! writes one fixed-size record per event (the object's pointer and the event type).

use mrshim_verbs as v;
use std::os::fd::RawFd;

const RECORD: usize = 16;

/// The write end of a context's async event pipe (owned by the context).
#[derive(Clone, Copy, Debug)]
pub struct AsyncEvents(pub RawFd);

impl AsyncEvents {
    /// Queues one event about `element` (a `struct ibv_srq *`, `ibv_qp *`, ...).
    pub fn post(&self, element: usize, event_type: v::ibv_event_type) {
        let mut rec = [0u8; RECORD];
        rec[..8].copy_from_slice(&(element as u64).to_ne_bytes());
        rec[8..12].copy_from_slice(&event_type.to_ne_bytes());
        // SAFETY: writes a local buffer to the pipe; a record this small is written atomically.
        unsafe { libc::write(self.0, rec.as_ptr().cast(), RECORD) };
    }
}

/// Reads one event from the context's async fd (blocking unless the application made the fd
/// non-blocking, as UCX does before polling it). 0, or -1 with errno.
pub fn read_event(fd: RawFd, ev: &mut v::ibv_async_event) -> i32 {
    let mut rec = [0u8; RECORD];
    // SAFETY: reads into a local buffer.
    let n = unsafe { libc::read(fd, rec.as_mut_ptr().cast(), RECORD) };
    if n != RECORD as isize {
        if n >= 0 {
            crate::set_errno(libc::EIO);
        }
        return -1;
    }
    let element = u64::from_ne_bytes(rec[..8].try_into().unwrap()) as usize;
    ev.element.srq = element as *mut v::ibv_srq;
    ev.event_type = u32::from_ne_bytes(rec[8..12].try_into().unwrap());
    0
}
