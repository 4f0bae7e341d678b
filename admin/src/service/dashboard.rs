//! The numbers of the console's front page, limited to what the caller may see: job and agent
//! counts, today's runs by outcome, runs in flight, seven days of outcomes from the daily
//! report, and the latest failures.

use crate::auth::rbac::Actor;
use crate::db::{Page, job, job_run, run_report_daily};
use crate::domain::ids::JobId;
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::service::fleet::{self, FleetView};
use crate::state::AppState;

const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Clone)]
pub struct DayOutcomes {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub succeeded: i64,
    /// failed + timed out + lost.
    pub failed: i64,
}

#[derive(Debug, Clone)]
pub struct Dashboard {
    pub jobs_enabled: i64,
    pub jobs_total: i64,
    pub agents_live: usize,
    pub agents_total: usize,
    /// The fleet at a glance (the fleet page's summary).
    pub fleet: FleetView,
    pub in_flight: i64,
    /// Start of today (UTC), ms.
    pub today_start_ms: i64,
    /// Runs scheduled today, per final or current status.
    pub today: Vec<(RunStatus, i64)>,
    /// Oldest first, seven days ending today.
    pub week: Vec<DayOutcomes>,
    pub recent_failures: Vec<job_run::JobRun>,
    /// Names of the jobs of `recent_failures`.
    pub job_names: Vec<(JobId, String)>,
}

fn day_of(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

pub async fn load(state: &AppState, actor: &Actor) -> Result<Dashboard, Error> {
    let now = state.clock.now_ms();
    let today_start_ms = now - now.rem_euclid(DAY_MS);
    let visible = actor.visible_groups();
    let fleet = fleet::summary(state, actor).await?;
    // Heartbeating, drained or not: what "live" meant before drains existed.
    let agents_live = usize::try_from(fleet.agents.live + fleet.agents.drained).unwrap_or(0);
    let agents_total = usize::try_from(fleet.agents.total).unwrap_or(0);
    state
        .db
        .run(move |conn| {
            let jobs_filter = |enabled: Option<bool>| job::JobFilter {
                visible_groups: visible.clone(),
                group_id: None,
                enabled,
                schedule_type: None,
                name_contains: None,
                ..Default::default()
            };
            let jobs_total = job::count(conn, &jobs_filter(None))?;
            let jobs_enabled = job::count(conn, &jobs_filter(Some(true)))?;
            let runs = |status: RunStatus, from_ms: Option<i64>| job_run::RunFilter {
                visible_groups: visible.clone(),
                job_id: None,
                group_id: None,
                status: Some(status.as_str().to_owned()),
                from_ms,
                to_ms: None,
            };
            let mut today = Vec::new();
            for status in RunStatus::ALL {
                today.push((
                    *status,
                    job_run::count(conn, &runs(*status, Some(today_start_ms)))?,
                ));
            }
            let in_flight = job_run::count(conn, &runs(RunStatus::Running, None))?
                + job_run::count(conn, &runs(RunStatus::Pending, None))?;
            // The daily report is per job: a non-admin sums the jobs of their groups only.
            let job_ids: Option<Vec<JobId>> = match &visible {
                None => None,
                Some(_) => Some(
                    job::list(
                        conn,
                        &jobs_filter(None),
                        Page {
                            limit: 100_000,
                            offset: 0,
                        },
                    )?
                    .into_iter()
                    .map(|j| j.id)
                    .collect(),
                ),
            };
            let first_day_ms = today_start_ms - 6 * DAY_MS;
            let rows = run_report_daily::list(
                conn,
                &day_of(first_day_ms),
                &day_of(today_start_ms),
                job_ids.as_deref(),
            )?;
            let week = (0..7)
                .map(|i| {
                    let day = day_of(first_day_ms + i * DAY_MS);
                    let (succeeded, failed) = rows
                        .iter()
                        .filter(|r| r.day == day)
                        .fold((0, 0), |(ok, bad), r| {
                            (ok + r.succeeded, bad + r.failed + r.timed_out + r.lost)
                        });
                    DayOutcomes {
                        day,
                        succeeded,
                        failed,
                    }
                })
                .collect();
            let mut recent_failures = Vec::new();
            for status in [RunStatus::Failed, RunStatus::TimedOut, RunStatus::Lost] {
                recent_failures.extend(job_run::list(
                    conn,
                    &runs(status, None),
                    Page {
                        limit: 10,
                        offset: 0,
                    },
                )?);
            }
            recent_failures.sort_by_key(|r| std::cmp::Reverse(r.id));
            recent_failures.truncate(10);
            let ids: Vec<JobId> = recent_failures.iter().map(|r| r.job_id).collect();
            let job_names = job::find_all(conn, &ids)?
                .into_iter()
                .map(|j| (j.id, j.name))
                .collect();
            Ok(Dashboard {
                jobs_enabled,
                jobs_total,
                agents_live,
                agents_total,
                fleet,
                in_flight,
                today_start_ms,
                today,
                week,
                recent_failures,
                job_names,
            })
        })
        .await
}
