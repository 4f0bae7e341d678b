//! The job list with its filters.

use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;

use super::{group_label, group_name, next_fire, schedule_text};
use crate::domain::ids::JobId;
use crate::domain::schedule::ScheduleType;
use crate::error::Error;
use crate::service;
use crate::service::jobs::JobQuery;
use crate::state::AppState;
use crate::web::PageResult;
use crate::web::forms::{ConsoleUser, Fields, listed};
use crate::web::views::{Chrome, Opt, Pager};

#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: JobId,
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
                Opt::new(g.id.to_string(), group_label(g)).picked(g.id.to_string() == chosen_group)
            })
            .collect(),
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
            })
            .collect(),
        error,
        c: user.page("jobs"),
    })
}
