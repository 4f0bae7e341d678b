//! A job's page: its settings, recent runs and script versions, and the actions on it
//! (trigger once, enable, disable, delete).

use actix_web::web;
use askama::Template;
use askama_web::WebTemplate;

use super::versions::VersionRow;
use super::{group_name, next_fire, schedule_text};
use crate::domain::ids::JobId;
use crate::domain::policy::HandlerType;
use crate::service;
use crate::service::jobs::JobView;
use crate::service::runs::{RunQuery, TriggerRequest};
use crate::state::AppState;
use crate::web::forms::{ConsoleUser, CsrfForm};
use crate::web::views::{Chrome, Opt, RunRow, when};
use crate::web::{PageResult, see_other_with};

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

pub(super) async fn show(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<JobId>,
) -> PageResult<JobPage> {
    let job = service::jobs::get(&state, &user.actor, *id).await?;
    let groups = service::groups::all(&state, &user.actor).await?;
    // The agents a trigger may name: the group's live ones, by address (the largest page).
    let agents = service::fleet::list(
        &state,
        &user.actor,
        service::fleet::AgentQuery {
            group_id: Some(job.group_id),
            status: Some("live".into()),
            sort: Some("address".into()),
            limit: Some(service::Page::MAX_LIMIT),
            ..service::fleet::AgentQuery::default()
        },
    )
    .await?
    .items
    .into_iter()
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
        schedule: schedule_text(&job.schedule),
        next_fire: next_fire(&job),
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

async fn set_enabled(state: &AppState, form: CsrfForm, id: JobId, enabled: bool) -> PageResult {
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

pub(super) async fn enable(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<JobId>,
) -> PageResult {
    set_enabled(&state, form, *id, true).await
}

pub(super) async fn disable(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<JobId>,
) -> PageResult {
    set_enabled(&state, form, *id, false).await
}

pub(super) async fn delete(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<JobId>,
) -> PageResult {
    service::jobs::delete(&state, &form.user.actor, *id).await?;
    Ok(see_other_with(
        "/console/jobs",
        form.user.chrome.t("flash.deleted"),
    ))
}

pub(super) async fn trigger(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<JobId>,
) -> PageResult {
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
