//! The cdylib is the simulated `libmcruntime.so` (MetaX MACA's runtime, under /opt/maca/lib).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmcruntime.so");
    println!("cargo:rerun-if-changed=build.rs");
}
