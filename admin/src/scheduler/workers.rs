//! Starts the scheduler's tasks and stops them when dropped.

use std::time::Duration;

use actix_web::web;
use tokio::task::JoinHandle;

use crate::startup::AppState;

/// The running scheduler tasks of one admin; dropping it stops them.
#[derive(Debug)]
pub struct Workers {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Workers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Database trouble backs the loop off from one second up to this, so an outage is logged
/// a few times a minute, not spun on.
const MAX_BACKOFF: Duration = Duration::from_secs(8);
const MAX_SLEEP_MS: i64 = 1_000;
/// A floor so that a job whose next fire could not be moved is not re-read in a spin.
const MIN_SLEEP_MS: i64 = 10;

/// Spawns the plan loop, the timer, the monitors and the alert delivery worker.
///
/// # Errors
/// When called twice on one state (the timer's inbox is taken).
pub fn spawn_workers(state: &web::Data<AppState>) -> anyhow::Result<Workers> {
    let inbox = state
        .scheduler
        .take_inbox()
        .ok_or_else(|| anyhow::anyhow!("the scheduler of this admin is already running"))?;
    let tasks = vec![
        tokio::spawn(super::timer::run(state.clone(), inbox)),
        tokio::spawn(plan_loop(state.clone())),
        tokio::spawn(super::monitors::run(state.clone())),
        tokio::spawn(crate::alert::run(state.clone())),
    ];
    Ok(Workers { tasks })
}

async fn plan_loop(state: web::Data<AppState>) {
    let mut backoff = Duration::from_secs(1);
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        let sleep = match super::tick::tick(&state).await {
            Ok(outcome) => {
                if let Some(since) = failing_since.take() {
                    tracing::info!(after_s = since.elapsed().as_secs(), "Scheduler recovered");
                }
                backoff = Duration::from_secs(1);
                state.scheduler.enqueue(outcome.dues);
                if outcome.more {
                    Duration::ZERO
                } else {
                    let now = state.clock.now_ms();
                    let wait = outcome.soonest_ms.map_or(MAX_SLEEP_MS, |t| {
                        (t - super::tick::PRE_READ_MS - now).clamp(MIN_SLEEP_MS, MAX_SLEEP_MS)
                    });
                    Duration::from_millis(wait.unsigned_abs())
                }
            }
            Err(e) => {
                failing_since.get_or_insert_with(std::time::Instant::now);
                tracing::error!(error = %e, retry_in_ms = backoff.as_millis() as u64, "Scheduler pass failed");
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = state.scheduler.plan_now.notified() => {}
        }
    }
}
