//! Jobs: create, change, enable/disable, delete, read; script versions with roll back; cron
//! previews.

use std::collections::BTreeMap;

use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::audit::{self, Entry};
use crate::auth::rbac::{Actor, GroupWrite};
use crate::clock::UnixMillis;
use crate::db::{AnyConnection, Page, alert_channel, executor_group, job, job_script};
use crate::domain::id_list::{ChannelIds, JobIds};
use crate::domain::ids::{ChannelId, GroupId, JobId};
use crate::domain::job::{AlertSettings, Handler, JobSpec, Limits, find_child_cycle};
use crate::domain::policy::{BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire};
use crate::domain::routing::Routing;
use crate::domain::schedule::{Schedule, ScheduleType, parse_cron, parse_timezone};
use crate::error::{Code, Error};
use crate::service::Paged;
use crate::state::AppState;
use jobfleet_agent::protocol::HttpRequest;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ScheduleView {
    #[serde(rename = "type")]
    pub kind: ScheduleType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<i64>,
    pub timezone: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct HandlerView {
    #[serde(rename = "type")]
    pub kind: HandlerType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<Interpreter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `http`: the request the agent sends, in the fields a job is submitted with.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpView>,
    /// The current script version (0 for non-script jobs).
    pub script_version: i32,
}

/// An http job's request as the API shows it: what `HandlerInput` takes, so a shown job can be
/// sent back as it is.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct HttpView {
    pub method: String,
    pub url: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Codes and ranges, `200-299,304`.
    pub expect_status: String,
}

