//! The statistics the benches decide with: medians, and the sign test's confidence interval of
//! a median, which needs no assumption about how the rounds are distributed (a bench's rounds on
//! two busy cores are anything but normal: one preempted round can be twice as slow).

/// The median of `v` (the upper one of the two middle values for an even count); NaN if empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

/// The sign test's confidence interval of the median of `v` at two-sided `confidence`: the k-th
/// smallest and the k-th largest value, k the largest with P(Binomial(n, 1/2) < k) <=
/// (1 - confidence) / 2. None when there are too few values for any interval at that confidence
/// (fewer than 6 at 95 %).
pub fn median_ci(v: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let n = v.len();
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let alpha = (1.0 - confidence) / 2.0;
    // P(B = i), i = 0, 1, ...: 2^-n, then times (n - i) / (i + 1)
    let (mut term, mut below, mut k) = (0.5f64.powi(n as i32), 0.0, 0);
    for i in 0..n / 2 {
        below += term;
        if below > alpha {
            break;
        }
        k = i + 1;
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    (k > 0).then(|| (s[k - 1], s[n - k]))
}

/// Whether the median of `v` is shown to be at least `line` (Some(true): the whole interval at
/// `confidence` lies at or above it), shown to be below it (Some(false)), or not decided yet.
pub fn at_least(v: &[f64], line: f64, confidence: f64) -> Option<bool> {
    let (lo, hi) = median_ci(v, confidence)?;
    if lo >= line {
        Some(true)
    } else if hi < line {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(n: usize) -> Vec<f64> {
        // shuffled 1..=n: the interval is read off the sorted values
        (0..n).map(|i| ((i * 7) % n + 1) as f64).collect()
    }

    #[test]
    fn intervals_are_the_sign_tests_order_statistics() {
        // Published tables of the sign test, 95 % two-sided: n = 6 → (1, 6), 10 → (2, 9),
        // 20 → (6, 15), 40 → (14, 27).
        for (n, lo, hi) in [(6, 1.0, 6.0), (10, 2.0, 9.0), (20, 6.0, 15.0), (40, 14.0, 27.0)] {
            assert_eq!(median_ci(&ranks(n), 0.95), Some((lo, hi)), "n = {n}");
        }
        assert_eq!(median_ci(&ranks(5), 0.95), None, "5 values are too few at 95 %");
        assert_eq!(median_ci(&[], 0.95), None);
    }

    #[test]
    fn verdicts_need_the_whole_interval_on_one_side() {
        let around = |c: f64| -> Vec<f64> { (0..20).map(|i| c + (i as f64 - 9.5) * 0.5).collect() };
        assert_eq!(at_least(&around(100.0), 95.0, 0.95), Some(true));
        assert_eq!(at_least(&around(90.0), 95.0, 0.95), Some(false));
        assert_eq!(at_least(&around(95.0), 95.0, 0.95), None);
        // one wild round moves neither the median nor the interval's ends
        let mut v = around(100.0);
        v[3] = 5.0;
        assert_eq!(at_least(&v, 95.0, 0.95), Some(true));
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&[]).is_nan());
    }
}
