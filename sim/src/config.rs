//! The simulator's configuration, read once from the environment. Every bad value is reported
//! with the variable, the value and what is accepted (see README "Simulated device").

use crate::fault::{self, Rule};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    Ethernet,
    InfiniBand,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub name: String,
    pub link: LinkLayer,
    /// ibv_mtu enum value (1 = 256 ... 5 = 4096).
    pub mtu: u32,
    pub active: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memlock {
    /// Like the kernel: the limit applies unless the process has CAP_IPC_LOCK.
    Auto,
    /// Apply RLIMIT_MEMLOCK even with CAP_IPC_LOCK (tests run as root).
    Enforce,
    Off,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub devices: Vec<DeviceSpec>,
    pub faults: Vec<Rule>,
    pub memlock: Memlock,
    pub dmabuf: bool,
    pub peer_memory: bool,
    /// errno for registering device memory through the VA path without peer memory.
    pub device_mem_errno: i32,
    pub rundir: String,
    pub log: Option<String>,
    /// MRSHIM_SIM_NIC_DELAY_MS: how long the simulated NIC takes to handle each batch of
    /// packets it reads (0: at once). A slow NIC or a starved progress thread, on purpose: tests
    /// of what must stay ordered however late the NIC is.
    pub nic_delay_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub var: &'static str,
    pub value: String,
    pub accepted: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mrshim-sim: {}={:?} is not valid: {}", self.var, self.value, self.accepted)
    }
}

/// The largest MRSHIM_SIM_NIC_DELAY_MS: below the fence's wait (engine::FENCE_LIMIT).
pub const MAX_NIC_DELAY_MS: u64 = 2000;

pub const DEFAULT_DEVICES: &str = "mlx5_0:roce,mlx5_1:roce";

const DEVICES_HELP: &str = "a comma-separated list of NAME:LINK[:mtu=256|512|1024|2048|4096][:state=active|down], \
LINK is roce or ib, e.g. mlx5_0:roce,mlx5_1:ib";

pub fn parse_devices(s: &str) -> Result<Vec<DeviceSpec>, ConfigError> {
    let err = || ConfigError { var: "MRSHIM_SIM_DEVICES", value: s.into(), accepted: DEVICES_HELP.into() };
    let mut out: Vec<DeviceSpec> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let mut parts = item.split(':');
        let name = parts.next().unwrap_or_default();
        let valid_name = !name.is_empty()
            && name.len() < 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name || out.iter().any(|d| d.name == name) {
            return Err(err());
        }
        let link = match parts.next() {
            Some("roce") | Some("eth") | Some("ethernet") => LinkLayer::Ethernet,
            Some("ib") | Some("infiniband") => LinkLayer::InfiniBand,
            _ => return Err(err()),
        };
        let mut dev = DeviceSpec { name: name.into(), link, mtu: 5, active: true };
        for opt in parts {
            match opt.split_once('=') {
                Some(("mtu", v)) => dev.mtu = mtu_enum(v).ok_or_else(err)?,
                Some(("state", "active")) => dev.active = true,
                Some(("state", "down")) => dev.active = false,
                _ => return Err(err()),
            }
        }
        out.push(dev);
    }
    if out.is_empty() {
        return Err(err());
    }
    Ok(out)
}

fn mtu_enum(v: &str) -> Option<u32> {
    Some(match v {
        "256" => 1,
        "512" => 2,
        "1024" => 3,
        "2048" => 4,
        "4096" => 5,
        _ => return None,
    })
}

fn parse_switch(var: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err(ConfigError { var, value: v.into(), accepted: "on or off (also 1/0, yes/no, true/false)".into() }),
    }
}

