//! ibverbs-sys generates the `ibv_*` types from rdma-core's verbs.h but leaves out what only the
//! static-inline part of the header uses: `struct verbs_context` (the extended ops that
//! `ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_query_port` reach through) and a writable
//! `struct ibv_wc`. Generate just those from the system's verbs.h (libibverbs-dev), on top of
//! ibverbs-sys' types, so no layout is copied by hand.
use std::{env, path::PathBuf};

fn main() {
    let header = env::var("MRSHIM_VERBS_H").unwrap_or_else(|_| "/usr/include/infiniband/verbs.h".into());
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-env-changed=MRSHIM_VERBS_H");
    if !std::path::Path::new(&header).exists() {
        panic!("{header} not found: install Debian's libibverbs-dev (scripts/install-deps does)");
    }
    let bindings = bindgen::Builder::default()
        .header(&header)
        .allowlist_type("verbs_context")
        .allowlist_type("ibv_wc")
        .allowlist_var("IBV_ACCESS_.*")
        .allowlist_var("IBV_WC_.*")
        .allowlist_var("IB_UVERBS_ACCESS_.*")
        // Everything else named ibv_* comes from ibverbs-sys.
        .blocklist_type("ibv_(?:[^w].*|w[^c].*|wc.+)")
        .blocklist_type("_?ibv_.*_t")
        // ibverbs-sys spells these enums as modules with a `Type` inside; match it.
        .constified_enum_module("ibv_wc_status")
        .constified_enum_module("ibv_wc_opcode")
        .constified_enum_module("ibv_qp_type")
        .constified_enum_module("ibv_qp_state")
        .constified_enum_module("ibv_port_state")
        .constified_enum_module("ibv_wr_opcode")
        .raw_line("use ibverbs_sys::*;")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .generate()
        .expect("bindgen on verbs.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("extra.rs");
    bindings.write_to_file(out).expect("write bindings");
}
