//! Dispatch: turning a run row into a trigger, choosing agents by the job's routing strategy,
//! and sending it.

pub mod client;
pub mod routing;
pub mod send;

use jobfleet_agent::protocol::{BlockStrategy, GlueType, Limits, TriggerParam};

use crate::db::{job::Job, job_run::JobRun};
use crate::domain::policy;

/// XXL-Job's name for a stored block strategy. A name this admin cannot read queues, which
/// loses no run.
fn block_strategy(name: &str) -> BlockStrategy {
    match name.parse() {
        Ok(policy::BlockStrategy::DiscardLater) => BlockStrategy::DiscardLater,
        Ok(policy::BlockStrategy::CoverEarly) => BlockStrategy::CoverEarly,
        Ok(policy::BlockStrategy::Serial) | Err(_) => BlockStrategy::SerialExecution,
    }
}

/// The glue type and interpreter a job's handler travels as. A shell command is a
/// `GLUE_SHELL` script run by `sh` (so XXL-Job executors run it too); a script goes by its
/// interpreter's glue type, so an XXL-Job executor that gets it runs the same language or
/// refuses it (Perl, which XXL-Job lacks); anything else is a bean.
fn glue(handler_type: &str, interpreter: Option<&str>) -> (GlueType, Option<String>) {
    match handler_type {
        "shell" => (GlueType::Shell, Some("sh".to_owned())),
        "script" => {
            let interpreter = interpreter.unwrap_or("bash");
            (
                GlueType::for_interpreter(interpreter),
                Some(interpreter.to_owned()),
            )
        }
        _ => (GlueType::Bean, None),
    }
}

/// The trigger for `run` of `job`.
pub fn trigger_param(job: &Job, run: &JobRun) -> TriggerParam {
    let (glue_type, interpreter) = glue(&job.handler_type, job.interpreter.as_deref());
    let (source, handler) = match job.handler_type.as_str() {
        "shell" => (job.command.clone(), None),
        "script" => (job.script_source.clone(), None),
        _ => (None, job.bean_name.clone()),
    };
    let limits = Limits {
        cpu: job.limit_cpu,
        memory_mb: job.limit_memory_mb,
        pids: job.limit_pids,
    };
    TriggerParam {
        job_id: job.id,
        executor_handler: Some(handler.unwrap_or_default()),
        executor_params: Some(run.params.clone()),
        executor_block_strategy: Some(block_strategy(&job.block_strategy)),
        executor_timeout: job.timeout_s,
        log_id: run.id,
        log_date_time: run.created_ms,
        glue_type: Some(glue_type),
        glue_source: source,
        glue_updatetime: job.updated_ms,
        broadcast_index: run.shard_index,
        broadcast_total: run.shard_total,
        interpreter,
        limits: (limits != Limits::default()).then_some(limits),
        env: None,
        attempt: Some(run.attempt),
        scheduled_ms: Some(run.scheduled_ms),
        run_as: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_is_not_sent_as_shell() {
        // A stock XXL-Job executor runs `GLUE_SHELL` with bash whatever `interpreter` says.
        let (glue_type, interpreter) = glue("script", Some("perl"));
        assert_eq!(
            (glue_type.as_str(), interpreter.as_deref()),
            ("GLUE_PERL", Some("perl"))
        );
        assert_eq!(glue("script", None).0, GlueType::Shell);
        assert_eq!(glue("script", Some("python3")).0, GlueType::Python);
        assert_eq!(glue("shell", None), (GlueType::Shell, Some("sh".into())));
        assert_eq!(glue("bean", None), (GlueType::Bean, None));
    }

    #[test]
    fn block_strategies_travel_by_xxl_job_names() {
        assert_eq!(block_strategy("serial"), BlockStrategy::SerialExecution);
        assert_eq!(block_strategy("discard_later"), BlockStrategy::DiscardLater);
        assert_eq!(block_strategy("cover_early"), BlockStrategy::CoverEarly);
        assert_eq!(block_strategy("bogus"), BlockStrategy::SerialExecution);
    }
}
