//! Known issues as data: `data/known-issues.json` (compiled in) plus the file named by
//! `MRSHIM_KNOWN_ISSUES` (same format, appended). An issue matches when every pattern of one of its
//! `match` groups occurs somewhere in the input (case-insensitive substrings); analyze then reports
//! "matches known issue ID" with the public source and the fix, and raises the issue's category.
//!
//! An issue may also name the versions it affects (`versions`: a component as the input names it —
//! `NCCL`, `UCX`, `kernel`, `rdma-core`, `OFED`, `libfabric`, `EFA installer`, `NVIDIA driver`, ... —
//! with the first affected version `introduced` and the first good one `fixed`, either open). The
//! versions the input names (banners, `uname -r`, `ofed_info -s`, `ibv_devinfo`, `mrshim doctor`)
//! then decide: a named version inside every range it names confirms the issue, a named version
//! outside a range rules it out (the issue is then not reported, and the finding says why), and an
//! issue whose component is not named matches on its patterns alone unless it says
//! `requires_version`.
use aho_corasick::AhoCorasick;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Deserialize)]
pub struct KnownIssue {
    pub id: String,
    pub title: String,
    pub category: String,
    /// Alternatives; each is a list of patterns that must all occur.
    #[serde(rename = "match")]
    pub groups: Vec<Vec<String>>,
    pub source: String,
    pub fix: String,
    /// The versions the issue affects (all must hold where named).
    #[serde(default)]
    pub versions: Vec<VersionRange>,
    /// Match only when the input names a version of a component in [`Self::versions`] inside its range.
    #[serde(default)]
    pub requires_version: bool,
}

/// Versions of one component an issue affects: `introduced` <= v < `fixed` (either bound open).
#[derive(Debug, Clone, Deserialize)]
pub struct VersionRange {
    pub component: String,
    #[serde(default)]
    pub introduced: Option<String>,
    #[serde(default)]
    pub fixed: Option<String>,
}

/// The numbers of a version string, for comparing: `2.18.3+cuda12.2` -> [2, 18, 3], `v1.19.0amzn1.0` ->
/// [1, 19, 0], `5.15.0-91-generic` -> [5, 15, 0, 91], `MLNX_OFED_LINUX-23.10-1.1.9.0` -> [23, 10, 1, 1, 9, 0]:
/// the leading run of numbers separated by `.` or `-`, after any non-digit prefix. None when there is none.
pub fn version_key(s: &str) -> Option<Vec<u64>> {
    let start = s.find(|c: char| c.is_ascii_digit())?;
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s[start..].chars() {
        if c.is_ascii_digit() {
            cur.push(c);
        } else if (c == '.' || c == '-') && !cur.is_empty() {
            out.push(cur.parse().ok()?);
            cur.clear();
        } else {
            break;
        }
    }
    if !cur.is_empty() {
        out.push(cur.parse().ok()?);
    }
    (!out.is_empty()).then_some(out)
}

/// `a` compared with `b` component by component, missing components counting as 0.
pub fn version_cmp(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| a.get(i).unwrap_or(&0).cmp(b.get(i).unwrap_or(&0)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// What the versions named in the input say about an issue.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The issue names no versions, or the input names none of its components.
    NotNamed,
    /// Every component named is in its range: `component version (range)`.
    InRange(String),
    /// A component named is outside its range: `component version (range)`.
    OutOfRange(String),
}

fn range_text(r: &VersionRange) -> String {
    match (&r.introduced, &r.fixed) {
        (Some(a), Some(b)) => format!("affected from {a}, fixed in {b}"),
        (Some(a), None) => format!("affected from {a}"),
        (None, Some(b)) => format!("fixed in {b}"),
        (None, None) => "any version".into(),
    }
}

fn in_range(r: &VersionRange, v: &[u64]) -> bool {
    let ge = |b: &Option<String>| b.as_deref().and_then(version_key).is_none_or(|k| version_cmp(v, &k).is_ge());
    let lt = |b: &Option<String>| b.as_deref().and_then(version_key).is_none_or(|k| version_cmp(v, &k).is_lt());
    ge(&r.introduced) && lt(&r.fixed)
}

/// The verdict of the versions the input names (component name -> versions, any host) on `k`.
/// A component is named when one of the input's version names equals it (case-insensitive); several
/// versions of one component (hosts differ) confirm the issue when any of them is in range.
pub fn verdict(k: &KnownIssue, named: &BTreeMap<String, BTreeSet<String>>) -> Verdict {
    let mut inside = Vec::new();
    for r in &k.versions {
        let vs: Vec<(&String, Vec<u64>)> = named
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&r.component))
            .flat_map(|(_, vs)| vs.iter())
            .filter_map(|v| version_key(v).map(|key| (v, key)))
            .collect();
        if vs.is_empty() {
            continue;
        }
        match vs.iter().find(|(_, key)| in_range(r, key)) {
            Some((v, _)) => inside.push(format!("{} {v} ({})", r.component, range_text(r))),
            None => {
                let v: Vec<&str> = vs.iter().map(|(v, _)| v.as_str()).collect();
                return Verdict::OutOfRange(format!("{} {} ({})", r.component, v.join("/"), range_text(r)));
            }
        }
    }
    if inside.is_empty() {
        Verdict::NotNamed
    } else {
        Verdict::InRange(inside.join(", "))
    }
}

