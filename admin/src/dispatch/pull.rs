//! Pull: an agent with free slots takes due runs of its group over its own connection
//! (`take` up, `runBatch` down), besides the runs the admins push to it.
//!
//! A take claims the runs as a push does (`send::prepare`, one transaction for the batch, with
//! the job's concurrency policy), restricted to the taking agent, then sends them down in
//! `runBatch` calls and stores the agent's answers as a push stores them. Only runs of jobs whose
//! routing lets any live agent of the group run them are taken: first, last, consistent hash,
//! failover and sharding broadcast name the agent, so their runs wait for their push. If the
//! connection drops after the claim, the runs are claimed and unanswered like a push cut short,
//! and the in-doubt monitor asks the group's agents who holds them (the agent's journal says).

use std::sync::Arc;
use std::time::Duration;

use jobfleet_agent::protocol::{MAX_TAKE, TakeResult, TriggerParam};

use crate::db::{agent, executor_group, job::Job, job_run};
use crate::domain::routing::Routing;
use crate::error::Error;
use crate::lifecycle::Changes;
use crate::state::AppState;

use super::send::{self, Answer, Lookups, Prepared};

/// Routings under which any live agent of the group may run a run.
const PULLABLE: [Routing; 6] = [
    Routing::RoundRobin,
    Routing::Random,
    Routing::LeastFrequentlyUsed,
    Routing::LeastRecentlyUsed,
    Routing::Busyover,
    Routing::LeastLoaded,
];

/// Encoded triggers per `runBatch` call at most, under the agent's 2 MiB body cap.
const BATCH_BYTES: usize = 1536 * 1024;

/// Serves a `take` of the agent at `address` (connected here) for at most `max` runs.
///
/// # Errors
/// Database errors claiming the runs (nothing was claimed then).
pub async fn take(state: &AppState, address: &str, max: u32) -> Result<TakeResult, Error> {
    let max = usize::try_from(max.min(MAX_TAKE)).unwrap_or(0);
    let mut result = TakeResult {
        sent: 0,
        accepted: 0,
    };
    if max == 0 {
        return Ok(result);
    }
    let router = state.router.clone();
    let changes = Changes::new(state);
    let taker = address.to_owned();
    let (prepared, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let now = changes.now_ms();
            let mut lookups = Lookups::default();
            let mut prepared = Vec::new();
            for row in agent::list_at(conn, &taker)? {
                let Some(group) = executor_group::find_by_app_name(conn, &row.app_name)? else {
                    continue;
                };
                // Only where routing would consider it: live, approved, not a manual group's
                // stranger.
                let (_, candidates) = lookups.candidates(conn, group.id, now)?;
                if !candidates.iter().any(|c| c.address == taker) {
                    continue;
                }
                let left = max.saturating_sub(prepared.len());
                if left == 0 {
                    break;
                }
                let limit = i64::try_from(left).unwrap_or(i64::MAX);
                for id in job_run::pullable(conn, group.id, now, &PULLABLE, limit)? {
                    prepared.push(send::prepare(
                        conn,
                        &mut changes,
                        &mut lookups,
                        &router,
                        id,
                        Some(&taker),
                    )?);
                }
            }
            send::drop_replaced_in_batch(&mut prepared);
            Ok((prepared, changes))
        })
        .await?;
    changes.committed(state);

    let mut runs: Vec<(Arc<Job>, send::Send)> = Vec::new();
    let mut answers: Vec<Answer> = Vec::new();
    for one in prepared {
        match one {
            Prepared::Taken | Prepared::Ended => {}
            Prepared::NoAgent {
                run,
                message,
                replaced,
                ..
            } => {
                send::kill_on_agents(state, &replaced).await;
                answers.push(Answer::no_agent(run.id, run.triggered_ms, message));
            }
            Prepared::Send {
                job,
                sends,
                replaced,
            } => {
                send::kill_on_agents(state, &replaced).await;
                for one in sends {
                    runs.push((job.clone(), one));
                }
            }
        }
    }
    for batch in batches(&runs, |(job, one)| (job, one)) {
        let triggers: Vec<TriggerParam> = batch
            .iter()
            .map(|(job, one)| super::trigger_param(job, &one.run, state.config.result_linger_ms))
            .collect();
        let now = state.clock.now_ms();
        for (_, one) in batch {
            state
                .metrics
                .fire_lateness
                .observe_ms((now - one.run.scheduled_ms) as f64);
        }
        result.sent += u32::try_from(batch.len()).unwrap_or(u32::MAX);
        match state.agents.run_batch_here(address, &triggers).await {
            Ok(replies) => {
                for ((_, one), reply) in batch.iter().zip(replies) {
                    answers.push(match reply {
                        Ok((msg, taken_by)) => {
                            result.accepted += 1;
                            Answer {
                                run_id: one.run.id,
                                agent: Some(address.to_owned()),
                                accepted: true,
                                message: if msg.is_empty() {
                                    format!("taken by {address}")
                                } else {
                                    format!("taken by {address}: {msg}")
                                },
                                outcome: "accepted",
                                taken_by,
                                claimed_ms: one.run.triggered_ms,
                                starts_in: Duration::ZERO,
                            }
                        }
                        Err(e) => Answer {
                            run_id: one.run.id,
                            agent: Some(address.to_owned()),
                            accepted: false,
                            message: format!("{address} {e}"),
                            outcome: "refused",
                            taken_by: None,
                            claimed_ms: one.run.triggered_ms,
                            starts_in: Duration::ZERO,
                        },
                    });
                }
            }
            // Claimed, maybe running there: the in-doubt monitor settles them.
            Err(e) => {
                tracing::warn!(agent = %address, runs = batch.len(), error = %e, "Taken runs were not answered");
            }
        }
    }
    for answer in &answers {
        send::count(state, answer);
    }
    send::store_answers(state, answers).await?;
    Ok(result)
}

/// The runs in consecutive slices whose triggers fit one `runBatch` call each; `parts` says
/// which job and run an item is.
pub(super) fn batches<T>(runs: &[T], parts: impl Fn(&T) -> (&Job, &send::Send)) -> Vec<&[T]> {
    let mut slices = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in runs.iter().enumerate() {
        let (job, one) = parts(item);
        // Text fields twice over: JSON escapes quotes, backslashes and line ends in two bytes,
        // and a batch by HTTP must stay under the agent's 2 MiB body cap.
        let text = [
            job.command.as_deref(),
            job.script_source.as_deref(),
            job.http_request.as_deref(),
            one.run.env.as_deref(),
            Some(one.run.params.as_str()),
        ]
        .into_iter()
        .flatten()
        .map(str::len)
        .sum::<usize>();
        let size = 512 + 2 * text;
        if i > start && bytes + size > BATCH_BYTES {
            slices.push(&runs[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < runs.len() {
        slices.push(&runs[start..]);
    }
    slices
}
