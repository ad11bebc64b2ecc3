//! The cdylib is the simulated `libamdhip64.so.5`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libamdhip64.so.5");
    println!("cargo:rerun-if-changed=build.rs");
}
