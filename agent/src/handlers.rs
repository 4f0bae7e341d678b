//! The agent's calls, whatever carried them: `beat`, `idleBeat`, `run`, `kill`, `log`, `held`,
//! and `runBatch` (a jobfleet admin's runs of one take, sent ahead of their time: over the
//! agent's own connection, or by HTTP to an agent the admin dials).
//! Bytes in, XXL-Job envelope out. The HTTP server (`server.rs`) and the agent's own
//! connection to an admin (`link.rs`) both call `handle`, so the size and parse rules — and
//! what each call does — are one code path. The access token is checked by the transport that
//! carries the call: per request over HTTP (`token_matches`), once per connection over the link
//! (the agent dialled an admin it was configured with, and presented the token itself).

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::logs::Logs;
use crate::protocol::{
    CODE_OK, Call, Envelope, HeldRuns, JobIdParam, KillParam, LogParam, RawEnvelope, RunAccepted,
    TriggerParam,
};
use crate::runner::Runner;

pub struct Handlers {
    pub runner: Arc<Runner>,
    pub logs: Logs,
    pub token: String,
    /// This process's id, told to the admin with every accepted run.
    pub instance_id: String,
}

/// Request bodies beyond this are refused (a script source is at most 1 MiB).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

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

fn too_large_msg() -> String {
    format!("request body is larger than {MAX_BODY_BYTES} bytes")
}

/// The envelope saying a body is over `MAX_BODY_BYTES`.
pub fn too_large() -> RawEnvelope {
    Envelope::fail(too_large_msg())
}

/// The body as `T`; the error is the message to refuse with.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(too_large_msg());
    }
    // `beat` and `held` take no body; an empty one reads as null.
    let body: &[u8] = if body.is_empty() { b"null" } else { body };
    serde_json::from_slice(body).map_err(|e| format!("malformed request: {e}"))
}

impl Handlers {
    /// Whether `given` is the access token.
    pub fn token_matches(&self, given: &[u8]) -> bool {
        constant_time_eq(given, self.token.as_bytes())
    }

    /// Serves one call with its body; every failure is an envelope with code 500.
    pub async fn handle(&self, call: &Call, body: &[u8]) -> RawEnvelope {
        let result = match call {
            // XXL-Job admins post `beat` with whatever body; only the token matters.
            Call::Beat => Ok(Envelope::<()>::success().encoded()),
            Call::IdleBeat => parse::<JobIdParam>(body).map(|p| self.idle_beat(&p)),
            Call::Run => match parse::<TriggerParam>(body) {
                Ok(trigger) => Ok(self.run(trigger).await),
                Err(e) => Err(e),
            },
            Call::Kill => parse::<KillParam>(body).map(|p| self.kill(&p)),
            Call::Log => parse::<LogParam>(body).map(|p| self.log(&p)),
            Call::Held => parse::<serde::de::IgnoredAny>(body).map(|_| self.held()),
            Call::RunBatch => match parse::<Vec<TriggerParam>>(body) {
                Ok(triggers) => Ok(self.run_batch(triggers).await),
                Err(e) => Err(e),
            },
            other => Err(format!(
                "`{other}` is not a call this agent serves (beat, idleBeat, run, kill, log, held, runBatch)"
            )),
        };
        result.unwrap_or_else(Envelope::fail)
    }

    fn idle_beat(&self, p: &JobIdParam) -> RawEnvelope {
        if self.runner.job_busy(p.job_id) {
            Envelope::fail("job thread is running or has trigger queue.")
        } else {
            Envelope::<()>::success().encoded()
        }
    }

    async fn run(&self, trigger: TriggerParam) -> RawEnvelope {
        let received = std::time::Instant::now();
        let run_id = trigger.log_id;
        match self.runner.submit(trigger, received) {
            Ok(accepted) => {
                // "Accepted" is said only once the acceptance is on disk: a repeat after a crash
                // (or over a new connection) then finds it in the journal instead of running
                // the job again.
                if let Some(landed) = accepted.landed
                    && !landed.wait().await
                {
                    return Envelope::fail(
                        "the agent could not record the trigger durably (its accept journal is unwritable)",
                    );
                }
                let taken_by = RunAccepted {
                    instance_id: self.instance_id.clone(),
                    seq: accepted.seq,
                };
                RawEnvelope {
                    msg: Some(accepted.message),
                    ..RawEnvelope::ok_encoded(&taken_by.as_content())
                }
            }
            Err(msg) => {
                tracing::info!(run_id, reason = %msg, "Trigger rejected");
                Envelope::fail(msg)
            }
        }
    }

    /// Several triggers at once (the runs a `take` found): each is handled as its own `run`,
    /// all together, so their journal lines share fsyncs. The content is each one's `run`
    /// answer, in order, its payload in `content` only (only jobfleet admins send `runBatch`,
    /// and they read either field).
    async fn run_batch(&self, triggers: Vec<TriggerParam>) -> RawEnvelope {
        let answers: Vec<RawEnvelope> =
            futures_util::future::join_all(triggers.into_iter().map(|t| self.run(t)))
                .await
                .into_iter()
                .map(|answer| RawEnvelope {
                    data: None,
                    ..answer
                })
                .collect();
        Envelope {
            code: CODE_OK,
            msg: None,
            content: Some(answers),
            data: None,
        }
        .encoded()
    }

    fn kill(&self, p: &KillParam) -> RawEnvelope {
        let msg = match p.log_id {
            Some(run_id) if run_id <= 0 => {
                return Envelope::fail(format!("invalid logId {run_id}"));
            }
            Some(run_id) if self.runner.kill_run(p.job_id, run_id) => "killed".to_owned(),
            Some(run_id) => format!(
                "run {run_id} of job {} is not running or waiting here",
                p.job_id
            ),
            None if self.runner.kill_job(p.job_id) => "killed".to_owned(),
            None => "job thread already killed.".to_owned(),
        };
        Envelope {
            code: CODE_OK,
            msg: Some(msg),
            content: None,
            data: None,
        }
    }

    fn log(&self, param: &LogParam) -> RawEnvelope {
        let finished = !self.runner.run_live(param.log_id);
        match self.logs.read(
            param.log_id,
            param.log_date_tim,
            param.from_line_num,
            finished,
            self.runner.accepted_ms(param.log_id),
        ) {
            Ok(result) => RawEnvelope::ok_encoded(&result),
            Err(msg) => Envelope::fail(msg),
        }
    }

    /// The runs held here, for an admin that must know before it sends a run again.
    fn held(&self) -> RawEnvelope {
        let (held_runs, accepted_through) = self.runner.held();
        RawEnvelope::ok_encoded(&HeldRuns {
            instance_id: self.instance_id.clone(),
            held_runs,
            accepted_through,
        })
    }
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