impl From<HttpRequest> for HttpView {
    fn from(request: HttpRequest) -> Self {
        HttpView {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body,
            timeout_ms: request.timeout_ms,
            expect_status: request.statuses,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RetryView {
    pub count: i32,
    pub backoff_s: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AlertView {
    pub on_failure: bool,
    pub on_timeout: bool,
    pub on_lost: bool,
    pub on_no_agent: bool,
    pub channels: Vec<ChannelId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: JobId,
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    pub schedule: ScheduleView,
    pub handler: HandlerView,
    pub params: String,
    pub routing: Routing,
    pub enabled: bool,
    pub timeout_s: i64,
    pub retry: RetryView,
    pub limits: Limits,
    pub misfire: Misfire,
    pub concurrency: Concurrency,
    pub block_strategy: BlockStrategy,
    pub children: Vec<JobId>,
    pub alert: AlertView,
    /// Labels the agent that runs it must carry (`{"zone": "a"}`); empty: any agent of its group.
    #[schema(value_type = Object)]
    pub agent_labels: jobfleet_agent::protocol::labels::Labels,
    pub tags: Vec<String>,
    /// Seconds; null: the admin's `misfire_threshold_ms`.
    pub start_deadline_s: Option<i64>,
    /// Succeeded runs kept; null: all, until `retention_days`.
    pub keep_succeeded: Option<i32>,
    /// Unsuccessful finished runs kept; null: all, until `retention_days`.
    pub keep_failed: Option<i32>,
    pub next_fire_ms: Option<i64>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

pub fn view(row: job::Job) -> JobView {
    let http = row.request().ok().map(HttpView::from);
    let agent_labels = row.agent_labels();
    let tags = row.tags();
    JobView {
        id: row.id,
        group_id: row.group_id,
        schedule: ScheduleView {
            kind: row.schedule_type,
            expr: row.schedule_expr,
            interval_s: row.interval_s,
            at_ms: row.once_at_ms,
            timezone: row.timezone,
        },
        handler: HandlerView {
            kind: row.handler_type,
            command: row.command,
            source: row.script_source,
            interpreter: row.interpreter,
            name: row.bean_name,
            http,
            script_version: row.script_version,
        },
        name: row.name,
        description: row.description,
        params: row.params,
        routing: row.routing,
        enabled: row.enabled,
        timeout_s: row.timeout_s,
        retry: RetryView {
            count: row.retry_count,
            backoff_s: row.retry_backoff_s,
        },
        limits: Limits {
            cpu: row.limit_cpu,
            memory_mb: row.limit_memory_mb,
            pids: row.limit_pids,
        },
        misfire: row.misfire,
        concurrency: row.concurrency,
        block_strategy: row.block_strategy,
        children: row.children.0.clone(),
        alert: AlertView {
            on_failure: row.alert_on_failure,
            on_timeout: row.alert_on_timeout,
            on_lost: row.alert_on_lost,
            on_no_agent: row.alert_on_no_agent,
            channels: row.alert_channels.0.clone(),
        },
        agent_labels,
        tags,
        start_deadline_s: row.start_deadline_s,
        keep_succeeded: row.keep_succeeded,
        keep_failed: row.keep_failed,
        next_fire_ms: row.next_fire_ms,
        created_ms: row.created_ms,
        updated_ms: row.updated_ms,
    }
}

/// The columns for `spec`; the script version is decided by the caller.
fn fields(spec: &JobSpec, script_version: i32, now: UnixMillis) -> job::JobFields {
    let (schedule_expr, interval_s, once_at_ms) = match &spec.schedule {
        Schedule::None => (None, None, None),
        Schedule::Cron(expr) => (Some(expr.to_string()), None, None),
        Schedule::FixedRate { interval_s } => (None, Some(*interval_s), None),
        Schedule::Once { at_ms } => (None, None, Some(*at_ms)),
    };
    let (command, script_source, interpreter, bean_name) = match &spec.handler {
        Handler::Shell { command } => (Some(command.clone()), None, None, None),
        Handler::Script {
            source,
            interpreter,
            ..
        } => (None, Some(source.clone()), Some(*interpreter), None),
        Handler::Bean { name } => (None, None, None, Some(name.clone())),
        Handler::Http { .. } => (None, None, None, None),
    };
    // Strings and a map of strings: encoding cannot fail.
    let http_request = match &spec.handler {
        Handler::Http { request } => serde_json::to_string(request).ok(),
        _ => None,
    };
    let AlertSettings {
        on_failure,
        on_timeout,
        on_lost,
        on_no_agent,
        channels,
    } = &spec.alert;
    job::JobFields {
        group_id: spec.group_id,
        name: spec.name.clone(),
        description: spec.description.clone(),
        schedule_type: spec.schedule.kind(),
        schedule_expr,
        interval_s,
        once_at_ms,
        timezone: spec.timezone.name().to_owned(),
        handler_type: match spec.handler {
            Handler::Shell { .. } => HandlerType::Shell,
            Handler::Script { .. } => HandlerType::Script,
            Handler::Bean { .. } => HandlerType::Bean,
            Handler::Http { .. } => HandlerType::Http,
        },
        command,
        script_source,
        script_version,
        interpreter,
        bean_name,
        params: spec.params.clone(),
        routing: spec.routing,
        enabled: spec.enabled,
        timeout_s: spec.timeout_s,
        retry_count: spec.retry_count,
        retry_backoff_s: spec.retry_backoff_s,
        limit_cpu: spec.limits.cpu,
        limit_memory_mb: spec.limits.memory_mb,
        limit_pids: spec.limits.pids,
        misfire: spec.misfire,
        concurrency: spec.concurrency,
        block_strategy: spec.block_strategy,
        children: JobIds::from(spec.children.clone()),
        alert_on_failure: *on_failure,
        alert_on_timeout: *on_timeout,
        alert_on_lost: *on_lost,
        alert_channels: ChannelIds::from(channels.clone()),
        alert_on_no_agent: *on_no_agent,
        next_fire_ms: if spec.enabled {
            spec.schedule.next_after(now, now, spec.timezone)
        } else {
            None
        },
        updated_ms: now,
        http_request,
        agent_labels: jobfleet_agent::protocol::labels::format_labels(&spec.agent_labels),
        tags: crate::domain::job::format_tags(&spec.tags),
        start_deadline_s: spec.start_deadline_s,
        keep_succeeded: spec.keep_succeeded,
        keep_failed: spec.keep_failed,
    }
}

/// The job `id` if the caller may see it. A job of a group the caller cannot see answers
/// exactly like one that does not exist (`NotFound("job")`, the error `job::get` gives), so
/// nobody learns what other groups hold by probing ids.
///
/// # Errors
/// `NotFound` for a missing or hidden job; database errors.
pub(crate) fn visible_job(
    conn: &mut AnyConnection,
    actor: &Actor,
    id: JobId,
) -> Result<job::Job, Error> {
    match job::find(conn, id)? {
        Some(row) if actor.sees_group(row.group_id) => Ok(row),
        _ => Err(Error::NotFound("job")),
    }
}

fn require_group(conn: &mut AnyConnection, group_id: GroupId) -> Result<(), Error> {
    if executor_group::find(conn, group_id)?.is_none() {
        return Err(Error::invalid_as(
            Code::UnknownGroup,
            "group_id",
            format!("executor group {group_id} does not exist"),
        ));
    }
    Ok(())
}

/// The one check for making an object refer to other jobs, which then run later without the
/// caller (a job's `children` today; every later kind of reference, such as a workflow node,
/// calls this too). Each referenced job must exist, be visible to the caller, and be in a group
/// the caller may write (`Actor::reference_group`). A job the caller cannot see gives exactly
/// the error of a job that does not exist (`invalid_field` on `field`, "job N does not exist");
/// a visible job of a group the caller may only read gives `Forbidden`.
///
/// Returns the write proofs, one per referenced job, in the order of `ids`.
///
/// # Errors
/// `Invalid` (missing or hidden job), `Forbidden` (visible, not writable), database errors.
pub fn check_job_references(
    conn: &mut AnyConnection,
    actor: &Actor,
    field: &str,
    ids: &[JobId],
) -> Result<Vec<GroupWrite>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let groups = job::groups_of(conn, ids)?;
    ids.iter()
        .map(|id| {
            let group_id = groups
                .iter()
                .find(|(job_id, _)| job_id == id)
                .map(|(_, group_id)| *group_id)
                .filter(|g| actor.sees_group(*g))
                .ok_or_else(|| Error::invalid(field, format!("job {id} does not exist")))?;
            actor.reference_group(group_id).map_err(|_| {
                Error::Forbidden(format!(
                    "{field}: referring to job {id} needs write access to its executor group \
                     {group_id}"
                ))
            })
        })
        .collect()
}

/// A job's new child list. References it adds go through [`check_job_references`]; the ones it
/// keeps from `before` were checked when they were added (or predate that check) and need only
/// still exist, so someone who may edit this job can save it unchanged even when a child is in
/// a group only an admin may write. With the new list the child graph must stay acyclic.
fn check_children(
    conn: &mut AnyConnection,
    actor: &Actor,
    job_id: Option<JobId>,
    before: &[JobId],
    children: &[JobId],
) -> Result<(), Error> {
    if children.is_empty() {
        return Ok(());
    }
    let added: Vec<JobId> = children
        .iter()
        .copied()
        .filter(|id| !before.contains(id))
        .collect();
    check_job_references(conn, actor, "children", &added)?;
    let existing = job::existing_ids(conn, children)?;
    if let Some(missing) = children.iter().find(|id| !existing.contains(id)) {
        return Err(Error::invalid(
            "children",
            format!("job {missing} does not exist"),
        ));
    }
    if let Some(id) = job_id {
        let edges: Vec<(JobId, Vec<JobId>)> = job::children_edges(conn)?
            .into_iter()
            .map(|(parent, list)| (parent, list.0))
            .collect();
        if let Some(cycle) = find_child_cycle(id, children, &edges) {
            // The cycle may run through jobs the caller cannot see: name those by no id.
            let groups = job::groups_of(conn, &cycle)?;
            let path = cycle
                .iter()
                .map(|j| {
                    let visible = groups.iter().any(|(id, g)| id == j && actor.sees_group(*g));
                    if visible {
                        j.to_string()
                    } else {
                        "(a job you cannot see)".to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" → ");
            return Err(Error::invalid_as(
                Code::ChildCycle,
                "children",
                format!("child jobs would form a cycle: {path}"),
            ));
        }
    }
    Ok(())
}

/// Alert channels named by a job must exist.
/// Every channel exists; else 422 on `alert.channels`.
pub(crate) fn check_alert_channels(
    conn: &mut AnyConnection,
    channels: &[ChannelId],
) -> Result<(), Error> {
    if channels.is_empty() {
        return Ok(());
    }
    let existing: Vec<ChannelId> = alert_channel::by_ids(conn, channels)?
        .into_iter()
        .map(|c| c.id)
        .collect();
    if let Some(missing) = channels.iter().find(|id| !existing.contains(id)) {
        return Err(Error::invalid(
            "alert.channels",
            format!("alert channel {missing} does not exist"),
        ));
    }
    Ok(())
}

fn save_script_version(
    conn: &mut AnyConnection,
    job_id: JobId,
    spec: &JobSpec,
    actor: &Actor,
    now: i64,
) -> Result<i32, Error> {
    let Handler::Script {
        source,
        interpreter,
        note,
    } = &spec.handler
    else {
        return Ok(0);
    };
    let version = job_script::latest_version(conn, job_id)? + 1;
    job_script::insert(
        conn,
        &job_script::NewJobScript {
            job_id,
            version,
            source,
            interpreter: interpreter.as_str(),
            note,
            created_by: &actor.name,
            created_ms: now,
        },
    )?;
    Ok(version)
}

/// Creates a job (the console's copy is a create too). The caller proves write access to
/// `spec.group_id` — unless the group does not exist, which is reported as `unknown_group`
/// first — and to the group of every child
/// ([`check_job_references`]).
pub async fn create(state: &AppState, actor: &Actor, spec: JobSpec) -> Result<JobView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| create_in(conn, &actor, spec.clone(), now))
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.jobs_changed())
}

/// [`create`] inside the caller's transaction (a workflow import creates jobs with its
/// workflow, all or nothing). The caller tells the scheduler after the commit.
pub(crate) fn create_in(
    conn: &mut AnyConnection,
    actor: &Actor,
    spec: JobSpec,
    now: i64,
) -> Result<JobView, Error> {
    require_group(conn, spec.group_id)?;
    let write = actor.write_group(spec.group_id)?;
    if job::find_by_name(conn, spec.group_id, &spec.name)?.is_some() {
        return Err(Error::conflict(
            "name",
            format!("a job named `{}` already exists in the group", spec.name),
        ));
    }
    check_children(conn, actor, None, &[], &spec.children)?;
    check_alert_channels(conn, &spec.alert.channels)?;
    let id = job::insert(
        conn,
        &write,
        &job::NewJob {
            fields: fields(&spec, 0, now),
            created_ms: now,
        },
    )?;
    let version = save_script_version(conn, id, &spec, actor, now)?;
    if version > 0 {
        let mut with_version = fields(&spec, version, now);
        with_version.updated_ms = now;
        job::update(conn, &[&write], id, &with_version)?;
    }
    let created = view(job::get(conn, id)?);
    audit::record(
        conn,
        actor,
        now,
        Entry::new("job.create", "job", id).after(&created)?,
    )?;
    Ok(created)
}

/// Replaces a job's settings. Moving it to another group needs write access to both; a child
/// it did not have before needs write access to the child's group.
pub async fn update(
    state: &AppState,
    actor: &Actor,
    id: JobId,
    spec: JobSpec,
) -> Result<JobView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| update_in(conn, &actor, id, spec.clone(), now))
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.jobs_changed())
}

