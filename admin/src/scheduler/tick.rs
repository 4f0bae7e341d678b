//! One scheduler pass: under the cluster lock, read the jobs due within the pre-read window,
//! move each job's next fire time forward and store its fires as pending runs, all in one
//! transaction. A crash before commit leaves nothing; after commit, the runs exist and the
//! recovery monitor of any admin sends them if this one cannot.

use std::sync::Arc;
use std::time::Instant;

use crate::clock::SharedClock;
use crate::db::{AnyConnection, job, job_run, scheduler_lock};
use crate::domain::policy::Misfire;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::service::jobs::schedule_of;
use crate::startup::AppState;

use super::Due;
use super::plan::{Window, plan};

/// How far ahead fires are read and stored.
pub const PRE_READ_MS: i64 = 5_000;
/// Jobs planned per pass; a fuller backlog is worked off by passes back to back.
pub const BATCH: i64 = 2_000;
/// Fires of one job per pass.
const MAX_FIRES_PER_JOB: usize = 1_000;

#[derive(Debug, Default)]
pub struct TickOutcome {
    pub dues: Vec<Due>,
    /// The earliest next fire of any enabled job after this pass.
    pub soonest_ms: Option<i64>,
    /// The batch was full: more jobs may be due right now.
    pub more: bool,
}

/// Runs one pass.
///
/// # Errors
/// Database errors; nothing of the pass is kept then.
pub async fn tick(state: &AppState) -> Result<TickOutcome, Error> {
    let clock = state.clock.clone();
    let holder = state.scheduler.holder.clone();
    let threshold = state.config.misfire_threshold_ms;
    let metrics = state.metrics.clone();
    let started = Instant::now();
    let outcome = state
        .db
        .transaction(move |conn| plan_due(conn, &clock, &holder, threshold, &metrics))
        .await;
    state.metrics.scheduler_loop.observe(started.elapsed());
    outcome
}

fn plan_due(
    conn: &mut AnyConnection,
    clock: &SharedClock,
    holder: &str,
    misfire_threshold_ms: i64,
    metrics: &Arc<Metrics>,
) -> Result<TickOutcome, Error> {
    let waiting = Instant::now();
    scheduler_lock::take(conn, scheduler_lock::SCHEDULE, holder, clock.now_ms())?;
    metrics.lock_wait.observe(waiting.elapsed());
    // Read the clock after the lock: the wait may have been long.
    let now = clock.now_ms();
    let window = Window {
        now_ms: now,
        horizon_ms: now + PRE_READ_MS,
        misfire_threshold_ms,
        max_fires: MAX_FIRES_PER_JOB,
    };
    let jobs = job::due(conn, window.horizon_ms, BATCH)?;
    let more = jobs.len() as i64 == BATCH;
    let mut dues = Vec::new();
    for row in jobs {
        let Some(stored_next) = row.next_fire_ms else {
            continue;
        };
        let (schedule, tz) = match schedule_of(&row) {
            Ok(parsed) => parsed,
            Err(e) => {
                // Unreadable stored schedule: stop firing it rather than fail every pass.
                tracing::error!(job_id = row.id, error = %e, "Job has an unreadable schedule; it will not fire until it is saved again");
                job::advance(conn, row.id, stored_next, None)?;
                continue;
            }
        };
        let misfire = row.misfire.parse().unwrap_or(Misfire::DoNothing);
        let planned = plan(&schedule, tz, misfire, stored_next, window);
        if planned.missed > 0 {
            tracing::warn!(job_id = row.id, missed = planned.missed, policy = %misfire.as_str(), "Misfired slots (no admin could fire them in time)");
            metrics.misfired_slots.add(misfire.as_str(), planned.missed);
        }
        if !job::advance(conn, row.id, stored_next, planned.next_fire_ms)? {
            continue;
        }
        for fire in planned.fires {
            let inserted = job_run::insert(
                conn,
                &job_run::NewJobRun {
                    job_id: row.id,
                    group_id: row.group_id,
                    first_run_id: None,
                    attempt: 1,
                    trigger_kind: fire.kind.as_str().to_owned(),
                    fire_slot_ms: Some(fire.slot_ms),
                    scheduled_ms: fire.at_ms,
                    status: "pending".into(),
                    params: row.params.clone(),
                    shard_index: 0,
                    shard_total: 1,
                    created_ms: now,
                },
            );
            match inserted {
                Ok(run_id) => {
                    metrics.fires.inc(fire.kind.as_str());
                    dues.push(Due {
                        at_ms: fire.at_ms,
                        run_id,
                    });
                }
                // The slot already has its run (an edit put the next fire back on a stored
                // slot): the unique key has done its job.
                Err(Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(TickOutcome {
        dues,
        soonest_ms: job::soonest_fire(conn)?,
        more,
    })
}
