//! SQLite's WAL checkpoints, off the writers' path.
//!
//! Left to itself, SQLite checkpoints inside the commit that takes the WAL past
//! `wal_autocheckpoint` pages: that writer copies the pages into the database file and fsyncs it
//! while it still holds this process's write turn (`Db::transaction`), so every other writer
//! (the timer's takes, the results, the plan) waits for the disk meanwhile. On the CI machine
//! under 5,000 http fires a second that was seven checkpoints a second of about 17 ms each
//! (BENCHMARKS.md, issue 17). Here a thread of its own checkpoints a moment after writes, with
//! `PASSIVE` (beside the writers and readers, never waiting for them). A pass copies the frames
//! there are when it starts; under a steady stream of commits one lands during nearly every
//! pass, so the WAL is seldom found whole in the database, which is what lets SQLite start it
//! over, and it grows to the writers' own threshold, [`BACKSTOP_PAGES`]. The writer that crosses
//! it then checkpoints holding the write turn as before, but it finds all but the last pause's
//! frames copied already, and it comes a tenth as often.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use diesel::prelude::*;

/// The WAL size (pages) at which a writer checkpoints itself after all.
pub(super) const BACKSTOP_PAGES: u32 = 10_000;

/// SQLite's own default threshold: a WAL that reached it by the checkpointer's last pass has
/// it come back soon; a smaller one waits longer, so that a quiet admin checkpoints seldom.
const BUSY_PAGES: i64 = 1_000;
const BUSY_PAUSE: Duration = Duration::from_millis(100);
const QUIET_PAUSE: Duration = Duration::from_secs(1);

/// Hands the checkpoints of one SQLite file to a thread of its own, started at the first
/// write and ended when this is dropped (with the last `Db` clone).
pub struct Checkpointer {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    dirty: bool,
    started: bool,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Checkpointer {
    pub fn new(path: PathBuf) -> Self {
        Self {
            shared: Arc::new(Shared {
                path,
                state: Mutex::default(),
                wake: Condvar::new(),
            }),
        }
    }

    /// A write transaction committed: the WAL has grown.
    pub fn wrote(&self) {
        let mut state = self.shared.lock();
        if state.dirty {
            return;
        }
        state.dirty = true;
        if !state.started {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("sqlite-checkpoint".into())
                .spawn(move || checkpoint_forever(&shared));
            // Without the thread the writers' backstop checkpoints, as SQLite does by itself.
            match spawned {
                Ok(_) => state.started = true,
                Err(e) => tracing::warn!(error = %e, "No checkpoint thread"),
            }
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

#[derive(QueryableByName)]
struct Outcome {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    log: i64,
}

fn checkpoint_forever(shared: &Shared) {
    let mut conn: Option<diesel::sqlite::SqliteConnection> = None;
    let mut pause = QUIET_PAUSE;
    loop {
        // Asleep until a write, then a pause that gathers the writes after it into one pass.
        {
            let mut state = shared.lock();
            while !state.dirty && !state.closed {
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if state.closed {
                return;
            }
            let (after, _) = shared
                .wake
                .wait_timeout_while(state, pause, |state| !state.closed)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state = after;
            if state.closed {
                return;
            }
            state.dirty = false;
        }
        match checkpoint(&mut conn, shared) {
            // -1: another checkpoint (a writer's backstop) was under way; nothing learnt.
            Ok(log) if log < 0 => {}
            Ok(log) if log >= BUSY_PAGES => pause = BUSY_PAUSE,
            Ok(_) => {
                pause = QUIET_PAUSE;
                // A quiet database keeps no connection of ours open: the last connection to
                // close checkpoints and removes the WAL, as without this thread.
                conn = None;
            }
            Err(e) => {
                // The next write tries again on a fresh connection; the backstop covers meanwhile.
                tracing::warn!(error = %e, "WAL checkpoint failed");
                conn = None;
                pause = QUIET_PAUSE;
            }
        }
    }
}

/// One `PASSIVE` pass: the WAL's size in pages, as it was.
fn checkpoint(
    conn: &mut Option<diesel::sqlite::SqliteConnection>,
    shared: &Shared,
) -> Result<i64, String> {
    let conn = match conn {
        Some(conn) => conn,
        None => conn.insert(
            diesel::sqlite::SqliteConnection::establish(&shared.path.to_string_lossy())
                .map_err(|e| e.to_string())?,
        ),
    };
    diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)")
        .get_result::<Outcome>(conn)
        .map(|outcome| outcome.log)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    use diesel::connection::SimpleConnection;

    fn wal_bytes(path: &std::path::Path) -> u64 {
        std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len())
    }

    fn insert(writer: &mut diesel::sqlite::SqliteConnection, rows: usize) {
        for _ in 0..rows {
            writer
                .batch_execute("INSERT INTO t (body) VALUES (zeroblob(8000))")
                .unwrap();
        }
    }

    /// Writers past SQLite's default threshold no longer checkpoint; the thread does soon after
    /// it hears of the writes, and the WAL is then reused from its start instead of growing.
    #[test]
    fn the_thread_checkpoints_what_the_writers_leave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let mut writer =
            diesel::sqlite::SqliteConnection::establish(&path.to_string_lossy()).unwrap();
        writer
            .batch_execute(&format!(
                "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}; \
                 CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)"
            ))
            .unwrap();
        // Over 1,500 pages in one transaction: SQLite alone would have checkpointed at its
        // commit and started the WAL over.
        writer.batch_execute("BEGIN").unwrap();
        insert(&mut writer, 800);
        writer.batch_execute("COMMIT").unwrap();
        let grown = wal_bytes(&path);
        assert!(grown > 1_500 * 4096, "the WAL holds {grown} bytes");
        insert(&mut writer, 1);
        assert!(wal_bytes(&path) > grown, "nothing checkpointed yet");
        let checkpointer = Checkpointer::new(path.clone());
        // Once every frame is in the database, the next write starts the WAL over: it does not
        // grow the file. Each write tells the thread, as `Db::transaction` does: a write that
        // lands during a pass leaves frames for the next.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            checkpointer.wrote();
            std::thread::sleep(Duration::from_millis(300));
            let before = wal_bytes(&path);
            insert(&mut writer, 1);
            if wal_bytes(&path) == before {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint within 20 s"
            );
        }
        // The thread holds the only other reference; it lets go as it ends.
        let shared = checkpointer.shared.clone();
        drop(checkpointer);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&shared) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread outlived its Checkpointer"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
