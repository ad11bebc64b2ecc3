//! A lock a forked child can take back.
//!
//! fork(2) copies only the calling thread. If another thread of the parent held a lock at that
//! instant, the child's copy stays locked forever, and the child's first registration (or its
//! exit summary) would hang on it. A `std::sync::Mutex` cannot be reset; this one can: in the
//! child — one thread, nobody else can hold it — [`ForkLock::reset_in_child`] replaces the value
//! (the old one may be half-updated, so it is leaked, not dropped) and unlocks.
//!
//! [`ForkOnce`] is the same for a process-wide value built on first use: if the thread building it
//! did not make it into the child, the child builds its own instead of waiting forever.
//!
//! A test-and-set spin lock that yields: the shim holds its locks for a handful of instructions
//! (a table insert, a counter update), never across a call into the application or the driver.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::*};

pub struct ForkLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and one guard exists at a time.
unsafe impl<T: Send> Sync for ForkLock<T> {}
// SAFETY: moving the lock moves the value; no guard can outlive a move.
unsafe impl<T: Send> Send for ForkLock<T> {}

impl<T: Default> Default for ForkLock<T> {
    fn default() -> Self {
        ForkLock::new(T::default())
    }
}

impl<T> ForkLock<T> {
    pub const fn new(v: T) -> Self {
        ForkLock { locked: AtomicBool::new(false), value: UnsafeCell::new(v) }
    }

    pub fn lock(&self) -> Guard<'_, T> {
        let mut spins = 0u32;
        while self.locked.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Guard { lock: self }
    }

    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.locked.compare_exchange(false, true, Acquire, Relaxed).ok().map(|_| Guard { lock: self })
    }

    /// In a forked child only (it has one thread): if another thread of the parent held the lock
    /// at the fork, its value may be half-updated: it is replaced by `fresh()` (the old one leaked)
    /// and the lock is free again. A lock nobody held keeps its value (it is consistent).
    ///
    /// # Safety
    /// As [`Self::reset_in_child`]: only in a forked child, before it starts a thread, and with no
    /// guard of this lock alive in the calling thread.
    pub unsafe fn recover_in_child(&self, fresh: impl FnOnce() -> T) {
        if self.locked.load(Acquire) {
            // SAFETY: the caller's contract.
            unsafe { self.reset_in_child(fresh()) };
        }
    }

    /// In a forked child only (it has one thread): forget whoever held the lock in the parent
    /// and start from `v`. The previous value is leaked: it may be in the middle of an update.
    ///
    /// # Safety
    /// Only in a forked child, from its atfork child handler: the child has one thread, and no
    /// guard of that thread is alive.
    pub unsafe fn reset_in_child(&self, v: T) {
        // SAFETY: per the contract: the child's single thread is here and holds no guard, so
        // nothing else touches the value.
        let old = unsafe { std::ptr::replace(self.value.get(), v) };
        std::mem::forget(old);
        self.locked.store(false, Release);
    }
}

pub struct Guard<'a, T> {
    lock: &'a ForkLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Release);
    }
}

/// A value built once, on first use, and never freed (a process-wide singleton).
pub struct ForkOnce<T> {
    value: AtomicPtr<T>,
    building: ForkLock<()>,
}

impl<T> Default for ForkOnce<T> {
    fn default() -> Self {
        ForkOnce::new()
    }
}

impl<T> ForkOnce<T> {
    pub const fn new() -> Self {
        ForkOnce { value: AtomicPtr::new(std::ptr::null_mut()), building: ForkLock::new(()) }
    }

    pub fn get(&self) -> Option<&T> {
        // SAFETY: a non-null pointer is a leaked Box published after it was fully built.
        unsafe { self.value.load(Acquire).as_ref() }
    }

    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        if let Some(v) = self.get() {
            return v;
        }
        self.init_slow(f)
    }

    #[cold]
    fn init_slow(&self, f: impl FnOnce() -> T) -> &T {
        let _g = self.building.lock();
        if let Some(v) = self.get() {
            return v;
        }
        let p = Box::into_raw(Box::new(f()));
        self.value.store(p, Release);
        // SAFETY: just published; never freed.
        unsafe { &*p }
    }

    /// In a forked child only: if a parent thread was still building the value, build afresh.
    ///
    /// # Safety
    /// Only in a forked child, from its atfork child handler: the child has one thread, and no
    /// guard of that thread is alive.
    pub unsafe fn reset_in_child(&self) {
        if self.get().is_none() {
            // SAFETY: the caller's contract.
            unsafe { self.building.reset_in_child(()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn once_builds_once() {
        let o = Arc::new(ForkOnce::new());
        let ts: Vec<_> = (0..8)
            .map(|i| {
                let o = o.clone();
                std::thread::spawn(move || *o.get_or_init(|| i))
            })
            .collect();
        let vals: Vec<i32> = ts.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(vals.iter().all(|v| *v == vals[0]));
        assert_eq!(o.get(), Some(&vals[0]));
    }

    #[test]
    fn excludes_across_threads() {
        let l = Arc::new(ForkLock::new(0u64));
        let ts: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 160_000);
    }

    #[test]
    fn a_lock_held_at_fork_is_usable_in_the_child() {
        let l = Arc::new(ForkLock::new(vec![1u8]));
        let (held, release) = (Arc::new(std::sync::Barrier::new(2)), Arc::new(std::sync::Barrier::new(2)));
        let t = {
            let (l, held, release) = (l.clone(), held.clone(), release.clone());
            std::thread::spawn(move || {
                let _g = l.lock();
                held.wait();
                release.wait();
            })
        };
        held.wait();
        assert!(l.try_lock().is_none());
        // SAFETY: a multi-threaded process may fork if the child stays simple: it touches only
        // the lock (reset_in_child leaks, the comparison does not allocate), then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = l.try_lock().is_none();
            // SAFETY: the forked child, one thread, holding no guard.
            unsafe { l.reset_in_child(vec![2]) };
            let ok = ok && *l.lock() == [2];
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        release.wait();
        t.join().unwrap();
        assert_eq!(status, 0, "the child could not take the lock back");
        assert_eq!(*l.lock(), [1], "the parent's value is untouched");
    }

    #[test]
    fn recover_in_child_resets_only_what_a_parent_thread_held() {
        let held = Arc::new(ForkLock::new(vec![1u8]));
        let free = ForkLock::new(vec![7u8]);
        let (taken, release) = (Arc::new(std::sync::Barrier::new(2)), Arc::new(std::sync::Barrier::new(2)));
        let t = {
            let (l, taken, release) = (held.clone(), taken.clone(), release.clone());
            std::thread::spawn(move || {
                let _g = l.lock();
                taken.wait();
                release.wait();
            })
        };
        taken.wait();
        // SAFETY: as in the test above: the child touches only the locks, then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the forked child, one thread, no guard of either lock alive in it.
            unsafe {
                held.recover_in_child(|| vec![2]);
                free.recover_in_child(|| vec![9]);
            }
            let ok = held.try_lock().is_some_and(|g| *g == [2]) && *free.lock() == [7];
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        release.wait();
        t.join().unwrap();
        assert_eq!(status, 0, "held: fresh value and free again; not held: value kept");
    }
}
