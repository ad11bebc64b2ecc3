//! Where two byte buffers differ, as runs `[start, end)`: how the bounce layer finds the bytes a
//! peer wrote into a shadow since its last sync, and the bytes the application changed in its
//! own buffer.
//!
//! Runs are exact at both ends; inside a run, equal bytes between differing ones are included as
//! long as no whole aligned 64-byte chunk between them is equal (so a gap inside a run is at
//! most 126 bytes). That keeps a peer's write of data that happens to contain bytes equal to the
//! old contents one run (one copy) instead of thousands of tiny ones.

const PAGE: usize = 4096;
const CHUNK: usize = 64;

/// XOR of the 8-byte words of two chunks, OR-ed together: zero iff they are equal. Fixed-size
/// arrays, so there is no bounds check and the compiler turns it into a few vector ops.
#[inline(always)]
fn chunk_differs(x: &[u8; CHUNK], y: &[u8; CHUNK]) -> bool {
    let w = |s: &[u8; CHUNK], k: usize| u64::from_ne_bytes(s[8 * k..8 * k + 8].try_into().unwrap());
    (0..CHUNK / 8).fold(0, |acc, k| acc | (w(x, k) ^ w(y, k))) != 0
}

/// First differing index in `[i, end)` (the caller knows there is one).
fn first_diff(x: &[u8], y: &[u8], i: usize, end: usize) -> usize {
    (i..end).find(|&k| x[k] != y[k]).unwrap_or(end)
}

/// One past the last differing index in `[i, end)` (the caller knows there is one).
fn last_diff(x: &[u8], y: &[u8], i: usize, end: usize) -> usize {
    (i..end).rev().find(|&k| x[k] != y[k]).map_or(i, |k| k + 1)
}

