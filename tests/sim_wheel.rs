//! Programs that bring their own rdma-core (issue 31 item 1): a Python wheel repaired by
//! auditwheel ships `libibverbs-<hash>.so.1` next to its extension and finds it through RPATH,
//! which the loader searches before LD_LIBRARY_PATH. Under plain `mrshim sim -- CMD` such a
//! program — linked against the renamed copy and dlopen()ing it again — reaches the simulated
//! devices, and the shim records its registration.

mod shim_util;
use shim_util::*;

/// `<dir>/wheel/bin/wheel_verbs` with RPATH `$ORIGIN/../wheel.libs`, where Debian's real
/// libibverbs sits renamed (file and SONAME) as auditwheel does it.
fn wheel(dir: &std::path::Path) -> std::path::PathBuf {
    require("patchelf", "patchelf");
    let libs = dir.join("wheel/wheel.libs");
    let bin = dir.join("wheel/bin");
    std::fs::create_dir_all(&libs).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    let real = std::fs::canonicalize("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
        .or_else(|_| std::fs::canonicalize("/usr/lib/aarch64-linux-gnu/libibverbs.so.1"))
        .expect("libibverbs1 (scripts/install-deps)");
    let renamed = libs.join("libibverbs-abc123.so.1");
    std::fs::copy(real, &renamed).unwrap();
    let o = run(cmd("patchelf").args(["--set-soname", "libibverbs-abc123.so.1"]).arg(&renamed));
    assert!(o.status.success(), "{}", stderr(&o));
    let prog = bin.join("wheel_verbs");
    cc(&[
        "-O1",
        "-o",
        prog.to_str().unwrap(),
        src_c("wheel_verbs.c").to_str().unwrap(),
        renamed.to_str().unwrap(),
        "-ldl",
        "-Wl,--disable-new-dtags",
        "-Wl,-rpath,$ORIGIN/../wheel.libs",
    ]);
    let o = run(cmd("readelf").arg("-d").arg(&prog));
    let dynamic = stdout(&o);
    assert!(dynamic.contains("[libibverbs-abc123.so.1]") && dynamic.contains("(RPATH)"), "{dynamic}");
    prog
}

#[test]
fn a_wheels_renamed_libibverbs_gets_the_simulator() {
    let w = SimWorld::new("wheel");
    let prog = wheel(&w.dir);
    let logs = w.dir.join("logs");
    let sim = |extra: &[&str]| {
        let mut c = cmd("timeout");
        c.args(["-k", "5", "60"]).arg(mrshim_bin()).arg("sim").args(extra).arg("--").arg(&prog);
        c.env("MRSHIM_SIM_RUNDIR", w.dir.join("run"))
            .env("LD_PRELOAD", shim_lib())
            .env("MRSHIM_LOG", format!("{}/", logs.display()))
            .env_remove("LD_AUDIT");
        run(&mut c)
    };
    let o = sim(&[]);
    assert_eq!(stdout(&o), "linked: mlx5_0 mlx5_1\ndlopen: mlx5_0 mlx5_1\nreg ok\n", "{}", stderr(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = records(&only_file(&logs));
    let regs: Vec<_> = recs.iter().filter(|r| r.kind == Some(mrshim_record::Kind::Reg)).collect();
    assert_eq!(regs.len(), 1, "{recs:?}");
    assert_eq!(
        (regs[0].device.as_deref(), regs[0].length, regs[0].result.as_str()),
        (Some("mlx5_0"), Some(65536), "ok")
    );
    // What it was without the redirect: the wheel's own rdma-core, which cannot use the
    // simulated devices.
    let o = sim(&["--no-redirect"]);
    assert!(!o.status.success(), "{}", stdout(&o));
}
