fn main() {
    // libmrshim.so must not depend on libibverbs (a program that never uses verbs loads it
    // unchanged); ibverbs-sys asks for -libverbs, --as-needed drops it since nothing references it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    // Versioned exports (tools/cc-versioned, the workspace linker, keeps only this script). The
    // map names x86_64's first glibc version; aarch64's is GLIBC_2.17 (the glibc_base! macro).
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let map = std::fs::read_to_string(format!("{dir}/src/preload/libmrshim.map")).unwrap();
    let base = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "GLIBC_2.17",
        _ => "GLIBC_2.2.5",
    };
    let out = format!("{}/libmrshim.map", std::env::var("OUT_DIR").unwrap());
    std::fs::write(&out, map.replace("GLIBC_2.2.5", base)).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}");
    println!("cargo:rerun-if-changed=src/preload/libmrshim.map");
    println!("cargo:rerun-if-changed=build.rs");
}
