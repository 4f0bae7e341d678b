//! Jobs: the list with filters, the form (create, edit, copy) with its live cron preview, a
//! job's page (settings, trigger once, enable/disable, delete, recent runs), and script
//! versions with a diff against the current one and roll back.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use askama_web::WebTemplate;
use chrono::TimeZone;
use serde::Serialize;

use super::forms::{ConsoleUser, CsrfForm, Fields, belongs_in_form, listed};
use super::views::{Chrome, FormState, Opt, Pager, RunRow, when};
use super::{PageResult, render, see_other_with};
use crate::auth::rbac::Actor;
use crate::db::Page;
use crate::domain::job::{AlertInput, HandlerInput, JobInput, Limits, RetryInput, ScheduleInput};
use crate::domain::policy::{BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire};
use crate::domain::routing::Routing;
use crate::domain::schedule::ScheduleType;
use crate::error::Error;
use crate::service;
use crate::service::groups::GroupView;
use crate::service::jobs::{CronPreviewRequest, JobQuery, JobView};
use crate::service::runs::{RunQuery, TriggerRequest};
use crate::state::AppState;

/// Every field the form shows an error beside.
const FORM_FIELDS: &[&str] = &[
    "group_id",
    "name",
    "description",
    "schedule.type",
    "schedule.expr",
    "schedule.interval_s",
    "schedule.at_ms",
    "schedule.timezone",
    "handler.command",
    "handler.interpreter",
    "handler.source",
    "handler.note",
    "handler.name",
    "params",
    "timeout_s",
    "retry.count",
    "retry.backoff_s",
    "children",
    "limits.cpu",
    "limits.memory_mb",
    "limits.pids",
    "alert.channels",
];

#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: i64,
    pub name: String,
    pub group: String,
    pub schedule: String,
    pub handler: String,
    pub next_fire: String,
    pub enabled: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "jobs.html")]
pub struct JobsPage {
    pub c: Chrome,
    pub q: String,
    pub enabled: String,
    pub groups: Vec<Opt>,
    pub schedule_types: Vec<Opt>,
    pub jobs: Vec<JobRow>,
    pub pager: Pager,
    pub error: String,
}

#[derive(Template)]
#[template(path = "job_form.html")]
pub struct JobFormPage {
    pub c: Chrome,
    pub heading: String,
    pub action: String,
    pub cancel: String,
    pub f: FormState,
    pub groups: Vec<Opt>,
    pub schedule_types: Vec<Opt>,
    pub handler_types: Vec<Opt>,
    pub interpreters: Vec<Opt>,
    pub routings: Vec<Opt>,
    pub concurrencies: Vec<Opt>,
    pub blocks: Vec<Opt>,
    pub misfires: Vec<Opt>,
    pub channels: Vec<Opt>,
    pub timezones: Vec<&'static str>,
    pub preview: Vec<String>,
    pub preview_error: String,
}

#[derive(Debug, Clone)]
pub struct VersionRow {
    pub version: i32,
    pub interpreter: String,
    pub note: String,
    pub by: String,
    pub when: String,
    pub current: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "job.html")]
pub struct JobPage {
    pub c: Chrome,
    pub job: JobView,
    pub group: String,
    pub schedule: String,
    pub next_fire: String,
    pub children: String,
    pub can_edit: bool,
    pub agents: Vec<Opt>,
    pub versions: Vec<VersionRow>,
    pub runs: Vec<RunRow>,
}

#[derive(Debug, Clone)]
pub struct DiffLine {
    pub kind: &'static str,
    pub sign: &'static str,
    pub text: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "script_version.html")]
pub struct ScriptVersionPage {
    pub c: Chrome,
    pub job_id: i64,
    pub job_name: String,
    pub version: i32,
    pub current: i32,
    pub interpreter: String,
    pub by: String,
    pub when: String,
    pub note: String,
    pub source: String,
    /// The version the diff goes to (the current one unless another was chosen).
    pub against: i32,
    pub others: Vec<Opt>,
    pub diff: Vec<DiffLine>,
    pub can_rollback: bool,
}