/// [`update`] inside the caller's transaction.
pub(crate) fn update_in(
    conn: &mut AnyConnection,
    actor: &Actor,
    id: JobId,
    spec: JobSpec,
    now: i64,
) -> Result<JobView, Error> {
    let before_row = visible_job(conn, actor, id)?;
    let write_old = actor.write_group(before_row.group_id)?;
    require_group(conn, spec.group_id)?;
    let write_new = actor.write_group(spec.group_id)?;
    if let Some(other) = job::find_by_name(conn, spec.group_id, &spec.name)?
        && other.id != id
    {
        return Err(Error::conflict(
            "name",
            format!("a job named `{}` already exists in the group", spec.name),
        ));
    }
    let kept = before_row.children.0.clone();
    check_children(conn, actor, Some(id), &kept, &spec.children)?;
    check_alert_channels(conn, &spec.alert.channels)?;
    let script_changed = match &spec.handler {
        Handler::Script {
            source,
            interpreter,
            ..
        } => {
            before_row.script_source.as_deref() != Some(source.as_str())
                || before_row.interpreter != Some(*interpreter)
        }
        _ => false,
    };
    let version = if script_changed {
        save_script_version(conn, id, &spec, actor, now)?
    } else if matches!(spec.handler, Handler::Script { .. }) {
        before_row.script_version
    } else {
        0
    };
    let before = view(before_row);
    job::update(
        conn,
        &[&write_old, &write_new],
        id,
        &fields(&spec, version, now),
    )?;
    let after = view(job::get(conn, id)?);
    audit::record(
        conn,
        actor,
        now,
        Entry::new("job.update", "job", id)
            .before(&before)?
            .after(&after)?,
    )?;
    Ok(after)
}

