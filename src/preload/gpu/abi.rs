//! What the GPU engines know about the runtimes' ABIs, and the decisions built on it — plain,
//! unit-tested functions; the FFI layer (rtapi.rs, cuda.rs) only asks them.
//!
//! Confirmed publicly (ROCm/HIP and ROCm/clr headers, rocm-5.7.1 and rocm-6.x):
//! - `hipMemoryType`: ROCm 5 Host=0 Device=1 Array=2 Unified=3 Managed=4; ROCm 6+
//!   Unregistered=0 Host=1 Device=2 Managed=3 Array=10 Unified=11.
//! - `hipPointerAttribute_t`: type (`memoryType` in 5), device, devicePointer, hostPointer,
//!   isManaged, allocationFlags — 32 bytes, the same offsets in 5 and 6.
//! - `HIP_VERSION` = major·10⁷ + minor·10⁵ + patch (hipRuntimeGetVersion).
//!
//! Not public (MACA's SDK headers are not published): `mcMemoryType`'s values, the layout of
//! `mcPointerAttribute_t`, `mcMemcpyKind`'s values. Public code (FlagCX's MetaX adaptor, UCC's
//! MACA component, Mooncake's MACA path) shows the names — `type`/`memoryType`, `device`,
//! `devicePointer`, `mcMemoryTypeDevice`, `mcMemcpyHostToDevice` — mirroring the CUDA runtime
//! name for name, so the engine assumes the CUDA runtime's values and proves them at run time
//! ([`verdict`]) before it trusts them.

/// The runtime families the engines speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Cuda,
    Hip,
    Maca,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Cuda => "CUDA",
            Family::Hip => "HIP",
            Family::Maca => "MACA",
        }
    }

    /// Whether the values the engine uses are confirmed publicly (else: self-test first, always).
    pub fn abi_public(self) -> bool {
        self != Family::Maca
    }
}

/// hipMemoryTypeDevice for a ROCm major version; None for a major the engine does not know.
pub fn hip_device_type(major: u32) -> Option<u32> {
    match major {
        1..=5 => Some(1),
        6..=7 => Some(2),
        _ => None,
    }
}

/// The major version in a `HIP_VERSION` number (60241134 → 6).
pub fn hip_major(version: i32) -> Option<u32> {
    (version > 0).then_some((version / 10_000_000) as u32)
}

/// The major version in a versioned file name: `libamdhip64.so.6.2.41134` → 6.
pub fn soname_major(file: &str, stem: &str) -> Option<u32> {
    file.strip_prefix(stem)?.strip_prefix('.')?.split('.').next()?.parse().ok()
}

/// MACA values the engine assumes (the CUDA runtime's): mcMemoryTypeDevice, and the
/// mcMemcpyKind values of host → device and device → host.
pub const MACA_DEVICE_TYPE: u32 = 2;
pub const MACA_HOST_TO_DEVICE: u32 = 1;
pub const MACA_DEVICE_TO_HOST: u32 = 2;

/// The pointer-attribute fields the engines read, at the offsets both HIP's and (assumed)
/// MACA's structs put them: type at 0, device at 4, devicePointer at 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    pub memory_type: u32,
    pub device: i32,
    pub device_pointer: u64,
}

impl Attrs {
    /// From the first 16 bytes the runtime wrote.
    pub fn from_bytes(b: &[u8]) -> Attrs {
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Attrs {
            memory_type: u32_at(0),
            device: u32_at(4) as i32,
            device_pointer: u64::from_ne_bytes(b[8..16].try_into().unwrap_or([0; 8])),
        }
    }
}

/// What the self-test observed on its own scratch allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub scratch: u64,
    /// The device the scratch was allocated on.
    pub device: i32,
    /// The pointer query on the scratch (None: the query failed).
    pub on_scratch: Option<Attrs>,
    /// The pointer query on host memory (None: failed, which is fine).
    pub on_host: Option<Attrs>,
    /// The pattern came back: None = equal, Some(i) = first differing byte (or a copy failed).
    pub round_trip: Result<Option<usize>, String>,
}

/// The self-test's verdict: Ok when every assumed value held, else what did not.
pub fn verdict(family: Family, device_type: u32, o: &Observed) -> Result<(), String> {
    let q = match family {
        Family::Cuda => "cuPointerGetAttribute",
        Family::Hip => "hipPointerGetAttributes",
        Family::Maca => "mcPointerGetAttributes",
    };
    let a = o.on_scratch.ok_or_else(|| format!("{q} failed on the engine's own allocation"))?;
    if a.memory_type != device_type {
        return Err(format!(
            "{q} on device memory reads type {} (the engine expects Device = {device_type}): the memory-type enum or the struct layout differs",
            a.memory_type
        ));
    }
    if a.device != o.device || a.device_pointer != o.scratch {
        return Err(format!(
            "{q} reads device {} and devicePointer {:#x} for an allocation of device {} at {:#x}: the struct layout differs",
            a.device, a.device_pointer, o.device, o.scratch
        ));
    }
    if o.on_host.is_some_and(|h| h.memory_type == device_type) {
        return Err(format!("{q} calls host memory device memory"));
    }
    match &o.round_trip {
        Ok(None) => Ok(()),
        Ok(Some(i)) => Err(format!("a pattern copied to the device and back differs at byte {i}")),
        Err(e) => Err(format!("the pattern's round trip failed: {e}")),
    }
}

/// The self-test pattern: every byte differs from its neighbours and from zero-filled memory.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u32).wrapping_mul(31).wrapping_add(7) as u8 | 1).collect()
}

/// `MRSHIM_COPY_SELFTEST` (the shim's config: `every`, from `on`) tests every engine before first
/// use; `auto` (default) only the engines whose ABI is not publicly confirmed (MACA). MACA is
/// always tested.
pub fn selftest_wanted(family: Family, every: bool) -> bool {
    !family.abi_public() || every
}

