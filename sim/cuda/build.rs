//! The cdylib is the simulated `libcuda.so.1` (what NCCL and the CUDA runtime dlopen).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