const BUILTIN: &str = include_str!("../data/known-issues.json");

pub fn builtin() -> Vec<KnownIssue> {
    serde_json::from_str(BUILTIN).expect("data/known-issues.json is valid (tested)")
}

/// The built-in table and the user's, and a note when the user's cannot be read.
pub fn table() -> (Vec<KnownIssue>, Option<String>) {
    let mut t = builtin();
    let Some(path) = std::env::var_os("MRSHIM_KNOWN_ISSUES") else { return (t, None) };
    let p = std::path::Path::new(&path);
    match std::fs::read_to_string(p)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str::<Vec<KnownIssue>>(&s).map_err(|e| e.to_string()))
    {
        Ok(mut more) => {
            t.append(&mut more);
            (t, None)
        }
        Err(e) => (t, Some(format!("MRSHIM_KNOWN_ISSUES={}: not used ({e})", p.display()))),
    }
}

/// The patterns of [`table`] as read once per process, for the line scanner ([`crate::scan`]).
pub fn words() -> Vec<String> {
    static W: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| patterns(&table().0));
    W.clone()
}

fn patterns(issues: &[KnownIssue]) -> Vec<String> {
    issues.iter().flat_map(|k| k.groups.iter().flatten().cloned()).collect()
}

/// Scans lines for every pattern of every issue at once.
pub struct Matcher {
    pub issues: Vec<KnownIssue>,
    pub note: Option<String>,
    /// The patterns are the line scanner's ([`words`]): its pass of the line answers.
    shared: bool,
    ac: Option<AhoCorasick>,
    /// pattern index -> (issue, group, position in group)
    pub owners: Vec<(usize, usize)>,
}

impl Matcher {
    pub fn new((issues, note): (Vec<KnownIssue>, Option<String>)) -> Matcher {
        let mut pats = Vec::new();
        let mut owners = Vec::new();
        for (i, k) in issues.iter().enumerate() {
            for (g, group) in k.groups.iter().enumerate() {
                for p in group {
                    pats.push(p.clone());
                    owners.push((i, g));
                }
            }
        }
        let shared = pats == words();
        // (shared patterns are answered by the line's one pass: no automaton of their own per run)
        let ac = match shared {
            true => None,
            false => AhoCorasick::builder()
                .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                .ascii_case_insensitive(true)
                .build(&pats)
                .ok(),
        };
        Matcher { issues, note, shared, ac, owners }
    }

