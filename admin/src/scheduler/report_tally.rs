//! The daily report's running count of yesterday's and today's runs, kept between the report
//! monitor's passes, so that a pass reads the runs created since the last one and those it last
//! saw in flight instead of both days again: a recount read every run of the two days, about
//! three quarters of a second of the database per million runs each minute (after a day at 100
//! fires/s, 17 million runs: 13 s of every minute, a fifth of a core).
//!
//! Runs are counted by id. Every run with an id up to `through` is either final and counted in
//! `settled` (a final run never changes: results land only on pending and running runs), or
//! pending or running and listed in `open`, re-read each pass until it ends. Runs above
//! `through` are counted afresh at each pass. `through` moves only to the highest id a pass saw
//! at least [`SETTLE_MS`] earlier (by the admin's clock): MySQL hands out an id when its row is
//! inserted and shows the row when its transaction commits, so a lower id can appear after a
//! higher one, and no writer of runs keeps a transaction open that long. The settled part is
//! counted anew by the database each [`REBUILD_EVERY_MS`] and when the UTC day changes; in the
//! first two minutes of an admin, or after its clock went back, every pass counts the two days
//! whole. That bounds what a running count can miss: a settled run deleted (a `retention_days`
//! of 1 deletes most of yesterday's), a transaction that committed past the margin, a clock
//! that jumped forward by more than it.

use std::collections::{HashMap, VecDeque};

use crate::db::job_run::{ReportCount, ReportRun};
use crate::domain::duration_histogram::bucket_of;
use crate::domain::ids::{GroupId, JobId, RunId};
use crate::domain::policy::RunStatus;
use crate::domain::run_counts::RunCounts;

/// How long after a pass saw a run id every lower id is taken to be committed and visible.
pub const SETTLE_MS: i64 = 120_000;
/// How often the settled part is counted again from the run table.
pub const REBUILD_EVERY_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// Counts one run as the database's count would (`job_run::report_counts`).
fn add_run(counts: &mut RunCounts, run: &ReportRun) {
    let bucket = run
        .started_ms
        .zip(run.finished_ms)
        // Agents report these times: nonsense must not overflow.
        .map(|(started, finished)| bucket_of(finished.saturating_sub(started)));
    counts.add(&run.status, bucket, 1);
}

/// A day's rows by job and group, as a pass counted them.
pub type DayCounts = HashMap<(JobId, GroupId), RunCounts>;

/// Adds the database's counts of one day (`job_run::report_counts`).
pub fn add_counts(day: &mut DayCounts, counts: Vec<ReportCount>) {
    for count in counts {
        // -1: the runs did not both start and finish.
        let bucket = usize::try_from(count.bucket).ok();
        day.entry((count.job_id, count.group_id)).or_default().add(
            &count.status,
            bucket,
            count.runs,
        );
    }
}

/// What the report monitor keeps between passes.
#[derive(Debug, Default)]
pub struct ReportMemory {
    /// The highest run id each recent pass saw, with the pass's time, oldest first.
    marks: VecDeque<(i64, RunId)>,
    pub tally: Option<RunTally>,
}

impl ReportMemory {
    /// Notes `top`, the highest run id stored now, and returns the highest id a pass saw at
    /// least [`SETTLE_MS`] ago: every run up to it is visible by now. A clock that went back
    /// forgets the marks of the future.
    pub fn settled_through(&mut self, now: i64, top: Option<RunId>) -> Option<RunId> {
        self.marks.retain(|(at, _)| *at <= now);
        if let Some(top) = top {
            self.marks.push_back((now, top));
        }
        let old_enough = |(at, _): &(i64, RunId)| now - *at >= SETTLE_MS;
        // Only the newest old-enough mark is needed from now on.
        while self.marks.len() > 1 && self.marks.get(1).is_some_and(old_enough) {
            self.marks.pop_front();
        }
        self.marks
            .front()
            .filter(|m| old_enough(m))
            .map(|(_, id)| *id)
    }
}

/// The settled part of two days' counts and the runs still to be settled.
#[derive(Debug)]
pub struct RunTally {
    /// Start (UTC ms) of the day that was today when the tally was built.
    today_start: i64,
    built_ms: i64,
    through: RunId,
    /// Final runs up to `through`, by day start, job and group.
    settled: HashMap<(i64, JobId, GroupId), RunCounts>,
    /// Runs up to `through` that were pending or running when last read.
    open: Vec<RunId>,
}

impl RunTally {
    /// A tally of the final runs up to `through` of yesterday (`yesterday`) and today (`today`,
    /// counted by the database) and of the ids of those still in flight.
    pub fn new(
        today_start: i64,
        now: i64,
        through: RunId,
        yesterday: DayCounts,
        today: DayCounts,
        open: Vec<RunId>,
    ) -> RunTally {
        let settled = [(today_start - DAY_MS, yesterday), (today_start, today)]
            .into_iter()
            .flat_map(|(day, counts)| {
                counts
                    .into_iter()
                    .map(move |((job, group), c)| ((day, job, group), c))
            })
            .collect();
        RunTally {
            today_start,
            built_ms: now,
            through,
            settled,
            open,
        }
    }

    /// Whether this tally can go on at `now`, moving to `through`: the same day, not due for a
    /// recount, and no going back.
    pub fn fits(&self, today_start: i64, now: i64, through: RunId) -> bool {
        self.today_start == today_start
            && (0..REBUILD_EVERY_MS).contains(&(now - self.built_ms))
            && through >= self.through
    }

    /// The id above which runs are read anew at each pass.
    pub fn through(&self) -> RunId {
        self.through
    }

