//! Everything a run needs before it starts: its log (made by its first write), its script,
//! its arguments and its environment.

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::spawner::Strings;
use super::{Prepared, RunnerConfig, script};
use crate::protocol::TriggerParam;

/// The run's log: the copier appends the job's output, the agent its notices. Made on the first
/// write, so a run that writes nothing costs no file (issue 17: the create was the largest cost
/// of a run on the agent's thread). Cloned handles share one file.
#[derive(Clone)]
pub(super) struct RunLog(Arc<LogFile>);

struct LogFile {
    path: PathBuf,
    file: OnceLock<File>,
    /// Lines kept to be written after the run, off the agent's runtime thread (`Block::defer`).
    deferred: Mutex<Vec<u8>>,
}

impl RunLog {
    /// The log at `path`; nothing is made until something is written.
    pub fn new(path: PathBuf) -> Self {
        Self(Arc::new(LogFile {
            path,
            file: OnceLock::new(),
            deferred: Mutex::new(Vec::new()),
        }))
    }

    fn deferred(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0
            .deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The deferred lines' write (`Block::defer`), to be done before the run's result is on
    /// disk; `None` when nothing was deferred.
    pub fn deferred_write(&self) -> Option<impl FnOnce() + Send + 'static> {
        let bytes = std::mem::take(&mut *self.deferred());
        if bytes.is_empty() {
            return None;
        }
        let log = self.clone();
        Some(move || log.append(&bytes))
    }

    /// Where the log is, or is made.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The open log, made (with its day's folder) if this is its first use.
    ///
    /// # Errors
    /// When the file cannot be made or opened.
    pub fn file(&self) -> std::io::Result<&File> {
        if let Some(file) = self.0.file.get() {
            return Ok(file);
        }
        let opened = open_for_append(&self.0.path)?;
        // Two first writers (the copier and a note) both open the one file; one is kept.
        Ok(self.0.file.get_or_init(|| opened))
    }

    /// The log's descriptor if it was made by this handle or a clone of it.
    fn opened(&self) -> Option<&File> {
        self.0.file.get()
    }

    /// The whole log when it is at most `max` bytes (invalid UTF-8 replaced); `None` when it
    /// is longer or cannot be read. Empty when this run wrote nothing.
    /// Lines deferred and not yet written count as the log's.
    pub fn whole_if_within(&self, max: usize) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let deferred = self.deferred();
        let mut bytes = Vec::new();
        if let Some(file) = self.opened() {
            let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
            if len.saturating_add(deferred.len()) > max {
                return None;
            }
            bytes.resize(len, 0);
            file.read_exact_at(&mut bytes, 0).ok()?;
        } else if deferred.len() > max {
            return None;
        }
        bytes.extend_from_slice(&deferred);
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Best effort: a log line is not worth failing the run for.
    fn append(&self, bytes: &[u8]) {
        use std::io::Write;
        if !bytes.is_empty()
            && let Ok(mut file) = self.file()
        {
            let _ = file.write_all(bytes);
        }
    }

    /// Notes and output gathered to go in with one write: each write stamps the file's
    /// modification time, an ext4 journal transaction of its own.
    pub fn block(&self) -> Block<'_> {
        Block {
            log: self,
            bytes: Vec::new(),
        }
    }
}

/// Opens a run's log for appending, made if missing with its day's folder.
fn open_for_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Read too: a note looks at the last byte to start on a line of its own. Without
    // O_NOATIME that read, the first after a write, stamped the file's access time: one more
    // ext4 journal transaction per run, and under a run's start the agent's thread waited
    // for journal space behind it (BENCHMARKS.md, issue 17). O_NOATIME needs the file's
    // owner, which the agent is unless an operator made the file: then it goes without.
    let open = || {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).read(true).append(true).mode(0o600);
        match options.clone().custom_flags(libc::O_NOATIME).open(path) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => options.open(path),
            other => other,
        }
    };
    // The day's folder is made by the first log of the day, not looked for by every one.
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            path.parent().map(std::fs::create_dir_all).transpose()?;
            open()
        }
        other => other,
    }
}

/// What goes into a run's log at once (`RunLog::block`).
pub(super) struct Block<'a> {
    log: &'a RunLog,
    bytes: Vec<u8>,
}

