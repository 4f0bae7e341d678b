//! Alert channels and alert events.

use actix_web::{HttpResponse, web};

use crate::auth::extract::ApiCaller;
use crate::domain::alert::ChannelInput;
use crate::domain::ids::ChannelId;
use crate::error::{ApiResult, ErrorBody};
use crate::service::alerts::{ChannelView, EventQuery, EventView, TestOutcome};
use crate::service::{self, Paged};
use crate::state::AppState;

/// List alert channels (any role; only admins see webhook URLs in full).
#[utoipa::path(get, path = "/api/v1/alert-channels", tag = "alerts", security(("bearer" = [])),
    responses((status = 200, body = Vec<ChannelView>)))]
pub async fn list_channels(
    state: web::Data<AppState>,
    caller: ApiCaller,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::alerts::list_channels(&state, &caller.0).await?))
}

/// Create an alert channel (admin).
#[utoipa::path(post, path = "/api/v1/alert-channels", tag = "alerts", security(("bearer" = [])), request_body = ChannelInput,
    responses((status = 201, body = ChannelView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_channel(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<ChannelInput>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    let spec = body.into_inner().validate()?;
    Ok(HttpResponse::Created()
        .json(service::alerts::create_channel(&state, &caller.0, &proof, spec).await?))
}

/// Read an alert channel.
#[utoipa::path(get, path = "/api/v1/alert-channels/{id}", tag = "alerts", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = ChannelView), (status = 404, body = ErrorBody)))]
pub async fn get_channel(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<ChannelId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::alerts::get_channel(&state, &caller.0, id.into_inner()).await?))
}

/// Replace an alert channel (admin). Leave `secret` out to keep the stored one, `""` clears it.
#[utoipa::path(put, path = "/api/v1/alert-channels/{id}", tag = "alerts", security(("bearer" = [])), request_body = ChannelInput,
    params(("id" = i64, Path)),
    responses((status = 200, body = ChannelView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update_channel(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<ChannelId>,
    body: web::Json<ChannelInput>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    let spec = body.into_inner().validate()?;
    Ok(HttpResponse::Ok().json(
        service::alerts::update_channel(&state, &caller.0, &proof, id.into_inner(), spec).await?,
    ))
}

/// Delete an alert channel no job uses (admin).
#[utoipa::path(delete, path = "/api/v1/alert-channels/{id}", tag = "alerts", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete_channel(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<ChannelId>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    service::alerts::delete_channel(&state, &caller.0, &proof, id.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Send a test message through the channel now and say whether it went (admin).
#[utoipa::path(post, path = "/api/v1/alert-channels/{id}/test", tag = "alerts", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = TestOutcome), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn test_channel(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<ChannelId>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(HttpResponse::Ok()
        .json(service::alerts::test_channel(&state, &caller.0, &proof, id.into_inner()).await?))
}

/// Alert events, newest first (non-admins: those of their groups).
#[utoipa::path(get, path = "/api/v1/alert-events", tag = "alerts", security(("bearer" = [])), params(EventQuery),
    responses((status = 200, body = Paged<EventView>), (status = 422, body = ErrorBody)))]
pub async fn list_events(
    state: web::Data<AppState>,
    caller: ApiCaller,
    q: web::Query<EventQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok()
        .json(service::alerts::list_events(&state, &caller.0, q.into_inner()).await?))
}
