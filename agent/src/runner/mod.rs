//! The in-flight table: which run each job has going and what is queued behind it, the block
//! strategies, and the supervision of each run as its own task that awaits the child's exit.

pub mod contain;
pub mod http;
pub mod kill;
pub mod limits;
mod outcome;
pub mod output;
mod prepare;
pub mod script;
pub mod spawn;
pub mod spawner;
pub mod start_marks;
mod supervise;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};

use crate::journal::{Fate, Journal, Landed};
use crate::logs::Logs;
use crate::protocol::{
    BlockStrategy, GlueType, HandleCallbackParam, Limits, RunOutcome, TriggerParam,
};
use crate::spool::{Before, COLLECT_FOR, Due, Spool, SpoolWriter};
use prepare::RunLog;
use start_marks::StartMarks;

/// Longest timeout a trigger may ask for: a week.
pub const MAX_TIMEOUT_S: i64 = 7 * 24 * 3600;
const SHUT_DOWN_BEFORE_START: &str = "the agent shut down before this queued run started";
/// Largest script source accepted.
pub const MAX_SOURCE_BYTES: usize = 1024 * 1024;
/// Results handed to the spool's writer and not on disk yet beyond which a run's slot waits for
/// its result to be on disk: far more than a gathering holds at any rate an agent starts runs.
const BEHIND_AFTER: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Serial,
    DiscardLater,
    CoverEarly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Killed,
    CoveredBy,
    Shutdown,
}

/// A validated trigger, ready to start.
#[derive(Debug)]
struct Prepared {
    /// When the trigger reached us, for the start-latency figure.
    received: Instant,
    /// Not started before this (`startInMs` after `received`).
    not_before: Option<Instant>,
    trigger: TriggerParam,
    work: Work,
    block: Block,
    limits: Limits,
    /// A queued run's acceptance (`Q`) on its way to disk: the run starts only if it landed,
    /// since the admin was told "not accepted" otherwise and may have sent it elsewhere.
    queued: Option<Landed>,
}

impl Prepared {
    /// When the run was due to start here: its arrival, or the time it was sent ahead for.
    fn due(&self) -> Instant {
        self.not_before.unwrap_or(self.received)
    }
}

/// What a run does: start a process with an interpreter, or send a request itself.
#[derive(Debug)]
enum Work {
    Process(&'static str),
    Http(Arc<http::HttpJob>),
}

struct Current {
    run_id: i64,
    stop: Option<oneshot::Sender<StopReason>>,
}

#[derive(Default)]
struct JobState {
    current: Option<Current>,
    queue: VecDeque<Prepared>,
}

struct State {
    jobs: HashMap<i64, JobState>,
    running: usize,
    /// Results of ended runs handed to the spool's writer and not on disk yet.
    unwritten: usize,
    /// Jobs whose queued run waits for a free slot, first come first served. An entry goes
    /// stale when its job was killed or started otherwise; it is skipped when reached.
    waiting: VecDeque<i64>,
    accepting: bool,
    /// Accept sequence numbers handed out so far: the admin stores a run's number, and a
    /// heartbeat that has handed it out and does not list the run proves the run is gone.
    accepted: u64,
    http_requests: http::CheckedRequests,
}

impl State {
    /// After runs were taken off a job's queue: a job with nothing running or queued is
    /// forgotten, and its places in the wait for a slot are kept to at most one per run still
    /// queued (the newest go). A place left behind would count against `max_queued` and could
    /// start a later trigger of the job ahead of runs that came before it.
    fn settle_queue(&mut self, job_id: i64) {
        let (queued, idle) = self.jobs.get(&job_id).map_or((0, true), |job| {
            (
                job.queue.len(),
                job.current.is_none() && job.queue.is_empty(),
            )
        });
        if idle {
            self.jobs.remove(&job_id);
        }
        let mut places = self
            .waiting
            .iter()
            .filter(|&&waiting| waiting == job_id)
            .count();
        while places > queued {
            if let Some(at) = self.waiting.iter().rposition(|&waiting| waiting == job_id) {
                self.waiting.remove(at);
            }
            places -= 1;
        }
    }

