//! HTTP calls from the admin to agents, in protocol types only. A short timeout: a trigger is a
//! hand-off, not a wait for the job.

use std::time::Duration;

use crate::domain::ids::JobId;
use jobfleet_agent::protocol::{
    ACCESS_TOKEN_HEADER, Envelope, HeldRuns, JobIdParam, LogParam, LogResult, RunAccepted,
    TriggerParam, agent_path,
};
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
}

fn url(address: &str, path: &str) -> String {
    if address.ends_with('/') {
        format!("{address}{path}")
    } else {
        format!("{address}/{path}")
    }
}

impl AgentClient {
    /// # Errors
    /// When the TLS backend cannot be initialised.
    pub fn new(token: String, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()?;
        Ok(Self { http, token })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<Envelope<T>, CallError> {
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
        let envelope: Envelope<T> = serde_json::from_str(&text).map_err(|_| {
            CallError::Unreachable(format!(
                "not an executor answer: {}",
                text.chars().take(200).collect::<String>()
            ))
        })?;
        if envelope.is_ok() {
            Ok(envelope)
        } else {
            Err(CallError::Refused(
                envelope.msg.unwrap_or_else(|| "no reason given".into()),
            ))
        }
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
