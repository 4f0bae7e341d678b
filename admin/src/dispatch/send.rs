//! Sending pending runs: take them (one admin wins), apply each job's concurrency policy, pick
//! agents by its routing strategy, hand the triggers over, record the answers, and create the
//! retry when no agent took one.
//!
//! The timer sends the runs due in the same instant as one batch: one transaction takes them
//! all, the hand-overs go out in parallel, and the answers are stored by the recorder, which
//! stores whatever answers have arrived in one transaction. Per run, a transaction would cost a
//! commit (an fsync on MariaDB) and the single SQLite writer's turn; per batch, they are shared.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobfleet_agent::protocol::HostMetrics;

use crate::db::job::Job;
use crate::db::job_run::{self, JobRun};
use crate::db::write_turn::Urgency;
use crate::db::{AnyConnection, agent, executor_group};
use crate::domain::ids::{GroupId, RunId};
use crate::domain::policy::Concurrency;
use crate::domain::policy::{AddressMode, RunStatus, TriggerKind};
use crate::domain::routing::Routing;
use crate::error::Error;
use crate::lifecycle::{self, Changes};
use crate::state::AppState;
use actix_web::web;
use tokio::sync::mpsc;

pub use super::answer::{Answer, HOLD_ACCEPTANCE, Handovers, HeldAcceptances};
use super::client::CallError;
use super::routing::{Candidate, load_of};

/// The timer takes runs before they are due, and each hand-over then waits for its
/// millisecond: a take starts `TAKE_AHEAD_MS` before the earliest run is due and takes every run
/// due within `TAKE_SPAN_MS` after that, so the runs of the next moments share one transaction
/// (at 100 fires a second, about nine takes a second instead of a hundred: a take per fire was
/// the largest part of the admin's CPU at that rate, and a 50 ms span still left them 9 % of
/// it), and a
/// hand-over no longer starts only after its take. The
/// concurrency policy is judged at the take, up to `TAKE_AHEAD_MS + TAKE_SPAN_MS` early; an
/// admin that dies in between leaves taken runs that the in-doubt recovery sends.
///
/// 50 ms rather than 10: the first runs of a take reach their agent that much sooner, and an
/// agent starts a run only once its acceptance is on disk (its journal's fsync), which on a busy
/// disk takes tens of milliseconds; with 10 ms, runs whose take left them under 20 ms were
/// late by over 20 ms three to four times as often as those left 50 ms or more (BENCHMARKS.md,
/// issue 17). A take also has 40 ms more before it counts as a backlog's (`ON_TIME_WITHIN_MS`).
pub const TAKE_AHEAD_MS: i64 = 50;
/// See [`TAKE_AHEAD_MS`].
pub const TAKE_SPAN_MS: i64 = 100;

/// One trigger to hand over: the run and the agents to try, in order.
#[derive(Debug)]
pub struct Send {
    pub(super) run: JobRun,
    pub(super) addresses: Vec<String>,
}

#[derive(Debug)]
pub enum Prepared {
    /// Another admin or task took the run, or it is gone.
    Taken,
    /// Ended without sending (concurrency policy, disabled job), with why.
    Ended,
    /// No agent may take the run now, with why.
    NoAgent {
        run: Box<JobRun>,
        job: Arc<Job>,
        message: String,
        /// Runs this one replaces, to kill on their agents all the same.
        replaced: Vec<JobRun>,
    },
    Send {
        job: Arc<Job>,
        sends: Vec<Send>,
        /// Runs this one replaces, to kill on their agents.
        replaced: Vec<JobRun>,
    },
}

