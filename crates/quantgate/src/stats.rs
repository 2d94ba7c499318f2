//! Small statistics shared by the benchmarks and the runner.

/// The median of `v` as the benchmarks report it: the element at index `len / 2` of the sorted
/// values (the upper median for an even count; `total_cmp` order, so NaN sorts last).
///
/// Panics on an empty slice (every caller measures at least one repetition).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

/// (min, median, max) of `v` (see [`median`]).
pub fn min_median_max(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    (s[0], s[s.len() / 2], s[s.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_median() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(min_median_max(&[5.0, 1.0, 9.0]), (1.0, 5.0, 9.0));
    }
}
