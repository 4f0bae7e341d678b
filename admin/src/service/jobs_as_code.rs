//! Jobs as code: executor groups and their jobs as one portable document (YAML or JSON), exported
//! for version control and applied back idempotently, matched by group `app_name` and job name.
//!
//! An apply is one transaction: each job is created, updated or left alone, and with `prune` the
//! group's jobs the document does not name are deleted, each change audited as its own API call
//! would be. A job whose settings already match is not written at all, so applying a document
//! twice changes nothing the second time. A dry run takes the very same path inside a savepoint
//! that is always rolled back: it reports what a real apply would do, refusals included, and
//! leaves no trace.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::auth::rbac::Actor;
use crate::db::{AnyConnection, executor_group, job};
use crate::domain::ids::{GroupId, JobId};
use crate::domain::job::{Handler, JobInput, JobSpec};
use crate::domain::policy::AddressMode;
use crate::error::{Code, Error};
use crate::service::groups::{self, GroupInput, GroupUpdate};
use crate::service::jobs::{self, JobView};
use crate::state::AppState;

/// The kind and version a jobs document carries.
pub const KIND: &str = "jobfleet.jobs";
pub const VERSION: u32 = 1;

/// At most this many jobs in one document: an apply is one transaction.
pub const MAX_JOBS: usize = 5_000;

/// Groups and their jobs, jobs named rather than numbered, so the document can be kept in
/// version control and applied to another cluster.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobsDocument {
    /// `jobfleet.jobs`.
    pub kind: String,
    /// 1.
    pub version: u32,
    pub groups: Vec<GroupDocument>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupDocument {
    /// The group it applies to; an admin's apply creates a group that does not exist.
    pub app_name: String,
    /// Left as it is when absent (a new group is titled by its app name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Left as it is when absent, with `addresses` (a new group: `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "auto")]
    pub address_mode: Option<AddressMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<String>>,
    /// Each as `POST /api/v1/jobs` takes it, without `group_id`; `children` name jobs: a name
    /// for one of this group, `{group, job}` for another group's.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub jobs: Vec<serde_json::Value>,
}

/// A child job by name: of the same group, or of another group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum ChildRef {
    Here(String),
    #[serde(rename_all = "snake_case")]
    Elsewhere {
        group: String,
        job: String,
    },
}

#[derive(Debug, Clone, Copy, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApplyOptions {
    /// Report what would change and write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Delete the jobs of the document's groups that the document does not name.
    #[serde(default)]
    pub prune: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    Update,
    Unchanged,
    Delete,
}

/// One object an apply created, changed, kept or deleted.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Change {
    /// `group` or `job`.
    pub object: &'static str,
    /// The group's app name.
    pub group: String,
    /// The job's name; absent for a group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub action: Action,
    /// Absent for what a dry run would create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// The settings an update changes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<&'static str>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApplyReport {
    pub dry_run: bool,
    pub prune: bool,
    /// Groups first, then jobs in the order they were applied (children before their parents),
    /// then deletions.
    pub changes: Vec<Change>,
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub deleted: usize,
}

/// A job of the document that passed every rule needing no database, its group not yet known.
#[derive(Clone)]
struct PlannedJob {
    group: usize,
    field: String,
    spec: JobSpec,
    children: Vec<ChildRef>,
}

/// A job as a document holds it: its view without what the target decides (id, group, times,
/// script version) or what is written by name instead (children). Workflow documents carry
/// their jobs this way too.
pub(crate) fn job_document(view: JobView) -> Result<serde_json::Value, Error> {
    let mut value = serde_json::to_value(view)
        .map_err(|e| Error::Internal(anyhow::anyhow!("encoding a job: {e}")))?;
    if let Some(fields) = value.as_object_mut() {
        for key in [
            "id",
            "group_id",
            "next_fire_ms",
            "created_ms",
            "updated_ms",
            "children",
        ] {
            fields.remove(key);
        }
        if let Some(handler) = fields.get_mut("handler").and_then(|h| h.as_object_mut()) {
            handler.remove("script_version");
        }
    }
    Ok(value)
}

