//! Workflows in the console: the list, the editor (a form for what every workflow has, and a
//! YAML or JSON text for its graph and the rest, checked with a drawn preview as you type), a
//! workflow's page (its graph, runs, trigger, export), and a workflow run's page, whose graph
//! colours in as nodes run and whose buttons pause, resume, cancel, re-run or mark a node.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use askama_web::WebTemplate;
use serde::Serialize;

use super::dag::{self, Dag, NodeFace};
use super::forms::{
    ConsoleUser, CsrfForm, Fields, heading_and_action, listed, refilled, save_or_show_again,
};
use super::jobs::{group_name, schedule_text};
use super::views::{Chrome, FormState, Opt, Pager, duration, when};
use super::{PageError, PageResult, render, see_other_with};
use crate::domain::document::{self, Format};
use crate::domain::ids::{GroupId, JobId, WorkflowId, WorkflowRunId};
use crate::domain::policy::Concurrency;
use crate::domain::workflow::{Definition, Graph, NodeStatus, WorkflowStatus};
use crate::error::Error;
use crate::service;
use crate::service::workflows::{
    NodeRunView, Operation, WorkflowInput, WorkflowQuery, WorkflowRunQuery, WorkflowRunView,
    WorkflowTrigger, WorkflowView,
};
use crate::state::AppState;

/// The fields the editor's form holds; everything else of a workflow is in its text.
const FORM_KEYS: [&str; 6] = [
    "group_id",
    "name",
    "description",
    "concurrency",
    "timeout_s",
    "enabled",
];
/// Keys of a workflow's view that are not input (the text of an edit leaves them out).
const READ_ONLY_KEYS: [&str; 4] = ["id", "created_ms", "updated_ms", "next_fire_ms"];

#[derive(Debug, Clone)]
pub struct WorkflowRow {
    pub id: WorkflowId,
    pub name: String,
    pub group: String,
    pub nodes: usize,
    pub concurrency: String,
    pub schedule: String,
    pub enabled: bool,
    pub updated: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "workflows.html")]
pub struct WorkflowsPage {
    pub c: Chrome,
    pub groups: Vec<Opt>,
    pub workflows: Vec<WorkflowRow>,
    pub pager: Pager,
    pub error: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "workflow_form.html")]
pub struct WorkflowFormPage {
    pub c: Chrome,
    pub heading: String,
    pub action: String,
    pub id: String,
    pub f: FormState,
    pub groups: Vec<Opt>,
    pub concurrencies: Vec<Opt>,
    pub jobs: Vec<JobChoice>,
    pub dag: Option<Dag>,
}

#[derive(Debug, Clone)]
pub struct JobChoice {
    pub id: JobId,
    pub name: String,
    pub group: String,
}

/// A run in a workflow's list of runs.
#[derive(Debug, Clone)]
pub struct WorkflowRunRow {
    pub id: WorkflowRunId,
    pub status: String,
    pub status_label: &'static str,
    pub trigger_kind: String,
    pub started: String,
    pub duration: String,
    pub message: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "workflow.html")]
pub struct WorkflowPage {
    pub c: Chrome,
    pub workflow: WorkflowView,
    pub group: String,
    pub schedule: String,
    /// "—" for a disabled or unscheduled workflow.
    pub next_fire: String,
    pub alert: String,
    pub can_edit: bool,
    pub dag: Option<Dag>,
    pub runs: Vec<WorkflowRunRow>,
}

/// A node of a run as the table under the graph shows it.
#[derive(Debug, Clone)]
pub struct NodeRow {
    pub key: String,
    pub job: String,
    pub status: String,
    pub status_label: &'static str,
    pub attempt: i32,
    pub runs: Vec<String>,
    pub started: String,
    pub finished: String,
    pub message: String,
    pub outputs: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "workflow_run.html")]
pub struct WorkflowRunPage {
    pub c: Chrome,
    pub run: WorkflowRunView,
    pub workflow_name: String,
    pub status_label: &'static str,
    pub started: String,
    pub finished: String,
    pub dag: Option<Dag>,
    pub nodes: Vec<NodeRow>,
    pub can_pause: bool,
    pub can_resume: bool,
    pub can_cancel: bool,
    pub can_rerun: bool,
    pub can_mark: bool,
    pub node_keys: Vec<Opt>,
    pub is_final: bool,
}

