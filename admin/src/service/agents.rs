//! Agents: registration and heartbeats (with the agent's own key, approval, and the check of
//! the runs it says it holds), the list the caller may see, and an admin's approve, revoke and
//! forget.
//!
//! Identity: a jobfleet agent creates a random key at its first start and sends it in
//! `X-Jobfleet-Agent-Key` on every call. Its first registration (made with the shared access
//! token) stores the key's SHA-256 for `(group, address)`; from then on only that key may
//! heartbeat there or report results for runs sent there. XXL-Job executors cannot send a key:
//! a group takes them only when an admin set `allow_executors`.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use serde::Serialize;

use crate::audit::{self, Entry};
use crate::auth::rbac::{Actor, AdminProof};
use crate::db::{AnyConnection, agent, executor_group, job_run};
use crate::domain::agent::{AgentStatus, DEAD_AFTER_MS, is_live};
use crate::domain::ids::{GroupId, RunId};
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::lifecycle::Changes;
use crate::state::AppState;
use jobfleet_agent::protocol::{CONNECT_SCHEME, REGISTRY_GROUP_EXECUTOR, RegistryParam};

/// Agent keys are random strings the agent makes; anything outside this is not one.
const KEY_LEN: std::ops::RangeInclusive<usize> = 32..=256;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AgentView {
    pub id: i64,
    pub app_name: String,
    pub address: String,
    pub version: String,
    pub hostname: String,
    /// Heartbeating (drained or not).
    pub live: bool,
    /// `live` (heartbeating, in service), `drained` (heartbeating, no new runs) or `dead`.
    pub status: String,
    pub registered_ms: i64,
    pub last_seen_ms: i64,
    pub limits_mode: String,
    #[schema(value_type = Object)]
    pub metrics: serde_json::Value,
    /// `approved` (gets runs), `pending` (waits for an admin) or `revoked` (refused).
    pub approval: String,
    /// `agent` (a jobfleet agent with its own key) or `executor` (an XXL-Job executor that has
    /// only the shared token).
    pub identity: String,
    /// The user jobs run as when a trigger names none; empty when the agent did not say.
    pub run_as: String,
    /// Jobs on this agent run as root.
    pub runs_as_root: bool,
    /// How admins reach it: `push` (its address), `connect` (only over its connection; the
    /// address is a `conn://` name), `auto` (both); empty for executors and older agents.
    pub mode: String,
    /// The connection the agent holds to an admin, if any.
    pub connection: Option<ConnectionView>,
    /// When an admin drained it: it gets no new runs, and the runs it holds finish. Absent
    /// while it is in service.
    pub drained_ms: Option<i64>,
    /// What the agent said about its host (`zone=a` …); jobs may require them.
    #[schema(value_type = Object)]
    pub labels: jobfleet_agent::protocol::labels::Labels,
}

/// An agent's connection to an admin.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ConnectionView {
    /// The admin process holding it (`host:pid`).
    pub admin: String,
    /// Where the other admins relay the agent's calls to (that admin's `cluster_url`).
    pub url: String,
    pub since_ms: i64,
    /// Round-trip time of the last ping, in milliseconds; absent before the first.
    pub rtt_ms: Option<f64>,
}

pub(crate) fn view(a: agent::Agent, now: i64) -> AgentView {
    AgentView {
        id: a.id,
        live: is_live(a.last_seen_ms, now),
        status: AgentStatus::of(a.last_seen_ms, a.drained_ms.is_some(), now)
            .as_str()
            .to_owned(),
        metrics: serde_json::from_str(&a.metrics).unwrap_or(serde_json::Value::Null),
        identity: if a.key_hash.is_empty() {
            "executor"
        } else {
            "agent"
        }
        .into(),
        runs_as_root: a.run_as == "root",
        // A dead agent's last connection may name an admin that died with it: not shown.
        connection: match (a.link_admin.is_empty(), a.link_since_ms) {
            (false, Some(since_ms)) if is_live(a.last_seen_ms, now) => Some(ConnectionView {
                admin: a.link_admin,
                url: a.link_url,
                since_ms,
                rtt_ms: a.link_rtt_us.map(|us| us as f64 / 1000.0),
            }),
            _ => None,
        },
        mode: a.mode,
        drained_ms: a.drained_ms,
        labels: jobfleet_agent::protocol::labels::parse_labels(&a.labels).unwrap_or_default(),
        app_name: a.app_name,
        address: a.address,
        version: a.version,
        hostname: a.hostname,
        registered_ms: a.registered_ms,
        last_seen_ms: a.last_seen_ms,
        limits_mode: a.limits_mode,
        approval: a.approval,
        run_as: a.run_as,
    }
}

