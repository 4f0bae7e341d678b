//! The open API's request limits (`auth::api_limit`) as middleware on the `/api/v1` scope: it
//! resolves the caller once (handing the result on to the `ApiCaller` extractor), decides the
//! request's class from its method and path, and refuses with 429 before the handler runs.
//! Every answer of a limited caller carries the `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers; a refusal also carries `Retry-After` and the API's
//! error body (`rate_limited`). The console and the agents' endpoints are outside the scope.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, ResponseError, web};

use crate::auth::api_limit::{Class, Subject, Verdict};
use crate::auth::extract::{ResolvedCaller, resolve_caller};
use crate::auth::rbac::ActorKind;
use crate::error::{ApiError, Code, Error};
use crate::http::request::client_ip;
use crate::state::AppState;

/// The class of an open API request, by its method and its path under `/api/v1`: the
/// requests that create jobs or workflows (submits) or may start runs are `Trigger`. A new
/// route that does either belongs in this list.
pub fn class_of(method: &Method, path: &str) -> Class {
    if method != Method::POST {
        return Class::General;
    }
    let rest = path.strip_prefix("/api/v1/").unwrap_or("");
    let segments: Vec<&str> = rest.split('/').collect();
    match segments.as_slice() {
        ["jobs" | "workflows" | "apply"]
        | ["jobs", "bulk"]
        | ["workflows", "import"]
        | ["jobs" | "workflows", _, "trigger"]
        | ["runs", _, "retry"]
        | ["workflow-runs", _, "rerun" | "resume"]
        | ["workflow-runs", _, "nodes", _, "mark"] => Class::Trigger,
        _ => Class::General,
    }
}

/// The middleware (`actix_web::middleware::from_fn`).
///
/// # Errors
/// Only the handler's own.
pub async fn limit(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let resolved = resolve_caller(req.request()).await;
    // A caller that could not be checked for a reason of ours (the database busy or away) is
    // not a stranger: charging its request to the anonymous bucket of its address would answer
    // a 429 for a 503 and use up the quota of everyone behind that address.
    if let Err(e) = &resolved
        && matches!(
            e.code(),
            Code::Unavailable | Code::Overloaded | Code::Internal
        )
    {
        req.extensions_mut().insert(ResolvedCaller(resolved));
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let ip = client_ip(req.request());
    let subject = match &resolved {
        Ok(actor) => match (&actor.kind, actor.user_id) {
            (ActorKind::Token { token_id }, _) => Subject::Token {
                id: *token_id,
                role: actor.role,
            },
            (ActorKind::User, Some(id)) => Subject::User {
                id,
                role: actor.role,
            },
            _ => Subject::Client(&ip),
        },
        Err(_) => Subject::Client(&ip),
    };
    let class = class_of(req.method(), req.path());
    let verdict = state
        .api_limiter
        .check(&subject, class, state.clock.now_ms());
    if let Some((limit, retry_after_s)) = verdict.refused {
        state
            .metrics
            .api_rate_limited
            .inc_pair(limit.as_str(), subject.role_label());
        let mut response = ApiError(Error::RequestLimited {
            limit: limit.as_str(),
            retry_after_s,
        })
        .error_response();
        add_fields(response.headers_mut(), &verdict);
        return Ok(req.into_response(response));
    }
    req.extensions_mut().insert(ResolvedCaller(resolved));
    let mut response = next.call(req).await?;
    add_fields(response.headers_mut(), &verdict);
    Ok(response.map_into_boxed_body())
}

fn add_fields(headers: &mut HeaderMap, verdict: &Verdict) {
    for (name, value) in [
        ("ratelimit-policy", verdict.policy_field()),
        ("ratelimit", verdict.limit_field()),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submits_and_triggers_are_their_own_class() {
        for (method, path) in [
            (Method::POST, "/api/v1/jobs"),
            (Method::POST, "/api/v1/jobs/bulk"),
            (Method::POST, "/api/v1/apply"),
            (Method::POST, "/api/v1/jobs/3/trigger"),
            (Method::POST, "/api/v1/runs/9/retry"),
            (Method::POST, "/api/v1/workflows"),
            (Method::POST, "/api/v1/workflows/import"),
            (Method::POST, "/api/v1/workflows/4/trigger"),
            (Method::POST, "/api/v1/workflow-runs/5/rerun"),
            (Method::POST, "/api/v1/workflow-runs/5/resume"),
            (Method::POST, "/api/v1/workflow-runs/5/nodes/a/mark"),
        ] {
            assert_eq!(class_of(&method, path), Class::Trigger, "{method} {path}");
        }
        for (method, path) in [
            (Method::GET, "/api/v1/jobs"),
            (Method::GET, "/api/v1/export"),
            (Method::PUT, "/api/v1/jobs/3"),
            (Method::POST, "/api/v1/jobs/3/enable"),
            (Method::POST, "/api/v1/runs/9/kill"),
            (Method::POST, "/api/v1/workflow-runs/5/cancel"),
            (Method::POST, "/api/v1/workflow-runs/5/pause"),
            (Method::POST, "/api/v1/auth/token"),
            (Method::POST, "/api/v1/groups"),
            (Method::POST, "/api/v1/jobs/"),
        ] {
            assert_eq!(class_of(&method, path), Class::General, "{method} {path}");
        }
    }
}
