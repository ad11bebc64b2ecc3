//! An append-only list of leaked nodes: lookups from the post/poll wrappers take no lock, and a
//! wrapper that read a patched pointer just before it was restored still finds its provider.

use std::sync::atomic::{AtomicPtr, Ordering};

pub(crate) struct Leaked<T: 'static> {
    head: AtomicPtr<Node<T>>,
}

struct Node<T: 'static> {
    item: T,
    next: *const Node<T>,
}

impl<T> Leaked<T> {
    pub(crate) const fn new() -> Self {
        Leaked { head: AtomicPtr::new(std::ptr::null_mut()) }
    }
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'static T> {
        let mut p = self.head.load(Ordering::Acquire).cast_const();
        std::iter::from_fn(move || {
            // SAFETY: nodes are leaked Boxes published with Release, never freed.
            let n = unsafe { p.as_ref()? };
            p = n.next;
            Some(&n.item)
        })
    }
    /// Only under one lock for all pushes (PATCHING): two racing pushes would lose one node.
    pub(crate) fn push(&self, item: T) -> &'static T {
        let n = Box::leak(Box::new(Node { item, next: self.head.load(Ordering::Acquire) }));
        self.head.store(n, Ordering::Release);
        &n.item
    }
}

/// Slots of a [`Hint`] (a power of two).
const HINTS: usize = 64;

/// A direct-mapped index of leaked nodes by an address (a context, an `ibv_qp_ex`): O(1) lookups
/// for the post/poll wrappers, lock-free. A slot holds the last node set for some key of its
/// hash; a hit is confirmed by the caller's test (a node's key may change when it is reused), a
/// miss falls back to a walk of the [`Leaked`] list.
pub(crate) struct Hint<T: 'static> {
    slots: [AtomicPtr<T>; HINTS],
}

impl<T> Hint<T> {
    pub(crate) const fn new() -> Self {
        Hint { slots: [const { AtomicPtr::new(std::ptr::null_mut()) }; HINTS] }
    }
    #[inline]
    fn slot(&self, key: usize) -> &AtomicPtr<T> {
        // Fibonacci hashing: heap addresses differ in their middle bits.
        &self.slots[(key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize >> (usize::BITS - HINTS.trailing_zeros())]
    }
    /// The node last set for `key`'s slot, if `is` says it is `key`'s.
    #[inline]
    pub(crate) fn get(&self, key: usize, is: impl Fn(&T) -> bool) -> Option<&'static T> {
        // SAFETY: a slot holds null or a `&'static T` stored by `set`, published with Release.
        let n = unsafe { self.slot(key).load(Ordering::Acquire).as_ref() }?;
        is(n).then_some(n)
    }
    /// `key` is `item`'s now: its slot points there.
    pub(crate) fn set(&self, key: usize, item: &'static T) {
        self.slot(key).store(std::ptr::from_ref(item).cast_mut(), Ordering::Release);
    }
}
