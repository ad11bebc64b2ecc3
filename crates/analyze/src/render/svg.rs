//! The report's two figures as inline SVG: the registration timeline (failing ranks first, a real time
//! axis, rescues and deregistrations marked) and the size histogram (axes, counts, failures as their own
//! series, log scale when one series dwarfs the other). Both scale to the page width (viewBox).
use super::html::esc;
use crate::collect::{Mark, Point, FAILED, RESCUED, SUCCEEDED};
use crate::findings::human_size;
use crate::Analysis;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// Rows of the timeline; failing ranks take what they need up to this, healthy ones fill up a sample.
pub const MAX_ROWS: usize = 64;
/// Healthy ranks always shown next to failing ones, for comparison.
const MIN_HEALTHY_ROWS: usize = 8;
const WIDTH: f64 = 1160.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 20.0;
/// The histogram spans at least this many power-of-two buckets.
const MIN_BUCKETS: usize = 10;

type RowKey = (String, Option<i64>);

/// The timeline's rows: failing ranks by first failure time, then an even sample of the others.
/// Returns (rows, failing ranks in total, ranks in total).
pub fn timeline_rows(pts: &[Point]) -> (Vec<(RowKey, bool)>, usize, usize) {
    let mut first_fail: HashMap<RowKey, u64> = HashMap::new();
    let mut all: BTreeMap<RowKey, ()> = BTreeMap::new();
    for p in pts {
        let k = (p.host.clone(), p.rank);
        if p.failed() {
            let e = first_fail.entry(k.clone()).or_insert(p.t);
            *e = (*e).min(p.t);
        }
        all.insert(k, ());
    }
    let mut failing: Vec<(RowKey, u64)> = first_fail.into_iter().collect();
    failing.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let healthy: Vec<&RowKey> = all.keys().filter(|k| !failing.iter().any(|f| &f.0 == *k)).collect();
    let healthy_slots = MIN_HEALTHY_ROWS.min(healthy.len()).max(MAX_ROWS.saturating_sub(failing.len()));
    let fail_slots = MAX_ROWS.saturating_sub(healthy_slots.min(healthy.len()));
    let (n_fail, n_all) = (failing.len(), all.len());
    let mut rows: Vec<(RowKey, bool)> = failing.into_iter().take(fail_slots).map(|f| (f.0, true)).collect();
    let take = healthy_slots.min(healthy.len());
    for i in 0..take {
        // evenly spread over the sorted healthy ranks, so that every part of the job shows up
        let idx = i * healthy.len() / take.max(1);
        rows.push((healthy[idx].clone(), false));
    }
    (rows, n_fail, n_all)
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) for about `n` ticks over `span`.
fn tick_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(f64::MIN_POSITIVE);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// Seconds as the axis shows them: "0", "250 ms", "1.5 s".
fn secs_label(s: f64, step: f64) -> String {
    if s == 0.0 {
        "0".into()
    } else if step < 1.0 {
        let ms = s * 1e3;
        if (ms - ms.round()).abs() < 1e-6 {
            format!("{} ms", ms.round())
        } else {
            format!("{ms:.1} ms")
        }
    } else if (s - s.round()).abs() < 1e-9 {
        format!("{} s", s.round())
    } else {
        format!("{s:.1} s")
    }
}