/// Reads the document's jobs into specs, checking every rule that needs no database.
fn plan(document: &JobsDocument) -> Result<Vec<PlannedJob>, Error> {
    if document.kind != KIND {
        return Err(Error::invalid("kind", format!("must be `{KIND}`")));
    }
    if document.version != VERSION {
        return Err(Error::invalid(
            "version",
            format!("this admin reads version {VERSION}"),
        ));
    }
    let total: usize = document.groups.iter().map(|g| g.jobs.len()).sum();
    if total > MAX_JOBS {
        return Err(Error::invalid(
            "groups",
            format!("at most {MAX_JOBS} jobs in one document ({total} given)"),
        ));
    }
    let mut app_names: Vec<String> = Vec::with_capacity(document.groups.len());
    let mut planned = Vec::with_capacity(total);
    for (g, group) in document.groups.iter().enumerate() {
        let group_field = format!("groups[{g}]");
        let app_name =
            groups::check_app_name(&group.app_name).map_err(|e| e.within(&group_field))?;
        if app_names.contains(&app_name) {
            return Err(Error::invalid(
                format!("{group_field}.app_name"),
                format!("the document names the group `{app_name}` twice"),
            ));
        }
        app_names.push(app_name);
        let first_of_group = planned.len();
        for (j, job) in group.jobs.iter().enumerate() {
            let field = format!("{group_field}.jobs[{j}]");
            let mut job = job.clone();
            let Some(fields) = job.as_object_mut() else {
                return Err(Error::invalid(field, "must be an object"));
            };
            if fields.contains_key("group_id") {
                return Err(Error::invalid(
                    format!("{field}.group_id"),
                    "is decided by the group the job is listed under; leave it out",
                ));
            }
            let children: Vec<ChildRef> = match fields.remove("children") {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(list) => serde_json::from_value(list).map_err(|_| {
                    Error::invalid(
                        format!("{field}.children"),
                        "must be a list of job names, or `{group, job}` for another group's job",
                    )
                })?,
            };
            // The group is resolved later, in the transaction.
            fields.insert("group_id".into(), serde_json::json!(0));
            let input: JobInput = serde_json::from_value(job)
                .map_err(|e| Error::invalid(field.clone(), e.to_string()))?;
            let spec = input.validate().map_err(|e| e.within(&field))?;
            if children.len() > crate::domain::job::MAX_CHILDREN {
                return Err(Error::invalid(
                    format!("{field}.children"),
                    format!("at most {} child jobs", crate::domain::job::MAX_CHILDREN),
                ));
            }
            if planned[first_of_group..]
                .iter()
                .any(|p: &PlannedJob| p.spec.name == spec.name)
            {
                return Err(Error::invalid(
                    format!("{field}.name"),
                    format!("the group lists two jobs named `{}`", spec.name),
                ));
            }
            planned.push(PlannedJob {
                group: g,
                field,
                spec,
                children,
            });
        }
    }
    Ok(planned)
}

/// The document's jobs ordered so that every child named in the document comes before its
/// parents: a new parent can then name a new child in the one create. A cycle is refused.
fn children_first(planned: &[PlannedJob], app_names: &[String]) -> Result<Vec<usize>, Error> {
    let index: HashMap<(&str, &str), usize> = planned
        .iter()
        .enumerate()
        .map(|(i, p)| ((app_names[p.group].as_str(), p.spec.name.as_str()), i))
        .collect();
    let edges: Vec<Vec<usize>> = planned
        .iter()
        .map(|p| {
            p.children
                .iter()
                .filter_map(|c| match c {
                    ChildRef::Here(name) => {
                        index.get(&(app_names[p.group].as_str(), name.as_str()))
                    }
                    ChildRef::Elsewhere { group, job } => {
                        index.get(&(group.as_str(), job.as_str()))
                    }
                })
                .copied()
                .collect()
        })
        .collect();
    // Depth-first, children first; 1 = on the current path, 2 = placed.
    let mut state = vec![0u8; planned.len()];
    let mut order = Vec::with_capacity(planned.len());
    for root in 0..planned.len() {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some((node, next)) = stack.pop() {
            if let Some(&child) = edges[node].get(next) {
                stack.push((node, next + 1));
                match state[child] {
                    0 => {
                        state[child] = 1;
                        stack.push((child, 0));
                    }
                    1 => {
                        let mut path: Vec<&str> = stack
                            .iter()
                            .map(|(n, _)| planned[*n].spec.name.as_str())
                            .skip_while(|name| *name != planned[child].spec.name)
                            .collect();
                        path.push(&planned[child].spec.name);
                        return Err(Error::invalid_as(
                            Code::ChildCycle,
                            format!("{}.children", planned[node].field),
                            format!("child jobs would form a cycle: {}", path.join(" → ")),
                        ));
                    }
                    _ => {}
                }
            } else {
                state[node] = 2;
                order.push(node);
            }
        }
    }
    Ok(order)
}

