//! Endpoints agents call (`/api/registry`, `/api/registryRemove`, `/api/callback`), speaking
//! XXL-Job's envelope: HTTP 200 with `code` 200 or 500, and the access-token header.

use actix_web::{HttpRequest, HttpResponse, web};
use jobfleet_agent::protocol::{
    ACCESS_TOKEN_HEADER, Envelope, HandleCallbackParam, RegistryParam, WRONG_TOKEN_MSG,
};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::startup::AppState;
use crate::{callback, service};

/// The RPC rendering of an outcome: the envelope, with causes hidden as in the open API.
fn reply(result: Result<(), Error>) -> HttpResponse {
    match result {
        Ok(()) => HttpResponse::Ok().json(Envelope::<()>::success()),
        Err(e) => {
            if matches!(e, Error::Internal(_)) {
                tracing::error!(error = ?e, "Agent call failed");
            }
            HttpResponse::Ok().json(Envelope::<()>::fail(e.public_message()))
        }
    }
}

fn accept<T: DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    body: &[u8],
) -> Result<T, Error> {
    let given = req
        .headers()
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok());
    if given != Some(state.access_token.as_str()) {
        return Err(Error::Unauthenticated(WRONG_TOKEN_MSG.into()));
    }
    serde_json::from_slice(body)
        .map_err(|e| Error::invalid("body", format!("malformed request: {e}")))
}

async fn registry(state: web::Data<AppState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let result = match accept::<RegistryParam>(&state, &req, &body) {
        Ok(param) => service::agents::register(&state, param).await,
        Err(e) => Err(e),
    };
    reply(result)
}

async fn registry_remove(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let result = match accept::<RegistryParam>(&state, &req, &body) {
        Ok(param) => service::agents::deregister(&state, param).await,
        Err(e) => Err(e),
    };
    reply(result)
}

async fn callback(state: web::Data<AppState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let result = match accept::<Vec<HandleCallbackParam>>(&state, &req, &body) {
        Ok(batch) => callback::accept(&state, batch).await.map(|_| ()),
        Err(e) => Err(e),
    };
    reply(result)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/api/registry", web::post().to(registry))
        .route("/api/registryRemove", web::post().to(registry_remove))
        .route("/api/callback", web::post().to(callback));
}
