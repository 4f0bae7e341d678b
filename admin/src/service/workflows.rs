//! Workflows: define (create, change, delete, read), trigger, and operate their runs (pause,
//! resume, cancel, re-run from failure, mark a node). The engine that advances runs is
//! `lifecycle::workflow`; this layer checks rights, validates, audits, and kills what a cancel
//! ended on the agents after the commit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::{self, Entry};
use crate::auth::rbac::Actor;
use crate::db::job_run::JobRun;
use crate::db::workflow::{Workflow, WorkflowFields};
use crate::db::workflow_run::{RunFilter, WorkflowRun};
use crate::db::{
    AnyConnection, Page, executor_group, job, job_run, workflow, workflow_node, workflow_run,
};
use crate::domain::ids::{ChannelId, GroupId, JobId, RunId, WorkflowId, WorkflowRunId};
use crate::domain::job::{
    MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, MAX_PARAMS_BYTES, MAX_TIMEOUT_S, ScheduleInput,
    check_name, check_text,
};
use crate::domain::policy::{Concurrency, Misfire, TriggerKind};
use crate::domain::schedule::ScheduleType;
use crate::domain::workflow::{Definition, EdgeDef, Graph, NodeDef, NodeStatus, WorkflowStatus};
use crate::error::Error;
use crate::lifecycle::{Changes, workflow as engine};
use crate::service::Paged;
use crate::service::jobs::ScheduleView;
use crate::state::AppState;