/// Calls `f(start, end)` for every run where `x` and `y` differ, in order. Compares
/// `min(x.len(), y.len())` bytes. Equal pages cost one `memcmp`.
pub fn for_each_run(x: &[u8], y: &[u8], mut f: impl FnMut(usize, usize)) {
    let n = x.len().min(y.len());
    // The last differing byte of a run is in its last differing chunk, which ends at `e`.
    let mut close = |s: usize, e: usize| f(s, last_diff(x, y, s.max(e.saturating_sub(CHUNK)), e));
    let mut open: Option<(usize, usize)> = None; // a run and the end of its last differing chunk
    let mut i = 0;
    while i < n {
        let page_end = (i + PAGE).min(n);
        if x[i..page_end] == y[i..page_end] {
            if let Some((s, e)) = open.take() {
                close(s, e);
            }
            i = page_end;
            continue;
        }
        // Chunk c of this page: [i + c*CHUNK, end(c)); the last one may be short.
        let n_chunks = (page_end - i).div_ceil(CHUNK);
        let end = |c: usize| (i + (c + 1) * CHUNK).min(page_end);
        let differs = |c: usize| {
            let (a, e) = (i + c * CHUNK, end(c));
            match (x[a..e].try_into(), y[a..e].try_into()) {
                (Ok(xa), Ok(ya)) => chunk_differs(xa, ya),
                _ => x[a..e] != y[a..e],
            }
        };
        // Two tight loops, not a state machine per chunk: skip equal chunks, then extend the run
        // over differing ones.
        let mut c = 0;
        while c < n_chunks {
            if open.is_none() {
                while c < n_chunks && !differs(c) {
                    c += 1;
                }
                if c == n_chunks {
                    break;
                }
                open = Some((first_diff(x, y, i + c * CHUNK, end(c)), end(c)));
                c += 1;
            }
            let Some((s, _)) = open else { unreachable!() };
            let from = c;
            while c < n_chunks && differs(c) {
                c += 1;
            }
            if c > from {
                open = Some((s, end(c - 1)));
            }
            if c < n_chunks {
                // chunk c is equal: the run ends before it
                let (s, e) = open.take().unwrap();
                close(s, e);
                c += 1;
            }
        }
        i = page_end;
    }
    if let Some((s, e)) = open {
        close(s, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(x: &[u8], y: &[u8]) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for_each_run(x, y, |a, b| v.push((a, b)));
        v
    }

    #[test]
    fn equal_buffers_have_no_runs() {
        let x = vec![7u8; 3 * PAGE + 5];
        assert!(runs(&x, &x.clone()).is_empty());
        assert!(runs(&[], &[]).is_empty());
    }

    #[test]
    fn ends_are_byte_exact() {
        let x = vec![0u8; 2 * PAGE + 100];
        for (a, b) in
            [(0, 1), (5, 6), (63, 65), (100, 4100), (4095, 4097), (2 * PAGE + 99, 2 * PAGE + 100), (0, 2 * PAGE + 100)]
        {
            let mut y = x.clone();
            y[a..b].fill(1);
            assert_eq!(runs(&x, &y), vec![(a, b)], "{a}..{b}");
        }
    }

    #[test]
    fn far_apart_changes_are_separate_runs_near_ones_merge() {
        let x = vec![0u8; 3 * PAGE];
        let mut y = x.clone();
        y[10] = 1;
        y[200] = 1; // chunks 64..192 equal in between: separate
        y[4090] = 1;
        y[4100] = 1; // across a page boundary, 10 bytes apart: one run
        assert_eq!(runs(&x, &y), vec![(10, 11), (200, 201), (4090, 4101)]);
    }

    #[test]
    fn a_write_with_bytes_equal_to_the_old_contents_is_one_run() {
        let x: Vec<u8> = (0..PAGE * 2).map(|i| (i % 7) as u8).collect();
        let mut y = x.clone();
        for (k, b) in y[300..7000].iter_mut().enumerate() {
            if k % 5 != 0 {
                *b = b.wrapping_add(1); // every fifth byte keeps its old value
            }
        }
        assert_eq!(runs(&x, &y), vec![(301, 7000)]);
    }

    #[test]
    fn every_changed_byte_is_inside_a_run_and_runs_are_ordered() {
        // A small deterministic generator: many random change patterns.
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..200 {
            let n = (next() % 9000) as usize + 1;
            let x: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            let mut y = x.clone();
            for _ in 0..(next() % 20) {
                let a = (next() as usize) % n;
                let b = (a + (next() as usize) % 300).min(n);
                for v in &mut y[a..b] {
                    *v = !*v;
                }
            }
            let r = runs(&x, &y);
            for w in r.windows(2) {
                assert!(w[0].1 < w[1].0, "{r:?}");
            }
            for &(a, b) in &r {
                assert!(x[a] != y[a] && x[b - 1] != y[b - 1], "{a}..{b} not exact");
            }
            for k in 0..n {
                if x[k] != y[k] {
                    assert!(r.iter().any(|&(a, b)| a <= k && k < b), "byte {k} missed: {r:?}");
                }
            }
            // Runs are split exactly where a whole aligned chunk is equal: none inside a run,
            // at least one between two runs.
            let equal_chunk = |c: usize| c + CHUNK <= n && x[c..c + CHUNK] == y[c..c + CHUNK];
            for &(a, b) in &r {
                let first = a.div_ceil(CHUNK) * CHUNK;
                assert!(
                    (first..b.saturating_sub(CHUNK) + 1).step_by(CHUNK).all(|c| c + CHUNK > b || !equal_chunk(c)),
                    "equal chunk inside {a}..{b}"
                );
            }
            for w in r.windows(2) {
                let first = w[0].1.div_ceil(CHUNK) * CHUNK;
                assert!(
                    (first..w[1].0).step_by(CHUNK).any(|c| c + CHUNK <= w[1].0 && equal_chunk(c)),
                    "{w:?} split without an equal chunk between"
                );
            }
        }
    }
}
