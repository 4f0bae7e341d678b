//! Endpoints agents call (`/api/registry`, `/api/registryRemove`, `/api/callback`), speaking
//! XXL-Job's envelope: HTTP 200 with `code` 200 or 500, and the access-token header. A jobfleet
//! agent also sends its own key (`X-Jobfleet-Agent-Key`): the shared token lets a caller enroll,
//! the key says which agent it is (see `service::agents`).

use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;
use jobfleet_agent::protocol::{
    ACCESS_TOKEN_HEADER, AGENT_KEY_HEADER, Envelope, HandleCallbackParam, RegistryParam,
    WRONG_TOKEN_MSG,
};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::state::AppState;
use crate::{callback, service};

/// The RPC rendering of an outcome: the envelope, with causes hidden as in the open API.
fn reply(result: Result<(), Error>) -> HttpResponse {
    match result {
        Ok(()) => HttpResponse::Ok().json(Envelope::<()>::success()),
        Err(e) => {
            if matches!(e, Error::Internal(_) | Error::Contended(_)) {
                tracing::error!(error = ?e, "Agent call failed");
            }
            // The envelope has no field of its own: a refused field is named in the message.
            let message = match &e {
                Error::Invalid {
                    field: Some(field),
                    message,
                    ..
                } => format!("{field}: {message}"),
                other => other.public_message(),
            };
            HttpResponse::Ok().json(Envelope::<()>::fail(message))
        }
    }
}

/// A checked call: the shared token matched; the agent key, if one was sent.
struct Call<T> {
    body: T,
    key: Option<String>,
}

/// Reads at most `limit` bytes: a bigger body is refused with the envelope (XXL-Job peers
/// read a failure from `code`, not from a plain-text 413), without buffering the rest.
pub(crate) async fn read_body(
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::BytesMut, Error> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| Error::invalid("body", format!("unreadable body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(Error::Invalid {
                code: crate::error::Code::PayloadTooLarge,
                field: None,
                message: format!("the body is larger than {limit} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn accept<T: DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<Call<T>, Error> {
    let given = req
        .headers()
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !crate::auth::csrf::matches(&state.access_token, given) {
        return Err(Error::Unauthenticated(WRONG_TOKEN_MSG.into()));
    }
    let key = match req.headers().get(AGENT_KEY_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| Error::invalid(AGENT_KEY_HEADER, "not printable ASCII"))?
                .to_owned(),
        ),
    };
    let body = read_body(payload, state.config.max_body_bytes).await?;
    let body = serde_json::from_slice(&body)
        .map_err(|e| Error::invalid("body", format!("malformed request: {e}")))?;
    Ok(Call { body, key })
}

async fn registry(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = match accept::<RegistryParam>(&state, &req, payload).await {
        Ok(call) => service::agents::register(&state, call.body, call.key.as_deref())
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    reply(result)
}

async fn registry_remove(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = match accept::<RegistryParam>(&state, &req, payload).await {
        Ok(call) => service::agents::deregister(&state, call.body, call.key.as_deref()).await,
        Err(e) => Err(e),
    };
    reply(result)
}

async fn callback(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let result = match accept::<Vec<HandleCallbackParam>>(&state, &req, payload).await {
        Ok(call) => callback::accept(&state, call.body, call.key.as_deref())
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    reply(result)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/api/registry", web::post().to(registry))
        .route("/api/registryRemove", web::post().to(registry_remove))
        .route("/api/callback", web::post().to(callback));
}
