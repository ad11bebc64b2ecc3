//! The node checks. Each reads a few files below the root and answers ok/warn/fail with the fix.
use crate::pci;
use crate::report::{Check, Report, Status, SCHEMA_VERSION};
use crate::sys::{human_bytes, Fs};
use serde_json::json;

const MEMLOCK_FIX: &str = "raise RLIMIT_MEMLOCK where the job starts: `* soft memlock unlimited` and `* hard memlock \
unlimited` in /etc/security/limits.conf; systemd units: LimitMEMLOCK=infinity; docker run --ulimit memlock=-1:-1; \
Kubernetes: securityContext.capabilities.add [IPC_LOCK]; Slurm: no `ulimit -l 64` in the prolog and \
PropagateResourceLimits; check with `bash -c 'ulimit -l'` in the job itself. To keep a job running meanwhile: \
MRSHIM_RETRY=raise-memlock,bounce";

fn check(id: &str, title: &str, status: Status, value: impl Into<String>) -> Check {
    Check {
        id: id.into(),
        title: title.into(),
        status,
        value: value.into(),
        details: vec![],
        fix: None,
        raw: serde_json::Value::Null,
    }
}

pub fn run_all(fs: &Fs, probe: Option<&crate::probe::DmabufProbe>) -> Report {
    let host = fs
        .read_trim("/proc/sys/kernel/hostname")
        .or_else(|| fs.read_trim("/etc/hostname"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let limits = memlock(fs, ipc_lock(fs) == Some(true));
    let memlock_finite = limits.raw.get("soft").map(|v| !v.is_null()).unwrap_or(false);
    let rdma = rdma_devices(fs);
    let has_rdma = rdma.raw.get("devices").and_then(|d| d.as_array()).map(|a| !a.is_empty()).unwrap_or(false);
    let container = container(fs, memlock_finite);
    let checks = vec![
        limits,
        cap_ipc_lock(fs, memlock_finite),
        max_map_count(fs),
        hugepages(fs),
        thp(fs),
        rdma,
        crate::gpu::peer_memory(fs, has_rdma, probe),
        crate::gpu::dmabuf(fs, probe),
        versions(fs),
        iommu(fs),
        pcie(fs),
        container,
        env_vars(fs),
        ucx_relaxed_ordering(fs),
    ];
    Report {
        mrshim_doctor: SCHEMA_VERSION,
        host,
        root: if fs.is_real_root() { None } else { Some(fs.path("/").display().to_string()) },
        checks,
    }
}

/// "unlimited" or a byte count, as in /proc/PID/limits.
fn parse_limit(s: &str) -> Option<Option<u64>> {
    if s == "unlimited" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

fn show_limit(l: Option<u64>) -> String {
    l.map(human_bytes).unwrap_or_else(|| "unlimited".into())
}

/// CAP_IPC_LOCK in this process's effective set (None: unknown).
fn ipc_lock(fs: &Fs) -> Option<bool> {
    fs.read("/proc/self/status")
        .and_then(|s| s.lines().find(|l| l.starts_with("CapEff:")).map(|l| l[7..].trim().to_string()))
        .and_then(|h| u64::from_str_radix(&h, 16).ok())
        .map(|caps| caps & (1 << 14) != 0)
}

/// RDMA devices whose kernel driver pins user memory with its own accounting that honours
/// RLIMIT_MEMLOCK even with CAP_IPC_LOCK: siw (siw_umem_get compares against the limit without
/// asking for the capability). The others pin through ib_umem_get (mlx5, rxe, efa, irdma,
/// bnxt_re, ...), which skips the limit for a process with CAP_IPC_LOCK.
fn limit_honouring_devices(fs: &Fs) -> Vec<String> {
    fs.list("/sys/class/infiniband").into_iter().filter(|d| d.starts_with("siw")).collect()
}

fn memlock(fs: &Fs, cap_ipc_lock: bool) -> Check {
    let Some(text) = fs.read("/proc/self/limits") else {
        return check(
            "memlock",
            "locked memory limit (ulimit -l)",
            Status::Warn,
            "unknown: /proc/self/limits unreadable",
        );
    };
    let line = text.lines().find(|l| l.starts_with("Max locked memory"));
    let parts: Vec<&str> =
        line.map(|l| l["Max locked memory".len()..].split_whitespace().collect()).unwrap_or_default();
    let (Some(soft), Some(hard)) =
        (parts.first().and_then(|s| parse_limit(s)), parts.get(1).and_then(|s| parse_limit(s)))
    else {
        return check(
            "memlock",
            "locked memory limit (ulimit -l)",
            Status::Warn,
            "unknown: no 'Max locked memory' line",
        );
    };
    let mut status = match soft {
        None => Status::Ok,
        Some(n) if n < 64 << 20 => Status::Fail,
        Some(_) => Status::Warn,
    };
    let mut value = format!("soft {} / hard {}", show_limit(soft), show_limit(hard));
    let mut details = vec!["from /proc/self/limits (what this process inherited)".to_string()];
    let honouring = limit_honouring_devices(fs);
    if cap_ipc_lock && status != Status::Ok {
        if honouring.is_empty() {
            status = Status::Ok;
            value.push_str(", not enforced: CAP_IPC_LOCK");
            details.push(
                "with CAP_IPC_LOCK the kernel's pinning for RDMA (ib_umem_get: mlx5, rxe, efa, irdma, bnxt_re ...) \
                 does not check RLIMIT_MEMLOCK, so registrations of jobs that run with the same capabilities are not \
                 limited by it; jobs started without CAP_IPC_LOCK (another user, a container without IPC_LOCK) are"
                    .into(),
            );
        } else {
            details.push(format!(
                "CAP_IPC_LOCK is present, but {} (siw) pins against RLIMIT_MEMLOCK even with it (siw_umem_get does \
                 not ask for the capability); ib_umem_get providers (mlx5, rxe, ...) would ignore the limit",
                honouring.join(", ")
            ));
        }
    }
    let mut c = check("memlock", "locked memory limit (ulimit -l)", status, value);
    c.details = details;
    if status != Status::Ok {
        c.fix = Some(MEMLOCK_FIX.into());
    }
    c.raw = json!({"soft": soft, "hard": hard, "cap_ipc_lock": cap_ipc_lock, "enforced_by": honouring});
    c
}

fn cap_ipc_lock(fs: &Fs, memlock_finite: bool) -> Check {
    match ipc_lock(fs) {
        None => check("cap_ipc_lock", "CAP_IPC_LOCK", Status::Warn, "unknown: no CapEff in /proc/self/status"),
        Some(has) => {
            let status = if has || !memlock_finite { Status::Ok } else { Status::Warn };
            let mut c = check("cap_ipc_lock", "CAP_IPC_LOCK", status, if has { "present" } else { "absent" });
            if !has && memlock_finite {
                c.details
                    .push("without CAP_IPC_LOCK every registration counts against the finite memlock limit".into());
                c.fix = Some("grant IPC_LOCK (docker --cap-add IPC_LOCK, Kubernetes securityContext.capabilities.add [IPC_LOCK]) or make memlock unlimited".into());
            }
            c.raw = json!({"present": has});
            c
        }
    }
}

fn max_map_count(fs: &Fs) -> Check {
    match fs.read_trim("/proc/sys/vm/max_map_count").and_then(|s| s.parse::<u64>().ok()) {
        None => check("max_map_count", "vm.max_map_count", Status::Warn, "unknown"),
        Some(n) => {
            let status = if n < 262_144 { Status::Warn } else { Status::Ok };
            let mut c = check("max_map_count", "vm.max_map_count", status, n.to_string());
            if status != Status::Ok {
                c.details.push("many registrations split VMAs; running out gives ENOMEM from ibv_reg_mr".into());
                c.fix = Some("sysctl -w vm.max_map_count=1048576 (persist in /etc/sysctl.d/)".into());
            }
            c.raw = json!({"value": n});
            c
        }
    }
}

fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    let l = text.lines().find(|l| l.starts_with(key))?;
    l[key.len()..].trim_start_matches(':').split_whitespace().next()?.parse().ok()
}

fn hugepages(fs: &Fs) -> Check {
    let Some(m) = fs.read("/proc/meminfo") else {
        return check("hugepages", "hugepages", Status::Warn, "unknown: /proc/meminfo unreadable");
    };
    let total = meminfo_field(&m, "HugePages_Total").unwrap_or(0);
    let free = meminfo_field(&m, "HugePages_Free").unwrap_or(0);
    let size_kb = meminfo_field(&m, "Hugepagesize").unwrap_or(0);
    let status = if total > 0 && free == 0 { Status::Warn } else { Status::Ok };
    let mut c = check(
        "hugepages",
        "hugepages",
        status,
        format!("{total} x {} reserved, {free} free", human_bytes(size_kb * 1024)),
    );
    if status == Status::Warn {
        c.fix = Some("all reserved hugepages are in use: raise vm.nr_hugepages or stop allocating communication buffers from hugetlbfs".into());
    }
    c.raw = json!({"total": total, "free": free, "size_kb": size_kb});
    c
}

fn thp(fs: &Fs) -> Check {
    match fs.read_trim("/sys/kernel/mm/transparent_hugepage/enabled") {
        None => check("thp", "transparent hugepages", Status::Ok, "unknown"),
        Some(s) => {
            let mode = s
                .split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_string())
                .unwrap_or(s);
            let mut c = check("thp", "transparent hugepages", Status::Ok, mode.clone());
            c.raw = json!({"mode": mode});
            c
        }
    }
}

fn rdma_devices(fs: &Fs) -> Check {
    let devs = fs.list("/sys/class/infiniband");
    if devs.is_empty() {
        let mut c = check(
            "rdma_devices",
            "RDMA devices",
            Status::Warn,
            "no RDMA devices on this node (/sys/class/infiniband is empty)",
        );
        c.fix = Some("if this node should have a NIC: load its driver (modprobe mlx5_ib / irdma / bnxt_re ...) and check `ibv_devices`".into());
        c.raw = json!({"devices": []});
        return c;
    }
    let mut status = Status::Ok;
    let mut details = Vec::new();
    let mut raw = Vec::new();
    for d in &devs {
        let base = format!("/sys/class/infiniband/{d}");
        let fw = fs.read_trim(&format!("{base}/fw_ver")).unwrap_or_else(|| "?".into());
        let mut ports = Vec::new();
        for p in fs.list(&format!("{base}/ports")) {
            let pb = format!("{base}/ports/{p}");
            let state = fs.read_trim(&format!("{pb}/state")).unwrap_or_else(|| "?".into());
            let ll = fs.read_trim(&format!("{pb}/link_layer")).unwrap_or_else(|| "?".into());
            let gid0 = fs.read_trim(&format!("{pb}/gids/0")).unwrap_or_default();
            let ngids = fs
                .list(&format!("{pb}/gids"))
                .iter()
                .filter(|g| {
                    fs.read_trim(&format!("{pb}/gids/{g}"))
                        .map(|v| !v.chars().all(|c| c == '0' || c == ':'))
                        .unwrap_or(false)
                })
                .count();
            if !state.contains("ACTIVE") {
                status = status.max(Status::Warn);
            }
            details.push(format!("{d} port {p}: {state}, {ll}, fw {fw}, {ngids} GIDs"));
            ports.push(json!({"port": p, "state": state, "link_layer": ll, "gid0": gid0, "gids": ngids}));
        }
        raw.push(json!({"name": d, "fw_ver": fw, "ports": ports}));
    }
    let mut c = check("rdma_devices", "RDMA devices", status, format!("{} device(s): {}", devs.len(), devs.join(", ")));
    c.details = details;
    if status != Status::Ok {
        c.fix = Some(
            "a port is not ACTIVE: check the cable/switch, `ibstat`, and the subnet manager (IB) or link (RoCE)".into(),
        );
    }
    c.raw = json!({"devices": raw});
    c
}

pub fn kernel_at_least(rel: &str, maj: u32, min: u32) -> bool {
    let mut it =
        rel.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (maj, min)
}

fn versions(fs: &Fs) -> Check {
    let kernel = fs.read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "?".into());
    let mut verbs = None;
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"] {
        if let Some(f) = fs.list(dir).into_iter().find(|f| f.starts_with("libibverbs.so.1.")) {
            verbs = Some(f["libibverbs.so.".len()..].to_string());
            break;
        }
    }
    // libibverbs.so.1.14.44.0 belongs to rdma-core 44
    let rdma_core = verbs.as_deref().and_then(|v| v.split('.').nth(2)).map(String::from);
    let mlx5 = fs
        .read_trim("/sys/module/mlx5_core/version")
        .map(|v| format!("{v} (MLNX_OFED)"))
        .or_else(|| fs.exists("/sys/module/mlx5_core").then(|| format!("inbox ({kernel})")));
    let mut c = check(
        "versions",
        "kernel / rdma-core / mlx5 driver",
        Status::Ok,
        format!(
            "kernel {kernel}, rdma-core {}, mlx5_core {}",
            rdma_core.as_deref().unwrap_or("?"),
            mlx5.as_deref().unwrap_or("not loaded")
        ),
    );
    c.details.push("compare these between nodes: `mrshim doctor --compare a.json b.json`".into());
    c.raw = json!({"kernel": kernel, "libibverbs": verbs, "rdma_core": rdma_core, "mlx5_core": mlx5});
    c
}

