//! The cdylib is the simulated `librdmacm.so.1`: rdma-core's SONAME and symbol versions, linked
//! against libibverbs.so.1 (at run time the simulated one, which `mrshim sim` puts first). The
//! `rdma_*` structs are generated from the installed rdma_cma.h (librdmacm-dev), on top of the
//! `ibv_*` types of mrshim-verbs, so no layout is copied by hand.
use std::env;

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap();
    // tools/cc-versioned (the workspace linker) keeps only this map, see there.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rerun-if-changed=build.rs");
    let header = mrshim_bindgen::header("MRSHIM_RDMA_CMA_H", "/usr/include/rdma/rdma_cma.h", "librdmacm-dev");
    let enums = ["ibv_qp_type", "ibv_qp_state", "rdma_cm_event_type", "rdma_port_space"];
    let b = mrshim_bindgen::builder(&header, &enums)
        .allowlist_type("rdma_.*")
        .allowlist_type("ibv_sa_path_rec")
        .allowlist_var("RDMA_.*")
        .allowlist_var("RAI_.*")
        // The verbs types come from mrshim-verbs (ibverbs-sys); sa.h's path record is generated.
        .blocklist_type("ibv_(?:[^s].*|s[^a].*)")
        .raw_line("use mrshim_verbs::*;");
    mrshim_bindgen::write(b, "rdma_cma.rs");
}
