//! GPU memory the NIC must reach, per vendor: which GPU drivers are loaded (nvidia, amdgpu,
//! metax), which peer-memory clients exist (every place they show up), and whether dmabuf
//! registration works (the probe, the kernel's CONFIG_DMABUF_MOVE_NOTIFY / CONFIG_PCI_P2PDMA).

use crate::probe::DmabufProbe;
use crate::report::{Check, Status};
use crate::sys::Fs;
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    Amd,
    Metax,
}

impl Vendor {
    pub fn module(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amdgpu",
            Vendor::Metax => "metax",
        }
    }

    /// Whether `client` (a peer-memory client's name) serves this vendor's memory.
    fn serves(self, client: &str) -> bool {
        match self {
            Vendor::Nvidia => matches!(client, "nvidia_peermem" | "nv_peer_mem" | "nv_mem"),
            Vendor::Amd => client == "amdkfd",
            // MetaX's peer-memory module ships with its driver; its client name is not public, so
            // any client that is neither NVIDIA's nor AMD's counts (and the report names it).
            Vendor::Metax => !Vendor::Nvidia.serves(client) && !Vendor::Amd.serves(client),
        }
    }

    /// What to do when the NIC cannot reach this vendor's memory by address.
    pub fn fix(self) -> &'static str {
        match self {
            Vendor::Nvidia => {
                "modprobe nvidia_peermem (or the dmabuf path: kernel >= 5.12, open GPU driver, NCCL_DMABUF_ENABLE=1); \
                 meanwhile NCCL_NET_GDR_LEVEL=LOC keeps GPU buffers off the NIC; MRSHIM_RETRY=va-to-dmabuf,bounce"
            }
            Vendor::Amd => {
                "install the amdgpu DKMS driver with peer-memory support (amdkfd in /sys/kernel/mm/memory_peers) or use \
                 dmabuf (ROCm >= 6, NCCL_DMABUF_ENABLE=1: RCCL reads NCCL_*); meanwhile NCCL_NET_GDR_LEVEL=LOC; \
                 MRSHIM_RETRY=va-to-dmabuf,bounce"
            }
            Vendor::Metax => {
                "load MetaX's peer-memory module from the same MACA driver release as the metax module (it registers a \
                 client with ib_register_peer_memory_client) or use dmabuf (MCCL mirrors NCCL's knobs: MCCL_DMABUF_ENABLE=1 where \
                 your MCCL release has it); meanwhile MCCL_NET_GDR_LEVEL=LOC; \
                 MRSHIM_RETRY=va-to-dmabuf,bounce"
            }
        }
    }
}

pub fn modules(fs: &Fs) -> Vec<String> {
    fs.read("/proc/modules")
        .map(|m| m.lines().filter_map(|l| l.split_whitespace().next().map(String::from)).collect())
        .unwrap_or_default()
}

/// The GPU drivers loaded: /proc/modules, or their /sys/module and /proc/driver directories.
pub fn vendors(fs: &Fs, mods: &[String]) -> Vec<Vendor> {
    [Vendor::Nvidia, Vendor::Amd, Vendor::Metax]
        .into_iter()
        .filter(|v| {
            mods.iter().any(|m| m == v.module())
                || fs.exists(&format!("/sys/module/{}", v.module()))
                || (*v == Vendor::Nvidia && fs.exists("/proc/driver/nvidia"))
        })
        .collect()
}

/// Where peer-memory clients register (MOFED's and the distributions' peer-memory patches).
pub const PEER_DIRS: [&str; 3] = ["/sys/kernel/mm/memory_peers", "/sys/kernel/memory_peers", "/sys/memory_peers"];

/// Every peer-memory client found, with where: the sysfs directories, nvidia_peermem's module
/// directory, a loaded nv_peer_mem.
pub fn peer_clients(fs: &Fs, mods: &[String]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> =
        PEER_DIRS.iter().flat_map(|d| fs.list(d).into_iter().map(move |c| (c, d.to_string()))).collect();
    for m in ["nvidia_peermem", "nv_peer_mem"] {
        if fs.exists(&format!("/sys/module/{m}")) || mods.iter().any(|x| x == m) {
            v.push((m.to_string(), format!("/sys/module/{m}")));
        }
    }
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}

/// The kernel exports the peer-memory API (ib_register_peer_memory_client in /proc/kallsyms).
pub fn peer_api(fs: &Fs) -> Option<bool> {
    let k = fs.read("/proc/kallsyms")?;
    Some(k.lines().any(|l| l.split_whitespace().nth(2) == Some("ib_register_peer_memory_client")))
}

/// CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA from /boot/config-<release> (or
/// /proc/config.gz): None when no readable config; a missing key reads "not set".
pub fn kernel_config(fs: &Fs, release: &str) -> Option<Vec<(&'static str, String)>> {
    let text = fs.read(&format!("/boot/config-{release}")).or_else(|| {
        use std::io::Read;
        let gz = fs.read_bytes(&fs.path("/proc/config.gz"))?;
        let mut s = String::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut s).ok()?;
        Some(s)
    })?;
    Some(
        ["CONFIG_DMABUF_MOVE_NOTIFY", "CONFIG_PCI_P2PDMA"]
            .into_iter()
            .map(|k| {
                let v =
                    text.lines().find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('='))).unwrap_or("not set");
                (k, v.to_string())
            })
            .collect(),
    )
}