/// `POST /api/v1/workflows` and `PUT /api/v1/workflows/{id}`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowInput {
    pub group_id: GroupId,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Reaches every node as `JOBFLEET_WORKFLOW_PARAMS`; a trigger may override it.
    #[serde(default)]
    pub params: Option<String>,
    pub nodes: Vec<NodeDef>,
    #[serde(default)]
    pub edges: Vec<EdgeDef>,
    /// Across runs of this workflow: `allow`, `forbid` (a trigger while one runs is refused),
    /// `replace` (the running one is cancelled).
    #[serde(default)]
    pub concurrency: Option<Concurrency>,
    /// The whole run's limit; 0 (default): none.
    #[serde(default)]
    pub timeout_s: Option<i64>,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Alerts when a run ends failed or timed out, on these channels.
    #[serde(default)]
    pub alert: Option<WorkflowAlertInput>,
    /// As a job's: `none` (default: run when triggered), `cron`, `fixed_rate` or `once`, with
    /// a time zone. A scheduled fire starts a run with trigger kind `schedule` (or `misfire`
    /// for a catch-up), under the concurrency policy.
    #[serde(default)]
    pub schedule: Option<ScheduleInput>,
    /// As a job's: after an outage, `do_nothing` (default) or `fire_once_now`. Read as text
    /// and parsed by `check_input`, so that a bad value is refused naming `misfire`.
    #[serde(default)]
    #[schema(example = "do_nothing")]
    pub misfire: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowAlertInput {
    pub on_failure: Option<bool>,
    pub channels: Option<Vec<ChannelId>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WorkflowAlertView {
    pub on_failure: bool,
    pub channels: Vec<ChannelId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WorkflowView {
    pub id: WorkflowId,
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    pub params: String,
    pub nodes: Vec<NodeDef>,
    pub edges: Vec<EdgeDef>,
    pub concurrency: Concurrency,
    pub timeout_s: i64,
    pub enabled: bool,
    pub alert: WorkflowAlertView,
    pub schedule: ScheduleView,
    pub misfire: Misfire,
    /// The next scheduled slot not planned yet (`None`: unscheduled, disabled or done).
    pub next_fire_ms: Option<i64>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeRunView {
    pub key: String,
    pub job_id: JobId,
    pub status: NodeStatus,
    /// 1, then one more per re-run from failure that opened it again.
    pub attempt: i32,
    /// Its job runs (retries and earlier attempts included), oldest first.
    pub run_ids: Vec<RunId>,
    pub outputs: BTreeMap<String, String>,
    pub message: String,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WorkflowRunView {
    pub id: WorkflowRunId,
    pub workflow_id: WorkflowId,
    pub group_id: GroupId,
    pub status: WorkflowStatus,
    pub params: String,
    pub trigger_kind: TriggerKind,
    pub message: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    /// The scheduled slot this run stands for; absent for a manual or API trigger.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fire_slot_ms: Option<i64>,
    /// Present when one run is read; omitted in lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<NodeRunView>>,
}

fn view(row: Workflow) -> Result<WorkflowView, Error> {
    let definition: Definition = serde_json::from_str(&row.definition).map_err(|e| {
        Error::Internal(anyhow::anyhow!(
            "workflow {}: stored definition: {e}",
            row.id
        ))
    })?;
    Ok(WorkflowView {
        id: row.id,
        group_id: row.group_id,
        name: row.name,
        description: row.description,
        params: row.params,
        nodes: definition.nodes,
        edges: definition.edges,
        concurrency: row.concurrency,
        timeout_s: row.timeout_s,
        enabled: row.enabled,
        alert: WorkflowAlertView {
            on_failure: row.alert_on_failure,
            channels: row.alert_channels.0,
        },
        schedule: ScheduleView {
            kind: row.schedule_type,
            expr: row.schedule_expr,
            interval_s: row.interval_s,
            at_ms: row.once_at_ms,
            timezone: row.timezone,
        },
        misfire: row.misfire,
        next_fire_ms: row.next_fire_ms,
        created_ms: row.created_ms,
        updated_ms: row.updated_ms,
    })
}

fn run_view(row: WorkflowRun, nodes: Option<Vec<NodeRunView>>) -> WorkflowRunView {
    WorkflowRunView {
        id: row.id,
        workflow_id: row.workflow_id,
        group_id: row.group_id,
        status: row.status,
        params: row.params,
        trigger_kind: row.trigger_kind,
        message: row.message,
        started_ms: row.started_ms,
        finished_ms: row.finished_ms,
        fire_slot_ms: row.fire_slot_ms,
        nodes,
    }
}

/// A checked input: the row's fields and the graph.
#[derive(Debug)]
struct Checked {
    fields: WorkflowFields,
    graph: Graph,
}

/// Everything that can be checked without the database.
fn check_input(input: WorkflowInput, now: i64) -> Result<Checked, Error> {
    let name = check_name("name", &input.name, MAX_NAME_CHARS)?;
    let description = input.description.unwrap_or_default();
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(Error::invalid(
            "description",
            format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
        ));
    }
    let description = check_text("description", &description, MAX_DESCRIPTION_CHARS * 4)?;
    let params = check_text(
        "params",
        &input.params.unwrap_or_default(),
        MAX_PARAMS_BYTES,
    )?;
    let timeout_s = input.timeout_s.unwrap_or(0);
    if !(0..=MAX_TIMEOUT_S).contains(&timeout_s) {
        return Err(Error::invalid(
            "timeout_s",
            format!("must be between 0 and {MAX_TIMEOUT_S} (got {timeout_s})"),
        ));
    }
    // The job's rules and parser: `schedule.*` fields are named as a job's are.
    let schedule_input = input.schedule.unwrap_or(ScheduleInput {
        kind: ScheduleType::None,
        expr: None,
        interval_s: None,
        at_ms: None,
        timezone: None,
    });
    let (schedule, tz) = schedule_input.validate()?;
    let enabled = input.enabled.unwrap_or(true);
    let misfire = match input.misfire.as_deref() {
        None => Misfire::DoNothing,
        Some(text) => text.parse::<Misfire>().map_err(|_| {
            Error::invalid("misfire", format!("must be one of {}", Misfire::names()))
        })?,
    };
    let alert = input.alert.unwrap_or_default();
    let channels = alert.channels.unwrap_or_default();
    if channels.len() > 20 {
        return Err(Error::invalid("alert.channels", "at most 20 channels"));
    }
    let graph = Definition {
        nodes: input.nodes,
        edges: input.edges,
    }
    .validate()?;
    let definition = serde_json::to_string(&graph.definition)
        .map_err(|e| Error::Internal(anyhow::anyhow!("encoding a definition: {e}")))?;
    Ok(Checked {
        fields: WorkflowFields {
            group_id: input.group_id,
            name,
            description,
            definition,
            params,
            concurrency: input.concurrency.unwrap_or(Concurrency::Allow),
            timeout_s,
            alert_on_failure: alert.on_failure.unwrap_or(false),
            alert_channels: channels.into(),
            enabled,
            updated_ms: now,
            schedule_type: schedule.kind(),
            schedule_expr: schedule_input
                .expr
                .filter(|_| schedule.kind() == ScheduleType::Cron),
            interval_s: schedule_input.interval_s,
            once_at_ms: schedule_input.at_ms,
            timezone: tz.name().to_owned(),
            misfire,
            // Planned from now, as a job's is: a fixed rate is anchored at the save.
            next_fire_ms: if enabled {
                schedule.next_after(now, now, tz)
            } else {
                None
            },
            pending_slot_ms: None,
            pending_at_ms: None,
        },
        graph,
    })
}

/// The checks that need the database: the group exists and the caller may write it, the name is
/// free, and every node's job exists, is visible and belongs to the workflow's group.
fn check_references(
    conn: &mut AnyConnection,
    actor: &Actor,
    checked: &Checked,
    id: Option<WorkflowId>,
) -> Result<(), Error> {
    let group_id = checked.fields.group_id;
    if executor_group::find(conn, group_id)?.is_none() || !actor.sees_group(group_id) {
        return Err(Error::invalid(
            "group_id",
            format!("executor group {group_id} does not exist"),
        ));
    }
    actor.write_group(group_id)?;
    crate::service::jobs::check_alert_channels(conn, &checked.fields.alert_channels)?;
    if let Some(other) = workflow::find_by_name(conn, group_id, &checked.fields.name)?
        && Some(other.id) != id
    {
        return Err(Error::conflict(
            "name",
            format!(
                "a workflow named `{}` already exists in the group",
                checked.fields.name
            ),
        ));
    }
    let ids: Vec<JobId> = checked
        .graph
        .definition
        .nodes
        .iter()
        .map(|n| JobId(n.job_id))
        .collect();
    let groups: BTreeMap<JobId, GroupId> = job::groups_of(conn, &ids)?.into_iter().collect();
    for (i, node) in checked.graph.definition.nodes.iter().enumerate() {
        let field = format!("nodes[{i}].job_id");
        match groups.get(&JobId(node.job_id)) {
            Some(g) if *g == group_id => {}
            Some(g) if actor.sees_group(*g) => {
                return Err(Error::invalid(
                    field,
                    format!(
                        "job {} is in executor group {g}; a workflow runs jobs of its own group ({group_id})",
                        node.job_id
                    ),
                ));
            }
            // A job in a group the caller cannot see is reported as missing: the answer must
            // not tell whether it exists.
            _ => {
                return Err(Error::invalid(
                    field,
                    format!("job {} does not exist", node.job_id),
                ));
            }
        }
    }
    Ok(())
}

fn visible_workflow(
    conn: &mut AnyConnection,
    actor: &Actor,
    id: WorkflowId,
) -> Result<Workflow, Error> {
    workflow::find(conn, id)?
        .filter(|w| actor.sees_group(w.group_id))
        .ok_or(Error::NotFound("workflow"))
}

fn visible_run(
    conn: &mut AnyConnection,
    actor: &Actor,
    id: WorkflowRunId,
) -> Result<WorkflowRun, Error> {
    workflow_run::get(conn, id)
        .ok()
        .filter(|r| actor.sees_group(r.group_id))
        .ok_or(Error::NotFound("workflow run"))
}

pub async fn create(
    state: &AppState,
    actor: &Actor,
    input: WorkflowInput,
) -> Result<WorkflowView, Error> {
    let now = state.clock.now_ms();
    let checked = check_input(input, now)?;
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            check_references(conn, &actor, &checked, None)?;
            let id = workflow::insert(conn, &checked.fields)?;
            let created = view(workflow::get(conn, id)?)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("workflow.create", "workflow", id).after(&created)?,
            )?;
            Ok(created)
        })
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.workflows_changed())
}