/// The agents a run of `group_id` may go to now: the group's manual list in its order, or its
/// live agents in address order with their heartbeat load.
///
/// # Errors
/// Database errors; `NotFound` when the group is gone.
pub fn candidates(
    conn: &mut AnyConnection,
    group_id: GroupId,
    now_ms: i64,
) -> Result<(String, Vec<Candidate>), Error> {
    let group = executor_group::get(conn, group_id)?;
    if group.address_mode == AddressMode::Manual {
        // The operator's order is kept: it is what `first` and `failover` go by.
        let mut addresses: Vec<String> = Vec::new();
        for address in group.addresses.iter() {
            let address = if address.ends_with('/') {
                address.to_owned()
            } else {
                format!("{address}/")
            };
            if address.len() > 1 && !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        return Ok((
            group.app_name,
            addresses
                .into_iter()
                .map(|address| Candidate {
                    address,
                    load: None,
                    labels: Default::default(),
                    free_mem_mb: None,
                    beat_ms: 0,
                })
                .collect(),
        ));
    }
    let live = agent::list_live(
        conn,
        &group.app_name,
        crate::domain::agent::live_since(now_ms),
    )?;
    Ok((
        group.app_name,
        live.into_iter()
            .map(|a| {
                let metrics = serde_json::from_str::<HostMetrics>(&a.metrics).ok();
                Candidate {
                    load: metrics.as_ref().map(load_of),
                    free_mem_mb: metrics.as_ref().map(super::routing::free_mem_of),
                    beat_ms: a.last_seen_ms,
                    labels: jobfleet_agent::protocol::labels::parse_labels(&a.labels)
                        .unwrap_or_default(),
                    address: a.address,
                }
            })
            .collect(),
    ))
}

/// Groups and their candidates read once per batch: the runs due in one instant are often of
/// few groups. (Jobs are read once per transaction by `Changes::jobs`.)
#[derive(Default)]
pub(super) struct Lookups {
    groups: HashMap<GroupId, (String, Vec<Candidate>)>,
}

impl Lookups {
    pub(super) fn candidates(
        &mut self,
        conn: &mut AnyConnection,
        group_id: GroupId,
        now: i64,
    ) -> Result<(String, Vec<Candidate>), Error> {
        if let Some(found) = self.groups.get(&group_id) {
            return Ok(found.clone());
        }
        let found = candidates(conn, group_id, now)?;
        self.groups.insert(group_id, found.clone());
        Ok(found)
    }
}

pub(super) fn prepare(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    lookups: &mut Lookups,
    state_router: &super::routing::Router,
    run_id: RunId,
    only: Option<&str>,
) -> Result<Prepared, Error> {
    if !lifecycle::claimed(conn, run_id, changes.now_ms())? {
        return Ok(Prepared::Taken);
    }
    let run = job_run::get(conn, run_id)?;
    prepare_claimed(conn, changes, lookups, state_router, run, only)
}

/// [`prepare`] for a run this transaction has claimed.
fn prepare_claimed(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    lookups: &mut Lookups,
    state_router: &super::routing::Router,
    run: JobRun,
    only: Option<&str>,
) -> Result<Prepared, Error> {
    let now = changes.now_ms();
    let run_id = run.id;
    let Some(owner) = changes.jobs().get(conn, run.job_id)? else {
        changes.skipped(conn, run_id, "the job was deleted")?;
        return Ok(Prepared::Ended);
    };
    if matches!(run.trigger_kind.as_str(), "schedule" | "misfire") && !owner.enabled {
        changes.skipped(conn, run_id, "the job was disabled before this fire")?;
        return Ok(Prepared::Ended);
    }
    let mut replaced = Vec::new();
    match owner.concurrency {
        Concurrency::Allow => {}
        Concurrency::Forbid => {
            if let Some(other) = job_run::in_flight_before(conn, owner.id, run_id)?.first() {
                changes.skipped(
                    conn,
                    run_id,
                    &format!(
                        "skipped by concurrency policy forbid: run {} of this job is still {}",
                        other.id,
                        if other.status == RunStatus::Running {
                            "running"
                        } else {
                            "being sent"
                        }
                    ),
                )?;
                return Ok(Prepared::Ended);
            }
        }
        Concurrency::Replace => {
            for other in job_run::in_flight_before(conn, owner.id, run_id)? {
                if changes.ended_by_admin(
                    conn,
                    other.id,
                    RunStatus::Killed,
                    &format!("replaced by run {run_id} (concurrency policy replace)"),
                )? {
                    replaced.push(other);
                }
            }
        }
    }
    let candidates = match eligible(conn, lookups, &owner, only, now)? {
        Ok(candidates) => candidates,
        // The runs it replaced are ended all the same, and still killed on their agents.
        Err(message) => {
            return Ok(Prepared::NoAgent {
                run: Box::new(run),
                job: owner,
                message,
                replaced,
            });
        }
    };
    let routing = owner.routing;
    let sends = if routing == Routing::ShardingBroadcast
        && only.is_none()
        && run.shard_total == 1
        && run.trigger_kind != TriggerKind::Retry
    {
        shard(conn, &run, &candidates, now)?
    } else {
        vec![Send {
            addresses: state_router.order(routing, owner.id, &candidates, now),
            run,
        }]
    };
    Ok(Prepared::Send {
        job: owner,
        sends,
        replaced,
    })
}

/// The agents a run of `owner` may go to now (only `only` when named), or why there is none.
fn eligible(
    conn: &mut AnyConnection,
    lookups: &mut Lookups,
    owner: &Job,
    only: Option<&str>,
    now: i64,
) -> Result<Result<Vec<Candidate>, String>, Error> {
    let (app_name, mut candidates) = lookups.candidates(conn, owner.group_id, now)?;
    if let Some(address) = only {
        candidates.retain(|c| c.address == address);
    }
    let wanted = owner.agent_labels();
    if !wanted.is_empty() {
        candidates.retain(|c| jobfleet_agent::protocol::labels::satisfies(&c.labels, &wanted));
        if candidates.is_empty() {
            return Ok(Err(format!(
                "no live agent in group `{app_name}` has the labels {}",
                jobfleet_agent::protocol::labels::format_labels(&wanted)
            )));
        }
    }
    if candidates.is_empty() {
        return Ok(Err(format!("no live agent in group `{app_name}`")));
    }
    if owner.routing == Routing::LeastLoaded
        && let Some(memory_mb) = owner.limit_memory_mb
    {
        candidates = super::routing::with_memory_for(candidates, memory_mb);
        if candidates.is_empty() {
            return Ok(Err(format!(
                "no live agent in group `{app_name}` has the {memory_mb} MB free that the job's memory limit asks for (least_loaded)"
            )));
        }
    }
    Ok(Ok(candidates))
}

/// Splits a broadcast into one run per live agent: this run is shard 0, the others are new rows
/// of the same slot (the unique key covers each shard), each taken at once.
fn shard(
    conn: &mut AnyConnection,
    run: &JobRun,
    candidates: &[Candidate],
    now: i64,
) -> Result<Vec<Send>, Error> {
    let total = i32::try_from(candidates.len()).unwrap_or(i32::MAX);
    job_run::set_shard_total(conn, run.id, total)?;
    let mut sends = Vec::with_capacity(candidates.len());
    for (index, candidate) in candidates.iter().enumerate() {
        let id = if index == 0 {
            run.id
        } else {
            let id = lifecycle::created(
                conn,
                &job_run::NewJobRun {
                    job_id: run.job_id,
                    group_id: run.group_id,
                    first_run_id: None,
                    attempt: run.attempt,
                    trigger_kind: run.trigger_kind,
                    fire_slot_ms: run.fire_slot_ms,
                    scheduled_ms: run.scheduled_ms,
                    status: RunStatus::Pending,
                    params: run.params.clone(),
                    shard_index: i32::try_from(index).unwrap_or(i32::MAX),
                    shard_total: total,
                    created_ms: run.created_ms,
                    workflow_node_id: run.workflow_node_id,
                    node_attempt: run.node_attempt,
                    timeout_s: run.timeout_s,
                    env: run.env.clone(),
                },
            )?;
            lifecycle::claimed(conn, id, now)?;
            id
        };
        sends.push(Send {
            run: job_run::get(conn, id)?,
            addresses: vec![candidate.address.clone()],
        });
    }
    Ok(sends)
}

pub(super) async fn hand_over(state: &AppState, job: &Job, routing: Routing, send: Send) -> Answer {
    let trigger = super::trigger_param(job, &send.run, state.config.result_linger_ms);
    let lateness = state.clock.now_ms() - send.run.scheduled_ms;
    state.metrics.fire_lateness.observe_ms(lateness as f64);
    let mut reasons = Vec::new();
    // A refusal is the agent's own answer (busy, discard later); only these strategies
    // shop a refused trigger around.
    let moves_on_refusal = matches!(routing, Routing::Failover | Routing::Busyover);
    for address in &send.addresses {
        if routing == Routing::Busyover
            && send.addresses.len() > 1
            && let Err(e) = state.agents.idle_beat(address, job.id).await
        {
            reasons.push(format!("{address} busy: {e}"));
            continue;
        }
        match state.agents.run(address, &trigger).await {
            Ok((msg, taken_by)) => {
                return Answer {
                    taken_by,
                    claimed_ms: send.run.triggered_ms,
                    starts_in: Duration::ZERO,
                    run_id: send.run.id,
                    agent: Some(address.clone()),
                    accepted: true,
                    message: if reasons.is_empty() {
                        format!("accepted by {address}{}", suffix(&msg))
                    } else {
                        format!(
                            "accepted by {address}{} after: {}",
                            suffix(&msg),
                            reasons.join("; ")
                        )
                    },
                    outcome: "accepted",
                };
            }
            Err(e) => {
                tracing::warn!(run_id = %send.run.id, agent = %address, error = %e, "Trigger not accepted");
                let refused = matches!(e, CallError::Refused(_));
                reasons.push(format!("{address} {e}"));
                if refused && !moves_on_refusal {
                    return Answer {
                        run_id: send.run.id,
                        agent: Some(address.clone()),
                        accepted: false,
                        message: reasons.join("; "),
                        outcome: "refused",
                        taken_by: None,
                        claimed_ms: send.run.triggered_ms,
                        starts_in: Duration::ZERO,
                    };
                }
            }
        }
    }
    Answer {
        run_id: send.run.id,
        agent: None,
        accepted: false,
        message: format!("no agent accepted the trigger: {}", reasons.join("; ")),
        outcome: "unreachable",
        taken_by: None,
        claimed_ms: send.run.triggered_ms,
        starts_in: Duration::ZERO,
    }
}

/// Kills on their agents runs the admin has already ended `killed` (a concurrency policy's
/// replace, a cancelled workflow run). Best effort: the agent may be gone.
pub async fn kill_on_agents(state: &AppState, replaced: &[JobRun]) {
    for old in replaced {
        let address = old
            .agent_address
            .clone()
            .or_else(|| held_agent(state, old.id));
        if let Some(address) = &address
            && let Err(e) = state.agents.kill(address, old.job_id, old.id).await
        {
            tracing::warn!(run_id = %old.id, agent = %address, error = %e, "Could not kill the run on its agent");
        }
    }
}

pub(super) fn suffix(msg: &str) -> String {
    if msg.is_empty() {
        String::new()
    } else {
        format!(": {msg}")
    }
}

/// Sends run `run_id` if it is still pending and nobody took it, and stores the answer before
/// returning. `only` restricts it to one agent of the group (a manual trigger that names one).
///
/// # Errors
/// Database errors. The run then stays pending (not taken) or taken-and-pending, and the
/// recovery monitor finishes the job.
pub async fn dispatch(state: &AppState, run_id: RunId, only: Option<String>) -> Result<(), Error> {
    let started = Instant::now();
    let router = state.router.clone();
    let changes = Changes::new(state);
    let (prepared, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let prepared = prepare(
                conn,
                &mut changes,
                &mut Lookups::default(),
                &router,
                run_id,
                only.as_deref(),
            )?;
            Ok((prepared, changes))
        })
        .await?;
    changes.committed(state);
    let prepared = in_reach_order(state, prepared);
    let answers = send_prepared(state, prepared).await;
    for answer in &answers {
        count(state, answer);
    }
    store_answers(state, answers).await?;
    state.metrics.dispatch_latency.observe(started.elapsed());
    Ok(())
}

