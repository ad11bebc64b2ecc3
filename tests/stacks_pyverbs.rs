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
        assert_stack_records(&w, mode, 1, "pyverbs");
    }
}