/// The settings two specs of one job differ in, by their document names.
fn changed_fields(before: &JobSpec, after: &JobSpec) -> Vec<&'static str> {
    let mut fields = Vec::new();
    let mut differs = |field: &'static str, changed: bool| {
        if changed {
            fields.push(field);
        }
    };
    differs("description", before.description != after.description);
    differs(
        "schedule",
        before.schedule != after.schedule || before.timezone != after.timezone,
    );
    differs("handler", before.handler != after.handler);
    differs("params", before.params != after.params);
    differs("routing", before.routing != after.routing);
    differs("enabled", before.enabled != after.enabled);
    differs("timeout_s", before.timeout_s != after.timeout_s);
    differs(
        "retry",
        before.retry_count != after.retry_count || before.retry_backoff_s != after.retry_backoff_s,
    );
    differs("limits", before.limits != after.limits);
    differs("misfire", before.misfire != after.misfire);
    differs("concurrency", before.concurrency != after.concurrency);
    differs(
        "block_strategy",
        before.block_strategy != after.block_strategy,
    );
    differs("children", before.children != after.children);
    differs("alert", before.alert != after.alert);
    differs("agent_labels", before.agent_labels != after.agent_labels);
    differs("tags", before.tags != after.tags);
    differs(
        "start_deadline_s",
        before.start_deadline_s != after.start_deadline_s,
    );
    differs(
        "keep_succeeded",
        before.keep_succeeded != after.keep_succeeded,
    );
    differs("keep_failed", before.keep_failed != after.keep_failed);
    fields
}

/// A script's note goes with a new script version only; it is not a setting to compare.
fn without_note(mut spec: JobSpec) -> JobSpec {
    if let Handler::Script { note, .. } = &mut spec.handler {
        note.clear();
    }
    spec
}