    /// The next run waiting for a slot, taken off its job's queue.
    fn next_waiting(&mut self) -> Option<Prepared> {
        while let Some(job_id) = self.waiting.pop_front() {
            if let Some(job) = self.jobs.get_mut(&job_id)
                && job.current.is_none()
                && let Some(prepared) = job.queue.pop_front()
            {
                return Some(prepared);
            }
        }
        None
    }
}

pub struct RunnerConfig {
    pub scripts_dir: PathBuf,
    pub max_concurrent: usize,
    pub max_queued: usize,
    pub kill_grace: Duration,
    /// How long a success that may linger waits in memory for company before it is written.
    pub spool_gather: Duration,
    pub run_as: Option<(u32, u32)>,
    /// The user every run runs as (`run_as`, or the agent's own user); a trigger naming
    /// another user is refused.
    pub jobs_user: String,
    pub limits_mode: limits::Mode,
    pub output: output::OutputLimits,
    /// Sends http jobs' requests (`http::client`).
    pub http: reqwest::Client,
}

/// An accepted trigger: the answer, its accept number, and for a new run the journal line
/// whose landing makes the acceptance durable.
#[derive(Debug)]
pub struct Accepted {
    pub message: String,
    pub seq: u64,
    pub landed: Option<Landed>,
}

fn fate_name(fate: Fate) -> &'static str {
    match fate {
        Fate::Queued => "queued",
        Fate::Started => "running",
        Fate::Finished => "finished",
    }
}

pub struct Runner {
    journal: Journal,
    /// Which runs got as far as their process (or request), for a restart (`start_marks`).
    marks: StartMarks,
    state: Mutex<State>,
    config: RunnerConfig,
    logs: Logs,
    spool: Spool,
    writer: SpoolWriter,
    /// When the results in the spool are due at an admin.
    pub results: Arc<Due>,
    /// Woken when a run finishes (shutdown and the pull wait on it).
    finished: Notify,
    /// Woken when a result handed to the spool's writer is on disk (shutdown waits on it).
    written: Notify,
    containment: Arc<contain::Containment>,
}

/// How long `result` may wait in the spool for company: a success as long as its trigger
/// allowed (nothing at the admin waits for it), anything else only to be collected with results
/// ending together (a failure may be retried or page someone).
fn linger_of(result: &HandleCallbackParam, linger_ms: Option<i64>) -> Duration {
    match (
        &result.status,
        linger_ms.and_then(|ms| u64::try_from(ms).ok()),
    ) {
        (Some(RunOutcome::Succeeded), Some(ms)) => Duration::from_millis(ms).max(COLLECT_FOR),
        _ => COLLECT_FOR,
    }
}

fn block_of(strategy: Option<&BlockStrategy>) -> Result<Block, String> {
    match strategy {
        None | Some(BlockStrategy::SerialExecution) => Ok(Block::Serial),
        Some(BlockStrategy::DiscardLater) => Ok(Block::DiscardLater),
        Some(BlockStrategy::CoverEarly) => Ok(Block::CoverEarly),
        // Empty is as good as absent.
        Some(BlockStrategy::Other(name)) if name.is_empty() => Ok(Block::Serial),
        Some(other) => Err(format!("unknown executorBlockStrategy `{other}`")),
    }
}

