//! Dispatch: turning a run row into a trigger, choosing agents by the job's routing strategy,
//! and sending it.

pub mod client;
pub mod routing;
pub mod send;

use jobfleet_agent::protocol::{Limits, TriggerParam};

use crate::db::{job::Job, job_run::JobRun};

/// XXL-Job's name for a block strategy.
fn block_strategy(name: &str) -> &'static str {
    match name {
        "discard_later" => "DISCARD_LATER",
        "cover_early" => "COVER_EARLY",
        _ => "SERIAL_EXECUTION",
    }
}

/// The trigger for `run` of `job`. A shell command travels as a `GLUE_SHELL` script run by `sh`
/// (so XXL-Job executors run it too); scripts by their interpreter's glue type.
pub fn trigger_param(job: &Job, run: &JobRun) -> TriggerParam {
    let (glue_type, source, interpreter, handler) = match job.handler_type.as_str() {
        "shell" => (
            "GLUE_SHELL",
            job.command.clone(),
            Some("sh".to_owned()),
            None,
        ),
        "script" => {
            let interpreter = job.interpreter.clone().unwrap_or_else(|| "bash".into());
            let glue = match interpreter.as_str() {
                "python3" => "GLUE_PYTHON",
                "node" => "GLUE_NODEJS",
                "php" => "GLUE_PHP",
                "pwsh" => "GLUE_POWERSHELL",
                _ => "GLUE_SHELL",
            };
            (glue, job.script_source.clone(), Some(interpreter), None)
        }
        _ => ("BEAN", None, None, job.bean_name.clone()),
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
        executor_block_strategy: Some(block_strategy(&job.block_strategy).to_owned()),
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
