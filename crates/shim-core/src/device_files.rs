//! What a mapping of a device file is, per vendor, when no GPU runtime can be asked (with a
//! runtime loaded, its pointer query wins: see `Backend::is_device_memory`). One plain function
//! per rule set, each rule with where it comes from.
//!
//! | path | what it maps | source |
//! |---|---|---|
//! | `/dev/nvidiactl` | host memory the NVIDIA driver pinned (cudaHostAlloc, cudaHostRegister'd) | NVIDIA open-gpu-kernel-modules: system-memory allocations are mmap'ed through the control device |
//! | `/dev/nvidia[0-9]+` | GPU memory through the PCI BAR (cuMemAlloc'd memory the CPU can map) | same: per-GPU device node, BAR1 mappings |
//! | `/dev/nvidia-uvm` | managed memory (cudaMallocManaged): pages migrate on fault | NVIDIA UVM driver |
//! | `/dev/dri/renderD*`, `/dev/dri/card*` | a GPU buffer object: PROT_NONE = VRAM reserved for the GPU's VA (amdgpu/ROCm, MetaX), accessible = VRAM through the BAR or GTT | Linux DRM render nodes; ROCm's libhsakmt maps VRAM BOs through the render node |
//! | `/dev/kfd` | AMD KFD doorbells and events, not data | ROCm ROCT-Thunk-Interface (libhsakmt): doorbell pages mmap'ed from /dev/kfd |
//! | `/dev/infiniband/uverbs*` | the NIC's doorbells / BlueFlame pages, not GPU memory | rdma-core providers mmap UAR pages from the uverbs device |
//! | `/dev/mxcd` | MetaX GPU memory — **inferred**: MetaX containers are given `/dev/mxcd` and `/dev/dri`; no public source says what `/dev/mxcd` maps | MetaX container documentation (devices passed in) |

use mrshim_record::MemKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    /// AMD (amdgpu/ROCm) or any DRM GPU driver (MetaX also uses render nodes).
    Drm,
    Amd,
    Metax,
    /// The RDMA NIC itself.
    Rdma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceMapping {
    /// Host RAM the GPU driver pinned: the NIC can register it like host memory.
    HostPinned,
    /// GPU memory through the PCI BAR.
    Bar,
    /// Managed (migrating) memory.
    Managed,
    /// GPU memory the CPU cannot touch (PROT_NONE reservation) or a GPU buffer object.
    DeviceMemory,
    /// Doorbell/event pages of a driver: not data memory.
    Doorbell,
}

impl DeviceMapping {
    /// The memory kind recorded for it.
    pub fn mem_kind(self) -> MemKind {
        match self {
            DeviceMapping::HostPinned => MemKind::HostAnon,
            DeviceMapping::Bar | DeviceMapping::Managed | DeviceMapping::DeviceMemory => MemKind::Device,
            DeviceMapping::Doorbell => MemKind::Unknown,
        }
    }
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The rule for a mapping of `path` (as /proc/self/maps prints it); `accessible`: readable or
/// writable (false = PROT_NONE). None: not a device file these rules know.
pub fn classify(path: &str, accessible: bool) -> Option<(Vendor, DeviceMapping)> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let dev = path.strip_prefix("/dev/")?;
    Some(match dev {
        "nvidiactl" => (Vendor::Nvidia, DeviceMapping::HostPinned),
        "nvidia-uvm" => (Vendor::Nvidia, DeviceMapping::Managed),
        d if d.strip_prefix("nvidia").is_some_and(digits) => (Vendor::Nvidia, DeviceMapping::Bar),
        "kfd" => (Vendor::Amd, DeviceMapping::Doorbell),
        "mxcd" => (Vendor::Metax, DeviceMapping::DeviceMemory),
        d if d.strip_prefix("infiniband/uverbs").is_some_and(digits) => (Vendor::Rdma, DeviceMapping::Doorbell),
        d if d.strip_prefix("dri/renderD").is_some_and(digits) || d.strip_prefix("dri/card").is_some_and(digits) => {
            let _ = accessible; // VRAM reservation (PROT_NONE) or a BO the CPU sees: GPU memory either way
            (Vendor::Drm, DeviceMapping::DeviceMemory)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(path: &str, accessible: bool) -> Option<(Vendor, DeviceMapping, MemKind)> {
        classify(path, accessible).map(|(v, m)| (v, m, m.mem_kind()))
    }

    #[test]
    fn nvidiactl_is_host_pinned_memory() {
        assert_eq!(kind("/dev/nvidiactl", true), Some((Vendor::Nvidia, DeviceMapping::HostPinned, MemKind::HostAnon)));
    }

    #[test]
    fn nvidia_n_is_bar_memory() {
        assert_eq!(kind("/dev/nvidia0", true), Some((Vendor::Nvidia, DeviceMapping::Bar, MemKind::Device)));
        assert_eq!(kind("/dev/nvidia15", true).map(|k| k.1), Some(DeviceMapping::Bar));
        assert_eq!(kind("/dev/nvidia-caps", true), None);
        assert_eq!(kind("/dev/nvidia", true), None);
    }

    #[test]
    fn nvidia_uvm_is_managed() {
        assert_eq!(kind("/dev/nvidia-uvm", true), Some((Vendor::Nvidia, DeviceMapping::Managed, MemKind::Device)));
    }

    #[test]
    fn render_nodes_are_device_memory() {
        assert_eq!(
            kind("/dev/dri/renderD128", false),
            Some((Vendor::Drm, DeviceMapping::DeviceMemory, MemKind::Device))
        );
        assert_eq!(kind("/dev/dri/renderD129", true).map(|k| k.2), Some(MemKind::Device));
        assert_eq!(kind("/dev/dri/card0", false).map(|k| k.1), Some(DeviceMapping::DeviceMemory));
        assert_eq!(kind("/dev/dri/by-path", false), None);
    }

    #[test]
    fn kfd_is_a_doorbell_not_memory() {
        assert_eq!(kind("/dev/kfd", true), Some((Vendor::Amd, DeviceMapping::Doorbell, MemKind::Unknown)));
    }

    #[test]
    fn uverbs_is_the_nics_doorbell_not_gpu_memory() {
        assert_eq!(
            kind("/dev/infiniband/uverbs0", true),
            Some((Vendor::Rdma, DeviceMapping::Doorbell, MemKind::Unknown))
        );
        assert_eq!(kind("/dev/infiniband/uverbs12", true).map(|k| k.0), Some(Vendor::Rdma));
    }

    #[test]
    fn mxcd_is_metax_device_memory_inferred() {
        assert_eq!(kind("/dev/mxcd", false), Some((Vendor::Metax, DeviceMapping::DeviceMemory, MemKind::Device)));
        assert_eq!(kind("/dev/mxcd (deleted)", false).map(|k| k.0), Some(Vendor::Metax));
    }

    #[test]
    fn other_files_are_not_covered() {
        for p in ["/dev/zero", "/dev/shm/x", "/dev/fb0", "/usr/lib/libc.so.6", "", "[heap]"] {
            assert_eq!(classify(p, true), None, "{p}");
        }
    }
}
