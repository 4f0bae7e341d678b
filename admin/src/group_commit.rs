//! Group commit: calls that arrive together are written in one transaction, and each caller is
//! answered only once that transaction committed (or failed).
//!
//! Why: a transaction per call costs more than many calls' own work (its begin and commit, the
//! hop to a blocking thread, the write turn on SQLite, the statements prepared afresh, the pages
//! written again for each commit), and every one of them takes SQLite's write lock by itself.
//! Here one task writes the queue; calls that arrive while a batch is being written form the
//! next one. A batcher may also hold its first call for a pause (`gather`) so that others join
//! it: the agents' heartbeats, which nothing waits for, do; results, whose dependent runs wait
//! for them, do not. The task ends when nothing is queued: no worker and no timer runs while no
//! one calls.
//!
//! A leaf: generic over the call and its outcome; the caller gives the function that writes a
//! batch.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// Calls waiting to be written, and whether a task is writing them (one at a time).
pub struct Batcher<I, O> {
    queue: Mutex<Queue<I, O>>,
    gather: Duration,
    /// A batch weighs at most this much (or is one call, whatever it weighs).
    max_weight: usize,
    /// What a call weighs: 1 each by default, so `max_weight` counts calls.
    weigh: fn(&I) -> usize,
}

struct Queue<I, O> {
    calls: Vec<(I, oneshot::Sender<O>)>,
    /// A writing task runs: it takes what is queued until nothing is.
    writing: bool,
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("gather", &self.gather)
            .field("max_weight", &self.max_weight)
            .finish_non_exhaustive()
    }
}

/// The call was not written: the task writing its batch ended without an answer (it panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unanswered;

impl<I, O> Batcher<I, O> {
    /// A batcher whose batches are taken at most every `gather` (at once, with the calls that
    /// came while the last one was written, when zero), of at most `max_batch` calls each.
    pub fn new(gather: Duration, max_batch: usize) -> Self {
        Self::weighed(gather, max_batch, |_| 1)
    }

    /// As [`Batcher::new`], a batch holding calls that weigh at most `max_weight` together by
    /// `weigh` (a call that alone weighs more is a batch of its own).
    pub fn weighed(gather: Duration, max_weight: usize, weigh: fn(&I) -> usize) -> Self {
        Self {
            queue: Mutex::new(Queue {
                calls: Vec::new(),
                writing: false,
            }),
            gather,
            max_weight,
            weigh,
        }
    }

    /// How many of the queued `calls`, from the first, make the next batch.
    fn next_batch(&self, calls: &[(I, oneshot::Sender<O>)]) -> usize {
        let mut weight = 0;
        let n = calls
            .iter()
            .take_while(|(call, _)| {
                weight += (self.weigh)(call);
                weight <= self.max_weight
            })
            .count();
        n.max(1).min(calls.len())
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Queues `item` and returns its outcome once a batch holding it was written by `write`,
    /// which gets the batch's calls in arrival order and returns one outcome per call, in the
    /// same order. Batches are written by a task of their own, started by the call that finds
    /// none running: a caller that goes away (an agent that hung up) cancels neither its call
    /// nor the others'.
    ///
    /// # Errors
    /// `Unanswered` when the writing task ended without an outcome for the call.
    pub async fn submit<F, Fut>(this: &Arc<Self>, item: I, write: F) -> Result<O, Unanswered>
    where
        F: Fn(Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        let (answer, outcome) = oneshot::channel();
        let start = {
            let mut queue = this.queue.lock().map_err(|_| Unanswered)?;
            queue.calls.push((item, answer));
            !std::mem::replace(&mut queue.writing, true)
        };
        if start {
            tokio::spawn(Self::write_while_queued(this.clone(), write));
        }
        outcome.await.map_err(|_| Unanswered)
    }

    /// The writing task: a batch every `gather` (or as soon as the last is written) while calls
    /// are queued.
    async fn write_while_queued<F, Fut>(this: Arc<Self>, write: F)
    where
        F: Fn(Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        // If `write` panics, the calls still queued are answered `Unanswered` and the next
        // call starts a new task.
        let guard = Writing(&this.queue);
        let mut next = tokio::time::Instant::now() + this.gather;
        loop {
            if !this.gather.is_zero() {
                tokio::time::sleep_until(next).await;
                next = tokio::time::Instant::now() + this.gather;
            }
            let batch: Vec<(I, oneshot::Sender<O>)> = match this.queue.lock() {
                Ok(mut queue) if queue.calls.is_empty() => {
                    queue.writing = false;
                    std::mem::forget(guard);
                    return;
                }
                Ok(mut queue) => {
                    let n = this.next_batch(&queue.calls);
                    queue.calls.drain(..n).collect()
                }
                Err(_) => return,
            };
            let (items, answers): (Vec<I>, Vec<oneshot::Sender<O>>) = batch.into_iter().unzip();
            for (answer, o) in answers.into_iter().zip(write(items).await) {
                // The caller may have gone; its call was written all the same.
                let _ = answer.send(o);
            }
        }
    }
}

/// Ends a writing task that did not end by itself (it panicked): the calls it left queued are
/// answered `Unanswered` (their senders dropped), and the next call starts a new task.
struct Writing<'a, I, O>(&'a Mutex<Queue<I, O>>);

