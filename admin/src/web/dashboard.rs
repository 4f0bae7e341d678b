//! The front page: what is running, what failed, and how the week went.

use actix_web::web;

use super::PageResult;
use super::forms::ConsoleUser;
use super::views::{Chart, DashboardPage, RunRow, StatusCount, status_label};
use crate::domain::policy::RunStatus;
use crate::service;
use crate::state::AppState;

async fn show(state: web::Data<AppState>, user: ConsoleUser) -> PageResult<DashboardPage> {
    let data = service::dashboard::load(&state, &user.actor).await?;
    let c = user.page("dashboard");
    let names: std::collections::HashMap<crate::domain::ids::JobId, String> =
        data.job_names.into_iter().collect();
    let today = data
        .today
        .iter()
        .filter(|(status, _)| !matches!(status, RunStatus::Pending | RunStatus::Running))
        .map(|(status, count)| StatusCount {
            status: status.as_str(),
            label: status_label(&c, *status),
            count: *count,
        })
        .collect();
    let runs = data
        .recent_failures
        .into_iter()
        .map(|r| {
            let name = names.get(&r.job_id).cloned().unwrap_or_default();
            RunRow::new(&c, &service::runs::view(r), &name)
        })
        .collect();
    Ok(DashboardPage {
        jobs_enabled: data.jobs_enabled,
        jobs_total: data.jobs_total,
        agents_live: data.agents_live,
        agents_total: data.agents_total,
        fleet: data.fleet,
        in_flight: data.in_flight,
        today_start: chrono::DateTime::from_timestamp_millis(data.today_start_ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M").to_string())
            .unwrap_or_default(),
        today,
        chart: Chart::new(&data.week),
        runs,
        c,
    })
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("", web::get().to(show))
        .route("/", web::get().to(show));
}