pub async fn update(
    state: &AppState,
    actor: &Actor,
    id: WorkflowId,
    input: WorkflowInput,
) -> Result<WorkflowView, Error> {
    let now = state.clock.now_ms();
    let checked = check_input(input, now)?;
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let before = visible_workflow(conn, &actor, id)?;
            actor.write_group(before.group_id)?;
            check_references(conn, &actor, &checked, Some(id))?;
            let before = view(before)?;
            workflow::update(conn, id, &checked.fields)?;
            let after = view(workflow::get(conn, id)?)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("workflow.update", "workflow", id)
                    .before(&before)?
                    .after(&after)?,
            )?;
            Ok(after)
        })
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.workflows_changed())
}

/// Deletes a workflow with no run in progress; its finished runs stay readable.
pub async fn delete(state: &AppState, actor: &Actor, id: WorkflowId) -> Result<(), Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let row = visible_workflow(conn, &actor, id)?;
            actor.write_group(row.group_id)?;
            if let Some(run) = workflow_run::in_flight(conn, id)?.first() {
                return Err(Error::Conflict {
                    field: None,
                    message: format!(
                        "workflow run {} is still {}: cancel it first",
                        run.id, run.status
                    ),
                });
            }
            let before = view(row)?;
            workflow::delete(conn, id)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("workflow.delete", "workflow", id).before(&before)?,
            )
        })
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.workflows_changed())
}