/// The group a document names, created (admins only) or brought in line with the document's
/// settings (admins only, and only when they differ).
fn apply_group(
    conn: &mut AnyConnection,
    actor: &Actor,
    field: &str,
    document: &GroupDocument,
    now: i64,
    changes: &mut Vec<Change>,
) -> Result<GroupId, Error> {
    let app_name = groups::check_app_name(&document.app_name).map_err(|e| e.within(field))?;
    let existing =
        executor_group::find_by_app_name(conn, &app_name)?.filter(|g| actor.sees_group(g.id));
    let Some(existing) = existing else {
        let Ok(proof) = actor.require_admin() else {
            return Err(Error::invalid_as(
                Code::UnknownGroup,
                format!("{field}.app_name"),
                format!("no executor group `{app_name}` you can see; an admin can create it"),
            ));
        };
        let input = GroupInput {
            title: document.title.clone().unwrap_or_else(|| app_name.clone()),
            app_name: app_name.clone(),
            address_mode: document.address_mode,
            addresses: document.addresses.clone(),
            allow_executors: None,
        };
        let created =
            groups::create_in(conn, actor, &proof, input, now).map_err(|e| e.within(field))?;
        changes.push(Change {
            object: "group",
            group: app_name,
            job: None,
            action: Action::Create,
            id: Some(created.id.0),
            fields: Vec::new(),
        });
        return Ok(created.id);
    };
    let before = groups::view_of(existing)?;
    let mut fields = Vec::new();
    if document
        .title
        .as_ref()
        .is_some_and(|t| t.trim() != before.title)
    {
        fields.push("title");
    }
    if document
        .address_mode
        .is_some_and(|m| m != before.address_mode)
        || document
            .addresses
            .as_ref()
            .is_some_and(|a| *a != before.addresses)
    {
        fields.push("addresses");
    }
    let action = if fields.is_empty() {
        Action::Unchanged
    } else {
        let proof = actor.require_admin().map_err(|_| {
            Error::Forbidden(format!(
                "{field}: changing the group's {} needs an admin",
                fields.join(" and ")
            ))
        })?;
        let mode = document.address_mode.unwrap_or(before.address_mode);
        let update = GroupUpdate {
            title: document.title.clone().unwrap_or(before.title.clone()),
            address_mode: Some(mode),
            // A mode given without addresses: `auto` has none, `manual` keeps the group's.
            addresses: Some(match (&document.addresses, document.address_mode) {
                (Some(addresses), _) => addresses.clone(),
                (None, Some(AddressMode::Auto)) => Vec::new(),
                (None, _) => before.addresses.clone(),
            }),
            allow_executors: None,
        };
        groups::update_in(conn, actor, &proof, before.id, update, now)
            .map_err(|e| e.within(field))?;
        Action::Update
    };
    changes.push(Change {
        object: "group",
        group: before.app_name.clone(),
        job: None,
        action,
        id: Some(before.id.0),
        fields,
    });
    Ok(before.id)
}

/// The ids of a job's children, each by name in the document's group or another one.
fn resolve_children(
    conn: &mut AnyConnection,
    actor: &Actor,
    planned: &PlannedJob,
    group_ids: &[GroupId],
) -> Result<Vec<JobId>, Error> {
    let mut ids = Vec::with_capacity(planned.children.len());
    for child in &planned.children {
        let (group_id, app_name, name) = match child {
            ChildRef::Here(name) => (Some(group_ids[planned.group]), None, name),
            ChildRef::Elsewhere { group, job } => (
                executor_group::find_by_app_name(conn, group)?
                    .filter(|g| actor.sees_group(g.id))
                    .map(|g| g.id),
                Some(group),
                job,
            ),
        };
        let found = match group_id {
            Some(group_id) => job::find_by_name(conn, group_id, name)?,
            None => None,
        };
        let Some(found) = found else {
            return Err(Error::invalid(
                format!("{}.children", planned.field),
                match app_name {
                    Some(app) => format!("no job `{name}` in group `{app}`"),
                    None => format!("no job `{name}` in the document or the group"),
                },
            ));
        };
        if ids.contains(&found.id) {
            return Err(Error::invalid(
                format!("{}.children", planned.field),
                format!("job `{name}` is listed twice"),
            ));
        }
        ids.push(found.id);
    }
    Ok(ids)
}

