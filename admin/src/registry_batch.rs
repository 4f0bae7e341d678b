//! Group commit for the agents' registry calls (heartbeats and deregistrations): calls that
//! arrive together are written in one transaction, and each caller is answered only once that
//! transaction committed (or failed).
//!
//! Why: with thousands of agents beating every 10 s, a transaction per beat cost the admin more
//! than the beat's own work (its begin and commit, the hop to a blocking thread, the write turn
//! on SQLite, the statements prepared afresh), and every one of them took SQLite's write lock
//! by itself (BENCHMARKS.md, "Fleet scale"). Here the first call of a batch waits
//! [`GATHER`] for the others, then one task writes them all; calls that arrive while a batch is
//! being written form the next one, taken `GATHER` after the last. The task ends when nothing
//! is queued: no worker and no timer runs while no agent calls.
//!
//! A leaf: the batcher is generic over the call and its outcome; the registry calls are plain
//! data here, and `service::agents` gives the batcher the function that writes a batch.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::domain::ids::RunId;
use crate::error::Error;

/// The registry calls of all agents, as `AppState` holds them.
pub type RegistryBatch = Batcher<RegistryCall, Result<Vec<RunId>, Error>>;

/// One checked registry call; its outcome is the runs it ended `lost`, or why it was refused.
#[derive(Debug)]
pub enum RegistryCall {
    Beat(Box<Beat>),
    /// A graceful deregistration: in the same queue, so it is written after the beats that
    /// came before it.
    Gone {
        app_name: String,
        address: String,
        key_hash: Option<String>,
        now_ms: i64,
    },
}

/// A heartbeat, checked and normalised (the agent's metrics as JSON, labels as stored).
#[derive(Debug)]
pub struct Beat {
    pub app_name: String,
    pub address: String,
    /// The hash of the agent key it came with; `None` for an XXL-Job executor.
    pub key_hash: Option<String>,
    pub version: String,
    pub hostname: String,
    pub metrics: String,
    pub limits_mode: String,
    pub instance_id: String,
    pub run_as: String,
    pub mode: String,
    pub labels: String,
    /// When it arrived, by the admin's clock: its `last_seen_ms`.
    pub now_ms: i64,
    /// The runs it says it holds, and the last accept number handed out when it said so.
    pub held: Option<(HashSet<i64>, i64)>,
}

/// How long the first call of a batch waits for others: at 1,000 beats a second, batches of
/// about 20. Short enough that a heartbeat's answer is hardly later, and that a batch holds
/// SQLite's write lock for well under a millisecond (fires wait for it too).
pub const GATHER: Duration = Duration::from_millis(20);

/// At most this many calls in one transaction; the rest wait for the next.
pub const MAX_BATCH: usize = 256;

/// Calls waiting to be written, and whether a task is writing them (one at a time).
pub struct Batcher<I, O> {
    queue: Mutex<Queue<I, O>>,
    gather: Duration,
}

struct Queue<I, O> {
    calls: Vec<(I, oneshot::Sender<O>)>,
    /// A writing task runs: it takes what is queued every `gather` until nothing is.
    writing: bool,
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("gather", &self.gather)
            .finish_non_exhaustive()
    }
}

impl<I, O> Default for Batcher<I, O> {
    fn default() -> Self {
        Self::new(GATHER)
    }
}

/// The call was not written: the task writing its batch ended without an answer (it panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unanswered;

impl<I, O> Batcher<I, O> {
    /// A batcher whose batches gather for `gather` after their first call.
    pub fn new(gather: Duration) -> Self {
        Self {
            queue: Mutex::new(Queue {
                calls: Vec::new(),
                writing: false,
            }),
            gather,
        }
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Queues `item` and returns its outcome once a batch holding it was written by `write`,
    /// which gets the batch's calls in arrival order and returns one outcome per call, in the
    /// same order. Batches are written by a task of their own, started by the call that finds
    /// none running, and taken at most every `gather`: a caller that goes away (an agent that
    /// hung up) cancels neither its call nor the others'.
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

    /// The writing task: a batch every `gather` while calls are queued.
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
            tokio::time::sleep_until(next).await;
            next = tokio::time::Instant::now() + this.gather;
            let batch: Vec<(I, oneshot::Sender<O>)> = match this.queue.lock() {
                Ok(mut queue) if queue.calls.is_empty() => {
                    queue.writing = false;
                    std::mem::forget(guard);
                    return;
                }
                Ok(mut queue) => {
                    let n = queue.calls.len().min(MAX_BATCH);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_together_are_written_together_and_each_gets_its_own_answer() {
        let batcher: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(Duration::from_millis(50)));
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let calls: Vec<_> = (0..300u32)
            .map(|i| {
                let (batcher, batches) = (batcher.clone(), batches.clone());
                tokio::spawn(async move {
                    Batcher::submit(&batcher, i, move |items: Vec<u32>| {
                        let batches = batches.clone();
                        async move {
                            batches.lock().unwrap().push(items.clone());
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
        let batches = batches.lock().unwrap();
        let mut all: Vec<u32> = batches.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<_>>(), "each call written once");
        assert!(batches.iter().all(|b| b.len() <= MAX_BATCH));
        // 300 calls at once: two or three batches, not 300.
        assert!(batches.len() <= 4, "{} batches", batches.len());
    }

    #[tokio::test]
    async fn a_lone_call_is_written_after_the_gathering_pause() {
        let batcher: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(Duration::from_millis(1)));
        let answer = Batcher::submit(&batcher, 7, |items: Vec<u32>| async move { items }).await;
        assert_eq!(answer, Ok(7));
    }

    #[tokio::test]
    async fn a_failed_batch_leaves_its_callers_unanswered_not_waiting() {
        let batcher: Arc<Batcher<u32, u32>> = Arc::new(Batcher::new(Duration::from_millis(1)));
        let answer = Batcher::submit(&batcher, 7, |items: Vec<u32>| async move {
            assert!(items.is_empty(), "the write failed");
            items
        })
        .await;
        assert_eq!(answer, Err(Unanswered));
    }
}
