//! What both timers (runs, workflow slots) share: a heap of items due at a millisecond, fed by
//! a channel, and the wait until the earliest is due — at most a second, so a clock jump or a
//! manual clock is noticed — or until something new arrives.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
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
    holding: Arc<Mutex<Holding<T>>>,
    /// Notified when a release puts items back.
    put_back: Arc<Notify>,
    inbox: mpsc::UnboundedReceiver<T>,
}

/// What the heap and the takers share.
struct Holding<T: DueAt> {
    /// Keys in the heap or being taken.
    held: HashSet<T::Key>,
    /// Keys being taken.
    taking: HashSet<T::Key>,
    /// Items that arrived again while theirs was being taken: a stale copy (the recovery
    /// monitor read the run before the claim), or the same run sent again (handed back
    /// unstarted) when the taker found it claimed by someone else.
    again: HashMap<T::Key, T>,
    /// Items of `again` whose taker did not take them, for the heap.
    back: Vec<T>,
}

impl<T: DueAt> Default for Holding<T> {
    fn default() -> Self {
        Self {
            held: HashSet::new(),
            taking: HashSet::new(),
            again: HashMap::new(),
            back: Vec::new(),
        }
    }
}

/// Items taken together; they stay held until released (or this is dropped).
#[must_use = "the items stay held until this is released"]
pub struct Taken<T: DueAt> {
    keys: Vec<T::Key>,
    holding: Arc<Mutex<Holding<T>>>,
    put_back: Arc<Notify>,
}

impl<T: DueAt> Taken<T> {
    /// Stops holding the items. Of the copies that arrived while they were held, those of
    /// items the taker `took` are stale and dropped; the others go back to the heap (the work
    /// may be due again: someone else had taken it, and handed it back since).
    pub fn release(mut self, took: impl Fn(&T::Key) -> bool) {
        self.settle(&took);
    }

    fn settle(&mut self, took: &dyn Fn(&T::Key) -> bool) {
        if self.keys.is_empty() {
            return;
        }
        let mut holding = self.holding.lock().unwrap_or_else(PoisonError::into_inner);
        let mut any_back = false;
        for key in self.keys.drain(..) {
            holding.held.remove(&key);
            holding.taking.remove(&key);
            if let Some(due) = holding.again.remove(&key)
                && !took(&key)
            {
                holding.back.push(due);
                any_back = true;
            }
        }
        drop(holding);
        if any_back {
            self.put_back.notify_one();
        }
    }
}

impl<T: DueAt> Drop for Taken<T> {
    /// Not released by its taker (it failed or was stopped): whatever arrived again goes back.
    fn drop(&mut self) {
        self.settle(&|_| false);
    }
}

