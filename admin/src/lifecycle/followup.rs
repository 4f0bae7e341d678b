//! What a final run leads to: a retry after a failure, an alert after a failure no retry
//! follows, the child jobs after a success. Called inside the transaction that made the run
//! final, so a follow-up exists exactly when the final status does, whichever admin or monitor
//! got there first. A workflow node's run, once no retry follows, advances its workflow
//! (`super::workflow`).

use crate::alert::outbox::Outbox;
use crate::db::{AnyConnection, job_run};
use crate::domain::policy::{RunStatus, TriggerKind, retry_delay_s};
use crate::error::Error;

use crate::scheduler::handle::Due;

/// Statuses a retry answers. `killed` was someone's decision and `skipped` the policy's.
pub(super) fn retryable(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost
    )
}

/// What a final run led to.
pub struct FollowUps {
    /// New runs (a retry, children) to hand to the timer.
    pub dues: Vec<Due>,
    /// The final run, unless a retry follows it: what a workflow node advances on.
    pub settled: Option<job_run::JobRun>,
}

/// Creates the follow-up runs of `run`, which has just become final, and its alerts (written
/// to `alerts`; call `Outbox::committed` after the commit).
///
/// # Errors
/// Database errors (the caller's transaction rolls back with the final status).
pub fn after_final(
    conn: &mut AnyConnection,
    run: job_run::JobRun,
    now_ms: i64,
    alerts: &Outbox,
    jobs: &mut super::JobsRead,
) -> Result<FollowUps, Error> {
    let Some(owner) = jobs.end_rules(conn, run.job_id)? else {
        return Ok(FollowUps {
            dues: Vec::new(),
            settled: Some(run),
        });
    };
    let mut dues = Vec::new();
    let mut retried = false;
    if retryable(run.status) && run.attempt <= owner.retry_count {
        let retry_number = u32::try_from(run.attempt).unwrap_or(1);
        let at_ms = now_ms + retry_delay_s(owner.retry_backoff_s, retry_number) * 1000;
        let id = super::created(
            conn,
            &job_run::NewJobRun {
                job_id: run.job_id,
                group_id: owner.group_id,
                first_run_id: Some(run.first_run_id.unwrap_or(run.id)),
                attempt: run.attempt + 1,
                trigger_kind: TriggerKind::Retry,
                fire_slot_ms: None,
                scheduled_ms: at_ms,
                status: RunStatus::Pending,
                params: run.params.clone(),
                shard_index: run.shard_index,
                shard_total: run.shard_total,
                created_ms: now_ms,
                // A retry is the same node attempt's next job attempt.
                workflow_node_id: run.workflow_node_id,
                node_attempt: run.node_attempt,
                timeout_s: run.timeout_s,
                env: run.env.clone(),
            },
        )?;
        dues.push(Due { at_ms, run_id: id });
        retried = true;
    } else if retryable(run.status) {
        // Only the last attempt pages: a failure that will be retried is not news yet.
        // Read again: the agent and trigger message the alert names may have been stored
        // after the row the caller holds was read.
        let latest = job_run::get(conn, run.id)?;
        // The whole job only here: the alert names it and follows its settings.
        if let Some(job) = jobs.get(conn, run.job_id)? {
            alerts.run_final(conn, &latest, &job, now_ms)?;
        }
    }
    // A sharded fire succeeds shard by shard; its children follow shard 0 only, once per fire.
    // In a workflow the graph says what follows, not the job's children.
    if run.status == RunStatus::Succeeded
        && run.shard_index == 0
        && run.trigger_kind != TriggerKind::Workflow
    {
        for &child_id in owner.children.iter() {
            let Some(child) = jobs.get(conn, child_id)? else {
                tracing::warn!(job_id = %owner.id, %child_id, "Child job no longer exists");
                continue;
            };
            let id = super::created(
                conn,
                &job_run::NewJobRun {
                    job_id: child.id,
                    group_id: child.group_id,
                    first_run_id: None,
                    attempt: 1,
                    trigger_kind: TriggerKind::Child,
                    fire_slot_ms: None,
                    scheduled_ms: now_ms,
                    status: RunStatus::Pending,
                    params: child.params.clone(),
                    shard_index: 0,
                    shard_total: 1,
                    created_ms: now_ms,
                    workflow_node_id: None,
                    node_attempt: None,
                    timeout_s: None,
                    env: None,
                },
            )?;
            dues.push(Due {
                at_ms: now_ms,
                run_id: id,
            });
        }
    }
    Ok(FollowUps {
        dues,
        settled: (!retried).then_some(run),
    })
}
