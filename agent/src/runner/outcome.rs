//! The result a run reports: its status, XXL-Job's handle code, and a message saying what
//! happened in words.

use super::Prepared;
use super::supervise::Ended;
use crate::protocol::{HandleCallbackParam, RunOutcome, TriggerParam};

/// The result of a run that ran.
pub(super) fn finished(prepared: &Prepared, ended: Ended) -> HandleCallbackParam {
    let trigger = &prepared.trigger;
    let Ended {
        exit,
        stopped,
        usage,
        logged,
        limits_mode,
        start_latency_us,
        started_ms,
        finished_ms,
        output,
    } = ended;
    let status = match stopped {
        Some(s) => s,
        None if usage.oom_killed => RunOutcome::OomKilled,
        None if exit.code == Some(0) => RunOutcome::Succeeded,
        None => RunOutcome::Failed,
    };
    let describe = match (exit.code, exit.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "ended".to_owned(),
    };
    let mut handle_msg = match status {
        RunOutcome::Succeeded => describe,
        RunOutcome::OomKilled => format!(
            "out of memory: the {} MB limit was hit ({describe})",
            prepared.limits.memory_mb.unwrap_or(0)
        ),
        RunOutcome::TimedOut => {
            format!("timed out after {}s ({describe})", trigger.executor_timeout)
        }
        RunOutcome::Killed => format!("killed ({describe})"),
        _ => format!("failed: {describe}"),
    };
    if logged.cut_bytes > 0 {
        handle_msg.push_str(&format!(
            "; log capped: {} of {} bytes of output cut",
            logged.cut_bytes, logged.total_bytes
        ));
    }
    if let Some(why) = &logged.stopped {
        handle_msg.push_str(&format!("; logging stopped: {why}"));
    }
    tracing::info!(run_id = trigger.log_id, %status, "Run finished");
    HandleCallbackParam {
        log_id: trigger.log_id,
        log_date_tim: trigger.log_date_time,
        handle_code: status.handle_code(),
        handle_msg: Some(handle_msg),
        status: Some(status),
        exit_code: exit.code,
        signal: exit.signal,
        started_ms: Some(started_ms),
        finished_ms: Some(finished_ms),
        usage: Some(usage),
        limits_mode: Some(limits_mode.to_owned()),
        start_latency_us: Some(start_latency_us),
        attempt: trigger.attempt,
        output,
        log: None,
    }
}

/// The result of a run that could not be started or waited for.
pub(super) fn failed(
    trigger: &TriggerParam,
    started_ms: i64,
    msg: String,
    limits_mode: &str,
) -> HandleCallbackParam {
    let finished_ms = crate::now_ms();
    HandleCallbackParam {
        log_id: trigger.log_id,
        log_date_tim: trigger.log_date_time,
        handle_code: RunOutcome::Failed.handle_code(),
        handle_msg: Some(msg),
        status: Some(RunOutcome::Failed),
        exit_code: None,
        signal: None,
        // A run that failed before its time (it was handed over ahead of it) ends when it failed.
        started_ms: Some(started_ms.min(finished_ms)),
        finished_ms: Some(finished_ms),
        usage: None,
        limits_mode: Some(limits_mode.to_owned()),
        start_latency_us: None,
        attempt: trigger.attempt,
        output: None,
        log: None,
    }
}

/// The result of an http job's run: no process, so no exit code or usage.
pub(super) fn http(
    trigger: &TriggerParam,
    started_ms: i64,
    status: RunOutcome,
    msg: String,
    start_latency_us: u64,
) -> HandleCallbackParam {
    HandleCallbackParam {
        handle_code: status.handle_code(),
        status: Some(status),
        start_latency_us: Some(start_latency_us),
        ..failed(trigger, started_ms, msg, "none")
    }
}

/// The result of an accepted run that never started, with `outcome` saying why.
pub(super) fn never_started(
    trigger: &TriggerParam,
    outcome: RunOutcome,
    msg: &str,
) -> HandleCallbackParam {
    HandleCallbackParam {
        handle_code: outcome.handle_code(),
        status: Some(outcome),
        ..failed(trigger, crate::now_ms(), msg.to_owned(), "none")
    }
}
