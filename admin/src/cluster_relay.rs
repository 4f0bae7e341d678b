//! `POST /api/cluster/relay`: another admin's call for an agent connected to this one (the
//! cluster relay, see `dispatch::relay`). Answers 200 with the agent's own reply envelope; 409
//! when the agent is not connected here (the caller looks the holder up again), 504 when the
//! agent did not reply in time, 401 without a relay token of this cluster, 400 for a body that
//! is not a relay call. Never relays further: one hop, no loops.

use actix_web::{HttpRequest, HttpResponse, web};
use jobfleet_agent::protocol::{Envelope, MAX_FRAME_BYTES};

use crate::dispatch::client::HereError;
use crate::dispatch::relay::{RELAY_PATH, RelayCall};
use crate::state::AppState;

fn refuse(status: actix_web::http::StatusCode, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(Envelope::<()>::fail(message.into()))
}

async fn relay(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let token = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let now_ms = crate::dispatch::relay::system_now_ms();
    if !state
        .agents
        .relay()
        .is_some_and(|relay| relay.keys.verify(token, now_ms))
    {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "not a relay token of this cluster (the admins must share jwt_secret)",
        );
    }
    // A trigger carries a script of up to 1 MiB; the agent's own frame cap bounds the call.
    let body = match crate::rpc::read_body(payload, MAX_FRAME_BYTES).await {
        Ok(body) => body,
        Err(e) => return refuse(e.code().status(), e.public_message()),
    };
    let call: RelayCall = match serde_json::from_slice(&body) {
        Ok(call) => call,
        Err(e) => {
            return refuse(StatusCode::BAD_REQUEST, format!("not a relay call: {e}"));
        }
    };
    if !call.call.is_down() {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("`{}` is not a call an agent serves", call.call),
        );
    }
    let wait = std::time::Duration::from_millis(call.timeout_ms).min(state.config.trigger_timeout);
    let deadline = tokio::time::Instant::now() + wait;
    match state
        .agents
        .call_here(&call.address, &call.call, &call.body, deadline)
        .await
    {
        Ok(reply) => HttpResponse::Ok().json(reply),
        Err(HereError::NotHere) => refuse(
            StatusCode::CONFLICT,
            "the agent is not connected to this admin",
        ),
        Err(HereError::TimedOut) => refuse(
            StatusCode::GATEWAY_TIMEOUT,
            "no reply over the agent's connection in time",
        ),
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(RELAY_PATH, web::post().to(relay));
}
