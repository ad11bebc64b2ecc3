//! Contexts and the per-thread context stack (cuCtxSetCurrent/Push/Pop semantics).

use crate::stream::Stream;
use std::cell::RefCell;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

pub struct Ctx {
    pub device: i32,
    pub primary: bool,
    /// Primary contexts only: cuDevicePrimaryCtxRetain count.
    pub retained: AtomicU32,
    pub streams: Mutex<Vec<Arc<Stream>>>,
}

impl Ctx {
    pub fn new(device: i32, primary: bool) -> Ctx {
        Ctx { device, primary, retained: AtomicU32::new(0), streams: Mutex::new(Vec::new()) }
    }

    pub fn streams(&self) -> Vec<Arc<Stream>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

thread_local! {
    /// Context handles, top = current. A handle may outlive its context (then lookups fail).
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

pub fn current() -> Option<usize> {
    STACK.with(|s| s.borrow().last().copied()).filter(|h| *h != 0)
}

/// cuCtxSetCurrent: replaces the top of the stack (0 unbinds), pushes onto an empty one.
pub fn set_current(h: usize) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        match s.last_mut() {
            Some(top) => *top = h,
            None if h != 0 => s.push(h),
            None => {}
        }
    })
}

pub fn push(h: usize) {
    STACK.with(|s| s.borrow_mut().push(h))
}

pub fn pop() -> Option<usize> {
    STACK.with(|s| s.borrow_mut().pop())
}

/// cuCtxDestroy of a context current to this thread pops it.
pub fn forget(h: usize) {
    STACK.with(|s| s.borrow_mut().retain(|x| *x != h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_semantics() {
        assert_eq!(current(), None);
        set_current(0);
        assert_eq!(current(), None);
        set_current(5);
        push(7);
        assert_eq!(current(), Some(7));
        set_current(9);
        assert_eq!(pop(), Some(9));
        assert_eq!(current(), Some(5));
        forget(5);
        assert_eq!(current(), None);
    }
}
