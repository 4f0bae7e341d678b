//! The executor endpoints the admin calls: `beat`, `idleBeat`, `run`, `kill`, `log`. Each checks
//! the access token and answers in XXL-Job's envelope with HTTP 200, as XXL-Job peers expect.

use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::de::DeserializeOwned;

use crate::logs::Logs;
use crate::protocol::{
    ACCESS_TOKEN_HEADER, Envelope, JobIdParam, LogParam, TriggerParam, WRONG_TOKEN_MSG, agent_path,
};
use crate::runner::Runner;

pub struct ServerState {
    pub runner: Arc<Runner>,
    pub logs: Logs,
    pub token: Option<String>,
}

/// Request bodies beyond this are refused (a script source is at most 1 MiB).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

fn reply<T: serde::Serialize + Clone>(envelope: Envelope<T>) -> HttpResponse {
    HttpResponse::Ok().json(envelope)
}

fn fail(msg: impl Into<String>) -> HttpResponse {
    reply(Envelope::<()>::fail(msg))
}

/// Checks the token and parses the body; the error is the message to fail with.
fn accept<T: DeserializeOwned>(
    state: &ServerState,
    req: &HttpRequest,
    body: &[u8],
) -> Result<T, String> {
    if let Some(expected) = &state.token {
        let given = req
            .headers()
            .get(ACCESS_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) {
            return Err(WRONG_TOKEN_MSG.to_owned());
        }
    }
    serde_json::from_slice(body).map_err(|e| format!("malformed request: {e}"))
}

async fn beat(state: web::Data<ServerState>, req: HttpRequest) -> HttpResponse {
    match accept::<serde_json::Value>(&state, &req, b"null") {
        Ok(_) => reply(Envelope::<()>::success()),
        Err(msg) => fail(msg),
    }
}

async fn idle_beat(
    state: web::Data<ServerState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    match accept::<JobIdParam>(&state, &req, &body) {
        Ok(p) if state.runner.job_busy(p.job_id) => {
            fail("job thread is running or has trigger queue.")
        }
        Ok(_) => reply(Envelope::<()>::success()),
        Err(msg) => fail(msg),
    }
}

async fn run(state: web::Data<ServerState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let received = std::time::Instant::now();
    let trigger: TriggerParam = match accept(&state, &req, &body) {
        Ok(t) => t,
        Err(msg) => return fail(msg),
    };
    let run_id = trigger.log_id;
    match state.runner.submit(trigger, received) {
        Ok(msg) => reply(Envelope {
            code: 200,
            msg: Some(msg),
            content: None::<()>,
            data: None,
        }),
        Err(msg) => {
            tracing::info!(run_id, reason = %msg, "Trigger rejected");
            fail(msg)
        }
    }
}

async fn kill(state: web::Data<ServerState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    match accept::<JobIdParam>(&state, &req, &body) {
        Ok(p) => {
            let msg = if state.runner.kill_job(p.job_id) {
                "killed"
            } else {
                "job thread already killed."
            };
            reply(Envelope {
                code: 200,
                msg: Some(msg.to_owned()),
                content: None::<()>,
                data: None,
            })
        }
        Err(msg) => fail(msg),
    }
}

async fn log(state: web::Data<ServerState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let param: LogParam = match accept(&state, &req, &body) {
        Ok(p) => p,
        Err(msg) => return fail(msg),
    };
    let finished = !state.runner.run_live(param.log_id);
    match state.logs.read(
        param.log_id,
        param.log_date_tim,
        param.from_line_num,
        finished,
    ) {
        Ok(result) => reply(Envelope::ok(result)),
        Err(msg) => fail(msg),
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.app_data(web::PayloadConfig::default().limit(MAX_BODY_BYTES))
        .route(&format!("/{}", agent_path::BEAT), web::post().to(beat))
        .route(
            &format!("/{}", agent_path::IDLE_BEAT),
            web::post().to(idle_beat),
        )
        .route(&format!("/{}", agent_path::RUN), web::post().to(run))
        .route(&format!("/{}", agent_path::KILL), web::post().to(kill))
        .route(&format!("/{}", agent_path::LOG), web::post().to(log))
        .default_service(web::to(|| async {
            fail("unknown path; this is a jobfleet agent (beat, idleBeat, run, kill, log)")
        }));
}
