//! The executor endpoints the admin calls: `beat`, `idleBeat`, `run`, `kill`, `log`. Each checks
//! the access token (in constant time) and answers in XXL-Job's envelope with HTTP 200, as
//! XXL-Job peers expect — a body over the size cap too: XXL-Job's admin turns any status but
//! 200 into "remoting fail, StatusCode(413)" and drops our message, so the envelope says why.

use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::de::DeserializeOwned;

use crate::logs::Logs;
use crate::protocol::{
    ACCESS_TOKEN_HEADER, CODE_OK, Envelope, HeldRuns, JobIdParam, LogParam, RunAccepted,
    TriggerParam, WRONG_TOKEN_MSG, agent_path,
};
use crate::runner::Runner;

pub struct ServerState {
    pub runner: Arc<Runner>,
    pub logs: Logs,
    pub token: String,
    /// This process's id, told to the admin with every accepted run.
    pub instance_id: String,
}

/// Request bodies beyond this are refused (a script source is at most 1 MiB).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

fn reply<T: serde::Serialize + Clone>(envelope: Envelope<T>) -> HttpResponse {
    HttpResponse::Ok().json(envelope)
}

fn fail(msg: impl Into<String>) -> HttpResponse {
    reply(Envelope::<()>::fail(msg))
}

/// Compares two byte strings in time that depends on their lengths only, not on where they
/// first differ, so the token cannot be guessed byte by byte from response times.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

/// Checks the token and parses the body; the error is the message to fail with.
fn accept<T: DeserializeOwned>(
    state: &ServerState,
    req: &HttpRequest,
    body: &[u8],
) -> Result<T, String> {
    let given = req
        .headers()
        .get(ACCESS_TOKEN_HEADER)
        .map_or(&b""[..], |v| v.as_bytes());
    if !constant_time_eq(given, state.token.as_bytes()) {
        return Err(WRONG_TOKEN_MSG.to_owned());
    }
    serde_json::from_slice(body).map_err(|e| format!("malformed request: {e}"))
}

/// Reads the body, checks the token and parses it: the one way every endpoint with a body
/// takes its input; the error is the envelope to answer with.
async fn read<T: DeserializeOwned>(
    state: &ServerState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, HttpResponse> {
    let body = body(req, payload).await?;
    accept(state, req, &body).map_err(fail)
}

/// The request body, or the envelope saying it is over `MAX_BODY_BYTES` (never more than
/// that is held in memory).
async fn body(req: &HttpRequest, payload: web::Payload) -> Result<web::Bytes, HttpResponse> {
    let too_large = || {
        fail(format!(
            "request body is larger than {MAX_BODY_BYTES} bytes"
        ))
    };
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
        Ok(Err(e)) => Err(fail(format!("cannot read the request body: {e}"))),
        Err(_) => Err(too_large()),
    }
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
    payload: web::Payload,
) -> HttpResponse {
    match read::<JobIdParam>(&state, &req, payload).await {
        Ok(p) if state.runner.job_busy(p.job_id) => {
            fail("job thread is running or has trigger queue.")
        }
        Ok(_) => reply(Envelope::<()>::success()),
        Err(answer) => answer,
    }
}

async fn run(
    state: web::Data<ServerState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let received = std::time::Instant::now();
    let trigger: TriggerParam = match read(&state, &req, payload).await {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let run_id = trigger.log_id;
    match state.runner.submit(trigger, received) {
        Ok(accepted) => {
            // "Accepted" is said only once the acceptance is on disk: a repeat after a crash
            // then finds it in the journal instead of running the job again.
            if let Some(landed) = accepted.landed
                && !landed.wait().await
            {
                return fail(
                    "the agent could not record the trigger durably (its accept journal is unwritable)",
                );
            }
            let (msg, seq) = (accepted.message, accepted.seq);
            let taken_by = RunAccepted {
                instance_id: state.instance_id.clone(),
                seq,
            };
            reply(Envelope {
                code: CODE_OK,
                msg: Some(msg),
                content: Some(taken_by.clone()),
                data: Some(taken_by),
            })
        }
        Err(msg) => {
            tracing::info!(run_id, reason = %msg, "Trigger rejected");
            fail(msg)
        }
    }
}

async fn kill(
    state: web::Data<ServerState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    match read::<JobIdParam>(&state, &req, payload).await {
        Ok(p) => {
            let msg = if state.runner.kill_job(p.job_id) {
                "killed"
            } else {
                "job thread already killed."
            };
            reply(Envelope {
                code: CODE_OK,
                msg: Some(msg.to_owned()),
                content: None::<()>,
                data: None,
            })
        }
        Err(answer) => answer,
    }
}

async fn log(
    state: web::Data<ServerState>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let param: LogParam = match read(&state, &req, payload).await {
        Ok(p) => p,
        Err(answer) => return answer,
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

/// The runs held here, for an admin that must know before it sends a run again.
async fn held(state: web::Data<ServerState>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let body: &[u8] = if body.is_empty() { b"null" } else { &body };
    match accept::<serde_json::Value>(&state, &req, body) {
        Ok(_) => {
            let (held_runs, accepted_through) = state.runner.held();
            reply(Envelope::ok(HeldRuns {
                instance_id: state.instance_id.clone(),
                held_runs,
                accepted_through,
            }))
        }
        Err(msg) => fail(msg),
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(&format!("/{}", agent_path::BEAT), web::post().to(beat))
        .route(
            &format!("/{}", agent_path::IDLE_BEAT),
            web::post().to(idle_beat),
        )
        .route(&format!("/{}", agent_path::RUN), web::post().to(run))
        .route(&format!("/{}", agent_path::KILL), web::post().to(kill))
        .route(&format!("/{}", agent_path::LOG), web::post().to(log))
        .route(&format!("/{}", agent_path::HELD), web::post().to(held))
        .default_service(web::to(|| async {
            fail("unknown path; this is a jobfleet agent (beat, idleBeat, run, kill, log, held)")
        }));
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"test-agent-token", b"test-agent-token"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"test-agent-token", b"test-agent-tokeN"));
        assert!(!constant_time_eq(b"Test-agent-token", b"test-agent-token"));
        assert!(!constant_time_eq(b"test-agent-token", b"test-agent-token-"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