pub fn timeline(a: &Analysis) -> (String, String) {
    let pts = &a.col.points;
    let (rows, n_fail, n_all) = timeline_rows(pts);
    let index: HashMap<&RowKey, usize> = rows.iter().enumerate().map(|(i, r)| (&r.0, i)).collect();
    let row_h = 16.0;
    let top = 28.0;
    let h = top + row_h * rows.len().max(1) as f64 + 44.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg id="timeline" viewBox="0 0 {WIDTH} {h}" width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="registrations per rank over time" font-family="sans-serif" font-size="11">"##
    );
    if pts.is_empty() {
        s.push_str(r##"<text x="10" y="20">no registrations in the input</text></svg>"##);
        return (s, String::new());
    }
    let timed = pts.iter().any(|p| p.timed);
    let (t0, t1) = pts.iter().filter(|p| p.timed == timed).fold((u64::MAX, 0u64), |(a, b), p| (a.min(p.t), b.max(p.t)));
    let span = t1.saturating_sub(t0).max(1) as f64;
    let plot_w = WIDTH - LEFT - RIGHT;
    let x_of = |t: u64| LEFT + plot_w * (t.saturating_sub(t0)) as f64 / span;
    let bottom = top + row_h * rows.len() as f64;
    // axis: ticks in seconds from the first record (or in input order)
    let unit = if timed { 1e9 } else { 1.0 };
    let step = tick_step(span / unit, 8.0);
    let mut v = 0.0;
    while v * unit <= span + 1e-9 {
        let x = LEFT + plot_w * v * unit / span;
        let label = if timed { secs_label(v, step) } else { format!("{}", v as u64) };
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top - 8.0,
            bottom + 4.0,
            bottom + 16.0,
            esc(&label)
        );
        v += step;
    }
    let axis = if timed {
        format!("seconds since {}", super::utc(t0))
    } else {
        "order of the records in the input (no timestamps)".into()
    };
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
        LEFT + plot_w / 2.0,
        bottom + 34.0,
        esc(&axis)
    );
    for (i, ((host, rank), failing)) in rows.iter().enumerate() {
        let y = top + row_h * i as f64 + row_h / 2.0;
        let label =
            format!("{} r{}", if host.is_empty() { "?" } else { host }, rank.map_or("?".into(), |r| r.to_string()));
        let _ = write!(
            s,
            r##"<g class="row{}" data-host="{}" data-rank="{}"><rect x="0" y="{:.1}" width="{WIDTH}" height="{row_h}" fill="{}"/><text x="{:.1}" y="{:.1}" text-anchor="end"{}>{}</text></g>"##,
            if *failing { " failing" } else { "" },
            esc(host),
            rank.map_or(String::new(), |r| r.to_string()),
            y - row_h / 2.0,
            if *failing {
                "#fdecec"
            } else if i % 2 == 0 {
                "#fafafa"
            } else {
                "#ffffff"
            },
            LEFT - 8.0,
            y + 4.0,
            if *failing { r##" fill="#b00020" font-weight="bold""## } else { "" },
            esc(&label)
        );
        if *failing && i + 1 < rows.len() && !rows[i + 1].1 {
            let yb = top + row_h * (i + 1) as f64;
            let _ = write!(
                s,
                r##"<line x1="0" x2="{WIDTH}" y1="{yb:.1}" y2="{yb:.1}" stroke="#999" stroke-dasharray="4 3"/>"##
            );
        }
    }
    // each rank's span of registrations, from the per-process record (successes are only a sample)
    let mut spans: HashMap<RowKey, (u64, u64)> = HashMap::new();
    for p in a.col.procs.map.values() {
        if let (Some((f, l)), true) = (p.span, timed) {
            let e = spans.entry((p.host.clone(), p.rank)).or_insert((f, l));
            *e = (e.0.min(f), e.1.max(l));
        }
    }
    for (i, (k, _)) in rows.iter().enumerate() {
        if let Some(&(f, l)) = spans.get(k) {
            let y = top + row_h * i as f64 + row_h / 2.0;
            let _ = write!(
                s,
                r##"<line class="span" x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#9bd3a8" stroke-width="3"/>"##,
                x_of(f),
                x_of(l).max(x_of(f) + 1.0)
            );
        }
    }
    // deregistrations and successes first, so that failures and rescues are drawn on top
    for mark in [Mark::Dereg, Mark::Ok, Mark::Rescued, Mark::Failed] {
        for p in pts.iter().filter(|p| p.mark == mark && p.timed == timed) {
            let Some(&row) = index.get(&(p.host.clone(), p.rank)) else { continue };
            let (x, y) = (x_of(p.t), top + row_h * row as f64 + row_h / 2.0);
            let _ = match mark {
                Mark::Dereg => write!(
                    s,
                    r##"<line class="dereg" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#888"/>"##,
                    y - 4.0,
                    y + 4.0
                ),
                Mark::Ok => write!(s, r##"<circle class="ok" cx="{x:.1}" cy="{y:.1}" r="2.5" fill="#2a9d3f"/>"##),
                Mark::Rescued => {
                    write!(s, r##"<path class="rescued" d="M{x:.1} {:.1}l5 5l-5 5l-5 -5z" fill="#1f6feb"/>"##, y - 5.0)
                }
                Mark::Failed => write!(
                    s,
                    r##"<path class="fail" d="M{:.1} {:.1}l8 8m0 -8l-8 8" stroke="#d62828" stroke-width="2.5"/>"##,
                    x - 4.0,
                    y - 4.0
                ),
            };
        }
    }
    s.push_str("</svg>");
    let mut note = format!("{} of {} rank(s) shown", rows.len(), n_all);
    if n_fail > 0 {
        let shown = rows.iter().filter(|r| r.1).count();
        note.push_str(&format!(": {shown} of {n_fail} failing rank(s) (earliest failure first)"));
        let healthy = rows.len() - shown;
        if healthy > 0 {
            note.push_str(&format!(", then {healthy} without failures for comparison"));
        }
    }
    note.push('.');
    if a.col.points.iter().any(|p| p.mark == Mark::Ok) {
        note.push_str(" Successes are a sample when there are many; every failure is kept.");
    }
    (s, note)
}

pub fn histogram(a: &Analysis) -> (String, String) {
    let hist = &a.col.hist;
    let used: Vec<usize> = (0..hist.len()).filter(|&b| hist[b].iter().sum::<u64>() > 0).collect();
    let (w, h) = (WIDTH, 300.0);
    let (left, top, bottom) = (70.0, 20.0, 240.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg id="histogram" viewBox="0 0 {w} {h}" width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="registration sizes" font-family="sans-serif" font-size="11">"##
    );
    let (Some(&lo), Some(&hi)) = (used.first(), used.last()) else {
        s.push_str(r##"<text x="10" y="20">no registration sizes in the input</text></svg>"##);
        return (s, String::new());
    };
    // at least MIN_BUCKETS buckets around the sizes seen, so that one size is not a wall of colour
    let pad = MIN_BUCKETS.saturating_sub(hi - lo + 1);
    let lo = lo.saturating_sub(pad / 2);
    let hi = (lo + MIN_BUCKETS - 1).max(hi).min(hist.len() - 1);
    // successes and rescues are the two sides of "the application got its MR"; failures the other
    let max_ok = (lo..=hi).map(|b| hist[b][SUCCEEDED].max(hist[b][RESCUED])).max().unwrap_or(0);
    let max_fail = (lo..=hi).map(|b| hist[b][FAILED]).max().unwrap_or(0);
    let max = max_ok.max(max_fail).max(1) as f64;
    // log scale when the smaller series would be a sliver next to the larger one
    let log = max_fail > 0 && max_ok > 0 && max_ok.max(max_fail) >= 20 * max_ok.min(max_fail);
    let scale = |v: f64| -> f64 {
        if v <= 0.0 {
            0.0
        } else if log {
            (bottom - top) * (1.0 + v).log10() / (1.0 + max).log10()
        } else {
            (bottom - top) * v / max
        }
    };
    // y axis with ticks
    let ticks: Vec<f64> = if log {
        (0..=max.log10().ceil() as i32).map(|e| 10f64.powi(e)).filter(|v| *v <= max * 1.0001).collect()
    } else {
        let st = tick_step(max, 5.0);
        (0..=((max / st).floor() as i32)).map(|i| i as f64 * st).collect()
    };
    for v in ticks {
        let y = bottom - scale(v);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - 10.0,
            left - 6.0,
            y + 4.0,
            v as u64
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="#444"/><line x1="{left}" x2="{:.1}" y1="{bottom}" y2="{bottom}" stroke="#444"/><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">registrations{}</text>"##,
        w - 10.0,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0,
        if log { " (log scale)" } else { "" }
    );
    let n = hi - lo + 1;
    let group = (w - 10.0 - left) / n as f64;
    // a third bar only where the input has rescues at all
    let bars = if (lo..=hi).any(|b| hist[b][RESCUED] > 0) { 3.0 } else { 2.0 };
    let bw = ((group - 6.0) / bars).clamp(1.0, 40.0);
    for (i, b) in (lo..=hi).enumerate() {
        let x0 = left + group * i as f64 + (group - bars * bw) / 2.0;
        let size = human_size(1u64 << b);
        let series = [
            ("ok", hist[b][SUCCEEDED], "#2a9d3f", "succeeded"),
            ("fail", hist[b][FAILED], "#d62828", "failed"),
            ("rescued", hist[b][RESCUED], "#1f6feb", "rescued by mrshim"),
        ];
        for (k, (series, count, col, what)) in series.into_iter().enumerate() {
            if count == 0 {
                continue;
            }
            let ht = scale(count as f64).max(2.0);
            let x = x0 + bw * k as f64;
            let _ = write!(
                s,
                r##"<rect class="{series}" x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{ht:.1}" fill="{col}"><title>{}: {count} {}</title></rect>"##,
                bottom - ht,
                esc(&size),
                what
            );
            if bw >= 14.0 || n <= 24 {
                let _ = write!(
                    s,
                    r##"<text class="count" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="{col}">{}</text>"##,
                    x + bw / 2.0,
                    bottom - ht - 3.0,
                    short_count(count)
                );
            }
        }
        if n <= 24 || i % 2 == 0 {
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                x0 + bars * bw / 2.0,
                bottom + 16.0,
                esc(&size)
            );
        }
    }
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">registration size (power-of-two buckets: each bar counts sizes from its label up to the next)</text></svg>"##,
        left + (w - left) / 2.0,
        bottom + 40.0
    );
    let note = if log {
        format!(
            "Log scale: the largest bar ({}) is more than 20 times the other series' largest ({}).",
            max_ok.max(max_fail),
            max_ok.min(max_fail)
        )
    } else {
        String::new()
    };
    (s, note)
}

/// 1234 -> "1234", 523208 -> "523k".
fn short_count(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{}k", n / 1000),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(host: &str, rank: i64, t: u64, mark: Mark) -> Point {
        Point { host: host.into(), rank: Some(rank), t, timed: true, length: 4096, mark }
    }

    #[test]
    fn failing_rows_come_first_by_time_then_a_sample() {
        let mut pts: Vec<Point> = (0..200).map(|r| pt("h", r, 10, Mark::Ok)).collect();
        pts.push(pt("z", 500, 30, Mark::Failed));
        pts.push(pt("a", 900, 20, Mark::Failed));
        let (rows, n_fail, n_all) = timeline_rows(&pts);
        assert_eq!((n_fail, n_all, rows.len()), (2, 202, MAX_ROWS));
        assert_eq!(rows[0].0, ("a".to_string(), Some(900)), "earliest failure first");
        assert_eq!(rows[1].0, ("z".to_string(), Some(500)));
        assert!(rows[2..].iter().all(|r| !r.1));
    }

    #[test]
    fn many_failing_ranks_leave_room_for_healthy_ones() {
        let mut pts: Vec<Point> = (0..100).map(|r| pt("f", r, 100 - r as u64, Mark::Failed)).collect();
        pts.extend((0..50).map(|r| pt("h", r, 1, Mark::Ok)));
        let (rows, n_fail, _) = timeline_rows(&pts);
        assert_eq!(n_fail, 100);
        assert_eq!(rows.iter().filter(|r| !r.1).count(), MIN_HEALTHY_ROWS);
        assert_eq!(rows.len(), MAX_ROWS);
    }

    #[test]
    fn nice_ticks() {
        assert_eq!(tick_step(1.0, 8.0), 0.2);
        assert_eq!(tick_step(130.0, 8.0), 20.0);
        assert_eq!(secs_label(0.25, 0.05), "250 ms");
        assert_eq!(secs_label(20.0, 5.0), "20 s");
    }
}