/// An admin's decision about an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Revoke,
    Forget,
    /// No new runs (routing, pulls and named triggers pass it by); runs it holds finish.
    Drain,
    Undrain,
}

/// Approves, revokes, forgets, drains or undrains agent `id`, with its audit row. A revoked agent's heartbeats
/// and results are refused and it gets no runs; a forgotten one may enroll again (with a new
/// key, after its data folder was lost, say).
///
/// # Errors
/// `NotFound` for an unknown agent.
pub async fn decide(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: i64,
    decision: Decision,
) -> Result<Option<AgentView>, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let before = view(agent::get(conn, id)?, now);
            let (action, after) = match decision {
                Decision::Approve | Decision::Revoke => {
                    let (action, approval) = if decision == Decision::Approve {
                        ("agent.approve", agent::APPROVED)
                    } else {
                        ("agent.revoke", agent::REVOKED)
                    };
                    agent::set_approval(conn, id, approval)?;
                    (action, Some(view(agent::get(conn, id)?, now)))
                }
                Decision::Forget => {
                    agent::delete(conn, id)?;
                    ("agent.forget", None)
                }
                Decision::Drain | Decision::Undrain => {
                    let (action, drained_ms) = if decision == Decision::Drain {
                        // Draining twice keeps the first time: the operator's "since when".
                        ("agent.drain", Some(before.drained_ms.unwrap_or(now)))
                    } else {
                        ("agent.undrain", None)
                    };
                    agent::set_drained(conn, id, drained_ms)?;
                    (action, Some(view(agent::get(conn, id)?, now)))
                }
            };
            let mut entry = Entry::new(action, "agent", id).before(&before)?;
            if let Some(after) = &after {
                entry = entry.after(after)?;
            }
            audit::record(conn, &actor, now, entry)?;
            Ok(after)
        })
        .await
}

/// What the admin concluded from one heartbeat.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Registered {
    /// Runs the agent no longer holds, ended `lost` (and retried per their job's policy).
    pub lost: Vec<RunId>,
}

/// A registration or heartbeat from an agent (or an XXL-Job executor), with the agent key it
/// presented (`None` for an executor). Checked here, then written with the other agents' beats
/// of the moment in one transaction (`registry_batch`); answered once that committed.
///
/// # Errors
/// `invalid_field` for a malformed registration; `forbidden` for an address that belongs to
/// another key, a revoked agent, or an executor in a group that does not allow them.
pub async fn register(
    state: &std::sync::Arc<AppState>,
    param: RegistryParam,
    key: Option<&str>,
) -> Result<Registered, Error> {
    let (app_name, address) = check_registration(&param)?;
    let key_hash = key.map(check_key).transpose()?;
    let instance_id = short("instanceId", param.instance_id.as_deref(), 64)?;
    let run_as = short("runAs", param.run_as.as_deref(), 64)?;
    let mode = short("mode", param.mode.as_deref(), 16)?;
    // Bounded as their columns are: one beat the database refuses would fail the whole batch
    // it is written in, and then every beat of that batch is written again on its own.
    let version = match param.agent_version.as_deref() {
        Some(version) => short("agentVersion", Some(version), 64)?,
        None => "xxl-job".to_owned(),
    };
    let hostname = short("hostname", param.hostname.as_deref(), 255)?;
    let limits_mode = short("limitsMode", param.limits_mode.as_deref(), 16)?;
    if !matches!(mode.as_str(), "" | "push" | "connect" | "auto") {
        return Err(Error::invalid("mode", "must be push, connect or auto"));
    }
    if address_is_connect(&param.registry_value) && mode != "connect" {
        return Err(Error::invalid(
            "registryValue",
            "a conn:// address is for agents in connect mode only",
        ));
    }
    let labels = param
        .labels
        .as_ref()
        .map(|labels| {
            jobfleet_agent::protocol::labels::check_labels(labels)
                .map(|()| jobfleet_agent::protocol::labels::format_labels(labels))
                .map_err(|e| Error::invalid("labels", e))
        })
        .transpose()?
        .unwrap_or_default();
    let metrics = param
        .metrics
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| Error::Internal(e.into()))?
        .unwrap_or_else(|| "{}".to_owned());
    let held = match (param.held_runs, param.accepted_through) {
        (Some(held), Some(through)) => Some((
            held.into_iter().collect(),
            i64::try_from(through).unwrap_or(i64::MAX),
        )),
        _ => None,
    };
    let beat = crate::registry_batch::Beat {
        app_name,
        address,
        key_hash,
        version,
        hostname,
        metrics,
        limits_mode,
        instance_id,
        run_as,
        mode,
        labels,
        now_ms: state.clock.now_ms(),
        held,
    };
    let lost = write_registry(
        state,
        crate::registry_batch::RegistryCall::Beat(Box::new(beat)),
    )
    .await?;
    for run_id in &lost {
        tracing::warn!(
            %run_id,
            agent = %param.registry_value,
            "Run lost: its agent no longer holds it"
        );
    }
    Ok(Registered { lost })
}

