//! Results from agents (`/api/callback`), stored idempotently: a result for an unknown or
//! already-finished run is acknowledged and changes nothing, so agents can resend freely. A
//! stored result creates its follow-ups (retry, child jobs) in the same transaction, through
//! the run lifecycle.

use jobfleet_agent::protocol::{HandleCallbackParam, RunOutcome};

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::AnyConnection;
use crate::db::executor_group::ExecutorGroup;
use crate::db::job_run::{self, Acceptance, JobRun, RunResult};
use crate::db::run_log;
use crate::dispatch::answer::{Answer, HeldAcceptances};
use crate::dispatch::send::{self, Prepared};
use crate::domain::ids::{GroupId, RunId};
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::group_commit::Batcher;
use crate::lifecycle::Changes;
use crate::scheduler::log_keeper;
use crate::service::agents;
use crate::state::{AppState, Reported, ResultsBatch};

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

/// Requests share a transaction while they carry this many results together (a request alone
/// carries up to 1,000): a transaction holds SQLite's write turn, which fires wait for, no longer
/// than one full request's did.
pub const MAX_RESULTS_TOGETHER: usize = 1_000;

/// The results' batcher, as `AppState` holds it.
pub fn batcher() -> ResultsBatch {
    Batcher::weighed(Duration::ZERO, MAX_RESULTS_TOGETHER, |reported| {
        reported.results.len().max(1)
    })
}

/// Stores an agent's request of results; the agent deletes its copies only after we answer 200.
/// Requests that arrive while others are being stored share the next transaction (group commit,
/// `group_commit`): with many agents each sending every `result_linger_ms`, a transaction per
/// request cost the admin its begin, commit and pages written again for each. The runs the
/// results start at once (a workflow's next nodes, child jobs, an immediate retry, a run handed
/// back unstarted) are taken for sending in that same transaction and handed over right after
/// the commit: a separate claim would cost another transaction (a commit, an fsync on MariaDB)
/// and the timer's hop on the path between dependent runs. A taken run whose hand-over is cut
/// short (the admin killed) is one in doubt, which the recovery settles as any.
///
/// # Errors
/// Database errors (the agent keeps the batch and retries); `forbidden` for a key no
/// registration has.
pub async fn accept(
    state: &Arc<AppState>,
    results: Vec<HandleCallbackParam>,
    key: Option<&str>,
) -> Result<(), Error> {
    if results.len() > MAX_RESULTS_TOGETHER {
        return Err(Error::invalid(
            "callback",
            format!("at most {MAX_RESULTS_TOGETHER} results per batch"),
        ));
    }
    let reported = Reported {
        results,
        key: key.map(str::to_owned),
        arrived_ms: state.clock.now_ms(),
        arrived: Instant::now(),
    };
    let writer = state.clone();
    Batcher::submit(&state.results, reported, move |group| {
        store_group(writer.clone(), group)
    })
    .await
    .unwrap_or_else(|_| {
        Err(Error::Internal(anyhow::anyhow!(
            "the results' transaction ended without an answer"
        )))
    })
}

/// Stores requests that came together in one transaction. When it fails for another reason than
/// an unreachable database (a deadlock on MySQL, say), each request is stored on its own, so that
/// no agent's results fail for another's.
async fn store_group(state: Arc<AppState>, group: Vec<Reported>) -> Vec<Result<(), Error>> {
    let group = Arc::new(group);
    match store_taking(&state, &group, 0..group.len()).await {
        Ok(outcomes) => outcomes,
        Err(e) if group.len() == 1 => vec![Err(e)],
        Err(Error::Unavailable(why)) => group
            .iter()
            .map(|_| Err(Error::Unavailable(why.clone())))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, requests = group.len(), "Storing results of several requests together failed; storing each on its own");
            let mut outcomes = Vec::with_capacity(group.len());
            for i in 0..group.len() {
                outcomes.push(match store_taking(&state, &group, i..i + 1).await {
                    Ok(mut one) => one.pop().unwrap_or(Ok(())),
                    Err(e) => Err(e),
                });
            }
            outcomes
        }
    }
}

