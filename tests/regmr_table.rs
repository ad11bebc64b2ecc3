//! The registration table (tests/c/regmr_table.c) on the simulator against the `sim` column of
//! tests/fixtures/regmr_table.txt, whose `rxe0` column the kernel tier checks on the kernel's
//! soft-RoCE (tests/kernel_tier.rs): the simulator answers every provider-independent case as
//! the kernel does, and every case where the two differ is explained, here and in docs/sim.md.

mod shim_util;
use shim_util::*;

#[test]
fn simulator_answers_the_registration_table_as_the_fixture_says() {
    let prog = mrshim_test_support::c_program(&src_c("regmr_table.c"), "c", &["-libverbs"]);
    let o = run(cmd("timeout").args(["-k", "5", "120"]).arg(mrshim_bin()).args(["sim", "--"]).arg(&prog));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let n = regmr_compare(&stdout(&o), "sim").unwrap_or_else(|e| panic!("{e}"));
    assert!(n >= 50, "{n} cases");
}

#[test]
fn every_difference_from_the_kernel_is_explained_in_docs_sim_md() {
    let doc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sim.md")).unwrap();
    let rows = regmr_fixture();
    let differ: Vec<&[String; 4]> = rows.iter().filter(|r| r[1] != r[2]).collect();
    assert!(!differ.is_empty());
    for r in &rows {
        if r[1] == r[2] {
            assert!(r[3].is_empty(), "{}: equal answers need no reason: {}", r[0], r[3]);
        } else {
            assert!(!r[3].is_empty(), "{}: rxe0 {} vs sim {} without a reason: fix the simulator", r[0], r[1], r[2]);
            assert!(doc.contains(&format!("`{}`", r[0])), "docs/sim.md does not list `{}`", r[0]);
        }
    }
}
