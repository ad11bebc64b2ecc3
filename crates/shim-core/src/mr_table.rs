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

type MrMap = HashMap<usize, (u64, u64), std::hash::BuildHasherDefault<PtrHash>>;

/// Live MRs registered through the shim: length and the seq of their registration.
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
    pub(crate) fn insert(&self, mr: usize, len: u64, seq: u64, track: bool) -> u64 {
        if track {
            self.shard(mr).lock().insert(mr, (len, seq));
        }
        let now = self.bytes.fetch_add(len, Relaxed).wrapping_add(len);
        // a plain load first: the peak is rarely exceeded, and fetch_max is a CAS loop
        if (now as i64) > 0 && now > self.peak.load(Relaxed) {
            self.peak.fetch_max(now, Relaxed);
        }
        clamp(now)
    }
    /// Removes `mr`'s entry without changing the byte count (see `remove`, `put_back`).
    pub(crate) fn take(&self, mr: usize) -> Option<(u64, u64)> {
        self.shard(mr).lock().remove(&mr)
    }
    pub(crate) fn put_back(&self, mr: usize, entry: (u64, u64)) {
        self.shard(mr).lock().insert(mr, entry);
    }
    /// Returns the registered bytes after removing `mr` (`len_hint`: its length as the MR says,
    /// used when not tracking).
    pub(crate) fn remove(&self, mr: usize, len_hint: u64, track: bool) -> u64 {
        let len = if track {
            match self.shard(mr).lock().remove(&mr) {
                Some((len, _)) => len,
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
    pub(crate) fn reset_in_child(&self) {
        for s in &self.shards {
            s.reset_in_child(MrMap::default());
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