/// Queues a registry call for the next batch and waits until that batch is written.
async fn write_registry(
    state: &std::sync::Arc<AppState>,
    call: crate::registry_batch::RegistryCall,
) -> Result<Vec<RunId>, Error> {
    let writer = state.clone();
    crate::group_commit::Batcher::submit(&state.registry, call, move |calls| {
        write_registry_batch(writer.clone(), calls)
    })
    .await
    .unwrap_or_else(|_| {
        Err(Error::Internal(anyhow::anyhow!(
            "the heartbeat's batch ended without an answer"
        )))
    })
}

/// Writes a batch of registry calls in one transaction. When the transaction fails for
/// another reason than an unreachable database (a deadlock on MySQL, say), each call is
/// written on its own, so that no agent's beat fails for another's.
async fn write_registry_batch(
    state: std::sync::Arc<AppState>,
    calls: Vec<crate::registry_batch::RegistryCall>,
) -> Vec<Result<Vec<RunId>, Error>> {
    let calls = std::sync::Arc::new(calls);
    let all = 0..calls.len();
    match write_registry_calls(&state, calls.clone(), all).await {
        Ok(outcomes) => outcomes,
        Err(e) if calls.len() == 1 => vec![Err(e)],
        Err(Error::Unavailable(why)) => calls
            .iter()
            .map(|_| Err(Error::Unavailable(why.clone())))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, calls = calls.len(), "A batch of heartbeats failed; writing each on its own");
            let mut outcomes = Vec::with_capacity(calls.len());
            for i in 0..calls.len() {
                outcomes.push(
                    match write_registry_calls(&state, calls.clone(), i..i + 1).await {
                        Ok(mut one) => one.pop().unwrap_or_else(|| Ok(Vec::new())),
                        Err(e) => Err(e),
                    },
                );
            }
            outcomes
        }
    }
}

/// What writing one registry call found.
struct Written {
    outcome: Result<Vec<RunId>, Error>,
    /// The agent (`app_name address`) whose beat came after it was dead.
    revived: Option<String>,
}

impl Written {
    fn done(lost: Vec<RunId>) -> Self {
        Self {
            outcome: Ok(lost),
            revived: None,
        }
    }

    fn refused(e: Error) -> Self {
        Self {
            outcome: Err(e),
            revived: None,
        }
    }
}

/// `calls[range]` in one transaction, then the lifecycle's follow-ups of the runs they ended.
async fn write_registry_calls(
    state: &std::sync::Arc<AppState>,
    calls: std::sync::Arc<Vec<crate::registry_batch::RegistryCall>>,
    range: std::ops::Range<usize>,
) -> Result<Vec<Result<Vec<RunId>, Error>>, Error> {
    let needs_approval = state.config.agents_need_approval;
    let changes = Changes::at(state, state.clock.now_ms());
    let (written, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let written =
                write_calls_in(conn, &calls[range.clone()], needs_approval, &mut changes)?;
            Ok((written, changes))
        })
        .await?;
    changes.committed(state);
    Ok(written
        .into_iter()
        .map(|w| {
            if let Some(agent) = &w.revived {
                tracing::info!(agent = %agent, "Agent is live again");
            }
            w.outcome
        })
        .collect())
}

