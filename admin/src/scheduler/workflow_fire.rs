//! Scheduled workflow fires. A pass (`tick`) plans a workflow's next slot by storing it on the
//! workflow row as pending and hands it to this module's timer, which starts the run at its
//! millisecond through the engine's entry (`lifecycle::workflow::start`), under the workflow's
//! concurrency policy.
//!
//! Starting is one transaction that first clears the pending slot with a conditional update:
//! of two admins (or an admin and a monitor) starting the same slot, one clears it and the
//! other backs off. The run also carries its slot, unique per workflow, so even a slot planned
//! twice (an edit put the next fire back on a slot that already ran) starts once. A slot whose
//! admin stopped before starting it stays pending on the row; any admin's monitor starts it
//! (`recover`), or drops it by the misfire policy when it is too late.

use actix_web::web;
use tokio::sync::mpsc;

use crate::db::{workflow, workflow_run};
use crate::domain::ids::WorkflowRunId;
use crate::domain::policy::{Misfire, TriggerKind};
use crate::domain::workflow::Definition;
use crate::error::Error;
use crate::lifecycle::{Changes, workflow as engine};
use crate::state::AppState;
use crate::worker::Worker;

use super::WorkflowDue;
use super::dues::Dues;
use super::monitors::ORPHAN_AFTER_MS;

/// Pending slots looked at per monitor pass.
const RECOVER_AT_ONCE: i64 = 100;

/// What starting a planned slot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fired {
    /// The run started.
    Started(WorkflowRunId),
    /// The concurrency policy is `forbid` and this run is still in progress: the slot is
    /// skipped (and logged).
    Skipped(WorkflowRunId),
    /// The slot already has its run (another admin started it, or it was planned twice).
    AlreadyStarted,
    /// The slot is no longer pending: another admin took it, or the workflow was edited,
    /// disabled or deleted since the pass planned it.
    Gone,
}

/// The trigger kind of a scheduled run: a catch-up fire (started later than its slot by the
/// misfire policy `fire_once_now`) is a `misfire`, as a job's is.
fn kind_of(due: WorkflowDue) -> TriggerKind {
    if due.at_ms == due.slot_ms {
        TriggerKind::Schedule
    } else {
        TriggerKind::Misfire
    }
}

/// Starts the run of a planned slot, now.
///
/// # Errors
/// Database errors; the slot then stays pending and a monitor tries again.
pub async fn fire(state: &AppState, due: WorkflowDue) -> Result<Fired, Error> {
    let changes = Changes::new(state);
    let (fired, killed, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let id = due.workflow_id;
            if !workflow::take_pending(conn, id, due.slot_ms)? {
                return Ok((Fired::Gone, Vec::new(), changes));
            }
            if workflow_run::slot_taken(conn, id, due.slot_ms)? {
                return Ok((Fired::AlreadyStarted, Vec::new(), changes));
            }
            let row = workflow::get(conn, id)?;
            let killed = match engine::make_room(conn, &mut changes, &row)? {
                engine::Room::Free(killed) => killed,
                engine::Room::Busy(other) => {
                    return Ok((Fired::Skipped(other.id), Vec::new(), changes));
                }
            };
            let graph = serde_json::from_str::<Definition>(&row.definition)
                .map_err(|e| {
                    Error::Internal(anyhow::anyhow!("workflow {id}: stored definition: {e}"))
                })?
                .validate()?;
            let run_id = engine::start(
                conn,
                &mut changes,
                &row,
                &graph,
                row.params.clone(),
                kind_of(due),
                Some(due.slot_ms),
            )?;
            Ok((Fired::Started(run_id), killed, changes))
        })
        .await?;
    changes.committed(state);
    crate::dispatch::send::kill_on_agents(state, &killed).await;
    let (workflow_id, slot_ms) = (due.workflow_id, due.slot_ms);
    match fired {
        Fired::Started(run) => {
            tracing::info!(%workflow_id, slot_ms, workflow_run_id = %run, "Scheduled workflow run started");
        }
        Fired::Skipped(running) => {
            tracing::warn!(%workflow_id, slot_ms, workflow_run_id = %running, "Scheduled workflow fire skipped: a run is still in progress (concurrency policy forbid)");
        }
        Fired::AlreadyStarted | Fired::Gone => {}
    }
    // The workflow has no pending slot any more: its next one can be planned.
    state.scheduler.workflows_changed();
    Ok(fired)
}

