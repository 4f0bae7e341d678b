//! Health, readiness, token issue and the caller's own account.

use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use crate::auth::extract::{ApiCaller, LOGIN_BODY_LIMIT, bounded_body};
use crate::error::{ApiResult, Code, Error, ErrorBody};
use crate::http::request::client_ip;
use crate::service;
use crate::service::users::OwnPasswordChange;
use crate::state::AppState;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenResponse {
    pub token: String,
    /// Expiry, UTC milliseconds.
    pub expires_at: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MeResponse {
    pub user_id: Option<i64>,
    pub name: String,
    pub role: String,
    pub groups: Vec<i64>,
    /// `user` (JWT) or `token` (API token).
    pub via: String,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "alive")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// Prometheus metrics of this admin (fires, trigger and run outcomes, lateness, dispatch
/// latency, agents alive, runs in flight, scheduler loop and lock wait). Unauthenticated, as
/// scrapers expect; bind the admin to a private address or filter `/metrics` at the proxy.
#[utoipa::path(get, path = "/metrics", tag = "meta", responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}

/// Readiness: the database answers.
#[utoipa::path(get, path = "/readyz", tag = "meta",
    responses((status = 200, description = "ready"), (status = 503, body = ErrorBody, description = "database unreachable")))]
pub async fn readyz(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    state.db.ping().await?;
    let crashed = state.metrics.workers.crashed();
    if !crashed.is_empty() {
        return Err(Error::Unavailable(format!(
            "background workers ended unexpectedly: {}",
            crashed.join(", ")
        ))
        .into());
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "status": "ready",
        "database": state.db.url().backend_name(),
        "workers": state.metrics.workers.snapshot(),
    })))
}

/// Exchange a username and password for a JWT. The body is at most 8 KiB, the username 64
/// bytes and the password 256; wrong guesses are limited per name and per client (429 with
/// `Retry-After`), and a login that finds password hashing busy for too long gets 503 with
/// `Retry-After`.
#[utoipa::path(post, path = "/api/v1/auth/token", tag = "auth", request_body = TokenRequest,
    responses((status = 200, body = TokenResponse), (status = 401, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn issue_token(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> ApiResult<HttpResponse> {
    let bytes = bounded_body(&req, payload, LOGIN_BODY_LIMIT, state.config.max_body_bytes).await?;
    if !req.content_type().eq_ignore_ascii_case("application/json") {
        return Err(Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: "expected a JSON body with Content-Type: application/json".into(),
        }
        .into());
    }
    let body: TokenRequest =
        serde_json::from_slice(&bytes).map_err(crate::http::request::body_error)?;
    service::auth::check_input_sizes(&body.username, "password", &body.password)?;
    let (token, expires_at) =
        service::auth::issue_token(&state, &body.username, &body.password, &client_ip(&req))
            .await?;
    Ok(HttpResponse::Ok().json(TokenResponse { token, expires_at }))
}

/// Who the bearer is.
#[utoipa::path(get, path = "/api/v1/me", tag = "auth", security(("bearer" = [])),
    responses((status = 200, body = MeResponse), (status = 401, body = ErrorBody)))]
pub async fn me(caller: ApiCaller) -> HttpResponse {
    let actor = caller.0;
    HttpResponse::Ok().json(MeResponse {
        user_id: actor.user_id,
        role: actor.role.to_string(),
        groups: actor.groups.iter().map(|g| g.0).collect(),
        via: actor.kind.as_str().to_owned(),
        name: actor.name,
    })
}

/// Change your own password. Every JWT and console session of yours ends (log in again);
/// your API tokens stay. Wrong current passwords are limited like logins (429 with `Retry-After`).
#[utoipa::path(post, path = "/api/v1/me/password", tag = "auth", security(("bearer" = [])), request_body = OwnPasswordChange,
    responses((status = 204), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn change_password(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<OwnPasswordChange>,
) -> ApiResult<HttpResponse> {
    service::users::change_own_password(&state, &caller.0, body.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}
