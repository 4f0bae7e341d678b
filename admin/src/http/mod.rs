//! The route table and the request middleware (request id, access log, security headers, the
//! open API's rate limit in `api_limit`), plus the extractor configuration that turns
//! malformed input into the API's JSON errors (the reading of requests themselves is in
//! `request`, a leaf handlers import).

pub mod api_limit;
pub mod request;

use std::time::Instant;

use actix_web::dev::Service;
use actix_web::http::header::{HeaderName, HeaderValue};

use actix_web::middleware::DefaultHeaders;
use actix_web::{HttpMessage, HttpResponse, web};
use futures_util::FutureExt;
use request::{RequestId, accept_request_id, json_error, query_error};

use crate::api;
use crate::auth::random_token;
use crate::error::{ApiError, Error};
use crate::state::AppState;

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
                .configure(crate::agent_link::configure)
                .configure(crate::cluster_relay::configure)
                .configure(crate::assets::configure)
                .configure(crate::web::configure)
                .service(
                    web::scope("/api/v1")
                        .wrap(actix_web::middleware::from_fn(api_limit::limit))
                        .configure(api::configure)
                        .default_service(web::to(api_not_found)),
                ),
        );
}
