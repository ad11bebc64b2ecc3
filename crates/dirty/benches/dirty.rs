//! `cargo bench -p mrshim-dirty`: what tracking costs against what it saves. Per range size: a
//! scan that finds nothing, a compare of the whole range (what a fold without tracking does),
//! and per page the minor fault of a first write to a protected page against a compare of one.
//! The policy constants of src/lib.rs come from these.

use mrshim_dirty::{uffd::Kernel, Pages, PAGE};
use std::hint::black_box;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut k = match Kernel::open() {
        Ok(k) => k,
        Err(e) => return println!("no kernel write tracking here: {e}"),
    };
    println!("| range | clean scan, µs | whole compare, µs | write fault per page, µs | compare per page, µs |");
    println!("| --- | --- | --- | --- | --- |");
    for len in [64u64 << 10, 1 << 20, 16 << 20, 64 << 20] {
        let n = len as usize;
        let mut a = vec![1u8; n + PAGE as usize];
        let b = vec![1u8; n];
        let p = (a.as_mut_ptr() as u64).next_multiple_of(PAGE);
        // SAFETY: n bytes of `a` from its first page boundary.
        let app = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) };
        k.arm(p, len).unwrap();
        let mut out = Vec::new();
        k.scan(p, len, &mut out).unwrap();
        let reps = (64 << 20) / n;
        let scan = median(
            (0..reps.clamp(5, 200))
                .map(|_| {
                    out.clear();
                    let t = Instant::now();
                    k.scan(p, len, &mut out).unwrap();
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect(),
        );
        let cmp = median(
            (0..reps.clamp(5, 200))
                .map(|_| {
                    let t = Instant::now();
                    black_box(black_box(&*app) == black_box(&b[..]));
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect(),
        );
        // first writes: every page protected (tracked) vs the same writes again (not protected)
        let touch = |app: &mut [u8], v: u8| {
            let t = Instant::now();
            for i in (0..n).step_by(PAGE as usize) {
                // SAFETY: inside app.
                unsafe { std::ptr::write_volatile(app.as_mut_ptr().add(i), v) };
            }
            t.elapsed().as_secs_f64() * 1e6
        };
        let mut faulted = Vec::new();
        for v in 2..7 {
            out.clear();
            k.scan(p, len, &mut out).unwrap();
            faulted.push(touch(app, v) - touch(app, v + 100));
        }
        let pages = (n / PAGE as usize) as f64;
        k.disarm(p, len);
        println!("| {} KiB | {scan:.1} | {cmp:.0} | {:.2} | {:.2} |", len >> 10, median(faulted) / pages, cmp / pages);
    }
}
