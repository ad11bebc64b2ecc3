fn main() {
    // libmrshim.so must not depend on libibverbs (a program that never uses verbs loads it
    // unchanged); ibverbs-sys asks for -libverbs, --as-needed drops it since nothing references it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    println!("cargo:rerun-if-changed=build.rs");
}
