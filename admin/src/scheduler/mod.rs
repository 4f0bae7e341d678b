//! The scheduler: a loop that plans fires under the cluster lock and stores them as pending
//! runs, a timer that sends each at its millisecond, and monitors that recover what a crash or a
//! dead agent left behind. See ARCHITECTURE.md for the flow and its invariants.

mod dues;
pub mod handle;
pub mod in_doubt;
pub mod log_keeper;
pub mod monitors;
pub mod plan;
pub mod report_tally;
pub mod tick;
pub mod timer;
mod workers;
pub mod workflow_fire;

pub use handle::{Due, SchedulerHandle, WorkflowDue};
pub use workers::spawn_workers;
