//! Calls from the admin to agents, in protocol types only: over the agent's own connection
//! when it holds one to this admin (`link::Links`), else by HTTP to its address. A short
//! timeout: a trigger is a hand-off, not a wait for the job.
//!
//! Over a connection a call whose connection drops before the reply is sent again on the
//! agent's next connection (same body, so a trigger keeps its run id) until the timeout: the
//! agent's accept journal answers a repeated trigger as accepted without running it again, so a
//! trigger is delivered at most once per run whatever the connection does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::domain::ids::{JobId, RunId};
use jobfleet_agent::protocol::{
    ACCESS_TOKEN_HEADER, CONNECT_SCHEME, Call, Envelope, HeldRuns, JobIdParam, KillParam, LogParam,
    LogResult, RawEnvelope, RunAccepted, TriggerParam, agent_path,
};

use super::link::{LinkError, Links};
use super::relay::{self, Relay, RelayCall};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

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

/// What a kill did on the agent. Both a jobfleet agent and an XXL-Job executor answer a kill
/// that found nothing with success and one of two messages ("run N of job J is not running or
/// waiting here", "job thread already killed."); any other success (no message, "killed", an
/// executor's own words) counts as killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillOutcome {
    Killed,
    /// Nothing of it there: the run has ended and its result is on its way, or it never came.
    NotThere(String),
}

impl KillOutcome {
    fn of(msg: Option<String>) -> Self {
        match msg {
            Some(msg)
                if msg.ends_with(" is not running or waiting here")
                    || msg == "job thread already killed." =>
            {
                KillOutcome::NotThere(msg)
            }
            _ => KillOutcome::Killed,
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
    /// How to reach agents connected to the other admins; `None` in a lone admin's tests.
    relay: Option<Arc<Relay>>,
    /// Addresses whose last `runBatch` by HTTP got no usable answer, and when: an XXL-Job
    /// executor (or an agent older than that call) knows no such call, so for
    /// `BATCH_REFUSAL_KEPT` its runs go one by one at their times instead of sent ahead.
    batch_refused: Arc<Mutex<HashMap<String, tokio::time::Instant>>>,
    /// Addresses no connection could be made to by HTTP lately, and when (`reach_order`).
    unconnectable: Arc<Mutex<HashMap<String, tokio::time::Instant>>>,
}

/// How long an address that did not take a `runBatch` by HTTP is not asked again.
const BATCH_REFUSAL_KEPT: Duration = Duration::from_secs(60);

/// How long an address no connection could be made to is tried after the others. Short: an
/// agent restarting is back within it, and one dead is tried again once per period, by the run
/// whose other agents all failed or by the first run after it.
const UNCONNECTABLE_KEPT: Duration = Duration::from_secs(10);

/// Why a call could not be served over a connection to this admin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HereError {
    /// The agent holds no connection here.
    NotHere,
    /// The agent did not reply in time.
    TimedOut,
}

/// Why a relayed call got no reply.
#[derive(Debug)]
enum RelayFailure {
    /// The holder no longer holds the connection, or cannot be reached: look again.
    Elsewhere(String),
    /// The agent did not reply in time.
    TimedOut(String),
    /// The holder refused (another cluster's token, a bad call): looking again will not help.
    Refused(String),
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

/// A payload read as the type the call expects, straight from its text; garbage is an
/// unusable answer.
fn typed<T: DeserializeOwned>(payload: Option<Box<RawValue>>) -> Result<Option<T>, CallError> {
    payload
        .map(|payload| serde_json::from_str(payload.get()))
        .transpose()
        .map_err(|e| CallError::Unreachable(format!("not an executor answer: {e}")))
}

/// What an agent or executor said it accepted a run with: only a jobfleet agent's content
/// reads as one (an executor's is whatever it likes).
fn taken_by(answer: RawEnvelope) -> Option<RunAccepted> {
    answer
        .payload()
        .and_then(|content| RunAccepted::from_content(&content))
}

fn connection_closed() -> CallError {
    CallError::Unreachable("the agent's connection closed".into())
}

fn batch_body(triggers: &[TriggerParam]) -> Result<Box<RawValue>, CallError> {
    serde_json::value::to_raw_value(triggers)
        .map_err(|e| CallError::Unreachable(format!("encoding the call: {e}")))
}

/// One run's answer: accepted with the agent's message and, from a jobfleet agent, which of its
/// processes took it (as `run` gives it), or refused.
pub type RunAnswer = Result<(String, Option<RunAccepted>), CallError>;

/// A `runBatch` reply read as each trigger's own answer, in order; a refusal or a count that
/// does not match is no usable answer for any of them.
fn batch_answers(reply: RawEnvelope, triggers: usize) -> Result<Vec<RunAnswer>, CallError> {
    if !reply.is_ok() {
        return Err(CallError::Refused(
            reply.msg.unwrap_or_else(|| "no reason given".into()),
        ));
    }
    let answers: Vec<RawEnvelope> = typed(reply.payload())?.unwrap_or_default();
    if answers.len() != triggers {
        return Err(CallError::Unreachable(format!(
            "{} answers to {triggers} triggers",
            answers.len()
        )));
    }
    Ok(answers
        .into_iter()
        .map(|mut answer| {
            if answer.is_ok() {
                Ok((answer.msg.take().unwrap_or_default(), taken_by(answer)))
            } else {
                Err(CallError::Refused(
                    answer.msg.unwrap_or_else(|| "no reason given".into()),
                ))
            }
        })
        .collect())
}

impl AgentClient {
    /// # Errors
    /// When the TLS backend cannot be initialised.
    pub fn new(
        token: String,
        timeout: Duration,
        relay: Option<Arc<Relay>>,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            // Inside the call's own timeout, so that a host that answers no connect at all
            // ends as a connect that failed (`reach_order`), not as a call that timed out.
            .connect_timeout(timeout.mul_f64(0.9))
            .timeout(timeout)
            .build()?;
        Ok(Self {
            http,
            token,
            timeout,
            links: Arc::default(),
            relay,
            batch_refused: Arc::default(),
            unconnectable: Arc::default(),
        })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<Envelope<T>, CallError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let envelope = if self.links.get(address).is_some() || is_connect_address(address) {
            self.over_connection(address, path, body, deadline).await?
        } else {
            // An `auto` agent not connected here is dialled at its address, as a `push` one:
            // only `conn://` agents, which cannot be dialled, are relayed to.
            self.over_http(address, path, body).await?
        };
        // A refusal is one whatever its payload holds: an executor's error content need not
        // be of the type a success carries.
        if !envelope.is_ok() {
            return Err(CallError::Refused(
                envelope.msg.unwrap_or_else(|| "no reason given".into()),
            ));
        }
        // The payload is read once, from whichever field carries it (XXL-Job ≥ 3.3: `data`).
        let RawEnvelope {
            code,
            msg,
            content,
            data,
        } = envelope;
        Ok(Envelope {
            code,
            msg,
            content: typed(content.or(data))?,
            data: None,
        })
    }

