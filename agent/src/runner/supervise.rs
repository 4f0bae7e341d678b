//! A run from spawn to exit: its cgroup or rlimits, the process group, the output copier, the
//! timeout and stop requests, and the sweep of whatever it left behind.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle};

use super::contain::Containment;
use super::prepare::{Launch, RunLog};
use super::{Prepared, Runner, StopReason, kill, limits, output, spawn, spawner};
use crate::protocol::{Limits, RunOutcome, Usage};

/// A run that ran, as far as its outcome needs to know.
pub(super) struct Ended {
    pub exit: spawn::Exit,
    /// Set when the agent stopped the run (timeout, kill, cover early, shutdown).
    pub stopped: Option<RunOutcome>,
    pub usage: Usage,
    pub logged: output::Outcome,
    pub limits_mode: &'static str,
    pub start_latency_us: u64,
    /// When its process started (ms since the epoch).
    pub started_ms: i64,
    pub finished_ms: i64,
    /// What the run wrote to `$JOBFLEET_OUTPUT`.
    pub output: Option<String>,
}

/// A run that could not be started or waited for.
pub(super) struct NotRun {
    pub msg: String,
    /// The limits mode in force when it failed (a cgroup failure falls back to rlimits).
    pub limits_mode: &'static str,
    /// It was stopped before its process started, for this reason, and never started.
    pub stopped_before_start: Option<StopReason>,
}

/// The leader's exit, and how many processes the sweep after it ended.
type Waited = (std::io::Result<spawn::Exit>, usize);
type Waiter = JoinHandle<Waited>;

/// How long after its pid is known a run's exit is left to its output's end before it is
/// watched through a pidfd. Most runs' output ends as their leader exits (the leader held the
/// pipe's last write end), and a leader found exited then is reaped at once: no pidfd to open,
/// register, deregister and close, three system calls fewer per run with the look itself
/// (BENCHMARKS.md). A run whose output is still open after this long, or whose leader is still
/// running when its output ends (it closed it, or a background process keeps it open), is
/// watched through a pidfd as before: its exit, and the end of what it left running, come at
/// most this much later.
const OUTPUT_END_FIRST: Duration = Duration::from_millis(50);

/// Waits for the leader's exit and reaps it; then whatever the run left behind (a background
/// daemon, a `setsid` escapee) ends with it: nothing of a run outlives its result unnoticed.
/// The exit is looked for when the run's output ends (`output_ended`), else watched on the
/// runtime through a pidfd, and a blocking thread sweeps only a run that left something; where
/// pidfds are missing, a run not found exited at its output's end is waited for, and swept, on a
/// blocking thread.
fn watch_exit(
    containment: Arc<Containment>,
    run_id: i64,
    pid: i32,
    output_ended: oneshot::Receiver<()>,
) -> Waiter {
    let on_a_thread = {
        let containment = containment.clone();
        move || {
            let exit = spawn::wait(pid, || containment.reaping(pid));
            kill::signal_group(pid, Signal::SIGKILL);
            let leftovers = containment.sweep(run_id, None, Signal::SIGKILL);
            (exit, leftovers)
        }
    };
    tokio::spawn(async move {
        // The sender is dropped when the output ends, so either outcome of the wait says so.
        let ended_with_output = tokio::time::timeout(OUTPUT_END_FIRST, output_ended)
            .await
            .is_ok();
        let exited = if ended_with_output {
            spawn::reap_if_exited(pid, || containment.reaping(pid))
        } else {
            None
        };
        let exit = match exited {
            Some(exit) => exit,
            None => {
                let Ok(watch) = spawn::exit_watch(pid) else {
                    return tokio::task::spawn_blocking(on_a_thread)
                        .await
                        .unwrap_or_else(|e| (Err(std::io::Error::other(e)), 0));
                };
                if watch.readable().await.is_err() {
                    drop(watch);
                    return tokio::task::spawn_blocking(on_a_thread)
                        .await
                        .unwrap_or_else(|e| (Err(std::io::Error::other(e)), 0));
                }
                spawn::reap(pid, || containment.reaping(pid))
            }
        };
        let reaped = containment.reaped_so_far();
        kill::signal_group(pid, Signal::SIGKILL);
        // The runs that ended with this one reap first; one look for strays then serves them all.
        tokio::task::yield_now().await;
        let leftovers = if containment.has_strays(reaped) {
            tokio::task::spawn_blocking(move || containment.sweep(run_id, None, Signal::SIGKILL))
                .await
                .unwrap_or(0)
        } else {
            0
        };
        (exit, leftovers)
    })
}

