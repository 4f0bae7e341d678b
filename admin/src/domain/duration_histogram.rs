//! Run durations as a fixed log-scale histogram: what the daily report keeps per day and job
//! (`run_report_daily.durations`) so that p50/p95 over any range of days come from merging a
//! few hundred small histograms instead of reading every run of the range.
//!
//! The buckets are the same everywhere (Rust, the SQL that counts runs into them, the stored
//! text), so histograms of different days and admins merge by adding counts. Below 8 ms a
//! bucket is one millisecond wide (exact); from 2^e ms on (e ≥ 2) each power of two is cut
//! into four equal buckets, so a bucket is at most 25 % of its lower bound wide and a
//! percentile, reported as its bucket's midpoint, is within 12.5 % (and within half a bucket)
//! of the true value. Everything from 2^32 ms (about 49.7 days) on shares the last bucket,
//! whose lower bound is reported.

use std::fmt::Write as _;

/// Buckets: `[0]` is ≤ 0 ms, `[1..4]` are 1, 2 and 3 ms, then four per power of two from
/// 4 ms (2^2) to 2^32 ms (exclusive), then one open bucket.
pub const BUCKETS: usize = 4 + 4 * (LAST_EXPONENT as usize - 1) + 1;
/// The largest exponent with four buckets of its own: durations up to 2^32 - 1 ms.
const LAST_EXPONENT: u32 = 31;
/// The open bucket's index and its lower bound.
const OVERFLOW: usize = BUCKETS - 1;
const OVERFLOW_FROM_MS: i64 = 1 << (LAST_EXPONENT + 1);

/// The bucket a duration of `ms` milliseconds falls in (negative durations, from clocks that
/// disagree, count as 0).
pub fn bucket_of(ms: i64) -> usize {
    if ms <= 0 {
        return 0;
    }
    if ms < 4 {
        return usize::try_from(ms).unwrap_or(0);
    }
    if ms >= OVERFLOW_FROM_MS {
        return OVERFLOW;
    }
    let exponent = 63 - ms.leading_zeros();
    let quarter = (ms >> (exponent - 2)) & 3;
    4 + 4 * (exponent as usize - 2) + usize::try_from(quarter).unwrap_or(0)
}

/// The smallest duration of bucket `index` (`i64::MAX` past the last bucket).
pub fn lower_bound(index: usize) -> i64 {
    match index {
        0..4 => i64::try_from(index).unwrap_or(0),
        OVERFLOW => OVERFLOW_FROM_MS,
        i if i < BUCKETS => {
            let exponent = 2 + (i - 4) / 4;
            let quarter = i64::try_from((i - 4) % 4).unwrap_or(0);
            (1_i64 << exponent) + quarter * (1_i64 << (exponent - 2))
        }
        _ => i64::MAX,
    }
}

/// The first duration past bucket `index`; `None` for the open last bucket.
pub fn upper_bound(index: usize) -> Option<i64> {
    (index < OVERFLOW).then(|| lower_bound(index + 1))
}

/// The value reported for a percentile falling in bucket `index`: its midpoint (its only value
/// when it is one millisecond wide), or the lower bound of the open last bucket.
pub fn representative(index: usize) -> i64 {
    match upper_bound(index) {
        Some(upper) => {
            let lower = lower_bound(index);
            lower + (upper - lower) / 2
        }
        None => lower_bound(index),
    }
}

/// A stored histogram that does not parse (`run_report_daily.durations`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad duration histogram `{0}`")]
pub struct BadHistogram(pub String);

