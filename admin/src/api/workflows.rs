//! Workflows and their runs.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::auth::extract::ApiCaller;
use crate::domain::document;
use crate::domain::ids::{WorkflowId, WorkflowRunId};
use crate::error::{ApiResult, ErrorBody};
use crate::http::request::{answer_format, document_body};
use crate::service::Paged;
use crate::service::workflows::{
    self, ImportRequest, MarkRequest, Operation, WorkflowDocument, WorkflowInput, WorkflowQuery,
    WorkflowRunQuery, WorkflowRunView, WorkflowTrigger, WorkflowView,
};
use crate::state::AppState;

/// Create a workflow: nodes that run jobs of its group, edges with conditions (`success`,
/// `failure`, `always`), joins (`all_success`, `all_done`, `one_success`). 422 names the field
/// at fault (a cycle is spelled out).
#[utoipa::path(post, path = "/api/v1/workflows", tag = "workflows", security(("bearer" = [])), request_body = WorkflowInput,
    responses((status = 201, body = WorkflowView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<WorkflowInput>,
) -> ApiResult<HttpResponse> {
    Ok(
        HttpResponse::Created()
            .json(workflows::create(&state, &caller.0, body.into_inner()).await?),
    )
}

/// Replace a workflow's definition and settings; runs in progress keep the definition they
/// started with.
#[utoipa::path(put, path = "/api/v1/workflows/{id}", tag = "workflows", security(("bearer" = [])), request_body = WorkflowInput,
    params(("id" = i64, Path)),
    responses((status = 200, body = WorkflowView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<WorkflowId>,
    body: web::Json<WorkflowInput>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(workflows::update(&state, &caller.0, id.into_inner(), body.into_inner()).await?))
}

/// Delete a workflow with no run in progress (409 otherwise).
#[utoipa::path(delete, path = "/api/v1/workflows/{id}", tag = "workflows", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<WorkflowId>,
) -> ApiResult<HttpResponse> {
    workflows::delete(&state, &caller.0, id.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}", tag = "workflows", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = WorkflowView), (status = 404, body = ErrorBody)))]
pub async fn get(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<WorkflowId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(workflows::get(&state, &caller.0, id.into_inner()).await?))
}

#[utoipa::path(get, path = "/api/v1/workflows", tag = "workflows", security(("bearer" = [])), params(WorkflowQuery),
    responses((status = 200, body = Paged<WorkflowView>), (status = 422, body = ErrorBody)))]
pub async fn list(
    state: web::Data<AppState>,
    caller: ApiCaller,
    query: web::Query<WorkflowQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(workflows::list(&state, &caller.0, query.into_inner()).await?))
}

/// Run a workflow now; `forbid` answers 409 while a run is in progress, `replace` cancels it.
#[utoipa::path(post, path = "/api/v1/workflows/{id}/trigger", tag = "workflows", security(("bearer" = [])), params(("id" = i64, Path)),
    request_body = WorkflowTrigger,
    responses((status = 201, body = WorkflowRunView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn trigger(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<WorkflowId>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        WorkflowTrigger::default()
    } else {
        serde_json::from_slice(&body).map_err(crate::http::request::body_error)?
    };
    Ok(HttpResponse::Created()
        .json(workflows::trigger(&state, &caller.0, id.into_inner(), request).await?))
}

#[utoipa::path(get, path = "/api/v1/workflow-runs", tag = "workflows", security(("bearer" = [])), params(WorkflowRunQuery),
    responses((status = 200, body = Paged<WorkflowRunView>), (status = 422, body = ErrorBody)))]
pub async fn list_runs(
    state: web::Data<AppState>,
    caller: ApiCaller,
    query: web::Query<WorkflowRunQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(workflows::list_runs(&state, &caller.0, query.into_inner()).await?))
}

/// A run with each node's status, job runs and outputs.
#[utoipa::path(get, path = "/api/v1/workflow-runs/{id}", tag = "workflows", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = WorkflowRunView), (status = 404, body = ErrorBody)))]
pub async fn get_run(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<WorkflowRunId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(workflows::get_run(&state, &caller.0, id.into_inner()).await?))
}

