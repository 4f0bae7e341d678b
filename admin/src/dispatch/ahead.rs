//! Sending ahead: the runs a take found for an agent go down together as soon as they are
//! taken, in one `runBatch` call with each run's `startInMs` (over its connection here, or by
//! HTTP to an agent dialled at its address), and the agent starts each at its millisecond. An
//! address that failed a `runBatch` by HTTP (an XXL-Job executor knows no such call and would
//! not wait for `startInMs` anyway) gets its runs one by one at their times for a minute.
//! Sent one by one at their times, each run cost the admin a task waiting for its millisecond,
//! a frame out, a frame back and the wake-ups between (at 100 fires a second, about half of the
//! admin's CPU went to the link and those tasks; by HTTP, at 500 fires a second, 17 % of a core
//! against 7 %); together, a take costs that once per agent.
//!
//! Only runs an agent's refusal ends, and whose agent judges nothing by what else runs there,
//! go ahead: failover and busyover shop a refused trigger around, one agent at a time; a run
//! that replaces others waits for their kills; and discard-later and cover-early look at the
//! job's running run when the trigger arrives, which must be the run's time. Those go one by one
//! as before. An agent's calls of one take go one after the other, so that its runs arrive in
//! their order. A call that gets no usable answer as a whole sends its runs one by one at their
//! times (their first agent again, which knows a run it already took by its id, then the others
//! in the routing's order), each as its own hand-over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::job::Job;
use crate::domain::policy::BlockStrategy;
use crate::domain::routing::Routing;
use crate::state::AppState;

use super::client::CallError;
use super::send::{self, Answer, Handovers, Prepared, Send};

/// One run to send ahead, with the millisecond it is due at.
struct Early {
    job: Arc<Job>,
    send: Send,
    at_ms: i64,
}

/// The runs of one take that go ahead, by the agent they go to.
#[derive(Default)]
pub(super) struct Ahead {
    by_agent: BTreeMap<String, Vec<Early>>,
}

impl Ahead {
    /// Keeps `prepared` to send ahead if it may go so, or gives it back.
    pub(super) fn keep(
        &mut self,
        state: &AppState,
        prepared: Prepared,
        at_ms: i64,
    ) -> Option<Prepared> {
        let Prepared::Send {
            job,
            sends,
            replaced,
        } = prepared
        else {
            return Some(prepared);
        };
        let goes_ahead = replaced.is_empty()
            && !sends.is_empty()
            && !matches!(job.routing, Routing::Failover | Routing::Busyover)
            && job.block_strategy == BlockStrategy::Serial
            && sends.iter().all(|one| {
                one.addresses
                    .first()
                    .is_some_and(|address| state.agents.takes_batches(address))
            });
        if !goes_ahead {
            return Some(Prepared::Send {
                job,
                sends,
                replaced,
            });
        }
        for send in sends {
            let address = send.addresses[0].clone();
            self.by_agent.entry(address).or_default().push(Early {
                job: job.clone(),
                send,
                at_ms,
            });
        }
        None
    }

    /// Sends each agent's runs in as few calls as fit, one after the other, as one task holding
    /// one hand-over slot; the answers go to the recorder.
    pub(super) async fn send(self, state: &Arc<AppState>, handovers: &Handovers, started: Instant) {
        for (address, runs) in self.by_agent {
            let Ok(permit) = handovers.slots.clone().acquire_owned().await else {
                return;
            };
            let (state, handovers) = (state.clone(), handovers.clone());
            tokio::spawn(async move {
                let sizes: Vec<usize> = super::pull::batches(&runs, |e| (&e.job, &e.send))
                    .iter()
                    .map(|batch| batch.len())
                    .collect();
                let mut runs = runs.into_iter();
                let mut unanswered = Vec::new();
                for size in sizes {
                    let batch: Vec<Early> = runs.by_ref().take(size).collect();
                    unanswered
                        .extend(send_batch(&state, &address, batch, &handovers, started).await);
                    // An agent that did not answer one call is not waited for again: the rest
                    // go one by one, within the hand-over's usual bound.
                    if !unanswered.is_empty() {
                        unanswered.extend(runs.by_ref());
                        break;
                    }
                }
                drop(permit);
                if !unanswered.is_empty() {
                    let one_by_one = unanswered.into_iter().map(|early| {
                        (
                            Prepared::Send {
                                job: early.job,
                                sends: vec![early.send],
                                replaced: Vec::new(),
                            },
                            Some(early.at_ms),
                        )
                    });
                    send::start_one_by_one(&state, one_by_one, &handovers, started).await;
                }
            });
        }
    }
}

/// Sends one call's runs and files their answers; gives the runs back when the call as a whole
/// got no usable answer.
async fn send_batch(
    state: &Arc<AppState>,
    address: &str,
    batch: Vec<Early>,
    handovers: &Handovers,
    started: Instant,
) -> Vec<Early> {
    let recorder = &handovers.answers;
    let now = state.clock.now_ms();
    let triggers: Vec<_> = batch
        .iter()
        .map(|early| {
            let mut trigger =
                super::trigger_param(&early.job, &early.send.run, state.config.result_linger_ms);
            trigger.start_in_ms =
                Some((early.at_ms - now).clamp(0, send::TAKE_AHEAD_MS + send::TAKE_SPAN_MS));
            trigger
        })
        .collect();
    let file = |answer: Answer| {
        send::count(state, &answer);
        // A closed recorder means the admin is stopping (see `start_handovers`).
        let _ = recorder.send(answer);
        state.metrics.dispatch_latency.observe(started.elapsed());
    };
    match state.agents.run_batch(address, &triggers).await {
        Ok(replies) => {
            let answered = state.clock.now_ms();
            for (early, reply) in batch.into_iter().zip(replies) {
                let run = &early.send.run;
                let starts_in =
                    Duration::from_millis((early.at_ms - answered).max(0).unsigned_abs());
                state
                    .metrics
                    .fire_lateness
                    .observe_ms((now.max(early.at_ms) - run.scheduled_ms) as f64);
                file(match reply {
                    Ok((msg, taken_by)) => Answer {
                        run_id: run.id,
                        agent: Some(address.to_owned()),
                        accepted: true,
                        message: format!("accepted by {address}{}", send::suffix(&msg)),
                        outcome: "accepted",
                        taken_by,
                        claimed_ms: run.triggered_ms,
                        starts_in,
                    },
                    Err(e) => Answer {
                        run_id: run.id,
                        agent: Some(address.to_owned()),
                        accepted: false,
                        message: format!("{address} {e}"),
                        outcome: "refused",
                        taken_by: None,
                        claimed_ms: run.triggered_ms,
                        starts_in: Duration::ZERO,
                    },
                });
            }
        }
        // An executor that knows no `runBatch` refuses it, which is expected and not worth a
        // warning; so does a jobfleet agent whose token differs, which every run will say.
        Err(e @ CallError::Refused(_)) => {
            tracing::info!(agent = %address, runs = batch.len(), error = %e, "Runs sent ahead were refused as a whole; sending them one by one");
            return batch;
        }
        Err(e) => {
            tracing::warn!(agent = %address, runs = batch.len(), error = %e, "Runs sent ahead got no answer; sending them one by one");
            return batch;
        }
    }
    Vec::new()
}
