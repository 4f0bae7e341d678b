//! Outcome counts of a set of runs and their durations: what a day's report row holds, what the
//! report monitor's running count keeps, and what a report sums over days, jobs and groups.

use super::duration_histogram::Histogram;
use super::policy::RunStatus;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub succeeded: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub killed: i64,
    pub lost: i64,
    pub skipped: i64,
    /// Pending or running.
    pub in_flight: i64,
    /// Of the runs that both started and finished.
    pub durations: Histogram,
}

impl RunCounts {
    /// Counts `runs` runs of `status`; `bucket` is their duration's when they both started and
    /// finished.
    pub fn add(&mut self, status: &RunStatus, bucket: Option<usize>, runs: i64) {
        let slot = match status {
            RunStatus::Succeeded => &mut self.succeeded,
            RunStatus::Failed => &mut self.failed,
            RunStatus::TimedOut => &mut self.timed_out,
            RunStatus::Killed => &mut self.killed,
            RunStatus::Lost => &mut self.lost,
            RunStatus::Skipped => &mut self.skipped,
            RunStatus::Pending | RunStatus::Running => &mut self.in_flight,
        };
        *slot += runs;
        if let Some(bucket) = bucket {
            self.durations.add(bucket, u64::try_from(runs).unwrap_or(0));
        }
    }

    pub fn merge(&mut self, other: &RunCounts) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.timed_out += other.timed_out;
        self.killed += other.killed;
        self.lost += other.lost;
        self.skipped += other.skipped;
        self.in_flight += other.in_flight;
        self.durations.merge(&other.durations);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::duration_histogram::bucket_of;

    #[test]
    fn each_status_has_its_count_and_merging_sums_them_all() {
        let mut one = RunCounts::default();
        for (status, runs) in [
            (RunStatus::Succeeded, 1),
            (RunStatus::Failed, 2),
            (RunStatus::TimedOut, 3),
            (RunStatus::Killed, 4),
            (RunStatus::Lost, 5),
            (RunStatus::Skipped, 6),
            (RunStatus::Pending, 7),
            (RunStatus::Running, 8),
        ] {
            one.add(&status, None, runs);
        }
        one.add(&RunStatus::Succeeded, Some(bucket_of(40)), 2);
        let expected = |n: i64| RunCounts {
            succeeded: 3 * n,
            failed: 2 * n,
            timed_out: 3 * n,
            killed: 4 * n,
            lost: 5 * n,
            skipped: 6 * n,
            in_flight: 15 * n,
            durations: {
                let mut h = Histogram::default();
                h.add(bucket_of(40), u64::try_from(2 * n).unwrap_or(0));
                h
            },
        };
        assert_eq!(one, expected(1));
        let mut two = one.clone();
        two.merge(&one);
        assert_eq!(two, expected(2));
        assert_eq!(two.durations.total(), 4);
    }
}
