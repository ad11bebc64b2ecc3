//! Live MRs registered through the shim and the registered-byte totals: a sharded table keyed
//! by MR pointer (for `reg_seq` in dereg records), with single-RMW byte counters.

use mrshim_forklock::ForkLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SHARDS: usize = 16;

/// MR pointers are heap addresses the shim never lets anyone choose: a multiplicative hash is
/// enough (SipHash was a tenth of a record's user-space cost).
#[derive(Default, Clone, Copy)]
struct PtrHash(u64);

impl std::hash::Hasher for PtrHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// One live MR as the application sees it: what it registered (or rereg'ed it to) and the seq of
/// its registration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Live {
    pub len: u64,
    pub seq: u64,
    pub addr: u64,
    pub access: u32,
}

type MrMap = HashMap<usize, Live, std::hash::BuildHasherDefault<PtrHash>>;

/// Live MRs registered through the shim.
pub(crate) struct MrTable {
    shards: [ForkLock<MrMap>; SHARDS],
    bytes: AtomicU64,
    pub(crate) peak: AtomicU64,
}

impl MrTable {
    pub(crate) fn new() -> Self {
        MrTable {
            shards: std::array::from_fn(|_| ForkLock::default()),
            bytes: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }
    fn shard(&self, mr: usize) -> &ForkLock<MrMap> {
        &self.shards[(mr >> 4) % SHARDS]
    }
    /// `track`: remember the MR (for `reg_seq` in dereg records); else only count bytes.
    pub(crate) fn insert(&self, mr: usize, live: Live, track: bool) -> u64 {
        if track {
            self.shard(mr).lock().insert(mr, live);
        }
        self.add_bytes(live.len)
    }
    fn add_bytes(&self, len: u64) -> u64 {
        let now = self.bytes.fetch_add(len, Relaxed).wrapping_add(len);
        // a plain load first: the peak is rarely exceeded, and fetch_max is a CAS loop
        if (now as i64) > 0 && now > self.peak.load(Relaxed) {
            self.peak.fetch_max(now, Relaxed);
        }
        clamp(now)
    }
    /// Removes `mr`'s entry without changing the byte count (see `remove`, `put_back`).
    pub(crate) fn take(&self, mr: usize) -> Option<Live> {
        self.shard(mr).lock().remove(&mr)
    }
    pub(crate) fn put_back(&self, mr: usize, entry: Live) {
        self.shard(mr).lock().insert(mr, entry);
    }
    pub(crate) fn get(&self, mr: usize) -> Option<Live> {
        self.shard(mr).lock().get(&mr).copied()
    }
    /// An `ibv_rereg_mr` took effect: `mr`'s entry (if tracked) becomes `change(entry)`, the byte
    /// count follows the length (`old_len`: the MR's length before, as the caller knew it, for an
    /// untracked MR). Returns the registered bytes after.
    pub(crate) fn follow(&self, mr: usize, old_len: u64, change: impl FnOnce(Live) -> Live) -> u64 {
        let (old, new) = {
            let mut shard = self.shard(mr).lock();
            match shard.get_mut(&mr) {
                Some(e) => {
                    let old = e.len;
                    *e = change(*e);
                    (old, e.len)
                }
                None => (old_len, change(Live { len: old_len, ..Live::default() }).len),
            }
        };
        if new >= old {
            self.add_bytes(new - old)
        } else {
            clamp(self.bytes.fetch_sub(old - new, Relaxed).wrapping_sub(old - new))
        }
    }
    /// Returns the registered bytes after removing `mr` (`len_hint`: its length as the MR says,
    /// used when not tracking).
    pub(crate) fn remove(&self, mr: usize, len_hint: u64, track: bool) -> u64 {
        let len = if track {
            match self.shard(mr).lock().remove(&mr) {
                Some(e) => e.len,
                None => return self.current(),
            }
        } else {
            len_hint
        };
        // wrapping arithmetic (one fetch_sub); readers clamp a transiently negative total to 0
        clamp(self.bytes.fetch_sub(len, Relaxed).wrapping_sub(len))
    }
    pub(crate) fn current(&self) -> u64 {
        clamp(self.bytes.load(Relaxed))
    }
    /// The parent's MRs are not the child's to account for (and a shard may have been locked).
    ///
    /// # Safety
    /// Only in a forked child, from its atfork child handler: the child has one thread, and no
    /// guard of that thread is alive.
    pub(crate) unsafe fn reset_in_child(&self) {
        for s in &self.shards {
            // SAFETY: the caller's contract.
            unsafe { s.reset_in_child(MrMap::default()) };
        }
        self.bytes.store(0, Relaxed);
        self.peak.store(0, Relaxed);
    }
}

/// Registered-bytes totals are kept as wrapping u64 so that add/sub are single RMWs; a dereg of
/// an MR the shim never saw registered could push it "below 0": report that as 0.
fn clamp(v: u64) -> u64 {
    if (v as i64) < 0 {
        0
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rereg_moves_the_entry_and_the_byte_count() {
        let t = MrTable::new();
        t.insert(0x100, Live { len: 4096, seq: 3, addr: 0x1000, access: 1 }, true);
        t.insert(0x200, Live { len: 100, ..Live::default() }, false);
        assert_eq!(t.current(), 4196);
        let after = t.follow(0x100, 0, |e| Live { addr: 0x9000, len: 8192, ..e });
        assert_eq!(after, 8292);
        assert_eq!(t.get(0x100), Some(Live { len: 8192, seq: 3, addr: 0x9000, access: 1 }));
        assert_eq!(t.peak.load(Relaxed), 8292);
        // untracked: the caller's length before
        assert_eq!(t.follow(0x200, 100, |e| Live { len: 50, ..e }), 8242);
        assert_eq!(t.get(0x200), None);
        assert_eq!(t.remove(0x100, 0, true), 50);
    }
}
