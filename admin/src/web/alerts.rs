//! Alert channels (admins: email and webhooks, with "send test") and the alert events every
//! role may read for the groups it sees, with their delivery results.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;

use super::forms::{
    ConsoleUser, CsrfForm, Fields, heading_and_action, listed, refilled, save_or_show_again,
};
use super::views::{Chrome, FormState, Opt, Pager, when};
use super::{PageResult, render, see_other_with};
use crate::domain::alert::{AlertKind, ChannelInput, EventStatus, WebhookFormat};
use crate::domain::ids::{ChannelId, RunId};
use crate::error::Error;
use crate::service;
use crate::service::alerts::{ChannelView, EventQuery};
use crate::state::AppState;

const FORM_FIELDS: &[&str] = &["name", "kind", "format", "target", "secret"];

#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: i64,
    pub when: String,
    pub kind: String,
    pub title: String,
    pub run_id: Option<RunId>,
    pub channel: String,
    pub status: String,
    pub attempts: i32,
    pub last_error: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "alerts.html")]
pub struct AlertsPage {
    pub c: Chrome,
    pub channels: Vec<ChannelView>,
    pub events: Vec<EventRow>,
    pub job_id: String,
    pub kinds: Vec<Opt>,
    pub statuses: Vec<Opt>,
    pub pager: Pager,
    pub error: String,
}

#[derive(Template)]
#[template(path = "channel_form.html")]
pub struct ChannelFormPage {
    pub c: Chrome,
    pub heading: String,
    pub action: String,
    pub editing: bool,
    pub formats: Vec<Opt>,
    pub f: FormState,
}

