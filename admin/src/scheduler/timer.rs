//! The in-memory timer: holds stored pending runs until their millisecond and sends each
//! through dispatch. Sleeps until the earliest due time (at most a second, so a clock jump or
//! a manual clock is noticed) and wakes at once for an earlier one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use tokio::sync::{Semaphore, mpsc};

use crate::startup::AppState;

use super::Due;

/// Dispatches in flight at once: enough to keep every agent busy, few enough that a burst of
/// fifty thousand waits in the heap rather than in the database pool's queue.
const MAX_PARALLEL_DISPATCHES: usize = 256;
const MAX_SLEEP_MS: i64 = 1_000;

pub async fn run(state: web::Data<AppState>, mut inbox: mpsc::UnboundedReceiver<Due>) {
    let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let permits = Arc::new(Semaphore::new(MAX_PARALLEL_DISPATCHES));
    loop {
        let now = state.clock.now_ms();
        while let Some(Reverse(due)) = heap.peek().copied() {
            if due.at_ms > now {
                break;
            }
            heap.pop();
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let state = state.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::dispatch::send::dispatch(&state, due.run_id, None).await {
                    // The run stays pending; the recovery monitor sends it later.
                    tracing::warn!(run_id = due.run_id, error = %e, "Dispatch failed; the run will be recovered");
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
                None => return,
            },
            () = tokio::time::sleep(Duration::from_millis(sleep_ms.unsigned_abs())) => {}
            () = state.scheduler.timer_wake.notified() => {}
        }
    }
}
