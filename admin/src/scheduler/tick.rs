//! One scheduler pass: under the cluster lock, read the jobs due within the pre-read window,
//! move each job's next fire time forward and store its fires as pending runs, and plan the
//! scheduled workflows due in the same window (the slot to start is stored on the workflow
//! row, see `workflow_fire`), all in one transaction. A crash before commit leaves nothing; after commit, the runs exist and the
//! recovery monitor of any admin sends them if this one cannot.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::clock::SharedClock;
use crate::db::{AnyConnection, IN_LIST_MAX, job, job_run, scheduler_lock, workflow};
use crate::domain::ids::{JobId, WorkflowId};
use crate::domain::policy::RunStatus;
use crate::domain::policy::TriggerKind;
use crate::error::Error;
use crate::metrics::Metrics;

use crate::state::AppState;

use super::plan::{Window, plan};
use super::{Due, WorkflowDue};

/// How far ahead fires are read and stored.
pub const PRE_READ_MS: i64 = 5_000;
/// Jobs (and workflows) planned per pass; a fuller backlog is worked off by passes back to
/// back, each its own transaction. On MySQL, which locks only the rows a pass writes, a large
/// pass needs fewer statements (round trips).
const BATCH: i64 = 2_000;
/// The same on SQLite, where a pass holds the database's one write turn until it commits and
/// the timer's takes wait for it: at 5,000 fires a second passes of 2,000 jobs held it for
/// 40–90 ms each, three in a row every second, and the takes behind them reached their agents
/// tens of milliseconds after their runs' time (BENCHMARKS.md, issue 17). A pass of 500 holds
/// it for 15–25 ms, and a take that comes meanwhile goes before the next pass.
const SQLITE_BATCH: i64 = 500;
/// Fires of one job per pass.
const MAX_FIRES_PER_JOB: usize = 1_000;

/// How many jobs one pass plans on `conn`'s database.
fn batch_of(conn: &AnyConnection) -> i64 {
    if crate::db::one_writer_at_a_time(conn) {
        SQLITE_BATCH
    } else {
        BATCH
    }
}

#[derive(Debug, Default)]
pub struct TickOutcome {
    pub dues: Vec<Due>,
    /// Workflow slots planned by this pass, for the workflow timer.
    pub workflow_dues: Vec<WorkflowDue>,
    /// The earliest next fire of any enabled job or workflow after this pass.
    pub soonest_ms: Option<i64>,
    /// The batch was full: more jobs may be due right now.
    pub more: bool,
    /// What the pass fired and dropped, counted into the metrics and logged once it has
    /// committed: a pass rolled back (and run again) must not count or warn twice.
    counted: PassCounts,
}

#[derive(Debug, Default)]
struct PassCounts {
    fires: Vec<&'static str>,
    misfired: Vec<Misfired>,
}

/// Slots of a job or workflow that passed while no admin could fire them.
#[derive(Debug)]
struct Misfired {
    of: MisfiredOf,
    policy: &'static str,
    missed: u64,
}

#[derive(Debug)]
enum MisfiredOf {
    Job(JobId),
    Workflow(WorkflowId),
}

