//! Starts the scheduler's workers (plan loop, run timer, workflow timer, monitors, alerts, log
//! keeper); `Workers::shutdown` (or dropping them) stops them.

use std::time::Duration;

use crate::state::AppState;
use crate::worker::{Worker, Workers};
use actix_web::web;

const MAX_SLEEP_MS: i64 = 1_000;
/// A floor so that a job whose next fire could not be moved is not re-read in a spin.
const MIN_SLEEP_MS: i64 = 10;
/// A pass is due once the soonest fire is this far inside the pre-read window, not as soon as
/// it enters it: jobs spread over the second would otherwise get a pass (a transaction under the
/// lock) each, a hundred passes a second for a hundred jobs, where one pass can plan them all.
/// Fires are still planned at least `PRE_READ_MS - GATHER_MS` ahead.
const GATHER_MS: i64 = 1_000;

/// Spawns the plan loop, the timers, the monitors and the alert delivery worker.
///
/// # Errors
/// When called twice on one state (the timer's inbox is taken).
pub fn spawn_workers(state: &web::Data<AppState>) -> anyhow::Result<Workers> {
    let inbox = state
        .scheduler
        .take_inbox()
        .ok_or_else(|| anyhow::anyhow!("the scheduler of this admin is already running"))?;
    let workflow_inbox = state
        .scheduler
        .take_workflow_inbox()
        .ok_or_else(|| anyhow::anyhow!("the scheduler of this admin is already running"))?;
    let mut workers = Workers::new(state.metrics.workers.clone());
    let s = state.clone();
    workers.spawn("timer", move |w| super::timer::run(s, inbox, w));
    let s = state.clone();
    workers.spawn("workflow timer", move |w| {
        super::workflow_fire::run(s, workflow_inbox, w)
    });
    let s = state.clone();
    workers.spawn("plan", move |w| plan_loop(s, w));
    let s = state.clone();
    workers.spawn("monitors", move |w| super::monitors::run(s, w));
    let s = state.clone();
    workers.spawn("alerts", move |w| crate::alert::run(s, w));
    if state.config.kept_log_bytes > 0 {
        let s = state.clone();
        workers.spawn("log keeper", move |w| super::log_keeper::run(s, w));
    }
    Ok(workers)
}

async fn plan_loop(state: web::Data<AppState>, mut worker: Worker) {
    loop {
        let sleep = match super::tick::tick(&state).await {
            Ok(outcome) => {
                worker.succeeded();
                state.scheduler.enqueue(outcome.dues);
                state.scheduler.enqueue_workflows(outcome.workflow_dues);
                if outcome.more {
                    Duration::ZERO
                } else {
                    let now = state.clock.now_ms();
                    let wait = outcome.soonest_ms.map_or(MAX_SLEEP_MS, |t| {
                        (t - (super::tick::PRE_READ_MS - GATHER_MS) - now)
                            .clamp(MIN_SLEEP_MS, MAX_SLEEP_MS)
                    });
                    Duration::from_millis(wait.unsigned_abs())
                }
            }
            Err(e) => worker.failed(&e),
        };
        if !worker.idle(sleep, Some(&state.scheduler.plan_now)).await {
            return;
        }
    }
}