/// The whole apply, in the caller's transaction.
fn apply_in(
    conn: &mut AnyConnection,
    actor: &Actor,
    document: &JobsDocument,
    planned: Vec<PlannedJob>,
    options: ApplyOptions,
    now: i64,
) -> Result<ApplyReport, Error> {
    let mut changes = Vec::new();
    let mut group_ids = Vec::with_capacity(document.groups.len());
    for (g, group) in document.groups.iter().enumerate() {
        group_ids.push(apply_group(
            conn,
            actor,
            &format!("groups[{g}]"),
            group,
            now,
            &mut changes,
        )?);
    }
    let app_names: Vec<String> = document
        .groups
        .iter()
        .map(|g| g.app_name.trim().to_owned())
        .collect();
    let order = children_first(&planned, &app_names)?;
    let mut slots: Vec<Option<PlannedJob>> = planned.into_iter().map(Some).collect();
    let mut named: BTreeMap<GroupId, Vec<String>> = BTreeMap::new();
    // Every job a document job names as a child, with the field that names it.
    let mut referenced: Vec<(JobId, String)> = Vec::new();
    for i in order {
        let Some(mut planned) = slots[i].take() else {
            continue;
        };
        let group_id = group_ids[planned.group];
        planned.spec.group_id = group_id;
        planned.spec.children = resolve_children(conn, actor, &planned, &group_ids)?;
        referenced.extend(
            planned
                .spec
                .children
                .iter()
                .map(|id| (*id, planned.field.clone())),
        );
        let field = planned.field.clone();
        let name = planned.spec.name.clone();
        named.entry(group_id).or_default().push(name.clone());
        let change = match job::find_by_name(conn, group_id, &name)? {
            Some(existing) => {
                // Children the caller cannot see are not in its document: they are kept.
                let hidden: Vec<JobId> = job::groups_of(conn, &existing.children.0)?
                    .into_iter()
                    .filter(|(_, g)| !actor.sees_group(*g))
                    .map(|(id, _)| id)
                    .collect();
                let stored = &existing.children.0;
                let shown: Vec<JobId> = stored
                    .iter()
                    .copied()
                    .filter(|id| !hidden.contains(id))
                    .collect();
                if planned.spec.children == shown {
                    // The same children as stored: in the stored order, hidden ones included.
                    planned.spec.children.clone_from(stored);
                } else {
                    planned.spec.children.extend(hidden);
                }
                let before = without_note(jobs::spec_of(&existing)?);
                let fields = changed_fields(&before, &without_note(planned.spec.clone()));
                if fields.is_empty() {
                    // Nothing to write: a second apply of the same document leaves no trace.
                    (Action::Unchanged, existing.id, fields)
                } else {
                    jobs::update_in(conn, actor, existing.id, planned.spec, now)
                        .map_err(|e| e.within(&field))?;
                    (Action::Update, existing.id, fields)
                }
            }
            None => {
                let created = jobs::create_in(conn, actor, planned.spec, now)
                    .map_err(|e| e.within(&field))?;
                (Action::Create, created.id, Vec::new())
            }
        };
        changes.push(Change {
            object: "job",
            group: app_names[planned.group].clone(),
            job: Some(name),
            action: change.0,
            id: Some(change.1.0),
            fields: change.2,
        });
    }
    if options.prune {
        for (g, group_id) in group_ids.iter().enumerate() {
            let keep = named.get(group_id).cloned().unwrap_or_default();
            for existing in job::in_group(conn, *group_id)? {
                if keep.contains(&existing.name) {
                    continue;
                }
                if let Some(parent) = referenced.iter().find(|(id, _)| *id == existing.id) {
                    return Err(Error::invalid(
                        format!("{}.children", parent.1),
                        format!(
                            "names `{}`, which the document does not list: prune would delete it",
                            existing.name
                        ),
                    ));
                }
                jobs::delete_in(conn, actor, existing.id, now)?;
                changes.push(Change {
                    object: "job",
                    group: app_names[g].clone(),
                    job: Some(existing.name),
                    action: Action::Delete,
                    id: Some(existing.id.0),
                    fields: Vec::new(),
                });
            }
        }
    }
    let count = |action: Action| {
        changes
            .iter()
            .filter(|c| c.object == "job" && c.action == action)
            .count()
    };
    let (created, updated, unchanged, deleted) = (
        count(Action::Create),
        count(Action::Update),
        count(Action::Unchanged),
        count(Action::Delete),
    );
    if options.dry_run {
        // What a rolled-back create was numbered means nothing.
        for change in &mut changes {
            if change.action == Action::Create {
                change.id = None;
            }
        }
    }
    Ok(ApplyReport {
        dry_run: options.dry_run,
        prune: options.prune,
        changes,
        created,
        updated,
        unchanged,
        deleted,
    })
}