pub async fn set_enabled(
    state: &AppState,
    actor: &Actor,
    id: JobId,
    enabled: bool,
) -> Result<JobView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let row = visible_job(conn, &actor, id)?;
            let write = actor.write_group(row.group_id)?;
            let before = view(row.clone());
            let spec = spec_of(&row)?;
            let mut changed = fields(&JobSpec { enabled, ..spec }, row.script_version, now);
            if row.enabled == enabled {
                changed.next_fire_ms = row.next_fire_ms;
            }
            job::update(conn, &[&write], id, &changed)?;
            let after = view(job::get(conn, id)?);
            let action = if enabled { "job.enable" } else { "job.disable" };
            audit::record(
                conn,
                &actor,
                now,
                Entry::new(action, "job", id)
                    .before(&before)?
                    .after(&after)?,
            )?;
            Ok(after)
        })
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.jobs_changed())
}

/// Rebuilds the validated spec of a stored job (stored rows were validated when written).
pub(crate) fn spec_of(row: &job::Job) -> Result<JobSpec, Error> {
    let (schedule, timezone) = row.schedule()?;
    let handler = match row.handler_type {
        HandlerType::Shell => Handler::Shell {
            command: row.command.clone().unwrap_or_default(),
        },
        HandlerType::Script => Handler::Script {
            source: row.script_source.clone().unwrap_or_default(),
            interpreter: row.interpreter.unwrap_or(Interpreter::Bash),
            note: String::new(),
        },
        HandlerType::Bean => Handler::Bean {
            name: row.bean_name.clone().unwrap_or_default(),
        },
        HandlerType::Http => Handler::Http {
            request: row.request()?,
        },
    };
    Ok(JobSpec {
        group_id: row.group_id,
        name: row.name.clone(),
        description: row.description.clone(),
        schedule,
        timezone,
        handler,
        params: row.params.clone(),
        routing: row.routing,
        enabled: row.enabled,
        timeout_s: row.timeout_s,
        retry_count: row.retry_count,
        retry_backoff_s: row.retry_backoff_s,
        limits: Limits {
            cpu: row.limit_cpu,
            memory_mb: row.limit_memory_mb,
            pids: row.limit_pids,
        },
        misfire: row.misfire,
        concurrency: row.concurrency,
        block_strategy: row.block_strategy,
        children: row.children.0.clone(),
        alert: AlertSettings {
            on_failure: row.alert_on_failure,
            on_timeout: row.alert_on_timeout,
            on_lost: row.alert_on_lost,
            on_no_agent: row.alert_on_no_agent,
            channels: row.alert_channels.0.clone(),
        },
        agent_labels: row.agent_labels(),
        tags: row.tags(),
        start_deadline_s: row.start_deadline_s,
        keep_succeeded: row.keep_succeeded,
        keep_failed: row.keep_failed,
    })
}