pub async fn get(state: &AppState, actor: &Actor, id: WorkflowId) -> Result<WorkflowView, Error> {
    let actor = actor.clone();
    let row = state
        .db
        .run(move |conn| visible_workflow(conn, &actor, id))
        .await?;
    view(row)
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WorkflowQuery {
    pub group_id: Option<GroupId>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

pub async fn list(
    state: &AppState,
    actor: &Actor,
    query: WorkflowQuery,
) -> Result<Paged<WorkflowView>, Error> {
    let page = Page::new(query.limit, query.offset)?;
    let groups = actor.visible_groups();
    let (rows, total) = state
        .db
        .run(move |conn| workflow::list(conn, groups.as_deref(), query.group_id, page))
        .await?;
    Ok(Paged {
        items: rows.into_iter().map(view).collect::<Result<_, _>>()?,
        total,
        limit: page.limit,
        offset: page.offset,
    })
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowTrigger {
    /// Instead of the workflow's params.
    #[serde(default)]
    pub params: Option<String>,
}

/// Starts a run now. `forbid` refuses while another run is in progress; `replace` cancels it.
pub async fn trigger(
    state: &AppState,
    actor: &Actor,
    id: WorkflowId,
    request: WorkflowTrigger,
) -> Result<WorkflowRunView, Error> {
    if let Some(p) = &request.params {
        check_text("params", p, MAX_PARAMS_BYTES)?;
    }
    let actor_owned = actor.clone();
    let changes = Changes::new(state);
    let (run_id, killed, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let now = changes.now_ms();
            let row = visible_workflow(conn, &actor_owned, id)?;
            actor_owned.write_group(row.group_id)?;
            if !row.enabled {
                return Err(Error::Conflict {
                    field: None,
                    message: format!("workflow {id} is disabled"),
                });
            }
            let killed = match engine::make_room(conn, &mut changes, &row)? {
                engine::Room::Free(killed) => killed,
                engine::Room::Busy(other) => {
                    return Err(Error::Conflict {
                        field: None,
                        message: format!(
                            "workflow run {} is still {} (concurrency policy forbid)",
                            other.id, other.status
                        ),
                    });
                }
            };
            let graph = crate::domain::workflow::Definition::validate(
                serde_json::from_str(&row.definition).map_err(|e| {
                    Error::Internal(anyhow::anyhow!("workflow {id}: stored definition: {e}"))
                })?,
            )?;
            let params = request.params.clone().unwrap_or_else(|| row.params.clone());
            let run_id = engine::start(
                conn,
                &mut changes,
                &row,
                &graph,
                params,
                TriggerKind::Api,
                None,
            )?;
            audit::record(
                conn,
                &actor_owned,
                now,
                Entry::new("workflow.trigger", "workflow", id).after(&serde_json::json!({
                    "workflow_run_id": run_id,
                }))?,
            )?;
            Ok((run_id, killed, changes))
        })
        .await?;
    changes.committed(state);
    crate::dispatch::send::kill_on_agents(state, &killed).await;
    get_run(state, actor, run_id).await
}

pub async fn get_run(
    state: &AppState,
    actor: &Actor,
    id: WorkflowRunId,
) -> Result<WorkflowRunView, Error> {
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            let run = visible_run(conn, &actor, id)?;
            let nodes = workflow_node::of_run(conn, id)?
                .into_iter()
                .map(|n| {
                    let run_ids = job_run::of_node(conn, n.id)?
                        .into_iter()
                        .map(|r: JobRun| r.id)
                        .collect();
                    Ok(NodeRunView {
                        key: n.node_key,
                        job_id: n.job_id,
                        status: n.status,
                        attempt: n.attempt,
                        run_ids,
                        outputs: serde_json::from_str(&n.outputs).unwrap_or_default(),
                        message: n.message,
                        started_ms: n.started_ms,
                        finished_ms: n.finished_ms,
                    })
                })
                .collect::<Result<Vec<_>, Error>>()?;
            Ok(run_view(run, Some(nodes)))
        })
        .await
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRunQuery {
    pub workflow_id: Option<WorkflowId>,
    pub status: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

pub async fn list_runs(
    state: &AppState,
    actor: &Actor,
    query: WorkflowRunQuery,
) -> Result<Paged<WorkflowRunView>, Error> {
    let page = Page::new(query.limit, query.offset)?;
    let status = query
        .status
        .as_deref()
        .map(str::parse::<WorkflowStatus>)
        .transpose()
        .map_err(|e| Error::invalid("status", e))?;
    let filter = RunFilter {
        visible_groups: actor.visible_groups(),
        workflow_id: query.workflow_id,
        status,
    };
    let (rows, total) = state
        .db
        .run(move |conn| workflow_run::list(conn, &filter, page))
        .await?;
    Ok(Paged {
        items: rows.into_iter().map(|r| run_view(r, None)).collect(),
        total,
        limit: page.limit,
        offset: page.offset,
    })
}

/// An operation on a run, as the API names it.
#[derive(Debug, Clone)]
pub enum Operation {
    Pause,
    Resume,
    Cancel,
    Rerun,
    Mark { key: String, status: NodeStatus },
}

impl Operation {
    fn audit_action(&self) -> &'static str {
        match self {
            Self::Pause => "workflow_run.pause",
            Self::Resume => "workflow_run.resume",
            Self::Cancel => "workflow_run.cancel",
            Self::Rerun => "workflow_run.rerun",
            Self::Mark { .. } => "workflow_run.mark",
        }
    }
}

/// `POST /api/v1/workflow-runs/{id}/nodes/{key}/mark`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkRequest {
    /// `succeeded` or `skipped`.
    pub status: String,
}

