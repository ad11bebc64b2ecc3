use super::*;
use std::collections::BTreeSet;

/// A model of the kernel: armed pages, and which of them were written since their last scan.
#[derive(Default)]
struct Model {
    armed: BTreeSet<u64>,
    dirty: BTreeSet<u64>,
    fail_scan: bool,
    refuse_arm: bool,
    scans: usize,
}

impl Model {
    fn write(&mut self, addr: u64) {
        let p = addr & !(PAGE - 1);
        if self.armed.contains(&p) {
            self.dirty.insert(p);
        }
    }
}

impl Pages for Model {
    fn arm(&mut self, start: u64, len: u64) -> Result<(), String> {
        if self.refuse_arm {
            return Err("EBUSY".into());
        }
        // armed but unprotected: everything counts as written until the first scan
        for p in (start..start + len).step_by(PAGE as usize) {
            self.armed.insert(p);
            self.dirty.insert(p);
        }
        Ok(())
    }
    fn unprotect(&mut self, start: u64, len: u64) {
        for p in (start..start + len).step_by(PAGE as usize) {
            if self.armed.contains(&p) {
                self.dirty.insert(p);
            }
        }
    }
    fn disarm(&mut self, start: u64, len: u64) {
        for p in (start..start + len).step_by(PAGE as usize) {
            self.armed.remove(&p);
            self.dirty.remove(&p);
        }
    }
    fn scan(&mut self, start: u64, len: u64, out: &mut Vec<(u64, u64)>) -> Result<(), String> {
        self.scans += 1;
        if self.fail_scan {
            return Err("EPERM".into());
        }
        let hit: Vec<u64> = self.dirty.range(start..start + len).copied().collect();
        for p in hit {
            self.dirty.remove(&p);
            match out.last_mut() {
                Some(last) if last.1 == p => last.1 = p + PAGE,
                _ => out.push((p, p + PAGE)),
            }
        }
        Ok(())
    }
}

const BASE: u64 = 0x7f00_0000_0000;
const LEN: u64 = 64 * PAGE;

fn tracker() -> Tracker<Model> {
    Tracker::new(Some(Model::default()))
}

fn written(t: &mut Tracker<Model>, id: Id) -> (Answer, Vec<(u64, u64)>) {
    let mut out = Vec::new();
    let a = t.written(id, &mut out);
    (a, out)
}

#[test]
fn a_fold_reports_exactly_the_pages_written_since_the_last_one() {
    let mut t = tracker();
    let id = t.track(BASE + 100, LEN - 200).unwrap();
    assert_eq!(written(&mut t, id), (Answer::Written, vec![]), "the first scan at track() protected everything");
    t.pages.as_mut().unwrap().write(BASE + 5 * PAGE + 7);
    t.pages.as_mut().unwrap().write(BASE + 6 * PAGE);
    t.pages.as_mut().unwrap().write(BASE + 9 * PAGE + 4095);
    assert_eq!(
        written(&mut t, id),
        (Answer::Written, vec![(BASE + 5 * PAGE, BASE + 7 * PAGE), (BASE + 9 * PAGE, BASE + 10 * PAGE)])
    );
    assert_eq!(written(&mut t, id), (Answer::Written, vec![]), "nothing since");
}

/// The shim's own writes into a tracked range: unprotected in one call, clipped to the range,
/// reported at the next fold like writes.
#[test]
fn unprotected_pages_are_reported_at_the_next_fold() {
    let mut t = tracker();
    let id = t.track(BASE, LEN).unwrap();
    assert_eq!(written(&mut t, id), (Answer::Written, vec![]));
    t.unprotect(id, BASE + 3 * PAGE + 10, 2 * PAGE);
    t.unprotect(id, BASE + LEN - PAGE, 5 * PAGE);
    t.unprotect(id + 1, BASE, PAGE);
    assert_eq!(
        written(&mut t, id),
        (Answer::Written, vec![(BASE + 3 * PAGE, BASE + 6 * PAGE), (BASE + LEN - PAGE, BASE + LEN)])
    );
}

#[test]
fn small_overlapping_or_refused_ranges_are_not_tracked() {
    let mut t = tracker();
    assert_eq!(t.track(BASE, MIN_LEN - PAGE), None, "below MIN_LEN");
    let id = t.track(BASE, LEN).unwrap();
    assert_eq!(t.track(BASE + LEN - 1, LEN), None, "shares a page with a tracked range");
    assert!(t.track(BASE + LEN, LEN).is_some(), "adjacent is fine");
    t.untrack(id);
    assert!(t.track(BASE + 10, LEN - 20).is_some(), "its pages are free again");
    t.pages.as_mut().unwrap().refuse_arm = true;
    assert_eq!(t.track(BASE + 4 * LEN, LEN), None);
    let mut none: Tracker<Model> = Tracker::new(None);
    assert_eq!(none.track(BASE, LEN), None, "no kernel support");
    assert_eq!(written(&mut none, 1).0, Answer::Everything);
}