impl PassCounts {
    fn record(&self, metrics: &Metrics) {
        for kind in &self.fires {
            metrics.fires.inc(kind);
        }
        for Misfired { of, policy, missed } in &self.misfired {
            metrics.misfired_slots.add(policy, *missed);
            match of {
                MisfiredOf::Job(id) => {
                    tracing::warn!(job_id = %id, missed, policy, "Misfired slots (no admin could fire them in time)");
                }
                MisfiredOf::Workflow(id) => {
                    tracing::warn!(workflow_id = %id, missed, policy, "Misfired workflow slots (no admin could fire them in time)");
                }
            }
        }
    }
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
    let backlog_from = state.scheduler.backlog_from(clock.now_ms(), threshold);
    let (c, h, m) = (clock.clone(), holder.clone(), metrics.clone());
    let batched = state
        .db
        .transaction(move |conn| {
            // An error rolls the pass back: half of a batched pass must not be kept.
            plan_due(conn, &c, &h, (threshold, backlog_from), &m, Mode::Batched)?.ok_or_else(|| {
                Error::conflict(
                    "next_fire_ms",
                    "the batched pass did not match what it read",
                )
            })
        })
        .await;
    let outcome = match batched {
        Ok(outcome) => Ok(outcome),
        // Someone edited a job or a slot already had its run: nothing of the batched pass was
        // kept; do it again job by job, which sorts out each case.
        Err(Error::Conflict { .. }) => state
            .db
            .transaction(move |conn| {
                plan_due(
                    conn,
                    &clock,
                    &holder,
                    (threshold, backlog_from),
                    &metrics,
                    Mode::OneByOne,
                )
            })
            .await
            .map(Option::unwrap_or_default),
        Err(e) => Err(e),
    };
    state.metrics.scheduler_loop.observe(started.elapsed());
    if let Ok(done) = &outcome {
        done.counted.record(&state.metrics);
        state.scheduler.pass_done(state.clock.now_ms());
    }
    outcome
}

/// How a pass writes. A burst of thousands of jobs due at once must be planned in well under
/// the misfire threshold, also on MariaDB where every statement is a round trip: `Batched`
/// moves jobs that share old and new fire times with one statement, the others a statement per
/// fifty on MariaDB (`job::advance_each`), and inserts all runs with one. `OneByOne` is the
/// fallback when a batched statement does not match what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Batched,
    OneByOne,
}

/// One job's planned fires, ready to write.
struct Planned {
    job: job::Job,
    stored_next: i64,
    next: Option<i64>,
    fires: Vec<super::plan::Fire>,
}

fn plan_due(
    conn: &mut AnyConnection,
    clock: &SharedClock,
    holder: &str,
    (misfire_threshold_ms, backlog_from_ms): (i64, i64),
    metrics: &Arc<Metrics>,
    mode: Mode,
) -> Result<Option<TickOutcome>, Error> {
    let waiting = Instant::now();
    scheduler_lock::take(conn, scheduler_lock::SCHEDULE, holder, clock.now_ms())?;
    metrics.lock_wait.observe(waiting.elapsed());
    let mut counted = PassCounts::default();
    // Read the clock after the lock: the wait may have been long.
    let now = clock.now_ms();
    let window = Window {
        now_ms: now,
        horizon_ms: now + PRE_READ_MS,
        misfire_threshold_ms,
        backlog_from_ms,
        max_fires: MAX_FIRES_PER_JOB,
    };
    let batch = batch_of(conn);
    let jobs = job::due(conn, window.horizon_ms, batch)?;
    let more = jobs.len() as i64 == batch;
    let mut planned = Vec::with_capacity(jobs.len());
    for row in jobs {
        let Some(stored_next) = row.next_fire_ms else {
            continue;
        };
        let (schedule, tz) = match row.schedule() {
            Ok(parsed) => parsed,
            Err(e) => {
                // Unreadable stored schedule: stop firing it rather than fail every pass.
                tracing::error!(job_id = %row.id, error = %e, "Job has an unreadable schedule; it will not fire until it is saved again");
                job::advance(conn, row.id, stored_next, None)?;
                continue;
            }
        };
        let misfire = row.misfire;
        // A job's own starting deadline replaces the admin's threshold for its slots.
        let job_window = Window {
            misfire_threshold_ms: row
                .start_deadline_s
                .map_or(window.misfire_threshold_ms, |s| s.saturating_mul(1000)),
            ..window
        };
        let plan = plan(&schedule, tz, misfire, stored_next, job_window);
        if plan.missed > 0 {
            counted.misfired.push(Misfired {
                of: MisfiredOf::Job(row.id),
                policy: misfire.as_str(),
                missed: plan.missed,
            });
        }
        planned.push(Planned {
            job: row,
            stored_next,
            next: plan.next_fire_ms,
            fires: plan.fires,
        });
    }
    let dues = match mode {
        Mode::Batched => match write_batched(conn, &planned, now)? {
            Some(dues) => dues,
            None => return Ok(None),
        },
        Mode::OneByOne => write_one_by_one(conn, &planned, now)?,
    };
    counted.fires = dues.iter().map(|(_, kind)| kind.as_str()).collect();
    let (workflow_dues, more_workflows) = plan_workflows(conn, window, &mut counted)?;
    let soonest_ms = [job::soonest_fire(conn)?, workflow::soonest_fire(conn)?]
        .into_iter()
        .flatten()
        .min();
    Ok(Some(TickOutcome {
        dues: dues.into_iter().map(|(due, _)| due).collect(),
        workflow_dues,
        soonest_ms,
        more: more || more_workflows,
        counted,
    }))
}