impl MarkRequest {
    pub fn status(&self) -> Result<NodeStatus, Error> {
        match self.status.as_str() {
            "succeeded" => Ok(NodeStatus::Succeeded),
            "skipped" => Ok(NodeStatus::Skipped),
            other => Err(Error::invalid(
                "status",
                format!("`{other}`: a node is marked `succeeded` or `skipped`"),
            )),
        }
    }
}

/// Pauses, resumes, cancels, re-runs or marks a node of a run, audited; returns the run after.
pub async fn operate(
    state: &AppState,
    actor: &Actor,
    id: WorkflowRunId,
    operation: Operation,
) -> Result<WorkflowRunView, Error> {
    let actor_owned = actor.clone();
    let changes = Changes::new(state);
    let (killed, changes) = state
        .db
        .transaction(move |conn| {
            let mut changes = changes.afresh();
            let now = changes.now_ms();
            let run = visible_run(conn, &actor_owned, id)?;
            actor_owned.write_group(run.group_id)?;
            let by = actor_owned.name.clone();
            let timeout_s = workflow::find(conn, run.workflow_id)?.map_or(0, |w| w.timeout_s);
            let mut killed = Vec::new();
            match &operation {
                Operation::Pause => engine::pause(conn, id, &by)?,
                Operation::Resume => engine::resume(conn, &mut changes, id)?,
                Operation::Cancel => {
                    killed = engine::cancel(
                        conn,
                        &mut changes,
                        id,
                        WorkflowStatus::Cancelled,
                        &format!("cancelled by {by}"),
                    )?;
                }
                Operation::Rerun => {
                    engine::rerun(conn, &mut changes, id, timeout_s)?;
                }
                Operation::Mark { key, status } => {
                    engine::mark(conn, &mut changes, id, key, *status, &by, timeout_s)?;
                }
            }
            let mut entry = Entry::new(operation.audit_action(), "workflow_run", id)
                .before(&serde_json::json!({"status": run.status}))?;
            if let Operation::Mark { key, status } = &operation {
                entry = entry.after(&serde_json::json!({"node": key, "status": status}))?;
            }
            audit::record(conn, &actor_owned, now, entry)?;
            Ok((killed, changes))
        })
        .await?;
    changes.committed(state);
    crate::dispatch::send::kill_on_agents(state, &killed).await;
    get_run(state, actor, id).await
}

/// The kind and version an exported document carries.
pub const DOCUMENT_KIND: &str = "jobfleet.workflow";
pub const DOCUMENT_VERSION: u32 = 1;

/// A workflow and its jobs in portable form: jobs are named, not numbered, so the document can
/// be kept in version control and imported into another group or another cluster.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowDocument {
    /// `jobfleet.workflow`.
    pub kind: String,
    /// 1.
    pub version: u32,
    pub workflow: WorkflowDocumentBody,
    /// Each as `POST /api/v1/jobs` takes it, without `group_id`.
    #[schema(value_type = Vec<Object>)]
    pub jobs: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowDocumentBody {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub params: String,
    #[serde(default)]
    pub concurrency: Option<Concurrency>,
    #[serde(default)]
    pub timeout_s: i64,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    #[serde(default)]
    pub alert: Option<WorkflowAlertView>,
    pub nodes: Vec<DocumentNode>,
    #[serde(default)]
    pub edges: Vec<EdgeDef>,
    /// Absent in documents written before workflows had schedules: `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "do_nothing")]
    pub misfire: Option<String>,
}

