//! Runs: the record of every trigger, read with filters and paging.

use serde::{Deserialize, Serialize};

use crate::auth::rbac::Actor;
use crate::db::{Page, job_run};
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::service::Paged;
use crate::startup::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UsageView {
    pub cpu_ms: Option<i64>,
    pub max_rss_kb: Option<i64>,
    pub oom_killed: Option<bool>,
    pub limits_mode: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunView {
    pub id: i64,
    pub job_id: i64,
    pub group_id: i64,
    /// The first attempt of this chain; absent on the first attempt itself.
    pub first_run_id: Option<i64>,
    pub attempt: i32,
    pub trigger_kind: String,
    pub status: String,
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
    pub job_id: Option<i64>,
    pub group_id: Option<i64>,
    /// pending, running, succeeded, failed, timed_out, killed, lost
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

pub async fn get(state: &AppState, actor: &Actor, id: i64) -> Result<RunView, Error> {
    let row = state.db.run(move |conn| job_run::get(conn, id)).await?;
    actor.read_group(row.group_id)?;
    Ok(view(row))
}