fn validate(
    trigger: TriggerParam,
    received: Instant,
    http_requests: &mut http::CheckedRequests,
) -> Result<Prepared, String> {
    if trigger.log_id <= 0 {
        return Err(format!("invalid logId {}", trigger.log_id));
    }
    if !(0..=MAX_TIMEOUT_S).contains(&trigger.executor_timeout) {
        return Err(format!(
            "executorTimeout must be between 0 and {MAX_TIMEOUT_S} seconds (got {})",
            trigger.executor_timeout
        ));
    }
    if let Some(ms) = trigger.result_linger_ms
        && !(0..=crate::protocol::MAX_RESULT_LINGER_MS).contains(&ms)
    {
        return Err(format!(
            "resultLingerMs must be between 0 and {} (got {ms})",
            crate::protocol::MAX_RESULT_LINGER_MS
        ));
    }
    if let Some(ms) = trigger.start_in_ms
        && !(0..=crate::protocol::MAX_START_IN_MS).contains(&ms)
    {
        return Err(format!(
            "startInMs must be between 0 and {} (got {ms})",
            crate::protocol::MAX_START_IN_MS
        ));
    }
    if trigger.broadcast_total < 1
        || trigger.broadcast_index < 0
        || trigger.broadcast_index >= trigger.broadcast_total
    {
        return Err(format!(
            "invalid shard {}/{}",
            trigger.broadcast_index, trigger.broadcast_total
        ));
    }
    let limits = trigger.limits.clone().unwrap_or_default();
    if limits
        .cpu
        .is_some_and(|c| !c.is_finite() || c <= 0.0 || c > 1024.0)
    {
        return Err("limits.cpu must be between 0 and 1024 cores".into());
    }
    if limits.memory_mb.is_some_and(|m| m < 4) {
        return Err("limits.memoryMb must be at least 4".into());
    }
    if limits.pids.is_some_and(|p| p < 1) {
        return Err("limits.pids must be at least 1".into());
    }
    if trigger
        .glue_source
        .as_ref()
        .is_some_and(|s| s.len() > MAX_SOURCE_BYTES)
    {
        return Err(format!(
            "glueSource is larger than {MAX_SOURCE_BYTES} bytes"
        ));
    }
    if trigger
        .glue_source
        .as_ref()
        .is_some_and(|s| s.contains('\0'))
        || trigger
            .executor_params
            .as_ref()
            .is_some_and(|s| s.contains('\0'))
    {
        return Err("glueSource and executorParams must not contain NUL".into());
    }
    let block = block_of(trigger.executor_block_strategy.as_ref())?;
    let work = if trigger.glue_type == Some(GlueType::Http) {
        Work::Http(http_requests.of(&trigger)?)
    } else {
        Work::Process(script::interpreter_for(&trigger)?)
    };
    let not_before = trigger
        .start_in_ms
        .filter(|&ms| ms > 0)
        .map(|ms| received + Duration::from_millis(ms.unsigned_abs()));
    Ok(Prepared {
        received,
        not_before,
        trigger,
        work,
        block,
        limits,
        queued: None,
    })
}

/// How long before its time (`startInMs`) a run's process is handed to the spawner, which starts
/// it then: the agent's runtime need not wake at each run's time (BENCHMARKS.md, issue 17). The
/// admin sends runs at most 150 ms ahead; a run sent further ahead waits here until this long
/// before its time, so that the spawner holds a handful of runs, not hours of them.
const HAND_OVER_AHEAD: Duration = Duration::from_millis(250);

impl Prepared {
    /// When the run goes on from `until_its_time`: a process's run that long before its time
    /// (the spawner starts it), an http run at its time.
    fn hand_over_at(&self) -> Option<Instant> {
        let at = self.not_before?;
        match self.work {
            Work::Process(_) => at.checked_sub(HAND_OVER_AHEAD),
            Work::Http(_) => Some(at),
        }
    }
}

/// Waits until a run is handed over (`Prepared::hand_over_at`) unless it is stopped first; then
/// the result it ends with, unstarted.
async fn until_its_time(
    prepared: &Prepared,
    stop_rx: &mut oneshot::Receiver<StopReason>,
) -> Option<HandleCallbackParam> {
    let at = prepared.hand_over_at().filter(|&at| at > Instant::now())?;
    // A stop that is there when the time comes wins: a killed run never starts.
    let reason = tokio::select! {
        biased;
        reason = stop_rx => reason,
        () = tokio::time::sleep_until(at.into()) => return None,
    };
    Some(unstarted(
        &prepared.trigger,
        reason.unwrap_or(StopReason::Killed),
    ))
}

/// The result of a run stopped before it started.
fn unstarted(trigger: &TriggerParam, reason: StopReason) -> HandleCallbackParam {
    let (status, why) = match reason {
        StopReason::Killed => (RunOutcome::Killed, "killed before its start time"),
        StopReason::CoveredBy => (
            RunOutcome::Killed,
            "covered by a newer trigger (cover early) before it started",
        ),
        StopReason::Shutdown => (RunOutcome::Rejected, SHUT_DOWN_BEFORE_START),
    };
    outcome::never_started(trigger, status, why)
}

