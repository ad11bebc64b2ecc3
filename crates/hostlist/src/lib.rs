//! Slurm's hostlist notation, the way cluster people read host sets: `node[0017,0233-0240]`,
//! `gpu-a[01-64],login1`. Names are split into prefix, number and suffix at their last run of digits;
//! names with the same prefix, suffix and number width share one bracket, so zero padding survives a
//! round trip. Kept here: the `hostlist` crate only expands (and pulls nom and clap 2); analyze and
//! doctor need the other direction.
use std::collections::BTreeMap;

/// `names` (any order, duplicates allowed) in hostlist notation; empty names are left out.
pub fn compress<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    // (prefix, suffix, width) -> numbers; names without digits stand alone
    let mut groups: BTreeMap<(&str, &str, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<&str> = Vec::new();
    for n in names {
        if n.is_empty() {
            continue;
        }
        match split(n) {
            Some((pre, num, suf)) => match num.parse::<u64>() {
                Ok(v) => groups.entry((pre, suf, num.len())).or_default().push(v),
                Err(_) => plain.push(n),
            },
            None => plain.push(n),
        }
    }
    plain.sort_unstable();
    plain.dedup();
    let mut parts: Vec<(String, String)> = plain.into_iter().map(|p| (p.to_string(), p.to_string())).collect();
    for ((pre, suf, width), mut nums) in groups {
        nums.sort_unstable();
        nums.dedup();
        let text = if nums.len() == 1 {
            format!("{pre}{:0width$}{suf}", nums[0])
        } else {
            format!("{pre}[{}]{suf}", ranges(&nums, width))
        };
        parts.push((format!("{pre}\u{0}{suf}\u{0}{width:04}"), text));
    }
    parts.sort();
    parts.into_iter().map(|p| p.1).collect::<Vec<_>>().join(",")
}

/// Like [`compress`], with the count: `node[0017,0233,0400] (3 of 512 hosts)`; the count is left out
/// when `of` is 0 or 1, and reads `(all 512 hosts)` when the set is all of them.
pub fn counted<'a>(names: impl IntoIterator<Item = &'a str>, of: usize) -> String {
    let mut v: Vec<&str> = names.into_iter().filter(|n| !n.is_empty()).collect();
    v.sort_unstable();
    v.dedup();
    let n = v.len();
    let list = compress(v);
    match (n, of) {
        (_, 0 | 1) => list,
        (n, of) if n == of => format!("{list} (all {of} hosts)"),
        (1, of) => format!("{list} (1 of {of} hosts)"),
        (n, of) => format!("{list} ({n} of {of} hosts)"),
    }
}

/// "0-3,8,10-11" for sorted, distinct numbers, each padded to `width` digits.
pub fn ranges(v: &[u64], width: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        while i + 1 < v.len() && v[i + 1] == v[i] + 1 {
            i += 1;
        }
        let end = v[i];
        out.push(if start == end { format!("{start:0width$}") } else { format!("{start:0width$}-{end:0width$}") });
        i += 1;
    }
    out.join(",")
}

/// Prefix, last run of digits and suffix of a name (None without digits).
fn split(n: &str) -> Option<(&str, &str, &str)> {
    let b = n.as_bytes();
    let end = b.iter().rposition(|c| c.is_ascii_digit())? + 1;
    let start = b[..end].iter().rposition(|c| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    // at most 18 digits fit a u64 for sure; longer runs are not host numbers
    (end - start <= 18).then(|| (&n[..start], &n[start..end], &n[end..]))
}

/// Expands hostlist notation back to names, in the order written (`a[1-2],b` -> a1, a2, b). A malformed
/// bracket is kept as a literal name.
pub fn expand(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in split_top(list) {
        let (Some(open), Some(close)) = (item.find('['), item.rfind(']')) else {
            out.push(item.to_string());
            continue;
        };
        let (pre, body, suf) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        let mut names = Vec::new();
        let ok = body.split(',').all(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let width = a.len();
            match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(a), Ok(b)) if a <= b && b - a < 1 << 20 => {
                    names.extend((a..=b).map(|v| format!("{pre}{v:0width$}{suf}")));
                    true
                }
                _ => false,
            }
        });
        if ok {
            out.extend(names);
        } else {
            out.push(item.to_string());
        }
    }
    out
}

/// Splits at commas outside brackets.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|x| !x.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_notation() {
        assert_eq!(compress(["node0400", "node0017", "node0233"]), "node[0017,0233,0400]");
        let gpus: Vec<String> = (1..=64).map(|i| format!("gpu-a{i:02}")).collect();
        assert_eq!(compress(gpus.iter().map(String::as_str)), "gpu-a[01-64]");
        assert_eq!(compress(["nodeA", "nodeB", "nodeA"]), "nodeA,nodeB");
        assert_eq!(compress(["n1", "n2", "n3", "n5", "login"]), "login,n[1-3,5]");
        assert_eq!(compress(["rack1-n07", "rack1-n08", "rack2-n07"]), "rack1-n[07-08],rack2-n07");
        assert_eq!(compress(["a1.ib", "a2.ib", "a3"]), "a3,a[1-2].ib");
        assert_eq!(compress(["x9", "x10"]), "x9,x10", "different widths stay apart");
        assert_eq!(compress(["", "h"]), "h");
        assert_eq!(compress([]), "");
    }

    #[test]
    fn counts() {
        assert_eq!(counted(["node017", "node233", "node400"], 512), "node[017,233,400] (3 of 512 hosts)");
        assert_eq!(counted(["n1", "n2"], 2), "n[1-2] (all 2 hosts)");
        assert_eq!(counted(["n1"], 4), "n1 (1 of 4 hosts)");
        assert_eq!(counted(["n1"], 0), "n1");
        assert_eq!(counted(["n1"], 1), "n1");
    }

    #[test]
    fn round_trip() {
        let mut names: Vec<String> = (0..512).filter(|i| i % 7 != 3).map(|i| format!("node{i:04}")).collect();
        names.extend(["login".to_string(), "gpu-b1".to_string(), "gpu-b2".to_string()]);
        let list = compress(names.iter().map(String::as_str));
        let mut back = expand(&list);
        back.sort();
        names.sort();
        assert_eq!(back, names, "{list}");
        assert_eq!(expand("a[1-2,x]"), vec!["a[1-2,x]"], "malformed stays literal");
    }
}
