//! Results from agents (`/api/callback`), stored idempotently: a result for an unknown or
//! already-finished run is acknowledged and changes nothing, so agents can resend freely. A
//! stored result creates its follow-ups (retry, child jobs) in the same transaction.

use jobfleet_agent::protocol::{CODE_OK, CODE_TIMEOUT, HandleCallbackParam};

use crate::db::job_run::{self, RunResult};
use crate::error::Error;
use crate::scheduler::followup;
use crate::startup::AppState;

/// The run status a callback means. jobfleet agents say it; XXL-Job executors only give a code.
fn status_of(cb: &HandleCallbackParam) -> &'static str {
    match cb.status.as_deref() {
        Some("succeeded") => "succeeded",
        Some("timed_out") => "timed_out",
        Some("killed") => "killed",
        Some(_) => "failed",
        None => match cb.handle_code {
            CODE_OK => "succeeded",
            CODE_TIMEOUT => "timed_out",
            _ => "failed",
        },
    }
}

fn result_of(cb: &HandleCallbackParam) -> RunResult {
    let usage = cb.usage.as_ref();
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    RunResult {
        status: status_of(cb).to_owned(),
        started_ms: cb.started_ms,
        finished_ms: Some(cb.finished_ms.unwrap_or(cb.log_date_tim)),
        handle_code: Some(cb.handle_code),
        handle_msg: cb
            .handle_msg
            .as_ref()
            .map(|m| m.chars().take(4000).collect()),
        exit_code: cb.exit_code,
        term_signal: cb.signal,
        cpu_ms: usage.map(|u| clamp(u.cpu_ms)),
        max_rss_kb: usage.map(|u| clamp(u.max_rss_kb)),
        oom_killed: usage
            .map(|u| u.oom_killed)
            .or(Some(cb.status.as_deref() == Some("oom_killed"))),
        limits_mode: cb.limits_mode.clone(),
    }
}

/// Stores a batch in one transaction; the agent deletes its copies only after we answer 200.
///
/// # Errors
/// Database errors (the agent keeps the batch and retries).
pub async fn accept(state: &AppState, batch: Vec<HandleCallbackParam>) -> Result<usize, Error> {
    if batch.len() > 1000 {
        return Err(Error::invalid("callback", "at most 1000 results per batch"));
    }
    let now = state.clock.now_ms();
    let outbox = state.alerts.outbox();
    let alerts = outbox.clone();
    let (stored, statuses, dues) = state
        .db
        .transaction(move |conn| {
            let mut stored = 0;
            let mut statuses = Vec::new();
            let mut dues = Vec::new();
            for cb in &batch {
                let mut result = result_of(cb);
                if result.finished_ms.is_none_or(|t| t <= 0) {
                    result.finished_ms = Some(now);
                }
                if job_run::record_result(conn, cb.log_id, &result)? {
                    stored += 1;
                    // In this transaction: the retry or the children exist iff the result does.
                    dues.extend(followup::after_final(conn, cb.log_id, now, &alerts)?);
                    statuses.push(result.status);
                }
            }
            Ok((stored, statuses, dues))
        })
        .await?;
    outbox.committed();
    for status in &statuses {
        state.metrics.run_outcomes.inc(status);
    }
    state.scheduler.enqueue(dues);
    Ok(stored)
}