fn check(id: &str, title: &str, status: Status, value: String) -> Check {
    Check { id: id.into(), title: title.into(), status, value, details: vec![], fix: None, raw: json!(null) }
}

/// One check over all GPU vendors: each loaded GPU driver needs a peer-memory client (or dmabuf).
pub fn peer_memory(fs: &Fs, has_rdma: bool, probe: Option<&DmabufProbe>) -> Check {
    let mods = modules(fs);
    let vendors = vendors(fs, &mods);
    let clients = peer_clients(fs, &mods);
    let missing: Vec<Vendor> = vendors.iter().copied().filter(|v| !clients.iter().any(|(c, _)| v.serves(c))).collect();
    let dmabuf_ok = probe == Some(&DmabufProbe::Supported);
    let names = |vs: &[Vendor]| vs.iter().map(|v| v.module()).collect::<Vec<_>>().join(", ");
    let (status, value) = if vendors.is_empty() {
        (Status::Ok, "no GPU driver loaded: GPUDirect RDMA not in play".to_string())
    } else if missing.is_empty() {
        let list: Vec<&str> = clients.iter().map(|(c, _)| c.as_str()).collect();
        (Status::Ok, format!("{} with peer-memory client ({})", names(&vendors), list.join(", ")))
    } else {
        let st = if dmabuf_ok || !has_rdma { Status::Warn } else { Status::Fail };
        let how = if dmabuf_ok { "dmabuf only" } else { "GPU memory cannot be registered by address" };
        (st, format!("{} loaded, no peer-memory client: {how}", names(&missing)))
    };
    let mut c = check("peer_memory", "GPU peer memory / dmabuf", status, value);
    let loaded: Vec<&str> =
        ["nvidia", "nvidia_peermem", "nv_peer_mem", "amdgpu", "metax", "ib_uverbs", "mlx5_ib", "ib_core"]
            .into_iter()
            .filter(|m| mods.iter().any(|x| x == m))
            .collect();
    c.details
        .push(format!("modules: {}", if loaded.is_empty() { "none of interest".into() } else { loaded.join(", ") }));
    let where_: Vec<String> = clients.iter().map(|(c, d)| format!("{c} ({d})")).collect();
    c.details
        .push(format!("peer-memory clients: {}", if where_.is_empty() { "none".into() } else { where_.join(", ") }));
    if let Some(api) = peer_api(fs) {
        c.details.push(format!(
            "ib_register_peer_memory_client in /proc/kallsyms: {}",
            if api { "yes (peer-memory API present)" } else { "no" }
        ));
    }
    if !missing.is_empty() {
        c.fix = Some(missing.iter().map(|v| v.fix()).collect::<Vec<_>>().join(" | "));
    }
    c.raw = json!({
        // what `mrshim analyze` reads: the (first) GPU driver, and whether every one has a client
        "gpu_driver": vendors.first().map_or("", |v| v.module()),
        "peermem": !vendors.is_empty() && missing.is_empty(),
        "gpu_drivers": vendors.iter().map(|v| v.module()).collect::<Vec<_>>(),
        "without_peer_client": missing.iter().map(|v| v.module()).collect::<Vec<_>>(),
        "peer_clients": clients.iter().map(|(c, d)| json!({"name": c, "where": d})).collect::<Vec<_>>(),
        "modules": loaded,
    });
    c
}