/// MRSHIM_COPY_SELFTEST=on, as the shim's configuration parsed it.
pub fn selftest_every() -> bool {
    mrshim_core::shim_if_initialized().and_then(|s| s.config()).is_some_and(|c| c.copy_selftest)
}

/// How VA → dmabuf is tried for one runtime: TRY until the runtime answers, then ALWAYS when it
/// exported, NEVER when it cannot (no export function, or an export that failed) — like
/// libfabric's verbs provider decides dmabuf per memory interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmabufPolicy {
    Try,
    Always,
    Never,
}

impl DmabufPolicy {
    pub fn after(self, exported: bool) -> DmabufPolicy {
        match (self, exported) {
            (DmabufPolicy::Never, _) => DmabufPolicy::Never,
            (_, true) => DmabufPolicy::Always,
            (_, false) => DmabufPolicy::Never,
        }
    }
}

/// Whether `name` (a loaded object's path) is the runtime `stem` or a versioned file of it
/// (`libamdhip64.so`, `libamdhip64.so.6`, `libamdhip64.so.6.2.41134`).
pub fn is_runtime_file(path: &str, stem: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base == stem
        || base
            .strip_prefix(stem)
            .is_some_and(|r| r.starts_with('.') && r[1..].bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hip_enum_by_major() {
        assert_eq!(hip_device_type(5), Some(1));
        assert_eq!(hip_device_type(6), Some(2));
        assert_eq!(hip_device_type(7), Some(2));
        assert_eq!(hip_device_type(0), None);
        assert_eq!(hip_device_type(9), None);
        assert_eq!(hip_major(50731921), Some(5));
        assert_eq!(hip_major(60241134), Some(6));
        assert_eq!(hip_major(0), None);
        assert_eq!(soname_major("libamdhip64.so.6.2.41134", "libamdhip64.so"), Some(6));
        assert_eq!(soname_major("libamdhip64.so.5", "libamdhip64.so"), Some(5));
        assert_eq!(soname_major("libamdhip64.so", "libamdhip64.so"), None);
    }

    #[test]
    fn runtime_files_by_prefix() {
        assert!(is_runtime_file("/opt/rocm-6.2.0/lib/libamdhip64.so.6.2.41134", "libamdhip64.so"));
        assert!(is_runtime_file("/tmp/x/libamdhip64.so.5", "libamdhip64.so"));
        assert!(is_runtime_file("libmcruntime.so", "libmcruntime.so"));
        assert!(!is_runtime_file("/usr/lib/libamdhip64.so-gdb.py", "libamdhip64.so"));
        assert!(!is_runtime_file("/usr/lib/libamdhip64_5.so", "libamdhip64.so"));
        assert!(!is_runtime_file("/usr/lib/libmcruntimex.so", "libmcruntime.so"));
    }

    fn observed() -> Observed {
        Observed {
            scratch: 0x7f00_0000_0000,
            device: 1,
            on_scratch: Some(Attrs { memory_type: 2, device: 1, device_pointer: 0x7f00_0000_0000 }),
            on_host: Some(Attrs { memory_type: 0, device: -1, device_pointer: 0 }),
            round_trip: Ok(None),
        }
    }

    #[test]
    fn verdict_accepts_only_what_matches() {
        assert_eq!(verdict(Family::Maca, 2, &observed()), Ok(()));
        let mut o = observed();
        o.on_scratch.as_mut().unwrap().memory_type = 1;
        assert!(verdict(Family::Maca, 2, &o).unwrap_err().contains("enum or the struct layout differs"));
        let mut o = observed();
        o.on_scratch = Some(Attrs { memory_type: 2, device: 2, device_pointer: 0x7f00_0000_0000 });
        assert!(verdict(Family::Maca, 2, &o).unwrap_err().contains("layout differs"));
        let mut o = observed();
        o.on_scratch = None;
        assert!(verdict(Family::Maca, 2, &o).is_err());
        let mut o = observed();
        o.on_host = Some(Attrs { memory_type: 2, device: 0, device_pointer: 0 });
        assert!(verdict(Family::Maca, 2, &o).unwrap_err().contains("host memory"));
        let mut o = observed();
        o.on_host = None;
        assert_eq!(verdict(Family::Maca, 2, &o), Ok(()));
        let mut o = observed();
        o.round_trip = Ok(Some(17));
        assert!(verdict(Family::Hip, 2, &o).unwrap_err().contains("byte 17"));
    }

    #[test]
    fn attrs_at_their_offsets() {
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&2u32.to_ne_bytes());
        b[4..8].copy_from_slice(&3i32.to_ne_bytes());
        b[8..16].copy_from_slice(&0x1234u64.to_ne_bytes());
        assert_eq!(Attrs::from_bytes(&b), Attrs { memory_type: 2, device: 3, device_pointer: 0x1234 });
    }

    #[test]
    fn selftest_and_dmabuf_policies() {
        assert!(selftest_wanted(Family::Maca, false));
        assert!(!selftest_wanted(Family::Hip, false));
        assert!(selftest_wanted(Family::Hip, true));
        assert!(selftest_wanted(Family::Cuda, true));
        assert!(!selftest_wanted(Family::Cuda, false));
        assert_eq!(DmabufPolicy::Try.after(true), DmabufPolicy::Always);
        assert_eq!(DmabufPolicy::Try.after(false), DmabufPolicy::Never);
        assert_eq!(DmabufPolicy::Never.after(true), DmabufPolicy::Never);
        let p = pattern(4096);
        assert!(p.iter().all(|b| *b != 0) && p.windows(2).all(|w| w[0] != w[1]));
    }
}
