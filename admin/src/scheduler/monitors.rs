//! Monitors: the periodic passes that repair what crashes and dead agents leave behind, keep
//! the daily report and remove old runs. Every write is conditional on the row's current
//! status, so every admin of a cluster may run them at once and a repair happens once.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::web;
use chrono::{TimeZone, Utc};

use crate::db::run_report_daily::DailyRow;
use crate::db::{
    AnyConnection, agent, executor_group, job, job_run, run_report_daily, scheduler_lock,
};
use crate::domain::agent::{DEAD_AFTER_MS, live_since};
use crate::domain::ids::{JobId, RunId};
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::lifecycle::Changes;
use crate::state::AppState;
use crate::worker::Worker;

use super::Due;
use super::report_tally::{DayCounts, ReportMemory, RunTally, add_counts};

/// A pending run nobody took this long after its time lost its admin (or its admin is behind):
/// send it from here. Taking a run is a compare-and-set, so helping a live admin is harmless.
pub const ORPHAN_AFTER_MS: i64 = 3_000;
/// Runs sent at once by a recovery pass: a dead admin's burst goes out in parallel, not one
/// round trip after another.
const SEND_AT_ONCE: usize = 64;
/// A run taken for dispatch whose agent answer was never stored this long after, in a group
/// whose agents cannot say what they hold (XXL-Job executors, manual addresses): the admin died
/// mid-send and whether the agent got it is unknown, so it is lost (and retried). Jobfleet
/// agents are asked instead (`in_doubt`).
pub const STUCK_CLAIM_AFTER_MS: i64 = 60_000;
/// The agent enforces a job's timeout; the admin steps in only this long after it.
pub const TIMEOUT_GRACE_MS: i64 = 30_000;
const PASS_EVERY: Duration = Duration::from_secs(2);
const REPORT_EVERY_MS: i64 = 60_000;
const RETENTION_EVERY_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;
/// At most this many deaths are logged one by one per pass (a rack going down says enough).
const DEATHS_LOGGED: i64 = 100;

pub async fn run(state: web::Data<AppState>, mut worker: Worker) {
    let mut last_report = i64::MIN;
    let mut last_retention = i64::MIN;
    let mut dead_line: Option<i64> = None;
    let mut wait = PASS_EVERY;
    while worker.idle(wait, None).await {
        let now = state.clock.now_ms();
        // Each part runs even when another failed; the pass fails with the first error.
        let mut failure: Option<(&str, Error)> = None;
        let mut note = |what: &'static str, outcome: Result<(), Error>| {
            if let Err(e) = outcome {
                failure.get_or_insert((what, e));
            }
        };
        note("recovery", recover(&state).await.map(drop));
        note(
            "workflow fires",
            super::workflow_fire::recover(&state).await.map(drop),
        );
        note(
            "agent liveness",
            watch_agents(&state, dead_line)
                .await
                .map(|line| dead_line = Some(line)),
        );
        note("group liveness", watch_groups(&state).await.map(drop));
        note(
            "workflow timeouts",
            time_out_workflows(&state).await.map(drop),
        );
        if now.saturating_sub(last_report) >= REPORT_EVERY_MS {
            note(
                "daily report",
                report(&state).await.map(|()| last_report = now),
            );
        }
        if now.saturating_sub(last_retention) >= RETENTION_EVERY_MS {
            note(
                "retention",
                retention(&state).await.map(|removed| {
                    last_retention = now;
                    if removed > 0 {
                        tracing::info!(removed, "Removed rows older than their retention");
                    }
                }),
            );
        }
        wait = match failure {
            None => {
                worker.succeeded();
                PASS_EVERY
            }
            Some((what, e)) => worker.failed(&format!("{what}: {e}")).max(PASS_EVERY),
        };
    }
}

