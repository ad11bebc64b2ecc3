//! Issue 28 item 6: the generative differential checker of the bounce layer.
//!
//! tests/c/bounce_check.c derives a random program of verbs operations from a seed and runs it
//! between two processes on the simulated NIC (several QPs and threads, an SRQ, SEND/RECV, RDMA
//! WRITE, WRITE_WITH_IMM and READ, repeated wr_ids, refills, re-registration, deregistration and
//! QP destruction with work pending, refused posts, and — labelled — peer accesses the contract
//! of docs/bounce.md does not cover). Each program runs twice: on the device alone, and through
//! bounce (the device refuses the program's RELAXED_ORDERING registrations,
//! `MRSHIM_SIM_FAULTS=reg:EFAULT:relaxed`, and `MRSHIM_RETRY=bounce` registers host shadows
//! without that bit; every other program with `MRSHIM_BOUNCE_TRACK=off`). After every completion each process prints a digest of every
//! application-visible slot it owns; the two traces must be equal but for slots a labelled
//! exclusion may have changed (marked `*`). A difference fails with the seed, the program shrunk
//! to the transactions it still needs, and the commands that reproduce it.
//!
//! Knobs (environment, for the soak and for reproducing): `BOUNCE_CHECK_PROGRAMS`,
//! `BOUNCE_CHECK_TXNS`, `BOUNCE_CHECK_FEATURES` (comma list of bounce_check.c's features, or
//! `all`), `BOUNCE_CHECK_SEED0`, `BOUNCE_CHECK_SECS` (soak), `BOUNCE_CHECK_REQUIRE_REPORT=1`
//! (a difference under an exclusion must come with the shim's violation report unless no shim
//! can detect it: see below), `BOUNCE_CHECK_SHIM` (another build of libmrshim.so for the bounce
//! runs: the same programs against an older shim).
//!
//! Differences under an exclusion are "detected" when a process of the program reported a
//! violation (a `bounce coherence violation` line), else "undetected", counted by category
//! (shim_util/bounce_check.rs, `undetected_category`; docs/bounce.md, "What is detected and what
//! is not"): `read-unannounced` (a peer READ of bytes written after the owner's last SEND: the
//! owner's NIC serves it, its process sees no event), `write-late` (an unannounced write a later
//! RECV completion or idle pass brought over — what an announced write looks like — after the
//! application had looked), `unexplained` (neither: a detection is missing). The first seeds of
//! each are listed.
mod shim_util;
use shim_util::bounce_check::{clip, compare, compare_detail, undetected_category, Excluded, DEFAULT_FEATURES};
use shim_util::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn env_or(k: &str, d: &str) -> String {
    std::env::var(k).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| d.to_string())
}
fn env_num(k: &str, d: u64) -> u64 {
    let v = env_or(k, &d.to_string());
    v.parse().unwrap_or_else(|_| panic!("{k}={v}: not a number"))
}

/// (first seed, programs, transactions each, features) from the knobs, with these defaults.
fn knobs(seed0: u64, programs: u64, txns: u64) -> (u64, u64, usize, String) {
    (
        env_num("BOUNCE_CHECK_SEED0", seed0),
        env_num("BOUNCE_CHECK_PROGRAMS", programs),
        env_num("BOUNCE_CHECK_TXNS", txns) as usize,
        env_or("BOUNCE_CHECK_FEATURES", DEFAULT_FEATURES),
    )
}

/// One program: what bounce_check.c gets on its command line.
#[derive(Clone, Debug)]
struct Program {
    seed: u64,
    txns: usize,
    features: String,
    /// transactions left out (shrinking)
    skip: Vec<usize>,
    /// BOUNCE_CHECK_CORRUPT for the bounce run (the checker's own test): `I` or `I:R.S`
    corrupt: Option<String>,
}

