//! Dispatch: turning a run row into a trigger, choosing agents by the job's routing strategy,
//! and sending it.

pub mod client;
pub mod routing;
pub mod send;

use jobfleet_agent::protocol::{Limits, TriggerParam};

use crate::db::{job::Job, job_run::JobRun};
use crate::domain::policy::{BlockStrategy, HandlerType, Interpreter};

/// XXL-Job's name for a block strategy.
fn block_strategy(strategy: BlockStrategy) -> &'static str {
    match strategy {
        BlockStrategy::DiscardLater => "DISCARD_LATER",
        BlockStrategy::CoverEarly => "COVER_EARLY",
        BlockStrategy::Serial => "SERIAL_EXECUTION",
    }
}

/// The trigger for `run` of `job`. A shell command travels as a `GLUE_SHELL` script run by `sh`
/// (so XXL-Job executors run it too); scripts by their interpreter's glue type.
pub fn trigger_param(job: &Job, run: &JobRun) -> TriggerParam {
    let (glue_type, source, interpreter, handler) = match job.handler_type {
        HandlerType::Shell => (
            "GLUE_SHELL",
            job.command.clone(),
            Some("sh".to_owned()),
            None,
        ),
        HandlerType::Script => {
            let interpreter = job.interpreter.unwrap_or(Interpreter::Bash);
            let glue = match interpreter {
                Interpreter::Python3 => "GLUE_PYTHON",
                Interpreter::Node => "GLUE_NODEJS",
                Interpreter::Php => "GLUE_PHP",
                Interpreter::Pwsh => "GLUE_POWERSHELL",
                Interpreter::Bash | Interpreter::Sh | Interpreter::Perl => "GLUE_SHELL",
            };
            (
                glue,
                job.script_source.clone(),
                Some(interpreter.as_str().to_owned()),
                None,
            )
        }
        HandlerType::Bean => ("BEAN", None, None, job.bean_name.clone()),
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
        executor_block_strategy: Some(block_strategy(job.block_strategy).to_owned()),
        executor_timeout: job.timeout_s,
        log_id: run.id,
        log_date_time: run.created_ms,
        glue_type: Some(glue_type.to_owned()),
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
