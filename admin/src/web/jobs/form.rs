//! The job form: create, edit and copy, with the cron helper's preview. `FIELDS` is its one
//! description: each input's default on a new job, its value for an existing job, how it is
//! read into the API's `JobInput`, and whether its errors show beside it.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::TimeZone;
use serde::Serialize;

use super::group_label;
use crate::domain::ids::{GroupId, JobId};
use crate::domain::job::{AlertInput, HandlerInput, JobInput, JobSpec, ScheduleInput};
use crate::domain::policy::{BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire};
use crate::domain::routing::Routing;
use crate::domain::schedule::ScheduleType;
use crate::error::Error;
use crate::service;
use crate::service::jobs::{CronPreviewRequest, JobView};
use crate::state::AppState;
use crate::web::forms::{
    ConsoleUser, CsrfForm, Fields, heading_and_action, refilled, save_or_show_again,
};
use crate::web::views::{Chrome, FormState, Opt};
use crate::web::{PageResult, render, see_other_with};
use jobfleet_agent::protocol::{DEFAULT_HTTP_STATUSES, HTTP_METHODS};

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
    pub http_methods: &'static [&'static str],
    pub routings: Vec<Opt>,
    pub concurrencies: Vec<Opt>,
    pub blocks: Vec<Opt>,
    pub misfires: Vec<Opt>,
    pub channels: Vec<Opt>,
    pub timezones: Vec<&'static str>,
    pub preview: Vec<String>,
    pub preview_error: String,
}

/// One input of the job form.
struct Field {
    /// Its name in the form.
    name: &'static str,
    /// The field errors about it name (the API's), when they are shown beside it; other errors
    /// go above the form.
    error: Option<&'static str>,
    /// Its value on a new job's form ("" = empty).
    default: &'static str,
    /// Its values on the form of an existing job (edit, copy).
    show: fn(&JobView) -> Vec<String>,
    /// Reads it into the API's input. Fields are read in table order, so the types read first
    /// decide which of the later fields apply, and the first bad field is the one reported.
    read: fn(&Fields, &mut JobInput) -> Result<(), Error>,
}

fn one(value: impl ToString) -> Vec<String> {
    vec![value.to_string()]
}

fn one_or_empty(value: Option<impl ToString>) -> Vec<String> {
    one(value.map(|v| v.to_string()).unwrap_or_default())
}

fn is_http(input: &JobInput) -> bool {
    input.handler.kind == HandlerType::Http
}

fn alert(input: &mut JobInput) -> &mut AlertInput {
    input.alert.get_or_insert(AlertInput {
        on_failure: None,
        on_timeout: None,
        on_lost: None,
        on_no_agent: None,
        channels: None,
    })
}

