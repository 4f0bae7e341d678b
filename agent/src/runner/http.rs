//! An `http` job's run: the agent sends the request itself, with no process, and judges the
//! answer by the job's success statuses. The status and the head of the answer's body go in the
//! run's log; the timeout and a kill stop it as they stop a process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::prepare::RunLog;
use super::{Prepared, Runner, StopReason, outcome};
use crate::admin_client::with_causes;
use crate::protocol::{HandleCallbackParam, HttpRequest, RunOutcome, Statuses, TriggerParam};

// A request the admin accepts must fit in a trigger this agent takes.
const _: () = assert!(crate::protocol::MAX_REQUEST_BYTES <= super::MAX_SOURCE_BYTES);

/// Most bytes of an answer's body written to the log: an excerpt, not a download.
const MAX_EXCERPT_BYTES: u64 = 64 * 1024;

/// How long an answer may take before the request's line goes into the log on its own. Up to
/// then it waits to go in with the answer's lines, written with the run's result by the spool's
/// writer: making the log and writing it are ext4 journal transactions, and the agent's thread
/// would wait whenever the journal is committing a block they change (BENCHMARKS.md, issue 17).
const REQUEST_LINE_ALONE_AFTER: Duration = Duration::from_secs(1);

/// Writes the request's line, unless it is in the log already, and a notice after it; both
/// with the run's result, off the runtime thread (`Block::defer`).
fn note_after(log: &RunLog, request_line: Option<String>, text: &str) {
    let mut block = log.block();
    if let Some(line) = request_line {
        block.note(&line);
    }
    block.note(text);
    block.defer();
}

/// A checked request and the statuses that count as success, with its URL and method parsed.
#[derive(Debug)]
pub(super) struct HttpJob {
    /// The `glueSource` it was read from: a trigger with the same source needs no new check.
    source: String,
    request: HttpRequest,
    statuses: Statuses,
    url: reqwest::Url,
    method: reqwest::Method,
}

impl HttpJob {
    /// The request in `source`, a trigger's `glueSource`.
    ///
    /// # Errors
    /// What is wrong with it, for the trigger's refusal.
    fn from_source(source: &str) -> Result<Self, String> {
        let (request, statuses) =
            HttpRequest::from_source(source).map_err(|e| format!("GLUE_HTTP request: {e}"))?;
        // Checked by `from_source`: these fail only if the check and reqwest disagreed.
        let url = reqwest::Url::parse(&request.url).map_err(|e| format!("GLUE_HTTP url: {e}"))?;
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|e| format!("GLUE_HTTP method: {e}"))?;
        Ok(Self {
            source: source.to_owned(),
            request,
            statuses,
            url,
            method,
        })
    }
}

/// Most bytes of `glueSource` kept by `CheckedRequests` (its entries hold about three times as
/// much): enough for thousands of http jobs, and a bound on what triggers can make it hold.
const MOST_CHECKED_SOURCE_BYTES: usize = 1 << 20;
// A trigger's source is refused past `MAX_SOURCE_BYTES` before it gets here, so one fits.
const _: () = assert!(super::MAX_SOURCE_BYTES <= MOST_CHECKED_SOURCE_BYTES);

/// Each http job's last checked request, by job id. An http job's every trigger carries the same
/// `glueSource` until the job is edited; reading, checking and parsing it again at each run was
/// about 3 % of an agent's CPU at 2,000 http runs a second (BENCHMARKS.md, issue 17). A
/// trigger whose source differs in any byte is read and checked anew, so what a trigger gets
/// is always what its own source says.
#[derive(Debug, Default)]
pub(super) struct CheckedRequests {
    by_job: std::collections::HashMap<i64, Arc<HttpJob>>,
    source_bytes: usize,
}

impl CheckedRequests {
    /// The checked request of `trigger`.
    ///
    /// # Errors
    /// What is wrong with it, for the trigger's refusal.
    pub fn of(&mut self, trigger: &TriggerParam) -> Result<Arc<HttpJob>, String> {
        let source = trigger.glue_source.as_deref().unwrap_or_default();
        if let Some(job) = self.by_job.get(&trigger.job_id)
            && job.source == source
        {
            return Ok(job.clone());
        }
        let job = Arc::new(HttpJob::from_source(source)?);
        if let Some(replaced) = self.by_job.remove(&trigger.job_id) {
            self.source_bytes -= replaced.source.len();
        }
        if self.source_bytes + source.len() > MOST_CHECKED_SOURCE_BYTES {
            // Rare (thousands of jobs, or huge bodies): start again rather than track an order.
            self.by_job.clear();
            self.source_bytes = 0;
        }
        self.source_bytes += source.len();
        self.by_job.insert(trigger.job_id, job.clone());
        Ok(job)
    }
}

