//! Known issues as data: `data/known-issues.json` (compiled in) plus the file named by
//! `MRSHIM_KNOWN_ISSUES` (same format, appended). An issue matches when every pattern of one of its
//! `match` groups occurs somewhere in the input (case-insensitive substrings); analyze then reports
//! "matches known issue ID" with the public source and the fix, and raises the issue's category.
use aho_corasick::AhoCorasick;
use serde::Deserialize;

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
        let ac = AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .ascii_case_insensitive(true)
            .build(&pats)
            .ok();
        let shared = pats == words();
        Matcher { issues, note, shared, ac, owners }
    }

    /// Pattern indices occurring in `line`.
    pub fn scan(&self, line: &str) -> Vec<usize> {
        let Some(ac) = &self.ac else { return vec![] };
        let mut v: Vec<usize> = Vec::new();
        if self.shared {
            crate::scan::each(line, crate::scan::Set::Known, |p, _| v.push(p as usize));
        } else {
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
        }
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
