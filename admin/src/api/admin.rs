//! Groups, agents, users, API tokens and the audit log.

use actix_web::{HttpResponse, web};

use super::PageQuery;
use crate::auth::extract::ApiCaller;
use crate::domain::ids::GroupId;
use crate::error::{ApiResult, ErrorBody};
use crate::service::agents::{AgentView, Decision};
use crate::service::audit::{AuditQuery, AuditView};
use crate::service::fleet::{AgentQuery, FleetView};
use crate::service::groups::{GroupInput, GroupUpdate, GroupView};
use crate::service::tokens::{CreatedToken, NewTokenRequest, TokenView};
use crate::service::users::{NewUserRequest, PasswordReset, UserUpdate, UserView};
use crate::service::{self, Page, Paged};
use crate::state::AppState;

/// List the executor groups you may see.
#[utoipa::path(get, path = "/api/v1/groups", tag = "groups", security(("bearer" = [])), params(PageQuery),
    responses((status = 200, body = Paged<GroupView>)))]
pub async fn list_groups(
    state: web::Data<AppState>,
    caller: ApiCaller,
    q: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = Page::new(q.limit, q.offset)?;
    Ok(HttpResponse::Ok().json(service::groups::list(&state, &caller.0, page).await?))
}

/// Create an executor group (admin).
#[utoipa::path(post, path = "/api/v1/groups", tag = "groups", security(("bearer" = [])), request_body = GroupInput,
    responses((status = 201, body = GroupView), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_group(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<GroupInput>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(HttpResponse::Created()
        .json(service::groups::create(&state, &caller.0, &proof, body.into_inner()).await?))
}

/// Read an executor group.
#[utoipa::path(get, path = "/api/v1/groups/{id}", tag = "groups", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = GroupView), (status = 404, body = ErrorBody)))]
pub async fn get_group(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<GroupId>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::groups::get(&state, &caller.0, id.into_inner()).await?))
}

/// Change an executor group (admin).
#[utoipa::path(put, path = "/api/v1/groups/{id}", tag = "groups", security(("bearer" = [])), request_body = GroupUpdate,
    params(("id" = i64, Path)), responses((status = 200, body = GroupView), (status = 404, body = ErrorBody)))]
pub async fn update_group(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<GroupId>,
    body: web::Json<GroupUpdate>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(HttpResponse::Ok().json(
        service::groups::update(
            &state,
            &caller.0,
            &proof,
            id.into_inner(),
            body.into_inner(),
        )
        .await?,
    ))
}

/// Delete an empty executor group (admin).
#[utoipa::path(delete, path = "/api/v1/groups/{id}", tag = "groups", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 204), (status = 409, body = ErrorBody)))]
pub async fn delete_group(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<GroupId>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    service::groups::delete(&state, &caller.0, &proof, id.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Registered agents of the groups you may see, one page at a time, filtered and sorted.
#[utoipa::path(get, path = "/api/v1/agents", tag = "agents", security(("bearer" = [])), params(AgentQuery),
    responses((status = 200, body = Paged<AgentView>), (status = 422, body = ErrorBody)))]
pub async fn list_agents(
    state: web::Data<AppState>,
    caller: ApiCaller,
    query: web::Query<AgentQuery>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::fleet::list(&state, &caller.0, query.into_inner()).await?))
}

/// The fleet at a glance: agents by group and status, versions, limits and connection modes in
/// use, and the agents that died in the last hour, in the groups you may see.
#[utoipa::path(get, path = "/api/v1/fleet", tag = "agents", security(("bearer" = [])),
    responses((status = 200, body = FleetView)))]
pub async fn fleet(state: web::Data<AppState>, caller: ApiCaller) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::fleet::summary(&state, &caller.0).await?))
}

