//! The actix extractor for open API callers (`Authorization: Bearer <JWT or API token>`), and
//! the bounded body reader of the surfaces that take a password without a session.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use futures_util::StreamExt;

use crate::auth::rbac::Actor;
use crate::error::{ApiError, Code, Error};
use crate::http::request::{client_ip, request_id};
use crate::service;
use crate::state::AppState;

/// An authenticated open API caller.
#[derive(Debug, Clone)]
pub struct ApiCaller(pub Actor);

/// A request's caller as the open API's limiter resolved it (`http::api_limit`), kept in the
/// request's extensions so the extractor does not look the credential up a second time.
#[derive(Debug)]
pub struct ResolvedCaller(pub Result<Actor, Error>);

/// Resolves the request's `Authorization: Bearer` credential (a JWT or an API token) into its
/// actor. The future owns what it needs of the request.
///
/// # Errors
/// `Unauthenticated` for a missing, malformed, expired, revoked or unknown credential;
/// database errors.
pub fn resolve_caller(req: &HttpRequest) -> impl Future<Output = Result<Actor, Error>> + 'static {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().map(str::to_owned));
    let ip = client_ip(req);
    let rid = request_id(req);
    async move {
        let state = state.ok_or_else(|| Error::Internal(anyhow::anyhow!("app state missing")))?;
        let header = match header {
            None => {
                return Err(Error::Unauthenticated(
                    "missing Authorization: Bearer token".into(),
                ));
            }
            Some(Err(_)) => {
                return Err(Error::Unauthenticated(
                    "the Authorization header is not valid text".into(),
                ));
            }
            Some(Ok(h)) => h,
        };
        let bearer = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 4096)
            .ok_or_else(|| {
                Error::Unauthenticated("expected Authorization: Bearer <token>".into())
            })?;
        service::auth::resolve_bearer(&state, bearer, ip, rid).await
    }
}

impl FromRequest for ApiCaller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        if let Some(ResolvedCaller(resolved)) = req.extensions_mut().remove::<ResolvedCaller>() {
            return Box::pin(std::future::ready(
                resolved.map(ApiCaller).map_err(ApiError),
            ));
        }
        let resolving = resolve_caller(req);
        Box::pin(async move { Ok(ApiCaller(resolving.await?)) })
    }
}

/// The largest body of a login request (API or console): a name, a password, a CSRF token
/// and a return path fit in far less.
pub const LOGIN_BODY_LIMIT: usize = 8 * 1024;

/// Reads a body of at most `limit` bytes, before anything else looks at it. A longer one is
/// refused with 413 without being kept: it is read on and dropped up to `drain_limit` bytes
/// (the server's `max_body_bytes`), so the client gets the answer rather than a reset
/// connection; past that the connection is closed.
///
/// # Errors
/// `payload_too_large`, or `invalid_json` when the body cannot be read.
pub async fn bounded_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
    drain_limit: usize,
) -> Result<web::Bytes, Error> {
    let too_large = || Error::Invalid {
        code: Code::PayloadTooLarge,
        field: None,
        message: format!("the request body is larger than {limit} bytes"),
    };
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > drain_limit) {
        return Err(too_large());
    }
    let mut body = web::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: format!("unreadable body: {e}"),
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen > drain_limit {
            return Err(too_large());
        }
        if seen <= limit {
            body.extend_from_slice(&chunk);
        }
    }
    if seen > limit {
        return Err(too_large());
    }
    Ok(body.freeze())
}
