//! Sizes as users write them in configuration: `4096`, `64K`, `1M`, `2G`.

pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    #[test]
    fn suffixes() {
        assert_eq!(super::parse_size("12K"), Some(12 << 10));
        assert_eq!(super::parse_size("1m"), Some(1 << 20));
        assert_eq!(super::parse_size("7"), Some(7));
        assert_eq!(super::parse_size("1T"), None);
        assert_eq!(super::parse_size(""), None);
    }
}