impl Block<'_> {
    /// An agent's notice, on a line of its own even after output without a final newline.
    pub fn note(&mut self, text: &str) {
        let last = match self.bytes.last() {
            Some(&last) => last,
            None => self.log.last_byte(),
        };
        if last != b'\n' {
            self.bytes.push(b'\n');
        }
        self.bytes.extend_from_slice(b"[jobfleet-agent] ");
        self.bytes.extend_from_slice(text.as_bytes());
        self.bytes.push(b'\n');
    }

    /// Output, ended with a newline.
    pub fn output(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        if bytes.last() != Some(&b'\n') {
            self.bytes.push(b'\n');
        }
    }

    /// Best effort: a log line is not worth failing the run for.
    pub fn write(self) {
        self.log.append(&self.bytes);
    }

    /// Keeps the lines to be written after the run, by `RunLog::deferred_write`, on another
    /// thread: making a log and writing it are ext4 journal transactions, and the thread that
    /// does them waits whenever the journal is committing a block they change. On the agent's
    /// runtime thread that wait held up every run due meanwhile: the http jobs' start tail
    /// (BENCHMARKS.md, issue 17).
    pub fn defer(self) {
        if !self.bytes.is_empty() {
            self.log.deferred().extend_from_slice(&self.bytes);
        }
    }
}

impl RunLog {
    /// Appends an agent's notice, on a line of its own even after output without a final
    /// newline. Best effort: a notice is not worth failing the run for.
    pub fn note(&self, text: &str) {
        let mut block = self.block();
        block.note(text);
        block.write();
    }

    /// The log's last byte, deferred lines included; a newline for an empty or unreadable
    /// log. A log this run has not opened is empty: it is made by the run's first write.
    fn last_byte(&self) -> u8 {
        use std::os::unix::fs::FileExt;
        if let Some(&last) = self.deferred().last() {
            return last;
        }
        let mut last = [b'\n'];
        let Some(file) = self.opened() else {
            return last[0];
        };
        if let Ok(meta) = file.metadata()
            && meta.len() > 0
        {
            let _ = file.read_at(&mut last, meta.len() - 1);
        }
        last[0]
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
    /// The program's name first.
    pub argv: Strings,
    /// `KEY=value` entries.
    pub env: Strings,
    pub script: Script,
    /// A workflow node's output file; other runs get none.
    pub outputs: Option<OutputFile>,
}

/// Where the run's `$JOBFLEET_OUTPUT` points, and the file to read afterwards. Only a
/// workflow's node has somewhere to pass outputs to; any other run gets `/dev/null`, so a job
/// that writes outputs still succeeds when triggered on its own. A file made and removed for
/// every run cost more than the rest of the agent's work at 1,000 runs/s: ext4 scans past each
/// recently deleted inode when it allocates the next one.
fn output_channel(
    trigger: &TriggerParam,
    dir: &std::path::Path,
    owner: Option<(u32, u32)>,
) -> Result<(String, Option<OutputFile>), String> {
    if !is_workflow_node(trigger) {
        return Ok(("/dev/null".to_owned(), None));
    }
    let file = OutputFile::create(dir, trigger.log_id, owner)
        .map_err(|e| format!("cannot create the run's output file: {e}"))?;
    Ok((file.path.to_string_lossy().into_owned(), Some(file)))
}

/// Whether the trigger starts a workflow's node: the admin names the workflow run in the
/// run's environment.
fn is_workflow_node(trigger: &TriggerParam) -> bool {
    trigger
        .env
        .as_ref()
        .is_some_and(|env| env.contains_key("JOBFLEET_WORKFLOW_RUN_ID"))
}

/// The file a run may write `KEY=value` lines to (`$JOBFLEET_OUTPUT`); a workflow passes them
/// to the nodes downstream.
pub(super) struct OutputFile {
    path: PathBuf,
    owner: Option<(u32, u32)>,
}

impl OutputFile {
    /// Creates it empty, owned by the run's user.
    fn create(
        dir: &std::path::Path,
        run_id: i64,
        owner: Option<(u32, u32)>,
    ) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(format!("{run_id}.outputs"));
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
        }
        Ok(Self { path, owner })
    }

    /// Reads what the run wrote, whole lines up to `max` bytes, and removes the file. The run
    /// could have replaced the file: only a regular file of the run's own user is read, never
    /// through a symbolic link, so a job cannot make the agent send another user's file.
    pub fn take(&self, max: usize) -> Option<String> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&self.path);
        let _ = std::fs::remove_file(&self.path);
        let file = file.ok()?;
        let meta = file.metadata().ok()?;
        let uid = self
            .owner
            .map_or_else(|| nix::unistd::geteuid().as_raw(), |(uid, _)| uid);
        if !meta.is_file() || meta.uid() != uid || meta.len() == 0 {
            return None;
        }
        let mut bytes = Vec::with_capacity(max.min(usize::try_from(meta.len()).unwrap_or(max)));
        file.take(max as u64 + 1).read_to_end(&mut bytes).ok()?;
        if bytes.len() > max {
            // Whole lines only: cut after the last newline within the bound.
            let end = bytes[..max]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            bytes.truncate(end);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        (!text.is_empty()).then_some(text)
    }
}

