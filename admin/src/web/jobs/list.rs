//! The job list with its filters.

use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;

use super::{group_name, next_fire, schedule_text};
use crate::domain::ids::JobId;
use crate::domain::schedule::ScheduleType;
use crate::error::Error;
use crate::service;
use crate::service::jobs::JobQuery;
use crate::state::AppState;
use crate::web::forms::{ConsoleUser, CsrfForm, Fields, listed};
use crate::web::views::{Chrome, Opt, Pager, group_options};
use crate::web::{PageResult, see_other_with};

#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: JobId,
    pub name: String,
    pub group: String,
    pub schedule: String,
    pub handler: String,
    pub next_fire: String,
    pub enabled: bool,
    pub tags: Vec<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "jobs.html")]
pub struct JobsPage {
    pub c: Chrome,
    pub q: String,
    pub tag: String,
    pub enabled: String,
    pub groups: Vec<Opt>,
    pub schedule_types: Vec<Opt>,
    pub jobs: Vec<JobRow>,
    pub pager: Pager,
    pub error: String,
    /// This page with its filters, where a bulk action comes back to.
    pub back: String,
}

fn query_of(q: &Fields) -> Result<JobQuery, Error> {
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
        tag: q.get("tag").map(str::to_owned),
        limit: Some(50),
        offset: q.number("offset", "offset")?,
    })
}

pub(super) async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<JobsPage> {
    let q = Fields::of_query(&req);
    let groups = service::groups::all(&state, &user.actor).await?;
    let result = match query_of(&q) {
        Ok(query) => service::jobs::list(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let base = q.link_keeping(
        "/console/jobs",
        &["q", "tag", "group_id", "enabled", "schedule_type"],
    );
    let back = q.link_keeping(
        "/console/jobs",
        &["q", "tag", "group_id", "enabled", "schedule_type", "offset"],
    );
    let chosen_group = q.text("group_id");
    let chosen_type = q.text("schedule_type");
    Ok(JobsPage {
        q: q.text("q"),
        tag: q.text("tag"),
        enabled: q.text("enabled"),
        groups: group_options(&groups, &chosen_group),
        schedule_types: ScheduleType::ALL
            .iter()
            .map(|t| Opt::new(t.as_str(), t.as_str()).picked(t.as_str() == chosen_type))
            .collect(),
        pager: Pager::of(&base, &paged),
        jobs: paged
            .items
            .iter()
            .map(|j| JobRow {
                id: j.id,
                name: j.name.clone(),
                group: group_name(&groups, j.group_id),
                schedule: schedule_text(&j.schedule),
                handler: j.handler.kind.to_string(),
                next_fire: next_fire(j),
                enabled: j.enabled,
                tags: j.tags.clone(),
            })
            .collect(),
        error,
        back,
        c: user.page("jobs"),
    })
}

/// The bulk form under the list: the action on the jobs ticked, then back to the same page
/// with what happened.
pub(super) async fn bulk(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    use crate::service::job_bulk::{BulkAction, BulkRequest};
    let f = &form.fields;
    let t = |key| form.user.chrome.t(key);
    // Only back to the job list: the field comes from the page, but a redirect must not leave.
    let back = f
        .get("back")
        .filter(|b| *b == "/console/jobs" || b.starts_with("/console/jobs?"))
        .unwrap_or("/console/jobs")
        .to_owned();
    let action = match f.get("action") {
        Some("enable") => BulkAction::Enable,
        Some("disable") => BulkAction::Disable,
        Some("trigger") => BulkAction::Trigger,
        Some("delete") => BulkAction::Delete,
        _ => return Ok(see_other_with(&back, t("bulk.no_action"))),
    };
    let ids = f
        .all("id")
        .into_iter()
        .map(|id| {
            id.trim()
                .parse::<i64>()
                .map(JobId)
                .map_err(|_| Error::invalid("id", format!("`{id}` is not a job id")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Ok(see_other_with(&back, t("bulk.none_chosen")));
    }
    let outcome = service::job_bulk::apply(
        &state,
        &form.user.actor,
        BulkRequest {
            action,
            ids: Some(ids),
            filter: None,
            params: None,
        },
    )
    .await?;
    let mut message = format!("{} {}/{}", t("bulk.done"), outcome.done, outcome.matched);
    if let Some((item, error)) = outcome
        .items
        .iter()
        .find_map(|i| i.error.as_ref().map(|e| (i, e)))
    {
        message.push_str(&format!(
            "; {} {}: {}",
            t("bulk.refused"),
            item.name.clone().unwrap_or_else(|| item.id.to_string()),
            error.message
        ));
    }
    Ok(see_other_with(&back, &message))
}