/// Takes the runs `run_ids` in the caller's transaction: each claimed (one admin wins) and
/// prepared for its hand-over, or ended without one. A batch is claimed and read with a few
/// statements when nobody else took any of its runs (the usual case: the claims of a burst were
/// a round trip per run on MariaDB), run by run otherwise.
///
/// # Errors
/// Database errors (the caller's transaction rolls back, and no run is taken).
pub fn prepare_all(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    router: &super::routing::Router,
    run_ids: &[RunId],
) -> Result<Vec<Prepared>, Error> {
    let mut lookups = Lookups::default();
    let mut prepared =
        if run_ids.len() > 1 && lifecycle::all_claimed(conn, run_ids, changes.now_ms())? {
            let mut runs: HashMap<RunId, JobRun> = job_run::get_all(conn, run_ids)?
                .into_iter()
                .map(|run| (run.id, run))
                .collect();
            changes
                .jobs()
                .read_all(conn, runs.values().map(|run| run.job_id))?;
            run_ids
                .iter()
                .map(|id| {
                    let run = runs.remove(id).ok_or(Error::NotFound("run"))?;
                    prepare_claimed(conn, changes, &mut lookups, router, run, None)
                })
                .collect::<Result<Vec<_>, Error>>()?
        } else {
            run_ids
                .iter()
                .map(|&id| prepare(conn, changes, &mut lookups, router, id, None))
                .collect::<Result<Vec<_>, Error>>()?
        };
    drop_replaced_in_batch(&mut prepared);
    Ok(prepared)
}