/// Ends the workflow runs past their deadline `timed_out`: nodes not started are cancelled,
/// running nodes' job runs killed. Returns how many runs it ended. Each run is ended in its own
/// transaction through the engine's conditional moves, so two admins never end one twice.
///
/// # Errors
/// The first database error.
pub async fn time_out_workflows(state: &AppState) -> Result<usize, Error> {
    let now = state.clock.now_ms();
    let overdue = state
        .db
        .run(move |conn| crate::db::workflow_run::overdue(conn, now, 100))
        .await?;
    let mut ended = 0;
    for id in overdue {
        let changes = Changes::at(state, now);
        let outcome = state
            .db
            .transaction(move |conn| {
                let mut changes = changes.afresh();
                let killed = crate::lifecycle::workflow::cancel(
                    conn,
                    &mut changes,
                    id,
                    crate::domain::workflow::WorkflowStatus::TimedOut,
                    "timed out: the workflow's timeout_s passed",
                );
                match killed {
                    Ok(killed) => Ok(Some((killed, changes))),
                    // Another admin ended it first.
                    Err(Error::Conflict { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        if let Some((killed, changes)) = outcome {
            changes.committed(state);
            crate::dispatch::send::kill_on_agents(state, &killed).await;
            ended += 1;
        }
    }
    Ok(ended)
}

/// What one recovery pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub orphans_sent: usize,
    /// Runs in doubt found on the agent that holds them.
    pub stuck_adopted: usize,
    /// Runs in doubt no agent holds, sent again.
    pub stuck_resent: usize,
    pub stuck_lost: usize,
    pub dead_agent_lost: usize,
    pub timed_out: usize,
}

/// Sends runs, `SEND_AT_ONCE` at a time; returns how many were handled.
///
/// # Errors
/// The first database error (the runs not sent stay for the next pass).
pub(super) async fn send_all(state: &AppState, run_ids: Vec<RunId>) -> Result<usize, Error> {
    if state.scheduler.handovers().is_some() {
        // This admin's timer runs: it sends them in its batches, and holds each run once. A run
        // unsent past its time is mostly one of its own backlog while it works off a burst;
        // sending those here too, run by run, competed with it for the same rows.
        let now = state.clock.now_ms();
        let count = run_ids.len();
        state
            .scheduler
            .enqueue(run_ids.into_iter().map(|run_id| Due { at_ms: now, run_id }));
        return Ok(count);
    }
    let mut sent = 0;
    for chunk in run_ids.chunks(SEND_AT_ONCE) {
        let outcomes = futures_util::future::join_all(
            chunk
                .iter()
                .map(|&id| crate::dispatch::send::dispatch(state, id, None)),
        )
        .await;
        for outcome in outcomes {
            outcome?;
            sent += 1;
        }
    }
    Ok(sent)
}

/// Ends a run with a status the admin decided, with its follow-ups, once.
pub(super) async fn end_run(
    state: &AppState,
    run_id: RunId,
    status: RunStatus,
    message: String,
) -> Result<bool, Error> {
    let changes = Changes::new(state);
    let (ended, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let ended = changes.ended_by_admin(conn, run_id, status, &message)?;
            Ok((ended, changes))
        })
        .await?;
    changes.committed(state);
    if ended {
        tracing::warn!(%run_id, %status, "Run ended by the admin");
    }
    Ok(ended)
}

/// Sends orphaned runs, and ends runs stuck in a dead admin, on a dead agent, or past their
/// timeout.
///
/// # Errors
/// Database errors; the next pass tries again.
pub async fn recover(state: &AppState) -> Result<Recovered, Error> {
    let now = state.clock.now_ms();
    let mut done = Recovered::default();
    let (orphans, running, dead, jobs) = state
        .db
        .run(move |conn| {
            let orphans = job_run::unclaimed_due(conn, now - ORPHAN_AFTER_MS, 500)?;
            let running = job_run::running(conn, 5_000)?;
            let mut addresses: Vec<String> = running
                .iter()
                .filter_map(|r| r.agent_address.clone())
                .collect();
            addresses.sort_unstable();
            addresses.dedup();
            let dead = agent::unseen_among(conn, &addresses, live_since(now))?;
            let mut ids: Vec<JobId> = running.iter().map(|r| r.job_id).collect();
            ids.sort_unstable();
            ids.dedup();
            let jobs: HashMap<JobId, i64> = job::timeouts_all(conn, &ids)?
                .into_iter()
                .map(|j| (j.id, j.timeout_s))
                .collect();
            Ok((orphans, running, dead, jobs))
        })
        .await?;
    if let Some(first) = orphans.first() {
        tracing::warn!(
            runs = orphans.len(),
            first_run_id = %first.id,
            scheduled_ms = first.scheduled_ms,
            "Sending runs no admin sent"
        );
    }
    done.orphans_sent = send_all(state, orphans.iter().map(|r| r.id).collect()).await?;
    let in_doubt = super::in_doubt::resolve(state, now).await?;
    done.stuck_adopted = in_doubt.adopted;
    done.stuck_resent = in_doubt.resent;
    done.stuck_lost = in_doubt.lost;
    for run in running {
        let Some(address) = run.agent_address.as_deref() else {
            continue;
        };
        if dead.contains(address) {
            let message =
                format!("agent {address} stopped sending heartbeats while the run was in flight");
            done.dead_agent_lost +=
                usize::from(end_run(state, run.id, RunStatus::Lost, message).await?);
            continue;
        }
        let timeout_s = run
            .timeout_s
            .unwrap_or_else(|| jobs.get(&run.job_id).copied().unwrap_or(0));
        let since = run
            .started_ms
            .or(run.triggered_ms)
            .unwrap_or(run.created_ms);
        if timeout_s > 0 && now - since > timeout_s * 1000 + TIMEOUT_GRACE_MS {
            let message = format!(
                "no result {}s after the job's {timeout_s}s timeout; ended by the admin",
                TIMEOUT_GRACE_MS / 1000
            );
            if end_run(state, run.id, RunStatus::TimedOut, message).await? {
                done.timed_out += 1;
                if let Err(e) = state.agents.kill(address, run.job_id, run.id).await {
                    tracing::warn!(run_id = %run.id, agent = %address, error = %e, "Could not kill the timed-out run");
                }
            }
        }
    }
    Ok(done)
}

/// Logs the agents that went dead since the last pass (`live_since` of that pass), and keeps
/// the gauges current; returns this pass's `live_since`. An agent coming back is logged by its
/// heartbeat. Reads only the agents whose last heartbeat crossed the line, not the registry.
async fn watch_agents(state: &AppState, before: Option<i64>) -> Result<i64, Error> {
    let now = state.clock.now_ms();
    let since = live_since(now);
    let (died, live, in_flight) = state
        .db
        .run(move |conn| {
            let died = match before {
                Some(before) if before < since => {
                    agent::seen_between(conn, before, since, DEATHS_LOGGED)?
                }
                _ => Vec::new(),
            };
            let live = agent::count(
                conn,
                &agent::AgentFilter {
                    seen_since_ms: Some(since),
                    ..agent::AgentFilter::default()
                },
            )?;
            Ok((died, live, job_run::count_in_flight(conn)?))
        })
        .await?;
    for (app_name, address) in &died {
        tracing::warn!(agent = %format!("{app_name} {address}"), "Agent is dead (no heartbeat for {}s)", DEAD_AFTER_MS / 1000);
    }
    if died.len() as i64 == DEATHS_LOGGED {
        tracing::warn!(
            "More agents died in this pass than are logged one by one; see the fleet page"
        );
    }
    state.metrics.agents_alive.set(live);
    state.metrics.runs_in_flight.set(in_flight);
    Ok(since)
}

/// Notes groups gaining their first live agent and losing their last one. Losing it raises
/// `group_no_agent` for the group's jobs that asked, in the transaction whose conditional
/// update moved the group from `live` to `none`: with several admins watching, one raises it.
/// Groups with manual addresses do not use the registry and are left alone. Returns how many
/// groups lost their last agent in this pass (as moved by this admin).
///
/// # Errors
/// Database errors; the next pass tries again.
pub async fn watch_groups(state: &AppState) -> Result<usize, Error> {
    let now = state.clock.now_ms();
    let groups = state
        .db
        .run(move |conn| {
            let mut groups = Vec::new();
            for (id, app_name, mode, agents_state) in executor_group::agent_states(conn)? {
                if mode == "manual" {
                    continue;
                }
                // One indexed probe per group, not the registry.
                let live = agent::any_seen_since(conn, &app_name, live_since(now))?;
                groups.push((id, app_name, live, agents_state));
            }
            Ok(groups)
        })
        .await?;
    let mut lost = 0;
    for (id, app_name, live, agents_state) in groups {
        if live && agents_state != "live" {
            state
                .db
                .run(move |conn| executor_group::move_agents_state(conn, id, &agents_state, "live"))
                .await?;
        } else if !live && agents_state == "live" {
            let outbox = state.alerts.outbox();
            let alerts = outbox.clone();
            let name = app_name.clone();
            let moved = state
                .db
                .transaction(move |conn| {
                    if !executor_group::move_agents_state(conn, id, "live", "none")? {
                        return Ok(false);
                    }
                    alerts.group_lost_agents(conn, id, &name, now)?;
                    Ok(true)
                })
                .await?;
            outbox.committed();
            if moved {
                lost += 1;
                tracing::warn!(group = %app_name, "Group has no live agent left");
            }
        }
    }
    Ok(lost)
}

fn day_of(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .map_or_else(|| "1970-01-01".into(), |t| t.format("%Y-%m-%d").to_string())
}

/// Counts yesterday and today (UTC) into `run_report_daily`: outcome counts and the duration
/// histogram of the runs that both started and finished, per day (of `created_ms`), group (the
/// run's) and job. The count goes on from the last pass (`report_tally`): a pass reads the runs
/// of the last few minutes and those still in flight, and the whole two days only when it
/// starts over (in an admin's first two minutes, after its clock went back, on a new day, each
/// hour), where the database counts them per
/// bucket (`job_run::report_counts`, about a second per million runs on SQLite). Both read
/// outside the write transaction, which on SQLite would hold every writer (the scheduler, the
/// results) off meanwhile. The rows are then replaced under the scheduler lock, so two admins do
/// not rewrite a day at once.
///
/// # Errors
/// Database errors.
pub async fn report(state: &AppState) -> Result<(), Error> {
    let now = state.clock.now_ms();
    let holder = state.scheduler.holder.clone();
    let keep_days = i64::from(state.config.retention_days);
    let today_start = now.div_euclid(DAY_MS) * DAY_MS;
    // Locked where the pass runs, so that a pass that fails, or never gets a connection, leaves
    // the memory as it was (a tally that might have half moved is dropped by `count_days`).
    let memory = state.scheduler.report.clone();
    let [yesterday, today] = state
        .db
        .run(move |conn| {
            let mut memory = memory.lock().unwrap_or_else(|poisoned| {
                let mut memory = poisoned.into_inner();
                memory.tally = None;
                memory
            });
            count_days(conn, &mut memory, today_start, now)
        })
        .await?;
    let days = [(today_start - DAY_MS, yesterday), (today_start, today)]
        .map(|(start, counts)| (day_of(start), rows_of(&day_of(start), counts, now)));
    state
        .db
        .transaction(move |conn| {
            scheduler_lock::take(conn, scheduler_lock::SCHEDULE, &holder, now)?;
            for (day, rows) in &days {
                run_report_daily::replace_day(conn, day, rows)?;
            }
            run_report_daily::delete_before(conn, &day_of(today_start - keep_days * DAY_MS))?;
            Ok(())
        })
        .await
}

/// Yesterday's and today's counts: from `memory`'s tally, or counted anew.
fn count_days(
    conn: &mut AnyConnection,
    memory: &mut ReportMemory,
    today_start: i64,
    now: i64,
) -> Result<[DayCounts; 2], Error> {
    let top = job_run::max_id(conn)?;
    let Some(through) = memory.settled_through(now, top) else {
        // No id is known to be settled yet (the admin started, or its clock went back, within
        // the last two minutes): count everything.
        memory.tally = None;
        let mut days = [DayCounts::new(), DayCounts::new()];
        for (start, counts) in [today_start - DAY_MS, today_start]
            .into_iter()
            .zip(&mut days)
        {
            add_counts(
                counts,
                job_run::report_counts(conn, start, start + DAY_MS, None)?,
            );
        }
        return Ok(days);
    };
    let tally = match memory.tally.take() {
        Some(tally) if tally.fits(today_start, now, through) => tally,
        _ => settled_tally(conn, today_start, now, through)?,
    };
    let mut read = || -> Result<Vec<job_run::ReportRun>, Error> {
        let mut runs = job_run::report_runs_after(conn, tally.through())?;
        runs.extend(job_run::report_runs_of(conn, tally.open())?);
        Ok(runs)
    };
    let runs = match read() {
        Ok(runs) => runs,
        Err(e) => {
            // Unmoved, so still true.
            memory.tally = Some(tally);
            return Err(e);
        }
    };
    let mut tally = tally;
    let days = tally.advance(through, runs);
    memory.tally = Some(tally);
    Ok(days)
}

/// A tally counted anew: the final runs of the two days up to `through`, and the ids of the
/// others up to it.
fn settled_tally(
    conn: &mut AnyConnection,
    today_start: i64,
    now: i64,
    through: RunId,
) -> Result<RunTally, Error> {
    let yesterday = today_start - DAY_MS;
    // One snapshot, or a run ending between the count of the settled runs and the list of the
    // open ones would be counted in both or in neither.
    let (settled, open) = crate::db::in_snapshot(conn, |conn| {
        let mut days = [DayCounts::new(), DayCounts::new()];
        for (start, counts) in [yesterday, today_start].into_iter().zip(&mut days) {
            let settled = job_run::report_counts(conn, start, start + DAY_MS, Some(through))?;
            add_counts(counts, settled);
        }
        let open = job_run::in_flight_through(conn, yesterday, today_start + DAY_MS, through)?;
        Ok((days, open))
    })?;
    let [settled_yesterday, settled_today] = settled;
    Ok(RunTally::new(
        today_start,
        now,
        through,
        settled_yesterday,
        settled_today,
        open,
    ))
}

/// A day's stored rows, by group and job.
fn rows_of(day: &str, counts: DayCounts, now: i64) -> Vec<DailyRow> {
    let mut rows: Vec<DailyRow> = counts
        .into_iter()
        .map(|((job_id, group_id), counts)| {
            DailyRow::of(day.to_owned(), job_id, group_id, &counts, now)
        })
        .collect();
    rows.sort_by_key(|r| (r.group_id, r.job_id));
    rows
}

/// Deletes what is older than its retention, in batches: finished runs and workflow runs
/// (`retention_days`), runs beyond a job's history limits (`keep_succeeded`, `keep_failed`), audit log entries (`audit_retention_days`) and settled alert events
/// (`alert_retention_days`). Returns how many rows went.
///
/// # Errors
/// Database errors.
pub async fn retention(state: &AppState) -> Result<usize, Error> {
    let now = state.clock.now_ms();
    let days_ago = |days: u32| now - i64::from(days) * DAY_MS;
    let runs_before = days_ago(state.config.retention_days);
    let mut removed = in_batches(state, move |conn| {
        job_run::delete_finished_before(conn, runs_before, RETENTION_BATCH)
    })
    .await?;
    // Jobs with history limits keep only their newest succeeded and unsuccessful runs.
    let limits = state.db.run(crate::db::job::history_limits).await?;
    // Today's and yesterday's runs stay: the daily report counts them (whole, each hour).
    let today_start = now - now.rem_euclid(DAY_MS);
    let counted_before = today_start - DAY_MS;
    for limit in limits {
        let job_id = limit.job_id;
        for (succeeded, keep) in [(true, limit.keep_succeeded), (false, limit.keep_failed)] {
            let Some(keep) = keep else { continue };
            let keep = i64::from(keep);
            removed += in_batches(state, move |conn| {
                job_run::delete_beyond_newest(
                    conn,
                    job_id,
                    succeeded,
                    keep,
                    counted_before,
                    RETENTION_BATCH,
                )
            })
            .await?;
        }
    }
    // Kept logs go with their runs.
    removed += in_batches(state, move |conn| {
        crate::db::run_log::delete_orphans(conn, RETENTION_BATCH)
    })
    .await?;
    // Workflow runs go by the same retention, with their nodes.
    removed += in_batches(state, move |conn| {
        crate::db::workflow_run::delete_finished_before(conn, runs_before, RETENTION_BATCH)
    })
    .await?;
    let audit_before = days_ago(state.config.audit_retention_days);
    removed += in_batches(state, move |conn| {
        crate::db::audit_log::delete_before(conn, audit_before, RETENTION_BATCH)
    })
    .await?;
    let alerts_before = days_ago(state.config.alert_retention_days);
    removed += in_batches(state, move |conn| {
        crate::db::alert_event::delete_settled_before(conn, alerts_before, RETENTION_BATCH)
    })
    .await?;
    let agents_before = days_ago(state.config.dead_agent_retention_days);
    let forgotten = in_batches(state, move |conn| {
        crate::db::agent::delete_unseen_since(conn, agents_before, RETENTION_BATCH)
    })
    .await?;
    if forgotten > 0 {
        tracing::info!(
            agents = forgotten,
            days = state.config.dead_agent_retention_days,
            "Forgot agents not heard from within dead_agent_retention_days"
        );
    }
    Ok(removed + forgotten)
}

/// Rows one retention statement deletes, so that a large backlog never holds a long transaction.
const RETENTION_BATCH: i64 = 1_000;

/// Runs `delete` (one batch, in a transaction) until a batch comes back short, at most 100
/// batches a pass; returns how many rows went.
async fn in_batches(
    state: &AppState,
    delete: impl Fn(&mut crate::db::AnyConnection) -> Result<usize, Error> + Send + Copy + 'static,
) -> Result<usize, Error> {
    let mut removed = 0;
    for _ in 0..100 {
        let n = state.db.transaction(delete).await?;
        removed += n;
        if n < usize::try_from(RETENTION_BATCH).unwrap_or(usize::MAX) {
            break;
        }
    }
    Ok(removed)
}