    /// The call over the agent's connection: here when it is connected here, else (a `conn://`
    /// agent) relayed through the admin holding it. When a connection drops before the reply, or a `connect`
    /// agent is between connections, the call is sent again on its next connection, wherever
    /// that is, until the deadline (the agent's accept journal runs a repeated trigger once).
    /// An `auto` agent no longer connected here is dialled at its address instead.
    async fn over_connection<B: Serialize>(
        &self,
        address: &str,
        path: &str,
        body: &B,
        deadline: tokio::time::Instant,
    ) -> Result<RawEnvelope, CallError> {
        let call = Call::from(path);
        // Encoded once: it may be sent again on another connection, relayed, or posted.
        let body = serde_json::value::to_raw_value(body)
            .map_err(|e| CallError::Unreachable(format!("encoding the call: {e}")))?;
        let mut why = "the agent is not connected to any admin".to_owned();
        loop {
            match self.call_here(address, &call, &body, deadline).await {
                Ok(reply) => return Ok(reply),
                Err(HereError::TimedOut) => {
                    return Err(CallError::Unreachable(
                        "no reply over the agent's connection in time".into(),
                    ));
                }
                Err(HereError::NotHere) => {}
            }
            if !is_connect_address(address) {
                // Connected nowhere here: its address is the way, as for a `push` agent.
                return self.over_http(address, path, &body).await;
            }
            if let Some(relay) = &self.relay
                && let Some(url) = relay.holder_by(address, deadline).await
            {
                match self
                    .relay_to(relay, &url, address, &call, &body, deadline)
                    .await
                {
                    Ok(reply) => return Ok(reply),
                    Err(RelayFailure::TimedOut(e)) => return Err(CallError::Unreachable(e)),
                    Err(RelayFailure::Refused(e)) => return Err(CallError::Unreachable(e)),
                    // The holder lost the connection or is down: the agent is reconnecting.
                    Err(RelayFailure::Elsewhere(e)) => why = e,
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(CallError::Unreachable(why));
            }
            // Back as soon as it connects here; the database is looked at again meanwhile.
            let _ = self
                .links
                .wait_for(address, deadline.min(now + relay::LOOK_AGAIN))
                .await;
        }
    }

    /// A call over the agent's connection to this admin, sent again on the next connection
    /// here when one drops before the reply. `NotHere` when it is not (or no longer) connected
    /// here: the caller may find it connected elsewhere.
    ///
    /// # Errors
    /// `NotHere` as said; `TimedOut` when the agent did not reply by `deadline`.
    pub async fn call_here(
        &self,
        address: &str,
        call: &Call,
        body: &RawValue,
        deadline: tokio::time::Instant,
    ) -> Result<RawEnvelope, HereError> {
        while let Some(link) = self.links.get(address) {
            match link.call(call, body, deadline).await {
                Ok(reply) => return Ok(reply),
                Err(LinkError::TimedOut) => return Err(HereError::TimedOut),
                // The old connection may still be listed until its socket task ends, so
                // never retry on the same one.
                Err(LinkError::Dropped) => self.links.remove(address, link.serial),
            }
        }
        Err(HereError::NotHere)
    }

    /// The cluster relay (its keys check other admins' relay calls).
    pub fn relay(&self) -> Option<&Relay> {
        self.relay.as_deref()
    }

    /// One relay call to the admin at `url` holding the agent's connection.
    async fn relay_to(
        &self,
        relay: &Relay,
        url: &str,
        address: &str,
        call: &Call,
        body: &RawValue,
        deadline: tokio::time::Instant,
    ) -> Result<RawEnvelope, RelayFailure> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let request = RelayCall {
            address: address.to_owned(),
            call: call.clone(),
            body: body.to_owned(),
            timeout_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
        };
        let response = self
            .http
            .post(format!("{url}{}", relay::RELAY_PATH))
            .bearer_auth(relay.keys.issue(relay::system_now_ms()))
            .json(&request)
            // Never beyond the caller's deadline: the in-doubt recovery counts on a hand-over
            // ending within the trigger timeout.
            .timeout(left)
            .send()
            .await
            .map_err(|e| {
                RelayFailure::Elsewhere(format!(
                    "the admin at {url} holding the agent's connection: {e}"
                ))
            })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| RelayFailure::Elsewhere(format!("the admin at {url}: {e}")))?;
        let envelope: Result<RawEnvelope, _> = serde_json::from_str(&text);
        let said = |envelope: &Result<RawEnvelope, _>| {
            envelope
                .as_ref()
                .ok()
                .and_then(|e: &RawEnvelope| e.msg.clone())
                .unwrap_or_else(|| text.chars().take(200).collect())
        };
        match status.as_u16() {
            200 => envelope.map_err(|_| {
                RelayFailure::Elsewhere(format!("the admin at {url} answered garbage"))
            }),
            409 => Err(RelayFailure::Elsewhere(format!(
                "the admin at {url}: {}",
                said(&envelope)
            ))),
            504 => Err(RelayFailure::TimedOut(format!(
                "through the admin at {url}: {}",
                said(&envelope)
            ))),
            other => Err(RelayFailure::Refused(format!(
                "the admin at {url} refused the relay ({other}): {}",
                said(&envelope)
            ))),
        }
    }

