//! What handing a trigger over came to, and where hand-overs go: a leaf, so that the scheduler's
//! handle can hold the running timer's [`Handovers`] for the code that sends runs outside the
//! timer (the callback sends the runs its results start, in their own transaction).

use std::sync::Arc;

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
}

/// The running timer's hand-over slots and its recorder of answers. Whoever holds a clone keeps
/// the recorder alive, so a stopping timer waits for those hand-overs' answers to be stored.
#[derive(Debug, Clone)]
pub struct Handovers {
    pub answers: mpsc::UnboundedSender<Answer>,
    pub slots: Arc<Semaphore>,
}
