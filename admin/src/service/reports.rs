//! Reports: runs by outcome per day over a chosen range of UTC days, per job (outcomes, success
//! rate, p50/p95 duration), the most failing jobs and per group totals, within what the caller
//! sees. Read from the daily rollup (`run_report_daily`, kept by `scheduler::monitors::report`),
//! never from `job_run`: a report costs days × jobs rows, however many runs there were, and its
//! percentiles come from the rollup's merged duration histograms
//! (`domain::duration_histogram`, within 12.5 % and exact below 8 ms).
//!
//! Definitions: a run counts on the UTC day it was created. Failures are failed + timed out +
//! lost runs; the success rate is succeeded / (succeeded + failures), so killed, skipped and
//! unfinished runs count in `runs` but neither for nor against it. Durations are
//! `finished_ms - started_ms` of the runs that have both; `timed_runs` says how many.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::auth::rbac::Actor;
use crate::db::run_report_daily::{self, DailyRow, ReportFilter};
use crate::db::{Page, executor_group, job};
use crate::domain::ids::{GroupId, JobId};
use crate::domain::run_counts::RunCounts;
use crate::error::Error;
use crate::state::AppState;

/// The longest range a report covers, in days.
pub const MAX_DAYS: i64 = 366;
/// The range when the caller names no `from`: this many days ending at `to`.
pub const DEFAULT_DAYS: i64 = 7;
/// How many jobs the "most failing" list holds.
pub const MOST_FAILING: usize = 10;
const DAY_MS: i64 = 86_400_000;
const DAY_FORMAT: &str = "%Y-%m-%d";

/// What a report is asked for; absent days default to the last [`DEFAULT_DAYS`] days.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ReportQuery {
    /// First day, `YYYY-MM-DD` (UTC).
    pub from: Option<String>,
    /// Last day, included, `YYYY-MM-DD` (UTC); default today.
    pub to: Option<String>,
    pub group_id: Option<GroupId>,
    pub job_id: Option<JobId>,
}

/// Counts and durations of a set of runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Figures {
    /// Every run, whatever its status.
    pub runs: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub killed: i64,
    pub lost: i64,
    pub skipped: i64,
    /// Pending or running when the rollup was last counted.
    pub in_flight: i64,
    /// failed + timed_out + lost.
    pub failures: i64,
    /// succeeded / (succeeded + failures); absent when both are 0.
    pub success_rate: Option<f64>,
    /// Runs with both a start and an end time: what the percentiles are of.
    pub timed_runs: u64,
    /// Median duration, ms (the midpoint of its histogram bucket).
    pub p50_ms: Option<i64>,
    /// 95th percentile duration, ms (the midpoint of its histogram bucket).
    pub p95_ms: Option<i64>,
}

