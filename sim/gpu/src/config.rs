//! MRSHIM_SIM_GPUS and MRSHIM_SIM_GPU_MEM, parsed once by each simulated runtime at its init.

use std::fmt;

pub const MAX_GPUS: u32 = 16;
const DEFAULT_MEM: u64 = 16 << 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub gpus: u32,
    /// Bytes of device memory per GPU (a multiple of the page size).
    pub mem: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The library reporting it: mrshim-sim-cuda, mrshim-sim-hip, mrshim-sim-maca.
    pub who: &'static str,
    pub var: &'static str,
    pub value: String,
    pub accepted: &'static str,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}={:?} is not valid: {}", self.who, self.var, self.value, self.accepted)
    }
}

/// "16G", "512M", "65536", "64k": bytes, K/M/G binary suffixes.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, shift) = match v.chars().last()?.to_ascii_uppercase() {
        'K' => (&v[..v.len() - 1], 10),
        'M' => (&v[..v.len() - 1], 20),
        'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(1 << shift)
}

impl Config {
    pub fn from_lookup(who: &'static str, get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let gpus = match get("MRSHIM_SIM_GPUS") {
            None => 1,
            Some(v) => v.trim().parse::<u32>().ok().filter(|n| *n <= MAX_GPUS).ok_or(ConfigError {
                who,
                var: "MRSHIM_SIM_GPUS",
                value: v.clone(),
                accepted: "a number of devices from 0 to 16",
            })?,
        };
        let mem = match get("MRSHIM_SIM_GPU_MEM") {
            None => DEFAULT_MEM,
            Some(v) => {
                parse_size(&v).map(|b| b & !(crate::memory::PAGE - 1)).filter(|b| *b > 0).ok_or(ConfigError {
                    who,
                    var: "MRSHIM_SIM_GPU_MEM",
                    value: v.clone(),
                    accepted:
                        "a size of at least 4096 bytes: digits with an optional K, M or G suffix (e.g. 16G, 512M)",
                })?
            }
        };
        Ok(Config { gpus, mem })
    }

    pub fn from_env(who: &'static str) -> Result<Config, ConfigError> {
        Config::from_lookup(who, |k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_lookup("mrshim-sim-cuda", |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn defaults() {
        assert_eq!(cfg(&[]).unwrap(), Config { gpus: 1, mem: 16 << 30 });
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16G"), Some(16 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("4096"), Some(4096));
        for bad in ["", "G", "1.5G", "-1", "12T", "99999999999999999999G", "1 G"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(cfg(&[("MRSHIM_SIM_GPU_MEM", "10000")]).unwrap().mem, 8192);
    }

    #[test]
    fn errors_name_variable_value_and_accepted() {
        let e = cfg(&[("MRSHIM_SIM_GPUS", "two")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mrshim-sim-cuda: MRSHIM_SIM_GPUS=\"two\" is not valid: a number of devices from 0 to 16"
        );
        assert!(cfg(&[("MRSHIM_SIM_GPUS", "17")]).is_err());
        assert_eq!(cfg(&[("MRSHIM_SIM_GPUS", "0")]).unwrap().gpus, 0);
        let e = cfg(&[("MRSHIM_SIM_GPU_MEM", "100")]).unwrap_err();
        assert_eq!(e.var, "MRSHIM_SIM_GPU_MEM");
        assert!(e.to_string().contains("\"100\""));
    }
}
