//! SQLite's write turn: this process's write transactions take turns here rather than on the
//! database's lock (see `Db::transaction`). First come, first served, except that a writer
//! whose work is due at a millisecond (the timer's take of the next runs) goes before the
//! writers still waiting: a take that queued behind the plan pass and a few results' stores
//! reached its agents tens of milliseconds after its runs were due (BENCHMARKS.md, issue 17),
//! where the plan pass works 5 s ahead and a result's store a few milliseconds later costs
//! nobody a deadline. At most a few takes wait at once (the timer takes at most four batches at
//! a time, and a take already late waits its turn), so the others never starve.
//!
//! The turn is handed from one holder to the next waiter directly, never left free while
//! someone waits; a waiter that gave up (its timeout) is skipped, and a turn that reaches a
//! waiter as it gives up is dropped with the waiter's end of the channel, which hands it on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Which queue a writer waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// Behind every writer that asked before it.
    InTurn,
    /// Before every `InTurn` writer still waiting; behind the current holder and earlier
    /// urgent writers.
    Due,
}

/// The turn and its two queues of waiters.
#[derive(Debug, Default)]
pub struct WriteTurn {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Held, or on its way to the next waiter.
    held: bool,
    due: VecDeque<oneshot::Sender<Turn>>,
    in_turn: VecDeque<oneshot::Sender<Turn>>,
}

/// The write turn, held until dropped; dropping it hands it to the next waiter.
#[derive(Debug)]
pub struct Turn {
    of: Option<Arc<WriteTurn>>,
}

impl WriteTurn {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for the turn. `None` if a waiter's channel were dropped unsent, which `hand_over`
    /// never does: kept as an error rather than a panic.
    pub async fn take(self: &Arc<Self>, urgency: Urgency) -> Option<Turn> {
        let handed = {
            let mut state = self.lock();
            if !state.held {
                state.held = true;
                return Some(Turn {
                    of: Some(self.clone()),
                });
            }
            let (handing, handed) = oneshot::channel();
            match urgency {
                Urgency::Due => state.due.push_back(handing),
                Urgency::InTurn => state.in_turn.push_back(handing),
            }
            handed
        };
        handed.await.ok()
    }

