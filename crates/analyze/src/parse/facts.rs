//! Facts wherever they appear in text: `ulimit -l` answers (same line or the next, `-S`/`-H`, `ulimit -a`),
//! `vm.max_map_count` in any sysctl form, `max_mr_size`, `/proc/meminfo` CMA lines, `lsmod` rows and "peer
//! memory loaded" statements, dmabuf-supported flags, GeForce GPUs, driver/OFED/rdma-core/UCX/libfabric
//! versions, CAP_IPC_LOCK.
use super::FileCtx;
use crate::event::{Event, Fact, Flag, Lib, RegEv};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expect {
    /// The soft memlock limit in KiB (`ulimit -l`, `ulimit -Sl`).
    UlimitSoft,
    MaxMapCount,
    /// The kernel release (`uname -r` on the line before).
    Kernel,
}

/// `unlimited` or a number of KiB, as `ulimit -l` prints it.
fn ulimit_value(s: &str) -> Option<Option<u64>> {
    let v = s.split_whitespace().next()?;
    if v == "unlimited" || v == "infinity" || v == "-1" {
        return Some(None);
    }
    v.parse::<u64>().ok().map(|k| Some(k * 1024))
}

fn number(s: &str) -> Option<u64> {
    let t = s.trim_start_matches([' ', '=', ':', '\t']);
    let d: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    if d.is_empty() || t[d.len()..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return None;
    }
    d.parse().ok()
}

/// A program saying it will register with relaxed ordering (Mooncake TENT: "Relaxed ordering is
/// supported; IBV_ACCESS_RELAXED_ORDERING will be enabled ..."; Mooncake's RdmaTransport, since
/// 2026: "... IBV_ACCESS_RELAXED_ORDERING will be requested for registered memory regions."), not
/// that it will not.
fn ro_requested(lower: &str) -> bool {
    lower.contains("relaxed_ordering")
        && [
            "will be enabled",
            "will be used",
            "will request",
            "will be requested",
            "requesting",
            "is enabled",
            "enabled for",
        ]
        .iter()
        .any(|w| lower.contains(w))
        && !["not supported", "disabled", "falling back", "without"].iter().any(|w| lower.contains(w))
}

/// A line that names gdrcopy's `gdr_map` (the call that maps a pinned GPU range into the process,
/// gdrapi.c) other than to say it failed (gdrapi's `error ... while mapping handle`, its sanity
/// test's `cannot do gdr_map`, `gdr_map failed`/`returned`).
pub fn gdr_bar_mapping(lower: &str) -> bool {
    lower.match_indices("gdr_map").any(|(i, _)| {
        let after = &lower[i + 7..];
        let word = !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') && !lower[..i].ends_with('_');
        let near: String = after.chars().take(10).collect();
        let before: String = lower[..i].chars().rev().take(16).collect::<Vec<_>>().into_iter().rev().collect();
        let failed = ["fail", "error", "return"].iter().any(|w| near.contains(w))
            || ["cannot", "can't", "unable", "not ", "fail"].iter().any(|w| before.contains(w));
        word && !failed
    })
}

fn mr_size_exceeded(t: &str) -> bool {
    t.find("max_mr_size").is_some_and(|i| t[..i].to_ascii_lowercase().contains("exceed"))
}

/// Version lines, matched case-insensitively (keys in lower case): what each stack's own tools print.
const VERSIONS: &[(&str, &str)] = &[
    ("mlnx_ofed_linux-", "OFED"),
    ("ofed-", "OFED"),
    // nvidia-smi's header; PyTorch's collect_env ("Nvidia driver version: 535.230.02")
    ("driver version: ", "NVIDIA driver"),
    ("rdma-core ", "rdma-core"),
    ("rdma-core-", "rdma-core"),
    // ucx_info -v: "# Version 1.13.0" (older), "# Library version: 1.16.0"; UCX's INFO banner at
    // ucp_init ("UCX  INFO  Version 1.16.0 (loaded from ...)", src/ucp/core/ucp_context.c)
    ("# version ", "UCX"),
    ("# library version: ", "UCX"),
    ("ucx  info  version ", "UCX"),
    ("uct version=", "UCX"),
    ("efa installer version: ", "EFA installer"),
    ("libfabric ", "libfabric"),
    ("libfabric: ", "libfabric"),
    ("fi_info: ", "libfabric"),
    ("kernel: ", "kernel"),
    ("kernel version: ", "kernel"),
    ("uname -r: ", "kernel"),
    // ibv_devinfo: the HCA's firmware
    ("fw_ver:", "firmware"),
    // NIXL's start-up line (src/utils/common/nixl_log.cpp, 0.9.0 on) and its UCX plugin's binding
    // line ("NIXL UCX backend bound to UCX 1.19.0 at /usr/lib/libucp.so.0", src/plugins/ucx)
    ("nixl version: ", "NIXL"),
    ("nixl ucx backend bound to ucx ", "UCX"),
    // NIXL's UCX plugin on an older UCX ("UCX version is 1.18.0 which is less than 1.19, ...")
    ("ucx version is ", "UCX"),
    // gdrdrv's module load line ("loading gdrdrv version 2.4 built for open NVIDIA driver")
    ("loading gdrdrv version ", "gdrcopy"),
    // the OFI plugin's banner, PACKAGE_STRING ("Initializing aws-ofi-nccl 1.14.0")
    ("initializing aws-ofi-nccl ", "aws-ofi-nccl"),
];

