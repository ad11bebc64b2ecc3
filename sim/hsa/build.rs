//! The cdylib is the simulated `libhsa-runtime64.so.1`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhsa-runtime64.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