fn enabled_by_default() -> bool {
    true
}

/// A node naming its job.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentNode {
    pub key: String,
    /// The job's name: one of the document's jobs, or a job already in the target group.
    pub job: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<i64>,
    #[serde(default)]
    pub join: crate::domain::workflow::Join,
}

impl<'de> Deserialize<'de> for WorkflowAlertView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Alert {
            #[serde(default)]
            on_failure: bool,
            #[serde(default)]
            channels: Vec<ChannelId>,
        }
        let a = Alert::deserialize(d)?;
        Ok(WorkflowAlertView {
            on_failure: a.on_failure,
            channels: a.channels,
        })
    }
}

/// `GET /api/v1/workflows/{id}/export`.
pub async fn export(
    state: &AppState,
    actor: &Actor,
    id: WorkflowId,
) -> Result<WorkflowDocument, Error> {
    let actor = actor.clone();
    let (row, jobs) = state
        .db
        .run(move |conn| {
            let row = visible_workflow(conn, &actor, id)?;
            let definition: Definition = serde_json::from_str(&row.definition).map_err(|e| {
                Error::Internal(anyhow::anyhow!("workflow {id}: stored definition: {e}"))
            })?;
            let ids: Vec<JobId> = definition.nodes.iter().map(|n| JobId(n.job_id)).collect();
            Ok((row, job::find_all(conn, &ids)?))
        })
        .await?;
    let names: BTreeMap<JobId, String> = jobs.iter().map(|j| (j.id, j.name.clone())).collect();
    let view = view(row)?;
    let nodes = view
        .nodes
        .iter()
        .map(|n| DocumentNode {
            key: n.key.clone(),
            // A job deleted since keeps its id as its name: the import then names it missing.
            job: names
                .get(&JobId(n.job_id))
                .cloned()
                .unwrap_or_else(|| format!("#{}", n.job_id)),
            params: n.params.clone(),
            timeout_s: n.timeout_s,
            join: n.join,
        })
        .collect();
    Ok(WorkflowDocument {
        kind: DOCUMENT_KIND.to_owned(),
        version: DOCUMENT_VERSION,
        workflow: WorkflowDocumentBody {
            name: view.name,
            description: view.description,
            params: view.params,
            concurrency: Some(view.concurrency),
            timeout_s: view.timeout_s,
            enabled: view.enabled,
            alert: Some(view.alert),
            nodes,
            edges: view.edges,
            schedule: Some(ScheduleInput {
                kind: view.schedule.kind,
                expr: view.schedule.expr,
                interval_s: view.schedule.interval_s,
                at_ms: view.schedule.at_ms,
                timezone: Some(view.schedule.timezone),
            }),
            misfire: Some(view.misfire.as_str().to_owned()),
        },
        jobs: jobs
            .into_iter()
            .map(|j| crate::service::jobs_as_code::job_document(crate::service::jobs::view(j)))
            .collect::<Result<_, _>>()?,
    })
}

/// `POST /api/v1/workflows/import`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    pub group_id: GroupId,
    pub document: WorkflowDocument,
}