async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<AlertsPage> {
    let q = Fields::of_query(&req);
    let channels = service::alerts::list_channels(&state, &user.actor).await?;
    let query = (|| -> Result<EventQuery, Error> {
        Ok(EventQuery {
            job_id: q.number("job_id", "job_id")?,
            status: q.get("status").map(str::to_owned),
            kind: q.get("kind").map(str::to_owned),
            limit: Some(50),
            offset: q.number("offset", "offset")?,
        })
    })();
    let result = match query {
        Ok(query) => service::alerts::list_events(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let base = q.link_keeping("/console/alerts", &["job_id", "status", "kind"]);
    let (chosen_kind, chosen_status) = (q.text("kind"), q.text("status"));
    Ok(AlertsPage {
        pager: Pager::of(&base, &paged),
        events: paged
            .items
            .into_iter()
            .map(|e| EventRow {
                channel: channels
                    .iter()
                    .find(|c| c.id == e.channel_id)
                    .map_or_else(|| format!("#{}", e.channel_id), |c| c.name.clone()),
                id: e.id,
                when: when(Some(e.created_ms)),
                kind: e.kind,
                title: e.title,
                run_id: e.run_id,
                status: e.status,
                attempts: e.attempts,
                last_error: e.last_error.unwrap_or_default(),
            })
            .collect(),
        kinds: AlertKind::ALL
            .iter()
            .map(|k| Opt::new(k.as_str(), k.as_str()).picked(k.as_str() == chosen_kind))
            .collect(),
        statuses: EventStatus::ALL
            .iter()
            .map(|s| Opt::new(s.as_str(), s.as_str()).picked(s.as_str() == chosen_status))
            .collect(),
        job_id: q.text("job_id"),
        channels,
        error,
        c: user.page("alerts"),
    })
}

fn page(
    user: &ConsoleUser,
    heading: String,
    action: String,
    editing: bool,
    f: FormState,
) -> ChannelFormPage {
    ChannelFormPage {
        c: user.page("alerts"),
        formats: WebhookFormat::ALL
            .iter()
            .map(|w| Opt::new(w.as_str(), w.as_str()))
            .collect(),
        heading,
        action,
        editing,
        f,
    }
}

fn input_of(f: &Fields) -> ChannelInput {
    let kind = f.text("kind");
    let secret = if f.flag("clear_secret") {
        Some(String::new())
    } else {
        f.get("secret").map(str::to_owned)
    };
    ChannelInput {
        name: f.text("name"),
        format: (kind == "webhook")
            .then(|| f.text("format"))
            .filter(|v| !v.is_empty()),
        kind,
        target: f.text("target"),
        secret,
        enabled: Some(f.flag("enabled")),
    }
}

fn saved(user: &ConsoleUser) -> actix_web::HttpResponse {
    see_other_with("/console/alerts", user.chrome.t("flash.saved"))
}

/// The form again, as sent but for the secret, with `err` beside its field;
/// `id` is the one being edited (none: a new one).
fn again(user: &ConsoleUser, fields: &Fields, err: &Error, id: Option<ChannelId>) -> PageResult {
    let (heading, action) =
        heading_and_action(&user.chrome, "alerts.new_channel", "/console/alerts", id);
    let f = refilled(fields, &["secret"], err, FORM_FIELDS);
    render(
        err.code().status(),
        &page(user, heading, action, id.is_some(), f),
    )
}

async fn new(user: ConsoleUser) -> PageResult {
    user.actor.require_admin()?;
    let f = FormState::from_pairs([
        ("kind", "webhook"),
        ("format", "generic"),
        ("enabled", "true"),
    ]);
    render(
        StatusCode::OK,
        &page(
            &user,
            user.chrome.t("alerts.new_channel").into(),
            "/console/alerts".into(),
            false,
            f,
        ),
    )
}

async fn create(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let result = match input_of(&fields).validate() {
        Ok(spec) => service::alerts::create_channel(&state, &user.actor, &proof, spec).await,
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        async |_| Ok(saved(&user)),
        async |e| again(&user, &fields, &e, None),
    )
    .await
}

async fn edit(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<ChannelId>,
) -> PageResult {
    user.actor.require_admin()?;
    let ch = service::alerts::get_channel(&state, &user.actor, *id).await?;
    let f = FormState::from_pairs([
        ("name", ch.name.clone()),
        ("kind", ch.kind.clone()),
        ("format", ch.format.clone().unwrap_or_default()),
        ("target", ch.target.clone()),
        ("enabled", ch.enabled.to_string()),
    ]);
    let heading = format!("{} {}", user.chrome.t("action.edit"), ch.name);
    render(
        StatusCode::OK,
        &page(
            &user,
            heading,
            format!("/console/alerts/{}", ch.id),
            true,
            f,
        ),
    )
}

async fn update(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<ChannelId>,
) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let id = id.into_inner();
    let result = match input_of(&fields).validate() {
        Ok(spec) => service::alerts::update_channel(&state, &user.actor, &proof, id, spec).await,
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        async |_| Ok(saved(&user)),
        async |e| again(&user, &fields, &e, Some(id)),
    )
    .await
}

async fn delete(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<ChannelId>,
) -> PageResult {
    let proof = form.user.actor.require_admin()?;
    service::alerts::delete_channel(&state, &form.user.actor, &proof, *id).await?;
    Ok(see_other_with(
        "/console/alerts",
        form.user.chrome.t("flash.deleted"),
    ))
}

/// Sends a test message now and says how it went.
async fn test(state: web::Data<AppState>, form: CsrfForm, id: web::Path<ChannelId>) -> PageResult {
    let proof = form.user.actor.require_admin()?;
    let outcome = service::alerts::test_channel(&state, &form.user.actor, &proof, *id).await?;
    let message = match outcome.error {
        None => form.user.chrome.t("flash.test_sent").to_owned(),
        Some(e) => format!("{} {e}", form.user.chrome.t("flash.test_failed")),
    };
    Ok(see_other_with("/console/alerts", &message))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/alerts", web::get().to(list))
        .route("/alerts", web::post().to(create))
        .route("/alerts/new", web::get().to(new))
        .route("/alerts/{id}/edit", web::get().to(edit))
        .route("/alerts/{id}", web::post().to(update))
        .route("/alerts/{id}/delete", web::post().to(delete))
        .route("/alerts/{id}/test", web::post().to(test));
}