/// The operation in the path of `POST /api/v1/workflow-runs/{id}/{operation}`.
#[derive(Debug, Deserialize)]
pub struct OperationPath {
    id: WorkflowRunId,
    operation: String,
}

/// `pause` (no node starts; running ones finish), `resume`, `cancel` (running nodes are
/// killed), `rerun` (failed, skipped and cancelled nodes and what depends on them run again;
/// succeeded nodes keep their results). 409 when the run's status does not allow it.
#[utoipa::path(post, path = "/api/v1/workflow-runs/{id}/{operation}", tag = "workflows", security(("bearer" = [])),
    params(("id" = i64, Path), ("operation" = String, Path, description = "pause, resume, cancel or rerun")),
    responses((status = 200, body = WorkflowRunView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn operate(
    state: web::Data<AppState>,
    caller: ApiCaller,
    path: web::Path<OperationPath>,
) -> ApiResult<HttpResponse> {
    let OperationPath { id, operation } = path.into_inner();
    let operation = match operation.as_str() {
        "pause" => Operation::Pause,
        "resume" => Operation::Resume,
        "cancel" => Operation::Cancel,
        "rerun" => Operation::Rerun,
        _ => return Err(crate::error::Error::NotFound("operation").into()),
    };
    Ok(HttpResponse::Ok().json(workflows::operate(&state, &caller.0, id, operation).await?))
}

#[derive(Debug, Deserialize)]
pub struct NodePath {
    id: WorkflowRunId,
    key: String,
}

/// Mark a node by hand: a node not started yet `succeeded` or `skipped` (the run moves on), or a
/// failed, skipped or cancelled node of a finished run `succeeded` (the run goes on from it).
#[utoipa::path(post, path = "/api/v1/workflow-runs/{id}/nodes/{key}/mark", tag = "workflows", security(("bearer" = [])),
    params(("id" = i64, Path), ("key" = String, Path)), request_body = MarkRequest,
    responses((status = 200, body = WorkflowRunView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn mark(
    state: web::Data<AppState>,
    caller: ApiCaller,
    path: web::Path<NodePath>,
    body: web::Json<MarkRequest>,
) -> ApiResult<HttpResponse> {
    let NodePath { id, key } = path.into_inner();
    let status = body.status()?;
    Ok(HttpResponse::Ok()
        .json(workflows::operate(&state, &caller.0, id, Operation::Mark { key, status }).await?))
}

/// `?format=yaml|json` on an export; without it the `Accept` header decides (JSON by default).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    pub format: Option<String>,
}

/// A workflow and its jobs as a portable document (jobs by name), for version control or
/// another cluster: JSON, or YAML with `?format=yaml` or `Accept: application/yaml`.
#[utoipa::path(get, path = "/api/v1/workflows/{id}/export", tag = "workflows", security(("bearer" = [])),
    params(("id" = i64, Path), ExportQuery),
    responses((status = 200, content((WorkflowDocument = "application/json"), (WorkflowDocument = "application/yaml"))),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn export(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<WorkflowId>,
    query: web::Query<ExportQuery>,
) -> ApiResult<HttpResponse> {
    let format = answer_format(&req, query.format.as_deref())?;
    let document = workflows::export(&state, &caller.0, id.into_inner()).await?;
    Ok(HttpResponse::Ok()
        .content_type(format.media_type())
        .body(document::write(&document, format)?))
}

/// Import a document into a group: its jobs and the workflow are matched by name, updated or
/// created, all or nothing. The body is JSON, or YAML with `Content-Type: application/yaml`
/// (the same shape: `group_id` and `document`). 201 when the workflow was created, 200 when
/// it was updated.
#[utoipa::path(post, path = "/api/v1/workflows/import", tag = "workflows", security(("bearer" = [])),
    request_body(content((ImportRequest = "application/json"), (ImportRequest = "application/yaml"))),
    responses((status = 201, body = WorkflowView), (status = 200, body = WorkflowView), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn import(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let request: ImportRequest = document_body(&req, &body)?;
    let (workflow, created) = workflows::import(&state, &caller.0, request).await?;
    Ok(if created {
        HttpResponse::Created().json(workflow)
    } else {
        HttpResponse::Ok().json(workflow)
    })
}
