//! Group commit for the agents' registry calls (heartbeats and deregistrations): calls that
//! arrive together are written in one transaction, and each caller is answered only once that
//! transaction committed (or failed).
//!
//! Why: with thousands of agents beating every 10 s, a transaction per beat cost the admin more
//! than the beat's own work (its begin and commit, the hop to a blocking thread, the write turn
//! on SQLite, the statements prepared afresh), and every one of them took SQLite's write lock
//! by itself (BENCHMARKS.md, "Fleet scale"). Here the first call of a batch waits
//! [`GATHER`] for the others, then one task writes them all (`group_commit::Batcher`); calls
//! that arrive while a batch is being written form the next one, taken `GATHER` after the last.
//!
//! A leaf: the registry calls are plain data here, and `service::agents` gives the batcher the
//! function that writes a batch.

use std::collections::HashSet;
use std::time::Duration;

use crate::domain::ids::RunId;
use crate::error::Error;
use crate::group_commit::Batcher;

/// The registry calls of all agents, as `AppState` holds them.
pub type RegistryBatch = Batcher<RegistryCall, Result<Vec<RunId>, Error>>;

/// The registry calls' batcher: a batch every [`GATHER`], of at most [`MAX_BATCH`] calls.
pub fn batcher() -> RegistryBatch {
    Batcher::new(GATHER, MAX_BATCH)
}

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
