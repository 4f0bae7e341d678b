//! Jobs as code: export groups and their jobs as one document, apply a document back.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::auth::extract::ApiCaller;
use crate::domain::document;
use crate::error::{ApiResult, ErrorBody};
use crate::http::request::{answer_format, document_body};
use crate::service::jobs_as_code::{self, ApplyOptions, ApplyReport, JobsDocument};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// App names, comma-separated; default every group the caller can see.
    pub groups: Option<String>,
    /// `json` or `yaml`; default by `Accept`.
    pub format: Option<String>,
}

/// Groups and all their jobs (scripts included) as one document for version control: JSON, or
/// YAML with `?format=yaml` or `Accept: application/yaml`. Jobs are named, not numbered;
/// `POST /api/v1/apply` takes the document back.
#[utoipa::path(get, path = "/api/v1/export", tag = "jobs", security(("bearer" = [])),
    params(ExportQuery),
    responses((status = 200, content((JobsDocument = "application/json"), (JobsDocument = "application/yaml"))),
        (status = 422, body = ErrorBody)))]
pub async fn export(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: ApiCaller,
    query: web::Query<ExportQuery>,
) -> ApiResult<HttpResponse> {
    let format = answer_format(&req, query.format.as_deref())?;
    let groups: Vec<String> = query
        .groups
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    let exported = jobs_as_code::export(&state, &caller.0, groups).await?;
    Ok(HttpResponse::Ok()
        .content_type(format.media_type())
        .body(document::write(&exported, format)?))
}

/// Apply a jobs document: each group by `app_name` and each job by name is created, updated or
/// left as it is, all or nothing; `prune` deletes the groups' jobs the document leaves out;
/// `dry_run` reports the same changes and writes nothing. The body is JSON, or YAML with
/// `Content-Type: application/yaml`. Every change is audited as its own call would be; applying
/// the same document again changes nothing.
#[utoipa::path(post, path = "/api/v1/apply", tag = "jobs", security(("bearer" = [])),
    params(ApplyOptions),
    request_body(content((JobsDocument = "application/json"), (JobsDocument = "application/yaml"))),
    responses((status = 200, body = ApplyReport), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn apply(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: ApiCaller,
    options: web::Query<ApplyOptions>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let document: JobsDocument = document_body(&req, &body)?;
    let report = jobs_as_code::apply(&state, &caller.0, document, options.into_inner()).await?;
    Ok(HttpResponse::Ok().json(report))
}
