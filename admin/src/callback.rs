//! Results from agents (`/api/callback`), stored idempotently: a result for an unknown or
//! already-finished run is acknowledged and changes nothing, so agents can resend freely. A
//! stored result creates its follow-ups (retry, child jobs) in the same transaction, through
//! the run lifecycle.

use jobfleet_agent::protocol::{HandleCallbackParam, RunOutcome};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::db::job_run::{self, Acceptance, JobRun, RunResult};
use crate::db::run_log;
use crate::dispatch::answer::{Answer, HeldAcceptances};
use crate::dispatch::send::{self, Prepared};
use crate::domain::ids::RunId;
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::lifecycle::Changes;
use crate::scheduler::log_keeper;
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
        acceptance: None,
    }
}

/// Stores a batch in one transaction; the agent deletes its copies only after we answer 200.
/// The runs the results start at once (a workflow's next nodes, child jobs, an immediate retry,
/// a run handed back unstarted) are taken for sending in that same transaction and handed over
/// right after the commit: a separate claim would cost another transaction (a commit, an fsync
/// on MariaDB) and the timer's hop on the path between dependent runs. A taken run whose
/// hand-over is cut short (the admin killed) is one in doubt, which the recovery settles as any.
///
/// # Errors
/// Database errors (the agent keeps the batch and retries).
pub async fn accept(
    state: &Arc<AppState>,
    batch: Vec<HandleCallbackParam>,
    key: Option<&str>,
) -> Result<usize, Error> {
    if batch.len() > 1000 {
        return Err(Error::invalid("callback", "at most 1000 results per batch"));
    }
    let batch = Arc::new(batch);
    let key = key.map(str::to_owned);
    let handovers = state.scheduler.handovers();
    let held = handovers.as_ref().map(|h| h.held.clone());
    let started = Instant::now();
    match store(
        state,
        batch.clone(),
        key.clone(),
        held.as_deref(),
        handovers.is_some(),
    )
    .await
    {
        Ok((stored, prepared)) => {
            if let Some(handovers) = handovers {
                send::start_handovers(
                    state,
                    prepared.into_iter().map(|p| (p, None)),
                    &handovers,
                    started,
                )
                .await;
            }
            Ok(stored)
        }
        // Taking the new runs must never keep a result from being stored: without them, they go
        // to the timer as before.
        Err(e) if handovers.is_some() => {
            tracing::warn!(error = %e, "Storing results and taking the runs they start failed; storing the results alone");
            store(state, batch, key, held.as_deref(), false)
                .await
                .map(|(stored, _)| stored)
        }
        Err(e) => Err(e),
    }
}