#[test]
fn a_failed_scan_turns_the_range_into_compare_everything_for_good() {
    let mut t = tracker();
    let id = t.track(BASE, LEN).unwrap();
    t.pages.as_mut().unwrap().write(BASE);
    t.pages.as_mut().unwrap().fail_scan = true;
    assert_eq!(written(&mut t, id), (Answer::Everything, vec![]));
    t.pages.as_mut().unwrap().fail_scan = false;
    let scans = t.pages.as_ref().unwrap().scans;
    assert_eq!(written(&mut t, id).0, Answer::Everything, "never trusted again");
    assert_eq!(t.pages.as_ref().unwrap().scans, scans, "and never scanned again");
    assert!(!t.pages.as_ref().unwrap().armed.contains(&BASE), "disarmed");
}

#[test]
fn unknown_ids_compare_everything() {
    let mut t = tracker();
    assert_eq!(written(&mut t, 42).0, Answer::Everything);
}

#[test]
fn a_range_written_wholesale_at_every_fold_rests_then_is_tracked_again_when_quiet() {
    let mut t = tracker();
    let id = t.track(BASE, LEN).unwrap();
    let mut folds = 0;
    while t.mode(id) == Some(Mode::Tracking) {
        for p in 0..64 {
            t.pages.as_mut().unwrap().write(BASE + p * PAGE);
        }
        assert_eq!(written(&mut t, id).1.len(), 1, "still exact while deciding");
        folds += 1;
        assert!(folds < 10);
    }
    assert_eq!(folds, 3, "0.125, 0.23, 0.33: rests after the third");
    let scans = t.pages.as_ref().unwrap().scans;
    // resting: whole compares, no scans; they find everything changed for a while
    for _ in 0..5 {
        assert_eq!(written(&mut t, id).0, Answer::Everything);
        t.compared(id, 64);
    }
    assert_eq!(t.pages.as_ref().unwrap().scans, scans, "no scans while resting");
    // quiet: the moving average decays below REARM_BELOW, then one fold re-protects
    let mut quiet = 0;
    while t.mode(id) == Some(Mode::Resting) {
        assert_eq!(written(&mut t, id).0, Answer::Everything);
        t.compared(id, 0);
        quiet += 1;
        assert!(quiet < 40);
    }
    assert!(quiet > FIRST_REST as usize - 5, "rests at least FIRST_REST folds: {quiet}");
    assert_eq!(t.mode(id), Some(Mode::Tracking));
    // re-armed: a write after the re-protecting fold is reported exactly
    t.pages.as_mut().unwrap().write(BASE + 3 * PAGE);
    assert_eq!(written(&mut t, id), (Answer::Written, vec![(BASE + 3 * PAGE, BASE + 4 * PAGE)]));
}

#[test]
fn one_rewrite_every_ten_folds_stays_tracked() {
    // a registration cache's buffer: refilled once per message, many posts in between
    let mut t = tracker();
    let id = t.track(BASE, LEN).unwrap();
    for fold in 0..200 {
        if fold % 10 == 0 {
            for p in 0..64 {
                t.pages.as_mut().unwrap().write(BASE + p * PAGE);
            }
        }
        assert_eq!(written(&mut t, id).0, Answer::Written, "fold {fold}");
    }
}

#[test]
fn a_range_that_keeps_going_back_to_resting_rests_longer_each_time() {
    // a receive buffer the shim rewrites at every message: whole compares see no change
    let mut t = tracker();
    let id = t.track(BASE, LEN).unwrap();
    let mut rests = Vec::new();
    for _ in 0..4 {
        while t.mode(id) == Some(Mode::Tracking) {
            for p in 0..64 {
                t.pages.as_mut().unwrap().write(BASE + p * PAGE);
            }
            written(&mut t, id);
        }
        let mut n = 0;
        while t.mode(id) == Some(Mode::Resting) {
            written(&mut t, id);
            t.compared(id, 0);
            n += 1;
        }
        rests.push(n);
    }
    assert!(rests.windows(2).all(|w| w[1] > w[0]), "{rests:?}");
    assert!(rests[3] > 100, "{rests:?}");
}

/// N15: a forked child builds a tracker of its own while its regions still hold the parent's
/// ids: a new range must never get an id an older one had (it would answer for the wrong range).
#[test]
fn ids_are_never_reused_across_trackers() {
    let mut a = Tracker::new(Some(Model::default()));
    let first = a.track(0x10_0000, MIN_LEN).unwrap();
    let mut b = Tracker::new(Some(Model::default()));
    let second = b.track(0x10_0000, MIN_LEN).unwrap();
    assert_ne!(first, second);
    let mut out = Vec::new();
    assert_eq!(b.written(first, &mut out), Answer::Everything, "an id of another tracker: compare everything");
}