/// A run that a later run of the same batch replaced (concurrency policy `replace`, two fires
/// within one take, or a pulled backlog) is stored killed already: it must not go out at all,
/// and there is nothing to kill for it on an agent. Sent, it would start after its replacement's
/// kill had passed. The kills it carries for runs outside the batch still happen.
pub(super) fn drop_replaced_in_batch(prepared: &mut [Prepared]) {
    let mut replaced = std::collections::HashSet::new();
    let mut in_batch = std::collections::HashSet::new();
    for one in prepared.iter() {
        match one {
            Prepared::Send {
                sends, replaced: r, ..
            } => {
                replaced.extend(r.iter().map(|run| run.id));
                in_batch.extend(sends.iter().map(|send| send.run.id));
            }
            Prepared::NoAgent {
                run, replaced: r, ..
            } => {
                replaced.extend(r.iter().map(|run| run.id));
                in_batch.insert(run.id);
            }
            Prepared::Taken | Prepared::Ended => {}
        }
    }
    if replaced.is_disjoint(&in_batch) {
        return;
    }
    for one in prepared.iter_mut() {
        match one {
            Prepared::Send {
                sends,
                replaced: kills,
                ..
            } => {
                sends.retain(|send| !replaced.contains(&send.run.id));
                kills.retain(|old| !in_batch.contains(&old.id));
                if sends.is_empty() && kills.is_empty() {
                    *one = Prepared::Ended;
                }
            }
            // Its refusal would store nothing on a run already killed: only its kills are left.
            Prepared::NoAgent {
                run,
                job,
                replaced: kills,
                ..
            } => {
                kills.retain(|old| !in_batch.contains(&old.id));
                if replaced.contains(&run.id) {
                    *one = if kills.is_empty() {
                        Prepared::Ended
                    } else {
                        Prepared::Send {
                            job: job.clone(),
                            sends: Vec::new(),
                            replaced: std::mem::take(kills),
                        }
                    };
                }
            }
            Prepared::Taken | Prepared::Ended => {}
        }
    }
}

