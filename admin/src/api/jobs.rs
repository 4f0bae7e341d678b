//! Jobs, their script versions, runs and cron previews.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use crate::auth::extract::ApiCaller;
use crate::domain::ids::{JobId, RunId};
use crate::domain::job::JobInput;
use crate::error::{ApiResult, ErrorBody};
use crate::service::job_bulk::{BulkOutcome, BulkRequest};
use crate::service::jobs::{
    CronPreviewRequest, CronPreviewResponse, JobQuery, JobView, ScriptVersionView,
};
use crate::service::runs::{LogPage, RunQuery, RunView, TriggerRequest};
use crate::service::{self, Paged};
use crate::state::AppState;

/// A job id and a script version from the path.
#[derive(Debug, Deserialize)]
pub struct VersionPath {
    id: JobId,
    version: i32,
}

/// Create a job. Each child needs write access to the child's group (403 when the caller may
/// only read it; a child the caller cannot see is refused like a missing one, 422).
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", security(("bearer" = [])), request_body = JobInput,
    responses((status = 201, body = JobView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<JobInput>,
) -> ApiResult<HttpResponse> {
    let spec = body.into_inner().validate()?;
    Ok(HttpResponse::Created().json(service::jobs::create(&state, &caller.0, spec).await?))
}

/// Replace a job's settings.
#[utoipa::path(put, path = "/api/v1/jobs/{id}", tag = "jobs", security(("bearer" = [])), request_body = JobInput,
    params(("id" = i64, Path)),
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
    body: web::Json<JobInput>,
) -> ApiResult<HttpResponse> {
    let spec = body.into_inner().validate()?;
    Ok(HttpResponse::Ok()
        .json(service::jobs::update(&state, &caller.0, id.into_inner(), spec).await?))
}

/// Read a job.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody)))]
pub async fn get(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::jobs::get(&state, &caller.0, id.into_inner()).await?))
}

/// List jobs with filters.
#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", security(("bearer" = [])), params(JobQuery),
    responses((status = 200, body = Paged<JobView>)))]
pub async fn list(
    state: web::Data<AppState>,
    caller: ApiCaller,
    query: web::Query<JobQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::jobs::list(&state, &caller.0, query.into_inner()).await?))
}

/// Delete a job; jobs that list it as a child lose it in the same transaction (the audit row
/// names them). A job of a group the caller cannot see answers 404 like a missing one.
#[utoipa::path(delete, path = "/api/v1/jobs/{id}", tag = "jobs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
) -> ApiResult<HttpResponse> {
    service::jobs::delete(&state, &caller.0, id.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Enable a job.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/enable", tag = "jobs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = JobView)))]
pub async fn enable(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::jobs::set_enabled(&state, &caller.0, id.into_inner(), true).await?))
}

/// Disable a job.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/disable", tag = "jobs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = JobView)))]
pub async fn disable(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::jobs::set_enabled(&state, &caller.0, id.into_inner(), false).await?))
}

/// A script job's versions, newest first.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/script/versions", tag = "jobs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Vec<ScriptVersionView>)))]
pub async fn script_versions(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::jobs::script_versions(&state, &caller.0, id.into_inner()).await?))
}

/// One script version with its source.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/script/versions/{version}", tag = "jobs", security(("bearer" = [])),
    params(("id" = i64, Path), ("version" = i32, Path)),
    responses((status = 200, body = ScriptVersionView), (status = 404, body = ErrorBody)))]
pub async fn script_version(
    state: web::Data<AppState>,
    caller: ApiCaller,
    path: web::Path<VersionPath>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::jobs::script_version(&state, &caller.0, path.id, path.version).await?))
}

/// Make an old script version current again (saved as a new version).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/script/versions/{version}/rollback", tag = "jobs", security(("bearer" = [])),
    params(("id" = i64, Path), ("version" = i32, Path)),
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody)))]
pub async fn rollback_script(
    state: web::Data<AppState>,
    caller: ApiCaller,
    path: web::Path<VersionPath>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::jobs::rollback_script(&state, &caller.0, path.id, path.version).await?))
}