/// Starts or drops the planned slots that should have started `ORPHAN_AFTER_MS` ago (their
/// admin stopped, or is far behind). A slot later than the misfire threshold follows the
/// workflow's policy: `do_nothing` drops it; `fire_once_now` starts it now, unless the
/// workflow's next slot has misfired too, in which case it is dropped and the next pass fires
/// the one catch-up for both. Returns how many runs started.
///
/// # Errors
/// Database errors; the next pass tries again.
pub async fn recover(state: &AppState) -> Result<usize, Error> {
    let now = state.clock.now_ms();
    let threshold = state.config.misfire_threshold_ms;
    let stale = state
        .db
        .run(move |conn| workflow::stale_pending(conn, now - ORPHAN_AFTER_MS, RECOVER_AT_ONCE))
        .await?;
    let mut started = 0;
    for pending in stale {
        let mut due = WorkflowDue {
            at_ms: pending.at_ms,
            workflow_id: pending.workflow_id,
            slot_ms: pending.slot_ms,
        };
        if now - pending.at_ms > threshold {
            let dropped = state
                .db
                .transaction(move |conn| {
                    let Some(row) = workflow::find(conn, pending.workflow_id)? else {
                        return Ok(None);
                    };
                    let next_missed = row.next_fire_ms.is_some_and(|n| now - n > threshold);
                    if row.misfire == Misfire::DoNothing || next_missed {
                        return Ok(workflow::take_pending(conn, row.id, pending.slot_ms)?
                            .then_some(row.misfire));
                    }
                    Ok(None)
                })
                .await?;
            if let Some(policy) = dropped {
                tracing::warn!(workflow_id = %pending.workflow_id, slot_ms = pending.slot_ms, policy = %policy.as_str(), "Misfired workflow slot (its admin stopped before starting it)");
                state.metrics.misfired_slots.add(policy.as_str(), 1);
                state.scheduler.workflows_changed();
                continue;
            }
            // fire_once_now: the catch-up starts now.
            due.at_ms = now;
        }
        if let Fired::Started(_) = fire(state, due).await? {
            started += 1;
        }
    }
    Ok(started)
}

/// The workflow timer: holds planned slots until their millisecond (`dues`) and starts each.
pub async fn run(
    state: web::Data<AppState>,
    inbox: mpsc::UnboundedReceiver<WorkflowDue>,
    mut worker: Worker,
) {
    let mut dues = Dues::new(inbox);
    while !worker.stopping() {
        let now = state.clock.now_ms();
        let (slots, held) = dues.take_due(now, usize::MAX);
        // A slot started twice is refused by its row, so nothing needs holding while it starts.
        drop(held);
        for due in slots {
            let state = state.clone();
            tokio::spawn(async move {
                if let Err(e) = fire(&state, due).await {
                    // The slot stays pending on the row; the monitors start it later.
                    tracing::warn!(workflow_id = %due.workflow_id, slot_ms = due.slot_ms, error = %e, "Starting a scheduled workflow run failed; it will be recovered");
                }
            });
        }
        if !dues
            .wait(now, &state.scheduler.workflow_timer_wake, &mut worker)
            .await
        {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::WorkflowId;

    #[test]
    fn a_catch_up_is_a_misfire() {
        let due = |at_ms, slot_ms| WorkflowDue {
            at_ms,
            workflow_id: WorkflowId(1),
            slot_ms,
        };
        assert_eq!(kind_of(due(5_000, 5_000)), TriggerKind::Schedule);
        assert_eq!(kind_of(due(9_000, 5_000)), TriggerKind::Misfire);
    }
}
