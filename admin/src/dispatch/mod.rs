//! Dispatch: turning a run row into a trigger, choosing agents by the job's routing strategy,
//! and sending it.

mod ahead;
pub mod answer;
pub mod client;
pub mod link;
pub mod pull;
pub mod relay;
pub mod routing;
pub mod send;

use jobfleet_agent::protocol::{BlockStrategy, GlueType, Limits, TriggerParam};

use crate::db::{job::Job, job_run::JobRun};
use crate::domain::policy::{self, Concurrency, HandlerType, Interpreter};

/// XXL-Job's name for a block strategy.
fn block_strategy(strategy: policy::BlockStrategy) -> BlockStrategy {
    match strategy {
        policy::BlockStrategy::DiscardLater => BlockStrategy::DiscardLater,
        policy::BlockStrategy::CoverEarly => BlockStrategy::CoverEarly,
        policy::BlockStrategy::Serial => BlockStrategy::SerialExecution,
    }
}

/// The glue type and interpreter a job's handler travels as. A shell command is a
/// `GLUE_SHELL` script run by `sh` (so XXL-Job executors run it too); a script goes by its
/// interpreter's glue type, so an XXL-Job executor that gets it runs the same language or
/// refuses it (Perl, which XXL-Job lacks); a bean has no script.
fn glue(handler_type: HandlerType, interpreter: Option<Interpreter>) -> (GlueType, Option<String>) {
    match handler_type {
        HandlerType::Shell => (GlueType::Shell, Some("sh".to_owned())),
        HandlerType::Script => {
            let interpreter = interpreter.unwrap_or(Interpreter::Bash).as_str();
            (
                GlueType::for_interpreter(interpreter),
                Some(interpreter.to_owned()),
            )
        }
        HandlerType::Bean => (GlueType::Bean, None),
        HandlerType::Http => (GlueType::Http, None),
    }
}

/// How long the agent may hold `run`'s success for company (`resultLingerMs`): only while
/// nothing at the admin waits for it. A child job or a workflow's next node starts from the
/// result, and under `forbid`/`replace` the next fire judges whether this run still goes.
fn result_linger(job: &Job, run: &JobRun, linger_ms: u32) -> Option<i64> {
    let nothing_waits = job.children.is_empty()
        && run.workflow_node_id.is_none()
        && job.concurrency == Concurrency::Allow;
    (linger_ms > 0 && nothing_waits).then_some(i64::from(linger_ms))
}

/// The trigger for `run` of `job`; a success may wait `linger_ms` on the agent when nothing
/// waits for it (`result_linger`).
pub fn trigger_param(job: &Job, run: &JobRun, linger_ms: u32) -> TriggerParam {
    let (glue_type, interpreter) = glue(job.handler_type, job.interpreter);
    let (source, handler) = match job.handler_type {
        HandlerType::Shell => (job.command.clone(), None),
        HandlerType::Script => (job.script_source.clone(), None),
        HandlerType::Bean => (None, job.bean_name.clone()),
        // Stored as the agent reads it (normalized when the job was saved).
        HandlerType::Http => (job.http_request.clone(), None),
    };
    let limits = Limits {
        cpu: job.limit_cpu,
        memory_mb: job.limit_memory_mb,
        pids: job.limit_pids,
    };
    TriggerParam {
        job_id: job.id.0,
        executor_handler: Some(handler.unwrap_or_default()),
        executor_params: Some(run.params.clone()),
        executor_block_strategy: Some(block_strategy(job.block_strategy)),
        executor_timeout: run.timeout_s.unwrap_or(job.timeout_s),
        log_id: run.id.0,
        log_date_time: run.created_ms,
        glue_type: Some(glue_type),
        glue_source: source,
        glue_updatetime: job.updated_ms,
        broadcast_index: run.shard_index,
        broadcast_total: run.shard_total,
        interpreter,
        limits: (limits != Limits::default()).then_some(limits),
        // A workflow node's run carries its workflow's facts and upstream outputs.
        env: run
            .env
            .as_deref()
            .and_then(|env| serde_json::from_str(env).ok()),
        attempt: Some(run.attempt),
        scheduled_ms: Some(run.scheduled_ms),
        run_as: None,
        result_linger_ms: result_linger(job, run, linger_ms),
        start_in_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_is_not_sent_as_shell() {
        // A stock XXL-Job executor runs `GLUE_SHELL` with bash whatever `interpreter` says.
        let (glue_type, interpreter) = glue(HandlerType::Script, Some(Interpreter::Perl));
        assert_eq!(
            (glue_type.as_str(), interpreter.as_deref()),
            ("GLUE_PERL", Some("perl"))
        );
        assert_eq!(glue(HandlerType::Script, None).0, GlueType::Shell);
        assert_eq!(
            glue(HandlerType::Script, Some(Interpreter::Python3)).0,
            GlueType::Python
        );
        assert_eq!(
            glue(HandlerType::Shell, None),
            (GlueType::Shell, Some("sh".into()))
        );
        assert_eq!(glue(HandlerType::Bean, None), (GlueType::Bean, None));
    }

    #[test]
    fn block_strategies_travel_by_xxl_job_names() {
        for (ours, xxl) in [
            (
                policy::BlockStrategy::Serial,
                BlockStrategy::SerialExecution,
            ),
            (
                policy::BlockStrategy::DiscardLater,
                BlockStrategy::DiscardLater,
            ),
            (policy::BlockStrategy::CoverEarly, BlockStrategy::CoverEarly),
        ] {
            assert_eq!(block_strategy(ours), xxl);
        }
    }
}
