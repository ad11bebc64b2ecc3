//! Output: human text (80 columns, colour only when asked), one JSON object, a self-contained HTML page.
pub mod html;
pub mod human;
pub mod json;
pub mod prometheus;
pub mod svg;

use crate::ranks::RankRef;

/// "0-3,8,10-11"
pub fn ranges(v: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// A list cut to about `max` characters at an item boundary, with how many items were left out.
pub fn clip_list(list: &str, max: usize) -> String {
    if list.len() <= max {
        return list.to_string();
    }
    // cut at a top-level comma so that no bracket is left open
    let (mut depth, mut cut, mut items_left) = (0i32, 0, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                if i <= max {
                    cut = i;
                } else {
                    items_left += 1;
                }
            }
            _ => {}
        }
    }
    if cut == 0 {
        return list.to_string();
    }
    format!("{},... (+{} more)", &list[..cut], items_left + 1)
}

/// "nodeB rank 3, nodeC rank 7" grouped by host: "nodeB ranks 3,5; nodeC rank 7", at most `max` hosts.
pub fn rank_refs(v: &[RankRef], max: usize) -> String {
    let mut by_host: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
    let mut unranked: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in v {
        let h = if r.host.is_empty() { "?" } else { r.host.as_str() };
        match r.rank {
            Some(k) => by_host.entry(h).or_default().push(k),
            None => *unranked.entry(h).or_default() += 1,
        }
    }
    let mut parts: Vec<String> = by_host
        .iter()
        .map(|(h, ks)| {
            let mut ks = ks.clone();
            ks.sort_unstable();
            ks.dedup();
            format!("{h} rank{} {}", if ks.len() == 1 { "" } else { "s" }, ranges(&ks))
        })
        .collect();
    parts.extend(unranked.iter().map(|(h, n)| format!("{h} ({n} process(es) without a rank)")));
    let n = parts.len();
    if n > max {
        parts.truncate(max);
        parts.push(format!("and {} more host(s)", n - max));
    }
    parts.join("; ")
}

/// Evidence as a reader wants it: a (clipped) shim config/summary record becomes "node0017 rank 136:
/// config, memlock soft 64 KiB"; any other text is shown as it is.
pub fn evidence_text(t: &str) -> std::borrow::Cow<'_, str> {
    if !t.starts_with("{\"v\":") {
        return t.into();
    }
    let field = |k: &str| {
        let pat = format!("\"{k}\":");
        let i = t.find(&pat)? + pat.len();
        let v = t[i..].split([',', '}']).next()?.trim_matches('"');
        (!v.is_empty()).then_some(v)
    };
    let mut s = format!(
        "{} rank {}: {} record",
        field("host").unwrap_or("?"),
        field("rank").unwrap_or("?"),
        field("kind").unwrap_or("shim")
    );
    if let Some(m) = field("memlock_soft").and_then(|m| m.parse::<u64>().ok()) {
        s.push_str(&format!(", memlock soft {}", crate::findings::human_size(m)));
    }
    s.into()
}

/// "2025-12-02 18:26:40.003 UTC" from nanoseconds since the epoch.
pub fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let ms = (ns / 1_000_000) % 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // civil date from days since 1970-01-01 (proleptic Gregorian calendar)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// "node0017 rank 138 at 18:26:40.006 UTC" (the date is in `--json` and the report).
pub fn first_failure(a: &crate::Analysis) -> Option<String> {
    let f = a.ranks.first_failure.as_ref()?;
    let mut s = format!(
        "{} rank {}",
        if f.host.is_empty() { "?" } else { &f.host },
        f.rank.map_or("?".into(), |k| k.to_string())
    );
    if let Some(t) = a.ranks.first_failure_ns {
        s.push_str(&format!(" at {}", &utc(t)[11..]));
    }
    Some(s)
}

/// What mrshim's retries did for the application's failed calls, for the headline: rescued all or
/// some of them, and how many more calls a learned strategy registered up front.
pub fn rescue_clause(a: &crate::Analysis) -> Option<String> {
    let failed = a.failed();
    let rescued = a.col.rescued_failures.min(failed);
    let mut parts = Vec::new();
    if rescued > 0 && rescued == failed {
        let all = if failed == 1 { "it".to_string() } else { format!("all {failed}") };
        parts.push(format!("mrshim rescued {all}: the application saw no failure"));
    } else if rescued > 0 {
        parts.push(format!("mrshim rescued {rescued}, {} reached the application", failed - rescued));
    }
    if a.col.learned_ok > 0 {
        parts.push(format!("{} more registered through a learned strategy", a.col.learned_ok));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The job in one line: id, ranks logged of the world, first failure (`with_first`), then the ranks that ended without a summary and
/// missing ranks.
pub fn job_lines(a: &crate::Analysis, with_first: bool) -> Vec<String> {
    let r = &a.ranks;
    let mut out = Vec::new();
    if r.shim_logs == 0 && r.first_failure.is_none() {
        return out;
    }
    let mut head = String::new();
    if let Some(j) = &r.job_id {
        head.push_str(&format!("job {j}: "));
    }
    let ranked: std::collections::BTreeSet<i64> = a.col.procs.map.values().filter_map(|p| p.rank).collect();
    match r.world_size {
        Some(w) => head.push_str(&format!("{} of {w} ranks logged", ranked.len())),
        None => head.push_str(&format!("{} process(es) logged", r.processes)),
    }
    if let Some(f) = first_failure(a).filter(|_| with_first) {
        head.push_str(&format!("; first failure: {f}"));
    }
    out.push(head);
    if !r.no_summary.is_empty() {
        out.push(format!(
            "{} rank(s) without exit summary (kill, crash or _exit()): {}",
            r.no_summary.len(),
            rank_refs(&r.no_summary, 6)
        ));
    }
    if !r.no_registration.is_empty() {
        out.push(format!(
            "{} rank(s) never reached a registration (log without calls or summary): {}",
            r.no_registration.len(),
            rank_refs(&r.no_registration, 6)
        ));
    }
    if !r.no_log.is_empty() {
        out.push(format!(
            "{} rank(s) never reached a registration (no log): {}",
            r.no_log.len(),
            clip_list(&ranges(&r.no_log), 120)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_records_as_evidence() {
        let t = r#"{"v":1,"kind":"config","seq":1,"time_ns":17,"host":"node0017","pid":10000,"rank":136,"memlock_soft":65536,"env":{"X":"#;
        assert_eq!(evidence_text(t), "node0017 rank 136: config record, memlock soft 64 KiB");
        assert_eq!(evidence_text("gpu-a:1:2 NCCL WARN x"), "gpu-a:1:2 NCCL WARN x");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(1_764_700_000_003_000_000), "2025-12-02 18:26:40.003 UTC");
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29 00:00:00.000 UTC");
    }

    #[test]
    fn clipped_lists_end_at_an_item() {
        assert_eq!(clip_list("a[1-3],b,c", 100), "a[1-3],b,c");
        assert_eq!(clip_list("a[1-3],b,c,d", 8), "a[1-3],b,... (+2 more)");
    }

    #[test]
    fn ranks_by_host() {
        let r = |h: &str, k| RankRef { host: h.into(), rank: Some(k) };
        assert_eq!(rank_refs(&[r("b", 3), r("a", 1), r("b", 2)], 5), "a rank 1; b ranks 2-3");
        assert_eq!(rank_refs(&[r("a", 1), r("b", 2), r("c", 3)], 2), "a rank 1; b rank 2; and 1 more host(s)");
    }
}
