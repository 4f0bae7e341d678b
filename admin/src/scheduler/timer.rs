//! The in-memory timer: holds stored pending runs until their millisecond and sends each
//! through dispatch. Sleeps until the earliest due time (at most a second, so a clock jump or
//! a manual clock is noticed) and wakes at once for an earlier one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use tokio::sync::{Semaphore, mpsc};

use crate::state::AppState;
use crate::worker::Worker;

use super::Due;

/// Runs sent as one batch at most: one transaction takes them all.
const MAX_BATCH: usize = 256;
/// Batches being taken at once, so that a burst of fifty thousand waits in the heap rather
/// than in the database pool's queue.
const MAX_PARALLEL_BATCHES: usize = 4;
/// Hand-overs in flight at once: enough to keep every agent busy.
const MAX_HANDOVERS: usize = 1_024;
const MAX_SLEEP_MS: i64 = 1_000;

/// Runs until shutdown; then stops taking runs and waits for the answers of the hand-overs in
/// flight to be stored (runs left in the heap stay pending for the recovery monitor).
pub async fn run(
    state: web::Data<AppState>,
    mut inbox: mpsc::UnboundedReceiver<Due>,
    mut worker: Worker,
) {
    let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let permits = Arc::new(Semaphore::new(MAX_PARALLEL_BATCHES));
    let handovers = Arc::new(Semaphore::new(MAX_HANDOVERS));
    let (answers, recorder_inbox) = mpsc::unbounded_channel();
    let recorder = tokio::spawn(crate::dispatch::send::record_forever(
        state.clone(),
        recorder_inbox,
    ));
    while !worker.stopping() {
        let now = state.clock.now_ms();
        while heap.peek().is_some_and(|Reverse(due)| due.at_ms <= now) {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            // Everything due by the time a permit is free goes in, up to a batch.
            let now = state.clock.now_ms();
            let mut batch = Vec::new();
            while batch.len() < MAX_BATCH
                && let Some(Reverse(due)) = heap.peek().copied()
                && due.at_ms <= now
            {
                heap.pop();
                batch.push(due.run_id);
            }
            let (state, answers, handovers) = (state.clone(), answers.clone(), handovers.clone());
            tokio::spawn(async move {
                let runs = batch.len();
                if let Err(e) =
                    crate::dispatch::send::dispatch_batch(&state, batch, &answers, &handovers).await
                {
                    // The runs stay pending; the recovery monitor sends them later.
                    tracing::warn!(runs, error = %e, "Dispatch failed; the runs will be recovered");
                }
                drop(permit);
            });
        }
        let sleep_ms = heap.peek().map_or(MAX_SLEEP_MS, |Reverse(d)| {
            (d.at_ms - now).clamp(0, MAX_SLEEP_MS)
        });
        tokio::select! {
            received = inbox.recv() => match received {
                Some(due) => {
                    heap.push(Reverse(due));
                    // Take everything already queued before looking at the clock again.
                    while let Ok(more) = inbox.try_recv() {
                        heap.push(Reverse(more));
                    }
                }
                None => break,
            },
            () = tokio::time::sleep(Duration::from_millis(sleep_ms.unsigned_abs())) => {}
            () = state.scheduler.timer_wake.notified() => {}
            () = worker.stopped() => {}
        }
    }
    // The recorder ends once every hand-over in flight has sent its answer and all is stored.
    drop(answers);
    let _ = recorder.await;
}
