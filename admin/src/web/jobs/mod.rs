//! Jobs: the list with filters (`list`), the form for create, edit and copy with its live cron
//! preview (`form`), a job's page with its actions (`page`), and script versions with a diff
//! and roll back (`versions`).

mod form;
mod list;
mod page;
mod versions;

use actix_web::web;

use super::views::when;
use crate::domain::ids::GroupId;
use crate::service::groups::GroupView;
use crate::service::jobs::{JobView, ScheduleView};

/// A schedule for people (jobs' and workflows').
pub(super) fn schedule_text(s: &ScheduleView) -> String {
    match s.kind.as_str() {
        "cron" => format!("cron {} ({})", s.expr.as_deref().unwrap_or(""), s.timezone),
        "fixed_rate" => format!("every {} s", s.interval_s.unwrap_or(0)),
        "once" => format!("once at {} UTC", when(s.at_ms)),
        _ => "none (API / console only)".into(),
    }
}

fn group_label(g: &GroupView) -> String {
    format!("{} ({})", g.title, g.app_name)
}

pub(super) fn group_name(groups: &[GroupView], id: GroupId) -> String {
    groups
        .iter()
        .find(|g| g.id == id)
        .map_or_else(|| format!("#{id}"), group_label)
}

/// "—" for a disabled job, which has no next fire.
fn next_fire(job: &JobView) -> String {
    if job.enabled {
        when(job.next_fire_ms)
    } else {
        "—".into()
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/jobs", web::get().to(list::list))
        .route("/jobs", web::post().to(form::create))
        .route("/jobs/new", web::get().to(form::new))
        .route("/jobs/bulk", web::post().to(list::bulk))
        .route("/jobs/{id}", web::get().to(page::show))
        .route("/jobs/{id}", web::post().to(form::update))
        .route("/jobs/{id}/edit", web::get().to(form::edit))
        .route("/jobs/{id}/enable", web::post().to(page::enable))
        .route("/jobs/{id}/disable", web::post().to(page::disable))
        .route("/jobs/{id}/delete", web::post().to(page::delete))
        .route("/jobs/{id}/trigger", web::post().to(page::trigger))
        .route(
            "/jobs/{id}/versions/{version}",
            web::get().to(versions::version),
        )
        .route(
            "/jobs/{id}/versions/{version}/rollback",
            web::post().to(versions::rollback),
        )
        .route("/cron-preview", web::get().to(form::cron_preview));
}
