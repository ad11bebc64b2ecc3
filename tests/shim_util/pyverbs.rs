//! rdma-core's own tests (pyverbs) as a yardstick on both beds: one runner, one fixture
//! (tests/fixtures/pyverbs.txt). Debian's python3-pyverbs 44.0-2 ships them gzipped under
//! /usr/share/doc/rdma-core/tests; scripts/install-deps unpacks them into
//! `$MRSHIM_TOOLS/pyverbs-tests/tests` (scripts/lib/tools.sh).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The modules run: the ones the simulator was first measured with (docs/sim.md), 119 tests.
pub const MODULES: [&str; 8] =
    ["test_mr", "test_qp", "test_cq", "test_pd", "test_device", "test_odp", "test_atomic", "test_rdmacm"];

/// Debian's interpreter, the one python3-pyverbs installs into (not a pyenv's or a venv's).
pub const PYTHON: &str = "/usr/bin/python3";

/// Where scripts/install-deps unpacked the tests (as scripts/lib/tools.sh computes it).
pub fn tests_dir() -> PathBuf {
    super::tools_dir().join("pyverbs-tests/tests")
}

/// `run_tests.py --dev DEV -v MODULES...`: the arguments after [`PYTHON`].
pub fn args(dev: &str) -> Vec<String> {
    let run = tests_dir().join("run_tests.py");
    assert!(run.is_file(), "{} missing: scripts/install-deps unpacks python3-pyverbs' tests", run.display());
    let mut a = vec![run.to_str().unwrap().to_string(), "--dev".into(), dev.into(), "-v".into()];
    a.extend(MODULES.iter().map(|m| m.to_string()));
    a
}

const OUTCOMES: [&str; 6] = ["ok", "FAIL", "ERROR", "skipped ", "expected failure", "unexpected success"];

/// unittest's verbose output: test id (`test_mr.MRTest.test_mr_rereg_addr`) → outcome (`ok`,
/// `skipped '...'`, `FAIL`, `ERROR`, `expected failure`, ...). Python 3.11 prints the id line,
/// then the docstring's first line, if any, then ` ... ` and the outcome — on a line of its own
/// when something else (a WARN of the shim) wrote to stderr in between.
pub fn parse(out: &str) -> BTreeMap<String, String> {
    let is_outcome = |t: &str| OUTCOMES.iter().any(|o| t.starts_with(o));
    let mut res = BTreeMap::new();
    let (mut cur, mut dots): (Option<String>, bool) = (None, false);
    for l in out.lines() {
        if let Some((name, rest)) = l.split_once(" (") {
            if name.starts_with("test") && !name.contains(' ') {
                if let Some(id) = rest.split_once(')').map(|(id, _)| id) {
                    cur = Some(id.strip_prefix("tests.").unwrap_or(id).to_string());
                    dots = false;
                }
            }
        }
        let Some(id) = &cur else { continue };
        let outcome = match l.rsplit_once(" ... ") {
            Some((_, t)) => {
                dots = true;
                Some(t.trim()).filter(|t| is_outcome(t))
            }
            None => Some(l.trim()).filter(|t| dots && is_outcome(t)),
        };
        if let Some(o) = outcome {
            res.insert(id.clone(), o.to_string());
            cur = None;
        }
    }
    res
}

/// Compares a run's outcomes with the fixture's rows for `bed` (`rxe0` or `sim`): every
/// outcome's count as listed, no outcome unlisted. On a difference: the rows that differ and
/// the tests of each unexpected outcome.
pub fn compare(out: &str, bed: &str) -> Result<String, String> {
    let got = parse(out);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for o in got.values() {
        *counts.entry(o.as_str()).or_default() += 1;
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pyverbs.txt");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = l.splitn(4, '|').collect();
        assert_eq!(f.len(), 4, "{}: {l}", p.display());
        assert!(f[1] == "ok" || !f[3].trim().is_empty(), "{}: no reason given for {l}", p.display());
        if f[0] == bed {
            want.insert(f[1].to_string(), f[2].parse().unwrap_or_else(|_| panic!("{}: {l}", p.display())));
        }
    }
    let mut bad = vec![];
    for (o, n) in &counts {
        let w = want.get(*o).copied().unwrap_or(0);
        if *n != w {
            let ids: Vec<&str> = got.iter().filter(|(_, v)| v == o).map(|(k, _)| k.as_str()).collect();
            bad.push(format!("{n} × {o} (the fixture says {w}): {}", ids.join(" ")));
        }
    }
    for (o, w) in &want {
        if !counts.contains_key(o.as_str()) {
            bad.push(format!("0 × {o} (the fixture says {w})"));
        }
    }
    if bad.is_empty() {
        Ok(format!("pyverbs on {bed}: {} tests, outcomes as in tests/fixtures/pyverbs.txt\n", got.len()))
    } else {
        Err(format!("pyverbs on {bed} differs from tests/fixtures/pyverbs.txt:\n{}\n\n{out}", bad.join("\n")))
    }
}