/// dmabuf registration: the probe (live systems only), the kernel version and config.
pub fn dmabuf(fs: &Fs, probe: Option<&DmabufProbe>) -> Check {
    let release = fs.read_trim("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kernel_ok = kernel_at_least(&release, 5, 12);
    let config = kernel_config(fs, &release);
    let (status, value) = match probe {
        Some(DmabufProbe::Supported) => (Status::Ok, "supported (ibv_reg_dmabuf_mr with fd -1: EBADF)".to_string()),
        Some(DmabufProbe::NotSupported(e)) => (
            Status::Warn,
            format!("not supported (ibv_reg_dmabuf_mr with fd -1: {})", std::io::Error::from_raw_os_error(*e)),
        ),
        Some(DmabufProbe::Unavailable(why)) => (Status::Warn, format!("not probed: {why}")),
        None if kernel_ok => (Status::Ok, format!("kernel {release} can (>= 5.12); not probed (captured tree)")),
        None => (Status::Warn, format!("kernel {release} cannot (< 5.12)")),
    };
    let mut c = check("dmabuf", "dmabuf registration", status, value);
    match &config {
        Some(kv) => c.details.extend(kv.iter().map(|(k, v)| format!("{k}={v}"))),
        None => c.details.push("kernel config not readable (/boot/config-*, /proc/config.gz)".into()),
    }
    if status != Status::Ok {
        c.fix = Some(
            "dmabuf MRs need kernel >= 5.12 with CONFIG_DMABUF_MOVE_NOTIFY (or a provider that pins), rdma-core >= 34 \
             and a GPU driver that exports dmabufs (NCCL_DMABUF_ENABLE=1, ROCm >= 6, MACA's mcMemGetHandleForAddressRange)"
                .into(),
        );
    }
    c.raw = json!({
        "probe": match probe {
            Some(DmabufProbe::Supported) => json!("supported"),
            Some(DmabufProbe::NotSupported(e)) => json!({"errno": e}),
            Some(DmabufProbe::Unavailable(w)) => json!({"unavailable": w}),
            None => json!(null),
        },
        "kernel": release,
        "config": config.map(|kv| kv.into_iter().collect::<std::collections::BTreeMap<_, _>>()),
    });
    c
}

/// Is the kernel release `rel` (e.g. `6.1.0-18-amd64`) at least `maj.min`?
pub fn kernel_at_least(rel: &str, maj: u32, min: u32) -> bool {
    let mut it =
        rel.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (maj, min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tree(name: &str, files: &[(&str, &str)], dirs: &[&str]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mrshim-doctor-gpu-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in dirs {
            std::fs::create_dir_all(root.join(d.trim_start_matches('/'))).unwrap();
        }
        for (p, text) in files {
            let p = root.join(p.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        root
    }

    fn mods(m: &[&str]) -> String {
        m.iter().map(|x| format!("{x} 16384 0 - Live 0x0\n")).collect()
    }

    #[test]
    fn every_place_a_peer_client_shows_up() {
        let root = tree(
            "places",
            &[("/proc/modules", &mods(&["amdgpu", "metax", "nvidia"]))],
            &["/sys/kernel/mm/memory_peers/amdkfd", "/sys/kernel/memory_peers/mx_peer", "/sys/module/nvidia_peermem"],
        );
        let fs = Fs::new(&root);
        let m = modules(&fs);
        assert_eq!(vendors(&fs, &m), vec![Vendor::Nvidia, Vendor::Amd, Vendor::Metax]);
        let names: Vec<String> = peer_clients(&fs, &m).into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["amdkfd", "mx_peer", "nvidia_peermem"]);
        let c = peer_memory(&fs, true, None);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert_eq!((c.raw["gpu_driver"].as_str(), c.raw["peermem"].as_bool()), (Some("nvidia"), Some(true)));
        assert!(c.details.iter().any(|d| d.contains("mx_peer (/sys/kernel/memory_peers)")), "{c:?}");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn each_vendor_without_a_client_gets_its_own_fix() {
        let root = tree("missing", &[("/proc/modules", &mods(&["metax", "amdgpu"]))], &["/sys/memory_peers/amdkfd"]);
        let fs = Fs::new(&root);
        let c = peer_memory(&fs, true, None);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.raw["peermem"].as_bool(), Some(false));
        assert!(c.value.starts_with("metax loaded, no peer-memory client"), "{}", c.value);
        let fix = c.fix.unwrap();
        assert!(fix.contains("MetaX's peer-memory module") && fix.contains("MCCL_NET_GDR_LEVEL"), "{fix}");
        assert!(!fix.contains("nvidia_peermem"), "{fix}");
        // dmabuf works: a warning, not a failure
        let c = peer_memory(&fs, true, Some(&DmabufProbe::Supported));
        assert_eq!(c.status, Status::Warn);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn amd_without_amdkfd_names_amd_knobs() {
        let root = tree("amd", &[("/proc/modules", &mods(&["amdgpu"]))], &[]);
        let c = peer_memory(&Fs::new(&root), true, None);
        assert_eq!(c.status, Status::Fail);
        let fix = c.fix.unwrap();
        assert!(fix.contains("amdkfd") && fix.contains("RCCL"), "{fix}");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn kallsyms_and_kernel_config() {
        let root = tree(
            "kcfg",
            &[
                ("/proc/kallsyms", "ffffffffc0a01230 T ib_register_peer_memory_client\t[ib_core]\n"),
                ("/proc/sys/kernel/osrelease", "6.8.0-1\n"),
                ("/boot/config-6.8.0-1", "CONFIG_DMABUF_MOVE_NOTIFY=y\n# CONFIG_PCI_P2PDMA is not set\n"),
            ],
            &[],
        );
        let fs = Fs::new(&root);
        assert_eq!(peer_api(&fs), Some(true));
        assert_eq!(
            kernel_config(&fs, "6.8.0-1").unwrap(),
            vec![("CONFIG_DMABUF_MOVE_NOTIFY", "y".to_string()), ("CONFIG_PCI_P2PDMA", "not set".to_string())]
        );
        let c = dmabuf(&fs, Some(&DmabufProbe::NotSupported(libc::EOPNOTSUPP)));
        assert_eq!(c.status, Status::Warn);
        assert!(c.details.contains(&"CONFIG_DMABUF_MOVE_NOTIFY=y".to_string()), "{c:?}");
        assert_eq!(dmabuf(&fs, Some(&DmabufProbe::Supported)).status, Status::Ok);
        let _ = std::fs::remove_dir_all(root);
    }
}