/// `group[range]` stored in one transaction with the runs they start taken and handed over;
/// should that fail, stored without taking them: taking the new runs must never keep a result
/// from being stored (without them, they go to the timer as before). One outcome per request.
async fn store_taking(
    state: &Arc<AppState>,
    group: &Arc<Vec<Reported>>,
    range: Range<usize>,
) -> Result<Vec<Result<(), Error>>, Error> {
    let handovers = state.scheduler.handovers();
    let held = handovers.as_ref().map(|h| h.held.clone());
    let started = group[range.clone()]
        .iter()
        .map(|r| r.arrived)
        .min()
        .unwrap_or_else(Instant::now);
    match store(
        state,
        group.clone(),
        range.clone(),
        held.as_deref(),
        handovers.is_some(),
    )
    .await
    {
        Ok((outcomes, prepared)) => {
            if let Some(handovers) = handovers {
                send::start_handovers(
                    state,
                    prepared.into_iter().map(|p| (p, None)),
                    &handovers,
                    started,
                )
                .await;
            }
            Ok(outcomes)
        }
        Err(e) if handovers.is_some() => {
            tracing::warn!(error = %e, "Storing results and taking the runs they start failed; storing the results alone");
            store(state, group.clone(), range, held.as_deref(), false)
                .await
                .map(|(outcomes, _)| outcomes)
        }
        Err(e) => Err(e),
    }
}

/// What one transaction of results found.
#[derive(Default)]
struct Found {
    /// One per request, in order.
    outcomes: Vec<Result<(), Error>>,
    /// Runs whose held acceptance no longer needs storing once this commits.
    settled: Vec<RunId>,
    /// Runs whose results were refused (sent to another agent, another group).
    refused: Vec<RunId>,
}

/// One transaction: the results of `group[range]` stored (with the agents' acceptances of those
/// runs that the recorder still holds back, `held`), and with `take_new` the runs they start that
/// are due now taken for sending. A request whose key no registration has is refused alone; a
/// database error fails them all. Returns an outcome per request and the taken runs.
async fn store(
    state: &AppState,
    group: Arc<Vec<Reported>>,
    range: Range<usize>,
    held: Option<&HeldAcceptances>,
    take_new: bool,
) -> Result<(Vec<Result<(), Error>>, Vec<Prepared>), Error> {
    let first_arrival = group[range.clone()]
        .iter()
        .map(|r| r.arrived_ms)
        .min()
        .unwrap_or_else(|| state.clock.now_ms());
    let changes = Changes::at(state, first_arrival);
    let router = state.router.clone();
    let kept_log_bytes = state.config.kept_log_bytes;
    let acceptances: HashMap<RunId, Answer> = held
        .map(|held| {
            held.of(group[range.clone()]
                .iter()
                .flat_map(|r| r.results.iter().map(|cb| RunId(cb.log_id))))
        })
        .unwrap_or_default()
        .into_iter()
        .map(|answer| (answer.run_id, answer))
        .collect();
    let (found, prepared, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let mut found = Found::default();
            let ids: Vec<RunId> = group[range.clone()]
                .iter()
                .flat_map(|r| r.results.iter().map(|cb| RunId(cb.log_id)))
                .collect();
            let runs: HashMap<RunId, JobRun> = job_run::get_all(conn, &ids)?
                .into_iter()
                .map(|run| (run.id, run))
                .collect();
            let mut groups = HashMap::new();
            for reported in &group[range.clone()] {
                let reporter = match agents::reporter(conn, reported.key.as_deref()) {
                    Ok(reporter) => reporter,
                    Err(refused @ Error::Forbidden(_)) => {
                        found.outcomes.push(Err(refused));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let request = Request {
                    results: &reported.results,
                    reporter: &reporter,
                    runs: &runs,
                    acceptances: &acceptances,
                    kept_log_bytes,
                };
                store_request(conn, &mut changes, &mut groups, &request, &mut found)?;
                found.outcomes.push(Ok(()));
            }
            let prepared = if take_new {
                let due = changes.take_due_now();
                send::prepare_all(conn, &mut changes, &router, &due)?
            } else {
                Vec::new()
            };
            Ok((found, prepared, changes))
        })
        .await?;
    if let Some(held) = held {
        held.forget(found.settled);
    }
    if !found.refused.is_empty() {
        tracing::warn!(runs = ?found.refused, "Results from an agent the runs were not sent to were ignored");
    }
    changes.committed(state);
    Ok((found.outcomes, prepared))
}

/// One request's results, with what its transaction read for the whole group.
struct Request<'a> {
    results: &'a [HandleCallbackParam],
    reporter: &'a agents::Reporter,
    runs: &'a HashMap<RunId, JobRun>,
    acceptances: &'a HashMap<RunId, Answer>,
    kept_log_bytes: u64,
}