/// The graph alone, for the editor's preview.
#[derive(Template)]
#[template(path = "partials/dag.html")]
struct DagPartial {
    dag: Option<Dag>,
}

pub fn workflow_status_label(c: &Chrome, status: WorkflowStatus) -> &'static str {
    c.t(match status {
        WorkflowStatus::Running => "status.running",
        WorkflowStatus::Paused => "status.paused",
        WorkflowStatus::Succeeded => "status.succeeded",
        WorkflowStatus::Failed => "status.failed",
        WorkflowStatus::Cancelled => "status.cancelled",
        WorkflowStatus::TimedOut => "status.timed_out",
    })
}

pub fn node_status_label(c: &Chrome, status: NodeStatus) -> &'static str {
    c.t(match status {
        NodeStatus::Waiting => "status.waiting",
        NodeStatus::Ready => "status.ready",
        NodeStatus::Running => "status.running",
        NodeStatus::Succeeded => "status.succeeded",
        NodeStatus::Failed => "status.failed",
        NodeStatus::Skipped => "status.skipped",
        NodeStatus::Cancelled => "status.cancelled",
    })
}

/// Draws `graph` with its jobs' names and the faces `face` gives each node; returns the names
/// too (the jobs the user may see).
async fn draw(
    state: &AppState,
    user: &ConsoleUser,
    graph: &Graph,
    face: impl Fn(usize) -> NodeFace,
) -> Result<(Dag, BTreeMap<JobId, String>), Error> {
    let ids: Vec<JobId> = graph
        .definition
        .nodes
        .iter()
        .map(|n| JobId(n.job_id))
        .collect();
    let names = service::workflows::job_names(state, &user.actor, ids).await?;
    let faces: Vec<NodeFace> = graph
        .definition
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| NodeFace {
            label: names
                .get(&JobId(n.job_id))
                .cloned()
                .unwrap_or_else(|| format!("#{}", n.job_id)),
            ..face(i)
        })
        .collect();
    Ok((dag::layout(graph, &faces), names))
}

fn graph_of(
    nodes: &[crate::domain::workflow::NodeDef],
    edges: &[crate::domain::workflow::EdgeDef],
) -> Option<Graph> {
    Definition {
        nodes: nodes.to_vec(),
        edges: edges.to_vec(),
    }
    .validate()
    .ok()
}