/// One transaction: the batch's results stored (with the agents' acceptances of those runs
/// that the recorder still holds back, `held`), and with `take_new` the runs they start that are
/// due now taken for sending. Returns how many results were stored and the taken runs.
async fn store(
    state: &AppState,
    batch: Arc<Vec<HandleCallbackParam>>,
    key: Option<String>,
    held: Option<&HeldAcceptances>,
    take_new: bool,
) -> Result<(usize, Vec<Prepared>), Error> {
    let changes = Changes::new(state);
    let router = state.router.clone();
    let kept_log_bytes = state.config.kept_log_bytes;
    let acceptances: HashMap<RunId, Answer> = held
        .map(|held| held.of(batch.iter().map(|cb| RunId(cb.log_id))))
        .unwrap_or_default()
        .into_iter()
        .map(|answer| (answer.run_id, answer))
        .collect();
    let (stored, settled, refused, prepared, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let now = changes.now_ms();
            let mut refused = Vec::new();
            // Runs whose held acceptance no longer needs storing once this commits.
            let mut settled = Vec::new();
            let mut finishing = Vec::with_capacity(batch.len());
            // The logs that came whole with the results, to keep with them.
            let mut logs: Vec<(RunId, &str)> = Vec::new();
            let reporter = agents::reporter(conn, key.as_deref())?;
            let mut groups = HashMap::new();
            // Runs whose held acceptance this transaction stores with their result.
            let mut with_held = Vec::new();
            // Runs whose agent only the reporter names (the result overtook the trigger's answer).
            let mut named: Vec<(RunId, String)> = Vec::new();
            let ids: Vec<RunId> = batch.iter().map(|cb| RunId(cb.log_id)).collect();
            let runs: HashMap<RunId, JobRun> = job_run::get_all(conn, &ids)?
                .into_iter()
                .map(|run| (run.id, run))
                .collect();
            for cb in batch.iter() {
                let run_id = RunId(cb.log_id);
                // An unknown run is acknowledged and ignored, as before.
                let Some(run) = runs.get(&run_id) else {
                    continue;
                };
                let mut run = std::borrow::Cow::Borrowed(run);
                // An acceptance answers one claim; once the run was handed back and claimed
                // anew, the old one is not this run's. Read, not taken: a transaction run again
                // after a deadlock needs them all again.
                let held = acceptances
                    .get(&run_id)
                    .filter(|answer| answer.claimed_ms == run.triggered_ms)
                    .cloned();
                let had_held = held.is_some();
                if let Some(answer) = &held
                    && run.agent_address.is_none()
                {
                    run.to_mut().agent_address.clone_from(&answer.agent);
                }
                let mut acceptance = held.map(|answer| Acceptance {
                    agent_address: answer.agent,
                    trigger_msg: Some(answer.message),
                    agent_instance: answer.taken_by.as_ref().map(|t| t.instance_id.clone()),
                    agent_seq: answer
                        .taken_by
                        .as_ref()
                        .map(|t| i64::try_from(t.seq).unwrap_or(i64::MAX)),
                });
                match agents::may_report(
                    conn,
                    &reporter,
                    &mut groups,
                    run.group_id,
                    run.agent_address.as_deref(),
                )? {
                    Ok(None) => {}
                    Ok(Some(agent)) => {
                        // The result overtook the trigger's answer (or the sending admin died
                        // before storing it): the reporter is recorded as the run's agent in
                        // the result's own write, not a statement of its own.
                        acceptance = Some(Acceptance {
                            agent_address: Some(agent.clone()),
                            trigger_msg: None,
                            agent_instance: None,
                            agent_seq: None,
                        });
                        named.push((run_id, agent.clone()));
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
                    // It goes out again: a late acceptance must not mark it running.
                    settled.push(run_id);
                    continue;
                }
                let mut result = result_of(cb);
                if result.finished_ms.is_none_or(|t| t <= 0) {
                    result.finished_ms = Some(now);
                }
                if had_held {
                    with_held.push(run_id);
                }
                result.acceptance = acceptance;
                if let Some(log) = &cb.log {
                    logs.push((run_id, log.as_str()));
                }
                finishing.push((run.into_owned(), result));
            }
            let stored = changes.finished_all(conn, &finishing)?;
            if stored < finishing.len() {
                // A result not stored (its run had ended) still says where the run was, for its
                // log; stored ones carried it in their own write.
                for (run_id, agent) in &named {
                    job_run::set_agent_if_unknown(conn, *run_id, agent)?;
                }
            }
            // Kept only where every result was stored (a run that had ended keeps what it has);
            // otherwise the log keeper reads them back from the agents as it does for long logs.
            if stored == finishing.len() && kept_log_bytes > 0 {
                let kept: Vec<_> = logs
                    .into_iter()
                    .map(|(run_id, log)| (run_id, log_keeper::kept_whole(log, kept_log_bytes)))
                    .collect();
                let rows: Vec<_> = kept
                    .iter()
                    .map(|(run_id, kept)| {
                        run_log::KeptLog::new(
                            *run_id,
                            &kept.content,
                            kept.bytes,
                            kept.truncated,
                            now,
                        )
                    })
                    .collect();
                run_log::insert_kept_all(conn, &rows)?;
            }
            // When a result was not stored (its run had ended), its acceptance stays held for
            // the recorder to store alone, as before.
            if stored == finishing.len() {
                settled.extend(with_held);
            }
            let prepared = if take_new {
                let due = changes.take_due_now();
                send::prepare_all(conn, &mut changes, &router, &due)?
            } else {
                Vec::new()
            };
            Ok((stored, settled, refused, prepared, changes))
        })
        .await?;
    if let Some(held) = held {
        held.forget(settled);
    }
    if !refused.is_empty() {
        tracing::warn!(runs = ?refused, "Results from an agent the runs were not sent to were ignored");
    }
    changes.committed(state);
    Ok((stored, prepared))
}
