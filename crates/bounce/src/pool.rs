//! The shadows' and baselines' memory: private anonymous mappings, kept after deregistration for
//! the next region of the same size (up to `POOL_MAX` bytes). A job that registers and
//! deregisters its buffers again and again (each iteration, each communicator) would otherwise
//! fault in and zero every page each time. Only `try_lock`ed: a child forked while a parent
//! thread held it maps afresh.

use crate::state::STATE;

/// A mapping: (address, length); length 0 is no mapping.
pub(crate) type Mapping = (usize, usize);

const POOL_MAX: usize = 256 << 20;

/// A private anonymous mapping of `n` bytes (from the pool, or fresh), owned by a region until
/// deregistration.
pub(crate) fn map_anon(n: usize, what: &str) -> Result<usize, String> {
    if let Some(mut pool) = STATE.pool.try_lock() {
        if let Some(i) = pool.iter().position(|&(_, len)| len == n) {
            return Ok(pool.swap_remove(i).0);
        }
    }
    mrshim_dirty::map_private(n).map_err(|e| format!("mmap of a {n}-byte {what} failed: {e}"))
}

/// Back to the pool (stale contents: a region fills all of its bytes before use, and its MR
/// covers only those), or unmapped when the pool is full.
pub(crate) fn unmap((p, n): Mapping) {
    if n == 0 {
        return;
    }
    if let Some(mut pool) = STATE.pool.try_lock() {
        if pool.iter().map(|e| e.1).sum::<usize>() + n <= POOL_MAX {
            pool.push((p, n));
            return;
        }
    }
    // SAFETY: unmapping a shadow this crate mapped and nobody references any more.
    unsafe { libc::munmap(p as *mut libc::c_void, n) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_mapping_is_handed_out_again_for_the_same_size_only() {
        let n = 3 * 4096 + 4096 * 7; // a size no other test maps
        let p = map_anon(n, "test").unwrap();
        unmap((p, n));
        assert_ne!(map_anon(n + 4096, "test").unwrap(), p, "another size maps afresh");
        assert_eq!(map_anon(n, "test").unwrap(), p, "the same size comes from the pool");
    }
}
