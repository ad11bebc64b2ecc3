//! ibverbs-sys generates the `ibv_*` types from rdma-core's verbs.h but leaves out what only the
//! static-inline part of the header uses: `struct verbs_context` (the extended ops that
//! `ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_query_port` reach through) and a writable
//! `struct ibv_wc`. Generate just those from the system's verbs.h (libibverbs-dev), on top of
//! ibverbs-sys' types, so no layout is copied by hand.

fn main() {
    let header = mrshim_bindgen::header("MRSHIM_VERBS_H", "/usr/include/infiniband/verbs.h", "libibverbs-dev");
    let enums = ["ibv_wc_status", "ibv_wc_opcode", "ibv_qp_type", "ibv_qp_state", "ibv_port_state", "ibv_wr_opcode"];
    let b = mrshim_bindgen::builder(&header, &enums)
        .allowlist_type("verbs_context")
        .allowlist_type("ibv_wc")
        .allowlist_var("IBV_ACCESS_.*")
        .allowlist_var("IBV_WC_.*")
        .allowlist_var("IB_UVERBS_ACCESS_.*")
        // Everything else named ibv_* comes from ibverbs-sys.
        .blocklist_type("ibv_(?:[^w].*|w[^c].*|wc.+)")
        .blocklist_type("_?ibv_.*_t")
        .raw_line("use ibverbs_sys::*;");
    mrshim_bindgen::write(b, "extra.rs");
}