/// Stores one request's results in the caller's transaction: `found` gathers the runs whose
/// held acceptance is settled and those whose result was refused. A request's logs are kept, and
/// its acceptances settled, only where all its results were stored.
fn store_request(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    groups: &mut HashMap<GroupId, ExecutorGroup>,
    request: &Request<'_>,
    found: &mut Found,
) -> Result<(), Error> {
    let now = changes.now_ms();
    let Found {
        settled, refused, ..
    } = found;
    let mut finishing = Vec::with_capacity(request.results.len());
    // The logs that came whole with the results, to keep with them.
    let mut logs: Vec<(RunId, &str)> = Vec::new();
    // Runs whose held acceptance this transaction stores with their result.
    let mut with_held = Vec::new();
    // Runs whose agent only the reporter names (the result overtook the trigger's answer).
    let mut named: Vec<(RunId, String)> = Vec::new();
    for cb in request.results {
        let run_id = RunId(cb.log_id);
        // An unknown run is acknowledged and ignored, as before.
        let Some(run) = request.runs.get(&run_id) else {
            continue;
        };
        let mut run = std::borrow::Cow::Borrowed(run);
        // An acceptance answers one claim; once the run was handed back and claimed anew, the
        // old one is not this run's. Read, not taken: a transaction run again after a deadlock
        // needs them all again.
        let held = request
            .acceptances
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
            request.reporter,
            groups,
            run.group_id,
            run.agent_address.as_deref(),
        )? {
            Ok(None) => {}
            Ok(Some(agent)) => {
                // The result overtook the trigger's answer (or the sending admin died before
                // storing it): the reporter is recorded as the run's agent in the result's own
                // write, not a statement of its own.
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
                // Acknowledged, so a confused agent does not resend it forever; the result
                // changes nothing.
                tracing::warn!(run_id = cb.log_id, reason = why, "Result refused");
                refused.push(run_id);
                continue;
            }
        }
        if cb.status == Some(RunOutcome::NotStarted) {
            // Accepted, queued and never started on an agent that then died: it cannot have
            // run, so it goes out again as the same run, without using a retry.
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
    let stored_now = changes.finished_all(conn, &finishing)?;
    if stored_now < finishing.len() {
        // A result not stored (its run had ended) still says where the run was, for its log;
        // stored ones carried it in their own write.
        for (run_id, agent) in &named {
            job_run::set_agent_if_unknown(conn, *run_id, agent)?;
        }
    }
    // Kept only where every result was stored (a run that had ended keeps what it has);
    // otherwise the log keeper reads them back from the agents as it does for long logs.
    if stored_now == finishing.len() && request.kept_log_bytes > 0 {
        let kept: Vec<_> = logs
            .into_iter()
            .map(|(run_id, log)| (run_id, log_keeper::kept_whole(log, request.kept_log_bytes)))
            .collect();
        let rows: Vec<_> = kept
            .iter()
            .map(|(run_id, kept)| {
                run_log::KeptLog::new(*run_id, &kept.content, kept.bytes, kept.truncated, now)
            })
            .collect();
        run_log::insert_kept_all(conn, &rows)?;
    }
    // When a result was not stored (its run had ended), its acceptance stays held for the
    // recorder to store alone, as before.
    if stored_now == finishing.len() {
        settled.extend(with_held);
    }
    Ok(())
}