/// Plans the scheduled workflows due in the window, one slot each: the slot is stored on the
/// row as pending (started at its time by the workflow timer, through the same CAS by any
/// admin) and the next slot moves on. A workflow with a slot pending is not read again until
/// the slot is started or dropped. The job's `plan` applies the misfire policy.
fn plan_workflows(
    conn: &mut AnyConnection,
    window: Window,
    counted: &mut PassCounts,
) -> Result<(Vec<WorkflowDue>, bool), Error> {
    let batch = batch_of(conn);
    let rows = workflow::due(conn, window.horizon_ms, batch)?;
    let more = rows.len() as i64 == batch;
    let mut dues = Vec::new();
    for row in rows {
        let Some(stored_next) = row.next_fire_ms else {
            continue;
        };
        let (schedule, tz) = match row.schedule() {
            Ok(parsed) => parsed,
            Err(e) => {
                tracing::error!(workflow_id = %row.id, error = %e, "Workflow has an unreadable schedule; it will not fire until it is saved again");
                workflow::plan(conn, row.id, stored_next, None, None)?;
                continue;
            }
        };
        let one = Window {
            max_fires: 1,
            ..window
        };
        let planned = plan(&schedule, tz, row.misfire, stored_next, one);
        if planned.missed > 0 {
            counted.misfired.push(Misfired {
                of: MisfiredOf::Workflow(row.id),
                policy: row.misfire.as_str(),
                missed: planned.missed,
            });
        }
        let fire = planned.fires.first().map(|f| (f.slot_ms, f.at_ms));
        if !workflow::plan(conn, row.id, stored_next, planned.next_fire_ms, fire)? {
            // Edited since it was read: the edit planned it again.
            continue;
        }
        if let Some((slot_ms, at_ms)) = fire {
            dues.push(WorkflowDue {
                at_ms,
                workflow_id: row.id,
                slot_ms,
            });
        }
    }
    Ok((dues, more))
}

fn new_run(p: &Planned, fire: &super::plan::Fire, now: i64) -> job_run::NewJobRun {
    job_run::NewJobRun {
        job_id: p.job.id,
        group_id: p.job.group_id,
        first_run_id: None,
        attempt: 1,
        trigger_kind: fire.kind,
        fire_slot_ms: Some(fire.slot_ms),
        scheduled_ms: fire.at_ms,
        status: RunStatus::Pending,
        params: p.job.params.clone(),
        shard_index: 0,
        shard_total: 1,
        created_ms: now,
        workflow_node_id: None,
        node_attempt: None,
        timeout_s: None,
        env: None,
    }
}