fn schedule_text(job: &JobView) -> String {
    let s = &job.schedule;
    match s.kind.as_str() {
        "cron" => format!("cron {} ({})", s.expr.as_deref().unwrap_or(""), s.timezone),
        "fixed_rate" => format!("every {} s", s.interval_s.unwrap_or(0)),
        "once" => format!("once at {} UTC", when(s.at_ms)),
        _ => "none (API / console only)".into(),
    }
}

async fn all_groups(state: &AppState, actor: &Actor) -> Result<Vec<GroupView>, Error> {
    Ok(service::groups::list(
        state,
        actor,
        Page {
            limit: Page::MAX_LIMIT,
            offset: 0,
        },
    )
    .await?
    .items)
}

fn group_name(groups: &[GroupView], id: i64) -> String {
    groups.iter().find(|g| g.id == id).map_or_else(
        || format!("#{id}"),
        |g| format!("{} ({})", g.title, g.app_name),
    )
}

fn enum_opts<T: Copy + std::fmt::Display>(all: &[T]) -> Vec<Opt> {
    all.iter()
        .map(|v| Opt::new(v.to_string(), v.to_string()))
        .collect()
}

async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<JobsPage> {
    let q = Fields::of_query(&req);
    let groups = all_groups(&state, &user.actor).await?;
    let query = (|| -> Result<JobQuery, Error> {
        Ok(JobQuery {
            group_id: q.number("group_id", "group_id")?,
            enabled: match q.get("enabled") {
                None => None,
                Some("true") => Some(true),
                Some("false") => Some(false),
                Some(other) => {
                    return Err(Error::invalid(
                        "enabled",
                        format!("`{other}` is not true or false"),
                    ));
                }
            },
            schedule_type: q.get("schedule_type").map(str::to_owned),
            q: q.get("q").map(str::to_owned),
            limit: Some(50),
            offset: q.number("offset", "offset")?,
        })
    })();
    let result = match query {
        Ok(query) => service::jobs::list(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let base = q.link_keeping(
        "/console/jobs",
        &["q", "group_id", "enabled", "schedule_type"],
    );
    let chosen_group = q.text("group_id");
    let chosen_type = q.text("schedule_type");
    Ok(JobsPage {
        q: q.text("q"),
        enabled: q.text("enabled"),
        groups: groups
            .iter()
            .map(|g| {
                Opt::new(g.id.to_string(), format!("{} ({})", g.title, g.app_name))
                    .picked(g.id.to_string() == chosen_group)
            })
            .collect(),
        schedule_types: ScheduleType::ALL
            .iter()
            .map(|t| Opt::new(t.as_str(), t.as_str()).picked(t.as_str() == chosen_type))
            .collect(),
        pager: Pager::new(
            &base,
            paged.total,
            paged.limit,
            paged.offset,
            paged.items.len(),
        ),
        jobs: paged
            .items
            .iter()
            .map(|j| JobRow {
                id: j.id,
                name: j.name.clone(),
                group: group_name(&groups, j.group_id),
                schedule: schedule_text(j),
                handler: j.handler.kind.to_string(),
                next_fire: if j.enabled {
                    when(j.next_fire_ms)
                } else {
                    "—".into()
                },
                enabled: j.enabled,
            })
            .collect(),
        error,
        c: user.page("jobs"),
    })
}

/// The form's values for an existing job (edit) or a copy of it.
fn form_of(job: &JobView) -> FormState {
    let tz: chrono_tz::Tz = job.schedule.timezone.parse().unwrap_or(chrono_tz::UTC);
    let at = job
        .schedule
        .at_ms
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default();
    let opt = |v: Option<String>| v.unwrap_or_default();
    let mut pairs = vec![
        ("group_id", job.group_id.to_string()),
        ("name", job.name.clone()),
        ("description", job.description.clone()),
        ("enabled", job.enabled.to_string()),
        ("schedule.type", job.schedule.kind.to_string()),
        ("schedule.expr", opt(job.schedule.expr.clone())),
        (
            "schedule.interval_s",
            job.schedule
                .interval_s
                .map(|v| v.to_string())
                .unwrap_or_default(),
        ),
        ("schedule.at", at),
        ("schedule.timezone", job.schedule.timezone.clone()),
        ("handler.type", job.handler.kind.to_string()),
        ("handler.command", opt(job.handler.command.clone())),
        ("handler.source", opt(job.handler.source.clone())),
        (
            "handler.interpreter",
            job.handler
                .interpreter
                .unwrap_or(Interpreter::Bash)
                .to_string(),
        ),
        ("handler.name", opt(job.handler.name.clone())),
        ("params", job.params.clone()),
        ("routing", job.routing.to_string()),
        ("concurrency", job.concurrency.to_string()),
        ("block_strategy", job.block_strategy.to_string()),
        ("misfire", job.misfire.to_string()),
        ("timeout_s", job.timeout_s.to_string()),
        ("retry.count", job.retry.count.to_string()),
        ("retry.backoff_s", job.retry.backoff_s.to_string()),
        (
            "children",
            job.children
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "limits.cpu",
            job.limits.cpu.map(|v| v.to_string()).unwrap_or_default(),
        ),
        (
            "limits.memory_mb",
            job.limits
                .memory_mb
                .map(|v| v.to_string())
                .unwrap_or_default(),
        ),
        (
            "limits.pids",
            job.limits.pids.map(|v| v.to_string()).unwrap_or_default(),
        ),
        ("alert.on_failure", job.alert.on_failure.to_string()),
        ("alert.on_timeout", job.alert.on_timeout.to_string()),
        ("alert.on_lost", job.alert.on_lost.to_string()),
        ("alert.on_no_agent", job.alert.on_no_agent.to_string()),
    ];
    pairs.extend(
        job.alert
            .channels
            .iter()
            .map(|id| ("alert.channels", id.to_string())),
    );
    FormState::from_pairs(pairs)
}

fn new_form(group_id: Option<i64>) -> FormState {
    FormState::from_pairs([
        (
            "group_id",
            group_id.map(|g| g.to_string()).unwrap_or_default(),
        ),
        ("enabled", "true".into()),
        ("schedule.type", "cron".into()),
        ("schedule.expr", "0 0/5 * * * ?".into()),
        ("schedule.timezone", "UTC".into()),
        ("handler.type", "shell".into()),
        ("handler.interpreter", "bash".into()),
        ("routing", "first".into()),
        ("concurrency", "allow".into()),
        ("block_strategy", "serial".into()),
        ("misfire", "do_nothing".into()),
        ("timeout_s", "0".into()),
        ("retry.count", "0".into()),
        ("retry.backoff_s", "10".into()),
        ("alert.on_failure", "true".into()),
    ])
}

/// Reads the form into the API's `JobInput`, so both surfaces pass the same validation.
fn input_of(f: &Fields) -> Result<JobInput, Error> {
    let kind = f.choice("schedule.type")?.unwrap_or(ScheduleType::None);
    let timezone = f.get("schedule.timezone").map(str::to_owned);
    let at_ms = if kind == ScheduleType::Once {
        let text = f
            .get("schedule.at")
            .ok_or_else(|| Error::invalid("schedule.at_ms", "is required for once"))?;
        Some(local_to_ms(
            text,
            timezone.as_deref().unwrap_or("UTC"),
            "schedule.at_ms",
        )?)
    } else {
        None
    };
    let handler = f.choice("handler.type")?.unwrap_or(HandlerType::Shell);
    let parse =
        |name: &str| -> Result<Option<String>, Error> { Ok(f.get(name).map(str::to_owned)) };
    Ok(JobInput {
        group_id: f
            .number("group_id", "group_id")?
            .ok_or_else(|| Error::invalid("group_id", "choose an executor group"))?,
        name: f.text("name"),
        description: Some(f.raw("description").to_owned()),
        schedule: ScheduleInput {
            kind,
            expr: (kind == ScheduleType::Cron).then(|| f.text("schedule.expr")),
            interval_s: if kind == ScheduleType::FixedRate {
                Some(
                    f.number("schedule.interval_s", "schedule.interval_s")?
                        .ok_or_else(|| {
                            Error::invalid("schedule.interval_s", "is required for fixed_rate")
                        })?,
                )
            } else {
                None
            },
            at_ms,
            timezone,
        },
        handler: HandlerInput {
            kind: handler,
            command: (handler == HandlerType::Shell).then(|| f.raw("handler.command").to_owned()),
            source: (handler == HandlerType::Script)
                .then(|| f.raw("handler.source").replace("\r\n", "\n")),
            interpreter: if handler == HandlerType::Script {
                parse("handler.interpreter")?
            } else {
                None
            },
            name: (handler == HandlerType::Bean).then(|| f.text("handler.name")),
            note: if handler == HandlerType::Script {
                parse("handler.note")?
            } else {
                None
            },
        },
        params: Some(f.raw("params").to_owned()),
        routing: f.choice("routing")?,
        enabled: Some(f.flag("enabled")),
        timeout_s: f.number("timeout_s", "timeout_s")?,
        retry: Some(RetryInput {
            count: f.number("retry.count", "retry.count")?,
            backoff_s: f.number("retry.backoff_s", "retry.backoff_s")?,
        }),
        limits: Some(Limits {
            cpu: f.number("limits.cpu", "limits.cpu")?,
            memory_mb: f.number("limits.memory_mb", "limits.memory_mb")?,
            pids: f.number("limits.pids", "limits.pids")?,
        }),
        misfire: f.choice("misfire")?,
        concurrency: f.choice("concurrency")?,
        block_strategy: f.choice("block_strategy")?,
        children: Some(f.ids("children", "children")?),
        alert: Some(AlertInput {
            on_failure: Some(f.flag("alert.on_failure")),
            on_timeout: Some(f.flag("alert.on_timeout")),
            on_lost: Some(f.flag("alert.on_lost")),
            on_no_agent: Some(f.flag("alert.on_no_agent")),
            channels: Some(f.ids("alert.channels", "alert.channels")?),
        }),
    })
}

/// A `datetime-local` value in the job's time zone, as UTC milliseconds.
fn local_to_ms(text: &str, tz_name: &str, field: &str) -> Result<i64, Error> {
    let tz: chrono_tz::Tz = tz_name.parse().map_err(|_| {
        Error::invalid(
            "schedule.timezone",
            format!("unknown time zone `{tz_name}`"),
        )
    })?;
    let naive = [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|fmt| chrono::NaiveDateTime::parse_from_str(text, fmt).ok())
    .ok_or_else(|| {
        Error::invalid(
            field,
            format!("`{text}` is not a date and time (YYYY-MM-DD HH:MM)"),
        )
    })?;
    tz.from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| {
            Error::invalid(
                field,
                format!("{text} does not exist in {tz_name} (a daylight-saving gap)"),
            )
        })
}

fn preview_of(state: &AppState, f: &FormState) -> (Vec<String>, String) {
    if f.v("schedule.type") != "cron" || f.v("schedule.expr").trim().is_empty() {
        return (Vec::new(), String::new());
    }
    let request = CronPreviewRequest {
        expr: f.v("schedule.expr").to_owned(),
        timezone: Some(f.v("schedule.timezone").to_owned()).filter(|t| !t.trim().is_empty()),
        count: Some(5),
    };
    match service::jobs::cron_preview(state.clock.now_ms(), &request) {
        Ok(p) => (p.next_local, String::new()),
        Err(e) => (Vec::new(), e.public_message()),
    }
}

async fn form_page(
    state: &AppState,
    user: &ConsoleUser,
    heading: String,
    action: String,
    cancel: String,
    f: FormState,
) -> Result<JobFormPage, Error> {
    let writable: Vec<GroupView> = all_groups(state, &user.actor)
        .await?
        .into_iter()
        .filter(|g| user.actor.write_group(g.id).is_ok())
        .collect();
    let (preview, preview_error) = preview_of(state, &f);
    Ok(JobFormPage {
        heading,
        action,
        cancel,
        groups: writable
            .iter()
            .map(|g| Opt::new(g.id.to_string(), format!("{} ({})", g.title, g.app_name)))
            .collect(),
        schedule_types: enum_opts(ScheduleType::ALL),
        handler_types: enum_opts(HandlerType::ALL),
        interpreters: enum_opts(Interpreter::ALL),
        routings: enum_opts(Routing::ALL),
        concurrencies: enum_opts(Concurrency::ALL),
        blocks: enum_opts(BlockStrategy::ALL),
        misfires: enum_opts(Misfire::ALL),
        channels: super::alert_channel_opts(state, &user.actor).await?,
        timezones: chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect(),
        preview,
        preview_error,
        f,
        c: user.page("jobs"),
    })
}

async fn new(req: HttpRequest, state: web::Data<AppState>, user: ConsoleUser) -> PageResult {
    let q = Fields::of_query(&req);
    let (heading, f) = match q.number::<i64>("copy", "copy")? {
        Some(id) => {
            let job = service::jobs::get(&state, &user.actor, id).await?;
            let mut f = form_of(&job);
            f.set("name", format!("{} copy", job.name));
            (format!("{} {}", user.chrome.t("jobs.copy_of"), job.name), f)
        }
        None => (
            user.chrome.t("jobs.new").to_owned(),
            new_form(q.number("group_id", "group_id")?),
        ),
    };
    let page = form_page(
        &state,
        &user,
        heading,
        "/console/jobs".into(),
        "/console/jobs".into(),
        f,
    )
    .await?;
    render(StatusCode::OK, &page)
}

/// The form again with the error beside its field and everything as typed.
async fn form_failed(
    state: &AppState,
    user: &ConsoleUser,
    fields: &Fields,
    err: Error,
    heading: String,
    action: String,
    cancel: String,
) -> PageResult {
    let status = err.code().status();
    let mut f = FormState::from_pairs(fields.0.iter().filter(|(k, _)| k != "csrf").cloned());
    f.fail(&err, FORM_FIELDS);
    let page = form_page(state, user, heading, action, cancel, f).await?;
    render(status, &page)
}

async fn create(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let CsrfForm { user, fields } = form;
    let result = match input_of(&fields).and_then(JobInput::validate) {
        Ok(spec) => service::jobs::create(&state, &user.actor, spec).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(job) => Ok(see_other_with(
            &format!("/console/jobs/{}", job.id),
            user.chrome.t("flash.saved"),
        )),
        Err(e) if belongs_in_form(&e) => {
            let heading = user.chrome.t("jobs.new").to_owned();
            form_failed(
                &state,
                &user,
                &fields,
                e,
                heading,
                "/console/jobs".into(),
                "/console/jobs".into(),
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

async fn edit(state: web::Data<AppState>, user: ConsoleUser, id: web::Path<i64>) -> PageResult {
    let job = service::jobs::get(&state, &user.actor, *id).await?;
    // Viewers see the settings on the job's page; the edit form is for those who may save it.
    user.actor.write_group(job.group_id)?;
    let page = form_page(
        &state,
        &user,
        format!("{} {}", user.chrome.t("action.edit"), job.name),
        format!("/console/jobs/{}", job.id),
        format!("/console/jobs/{}", job.id),
        form_of(&job),
    )
    .await?;
    render(StatusCode::OK, &page)
}

async fn update(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    let CsrfForm { user, fields } = form;
    let id = id.into_inner();
    let result = match input_of(&fields).and_then(JobInput::validate) {
        Ok(spec) => service::jobs::update(&state, &user.actor, id, spec).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(job) => Ok(see_other_with(
            &format!("/console/jobs/{}", job.id),
            user.chrome.t("flash.saved"),
        )),
        Err(e) if belongs_in_form(&e) => {
            let heading = format!("{} #{id}", user.chrome.t("action.edit"));
            let path = format!("/console/jobs/{id}");
            form_failed(&state, &user, &fields, e, heading, path.clone(), path).await
        }
        Err(e) => Err(e.into()),
    }
}

async fn show(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<i64>,
) -> PageResult<JobPage> {
    let job = service::jobs::get(&state, &user.actor, *id).await?;
    let groups = all_groups(&state, &user.actor).await?;
    let app_name = groups
        .iter()
        .find(|g| g.id == job.group_id)
        .map(|g| g.app_name.clone())
        .unwrap_or_default();
    let agents = service::agents::list(&state, &user.actor)
        .await?
        .into_iter()
        .filter(|a| a.live && a.app_name == app_name)
        .map(|a| Opt::new(a.address.clone(), a.address))
        .collect();
    let versions = if job.handler.kind == HandlerType::Script {
        service::jobs::script_versions(&state, &user.actor, job.id)
            .await?
            .into_iter()
            .map(|v| VersionRow {
                version: v.version,
                interpreter: v.interpreter,
                note: v.note,
                by: v.created_by,
                when: when(Some(v.created_ms)),
                current: v.current,
            })
            .collect()
    } else {
        Vec::new()
    };
    let c = user.page("jobs");
    let runs = service::runs::list(
        &state,
        &user.actor,
        RunQuery {
            job_id: Some(job.id),
            limit: Some(20),
            ..RunQuery::default()
        },
    )
    .await?
    .items
    .iter()
    .map(|r| RunRow::new(&c, r, &job.name))
    .collect();
    Ok(JobPage {
        group: group_name(&groups, job.group_id),
        schedule: schedule_text(&job),
        next_fire: if job.enabled {
            when(job.next_fire_ms)
        } else {
            "—".into()
        },
        children: job
            .children
            .iter()
            .map(|c| format!("#{c}"))
            .collect::<Vec<_>>()
            .join(", "),
        can_edit: user.actor.write_group(job.group_id).is_ok(),
        agents,
        versions,
        runs,
        job,
        c,
    })
}

async fn set_enabled(state: &AppState, form: CsrfForm, id: i64, enabled: bool) -> PageResult {
    service::jobs::set_enabled(state, &form.user.actor, id, enabled).await?;
    let key = if enabled {
        "flash.enabled"
    } else {
        "flash.disabled"
    };
    Ok(see_other_with(
        &format!("/console/jobs/{id}"),
        form.user.chrome.t(key),
    ))
}

async fn enable(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    set_enabled(&state, form, *id, true).await
}

async fn disable(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    set_enabled(&state, form, *id, false).await
}

async fn delete(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    service::jobs::delete(&state, &form.user.actor, *id).await?;
    Ok(see_other_with(
        "/console/jobs",
        form.user.chrome.t("flash.deleted"),
    ))
}

async fn trigger(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    let request = TriggerRequest {
        params: Some(form.fields.raw("params").to_owned()),
        address: form.fields.get("address").map(str::to_owned),
    };
    let run = service::runs::trigger(&state, &form.user.actor, *id, request).await?;
    Ok(see_other_with(
        &format!("/console/runs/{}", run.id),
        form.user.chrome.t("flash.triggered"),
    ))
}

/// A version's source and its line diff against the current version.
async fn version(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
    path: web::Path<(i64, i32)>,
) -> PageResult<ScriptVersionPage> {
    let (job_id, version) = path.into_inner();
    let job = service::jobs::get(&state, &user.actor, job_id).await?;
    let old = service::jobs::script_version(&state, &user.actor, job_id, version).await?;
    let against = Fields::of_query(&req)
        .number::<i32>("against", "against")?
        .unwrap_or(job.handler.script_version);
    let target_source = service::jobs::script_version(&state, &user.actor, job_id, against)
        .await?
        .source
        .unwrap_or_default();
    let others = service::jobs::script_versions(&state, &user.actor, job_id)
        .await?
        .into_iter()
        .map(|v| {
            Opt::new(v.version.to_string(), format!("v{}", v.version)).picked(v.version == against)
        })
        .collect();
    let old_source = old.source.clone().unwrap_or_default();
    let diff = similar::TextDiff::from_lines(&old_source, &target_source)
        .iter_all_changes()
        .map(|change| {
            let (kind, sign) = match change.tag() {
                similar::ChangeTag::Delete => ("del", "-"),
                similar::ChangeTag::Insert => ("add", "+"),
                similar::ChangeTag::Equal => ("same", " "),
            };
            DiffLine {
                kind,
                sign,
                text: change.value().trim_end_matches('\n').to_owned(),
            }
        })
        .collect();
    Ok(ScriptVersionPage {
        job_id,
        job_name: job.name.clone(),
        version,
        current: job.handler.script_version,
        interpreter: old.interpreter,
        by: old.created_by,
        when: when(Some(old.created_ms)),
        note: old.note,
        source: old_source,
        against,
        others,
        diff,
        can_rollback: !old.current && user.actor.write_group(job.group_id).is_ok(),
        c: user.page("jobs"),
    })
}

async fn rollback(
    state: web::Data<AppState>,
    form: CsrfForm,
    path: web::Path<(i64, i32)>,
) -> PageResult {
    let (job_id, version) = path.into_inner();
    service::jobs::rollback_script(&state, &form.user.actor, job_id, version).await?;
    Ok(see_other_with(
        &format!("/console/jobs/{job_id}"),
        form.user.chrome.t("flash.rolled_back"),
    ))
}

#[derive(Serialize)]
struct PreviewAnswer {
    next: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The cron helper's JSON: the next five fire times in the job's zone, or why the expression is wrong.
async fn cron_preview(
    req: HttpRequest,
    state: web::Data<AppState>,
    _user: ConsoleUser,
) -> HttpResponse {
    let q = Fields::of_query(&req);
    let request = CronPreviewRequest {
        expr: q.raw("expr").to_owned(),
        timezone: q.get("timezone").map(str::to_owned),
        count: Some(5),
    };
    let answer = match service::jobs::cron_preview(state.clock.now_ms(), &request) {
        Ok(p) => PreviewAnswer {
            next: p.next_local,
            error: None,
        },
        Err(e) => PreviewAnswer {
            next: Vec::new(),
            error: Some(e.public_message()),
        },
    };
    HttpResponse::Ok().json(answer)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/jobs", web::get().to(list))
        .route("/jobs", web::post().to(create))
        .route("/jobs/new", web::get().to(new))
        .route("/jobs/{id}", web::get().to(show))
        .route("/jobs/{id}", web::post().to(update))
        .route("/jobs/{id}/edit", web::get().to(edit))
        .route("/jobs/{id}/enable", web::post().to(enable))
        .route("/jobs/{id}/disable", web::post().to(disable))
        .route("/jobs/{id}/delete", web::post().to(delete))
        .route("/jobs/{id}/trigger", web::post().to(trigger))
        .route("/jobs/{id}/versions/{version}", web::get().to(version))
        .route(
            "/jobs/{id}/versions/{version}/rollback",
            web::post().to(rollback),
        )
        .route("/cron-preview", web::get().to(cron_preview));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_times_are_read_in_the_jobs_zone() {
        let ms = local_to_ms("2026-03-29T02:30", "Europe/Berlin", "f");
        assert!(
            ms.is_err(),
            "02:30 does not exist on the spring-forward night"
        );
        let utc = local_to_ms("2026-01-01T00:00:00", "UTC", "f").unwrap();
        assert_eq!(utc, 1_767_225_600_000);
        let tokyo = local_to_ms("2026-01-01 09:00", "Asia/Tokyo", "f").unwrap();
        assert_eq!(tokyo, utc);
        assert_eq!(
            local_to_ms("soon", "UTC", "f").unwrap_err().field(),
            Some("f")
        );
    }

    #[test]
    fn a_form_becomes_the_apis_input() {
        let f = Fields::parse(
            b"group_id=3&name=nightly&schedule.type=cron&schedule.expr=0+0+2+*+*+%3F&schedule.interval_s=&handler.type=shell&handler.command=echo+hi&handler.source=&routing=round_robin&children=4%2C5&enabled=true&retry.count=2",
        );
        let input = input_of(&f).unwrap();
        assert_eq!(input.group_id, 3);
        assert_eq!(input.schedule.expr.as_deref(), Some("0 0 2 * * ?"));
        assert_eq!(
            input.schedule.interval_s, None,
            "fields of other types are not sent on"
        );
        assert_eq!(input.handler.source, None);
        assert_eq!(input.children, Some(vec![4, 5]));
        let spec = input.validate().unwrap();
        assert_eq!(spec.retry_count, 2);
        let bad = Fields::parse(b"group_id=3&name=x&schedule.type=fixed_rate&schedule.interval_s=ten&handler.type=shell");
        assert_eq!(
            input_of(&bad).unwrap_err().field(),
            Some("schedule.interval_s")
        );
    }
}