/// What deleting a job changed besides the job itself, for its audit row.
#[derive(Debug, Serialize)]
struct DeleteEffects {
    /// The jobs whose `children` listed the deleted job and no longer do.
    removed_from_children_of: Vec<JobId>,
}

/// Deletes a job and takes it out of every other job's child list (whether or not the caller
/// can see those jobs), all in one transaction with one audit row.
pub async fn delete(state: &AppState, actor: &Actor, id: JobId) -> Result<(), Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| delete_in(conn, &actor, id, now))
        .await
        // Plan at once: a new or changed schedule must not wait for the next pass.
        .inspect(|_| state.scheduler.jobs_changed())
}

/// [`delete`] inside the caller's transaction.
pub(crate) fn delete_in(
    conn: &mut AnyConnection,
    actor: &Actor,
    id: JobId,
    now: i64,
) -> Result<(), Error> {
    let row = visible_job(conn, actor, id)?;
    let write = actor.write_group(row.group_id)?;
    // Jobs that list this one as a child lose it in the same transaction. Refusing
    // instead would let anyone who may write a parent (in any group) pin this job
    // forever, and the refusal would name parents the caller may not be able to see.
    let mut parents = Vec::new();
    for (parent, list) in job::children_edges(conn)? {
        if list.contains(&id) {
            let kept: JobIds = list
                .0
                .into_iter()
                .filter(|c| *c != id)
                .collect::<Vec<_>>()
                .into();
            job::set_children(conn, parent, &kept, now)?;
            parents.push(parent);
        }
    }
    let before = view(row);
    job::delete(conn, &write, id)?;
    // The one audit row of the delete says which child lists it changed, if any.
    let mut entry = Entry::new("job.delete", "job", id).before(&before)?;
    if !parents.is_empty() {
        entry = entry.after(&DeleteEffects {
            removed_from_children_of: parents,
        })?;
    }
    audit::record(conn, actor, now, entry)
}

