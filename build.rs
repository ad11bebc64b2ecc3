fn main() {
    // libmrshim.so must not depend on libibverbs (a program that never uses verbs loads it
    // unchanged); ibverbs-sys asks for -libverbs, --as-needed drops it since nothing references it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    // Versioned exports (tools/cc-versioned, the workspace linker, keeps only this script).
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/src/preload/libmrshim.map");
    println!("cargo:rerun-if-changed=src/preload/libmrshim.map");
    println!("cargo:rerun-if-changed=build.rs");
}