impl Program {
    fn new(seed: u64, txns: usize, features: &str) -> Program {
        Program { seed, txns, features: features.to_string(), skip: vec![], corrupt: None }
    }
    fn args(&self) -> Vec<String> {
        let skip: Vec<String> = self.skip.iter().map(|i| i.to_string()).collect();
        vec![self.seed.to_string(), self.txns.to_string(), self.features.clone(), skip.join(",")]
    }
    fn kept(&self) -> Vec<usize> {
        (0..self.txns).filter(|i| !self.skip.contains(i)).collect()
    }
    fn keeping(&self, keep: &[usize]) -> Program {
        Program { skip: (0..self.txns).filter(|i| !keep.contains(i)).collect(), ..self.clone() }
    }
}

/// What one program's two runs showed.
#[derive(Debug)]
enum Verdict {
    Same(Stats),
    /// A difference the contract does not allow, or a bounce run that failed.
    Differs(String),
}

/// Counts over the programs checked.
#[derive(Debug, Default, Clone)]
struct Stats {
    programs: u64,
    transactions: u64,
    posts: u64,
    completions: u64,
    /// contract exclusions exercised, by label (`X` lines)
    exclusions: BTreeMap<String, u64>,
    /// slot digests that differed under an exclusion
    excluded_diffs: u64,
    /// ... in a program whose shim reported a violation
    reported_diffs: u64,
    /// ... in a program that reported none, by category (`undetected_category`)
    silent_by_kind: BTreeMap<String, u64>,
    /// programs with a difference under an exclusion; with one the shim did not report
    programs_excluded: u64,
    programs_silent: u64,
    /// the first seeds (lowest) of programs with an undetected difference, by category
    silent_seeds: BTreeMap<String, Vec<u64>>,
    /// violations the shim reported, by kind: in how many processes
    violations: BTreeMap<String, u64>,
}

/// How many seeds of undetected differences a summary lists.
const SEEDS_LISTED: usize = 8;

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.programs += o.programs;
        self.transactions += o.transactions;
        self.posts += o.posts;
        self.completions += o.completions;
        for (k, v) in &o.exclusions {
            *self.exclusions.entry(k.clone()).or_default() += v;
        }
        self.excluded_diffs += o.excluded_diffs;
        self.reported_diffs += o.reported_diffs;
        for (k, v) in &o.silent_by_kind {
            *self.silent_by_kind.entry(k.clone()).or_default() += v;
        }
        self.programs_excluded += o.programs_excluded;
        self.programs_silent += o.programs_silent;
        for (k, v) in &o.silent_seeds {
            let seeds = self.silent_seeds.entry(k.clone()).or_default();
            seeds.extend(v);
            seeds.sort_unstable();
            seeds.dedup();
            seeds.truncate(SEEDS_LISTED);
        }
        for (k, v) in &o.violations {
            *self.violations.entry(k.clone()).or_default() += v;
        }
    }
    fn silent_diffs(&self) -> u64 {
        self.excluded_diffs - self.reported_diffs
    }
    fn line(&self) -> String {
        let list = |m: &BTreeMap<String, u64>| {
            let v: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let seeds: Vec<String> = self
            .silent_seeds
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")))
            .collect();
        format!(
            "{} programs, {} transactions, {} posts, {} completions checked; contract exclusions exercised: {}; \
             slot digests that differed under an exclusion: {} in {} programs — detected (a violation reported) {}, \
             undetected {} in {} programs (by category: {}; first seeds: {}); violations reported, processes by \
             kind: {}",
            self.programs,
            self.transactions,
            self.posts,
            self.completions,
            list(&self.exclusions),
            self.excluded_diffs,
            self.programs_excluded,
            self.reported_diffs,
            self.silent_diffs(),
            self.programs_silent,
            list(&self.silent_by_kind),
            if seeds.is_empty() { "none".to_string() } else { seeds.join("; ") },
            list(&self.violations),
        )
    }
}

struct Checker {
    prog: PathBuf,
    world: SimWorld,
}

impl Checker {
    fn new(name: &str) -> Checker {
        let lib = format!("-L{}", sim_lib_dir().display());
        let prog = mrshim_test_support::c_program(
            &src_c("bounce_check.c"),
            "c-bounce-check",
            &[&lib, "-libverbs", "-lpthread"],
        );
        Checker { prog, world: SimWorld::new(name) }
    }