/// Sends the runs `due` (each with the millisecond it is due at, now or within the timer's
/// take-ahead): one transaction takes them all, then each hand-over goes out as its own task
/// (`start_handovers`) at its millisecond. `taken` is called once that transaction has ended,
/// with the runs it took (none when it failed): the timer stops holding the runs back from a
/// second batch then. Returns once the runs are taken and their hand-overs started.
///
/// # Errors
/// Database errors taking the batch, after each run was tried on its own (so one bad run does
/// not hold the others back); the runs not taken stay pending for the recovery monitor.
pub async fn dispatch_batch(
    state: &web::Data<AppState>,
    due: Vec<(RunId, i64)>,
    handovers: &Handovers,
    taken: impl FnOnce(&[RunId]),
) -> Result<(), Error> {
    let started = Instant::now();
    let router = state.router.clone();
    let ids: Vec<RunId> = due.iter().map(|(id, _)| *id).collect();
    let changes = Changes::new(state);
    let take = move |conn: &mut AnyConnection| {
        let mut changes = changes.afresh();
        let prepared = prepare_all(conn, &mut changes, &router, &ids)?;
        Ok((prepared, changes))
    };
    let urgency = take_urgency(&due, state.clock.now_ms());
    let prepared_or_failed = state.db.transaction_with(urgency, take).await;
    let took: Vec<RunId> = match &prepared_or_failed {
        // `prepare_all` answers each run in the order given.
        Ok((prepared, _)) => due
            .iter()
            .zip(prepared)
            .filter(|(_, one)| !matches!(one, Prepared::Taken))
            .map(|((id, _), _)| *id)
            .collect(),
        Err(_) => Vec::new(),
    };
    taken(&took);
    let prepared = match prepared_or_failed {
        Ok((prepared, changes)) => {
            changes.committed(state);
            prepared
        }
        Err(e) if due.len() > 1 => {
            tracing::warn!(runs = due.len(), error = %e, "Taking a batch failed; sending its runs one by one");
            let mut last = Ok(());
            for (id, at_ms) in due {
                wait_until(state, at_ms).await;
                if let Err(e) = dispatch(state, id, None).await {
                    last = Err(e);
                }
            }
            return last;
        }
        Err(e) => return Err(e),
    };
    // `prepare_all` answers each run in the order given.
    let timed = prepared
        .into_iter()
        .zip(due.into_iter().map(|(_, at_ms)| Some(at_ms)));
    start_handovers(state, timed, handovers, started).await;
    Ok(())
}

