//! Executor groups (admins change them; everyone sees the groups granted to them) and agents:
//! status, last heartbeat, host metrics and the runs each one is running.

use actix_web::http::StatusCode;
use actix_web::web;
use askama::Template;
use askama_web::WebTemplate;

use super::forms::{
    ConsoleUser, CsrfForm, Fields, heading_and_action, refilled, save_or_show_again,
};
use super::views::{Chrome, FormState, when};
use super::{PageResult, render, see_other_with};
use crate::domain::ids::{GroupId, RunId};
use crate::domain::policy::AddressMode;
use crate::error::Error;
use crate::service;
use crate::service::agents::Decision;
use crate::service::groups::{GroupInput, GroupUpdate, GroupView};
use crate::service::runs::RunQuery;
use crate::state::AppState;

const FORM_FIELDS: &[&str] = &[
    "app_name",
    "title",
    "address_mode",
    "addresses",
    "allow_executors",
];

#[derive(Debug, Clone)]
pub struct GroupRow {
    pub id: GroupId,
    pub app_name: String,
    pub title: String,
    pub mode: String,
    pub live: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "groups.html")]
pub struct GroupsPage {
    pub c: Chrome,
    pub groups: Vec<GroupRow>,
}

#[derive(Template)]
#[template(path = "group_form.html")]
pub struct GroupFormPage {
    pub c: Chrome,
    pub heading: String,
    pub action: String,
    pub editing: bool,
    pub f: FormState,
}

#[derive(Debug, Clone)]
pub struct AgentRow {
    pub address: String,
    pub app_name: String,
    pub live: bool,
    pub last_seen: String,
    pub hostname: String,
    pub version: String,
    pub limits_mode: String,
    pub metrics: String,
    /// Run id and job name.
    pub runs: Vec<(RunId, String)>,
    pub id: i64,
    /// `approved`, `pending` or `revoked`.
    pub approval: String,
    /// Drained (no new runs) since then, when drained.
    pub drained_since: Option<String>,
    /// `key=value,…`, empty for none.
    pub labels: String,
    /// `agent` or `executor` (an XXL-Job executor on the shared token).
    pub identity: String,
    pub run_as: String,
    pub runs_as_root: bool,
    /// `push`, `connect`, `auto`, or empty when the agent did not say.
    pub mode: String,
    /// The admin holding its connection (and its cluster URL), since when, and the last
    /// ping's round trip.
    pub connection: Option<(String, String, String)>,
}

#[derive(Template, WebTemplate)]
#[template(path = "agents.html")]
pub struct AgentsPage {
    pub c: Chrome,
    pub agents: Vec<AgentRow>,
}

async fn list(state: web::Data<AppState>, user: ConsoleUser) -> PageResult<GroupsPage> {
    let groups = service::groups::all(&state, &user.actor).await?;
    let agents = service::agents::list(&state, &user.actor).await?;
    Ok(GroupsPage {
        groups: groups
            .into_iter()
            .map(|g| {
                let live = agents
                    .iter()
                    .filter(|a| a.live && a.app_name == g.app_name)
                    .count();
                let total = agents.iter().filter(|a| a.app_name == g.app_name).count();
                GroupRow {
                    id: g.id,
                    mode: g.address_mode.to_string(),
                    live: if g.address_mode == AddressMode::Manual {
                        format!("{} (manual)", g.addresses.len())
                    } else {
                        format!("{live} / {total}")
                    },
                    app_name: g.app_name,
                    title: g.title,
                }
            })
            .collect(),
        c: user.page("groups"),
    })
}

fn form_of(g: &GroupView) -> FormState {
    FormState::from_pairs([
        ("app_name", g.app_name.clone()),
        ("title", g.title.clone()),
        ("address_mode", g.address_mode.to_string()),
        ("addresses", g.addresses.join("\n")),
        ("allow_executors", g.allow_executors.to_string()),
    ])
}

fn page(
    user: &ConsoleUser,
    heading: String,
    action: String,
    editing: bool,
    f: FormState,
) -> GroupFormPage {
    GroupFormPage {
        c: user.page("groups"),
        heading,
        action,
        editing,
        f,
    }
}

async fn new(user: ConsoleUser) -> PageResult {
    user.actor.require_admin()?;
    let f = FormState::from_pairs([("address_mode", "auto")]);
    render(
        StatusCode::OK,
        &page(
            &user,
            user.chrome.t("groups.new").into(),
            "/console/groups".into(),
            false,
            f,
        ),
    )
}

fn mode_and_addresses(f: &Fields) -> Result<(Option<AddressMode>, Option<Vec<String>>), Error> {
    let mode = f.choice("address_mode")?;
    let addresses: Vec<String> = f
        .raw("addresses")
        .split(|c: char| c == '\n' || c == ',' || c.is_whitespace())
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    Ok((mode, Some(addresses)))
}

fn saved(user: &ConsoleUser) -> actix_web::HttpResponse {
    see_other_with("/console/groups", user.chrome.t("flash.saved"))
}

/// The form again, as sent, with `err` beside its field;
/// `id` is the one being edited (none: a new one).
fn again(user: &ConsoleUser, fields: &Fields, err: &Error, id: Option<GroupId>) -> PageResult {
    let (heading, action) = heading_and_action(&user.chrome, "groups.new", "/console/groups", id);
    let f = refilled(fields, &[], err, FORM_FIELDS);
    render(
        err.code().status(),
        &page(user, heading, action, id.is_some(), f),
    )
}

