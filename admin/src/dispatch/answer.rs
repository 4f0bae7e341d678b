//! What handing a trigger over came to, and where hand-overs go: a leaf, so that the scheduler's
//! handle can hold the running timer's [`Handovers`] for the code that sends runs outside the
//! timer (the callback sends the runs its results start, in their own transaction).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jobfleet_agent::protocol::RunAccepted;
use tokio::sync::{Semaphore, mpsc};

use crate::domain::ids::RunId;

/// What handing a trigger over came to.
#[derive(Debug, Clone)]
pub struct Answer {
    pub run_id: RunId,
    pub agent: Option<String>,
    pub accepted: bool,
    pub message: String,
    pub outcome: &'static str,
    /// Which agent process took the run (jobfleet agents say so; XXL-Job executors do not).
    pub taken_by: Option<RunAccepted>,
    /// The claim this hand-over went out under (see `job_run::TriggerAnswer::claimed_ms`).
    pub claimed_ms: Option<i64>,
    /// How long after this answer the agent starts the run (it was sent ahead): its acceptance
    /// is held back that much longer.
    pub starts_in: Duration,
}

impl Answer {
    /// No agent may take the run: it fails (and is retried) as a trigger nobody took.
    pub fn no_agent(run_id: RunId, claimed_ms: Option<i64>, message: String) -> Self {
        Self {
            run_id,
            agent: None,
            accepted: false,
            message,
            outcome: "no_agent",
            taken_by: None,
            claimed_ms,
            starts_in: Duration::ZERO,
        }
    }
}

/// The running timer's hand-over slots and its recorder of answers. Whoever holds a clone keeps
/// the recorder alive, so a stopping timer waits for those hand-overs' answers to be stored.
#[derive(Debug, Clone)]
pub struct Handovers {
    pub answers: mpsc::UnboundedSender<Answer>,
    pub slots: Arc<Semaphore>,
    pub held: Arc<HeldAcceptances>,
}

/// How long the recorder holds an agent's acceptance before storing it alone.
pub const HOLD_ACCEPTANCE: Duration = Duration::from_millis(200);

/// Acceptances the recorder holds back for [`HOLD_ACCEPTANCE`]: a short run's result arrives
/// meanwhile, and its transaction stores both in one write of the row (an acceptance stored alone
/// was a transaction, a commit and a rewrite of the row's status indexes per run). Until stored,
/// the run reads as pending with no agent; what needs its agent sooner (a kill, a log read)
/// looks here.
#[derive(Debug, Default)]
pub struct HeldAcceptances {
    held: Mutex<HashMap<RunId, (Answer, Instant)>>,
}

impl HeldAcceptances {
    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, (Answer, Instant)>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn hold(&self, answer: Answer) {
        let since = Instant::now() + answer.starts_in;
        self.lock().insert(answer.run_id, (answer, since));
    }

    /// Copies of the held acceptances of `ids` (they stay held until [`Self::forget`]).
    pub fn of(&self, ids: impl IntoIterator<Item = RunId>) -> Vec<Answer> {
        let held = self.lock();
        ids.into_iter()
            .filter_map(|id| held.get(&id).map(|(answer, _)| answer.clone()))
            .collect()
    }

    /// The agent that accepted run `id`, while its acceptance is held.
    pub fn agent_of(&self, id: RunId) -> Option<String> {
        self.lock()
            .get(&id)
            .and_then(|(answer, _)| answer.agent.clone())
    }

    /// Drops acceptances stored by someone else (a result's transaction that stored them).
    pub fn forget(&self, ids: impl IntoIterator<Item = RunId>) {
        let mut held = self.lock();
        for id in ids {
            held.remove(&id);
        }
    }

    /// Takes the acceptances held at least `age` (all of them with zero).
    pub fn take_older_than(&self, age: Duration) -> Vec<Answer> {
        let now = Instant::now();
        let mut taken = Vec::new();
        self.lock().retain(|_, (answer, since)| {
            if now.saturating_duration_since(*since) >= age {
                taken.push(answer.clone());
                false
            } else {
                true
            }
        });
        taken
    }

    /// Takes the acceptance of run `id`, to store it now.
    pub fn take(&self, id: RunId) -> Option<Answer> {
        self.lock().remove(&id).map(|(answer, _)| answer)
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(id: i64, agent: &str) -> Answer {
        Answer {
            run_id: RunId(id),
            agent: Some(agent.into()),
            accepted: true,
            message: format!("accepted by {agent}"),
            outcome: "accepted",
            taken_by: None,
            claimed_ms: Some(1),
            starts_in: Duration::ZERO,
        }
    }

    #[test]
    fn held_acceptances_are_read_forgotten_or_taken_once() {
        let held = HeldAcceptances::default();
        held.hold(accepted(1, "a"));
        held.hold(accepted(2, "b"));
        held.hold(accepted(3, "c"));
        assert_eq!(held.agent_of(RunId(2)).as_deref(), Some("b"));
        assert_eq!(held.agent_of(RunId(9)), None);
        // Reading leaves them held.
        let read: Vec<i64> = held
            .of([RunId(1), RunId(9), RunId(3)])
            .iter()
            .map(|a| a.run_id.0)
            .collect();
        assert_eq!(read, [1, 3]);
        held.forget([RunId(1)]);
        assert_eq!(held.take(RunId(2)).map(|a| a.run_id), Some(RunId(2)));
        assert!(held.take(RunId(2)).is_none(), "taken once");
        // Not held long enough yet; everything with no age.
        assert!(held.take_older_than(Duration::from_secs(60)).is_empty());
        let rest = held.take_older_than(Duration::ZERO);
        assert_eq!(
            rest.iter().map(|a| a.run_id).collect::<Vec<_>>(),
            [RunId(3)]
        );
        assert!(held.is_empty());
    }
}