/// Whether a run may start: its start (`A`, or `S` for a queued run) is on disk, and a queued
/// run's `Q` too. A run whose `Q` failed does not start even if a later write of its `S` went
/// through: the admin was told "not accepted" and may have sent it elsewhere.
async fn journalled(queued: Option<Landed>, started: Landed) -> bool {
    match queued {
        Some(queued) => queued.wait().await && started.wait().await,
        None => started.wait().await,
    }
}

impl Runner {
    /// Starts the spool writer too, so it needs a tokio runtime.
    pub fn new(
        config: RunnerConfig,
        logs: Logs,
        spool: Spool,
        journal: Journal,
        marks: StartMarks,
    ) -> Arc<Self> {
        let results = Arc::new(Due::default());
        let writer = SpoolWriter::start(spool.clone(), results.clone(), config.spool_gather);
        Arc::new(Self {
            journal,
            marks,
            state: Mutex::new(State {
                jobs: HashMap::new(),
                running: 0,
                unwritten: 0,
                waiting: VecDeque::new(),
                accepting: true,
                accepted: 0,
                http_requests: http::CheckedRequests::default(),
            }),
            config,
            logs,
            writer,
            spool,
            results,
            finished: Notify::new(),
            written: Notify::new(),
            containment: Arc::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn limits_mode(&self) -> &'static str {
        self.config.limits_mode.name()
    }

    /// The user runs run as.
    pub fn jobs_user(&self) -> &str {
        &self.config.jobs_user
    }

    /// Accepts a trigger (starts it, queues it, or replaces the running one) with its accept
    /// sequence number, or says why not. Nothing is spawned for a rejected trigger.
    ///
    /// A run id this agent already accepted (now, or before a restart, as far as the journal
    /// remembers) is not run again: the repeat is answered as accepted, with nothing new to
    /// wait for. Otherwise the answer comes with the journal line to wait for: the acceptance
    /// is durable once it lands, and the admin should hear "accepted" only then.
    pub fn submit(
        self: &Arc<Self>,
        trigger: TriggerParam,
        received: Instant,
    ) -> Result<Accepted, String> {
        let mut state = self.lock();
        if let Some(fate) = self.journal.fate(trigger.log_id) {
            return Ok(Accepted {
                message: format!("already accepted here ({}); not run again", fate_name(fate)),
                seq: state.accepted,
                landed: None,
            });
        }
        let (message, landed) = self.admit(&mut state, trigger, received)?;
        // Numbered under the lock that put the run in the table, so `held` never sees a
        // number without its run.
        state.accepted += 1;
        Ok(Accepted {
            message,
            seq: state.accepted,
            landed: Some(landed),
        })
    }

    fn admit(
        self: &Arc<Self>,
        state: &mut MutexGuard<'_, State>,
        trigger: TriggerParam,
        received: Instant,
    ) -> Result<(String, Landed), String> {
        // The agent's config decides the user; a trigger may only name that same user.
        if let Some(wanted) = trigger.run_as.as_deref().filter(|u| !u.is_empty())
            && wanted != self.config.jobs_user
        {
            return Err(format!(
                "runAs `{wanted}` is not allowed here: this agent runs jobs as `{}` (its run_as)",
                self.config.jobs_user
            ));
        }
        let mut prepared = validate(trigger, received, &mut state.http_requests)?;
        let job_id = prepared.trigger.job_id;
        let run_id = prepared.trigger.log_id;
        if !state.accepting {
            return Err("the agent is shutting down".into());
        }
        let queued = |journal: &Journal, prepared: &mut Prepared| {
            let landed = journal.accepted(run_id, true, crate::now_ms());
            prepared.queued = Some(landed.clone());
            landed
        };
        // A run waiting for a slot occupies its job as much as a running one.
        let busy = state
            .jobs
            .get(&job_id)
            .is_some_and(|j| j.current.is_some() || !j.queue.is_empty());
        if busy {
            match prepared.block {
                Block::DiscardLater => {
                    return Err(
                        "block strategy effect: Discard Later (a run of this job is in progress)"
                            .into(),
                    );
                }
                Block::Serial => {
                    let landed = queued(&self.journal, &mut prepared);
                    let job = state.jobs.entry(job_id).or_default();
                    job.queue.push_back(prepared);
                    let message = format!(
                        "queued behind the running run ({} waiting)",
                        job.queue.len()
                    );
                    return Ok((message, landed));
                }
                Block::CoverEarly => {
                    let job = state.jobs.entry(job_id).or_default();
                    // Runs queued behind the covered one never start: each says so, or the
                    // admin would wait for them.
                    let covered: Vec<Prepared> = job.queue.drain(..).collect();
                    if let Some(stop) = job.current.as_mut().and_then(|c| c.stop.take()) {
                        let _ = stop.send(StopReason::CoveredBy);
                    }
                    // The covered run frees the slot when it exits; the new run starts then.
                    let landed = queued(&self.journal, &mut prepared);
                    job.queue.push_back(prepared);
                    self.report_dropped(
                        &covered,
                        RunOutcome::Killed,
                        "covered by a newer trigger (cover early) before it started",
                    );
                    return Ok(("replacing the running run (cover early)".into(), landed));
                }
            }
        }
        if state.running >= self.config.max_concurrent {
            if state.waiting.len() >= self.config.max_queued {
                return Err(format!(
                    "the agent is at its limit of {} concurrent runs and {} queued triggers",
                    self.config.max_concurrent, self.config.max_queued
                ));
            }
            let landed = queued(&self.journal, &mut prepared);
            state
                .jobs
                .entry(job_id)
                .or_default()
                .queue
                .push_back(prepared);
            state.waiting.push_back(job_id);
            let message = format!(
                "queued for a free slot ({} runs going, {} waiting)",
                state.running,
                state.waiting.len()
            );
            return Ok((message, landed));
        }
        let landed = self.journal.accepted(run_id, false, crate::now_ms());
        let message = match prepared.trigger.start_in_ms.filter(|&ms| ms > 0) {
            Some(ms) => format!("starts in {ms} ms"),
            None => "started".into(),
        };
        self.start(state, prepared, landed.clone());
        Ok((message, landed))
    }

    /// Starts a run once `landed` says its start is in the journal: a run whose start is not
    /// on disk must not have run, or a restart would not know to report it.
    fn start(self: &Arc<Self>, state: &mut State, mut prepared: Prepared, landed: Landed) {
        let (stop_tx, mut stop_rx) = oneshot::channel();
        state.running += 1;
        let job = state.jobs.entry(prepared.trigger.job_id).or_default();
        job.current = Some(Current {
            run_id: prepared.trigger.log_id,
            stop: Some(stop_tx),
        });
        let runner = self.clone();
        tokio::spawn(async move {
            let job_id = prepared.trigger.job_id;
            let run_id = prepared.trigger.log_id;
            let linger_ms = prepared.trigger.result_linger_ms;
            let (result, log_write) = if journalled(prepared.queued.take(), landed).await {
                match until_its_time(&prepared, &mut stop_rx).await {
                    Some(unstarted) => (unstarted, None),
                    // A shutdown began while it waited: it does not start now, as a queued
                    // run would not (`finish`), and the admin sends it elsewhere.
                    None if prepared.not_before.is_some() && !runner.lock().accepting => (
                        outcome::never_started(
                            &prepared.trigger,
                            RunOutcome::Rejected,
                            SHUT_DOWN_BEFORE_START,
                        ),
                        None,
                    ),
                    None => runner.execute(prepared, stop_rx).await,
                }
            } else {
                (
                    outcome::never_started(
                        &prepared.trigger,
                        RunOutcome::Rejected,
                        "not started: the agent could not record it in its accept journal (disk full or unwritable?)",
                    ),
                    None,
                )
            };
            // The slot is free once the result is handed to the spool's writer, which may
            // hold it in memory for company (`spool_gather`): from here the spool lists
            // the run as held, a shutdown waits for it (`unwritten`), and the journal says
            // finished only once it is on disk. Unless the writer is behind by more results
            // than a gathering holds (`BEHIND_AFTER`, or a full agent's): a failing disk. Then
            // the slot waits for the disk, and the agent stops taking work rather than pile up
            // results in memory.
            let linger = linger_of(&result, linger_ms);
            let on_disk = runner.writer.hand(result, linger, log_write);
            let behind = {
                let mut state = runner.lock();
                state.unwritten += 1;
                state.unwritten > runner.config.max_concurrent.max(BEHIND_AFTER)
            };
            if !behind {
                runner.finish(job_id);
            }
            let spooled = match on_disk {
                Ok(on_disk) => on_disk
                    .await
                    .map_err(|_| "the spool writer stopped".to_owned()),
                Err(e) => Err(e),
            };
            match spooled {
                // Its result outlives a restart now, so its start mark need not. Should the
                // agent die after the admin took the result and before the journal's `F`, the
                // run comes back `not_started` instead of `lost`: the admin ignores either, as
                // it ignores any report on a run already final there.
                Ok(()) => {
                    runner.journal.finished(run_id);
                    runner.marks.release(run_id);
                }
                Err(e) => tracing::error!(run_id, error = %e, "A result could not be spooled"),
            }
            runner.written();
            if behind {
                runner.finish(job_id);
            }
        });
    }

    /// A result handed over in `start` is on disk (or could not be written).
    fn written(&self) {
        let mut state = self.lock();
        state.unwritten = state.unwritten.saturating_sub(1);
        drop(state);
        self.written.notify_waiters();
    }

    /// Completes when a run finishes or a result lands on disk after this call (made before
    /// `settled` is read, so nothing in between is missed).
    fn settling(&self) -> impl Future<Output = ()> + '_ {
        let finished = self.finished.notified();
        let written = self.written.notified();
        async move {
            tokio::select! {
                () = finished => {}
                () = written => {}
            }
        }
    }

    /// Nothing runs, and every result is on disk: what a shutdown waits for.
    fn settled(&self) -> bool {
        let state = self.lock();
        state.running == 0 && state.unwritten == 0
    }

    fn finish(self: &Arc<Self>, job_id: i64) {
        let mut state = self.lock();
        state.running = state.running.saturating_sub(1);
        let next = state
            .jobs
            .get_mut(&job_id)
            .and_then(|job| {
                job.current = None;
                job.queue.pop_front()
            })
            .or_else(|| state.next_waiting());
        match next {
            Some(prepared) if state.accepting => {
                let landed = self.journal.started(prepared.trigger.log_id);
                self.start(&mut state, prepared, landed);
            }
            Some(prepared) => {
                // Shutting down: queued triggers never run; report each so the admin can retry elsewhere.
                let mut dropped = vec![prepared];
                if let Some(job) = state.jobs.get_mut(&job_id) {
                    dropped.extend(job.queue.drain(..));
                }
                self.report_dropped(&dropped, RunOutcome::Rejected, SHUT_DOWN_BEFORE_START);
            }
            None => {
                if state
                    .jobs
                    .get(&job_id)
                    .is_some_and(|j| j.queue.is_empty() && j.current.is_none())
                {
                    state.jobs.remove(&job_id);
                }
            }
        }
        drop(state);
        self.finished.notify_waiters();
    }

    /// Reports runs that never started: `rejected` ones are failures the admin retries,
    /// `killed` ones were stopped on purpose.
    fn report_dropped(&self, dropped: &[Prepared], status: RunOutcome, why: &str) {
        for prepared in dropped {
            let result = outcome::never_started(&prepared.trigger, status.clone(), why);
            if let Err(e) = self.spool.put(&result) {
                tracing::error!(run_id = prepared.trigger.log_id, error = %e, "Cannot spool a dropped run's result");
            }
            self.journal.finished(prepared.trigger.log_id);
        }
        if !dropped.is_empty() {
            self.results.landed(COLLECT_FOR);
        }
    }

    /// Kills the job's running run and drops its queue. Returns whether anything was running.
    pub fn kill_job(&self, job_id: i64) -> bool {
        let mut state = self.lock();
        let Some(job) = state.jobs.get_mut(&job_id) else {
            return false;
        };
        // Queued runs end too, each with its own result, so none stays running at the admin.
        let dropped: Vec<Prepared> = job.queue.drain(..).collect();
        let was_live = job.current.is_some() || !dropped.is_empty();
        if let Some(stop) = job.current.as_mut().and_then(|c| c.stop.take()) {
            let _ = stop.send(StopReason::Killed);
        }
        state.settle_queue(job_id);
        // Spooled before the lock goes, so no heartbeat sees these runs in neither place.
        self.report_dropped(&dropped, RunOutcome::Killed, "killed before it started");
        drop(state);
        was_live
    }

    /// Kills the run if it is the job's running one, or drops it if it waits in the job's queue
    /// (with its own `killed` result); the job's other runs go on. Returns whether it was here.
    pub fn kill_run(&self, job_id: i64, run_id: i64) -> bool {
        let mut state = self.lock();
        let Some(job) = state.jobs.get_mut(&job_id) else {
            return false;
        };
        if let Some(current) = job.current.as_mut().filter(|c| c.run_id == run_id) {
            if let Some(stop) = current.stop.take() {
                let _ = stop.send(StopReason::Killed);
            }
            return true;
        }
        let Some(at) = job.queue.iter().position(|p| p.trigger.log_id == run_id) else {
            return false;
        };
        let dropped: Vec<Prepared> = job.queue.remove(at).into_iter().collect();
        state.settle_queue(job_id);
        // Spooled before the lock goes, so no heartbeat sees the run in neither place.
        self.report_dropped(&dropped, RunOutcome::Killed, "killed before it started");
        true
    }

    /// Whether a run of this job is running or queued here (for `idleBeat`).
    pub fn job_busy(&self, job_id: i64) -> bool {
        self.lock()
            .jobs
            .get(&job_id)
            .is_some_and(|j| j.current.is_some() || !j.queue.is_empty())
    }

    /// When this agent took the run (queued, running or finished), as far as its journal
    /// remembers.
    pub fn accepted_ms(&self, run_id: i64) -> Option<i64> {
        self.journal.accepted_ms(run_id)
    }

    /// Whether the run is still running or queued (its log may still grow).
    /// Whether the run's log may still grow: it runs or waits here, or its result is on its
    /// way to the spool with the last lines of its log (an http run's, `Block::defer`).
    pub fn run_live(&self, run_id: i64) -> bool {
        let held_here = self.lock().jobs.values().any(|j| {
            j.current.as_ref().is_some_and(|c| c.run_id == run_id)
                || j.queue.iter().any(|p| p.trigger.log_id == run_id)
        });
        held_here || self.spool.on_its_way(run_id)
    }

    pub fn running(&self) -> usize {
        self.lock().running
    }

    /// Slots free for another run now: none while triggers wait for one, or when stopping.
    pub fn spare(&self) -> usize {
        let state = self.lock();
        if !state.accepting {
            return 0;
        }
        self.config
            .max_concurrent
            .saturating_sub(state.running)
            .saturating_sub(state.waiting.len())
    }

    /// Completes when a run finishes (its slot comes free) after this call.
    pub fn finished(&self) -> tokio::sync::futures::Notified<'_> {
        self.finished.notified()
    }