/// Writes registry calls in the caller's transaction, in their order: the rows of all their
/// agents in one query, the runs of those that list what they hold in another, a heartbeat that
/// changed nothing but the time and the metrics as a [`agent::touch`] (one statement for the
/// batch on MySQL), any other as a full refresh. A refused call (another key, revoked, an
/// executor where none may be) is its outcome and writes nothing; a database error fails all.
fn write_calls_in(
    conn: &mut AnyConnection,
    calls: &[crate::registry_batch::RegistryCall],
    needs_approval: bool,
    changes: &mut Changes,
) -> Result<Vec<Written>, Error> {
    use crate::registry_batch::RegistryCall;
    use std::collections::HashMap;

    let names = |call: &RegistryCall| -> (String, String) {
        match call {
            RegistryCall::Beat(beat) => (beat.app_name.clone(), beat.address.clone()),
            RegistryCall::Gone {
                app_name, address, ..
            } => (app_name.clone(), address.clone()),
        }
    };
    let pairs: Vec<(String, String)> = calls.iter().map(names).collect();
    let mut addresses: Vec<&str> = pairs.iter().map(|(_, address)| address.as_str()).collect();
    addresses.sort_unstable();
    addresses.dedup();
    let mut rows: HashMap<(String, String), agent::Agent> = agent::find_many(conn, &addresses)?
        .into_iter()
        .map(|row| ((row.app_name.clone(), row.address.clone()), row))
        .collect();
    let mut held_at: Vec<&str> = calls
        .iter()
        .filter_map(|call| match call {
            RegistryCall::Beat(beat) if beat.held.is_some() => Some(beat.address.as_str()),
            _ => None,
        })
        .collect();
    held_at.sort_unstable();
    held_at.dedup();
    let mut running: HashMap<String, Vec<job_run::RunningRun>> = HashMap::new();
    for run in job_run::running_at(conn, &held_at)? {
        if let Some(address) = run.agent_address.clone() {
            running.entry(address).or_default().push(run);
        }
    }
    // The steady beats, one per agent (the latest), written at the end.
    let mut touches: HashMap<i64, agent::Touch<'_>> = HashMap::new();
    let mut written = Vec::with_capacity(calls.len());
    for (call, pair) in calls.iter().zip(pairs) {
        match call {
            RegistryCall::Beat(beat) => {
                let heartbeat = agent::Heartbeat {
                    app_name: &beat.app_name,
                    address: &beat.address,
                    version: &beat.version,
                    hostname: &beat.hostname,
                    metrics: &beat.metrics,
                    limits_mode: &beat.limits_mode,
                    key_hash: beat.key_hash.as_deref().unwrap_or(""),
                    instance_id: &beat.instance_id,
                    run_as: &beat.run_as,
                    mode: &beat.mode,
                    labels: &beat.labels,
                    now_ms: beat.now_ms,
                };
                if beat.key_hash.is_none() {
                    match admit_executor(conn, &beat.app_name) {
                        Ok(()) => {}
                        Err(e @ Error::Forbidden(_)) => {
                            written.push(Written::refused(e));
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
                if !rows.contains_key(&pair) {
                    let approval = if needs_approval {
                        agent::PENDING
                    } else {
                        agent::APPROVED
                    };
                    match agent::insert(conn, &heartbeat, approval) {
                        // A first registration: nothing can be held yet.
                        Ok(()) => {
                            if let Some(row) = agent::find(conn, &beat.app_name, &beat.address)? {
                                rows.insert(pair, row);
                            }
                            written.push(Written::done(Vec::new()));
                            continue;
                        }
                        // Another admin stored the same first beat a moment ago.
                        Err(Error::Conflict { .. }) => {
                            let row = agent::find(conn, &beat.app_name, &beat.address)?
                                .ok_or(Error::NotFound("agent"))?;
                            rows.insert(pair.clone(), row);
                        }
                        Err(e) => return Err(e),
                    }
                }
                let row = rows.get_mut(&pair).ok_or(Error::NotFound("agent"))?;
                if let Err(e) = check_identity(row, beat.key_hash.as_deref()) {
                    written.push(Written::refused(e));
                    continue;
                }
                let revived = (!is_live(row.last_seen_ms, beat.now_ms))
                    .then(|| format!("{} {}", beat.app_name, beat.address));
                let adopts_key = beat.key_hash.is_some() && row.key_hash.is_empty();
                let steady = !adopts_key
                    && row.version == beat.version
                    && row.hostname == beat.hostname
                    && row.limits_mode == beat.limits_mode
                    && row.instance_id == beat.instance_id
                    && row.run_as == beat.run_as
                    && row.mode == beat.mode
                    && row.labels == beat.labels;
                if steady {
                    touches.insert(
                        row.id,
                        agent::Touch {
                            id: row.id,
                            now_ms: beat.now_ms,
                            metrics: &beat.metrics,
                        },
                    );
                } else {
                    // Everything is written now: an earlier steady beat of the same agent in
                    // this batch must not be written over it at the end.
                    touches.remove(&row.id);
                    agent::refresh(conn, row.id, &heartbeat)?;
                    row.version.clone_from(&beat.version);
                    row.hostname.clone_from(&beat.hostname);
                    row.limits_mode.clone_from(&beat.limits_mode);
                    row.instance_id.clone_from(&beat.instance_id);
                    row.run_as.clone_from(&beat.run_as);
                    row.mode.clone_from(&beat.mode);
                    row.labels.clone_from(&beat.labels);
                    if adopts_key {
                        row.key_hash = heartbeat.key_hash.to_owned();
                    }
                }
                row.last_seen_ms = beat.now_ms;
                let mut lost = Vec::new();
                if let Some((held, through)) = &beat.held {
                    for run in running.get(&beat.address).into_iter().flatten() {
                        let Some(why) = no_longer_held(run, held, &beat.instance_id, *through)
                        else {
                            continue;
                        };
                        if changes.ended_by_admin(conn, run.id, RunStatus::Lost, why)? {
                            lost.push(run.id);
                        }
                    }
                }
                written.push(Written {
                    outcome: Ok(lost),
                    revived,
                });
            }
            RegistryCall::Gone {
                key_hash, now_ms, ..
            } => {
                let Some(row) = rows.get_mut(&pair) else {
                    written.push(Written::done(Vec::new()));
                    continue;
                };
                if let Err(e) = check_identity(row, key_hash.as_deref()) {
                    written.push(Written::refused(e));
                    continue;
                }
                // A beat of this batch before the deregistration lands first.
                if let Some(touch) = touches.remove(&row.id) {
                    agent::touch(conn, &[touch])?;
                }
                // The row (and with it the key and the approval) stays: a restart should not
                // need a new approval. It only stops being live.
                let dead_ms = now_ms - DEAD_AFTER_MS;
                agent::mark_gone(conn, row.id, dead_ms)?;
                row.last_seen_ms = row.last_seen_ms.min(dead_ms);
                written.push(Written::done(Vec::new()));
            }
        }
    }
    // In id order: two admins' batches lock shared rows in the same order on MySQL.
    let mut touches: Vec<agent::Touch<'_>> = touches.into_values().collect();
    touches.sort_unstable_by_key(|touch| touch.id);
    agent::touch(conn, &touches)?;
    Ok(written)
}

/// Why a run the admin has as running on this agent is gone, judged from a heartbeat that
/// lists what the agent holds; `None` while it may still be there.
///
/// A run is gone when a different agent process answers at its address (the one that took it
/// died), or when the same process has handed out the run's accept number and does not list
/// it. A run stored without an instance (an XXL-Job executor, an admin before this check) is
/// left to the liveness monitor.
fn no_longer_held(
    run: &job_run::RunningRun,
    held: &HashSet<i64>,
    instance_id: &str,
    accepted_through: i64,
) -> Option<&'static str> {
    if held.contains(&run.id.0) || instance_id.is_empty() {
        return None;
    }
    let (Some(taken_by), Some(seq)) = (run.agent_instance.as_deref(), run.agent_seq) else {
        return None;
    };
    if taken_by != instance_id {
        Some(
            "the agent restarted and no longer holds this run (it was killed or crashed while the run was in progress)",
        )
    } else if seq <= accepted_through {
        Some("the agent no longer holds this run and never reported its result")
    } else {
        None
    }
}

/// An executor without a key may register only in a group that allows executors.
fn admit_executor(conn: &mut AnyConnection, app_name: &str) -> Result<(), Error> {
    match executor_group::find_by_app_name(conn, app_name)? {
        Some(group) if group.allow_executors => Ok(()),
        _ => Err(Error::Forbidden(format!(
            "group `{app_name}` takes only jobfleet agents with their own key; an admin can allow XXL-Job executors on the group"
        ))),
    }
}

/// The caller's key must be the one stored for this registration (or none was stored yet).
fn check_identity(row: &agent::Agent, key_hash: Option<&str>) -> Result<(), Error> {
    if row.approval == agent::REVOKED {
        return Err(Error::Forbidden(
            "this agent was revoked by an admin".into(),
        ));
    }
    match key_hash {
        Some(hash) if !row.key_hash.is_empty() && !crate::auth::csrf::matches(&row.key_hash, hash) => {
            Err(Error::Forbidden(
                "this address is registered to another agent key; an admin can forget that agent so this one may enroll".into(),
            ))
        }
        None if !row.key_hash.is_empty() => Err(Error::Forbidden(
            "this address belongs to a jobfleet agent: its calls need its agent key".into(),
        )),
        _ => Ok(()),
    }
}

/// Graceful deregistration, by the agent that registered (same key rules as a heartbeat).
/// Queued with the heartbeats, so it is written after a beat of the same agent that came
/// before it.
///
/// # Errors
/// As [`register`]'s checks.
pub async fn deregister(
    state: &std::sync::Arc<AppState>,
    param: RegistryParam,
    key: Option<&str>,
) -> Result<(), Error> {
    let (app_name, address) = check_registration(&param)?;
    let key_hash = key.map(check_key).transpose()?;
    write_registry(
        state,
        crate::registry_batch::RegistryCall::Gone {
            app_name,
            address,
            key_hash,
            now_ms: state.clock.now_ms(),
        },
    )
    .await
    .map(|_| ())
}

/// The key's hash, after a check that it looks like one.
fn check_key(key: &str) -> Result<String, Error> {
    if !KEY_LEN.contains(&key.len()) || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::invalid(
            "X-Jobfleet-Agent-Key",
            format!(
                "an agent key is {} to {} printable ASCII characters",
                KEY_LEN.start(),
                KEY_LEN.end()
            ),
        ));
    }
    Ok(crate::auth::sha256_hex(key))
}

