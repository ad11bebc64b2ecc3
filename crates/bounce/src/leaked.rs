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
