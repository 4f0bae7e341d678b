//! The in-memory timer: holds stored pending runs until their millisecond (`dues`) and sends
//! them through dispatch in batches.

use std::collections::HashSet;
use std::sync::Arc;

use actix_web::web;
use tokio::sync::{Semaphore, mpsc};

use crate::dispatch::answer::Handovers;
use crate::dispatch::send::{TAKE_AHEAD_MS, TAKE_SPAN_MS};
use crate::domain::ids::RunId;
use crate::state::AppState;
use crate::worker::Worker;

use super::Due;
use super::dues::Dues;

/// Runs sent as one batch at most: one transaction takes them all.
const MAX_BATCH: usize = 256;
/// Batches being taken at once, so that a burst of fifty thousand waits in the heap rather
/// than in the database pool's queue.
const MAX_PARALLEL_BATCHES: usize = 4;
/// Hand-overs in flight at once: enough to keep every agent busy.
const MAX_HANDOVERS: usize = 1_024;

/// Runs until shutdown; then stops taking runs and waits for the answers of the hand-overs in
/// flight to be stored (runs left in the heap stay pending for the recovery monitor).
pub async fn run(
    state: web::Data<AppState>,
    inbox: mpsc::UnboundedReceiver<Due>,
    mut worker: Worker,
) {
    let mut dues = Dues::new(inbox);
    let permits = Arc::new(Semaphore::new(MAX_PARALLEL_BATCHES));
    let (answers, recorder_inbox) = mpsc::unbounded_channel();
    let handovers = Handovers {
        answers,
        slots: Arc::new(Semaphore::new(MAX_HANDOVERS)),
        held: Arc::default(),
    };
    let recorder = tokio::spawn(crate::dispatch::send::record_forever(
        state.clone(),
        recorder_inbox,
        handovers.held.clone(),
    ));
    state.scheduler.set_handovers(Some(handovers.clone()));
    while !worker.stopping() {
        let horizon = state.clock.now_ms() + TAKE_AHEAD_MS;
        while dues.any_due(horizon) {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            // Everything due by the time a permit is free goes in, up to a batch.
            let (taken, held) = dues.take_due(
                state.clock.now_ms() + TAKE_AHEAD_MS + TAKE_SPAN_MS,
                MAX_BATCH,
            );
            let batch: Vec<_> = taken
                .into_iter()
                .map(|due| (due.run_id, due.at_ms))
                .collect();
            let (state, handovers) = (state.clone(), handovers.clone());
            tokio::spawn(async move {
                let runs = batch.len();
                // Held until the batch's claim has committed or failed; then copies of the runs
                // it took are stale, and those of runs someone else had taken go out again.
                let taken = move |took: &[RunId]| {
                    let took: HashSet<RunId> = took.iter().copied().collect();
                    held.release(|run| took.contains(run));
                };
                if let Err(e) =
                    crate::dispatch::send::dispatch_batch(&state, batch, &handovers, taken).await
                {
                    // The runs stay pending; the recovery monitor sends them later.
                    tracing::warn!(runs, error = %e, "Dispatch failed; the runs will be recovered");
                }
                drop(permit);
            });
        }
        if !dues
            .wait(horizon, &state.scheduler.timer_wake, &mut worker)
            .await
        {
            break;
        }
    }
    // The recorder ends once every hand-over in flight has sent its answer and all is stored.
    state.scheduler.set_handovers(None);
    drop(handovers);
    let _ = recorder.await;
}