/// Finds the interpreter and writes the script.
///
/// # Errors
/// The message for the run's result; a missing interpreter is noted in the log too.
pub(super) fn launch(
    prepared: &Prepared,
    interpreter: &'static str,
    config: &RunnerConfig,
    log: &RunLog,
) -> Result<Launch, String> {
    let trigger = &prepared.trigger;
    let Some(program) = script::find_interpreter(interpreter) else {
        let msg = format!("interpreter `{interpreter}` is not installed on this agent");
        log.note(&msg);
        return Err(msg);
    };
    let source = trigger.glue_source.as_deref().unwrap_or_default();
    let inline = script::runs_inline(interpreter, source);
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
            source,
            config.run_as,
        )
        .map_err(|e| format!("cannot write the script: {e}"))?;
        Script {
            path,
            written: true,
        }
    };
    let params = trigger.executor_params.as_deref().unwrap_or_default();
    let mut argv = Strings::with_capacity(
        64 + program.as_os_str().len()
            + source.len()
            + script.path.as_os_str().len()
            + params.len(),
    );
    argv.push(program.as_os_str().as_bytes());
    if inline {
        argv.push("-c");
        argv.push(source);
    }
    argv.push(script.path.as_os_str().as_bytes());
    argv.push(params);
    argv.push_fmt(format_args!("{}", trigger.broadcast_index));
    argv.push_fmt(format_args!("{}", trigger.broadcast_total));
    let (channel, outputs) = output_channel(trigger, &config.scripts_dir, config.run_as)?;
    let env = env(trigger, params, &channel);
    Ok(Launch {
        program,
        argv,
        env,
        script,
        outputs,
    })
}