/// A take late by less than this is still on time: its timer woke late, or it waited for one
/// of the batches being taken.
const ON_TIME_WITHIN_MS: i64 = TAKE_SPAN_MS;

/// How a take of `due` waits for SQLite's write turn at `now_ms`. On time, it goes before the
/// writers waiting, so that its runs reach their agents by their time. A backlog's take is
/// late anyway and waits its turn: the results' stores between two takes then keep the agents
/// from being sent more than they can queue (with the turn first, a burst of 50,000 filled the
/// agents' queues and 3,400–4,400 runs were refused).
fn take_urgency(due: &[(RunId, i64)], now_ms: i64) -> Urgency {
    let earliest = due.iter().map(|(_, at_ms)| *at_ms).min();
    if earliest.is_some_and(|earliest| earliest >= now_ms - ON_TIME_WITHIN_MS) {
        Urgency::Due
    } else {
        Urgency::InTurn
    }
}

/// Sleeps until `at_ms` on the admin's clock, at most the timer's take-ahead (a clock set back
/// does not hold a run up for longer).
pub(super) async fn wait_until(state: &AppState, at_ms: i64) {
    let wait_ms = (at_ms - state.clock.now_ms()).clamp(0, TAKE_AHEAD_MS + TAKE_SPAN_MS);
    if wait_ms > 0 {
        tokio::time::sleep(Duration::from_millis(wait_ms.unsigned_abs())).await;
    }
}

/// `prepared` with each send's agents in the order they can be reached (`reach_order`): for
/// runs just taken, which no agent was offered under this claim. Not for the runs of a call
/// sent ahead that failed (`ahead`): their first agent may hold them from that call.
fn in_reach_order(state: &AppState, mut prepared: Prepared) -> Prepared {
    if let Prepared::Send { sends, .. } = &mut prepared {
        for send in sends {
            state.agents.reach_order(&mut send.addresses);
        }
    }
    prepared
}