/// Only fields of the chosen schedule and handler types are sent on, so stale values of
/// another type in the form never reach validation.
const FIELDS: &[Field] = &[
    Field {
        name: "schedule.type",
        error: None,
        default: "cron",
        show: |j| one(j.schedule.kind),
        read: |f, i| {
            i.schedule.kind = f.choice("schedule.type")?.unwrap_or(ScheduleType::None);
            Ok(())
        },
    },
    Field {
        name: "schedule.timezone",
        error: Some("schedule.timezone"),
        default: "UTC",
        show: |j| one(&j.schedule.timezone),
        read: |f, i| {
            i.schedule.timezone = f.get("schedule.timezone").map(str::to_owned);
            Ok(())
        },
    },
    Field {
        name: "schedule.at",
        error: Some("schedule.at_ms"),
        default: "",
        show: |j| {
            let tz: chrono_tz::Tz = j.schedule.timezone.parse().unwrap_or(chrono_tz::UTC);
            one_or_empty(
                j.schedule
                    .at_ms
                    .and_then(chrono::DateTime::from_timestamp_millis)
                    .map(|t| t.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S")),
            )
        },
        read: |f, i| {
            if i.schedule.kind == ScheduleType::Once {
                let text = f
                    .get("schedule.at")
                    .ok_or_else(|| Error::invalid("schedule.at_ms", "is required for once"))?;
                let tz = i.schedule.timezone.as_deref().unwrap_or("UTC");
                i.schedule.at_ms = Some(local_to_ms(text, tz, "schedule.at_ms")?);
            }
            Ok(())
        },
    },
    Field {
        name: "handler.type",
        error: None,
        default: "shell",
        show: |j| one(j.handler.kind),
        read: |f, i| {
            i.handler.kind = f.choice("handler.type")?.unwrap_or(HandlerType::Shell);
            Ok(())
        },
    },
    Field {
        name: "group_id",
        error: Some("group_id"),
        default: "",
        show: |j| one(j.group_id),
        read: |f, i| {
            i.group_id = f
                .number("group_id", "group_id")?
                .ok_or_else(|| Error::invalid("group_id", "choose an executor group"))?;
            Ok(())
        },
    },
    Field {
        name: "name",
        error: Some("name"),
        default: "",
        show: |j| one(&j.name),
        read: |f, i| {
            i.name = f.text("name");
            Ok(())
        },
    },
    Field {
        name: "description",
        error: Some("description"),
        default: "",
        show: |j| one(&j.description),
        read: |f, i| {
            i.description = Some(f.raw("description").to_owned());
            Ok(())
        },
    },
    Field {
        name: "schedule.expr",
        error: Some("schedule.expr"),
        default: "0 0/5 * * * ?",
        show: |j| one_or_empty(j.schedule.expr.as_ref()),
        read: |f, i| {
            i.schedule.expr =
                (i.schedule.kind == ScheduleType::Cron).then(|| f.text("schedule.expr"));
            Ok(())
        },
    },
    Field {
        name: "schedule.interval_s",
        error: Some("schedule.interval_s"),
        default: "",
        show: |j| one_or_empty(j.schedule.interval_s),
        read: |f, i| {
            if i.schedule.kind == ScheduleType::FixedRate {
                i.schedule.interval_s = Some(
                    f.number("schedule.interval_s", "schedule.interval_s")?
                        .ok_or_else(|| {
                            Error::invalid("schedule.interval_s", "is required for fixed_rate")
                        })?,
                );
            }
            Ok(())
        },
    },
    Field {
        name: "handler.command",
        error: Some("handler.command"),
        default: "",
        show: |j| one_or_empty(j.handler.command.as_ref()),
        read: |f, i| {
            i.handler.command =
                (i.handler.kind == HandlerType::Shell).then(|| f.raw("handler.command").to_owned());
            Ok(())
        },
    },
    Field {
        name: "handler.source",
        error: Some("handler.source"),
        default: "",
        show: |j| one_or_empty(j.handler.source.as_ref()),
        read: |f, i| {
            // Browsers send text areas with CRLF; scripts are stored as the agent runs them.
            i.handler.source = (i.handler.kind == HandlerType::Script)
                .then(|| f.raw("handler.source").replace("\r\n", "\n"));
            Ok(())
        },
    },
    Field {
        name: "handler.interpreter",
        error: Some("handler.interpreter"),
        default: "bash",
        show: |j| one(j.handler.interpreter.unwrap_or(Interpreter::Bash)),
        read: |f, i| {
            i.handler.interpreter = (i.handler.kind == HandlerType::Script)
                .then(|| f.get("handler.interpreter").map(str::to_owned))
                .flatten();
            Ok(())
        },
    },
    Field {
        name: "handler.name",
        error: Some("handler.name"),
        default: "",
        show: |j| one_or_empty(j.handler.name.as_ref()),
        read: |f, i| {
            i.handler.name = (i.handler.kind == HandlerType::Bean).then(|| f.text("handler.name"));
            Ok(())
        },
    },
    Field {
        // A note describes the change being saved, so an edit starts without one.
        name: "handler.note",
        error: Some("handler.note"),
        default: "",
        show: |_| Vec::new(),
        read: |f, i| {
            i.handler.note = (i.handler.kind == HandlerType::Script)
                .then(|| f.get("handler.note").map(str::to_owned))
                .flatten();
            Ok(())
        },
    },
    Field {
        name: "handler.method",
        error: Some("handler.method"),
        default: "GET",
        show: |j| one_or_empty(j.handler.http.as_ref().map(|h| &h.method)),
        read: |f, i| {
            i.handler.method = is_http(i).then(|| f.text("handler.method"));
            Ok(())
        },
    },
    Field {
        name: "handler.url",
        error: Some("handler.url"),
        default: "",
        show: |j| one_or_empty(j.handler.http.as_ref().map(|h| &h.url)),
        read: |f, i| {
            i.handler.url = is_http(i)
                .then(|| f.get("handler.url").map(str::to_owned))
                .flatten();
            Ok(())
        },
    },
    Field {
        name: "handler.headers",
        error: Some("handler.headers"),
        default: "",
        show: |j| {
            one_or_empty(j.handler.http.as_ref().map(|h| {
                h.headers
                    .iter()
                    .map(|(name, value)| format!("{name}: {value}\n"))
                    .collect::<String>()
            }))
        },
        read: |f, i| {
            i.handler.headers = match is_http(i) {
                true => Some(header_lines(f.raw("handler.headers"))?),
                false => None,
            };
            Ok(())
        },
    },
    Field {
        name: "handler.body",
        error: Some("handler.body"),
        default: "",
        show: |j| one_or_empty(j.handler.http.as_ref().and_then(|h| h.body.as_ref())),
        read: |f, i| {
            let body = f.raw("handler.body").replace("\r\n", "\n");
            i.handler.body = (is_http(i) && !body.is_empty()).then_some(body);
            Ok(())
        },
    },
    Field {
        name: "handler.timeout_ms",
        error: Some("handler.timeout_ms"),
        default: "",
        show: |j| one_or_empty(j.handler.http.as_ref().and_then(|h| h.timeout_ms)),
        read: |f, i| {
            i.handler.timeout_ms = match is_http(i) {
                true => f.number("handler.timeout_ms", "handler.timeout_ms")?,
                false => None,
            };
            Ok(())
        },
    },
    Field {
        name: "handler.expect_status",
        error: Some("handler.expect_status"),
        default: DEFAULT_HTTP_STATUSES,
        show: |j| one_or_empty(j.handler.http.as_ref().map(|h| &h.expect_status)),
        read: |f, i| {
            i.handler.expect_status = is_http(i)
                .then(|| f.get("handler.expect_status"))
                .flatten()
                .map(|text| serde_json::Value::String(text.to_owned()));
            Ok(())
        },
    },
    Field {
        name: "params",
        error: Some("params"),
        default: "",
        show: |j| one(&j.params),
        read: |f, i| {
            i.params = Some(f.raw("params").to_owned());
            Ok(())
        },
    },
    Field {
        name: "agent_labels",
        error: Some("agent_labels"),
        default: "",
        show: |j| {
            one(jobfleet_agent::protocol::labels::format_labels(
                &j.agent_labels,
            ))
        },
        read: |f, i| {
            i.agent_labels = Some(
                jobfleet_agent::protocol::labels::parse_labels(f.raw("agent_labels"))
                    .map_err(|e| Error::invalid("agent_labels", e))?,
            );
            Ok(())
        },
    },
    Field {
        name: "tags",
        error: Some("tags"),
        default: "",
        show: |j| one(j.tags.join(", ")),
        read: |f, i| {
            i.tags = Some(
                f.raw("tags")
                    .split([',', ' '])
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect(),
            );
            Ok(())
        },
    },
    Field {
        name: "start_deadline_s",
        error: Some("start_deadline_s"),
        default: "",
        show: |j| one_or_empty(j.start_deadline_s),
        read: |f, i| {
            i.start_deadline_s = f.number("start_deadline_s", "start_deadline_s")?;
            Ok(())
        },
    },
    Field {
        name: "keep_succeeded",
        error: Some("keep_succeeded"),
        default: "",
        show: |j| one_or_empty(j.keep_succeeded),
        read: |f, i| {
            i.keep_succeeded = f.number("keep_succeeded", "keep_succeeded")?;
            Ok(())
        },
    },
    Field {
        name: "keep_failed",
        error: Some("keep_failed"),
        default: "",
        show: |j| one_or_empty(j.keep_failed),
        read: |f, i| {
            i.keep_failed = f.number("keep_failed", "keep_failed")?;
            Ok(())
        },
    },
    Field {
        name: "routing",
        error: None,
        default: "first",
        show: |j| one(j.routing),
        read: |f, i| {
            i.routing = f.choice("routing")?;
            Ok(())
        },
    },
    Field {
        name: "enabled",
        error: None,
        default: "true",
        show: |j| one(j.enabled),
        read: |f, i| {
            i.enabled = Some(f.flag("enabled"));
            Ok(())
        },
    },
    Field {
        name: "timeout_s",
        error: Some("timeout_s"),
        default: "0",
        show: |j| one(j.timeout_s),
        read: |f, i| {
            i.timeout_s = f.number("timeout_s", "timeout_s")?;
            Ok(())
        },
    },
    Field {
        name: "retry.count",
        error: Some("retry.count"),
        default: "0",
        show: |j| one(j.retry.count),
        read: |f, i| {
            i.retry.get_or_insert_default().count = f.number("retry.count", "retry.count")?;
            Ok(())
        },
    },
    Field {
        name: "retry.backoff_s",
        error: Some("retry.backoff_s"),
        default: "10",
        show: |j| one(j.retry.backoff_s),
        read: |f, i| {
            i.retry.get_or_insert_default().backoff_s =
                f.number("retry.backoff_s", "retry.backoff_s")?;
            Ok(())
        },
    },
    Field {
        name: "limits.cpu",
        error: Some("limits.cpu"),
        default: "",
        show: |j| one_or_empty(j.limits.cpu),
        read: |f, i| {
            i.limits.get_or_insert_default().cpu = f.number("limits.cpu", "limits.cpu")?;
            Ok(())
        },
    },
    Field {
        name: "limits.memory_mb",
        error: Some("limits.memory_mb"),
        default: "",
        show: |j| one_or_empty(j.limits.memory_mb),
        read: |f, i| {
            i.limits.get_or_insert_default().memory_mb =
                f.number("limits.memory_mb", "limits.memory_mb")?;
            Ok(())
        },
    },
    Field {
        name: "limits.pids",
        error: Some("limits.pids"),
        default: "",
        show: |j| one_or_empty(j.limits.pids),
        read: |f, i| {
            i.limits.get_or_insert_default().pids = f.number("limits.pids", "limits.pids")?;
            Ok(())
        },
    },
    Field {
        name: "misfire",
        error: None,
        default: "do_nothing",
        show: |j| one(j.misfire),
        read: |f, i| {
            i.misfire = f.choice("misfire")?;
            Ok(())
        },
    },
    Field {
        name: "concurrency",
        error: None,
        default: "allow",
        show: |j| one(j.concurrency),
        read: |f, i| {
            i.concurrency = f.choice("concurrency")?;
            Ok(())
        },
    },
    Field {
        name: "block_strategy",
        error: None,
        default: "serial",
        show: |j| one(j.block_strategy),
        read: |f, i| {
            i.block_strategy = f.choice("block_strategy")?;
            Ok(())
        },
    },
    Field {
        name: "children",
        error: Some("children"),
        default: "",
        show: |j| {
            one(j
                .children
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "))
        },
        read: |f, i| {
            i.children = Some(f.ids("children", "children")?);
            Ok(())
        },
    },
    Field {
        name: "alert.on_failure",
        error: None,
        default: "true",
        show: |j| one(j.alert.on_failure),
        read: |f, i| {
            alert(i).on_failure = Some(f.flag("alert.on_failure"));
            Ok(())
        },
    },
    Field {
        name: "alert.on_timeout",
        error: None,
        default: "",
        show: |j| one(j.alert.on_timeout),
        read: |f, i| {
            alert(i).on_timeout = Some(f.flag("alert.on_timeout"));
            Ok(())
        },
    },
    Field {
        name: "alert.on_lost",
        error: None,
        default: "",
        show: |j| one(j.alert.on_lost),
        read: |f, i| {
            alert(i).on_lost = Some(f.flag("alert.on_lost"));
            Ok(())
        },
    },
    Field {
        name: "alert.on_no_agent",
        error: None,
        default: "",
        show: |j| one(j.alert.on_no_agent),
        read: |f, i| {
            alert(i).on_no_agent = Some(f.flag("alert.on_no_agent"));
            Ok(())
        },
    },
    Field {
        name: "alert.channels",
        error: Some("alert.channels"),
        default: "",
        show: |j| j.alert.channels.iter().map(ToString::to_string).collect(),
        read: |f, i| {
            alert(i).channels = Some(f.ids("alert.channels", "alert.channels")?);
            Ok(())
        },
    },
];

/// The fields whose errors show beside them.
fn shown_errors() -> Vec<&'static str> {
    FIELDS.iter().filter_map(|field| field.error).collect()
}

/// The form's values for an existing job (edit) or a copy of it.
fn form_of(job: &JobView) -> FormState {
    FormState::from_pairs(FIELDS.iter().flat_map(|field| {
        (field.show)(job)
            .into_iter()
            .map(move |value| (field.name, value))
    }))
}

/// A new job's form, in `group_id` when the link named one.
fn new_form(group_id: Option<GroupId>) -> FormState {
    let mut f = FormState::from_pairs(
        FIELDS
            .iter()
            .filter(|field| !field.default.is_empty())
            .map(|field| (field.name, field.default)),
    );
    if let Some(group_id) = group_id {
        f.set("group_id", group_id.to_string());
    }
    f
}

/// Reads the form into the API's `JobInput`, so both surfaces pass the same validation.
fn input_of(f: &Fields) -> Result<JobInput, Error> {
    let mut input = JobInput {
        group_id: GroupId(0),
        name: String::new(),
        description: None,
        schedule: ScheduleInput {
            kind: ScheduleType::None,
            expr: None,
            interval_s: None,
            at_ms: None,
            timezone: None,
        },
        handler: HandlerInput {
            kind: HandlerType::Shell,
            command: None,
            source: None,
            interpreter: None,
            name: None,
            note: None,
            method: None,
            url: None,
            headers: None,
            body: None,
            timeout_ms: None,
            expect_status: None,
        },
        params: None,
        routing: None,
        enabled: None,
        timeout_s: None,
        retry: None,
        limits: None,
        misfire: None,
        concurrency: None,
        block_strategy: None,
        agent_labels: None,
        tags: None,
        start_deadline_s: None,
        keep_succeeded: None,
        keep_failed: None,
        children: None,
        alert: None,
    };
    for field in FIELDS {
        (field.read)(f, &mut input)?;
    }
    Ok(input)
}

/// The headers text area: one `Name: value` per line, blank lines skipped.
fn header_lines(text: &str) -> Result<BTreeMap<String, String>, Error> {
    let mut headers = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| {
            Error::invalid(
                "handler.headers",
                format!("line {}: write a header as `Name: value`", number + 1),
            )
        })?;
        headers.insert(name.trim().to_owned(), value.trim().to_owned());
    }
    Ok(headers)
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