pub async fn get(state: &AppState, actor: &Actor, id: JobId) -> Result<JobView, Error> {
    let actor = actor.clone();
    let row = state
        .db
        .run(move |conn| visible_job(conn, &actor, id))
        .await?;
    Ok(view(row))
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct JobQuery {
    pub group_id: Option<GroupId>,
    pub enabled: Option<bool>,
    pub schedule_type: Option<String>,
    /// Substring of the name.
    pub q: Option<String>,
    /// Jobs carrying this tag.
    pub tag: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

impl JobQuery {
    /// The filter this query asks for within what `actor` sees.
    ///
    /// # Errors
    /// `invalid_field` on a bad `schedule_type`, `q` or `tag`.
    pub fn filter(self, actor: &Actor) -> Result<job::JobFilter, Error> {
        if let Some(kind) = &self.schedule_type {
            kind.parse::<crate::domain::schedule::ScheduleType>()
                .map_err(|e| Error::invalid("schedule_type", e))?;
        }
        if self.q.as_ref().is_some_and(|q| q.len() > 200) {
            return Err(Error::invalid("q", "must be at most 200 characters"));
        }
        let tag = match self.tag.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(tag) => Some(crate::domain::job::check_tag("tag", tag)?),
        };
        Ok(job::JobFilter {
            visible_groups: actor.visible_groups(),
            group_id: self.group_id,
            enabled: self.enabled,
            schedule_type: self.schedule_type.filter(|k| !k.is_empty()),
            name_contains: self.q.filter(|q| !q.is_empty()),
            tag,
            ids: None,
        })
    }
}

pub async fn list(
    state: &AppState,
    actor: &Actor,
    query: JobQuery,
) -> Result<Paged<JobView>, Error> {
    let page = Page::new(query.limit, query.offset)?;
    let filter = query.filter(actor)?;
    state
        .db
        .run(move |conn| {
            Ok(Paged {
                items: job::list(conn, &filter, page)?
                    .into_iter()
                    .map(view)
                    .collect(),
                total: job::count(conn, &filter)?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ScriptVersionView {
    pub version: i32,
    pub interpreter: String,
    pub note: String,
    pub created_by: String,
    pub created_ms: i64,
    /// Present when one version is read; omitted in lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub current: bool,
}

fn version_view(row: job_script::JobScript, current: i32, with_source: bool) -> ScriptVersionView {
    ScriptVersionView {
        current: row.version == current,
        version: row.version,
        interpreter: row.interpreter,
        note: row.note,
        created_by: row.created_by,
        created_ms: row.created_ms,
        source: with_source.then_some(row.source),
    }
}

pub async fn script_versions(
    state: &AppState,
    actor: &Actor,
    job_id: JobId,
) -> Result<Vec<ScriptVersionView>, Error> {
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            let row = visible_job(conn, &actor, job_id)?;
            Ok(job_script::list_for_job(conn, job_id)?
                .into_iter()
                .map(|v| version_view(v, row.script_version, false))
                .collect())
        })
        .await
}

pub async fn script_version(
    state: &AppState,
    actor: &Actor,
    job_id: JobId,
    version: i32,
) -> Result<ScriptVersionView, Error> {
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            let row = visible_job(conn, &actor, job_id)?;
            Ok(version_view(
                job_script::get_version(conn, job_id, version)?,
                row.script_version,
                true,
            ))
        })
        .await
}

/// Makes an old version current again by saving it as a new version, so history only grows.
pub async fn rollback_script(
    state: &AppState,
    actor: &Actor,
    job_id: JobId,
    version: i32,
) -> Result<JobView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let row = visible_job(conn, &actor, job_id)?;
            let write = actor.write_group(row.group_id)?;
            if row.handler_type != HandlerType::Script {
                return Err(Error::invalid(
                    "handler.type",
                    "only script jobs have versions to roll back to",
                ));
            }
            let old = job_script::get_version(conn, job_id, version)?;
            let interpreter: Interpreter = old
                .interpreter
                .parse()
                .map_err(|e: String| Error::Internal(anyhow::anyhow!("stored interpreter: {e}")))?;
            let mut spec = spec_of(&row)?;
            spec.handler = Handler::Script {
                source: old.source.clone(),
                interpreter,
                note: format!("roll back to version {version}"),
            };
            let new_version = save_script_version(conn, job_id, &spec, &actor, now)?;
            let before = view(row.clone());
            let mut changed = fields(&spec, new_version, now);
            changed.next_fire_ms = row.next_fire_ms;
            job::update(conn, &[&write], job_id, &changed)?;
            let after = view(job::get(conn, job_id)?);
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("job.script_rollback", "job", job_id)
                    .before(&before)?
                    .after(&after)?,
            )?;
            Ok(after)
        })
        .await
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CronPreviewRequest {
    pub expr: String,
    /// IANA time zone; default UTC.
    pub timezone: Option<String>,
    /// How many fire times, 1..=100; default 5.
    pub count: Option<usize>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CronPreviewResponse {
    pub expr: String,
    pub timezone: String,
    /// Fire times as UTC milliseconds.
    pub next_ms: Vec<i64>,
    /// The same instants in the job's time zone, RFC 3339.
    pub next_local: Vec<String>,
}

/// The next fire times of an expression: pure computation, no database.
pub fn cron_preview(
    now: UnixMillis,
    request: &CronPreviewRequest,
) -> Result<CronPreviewResponse, Error> {
    let count = request.count.unwrap_or(5);
    if !(1..=100).contains(&count) {
        return Err(Error::invalid("count", "must be between 1 and 100"));
    }
    if request.expr.len() > 255 {
        return Err(Error::invalid_as(
            Code::InvalidCron,
            "expr",
            "must be at most 255 characters",
        ));
    }
    let tz: Tz = parse_timezone("timezone", request.timezone.as_deref().unwrap_or("UTC"))?;
    let expr = parse_cron("expr", &request.expr)?;
    let next_ms = Schedule::Cron(Box::new(expr.clone())).upcoming(now, now, tz, count);
    let next_local = next_ms
        .iter()
        .filter_map(|ms| chrono::DateTime::from_timestamp_millis(*ms))
        .map(|t| t.with_timezone(&tz).to_rfc3339())
        .collect();
    Ok(CronPreviewResponse {
        expr: expr.to_string(),
        timezone: tz.name().to_owned(),
        next_ms,
        next_local,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::job::tests::{fields, insert_group};
    use crate::domain::role::Role;
    use crate::testing::storage_test;

    fn actor(role: Role, groups: &[GroupId]) -> Actor {
        Actor {
            role,
            groups: groups.to_vec(),
            ..Actor::system("t")
        }
    }

    fn new_job(conn: &mut AnyConnection, group_id: GroupId, name: &str) -> JobId {
        job::insert(
            conn,
            &crate::db::job::tests::write(group_id),
            &job::NewJob {
                fields: fields(group_id, name),
                created_ms: 1,
            },
        )
        .unwrap()
    }

    // The HTTP suite (tests/it/security/references.rs) covers hidden and writable references;
    // "visible but not writable" needs a caller whose read and write rights differ on a group,
    // which only the viewer role gives, and a viewer writes no parent to begin with.
    storage_test!(
        a_reference_needs_write_and_hides_what_it_cannot_see,
        |conn| {
            let g1 = insert_group(conn, "g1");
            let g2 = insert_group(conn, "g2");
            let mine = new_job(conn, g1, "mine");
            let theirs = new_job(conn, g2, "theirs");
            let missing = JobId(theirs.0 + 1000);
            let operator = actor(Role::Operator, &[g1]);

            let hidden = check_job_references(conn, &operator, "children", &[theirs]).unwrap_err();
            let absent = check_job_references(conn, &operator, "children", &[missing]).unwrap_err();
            assert_eq!(
                (hidden.code(), hidden.field(), hidden.public_message()),
                (
                    Code::InvalidField,
                    Some("children"),
                    format!("job {theirs} does not exist")
                )
            );
            assert_eq!(
                (absent.code(), absent.field(), absent.public_message()),
                (
                    Code::InvalidField,
                    Some("children"),
                    format!("job {missing} does not exist")
                )
            );

            let reader = actor(Role::Viewer, &[g1, g2]);
            let read_only = check_job_references(conn, &reader, "children", &[theirs]).unwrap_err();
            assert_eq!(
                read_only.code(),
                Code::Forbidden,
                "it can see the job anyway"
            );
            assert!(
                read_only
                    .public_message()
                    .contains(&format!("job {theirs}"))
            );

            let both = actor(Role::Operator, &[g1, g2]);
            let proofs = check_job_references(conn, &both, "children", &[mine, theirs]).unwrap();
            assert_eq!(
                proofs.iter().map(GroupWrite::group_id).collect::<Vec<_>>(),
                vec![g1, g2]
            );
            let admin = actor(Role::Admin, &[]);
            assert_eq!(
                check_job_references(conn, &admin, "nodes", &[theirs])
                    .unwrap()
                    .len(),
                1
            );
            assert!(
                check_job_references(conn, &operator, "children", &[])
                    .unwrap()
                    .is_empty()
            );
        }
    );
}
