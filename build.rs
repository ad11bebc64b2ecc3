fn main() {
    // libmrshim.so must not depend on libibverbs (a program that never uses verbs loads it
    // unchanged); ibverbs-sys asks for -libverbs, --as-needed drops it since nothing references it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--as-needed");
    // `mrshim exec` checks the SONAME before it preloads a file: a `--lib` naming another
    // library (libibverbs, a stale build of something else) is refused, not preloaded.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmrshim.so");
    // Versioned exports (tools/cc-versioned, the workspace linker, keeps only this script). The
    // map names x86_64's first glibc version; aarch64's is GLIBC_2.17 (the glibc_base! macro).
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let map = std::fs::read_to_string(format!("{dir}/src/preload/libmrshim.map")).unwrap();
    let entries = std::fs::read_to_string(format!("{dir}/src/preload/entry.rs")).unwrap();
    let base = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "GLIBC_2.17",
        _ => "GLIBC_2.2.5",
    };
    let out = format!("{}/libmrshim.map", std::env::var("OUT_DIR").unwrap());
    let script = format!("{}{}", map.replace("GLIBC_2.2.5", base), verbs_nodes(&entries));
    std::fs::write(&out, script).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}");
    println!("cargo:rerun-if-changed=src/preload/libmrshim.map");
    println!("cargo:rerun-if-changed=src/preload/entry.rs");
    println!("cargo:rerun-if-changed=build.rs");
    // tests/sim_view.rs: a platform that forbids unprivileged user namespaces says so with
    // MRSHIM_TEST_NO_USERNS=1, and the tests that need them are reported ignored, not passed.
    println!("cargo::rustc-check-cfg=cfg(mrshim_no_userns)");
    println!("cargo:rerun-if-env-changed=MRSHIM_TEST_NO_USERNS");
    if std::env::var_os("MRSHIM_TEST_NO_USERNS").is_some_and(|v| !v.is_empty() && v != "0") {
        println!("cargo:rustc-cfg=mrshim_no_userns");
    }
}

/// The IBVERBS_* version nodes, from the rows of entry.rs's table (`Variant, "symbol",
/// "IBVERBS_x.y", ...`): one node per version in rdma-core's order, each listing the symbols
/// exported at it and inheriting the one before, as rdma-core's libibverbs.map does.
fn verbs_nodes(entries: &str) -> String {
    let mut rows: Vec<((u32, u32), String, String)> = Vec::new();
    for line in entries.lines() {
        let mut cols = line.trim().split(", ").map(|c| c.trim_matches('"'));
        let (Some(_), Some(name), Some(ver)) = (cols.next(), cols.next(), cols.next()) else { continue };
        let Some((major, minor)) = ver.strip_prefix("IBVERBS_").and_then(|v| v.split_once('.')) else { continue };
        let key = (major.parse().unwrap(), minor.parse().unwrap());
        rows.push((key, ver.to_string(), name.to_string()));
    }
    assert!(!rows.is_empty(), "no entry rows found in src/preload/entry.rs");
    rows.sort();
    let mut text = String::new();
    let mut prev: Option<String> = None;
    for (i, (_, ver, _)) in rows.iter().enumerate() {
        if prev.as_deref() == Some(ver) {
            continue;
        }
        let names: Vec<&str> = rows[i..].iter().take_while(|r| &r.1 == ver).map(|r| r.2.as_str()).collect();
        let after = prev.as_ref().map(|p| format!(" {p}")).unwrap_or_default();
        text.push_str(&format!("{ver} {{ global: {}; }}{after};\n", names.join("; ")));
        prev = Some(ver.clone());
    }
    text
}