/// `POST /api/v1/apply`.
pub async fn apply(
    state: &AppState,
    actor: &Actor,
    document: JobsDocument,
    options: ApplyOptions,
) -> Result<ApplyReport, Error> {
    let planned = plan(&document)?;
    let now = state.clock.now_ms();
    let actor = actor.clone();
    let report = state
        .db
        .transaction(move |conn| {
            if options.dry_run {
                crate::db::rehearse(conn, |conn| {
                    apply_in(conn, &actor, &document, planned.clone(), options, now)
                })
            } else {
                apply_in(conn, &actor, &document, planned.clone(), options, now)
            }
        })
        .await?;
    if !options.dry_run && report.created + report.updated + report.deleted > 0 {
        // New and changed schedules are planned at once, as an edit's would be.
        state.scheduler.jobs_changed();
    }
    Ok(report)
}

/// `GET /api/v1/export`: the groups named (all the caller sees when none are) with every job.
pub async fn export(
    state: &AppState,
    actor: &Actor,
    app_names: Vec<String>,
) -> Result<JobsDocument, Error> {
    let actor = actor.clone();
    state
        .db
        .run(move |conn| {
            let chosen: Vec<executor_group::ExecutorGroup> = if app_names.is_empty() {
                executor_group::list(
                    conn,
                    actor.visible_groups().as_deref(),
                    crate::db::Page {
                        limit: i64::MAX,
                        offset: 0,
                    },
                )?
            } else {
                let mut chosen = Vec::with_capacity(app_names.len());
                for name in &app_names {
                    let group = executor_group::find_by_app_name(conn, name)?
                        .filter(|g| actor.sees_group(g.id))
                        .ok_or_else(|| {
                            Error::invalid_as(
                                Code::UnknownGroup,
                                "groups",
                                format!("no executor group `{name}` you can see"),
                            )
                        })?;
                    chosen.push(group);
                }
                chosen
            };
            let mut groups_out = Vec::with_capacity(chosen.len());
            let mut app_of: HashMap<GroupId, String> = HashMap::new();
            let mut rows = Vec::with_capacity(chosen.len());
            for group in chosen {
                app_of.insert(group.id, group.app_name.clone());
                rows.push((job::in_group(conn, group.id)?, group));
            }
            for (jobs_of_group, group) in rows {
                let mut documents = Vec::with_capacity(jobs_of_group.len());
                for row in jobs_of_group {
                    let children =
                        child_refs(conn, &actor, group.id, &row.children.0, &mut app_of)?;
                    let mut value = job_document(jobs::view(row))?;
                    if !children.is_empty()
                        && let Some(fields) = value.as_object_mut()
                    {
                        fields.insert(
                            "children".into(),
                            serde_json::to_value(children).map_err(|e| {
                                Error::Internal(anyhow::anyhow!("encoding children: {e}"))
                            })?,
                        );
                    }
                    documents.push(value);
                }
                let view = groups::view_of(group)?;
                groups_out.push(GroupDocument {
                    app_name: view.app_name,
                    title: Some(view.title),
                    address_mode: Some(view.address_mode),
                    addresses: Some(view.addresses),
                    jobs: documents,
                });
            }
            Ok(JobsDocument {
                kind: KIND.to_owned(),
                version: VERSION,
                groups: groups_out,
            })
        })
        .await
}

