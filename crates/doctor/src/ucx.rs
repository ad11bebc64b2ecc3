//! What UCX's relaxed-ordering default means on a node. `UCX_IB_PCI_RELAXED_ORDERING` defaults to
//! `auto` (`try` is the same value): UCX then asks for IBV_ACCESS_RELAXED_ORDERING only on the CPU
//! models it prefers it for (`ucs_cpu_prefer_relaxed_order` in src/ucs/arch/cpu.h, the models as
//! `ucs_arch_get_cpu_model` in src/ucs/arch/x86_64/cpu.c names them), so one job on a mixed fleet
//! registers with relaxed ordering on some nodes and without it on others — and a device or
//! platform that refuses it fails only there. The table below is read from UCX's sources:
//!
//! | UCX | preferred |
//! | --- | --- |
//! | 1.13–1.15 | AMD family 0x17 model 0x29 (Naples), 0x31 (Rome); family 0x19 whose model's low nibble is 0 or 1 (Milan: these versions do not extend family 0x19's model, so Genoa 0x11 counts too); Fujitsu ARM (implementer 0x46, architecture 8) |
//! | 1.16–1.17 | AMD Naples, Rome; family 0x19 model 0x00/0x01 (Milan), 0x11/0x90 (Genoa); Fujitsu ARM |
//! | 1.18–1.20 | AMD Naples, Rome, Milan, Genoa, and family 0x1a (Turin: its model is not extended, so every one) |
//! | 1.21 | as 1.18, plus Intel family 6 model 0xcf (Emerald Rapids) |
//! | 1.22+ | as 1.18; Emerald Rapids for GPU (CUDA) memory only |

/// The first processor of /proc/cpuinfo, as far as UCX's choice depends on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    /// `vendor_id` (x86: GenuineIntel, AuthenticAMD, HygonGenuine, ...).
    pub vendor: String,
    /// `cpu family` and `model` in decimal as the kernel prints them (family with the extended
    /// family added, model with the extended model).
    pub family: Option<u32>,
    pub model: Option<u32>,
    /// aarch64: `CPU implementer`, `CPU architecture`.
    pub implementer: Option<u32>,
    pub architecture: Option<u32>,
}

/// Parses the first processor's block of /proc/cpuinfo.
pub fn parse_cpuinfo(text: &str) -> Cpu {
    let mut c = Cpu::default();
    for line in text.lines() {
        if line.trim().is_empty() && (!c.vendor.is_empty() || c.family.is_some() || c.implementer.is_some()) {
            break;
        }
        let Some((k, v)) = line.split_once(':') else { continue };
        let (k, v) = (k.trim(), v.trim());
        let num = |s: &str| match s.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        };
        match k {
            "vendor_id" => c.vendor = v.to_string(),
            "cpu family" => c.family = num(v),
            "model" => c.model = num(v),
            "CPU implementer" => c.implementer = num(v),
            "CPU architecture" => c.architecture = num(v),
            _ => {}
        }
    }
    c
}

impl Cpu {
    /// "AuthenticAMD family 0x19 model 0x11" / "ARM implementer 0x46 architecture 8".
    pub fn describe(&self) -> String {
        match (self.family, self.model, self.implementer) {
            (Some(f), Some(m), _) => format!("{} family {f:#x} model {m:#x}", self.vendor),
            (_, _, Some(i)) => format!("ARM implementer {i:#x} architecture {}", self.architecture.unwrap_or(0)),
            _ => "unknown CPU".into(),
        }
    }
}