/// Removes what was made for a run that did not start: its script, its outputs file, its cgroup.
fn discard(launch: &Launch, cgroup: Option<limits::RunCgroup>) {
    launch.script.remove();
    if let Some(outputs) = &launch.outputs {
        outputs.take(0);
    }
    if let Some(c) = cgroup {
        c.remove();
    }
}

impl Runner {
    /// Has the spawner start the run's process, at the run's time when that is later (the
    /// spawner holds it until then). A stop before it started withdraws it: then the spawn fails
    /// as withdrawn; should the process have started all the same, the stop is handed on in
    /// `stop_rx`, to stop the run at once. Returns the stop that came, if one did.
    async fn start_process(
        self: &Arc<Self>,
        prepared: &Prepared,
        mut request: spawner::Queued,
        stop_rx: &mut oneshot::Receiver<StopReason>,
    ) -> (std::io::Result<spawner::Started>, Option<StopReason>) {
        let run_id = prepared.trigger.log_id;
        if let Some(at) = prepared
            .not_before
            .filter(|&at| at > std::time::Instant::now())
        {
            request.start_at(at);
        }
        // Asked under the runner's lock, so that a shutdown either sees the ask and withdraws
        // it, or is seen here first.
        let answer = {
            let state = self.lock();
            if !state.accepting && request.starts_later() {
                return (
                    Err(std::io::Error::other(spawner::Withdrawn)),
                    Some(StopReason::Shutdown),
                );
            }
            self.containment.ask(run_id, request)
        };
        let spawn = Containment::started(answer);
        tokio::pin!(spawn);
        tokio::select! {
            biased;
            spawned = &mut spawn => (spawned, None),
            reason = &mut *stop_rx => {
                let reason = reason.unwrap_or(StopReason::Killed);
                self.containment.withdraw(run_id);
                let spawned = spawn.await;
                if spawned.is_ok() {
                    let (early, rx) = oneshot::channel();
                    let _ = early.send(reason);
                    *stop_rx = rx;
                }
                (spawned, Some(reason))
            }
        }
    }

