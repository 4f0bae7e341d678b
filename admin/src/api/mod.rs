//! Open API handlers (`/api/v1`): parse input, check the capability, call one service
//! function, render JSON. No handler touches the database directly.

pub mod admin;
pub mod alerts;
pub mod docs;
pub mod jobs;
pub mod jobs_as_code;
pub mod meta;
pub mod reports;
pub mod workflows;

use actix_web::web;
use serde::Deserialize;

/// Paging query for lists that have no other filters.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/auth/token", web::post().to(meta::issue_token))
        .route("/me", web::get().to(meta::me))
        .route("/me/password", web::post().to(meta::change_password))
        .route("/cron/preview", web::post().to(jobs::cron_preview))
        .route("/groups", web::get().to(admin::list_groups))
        .route("/groups", web::post().to(admin::create_group))
        .route("/groups/{id}", web::get().to(admin::get_group))
        .route("/groups/{id}", web::put().to(admin::update_group))
        .route("/groups/{id}", web::delete().to(admin::delete_group))
        .route("/jobs", web::get().to(jobs::list))
        .route("/jobs", web::post().to(jobs::create))
        .route("/jobs/bulk", web::post().to(jobs::bulk))
        .route("/jobs/{id}", web::get().to(jobs::get))
        .route("/jobs/{id}", web::put().to(jobs::update))
        .route("/jobs/{id}", web::delete().to(jobs::delete))
        .route("/jobs/{id}/enable", web::post().to(jobs::enable))
        .route("/jobs/{id}/disable", web::post().to(jobs::disable))
        .route(
            "/jobs/{id}/script/versions",
            web::get().to(jobs::script_versions),
        )
        .route(
            "/jobs/{id}/script/versions/{version}",
            web::get().to(jobs::script_version),
        )
        .route(
            "/jobs/{id}/script/versions/{version}/rollback",
            web::post().to(jobs::rollback_script),
        )
        .route("/jobs/{id}/trigger", web::post().to(jobs::trigger))
        .route("/export", web::get().to(jobs_as_code::export))
        .route("/apply", web::post().to(jobs_as_code::apply))
        .route("/runs", web::get().to(jobs::list_runs))
        .route("/runs/{id}/log", web::get().to(jobs::run_log))
        .route("/runs/{id}/kill", web::post().to(jobs::kill_run))
        .route("/runs/{id}/retry", web::post().to(jobs::retry_run))
        .route("/runs/{id}", web::get().to(jobs::get_run))
        .route("/agents", web::get().to(admin::list_agents))
        .route("/fleet", web::get().to(admin::fleet))
        .route("/agents/{id}/approve", web::post().to(admin::approve_agent))
        .route("/agents/{id}/revoke", web::post().to(admin::revoke_agent))
        .route("/agents/{id}/drain", web::post().to(admin::drain_agent))
        .route("/agents/{id}/undrain", web::post().to(admin::undrain_agent))
        .route("/agents/{id}", web::delete().to(admin::forget_agent))
        .route("/users", web::get().to(admin::list_users))
        .route("/users", web::post().to(admin::create_user))
        .route("/users/{id}", web::get().to(admin::get_user))
        .route("/users/{id}", web::patch().to(admin::update_user))
        .route(
            "/users/{id}/password",
            web::post().to(admin::reset_password),
        )
        .route("/tokens", web::get().to(admin::list_tokens))
        .route("/tokens", web::post().to(admin::create_token))
        .route("/tokens/{id}", web::delete().to(admin::revoke_token))
        .route("/audit", web::get().to(admin::list_audit))
        .route("/alert-channels", web::get().to(alerts::list_channels))
        .route("/alert-channels", web::post().to(alerts::create_channel))
        .route("/alert-channels/{id}", web::get().to(alerts::get_channel))
        .route(
            "/alert-channels/{id}",
            web::put().to(alerts::update_channel),
        )
        .route(
            "/alert-channels/{id}",
            web::delete().to(alerts::delete_channel),
        )
        .route(
            "/alert-channels/{id}/test",
            web::post().to(alerts::test_channel),
        )
        .route("/alert-events", web::get().to(alerts::list_events))
        .route("/reports", web::get().to(reports::get))
        .route("/workflows", web::get().to(workflows::list))
        .route("/workflows", web::post().to(workflows::create))
        // Before `/workflows/{id}`, whose resource would answer this path's POST with 405.
        .route("/workflows/import", web::post().to(workflows::import))
        .route("/workflows/{id}/export", web::get().to(workflows::export))
        .route("/workflows/{id}", web::get().to(workflows::get))
        .route("/workflows/{id}", web::put().to(workflows::update))
        .route("/workflows/{id}", web::delete().to(workflows::delete))
        .route(
            "/workflows/{id}/trigger",
            web::post().to(workflows::trigger),
        )
        .route("/workflow-runs", web::get().to(workflows::list_runs))
        .route("/workflow-runs/{id}", web::get().to(workflows::get_run))
        .route(
            "/workflow-runs/{id}/nodes/{key}/mark",
            web::post().to(workflows::mark),
        )
        .route(
            "/workflow-runs/{id}/{operation}",
            web::post().to(workflows::operate),
        );
}