/// What came back, as far as the outcome needs.
struct Answer {
    status: reqwest::StatusCode,
    excerpt: Vec<u8>,
    /// Body bytes not read (the answer's length said so), or `None` when the whole body was read
    /// or the length was not known.
    cut: Option<u64>,
    more_unread: bool,
    /// Why the request went out a second time, when it did.
    sent_again: Option<String>,
}

/// The methods an http job may use whose request sent twice has the effect of one (RFC 9110,
/// 9.2.2).
fn idempotent(method: &reqwest::Method) -> bool {
    use reqwest::Method;
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(method)
}

/// The connection closed before an answer was complete, with no other failure: what a server
/// closing a kept-alive connection as a request arrives on it leaves.
fn closed_unanswered(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = cause {
        if error
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// How long a kept-alive connection waits for the next run's request before it is closed.
/// Under the shortest idle time servers commonly keep a connection for (gunicorn 2 s; Apache,
/// Node.js, uvicorn and actix-web 5 s): a request sent on a connection the server is closing
/// at that moment fails with "connection closed before message completed", and whether the
/// server acted on it is unknown: an idempotent one is sent again (`exchange`), a POST fails.
/// With reqwest's own default, 90 s, runs failed so in the http benchmark, on connections left
/// idle after a burst (BENCHMARKS.md, issue 17).
const IDLE_CONNECTION_KEPT: Duration = Duration::from_millis(1_500);

/// The client http jobs are sent with: the host's trust store, kept-alive connections shared
/// by every run (a connection per run would cost a handshake each) while they are busy.
///
/// # Errors
/// The TLS backend cannot be set up.
pub fn client() -> Result<reqwest::Client, String> {
    let tls = crate::tls::jobs_client_config().map_err(|e| e.to_string())?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(IDLE_CONNECTION_KEPT)
        .user_agent(concat!("jobfleet-agent/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("the http jobs' client: {e}"))
}

/// How long a request waits for its answer: the shorter of its own `timeout_ms` and the job's
/// timeout (seconds, 0 = none); `None` waits until a kill.
fn answer_wait(timeout_ms: Option<u64>, job_timeout_s: i64) -> Option<Duration> {
    let job = (job_timeout_s > 0).then(|| Duration::from_secs(job_timeout_s.unsigned_abs()));
    let own = timeout_ms.map(Duration::from_millis);
    match (own, job) {
        (Some(own), Some(job)) => Some(own.min(job)),
        (own, job) => own.or(job),
    }
}

/// A wait as the log says it: whole seconds as `5s`, anything else in ms.
fn waited(wait: Option<Duration>) -> String {
    match wait {
        Some(w) if w.subsec_millis() == 0 => format!("{}s", w.as_secs()),
        Some(w) => format!("{} ms", w.as_millis()),
        None => "no limit".to_owned(),
    }
}

impl Runner {
    /// Sends the run's request and reports its outcome. The run is marked started before the
    /// request leaves, so a restarted agent never sends it again unasked.
    pub(super) async fn send_http(
        self: &Arc<Self>,
        prepared: &Prepared,
        job: &HttpJob,
        log: &RunLog,
        started_ms: i64,
        mut stop_rx: oneshot::Receiver<StopReason>,
    ) -> HandleCallbackParam {
        let trigger = &prepared.trigger;
        let failed = |msg: String| outcome::failed(trigger, started_ms, msg, "none");
        if let Err(e) = self.marks.mark(trigger.log_id) {
            return failed(format!("cannot write the run's start mark: {e}"));
        }
        let start_latency_us =
            u64::try_from(prepared.due().elapsed().as_micros()).unwrap_or(u64::MAX);
        let request = &job.request;
        // The request's line goes in with the answer's, one write for both, unless the answer
        // is slow to come: then a reader of the live log sees what the run waits for.
        let mut request_line = Some(format!("{} {}", request.method, request.url));
        let sent = Instant::now();
        let exchange = self.exchange(job);
        let wait = answer_wait(request.timeout_ms, trigger.executor_timeout);
        let deadline = async {
            match wait {
                None => std::future::pending().await,
                Some(wait) => tokio::time::sleep(wait).await,
            }
        };
        let slow = tokio::time::sleep(REQUEST_LINE_ALONE_AFTER);
        tokio::pin!(exchange, deadline, slow);
        let (status, msg) = loop {
            tokio::select! {
                () = &mut slow, if request_line.is_some() => {
                    log.note(&request_line.take().unwrap_or_default());
                }
                answer = &mut exchange => break match answer {
                    Ok(answer) => self.judge(job, answer, sent.elapsed(), log, request_line),
                    Err(e) => {
                        let msg = format!("the request failed: {e}");
                        note_after(log, request_line, &msg);
                        (RunOutcome::Failed, msg)
                    }
                },
                () = &mut deadline => {
                    let msg = format!("timed out after {} waiting for the answer", waited(wait));
                    note_after(log, request_line, &msg);
                    break (RunOutcome::TimedOut, msg);
                }
                reason = &mut stop_rx => {
                    let why = match reason {
                        Ok(StopReason::CoveredBy) => "replaced by a newer run (cover early)",
                        Ok(StopReason::Shutdown) => "the agent is shutting down",
                        _ => "killed on request",
                    };
                    note_after(log, request_line, &format!("{why}: the request was abandoned"));
                    break (RunOutcome::Killed, format!("killed ({why}) before the answer came"));
                }
            }
        };
        tracing::info!(run_id = trigger.log_id, %status, "Http run finished");
        outcome::http(trigger, started_ms, status, msg, start_latency_us)
    }

    /// Sends the request and reads the head of the answer's body. An idempotent request whose
    /// connection closed before any answer came is sent once more: a kept-alive connection
    /// can be closed by its server just as the request goes out on it, and sending a GET or a
    /// PUT twice has the effect of sending it once (RFC 9110, 9.2.2), as Go's and Java's
    /// clients do. Any other request may have been acted on, so its run fails, saying so.
    async fn exchange(&self, job: &HttpJob) -> Result<Answer, String> {
        let request = &job.request;
        let method = &job.method;
        let send = || {
            let mut builder = self.config.http.request(method.clone(), job.url.clone());
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            if let Some(body) = &request.body {
                builder = builder.body(body.clone());
            }
            builder.send()
        };
        let mut sent_again = None;
        let mut response = match send().await {
            Ok(response) => response,
            Err(e) if closed_unanswered(&e) && idempotent(method) => {
                let first = with_causes(&e);
                let response = send().await.map_err(|e| {
                    format!(
                        "{} (sent again after the connection closed unanswered: {first})",
                        with_causes(&e)
                    )
                })?;
                sent_again = Some(first);
                response
            }
            Err(e) if closed_unanswered(&e) => {
                return Err(format!(
                    "{}; not sent again: {method} is not idempotent and the server may have acted on it",
                    with_causes(&e)
                ));
            }
            Err(e) => return Err(with_causes(&e)),
        };
        let status = response.status();
        let limit = MAX_EXCERPT_BYTES.min(self.config.output.max_bytes);
        let length = response.content_length();
        let mut excerpt = Vec::new();
        let mut more_unread = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| with_causes(&e))? {
            let room = usize::try_from(limit).unwrap_or(usize::MAX) - excerpt.len();
            if chunk.len() > room {
                excerpt.extend_from_slice(&chunk[..room]);
                more_unread = true;
                break;
            }
            excerpt.extend_from_slice(&chunk);
        }
        let cut = length
            .filter(|_| more_unread)
            .map(|l| l - excerpt.len() as u64);
        Ok(Answer {
            status,
            excerpt,
            cut,
            more_unread,
            sent_again,
        })
    }

    /// The outcome of an answer, with its status and excerpt written to the log.
    fn judge(
        &self,
        job: &HttpJob,
        answer: Answer,
        took: Duration,
        log: &RunLog,
        request_line: Option<String>,
    ) -> (RunOutcome, String) {
        let status = answer.status;
        let mut block = log.block();
        if let Some(line) = request_line {
            block.note(&line);
        }
        if let Some(why) = &answer.sent_again {
            block.note(&format!(
                "sent again: its first connection closed unanswered ({why})"
            ));
        }
        block.note(&format!("HTTP {} in {} ms", status, took.as_millis()));
        if !answer.excerpt.is_empty() {
            block.output(&answer.excerpt);
        }
        match (answer.cut, answer.more_unread) {
            (Some(cut), _) => block.note(&format!(
                "the body was cut after {} bytes ({cut} more not read)",
                answer.excerpt.len()
            )),
            (None, true) => block.note(&format!(
                "the body was cut after {} bytes",
                answer.excerpt.len()
            )),
            (None, false) => {}
        }
        block.defer();
        if job.statuses.contains(status.as_u16()) {
            (RunOutcome::Succeeded, format!("HTTP {status}"))
        } else {
            (
                RunOutcome::Failed,
                format!("failed: HTTP {status}, expected {}", job.request.statuses),
            )
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn trigger(job_id: i64, source: &str) -> TriggerParam {
        serde_json::from_value(serde_json::json!({
            "jobId": job_id, "logId": 1, "glueType": "GLUE_HTTP", "glueSource": source
        }))
        .unwrap()
    }

    // A job's triggers with the same source share one checked request; a changed source is
    // read and checked again, and a bad one refused, every time, whatever was checked before.
    #[test]
    fn a_job_s_request_is_checked_again_only_when_its_source_changed() {
        let mut checked = CheckedRequests::default();
        let first = r#"{"url": "http://127.0.0.1:9/a"}"#;
        let a = checked.of(&trigger(7, first)).unwrap();
        assert!(Arc::ptr_eq(&a, &checked.of(&trigger(7, first)).unwrap()));
        assert_eq!(a.url.as_str(), "http://127.0.0.1:9/a");
        assert_eq!(a.method, reqwest::Method::GET);

        let edited = r#"{"url": "http://127.0.0.1:9/b", "method": "put"}"#;
        let b = checked.of(&trigger(7, edited)).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.url.as_str(), "http://127.0.0.1:9/b");
        assert_eq!(b.method, reqwest::Method::PUT);

        let bad = r#"{"url": "ftp://127.0.0.1/"}"#;
        for _ in 0..2 {
            let refused = checked.of(&trigger(7, bad)).unwrap_err();
            assert!(refused.contains("http:// or https://"), "{refused}");
        }
        assert!(Arc::ptr_eq(&b, &checked.of(&trigger(7, edited)).unwrap()));
        // Another job with the same source gets its own entry, checked the same.
        let other = checked.of(&trigger(8, edited)).unwrap();
        assert_eq!(other.url, b.url);
        assert_eq!(checked.source_bytes, 2 * edited.len());
    }

    // What triggers can make the agent keep is bounded, however many jobs or however large
    // their bodies; the largest source a trigger may carry fits.
    #[test]
    fn the_checked_requests_stay_within_their_bound() {
        let mut checked = CheckedRequests::default();
        let body = "x".repeat(200 * 1024);
        for job_id in 0..40 {
            let source =
                serde_json::json!({"url": "http://h/", "method": "POST", "body": body}).to_string();
            let job = checked.of(&trigger(job_id, &source)).unwrap();
            assert_eq!(job.request.body.as_deref(), Some(body.as_str()));
            assert!(checked.source_bytes <= MOST_CHECKED_SOURCE_BYTES);
            let kept: usize = checked.by_job.values().map(|job| job.source.len()).sum();
            assert_eq!(kept, checked.source_bytes);
        }
        // The largest source a trigger may carry (spaces around a small request) is kept alone.
        let small = r#"{"url": "http://h/"}"#;
        let largest = format!(
            "{small}{}",
            " ".repeat(crate::runner::MAX_SOURCE_BYTES - small.len())
        );
        checked.of(&trigger(99, &largest)).unwrap();
        assert_eq!(checked.by_job.len(), 1);
        assert_eq!(checked.source_bytes, largest.len());
        assert!(checked.source_bytes <= MOST_CHECKED_SOURCE_BYTES);
    }

    #[test]
    fn the_shorter_of_the_two_timeouts_bounds_the_wait() {
        let ms = Duration::from_millis;
        assert_eq!(answer_wait(None, 0), None);
        assert_eq!(answer_wait(Some(250), 0), Some(ms(250)));
        assert_eq!(answer_wait(None, 2), Some(ms(2000)));
        assert_eq!(answer_wait(Some(250), 2), Some(ms(250)));
        assert_eq!(answer_wait(Some(5000), 2), Some(ms(2000)));
        assert_eq!(waited(Some(ms(2000))), "2s");
        assert_eq!(waited(Some(ms(250))), "250 ms");
    }
}
