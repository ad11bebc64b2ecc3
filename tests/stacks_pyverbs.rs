//! rdma-core's own tests (pyverbs, Debian's python3-pyverbs 44.0-2) on the simulator through
//! `mrshim sim`, plain and with the shim recording every registration; the outcomes must be
//! tests/fixtures/pyverbs.txt's `sim` rows. The kernel tier runs the same runner
//! (tests/shim_util/pyverbs.rs) on rxe0 against the `rxe0` rows.

mod shim_util;
use shim_util::*;

#[test]
fn pyverbs_outcomes_as_listed_plain_and_with_the_shim() {
    for mode in [Mode::Plain, Mode::Shim] {
        let w = SimWorld::new(&format!("pyverbs-{mode:?}"));
        let a = pyverbs::args("mlx5_0");
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = run(&mut stack_cmd(&w, mode, 0, pyverbs::PYTHON, &a));
        // unittest writes its report on stderr
        let out = stderr(&o);
        assert!(o.status.success(), "pyverbs {mode:?} ({}):\n{}\n{out}", o.status, stdout(&o));
        if let Err(e) = pyverbs::compare(&out, "sim") {
            panic!("{mode:?}: {e}");
        }
        if mode == Mode::Shim {
            // test_rdmacm's tests fork their passive side: one log per process, every process's
            // registrations on the one device log of rank 0
            // (the forked children end with os._exit, without a summary: the test runner's own
            // log, which has one, goes last)
            let mut logs: Vec<_> = files(&w.dir.join("logs")).iter().map(|f| records(f)).collect();
            logs.sort_by_key(|l| l.last().is_some_and(|r| r.summary.is_some()));
            assert!(logs.iter().rev().skip(1).all(|l| l.last().is_some_and(|r| r.summary.is_none())));
            let recs: Vec<_> = logs.into_iter().flatten().collect();
            let dev = sim_log(&w.dir.join("sim-r0.jsonl"));
            assert_records_match_device(&recs, &dev, "pyverbs Shim, every process");
        }
    }
}