    /// The runs to re-read: in flight when last read.
    pub fn open(&self) -> &[RunId] {
        &self.open
    }

    /// Takes in `runs` (every run above the old `through` and every open one, as they are now)
    /// and moves `through` to `through`: final runs up to it become settled, the others up to it
    /// open. Returns yesterday's and today's counts (settled and not).
    pub fn advance(
        &mut self,
        through: RunId,
        runs: impl IntoIterator<Item = ReportRun>,
    ) -> [DayCounts; 2] {
        let days = [self.today_start - DAY_MS, self.today_start];
        let mut unsettled: HashMap<(i64, JobId, GroupId), RunCounts> = HashMap::new();
        let mut open = Vec::new();
        for run in runs {
            let day = run.created_ms - run.created_ms.rem_euclid(DAY_MS);
            // A recount counts only runs created on the two days.
            if !days.contains(&day) {
                continue;
            }
            let key = (day, run.job_id, run.group_id);
            let in_flight = matches!(run.status, RunStatus::Pending | RunStatus::Running);
            if run.id <= through {
                if in_flight {
                    open.push(run.id);
                } else {
                    add_run(self.settled.entry(key).or_default(), &run);
                    continue;
                }
            }
            add_run(unsettled.entry(key).or_default(), &run);
        }
        self.open = open;
        self.through = through;
        let mut out = [DayCounts::new(), DayCounts::new()];
        for (source, (day, job, group)) in self
            .settled
            .iter()
            .chain(unsettled.iter())
            .map(|(key, counts)| (counts, *key))
        {
            let index = usize::from(day == self.today_start);
            out[index].entry((job, group)).or_default().merge(source);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TODAY: i64 = 20_000 * DAY_MS;

    fn run(id: i64, status: RunStatus, created_ms: i64) -> ReportRun {
        ReportRun {
            id: RunId(id),
            job_id: JobId(1),
            group_id: GroupId(1),
            status,
            created_ms,
            started_ms: Some(created_ms),
            finished_ms: Some(created_ms + 5),
        }
    }

    fn total(day: &DayCounts) -> (i64, i64) {
        day.values().fold((0, 0), |(done, open), c| {
            (done + c.succeeded + c.failed, open + c.in_flight)
        })
    }

    #[test]
    fn a_mark_settles_only_once_it_is_old_enough() {
        let mut memory = ReportMemory::default();
        assert_eq!(memory.settled_through(0, Some(RunId(5))), None);
        assert_eq!(memory.settled_through(60_000, Some(RunId(9))), None);
        assert_eq!(
            memory.settled_through(SETTLE_MS, Some(RunId(12))),
            Some(RunId(5))
        );
        assert_eq!(
            memory.settled_through(SETTLE_MS + 60_000, Some(RunId(20))),
            Some(RunId(9))
        );
        assert_eq!(memory.marks.len(), 3, "{:?}", memory.marks);
        // The clock went back an hour: nothing seen since is old enough.
        assert_eq!(memory.settled_through(0, Some(RunId(20))), None);
    }

    #[test]
    fn runs_settle_once_and_open_ones_stay_counted_until_they_end() {
        let mut tally = RunTally::new(
            TODAY,
            TODAY,
            RunId(0),
            DayCounts::new(),
            DayCounts::new(),
            vec![],
        );
        let first = tally.advance(
            RunId(2),
            [
                run(1, RunStatus::Succeeded, TODAY + 1),
                run(2, RunStatus::Running, TODAY + 2),
                run(3, RunStatus::Failed, TODAY - 10),
                run(4, RunStatus::Pending, TODAY - DAY_MS - 1),
            ],
        );
        assert_eq!(total(&first[1]), (1, 1));
        assert_eq!(
            total(&first[0]),
            (1, 0),
            "the day before yesterday is not counted"
        );
        assert_eq!(tally.open(), &[RunId(2)]);
        // Next pass: run 2 ended, runs 3 and 4 are re-read (above the old mark), a new run 5.
        let second = tally.advance(
            RunId(5),
            [
                run(2, RunStatus::Succeeded, TODAY + 2),
                run(3, RunStatus::Failed, TODAY - 10),
                run(4, RunStatus::Pending, TODAY - DAY_MS - 1),
                run(5, RunStatus::Pending, TODAY + 9),
            ],
        );
        assert_eq!(total(&second[1]), (2, 1));
        assert_eq!(total(&second[0]), (1, 0));
        assert_eq!(tally.open(), &[RunId(5)]);
        // Settled runs are not read again and stay counted.
        let third = tally.advance(RunId(5), [run(5, RunStatus::Failed, TODAY + 9)]);
        assert_eq!(total(&third[1]), (3, 0));
        assert_eq!(total(&third[0]), (1, 0));
        assert!(tally.open().is_empty());
    }

    #[test]
    fn a_tally_goes_on_only_the_same_day_forward_and_within_the_hour() {
        let tally = RunTally::new(
            TODAY,
            TODAY + 10,
            RunId(7),
            DayCounts::new(),
            DayCounts::new(),
            vec![],
        );
        assert!(tally.fits(TODAY, TODAY + 10 + 60_000, RunId(7)));
        assert!(!tally.fits(TODAY, TODAY + 10 + 60_000, RunId(6)));
        assert!(!tally.fits(TODAY + DAY_MS, TODAY + DAY_MS, RunId(9)));
        assert!(!tally.fits(TODAY, TODAY + 10 + REBUILD_EVERY_MS, RunId(9)));
        assert!(!tally.fits(TODAY, TODAY, RunId(9)), "the clock went back");
    }
}