fn iommu(fs: &Fs) -> Check {
    let cmdline = fs.read_trim("/proc/cmdline").unwrap_or_default();
    let units = fs.list("/sys/class/iommu");
    let group_type = fs
        .list("/sys/kernel/iommu_groups")
        .first()
        .and_then(|g| fs.read_trim(&format!("/sys/kernel/iommu_groups/{g}/type")));
    let pt = cmdline.split_whitespace().any(|w| w == "iommu=pt" || w == "amd_iommu=pt")
        || group_type.as_deref() == Some("identity");
    let on_cmdline = cmdline.split_whitespace().any(|w| w == "intel_iommu=on" || w == "amd_iommu=on");
    let (status, mode) = if pt {
        (Status::Ok, "passthrough".to_string())
    } else if units.is_empty() && group_type.is_none() && !on_cmdline {
        (Status::Ok, "off".to_string())
    } else {
        (Status::Warn, format!("translated ({})", group_type.as_deref().unwrap_or("DMA")))
    };
    let mut c = check("iommu", "IOMMU mode", status, mode.clone());
    let iommu_words: Vec<&str> = cmdline.split_whitespace().filter(|w| w.contains("iommu")).collect();
    if !iommu_words.is_empty() {
        c.details.push(format!("cmdline: {}", iommu_words.join(" ")));
    }
    if status == Status::Warn {
        c.fix = Some("GPUDirect peer-to-peer through a translating IOMMU often fails or is slow: boot with iommu=pt (intel_iommu=on iommu=pt / amd_iommu=on iommu=pt)".into());
    }
    c.raw = json!({"mode": mode, "cmdline": iommu_words});
    c
}