impl Figures {
    /// failures / (succeeded + failures), for ordering.
    fn failure_rate(&self) -> f64 {
        self.success_rate.map_or(0.0, |rate| 1.0 - rate)
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DayReport {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    #[serde(flatten)]
    pub figures: Figures,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobReport {
    pub job_id: JobId,
    /// Absent for a job deleted since.
    pub job_name: Option<String>,
    /// The group the runs ran in (a job moved between groups has a row per group).
    pub group_id: GroupId,
    /// The group's title; absent for a group deleted since.
    pub group_name: Option<String>,
    #[serde(flatten)]
    pub figures: Figures,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GroupReport {
    pub group_id: GroupId,
    pub group_name: Option<String>,
    #[serde(flatten)]
    pub figures: Figures,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Report {
    /// The range, both days included (UTC).
    pub from: String,
    pub to: String,
    pub group_id: Option<GroupId>,
    pub job_id: Option<JobId>,
    /// The first day a report may start on: older runs are gone (`retention_days`).
    pub oldest_day: String,
    /// When the newest day of the range was last counted (the rollup runs every minute).
    pub updated_ms: Option<i64>,
    pub totals: Figures,
    /// Every day of the range, oldest first (days without runs are zero).
    pub days: Vec<DayReport>,
    /// Every job with runs in the range, by name.
    pub jobs: Vec<JobReport>,
    /// At most ten jobs with failures: most failures first, ties by failure rate.
    pub most_failing: Vec<JobReport>,
    /// Every group with runs in the range, by name.
    pub groups: Vec<GroupReport>,
}

/// What a report shows of `counts`.
fn figures(counts: &RunCounts) -> Figures {
    let c = counts;
    let failures = c.failed + c.timed_out + c.lost;
    let judged = c.succeeded + failures;
    let success_rate = (judged > 0).then(|| c.succeeded as f64 / judged as f64);
    Figures {
        runs: c.succeeded + failures + c.killed + c.skipped + c.in_flight,
        succeeded: c.succeeded,
        failed: c.failed,
        timed_out: c.timed_out,
        killed: c.killed,
        lost: c.lost,
        skipped: c.skipped,
        in_flight: c.in_flight,
        failures,
        success_rate,
        timed_runs: c.durations.total(),
        p50_ms: c.durations.percentile(50),
        p95_ms: c.durations.percentile(95),
    }
}

fn day_text(day: NaiveDate) -> String {
    day.format(DAY_FORMAT).to_string()
}

fn parse_day(field: &str, text: &str) -> Result<NaiveDate, Error> {
    NaiveDate::parse_from_str(text, DAY_FORMAT)
        .ok()
        // chrono takes `2026-1-5`; the API's form is exactly YYYY-MM-DD.
        .filter(|day| day_text(*day) == text)
        .ok_or_else(|| Error::invalid(field, format!("`{text}` is not a date; use YYYY-MM-DD")))
}

/// The range `from..=to` a query asks for, checked against today and the oldest day kept.
///
/// # Errors
/// `invalid_field` naming `from` or `to`: not `YYYY-MM-DD`, `from` after `to`, `to` after
/// today, `from` before `oldest`, more than [`MAX_DAYS`] days.
pub fn check_range(
    from: Option<&str>,
    to: Option<&str>,
    today: NaiveDate,
    oldest: NaiveDate,
) -> Result<(NaiveDate, NaiveDate), Error> {
    let to_day = match to {
        Some(text) => parse_day("to", text)?,
        None => today,
    };
    let from_day = match from {
        Some(text) => parse_day("from", text)?,
        None => (to_day - chrono::Days::new(u64::try_from(DEFAULT_DAYS - 1).unwrap_or(0)))
            .max(oldest)
            .min(to_day),
    };
    if to_day > today {
        return Err(Error::invalid(
            "to",
            format!(
                "`{}` is after today ({}, UTC)",
                day_text(to_day),
                day_text(today)
            ),
        ));
    }
    if from_day > to_day {
        return Err(Error::invalid(
            "from",
            format!(
                "`{}` is after `to` ({})",
                day_text(from_day),
                day_text(to_day)
            ),
        ));
    }
    if from_day < oldest {
        return Err(Error::invalid(
            "from",
            format!(
                "reports go back to {}: older runs are deleted (retention_days)",
                day_text(oldest)
            ),
        ));
    }
    let days = (to_day - from_day).num_days() + 1;
    if days > MAX_DAYS {
        return Err(Error::invalid(
            "to",
            format!("a report covers at most {MAX_DAYS} days; this range has {days}"),
        ));
    }
    Ok((from_day, to_day))
}

/// Today (UTC) and the oldest day a report may start on.
fn today_and_oldest(state: &AppState) -> (NaiveDate, NaiveDate) {
    let now = state.clock.now_ms();
    let day = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms).map_or(NaiveDate::MIN, |t| t.date_naive())
    };
    let keep = i64::from(state.config.retention_days);
    (day(now), day(now - keep * DAY_MS))
}

/// The report `query` asks for, of the groups the caller sees. A `group_id` or `job_id` the
/// caller cannot see answers like a missing one (`NotFound`).
///
/// # Errors
/// `invalid_field` for a bad range (see [`check_range`]); `NotFound` for a missing or hidden
/// group or job; database errors.
pub async fn report(state: &AppState, actor: &Actor, query: ReportQuery) -> Result<Report, Error> {
    let (today, oldest) = today_and_oldest(state);
    let (from, to) = check_range(query.from.as_deref(), query.to.as_deref(), today, oldest)?;
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            if let Some(group_id) = query.group_id {
                match executor_group::find(conn, group_id)? {
                    Some(_) if actor.sees_group(group_id) => {}
                    _ => return Err(Error::NotFound("group")),
                }
            }
            if let Some(job_id) = query.job_id {
                crate::service::jobs::visible_job(conn, &actor, job_id)?;
            }
            let rows = run_report_daily::list_for_report(
                conn,
                &ReportFilter {
                    from_day: day_text(from),
                    to_day: day_text(to),
                    visible_groups: actor.visible_groups(),
                    group_id: query.group_id,
                    job_id: query.job_id,
                },
            )?;
            let mut job_ids: Vec<JobId> = rows.iter().map(|r| r.job_id).collect();
            job_ids.sort_unstable();
            job_ids.dedup();
            let mut job_names = HashMap::new();
            for chunk in job_ids.chunks(crate::db::IN_LIST_MAX) {
                job_names.extend(
                    job::find_all(conn, chunk)?
                        .into_iter()
                        .map(|j| (j.id, j.name)),
                );
            }
            let visible = actor.visible_groups();
            let group_names: HashMap<GroupId, String> =
                executor_group::list(conn, visible.as_deref(), Page::LARGEST)?
                    .into_iter()
                    .map(|g| (g.id, g.title))
                    .collect();
            assemble(&rows, from, to, &job_names, &group_names, oldest, query)
        })
        .await
}

/// Sums the rollup rows into the report.
fn assemble(
    rows: &[DailyRow],
    from: NaiveDate,
    to: NaiveDate,
    job_names: &HashMap<JobId, String>,
    group_names: &HashMap<GroupId, String>,
    oldest: NaiveDate,
    query: ReportQuery,
) -> Result<Report, Error> {
    let mut totals = RunCounts::default();
    let mut days: BTreeMap<String, RunCounts> = from
        .iter_days()
        .take_while(|d| *d <= to)
        .map(|d| (day_text(d), RunCounts::default()))
        .collect();
    let mut jobs: HashMap<(JobId, GroupId), RunCounts> = HashMap::new();
    let mut groups: HashMap<GroupId, RunCounts> = HashMap::new();
    let mut updated_ms: Option<i64> = None;
    for row in rows {
        let counts = row.counts().map_err(|e| {
            Error::Internal(anyhow::anyhow!("run_report_daily of {}: {e}", row.day))
        })?;
        totals.merge(&counts);
        days.entry(row.day.clone()).or_default().merge(&counts);
        jobs.entry((row.job_id, row.group_id))
            .or_default()
            .merge(&counts);
        groups.entry(row.group_id).or_default().merge(&counts);
        updated_ms = updated_ms.max(Some(row.updated_ms));
    }
    let mut jobs: Vec<JobReport> = jobs
        .into_iter()
        .map(|((job_id, group_id), tally)| JobReport {
            job_id,
            job_name: job_names.get(&job_id).cloned(),
            group_id,
            group_name: group_names.get(&group_id).cloned(),
            figures: figures(&tally),
        })
        .collect();
    jobs.sort_by(|a, b| {
        let key = |j: &JobReport| {
            (
                j.job_name.is_none(),
                j.job_name.clone(),
                j.job_id,
                j.group_id,
            )
        };
        key(a).cmp(&key(b))
    });
    let mut most_failing: Vec<JobReport> = jobs
        .iter()
        .filter(|j| j.figures.failures > 0)
        .cloned()
        .collect();
    most_failing.sort_by(|a, b| {
        b.figures
            .failures
            .cmp(&a.figures.failures)
            .then(
                b.figures
                    .failure_rate()
                    .total_cmp(&a.figures.failure_rate()),
            )
            .then(a.job_id.cmp(&b.job_id))
            .then(a.group_id.cmp(&b.group_id))
    });
    most_failing.truncate(MOST_FAILING);
    let mut groups: Vec<GroupReport> = groups
        .into_iter()
        .map(|(group_id, tally)| GroupReport {
            group_id,
            group_name: group_names.get(&group_id).cloned(),
            figures: figures(&tally),
        })
        .collect();
    groups.sort_by(|a, b| {
        let key = |g: &GroupReport| (g.group_name.is_none(), g.group_name.clone(), g.group_id);
        key(a).cmp(&key(b))
    });
    Ok(Report {
        from: day_text(from),
        to: day_text(to),
        group_id: query.group_id,
        job_id: query.job_id,
        oldest_day: day_text(oldest),
        updated_ms,
        totals: figures(&totals),
        days: days
            .into_iter()
            .map(|(day, tally)| DayReport {
                day,
                figures: figures(&tally),
            })
            .collect(),
        jobs,
        most_failing,
        groups,
    })
}

/// The file name a CSV download of `report` gets.
pub fn csv_file_name(report: &Report) -> String {
    format!("jobfleet-report-{}-to-{}.csv", report.from, report.to)
}

/// The per-job table as CSV (RFC 4180: a header row, CRLF line ends, fields with a comma, quote
/// or line break quoted, quotes doubled). A name starting with `=`, `+`, `-`, `@` or a tab is
/// prefixed with `'` so a spreadsheet shows it instead of evaluating it.
pub fn csv(report: &Report) -> String {
    let mut out = String::from(
        "job_id,job_name,group_id,group_name,runs,succeeded,failed,timed_out,killed,lost,\
         skipped,in_flight,failures,success_rate,timed_runs,p50_ms,p95_ms\r\n",
    );
    let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    for j in &report.jobs {
        let f = &j.figures;
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\r\n",
            j.job_id,
            csv_text(j.job_name.as_deref().unwrap_or("")),
            j.group_id,
            csv_text(j.group_name.as_deref().unwrap_or("")),
            f.runs,
            f.succeeded,
            f.failed,
            f.timed_out,
            f.killed,
            f.lost,
            f.skipped,
            f.in_flight,
            f.failures,
            f.success_rate
                .map(|r| format!("{r:.4}"))
                .unwrap_or_default(),
            f.timed_runs,
            opt(f.p50_ms),
            opt(f.p95_ms),
        );
    }
    out
}