    /// Gives the turn to the next waiter still waiting, or frees it.
    fn hand_over(self: &Arc<Self>) {
        loop {
            let next = {
                let mut state = self.lock();
                match state.due.pop_front().or_else(|| state.in_turn.pop_front()) {
                    Some(next) => next,
                    None => {
                        state.held = false;
                        return;
                    }
                }
            };
            // Sent outside the lock: a turn that reaches a waiter as it gives up is dropped on
            // the waiter's side, and that drop hands it over again, taking the lock.
            match next.send(Turn {
                of: Some(self.clone()),
            }) {
                Ok(()) => return,
                // That waiter gave up: this call hands the turn to the next one instead.
                Err(mut unwanted) => unwanted.of = None,
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(turn) = self.of.take() {
            turn.hand_over();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A waiter for the turn, spawned so that it queues at once; it says its name once it has
    /// the turn and holds it until told to let go. Every waiter of one turn counts itself in
    /// the turn's test-wide `holders` while it holds it: never two at once.
    fn waiter(
        turn: &Arc<WriteTurn>,
        urgency: Urgency,
        name: &'static str,
        order: &tokio::sync::mpsc::UnboundedSender<&'static str>,
        holders: &Arc<AtomicUsize>,
    ) -> (tokio::task::JoinHandle<()>, oneshot::Sender<()>) {
        let (release, released) = oneshot::channel();
        let (turn, order, holders) = (turn.clone(), order.clone(), holders.clone());
        let task = tokio::spawn(async move {
            let held = turn.take(urgency).await.unwrap();
            let now_held = holders.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(now_held, 1, "two writers hold the turn");
            order.send(name).unwrap();
            let _ = released.await;
            holders.fetch_sub(1, Ordering::SeqCst);
            drop(held);
        });
        (task, release)
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_due_writer_goes_before_those_waiting_in_turn() {
        let turn = Arc::new(WriteTurn::default());
        let held = turn.take(Urgency::InTurn).await.unwrap();
        let (order, mut got) = tokio::sync::mpsc::unbounded_channel();
        let holders = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for (urgency, name) in [
            (Urgency::InTurn, "first in turn"),
            (Urgency::InTurn, "second in turn"),
            (Urgency::Due, "first due"),
            (Urgency::Due, "second due"),
        ] {
            waiters.push(waiter(&turn, urgency, name, &order, &holders));
            settle().await;
        }
        assert!(
            got.try_recv().is_err(),
            "nobody has the turn while it is held"
        );
        let mut releases: std::collections::HashMap<_, _> = waiters
            .into_iter()
            .zip(["first in turn", "second in turn", "first due", "second due"])
            .map(|((_task, release), name)| (name, release))
            .collect();
        drop(held);
        let mut seen = Vec::new();
        while seen.len() < 4 {
            // Each one lets go once it has the turn; the order is what the turn chose.
            let name = within_5_s(got.recv()).await.unwrap();
            seen.push(name);
            drop(releases.remove(name));
        }
        assert_eq!(
            seen,
            ["first due", "second due", "first in turn", "second in turn"]
        );
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_does_not_keep_the_turn_from_the_next() {
        let turn = Arc::new(WriteTurn::default());
        let held = turn.take(Urgency::InTurn).await.unwrap();
        let gave_up =
            tokio::time::timeout(Duration::from_millis(20), turn.take(Urgency::Due)).await;
        assert!(gave_up.is_err(), "the turn was held");
        let (order, mut got) = tokio::sync::mpsc::unbounded_channel();
        let holders = Arc::new(AtomicUsize::new(0));
        let (_task, release) = waiter(&turn, Urgency::InTurn, "next", &order, &holders);
        settle().await;
        drop(held);
        assert_eq!(within_5_s(got.recv()).await, Some("next"));
        drop(release);
        // Free again once the last holder let go.
        tokio::time::timeout(Duration::from_secs(5), turn.take(Urgency::InTurn))
            .await
            .expect("the turn came free")
            .unwrap();
    }

    #[tokio::test]
    async fn a_turn_sent_to_a_waiter_as_it_gives_up_is_handed_on() {
        let turn = Arc::new(WriteTurn::default());
        let held = turn.take(Urgency::InTurn).await.unwrap();
        // Queued, then never polled again: the turn reaches its channel, nobody takes it out.
        let mut abandoned = Box::pin(turn.take(Urgency::Due));
        assert!(poll_once(abandoned.as_mut()).is_none());
        let (order, mut got) = tokio::sync::mpsc::unbounded_channel();
        let holders = Arc::new(AtomicUsize::new(0));
        let (_task, release) = waiter(&turn, Urgency::InTurn, "next", &order, &holders);
        settle().await;
        drop(held);
        settle().await;
        assert!(
            got.try_recv().is_err(),
            "the abandoned waiter was sent the turn first"
        );
        // The turn sits in the abandoned waiter's channel: nobody else may have it meanwhile.
        let mut newcomer = Box::pin(turn.take(Urgency::InTurn));
        assert!(
            poll_once(newcomer.as_mut()).is_none(),
            "the turn was given twice"
        );
        drop(abandoned);
        assert_eq!(within_5_s(got.recv()).await, Some("next"));
        drop(release);
        // Queued after `next`, it has the turn once `next` lets go.
        within_5_s(newcomer).await.unwrap();
    }

    async fn within_5_s<F: std::future::Future>(future: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(5), future)
            .await
            .expect("the turn was lost")
    }

    /// Polls `future` once with a waker that does nothing.
    fn poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.poll(&mut cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }
}