async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<WorkflowsPage> {
    let q = Fields::of_query(&req);
    let groups = service::groups::all(&state, &user.actor).await?;
    let result = match (|| -> Result<WorkflowQuery, Error> {
        Ok(WorkflowQuery {
            group_id: q.number("group_id", "group_id")?,
            limit: Some(50),
            offset: q.number("offset", "offset")?,
        })
    })() {
        Ok(query) => service::workflows::list(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let base = q.link_keeping("/console/workflows", &["group_id"]);
    let chosen = q.text("group_id");
    Ok(WorkflowsPage {
        groups: groups
            .iter()
            .map(|g| {
                Opt::new(g.id.to_string(), group_name(&groups, g.id))
                    .picked(g.id.to_string() == chosen)
            })
            .collect(),
        pager: Pager::of(&base, &paged),
        workflows: paged
            .items
            .iter()
            .map(|w| WorkflowRow {
                id: w.id,
                name: w.name.clone(),
                group: group_name(&groups, w.group_id),
                nodes: w.nodes.len(),
                concurrency: w.concurrency.to_string(),
                schedule: schedule_text(&w.schedule),
                enabled: w.enabled,
                updated: when(Some(w.updated_ms)),
            })
            .collect(),
        error,
        c: user.page("workflows"),
    })
}

/// The editor's text for an existing workflow: its view without the form's fields and what is
/// not input, the graph first.
fn definition_text(view: &WorkflowView) -> Result<String, Error> {
    let value = serde_json::to_value(view)
        .map_err(|e| Error::Internal(anyhow::anyhow!("encoding a workflow: {e}")))?;
    let mut rest = match value {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    for key in FORM_KEYS.iter().chain(READ_ONLY_KEYS.iter()) {
        rest.remove(*key);
    }
    // A JSON map is sorted; the text reads better with what people edit most on top.
    let mut ordered = serde_yaml_ng::Mapping::new();
    for key in TEXT_ORDER {
        if let Some(value) = rest.remove(key) {
            ordered.insert(key.into(), yaml_of(value)?);
        }
    }
    for (key, value) in rest {
        ordered.insert(key.into(), yaml_of(value)?);
    }
    document::write(&ordered, Format::Yaml)
}

const TEXT_ORDER: [&str; 6] = ["nodes", "edges", "params", "schedule", "misfire", "alert"];

fn yaml_of(value: serde_json::Value) -> Result<serde_yaml_ng::Value, Error> {
    serde_yaml_ng::to_value(value)
        .map_err(|e| Error::Internal(anyhow::anyhow!("encoding a workflow: {e}")))
}

const NEW_DEFINITION: &str = "# Nodes run jobs of the workflow's group (by job id); edges say when the next one runs.\n\
nodes:\n  - key: extract\n    job_id: 1\n  - key: load\n    job_id: 2\n\
edges:\n  - from: extract\n    to: load\n    on: success   # or failure, always\n";

/// The form's fields and the text, as one `WorkflowInput`.
fn input_of(fields: &Fields) -> Result<WorkflowInput, Error> {
    let text = fields.raw("definition");
    let mut value: serde_json::Value = if text.trim().is_empty() {
        serde_json::json!({})
    } else {
        document::parse(text, Some("definition"))?
    };
    let Some(map) = value.as_object_mut() else {
        return Err(Error::invalid(
            "definition",
            "must be a mapping with `nodes`, `edges` and the other settings",
        ));
    };
    for key in FORM_KEYS {
        if map.contains_key(key) {
            return Err(Error::invalid(
                "definition",
                format!("`{key}` is set in the form above; remove it from the definition"),
            ));
        }
    }
    let group_id: GroupId = fields
        .number("group_id", "group_id")?
        .ok_or_else(|| Error::invalid("group_id", "choose a group"))?;
    map.insert("group_id".into(), serde_json::json!(group_id));
    map.insert("name".into(), serde_json::json!(fields.raw("name").trim()));
    map.insert(
        "description".into(),
        serde_json::json!(fields.raw("description")),
    );
    if let Some(c) = fields.choice::<Concurrency>("concurrency")? {
        map.insert("concurrency".into(), serde_json::json!(c));
    }
    if let Some(t) = fields.number::<i64>("timeout_s", "timeout_s")? {
        map.insert("timeout_s".into(), serde_json::json!(t));
    }
    map.insert("enabled".into(), serde_json::json!(fields.flag("enabled")));
    serde_json::from_value(value).map_err(|e| {
        let message = e.to_string();
        let field = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|m| message.split(m).nth(1))
            .and_then(|rest| rest.split('`').next())
            .map_or_else(|| "definition".to_owned(), |f| format!("definition.{f}"));
        Error::invalid(field, message)
    })
}

/// An error as the editor shows it: the form's own fields beside them, everything inside the
/// definition (`nodes[2].job_id`, `edges`) under the text, naming where.
fn for_editor(err: Error) -> Error {
    match err {
        Error::Invalid {
            code,
            field: Some(field),
            message,
        } if !FORM_KEYS.contains(&field.as_str()) && !field.starts_with("definition") => {
            Error::Invalid {
                code,
                field: Some("definition".into()),
                message: format!("{field}: {message}"),
            }
        }
        Error::Conflict {
            field: Some(field),
            message,
        } if !FORM_KEYS.contains(&field.as_str()) => Error::Conflict {
            field: Some("definition".into()),
            message: format!("{field}: {message}"),
        },
        other => other,
    }
}

const SHOWN: [&str; 7] = [
    "group_id",
    "name",
    "description",
    "concurrency",
    "timeout_s",
    "enabled",
    "definition",
];

async fn form_page(
    state: &AppState,
    user: &ConsoleUser,
    id: Option<WorkflowId>,
    f: FormState,
) -> PageResult<WorkflowFormPage> {
    let c = user.page("workflows");
    let (heading, action) = heading_and_action(&c, "workflows.new", "/console/workflows", id);
    let groups = service::groups::all(state, &user.actor).await?;
    let writable: Vec<_> = groups
        .iter()
        .filter(|g| user.actor.write_group(g.id).is_ok())
        .collect();
    let jobs = service::jobs::list(
        state,
        &user.actor,
        service::jobs::JobQuery {
            limit: Some(crate::db::Page::MAX_LIMIT),
            ..Default::default()
        },
    )
    .await?
    .items
    .into_iter()
    .filter(|j| user.actor.write_group(j.group_id).is_ok())
    .map(|j| JobChoice {
        id: j.id,
        name: j.name,
        group: group_name(&groups, j.group_id),
    })
    .collect();
    // The preview as the text stands, when it draws at all.
    let dag = match input_of(&fields_of(&f)) {
        Ok(input) => match graph_of(&input.nodes, &input.edges) {
            Some(graph) => Some(draw(state, user, &graph, |_| NodeFace::default()).await?.0),
            None => None,
        },
        Err(_) => None,
    };
    Ok(WorkflowFormPage {
        heading,
        action,
        id: id.map(|i| i.to_string()).unwrap_or_default(),
        groups: writable
            .iter()
            .map(|g| Opt::new(g.id.to_string(), group_name(&groups, g.id)))
            .collect(),
        concurrencies: Concurrency::ALL
            .iter()
            .map(|k| Opt::new(k.as_str(), k.as_str()))
            .collect(),
        jobs,
        dag,
        f,
        c,
    })
}

/// The form's values back as fields (to draw the preview of a form shown again).
fn fields_of(f: &FormState) -> Fields {
    Fields(
        SHOWN
            .iter()
            .map(|k| ((*k).to_owned(), f.v(k).to_owned()))
            .collect(),
    )
}

async fn new(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<WorkflowFormPage> {
    let q = Fields::of_query(&req);
    let mut f = FormState::from_pairs([
        ("concurrency", "allow"),
        ("timeout_s", "0"),
        ("enabled", "true"),
        ("definition", NEW_DEFINITION),
    ]);
    if let Some(group) = q.get("group_id") {
        f.set("group_id", group);
    }
    form_page(&state, &user, None, f).await
}

async fn edit(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<WorkflowId>,
) -> PageResult<WorkflowFormPage> {
    let w = service::workflows::get(&state, &user.actor, *id).await?;
    user.actor.write_group(w.group_id)?;
    let f = FormState::from_pairs([
        ("group_id", w.group_id.to_string()),
        ("name", w.name.clone()),
        ("description", w.description.clone()),
        ("concurrency", w.concurrency.to_string()),
        ("timeout_s", w.timeout_s.to_string()),
        ("enabled", w.enabled.to_string()),
        ("definition", definition_text(&w)?),
    ]);
    form_page(&state, &user, Some(w.id), f).await
}

async fn save(state: &AppState, form: CsrfForm, id: Option<WorkflowId>) -> PageResult {
    let result = match input_of(&form.fields) {
        Ok(input) => match id {
            None => service::workflows::create(state, &form.user.actor, input).await,
            Some(id) => service::workflows::update(state, &form.user.actor, id, input).await,
        },
        Err(e) => Err(e),
    };
    save_or_show_again(
        result.map_err(for_editor),
        async |saved: WorkflowView| {
            Ok(see_other_with(
                &format!("/console/workflows/{}", saved.id),
                form.user.chrome.t("flash.saved"),
            ))
        },
        async |err| {
            let f = refilled(&form.fields, &[], &err, &SHOWN);
            let page = form_page(state, &form.user, id, f).await?;
            render(err.code().status(), &page)
        },
    )
    .await
}

async fn create(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    save(&state, form, None).await
}

async fn update(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<WorkflowId>,
) -> PageResult {
    save(&state, form, Some(*id)).await
}

#[derive(Serialize)]
struct CheckAnswer {
    ok: bool,
    /// Field → message, as the form shows them.
    errors: BTreeMap<String, String>,
    /// The graph as SVG, when the definition draws (even if a reference is still wrong).
    graph: String,
}

/// The editor's check as you type: what saving would answer, and the graph, writing nothing.
async fn check(state: web::Data<AppState>, form: CsrfForm) -> PageResult<HttpResponse> {
    let id: Option<WorkflowId> = form.fields.number("id", "id")?;
    let (verdict, graph) = match input_of(&form.fields) {
        Ok(input) => {
            let graph = graph_of(&input.nodes, &input.edges);
            let verdict = service::workflows::check(&state, &form.user.actor, input, id).await;
            (verdict, graph)
        }
        Err(e) => (Err(e), None),
    };
    let mut errors = BTreeMap::new();
    match verdict.map_err(for_editor) {
        Ok(()) => {}
        Err(e @ (Error::Invalid { .. } | Error::Conflict { .. })) => {
            let field = e.field().unwrap_or("definition").to_owned();
            errors.insert(field, e.public_message());
        }
        Err(e) => return Err(e.into()),
    }
    let graph = match graph {
        Some(graph) => {
            let (dag, _) = draw(&state, &form.user, &graph, |_| NodeFace::default()).await?;
            DagPartial { dag: Some(dag) }
                .render()
                .map_err(|e| Error::Internal(anyhow::anyhow!("rendering a graph: {e}")))?
        }
        None => String::new(),
    };
    Ok(HttpResponse::Ok().json(CheckAnswer {
        ok: errors.is_empty(),
        errors,
        graph,
    }))
}

fn run_row(c: &Chrome, r: &WorkflowRunView) -> WorkflowRunRow {
    WorkflowRunRow {
        id: r.id,
        status: r.status.to_string(),
        status_label: workflow_status_label(c, r.status),
        trigger_kind: r.trigger_kind.to_string(),
        started: when(Some(r.started_ms)),
        duration: r
            .finished_ms
            .map(|f| duration((f - r.started_ms).max(0)))
            .unwrap_or_default(),
        message: r.message.chars().take(200).collect(),
    }
}

async fn show(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<WorkflowId>,
) -> PageResult<WorkflowPage> {
    let workflow = service::workflows::get(&state, &user.actor, *id).await?;
    let groups = service::groups::all(&state, &user.actor).await?;
    let c = user.page("workflows");
    let runs = service::workflows::list_runs(
        &state,
        &user.actor,
        WorkflowRunQuery {
            workflow_id: Some(workflow.id),
            limit: Some(20),
            ..WorkflowRunQuery::default()
        },
    )
    .await?
    .items
    .iter()
    .map(|r| run_row(&c, r))
    .collect();
    let dag = match graph_of(&workflow.nodes, &workflow.edges) {
        Some(graph) => Some(
            draw(&state, &user, &graph, |_| NodeFace::default())
                .await?
                .0,
        ),
        None => None,
    };
    let alert = if workflow.alert.on_failure {
        let ids: Vec<String> = workflow
            .alert
            .channels
            .iter()
            .map(|c| format!("#{c}"))
            .collect();
        ids.join(", ")
    } else {
        "—".into()
    };
    Ok(WorkflowPage {
        group: group_name(&groups, workflow.group_id),
        schedule: schedule_text(&workflow.schedule),
        next_fire: if workflow.enabled {
            when(workflow.next_fire_ms)
        } else {
            "—".into()
        },
        alert,
        can_edit: user.actor.write_group(workflow.group_id).is_ok(),
        dag,
        runs,
        workflow,
        c,
    })
}

async fn trigger(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<WorkflowId>,
) -> PageResult {
    let request = WorkflowTrigger {
        params: Some(form.fields.raw("params").to_owned()),
    };
    let run = service::workflows::trigger(&state, &form.user.actor, *id, request).await?;
    Ok(see_other_with(
        &format!("/console/workflow-runs/{}", run.id),
        form.user.chrome.t("flash.triggered"),
    ))
}

async fn delete(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<WorkflowId>,
) -> PageResult {
    service::workflows::delete(&state, &form.user.actor, *id).await?;
    Ok(see_other_with(
        "/console/workflows",
        form.user.chrome.t("flash.deleted"),
    ))
}

/// The export as a file to keep in version control.
async fn export(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<WorkflowId>,
) -> PageResult<HttpResponse> {
    let q = Fields::of_query(&req);
    let format = Format::from_name(q.get("format").unwrap_or("yaml"))?;
    let doc = service::workflows::export(&state, &user.actor, *id).await?;
    let file: String = doc
        .workflow
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    Ok(HttpResponse::Ok()
        .content_type(format.media_type())
        .insert_header((
            actix_web::http::header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{file}.{}\"", format.extension()),
        ))
        .body(document::write(&doc, format)?))
}

#[derive(Template, WebTemplate)]
#[template(path = "workflow_import.html")]
pub struct WorkflowImportPage {
    pub c: Chrome,
    pub f: FormState,
    pub groups: Vec<Opt>,
}

async fn import_page(
    state: &AppState,
    user: &ConsoleUser,
    f: FormState,
) -> PageResult<WorkflowImportPage> {
    let groups = service::groups::all(state, &user.actor).await?;
    Ok(WorkflowImportPage {
        groups: groups
            .iter()
            .filter(|g| user.actor.write_group(g.id).is_ok())
            .map(|g| Opt::new(g.id.to_string(), group_name(&groups, g.id)))
            .collect(),
        f,
        c: user.page("workflows"),
    })
}

async fn import_form(
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<WorkflowImportPage> {
    import_page(&state, &user, FormState::default()).await
}

/// A document exported from here or another cluster (YAML or JSON), into a group.
async fn import(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let request = (|| -> Result<service::workflows::ImportRequest, Error> {
        let group_id: GroupId = form
            .fields
            .number("group_id", "group_id")?
            .ok_or_else(|| Error::invalid("group_id", "choose a group"))?;
        let document = document::parse(form.fields.raw("document"), Some("document"))?;
        Ok(service::workflows::ImportRequest { group_id, document })
    })();
    let result = match request {
        Ok(request) => service::workflows::import(&state, &form.user.actor, request).await,
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        async |(workflow, _created): (WorkflowView, bool)| {
            Ok(see_other_with(
                &format!("/console/workflows/{}", workflow.id),
                form.user.chrome.t("flash.saved"),
            ))
        },
        async |err| {
            // Errors inside the document (`document.jobs[0].name`) show under its text.
            let err = match err {
                Error::Invalid {
                    code,
                    field: Some(field),
                    message,
                } if field.starts_with("document.") => Error::Invalid {
                    code,
                    field: Some("document".into()),
                    message: format!("{field}: {message}"),
                },
                other => other,
            };
            let f = refilled(&form.fields, &[], &err, &["group_id", "document"]);
            let page = import_page(&state, &form.user, f).await?;
            render(err.code().status(), &page)
        },
    )
    .await
}

/// The link of a node: its newest job run.
fn node_href(node: &NodeRunView) -> String {
    node.run_ids
        .last()
        .map(|r| format!("/console/runs/{r}"))
        .unwrap_or_default()
}

async fn run_page(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<WorkflowRunId>,
) -> PageResult<WorkflowRunPage> {
    let run = service::workflows::get_run(&state, &user.actor, *id).await?;
    let graph = service::workflows::run_graph(&state, &user.actor, run.id).await?;
    let c = user.page("workflows");
    let workflow_name = match service::workflows::get(&state, &user.actor, run.workflow_id).await {
        Ok(w) => w.name,
        Err(Error::NotFound(_)) => format!("#{}", run.workflow_id),
        Err(e) => return Err(e.into()),
    };
    let nodes: Vec<NodeRunView> = run.nodes.clone().unwrap_or_default();
    let by_key: BTreeMap<&str, &NodeRunView> = nodes.iter().map(|n| (n.key.as_str(), n)).collect();
    let (dag, names) = draw(&state, &user, &graph, |i| {
        match by_key.get(graph.node(i).key.as_str()) {
            Some(n) => NodeFace {
                status: n.status.to_string(),
                status_label: node_status_label(&c, n.status).to_owned(),
                href: node_href(n),
                ..NodeFace::default()
            },
            None => NodeFace::default(),
        }
    })
    .await?;
    let rows = nodes
        .iter()
        .map(|n| NodeRow {
            key: n.key.clone(),
            job: names
                .get(&n.job_id)
                .cloned()
                .unwrap_or_else(|| format!("#{}", n.job_id)),
            status: n.status.to_string(),
            status_label: node_status_label(&c, n.status),
            attempt: n.attempt,
            runs: n.run_ids.iter().map(ToString::to_string).collect(),
            started: when(n.started_ms),
            finished: when(n.finished_ms),
            message: n.message.chars().take(300).collect(),
            outputs: n
                .outputs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect();
    let writable = user.actor.write_group(run.group_id).is_ok();
    let status = run.status;
    Ok(WorkflowRunPage {
        workflow_name,
        status_label: workflow_status_label(&c, status),
        started: when(Some(run.started_ms)),
        finished: when(run.finished_ms),
        dag: Some(dag),
        nodes: rows,
        can_pause: writable && status == WorkflowStatus::Running,
        can_resume: writable && status == WorkflowStatus::Paused,
        can_cancel: writable && !status.is_final(),
        can_rerun: writable
            && matches!(
                status,
                WorkflowStatus::Failed | WorkflowStatus::Cancelled | WorkflowStatus::TimedOut
            ),
        can_mark: writable,
        node_keys: nodes
            .iter()
            .filter(|n| !matches!(n.status, NodeStatus::Succeeded))
            .map(|n| Opt::new(n.key.clone(), n.key.clone()))
            .collect(),
        is_final: status.is_final(),
        run,
        c,
    })
}

#[derive(Serialize)]
struct NodeState {
    key: String,
    status: String,
    label: &'static str,
    href: String,
}

#[derive(Serialize)]
struct RunState {
    status: String,
    status_label: &'static str,
    /// Nothing will change any more: the page stops asking.
    done: bool,
    nodes: Vec<NodeState>,
}

/// A run's status and its nodes', for the page to colour the graph in without reloading.
async fn run_state(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<WorkflowRunId>,
) -> PageResult<HttpResponse> {
    let run = service::workflows::get_run(&state, &user.actor, *id).await?;
    let c = &user.chrome;
    let nodes = run
        .nodes
        .iter()
        .flatten()
        .map(|n| NodeState {
            key: n.key.clone(),
            status: n.status.to_string(),
            label: node_status_label(c, n.status),
            href: node_href(n),
        })
        .collect();
    Ok(HttpResponse::Ok().json(RunState {
        status: run.status.to_string(),
        status_label: workflow_status_label(c, run.status),
        done: run.status.is_final(),
        nodes,
    }))
}

async fn operate(
    state: web::Data<AppState>,
    form: CsrfForm,
    path: web::Path<(WorkflowRunId, String)>,
) -> PageResult {
    let (id, name) = path.into_inner();
    let operation = match name.as_str() {
        "pause" => Operation::Pause,
        "resume" => Operation::Resume,
        "cancel" => Operation::Cancel,
        "rerun" => Operation::Rerun,
        "mark" => {
            let key = form
                .fields
                .get("node")
                .ok_or_else(|| Error::invalid("node", "choose a node"))?
                .to_owned();
            let status = service::workflows::MarkRequest {
                status: form.fields.text("status"),
            }
            .status()?;
            Operation::Mark { key, status }
        }
        _ => return Err(PageError(Error::NotFound("page"))),
    };
    service::workflows::operate(&state, &form.user.actor, id, operation).await?;
    Ok(see_other_with(
        &format!("/console/workflow-runs/{id}"),
        form.user.chrome.t("flash.saved"),
    ))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/workflows", web::get().to(list))
        .route("/workflows", web::post().to(create))
        .route("/workflows/new", web::get().to(new))
        .route("/workflows/check", web::post().to(check))
        .route("/workflows/import", web::get().to(import_form))
        .route("/workflows/import", web::post().to(import))
        .route("/workflows/{id}", web::get().to(show))
        .route("/workflows/{id}", web::post().to(update))
        .route("/workflows/{id}/edit", web::get().to(edit))
        .route("/workflows/{id}/trigger", web::post().to(trigger))
        .route("/workflows/{id}/delete", web::post().to(delete))
        .route("/workflows/{id}/export", web::get().to(export))
        .route("/workflow-runs/{id}", web::get().to(run_page))
        .route("/workflow-runs/{id}/state", web::get().to(run_state))
        .route("/workflow-runs/{id}/{operation}", web::post().to(operate));
}
