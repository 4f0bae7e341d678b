//! What both timers (runs, workflow slots) share: a heap of items due at a millisecond, fed by
//! a channel, and the wait until the earliest is due — at most a second, so a clock jump or a
//! manual clock is noticed — or until something new arrives.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::worker::Worker;

use super::{Due, WorkflowDue};

const MAX_SLEEP_MS: i64 = 1_000;

/// An item with the millisecond it is due at; ordered by it first.
pub trait DueAt: Ord + Copy {
    /// What makes two items the same work, whatever their time.
    type Key: Eq + Hash + Copy;
    fn due_at_ms(&self) -> i64;
    fn key(&self) -> Self::Key;
}

impl DueAt for Due {
    type Key = crate::domain::ids::RunId;
    fn due_at_ms(&self) -> i64 {
        self.at_ms
    }
    fn key(&self) -> Self::Key {
        self.run_id
    }
}

impl DueAt for WorkflowDue {
    type Key = (crate::domain::ids::WorkflowId, i64);
    fn due_at_ms(&self) -> i64 {
        self.at_ms
    }
    fn key(&self) -> Self::Key {
        (self.workflow_id, self.slot_ms)
    }
}

/// The heap holds each piece of work once, and a taken item counts as held until its taker
/// releases it: the recovery monitor hands the timer the runs it finds unsent, and while a burst
/// is worked off those are mostly runs the heap holds already or a batch is taking right now
/// (a second batch taking them would find its claim refused and fall back to one run at a time).
pub struct Dues<T: DueAt> {
    heap: BinaryHeap<Reverse<T>>,
    held: Arc<Mutex<HashSet<T::Key>>>,
    inbox: mpsc::UnboundedReceiver<T>,
}

/// The keys of items taken together; they stay held until this is dropped.
#[must_use = "the items stay held until this is dropped"]
pub struct Taken<K: Eq + Hash> {
    keys: Vec<K>,
    held: Arc<Mutex<HashSet<K>>>,
}

impl<K: Eq + Hash> Drop for Taken<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for key in &self.keys {
            held.remove(key);
        }
    }
}

impl<T: DueAt> Dues<T> {
    pub fn new(inbox: mpsc::UnboundedReceiver<T>) -> Self {
        Self {
            heap: BinaryHeap::new(),
            held: Arc::default(),
            inbox,
        }
    }

    fn push(&mut self, due: T) {
        let newly_held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(due.key());
        if newly_held {
            self.heap.push(Reverse(due));
        }
    }

    pub fn any_due(&self, now_ms: i64) -> bool {
        self.heap
            .peek()
            .is_some_and(|Reverse(d)| d.due_at_ms() <= now_ms)
    }

    /// Takes up to `max` items due by `now_ms`, earliest first; they stay held (the same work
    /// arriving again is dropped) until the returned `Taken` is dropped.
    pub fn take_due(&mut self, now_ms: i64, max: usize) -> (Vec<T>, Taken<T::Key>) {
        let mut items = Vec::new();
        while items.len() < max && self.any_due(now_ms) {
            if let Some(Reverse(due)) = self.heap.pop() {
                items.push(due);
            }
        }
        let keys = items.iter().map(DueAt::key).collect();
        let taken = Taken {
            keys,
            held: self.held.clone(),
        };
        (items, taken)
    }

    /// Waits until the earliest item is due, something new arrives, `wake` is notified or the
    /// worker is stopping. Returns `false` once the inbox is closed (nothing can arrive).
    pub async fn wait(&mut self, now_ms: i64, wake: &Notify, worker: &mut Worker) -> bool {
        let sleep_ms = self.heap.peek().map_or(MAX_SLEEP_MS, |Reverse(d)| {
            (d.due_at_ms() - now_ms).clamp(0, MAX_SLEEP_MS)
        });
        tokio::select! {
            received = self.inbox.recv() => match received {
                Some(due) => {
                    self.push(due);
                    // Take everything already queued before looking at the clock again.
                    while let Ok(more) = self.inbox.try_recv() {
                        self.push(more);
                    }
                }
                None => return false,
            },
            () = tokio::time::sleep(Duration::from_millis(sleep_ms.unsigned_abs())) => {}
            () = wake.notified() => {}
            () = worker.stopped() => {}
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::RunId;

    fn due(at_ms: i64, run: i64) -> Due {
        Due {
            at_ms,
            run_id: RunId(run),
        }
    }

    #[tokio::test]
    async fn items_come_out_by_due_time_and_only_once_due() {
        let (tx, rx) = mpsc::unbounded_channel();
        for d in [due(30, 1), due(10, 2), due(20, 3)] {
            tx.send(d).unwrap();
        }
        let (report, outcome) = tokio::sync::oneshot::channel();
        let mut workers = crate::worker::Workers::new(std::sync::Arc::default());
        workers.spawn("dues", move |mut worker| async move {
            let mut dues = Dues::new(rx);
            let woke = dues.wait(0, &Notify::new(), &mut worker).await;
            let early = dues.any_due(9);
            let (first, _) = dues.take_due(25, 10);
            let (second, _) = dues.take_due(100, 10);
            drop(tx);
            let closed = !dues.wait(100, &Notify::new(), &mut worker).await;
            let _ = report.send((woke, early, first, second, closed));
        });
        let (woke, early, first, second, closed) = outcome.await.unwrap();
        assert!(woke && !early && closed);
        assert_eq!(first, vec![due(10, 2), due(20, 3)]);
        assert_eq!(second, vec![due(30, 1)]);
        workers.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_run_is_held_once_until_taken() {
        let (tx, rx) = mpsc::unbounded_channel();
        // The plan's due, then the recovery monitor's copy of the same run, and another run.
        for d in [due(10, 1), due(50, 1), due(20, 2)] {
            tx.send(d).unwrap();
        }
        let (report, outcome) = tokio::sync::oneshot::channel();
        let mut workers = crate::worker::Workers::new(std::sync::Arc::default());
        workers.spawn("dues", move |mut worker| async move {
            let mut dues = Dues::new(rx);
            dues.wait(0, &Notify::new(), &mut worker).await;
            let (first, taken) = dues.take_due(100, 10);
            // While its batch is being taken, the recovery monitor's copy is the same work.
            tx.send(due(55, 1)).unwrap();
            dues.wait(100, &Notify::new(), &mut worker).await;
            let (while_taken, _) = dues.take_due(100, 10);
            drop(taken);
            // Released, it may come back (a requeued run goes out again as the same run).
            tx.send(due(60, 1)).unwrap();
            dues.wait(100, &Notify::new(), &mut worker).await;
            let (again, _) = dues.take_due(100, 10);
            let _ = report.send((first, while_taken, again));
        });
        let (first, while_taken, again) = outcome.await.unwrap();
        assert_eq!(first, vec![due(10, 1), due(20, 2)]);
        assert_eq!(while_taken, vec![]);
        assert_eq!(again, vec![due(60, 1)]);
        workers.shutdown(Duration::from_secs(1)).await;
    }
}