/// A job's children by name: a bare name for one of `group_id`, `{group, job}` for another's.
/// A child in a group the caller cannot see is left out (an apply keeps it): the document
/// must not name what the caller may not know.
fn child_refs(
    conn: &mut AnyConnection,
    actor: &Actor,
    group_id: GroupId,
    ids: &[JobId],
    app_of: &mut HashMap<GroupId, String>,
) -> Result<Vec<ChildRef>, Error> {
    let mut refs = Vec::with_capacity(ids.len());
    let rows = job::find_all(conn, ids)?;
    for id in ids {
        let Some(child) = rows.iter().find(|r| r.id == *id) else {
            continue;
        };
        if !actor.sees_group(child.group_id) {
            continue;
        }
        if child.group_id == group_id {
            refs.push(ChildRef::Here(child.name.clone()));
            continue;
        }
        let app = match app_of.get(&child.group_id) {
            Some(app) => app.clone(),
            None => {
                let app = executor_group::get(conn, child.group_id)?.app_name;
                app_of.insert(child.group_id, app.clone());
                app
            }
        };
        refs.push(ChildRef::Elsewhere {
            group: app,
            job: child.name.clone(),
        });
    }
    Ok(refs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(groups: serde_json::Value) -> JobsDocument {
        serde_json::from_value(serde_json::json!({"kind": KIND, "version": 1, "groups": groups}))
            .unwrap()
    }

    fn shell(name: &str, children: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "name": name,
            "schedule": {"type": "none"},
            "handler": {"type": "shell", "command": "true"},
            "children": children,
        })
    }

    fn names(planned: &[PlannedJob], order: &[usize]) -> Vec<String> {
        order
            .iter()
            .map(|i| planned[*i].spec.name.clone())
            .collect()
    }

    #[test]
    fn children_come_before_their_parents() {
        let doc = document(serde_json::json!([
            {"app_name": "a", "jobs": [
                shell("parent", serde_json::json!(["middle", {"group": "b", "job": "far"}])),
                shell("middle", serde_json::json!(["leaf"])),
                shell("leaf", serde_json::Value::Null),
            ]},
            {"app_name": "b", "jobs": [shell("far", serde_json::json!([]))]},
        ]));
        let planned = plan(&doc).unwrap();
        let apps = vec!["a".to_owned(), "b".to_owned()];
        let order = children_first(&planned, &apps).unwrap();
        assert_eq!(names(&planned, &order), ["leaf", "middle", "far", "parent"]);
    }

    #[test]
    fn a_cycle_in_the_document_is_refused_by_name() {
        let doc = document(serde_json::json!([{"app_name": "a", "jobs": [
            shell("one", serde_json::json!(["two"])),
            shell("two", serde_json::json!(["three"])),
            shell("three", serde_json::json!(["one"])),
        ]}]));
        let planned = plan(&doc).unwrap();
        let err = children_first(&planned, &["a".to_owned()]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("one → two → three → one"), "{text}");
    }

    #[test]
    fn bad_documents_name_the_field() {
        let cases = [
            (
                serde_json::json!({"kind": "jobfleet.workflow", "version": 1, "groups": []}),
                "kind",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 2, "groups": []}),
                "version",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a", "jobs": [shell("x", serde_json::Value::Null), shell("x", serde_json::Value::Null)]}
                ]}),
                "groups[0].jobs[1].name",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a", "jobs": []}, {"app_name": "a", "jobs": []}
                ]}),
                "groups[1].app_name",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a b", "jobs": []}
                ]}),
                "groups[0].app_name",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a", "jobs": [{"name": "x", "group_id": 3, "schedule": {"type": "none"}, "handler": {"type": "shell", "command": "true"}}]}
                ]}),
                "groups[0].jobs[0].group_id",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a", "jobs": [{"name": "x", "schedule": {"type": "cron", "expr": "nope"}, "handler": {"type": "shell", "command": "true"}}]}
                ]}),
                "groups[0].jobs[0].schedule.expr",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a", "jobs": [shell("x", serde_json::json!([7]))]}
                ]}),
                "groups[0].jobs[0].children",
            ),
            (
                serde_json::json!({"kind": KIND, "version": 1, "groups": [
                    {"app_name": "a", "jobs": [[1, 2]]}
                ]}),
                "groups[0].jobs[0]",
            ),
        ];
        for (doc, field) in cases {
            let doc: JobsDocument = serde_json::from_value(doc).unwrap();
            match plan(&doc) {
                Err(Error::Invalid { field: Some(f), .. }) => assert_eq!(f, field),
                other => panic!("{field}: {:?}", other.map(|p| p.len())),
            }
        }
    }

    #[test]
    fn changed_fields_name_each_setting() {
        let doc = document(serde_json::json!([{"app_name": "a", "jobs": [
            shell("x", serde_json::Value::Null),
        ]}]));
        let before = plan(&doc).unwrap().remove(0).spec;
        let mut after = before.clone();
        assert!(changed_fields(&before, &after).is_empty());
        after.params = "p".into();
        after.enabled = false;
        after.timezone = chrono_tz::Tz::Europe__Paris;
        assert_eq!(
            changed_fields(&before, &after),
            ["schedule", "params", "enabled"]
        );
    }
}