fn short(field: &str, value: Option<&str>, max: usize) -> Result<String, Error> {
    let value = value.unwrap_or("").trim();
    if value.len() > max || value.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            format!("at most {max} characters, no control characters"),
        ));
    }
    Ok(value.to_owned())
}

fn check_registration(param: &RegistryParam) -> Result<(String, String), Error> {
    if param.registry_group != REGISTRY_GROUP_EXECUTOR {
        return Err(Error::invalid("registryGroup", "must be EXECUTOR"));
    }
    let app_name = crate::service::groups::check_app_name(&param.registry_key).map_err(|_| {
        Error::invalid(
            "registryKey",
            "must be an app name of letters, digits, `-`, `_`, `.` (at most 64)",
        )
    })?;
    let value = param.registry_value.trim();
    let parsed = url::Url::parse(value)
        .map_err(|e| Error::invalid("registryValue", format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https" | CONNECT_SCHEME)
        || parsed.host_str().is_none()
        || value.len() > 255
        || parsed.query().is_some()
        || !parsed.username().is_empty()
    {
        return Err(Error::invalid(
            "registryValue",
            "must be the agent's http(s) base URL, or conn://<host>/<id>/ in connect mode",
        ));
    }
    if let Some(why) = forbidden_host(&parsed) {
        return Err(Error::invalid("registryValue", why));
    }
    let address = if value.ends_with('/') {
        value.to_owned()
    } else {
        format!("{value}/")
    };
    if address.len() > 255 {
        return Err(Error::invalid(
            "registryValue",
            "at most 255 characters with its closing `/`",
        ));
    }
    Ok((app_name, address))
}

/// Addresses the admin must never be told to call: cloud metadata services and other
/// link-local or unspecified addresses. Triggers carry job sources and parameters, and an
/// admin calling a metadata endpoint with them is a server-side request forgery.
fn forbidden_host(url: &url::Url) -> Option<&'static str> {
    let ip = match url.host()? {
        url::Host::Ipv4(ip) => IpAddr::V4(ip),
        url::Host::Ipv6(ip) => IpAddr::V6(ip),
        url::Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            return (name == "metadata.google.internal"
                || name == "metadata"
                || name.ends_with(".metadata.google.internal"))
            .then_some("a cloud metadata service is not an agent");
        }
    };
    let bad = match ip {
        IpAddr::V4(v4) => v4.is_link_local() || v4.is_unspecified() || v4.is_broadcast(),
        IpAddr::V6(v6) => {
            v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.segments() == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254]
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_link_local() || v4.is_unspecified())
        }
    };
    bad.then_some("a link-local, unspecified or metadata address is not an agent")
}