fn enum_opts<T: Copy + std::fmt::Display>(all: &[T]) -> Vec<Opt> {
    all.iter()
        .map(|v| Opt::new(v.to_string(), v.to_string()))
        .collect()
}

/// Where a form goes: its heading, where it posts and where "cancel" leads.
struct Target {
    heading: String,
    action: String,
    cancel: String,
}

impl Target {
    /// The form of a new job (`id` none) or of job `id`, headed `heading` or, by default, by
    /// what it does.
    fn new(user: &ConsoleUser, id: Option<JobId>, heading: Option<String>) -> Self {
        let (default_heading, action) =
            heading_and_action(&user.chrome, "jobs.new", "/console/jobs", id);
        Target {
            heading: heading.unwrap_or(default_heading),
            cancel: action.clone(),
            action,
        }
    }
}

async fn form_page(
    state: &AppState,
    user: &ConsoleUser,
    target: Target,
    f: FormState,
) -> Result<JobFormPage, Error> {
    let writable: Vec<Opt> = service::groups::all(state, &user.actor)
        .await?
        .iter()
        .filter(|g| user.actor.write_group(g.id).is_ok())
        .map(|g| Opt::new(g.id.to_string(), group_label(g)))
        .collect();
    let (preview, preview_error) = preview_of(state, &f);
    Ok(JobFormPage {
        heading: target.heading,
        action: target.action,
        cancel: target.cancel,
        groups: writable,
        schedule_types: enum_opts(ScheduleType::ALL),
        handler_types: enum_opts(HandlerType::ALL),
        interpreters: enum_opts(Interpreter::ALL),
        http_methods: HTTP_METHODS,
        routings: enum_opts(Routing::ALL),
        concurrencies: enum_opts(Concurrency::ALL),
        blocks: enum_opts(BlockStrategy::ALL),
        misfires: enum_opts(Misfire::ALL),
        channels: crate::web::alert_channel_opts(state, &user.actor).await?,
        timezones: chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect(),
        preview,
        preview_error,
        f,
        c: user.page("jobs"),
    })
}

