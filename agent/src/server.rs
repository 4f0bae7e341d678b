//! The executor endpoints the admin calls over HTTP: `beat`, `idleBeat`, `run`, `kill`, `log`,
//! `held`, and jobfleet's `runBatch`. Each checks the access token (in constant time), reads the body within the size cap
//! and hands it to `handlers`, which the agent's own connection uses too. Every answer is
//! XXL-Job's envelope with HTTP 200, as XXL-Job peers expect — a body over the size cap too:
//! XXL-Job's admin turns any status but 200 into "remoting fail, StatusCode(413)" and drops our
//! message, so the envelope says why.

use actix_web::{HttpRequest, HttpResponse, web};

use crate::handlers::{Handlers, MAX_BODY_BYTES, too_large};
use crate::protocol::{
    ACCESS_TOKEN_HEADER, Call, Envelope, RawEnvelope, WRONG_TOKEN_MSG, agent_path,
};

fn reply(envelope: RawEnvelope) -> HttpResponse {
    HttpResponse::Ok().json(envelope)
}

/// The request body, or the envelope saying it is over `MAX_BODY_BYTES` (never more than
/// that is held in memory).
async fn body(req: &HttpRequest, payload: web::Payload) -> Result<web::Bytes, RawEnvelope> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(too_large());
    }
    match payload.to_bytes_limited(MAX_BODY_BYTES).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(Envelope::fail(format!("cannot read the request body: {e}"))),
        Err(_) => Err(too_large()),
    }
}

/// One endpoint: token, body, then the transport-neutral handler.
async fn serve(
    call: Call,
    handlers: web::Data<Handlers>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let given = req
        .headers()
        .get(ACCESS_TOKEN_HEADER)
        .map_or(&b""[..], |v| v.as_bytes());
    if !handlers.token_matches(given) {
        return reply(Envelope::fail(WRONG_TOKEN_MSG));
    }
    match body(&req, payload).await {
        Ok(body) => reply(handlers.handle(&call, &body).await),
        Err(refusal) => reply(refusal),
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    let routes = [
        (agent_path::BEAT, Call::Beat),
        (agent_path::IDLE_BEAT, Call::IdleBeat),
        (agent_path::RUN, Call::Run),
        (agent_path::KILL, Call::Kill),
        (agent_path::LOG, Call::Log),
        (agent_path::HELD, Call::Held),
        (agent_path::RUN_BATCH, Call::RunBatch),
    ];
    for (path, call) in routes {
        cfg.route(
            &format!("/{path}"),
            web::post().to(
                move |handlers: web::Data<Handlers>, req: HttpRequest, payload: web::Payload| {
                    serve(call.clone(), handlers, req, payload)
                },
            ),
        );
    }
    cfg.default_service(web::to(|| async {
        reply(Envelope::fail(
            "unknown path; this is a jobfleet agent (beat, idleBeat, run, kill, log, held, runBatch)",
        ))
    }));
}
