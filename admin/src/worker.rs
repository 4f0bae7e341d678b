//! Background workers (the plan loop, the timer, the monitors, alert delivery): one shape for
//! all of them. A worker has a name, one backoff policy, a shutdown signal that lets it finish
//! the pass it is in, and a health record (state, passes, failures, last error) that `/metrics`
//! and `/readyz` show. A leaf: it knows nothing of the app state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// A failing pass is retried after 1 s, then 2, 4, 8 s: an outage is logged a few times a
/// minute, not spun on.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// What a worker is doing, as `/readyz` and `/metrics` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    Running,
    /// Its last pass failed; it waits before the next.
    BackingOff,
    /// It ended after a shutdown was asked for.
    Stopped,
    /// It ended by itself (a panic or a bug): the admin is not ready.
    Crashed,
}

/// One worker's health record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerHealth {
    pub state: WorkerState,
    pub passes: u64,
    pub failures: u64,
    /// Failures in a row; 0 once a pass succeeds.
    #[serde(skip)]
    pub failing_for: u32,
    /// In the logs and here, never in `/readyz`: that answers without a token, and an error's
    /// text can name hosts, paths or queries.
    #[serde(skip)]
    pub last_error: Option<String>,
}

impl Default for WorkerHealth {
    fn default() -> Self {
        Self {
            state: WorkerState::Running,
            passes: 0,
            failures: 0,
            failing_for: 0,
            last_error: None,
        }
    }
}

/// The health of every worker of this admin, by name.
#[derive(Debug, Default)]
pub struct WorkerRegistry {
    workers: Mutex<BTreeMap<&'static str, WorkerHealth>>,
}