pub(super) async fn new(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult {
    let q = Fields::of_query(&req);
    let (target, f) = match q.number::<JobId>("copy", "copy")? {
        Some(id) => {
            let job = service::jobs::get(&state, &user.actor, id).await?;
            let mut f = form_of(&job);
            f.set("name", format!("{} copy", job.name));
            let heading = format!("{} {}", user.chrome.t("jobs.copy_of"), job.name);
            (Target::new(&user, None, Some(heading)), f)
        }
        None => (
            Target::new(&user, None, None),
            new_form(q.number("group_id", "group_id")?),
        ),
    };
    let page = form_page(&state, &user, target, f).await?;
    render(StatusCode::OK, &page)
}

/// Stores the posted form of a new job (`id` none) or of job `id` with `store`: to the job's
/// page when it worked, else the form again with the error beside its field and everything
/// as typed.
async fn save(
    state: &AppState,
    form: CsrfForm,
    id: Option<JobId>,
    store: impl AsyncFnOnce(&ConsoleUser, JobSpec) -> Result<JobView, Error>,
) -> PageResult {
    let CsrfForm { user, fields } = form;
    let result = match input_of(&fields).and_then(JobInput::validate) {
        Ok(spec) => store(&user, spec).await,
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        async |job| {
            Ok(see_other_with(
                &format!("/console/jobs/{}", job.id),
                user.chrome.t("flash.saved"),
            ))
        },
        async |err| {
            let status = err.code().status();
            let f = refilled(&fields, &[], &err, &shown_errors());
            let page = form_page(state, &user, Target::new(&user, id, None), f).await?;
            render(status, &page)
        },
    )
    .await
}

pub(super) async fn create(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    save(&state, form, None, async |user, spec| {
        service::jobs::create(&state, &user.actor, spec).await
    })
    .await
}

pub(super) async fn edit(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<JobId>,
) -> PageResult {
    let job = service::jobs::get(&state, &user.actor, *id).await?;
    // Viewers see the settings on the job's page; the edit form is for those who may save it.
    user.actor.write_group(job.group_id)?;
    let heading = format!("{} {}", user.chrome.t("action.edit"), job.name);
    let target = Target::new(&user, Some(job.id), Some(heading));
    let page = form_page(&state, &user, target, form_of(&job)).await?;
    render(StatusCode::OK, &page)
}

pub(super) async fn update(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<JobId>,
) -> PageResult {
    let id = id.into_inner();
    save(&state, form, Some(id), async |user, spec| {
        service::jobs::update(&state, &user.actor, id, spec).await
    })
    .await
}

#[derive(Serialize)]
struct PreviewAnswer {
    next: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The cron helper's JSON: the next five fire times in the job's zone, or why the expression is wrong.
pub(super) async fn cron_preview(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::ChannelId;
    use jobfleet_agent::protocol::HttpRequest as JobRequest;

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

    /// The form as the table fills it for `job`, as the browser would send it back.
    fn sent(job: &JobView) -> Fields {
        Fields(
            FIELDS
                .iter()
                .flat_map(|field| {
                    (field.show)(job)
                        .into_iter()
                        .map(|value| (field.name.to_owned(), value))
                })
                .collect(),
        )
    }

    #[test]
    fn a_jobs_form_reads_back_as_the_job() {
        use crate::service::jobs::{AlertView, HandlerView, RetryView, ScheduleView};
        let job = JobView {
            id: JobId(9),
            group_id: GroupId(3),
            name: "nightly".into(),
            description: "d".into(),
            schedule: ScheduleView {
                kind: ScheduleType::Once,
                expr: None,
                interval_s: None,
                at_ms: Some(1_767_225_600_000),
                timezone: "Asia/Tokyo".into(),
            },
            handler: HandlerView {
                kind: HandlerType::Script,
                command: None,
                source: Some("echo hi\n".into()),
                interpreter: Some(Interpreter::Python3),
                name: None,
                http: None,
                script_version: 2,
            },
            params: "p".into(),
            routing: crate::domain::routing::Routing::RoundRobin,
            enabled: false,
            timeout_s: 30,
            retry: RetryView {
                count: 2,
                backoff_s: 5,
            },
            limits: crate::domain::job::Limits {
                cpu: Some(1.5),
                memory_mb: Some(256),
                pids: None,
            },
            misfire: Misfire::FireOnceNow,
            concurrency: Concurrency::Forbid,
            block_strategy: BlockStrategy::DiscardLater,
            children: vec![JobId(4), JobId(5)],
            alert: AlertView {
                on_failure: false,
                on_timeout: true,
                on_lost: true,
                on_no_agent: false,
                channels: vec![ChannelId(7), ChannelId(8)],
            },
            agent_labels: [
                ("zone".to_owned(), "a".to_owned()),
                ("gpu".to_owned(), "true".to_owned()),
            ]
            .into_iter()
            .collect(),
            tags: vec!["billing".into(), "team:data".into()],
            start_deadline_s: Some(90),
            keep_succeeded: Some(10),
            keep_failed: None,
            next_fire_ms: None,
            created_ms: 0,
            updated_ms: 0,
        };
        let input = input_of(&sent(&job)).unwrap();
        assert_eq!(
            input.tags.as_deref(),
            Some(&["billing".to_owned(), "team:data".to_owned()][..])
        );
        assert_eq!(
            (
                input.start_deadline_s,
                input.keep_succeeded,
                input.keep_failed
            ),
            (Some(90), Some(10), None)
        );
        assert_eq!(
            input.schedule.at_ms, job.schedule.at_ms,
            "read in the job's zone"
        );
        assert_eq!(input.schedule.timezone.as_deref(), Some("Asia/Tokyo"));
        assert_eq!(input.handler.source, job.handler.source);
        assert_eq!(input.handler.interpreter.as_deref(), Some("python3"));
        assert_eq!(input.enabled, Some(false));
        assert_eq!(input.timeout_s, Some(30));
        assert_eq!(input.limits, Some(job.limits.clone()));
        assert_eq!(input.children, Some(vec![JobId(4), JobId(5)]));
        let alert = input.alert.clone().unwrap();
        assert_eq!(alert.channels, Some(vec![ChannelId(7), ChannelId(8)]));
        assert_eq!(
            (alert.on_failure, alert.on_timeout, alert.on_lost),
            (Some(false), Some(true), Some(true))
        );
        let spec = input.validate().unwrap();
        assert_eq!((spec.retry_count, spec.name.as_str()), (2, "nightly"));

        // An http job's request: its headers travel as `Name: value` lines.
        let request = JobRequest {
            method: "PUT".into(),
            url: "https://example.com/items/1".into(),
            headers: BTreeMap::from([
                ("Authorization".to_owned(), "Bearer t:1".to_owned()),
                ("X-Trace".to_owned(), "on".to_owned()),
            ]),
            body: Some("{\"a\": 1}\n".into()),
            timeout_ms: Some(2500),
            statuses: "200-204,409".into(),
        };
        let http_job = JobView {
            handler: HandlerView {
                kind: HandlerType::Http,
                command: None,
                source: None,
                interpreter: None,
                name: None,
                http: Some(request.clone().into()),
                script_version: 0,
            },
            // No process to hold to limits: an http job refuses them.
            limits: crate::domain::job::Limits::default(),
            ..job
        };
        let input = input_of(&sent(&http_job)).unwrap();
        assert_eq!(
            (input.handler.method.as_deref(), input.handler.timeout_ms),
            (Some("PUT"), Some(2500))
        );
        let spec = input.validate().unwrap();
        assert_eq!(spec.handler, crate::domain::job::Handler::Http { request });
    }

    #[test]
    fn header_lines_need_a_colon() {
        let headers = header_lines("A: 1\r\n\n  B :two: parts \n").unwrap();
        assert_eq!(headers["A"], "1");
        assert_eq!(headers["B"], "two: parts");
        let err = header_lines("A: 1\nno colon here").unwrap_err();
        assert_eq!(err.field(), Some("handler.headers"));
        assert!(err.public_message().contains("line 2"), "{err}");
    }

    #[test]
    fn a_new_form_holds_valid_defaults() {
        let mut f = Fields(
            FIELDS
                .iter()
                .map(|field| (field.name.to_owned(), field.default.to_owned()))
                .collect(),
        );
        f.0.retain(|(k, _)| k != "group_id" && k != "name");
        f.0.extend([
            ("group_id".to_owned(), "1".to_owned()),
            ("name".to_owned(), "n".to_owned()),
            ("handler.command".to_owned(), "true".to_owned()),
        ]);
        f.0.retain(|(k, v)| k != "handler.command" || !v.is_empty());
        input_of(&f).unwrap().validate().unwrap();
        assert!(new_form(Some(GroupId(4))).sel("group_id", "4"));
    }

    #[test]
    fn a_form_becomes_the_apis_input() {
        let f = Fields::parse(
            b"group_id=3&name=nightly&schedule.type=cron&schedule.expr=0+0+2+*+*+%3F&schedule.interval_s=&handler.type=shell&handler.command=echo+hi&handler.source=&routing=round_robin&children=4%2C5&enabled=true&retry.count=2",
        );
        let input = input_of(&f).unwrap();
        assert_eq!(input.group_id, GroupId(3));
        assert_eq!(input.schedule.expr.as_deref(), Some("0 0 2 * * ?"));
        assert_eq!(
            input.schedule.interval_s, None,
            "fields of other types are not sent on"
        );
        assert_eq!(input.handler.source, None);
        assert_eq!(input.children, Some(vec![JobId(4), JobId(5)]));
        let spec = input.validate().unwrap();
        assert_eq!(spec.retry_count, 2);
        let bad = Fields::parse(b"group_id=3&name=x&schedule.type=fixed_rate&schedule.interval_s=ten&handler.type=shell");
        assert_eq!(
            input_of(&bad).unwrap_err().field(),
            Some("schedule.interval_s")
        );
    }
}