fn address_is_connect(value: &str) -> bool {
    value
        .trim()
        .strip_prefix(CONNECT_SCHEME)
        .is_some_and(|rest| rest.starts_with("://"))
}

/// Who may open a connection (`GET /api/agent/connect`): the agent registered at `address` in
/// group `app_name` with this key, not revoked — the same identity rules as a heartbeat, except
/// that a connection never enrolls (the agent heartbeats by HTTP first). Returns the agent's id
/// and its address as stored.
///
/// # Errors
/// `invalid_field` for malformed headers; `forbidden` for an unknown key or address, another
/// agent's address, or a revoked agent.
pub async fn check_connection(
    state: &AppState,
    app_name: &str,
    address: &str,
    key: &str,
) -> Result<(i64, String), Error> {
    let (app_name, address) = check_registration(&RegistryParam {
        registry_group: REGISTRY_GROUP_EXECUTOR.into(),
        registry_key: app_name.to_owned(),
        registry_value: address.to_owned(),
        agent_version: None,
        hostname: None,
        metrics: None,
        labels: None,
        limits_mode: None,
        instance_id: None,
        held_runs: None,
        accepted_through: None,
        run_as: None,
        mode: None,
    })?;
    let key_hash = check_key(key)?;
    state
        .db
        .run(move |conn| {
            let Some(row) = agent::find(conn, &app_name, &address)? else {
                return Err(Error::Forbidden(format!(
                    "no agent is registered at `{address}` in group `{app_name}`: register (heartbeat) first"
                )));
            };
            if row.key_hash.is_empty() {
                return Err(Error::Forbidden(
                    "this address has no agent key yet: heartbeat with the key first".into(),
                ));
            }
            check_identity(&row, Some(&key_hash))?;
            Ok((row.id, address))
        })
        .await
}