fn pci_class(fs: &Fs, dir: &std::path::Path) -> u32 {
    fs.read_bytes(&dir.join("class"))
        .and_then(|b| u32::from_str_radix(String::from_utf8_lossy(&b).trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

fn pcie(fs: &Fs) -> Check {
    let mut nics = Vec::new();
    for d in fs.list("/sys/class/infiniband") {
        if let Some(p) = fs.resolve(&format!("/sys/class/infiniband/{d}/device")) {
            nics.push((d, pci::path_to(&p)));
        }
    }
    let mut gpus = Vec::new();
    for b in fs.list("/sys/bus/pci/devices") {
        if let Some(p) = fs.resolve(&format!("/sys/bus/pci/devices/{b}")) {
            let class = pci_class(fs, &p) >> 8;
            // display controllers: VGA 0x0300, 3D 0x0302, other 0x0380; accelerators 0x1200
            if matches!(class, 0x0300 | 0x0302 | 0x0380 | 0x1200) {
                gpus.push((b, pci::path_to(&p)));
            }
        }
    }
    let mut details = Vec::new();
    let mut status = Status::Ok;
    let mut ro = Vec::new();
    for (name, path) in &nics {
        if let Some(f) = path.last() {
            let cfg = fs.read_bytes(&f.dir.join("config")).unwrap_or_default();
            let r = pci::relaxed_ordering(&cfg);
            details.push(format!(
                "{name} ({}): relaxed ordering {}",
                f.bdf,
                match r {
                    Some(true) => "enabled",
                    Some(false) => "disabled",
                    None => "unknown",
                }
            ));
            ro.push(json!({"nic": name, "bdf": f.bdf, "relaxed_ordering": r}));
        }
    }
    let mut acs_on = Vec::new();
    for (nic, np) in &nics {
        for (gpu, gp) in &gpus {
            for br in pci::bridges_between(np, gp) {
                let cfg = fs.read_bytes(&br.dir.join("config")).unwrap_or_default();
                if let Some(ctrl) = pci::acs_ctrl(&cfg) {
                    if pci::acs_redirects(ctrl) && !acs_on.contains(&br.bdf) {
                        acs_on.push(br.bdf.clone());
                        details.push(format!(
                            "ACS on {} between {nic} and GPU {gpu}: {}",
                            br.bdf,
                            pci::acs_names(ctrl).join(" ")
                        ));
                        status = Status::Fail;
                    }
                }
            }
        }
    }
    let value = if nics.is_empty() {
        "no RDMA NIC: nothing to check".to_string()
    } else if gpus.is_empty() {
        "no GPUs found: NIC-GPU path not checked".to_string()
    } else if acs_on.is_empty() {
        format!("ACS off on the paths between {} NIC(s) and {} GPU(s)", nics.len(), gpus.len())
    } else {
        format!("ACS redirect enabled on {} bridge(s) between NIC and GPU", acs_on.len())
    };
    let mut c = check("pcie", "PCIe ACS / relaxed ordering (NIC-GPU path)", status, value);
    c.details = details;
    if status == Status::Fail {
        c.fix = Some(format!(
            "ACS request/completion redirect sends GPUDirect P2P traffic up to the root complex (hangs, PCIe bus errors, \
             failed registrations): disable ACS in the BIOS or with `setpci -s <BDF> ECAP_ACS+6.w=0000` on {} (not persistent); \
             meanwhile NCCL_NET_GDR_LEVEL=LOC / MCCL_NET_GDR_LEVEL=LOC avoids P2P",
            acs_on.join(", ")
        ));
    }
    c.raw = json!({"acs_enabled": acs_on, "nics": ro, "gpus": gpus.iter().map(|g| g.0.clone()).collect::<Vec<_>>()});
    c
}

fn container(fs: &Fs, memlock_finite: bool) -> Check {
    let cg = fs.read("/proc/1/cgroup").unwrap_or_default();
    let mut kind = None;
    if fs.exists("/.dockerenv") || cg.contains("docker") {
        kind = Some("docker");
    } else if fs.exists("/run/.containerenv") || cg.contains("libpod") {
        kind = Some("podman");
    } else if cg.contains("kubepods") {
        kind = Some("kubernetes");
    } else if cg.contains("containerd") || cg.contains("lxc") {
        kind = Some("container");
    }
    let status = if kind.is_some() && memlock_finite { Status::Warn } else { Status::Ok };
    let mut c = check(
        "container",
        "container",
        status,
        kind.map(|k| format!("inside {k}")).unwrap_or_else(|| "not in a container".into()),
    );
    if status == Status::Warn {
        c.fix = Some("containers inherit a small memlock limit: docker run --ulimit memlock=-1:-1 (--cap-add IPC_LOCK); Kubernetes: IPC_LOCK capability and a memlock-unlimited runtime".into());
    }
    c.raw = json!({"kind": kind});
    c
}

fn env_vars(fs: &Fs) -> Check {
    let vars: Vec<(String, String)> = if fs.is_real_root() {
        std::env::vars().collect()
    } else {
        fs.read("/proc/self/environ")
            .map(|e| {
                e.split('\0').filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
            })
            .unwrap_or_default()
    };
    let mut set: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| ["NCCL_", "MCCL_", "RCCL_", "UCX_", "MRSHIM_"].iter().any(|p| k.starts_with(p)))
        .collect();
    set.sort();
    let mut c = check(
        "env",
        "NCCL_/MCCL_/UCX_/MRSHIM_ variables",
        Status::Ok,
        if set.is_empty() { "none set".to_string() } else { format!("{} set", set.len()) },
    );
    c.details = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    c.raw = serde_json::Value::Object(set.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect());
    c
}

/// The value of an environment variable as the job would see it (this process's; a captured tree's
/// /proc/self/environ).
fn env_var(fs: &Fs, key: &str) -> Option<String> {
    if fs.is_real_root() {
        return std::env::var(key).ok();
    }
    let e = fs.read("/proc/self/environ")?;
    e.split('\0').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=').map(String::from))
}

/// What `UCX_IB_PCI_RELAXED_ORDERING` means on this node: its default (`auto`, also spelled `try`)
/// depends on the CPU model (see [`crate::ucx`]), so nodes of one fleet differ.
fn ucx_relaxed_ordering(fs: &Fs) -> Check {
    use crate::ucx;
    let cpu = ucx::parse_cpuinfo(&fs.read("/proc/cpuinfo").unwrap_or_default());
    let installed = fs.read("/var/lib/dpkg/status").and_then(|s| ucx::installed_version(&s));
    let series = installed.as_deref().and_then(ucx::version);
    let setting = env_var(fs, "UCX_IB_PCI_RELAXED_ORDERING");
    let explicit = setting.as_deref().map(|s| s.trim().to_ascii_lowercase());
    let title = "UCX relaxed ordering (UCX_IB_PCI_RELAXED_ORDERING)";
    let rows = ucx::by_version(&cpu);
    let here = series.map(|v| ucx::auto_on(&cpu, v));
    let value = match explicit.as_deref() {
        Some("on" | "yes" | "y" | "1" | "true") => {
            format!("set to {}: UCX always requests relaxed ordering", setting.as_deref().unwrap_or(""))
        }
        Some("off" | "no" | "n" | "0" | "false") => {
            format!("set to {}: UCX never requests relaxed ordering", setting.as_deref().unwrap_or(""))
        }
        _ => {
            let what = match (here, installed.as_deref()) {
                (Some(a), Some(v)) => format!("UCX {v} {} on this CPU", ucx::say(a)),
                _ => {
                    let first = rows.first().map_or(ucx::Auto::No, |r| r.1);
                    format!("UCX version unknown; 1.13 {}", ucx::say(first))
                }
            };
            format!("default: {what}")
        }
    };
    let mut c = check("ucx_relaxed_ordering", title, Status::Ok, value);
    c.details.push(
        "UCX's default asks for IBV_ACCESS_RELAXED_ORDERING only on CPU models it prefers it for (AMD Naples/Rome/Milan, \
         Genoa from UCX 1.16, Turin from 1.18, Fujitsu ARM before 1.18): nodes with other CPUs register without it, so \
         a device or platform that refuses relaxed ordering fails only on some nodes of a mixed fleet. Set \
         UCX_IB_PCI_RELAXED_ORDERING=on or off explicitly for the same behaviour everywhere; compare nodes with \
         `mrshim doctor --compare`."
            .into(),
    );
    if explicit.is_none() {
        for (range, a) in &rows {
            c.details.push(format!("UCX {range}: {}", ucx::say(*a)));
        }
    }
    let auto_json = |a: ucx::Auto| match a {
        ucx::Auto::All(m) => json!({"requests": "all", "model": m}),
        ucx::Auto::GpuOnly(m) => json!({"requests": "gpu", "model": m}),
        ucx::Auto::No => json!({"requests": "none"}),
    };
    c.raw = json!({
        "setting": setting,
        "ucx_version": installed,
        "cpu": {"vendor": cpu.vendor, "family": cpu.family, "model": cpu.model, "implementer": cpu.implementer, "architecture": cpu.architecture},
        "default_here": here.map(auto_json),
        "default_by_version": rows.iter().map(|(r, a)| (r.clone(), auto_json(*a))).collect::<serde_json::Map<String, serde_json::Value>>(),
    });
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A captured tree with the given files (path below the root, content).
    fn tree(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("mrshim-doctor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (p, text) in files {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
        root
    }

    const LIMITS_8M: &str = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         8388608              8388608              bytes\n";
    /// CapEff of root (all capabilities) and of a user without any.
    const ROOT_CAPS: &str = "Name:\tmrshim\nCapEff:\t000001ffffffffff\n";
    const NO_CAPS: &str = "Name:\tmrshim\nCapEff:\t0000000000000000\n";

    fn memlock_of(name: &str, files: &[(&str, &str)]) -> Check {
        let root = tree(name, files);
        let c = memlock(&Fs::new(&root), ipc_lock(&Fs::new(&root)) == Some(true));
        std::fs::remove_dir_all(&root).unwrap();
        c
    }

    /// With CAP_IPC_LOCK an 8 MiB memlock is no failure where ib_umem_get pins (rxe, mlx5), and
    /// still one where siw pins; without the capability it fails everywhere.
    #[test]
    fn memlock_with_cap_ipc_lock_depends_on_the_provider() {
        let rxe = [
            ("proc/self/limits", LIMITS_8M),
            ("proc/self/status", ROOT_CAPS),
            ("sys/class/infiniband/rxe0/node_type", "1: CA\n"),
        ];
        let c = memlock_of("rxe-root", &rxe);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.value.contains("not enforced: CAP_IPC_LOCK"), "{}", c.value);
        assert!(c.details.iter().any(|d| d.contains("ib_umem_get")), "{:?}", c.details);
        assert_eq!(c.fix, None);
        let mut siw = rxe.to_vec();
        siw.push(("sys/class/infiniband/siw0/node_type", "4: RNIC\n"));
        let c = memlock_of("siw-root", &siw);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.details.iter().any(|d| d.contains("siw0") && d.contains("even with it")), "{:?}", c.details);
        assert_eq!(c.raw["enforced_by"], json!(["siw0"]));
        let mut user = rxe.to_vec();
        user[1] = ("proc/self/status", NO_CAPS);
        let c = memlock_of("rxe-user", &user);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.fix.is_some());
    }

    fn ucx_of(name: &str, files: &[(&str, &str)]) -> Check {
        let root = tree(name, files);
        let c = ucx_relaxed_ordering(&Fs::new(&root));
        std::fs::remove_dir_all(&root).unwrap();
        c
    }

    const DPKG: &str = "Package: libucx0\nStatus: install ok installed\nVersion: 1.13.1-1\n\n";

    /// What `try`/`auto` means here, from /proc/cpuinfo and the installed UCX; an explicit
    /// setting wins.
    #[test]
    fn ucx_relaxed_ordering_default_follows_the_cpu() {
        let milan = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n";
        let intel = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n";
        let c = ucx_of("milan", &[("proc/cpuinfo", milan), ("var/lib/dpkg/status", DPKG)]);
        assert_eq!(c.value, "default: UCX 1.13.1-1 requests relaxed ordering (AMD Milan) on this CPU");
        assert_eq!(c.raw["default_here"]["requests"], "all");
        let c = ucx_of("intel", &[("proc/cpuinfo", intel), ("var/lib/dpkg/status", DPKG)]);
        assert!(c.value.contains("UCX 1.13.1-1 does not request relaxed ordering on this CPU"), "{}", c.value);
        assert!(
            c.details.iter().any(|d| d == "UCX 1.21: requests relaxed ordering (Intel Emerald Rapids)"),
            "{:?}",
            c.details
        );
        let c = ucx_of("unknown-version", &[("proc/cpuinfo", intel)]);
        assert!(c.value.starts_with("default: UCX version unknown; 1.13 does not request"), "{}", c.value);
        let c = ucx_of(
            "set-on",
            &[
                ("proc/cpuinfo", intel),
                ("var/lib/dpkg/status", DPKG),
                ("proc/self/environ", "A=1\0UCX_IB_PCI_RELAXED_ORDERING=on\0"),
            ],
        );
        assert_eq!(c.value, "set to on: UCX always requests relaxed ordering");
        assert_eq!(c.raw["setting"], "on");
    }
}
