//! `run_report_daily`: outcome counts and a duration histogram per UTC day, group and job,
//! rebuilt from `job_run` by the report monitor so the dashboard and the reports never scan the
//! run table. The group is the runs' (`job_run.group_id`), which decides who sees them.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::run_report_daily;
use crate::domain::duration_histogram::{BadHistogram, Histogram};
use crate::domain::ids::{GroupId, JobId};
use crate::domain::run_counts::RunCounts;
use crate::error::Error;

#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Default,
    Queryable,
    Selectable,
    Insertable,
    AsChangeset,
    serde::Serialize,
    utoipa::ToSchema,
)]
#[diesel(table_name = run_report_daily)]
pub struct DailyRow {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The group the runs ran in (a job that moved has a row per group that day).
    pub group_id: GroupId,
    pub job_id: JobId,
    pub succeeded: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub killed: i64,
    pub lost: i64,
    pub skipped: i64,
    pub in_flight: i64,
    /// The durations of the runs that both started and finished, as
    /// `domain::duration_histogram::Histogram::encode` writes them; `None` on days rolled up
    /// before histograms were kept.
    pub durations: Option<String>,
    pub updated_ms: i64,
}

impl DailyRow {
    /// The row of `day` holding `counts`.
    pub fn of(day: String, job_id: JobId, group_id: GroupId, counts: &RunCounts, now: i64) -> Self {
        DailyRow {
            day,
            group_id,
            job_id,
            succeeded: counts.succeeded,
            failed: counts.failed,
            timed_out: counts.timed_out,
            killed: counts.killed,
            lost: counts.lost,
            skipped: counts.skipped,
            in_flight: counts.in_flight,
            durations: Some(counts.durations.encode()),
            updated_ms: now,
        }
    }