/// One CSV field of free text.
fn csv_text(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_owned()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::duration_histogram::Histogram;

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, DAY_FORMAT).unwrap()
    }

    fn field_of(err: Error) -> String {
        match err {
            Error::Invalid { field, .. } => field.unwrap_or_default(),
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn a_range_is_checked_and_defaults_to_the_last_week() {
        let (today, oldest) = (day("2026-11-26"), day("2026-08-28"));
        let check = |from: Option<&str>, to: Option<&str>| check_range(from, to, today, oldest);
        assert_eq!(
            check(None, None).unwrap(),
            (day("2026-11-20"), day("2026-11-26"))
        );
        assert_eq!(
            check(None, Some("2026-10-01")).unwrap(),
            (day("2026-09-25"), day("2026-10-01"))
        );
        // The default start never passes the oldest day kept.
        assert_eq!(
            check(None, Some("2026-08-30")).unwrap(),
            (day("2026-08-28"), day("2026-08-30"))
        );
        assert_eq!(
            check(Some("2026-11-26"), None).unwrap(),
            (today, today),
            "one day"
        );
        for (from, to, field) in [
            (Some("2026-11-3"), None, "from"),
            (Some("26/11/2026"), None, "from"),
            (Some("2026-02-30"), None, "from"),
            (None, Some("tomorrow"), "to"),
            (Some("2026-11-25"), Some("2026-11-24"), "from"),
            (None, Some("2026-11-27"), "to"),
            (Some("2026-08-27"), None, "from"),
        ] {
            assert_eq!(
                field_of(check(from, to).unwrap_err()),
                field,
                "{from:?} {to:?}"
            );
        }
        // At most MAX_DAYS days, with retention long enough to allow more.
        let long_ago = day("2020-01-01");
        assert!(check_range(Some("2025-11-26"), None, today, long_ago).is_ok());
        let err = check_range(Some("2025-11-25"), None, today, long_ago).unwrap_err();
        assert_eq!(field_of(err), "to");
    }

    fn row(day: &str, group: i64, job: i64, counts: [i64; 3], durations: &[i64]) -> DailyRow {
        let mut h = Histogram::default();
        for d in durations {
            h.record(*d);
        }
        DailyRow {
            day: day.into(),
            group_id: GroupId(group),
            job_id: JobId(job),
            succeeded: counts[0],
            failed: counts[1],
            lost: counts[2],
            skipped: 1,
            durations: Some(h.encode()),
            updated_ms: 5,
            ..Default::default()
        }
    }

    #[test]
    fn rows_sum_into_days_jobs_groups_and_the_most_failing() {
        let rows = vec![
            row("2026-11-01", 1, 10, [3, 1, 0], &[100, 200, 300]),
            row("2026-11-01", 1, 11, [0, 2, 0], &[]),
            row("2026-11-03", 1, 10, [1, 0, 1], &[400]),
            row("2026-11-03", 2, 12, [0, 0, 3], &[]),
            DailyRow {
                durations: None,
                ..row("2026-11-03", 2, 13, [1, 0, 0], &[])
            },
        ];
        let names: HashMap<JobId, String> = [(JobId(10), "b".into()), (JobId(11), "a".into())]
            .into_iter()
            .collect();
        let groups: HashMap<GroupId, String> = [(GroupId(1), "one".into())].into_iter().collect();
        let report = assemble(
            &rows,
            day("2026-11-01"),
            day("2026-11-03"),
            &names,
            &groups,
            day("2026-10-01"),
            ReportQuery::default(),
        )
        .unwrap();
        assert_eq!(
            report
                .days
                .iter()
                .map(|d| d.figures.runs)
                .collect::<Vec<_>>(),
            [8, 0, 9],
            "every day, a quiet one too"
        );
        assert_eq!(report.totals.runs, 17);
        assert_eq!(report.totals.failures, 1 + 2 + 1 + 3);
        let job10 = report.jobs.iter().find(|j| j.job_id == JobId(10)).unwrap();
        assert_eq!(job10.figures.succeeded, 4);
        assert_eq!(job10.figures.success_rate, Some(4.0 / 6.0));
        assert_eq!(job10.figures.timed_runs, 4);
        // Nearest rank over 100, 200, 300, 400: p50 is 200, p95 is 400, each within its bucket.
        let p50 = job10.figures.p50_ms.unwrap();
        assert!((192..=224).contains(&p50), "{p50}");
        let p95 = job10.figures.p95_ms.unwrap();
        assert!((384..=448).contains(&p95), "{p95}");
        // Named jobs first, by name; deleted ones (no name) after.
        assert_eq!(
            report.jobs.iter().map(|j| j.job_id.0).collect::<Vec<_>>(),
            [11, 10, 12, 13]
        );
        // 3 failures (job 12, rate 1.0) before 2 (job 11, rate 1.0) and 2 (job 10, rate 2/6).
        assert_eq!(
            report
                .most_failing
                .iter()
                .map(|j| j.job_id.0)
                .collect::<Vec<_>>(),
            [12, 11, 10]
        );
        let g2 = report
            .groups
            .iter()
            .find(|g| g.group_id == GroupId(2))
            .unwrap();
        assert_eq!(g2.group_name, None);
        assert_eq!((g2.figures.runs, g2.figures.timed_runs), (3 + 1 + 2, 0));
        assert_eq!(g2.figures.p95_ms, None);
        assert_eq!(report.updated_ms, Some(5));
    }

    #[test]
    fn ties_in_failures_go_to_the_higher_rate_and_the_list_stops_at_ten() {
        let rows: Vec<DailyRow> = (1..=12)
            .map(|job| row("2026-11-01", 1, job, [job, 2, 0], &[]))
            .collect();
        let report = assemble(
            &rows,
            day("2026-11-01"),
            day("2026-11-01"),
            &HashMap::new(),
            &HashMap::new(),
            day("2026-10-01"),
            ReportQuery::default(),
        )
        .unwrap();
        assert_eq!(
            report
                .most_failing
                .iter()
                .map(|j| j.job_id.0)
                .collect::<Vec<_>>(),
            (1..=10).collect::<Vec<_>>()
        );
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_text("plain"), "plain");
        assert_eq!(csv_text("a,b"), "\"a,b\"");
        assert_eq!(csv_text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_text("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_text("=1+2"), "'=1+2");
        assert_eq!(csv_text("-x,y"), "\"'-x,y\"");
    }
}