/// What `auto`/`try` makes UCX ask for on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auto {
    /// Relaxed ordering on every registration; UCX's name of the model.
    All(&'static str),
    /// Only on GPU (CUDA) memory.
    GpuOnly(&'static str),
    /// Never.
    No,
}

/// UCX versions whose choice differs, oldest first, with the first version of each.
pub const SERIES: [(u32, u32); 5] = [(1, 13), (1, 16), (1, 18), (1, 21), (1, 22)];

/// UCX `ucx`'s (major, minor) default on `cpu` (versions before 1.13 are treated as 1.13).
pub fn auto_on(cpu: &Cpu, ucx: (u32, u32)) -> Auto {
    if cpu.implementer == Some(0x46) && cpu.architecture == Some(8) && ucx < (1, 18) {
        return Auto::All("Fujitsu ARM");
    }
    let (Some(family), Some(full)) = (cpu.family, cpu.model) else { return Auto::No };
    // the model as UCX computes it: the extended model only for the families it lists
    let extended = family == 0x17 || (family == 0x19 && ucx >= (1, 16)) || family == 6;
    let model = if extended { full } else { full & 0xf };
    match cpu.vendor.as_str() {
        "AuthenticAMD" => match (family, model) {
            (0x17, 0x29) => Auto::All("AMD Naples"),
            (0x17, 0x31) => Auto::All("AMD Rome"),
            (0x19, 0x00 | 0x01) => Auto::All("AMD Milan"),
            (0x19, 0x11 | 0x90) if ucx >= (1, 16) => Auto::All("AMD Genoa"),
            (0x1a, m) if ucx >= (1, 18) && (m <= 0x2f || (0x40..=0x4f).contains(&m) || (0x60..=0x7f).contains(&m)) => {
                Auto::All("AMD Turin")
            }
            _ => Auto::No,
        },
        "GenuineIntel" if family == 6 && model == 0xcf && ucx >= (1, 21) => {
            if ucx >= (1, 22) {
                Auto::GpuOnly("Intel Emerald Rapids")
            } else {
                Auto::All("Intel Emerald Rapids")
            }
        }
        _ => Auto::No,
    }
}

/// One line per UCX version range: what `auto`/`try` does on `cpu`.
pub fn by_version(cpu: &Cpu) -> Vec<(String, Auto)> {
    let mut out: Vec<(String, Auto)> = Vec::new();
    for (i, v) in SERIES.iter().enumerate() {
        let a = auto_on(cpu, *v);
        let range = match SERIES.get(i + 1) {
            Some(n) if n.1 == v.1 + 1 => format!("{}.{}", v.0, v.1),
            Some(n) => format!("{}.{}–{}.{}", v.0, v.1, n.0, n.1 - 1),
            None => format!("{}.{}+", v.0, v.1),
        };
        out.push((range, a));
    }
    out
}

/// "requests relaxed ordering (AMD Milan)" and its kin.
pub fn say(a: Auto) -> String {
    match a {
        Auto::All(m) => format!("requests relaxed ordering ({m})"),
        Auto::GpuOnly(m) => format!("requests relaxed ordering for GPU memory only ({m})"),
        Auto::No => "does not request relaxed ordering".into(),
    }
}

/// (major, minor) of a version string such as `1.13.1-1` or `1.16.0`.
pub fn version(s: &str) -> Option<(u32, u32)> {
    // a Debian epoch ("1:") is not part of it
    let s = s.split_once(':').map_or(s, |x| x.1);
    let mut it = s.trim().split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    let a = it.next()?.parse().ok()?;
    let b = it.next()?.parse().ok()?;
    Some((a, b))
}

/// The installed UCX's version from dpkg's database (`libucx0`), if any.
pub fn installed_version(dpkg_status: &str) -> Option<String> {
    let mut in_ucx = false;
    for l in dpkg_status.lines() {
        if let Some(p) = l.strip_prefix("Package: ") {
            in_ucx = p.trim() == "libucx0";
        } else if in_ucx {
            if let Some(v) = l.strip_prefix("Version: ") {
                return Some(v.trim().to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amd(family: u32, model: u32) -> Cpu {
        Cpu { vendor: "AuthenticAMD".into(), family: Some(family), model: Some(model), ..Default::default() }
    }

    /// The decision table, case by case from UCX's sources (see the module).
    #[test]
    fn decision_table() {
        let intel =
            |model| Cpu { vendor: "GenuineIntel".into(), family: Some(6), model: Some(model), ..Default::default() };
        let fujitsu = Cpu { implementer: Some(0x46), architecture: Some(8), ..Default::default() };
        let arm = Cpu { implementer: Some(0x41), architecture: Some(8), ..Default::default() };
        let hygon = Cpu { vendor: "HygonGenuine".into(), family: Some(0x18), model: Some(0), ..Default::default() };
        use Auto::*;
        #[rustfmt::skip]
        let cases: &[(&str, Cpu, (u32, u32), Auto)] = &[
            ("Naples", amd(0x17, 0x29), (1, 13), All("AMD Naples")),
            ("Rome", amd(0x17, 0x31), (1, 13), All("AMD Rome")),
            ("Zen+ desktop", amd(0x17, 0x08), (1, 13), No),
            ("Milan", amd(0x19, 0x01), (1, 13), All("AMD Milan")),
            ("Genoa on 1.13: model 0x11 read as 0x1", amd(0x19, 0x11), (1, 13), All("AMD Milan")),
            ("Zen3 desktop 0x21 on 1.13", amd(0x19, 0x21), (1, 15), All("AMD Milan")),
            ("Zen3 desktop 0x21 on 1.16", amd(0x19, 0x21), (1, 16), No),
            ("Genoa on 1.16", amd(0x19, 0x11), (1, 16), All("AMD Genoa")),
            ("Genoa 0x90 on 1.17", amd(0x19, 0x90), (1, 17), All("AMD Genoa")),
            ("Zen4 desktop 0x61 on 1.16", amd(0x19, 0x61), (1, 16), No),
            ("Zen5 (family 26) on 1.13", amd(0x1a, 0x02), (1, 13), No),
            ("Zen5 on 1.17", amd(0x1a, 0x11), (1, 17), No),
            ("Zen5 on 1.18", amd(0x1a, 0x11), (1, 18), All("AMD Turin")),
            ("Zen5 0x44 on 1.18: model not extended", amd(0x1a, 0x44), (1, 18), All("AMD Turin")),
            ("Intel Sapphire Rapids", intel(0x8f), (1, 22), No),
            ("Intel Emerald Rapids on 1.13", intel(0xcf), (1, 13), No),
            ("Intel Emerald Rapids on 1.21", intel(0xcf), (1, 21), All("Intel Emerald Rapids")),
            ("Intel Emerald Rapids on 1.22", intel(0xcf), (1, 22), GpuOnly("Intel Emerald Rapids")),
            ("Fujitsu A64FX on 1.13", fujitsu.clone(), (1, 13), All("Fujitsu ARM")),
            ("Fujitsu A64FX on 1.17", fujitsu.clone(), (1, 17), All("Fujitsu ARM")),
            ("Fujitsu A64FX on 1.18", fujitsu, (1, 18), No),
            ("Arm Neoverse", arm, (1, 13), No),
            ("Hygon is not AMD to UCX", hygon, (1, 13), No),
        ];
        for (name, cpu, v, want) in cases {
            assert_eq!(auto_on(cpu, *v), *want, "{name}");
        }
    }

    #[test]
    fn cpuinfo_and_versions() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9654 96-Core Processor\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n";
        let c = parse_cpuinfo(x86);
        assert_eq!(c, amd(25, 17));
        assert_eq!(c.describe(), "AuthenticAMD family 0x19 model 0x11");
        let arm =
            "processor\t: 0\nBogoMIPS\t: 200.00\nCPU implementer\t: 0x46\nCPU architecture: 8\nCPU variant\t: 0x1\n";
        let c = parse_cpuinfo(arm);
        assert_eq!((c.implementer, c.architecture), (Some(0x46), Some(8)));
        assert_eq!(version("1.13.1-1"), Some((1, 13)));
        assert_eq!(version("1:1.16.0~rc2"), Some((1, 16)), "an epoch is not the version");
        let status =
            "Package: libucx0\nStatus: install ok installed\nVersion: 1.13.1-1\n\nPackage: ucx-utils\nVersion: 9\n";
        assert_eq!(installed_version(status).as_deref(), Some("1.13.1-1"));
        let rows = by_version(&amd(0x19, 0x11));
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["1.13–1.15", "1.16–1.17", "1.18–1.20", "1.21", "1.22+"]);
        assert_eq!(rows[0].1, Auto::All("AMD Milan"));
        assert_eq!(rows[1].1, Auto::All("AMD Genoa"));
    }
}