    /// Pattern indices occurring in `line`.
    pub fn scan(&self, line: &str) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::new();
        if self.shared {
            crate::scan::each(line, crate::scan::Set::Known, |p, _| v.push(p as usize));
        } else {
            let Some(ac) = &self.ac else { return vec![] };
            v.extend(ac.find_overlapping_iter(line).map(|m| m.pattern().as_usize()));
        }
        v.dedup();
        v
    }

    /// Issues whose group of patterns all occurred, given the pattern indices seen.
    pub fn matched(&self, seen: &std::collections::BTreeSet<usize>) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, k) in self.issues.iter().enumerate() {
            let hit = (0..k.groups.len()).any(|g| {
                let pats: Vec<usize> =
                    self.owners.iter().enumerate().filter(|(_, o)| **o == (i, g)).map(|(p, _)| p).collect();
                !pats.is_empty() && pats.iter().all(|p| seen.contains(p))
            });
            if hit {
                out.push(i);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_valid_and_sourced() {
        let t = builtin();
        assert!(t.len() >= 4);
        for k in &t {
            assert!(k.source.starts_with("https://"), "{}: a public source", k.id);
            assert!(crate::findings::CATEGORIES.contains(&k.category.as_str()), "{}: {}", k.id, k.category);
            assert!(!k.groups.is_empty() && k.groups.iter().all(|g| !g.is_empty()), "{}", k.id);
            assert!(!k.fix.is_empty() && !k.title.is_empty());
            assert!(!k.requires_version || !k.versions.is_empty(), "{}: requires a version it names", k.id);
            for r in &k.versions {
                assert!(r.introduced.is_some() || r.fixed.is_some(), "{}: a range with a bound", k.id);
                for b in r.introduced.iter().chain(r.fixed.iter()) {
                    assert!(version_key(b).is_some(), "{}: {b} is a version", k.id);
                }
            }
        }
    }

    #[test]
    fn version_keys_and_order() {
        assert_eq!(version_key("2.18.3+cuda12.2"), Some(vec![2, 18, 3]));
        assert_eq!(version_key("v1.19.0amzn1.0"), Some(vec![1, 19, 0]));
        assert_eq!(version_key("5.15.0-91-generic"), Some(vec![5, 15, 0, 91]));
        assert_eq!(version_key("MLNX_OFED_LINUX-23.10-1.1.9.0"), Some(vec![23, 10, 1, 1, 9, 0]));
        assert_eq!(version_key("unknown"), None);
        use std::cmp::Ordering::*;
        assert_eq!(version_cmp(&[5, 12], &[5, 12, 0]), Equal);
        assert_eq!(version_cmp(&[5, 4, 0, 150], &[5, 12]), Less);
        assert_eq!(version_cmp(&[6, 8, 0], &[5, 12]), Greater);
        assert_eq!(version_cmp(&[1, 29, 1], &[1, 29, 0, 9]), Greater);
    }

    fn issue(versions: &[(&str, Option<&str>, Option<&str>)]) -> KnownIssue {
        KnownIssue {
            id: "t".into(),
            title: "t".into(),
            category: "version-mismatch".into(),
            groups: vec![vec!["x".into()]],
            source: "https://example.org".into(),
            fix: "f".into(),
            versions: versions
                .iter()
                .map(|(c, a, b)| VersionRange {
                    component: c.to_string(),
                    introduced: a.map(String::from),
                    fixed: b.map(String::from),
                })
                .collect(),
            requires_version: false,
        }
    }

    fn named(v: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (k, x) in v {
            m.entry(k.to_string()).or_default().insert(x.to_string());
        }
        m
    }

    /// A version inside the range confirms, one at or past the fix (or before the regression) rules
    /// out, and a component the input does not name decides nothing.
    #[test]
    fn versions_confirm_or_rule_out() {
        let k = issue(&[("NCCL", Some("2.19.0"), Some("2.20.3"))]);
        assert!(matches!(verdict(&k, &named(&[("NCCL", "2.19.3+cuda12.2")])), Verdict::InRange(_)));
        assert!(matches!(verdict(&k, &named(&[("nccl", "2.20.3+cuda12.2")])), Verdict::OutOfRange(_)));
        assert!(matches!(verdict(&k, &named(&[("NCCL", "2.18.6")])), Verdict::OutOfRange(_)));
        assert_eq!(verdict(&k, &named(&[("UCX", "1.16.0")])), Verdict::NotNamed);
        // hosts that differ: one in range is enough
        assert!(matches!(verdict(&k, &named(&[("NCCL", "2.18.6"), ("NCCL", "2.19.3")])), Verdict::InRange(_)));
        // two components: each one named must hold
        let k2 = issue(&[("NCCL", Some("2.19.0"), None), ("EFA installer", None, Some("1.29.1"))]);
        assert!(matches!(
            verdict(&k2, &named(&[("NCCL", "2.19.3"), ("EFA installer", "1.28.0")])),
            Verdict::InRange(_)
        ));
        assert!(matches!(
            verdict(&k2, &named(&[("NCCL", "2.19.3"), ("EFA installer", "1.30.0")])),
            Verdict::OutOfRange(_)
        ));
    }

    #[test]
    fn all_patterns_of_a_group() {
        let m = Matcher::new((builtin(), None));
        let mut seen = std::collections::BTreeSet::new();
        seen.extend(m.scan(
            "register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 4. RC: -22",
        ));
        assert!(m.matched(&seen).is_empty(), "one pattern of two is not a match");
        seen.extend(m.scan("Error: invalid ARGUMENT"));
        assert_eq!(
            m.matched(&seen).iter().map(|i| m.issues[*i].id.as_str()).collect::<Vec<_>>(),
            ["efa-cuda-sync-memops"]
        );
    }
}