/// The agent's own variables a run gets, read once: the agent never changes its environment.
fn agent_env() -> &'static [(&'static str, String)] {
    static AGENT_ENV: std::sync::OnceLock<Vec<(&'static str, String)>> = std::sync::OnceLock::new();
    AGENT_ENV.get_or_init(|| {
        ["PATH", "HOME", "LANG", "TZ", "USER"]
            .into_iter()
            .filter_map(|key| Some((key, std::env::var(key).ok()?)))
            .collect()
    })
}

/// A clean environment: the run's facts as `JOBFLEET_*` (which the extras cannot override), a
/// few of the agent's own variables, and the trigger's extras (which may override those). No
/// name is given twice (a process's `getenv` would take the first): the extras pass no run
/// fact's name, and an agent's variable the extras name is left out. The run's id comes first:
/// the sweep reads it from `/proc/<pid>/environ` (`contain::tag`), of which it reads a bounded
/// head, however large the extras.
fn env(trigger: &TriggerParam, params: &str, output: &str) -> Strings {
    let extra = trigger.env.as_ref();
    let mut env = Strings::with_capacity(
        1024 + params.len()
            + output.len()
            + extra.map_or(0, |e| e.iter().map(|(k, v)| k.len() + v.len() + 2).sum()),
    );
    env.push_fmt(format_args!("JOBFLEET_RUN_ID={}", trigger.log_id));
    env.push_fmt(format_args!("JOBFLEET_JOB_ID={}", trigger.job_id));
    env.push_fmt(format_args!("JOBFLEET_PARAMS={params}"));
    env.push_fmt(format_args!(
        "JOBFLEET_SHARD_INDEX={}",
        trigger.broadcast_index
    ));
    env.push_fmt(format_args!(
        "JOBFLEET_SHARD_TOTAL={}",
        trigger.broadcast_total
    ));
    env.push_fmt(format_args!(
        "JOBFLEET_ATTEMPT={}",
        trigger.attempt.unwrap_or(1)
    ));
    env.push_fmt(format_args!("JOBFLEET_OUTPUT={output}"));
    for (key, value) in agent_env() {
        if !extra.is_some_and(|e| e.contains_key(*key)) {
            env.push_fmt(format_args!("{key}={value}"));
        }
    }
    for (key, value) in extra.into_iter().flatten().filter(|(k, _)| {
        // The run's facts are the agent's; a workflow's facts and inputs come from the admin
        // under names of their own.
        !k.starts_with("JOBFLEET_")
            || k.starts_with("JOBFLEET_WORKFLOW_")
            || k.starts_with("JOBFLEET_IN_")
    }) {
        env.push_fmt(format_args!("{key}={value}"));
    }
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_log_comes_whole_only_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::new(dir.path().join("day/7.log"));
        assert_eq!(log.whole_if_within(10).as_deref(), Some(""));
        let mut block = log.block();
        block.output(b"hello \xff");
        block.write();
        log.note("done");
        assert_eq!(
            log.whole_if_within(100).as_deref(),
            Some("hello \u{fffd}\n[jobfleet-agent] done\n")
        );
        assert_eq!(log.whole_if_within(10), None);
    }

    /// A run that writes nothing leaves no file; the first write makes it, with its day's
    /// folder, and a clone of the handle writes to the same file.
    #[test]
    fn a_log_is_made_by_its_first_write() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("day/9.log");
        let log = RunLog::new(path.clone());
        let empty = log.block();
        empty.write();
        assert_eq!(log.whole_if_within(10).as_deref(), Some(""));
        assert!(!path.exists(), "nothing written, yet a file was made");
        let copier = log.clone();
        copier.file().unwrap().write_all(b"out").unwrap();
        assert_eq!(
            log.whole_if_within(10).as_deref(),
            Some("out"),
            "the handle sees what its clone made"
        );
        log.note("done");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "out\n[jobfleet-agent] done\n"
        );
    }

    /// A block's notes keep to lines of their own, after the file's output and its own; and
    /// reading the log for that leaves its access time alone (O_NOATIME: no journal
    /// transaction for the read).
    #[test]
    fn a_block_keeps_notes_on_their_own_lines_and_reading_the_log_stamps_nothing() {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("day/8.log");
        let log = RunLog::new(path.clone());
        log.file().unwrap().write_all(b"partial").unwrap();
        // An access time well before the write, so that relatime would stamp the next read.
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        std::fs::File::open(&path)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_accessed(long_ago))
            .unwrap();
        let mut block = log.block();
        block.note("HTTP 200 in 3 ms");
        block.output(b"ok");
        block.note("the body was cut after 2 bytes");
        block.write();
        // Before the contents are read here, by a descriptor without O_NOATIME.
        assert_eq!(
            std::fs::metadata(&path).unwrap().atime(),
            1_000_000_000,
            "the note's read of the last byte stamped the access time"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "partial\n[jobfleet-agent] HTTP 200 in 3 ms\nok\n[jobfleet-agent] the body was cut after 2 bytes\n"
        );
    }

    /// Deferred lines make no file and write nothing until their write is run, yet count as
    /// the log's for the result and for the notes after them; they land after what an
    /// earlier write put in the file.
    #[test]
    fn deferred_lines_land_only_with_their_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("day/10.log");
        let log = RunLog::new(path.clone());
        assert!(log.deferred_write().is_none(), "nothing deferred");
        let mut block = log.block();
        block.note("GET http://127.0.0.1/");
        block.output(b"no newline");
        block.defer();
        let mut block = log.block();
        block.note("HTTP 200 in 1 ms");
        block.defer();
        assert!(!path.exists(), "a deferred block made the log");
        let whole = "[jobfleet-agent] GET http://127.0.0.1/\nno newline\n[jobfleet-agent] HTTP 200 in 1 ms\n";
        assert_eq!(log.whole_if_within(1000).as_deref(), Some(whole));
        assert_eq!(log.whole_if_within(10), None);
        let write = log.deferred_write().unwrap();
        assert!(log.deferred_write().is_none(), "taken once");
        std::thread::spawn(write).join().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
        assert_eq!(log.whole_if_within(1000).as_deref(), Some(whole));

        // After a line written at once (a slow answer's request line), deferred ones follow it.
        let path = dir.path().join("day/11.log");
        let log = RunLog::new(path.clone());
        log.note("GET http://127.0.0.1/slow");
        let mut block = log.block();
        block.note("HTTP 200 in 1500 ms");
        block.defer();
        let both =
            "[jobfleet-agent] GET http://127.0.0.1/slow\n[jobfleet-agent] HTTP 200 in 1500 ms\n";
        assert_eq!(log.whole_if_within(1000).as_deref(), Some(both));
        log.deferred_write().unwrap()();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), both);
    }

    // A job that writes outputs runs the same on its own and as a node; only a node's
    // outputs have a file (and are sent).
    #[test]
    fn only_a_workflow_node_gets_an_output_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut trigger: TriggerParam =
            serde_json::from_value(serde_json::json!({"jobId": 1, "logId": 11})).unwrap();
        let (channel, file) = output_channel(&trigger, dir.path(), None).unwrap();
        assert_eq!(channel, "/dev/null");
        assert!(file.is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let status = std::process::Command::new("sh")
            .args(["-c", "set -eu; echo greeting=hi >> \"$JOBFLEET_OUTPUT\""])
            .env("JOBFLEET_OUTPUT", &channel)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "writing outputs outside a workflow fails: {status}"
        );

        trigger.env = Some(BTreeMap::from([(
            "JOBFLEET_WORKFLOW_RUN_ID".to_owned(),
            "3".to_owned(),
        )]));
        let (channel, file) = output_channel(&trigger, dir.path(), None).unwrap();
        std::fs::write(&channel, "greeting=hi\n").unwrap();
        assert_eq!(file.unwrap().take(100).as_deref(), Some("greeting=hi\n"));
    }

    #[test]
    fn outputs_are_read_in_whole_lines_once() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutputFile::create(dir.path(), 7, None).unwrap();
        std::fs::write(&out.path, "a=1\nb=22\nc=333\n").unwrap();
        assert_eq!(
            out.take(9).as_deref(),
            Some("a=1\nb=22\n"),
            "cut at a line end"
        );
        assert!(!out.path.exists(), "removed once read");
        assert_eq!(out.take(100), None);
        let empty = OutputFile::create(dir.path(), 8, None).unwrap();
        assert_eq!(empty.take(100), None, "nothing written, nothing sent");
    }

    #[test]
    fn a_run_cannot_make_the_agent_read_another_file() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "password=hunter2\n").unwrap();
        let out = OutputFile::create(dir.path(), 9, None).unwrap();
        std::fs::remove_file(&out.path).unwrap();
        std::os::unix::fs::symlink(&secret, &out.path).unwrap();
        assert_eq!(out.take(100), None, "a symbolic link is not followed");
        // A file of another user (here: one the run claims is its output) is not read either.
        let foreign = OutputFile {
            path: secret.clone(),
            owner: Some((nix::unistd::geteuid().as_raw() + 1, 0)),
        };
        assert_eq!(foreign.take(100), None);
    }

    #[test]
    fn workflow_facts_pass_but_run_facts_cannot_be_overridden() {
        let mut trigger: TriggerParam =
            serde_json::from_value(serde_json::json!({"jobId": 1, "logId": 5})).unwrap();
        trigger.env = Some(BTreeMap::from([
            ("JOBFLEET_RUN_ID".to_owned(), "666".to_owned()),
            ("JOBFLEET_WORKFLOW_NODE".to_owned(), "b".to_owned()),
            ("JOBFLEET_IN_greeting".to_owned(), "hi".to_owned()),
            ("PLAIN".to_owned(), "x".to_owned()),
            ("PATH".to_owned(), "/custom".to_owned()),
        ]));
        let entries = env(&trigger, "", "/dev/null");
        let mut env = BTreeMap::new();
        for (n, entry) in entries.iter().enumerate() {
            let (k, v) = std::str::from_utf8(entry).unwrap().split_once('=').unwrap();
            if n == 0 {
                assert_eq!(k, "JOBFLEET_RUN_ID", "the sweep's tag first");
            }
            assert_eq!(env.insert(k, v), None, "{k} given twice");
        }
        let agents_kept = agent_env().iter().filter(|(k, _)| *k != "PATH").count();
        assert_eq!(env.len(), 4 + 7 + agents_kept, "each name once: {env:?}");
        assert_eq!(env["PATH"], "/custom", "an extra overrides the agent's own");
        assert_eq!(env["JOBFLEET_OUTPUT"], "/dev/null");
        assert_eq!(env["JOBFLEET_RUN_ID"], "5");
        assert_eq!(env["JOBFLEET_WORKFLOW_NODE"], "b");
        assert_eq!(env["JOBFLEET_IN_greeting"], "hi");
        assert_eq!(env["PLAIN"], "x");
    }
}