/// Hands each prepared run over as its own task (a slow agent holds up no other run), holding
/// one of the hand-over slots, and sends its answer to the recorder. A run with a time waits
/// for it (the timer takes runs a little before they are due), or goes ahead with the others
/// its agent takes now (`ahead`). Returns once every task has started;
/// `started` is when the runs were taken, for the dispatch latency metric.
pub async fn start_handovers(
    state: &Arc<AppState>,
    prepared: impl IntoIterator<Item = (Prepared, Option<i64>)>,
    handovers: &Handovers,
    started: Instant,
) {
    let mut ahead = super::ahead::Ahead::default();
    let one_by_one: Vec<_> = prepared
        .into_iter()
        .map(|(one, at_ms)| (in_reach_order(state, one), at_ms))
        .filter_map(|(one, at_ms)| match at_ms {
            Some(at_ms) => ahead.keep(state, one, at_ms).map(|one| (one, Some(at_ms))),
            None => Some((one, None)),
        })
        .collect();
    start_one_by_one(state, one_by_one, handovers, started).await;
    ahead.send(state, handovers, started).await;
}

/// [`start_handovers`] for runs that go one by one: each as its own task at its time.
pub(super) async fn start_one_by_one(
    state: &Arc<AppState>,
    prepared: impl IntoIterator<Item = (Prepared, Option<i64>)>,
    handovers: &Handovers,
    started: Instant,
) {
    for (one, at_ms) in prepared {
        let Ok(permit) = handovers.slots.clone().acquire_owned().await else {
            return;
        };
        let (state, recorder) = (state.clone(), handovers.answers.clone());
        tokio::spawn(async move {
            let mut started = started;
            if let Some(at_ms) = at_ms
                && !matches!(one, Prepared::Taken | Prepared::Ended)
            {
                wait_until(&state, at_ms).await;
                // Waiting for the run's time is not dispatch latency.
                started = started.max(Instant::now());
            }
            for answer in send_prepared(&state, one).await {
                count(&state, &answer);
                // The recorder outlives every hand-over; a closed channel means the admin is
                // stopping, and the monitors of whichever admin runs next finish these runs.
                let _ = recorder.send(answer);
            }
            state.metrics.dispatch_latency.observe(started.elapsed());
            drop(permit);
        });
    }
}

async fn send_prepared(state: &AppState, prepared: Prepared) -> Vec<Answer> {
    match prepared {
        Prepared::Taken => Vec::new(),
        Prepared::Ended => {
            state.metrics.trigger_outcomes.inc("skipped");
            Vec::new()
        }
        Prepared::NoAgent {
            run,
            message,
            replaced,
            ..
        } => {
            kill_on_agents(state, &replaced).await;
            vec![Answer::no_agent(run.id, run.triggered_ms, message)]
        }
        Prepared::Send {
            job,
            sends,
            replaced,
        } => {
            kill_on_agents(state, &replaced).await;
            let routing = job.routing;
            let handovers = sends
                .into_iter()
                .map(|send| hand_over(state, &job, routing, send));
            futures_util::future::join_all(handovers).await
        }
    }
}

pub(super) fn count(state: &AppState, answer: &Answer) {
    state.metrics.trigger_outcomes.inc(answer.outcome);
}

/// Stores answers and creates the retries of triggers nobody took, in one transaction; the
/// follow-up runs are timed once it commits.
pub(super) async fn store_answers(state: &AppState, answers: Vec<Answer>) -> Result<(), Error> {
    if answers.is_empty() {
        return Ok(());
    }
    let changes = Changes::new(state);
    let changes = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let stored: Vec<(RunId, job_run::TriggerAnswer<'_>)> = answers
                .iter()
                .map(|a| {
                    let answer = job_run::TriggerAnswer {
                        agent: a.agent.as_deref(),
                        accepted: a.accepted,
                        message: &a.message,
                        instance: a.taken_by.as_ref().map(|t| t.instance_id.as_str()),
                        seq: a
                            .taken_by
                            .as_ref()
                            .map(|t| i64::try_from(t.seq).unwrap_or(i64::MAX)),
                        claimed_ms: a.claimed_ms,
                    };
                    (a.run_id, answer)
                })
                .collect();
            changes.sent_all(conn, &stored)?;
            Ok(changes)
        })
        .await?;
    changes.committed(state);
    Ok(())
}

