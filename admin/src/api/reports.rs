//! Reports: runs by outcome per day, per job and per group over a range of UTC days, as JSON or
//! as a CSV of the per-job table.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::auth::extract::ApiCaller;
use crate::domain::ids::{GroupId, JobId};
use crate::error::{ApiResult, Error, ErrorBody};
use crate::service::reports::{self, Report, ReportQuery};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReportParams {
    /// First day, `YYYY-MM-DD` (UTC); default six days before `to`.
    pub from: Option<String>,
    /// Last day, included, `YYYY-MM-DD` (UTC); default today. At most 366 days from `from`.
    pub to: Option<String>,
    pub group_id: Option<GroupId>,
    pub job_id: Option<JobId>,
    /// `json` or `csv` (the per-job table); default by `Accept` (`text/csv`), else JSON.
    pub format: Option<String>,
}

/// Whether the caller asked for CSV.
fn wants_csv(req: &HttpRequest, format: Option<&str>) -> Result<bool, Error> {
    match format.map(str::trim) {
        Some("csv") => Ok(true),
        Some("json") => Ok(false),
        Some(other) => Err(Error::invalid(
            "format",
            format!("`{other}` is not a report format; use json or csv"),
        )),
        None => Ok(req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| {
                accept.split(',').any(|part| {
                    part.split(';')
                        .next()
                        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/csv"))
                })
            })),
    }
}

/// The report as a CSV download (the per-job table).
pub fn csv_response(report: &Report) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!(
                "attachment; filename=\"{}\"",
                reports::csv_file_name(report)
            ),
        ))
        .body(reports::csv(report))
}

/// Runs by outcome over a range of UTC days (`from`..=`to`, at most 366 days, no older than
/// `retention_days`), from the daily rollup (counted every minute): per day, per job (success
/// rate = succeeded / (succeeded + failed + timed out + lost); p50/p95 duration within 12.5 %),
/// the ten most failing jobs and per group, of the groups the caller sees. A `group_id` or
/// `job_id` the caller cannot see is 404 like a missing one. `?format=csv` or
/// `Accept: text/csv` answers the per-job table as CSV.
#[utoipa::path(get, path = "/api/v1/reports", tag = "reports", security(("bearer" = [])),
    params(ReportParams),
    responses((status = 200, content((Report = "application/json"), (String = "text/csv"))),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn get(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: ApiCaller,
    params: web::Query<ReportParams>,
) -> ApiResult<HttpResponse> {
    let params = params.into_inner();
    let csv = wants_csv(&req, params.format.as_deref())?;
    let query = ReportQuery {
        from: params.from,
        to: params.to,
        group_id: params.group_id,
        job_id: params.job_id,
    };
    let report = reports::report(&state, &caller.0, query).await?;
    Ok(if csv {
        csv_response(&report)
    } else {
        HttpResponse::Ok().json(report)
    })
}