/// Approve an agent (admin): it gets runs from now on.
#[utoipa::path(post, path = "/api/v1/agents/{id}/approve", tag = "agents", security(("bearer" = [])),
    responses((status = 200, body = AgentView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn approve_agent(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    decide_agent(&state, &caller, *id, Decision::Approve).await
}

/// Revoke an agent (admin): its heartbeats and results are refused and it gets no runs.
#[utoipa::path(post, path = "/api/v1/agents/{id}/revoke", tag = "agents", security(("bearer" = [])),
    responses((status = 200, body = AgentView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_agent(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    decide_agent(&state, &caller, *id, Decision::Revoke).await
}

/// Drain an agent (admin): it gets no new runs (routing, pulls and triggers naming it pass it
/// by); the runs it holds finish and report as usual. Heartbeats keep it listed.
#[utoipa::path(post, path = "/api/v1/agents/{id}/drain", tag = "agents", security(("bearer" = [])),
    responses((status = 200, body = AgentView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn drain_agent(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    decide_agent(&state, &caller, *id, Decision::Drain).await
}

/// Put a drained agent back in service (admin).
#[utoipa::path(post, path = "/api/v1/agents/{id}/undrain", tag = "agents", security(("bearer" = [])),
    responses((status = 200, body = AgentView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn undrain_agent(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    decide_agent(&state, &caller, *id, Decision::Undrain).await
}

/// Forget an agent (admin): its row and key go; it may enroll again.
#[utoipa::path(delete, path = "/api/v1/agents/{id}", tag = "agents", security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn forget_agent(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    decide_agent(&state, &caller, *id, Decision::Forget).await
}

async fn decide_agent(
    state: &AppState,
    caller: &ApiCaller,
    id: i64,
    decision: Decision,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(
        match service::agents::decide(state, &caller.0, &proof, id, decision).await? {
            Some(agent) => HttpResponse::Ok().json(agent),
            None => HttpResponse::NoContent().finish(),
        },
    )
}

/// List users (admin).
#[utoipa::path(get, path = "/api/v1/users", tag = "users", security(("bearer" = [])), params(PageQuery),
    responses((status = 200, body = Paged<UserView>), (status = 403, body = ErrorBody)))]
pub async fn list_users(
    state: web::Data<AppState>,
    caller: ApiCaller,
    q: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    let page = Page::new(q.limit, q.offset)?;
    Ok(HttpResponse::Ok().json(service::users::list(&state, &proof, page).await?))
}

/// Create a user (admin).
#[utoipa::path(post, path = "/api/v1/users", tag = "users", security(("bearer" = [])), request_body = NewUserRequest,
    responses((status = 201, body = UserView), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_user(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<NewUserRequest>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(HttpResponse::Created()
        .json(service::users::create(&state, &caller.0, &proof, body.into_inner()).await?))
}

/// Read a user (admin, or yourself).
#[utoipa::path(get, path = "/api/v1/users/{id}", tag = "users", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = UserView), (status = 403, body = ErrorBody)))]
pub async fn get_user(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::users::get(&state, &caller.0, id.into_inner()).await?))
}

/// Change a user's role, group grants or disabled flag (admin).
#[utoipa::path(patch, path = "/api/v1/users/{id}", tag = "users", security(("bearer" = [])), request_body = UserUpdate,
    params(("id" = i64, Path)), responses((status = 200, body = UserView), (status = 409, body = ErrorBody)))]
pub async fn update_user(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
    body: web::Json<UserUpdate>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(HttpResponse::Ok().json(
        service::users::update(
            &state,
            &caller.0,
            &proof,
            id.into_inner(),
            body.into_inner(),
        )
        .await?,
    ))
}

/// Reset a user's password (admin); their existing JWTs stop working.
#[utoipa::path(post, path = "/api/v1/users/{id}/password", tag = "users", security(("bearer" = [])), request_body = PasswordReset,
    params(("id" = i64, Path)), responses((status = 204), (status = 422, body = ErrorBody)))]
pub async fn reset_password(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
    body: web::Json<PasswordReset>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    service::users::reset_password(
        &state,
        &caller.0,
        &proof,
        id.into_inner(),
        body.into_inner(),
    )
    .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Your API tokens (admins: everyone's).
#[utoipa::path(get, path = "/api/v1/tokens", tag = "tokens", security(("bearer" = [])), responses((status = 200, body = Vec<TokenView>)))]
pub async fn list_tokens(state: web::Data<AppState>, caller: ApiCaller) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::tokens::list(&state, &caller.0).await?))
}

/// Create an API token; the secret is in this response only.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "tokens", security(("bearer" = [])), request_body = NewTokenRequest,
    responses((status = 201, body = CreatedToken), (status = 422, body = ErrorBody)))]
pub async fn create_token(
    state: web::Data<AppState>,
    caller: ApiCaller,
    body: web::Json<NewTokenRequest>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Created()
        .json(service::tokens::create(&state, &caller.0, body.into_inner()).await?))
}

/// Revoke an API token; it stops working at once.
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "tokens", security(("bearer" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = TokenView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    state: web::Data<AppState>,
    caller: ApiCaller,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(service::tokens::revoke(&state, &caller.0, id.into_inner()).await?))
}

/// The audit log, newest first (admin).
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", security(("bearer" = [])), params(AuditQuery),
    responses((status = 200, body = Paged<AuditView>), (status = 403, body = ErrorBody)))]
pub async fn list_audit(
    state: web::Data<AppState>,
    caller: ApiCaller,
    q: web::Query<AuditQuery>,
) -> ApiResult<HttpResponse> {
    let proof = caller.0.require_admin()?;
    Ok(HttpResponse::Ok().json(service::audit::list(&state, &proof, q.into_inner()).await?))
}
