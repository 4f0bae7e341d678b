//! The route table and the request middleware (request id, access log, security headers), plus
//! the extractor configuration that turns malformed input into the API's JSON errors.

use std::time::Instant;

use actix_web::dev::Service;
use actix_web::error::{JsonPayloadError, QueryPayloadError};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::DefaultHeaders;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use futures_util::FutureExt;

use crate::api;
use crate::auth::random_token;
use crate::error::{ApiError, Code, Error};
use crate::startup::AppState;

/// The id of the current request, echoed in `X-Request-Id` and written into audit rows.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub fn request_id(req: &HttpRequest) -> String {
    req.extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default()
}

/// The peer address; proxies' forwarding headers are not trusted.
pub fn client_ip(req: &HttpRequest) -> String {
    req.peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn accept_request_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    (!text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
    .then(|| text.to_owned())
}

/// Pulls the field out of serde's "unknown field `x`" / "missing field `x`" messages.
fn serde_field(message: &str) -> Option<String> {
    for marker in ["unknown field `", "missing field `"] {
        if let Some(rest) = message.split(marker).nth(1) {
            return rest.split('`').next().map(str::to_owned);
        }
    }
    None
}

fn json_error(err: JsonPayloadError) -> Error {
    match err {
        JsonPayloadError::OverflowKnownLength { limit, .. }
        | JsonPayloadError::Overflow { limit } => Error::Invalid {
            code: Code::PayloadTooLarge,
            field: None,
            message: format!("the request body is larger than {limit} bytes"),
        },
        JsonPayloadError::ContentType => Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: "expected a JSON body with Content-Type: application/json".into(),
        },
        JsonPayloadError::Deserialize(e) if e.is_data() => {
            let message = e.to_string();
            Error::Invalid {
                code: Code::InvalidField,
                field: serde_field(&message),
                message,
            }
        }
        JsonPayloadError::Deserialize(e) => Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: format!("malformed JSON: {e}"),
        },
        other => Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: format!("unreadable body: {other}"),
        },
    }
}

/// The error for a JSON body parsed by hand (where an empty body is allowed).
pub fn body_error(e: serde_json::Error) -> Error {
    json_error(JsonPayloadError::Deserialize(e))
}

fn query_error(err: QueryPayloadError) -> Error {
    let message = match &err {
        QueryPayloadError::Deserialize(e) => e.to_string(),
        other => other.to_string(),
    };
    Error::Invalid {
        code: Code::InvalidField,
        field: serde_field(&message),
        message: format!("bad query string: {message}"),
    }
}

async fn api_not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError(Error::NotFound("API endpoint")))
}

/// Registers every route and the middleware on `cfg`.
pub fn configure(cfg: &mut web::ServiceConfig, state: web::Data<AppState>) {
    let max_body = state.config.max_body_bytes;
    cfg.app_data(state)
        .app_data(web::JsonConfig::default().limit(max_body).error_handler(|err, _| ApiError(json_error(err)).into()))
        .app_data(web::QueryConfig::default().error_handler(|err, _| ApiError(query_error(err)).into()))
        .app_data(
            web::PathConfig::default().error_handler(|_, _| ApiError(Error::NotFound("resource (the id in the path is not a number)")).into()),
        )
        .app_data(web::PayloadConfig::default().limit(max_body))
        .service(
            web::scope("")
                .wrap(
                    DefaultHeaders::new()
                        .add(("X-Content-Type-Options", "nosniff"))
                        .add(("X-Frame-Options", "DENY"))
                        .add(("Referrer-Policy", "no-referrer")),
                )
                .wrap_fn(|req, srv| {
                    let id = req.headers().get("x-request-id").and_then(accept_request_id).unwrap_or_else(|| random_token(16));
                    req.extensions_mut().insert(RequestId(id.clone()));
                    let started = Instant::now();
                    let method = req.method().to_string();
                    let path = req.path().to_owned();
                    srv.call(req).map(move |result| {
                        let mut res = result?;
                        if let Ok(value) = HeaderValue::from_str(&id) {
                            res.headers_mut().insert(HeaderName::from_static("x-request-id"), value);
                        }
                        let status = res.status().as_u16();
                        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
                        match res.response().error() {
                            Some(err) if status >= 500 => {
                                tracing::error!(request_id = %id, %method, %path, status, elapsed_ms, error = %err, "Request failed")
                            }
                            _ => tracing::debug!(request_id = %id, %method, %path, status, elapsed_ms, "Request"),
                        }
                        Ok(res)
                    })
                })
                .route("/healthz", web::get().to(api::meta::healthz))
                .route("/readyz", web::get().to(api::meta::readyz))
                .route("/metrics", web::get().to(api::meta::metrics))
                .configure(api::docs::configure)
                .configure(crate::rpc::configure)
                .configure(crate::assets::configure)
                .configure(crate::web::configure)
                .service(web::scope("/api/v1").configure(api::configure).default_service(web::to(api_not_found))),
        );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_name_their_field() {
        assert_eq!(
            serde_field("unknown field `colour`, expected one of `a`"),
            Some("colour".into())
        );
        assert_eq!(
            serde_field("missing field `name` at line 1 column 2"),
            Some("name".into())
        );
        assert_eq!(serde_field("invalid type: string"), None);
    }

    #[test]
    fn only_sane_request_ids_are_echoed() {
        assert!(accept_request_id(&HeaderValue::from_static("abc-123")).is_some());
        assert!(accept_request_id(&HeaderValue::from_static("a b")).is_none());
    }
}