impl<I, O> Drop for Writing<'_, I, O> {
    fn drop(&mut self) {
        if let Ok(mut queue) = self.0.lock() {
            queue.calls.clear();
            queue.writing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 300 calls submitted at once through `batcher`: each gets its own answer and is written
    /// once; returns the batches written.
    async fn three_hundred_calls(batcher: Arc<Batcher<u32, u32>>) -> Vec<Vec<u32>> {
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let calls: Vec<_> = (0..300u32)
            .map(|i| {
                let (batcher, batches) = (batcher.clone(), batches.clone());
                tokio::spawn(async move {
                    Batcher::submit(&batcher, i, move |items: Vec<u32>| {
                        let batches = batches.clone();
                        async move {
                            batches.lock().unwrap().push(items.clone());
                            // A write takes a while, so calls queue behind it.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            items.iter().map(|i| i * 2).collect()
                        }
                    })
                    .await
                })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            assert_eq!(call.await.unwrap(), Ok(u32::try_from(i).unwrap() * 2));
        }
        let batches = batches.lock().unwrap().clone();
        let mut all: Vec<u32> = batches.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<_>>(), "each call written once");
        batches
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_together_are_written_together_and_each_gets_its_own_answer() {
        let batches =
            three_hundred_calls(Arc::new(Batcher::new(Duration::from_millis(50), 256))).await;
        assert!(batches.iter().all(|b| b.len() <= 256));
        // 300 calls at once: two or three batches, not 300.
        assert!(batches.len() <= 4, "{} batches", batches.len());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_a_pause_calls_queued_behind_a_write_share_the_next() {
        let batches = three_hundred_calls(Arc::new(Batcher::new(Duration::ZERO, 64))).await;
        assert!(batches.iter().all(|b| b.len() <= 64));
        // The first call is written at once, maybe alone; the rest queue behind it.
        assert!(batches.len() <= 12, "{} batches", batches.len());
    }

    #[test]
    fn a_batch_holds_what_weighs_at_most_its_bound_and_at_least_one_call() {
        let batcher: Batcher<usize, ()> = Batcher::weighed(Duration::ZERO, 10, |w| *w);
        let queued = |weights: &[usize]| -> Vec<(usize, oneshot::Sender<()>)> {
            weights.iter().map(|w| (*w, oneshot::channel().0)).collect()
        };
        assert_eq!(batcher.next_batch(&queued(&[4, 6, 1])), 2);
        assert_eq!(batcher.next_batch(&queued(&[4, 7])), 1);
        assert_eq!(
            batcher.next_batch(&queued(&[30, 1])),
            1,
            "too heavy alone: alone"
        );
        assert_eq!(batcher.next_batch(&queued(&[1, 1, 1])), 3);
    }

    #[tokio::test]
    async fn a_lone_call_is_written_after_the_gathering_pause() {
        let batcher: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(Duration::from_millis(1), 8));
        let answer = Batcher::submit(&batcher, 7, |items: Vec<u32>| async move { items }).await;
        assert_eq!(answer, Ok(7));
    }

    #[tokio::test]
    async fn a_failed_batch_leaves_its_callers_unanswered_not_waiting() {
        let batcher: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(Duration::ZERO, 8));
        let answer = Batcher::submit(&batcher, 7, |items: Vec<u32>| async move {
            assert!(items.is_empty(), "the write failed");
            items
        })
        .await;
        assert_eq!(answer, Err(Unanswered));
        // The next call starts a writer anew.
        let answer = Batcher::submit(&batcher, 8, |items: Vec<u32>| async move { items }).await;
        assert_eq!(answer, Ok(8));
    }
}