/// Records that this admin (`admin`) holds agent `id`'s connection since `since_ms`, with
/// the URL the other admins relay the agent's calls through.
pub async fn link_opened(
    state: &AppState,
    id: i64,
    admin: String,
    since_ms: i64,
) -> Result<(), Error> {
    let url = state
        .agents
        .relay()
        .map(|relay| relay.own_url().to_owned())
        .unwrap_or_default();
    state
        .db
        .run(move |conn| agent::set_link(conn, id, &admin, &url, since_ms))
        .await
}

/// The round-trip time of the connection opened at `since_ms`.
pub async fn link_rtt(
    state: &AppState,
    id: i64,
    admin: String,
    since_ms: i64,
    rtt_us: i64,
) -> Result<(), Error> {
    state
        .db
        .run(move |conn| agent::set_link_rtt(conn, id, &admin, since_ms, rtt_us))
        .await
}

/// The connection opened at `since_ms` ended (a newer one stays recorded).
pub async fn link_closed(
    state: &AppState,
    id: i64,
    admin: String,
    since_ms: i64,
) -> Result<(), Error> {
    state
        .db
        .run(move |conn| agent::clear_link(conn, id, &admin, since_ms))
        .await
}

/// Who sent a batch of results, as far as the admin can tell.
#[derive(Debug, Clone)]
pub enum Reporter {
    /// A jobfleet agent with its key: the registrations made with it.
    Agent(Vec<agent::KeyHolder>),
    /// Only the shared token: an XXL-Job executor.
    Executor,
}

/// Resolves the key a callback came with.
///
/// # Errors
/// `forbidden` for a key no registration has (or only revoked ones).
pub fn reporter(conn: &mut AnyConnection, key: Option<&str>) -> Result<Reporter, Error> {
    let Some(key) = key else {
        return Ok(Reporter::Executor);
    };
    let rows = agent::list_by_key(conn, &check_key(key)?)?;
    if rows.is_empty() {
        return Err(Error::Forbidden(
            "no registered agent has this key (register first, or it was revoked)".into(),
        ));
    }
    Ok(Reporter::Agent(rows))
}