/// The next fire times of a cron expression in a time zone.
#[utoipa::path(post, path = "/api/v1/cron/preview", tag = "jobs", security(("bearer" = [])), request_body = CronPreviewRequest,
    responses((status = 200, body = CronPreviewResponse), (status = 422, body = ErrorBody)))]
pub async fn cron_preview(
    state: web::Data<AppState>,
    _caller: ApiCaller,
    body: web::Json<CronPreviewRequest>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::jobs::cron_preview(state.clock.now_ms(), &body)?))
}

/// List runs, newest first.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", security(("bearer" = [])), params(RunQuery),
    responses((status = 200, body = Paged<RunView>)))]
pub async fn list_runs(
    state: web::Data<AppState>,
    caller: ApiCaller,
    query: web::Query<RunQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::runs::list(&state, &caller.0, query.into_inner()).await?))
}

/// Read a run.
#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = RunView), (status = 404, body = ErrorBody)))]
pub async fn get_run(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<RunId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::runs::get(&state, &caller.0, id.into_inner()).await?))
}

/// Enable, disable, trigger or delete many jobs: by `ids`, or by `filter` (the job list's
/// filters: `group_id` to pause a whole group, `tag`, `q`, `enabled`, `schedule_type`), at most
/// 1,000. Each job goes through its single action's checks and audit; one refused is reported
/// in its item (`ok: false`, `error`) and the rest go on.
#[utoipa::path(post, path = "/api/v1/jobs/bulk", tag = "jobs", security(("bearer" = [])),
    request_body = BulkRequest,
    responses((status = 200, body = BulkOutcome), (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn bulk(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<BulkRequest>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::job_bulk::apply(&state, &caller.0, body.into_inner()).await?))
}

/// Run a job now, optionally with other params and on a chosen agent of its group.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/trigger", tag = "runs", security(("bearer" = [])), params(("id" = i64, Path)),
    request_body = TriggerRequest,
    responses((status = 201, body = RunView, description = "the run; `status` says whether an agent accepted it"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn trigger(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<JobId>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let request = trigger_request(&body)?;
    Ok(HttpResponse::Created()
        .json(service::runs::trigger(&state, &caller.0, id.into_inner(), request).await?))
}

/// An empty body means "defaults"; anything else must be a valid request.
fn trigger_request(body: &[u8]) -> Result<TriggerRequest, crate::error::Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(TriggerRequest::default())
    } else {
        serde_json::from_slice(body).map_err(crate::http::request::body_error)
    }
}

/// Run a finished run again now, as the next attempt of its chain: with its params unless
/// others are given, on the job's agents unless one is named. Refused (409) while an attempt
/// of the chain is pending or running, and for a workflow step (rerun it from its workflow).
#[utoipa::path(post, path = "/api/v1/runs/{id}/retry", tag = "runs", security(("bearer" = [])), params(("id" = i64, Path)),
    request_body = TriggerRequest,
    responses((status = 201, body = RunView, description = "the new attempt; `status` says whether an agent accepted it"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn retry_run(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<RunId>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let request = trigger_request(&body)?;
    Ok(HttpResponse::Created()
        .json(service::runs::retry(&state, &caller.0, id.into_inner(), request).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// First line to return, 1-based; default 1.
    pub from_line: Option<i64>,
}

/// A page of a run's log, live while it runs.
#[utoipa::path(get, path = "/api/v1/runs/{id}/log", tag = "runs", security(("bearer" = [])), params(("id" = i64, Path), LogQuery),
    responses((status = 200, body = LogPage), (status = 502, body = ErrorBody, description = "the agent is unreachable")))]
pub async fn run_log(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<RunId>,
    q: web::Query<LogQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(
        service::runs::log(&state, &caller.0, id.into_inner(), q.from_line.unwrap_or(1)).await?,
    ))
}

/// Kill a running run (its whole process tree on the agent).
#[utoipa::path(post, path = "/api/v1/runs/{id}/kill", tag = "runs", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 202, body = RunView), (status = 409, body = ErrorBody), (status = 502, body = ErrorBody)))]
pub async fn kill_run(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<RunId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Accepted()
        .json(service::runs::kill(&state, &caller.0, id.into_inner()).await?))
}