/// Answers stored per transaction at most.
const RECORD_BATCH: usize = 1_000;
const RECORD_RETRY_MAX: Duration = Duration::from_secs(5);
/// How often held acceptances are looked at for those held long enough.
const HOLD_TICK: Duration = Duration::from_millis(50);

/// Stores answers as they arrive, all that are waiting in one transaction. An acceptance is held
/// back for [`HOLD_ACCEPTANCE`] first (`held`): the result of a short run arrives meanwhile and
/// stores it in its own transaction. While the database is away it keeps the answers and
/// retries: the agents already run those triggers, and the answer is what says where. Ends when
/// every sender is gone and all is stored.
pub async fn record_forever(
    state: web::Data<AppState>,
    mut inbox: mpsc::UnboundedReceiver<Answer>,
    held: Arc<HeldAcceptances>,
) {
    let mut waiting: Vec<Answer> = Vec::new();
    let mut delay = Duration::from_millis(100);
    let mut open = true;
    let file = |answer: Answer, waiting: &mut Vec<Answer>| {
        if answer.accepted {
            held.hold(answer);
        } else {
            // A refusal may start a retry: stored at once.
            waiting.push(answer);
        }
    };
    loop {
        if waiting.is_empty() && open {
            let received = if held.is_empty() {
                Some(inbox.recv().await)
            } else {
                tokio::time::timeout(HOLD_TICK, inbox.recv()).await.ok()
            };
            match received {
                Some(Some(answer)) => file(answer, &mut waiting),
                Some(None) => open = false,
                None => {}
            }
        }
        while waiting.len() < RECORD_BATCH
            && let Ok(more) = inbox.try_recv()
        {
            file(more, &mut waiting);
        }
        // Once nobody can send more, nothing is held back any longer.
        waiting.extend(held.take_older_than(if open {
            HOLD_ACCEPTANCE
        } else {
            Duration::ZERO
        }));
        if waiting.is_empty() {
            if open {
                continue;
            }
            return;
        }
        let batch = std::mem::take(&mut waiting);
        let kept = batch.clone();
        match store_answers(&state, batch).await {
            Ok(()) => {
                delay = Duration::from_millis(100);
            }
            Err(e) => {
                tracing::warn!(answers = kept.len(), error = %e, retry_in_ms = delay.as_millis() as u64, "Cannot store trigger answers yet");
                waiting = kept;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RECORD_RETRY_MAX);
            }
        }
    }
}

/// The agent that took run `run_id`, while the recorder holds its acceptance back.
pub fn held_agent(state: &AppState, run_id: RunId) -> Option<String> {
    state
        .scheduler
        .handovers()
        .and_then(|h| h.held.agent_of(run_id))
}

/// Stores now the acceptance of run `run_id` that the recorder holds back, if it does (a kill
/// needs the run to read as running on its agent). Returns whether there was one.
///
/// # Errors
/// Database errors (the acceptance is held again, for the recorder).
pub async fn store_held(state: &AppState, run_id: RunId) -> Result<bool, Error> {
    let Some(handovers) = state.scheduler.handovers() else {
        return Ok(false);
    };
    let Some(answer) = handovers.held.take(run_id) else {
        return Ok(false);
    };
    if let Err(e) = store_answers(state, vec![answer.clone()]).await {
        handovers.held.hold(answer);
        return Err(e);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_on_time_goes_first_and_a_backlogs_waits_its_turn() {
        let now = 1_000_000;
        let take = |ats: &[i64]| {
            let due: Vec<(RunId, i64)> = ats.iter().map(|&at| (RunId(1), at)).collect();
            take_urgency(&due, now)
        };
        assert_eq!(take(&[now + 10, now + 110]), Urgency::Due, "ahead of time");
        assert_eq!(take(&[now]), Urgency::Due, "at its time");
        assert_eq!(
            take(&[now + 50, now - 100]),
            Urgency::Due,
            "its timer woke late"
        );
        assert_eq!(take(&[now + 50, now - 101]), Urgency::InTurn, "a backlog");
        assert_eq!(take(&[now - 5_000]), Urgency::InTurn, "a backlog");
        assert_eq!(take(&[]), Urgency::InTurn);
    }
}