    /// The runs this agent holds (running, queued, or with a result not yet acknowledged) and
    /// the last accept number handed out before they were listed.
    ///
    /// A run leaves the table only after its result was handed to the spool's writer, and the
    /// table is read first: a run is in one or the other (`Spool::held` counts results on
    /// their way to disk), or its result was acknowledged (then the admin has it final and
    /// does not ask).
    pub fn held(&self) -> (Vec<i64>, u64) {
        let state = self.lock();
        let mut held: Vec<i64> = state
            .jobs
            .values()
            .flat_map(|j| {
                j.current
                    .iter()
                    .map(|c| c.run_id)
                    .chain(j.queue.iter().map(|p| p.trigger.log_id))
            })
            .collect();
        let accepted = state.accepted;
        drop(state);
        held.extend(self.spool.held());
        held.sort_unstable();
        held.dedup();
        (held, accepted)
    }

    /// Stops accepting triggers, waits up to `grace` for running runs, then kills the rest.
    pub async fn shutdown(self: &Arc<Self>, grace: Duration) {
        self.settle_for_shutdown(grace).await;
        // The runs' `F` lines are held back for company: on disk before the agent stops.
        if !self.journal.flush().wait().await {
            tracing::warn!("The accept journal could not be written before stopping");
        }
    }