    async fn over_http<B: Serialize>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<RawEnvelope, CallError> {
        let response = self
            .http
            .post(url(address, path))
            .header(ACCESS_TOKEN_HEADER, &self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    // Never pruned: an entry is an address and an instant, and addresses are
                    // the fleet's.
                    self.unconnectable()
                        .insert(address.to_owned(), tokio::time::Instant::now());
                }
                CallError::Unreachable(e.to_string())
            })?;
        {
            let mut unconnectable = self.unconnectable();
            if !unconnectable.is_empty() {
                unconnectable.remove(address);
            }
        }
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
        self.call::<_, Box<RawValue>>(address, agent_path::RUN, trigger)
            .await
            .map(|mut e| (e.msg.take().unwrap_or_default(), taken_by(e)))
    }

    fn unconnectable(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio::time::Instant>> {
        self.unconnectable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Puts the addresses no connection could be made to in the last `UNCONNECTABLE_KEPT` after
    /// the others, each part in its order, for a run no agent was offered yet (the caller's
    /// to know: a run sent ahead whose call failed goes to its first agent again, which may
    /// hold it from that call). Every routing moves past an agent it cannot reach, so the order
    /// only spares the attempt: a refused connection costs a round trip, but a host that is
    /// down (no answer to the connect at all) costs the trigger timeout, run after run, until
    /// the registry drops it (never, for a manual group's addresses). Only a connect that
    /// failed counts, so nothing of that call reached the agent; an answer that came late or
    /// garbled keeps its agent's place, and so does an agent connected here now. Once its
    /// period is over an address keeps its place for one order, whose run tries it again, and
    /// goes after the others for another period unless an answer from it forgets it: one run
    /// a period pays for a host still down, not every run in flight then.
    pub fn reach_order(&self, addresses: &mut [String]) {
        if addresses.len() < 2 {
            return;
        }
        let mut unconnectable = self.unconnectable();
        if unconnectable.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        let last: Vec<bool> = addresses
            .iter()
            .map(|address| match unconnectable.get_mut(address) {
                _ if self.links.get(address).is_some() => false,
                Some(since) if now.duration_since(*since) < UNCONNECTABLE_KEPT => true,
                Some(since) => {
                    *since = now;
                    false
                }
                None => false,
            })
            .collect();
        drop(unconnectable);
        if !last.contains(&true) {
            return;
        }
        // A stable sort: reachable (false) before unconnectable (true), each in routing order.
        let mut keyed: Vec<(bool, String)> = last
            .into_iter()
            .zip(addresses.iter_mut().map(std::mem::take))
            .collect();
        keyed.sort_by_key(|(last, _)| *last);
        for (slot, (_, address)) in addresses.iter_mut().zip(keyed) {
            *slot = address;
        }
    }

    /// Whether the runs of a take for `address` may go down together ahead of their time
    /// (`run_batch`): it is connected here, or it is dialled at its address and did not lately
    /// fail a `runBatch` (`conn://` agents connected elsewhere get theirs one by one, relayed).
    pub fn takes_batches(&self, address: &str) -> bool {
        if self.links.get(address).is_some() {
            return true;
        }
        if is_connect_address(address) {
            return false;
        }
        let mut refused = self
            .batch_refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match refused.get(address) {
            Some(since) if since.elapsed() < BATCH_REFUSAL_KEPT => false,
            Some(_) => {
                refused.remove(address);
                true
            }
            None => true,
        }
    }

    /// Hands several triggers to an agent in one `runBatch` call (the runs a `take` found):
    /// over its connection here, else by HTTP to its address. Each trigger's own answer, in
    /// order, as `run` gives it.
    ///
    /// # Errors
    /// The call as a whole got no usable answer (then each run's fate is in doubt). By HTTP,
    /// the address is then not sent batches for a while (`takes_batches`).
    pub async fn run_batch(
        &self,
        address: &str,
        triggers: &[TriggerParam],
    ) -> Result<Vec<RunAnswer>, CallError> {
        let body = batch_body(triggers)?;
        if let Some(over_connection) = self.batch_here(address, &body, triggers.len()).await {
            return over_connection;
        }
        if is_connect_address(address) {
            return Err(connection_closed());
        }
        let by_http = self
            .over_http(address, agent_path::RUN_BATCH, &body)
            .await
            .and_then(|reply| batch_answers(reply, triggers.len()));
        if by_http.is_err() {
            // Never pruned: an entry is an address and an instant, and addresses are the fleet's.
            self.batch_refused
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(address.to_owned(), tokio::time::Instant::now());
        }
        by_http
    }

    /// `run_batch` over the agent's connection here only: the answer to its own `take`, which
    /// a connection that dropped meanwhile leaves to the in-doubt recovery.
    ///
    /// # Errors
    /// The agent is not connected here, or the call as a whole got no usable answer.
    pub async fn run_batch_here(
        &self,
        address: &str,
        triggers: &[TriggerParam],
    ) -> Result<Vec<RunAnswer>, CallError> {
        let body = batch_body(triggers)?;
        self.batch_here(address, &body, triggers.len())
            .await
            .unwrap_or_else(|| Err(connection_closed()))
    }

    /// A `runBatch` over the agent's connection here; `None` when it holds none here.
    async fn batch_here(
        &self,
        address: &str,
        body: &RawValue,
        triggers: usize,
    ) -> Option<Result<Vec<RunAnswer>, CallError>> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        match self
            .call_here(address, &Call::RunBatch, body, deadline)
            .await
        {
            Ok(reply) => Some(batch_answers(reply, triggers)),
            Err(HereError::TimedOut) => Some(Err(CallError::Unreachable(
                "no reply over the agent's connection in time".into(),
            ))),
            Err(HereError::NotHere) => None,
        }
    }

    /// Asks whether the agent could start `job_id` now (XXL-Job's idleBeat): `Err` when busy.
    pub async fn idle_beat(&self, address: &str, job_id: JobId) -> Result<String, CallError> {
        self.call::<_, serde::de::IgnoredAny>(
            address,
            agent_path::IDLE_BEAT,
            &JobIdParam { job_id: job_id.0 },
        )
        .await
        .map(|e| e.msg.unwrap_or_default())
    }

    /// Kills `run_id` of `job_id` on the agent (an XXL-Job executor, which knows no run ids,
    /// kills whatever of the job runs there).
    pub async fn kill(
        &self,
        address: &str,
        job_id: JobId,
        run_id: RunId,
    ) -> Result<KillOutcome, CallError> {
        let answer = self
            .call::<_, serde::de::IgnoredAny>(
                address,
                agent_path::KILL,
                &KillParam {
                    job_id: job_id.0,
                    log_id: Some(run_id.0),
                },
            )
            .await?;
        Ok(KillOutcome::of(answer.msg))
    }

    /// The runs a jobfleet agent holds now; an XXL-Job executor refuses (unknown path).
    pub async fn held(&self, address: &str) -> Result<HeldRuns, CallError> {
        self.call::<_, HeldRuns>(address, agent_path::HELD, &serde_json::Value::Null)
            .await?
            .payload()
            .ok_or_else(|| CallError::Unreachable("the held answer has no content".into()))
    }

    /// A page of run `run_id`'s log from line `from_line` (1-based); `created_ms` tells the
    /// agent which day's folder holds the file.
    pub async fn run_log_page(
        &self,
        address: &str,
        run_id: RunId,
        created_ms: i64,
        from_line: i64,
    ) -> Result<LogResult, CallError> {
        let param = LogParam {
            log_date_tim: created_ms,
            log_id: run_id.0,
            from_line_num: from_line,
        };
        self.log(address, &param).await
    }

    pub async fn log(&self, address: &str, param: &LogParam) -> Result<LogResult, CallError> {
        self.call::<_, LogResult>(address, agent_path::LOG, param)
            .await?
            .payload()
            .ok_or_else(|| CallError::Unreachable("the log answer has no content".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::{AgentClient, CallError, KillOutcome, LogParam, TriggerParam};

    /// An executor on loopback answering every request with `body`.
    async fn answering(body: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                // The whole request is read first: a close with part of it unread resets the
                // connection instead of answering.
                let mut request = Vec::new();
                let mut chunk = [0u8; 4096];
                while !whole_request(&request) {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        address
    }

    /// Whether `request` holds its head and as many body bytes as its `content-length` says.
    fn whole_request(request: &[u8]) -> bool {
        let text = String::from_utf8_lossy(request);
        let Some(head_end) = text.find("\r\n\r\n") else {
            return false;
        };
        let length = text[..head_end]
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        request.len() >= head_end + 4 + length
    }

    /// A client with a 5 s timeout, its TLS provider installed.
    fn client() -> AgentClient {
        let _ = rustls::crypto::ring::default_provider().install_default();
        AgentClient::new("t".into(), std::time::Duration::from_secs(5), None).unwrap()
    }

    fn log_of_run_1() -> LogParam {
        LogParam {
            log_date_tim: 0,
            log_id: 1,
            from_line_num: 1,
        }
    }

    #[tokio::test]
    async fn a_refusal_is_one_whatever_its_content_holds() {
        let client = client();
        let param = log_of_run_1();
        let refusing =
            answering(r#"{"code":500,"msg":"no log for run 1","content":"not a log page"}"#).await;
        assert!(matches!(
            client.log(&refusing, &param).await,
            Err(CallError::Refused(why)) if why == "no log for run 1"
        ),);
        // A success whose content is not the call's answer is still no usable answer.
        let garbled = answering(r#"{"code":200,"content":"not a log page"}"#).await;
        assert!(matches!(
            client.log(&garbled, &param).await,
            Err(CallError::Unreachable(why)) if why.contains("not an executor answer")
        ),);
    }

    /// An executor answers `runBatch` as an unknown path (XXL-Job's) or with no answers for
    /// the triggers: no usable answer, and its address takes no batches for a minute.
    #[tokio::test]
    async fn an_address_that_fails_a_batch_by_http_takes_none_for_a_minute() {
        let client = client();
        let trigger: TriggerParam = serde_json::from_str(
            r#"{"jobId": 1, "logId": 7, "logDateTime": 0, "glueType": "GLUE_SHELL",
                "glueSource": "true", "executorTimeout": 0,
                "executorBlockStrategy": "SERIAL_EXECUTION", "broadcastIndex": 0, "broadcastTotal": 1}"#,
        )
        .unwrap();
        let triggers = [trigger.clone(), trigger];
        let xxl_job =
            answering(r#"{"code":500,"msg":"invalid request, uri-mapping(/runBatch) not found."}"#)
                .await;
        let empty = answering(r#"{"code":200,"msg":null}"#).await;
        let agent = answering(
            r#"{"code":200,"content":[{"code":200,"msg":"starts in 5 ms"},{"code":500,"msg":"busy"}]}"#,
        )
        .await;
        for address in [&xxl_job, &empty, &agent] {
            assert!(client.takes_batches(address), "{address}");
        }
        assert!(matches!(
            client.run_batch(&xxl_job, &triggers).await,
            Err(CallError::Refused(why)) if why.contains("not found")
        ));
        assert!(matches!(
            client.run_batch(&empty, &triggers).await,
            Err(CallError::Unreachable(why)) if why == "0 answers to 2 triggers"
        ));
        let answers = client.run_batch(&agent, &triggers).await.unwrap();
        assert!(matches!(&answers[0], Ok((msg, None)) if msg == "starts in 5 ms"));
        assert!(matches!(&answers[1], Err(CallError::Refused(why)) if why == "busy"));
        assert!(!client.takes_batches(&xxl_job));
        assert!(!client.takes_batches(&empty));
        assert!(client.takes_batches(&agent));
        // A `conn://` agent not connected here gets its runs one by one, relayed.
        assert!(!client.takes_batches("conn://agent-1"));
        // A minute on, the executor is asked again.
        let a_minute_ago = tokio::time::Instant::now()
            .checked_sub(super::BATCH_REFUSAL_KEPT)
            .unwrap();
        client
            .batch_refused
            .lock()
            .unwrap()
            .insert(xxl_job.clone(), a_minute_ago);
        assert!(client.takes_batches(&xxl_job));
        assert!(!client.takes_batches(&empty));
    }

    /// An address no connection could be made to is tried after the others for a while; one
    /// that answered, however badly, keeps its place.
    #[tokio::test]
    async fn an_address_nobody_listens_at_is_tried_last_for_a_while() {
        let client = client();
        let param = log_of_run_1();
        // Bound but never listening, and held to the end: a connect is refused, and no other
        // test's listener can take the port meanwhile (without SO_REUSEADDR on this socket the
        // kernel lets nobody else bind it), which would answer and clear the mark.
        let held = tokio::net::TcpSocket::new_v4().unwrap();
        held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let closed = format!("http://{}/", held.local_addr().unwrap());
        let garbled = answering(r#"{"code":200,"content":"not a log page"}"#).await;
        let refusing = answering(r#"{"code":500,"msg":"busy"}"#).await;
        let routed = || vec![closed.clone(), garbled.clone(), refusing.clone()];

        let mut order = routed();
        client.reach_order(&mut order);
        assert_eq!(order, routed(), "nothing failed yet");
        assert!(matches!(
            client.log(&closed, &param).await,
            Err(CallError::Unreachable(_))
        ));
        assert!(client.log(&garbled, &param).await.is_err());
        assert!(client.log(&refusing, &param).await.is_err());
        let mut order = routed();
        client.reach_order(&mut order);
        assert_eq!(order, [garbled.clone(), refusing.clone(), closed.clone()]);
        // One address alone is tried whatever happened to it.
        let mut alone = vec![closed.clone()];
        client.reach_order(&mut alone);
        assert_eq!(alone, std::slice::from_ref(&closed));

        // Its time over, one run tries it in its place again; the others still go past it.
        let long_ago = tokio::time::Instant::now()
            .checked_sub(super::UNCONNECTABLE_KEPT)
            .unwrap();
        client.unconnectable().insert(closed.clone(), long_ago);
        let mut order = routed();
        client.reach_order(&mut order);
        assert_eq!(order, routed(), "the run that tries it again");
        let mut order = routed();
        client.reach_order(&mut order);
        assert_eq!(order, [garbled.clone(), refusing.clone(), closed.clone()]);

        // An address that answers again is forgotten at once.
        client
            .unconnectable()
            .insert(refusing.clone(), tokio::time::Instant::now());
        assert!(client.log(&refusing, &param).await.is_err());
        let mut order = vec![refusing.clone(), garbled.clone()];
        client.reach_order(&mut order);
        assert_eq!(order, [refusing.clone(), garbled.clone()]);
    }

    /// An agent that dialled in is reached over its link, not its address: a connect to the
    /// address that failed (from before it connected, or a listener it does not have) does not
    /// send its runs elsewhere while the link is up; once the link is gone, the mark counts.
    /// The mark is set here as a failed connect sets it (the test before shows that): with no
    /// socket, no port that another test frees or takes can change the outcome.
    #[tokio::test]
    async fn an_agent_linked_here_keeps_its_place_whatever_its_address_did() {
        let client = client();
        let linked = "http://linked.invalid/".to_owned();
        let other = "http://other.invalid/".to_owned();
        client
            .unconnectable()
            .insert(linked.clone(), tokio::time::Instant::now());
        let (link, _frames) = crate::dispatch::link::Link::new(client.links.next_serial(), 0);
        client.links.insert(&linked, link.clone());
        let routed = || vec![linked.clone(), other.clone()];
        let mut order = routed();
        client.reach_order(&mut order);
        assert_eq!(order, routed(), "linked: never demoted");
        client.links.remove(&linked, link.serial);
        let mut order = routed();
        client.reach_order(&mut order);
        assert_eq!(
            order,
            [other, linked],
            "the link gone, its failed connect counts"
        );
    }

    /// A host that is down answers no connect at all: the attempt ends at the connect timeout,
    /// inside the call's, and counts as a connect that failed. Made on loopback by a listener
    /// that never accepts and whose accept queue is full, so the kernel drops further SYNs.
    #[tokio::test]
    async fn a_connect_nobody_answers_counts_as_unconnectable() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The connect's timeout is 0.9 of it: the margin lets a late poll still see the
        // connect's, not the call's.
        let timeout = std::time::Duration::from_secs(3);
        let client = AgentClient::new("t".into(), timeout, None).unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let at = listener.local_addr().unwrap();
        // The queue holds one connection; the second and later wait on SYNs nobody answers.
        let mut held = Vec::new();
        for _ in 0..2 {
            if let Ok(Ok(stream)) = tokio::time::timeout(
                std::time::Duration::from_millis(200),
                tokio::net::TcpStream::connect(at),
            )
            .await
            {
                held.push(stream);
            }
        }
        let silent_host = format!("http://{at}/");
        let other = answering(r#"{"code":200,"content":{"fromLineNum":1,"toLineNum":1,"logContent":"","isEnd":true}}"#).await;
        let param = log_of_run_1();
        let asked = std::time::Instant::now();
        assert!(matches!(
            client.log(&silent_host, &param).await,
            Err(CallError::Unreachable(_))
        ));
        assert!(asked.elapsed() >= timeout / 2, "{:?}", asked.elapsed());
        assert!(asked.elapsed() < timeout, "{:?}", asked.elapsed());
        let mut order = vec![silent_host.clone(), other.clone()];
        client.reach_order(&mut order);
        assert_eq!(order, [other, silent_host]);
        drop((held, listener));
    }

    #[test]
    fn a_kill_found_nothing_only_when_the_agent_says_so() {
        let of = |msg: Option<&str>| KillOutcome::of(msg.map(str::to_owned));
        for gone in [
            "run 7 of job 3 is not running or waiting here",
            "job thread already killed.",
        ] {
            assert_eq!(of(Some(gone)), KillOutcome::NotThere(gone.to_owned()));
        }
        // An XXL-Job executor's kill that worked has no message; others may say anything.
        for killed in [None, Some(""), Some("killed"), Some("success")] {
            assert_eq!(of(killed), KillOutcome::Killed, "{killed:?}");
        }
    }
}