impl<T: DueAt> Dues<T> {
    pub fn new(inbox: mpsc::UnboundedReceiver<T>) -> Self {
        Self {
            heap: BinaryHeap::new(),
            holding: Arc::default(),
            put_back: Arc::default(),
            inbox,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Holding<T>> {
        self.holding.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&mut self, due: T) {
        let mut holding = self.lock();
        let key = due.key();
        if holding.taking.contains(&key) {
            holding.again.entry(key).or_insert(due);
        } else if holding.held.insert(key) {
            drop(holding);
            self.heap.push(Reverse(due));
        }
    }

    /// Moves the items releases put back into the heap.
    fn take_back(&mut self) {
        let back = std::mem::take(&mut self.lock().back);
        for due in back {
            self.push(due);
        }
    }

    pub fn any_due(&self, now_ms: i64) -> bool {
        self.heap
            .peek()
            .is_some_and(|Reverse(d)| d.due_at_ms() <= now_ms)
    }

    /// Takes up to `max` items due by `now_ms`, earliest first; they stay held until the
    /// returned `Taken` is released: the same work arriving meanwhile waits for the release.
    pub fn take_due(&mut self, now_ms: i64, max: usize) -> (Vec<T>, Taken<T>) {
        let mut items = Vec::new();
        while items.len() < max && self.any_due(now_ms) {
            if let Some(Reverse(due)) = self.heap.pop() {
                items.push(due);
            }
        }
        let keys: Vec<T::Key> = items.iter().map(DueAt::key).collect();
        self.lock().taking.extend(keys.iter().copied());
        let taken = Taken {
            keys,
            holding: self.holding.clone(),
            put_back: self.put_back.clone(),
        };
        (items, taken)
    }

    /// Waits until the earliest item is due, something new arrives, `wake` is notified or the
    /// worker is stopping. Returns `false` once the inbox is closed (nothing can arrive).
    pub async fn wait(&mut self, now_ms: i64, wake: &Notify, worker: &mut Worker) -> bool {
        self.take_back();
        if self.any_due(now_ms) {
            return true;
        }
        let sleep_ms = self.heap.peek().map_or(MAX_SLEEP_MS, |Reverse(d)| {
            (d.due_at_ms() - now_ms).clamp(0, MAX_SLEEP_MS)
        });
        tokio::select! {
            received = self.inbox.recv() => match received {
                Some(due) => self.push(due),
                None => return false,
            },
            () = tokio::time::sleep(Duration::from_millis(sleep_ms.unsigned_abs())) => {}
            () = wake.notified() => {}
            () = self.put_back.notified() => {}
            () = worker.stopped() => {}
        }
        // Take everything already queued or put back before looking at the clock again,
        // whichever branch woke us.
        while let Ok(more) = self.inbox.try_recv() {
            self.push(more);
        }
        self.take_back();
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
    async fn a_run_is_held_once_until_its_taker_releases_it() {
        let (tx, rx) = mpsc::unbounded_channel();
        // The plan's due, then the recovery monitor's copy of the same run, and another run.
        for d in [due(10, 1), due(50, 1), due(20, 2)] {
            tx.send(d).unwrap();
        }
        let (report, outcome) = tokio::sync::oneshot::channel();
        let mut workers = crate::worker::Workers::new(std::sync::Arc::default());
        workers.spawn("dues", move |mut worker| async move {
            let mut dues = Dues::new(rx);
            let wake = Notify::new();
            dues.wait(0, &wake, &mut worker).await;
            let (first, taken) = dues.take_due(100, 10);
            // Copies arriving while the batch takes them wait for its release.
            tx.send(due(55, 1)).unwrap();
            tx.send(due(56, 2)).unwrap();
            dues.wait(100, &wake, &mut worker).await;
            let (while_taken, _) = dues.take_due(100, 10);
            // The batch took run 1 (its copy was stale) but found run 2 taken by someone else,
            // who may have handed it back since: run 2's copy goes out.
            taken.release(|key| *key == RunId(1));
            dues.wait(100, &wake, &mut worker).await;
            let (put_back, _) = dues.take_due(100, 10);
            // Released, run 1 may come back (a requeued run goes out again as the same run).
            tx.send(due(60, 1)).unwrap();
            dues.wait(100, &wake, &mut worker).await;
            let (again, dropped) = dues.take_due(100, 10);
            // A taker that stops without a release puts back whatever arrived meanwhile.
            tx.send(due(70, 1)).unwrap();
            dues.wait(100, &wake, &mut worker).await;
            drop(dropped);
            dues.wait(100, &wake, &mut worker).await;
            let (after_drop, _) = dues.take_due(100, 10);
            let _ = report.send((first, while_taken, put_back, again, after_drop));
        });
        let (first, while_taken, put_back, again, after_drop) = outcome.await.unwrap();
        assert_eq!(first, vec![due(10, 1), due(20, 2)]);
        assert_eq!(while_taken, vec![]);
        assert_eq!(put_back, vec![due(56, 2)]);
        assert_eq!(again, vec![due(60, 1)]);
        assert_eq!(after_drop, vec![due(70, 1)]);
        workers.shutdown(Duration::from_secs(1)).await;
    }
}