/// The version in UCP's INFO banner at ucp_init, the message after UCX's header ("Version 1.16.0
/// (loaded from /opt/ucx/lib/libucp.so.0)", src/ucp/core/ucp_context.c): UCX's own log lines are
/// read by the UCX parser, which asks this.
pub fn ucx_banner(m: &str) -> Option<String> {
    let v = m.strip_prefix("Version ")?.split_whitespace().next()?;
    (v.starts_with(|c: char| c.is_ascii_digit()) && crate::known::version_key(v).is_some()).then(|| v.to_string())
}

/// The kernel release in the lines that print it: the boot banner and /proc/version ("Linux version
/// 6.8.0-45-generic (buildd@...)"), `uname -a` ("Linux node1 5.15.0-91-generic #101-Ubuntu SMP ..."),
/// PyTorch's collect_env ("Python platform: Linux-6.1.92-4-x86_64-with-glibc2.35").
fn kernel_release(t: &str) -> Option<String> {
    let word = |s: &str| -> Option<String> {
        let v: String = s.chars().take_while(|c| !c.is_whitespace() && *c != ',' && *c != ')').collect();
        (v.starts_with(|c: char| c.is_ascii_digit()) && v.contains('.')).then_some(v)
    };
    if let Some(i) = t.find("Linux version ") {
        return word(&t[i + 14..]);
    }
    if let Some(r) = t.strip_prefix("Python platform: Linux-") {
        let v = word(r)?;
        // "6.1.92-4-x86_64-with-glibc2.35": the release ends before the architecture
        let end = v.find("-x86_64").or_else(|| v.find("-aarch64")).or_else(|| v.find("-ppc64le")).unwrap_or(v.len());
        return Some(v[..end].to_string());
    }
    let mut w = t.split_whitespace();
    if w.next() == Some("Linux") && t.contains(" #") && (t.contains(" SMP") || t.contains("GNU/Linux")) {
        let _host = w.next()?;
        return word(w.next()?);
    }
    None
}