    async fn settle_for_shutdown(self: &Arc<Self>, grace: Duration) {
        self.lock().accepting = false;
        // Runs handed to the spawner ahead of their time do not start now, as runs still
        // waiting here would not (`start`): the admin sends them elsewhere.
        self.containment.withdraw_later();
        // Results that would wait for company are written now: the stop waits for them.
        self.writer.hurry();
        let deadline = Instant::now() + grace;
        loop {
            let waiter = self.settling();
            if self.settled() {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            let _ = tokio::time::timeout(deadline - Instant::now(), waiter).await;
        }
        {
            let mut state = self.lock();
            let mut dropped = Vec::new();
            for job in state.jobs.values_mut() {
                dropped.extend(job.queue.drain(..));
                if let Some(stop) = job.current.as_mut().and_then(|c| c.stop.take()) {
                    let _ = stop.send(StopReason::Shutdown);
                }
            }
            self.report_dropped(&dropped, RunOutcome::Rejected, SHUT_DOWN_BEFORE_START);
        }
        loop {
            let waiter = self.settling();
            if self.settled() {
                break;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), waiter).await;
        }
    }

    /// Runs one trigger to completion and describes the outcome; with the write of the log
    /// lines it deferred, which must land before the result does.
    async fn execute(
        self: &Arc<Self>,
        prepared: Prepared,
        stop_rx: oneshot::Receiver<StopReason>,
    ) -> (HandleCallbackParam, Option<Before>) {
        let trigger = &prepared.trigger;
        // A run handed over ahead of its time starts then (a process's run reports when it
        // really started).
        let started_ms = crate::now_ms()
            + prepared.not_before.map_or(0, |at| {
                i64::try_from(at.saturating_duration_since(Instant::now()).as_millis()).unwrap_or(0)
            });
        let log = RunLog::new(self.logs.path(trigger.log_id, trigger.log_date_time));
        let mut result = self
            .execute_logged(&prepared, &log, started_ms, stop_rx)
            .await;
        // Complete now: the output is closed and the notes are in (or deferred). A small log
        // travels with the result, so an admin keeping logs need not read it back.
        result.log = log.whole_if_within(crate::protocol::INLINE_LOG_MAX_BYTES);
        let log_write = log
            .deferred_write()
            .map(|write| -> Before { Box::new(write) });
        (result, log_write)
    }