    /// Spawns the run, waits for it (or stops it), and cleans up after it: its process tree,
    /// cgroup and script are gone when this returns.
    pub(super) async fn supervise(
        self: &Arc<Self>,
        prepared: &Prepared,
        launch: Launch,
        log: &RunLog,
        stop_rx: oneshot::Receiver<StopReason>,
    ) -> Result<Ended, NotRun> {
        let trigger = &prepared.trigger;
        let run_id = trigger.log_id;
        let (cgroup, mode, isolation) = self.isolation(run_id, &prepared.limits);
        let not_run = |msg: String| NotRun {
            msg,
            limits_mode: mode.name(),
            stopped_before_start: None,
        };
        let (output_read, output_write) = match output::pipe() {
            Ok(p) => p,
            Err(e) => {
                discard(&launch, cgroup);
                return Err(not_run(format!("cannot make the output pipe: {e}")));
            }
        };
        let spec = spawn::Spec {
            program: &launch.program,
            argv: &launch.argv,
            env: &launch.env,
            cwd: &self.config.scripts_dir,
            output: output_write,
            start_mark: Some((self.marks.file(), self.marks.take(run_id))),
        };
        let mut stop_rx = stop_rx;
        let (spawned, stopped_before_start) = match spawn::request(spec, &isolation) {
            Ok(request) => self.start_process(prepared, request, &mut stop_rx).await,
            Err(e) => (Err(e), None),
        };
        let started = match spawned {
            Ok(started) => started,
            Err(e) => {
                let msg = format!("cannot start `{}`: {e}", launch.program.display());
                discard(&launch, cgroup);
                if spawner::was_withdrawn(&e) {
                    // Not stopped here: withdrawn as the agent shuts down (`Runner::shutdown`),
                    // or given back by a spawner whose connection broke (a failure to start).
                    let reason = stopped_before_start
                        .or_else(|| (!self.lock().accepting).then_some(StopReason::Shutdown));
                    if reason.is_none() {
                        log.note(&msg);
                    }
                    return Err(NotRun {
                        stopped_before_start: reason,
                        ..not_run(msg)
                    });
                }
                if spawner::may_have_started(&e) {
                    self.marks.retire(run_id);
                    // Its process, if it started, carries the run's tag and no known pid: it
                    // ends now, not at some later run's end.
                    self.sweep(run_id, None, Signal::SIGKILL).await;
                }
                log.note(&msg);
                return Err(not_run(msg));
            }
        };
        let pid = started.pid;
        let start_latency_us = u64::try_from(
            started
                .at
                .saturating_duration_since(prepared.due())
                .as_micros(),
        )
        .unwrap_or(u64::MAX);
        let started_ms =
            crate::now_ms() - i64::try_from(started.at.elapsed().as_millis()).unwrap_or(0);
        tracing::info!(run_id, job_id = trigger.job_id, pid, "Run started");
        let (output_ends, output_ended) = oneshot::channel();
        let copier = tokio::spawn(output::copy(
            output_read,
            log.clone(),
            self.config.output,
            output_ends,
        ));
        let waiter = watch_exit(self.containment.clone(), run_id, pid, output_ended);
        let (waited, stopped) = self.wait_or_stop(prepared, pid, waiter, stop_rx, log).await;
        let (exit, leftovers) = match waited {
            Ok((exit, leftovers)) => (Ok(exit), leftovers),
            // The waiter died (it does not panic; a runtime shutting down cancels it): the
            // sweep it would have done is done here.
            Err(e) => {
                kill::signal_group(pid, Signal::SIGKILL);
                self.sweep(run_id, None, Signal::SIGKILL).await;
                (Err(e), 0)
            }
        };
        // The output ends once the last process holding the pipe is gone; should something
        // still hold it, the result does not wait for it forever.
        let copied = tokio::time::timeout(Duration::from_secs(10), copier).await;
        // Notes go in once the copier is done, so they never land inside the job's output.
        if leftovers > 0 && stopped.is_none() {
            log.note(&format!(
                "ended {leftovers} process(es) the run left running after it finished"
            ));
        }
        let logged = match copied {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => output::Outcome {
                stopped: Some(format!("the log copier failed: {e}")),
                ..output::Outcome::default()
            },
            Err(_) => output::Outcome {
                stopped: Some("the output was still open 10 s after the run ended".into()),
                ..output::Outcome::default()
            },
        };
        let finished_ms = crate::now_ms();
        let cg_usage = cgroup
            .as_ref()
            .map(limits::RunCgroup::usage)
            .unwrap_or_default();
        if let Some(c) = cgroup {
            c.remove();
        }
        launch.script.remove();
        let output = launch
            .outputs
            .as_ref()
            .and_then(|o| o.take(crate::protocol::MAX_OUTPUT_BYTES));
        let exit = match exit {
            Ok(Ok(exit)) => exit,
            Ok(Err(e)) => return Err(not_run(format!("cannot wait for the process: {e}"))),
            Err(e) => return Err(not_run(format!("wait task failed: {e}"))),
        };
        let usage = Usage {
            cpu_ms: cg_usage.cpu_ms.unwrap_or(exit.cpu_ms),
            max_rss_kb: cg_usage.max_rss_kb.unwrap_or(exit.max_rss_kb),
            oom_killed: cg_usage.oom_killed,
        };
        Ok(Ended {
            exit,
            stopped,
            usage,
            logged,
            limits_mode: mode.name(),
            start_latency_us,
            started_ms,
            finished_ms,
            output,
        })
    }

