//! How the rest of the admin talks to the running scheduler: a leaf, so that the app state
//! can hold it without importing the scheduler's workers.

use std::sync::Mutex;

use crate::dispatch::answer::Handovers;
use crate::domain::ids::{RunId, WorkflowId};
use tokio::sync::{Notify, mpsc};

/// A stored pending run and the moment it should be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    pub at_ms: i64,
    pub run_id: RunId,
}

/// A planned slot of a scheduled workflow and the moment to start its run (later than the
/// slot for a misfire catch-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkflowDue {
    pub at_ms: i64,
    pub workflow_id: WorkflowId,
    pub slot_ms: i64,
}

/// How the rest of the admin talks to the running scheduler.
#[derive(Debug)]
pub struct SchedulerHandle {
    /// Who this admin is in the lock row and logs: host and process id.
    pub holder: String,
    pub(super) plan_now: Notify,
    pub(super) timer_wake: Notify,
    pub(super) workflow_timer_wake: Notify,
    dues: mpsc::UnboundedSender<Due>,
    inbox: Mutex<Option<mpsc::UnboundedReceiver<Due>>>,
    workflow_dues: mpsc::UnboundedSender<WorkflowDue>,
    workflow_inbox: Mutex<Option<mpsc::UnboundedReceiver<WorkflowDue>>>,
    continuity: std::sync::Mutex<Continuity>,
    /// The running timer's hand-overs, for runs sent outside the timer; none while it is not
    /// running.
    handovers: Mutex<Option<Handovers>>,
    /// The daily report's count between its passes (the report monitor's alone).
    pub(super) report: std::sync::Arc<Mutex<crate::scheduler::report_tally::ReportMemory>>,
}

/// Whether this admin's passes have run without a break, so a late slot can be told apart:
/// due during a break (outage, DB away, clock jump) it has misfired; due while passes kept
/// running it is only a backlog and fires.
#[derive(Debug, Default, Clone, Copy)]
struct Continuity {
    /// Start of the current unbroken run of successful passes.
    up_since_ms: Option<i64>,
    /// End of the last successful pass.
    last_pass_ms: Option<i64>,
}

impl Default for SchedulerHandle {
    fn default() -> Self {
        Self::new(holder_name())
    }
}

fn holder_name() -> String {
    let host = crate::dispatch::relay::host_name();
    format!("{host}:{}", std::process::id())
}

impl SchedulerHandle {
    pub fn new(holder: String) -> Self {
        let (dues, inbox) = mpsc::unbounded_channel();
        let (workflow_dues, workflow_inbox) = mpsc::unbounded_channel();
        Self {
            holder,
            plan_now: Notify::new(),
            timer_wake: Notify::new(),
            workflow_timer_wake: Notify::new(),
            dues,
            inbox: Mutex::new(Some(inbox)),
            workflow_dues,
            workflow_inbox: Mutex::new(Some(workflow_inbox)),
            continuity: std::sync::Mutex::new(Continuity::default()),
            handovers: Mutex::new(None),
            report: std::sync::Arc::default(),
        }
    }

    /// Called as a pass starts: slots due at or after the returned time are a backlog, not a
    /// misfire. A break longer than the misfire threshold since the last successful pass (the
    /// first pass, a failing database, a clock jump) starts a new unbroken run now.
    pub fn backlog_from(&self, now_ms: i64, misfire_threshold_ms: i64) -> i64 {
        let mut c = self
            .continuity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let unbroken = c
            .last_pass_ms
            .is_some_and(|last| (0..=misfire_threshold_ms).contains(&(now_ms - last)));
        if !unbroken || c.up_since_ms.is_none() {
            c.up_since_ms = Some(now_ms);
        }
        c.up_since_ms.unwrap_or(now_ms) - misfire_threshold_ms
    }

    /// Called when a pass has committed.
    pub fn pass_done(&self, now_ms: i64) {
        self.continuity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last_pass_ms = Some(now_ms);
    }

    /// A job was created or changed: plan again now instead of at the next pass.
    pub fn jobs_changed(&self) {
        self.plan_now.notify_one();
    }

    /// A workflow was created, changed or deleted, or a planned slot was started or dropped:
    /// plan again now (workflows are planned in the same pass as jobs).
    pub fn workflows_changed(&self) {
        self.plan_now.notify_one();
    }

    /// The running timer's hand-overs: whoever sends a run itself (taken in its own
    /// transaction) uses them, so the answer is recorded as the timer's are. None while no
    /// timer runs: then runs are left to it (`enqueue`) or to the recovery monitor.
    pub fn handovers(&self) -> Option<Handovers> {
        self.handovers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_handovers(&self, handovers: Option<Handovers>) {
        *self
            .handovers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = handovers;
    }

    /// Hands stored runs to the timer. Without a running timer (a tool, a test without
    /// workers) they stay pending in the database, where the recovery monitor finds them.
    pub fn enqueue(&self, dues: impl IntoIterator<Item = Due>) {
        for due in dues {
            let _ = self.dues.send(due);
        }
    }

    /// Hands planned workflow slots to the workflow timer. Without one running, they stay
    /// pending on the workflow row, where the monitors of any admin find them.
    pub fn enqueue_workflows(&self, dues: impl IntoIterator<Item = WorkflowDue>) {
        for due in dues {
            let _ = self.workflow_dues.send(due);
        }
    }

    /// Makes the loop and the timer look at the clock again (tests that move a manual clock).
    pub fn nudge(&self) {
        self.plan_now.notify_one();
        self.timer_wake.notify_one();
        self.workflow_timer_wake.notify_one();
    }

    pub(super) fn take_inbox(&self) -> Option<mpsc::UnboundedReceiver<Due>> {
        self.inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    pub(super) fn take_workflow_inbox(&self) -> Option<mpsc::UnboundedReceiver<WorkflowDue>> {
        self.workflow_inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}