    /// The counts this row holds (no durations on a row rolled up before histograms were kept).
    ///
    /// # Errors
    /// `BadHistogram`: the stored durations are not [`Histogram::encode`]'s form.
    pub fn counts(&self) -> Result<RunCounts, BadHistogram> {
        Ok(RunCounts {
            succeeded: self.succeeded,
            failed: self.failed,
            timed_out: self.timed_out,
            killed: self.killed,
            lost: self.lost,
            skipped: self.skipped,
            in_flight: self.in_flight,
            durations: self
                .durations
                .as_deref()
                .map(Histogram::decode)
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// What a report reads: a range of days, within what the caller sees.
#[derive(Debug, Clone, Default)]
pub struct ReportFilter {
    /// `YYYY-MM-DD`, both included.
    pub from_day: String,
    pub to_day: String,
    /// `None`: every group.
    pub visible_groups: Option<Vec<GroupId>>,
    pub group_id: Option<GroupId>,
    pub job_id: Option<JobId>,
}

/// Replaces the rows of `day` with `rows` (the day's full recount).
pub fn replace_day(conn: &mut AnyConnection, day: &str, rows: &[DailyRow]) -> Result<(), Error> {
    diesel::delete(run_report_daily::table.filter(run_report_daily::day.eq(day))).execute(conn)?;
    // A day has a row per job that ran: with thousands of jobs, a statement per row was
    // thousands of round trips on MariaDB at every recount.
    for chunk in rows.chunks(super::IN_LIST_MAX / 10) {
        crate::db_run!(conn: {
            diesel::insert_into(run_report_daily::table)
                .values(chunk)
                .execute(conn)?;
        });
    }
    Ok(())
}

/// Rows with `from_day <= day <= to_day`, optionally of some jobs only, by day then job.
pub fn list(
    conn: &mut AnyConnection,
    from_day: &str,
    to_day: &str,
    job_ids: Option<&[JobId]>,
) -> Result<Vec<DailyRow>, Error> {
    let mut query = run_report_daily::table
        .filter(run_report_daily::day.ge(from_day.to_owned()))
        .filter(run_report_daily::day.le(to_day.to_owned()))
        .select(DailyRow::as_select())
        .order((run_report_daily::day.asc(), run_report_daily::job_id.asc()))
        .into_boxed();
    if let Some(ids) = job_ids {
        query = query.filter(run_report_daily::job_id.eq_any(ids.to_vec()));
    }
    Ok(query.load(conn)?)
}

/// The rows a report covers, by day, group and job. The primary key `(day, group_id, job_id)`
/// serves the day range; a report reads at most days × jobs rows, whatever the number of runs.
///
/// # Errors
/// Database errors.
pub fn list_for_report(
    conn: &mut AnyConnection,
    filter: &ReportFilter,
) -> Result<Vec<DailyRow>, Error> {
    let mut query = run_report_daily::table
        .filter(run_report_daily::day.ge(filter.from_day.clone()))
        .filter(run_report_daily::day.le(filter.to_day.clone()))
        .select(DailyRow::as_select())
        .order((
            run_report_daily::day.asc(),
            run_report_daily::group_id.asc(),
            run_report_daily::job_id.asc(),
        ))
        .into_boxed();
    if let Some(groups) = &filter.visible_groups {
        query = query.filter(run_report_daily::group_id.eq_any(groups.clone()));
    }
    if let Some(group_id) = filter.group_id {
        query = query.filter(run_report_daily::group_id.eq(group_id));
    }
    if let Some(job_id) = filter.job_id {
        query = query.filter(run_report_daily::job_id.eq(job_id));
    }
    Ok(query.load(conn)?)
}

/// Removes days before `before_day`.
pub fn delete_before(conn: &mut AnyConnection, before_day: &str) -> Result<usize, Error> {
    Ok(diesel::delete(
        run_report_daily::table.filter(run_report_daily::day.lt(before_day.to_owned())),
    )
    .execute(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    storage_test!(a_day_is_replaced_whole, |conn| {
        let row = |day: &str, job_id, succeeded| DailyRow {
            day: day.into(),
            group_id: GroupId(1),
            job_id,
            succeeded,
            updated_ms: 1,
            ..Default::default()
        };
        replace_day(conn, "2026-11-21", &[row("2026-11-21", JobId(1), 3)]).unwrap();
        replace_day(
            conn,
            "2026-11-22",
            &[
                row("2026-11-22", JobId(1), 1),
                row("2026-11-22", JobId(2), 5),
            ],
        )
        .unwrap();
        replace_day(conn, "2026-11-22", &[row("2026-11-22", JobId(1), 2)]).unwrap();
        let all = list(conn, "2026-11-01", "2026-11-30", None).unwrap();
        assert_eq!(
            all.iter()
                .map(|r| (r.day.as_str(), r.job_id, r.succeeded))
                .collect::<Vec<_>>(),
            vec![("2026-11-21", JobId(1), 3), ("2026-11-22", JobId(1), 2)]
        );
        assert_eq!(
            list(conn, "2026-11-22", "2026-11-22", Some(&[JobId(2)]))
                .unwrap()
                .len(),
            0
        );
        assert_eq!(delete_before(conn, "2026-11-22").unwrap(), 1);
        // More rows than one statement carries: every one stored.
        let many: Vec<DailyRow> = (1..=120)
            .map(|job| row("2026-11-23", JobId(job), job))
            .collect();
        replace_day(conn, "2026-11-23", &many).unwrap();
        assert_eq!(list(conn, "2026-11-23", "2026-11-23", None).unwrap(), many);
    });

    storage_test!(a_report_reads_its_days_groups_and_job, |conn| {
        let row = |day: &str, group, job, durations: Option<&str>| DailyRow {
            day: day.into(),
            group_id: GroupId(group),
            job_id: JobId(job),
            failed: 1,
            durations: durations.map(str::to_owned),
            updated_ms: 1,
            ..Default::default()
        };
        // Job 7 moved from group 1 to group 2 during the 21st: a row in each.
        let day21 = [
            row("2026-11-21", 1, 7, Some("3:2,40:1")),
            row("2026-11-21", 2, 7, Some("")),
            row("2026-11-21", 2, 8, None),
        ];
        replace_day(conn, "2026-11-21", &day21).unwrap();
        replace_day(conn, "2026-11-22", &[row("2026-11-22", 1, 9, Some("1:1"))]).unwrap();
        let mut read = |filter: ReportFilter| {
            list_for_report(
                conn,
                &ReportFilter {
                    from_day: "2026-11-21".into(),
                    to_day: "2026-11-22".into(),
                    ..filter
                },
            )
            .unwrap()
            .into_iter()
            .map(|r| (r.day.clone(), r.group_id.0, r.job_id.0, r.durations))
            .collect::<Vec<_>>()
        };
        let all = read(ReportFilter::default());
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[0],
            ("2026-11-21".into(), 1, 7, Some("3:2,40:1".to_owned()))
        );
        assert_eq!(all[2].3, None, "a day from before histograms");
        let seen_by_group_2 = read(ReportFilter {
            visible_groups: Some(vec![GroupId(2)]),
            ..Default::default()
        });
        assert_eq!(
            seen_by_group_2.iter().map(|r| r.2).collect::<Vec<_>>(),
            [7, 8]
        );
        let job_7_in_1 = read(ReportFilter {
            group_id: Some(GroupId(1)),
            job_id: Some(JobId(7)),
            ..Default::default()
        });
        assert_eq!(job_7_in_1.len(), 1);
        let nothing = read(ReportFilter {
            visible_groups: Some(vec![]),
            ..Default::default()
        });
        assert!(nothing.is_empty());
    });
}