/// Counts of durations per bucket.
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: [u64; BUCKETS],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; BUCKETS],
        }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Histogram({})", self.encode())
    }
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&mut self, ms: i64) {
        self.add(bucket_of(ms), 1);
    }

    /// Adds `count` durations to bucket `index` (an index past the last bucket goes to it).
    pub fn add(&mut self, index: usize, count: u64) {
        let slot = &mut self.counts[index.min(OVERFLOW)];
        *slot = slot.saturating_add(count);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// How many durations it holds.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0, |sum, c| sum.saturating_add(*c))
    }

    /// The `percent`th percentile by nearest rank (the ⌈percent·n/100⌉-th smallest duration),
    /// as its bucket's [`representative`]; `None` when empty. `percent` above 100 reads as 100.
    pub fn percentile(&self, percent: u32) -> Option<i64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let percent = u128::from(percent.min(100));
        let rank = (percent * u128::from(total)).div_ceil(100).max(1);
        let mut seen: u128 = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += u128::from(*count);
            if seen >= rank {
                return Some(representative(index));
            }
        }
        None
    }

    /// The stored form: `bucket:count` pairs of the non-empty buckets, ascending, joined by
    /// commas (`""` when empty), e.g. `12:3,40:17`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        for (index, count) in self.counts.iter().enumerate().filter(|(_, c)| **c > 0) {
            if !text.is_empty() {
                text.push(',');
            }
            let _ = write!(text, "{index}:{count}");
        }
        text
    }

    /// Reads [`Histogram::encode`]'s form.
    ///
    /// # Errors
    /// `BadHistogram` for anything else (an unknown bucket, a count that is not a number).
    pub fn decode(text: &str) -> Result<Histogram, BadHistogram> {
        let bad = || BadHistogram(text.chars().take(80).collect());
        let mut histogram = Histogram::default();
        for pair in text.split(',').filter(|p| !p.is_empty()) {
            let (index, count) = pair.split_once(':').ok_or_else(bad)?;
            let index: usize = index.parse().map_err(|_| bad())?;
            let count: u64 = count.parse().map_err(|_| bad())?;
            if index >= BUCKETS {
                return Err(bad());
            }
            histogram.add(index, count);
        }
        Ok(histogram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_durations_without_gaps() {
        assert_eq!(BUCKETS, 125);
        assert_eq!(lower_bound(0), 0);
        for index in 0..OVERFLOW {
            let (lower, upper) = (lower_bound(index), upper_bound(index).unwrap());
            assert!(upper > lower, "bucket {index}");
            assert_eq!(bucket_of(lower), index, "lower bound of {index}");
            assert_eq!(bucket_of(upper - 1), index, "last value of {index}");
            assert_eq!(bucket_of(upper), index + 1, "first value after {index}");
            // The promised precision: one millisecond below 8 ms, else at most 25 %.
            if lower < 8 {
                assert_eq!(upper - lower, 1);
            } else {
                assert!((upper - lower) * 4 <= lower, "bucket {index} too wide");
            }
        }
        assert_eq!(upper_bound(OVERFLOW), None);
        assert_eq!(lower_bound(OVERFLOW), 1 << 32);
        assert_eq!(bucket_of(i64::MAX), OVERFLOW);
        assert_eq!(bucket_of(-5), 0);
        assert_eq!(bucket_of(7), 7);
        assert_eq!(bucket_of(8), 8);
        assert_eq!(bucket_of(9), 8);
        assert_eq!(bucket_of(10), 9);
    }

    #[test]
    fn a_percentile_is_within_half_a_bucket_of_the_exact_value() {
        // Durations spread over six orders of magnitude, with an exact nearest-rank reference.
        let mut durations: Vec<i64> = (0..2_000_i64).map(|i| (i * i * 37) % 3_000_017).collect();
        let mut histogram = Histogram::default();
        for d in &durations {
            histogram.record(*d);
        }
        durations.sort_unstable();
        for percent in [1, 25, 50, 90, 95, 99, 100] {
            let rank = (percent * durations.len()).div_ceil(100);
            let exact = durations[rank - 1];
            let got = histogram
                .percentile(u32::try_from(percent).unwrap())
                .unwrap();
            let index = bucket_of(exact);
            assert_eq!(bucket_of(got), index, "p{percent}: {got} vs {exact}");
            let half = (upper_bound(index).unwrap() - lower_bound(index)) / 2;
            assert!((got - exact).abs() <= half.max(0), "p{percent}");
            assert!(
                (got - exact).abs() * 8 <= exact.max(8),
                "p{percent} within 12.5 %"
            );
        }
    }

    #[test]
    fn small_and_degenerate_histograms() {
        let empty = Histogram::default();
        assert_eq!(empty.percentile(50), None);
        assert_eq!(empty.total(), 0);
        let mut one = Histogram::default();
        one.record(5);
        assert_eq!(one.percentile(0), Some(5), "p0 is the smallest");
        assert_eq!(one.percentile(50), Some(5));
        assert_eq!(one.percentile(100), Some(5));
        assert_eq!(one.percentile(250), Some(5));
        // Two values: p50 is the first (nearest rank 1), p95 the second.
        let mut two = Histogram::default();
        two.record(2);
        two.record(1_000);
        assert_eq!(two.percentile(50), Some(2));
        assert_eq!(two.percentile(95), Some(representative(bucket_of(1_000))));
        // The open bucket reports its lower bound, a floor.
        let mut huge = Histogram::default();
        huge.record(1 << 40);
        assert_eq!(huge.percentile(95), Some(1 << 32));
        // Zero and negative durations (clock skew) are 0.
        let mut zero = Histogram::default();
        zero.record(0);
        zero.record(-20);
        assert_eq!(zero.percentile(95), Some(0));
    }

    #[test]
    fn merging_equals_counting_everything_once() {
        let (mut a, mut b, mut all) = (
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        );
        for d in [1, 5, 90, 90, 4_000] {
            a.record(d);
            all.record(d);
        }
        for d in [3, 90, 70_000, 1 << 35] {
            b.record(d);
            all.record(d);
        }
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged, all);
        assert_eq!(merged.total(), 9);
        let mut other_way = b;
        other_way.merge(&a);
        assert_eq!(other_way, all);
        let mut with_empty = all.clone();
        with_empty.merge(&Histogram::default());
        assert_eq!(with_empty, all);
    }

    #[test]
    fn the_stored_form_round_trips_and_refuses_garbage() {
        let mut h = Histogram::default();
        for d in [0, 7, 7, 1_500, 1 << 36] {
            h.record(d);
        }
        let text = h.encode();
        assert_eq!(text, format!("0:1,7:2,{}:1,124:1", bucket_of(1_500)));
        assert_eq!(Histogram::decode(&text).unwrap(), h);
        assert_eq!(Histogram::decode("").unwrap(), Histogram::default());
        for bad in ["x", "3", "3:", ":4", "125:1", "1:-1", "1:2;3:4"] {
            assert!(Histogram::decode(bad).is_err(), "{bad}");
        }
    }
}
