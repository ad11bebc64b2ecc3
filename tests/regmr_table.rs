//! The registration table (tests/c/regmr_table.c) on the simulator against the `sim` column of
//! tests/fixtures/regmr_table.txt, whose `rxe0` and `siw0` columns the kernel tier checks on the
//! kernel's soft-RoCE and soft-iWARP (tests/kernel_tier.rs): the simulator answers every
//! provider-independent case as the kernel does, and every case where they differ is explained,
//! here and in docs/sim.md (rxe vs the simulator) or docs/testbeds.md (siw vs rxe).

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
    let differ: Vec<&[String; 5]> = rows.iter().filter(|r| r[1] != r[2]).collect();
    assert!(!differ.is_empty());
    for r in &rows {
        if r[1] == r[2] && r[1] == r[3] {
            assert!(r[4].is_empty(), "{}: equal answers need no reason: {}", r[0], r[4]);
        }
        if r[1] != r[2] {
            assert!(!r[4].is_empty(), "{}: rxe0 {} vs sim {} without a reason: fix the simulator", r[0], r[1], r[2]);
            assert!(doc.contains(&format!("`{}`", r[0])), "docs/sim.md does not list `{}`", r[0]);
        }
    }
}

/// siw and rxe are both the kernel's: where they differ, the provider's own code does, and the
/// row says how (`siw:` in its reason) and docs/testbeds.md lists the case.
#[test]
fn every_difference_between_the_kernels_providers_is_explained() {
    let doc =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/testbeds.md")).unwrap();
    let rows = regmr_fixture();
    assert!(rows.iter().any(|r| r[1] != r[3]), "siw0 answers every case as rxe0: the column was not measured");
    for r in rows.iter().filter(|r| r[1] != r[3]) {
        assert!(r[4].contains("siw:"), "{}: rxe0 {} vs siw0 {} without a `siw:` reason", r[0], r[1], r[3]);
        assert!(doc.contains(&format!("`{}`", r[0])), "docs/testbeds.md does not list `{}`", r[0]);
    }
}