    /// The run's cgroup (if it gets one), the limits mode in force, and what the child sets up
    /// before it execs.
    fn isolation(
        &self,
        run_id: i64,
        run_limits: &Limits,
    ) -> (Option<limits::RunCgroup>, limits::Mode, spawn::Isolation) {
        // A run without limits gains nothing from a cgroup (its process group holds the tree
        // and wait4 reports usage) but would pay a cgroup migration, milliseconds on v1.
        let mut mode = if *run_limits == Limits::default() {
            limits::Mode::Unlimited
        } else {
            self.config.limits_mode.clone()
        };
        let cgroup = match limits::RunCgroup::create(&mode, run_id, run_limits) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(run_id, error = %e, "Cannot create the run's cgroup; falling back to rlimits");
                mode = limits::Mode::Rlimit;
                None
            }
        };
        let isolation = spawn::Isolation {
            cgroup_procs: cgroup
                .as_ref()
                .map(|c| c.procs.iter().map(spawn::raw_fd).collect())
                .unwrap_or_default(),
            rlimits: if cgroup.is_none() {
                spawn::Isolation::rlimits_for(run_limits)
            } else {
                Vec::new()
            },
            user: self.config.run_as,
        };
        (cgroup, mode, isolation)
    }

    /// Waits for the leader's exit, or stops the run at its timeout or on request and says why.
    async fn wait_or_stop(
        self: &Arc<Self>,
        prepared: &Prepared,
        pid: i32,
        mut waiter: Waiter,
        mut stop_rx: oneshot::Receiver<StopReason>,
        log: &RunLog,
    ) -> (Result<Waited, JoinError>, Option<RunOutcome>) {
        let trigger = &prepared.trigger;
        let run_id = trigger.log_id;
        let timeout = (trigger.executor_timeout > 0)
            .then(|| Duration::from_secs(trigger.executor_timeout as u64));
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            exit = &mut waiter => (exit, None),
            () = deadline => {
                log.note(&format!("timeout of {}s reached: stopping the run", trigger.executor_timeout));
                (self.stop_and_wait(run_id, pid, &mut waiter).await, Some(RunOutcome::TimedOut))
            }
            reason = &mut stop_rx => {
                log.note(match reason {
                    Ok(StopReason::CoveredBy) => "replaced by a newer run (cover early)",
                    Ok(StopReason::Shutdown) => "the agent is shutting down",
                    _ => "killed on request",
                });
                (self.stop_and_wait(run_id, pid, &mut waiter).await, Some(RunOutcome::Killed))
            }
        }
    }

    /// Stops a run: TERM to its group and its whole tree, KILL to what is left after the
    /// grace period or once the leader exited.
    async fn stop_and_wait(
        self: &Arc<Self>,
        run_id: i64,
        pid: i32,
        waiter: &mut Waiter,
    ) -> Result<Waited, JoinError> {
        kill::signal_group(pid, Signal::SIGTERM);
        self.sweep(run_id, Some(pid), Signal::SIGTERM).await;
        let exit = tokio::select! {
            exit = &mut *waiter => Some(exit),
            () = tokio::time::sleep(self.config.kill_grace) => None,
        };
        // Grandchildren may still be alive even when the leader exited: always finish the tree.
        kill::signal_group(pid, Signal::SIGKILL);
        self.sweep(run_id, Some(pid), Signal::SIGKILL).await;
        match exit {
            Some(exit) => exit,
            None => waiter.await,
        }
    }

    /// `contain::Containment::sweep` on a blocking thread (it reads `/proc` and reaps).
    async fn sweep(&self, run_id: i64, leader: Option<i32>, signal: Signal) -> usize {
        let containment = self.containment.clone();
        tokio::task::spawn_blocking(move || containment.sweep(run_id, leader, signal))
            .await
            .unwrap_or(0)
    }
}
