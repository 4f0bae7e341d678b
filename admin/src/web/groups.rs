//! Executor groups (admins change them; everyone sees the groups granted to them) and agents:
//! status, last heartbeat, host metrics and the runs each one is running.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;

use super::forms::{
    ConsoleUser, CsrfForm, Fields, heading_and_action, listed, refilled, save_or_show_again,
};
use super::views::{Chrome, FormState, Opt, Pager, group_options, when};
use super::{PageResult, render, see_other_with};
use crate::domain::ids::{GroupId, RunId};
use crate::domain::policy::AddressMode;
use crate::error::Error;
use crate::service;
use crate::service::agents::Decision;
use crate::service::fleet::{AgentQuery, FleetView, Tally};
use crate::service::groups::{GroupInput, GroupUpdate, GroupView};
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

/// Agents on one console page: a page stays small however large the fleet.
const AGENTS_PER_PAGE: i64 = 50;

#[derive(Template, WebTemplate)]
#[template(path = "agents.html")]
pub struct AgentsPage {
    pub c: Chrome,
    pub agents: Vec<AgentRow>,
    pub groups: Vec<Opt>,
    pub statuses: Vec<Opt>,
    pub approvals: Vec<Opt>,
    pub modes: Vec<Opt>,
    pub sorts: Vec<Opt>,
    pub descending: bool,
    pub version: String,
    pub label: String,
    pub search: String,
    pub pager: Pager,
    pub error: String,
}

#[derive(Debug, Clone)]
pub struct DiedRow {
    pub app_name: String,
    pub address: String,
    pub hostname: String,
    pub last_seen: String,
}

/// One table of the fleet page: agents by a value (a version, a mode).
#[derive(Debug, Clone)]
pub struct TallyTable {
    pub title: String,
    pub id: &'static str,
    /// The agents page's filter a value links to; empty for no link.
    pub param: &'static str,
    pub rows: Vec<Tally>,
}

#[derive(Template, WebTemplate)]
#[template(path = "fleet.html")]
pub struct FleetPage {
    pub c: Chrome,
    pub fleet: FleetView,
    pub tables: Vec<TallyTable>,
    pub died: Vec<DiedRow>,
    /// More agents died in the last hour than are listed.
    pub more_died: bool,
}

async fn list(state: web::Data<AppState>, user: ConsoleUser) -> PageResult<GroupsPage> {
    let groups = service::groups::all(&state, &user.actor).await?;
    let fleet = service::fleet::summary(&state, &user.actor).await?;
    Ok(GroupsPage {
        groups: groups
            .into_iter()
            .map(|g| {
                let counts = fleet
                    .groups
                    .iter()
                    .find(|f| f.app_name == g.app_name)
                    .map(|f| f.agents.clone())
                    .unwrap_or_default();
                // Heartbeating, drained or not, as before drains existed.
                let live = counts.live + counts.drained;
                let total = counts.total;
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

/// The filters of the agents page, kept in its links.
const AGENT_FILTERS: &[&str] = &[
    "group_id", "status", "approval", "mode", "version", "label", "q", "sort", "order",
];

async fn agents(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<AgentsPage> {
    let q = Fields::of_query(&req);
    let groups = service::groups::all(&state, &user.actor).await?;
    let query = q.number("offset", "offset").and_then(|offset| {
        Ok(AgentQuery {
            group_id: q.number("group_id", "group_id")?,
            status: q.get("status").map(str::to_owned),
            approval: q.get("approval").map(str::to_owned),
            mode: q.get("mode").map(str::to_owned),
            version: q.get("version").map(str::to_owned),
            label: q.get("label").map(str::to_owned),
            q: q.get("q").map(str::to_owned),
            sort: q.get("sort").map(str::to_owned),
            order: q.get("order").map(str::to_owned),
            limit: Some(AGENTS_PER_PAGE),
            offset,
            ..AgentQuery::default()
        })
    });
    let result = match query {
        Ok(query) => service::fleet::list(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let addresses: Vec<String> = paged.items.iter().map(|a| a.address.clone()).collect();
    let running = service::runs::running_on(&state, &user.actor, addresses).await?;
    let names = service::runs::job_names(&state, &running).await?;
    let c = user.page("agents");
    let chosen = |name: &str| q.text(name);
    let options = |name: &str, values: &[(&str, &str)]| -> Vec<Opt> {
        let picked = chosen(name);
        values
            .iter()
            .map(|(value, label)| Opt::new(*value, *label).picked(*value == picked))
            .collect()
    };
    let statuses = options(
        "status",
        &[
            ("live", c.t("agents.live")),
            ("drained", c.t("agents.drained")),
            ("dead", c.t("agents.dead")),
        ],
    );
    let approvals = options(
        "approval",
        &[
            ("approved", c.t("agents.approved")),
            ("pending", c.t("agents.pending")),
            ("revoked", c.t("agents.revoked")),
        ],
    );
    let modes = options(
        "mode",
        &[("push", "push"), ("connect", "connect"), ("auto", "auto")],
    );
    let sorts = options(
        "sort",
        &[
            ("group", c.t("field.app_name")),
            ("address", c.t("field.address")),
            ("hostname", c.t("agents.host")),
            ("version", c.t("agents.version")),
            ("last_seen", c.t("agents.last_heartbeat")),
            ("registered", c.t("agents.registered")),
        ],
    );
    let chosen_group = chosen("group_id");
    let base = q.link_keeping("/console/agents", AGENT_FILTERS);
    Ok(AgentsPage {
        groups: group_options(&groups, &chosen_group),
        statuses,
        approvals,
        modes,
        sorts,
        descending: chosen("order") == "desc",
        version: chosen("version"),
        label: chosen("label"),
        search: chosen("q"),
        pager: Pager::of(&base, &paged),
        error,
        agents: paged
            .items
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
        c,
    })
}

/// The fleet at a glance: counts by status and group, versions and modes, recent deaths.
async fn fleet(state: web::Data<AppState>, user: ConsoleUser) -> PageResult<FleetPage> {
    let fleet = service::fleet::summary(&state, &user.actor).await?;
    let c = user.page("fleet");
    let table = |key: &'static str, id, param, rows: &[Tally]| TallyTable {
        title: c.t(key).to_owned(),
        id,
        param,
        rows: rows.to_vec(),
    };
    let tables = vec![
        table(
            "fleet.versions",
            "fleet-versions",
            "version",
            &fleet.versions,
        ),
        table("fleet.modes", "fleet-modes", "mode", &fleet.modes),
        table(
            "fleet.limits_modes",
            "fleet-limits",
            "",
            &fleet.limits_modes,
        ),
    ];
    Ok(FleetPage {
        tables,
        more_died: fleet.died_last_hour > i64::try_from(fleet.died.len()).unwrap_or(i64::MAX),
        died: fleet
            .died
            .iter()
            .map(|d| DiedRow {
                app_name: d.app_name.clone(),
                address: d.address.clone(),
                hostname: d.hostname.clone(),
                last_seen: when(Some(d.last_seen_ms)),
            })
            .collect(),
        fleet,
        c,
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
        .route("/fleet", web::get().to(fleet))
        .route("/agents/{id}/approve", web::post().to(approve))
        .route("/agents/{id}/revoke", web::post().to(revoke))
        .route("/agents/{id}/drain", web::post().to(drain))
        .route("/agents/{id}/undrain", web::post().to(undrain))
        .route("/agents/{id}/forget", web::post().to(forget));
}
