//! The cdylib is the simulated `libibverbs.so.1`: give it rdma-core's SONAME and symbol versions.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    // tools/cc-versioned (the workspace linker) keeps only this map, see there.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=build.rs");
}