    async fn execute_logged(
        self: &Arc<Self>,
        prepared: &Prepared,
        log: &RunLog,
        started_ms: i64,
        stop_rx: oneshot::Receiver<StopReason>,
    ) -> HandleCallbackParam {
        let trigger = &prepared.trigger;
        let interpreter = match &prepared.work {
            Work::Process(interpreter) => interpreter,
            Work::Http(job) => {
                return self
                    .send_http(prepared, job, log, started_ms, stop_rx)
                    .await;
            }
        };
        let launch = match prepare::launch(prepared, interpreter, &self.config, log) {
            Ok(launch) => launch,
            Err(msg) => return outcome::failed(trigger, started_ms, msg, self.limits_mode()),
        };
        match self.supervise(prepared, launch, log, stop_rx).await {
            Ok(ended) => outcome::finished(prepared, ended),
            Err(not_run) => match not_run.stopped_before_start {
                Some(reason) => unstarted(trigger, reason),
                None => outcome::failed(trigger, started_ms, not_run.msg, not_run.limits_mode),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_queued_run_starts_only_if_its_acceptance_landed_too() {
        let landed = Landed::settled;
        assert!(journalled(None, landed(true)).await);
        assert!(!journalled(None, landed(false)).await);
        assert!(journalled(Some(landed(true)), landed(true)).await);
        assert!(
            !journalled(Some(landed(false)), landed(true)).await,
            "its Q failed: the admin was told no"
        );
        assert!(!journalled(Some(landed(true)), landed(false)).await);
    }
}