impl WorkerRegistry {
    pub fn snapshot(&self) -> BTreeMap<&'static str, WorkerHealth> {
        self.lock().clone()
    }

    /// The workers that ended without being asked to.
    pub fn crashed(&self) -> Vec<&'static str> {
        self.lock()
            .iter()
            .filter(|(_, h)| h.state == WorkerState::Crashed)
            .map(|(name, _)| *name)
            .collect()
    }

    fn update(&self, name: &'static str, f: impl FnOnce(&mut WorkerHealth)) {
        f(self.lock().entry(name).or_default());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, WorkerHealth>> {
        self.workers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a worker's loop holds: its name, the shutdown signal and its health record.
#[derive(Debug)]
pub struct Worker {
    name: &'static str,
    stop: watch::Receiver<bool>,
    registry: Arc<WorkerRegistry>,
    backoff: Duration,
    failing_since: Option<Instant>,
}

impl Worker {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether a shutdown was asked for: finish the current pass and return.
    pub fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Completes when a shutdown is asked for (for a worker's own `select!`).
    pub async fn stopped(&mut self) {
        let _ = self.stop.wait_for(|stop| *stop).await;
    }

    /// Waits `delay`, or until `wake` is notified; returns `false` when the worker should stop
    /// instead of starting another pass.
    pub async fn idle(&mut self, delay: Duration, wake: Option<&Notify>) -> bool {
        if self.stopping() {
            return false;
        }
        let woken = async {
            match wake {
                Some(notify) => notify.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = woken => {}
            _ = self.stop.wait_for(|stop| *stop) => {}
        }
        !self.stopping()
    }

    /// A pass went well.
    pub fn succeeded(&mut self) {
        if let Some(since) = self.failing_since.take() {
            tracing::info!(
                worker = self.name,
                after_s = since.elapsed().as_secs(),
                "Worker recovered"
            );
        }
        self.backoff = FIRST_BACKOFF;
        self.registry.update(self.name, |h| {
            h.passes += 1;
            h.failing_for = 0;
            h.state = WorkerState::Running;
        });
    }

    /// A pass failed: logged with the worker's name, recorded; returns how long to back off.
    pub fn failed(&mut self, error: &dyn std::fmt::Display) -> Duration {
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.failing_since.get_or_insert_with(Instant::now);
        tracing::warn!(worker = self.name, %error, retry_in_ms = wait.as_millis() as u64, "Worker pass failed");
        let message = error.to_string();
        self.registry.update(self.name, |h| {
            h.passes += 1;
            h.failures += 1;
            h.failing_for += 1;
            h.state = WorkerState::BackingOff;
            h.last_error = Some(message);
        });
        wait
    }
}

/// The running workers of one admin. Dropping it aborts them; [`Workers::shutdown`] lets them
/// finish their pass first.
#[derive(Debug)]
pub struct Workers {
    stop: watch::Sender<bool>,
    registry: Arc<WorkerRegistry>,
    tasks: Vec<Task>,
}

#[derive(Debug)]
struct Task {
    name: &'static str,
    body: tokio::task::AbortHandle,
    supervisor: JoinHandle<()>,
}

impl Workers {
    pub fn new(registry: Arc<WorkerRegistry>) -> Self {
        Self {
            stop: watch::channel(false).0,
            registry,
            tasks: Vec::new(),
        }
    }

    /// Starts `body` as the worker `name`.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, body: F)
    where
        F: FnOnce(Worker) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let worker = Worker {
            name,
            stop: self.stop.subscribe(),
            registry: self.registry.clone(),
            backoff: FIRST_BACKOFF,
            failing_since: None,
        };
        self.registry.update(name, |h| *h = WorkerHealth::default());
        let inner = tokio::spawn(body(worker));
        let body_abort = inner.abort_handle();
        let (registry, stop) = (self.registry.clone(), self.stop.subscribe());
        // The supervisor outlives the body: it records how the body ended.
        let supervisor = tokio::spawn(async move {
            let ended = inner.await;
            let asked = *stop.borrow();
            let state = if asked {
                WorkerState::Stopped
            } else {
                WorkerState::Crashed
            };
            if !asked {
                tracing::error!(worker = name, outcome = ?ended.as_ref().err(), "Worker ended by itself");
            }
            registry.update(name, |h| {
                h.state = state;
                if let Err(e) = &ended {
                    h.last_error = Some(e.to_string());
                }
            });
        });
        self.tasks.push(Task {
            name,
            body: body_abort,
            supervisor,
        });
    }

    /// Asks every worker to stop after its current pass and waits for them up to `deadline`;
    /// those still busy then are aborted (what they held is recovered like after a crash).
    pub async fn shutdown(mut self, deadline: Duration) {
        let _ = self.stop.send(true);
        let until = tokio::time::Instant::now() + deadline;
        for task in std::mem::take(&mut self.tasks) {
            let mut supervisor = task.supervisor;
            if tokio::time::timeout_at(until, &mut supervisor)
                .await
                .is_err()
            {
                tracing::warn!(worker = task.name, "Worker did not stop in time; aborted");
                task.body.abort();
                let _ = supervisor.await;
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.body.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_worker_finishes_its_pass_then_stops() {
        let registry = Arc::new(WorkerRegistry::default());
        let mut workers = Workers::new(registry.clone());
        let passes = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = passes.clone();
        workers.spawn("counter", move |mut w| async move {
            loop {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                w.succeeded();
                if !w.idle(Duration::from_millis(5), None).await {
                    return;
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        workers.shutdown(Duration::from_secs(5)).await;
        let health = registry.snapshot()["counter"].clone();
        assert_eq!(health.state, WorkerState::Stopped);
        assert!(health.passes >= 1);
        assert!(registry.crashed().is_empty());
    }

    #[tokio::test]
    async fn failures_back_off_and_a_worker_that_ends_by_itself_is_crashed() {
        let registry = Arc::new(WorkerRegistry::default());
        let mut workers = Workers::new(registry.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        workers.spawn("flaky", move |mut w| async move {
            let first = w.failed(&"database away");
            let second = w.failed(&"database away");
            let _ = tx.send((first, second));
        });
        let (first, second) = rx.await.unwrap();
        assert_eq!((first, second), (FIRST_BACKOFF, FIRST_BACKOFF * 2));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let health = registry.snapshot()["flaky"].clone();
        assert_eq!(health.state, WorkerState::Crashed);
        assert_eq!(health.failures, 2);
        assert_eq!(health.last_error.as_deref(), Some("database away"));
        assert_eq!(registry.crashed(), vec!["flaky"]);
        workers.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_worker_stuck_past_the_deadline_is_aborted() {
        let registry = Arc::new(WorkerRegistry::default());
        let mut workers = Workers::new(registry.clone());
        workers.spawn("stuck", |_w| async {
            std::future::pending::<()>().await;
        });
        let started = Instant::now();
        workers.shutdown(Duration::from_millis(100)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
