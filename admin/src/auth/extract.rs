//! The actix extractor for open API callers: `Authorization: Bearer <JWT or API token>`.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{FromRequest, HttpRequest, web};

use crate::auth::rbac::Actor;
use crate::error::{ApiError, Error};
use crate::http::{client_ip, request_id};
use crate::service;
use crate::startup::AppState;

/// An authenticated open API caller.
#[derive(Debug, Clone)]
pub struct ApiCaller(pub Actor);

impl FromRequest for ApiCaller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let header = req
            .headers()
            .get(AUTHORIZATION)
            .map(|v| v.to_str().map(str::to_owned));
        let ip = client_ip(req);
        let rid = request_id(req);
        Box::pin(async move {
            let state =
                state.ok_or_else(|| Error::Internal(anyhow::anyhow!("app state missing")))?;
            let header = match header {
                None => {
                    return Err(Error::Unauthenticated(
                        "missing Authorization: Bearer token".into(),
                    )
                    .into());
                }
                Some(Err(_)) => {
                    return Err(Error::Unauthenticated(
                        "the Authorization header is not valid text".into(),
                    )
                    .into());
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
            Ok(ApiCaller(
                service::auth::resolve_bearer(&state, bearer, ip, rid).await?,
            ))
        })
    }
}