/// Puts a document's jobs and workflow into a group, matched by name: what exists is updated,
/// the rest created, all in one transaction, each change audited as an edit would be. Returns
/// the workflow and whether it was created.
pub async fn import(
    state: &AppState,
    actor: &Actor,
    request: ImportRequest,
) -> Result<(WorkflowView, bool), Error> {
    let ImportRequest { group_id, document } = request;
    if document.kind != DOCUMENT_KIND {
        return Err(Error::invalid(
            "document.kind",
            format!("must be `{DOCUMENT_KIND}`"),
        ));
    }
    if document.version != DOCUMENT_VERSION {
        return Err(Error::invalid(
            "document.version",
            format!("this admin reads version {DOCUMENT_VERSION}"),
        ));
    }
    let mut specs = Vec::with_capacity(document.jobs.len());
    for (i, job) in document.jobs.iter().enumerate() {
        let field = format!("document.jobs[{i}]");
        let mut job = job.clone();
        let Some(fields) = job.as_object_mut() else {
            return Err(Error::invalid(field, "must be an object"));
        };
        fields.insert("group_id".into(), serde_json::json!(group_id));
        let input: crate::domain::job::JobInput = serde_json::from_value(job)
            .map_err(|e| Error::invalid(field.clone(), e.to_string()))?;
        let spec = input.validate().map_err(|e| e.within(&field))?;
        if specs
            .iter()
            .any(|s: &crate::domain::job::JobSpec| s.name == spec.name)
        {
            return Err(Error::invalid(
                format!("{field}.name"),
                format!("the document names two jobs `{}`", spec.name),
            ));
        }
        specs.push(spec);
    }
    let now = state.clock.now_ms();
    let actor = actor.clone();
    let outcome = state
        .db
        .transaction(move |conn| {
            let mut ids: BTreeMap<String, JobId> = BTreeMap::new();
            for spec in specs.iter().cloned() {
                let name = spec.name.clone();
                let view = match job::find_by_name(conn, group_id, &name)? {
                    Some(existing) => {
                        crate::service::jobs::update_in(conn, &actor, existing.id, spec, now)?
                    }
                    None => crate::service::jobs::create_in(conn, &actor, spec, now)?,
                };
                ids.insert(name, view.id);
            }
            let body = document.workflow.clone();
            let mut nodes = Vec::with_capacity(body.nodes.len());
            for (i, node) in body.nodes.into_iter().enumerate() {
                let job_id = match ids.get(&node.job) {
                    Some(id) => *id,
                    None => {
                        job::find_by_name(conn, group_id, &node.job)?
                            .filter(|_| actor.sees_group(group_id))
                            .ok_or_else(|| {
                                Error::invalid(
                                    format!("document.workflow.nodes[{i}].job"),
                                    format!("no job `{}` in the document or the group", node.job),
                                )
                            })?
                            .id
                    }
                };
                nodes.push(NodeDef {
                    key: node.key,
                    job_id: job_id.0,
                    params: node.params,
                    timeout_s: node.timeout_s,
                    join: node.join,
                });
            }
            let input = WorkflowInput {
                group_id,
                name: body.name,
                description: Some(body.description),
                params: Some(body.params),
                nodes,
                edges: body.edges,
                concurrency: body.concurrency,
                timeout_s: Some(body.timeout_s),
                enabled: Some(body.enabled),
                alert: body.alert.map(|a| WorkflowAlertInput {
                    on_failure: Some(a.on_failure),
                    channels: Some(a.channels),
                }),
                schedule: body.schedule,
                misfire: body.misfire,
            };
            let checked = check_input(input, now).map_err(|e| e.within("document.workflow"))?;
            let existing = workflow::find_by_name(conn, group_id, &checked.fields.name)?;
            check_references(conn, &actor, &checked, existing.as_ref().map(|w| w.id))
                .map_err(|e| e.within("document.workflow"))?;
            match existing {
                Some(before) => {
                    let id = before.id;
                    let before = view(before)?;
                    workflow::update(conn, id, &checked.fields)?;
                    let after = view(workflow::get(conn, id)?)?;
                    audit::record(
                        conn,
                        &actor,
                        now,
                        Entry::new("workflow.update", "workflow", id)
                            .before(&before)?
                            .after(&after)?,
                    )?;
                    Ok((after, false))
                }
                None => {
                    let id = workflow::insert(conn, &checked.fields)?;
                    let created = view(workflow::get(conn, id)?)?;
                    audit::record(
                        conn,
                        &actor,
                        now,
                        Entry::new("workflow.create", "workflow", id).after(&created)?,
                    )?;
                    Ok((created, true))
                }
            }
        })
        .await?;
    // The imported jobs' and workflow's schedules are planned at once, as an edit's would be.
    state.scheduler.jobs_changed();
    state.scheduler.workflows_changed();
    Ok(outcome)
}

/// Checks a definition as `create` (no `id`) or `update` would, writing nothing: the console
/// editor's check as you type.
///
/// # Errors
/// What `create`/`update` would answer before writing.
pub async fn check(
    state: &AppState,
    actor: &Actor,
    input: WorkflowInput,
    id: Option<WorkflowId>,
) -> Result<(), Error> {
    let checked = check_input(input, state.clock.now_ms())?;
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            if let Some(id) = id {
                let before = visible_workflow(conn, &actor, id)?;
                actor.write_group(before.group_id)?;
            }
            check_references(conn, &actor, &checked, id)
        })
        .await
}

/// The names of the jobs among `ids` that the caller may see, for drawing nodes. A job of a
/// group the caller cannot see is left out, as if it did not exist.
pub async fn job_names(
    state: &AppState,
    actor: &Actor,
    ids: Vec<JobId>,
) -> Result<BTreeMap<JobId, String>, Error> {
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            Ok(job::find_all(conn, &ids)?
                .into_iter()
                .filter(|j| actor.sees_group(j.group_id))
                .map(|j| (j.id, j.name))
                .collect())
        })
        .await
}

