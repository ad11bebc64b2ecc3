//! What the build scripts that generate rdma-core bindings share (crates/verbs for verbs.h's
//! leftovers, sim/rdmacm for rdma_cma.h): finding the installed header, bindgen's settings for
//! types that sit on top of ibverbs-sys', and writing the result to OUT_DIR. A build script
//! adds only what it allows, blocks and imports.

use std::{env, path::PathBuf};

/// The header named by the environment variable `var`, else `default`; tells cargo to rerun
/// when either changes. A missing header stops the build with the Debian package to install.
pub fn header(var: &str, default: &str, package: &str) -> String {
    let header = env::var(var).unwrap_or_else(|_| default.into());
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-env-changed={var}");
    if !std::path::Path::new(&header).exists() {
        panic!("{header} not found: install Debian's {package} (scripts/install-deps does)");
    }
    header
}

/// bindgen on `header` with the settings every generated module shares: `Default` but no
/// `Debug` derives, layout tests, enum constants without the enum's name, `size_t` as `usize`,
/// and `enum_modules` spelled as ibverbs-sys spells its enums (modules with a `Type` inside), so
/// the generated types and ibverbs-sys' match.
pub fn builder(header: &str, enum_modules: &[&str]) -> bindgen::Builder {
    let b = bindgen::Builder::default()
        .header(header)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .prepend_enum_name(false)
        .size_t_is_usize(true);
    enum_modules.iter().fold(b, |b, e| b.constified_enum_module(*e))
}

/// Generates `b` into OUT_DIR/`file`, for the crate to `include!`.
pub fn write(b: bindgen::Builder, file: &str) {
    let bindings = b.generate().unwrap_or_else(|e| panic!("bindgen for {file}: {e}"));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join(file);
    bindings.write_to_file(out).expect("write bindings");
}
