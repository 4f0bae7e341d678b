//! Calls from the admin to agents, in protocol types only: over the agent's own connection
//! when it holds one to this admin (`link::Links`), else by HTTP to its address. A short
//! timeout: a trigger is a hand-off, not a wait for the job.
//!
//! Over a connection a call whose connection drops before the reply is sent again on the
//! agent's next connection (same body, so a trigger keeps its run id) until the timeout: the
//! agent's accept journal answers a repeated trigger as accepted without running it again, so a
//! trigger is delivered at most once per run whatever the connection does.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::ids::JobId;
use jobfleet_agent::protocol::{
    ACCESS_TOKEN_HEADER, CONNECT_SCHEME, Call, Envelope, HeldRuns, JobIdParam, LogParam, LogResult,
    RunAccepted, TriggerParam, agent_path,
};

use super::link::{LinkError, Links};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why an agent call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The agent answered and said no.
    Refused(String),
    /// No usable answer: connection refused, timeout, garbage.
    Unreachable(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Refused(m) => write!(f, "refused: {m}"),
            CallError::Unreachable(m) => write!(f, "unreachable: {m}"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AgentClient {
    http: reqwest::Client,
    token: String,
    timeout: Duration,
    /// The agents connected to this admin.
    pub links: Arc<Links>,
}

/// Whether `address` is a connect-mode agent's, reachable only over its connection.
pub fn is_connect_address(address: &str) -> bool {
    address
        .strip_prefix(CONNECT_SCHEME)
        .is_some_and(|rest| rest.starts_with("://"))
}

fn url(address: &str, path: &str) -> String {
    if address.ends_with('/') {
        format!("{address}{path}")
    } else {
        format!("{address}/{path}")
    }
}

/// A payload read as the type the call expects; garbage is an unusable answer.
fn typed<T: DeserializeOwned>(value: Option<serde_json::Value>) -> Result<Option<T>, CallError> {
    value
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| CallError::Unreachable(format!("not an executor answer: {e}")))
}

impl AgentClient {
    /// # Errors
    /// When the TLS backend cannot be initialised.
    pub fn new(token: String, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()?;
        Ok(Self {
            http,
            token,
            timeout,
            links: Arc::default(),
        })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<Envelope<T>, CallError> {
        let envelope = if self.links.get(address).is_some() || is_connect_address(address) {
            self.over_link::<B>(address, path, body).await?
        } else {
            self.over_http(address, path, body).await?
        };
        let envelope: Envelope<T> = Envelope {
            code: envelope.code,
            msg: envelope.msg,
            content: typed(envelope.content)?,
            data: typed(envelope.data)?,
        };
        if envelope.is_ok() {
            Ok(envelope)
        } else {
            Err(CallError::Refused(
                envelope.msg.unwrap_or_else(|| "no reason given".into()),
            ))
        }
    }

    /// The call over the agent's connection, sent again on its next connection when one drops
    /// before the reply, until the timeout. A connect-mode agent that is not connected here is
    /// waited for until the timeout too (it may be reconnecting).
    async fn over_link<B: Serialize>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<Envelope<serde_json::Value>, CallError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let call = Call::from(path);
        let body = serde_json::to_value(body)
            .map_err(|e| CallError::Unreachable(format!("encoding the call: {e}")))?;
        let mut dropped = false;
        loop {
            let link = if is_connect_address(address) {
                self.links.wait_for(address, deadline).await
            } else {
                self.links.get(address)
            };
            // An `auto` agent without a connection here is dialled at its address.
            if link.is_none() && !is_connect_address(address) {
                return self.over_http(address, path, &body).await;
            }
            let Some(link) = link else {
                return Err(CallError::Unreachable(if dropped {
                    "the agent's connection dropped and it did not reconnect in time".into()
                } else {
                    "the agent is not connected to this admin".into()
                }));
            };
            match link.call(call.clone(), body.clone(), deadline).await {
                Ok(reply) => return Ok(reply),
                Err(LinkError::TimedOut) => {
                    return Err(CallError::Unreachable(
                        "no reply over the agent's connection in time".into(),
                    ));
                }
                Err(LinkError::Dropped) => {
                    // Wait for the next connection; the old one may still be listed until its
                    // socket task ends, so never retry on the same one.
                    dropped = true;
                    self.links.remove(address, link.serial);
                }
            }
        }
    }

    async fn over_http<B: Serialize>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<Envelope<serde_json::Value>, CallError> {
        let response = self
            .http
            .post(url(address, path))
            .header(ACCESS_TOKEN_HEADER, &self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        let text = response
            .text()
            .await
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        serde_json::from_str(&text).map_err(|_| {
            CallError::Unreachable(format!(
                "not an executor answer: {}",
                text.chars().take(200).collect::<String>()
            ))
        })
    }

    /// Hands a trigger to the agent; `Ok` means it accepted the run, with the agent's message
    /// and, from a jobfleet agent, which of its processes took it.
    pub async fn run(
        &self,
        address: &str,
        trigger: &TriggerParam,
    ) -> Result<(String, Option<RunAccepted>), CallError> {
        self.call::<_, serde_json::Value>(address, agent_path::RUN, trigger)
            .await
            .map(|mut e| {
                let msg = e.msg.take().unwrap_or_default();
                // An executor's content is whatever it likes; only ours parses.
                let taken_by = e
                    .payload()
                    .and_then(|content| serde_json::from_value::<RunAccepted>(content).ok());
                (msg, taken_by)
            })
    }

    /// Asks whether the agent could start `job_id` now (XXL-Job's idleBeat): `Err` when busy.
    pub async fn idle_beat(&self, address: &str, job_id: JobId) -> Result<String, CallError> {
        self.call::<_, serde_json::Value>(
            address,
            agent_path::IDLE_BEAT,
            &JobIdParam { job_id: job_id.0 },
        )
        .await
        .map(|e| e.msg.unwrap_or_default())
    }

    pub async fn kill(&self, address: &str, job_id: JobId) -> Result<String, CallError> {
        self.call::<_, serde_json::Value>(
            address,
            agent_path::KILL,
            &JobIdParam { job_id: job_id.0 },
        )
        .await
        .map(|e| e.msg.unwrap_or_default())
    }

    /// The runs a jobfleet agent holds now; an XXL-Job executor refuses (unknown path).
    pub async fn held(&self, address: &str) -> Result<HeldRuns, CallError> {
        self.call::<_, HeldRuns>(address, agent_path::HELD, &serde_json::Value::Null)
            .await?
            .payload()
            .ok_or_else(|| CallError::Unreachable("the held answer has no content".into()))
    }

    pub async fn log(&self, address: &str, param: &LogParam) -> Result<LogResult, CallError> {
        self.call::<_, LogResult>(address, agent_path::LOG, param)
            .await?
            .payload()
            .ok_or_else(|| CallError::Unreachable("the log answer has no content".into()))
    }
}
