//! Everything a run needs before it starts: its log file, its script, its arguments and its
//! environment.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;

use super::{Prepared, RunnerConfig, script};
use crate::protocol::TriggerParam;

/// The run's log: the copier appends the job's output, the agent its notices.
pub(super) struct RunLog {
    pub path: PathBuf,
    file: File,
}

impl RunLog {
    pub fn open(path: PathBuf) -> std::io::Result<Self> {
        path.parent().map(std::fs::create_dir_all).transpose()?;
        // Read too: a note looks at the last byte to start on a line of its own.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        Ok(Self { path, file })
    }

    /// Appends an agent's notice, on a line of its own even after output without a final
    /// newline. Best effort: a notice is not worth failing the run for.
    pub fn note(&self, text: &str) {
        use std::io::Write;
        use std::os::unix::fs::FileExt;
        let mut last = [b'\n'];
        if let Ok(meta) = self.file.metadata()
            && meta.len() > 0
        {
            let _ = self.file.read_at(&mut last, meta.len() - 1);
        }
        let newline = if last[0] == b'\n' { "" } else { "\n" };
        let _ = writeln!(&self.file, "{newline}[jobfleet-agent] {text}");
    }
}

/// Where a run's source is: a file of its own, or (run inline) only the path `$0` names.
pub(super) struct Script {
    path: PathBuf,
    written: bool,
}

impl Script {
    /// Removes the file, if one was written.
    pub fn remove(&self) {
        if self.written {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What to start, and the script to remove once the run is over.
pub(super) struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub script: Script,
}

/// Finds the interpreter and writes the script.
///
/// # Errors
/// The message for the run's result; a missing interpreter is noted in the log too.
pub(super) fn launch(
    prepared: &Prepared,
    config: &RunnerConfig,
    log: &RunLog,
) -> Result<Launch, String> {
    let trigger = &prepared.trigger;
    let interpreter = prepared.interpreter;
    let Some(program) = script::which(interpreter) else {
        let msg = format!("interpreter `{interpreter}` is not installed on this agent");
        log.note(&msg);
        return Err(msg);
    };
    let source = trigger.glue_source.clone().unwrap_or_default();
    let inline = script::runs_inline(interpreter, &source);
    let script = if inline {
        Script {
            path: script::source_path(&config.scripts_dir, trigger.log_id, interpreter),
            written: false,
        }
    } else {
        let path = script::write_source(
            &config.scripts_dir,
            trigger.log_id,
            interpreter,
            &source,
            config.run_as,
        )
        .map_err(|e| format!("cannot write the script: {e}"))?;
        Script {
            path,
            written: true,
        }
    };
    let params = trigger.executor_params.clone().unwrap_or_default();
    let mut args = Vec::with_capacity(6);
    if inline {
        args.extend(["-c".to_owned(), source]);
    }
    args.extend([
        script.path.to_string_lossy().into_owned(),
        params.clone(),
        trigger.broadcast_index.to_string(),
        trigger.broadcast_total.to_string(),
    ]);
    Ok(Launch {
        program,
        args,
        env: env(trigger, params),
        script,
    })
}

/// A clean environment: a few of the agent's own variables, the trigger's extras, and the
/// run's facts as `JOBFLEET_*` (which the extras cannot override).
fn env(trigger: &TriggerParam, params: String) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for key in ["PATH", "HOME", "LANG", "TZ", "USER"] {
        if let Ok(v) = std::env::var(key) {
            env.insert(key.to_owned(), v);
        }
    }
    if let Some(extra) = &trigger.env {
        env.extend(
            extra
                .iter()
                .filter(|(k, _)| !k.starts_with("JOBFLEET_"))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    env.insert("JOBFLEET_JOB_ID".into(), trigger.job_id.to_string());
    env.insert("JOBFLEET_RUN_ID".into(), trigger.log_id.to_string());
    env.insert("JOBFLEET_PARAMS".into(), params);
    env.insert(
        "JOBFLEET_SHARD_INDEX".into(),
        trigger.broadcast_index.to_string(),
    );
    env.insert(
        "JOBFLEET_SHARD_TOTAL".into(),
        trigger.broadcast_total.to_string(),
    );
    env.insert(
        "JOBFLEET_ATTEMPT".into(),
        trigger.attempt.unwrap_or(1).to_string(),
    );
    env
}