/// Whether `reporter` may report the result of a run of group `group_id` sent to
/// `sent_to`; for a run whose agent was never stored (the admin sending it died before it
/// stored the answer, or the result overtook the answer), the address to record as its agent.
/// `groups` keeps the groups read for a batch of results: one read per group, not per run.
///
/// # Errors
/// Database errors.
pub fn may_report(
    conn: &mut AnyConnection,
    reporter: &Reporter,
    groups: &mut HashMap<GroupId, executor_group::ExecutorGroup>,
    group_id: GroupId,
    sent_to: Option<&str>,
) -> Result<Result<Option<String>, &'static str>, Error> {
    let mut group_of = |conn: &mut AnyConnection| -> Result<executor_group::ExecutorGroup, Error> {
        if let Some(group) = groups.get(&group_id) {
            return Ok(group.clone());
        }
        let group = executor_group::get(conn, group_id)?;
        groups.insert(group_id, group.clone());
        Ok(group)
    };
    match (reporter, sent_to) {
        (Reporter::Agent(rows), Some(address)) => {
            Ok(if rows.iter().any(|r| r.address == address) {
                Ok(None)
            } else {
                Err("the run was sent to another agent")
            })
        }
        (Reporter::Agent(rows), None) => {
            let group = group_of(conn)?;
            Ok(rows
                .iter()
                .find(|r| r.app_name == group.app_name && r.approval == agent::APPROVED)
                .map(|r| Some(r.address.clone()))
                .ok_or("the run belongs to a group this agent is not in"))
        }
        (Reporter::Executor, address) => {
            let group = group_of(conn)?;
            if !group.allow_executors {
                return Ok(Err(
                    "the run's group does not take results without an agent key",
                ));
            }
            if let Some(address) = address
                && agent::list_at(conn, address)?
                    .iter()
                    .any(|r| !r.key_hash.is_empty())
            {
                return Ok(Err(
                    "the run was sent to a jobfleet agent, whose results need its key",
                ));
            }
            Ok(Ok(None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::JobId;

    fn run(instance: Option<&str>, seq: Option<i64>) -> job_run::RunningRun {
        job_run::RunningRun {
            id: RunId(7),
            job_id: JobId(1),
            agent_address: Some("http://a:1/".into()),
            agent_instance: instance.map(str::to_owned),
            agent_seq: seq,
            timeout_s: None,
            started_ms: None,
            triggered_ms: None,
            created_ms: 0,
        }
    }

    #[test]
    fn a_run_is_lost_only_when_the_heartbeat_proves_it() {
        let none = HashSet::new();
        let held: HashSet<i64> = [7].into();
        // Another process answers at the address: the one that took the run is gone.
        assert!(no_longer_held(&run(Some("old"), Some(3)), &none, "new", 0).is_some());
        // Same process, it handed out number 3 and does not list the run.
        assert!(no_longer_held(&run(Some("i"), Some(3)), &none, "i", 3).is_some());
        // Same process, but the heartbeat was taken before it accepted the run.
        assert!(no_longer_held(&run(Some("i"), Some(4)), &none, "i", 3).is_none());
        // Listed: held, whatever else.
        assert!(no_longer_held(&run(Some("old"), Some(3)), &held, "new", 9).is_none());
        // Nothing to judge by.
        assert!(no_longer_held(&run(None, None), &none, "new", 9).is_none());
        assert!(no_longer_held(&run(Some("i"), Some(1)), &none, "", 9).is_none());
    }

    #[test]
    fn metadata_and_link_local_addresses_are_refused() {
        let refused = |u: &str| forbidden_host(&url::Url::parse(u).unwrap()).is_some();
        assert!(refused("http://169.254.169.254/"));
        assert!(refused("http://[fd00:ec2::254]/"));
        assert!(refused("http://metadata.google.internal/"));
        assert!(refused("http://0.0.0.0:9999/"));
        assert!(refused("http://[fe80::1]:9999/"));
        assert!(!refused("http://127.0.0.1:9999/"));
        assert!(!refused("http://10.0.0.5:9999/"));
        assert!(!refused("http://agent-7.internal:9999/"));
    }

    #[test]
    fn agent_keys_are_checked_for_shape() {
        assert!(check_key("short").is_err());
        assert!(check_key(&"k".repeat(257)).is_err());
        assert!(check_key(&format!("{} x", "k".repeat(40))).is_err());
        assert_eq!(check_key(&"k".repeat(40)).unwrap().len(), 64);
    }
}
