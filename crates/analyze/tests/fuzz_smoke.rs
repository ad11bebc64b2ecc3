//! A stable-toolchain stand-in for the cargo-fuzz target: deterministic mutations (bit flips, cuts,
//! splices, inserted NULs and invalid UTF-8) of every fixture through `fuzz_one`. No panic allowed.
use std::path::Path;

fn files(dir: &Path, out: &mut Vec<Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push(b);
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut corpus = Vec::new();
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/logs"), &mut corpus);
    assert!(!corpus.is_empty());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..600 {
        let base = &corpus[round % corpus.len()];
        let mut d = base.clone();
        for _ in 0..1 + rng.below(8) {
            if d.is_empty() {
                break;
            }
            let i = rng.below(d.len());
            match rng.below(6) {
                0 => d[i] ^= 1 << rng.below(8),
                1 => d.truncate(i),
                2 => d.insert(i, 0),
                3 => d.insert(i, 0xff),
                4 => {
                    let other = &corpus[rng.below(corpus.len())];
                    let j = rng.below(other.len());
                    d.splice(i..i, other[j..(j + 200).min(other.len())].iter().copied());
                }
                _ => {
                    let j = rng.below(d.len());
                    let (a, b) = (i.min(j), i.max(j));
                    d.drain(a..b);
                }
            }
        }
        mrshim_analyze::fuzz_one(&d);
    }
    mrshim_analyze::fuzz_one(b"");
    mrshim_analyze::fuzz_one(&[0x1f, 0x8b, 0x08, 0x00]);
    mrshim_analyze::fuzz_one(b"{\"v\":1,\"kind\":\"reg\"");
}