    fn run(&self, p: &Program, bounce: bool) -> Output {
        let mut c = self.world.cmd(&self.prog);
        c.args(p.args());
        if bounce {
            if let Some(shim) = std::env::var_os("BOUNCE_CHECK_SHIM").filter(|v| !v.is_empty()) {
                c.env("LD_PRELOAD", shim);
            }
            c.env("MRSHIM_SIM_FAULTS", "reg:EFAULT:relaxed")
                .env("MRSHIM_RETRY", "bounce")
                // The programs' peer accesses are announced (a completion or a message) but for
                // the labelled exclusions: the user's declaration of docs/bounce.md's contract.
                .env("MRSHIM_BOUNCE_REMOTE", "announced")
                .env("MRSHIM_LOG", "off")
                .env("MRSHIM_WARN", "off");
            // Every other program without write tracking (whole-region compares: the fallback
            // on a kernel without userfaultfd write-protect).
            if p.seed % 2 == 1 {
                c.env("MRSHIM_BOUNCE_TRACK", "off");
            }
            if let Some(k) = &p.corrupt {
                c.env("BOUNCE_CHECK_CORRUPT", k);
            }
        } else {
            c.env_remove("LD_PRELOAD");
        }
        run(&mut c)
    }

    /// How to run `p` by hand, plain and through bounce.
    fn commands(&self, p: &Program) -> String {
        let base = format!(
            "LD_LIBRARY_PATH={} MRSHIM_SIM_RUNDIR={}",
            self.world.lib_dir.display(),
            self.world.dir.join("run").display()
        );
        let args: Vec<String> = p.args().iter().map(|a| if a.is_empty() { "''".into() } else { a.clone() }).collect();
        let args = args.join(" ");
        format!(
            "  plain:  {base} {prog} {args}\n  bounce: {base} LD_PRELOAD={shim} MRSHIM_SIM_FAULTS=reg:EFAULT:relaxed \
             MRSHIM_RETRY=bounce MRSHIM_BOUNCE_REMOTE=announced {track}{corrupt}{prog} {args}",
            prog = self.prog.display(),
            shim = std::env::var("BOUNCE_CHECK_SHIM")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| shim_lib().display().to_string()),
            track = if p.seed % 2 == 1 { "MRSHIM_BOUNCE_TRACK=off " } else { "" },
            corrupt = p.corrupt.as_ref().map(|k| format!("BOUNCE_CHECK_CORRUPT={k} ")).unwrap_or_default(),
        )
    }

    fn check(&self, p: &Program) -> Verdict {
        let plain = self.run(p, false);
        assert!(
            plain.status.success(),
            "the plain run of seed {} failed: the checker itself is broken\n{}\n{}",
            p.seed,
            stderr(&plain),
            self.commands(p)
        );
        let bounce = self.run(p, true);
        let (out, err) = (stdout(&bounce), stderr(&bounce));
        if !bounce.status.success() {
            let tail: Vec<&str> = err.lines().rev().take(6).collect();
            return Verdict::Differs(format!(
                "the bounce run failed ({}): {}",
                bounce.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        assert!(err.contains("bounce rescued"), "the bounce run did not bounce: {err}");
        let reports = Reports::of(&err);
        match compare_detail(&stdout(&plain), &out) {
            Err(d) => Verdict::Differs(d),
            Ok(excluded) => {
                let silent: Vec<&Excluded> = if reports.any { vec![] } else { excluded.iter().collect() };
                let unexplained: Vec<&&Excluded> =
                    silent.iter().filter(|x| undetected_category(x) == "unexplained").collect();
                if !unexplained.is_empty() && std::env::var("BOUNCE_CHECK_REQUIRE_REPORT").is_ok_and(|v| v == "1") {
                    return Verdict::Differs(format!(
                        "{} slot digests differed under a contract exclusion, the shim reported no violation, \
                         and the difference is not of a kind no shim can detect (first: {:?})",
                        unexplained.len(),
                        unexplained[0]
                    ));
                }
                let mut s = stats_of(&out);
                s.excluded_diffs = excluded.len() as u64;
                s.reported_diffs = (excluded.len() - silent.len()) as u64;
                for x in &silent {
                    let k = undetected_category(x).to_string();
                    *s.silent_by_kind.entry(k.clone()).or_default() += 1;
                    s.silent_seeds.insert(k, vec![p.seed]);
                }
                s.programs_excluded = u64::from(!excluded.is_empty());
                s.programs_silent = u64::from(!silent.is_empty());
                s.violations = reports.kinds;
                Verdict::Same(s)
            }
        }
    }

    /// A difference that persists, in up to `tries` runs (a race may need more than one).
    fn differs(&self, p: &Program, tries: u32) -> Option<String> {
        (0..tries).find_map(|_| match self.check(p) {
            Verdict::Differs(d) => Some(d),
            Verdict::Same(_) => None,
        })
    }

    /// Drops transactions while the difference persists (delta debugging: halves, then
    /// quarters, ... then one at a time until none can go).
    fn shrink(&self, p: &Program, first: String) -> (Program, String) {
        let mut keep = p.kept();
        if self.differs(p, 3).is_none() {
            // a race that a rerun does not hit again: nothing to shrink against
            return (p.clone(), format!("{first} (not seen again in 3 more runs: timing-dependent)"));
        }
        let mut found = first;
        let mut chunk = keep.len().div_ceil(2).max(1);
        loop {
            let mut progress = false;
            let mut i = 0;
            while i < keep.len() && keep.len() > 1 {
                let cand: Vec<usize> =
                    keep[..i].iter().chain(keep[(i + chunk).min(keep.len())..].iter()).copied().collect();
                match self.differs(&p.keeping(&cand), 3) {
                    Some(d) => {
                        keep = cand;
                        found = d;
                        progress = true;
                    }
                    None => i += chunk,
                }
            }
            if chunk == 1 && !progress {
                break;
            }
            chunk = (chunk / 2).max(1);
        }
        (p.keeping(&keep), found)
    }

    /// The failure message: seed, the shrunk program's transactions, the difference, commands.
    fn report(&self, p: &Program, first: String) -> String {
        let (min, d) = self.shrink(p, first.clone());
        let plain = stdout(&self.run(&min, false));
        let listing: Vec<&str> = plain.lines().filter(|l| l.starts_with("T ") || l.starts_with("X ")).collect();
        format!(
            "bounce changed application-visible bytes: seed {} ({} transactions, features {})\n\
             first difference of the full program: {}\n\
             minimal program ({} of {} transactions):\n{}\n\
             its difference: {}\n\
             reproduce:\n{}",
            p.seed,
            p.txns,
            p.features,
            clip(&first),
            min.kept().len(),
            p.txns,
            listing.join("\n"),
            clip(&d),
            self.commands(&min)
        )
    }

    /// Checks `seeds` on two threads; stops at the first difference (its report) or when
    /// `deadline` passes. Returns the counts and the reports of failing seeds.
    fn check_many(
        &self,
        seeds: std::ops::Range<u64>,
        txns: usize,
        features: &str,
        deadline: Option<Instant>,
    ) -> (Stats, Vec<String>) {
        let next = AtomicU64::new(seeds.start);
        let stop = AtomicBool::new(false);
        let total = Mutex::new(Stats::default());
        let failed: Mutex<Vec<(Program, String)>> = Mutex::new(vec![]);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| loop {
                    if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() > d) {
                        return;
                    }
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end {
                        return;
                    }
                    let p = Program::new(seed, txns, features);
                    match self.check(&p) {
                        Verdict::Same(st) => {
                            let mut t = total.lock().unwrap();
                            t.add(&st);
                            if t.programs % 1000 == 0 {
                                eprintln!("bounce checker: {}", t.line());
                            }
                        }
                        Verdict::Differs(d) => {
                            failed.lock().unwrap().push((p, d));
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let failed = failed.into_inner().unwrap();
        let reports = failed.into_iter().take(1).map(|(p, d)| self.report(&p, d)).collect();
        (total.into_inner().unwrap(), reports)
    }
}

/// The shim's violation reports in a bounce run's stderr.
struct Reports {
    /// whether a process of the program reported a violation
    any: bool,
    /// processes that reported a violation of each kind
    kinds: BTreeMap<String, u64>,
}

impl Reports {
    /// The shim's lines start with `host:pid:tid` (a kind is counted once per process).
    fn of(err: &str) -> Reports {
        let mut r = Reports { any: false, kinds: BTreeMap::new() };
        let mut seen: Vec<(Option<u32>, String)> = Vec::new();
        for l in err.lines() {
            let Some(at) = l.find("bounce coherence violation") else { continue };
            r.any = true;
            let pid = l.split_whitespace().next().and_then(|p| p.split(':').nth(1)).and_then(|p| p.parse::<u32>().ok());
            // `... violation (<kind>): ...`; the exit summary says `N bounce coherence violations`
            let kind = l[at..]
                .strip_prefix("bounce coherence violation (")
                .and_then(|k| k.split_once(')'))
                .map(|(k, _)| k.to_string());
            if let Some(k) = kind {
                if !seen.contains(&(pid, k.clone())) {
                    seen.push((pid, k.clone()));
                    *r.kinds.entry(k).or_default() += 1;
                }
            }
        }
        r
    }
}

/// Counts of one trace: its `S` line and `X` lines.
fn stats_of(out: &str) -> Stats {
    let mut s = Stats { programs: 1, ..Default::default() };
    for l in out.lines() {
        if let Some(x) = l.strip_prefix("X ") {
            *s.exclusions.entry(x.split(' ').next().unwrap_or("").to_string()).or_default() += 1;
        }
        if let Some(st) = l.strip_prefix("S ") {
            for f in st.split_whitespace() {
                let (k, v) = f.split_once('=').unwrap();
                let v: u64 = v.parse().unwrap();
                match k {
                    "transactions" => s.transactions = v,
                    "posts" => s.posts = v,
                    "completions" => s.completions = v,
                    _ => {}
                }
            }
        }
    }
    s
}

/// The bounded run of `scripts/test`: 200 programs of 40 transactions (set the knobs above for
/// more); every application-visible byte equal with and without bounce, or changed only under a
/// labelled contract exclusion.
#[test]
fn random_verbs_programs_see_the_same_bytes_through_bounce() {
    let c = Checker::new("bounce-checker");
    let (seed0, n, txns, features) = knobs(1, 200, 40);
    let (stats, failed) = c.check_many(seed0..seed0 + n, txns, &features, None);
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    eprintln!("bounce checker ({features}): {}", stats.line());
    assert_eq!(stats.programs, n);
    if features.contains("unannounced") || features == "all" {
        assert!(!stats.exclusions.is_empty(), "no exclusion exercised: {}", stats.line());
    }
}

/// The oracle is sound: a program run twice without bounce prints the same trace (nothing in it
/// depends on timing), with every feature on.
#[test]
fn a_program_run_twice_without_bounce_prints_the_same_trace() {
    let c = Checker::new("bounce-checker-plain");
    for seed in 1..=20 {
        let p = Program::new(seed, 40, "all");
        let a = c.run(&p, false);
        let b = c.run(&p, false);
        assert!(a.status.success() && b.status.success(), "seed {seed}: {}{}", stderr(&a), stderr(&b));
        assert_eq!(compare(&stdout(&a), &stdout(&b)), Ok(0), "seed {seed}:\n{}", c.commands(&p));
        assert_eq!(stdout(&a), stdout(&b), "seed {seed}");
    }
}

/// Seed 1001545 (tracking off), shrunk: A refills a slot after a QP destroy, B READs it
/// unannounced (a contract exclusion: B's slot 1.3 may differ), then one SEND transaction sends
/// B.1.3 to A.0.3, refills B.1.3 and sends it again. The first message carries the excluded
/// bytes, so A.0.3 is excluded after its receive; the oracle once took the taint from the source
/// as it was after the refill and reported bounce's (allowed) difference there as a defect.
#[test]
fn bytes_sent_from_an_excluded_slot_stay_excluded_when_it_is_refilled_for_the_next_message() {
    let c = Checker::new("bounce-checker-1001545");
    let p = Program::new(1_001_545, 60, DEFAULT_FEATURES).keeping(&[17, 18, 27, 30]);
    let plain = stdout(&c.run(&p, false));
    assert!(plain.contains("\nX unannounced-read B.1.3\n"), "the program changed:\n{plain}");
    let recv = plain.lines().find(|l| l.starts_with("A 30r.0 RECV ")).expect("A's first receive of T 30");
    assert!(
        recv.split_whitespace().any(|f| f.starts_with("0.3=") && f.contains('*')),
        "A.0.3 holds B.1.3's excluded bytes and is not marked: {recv}"
    );
    match c.check(&p) {
        Verdict::Same(s) => assert!(s.excluded_diffs > 0, "bounce no longer differs here: {}", s.line()),
        Verdict::Differs(d) => panic!("{d}\n{}", c.commands(&p)),
    }
}

/// The checker's own failure path: a byte flipped behind the program's back in the bounce run
/// (BOUNCE_CHECK_CORRUPT) is reported with the seed, shrunk to the one transaction after which it
/// happens, and the commands that reproduce it.
#[test]
fn a_difference_is_reported_with_its_seed_and_a_minimal_program() {
    let c = Checker::new("bounce-checker-self");
    let p = Program { corrupt: Some("11".into()), ..Program::new(5, 24, DEFAULT_FEATURES) };
    let Verdict::Differs(d) = c.check(&p) else { panic!("a flipped byte went unnoticed") };
    assert!(d.contains("slot 0.0 is"), "{d}");
    let r = c.report(&p, d);
    assert!(r.starts_with("bounce changed application-visible bytes: seed 5 (24 transactions"), "{r}");
    assert!(r.contains("minimal program (1 of 24 transactions):\nT 11 "), "{r}");
    assert!(r.contains("BOUNCE_CHECK_CORRUPT=11 "), "{r}");
    let skip = (0..24).filter(|&i| i != 11).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    assert!(r.contains(&skip), "{r}");
}

/// The soak (scripts/bounce-soak): programs until BOUNCE_CHECK_PROGRAMS are checked or
/// BOUNCE_CHECK_SECS pass; prints how many programs and operations were checked.
#[test]
#[ignore]
fn soak() {
    let c = Checker::new("bounce-soak");
    let (seed0, n, txns, features) = knobs(1_000_000, 10_000, 60);
    let secs = env_num("BOUNCE_CHECK_SECS", 3600);
    let start = Instant::now();
    let (stats, failed) = c.check_many(seed0..seed0 + n, txns, &features, Some(start + Duration::from_secs(secs)));
    println!(
        "bounce soak ({features}, seeds from {seed0}, {txns} transactions each, {:.0} s): {}",
        start.elapsed().as_secs_f64(),
        stats.line()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// Seeds 9002013, 9003006, 9005890 and 9009608 of a 10,000-program soak, shrunk: bytes an
/// unannounced write tainted (into the plain MR, or into a bounce region whose shadow a RECV
/// completion then synced) reach a slot — sent on, read, or written in place — and an unannounced
/// READ then replaces every one of them with what the owner's shadow holds: its bytes from before
/// the refill it made after its last SEND (in all four, byte for byte). The READ decides those
/// bytes: the difference is `read-unannounced`, which no shim can detect. The model once kept
/// the write's taint too, and the checker counted the difference as `unexplained`. Seed 12001170
/// likewise, but the READ (A.0.2+0, 4090 bytes) replaces all but 4 of the write's bytes
/// (A.0.2+3, 4091 bytes), which a sync brought over: the slot is marked with both kinds, and the
/// bytes that differ are the READ's. Seed 12005389: B READs A.0.0 unannounced into B.3.0, then
/// WRITEs B.3.0 into A.1.2 unannounced; a RECV completion brings the write over: A.1.2 holds what
/// B wrote in both runs (the write arrived), and that differs by what B's READ got.
#[test]
fn bytes_an_unannounced_read_replaced_are_the_reads_whatever_wrote_them_before() {
    let c = Checker::new("bounce-checker-read-replaces");
    for (seed, keep, read_line, slot) in [
        (9_002_013, &[25, 34, 56, 59][..], "A 59.1 READ ", "3.0="),
        (9_003_006, &[0, 40, 50, 52][..], "B 52.1 READ ", "3.3="),
        (9_005_890, &[21, 52, 53, 54][..], "B 54.1 READ ", "1.1="),
        (9_009_608, &[25, 30, 31][..], "A 31.1 READ ", "3.3="),
        (12_001_170, &[21, 52, 53, 54][..], "A 54.1 READ ", "0.2="),
        (12_005_389, &[27, 29, 36, 40][..], "A 40r.0 RECV_IMM ", "1.2="),
    ] {
        let p = Program::new(seed, 60, DEFAULT_FEATURES).keeping(keep);
        let plain = stdout(&c.run(&p, false));
        let line = plain.lines().find(|l| l.starts_with(read_line)).unwrap_or_else(|| panic!("seed {seed}:\n{plain}"));
        let digest = line.split_whitespace().find(|f| f.starts_with(slot)).unwrap_or_else(|| panic!("{line}"));
        let mark = match seed {
            12_001_170 => "*wr:",
            12_005_389 => ":1r",
            _ => "*r:",
        };
        assert!(digest.contains(mark), "seed {seed}: the READ's slot is not marked {mark}: {digest}\n{plain}");
        match c.check(&p) {
            Verdict::Same(s) => assert!(
                s.silent_by_kind.get("read-unannounced").is_some_and(|&n| n > 0)
                    && !s.silent_by_kind.contains_key("unexplained"),
                "seed {seed}: {}\n{}",
                s.line(),
                c.commands(&p)
            ),
            Verdict::Differs(d) => panic!("seed {seed}: {d}\n{}", c.commands(&p)),
        }
    }
}

/// The other side of the test above: bytes an unannounced READ did not replace keep the
/// write's taint, and bytes neither exclusion touched none. Seed 12002472, shrunk: B writes
/// A.1.3+2115 (64 bytes) unannounced, refills its B.1.3, A READs B.1.3 into A.1.3+0 (64 bytes)
/// unannounced, then RECV completions bring B's write over (late). The difference left at the
/// end is the READ's. A byte that then changes without a word from the shim (BOUNCE_CHECK_CORRUPT
/// flips it in the bounce run) is an `unexplained` difference — a detection missing — in the
/// bytes the write tainted and in bytes nothing did; in the READ's bytes no shim could tell.
#[test]
fn a_silent_change_outside_an_unannounced_reads_bytes_stays_unexplained() {
    let c = Checker::new("bounce-checker-strict");
    let p = Program::new(12_002_472, 60, DEFAULT_FEATURES).keeping(&[46, 47, 50, 59]);
    let plain = stdout(&c.run(&p, false));
    assert!(
        plain.contains("\nX unannounced-write A.1.3\n") && plain.contains("\nX unannounced-read A.1.3\n"),
        "the program changed:\n{plain}"
    );
    let kinds = |p: &Program| match c.check(p) {
        Verdict::Same(s) => s.silent_by_kind,
        Verdict::Differs(d) => panic!("{d}\n{}", c.commands(p)),
    };
    let k = kinds(&p);
    assert!(k.contains_key("read-unannounced") && !k.contains_key("unexplained"), "{k:?}\n{}", c.commands(&p));
    for (at, what) in [("2130", "the bytes the write tainted"), ("3000", "bytes no exclusion touched")] {
        let bad = Program { corrupt: Some(format!("59:1.3+{at}")), ..p.clone() };
        let k = kinds(&bad);
        assert!(
            k.contains_key("unexplained"),
            "a silent change in {what} was not unexplained: {k:?}\n{}",
            c.commands(&bad)
        );
    }
    let bad = Program { corrupt: Some("59:1.3+10".into()), ..p.clone() };
    let k = kinds(&bad);
    assert!(!k.contains_key("unexplained"), "a change in the READ's bytes: {k:?}\n{}", c.commands(&bad));
}