/// A release candidate or development build named on the line: a version followed by `-rcN`
/// (`5.10.0-rc1`, `v6.2-rc3+`, `6.8.0-rc7-next-20240308`; the kernel's Makefile EXTRAVERSION, the
/// rc tags of rdma-core, UCX, NCCL and libfabric) or a linux-next tag (`next-20201016`). `rc=-22`,
/// `rc -1` and a version alone are none.
pub fn dev_release(line: &str) -> Option<&str> {
    let b = line.as_bytes();
    for (i, _) in line.match_indices("-rc") {
        let after = b.get(i + 3).is_some_and(|c| c.is_ascii_digit());
        let start = line[..i].rfind(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(0, |j| j + 1);
        let ver = &line[start..i];
        // `v5.10-rc1` and `linux-5.10-rc1` keep their prefix out of the version
        if after && ver.contains('.') && ver.starts_with(|c: char| c.is_ascii_digit()) && !ver.ends_with('.') {
            let end = line[i + 3..].find(|c: char| !c.is_ascii_digit()).map_or(line.len(), |j| i + 3 + j);
            return Some(&line[start..end]);
        }
    }
    for (i, _) in line.match_indices("next-20") {
        let digits = b[i + 5..].iter().take_while(|c| c.is_ascii_digit()).count();
        let word_start = i == 0 || !b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-';
        if digits == 8 && word_start {
            return Some(&line[i..i + 13]);
        }
    }
    None
}

/// A development release in use on the line ([`dev_release`]): read on every line, whichever
/// reader takes it (a failure line, a kernel report's header, a banner, prose).
pub fn read_dev_release(line: &str, ctx: &FileCtx, emit: &mut dyn FnMut(Event)) {
    if line.len() <= 4096 && dev_release(line).is_some() {
        emit(Event::Fact { lib: Lib::Text, host: ctx.host.clone(), pid: None, fact: Fact::Flag(Flag::DevRelease) });
    }
}

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    // prose in CJK scripts is read sentence by sentence by the prose parser
    if line.len() > 2048 || line.chars().any(|c| c >= '\u{2e80}') {
        return false;
    }
    let t = line.trim();
    let host = ctx.host.clone();
    if mr_size_exceeded(t) {
        // a buffer larger than one MR may be ("exceeds device max_mr_size") is a registration the
        // device refuses by size, whatever errno the application attached to it
        emit(Event::Fact { lib: Lib::Text, host: host.clone(), pid: None, fact: Fact::Flag(Flag::MrSizeExceeded) });
        emit(Event::Reg(RegEv {
            host,
            call: "ibv_reg_mr".into(),
            errno: crate::errno::find(t).or(Some(crate::errno::ENOMEM)),
            evid: Some((0, t.to_string())),
            ..Default::default()
        }));
        return true;
    }
    let mut fact = |f: Fact| emit(Event::Fact { lib: Lib::Text, host: host.clone(), pid: None, fact: f });
    // the answer to a command printed on the line before
    if let Some(e) = ctx.expect.take() {
        match e {
            Expect::UlimitSoft => {
                if let Some(m) = ulimit_value(t) {
                    fact(Fact::Memlock(m));
                    return true;
                }
            }
            Expect::MaxMapCount => {
                if let Some(n) = number(t) {
                    fact(Fact::MaxMapCount(n));
                    return true;
                }
            }
            Expect::Kernel => {
                if t.split_whitespace().count() == 1
                    && crate::known::version_key(t).is_some()
                    && t.starts_with(|c: char| c.is_ascii_digit())
                {
                    fact(Fact::Version("kernel".into(), t.to_string()));
                    return true;
                }
            }
        }
    }
    if t.ends_with("uname -r") {
        ctx.expect = Some(Expect::Kernel);
        return true;
    }
    if let Some(v) = kernel_release(t) {
        fact(Fact::Version("kernel".into(), v));
        return true;
    }
    if let Some(i) = t.find("ulimit -") {
        let opts_and_rest = &t[i + 7..];
        let (opts, rest) = opts_and_rest.split_once(char::is_whitespace).unwrap_or((opts_and_rest, ""));
        let mut opts = opts.to_string();
        let mut rest = rest.trim_start();
        // `ulimit -l -S` / `ulimit -S -l`
        while let Some(r) = rest.strip_prefix('-') {
            let (o, r2) = r.split_once(char::is_whitespace).unwrap_or((r, ""));
            opts.push_str(o);
            rest = r2.trim_start();
        }
        if opts.contains('l') && !opts.contains('a') {
            if opts.contains('H') {
                return true; // the hard limit: not what pins against
            }
            match ulimit_value(rest.trim_start_matches(':')) {
                Some(m) => fact(Fact::Memlock(m)),
                None if rest.is_empty() => ctx.expect = Some(Expect::UlimitSoft),
                None => {}
            }
            return true;
        }
    }
    // `ulimit -a`: "max locked memory       (kbytes, -l) 64"
    if let Some(i) = t.find("(kbytes, -l)") {
        if t[..i].to_ascii_lowercase().contains("locked memory") {
            if let Some(m) = ulimit_value(&t[i + 12..]) {
                fact(Fact::Memlock(m));
            }
            return true;
        }
    }
    if let Some(i) = t.find("max_map_count") {
        match number(&t[i + 13..]) {
            Some(n) => fact(Fact::MaxMapCount(n)),
            None if t.ends_with("max_map_count") => ctx.expect = Some(Expect::MaxMapCount),
            None => {}
        }
        return true;
    }
    if let Some(i) = t.find("max_mr_size") {
        let v = t[i + 11..].trim_start_matches([' ', ':', '=', '\t']);
        fact(Fact::Version("max_mr_size".into(), v.split_whitespace().next().unwrap_or("").to_string()));
        return true;
    }
    for key in ["CmaTotal:", "CmaFree:"] {
        if let Some(v) = t.strip_prefix(key) {
            fact(Fact::Version(key.trim_end_matches(':').into(), v.trim().to_string()));
            return true;
        }
    }
    let lower = t.to_ascii_lowercase();
    // lsmod rows ("nvidia_peermem  16384  0") and statements ("nv_peer_mem loaded: yes")
    let first = t.split_whitespace().next().unwrap_or("");
    let peer_module = matches!(first, "nvidia_peermem" | "nv_peer_mem" | "amdgpu_peermem" | "ib_peer_mem");
    if peer_module && t.split_whitespace().nth(1).is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())) {
        fact(Fact::Flag(Flag::PeermemLoaded));
        return true;
    }
    if lower.contains("peer_mem loaded: yes") || lower.contains("peermem loaded: yes") {
        fact(Fact::Flag(Flag::PeermemLoaded));
    } else if lower.contains("peer_mem loaded: no")
        || lower.contains("peermem loaded: no")
        || lower.contains("neither nv_peer_mem, or nvidia_peermem detected")
        || lower.contains("without nvidia-peermem")
        || (lower.contains("peermem") && lower.contains("not loaded"))
    {
        fact(Fact::Flag(Flag::PeermemMissing));
    }
    if lower.contains("dmabufsupported: 0")
        || lower.contains("dma_buf_supported 0")
        || lower.contains("dma_buf_supported: 0")
        || lower.contains("dmabuf support status: 0")
    {
        fact(Fact::Flag(Flag::GpuDmabufUnavailable));
    }
    if gdr_bar_mapping(&lower) {
        fact(Fact::Flag(Flag::GdrBarMapping));
    }
    if t.contains("GeForce") || t.contains("RTX 3090") || t.contains("RTX 4090") {
        fact(Fact::Flag(Flag::GeforceGpu));
    }
    if lower.contains("cap_ipc_lock") && !lower.contains("without") && !lower.contains("no cap_ipc_lock") {
        fact(Fact::Flag(Flag::IpcLock));
    }
    if ro_requested(&lower) {
        // the whole line is about relaxed ordering ("... for optimal GPUDirect RDMA performance" is
        // no sign that GPU memory is registered)
        fact(Fact::Flag(Flag::RoRequested));
        return true;
    }
    for (key, name) in VERSIONS {
        if let Some(i) = lower.find(key) {
            let v: String = t[i + key.len()..]
                .trim_start_matches([' ', '\t'])
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != ',')
                .collect();
            let v = v.trim_end_matches(':').to_string();
            // a PCI address or a log prefix after the key is no version
            if v.contains(':') {
                continue;
            }
            if v.starts_with(|c: char| c.is_ascii_digit()) {
                fact(Fact::Version((*name).into(), v));
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Fact;

    fn facts(lines: &[&str]) -> Vec<String> {
        let mut ctx = FileCtx::default();
        let mut out = Vec::new();
        for l in lines {
            parse(l, &mut ctx, &mut |e| {
                if let Event::Fact { fact, .. } = e {
                    out.push(match fact {
                        Fact::Memlock(m) => format!("memlock {m:?}"),
                        Fact::MaxMapCount(n) => format!("max_map_count {n}"),
                        Fact::Flag(f) => format!("{f:?}"),
                        Fact::Version(k, v) => format!("{k} {v}"),
                        other => format!("{other:?}"),
                    })
                }
            });
        }
        out
    }

    /// Release candidates and linux-next builds; a return code, a released version and words
    /// ending in "-rc" are none.
    #[test]
    fn development_releases() {
        for l in [
            "Linux version 5.10.0-rc1+ (root@build) (gcc 10.2.0) #3 SMP",
            "CPU: 1 PID: 9 Comm: x Not tainted 6.2.0-rc3 #1",
            "fails on v5.10-rc4 with EINVAL",
            "Linux node1 6.8.0-rc7-next-20240308 #1 SMP x86_64 GNU/Linux",
            "tested on next-20201016",
        ] {
            assert!(dev_release(l).is_some(), "{l}");
        }
        assert_eq!(dev_release("kernel 5.10.0-rc3+ here"), Some("5.10.0-rc3"));
        for l in [
            "ibv_reg_mr failed, rc=-22",
            "mr_reg returned rc -12",
            "Linux version 5.10.0-8-amd64",
            "uct-rc1 transport",
            "pre-rc1 build",
            "the next-2020 release",
        ] {
            assert!(dev_release(l).is_none(), "{l}");
        }
    }

    /// The version lines the stacks' own tools print, each to its component.
    #[test]
    fn version_lines() {
        let one = |l: &[&str]| facts(l);
        assert_eq!(
            one(&["[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) (x86_64-linux-gnu-gcc-13)"]),
            ["kernel 6.8.0-45-generic"]
        );
        assert_eq!(one(&["Linux gpu-node-7 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023 x86_64 x86_64 x86_64 GNU/Linux"]), ["kernel 5.15.0-91-generic"]);
        assert_eq!(one(&["$ uname -r", "5.4.0-150-generic"]), ["kernel 5.4.0-150-generic"]);
        assert_eq!(one(&["Python platform: Linux-6.1.92-4-x86_64-with-glibc2.35"]), ["kernel 6.1.92-4"]);
        assert_eq!(one(&["Nvidia driver version: 535.230.02"]), ["NVIDIA driver 535.230.02"]);
        assert_eq!(
            one(&["| NVIDIA-SMI 560.35.03              Driver Version: 560.35.03      CUDA Version: 12.6     |"]),
            ["NVIDIA driver 560.35.03"]
        );
        assert_eq!(one(&["MLNX_OFED_LINUX-23.10-1.1.9.0:"]), ["OFED 23.10-1.1.9.0"]);
        assert_eq!(one(&["# Library version: 1.16.0"]), ["UCX 1.16.0"]);
        assert_eq!(one(&["[1697219058.250608] [daisy02:3738 :0]     ucp_context.c:2129 UCX  INFO  Version 1.16.0 (loaded from /opt/ucx/lib/libucp.so.0)"]), ["UCX 1.16.0"]);
        assert_eq!(one(&["libfabric: 1.18.0"]), ["libfabric 1.18.0"]);
        assert_eq!(one(&["        fw_ver:                         28.39.1002"]), ["firmware 28.39.1002"]);
        assert_eq!(one(&["ii  rdma-core        50.0-2ubuntu0.2     amd64"]), ["rdma-core 50.0-2ubuntu0.2"]);
        assert_eq!(
            one(&["I1207 10:00:00.000000 4242 nixl_log.cpp:80] NIXL version: 0.10.1 (git: 1a2b3c4)"]),
            ["NIXL 0.10.1"]
        );
        assert_eq!(
            one(&["I1207 10:00:00.000000 4242 ucx_plugin.cpp:51] NIXL UCX backend bound to UCX 1.19.0 at /usr/lib/libucp.so.0"]),
            ["UCX 1.19.0"]
        );
        assert_eq!(
            one(&["[  12.345678] gdrdrv:gdrdrv_init: loading gdrdrv version 2.4 built for open NVIDIA driver"]),
            ["gdrcopy 2.4"]
        );
        assert_eq!(one(&["NET/OFI Initializing aws-ofi-nccl 1.14.0"]), ["aws-ofi-nccl 1.14.0"]);
        assert_eq!(
            one(&["W1207 10:00:00.000000 4242 ucx_utils.cpp:424] UCX version is 1.18.0 which is less than 1.19, CUDA support is limited"]),
            ["UCX 1.18.0"]
        );
        // not versions: a log prefix, a PCI address
        assert!(one(&["libfabric:1234:1690000000::core:core:fi_getinfo_():1138<info> x"]).is_empty());
        assert!(one(&["Dec  1 10:00:00 n1 kernel: 0000:41:00.0: something"]).iter().all(|f| !f.starts_with("kernel")));
    }

    #[test]
    fn each_fact_form() {
        assert_eq!(facts(&["root@B4130:~/tmp# ulimit -l", "unlimited"]), ["memlock None"]);
        assert_eq!(facts(&["$ ulimit -l", "64"]), ["memlock Some(65536)"]);
        assert_eq!(facts(&["ulimit -l 8192"]), ["memlock Some(8388608)"]);
        assert_eq!(facts(&["$ ulimit -Sl", "65536"]), ["memlock Some(67108864)"]);
        assert_eq!(facts(&["$ ulimit -l -S", "unlimited"]), ["memlock None"]);
        assert!(facts(&["$ ulimit -Hl", "unlimited"]).is_empty(), "the hard limit is not the soft one");
        assert_eq!(facts(&["max locked memory       (kbytes, -l) 64"]), ["memlock Some(65536)"]);
        for s in ["vm.max_map_count = 65530", "vm.max_map_count=65530", "sysctl vm.max_map_count: 65530"] {
            assert_eq!(facts(&[s]), ["max_map_count 65530"], "{s}");
        }
        assert_eq!(facts(&["$ cat /proc/sys/vm/max_map_count", "65530"]), ["max_map_count 65530"]);
        assert_eq!(
            facts(&["        max_mr_size:                    0xffffffffffffffff"]),
            ["max_mr_size 0xffffffffffffffff"]
        );
        assert_eq!(facts(&["CmaTotal:              0 kB", "CmaFree:         0 kB"]), ["CmaTotal 0 kB", "CmaFree 0 kB"]);
        assert_eq!(facts(&["nvidia_peermem         16384  0"]), ["PeermemLoaded"]);
        assert_eq!(
            facts(&["ibv_reg_mr2 called. cuMemAlloc: 1, dmaBufSupported: 0, nv_peer_mem loaded: yes"]),
            ["PeermemLoaded", "GpuDmabufUnavailable"]
        );
        assert_eq!(
            facts(&[
                "ibrc.cpp:nvshmemt_init:1851: neither nv_peer_mem, or nvidia_peermem detected. Skipping transport."
            ]),
            ["PeermemMissing"]
        );
        assert_eq!(facts(&["GPU id:0; name: GeForce RTX 2070; Bus id: 0000:01:00"]), ["GeforceGpu"]);
        assert_eq!(facts(&["5. cx7 fireware 28.37.1014", "3. MLNX_OFED_LINUX-23.04-1.1.3.0"]), ["OFED 23.04-1.1.3.0"]);
        assert_eq!(
            facts(&["| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |"]),
            ["NVIDIA driver 570.124.06"]
        );
    }

    #[test]
    fn a_buffer_over_max_mr_size_is_a_refused_registration() {
        let line = "W0717 18:50:07.754983 3957032 rdma_context.cpp:199] The buffer length exceeds device max_mr_size, \
                    shrink it to 68719476736: No space left on device [28]";
        let mut ctx = FileCtx::default();
        let (mut flags, mut regs) = (Vec::new(), Vec::new());
        parse(line, &mut ctx, &mut |e| match e {
            Event::Fact { fact: Fact::Flag(f), .. } => flags.push(f),
            Event::Reg(r) => regs.push(r.errno),
            _ => {}
        });
        assert_eq!(flags, [Flag::MrSizeExceeded]);
        assert_eq!(regs, [Some(crate::errno::ENOSPC)]);
        assert_eq!(facts(&["max_mr_size: 0x1000000000"]), ["max_mr_size 0x1000000000"], "a plain value is a fact");
    }
}

#[cfg(test)]
mod ro_tests {
    #[test]
    fn relaxed_ordering_requested_lines() {
        let yes = "I1206 06:00:00.1 123 rdma_transport.cpp:88] [RDMA TENT] Relaxed ordering is supported; IBV_ACCESS_RELAXED_ORDERING will be enabled for optimal GPUDirect RDMA performance.";
        let no = "I1206 06:00:00.1 123 rdma_transport.cpp:92] [RDMA TENT] Relaxed ordering is NOT supported (ibv_reg_mr_iova2 missing). Falling back to strict ordering.";
        assert!(super::ro_requested(&yes.to_ascii_lowercase()));
        assert!(!super::ro_requested(&no.to_ascii_lowercase()));
        // RdmaTransport::RdmaTransport() (rdma_transport.cpp), mode 1 or 2 with ibv_reg_mr_iova2
        let yes = "I1207 03:42:21.717124 28134 rdma_transport.cpp:159] [RDMA] Relaxed ordering is supported on this host; IBV_ACCESS_RELAXED_ORDERING will be requested for registered memory regions.";
        let no = "I1207 03:42:21.717124 28134 rdma_transport.cpp:150] [RDMA] Relaxed ordering disabled via MC_IB_PCI_RELAXED_ORDERING=0. Falling back to strict ordering.";
        assert!(super::ro_requested(&yes.to_ascii_lowercase()));
        assert!(!super::ro_requested(&no.to_ascii_lowercase()));
    }
}