/// The graph a run started with (a run keeps its definition; the workflow may have changed).
///
/// # Errors
/// `NotFound` for a run the caller cannot see.
pub async fn run_graph(state: &AppState, actor: &Actor, id: WorkflowRunId) -> Result<Graph, Error> {
    let actor = actor.clone();
    let run = state
        .db
        .run(move |conn| visible_run(conn, &actor, id))
        .await?;
    let definition: Definition = serde_json::from_str(&run.definition).map_err(|e| {
        Error::Internal(anyhow::anyhow!("workflow run {id}: stored definition: {e}"))
    })?;
    definition.validate()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;

    fn input(extra: serde_json::Value) -> WorkflowInput {
        let mut body = json!({
            "group_id": 1, "name": "nightly",
            "nodes": [{"key": "a", "job_id": 1}],
        });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_cron_schedule_in_a_time_zone_plans_as_a_jobs_does() {
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 30, 0)
            .unwrap()
            .timestamp_millis();
        let schedule = json!({"type": "cron", "expr": "0 0 9 * * ?", "timezone": "Asia/Shanghai"});
        let checked = check_input(
            input(json!({"schedule": schedule, "misfire": "fire_once_now"})),
            now,
        )
        .unwrap();
        let f = &checked.fields;
        // 00:30Z is 08:30 in Shanghai: the next 09:00 there is 01:00Z.
        let expected = chrono::Utc
            .with_ymd_and_hms(2026, 1, 1, 1, 0, 0)
            .unwrap()
            .timestamp_millis();
        assert_eq!(f.next_fire_ms, Some(expected));
        // The job's parser and computation give the same.
        let (job_schedule, tz) = serde_json::from_value::<ScheduleInput>(schedule)
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(job_schedule.next_after(now, now, tz), Some(expected));
        assert_eq!(
            (f.schedule_type, f.timezone.as_str(), f.misfire),
            (ScheduleType::Cron, "Asia/Shanghai", Misfire::FireOnceNow)
        );
        assert_eq!(f.schedule_expr.as_deref(), Some("0 0 9 * * ?"));
        // What is stored reads back as the same schedule.
        let (stored, stored_tz) = crate::domain::schedule::from_stored(
            f.schedule_type,
            f.schedule_expr.as_deref(),
            f.interval_s,
            f.once_at_ms,
            &f.timezone,
        )
        .unwrap();
        assert_eq!(stored.next_after(now, now, stored_tz), Some(expected));
    }

    #[test]
    fn no_schedule_or_disabled_never_fires() {
        let none = check_input(input(json!({})), 1_000).unwrap();
        assert_eq!(none.fields.schedule_type, ScheduleType::None);
        assert_eq!(none.fields.next_fire_ms, None);
        let disabled = check_input(
            input(json!({"enabled": false, "schedule": {"type": "fixed_rate", "interval_s": 5}})),
            1_000,
        )
        .unwrap();
        assert_eq!(disabled.fields.next_fire_ms, None);
        let rate = check_input(
            input(json!({"schedule": {"type": "fixed_rate", "interval_s": 5}})),
            1_000,
        )
        .unwrap();
        assert_eq!(rate.fields.next_fire_ms, Some(6_000));
    }

    #[test]
    fn bad_schedules_name_the_field() {
        let cases = [
            (
                json!({"type": "cron", "expr": "0 0 25 * * ?"}),
                "schedule.expr",
            ),
            (json!({"type": "cron"}), "schedule.expr"),
            (
                json!({"type": "cron", "expr": "0 0 9 * * ?", "timezone": "Mars/Olympus"}),
                "schedule.timezone",
            ),
            (json!({"type": "fixed_rate"}), "schedule.interval_s"),
            (
                json!({"type": "fixed_rate", "interval_s": 0}),
                "schedule.interval_s",
            ),
            (
                json!({"type": "fixed_rate", "interval_s": 5, "expr": "* * * * * ?"}),
                "schedule.expr",
            ),
            (json!({"type": "once"}), "schedule.at_ms"),
        ];
        for (schedule, field) in cases {
            let err = check_input(input(json!({"schedule": schedule})), 0).unwrap_err();
            assert_eq!(err.field(), Some(field), "{schedule}: {err}");
        }
        let err = check_input(input(json!({"misfire": "sometimes"})), 0).unwrap_err();
        assert_eq!(err.field(), Some("misfire"));
    }
}
