//! The cdylib is the simulated `librdmacm.so.1`: rdma-core's SONAME and symbol versions, linked
//! against libibverbs.so.1 (at run time the simulated one, which `mrshim sim` puts first). The
//! `rdma_*` structs are generated from the installed rdma_cma.h (librdmacm-dev), on top of the
//! `ibv_*` types of mrshim-verbs, so no layout is copied by hand.
use std::{env, path::PathBuf};

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap();
    // tools/cc-versioned (the workspace linker) keeps only this map, see there.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rerun-if-changed=build.rs");
    let header = env::var("MRSHIM_RDMA_CMA_H").unwrap_or_else(|_| "/usr/include/rdma/rdma_cma.h".into());
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-env-changed=MRSHIM_RDMA_CMA_H");
    if !std::path::Path::new(&header).exists() {
        panic!("{header} not found: install Debian's librdmacm-dev (scripts/install-deps does)");
    }
    let bindings = bindgen::Builder::default()
        .header(&header)
        .allowlist_type("rdma_.*")
        .allowlist_type("ibv_sa_path_rec")
        .allowlist_var("RDMA_.*")
        .allowlist_var("RAI_.*")
        // The verbs types come from mrshim-verbs (ibverbs-sys); sa.h's path record is generated.
        .blocklist_type("ibv_(?:[^s].*|s[^a].*)")
        .raw_line("use mrshim_verbs::*;")
        // ibverbs-sys spells these enums as modules with a `Type` inside; match it.
        .constified_enum_module("ibv_qp_type")
        .constified_enum_module("ibv_qp_state")
        .constified_enum_module("rdma_cm_event_type")
        .constified_enum_module("rdma_port_space")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .generate()
        .expect("bindgen on rdma_cma.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("rdma_cma.rs");
    bindings.write_to_file(out).expect("write bindings");
}