impl Config {
    /// Parses from a variable lookup (the real environment in the library, a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let devices = parse_devices(&get("MRSHIM_SIM_DEVICES").unwrap_or_else(|| DEFAULT_DEVICES.into()))?;
        let faults = match get("MRSHIM_SIM_FAULTS") {
            Some(v) if !v.trim().is_empty() => fault::parse(&v).map_err(|accepted| ConfigError {
                var: "MRSHIM_SIM_FAULTS",
                value: v.clone(),
                accepted,
            })?,
            _ => Vec::new(),
        };
        let memlock = match get("MRSHIM_SIM_MEMLOCK").as_deref() {
            None | Some("") | Some("auto") => Memlock::Auto,
            Some("enforce") => Memlock::Enforce,
            Some("off") => Memlock::Off,
            Some(v) => {
                return Err(ConfigError {
                    var: "MRSHIM_SIM_MEMLOCK",
                    value: v.into(),
                    accepted: "auto (limit applies without CAP_IPC_LOCK), enforce (also with it), off".into(),
                })
            }
        };
        let dmabuf = match get("MRSHIM_SIM_DMABUF") {
            Some(v) => parse_switch("MRSHIM_SIM_DMABUF", &v)?,
            None => true,
        };
        let peer_memory = match get("MRSHIM_SIM_PEER_MEMORY") {
            Some(v) => parse_switch("MRSHIM_SIM_PEER_MEMORY", &v)?,
            None => false,
        };
        let device_mem_errno = match get("MRSHIM_SIM_DEVICE_MEM_ERRNO") {
            Some(v) => mrshim_verbs::errno::parse(&v).ok_or_else(|| ConfigError {
                var: "MRSHIM_SIM_DEVICE_MEM_ERRNO",
                value: v.clone(),
                accepted: format!("an errno name or number, one of {}", mrshim_verbs::errno::names_help()),
            })?,
            None => libc::EINVAL,
        };
        let rundir = get("MRSHIM_SIM_RUNDIR").filter(|s| !s.is_empty()).unwrap_or_else(|| {
            let base = get("XDG_RUNTIME_DIR").filter(|s| !s.is_empty()).unwrap_or_else(|| "/tmp".into());
            // SAFETY: getuid has no preconditions.
            format!("{base}/mrshim-sim-{}", unsafe { libc::getuid() })
        });
        let log = get("MRSHIM_SIM_LOG").filter(|s| !s.is_empty());
        let nic_delay_ms = match get("MRSHIM_SIM_NIC_DELAY_MS") {
            Some(v) => {
                v.trim().parse::<u64>().ok().filter(|&ms| ms <= MAX_NIC_DELAY_MS).ok_or_else(|| ConfigError {
                    var: "MRSHIM_SIM_NIC_DELAY_MS",
                    value: v.clone(),
                    accepted: format!("milliseconds, 0 to {MAX_NIC_DELAY_MS}"),
                })?
            }
            None => 0,
        };
        Ok(Config { devices, faults, memlock, dmabuf, peer_memory, device_mem_errno, rundir, log, nic_delay_ms })
    }

    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_two_roce_ports() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.devices[0].name, "mlx5_0");
        assert!(c.devices.iter().all(|d| d.link == LinkLayer::Ethernet && d.mtu == 5 && d.active));
        assert!(c.dmabuf && !c.peer_memory);
        assert_eq!(c.device_mem_errno, libc::EINVAL);
        assert_eq!(c.nic_delay_ms, 0);
    }

    #[test]
    fn nic_delay_is_bounded_milliseconds() {
        assert_eq!(cfg(&[("MRSHIM_SIM_NIC_DELAY_MS", "300")]).unwrap().nic_delay_ms, 300);
        for bad in ["-1", "2001", "1s", ""] {
            let e = cfg(&[("MRSHIM_SIM_NIC_DELAY_MS", bad)]).unwrap_err();
            assert_eq!(e.var, "MRSHIM_SIM_NIC_DELAY_MS", "{bad}");
        }
    }

    #[test]
    fn ib_variant_and_options() {
        let c = cfg(&[("MRSHIM_SIM_DEVICES", "mlx5_0:ib:mtu=2048,mlx5_1:roce:state=down")]).unwrap();
        assert_eq!(c.devices[0].link, LinkLayer::InfiniBand);
        assert_eq!(c.devices[0].mtu, 4);
        assert!(!c.devices[1].active);
    }

    #[test]
    fn bad_values_name_the_variable_and_what_is_accepted() {
        for (var, val) in [
            ("MRSHIM_SIM_DEVICES", "mlx5_0:token"),
            ("MRSHIM_SIM_DEVICES", ""),
            ("MRSHIM_SIM_DEVICES", "a:roce,a:ib"),
            ("MRSHIM_SIM_DEVICES", "a:roce:mtu=9000"),
            ("MRSHIM_SIM_MEMLOCK", "sometimes"),
            ("MRSHIM_SIM_DMABUF", "maybe"),
            ("MRSHIM_SIM_PEER_MEMORY", "2"),
            ("MRSHIM_SIM_DEVICE_MEM_ERRNO", "EWHAT"),
            ("MRSHIM_SIM_FAULTS", "reg_mr"),
        ] {
            let e = cfg(&[(var, val)]).unwrap_err();
            assert_eq!(e.var, var);
            let line = e.to_string();
            assert!(line.contains(var) && line.contains(val), "{line}");
            assert!(!e.accepted.is_empty());
        }
    }
}
