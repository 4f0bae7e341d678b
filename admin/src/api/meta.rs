//! Health, readiness, token issue and the caller's own account.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use crate::auth::extract::ApiCaller;
use crate::error::{ApiResult, ErrorBody};
use crate::http::client_ip;
use crate::service;
use crate::service::users::OwnPasswordChange;
use crate::startup::AppState;

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
    Ok(HttpResponse::Ok()
        .json(serde_json::json!({"status": "ready", "database": state.db.url().backend_name()})))
}

/// Exchange a username and password for a JWT.
#[utoipa::path(post, path = "/api/v1/auth/token", tag = "auth", request_body = TokenRequest,
    responses((status = 200, body = TokenResponse), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn issue_token(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Json<TokenRequest>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    if body.username.len() > 64 || body.password.len() > 256 {
        return Err(crate::error::Error::Unauthenticated(
            "wrong username or password, or the user is disabled".into(),
        )
        .into());
    }
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
        groups: actor.groups,
        via: actor.kind.as_str().to_owned(),
        name: actor.name,
    })
}

/// Change your own password (logs out your other JWTs).
#[utoipa::path(post, path = "/api/v1/me/password", tag = "auth", security(("bearer" = [])), request_body = OwnPasswordChange,
    responses((status = 204), (status = 422, body = ErrorBody)))]
pub async fn change_password(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<OwnPasswordChange>,
) -> ApiResult<HttpResponse> {
    service::users::change_own_password(&state, &caller.0, body.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}
