//! Results from agents (`/api/callback`), stored idempotently: a result for an unknown or
//! already-finished run is acknowledged and changes nothing, so agents can resend freely. A
//! stored result creates its follow-ups (retry, child jobs) in the same transaction, through
//! the run lifecycle.

use jobfleet_agent::protocol::{HandleCallbackParam, RunOutcome};

use std::collections::HashMap;

use crate::db::job_run::{self, JobRun, RunResult};
use crate::domain::ids::RunId;
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::lifecycle::Changes;
use crate::service::agents;
use crate::state::AppState;

/// The run status a callback means. jobfleet agents say it; XXL-Job executors only give a code.
fn status_of(cb: &HandleCallbackParam) -> RunStatus {
    let outcome = cb
        .status
        .clone()
        .unwrap_or_else(|| RunOutcome::of_handle_code(cb.handle_code));
    match outcome {
        RunOutcome::Succeeded => RunStatus::Succeeded,
        RunOutcome::TimedOut => RunStatus::TimedOut,
        RunOutcome::Killed => RunStatus::Killed,
        // The agent died while the run was going (it says so after its restart).
        RunOutcome::Lost => RunStatus::Lost,
        // `accept` puts a `not_started` run back to pending before it gets here.
        RunOutcome::Failed
        | RunOutcome::OomKilled
        | RunOutcome::Rejected
        | RunOutcome::NotStarted
        | RunOutcome::Other(_) => RunStatus::Failed,
    }
}

fn result_of(cb: &HandleCallbackParam) -> RunResult {
    let usage = cb.usage.as_ref();
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    RunResult {
        status: status_of(cb),
        started_ms: cb.started_ms,
        finished_ms: Some(cb.finished_ms.unwrap_or(cb.log_date_tim)),
        handle_code: Some(cb.handle_code),
        handle_msg: cb
            .handle_msg
            .as_ref()
            .map(|m| m.chars().take(4000).collect()),
        exit_code: cb.exit_code,
        term_signal: cb.signal,
        cpu_ms: usage.map(|u| clamp(u.cpu_ms)),
        max_rss_kb: usage.map(|u| clamp(u.max_rss_kb)),
        oom_killed: usage
            .map(|u| u.oom_killed)
            .or(Some(cb.status == Some(RunOutcome::OomKilled))),
        limits_mode: cb.limits_mode.clone(),
        // Bounded here too: a foreign or older agent may send more than ours would.
        outputs: cb.output.as_ref().filter(|o| !o.is_empty()).map(|o| {
            o.chars()
                .take(jobfleet_agent::protocol::MAX_OUTPUT_BYTES)
                .collect()
        }),
    }
}

/// Stores a batch in one transaction; the agent deletes its copies only after we answer 200.
///
/// # Errors
/// Database errors (the agent keeps the batch and retries).
pub async fn accept(
    state: &AppState,
    batch: Vec<HandleCallbackParam>,
    key: Option<&str>,
) -> Result<usize, Error> {
    if batch.len() > 1000 {
        return Err(Error::invalid("callback", "at most 1000 results per batch"));
    }
    let key = key.map(str::to_owned);
    let changes = Changes::new(state);
    let (stored, refused, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes;
            let now = changes.now_ms();
            let mut refused = Vec::new();
            let mut stored = 0;
            let reporter = agents::reporter(conn, key.as_deref())?;
            let ids: Vec<RunId> = batch.iter().map(|cb| RunId(cb.log_id)).collect();
            let runs: HashMap<RunId, JobRun> = job_run::reported(conn, &ids)?
                .into_iter()
                .map(|run| (run.id, run))
                .collect();
            for cb in &batch {
                let run_id = RunId(cb.log_id);
                // An unknown run is acknowledged and ignored, as before.
                let Some(run) = runs.get(&run_id) else {
                    continue;
                };
                let mut run = std::borrow::Cow::Borrowed(run);
                match agents::may_report(
                    conn,
                    &reporter,
                    run.group_id,
                    run.agent_address.as_deref(),
                )? {
                    Ok(None) => {}
                    Ok(Some(agent)) => {
                        job_run::set_agent_if_unknown(conn, run_id, &agent)?;
                        run.to_mut().agent_address = Some(agent);
                    }
                    Err(why) => {
                        // Acknowledged, so a confused agent does not resend it forever; the
                        // result changes nothing.
                        tracing::warn!(run_id = cb.log_id, reason = why, "Result refused");
                        refused.push(run_id);
                        continue;
                    }
                }
                if cb.status == Some(RunOutcome::NotStarted) {
                    // Accepted, queued and never started on an agent that then died: it cannot
                    // have run, so it goes out again as the same run, without using a retry.
                    let why = format!(
                        "handed back unstarted: {}",
                        cb.handle_msg.as_deref().unwrap_or("the agent restarted")
                    );
                    changes.requeued(conn, run_id, &why)?;
                    continue;
                }
                let mut result = result_of(cb);
                if result.finished_ms.is_none_or(|t| t <= 0) {
                    result.finished_ms = Some(now);
                }
                if changes.finished(conn, &run, &result)? {
                    stored += 1;
                }
            }
            Ok((stored, refused, changes))
        })
        .await?;
    if !refused.is_empty() {
        tracing::warn!(runs = ?refused, "Results from an agent the runs were not sent to were ignored");
    }
    changes.committed(state);
    Ok(stored)
}
