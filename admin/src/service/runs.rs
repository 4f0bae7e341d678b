//! Runs: the record of every trigger, read with filters and paging.

use serde::{Deserialize, Serialize};

use crate::auth::rbac::Actor;
use crate::db::{Page, job, job_run};
use crate::dispatch::client::KillOutcome;
use crate::domain::ids::{GroupId, JobId, RunId};
use crate::domain::policy::{RunStatus, TriggerKind};
use crate::error::Error;
use crate::service::Paged;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UsageView {
    pub cpu_ms: Option<i64>,
    pub max_rss_kb: Option<i64>,
    pub oom_killed: Option<bool>,
    pub limits_mode: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunView {
    pub id: RunId,
    pub job_id: JobId,
    pub group_id: GroupId,
    /// The first attempt of this chain; absent on the first attempt itself.
    pub first_run_id: Option<RunId>,
    pub attempt: i32,
    pub trigger_kind: TriggerKind,
    /// The scheduled slot a fire stands for (schedule and misfire runs); unique per job and shard.
    pub fire_slot_ms: Option<i64>,
    pub status: RunStatus,
    /// The agent the run was sent to.
    pub agent: Option<String>,
    pub scheduled_ms: i64,
    pub triggered_ms: Option<i64>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub params: String,
    pub shard_index: i32,
    pub shard_total: i32,
    pub trigger_msg: Option<String>,
    pub handle_code: Option<i32>,
    pub handle_msg: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub usage: UsageView,
}

pub fn view(row: job_run::JobRun) -> RunView {
    RunView {
        id: row.id,
        job_id: row.job_id,
        group_id: row.group_id,
        first_run_id: row.first_run_id,
        attempt: row.attempt,
        trigger_kind: row.trigger_kind,
        fire_slot_ms: row.fire_slot_ms,
        status: row.status,
        agent: row.agent_address,
        scheduled_ms: row.scheduled_ms,
        triggered_ms: row.triggered_ms,
        started_ms: row.started_ms,
        finished_ms: row.finished_ms,
        params: row.params,
        shard_index: row.shard_index,
        shard_total: row.shard_total,
        trigger_msg: row.trigger_msg,
        handle_code: row.handle_code,
        handle_msg: row.handle_msg,
        exit_code: row.exit_code,
        signal: row.term_signal,
        usage: UsageView {
            cpu_ms: row.cpu_ms,
            max_rss_kb: row.max_rss_kb,
            oom_killed: row.oom_killed,
            limits_mode: row.limits_mode,
        },
    }
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    pub job_id: Option<JobId>,
    pub group_id: Option<GroupId>,
    /// pending, running, succeeded, failed, timed_out, killed, lost, skipped
    pub status: Option<String>,
    /// Scheduled at or after, UTC ms.
    pub from_ms: Option<i64>,
    /// Scheduled before, UTC ms.
    pub to_ms: Option<i64>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

pub async fn list(
    state: &AppState,
    actor: &Actor,
    query: RunQuery,
) -> Result<Paged<RunView>, Error> {
    let page = Page::new(query.limit, query.offset)?;
    if let Some(status) = &query.status {
        status
            .parse::<RunStatus>()
            .map_err(|e| Error::invalid("status", e))?;
    }
    if let (Some(from), Some(to)) = (query.from_ms, query.to_ms)
        && from > to
    {
        return Err(Error::invalid("from_ms", "must not be after to_ms"));
    }
    let filter = job_run::RunFilter {
        visible_groups: actor.visible_groups(),
        job_id: query.job_id,
        group_id: query.group_id,
        status: query.status,
        from_ms: query.from_ms,
        to_ms: query.to_ms,
    };
    state
        .db
        .run(move |conn| {
            Ok(Paged {
                items: job_run::list(conn, &filter, page)?
                    .into_iter()
                    .map(view)
                    .collect(),
                total: job_run::count(conn, &filter)?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}

/// The run `id` if the caller may see its group. A run of a group the caller cannot see answers
/// exactly like one that does not exist (`NotFound("run")`, the error `job_run::get` gives).
///
/// # Errors
/// `NotFound` for a missing or hidden run; database errors.
async fn visible_run(state: &AppState, actor: &Actor, id: RunId) -> Result<job_run::JobRun, Error> {
    let row = state.db.run(move |conn| job_run::get(conn, id)).await?;
    if actor.sees_group(row.group_id) {
        Ok(row)
    } else {
        Err(Error::NotFound("run"))
    }
}

/// The names of the jobs of runs the caller was shown. Taking views (which only this service
/// hands out, after its visibility check) rather than bare ids keeps it from naming jobs of
/// runs the caller never saw.
///
/// # Errors
/// Database errors.
pub async fn job_names<'a>(
    state: &AppState,
    runs: impl IntoIterator<Item = &'a RunView>,
) -> Result<std::collections::HashMap<JobId, String>, Error> {
    let ids: Vec<JobId> = runs.into_iter().map(|r| r.job_id).collect();
    state
        .db
        .run(move |conn| {
            Ok(job::find_all(conn, &ids)?
                .into_iter()
                .map(|j| (j.id, j.name))
                .collect())
        })
        .await
}

/// The runs the caller may see that are running on any of `addresses` (at most 500).
///
/// # Errors
/// Database errors.
pub async fn running_on(
    state: &AppState,
    actor: &Actor,
    addresses: Vec<String>,
) -> Result<Vec<RunView>, Error> {
    let visible = actor.visible_groups();
    state
        .db
        .run(move |conn| {
            Ok(job_run::running_on_addresses(
                conn,
                &addresses,
                visible.as_deref(),
                Page::MAX_LIMIT,
            )?
            .into_iter()
            .map(view)
            .collect())
        })
        .await
}

pub async fn get(state: &AppState, actor: &Actor, id: RunId) -> Result<RunView, Error> {
    Ok(view(visible_run(state, actor, id).await?))
}

/// `POST /api/v1/jobs/{id}/trigger`: optional params (default: the job's) and agent address.
#[derive(Debug, Default, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    pub params: Option<String>,
    /// Base URL of one of the group's agents; default: the group's live agents in order.
    pub address: Option<String>,
}

fn normalize_address(raw: &str) -> String {
    if raw.ends_with('/') {
        raw.to_owned()
    } else {
        format!("{raw}/")
    }
}

/// The request's params and agent, checked; the agent normalised to its base URL.
fn checked_request(request: &TriggerRequest) -> Result<Option<String>, Error> {
    if let Some(p) = &request.params {
        crate::domain::job::check_text("params", p, crate::domain::job::MAX_PARAMS_BYTES)?;
    }
    let wanted = request.address.as_deref().map(|a| {
        let ok = (a.starts_with("http://") || a.starts_with("https://"))
            && a.len() <= 255
            && url::Url::parse(a).is_ok();
        if ok {
            Ok(normalize_address(a))
        } else {
            Err(Error::invalid(
                "address",
                "must be an agent base URL such as http://10.0.0.5:9999/",
            ))
        }
    });
    wanted.transpose()
}

/// Refuses an agent named in a request that is not a live agent of the job's group, or lacks
/// a label the job requires.
fn check_wanted_agent(
    conn: &mut crate::db::AnyConnection,
    job: &job::Job,
    wanted: Option<&str>,
    now: i64,
) -> Result<(), Error> {
    if let Some(address) = wanted {
        let (_, live) = crate::dispatch::send::candidates(conn, job.group_id, now)?;
        let Some(agent) = live.iter().find(|c| c.address == address) else {
            return Err(Error::invalid(
                "address",
                format!("{address} is not a live agent of this job's group"),
            ));
        };
        let required = job.agent_labels();
        if !jobfleet_agent::protocol::labels::satisfies(&agent.labels, &required) {
            return Err(Error::invalid(
                "address",
                format!(
                    "{address} lacks labels this job requires ({})",
                    jobfleet_agent::protocol::labels::format_labels(&required)
                ),
            ));
        }
    }
    Ok(())
}

/// Hands a run created (and committed) just now to an agent; the run as it stands after.
async fn send_now(state: &AppState, run_id: RunId, only: Option<String>) -> Result<RunView, Error> {
    // The run row (and its audit row) is committed before any agent is called: a crash in
    // between leaves a pending run that the recovery monitor sends.
    crate::dispatch::send::dispatch(state, run_id, only).await?;
    state
        .db
        .run(move |conn| Ok(view(job_run::get(conn, run_id)?)))
        .await
}

/// Runs a finished run again now as the next attempt of its chain (`first_run_id`, attempt
/// after the chain's last), with its params unless the request gives others, on the agents
/// its job routes to (or the one named). Refused while any attempt of the chain is still
/// pending or running (an automatic retry may be waiting), and for a workflow node's run,
/// which its workflow reruns.
pub async fn retry(
    state: &AppState,
    actor: &Actor,
    run_id: RunId,
    request: TriggerRequest,
) -> Result<RunView, Error> {
    let wanted = checked_request(&request)?;
    let now = state.clock.now_ms();
    let actor_owned = actor.clone();
    let only = wanted.clone();
    let new_id = state
        .db
        .transaction(move |conn| {
            let run = job_run::get(conn, run_id)?;
            if !actor_owned.sees_group(run.group_id) {
                return Err(Error::NotFound("run"));
            }
            actor_owned.write_group(run.group_id)?;
            if run.workflow_node_id.is_some() {
                return Err(Error::Conflict {
                    field: None,
                    message: format!(
                        "run {run_id} is a step of a workflow run: rerun it from the workflow"
                    ),
                });
            }
            let job = crate::service::jobs::visible_job(conn, &actor_owned, run.job_id)?;
            // The new run goes where the job is now, which may not be the old run's group.
            actor_owned.write_group(job.group_id)?;
            let first = run.first_run_id.unwrap_or(run.id);
            let chain = job_run::chain(conn, first)?;
            if let Some(open) = chain.iter().find(|r| !r.status.is_final()) {
                return Err(Error::Conflict {
                    field: None,
                    message: format!(
                        "attempt {} of this run (run {}) is still {}: wait for it, or kill it",
                        open.attempt, open.id, open.status
                    ),
                });
            }
            check_wanted_agent(conn, &job, wanted.as_deref(), now)?;
            let last_attempt = chain.iter().map(|r| r.attempt).max().unwrap_or(run.attempt);
            let new_id = crate::lifecycle::created(
                conn,
                &job_run::NewJobRun {
                    job_id: run.job_id,
                    group_id: job.group_id,
                    first_run_id: Some(first),
                    attempt: last_attempt + 1,
                    trigger_kind: TriggerKind::Retry,
                    fire_slot_ms: None,
                    scheduled_ms: now,
                    status: RunStatus::Pending,
                    params: request.params.clone().unwrap_or_else(|| run.params.clone()),
                    shard_index: run.shard_index,
                    shard_total: run.shard_total,
                    created_ms: now,
                    workflow_node_id: None,
                    node_attempt: None,
                    timeout_s: run.timeout_s,
                    env: run.env.clone(),
                },
            )?;
            let new_run = view(job_run::get(conn, new_id)?);
            crate::audit::record(
                conn,
                &actor_owned,
                now,
                crate::audit::Entry::new("run.retry", "run", run_id).after(&new_run)?,
            )?;
            Ok(new_id)
        })
        .await?;
    state.metrics.fires.inc("retry");
    send_now(state, new_id, only).await
}

/// Creates a run of the job now and hands it to an agent by the job's routing strategy (or to
/// the one agent named); returns the run as it stands after the hand-over.
pub async fn trigger(
    state: &AppState,
    actor: &Actor,
    job_id: JobId,
    request: TriggerRequest,
) -> Result<RunView, Error> {
    let wanted = checked_request(&request)?;
    let now = state.clock.now_ms();
    let actor_owned = actor.clone();
    let only = wanted.clone();
    let run_id = state
        .db
        .transaction(move |conn| {
            let job = crate::service::jobs::visible_job(conn, &actor_owned, job_id)?;
            actor_owned.write_group(job.group_id)?;
            check_wanted_agent(conn, &job, wanted.as_deref(), now)?;
            let run_id = crate::lifecycle::created(
                conn,
                &job_run::NewJobRun {
                    job_id,
                    group_id: job.group_id,
                    first_run_id: None,
                    attempt: 1,
                    trigger_kind: TriggerKind::Api,
                    fire_slot_ms: None,
                    scheduled_ms: now,
                    status: RunStatus::Pending,
                    params: request.params.clone().unwrap_or_else(|| job.params.clone()),
                    shard_index: 0,
                    shard_total: 1,
                    created_ms: now,
                    workflow_node_id: None,
                    node_attempt: None,
                    timeout_s: None,
                    env: None,
                },
            )?;
            let run = job_run::get(conn, run_id)?;
            crate::audit::record(
                conn,
                &actor_owned,
                now,
                crate::audit::Entry::new("job.trigger", "job", job_id).after(&view(run))?,
            )?;
            Ok(run_id)
        })
        .await?;
    state.metrics.fires.inc("api");
    send_now(state, run_id, only).await
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct LogPage {
    pub from_line: i64,
    pub to_line: i64,
    pub content: String,
    /// True once the run has finished and the last line was returned.
    pub is_end: bool,
}

/// Lines per page of a kept log, as an agent pages its own.
const KEPT_LINES_PER_PAGE: usize = 1000;

/// A page of a run's log: kept by the admins once the run has finished, else read from the
/// agent that ran it.
pub async fn log(
    state: &AppState,
    actor: &Actor,
    run_id: RunId,
    from_line: i64,
) -> Result<LogPage, Error> {
    if from_line < 1 {
        return Err(Error::invalid("from_line", "must be at least 1"));
    }
    let run = visible_run(state, actor, run_id).await?;
    if run.status.is_final() {
        // A finished run's log kept by the admins needs no agent, which may be gone.
        let kept = state
            .db
            .run(move |conn| crate::db::run_log::kept(conn, run_id))
            .await?;
        if let Some(kept) = kept {
            let (to_line, content, is_end) =
                crate::scheduler::log_keeper::page(&kept.content, from_line, KEPT_LINES_PER_PAGE);
            return Ok(LogPage {
                from_line,
                to_line,
                content,
                is_end,
            });
        }
    }
    let address = run
        .agent_address
        .clone()
        .or_else(|| crate::dispatch::send::held_agent(state, run.id));
    let Some(address) = address else {
        return Ok(LogPage {
            from_line,
            to_line: from_line - 1,
            content: String::new(),
            is_end: true,
        });
    };
    let page = state
        .agents
        .run_log_page(&address, run.id, run.created_ms, from_line)
        .await
        .map_err(|e| Error::AgentUnreachable(format!("agent {address}: {e}")))?;
    Ok(LogPage {
        from_line: page.from_line_num,
        to_line: page.to_line_num,
        content: page.log_content,
        is_end: page.is_end,
    })
}

/// Asks the run's agent to kill it; the agent reports the run as killed through its callback.
/// A run that has already ended on the agent (its result not stored yet) is a conflict, not
/// audited: nothing was killed.
pub async fn kill(state: &AppState, actor: &Actor, run_id: RunId) -> Result<RunView, Error> {
    let mut run = visible_run(state, actor, run_id).await?;
    actor.write_group(run.group_id)?;
    // Just taken by an agent whose acceptance is held back: stored first, so the run is running.
    if run.status == RunStatus::Pending && crate::dispatch::send::store_held(state, run_id).await? {
        run = visible_run(state, actor, run_id).await?;
    }
    if run.status != RunStatus::Running {
        return Err(Error::Conflict {
            field: None,
            message: format!("run {run_id} is {}, not running", run.status),
        });
    }
    let address = run.agent_address.clone().ok_or_else(|| Error::Conflict {
        field: None,
        message: "the run has no agent".into(),
    })?;
    let outcome = state
        .agents
        .kill(&address, run.job_id, run.id)
        .await
        .map_err(|e| Error::AgentUnreachable(format!("agent {address}: {e}")))?;
    if let KillOutcome::NotThere(said) = outcome {
        return Err(Error::Conflict {
            field: None,
            message: format!(
                "agent {address} has nothing of run {run_id} to kill ({said}): the run has ended \
                 there and its result is on its way"
            ),
        });
    }
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let current = job_run::get(conn, run_id)?;
            crate::audit::record(
                conn,
                &actor,
                now,
                crate::audit::Entry::new("run.kill", "run", run_id)
                    .before(&view(current.clone()))?,
            )?;
            Ok(view(current))
        })
        .await
}
