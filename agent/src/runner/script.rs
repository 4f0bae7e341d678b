//! Turning a trigger into a program to run: the interpreter for its glue type, and the source
//! written to a private file that is removed after the run.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::protocol::{GlueType, TriggerParam};

pub const INTERPRETERS: &[&str] = &["bash", "sh", "python3", "node", "php", "perl", "pwsh"];

/// Which interpreter runs this trigger.
///
/// # Errors
/// A message for glue types and interpreters this agent does not run.
pub fn interpreter_for(trigger: &TriggerParam) -> Result<&'static str, String> {
    let glue = trigger.glue_type.as_ref().unwrap_or(&GlueType::Shell);
    let default = match glue {
        GlueType::Bean => {
            let name = trigger.executor_handler.as_deref().unwrap_or_default();
            return Err(format!(
                "no handler named `{name}` on this agent: a jobfleet agent runs shell and script jobs only"
            ));
        }
        GlueType::Groovy => {
            return Err("GLUE_GROOVY needs a Java executor; a jobfleet agent cannot run it".into());
        }
        other => other
            .interpreter()
            .ok_or_else(|| format!("unknown glueType `{other}`"))?,
    };
    match trigger.interpreter.as_deref() {
        None => Ok(default),
        Some(name) => INTERPRETERS
            .iter()
            .find(|i| **i == name)
            .copied()
            .ok_or_else(|| {
                format!(
                    "unknown interpreter `{name}`; this agent runs {}",
                    INTERPRETERS.join(", ")
                )
            }),
    }
}

/// Interpreters found on PATH so far. The agent's PATH is its own and does not change, so a
/// found interpreter is looked up once instead of a `stat` per PATH entry at every run (7 % of
/// the agent's CPU in a burst of `true` runs, BENCHMARKS.md); one not found is looked up again
/// at its next run, so an interpreter installed later is found without a restart.
static FOUND: Mutex<Vec<(&str, PathBuf)>> = Mutex::new(Vec::new());

/// The interpreter `name` (one of [`INTERPRETERS`]) on PATH.
pub fn find_interpreter(name: &'static str) -> Option<PathBuf> {
    let lock = || {
        FOUND
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some((_, path)) = lock().iter().find(|(n, _)| *n == name) {
        return Some(path.clone());
    }
    let path = which(name)?;
    let mut found = lock();
    if !found.iter().any(|(n, _)| *n == name) {
        found.push((name, path.clone()));
    }
    Some(path)
}

/// Finds `name` on PATH.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
}

fn extension(interpreter: &str) -> &'static str {
    match interpreter {
        "python3" => "py",
        "node" => "js",
        "php" => "php",
        "perl" => "pl",
        "pwsh" => "ps1",
        _ => "sh",
    }
}

/// Largest shell source passed with `-c` instead of a file; well under the kernel's limit of
/// 128 KiB for one argument.
const MAX_INLINE_BYTES: usize = 64 * 1024;

/// The file a run's source is (or, run inline, would be) in: `<dir>/run-<id>.<ext>`.
pub fn source_path(dir: &Path, run_id: i64, interpreter: &str) -> PathBuf {
    crate::path_in(dir, format_args!("run-{run_id}.{}", extension(interpreter)))
}

/// Whether the source runs as `sh -c <source> <path> <args>` rather than from a file. A file
/// per run costs a create and a delete, the dearest part of starting a short run on a busy
/// file system; `$0` is still the path and `$1`.. the arguments, so scripts see no difference.
pub fn runs_inline(interpreter: &str, source: &str) -> bool {
    matches!(interpreter, "sh" | "bash") && source.len() <= MAX_INLINE_BYTES
}

/// Writes the source to its `source_path`, readable only by us (and the run-as user).
pub fn write_source(
    dir: &Path,
    run_id: i64,
    interpreter: &str,
    source: &str,
    owner: Option<(u32, u32)>,
) -> std::io::Result<PathBuf> {
    let path = source_path(dir, run_id, interpreter);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(&path)?;
    // No fsync: the file lives for one run, and a crash forgets the run anyway.
    file.write_all(source.as_bytes())?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
    }
    Ok(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn trigger(glue: &str, interpreter: Option<&str>) -> TriggerParam {
        let mut t: TriggerParam =
            serde_json::from_value(serde_json::json!({"jobId": 1, "logId": 1, "glueType": glue}))
                .unwrap();
        t.interpreter = interpreter.map(str::to_owned);
        t
    }

    #[test]
    fn glue_types_map_to_interpreters() {
        assert_eq!(interpreter_for(&trigger("GLUE_SHELL", None)), Ok("bash"));
        assert_eq!(
            interpreter_for(&trigger("GLUE_SHELL", Some("sh"))),
            Ok("sh")
        );
        assert_eq!(
            interpreter_for(&trigger("GLUE_PYTHON", None)),
            Ok("python3")
        );
        assert!(
            interpreter_for(&trigger("GLUE_GROOVY", None))
                .unwrap_err()
                .contains("Java")
        );
        assert!(
            interpreter_for(&trigger("BEAN", None))
                .unwrap_err()
                .contains("no handler")
        );
        assert!(
            interpreter_for(&trigger("GLUE_SHELL", Some("cobol")))
                .unwrap_err()
                .contains("unknown interpreter")
        );
        assert_eq!(interpreter_for(&trigger("GLUE_PERL", None)), Ok("perl"));
        assert!(interpreter_for(&trigger("GLUE_RUBY", None)).is_err());
        assert!(which("sh").is_some());
        assert!(which("no-such-interpreter-xyz").is_none());
        assert_eq!(find_interpreter("sh"), which("sh"));
        assert_eq!(
            find_interpreter("sh"),
            which("sh"),
            "the second answer is the kept one"
        );
    }
}