/// Returns `None` when a statement did not match what was read (the caller starts over).
fn write_batched(
    conn: &mut AnyConnection,
    planned: &[Planned],
    now: i64,
) -> Result<Option<Vec<(Due, TriggerKind)>>, Error> {
    let mut moves: HashMap<(i64, Option<i64>), Vec<JobId>> = HashMap::new();
    for p in planned {
        moves
            .entry((p.stored_next, p.next))
            .or_default()
            .push(p.job.id);
    }
    // Jobs that share a move (one-shot jobs due together, cron jobs on the same minute) go by
    // `IN` lists; jobs alone in theirs (fixed-rate jobs spread over the second) together.
    let mut alone = Vec::new();
    for ((expected, next), ids) in &moves {
        if let [id] = ids.as_slice() {
            alone.push(job::Advance {
                id: *id,
                expected: *expected,
                next: *next,
            });
            continue;
        }
        for chunk in ids.chunks(IN_LIST_MAX) {
            if job::advance_many(conn, chunk, *expected, *next)? != chunk.len() {
                return Ok(None);
            }
        }
    }
    if job::advance_each(conn, &alone)? != alone.len() {
        return Ok(None);
    }
    let fires: Vec<&super::plan::Fire> = planned.iter().flat_map(|p| &p.fires).collect();
    let rows: Vec<job_run::NewJobRun> = planned
        .iter()
        .flat_map(|p| p.fires.iter().map(move |fire| new_run(p, fire, now)))
        .collect();
    let mut dues = Vec::with_capacity(rows.len());
    for (chunk, fires) in rows.chunks(IN_LIST_MAX).zip(fires.chunks(IN_LIST_MAX)) {
        let ids = match crate::lifecycle::fires_created(conn, chunk) {
            Ok(ids) => ids,
            Err(Error::Conflict { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        dues.extend(ids.into_iter().zip(fires).map(|(run_id, fire)| {
            (
                Due {
                    at_ms: fire.at_ms,
                    run_id,
                },
                fire.kind,
            )
        }));
    }
    Ok(Some(dues))
}

fn write_one_by_one(
    conn: &mut AnyConnection,
    planned: &[Planned],
    now: i64,
) -> Result<Vec<(Due, TriggerKind)>, Error> {
    let mut dues = Vec::new();
    for p in planned {
        if !job::advance(conn, p.job.id, p.stored_next, p.next)? {
            continue;
        }
        for fire in &p.fires {
            match crate::lifecycle::created(conn, &new_run(p, fire, now)) {
                Ok(run_id) => dues.push((
                    Due {
                        at_ms: fire.at_ms,
                        run_id,
                    },
                    fire.kind,
                )),
                // The slot already has its run (an edit put the next fire back on a stored
                // slot): the unique key has done its job.
                Err(Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(dues)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::job::tests::{fields, insert_group, write};
    use crate::testing::storage_test;

    fn planned_job(conn: &mut AnyConnection, name: &str, stored_next: i64) -> Planned {
        let g = insert_group(conn, name);
        let id = job::insert(
            conn,
            &write(g),
            &job::NewJob {
                fields: job::JobFields {
                    next_fire_ms: Some(stored_next),
                    ..fields(g, name)
                },
                created_ms: 1,
            },
        )
        .unwrap();
        Planned {
            job: job::get(conn, id).unwrap(),
            stored_next,
            next: Some(stored_next + 1_000),
            fires: Vec::new(),
        }
    }

    storage_test!(a_batched_pass_whose_moves_fall_short_starts_over, |conn| {
        // Jobs alone in their move (each at its own time) and two that share one.
        let mut planned: Vec<Planned> = [("a", 1_000), ("b", 2_000), ("c", 3_000), ("d", 3_000)]
            .into_iter()
            .map(|(name, at)| planned_job(conn, name, at))
            .collect();
        assert!(write_batched(conn, &planned, 10).unwrap().is_some());
        for p in &planned {
            assert_eq!(
                job::get(conn, p.job.id).unwrap().next_fire_ms,
                p.next,
                "{} moved",
                p.job.name
            );
        }
        // Read before someone edited `b`: the pass must not go on as if all had moved.
        for p in &mut planned {
            p.stored_next += 1_000;
            p.next = Some(p.stored_next + 1_000);
        }
        job::advance(conn, planned[1].job.id, planned[1].stored_next, Some(7)).unwrap();
        assert!(write_batched(conn, &planned, 10).unwrap().is_none());
    });
}