async fn create(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let result = match mode_and_addresses(&fields) {
        Ok((address_mode, addresses)) => {
            let input = GroupInput {
                app_name: fields.text("app_name"),
                title: fields.text("title"),
                address_mode,
                addresses,
                allow_executors: Some(fields.flag("allow_executors")),
            };
            service::groups::create(&state, &user.actor, &proof, input).await
        }
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        async |_| Ok(saved(&user)),
        async |e| again(&user, &fields, &e, None),
    )
    .await
}

async fn edit(state: web::Data<AppState>, user: ConsoleUser, id: web::Path<GroupId>) -> PageResult {
    user.actor.require_admin()?;
    let g = service::groups::get(&state, &user.actor, *id).await?;
    let heading = format!("{} {}", user.chrome.t("action.edit"), g.app_name);
    render(
        StatusCode::OK,
        &page(
            &user,
            heading,
            format!("/console/groups/{}", g.id),
            true,
            form_of(&g),
        ),
    )
}

async fn update(state: web::Data<AppState>, form: CsrfForm, id: web::Path<GroupId>) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let id = id.into_inner();
    let result = match mode_and_addresses(&fields) {
        Ok((address_mode, addresses)) => {
            let input = GroupUpdate {
                title: fields.text("title"),
                address_mode,
                addresses,
                allow_executors: Some(fields.flag("allow_executors")),
            };
            service::groups::update(&state, &user.actor, &proof, id, input).await
        }
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        async |_| Ok(saved(&user)),
        async |e| again(&user, &fields, &e, Some(id)),
    )
    .await
}

async fn delete(state: web::Data<AppState>, form: CsrfForm, id: web::Path<GroupId>) -> PageResult {
    let proof = form.user.actor.require_admin()?;
    service::groups::delete(&state, &form.user.actor, &proof, *id).await?;
    Ok(see_other_with(
        "/console/groups",
        form.user.chrome.t("flash.deleted"),
    ))
}

async fn decide(state: &AppState, form: CsrfForm, id: i64, decision: Decision) -> PageResult {
    let proof = form.user.actor.require_admin()?;
    service::agents::decide(state, &form.user.actor, &proof, id, decision).await?;
    Ok(see_other_with(
        "/console/agents",
        form.user.chrome.t("flash.saved"),
    ))
}

async fn approve(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    decide(&state, form, *id, Decision::Approve).await
}

async fn revoke(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    decide(&state, form, *id, Decision::Revoke).await
}

async fn drain(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    decide(&state, form, *id, Decision::Drain).await
}

async fn undrain(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    decide(&state, form, *id, Decision::Undrain).await
}

async fn forget(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    decide(&state, form, *id, Decision::Forget).await
}

/// The metrics an agent reports with its heartbeat, in a line.
fn metrics_text(m: &serde_json::Value) -> String {
    match serde_json::from_value::<jobfleet_agent::protocol::HostMetrics>(m.clone()) {
        Ok(h) => format!(
            "CPU {:.0}% · load {:.2} · mem {}/{} MB · disk free {} MB · {} running",
            h.cpu_pct, h.load1, h.mem_used_mb, h.mem_total_mb, h.disk_free_mb, h.running
        ),
        // No metrics yet, or an XXL-Job executor that sends none.
        Err(_) if m.is_null() || m.as_object().is_some_and(serde_json::Map::is_empty) => "—".into(),
        Err(_) => m.to_string().chars().take(160).collect(),
    }
}

async fn agents(state: web::Data<AppState>, user: ConsoleUser) -> PageResult<AgentsPage> {
    let agents = service::agents::list(&state, &user.actor).await?;
    let running = service::runs::list(
        &state,
        &user.actor,
        RunQuery {
            status: Some("running".into()),
            limit: Some(service::Page::MAX_LIMIT),
            ..RunQuery::default()
        },
    )
    .await?
    .items;
    let names = service::runs::job_names(&state, &running).await?;
    Ok(AgentsPage {
        agents: agents
            .into_iter()
            .map(|a| AgentRow {
                runs: running
                    .iter()
                    .filter(|r| r.agent.as_deref() == Some(a.address.as_str()))
                    .map(|r| (r.id, names.get(&r.job_id).cloned().unwrap_or_default()))
                    .collect(),
                metrics: metrics_text(&a.metrics),
                last_seen: when(Some(a.last_seen_ms)),
                drained_since: a.drained_ms.map(|ms| when(Some(ms))),
                labels: jobfleet_agent::protocol::labels::format_labels(&a.labels),
                address: a.address,
                app_name: a.app_name,
                live: a.live,
                hostname: a.hostname,
                version: a.version,
                limits_mode: a.limits_mode,
                id: a.id,
                approval: a.approval,
                identity: a.identity,
                run_as: a.run_as,
                runs_as_root: a.runs_as_root,
                mode: a.mode,
                connection: a.connection.map(|l| {
                    (
                        if l.url.is_empty() {
                            l.admin
                        } else {
                            format!("{} ({})", l.admin, l.url)
                        },
                        when(Some(l.since_ms)),
                        l.rtt_ms
                            .map_or_else(|| "–".to_owned(), |ms| format!("{ms:.1} ms")),
                    )
                }),
            })
            .collect(),
        c: user.page("agents"),
    })
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/groups", web::get().to(list))
        .route("/groups", web::post().to(create))
        .route("/groups/new", web::get().to(new))
        .route("/groups/{id}/edit", web::get().to(edit))
        .route("/groups/{id}", web::post().to(update))
        .route("/groups/{id}/delete", web::post().to(delete))
        .route("/agents", web::get().to(agents))
        .route("/agents/{id}/approve", web::post().to(approve))
        .route("/agents/{id}/revoke", web::post().to(revoke))
        .route("/agents/{id}/drain", web::post().to(drain))
        .route("/agents/{id}/undrain", web::post().to(undrain))
        .route("/agents/{id}/forget", web::post().to(forget));
}
