//! The storage layer: one diesel connection type over SQLite and MySQL, the pool, and one
//! module per table holding every query on that table.
//!
//! Only `db/` imports diesel's DSL or `schema`. Services open the transaction (one per user
//! operation, audit row included) and pass the connection down; table functions never open
//! their own.

pub mod agent;
pub mod alert_channel;
pub mod alert_event;
pub mod api_token;
pub mod audit_log;
mod checkpoint;
pub mod column_types;
pub mod console_session;
pub mod executor_group;
pub mod job;
pub mod job_run;
pub mod job_script;
pub mod migrate;
pub mod prepared;
pub mod rows_update;
pub mod run_log;
pub mod run_report_daily;
pub mod scheduler_lock;
pub mod schema;
pub mod user;
pub mod user_group_grant;
pub mod workflow;
pub mod workflow_node;
pub mod workflow_run;
pub mod write_turn;

pub use prepared::{Prepare, Prepared};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{self, ManageConnection};

use crate::error::Error;
use write_turn::{Urgency, WriteTurn};

/// Ids in one `IN (…)` list, or rows in one multi-row statement, at most: MariaDB and SQLite
/// both take this many placeholders comfortably.
pub const IN_LIST_MAX: usize = 500;

/// `ids` in `IN (…)` lists of at most [`IN_LIST_MAX`], each padded by repeating its last id to
/// the next power of two (or to the maximum): a list then takes one of ten lengths, so a select
/// over it can be kept prepared (`.prepared()`), where each new length was SQL to parse afresh
/// (5 % of the admin's CPU at 100 fires/s, BENCHMARKS.md). A repeated id matches the same row.
pub fn in_lists<T: Clone>(ids: &[T]) -> impl Iterator<Item = std::borrow::Cow<'_, [T]>> {
    ids.chunks(IN_LIST_MAX).map(|chunk| {
        let len = chunk.len().next_power_of_two().min(IN_LIST_MAX);
        match chunk.last() {
            Some(last) if len > chunk.len() => {
                let mut padded = chunk.to_vec();
                padded.resize(len, last.clone());
                std::borrow::Cow::Owned(padded)
            }
            _ => std::borrow::Cow::Borrowed(chunk),
        }
    })
}

/// The rows `read` finds for `ids`, read over [`in_lists`] (so each list's select stays
/// prepared). A padded list names its last id more than once; the database returns its row once.
///
/// # Errors
/// Whatever `read` returns.
pub fn read_in_lists<I: Clone, T>(
    conn: &mut AnyConnection,
    ids: &[I],
    mut read: impl FnMut(&mut AnyConnection, &[I]) -> Result<Vec<T>, Error>,
) -> Result<Vec<T>, Error> {
    let mut out = Vec::with_capacity(ids.len());
    for list in in_lists(ids) {
        out.extend(read(conn, &list)?);
    }
    Ok(out)
}

/// `text` as a literal inside a `LIKE … ESCAPE '\\'` pattern.
pub fn like_literal(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// One connection type for both backends; the backend is chosen from the database URL.
/// SQLite stays last: the derive needs at least one variant when `mysql` is compiled out.
#[derive(diesel::MultiConnection)]
pub enum AnyConnection {
    #[cfg(feature = "mysql")]
    Mysql(diesel::mysql::MysqlConnection),
    Sqlite(diesel::sqlite::SqliteConnection),
}

/// Runs the same body on the concrete connection, for the statements the shared
/// `MultiConnection` DSL does not cover (locking reads, batch inserts, last insert id), and for
/// those on a run's path: the multi-connection builds a statement's SQL text about three times
/// per execution to serialise it for the inner connection, where the inner connection alone
/// builds it once, or not at all for a kept statement with a static query id (BENCHMARKS,
/// issue 17: 22 % of the admin's CPU in a burst).
#[macro_export]
macro_rules! db_run {
    ($conn:ident: $body:block) => {
        match $conn {
            #[cfg(feature = "mysql")]
            $crate::db::AnyConnection::Mysql($conn) => $body,
            $crate::db::AnyConnection::Sqlite($conn) => $body,
        }
    };
}

/// Runs `f`'s reads in one transaction, so that they see one snapshot: on SQLite a deferred
/// transaction that only reads, which under WAL holds no writer off; on MySQL the consistent
/// read of REPEATABLE READ, from its first statement on, asked for because a server or session
/// may default to READ COMMITTED, where each statement reads anew. Not inside a transaction:
/// MySQL refuses to change the isolation of one under way, and SQLite's savepoint would take
/// no snapshot of its own.
///
/// # Errors
/// Whatever `f` returns, or the database's error on begin or commit.
pub fn in_snapshot<T>(
    conn: &mut AnyConnection,
    f: impl FnOnce(&mut AnyConnection) -> Result<T, Error>,
) -> Result<T, Error> {
    #[cfg(feature = "mysql")]
    if let AnyConnection::Mysql(mysql) = conn {
        // For the next transaction only.
        mysql.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
    }
    conn.transaction(f)
}

/// Runs `f` in a transaction. On SQLite it is `BEGIN IMMEDIATE`: a deferred transaction that
/// reads and then writes fails at once with "database is locked" when another connection wrote
/// in between (busy_timeout cannot help a stale snapshot), so writers take the lock up front
/// and queue on busy_timeout instead.
///
/// # Errors
/// Whatever `f` returns (rolled back), or the database's error on begin or commit.
pub fn in_transaction<T>(
    conn: &mut AnyConnection,
    f: impl FnOnce(&mut AnyConnection) -> Result<T, Error>,
) -> Result<T, Error> {
    use diesel::connection::{AnsiTransactionManager, TransactionManager};
    let Some(sqlite) = sqlite_of(conn) else {
        return conn.transaction(f);
    };
    AnsiTransactionManager::begin_transaction_sql(sqlite, "BEGIN IMMEDIATE")?;
    let outcome = f(conn);
    let Some(sqlite) = sqlite_of(conn) else {
        return Err(Error::Internal(anyhow::anyhow!(
            "the connection changed its backend"
        )));
    };
    match outcome {
        Ok(value) => match AnsiTransactionManager::commit_transaction(sqlite) {
            Ok(()) => Ok(value),
            Err(e) => {
                let _ = AnsiTransactionManager::rollback_transaction(sqlite);
                Err(e.into())
            }
        },
        Err(e) => {
            AnsiTransactionManager::rollback_transaction(sqlite)?;
            Err(e)
        }
    }
}

/// Runs `f` in a transaction until it ends otherwise than as a deadlock victim, at most
/// `DEADLOCK_ATTEMPTS` times. SQLite never gets here with a deadlock: its writers take turns.
fn retrying_deadlocks<T>(
    conn: &mut AnyConnection,
    f: &mut impl FnMut(&mut AnyConnection) -> Result<T, Error>,
) -> Result<T, Error> {
    const DEADLOCK_ATTEMPTS: u32 = 4;
    let mut attempt = 1;
    loop {
        match in_transaction(conn, &mut *f) {
            Err(Error::Contended(cause)) if attempt < DEADLOCK_ATTEMPTS => {
                tracing::debug!(attempt, %cause, "deadlock victim; running the transaction again");
                // Random, so that the two writers that met do not meet again in step: up to 20,
                // 40, 80 ms.
                let pause_ms = rand::random_range(1..=10u64 << attempt);
                std::thread::sleep(std::time::Duration::from_millis(pause_ms));
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Runs `write` in a savepoint and keeps what it wrote only if it changed exactly `expected`
/// rows: a batch's conditional writes, all or none, so a refused batch can be done again row by
/// row to learn which rows the condition held for. Returns whether it was kept.
///
/// # Errors
/// Database errors.
pub fn all_or_none(
    conn: &mut AnyConnection,
    expected: usize,
    write: impl FnOnce(&mut AnyConnection) -> diesel::QueryResult<usize>,
) -> Result<bool, Error> {
    use diesel::Connection;
    let kept = conn.transaction::<(), diesel::result::Error, _>(|conn| {
        if write(conn)? == expected {
            Ok(())
        } else {
            Err(diesel::result::Error::RollbackTransaction)
        }
    });
    match kept {
        Ok(()) => Ok(true),
        Err(diesel::result::Error::RollbackTransaction) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Runs `f` in a savepoint that is always rolled back and returns what `f` returned: a dry run
/// that takes exactly the path of the real thing, refusals included, and leaves no trace.
///
/// # Errors
/// `f`'s error; database errors.
pub fn rehearse<T>(
    conn: &mut AnyConnection,
    f: impl FnOnce(&mut AnyConnection) -> Result<T, Error>,
) -> Result<T, Error> {
    use diesel::Connection;
    use diesel::result::Error as Diesel;
    let mut rehearsed = None;
    let rolled_back = conn.transaction::<(), Diesel, _>(|conn| {
        rehearsed = Some(f(conn));
        Err(Diesel::RollbackTransaction)
    });
    match (rolled_back, rehearsed) {
        (Err(Diesel::RollbackTransaction), Some(outcome)) => outcome,
        // The savepoint could not be rolled back: nothing of the rehearsal may count.
        (Err(e), _) => Err(e.into()),
        (Ok(()), _) => Err(Error::Internal(anyhow::anyhow!(
            "a rehearsal was not rolled back"
        ))),
    }
}

/// Whether a write transaction holds the whole database until it commits (SQLite, whose
/// writers take turns in `Db::transaction`), rather than the rows it writes (MySQL).
pub fn one_writer_at_a_time(conn: &AnyConnection) -> bool {
    match conn {
        AnyConnection::Sqlite(_) => true,
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(_) => false,
    }
}

/// Whether writing a batch of rows with one statement beats a kept statement per row. On MySQL
/// every statement is a round trip to the server. SQLite runs in this process, where a kept
/// single-row statement costs microseconds and a batch's `CASE` statement must be parsed anew
/// and searched row by row.
pub fn batch_writes_pay(conn: &AnyConnection) -> bool {
    match conn {
        AnyConnection::Sqlite(_) => false,
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(_) => true,
    }
}

fn sqlite_of(conn: &mut AnyConnection) -> Option<&mut diesel::sqlite::SqliteConnection> {
    match conn {
        AnyConnection::Sqlite(sqlite) => Some(sqlite),
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(_) => None,
    }
}

/// Which backend a URL selects. Parsed once at start-up; errors name the URL's problem.
#[derive(Clone, PartialEq, Eq)]
pub enum DbUrl {
    Sqlite(PathBuf),
    Mysql(String),
}

impl std::fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            Self::Mysql(url) => f.write_str(&redact_url_password(url)),
        }
    }
}

/// Hides the password of `mysql://user:pass@host/db` so URLs can be logged.
pub fn redact_url_password(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            // set_password only fails for URLs without a host, which a parsed mysql URL has.
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

impl DbUrl {
    /// Parses `sqlite://PATH`, `sqlite:PATH` or `mysql://USER:PASS@HOST:PORT/DB`.
    ///
    /// # Errors
    /// A message saying what is wrong with the URL, for the config layer to attach the key to.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if let Some(rest) = raw
            .strip_prefix("sqlite://")
            .or_else(|| raw.strip_prefix("sqlite:"))
        {
            if rest.is_empty() {
                return Err("the sqlite URL has no file path (expected sqlite://PATH)".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(rest)));
        }
        if raw.starts_with("mysql://") || raw.starts_with("mariadb://") {
            let normalized = raw.replacen("mariadb://", "mysql://", 1);
            let parsed =
                url::Url::parse(&normalized).map_err(|e| format!("invalid MySQL URL: {e}"))?;
            if parsed.host_str().is_none_or(str::is_empty) {
                return Err("the MySQL URL has no host".into());
            }
            if parsed.path().trim_matches('/').is_empty() {
                return Err(
                    "the MySQL URL has no database name (mysql://USER:PASS@HOST:PORT/DB)".into(),
                );
            }
            if !cfg!(feature = "mysql") {
                return Err(
                    "this build has no MySQL support; rebuild with `--features mysql`".into(),
                );
            }
            return Ok(Self::Mysql(normalized));
        }
        Err("unsupported database URL: use sqlite://PATH or mysql://USER:PASS@HOST:PORT/DB".into())
    }

    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Mysql(_) => "mysql",
        }
    }
}

/// r2d2 manager that picks the backend from the URL. Diesel's derived `establish` swallows the
/// driver's error, which turns "MariaDB is down" into a 30 s wait and a meaningless message.
pub struct ConnectionManager {
    url: DbUrl,
}

impl ConnectionManager {
    pub fn new(url: DbUrl) -> Self {
        Self { url }
    }
}

/// Opens one connection to `url` outside the pool (migrations, health checks, tests).
///
/// # Errors
/// The driver's connection error.
pub fn establish(url: &DbUrl) -> Result<AnyConnection, r2d2::Error> {
    match url {
        DbUrl::Sqlite(path) => {
            let path_str = path.to_string_lossy();
            let mut conn = diesel::sqlite::SqliteConnection::establish(&path_str)
                .map_err(r2d2::Error::ConnectionError)?;
            // WAL lets readers run beside the writer; busy_timeout turns writer contention into waiting, not errors.
            conn.batch_execute("PRAGMA journal_mode=WAL; PRAGMA busy_timeout=5000; PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL")
                .map_err(r2d2::Error::QueryError)?;
            Ok(AnyConnection::Sqlite(conn))
        }
        #[cfg(feature = "mysql")]
        DbUrl::Mysql(url) => {
            let mut conn = diesel::mysql::MysqlConnection::establish(url)
                .map_err(r2d2::Error::ConnectionError)?;
            // Millisecond columns are plain BIGINTs, but sessions must agree on UTC for any server-side time.
            conn.batch_execute("SET time_zone = '+00:00'")
                .map_err(r2d2::Error::QueryError)?;
            Ok(AnyConnection::Mysql(conn))
        }
        #[cfg(not(feature = "mysql"))]
        DbUrl::Mysql(_) => Err(r2d2::Error::ConnectionError(
            diesel::ConnectionError::BadConnection("this build has no MySQL support".into()),
        )),
    }
}

/// A pooled connection and when it last did work without a connection-level error. The pool
/// tests a connection on checkout only when that is long ago or unknown: under load the test
/// (`SELECT 1`) was one round trip in ten on MariaDB, about six per run, and told nothing a
/// connection that answered a moment ago had not told already. A connection that fails after
/// passing (or skipping) the test fails its caller's transaction either way; it is then tested
/// before its next use, and dropped if the test fails.
pub struct PooledConnection {
    conn: AnyConnection,
    healthy_at: Option<Instant>,
}

/// How long a connection that just worked is trusted without a test. Short enough that one
/// idle through a database restart or `wait_timeout` is tested; long enough to cover the gaps
/// between a busy admin's transactions.
const TRUSTED_FOR: Duration = Duration::from_secs(1);

impl PooledConnection {
    /// Records how the work done on this connection ended: an error that may mean a lost
    /// connection (`Unavailable`, `Internal`) has it tested before its next use.
    fn settle<T>(&mut self, outcome: &Result<T, Error>) {
        self.healthy_at = match outcome {
            Err(Error::Unavailable(_) | Error::Internal(_)) => None,
            _ => Some(Instant::now()),
        };
    }
}

impl std::ops::Deref for PooledConnection {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for PooledConnection {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }
}

impl ManageConnection for ConnectionManager {
    type Connection = PooledConnection;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<PooledConnection, r2d2::Error> {
        let mut conn = establish(&self.url)?;
        if let Some(sqlite) = sqlite_of(&mut conn) {
            // The pool's `Db` checkpoints on a thread of its own (`checkpoint`).
            sqlite
                .batch_execute(&format!(
                    "PRAGMA wal_autocheckpoint={}",
                    checkpoint::BACKSTOP_PAGES
                ))
                .map_err(r2d2::Error::QueryError)?;
        }
        Ok(PooledConnection {
            conn,
            healthy_at: Some(Instant::now()),
        })
    }

    fn is_valid(&self, conn: &mut PooledConnection) -> Result<(), r2d2::Error> {
        if conn.healthy_at.is_some_and(|at| at.elapsed() < TRUSTED_FOR) {
            return Ok(());
        }
        conn.conn
            .batch_execute("SELECT 1")
            .map_err(r2d2::Error::QueryError)?;
        conn.healthy_at = Some(Instant::now());
        Ok(())
    }

    fn has_broken(&self, _conn: &mut PooledConnection) -> bool {
        false
    }
}

pub type Pool = r2d2::Pool<ConnectionManager>;

/// The pool plus a bridge that runs blocking diesel work off the async executor.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    url: DbUrl,
    /// SQLite only: this process's write transactions take turns here rather than on the
    /// database's lock. A writer that finds SQLite's lock taken waits in its busy handler, which
    /// sleeps 1, 2, 5, 10, 15, 20, 25 … ms between tries: under a stream of small transactions
    /// (callbacks, dispatch, workflow steps) those sleeps, not the work, made most of a run's
    /// latency (BENCHMARKS.md, "Workflows"). The turn is handed over at once, first come first
    /// served but for the timer's takes (`write_turn`), and waiting for it is bounded like
    /// waiting for a connection. Other processes on the same file still meet busy_timeout.
    writer: Option<Arc<WriteTurn>>,
    /// SQLite only: checkpoints the WAL, so that no writer does it holding the write turn.
    checkpointer: Option<Arc<checkpoint::Checkpointer>>,
    connection_timeout: Duration,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Db {
    /// Builds the pool without requiring the database to be up: connections are made lazily,
    /// so a database outage surfaces as `Unavailable` on requests, not as a crash.
    pub fn new(url: DbUrl, max_size: u32, connection_timeout: Duration) -> Result<Self, Error> {
        if let DbUrl::Sqlite(path) = &url {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            if let Some(dir) = parent
                && !dir.is_dir()
            {
                return Err(Error::invalid(
                    "database_url",
                    format!(
                        "the folder {} of the SQLite database does not exist",
                        dir.display()
                    ),
                ));
            }
        }
        let pool = r2d2::Pool::builder()
            .max_size(max_size)
            .min_idle(Some(0))
            .connection_timeout(connection_timeout)
            .test_on_check_out(true)
            .build_unchecked(ConnectionManager::new(url.clone()));
        let writer = matches!(url, DbUrl::Sqlite(_)).then(|| Arc::new(WriteTurn::default()));
        let checkpointer = match &url {
            DbUrl::Sqlite(path) => Some(Arc::new(checkpoint::Checkpointer::new(path.clone()))),
            DbUrl::Mysql(_) => None,
        };
        Ok(Self {
            pool,
            url,
            writer,
            checkpointer,
            connection_timeout,
        })
    }

    pub fn url(&self) -> &DbUrl {
        &self.url
    }

    /// Runs `f` with a pooled connection on the blocking thread pool.
    ///
    /// # Errors
    /// `Unavailable` when no connection can be had in time; whatever `f` returns otherwise.
    pub async fn run<T, F>(&self, f: F) -> Result<T, Error>
    where
        F: FnOnce(&mut AnyConnection) -> Result<T, Error> + Send + 'static,
        T: Send + 'static,
    {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool
                .get()
                .map_err(|e| Error::Unavailable(format!("no database connection: {e}")))?;
            let outcome = f(&mut conn);
            conn.settle(&outcome);
            outcome
        })
        .await
        .map_err(|e| Error::Internal(anyhow::anyhow!("database task failed: {e}")))?
    }

    /// Runs `f` inside one transaction: everything it writes lands together or not at all.
    ///
    /// A transaction the database gives up to break a deadlock (MySQL rolls the whole of it
    /// back) is run again, a few times, after a short random pause: two writers that meet on a
    /// job row (a console edit and the scheduler's claim) both get through instead of one
    /// answering a 500. So `f` may run more than once and must do nothing but database work.
    ///
    /// # Errors
    /// As [`Db::run`]; a failing `f` rolls the transaction back; `Contended` when every attempt
    /// was a deadlock victim.
    pub async fn transaction<T, F>(&self, f: F) -> Result<T, Error>
    where
        F: FnMut(&mut AnyConnection) -> Result<T, Error> + Send + 'static,
        T: Send + 'static,
    {
        self.transaction_with(Urgency::InTurn, f).await
    }

    /// As [`Db::transaction`], waiting for SQLite's write turn as `urgency` says: `Due` for work
    /// due at a millisecond (the timer's takes), which goes before the writers waiting
    /// (`write_turn`). MySQL has no turn.
    ///
    /// # Errors
    /// As [`Db::transaction`].
    pub async fn transaction_with<T, F>(&self, urgency: Urgency, mut f: F) -> Result<T, Error>
    where
        F: FnMut(&mut AnyConnection) -> Result<T, Error> + Send + 'static,
        T: Send + 'static,
    {
        let Some(writer) = self.writer.clone() else {
            return self.run(move |conn| retrying_deadlocks(conn, &mut f)).await;
        };
        // The turn before the connection, and on the async side: a writer waiting for its turn
        // holds neither a connection the current writer or a reader needs nor a blocking thread.
        let turn = tokio::time::timeout(self.connection_timeout, writer.take(urgency))
            .await
            .map_err(|_| {
                Error::Unavailable(format!(
                    "the database is busy: no write turn within {} s",
                    self.connection_timeout.as_secs()
                ))
            })?
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("the write turn is gone")))?;
        let pool = self.pool.clone();
        let checkpointer = self.checkpointer.clone();
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let mut conn = pool
                .get()
                .map_err(|e| Error::Unavailable(format!("no database connection: {e}")))?;
            let outcome = in_transaction(&mut conn, f);
            conn.settle(&outcome);
            if let (Ok(_), Some(checkpointer)) = (&outcome, checkpointer) {
                checkpointer.wrote();
            }
            outcome
        })
        .await
        .map_err(|e| Error::Internal(anyhow::anyhow!("database task failed: {e}")))?
    }

    /// Readiness: a round trip to the database.
    ///
    /// # Errors
    /// `Unavailable` when the database cannot be reached.
    pub async fn ping(&self) -> Result<(), Error> {
        self.run(|conn| conn.batch_execute("SELECT 1").map_err(Error::from))
            .await
    }
}

/// The id of the row the last INSERT on this connection created. MySQL has no RETURNING and
/// SQLite's RETURNING is not in the shared DSL, so each backend asks in its own words.
///
/// # Errors
/// Database errors.
pub fn last_insert_id(conn: &mut AnyConnection) -> QueryResult<i64> {
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;
    match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => {
            diesel::select(sql::<BigInt>("CAST(LAST_INSERT_ID() AS SIGNED)"))
                .prepared()
                .get_result(c)
        }
        AnyConnection::Sqlite(c) => diesel::select(sql::<BigInt>("last_insert_rowid()"))
            .prepared()
            .get_result(c),
    }
}

/// A page request, clamped so no query can ask for an unbounded result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: i64,
    pub offset: i64,
}

impl Page {
    pub const MAX_LIMIT: i64 = 500;
    /// The first page of the largest size: what a console `<select>` lists.
    pub const LARGEST: Page = Page {
        limit: Self::MAX_LIMIT,
        offset: 0,
    };

    pub fn new(limit: Option<i64>, offset: Option<i64>) -> Result<Self, Error> {
        let limit = limit.unwrap_or(50);
        let offset = offset.unwrap_or(0);
        if !(1..=Self::MAX_LIMIT).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {}", Self::MAX_LIMIT),
            ));
        }
        if offset < 0 {
            return Err(Error::invalid("offset", "must not be negative"));
        }
        Ok(Self { limit, offset })
    }
}

impl Default for Page {
    fn default() -> Self {
        Self {
            limit: 50,
            offset: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::storage_test;

    #[test]
    fn in_lists_take_few_lengths_and_hold_every_id_once_at_least() {
        let mut lengths = std::collections::BTreeSet::new();
        for n in 0..=1_300_usize {
            let ids: Vec<usize> = (0..n).collect();
            let lists: Vec<_> = in_lists(&ids).collect();
            assert_eq!(lists.len(), n.div_ceil(IN_LIST_MAX), "{n} ids");
            let mut seen: Vec<usize> = lists.iter().flat_map(|l| l.iter().copied()).collect();
            seen.dedup();
            assert_eq!(
                seen, ids,
                "{n} ids: each in order, repeats only at a list's end"
            );
            for list in &lists {
                assert!(list.len() <= IN_LIST_MAX);
                lengths.insert(list.len());
            }
        }
        assert_eq!(
            lengths.into_iter().collect::<Vec<_>>(),
            vec![1, 2, 4, 8, 16, 32, 64, 128, 256, IN_LIST_MAX]
        );
    }

    /// Without the planner's stability guarantee every `.first()` re-parses its statement at
    /// each execution; the serialized threading mode costs a mutex per call, the memory count
    /// one per allocation, and shared-cache mode checks on every lock (`.cargo/config.toml`).
    #[test]
    fn the_bundled_sqlite_has_our_build_options() {
        #[derive(QueryableByName)]
        struct Opt {
            #[diesel(sql_type = diesel::sql_types::Text)]
            compile_options: String,
        }
        let mut conn = diesel::sqlite::SqliteConnection::establish(":memory:").unwrap();
        let options: Vec<String> = diesel::sql_query("PRAGMA compile_options")
            .load::<Opt>(&mut conn)
            .unwrap()
            .into_iter()
            .map(|o| o.compile_options)
            .collect();
        for wanted in [
            "ENABLE_QPSG",
            "THREADSAFE=2",
            "DEFAULT_MEMSTATUS=0",
            "OMIT_SHARED_CACHE",
        ] {
            assert!(
                options.iter().any(|o| o == wanted),
                "build without {wanted} (LIBSQLITE3_FLAGS in .cargo/config.toml): {options:?}"
            );
        }
    }

    #[cfg(feature = "mysql")]
    fn mysql_of(conn: &mut AnyConnection) -> &mut diesel::mysql::MysqlConnection {
        match conn {
            AnyConnection::Mysql(c) => c,
            AnyConnection::Sqlite(_) => panic!("a MariaDB test got a SQLite connection"),
        }
    }

    /// Statements this session has prepared, as the server counts them (the query asking
    /// is itself one).
    #[cfg(feature = "mysql")]
    fn prepares(conn: &mut AnyConnection) -> i64 {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            #[diesel(column_name = Value)]
            value: String,
        }
        let row: Row = diesel::sql_query("SHOW SESSION STATUS LIKE 'Com_stmt_prepare'")
            .get_result(mysql_of(conn))
            .unwrap();
        row.value.parse().unwrap()
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn a_prepared_query_is_prepared_once_per_connection() {
        use diesel::dsl::sql;
        use diesel::sql_types::BigInt;
        let db = crate::testing::TestDb::mysql();
        let mut conn = db.conn();
        let query = || diesel::select(sql::<BigInt>("CAST(7 AS SIGNED)"));
        let before = prepares(&mut conn);
        for _ in 0..3 {
            assert_eq!(
                query()
                    .prepared()
                    .get_result::<i64>(mysql_of(&mut conn))
                    .unwrap(),
                7
            );
        }
        // One for the first use, one for the count's own query.
        assert_eq!(prepares(&mut conn) - before, 2);
        let before = prepares(&mut conn);
        for _ in 0..3 {
            assert_eq!(query().get_result::<i64>(mysql_of(&mut conn)).unwrap(), 7);
        }
        assert_eq!(
            prepares(&mut conn) - before,
            4,
            "diesel prepares raw SQL each time"
        );
    }

    #[cfg(feature = "mysql")]
    async fn connection_id(db: &Db) -> Result<i64, Error> {
        use diesel::dsl::sql;
        use diesel::sql_types::BigInt;
        db.run(|conn| {
            Ok(
                diesel::select(sql::<BigInt>("CAST(CONNECTION_ID() AS SIGNED)"))
                    .get_result(mysql_of(conn))?,
            )
        })
        .await
    }

    // A connection the pool trusts without a test (it worked a moment ago) and the server then
    // dropped fails one caller at most; the next checkout tests it and opens a new one. One
    // idle past the trust window is tested before it is handed out, and fails nobody.
    #[cfg(feature = "mysql")]
    #[tokio::test]
    async fn a_connection_the_server_dropped_is_replaced() {
        let test_db = crate::testing::TestDb::mysql();
        let db = Db::new(test_db.url().clone(), 1, Duration::from_secs(5)).unwrap();
        let mut killer = test_db.conn();

        let first = connection_id(&db).await.unwrap();
        killer.batch_execute(&format!("KILL {first}")).unwrap();
        if let Ok(id) = connection_id(&db).await {
            assert_ne!(id, first, "a killed connection answered");
        }
        let second = connection_id(&db).await.unwrap();
        assert_ne!(second, first);

        killer.batch_execute(&format!("KILL {second}")).unwrap();
        tokio::time::sleep(TRUSTED_FOR + Duration::from_millis(100)).await;
        let third = connection_id(&db)
            .await
            .expect("an idle connection is tested first");
        assert_ne!(third, second);
    }

    // The pool's SQLite connections leave checkpoints to `checkpoint`'s thread (their own only
    // past the backstop), and that thread copies what write transactions leave in the WAL into
    // the database file soon after.
    #[tokio::test]
    async fn write_transactions_are_checkpointed_by_the_thread_and_not_by_the_writer() {
        #[derive(QueryableByName)]
        struct Pages {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            wal_autocheckpoint: i32,
        }
        let test_db = crate::testing::TestDb::sqlite();
        let DbUrl::Sqlite(path) = test_db.url().clone() else {
            unreachable!("a SQLite test database")
        };
        let db = Db::new(test_db.url().clone(), 2, Duration::from_secs(5)).unwrap();
        let backstop = db
            .run(|conn| {
                diesel::sql_query("PRAGMA wal_autocheckpoint")
                    .get_result::<Pages>(conn)
                    .map_err(Error::from)
            })
            .await
            .unwrap();
        assert_eq!(
            backstop.wal_autocheckpoint,
            i32::try_from(checkpoint::BACKSTOP_PAGES).unwrap()
        );
        db.run(|conn| {
            conn.batch_execute("CREATE TABLE checkpoint_probe (body BLOB)")
                .map_err(Error::from)
        })
        .await
        .unwrap();
        let main_file = || std::fs::metadata(&path).map_or(0, |m| m.len());
        let before = main_file();
        // About 2,000 pages: past SQLite's own threshold, short of the backstop.
        db.transaction(|conn| {
            conn.batch_execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
                 INSERT INTO checkpoint_probe SELECT zeroblob(8000) FROM n",
            )
            .map_err(Error::from)
        })
        .await
        .unwrap();
        assert!(
            main_file() < before + 1_000 * 4096,
            "the writer checkpointed at its commit"
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while main_file() < before + 1_000 * 8000 {
            assert!(Instant::now() < deadline, "no checkpoint within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // SQLite writers take turns in the process; one that cannot get its turn within the
    // connection timeout is told the database is busy (503), and the turn is not lost.
    #[tokio::test]
    async fn a_writer_without_a_turn_in_time_is_told_the_database_is_busy() {
        let test_db = crate::testing::TestDb::sqlite();
        let db = Db::new(test_db.url().clone(), 4, Duration::from_secs(1)).unwrap();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let db = db.clone();
            tokio::spawn(async move {
                let mut held_tx = Some(held_tx);
                db.transaction(move |_| {
                    if let Some(held) = held_tx.take() {
                        let _ = held.send(());
                    }
                    let _ = release_rx.recv();
                    Ok(())
                })
                .await
            })
        };
        held_rx.await.unwrap();
        match db.transaction(|_| Ok(())).await {
            Err(Error::Unavailable(message)) => assert!(
                message.contains("the database is busy: no write turn within 1 s"),
                "{message}"
            ),
            other => panic!("expected the busy answer, got {other:?}"),
        }
        release_tx.send(()).unwrap();
        holder.await.unwrap().unwrap();
        db.transaction(|_| Ok(())).await.unwrap();
    }

    // Two writers that take two rows in opposite order deadlock on MariaDB; the server rolls
    // one back, and `transaction` runs that one again: both land, nobody sees an error.
    #[cfg(feature = "mysql")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deadlock_victim_is_run_again_and_lands() {
        use diesel::connection::SimpleConnection;
        use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
        let test_db = tokio::task::spawn_blocking(crate::testing::TestDb::mysql)
            .await
            .unwrap();
        let db = Db::new(test_db.url().clone(), 4, Duration::from_secs(5)).unwrap();
        db.run(|conn| {
            conn.batch_execute(
                "CREATE TABLE deadlock_probe (id INT PRIMARY KEY, n INT NOT NULL);
                 INSERT INTO deadlock_probe VALUES (1, 0), (2, 0)",
            )
            .map_err(Error::from)
        })
        .await
        .unwrap();
        let both_hold_one = Arc::new(std::sync::Barrier::new(2));
        let attempts = Arc::new(AtomicU32::new(0));
        let writer = |first: i32, second: i32| {
            let (db, both_hold_one, attempts) =
                (db.clone(), both_hold_one.clone(), attempts.clone());
            async move {
                let mut met = false;
                db.transaction(move |conn| {
                    attempts.fetch_add(1, SeqCst);
                    // Statements as the admin's queries go (prepared), not as batch text.
                    let mut bump = |id: i32| {
                        diesel::sql_query("UPDATE deadlock_probe SET n = n + 1 WHERE id = ?")
                            .bind::<diesel::sql_types::Integer, _>(id)
                            .execute(conn)
                    };
                    bump(first)?;
                    if !met {
                        met = true;
                        both_hold_one.wait();
                    }
                    bump(second)?;
                    Ok(())
                })
                .await
            }
        };
        let (a, b) = tokio::join!(writer(1, 2), writer(2, 1));
        a.unwrap();
        b.unwrap();
        assert_eq!(attempts.load(SeqCst), 3, "one of the two ran again");
        let total = db
            .run(|conn| {
                use diesel::dsl::sql;
                use diesel::sql_types::BigInt;
                diesel::select(sql::<BigInt>(
                    "(SELECT CAST(SUM(n) AS SIGNED) FROM deadlock_probe)",
                ))
                .get_result::<i64>(conn)
                .map_err(Error::from)
            })
            .await
            .unwrap();
        assert_eq!(total, 4, "each writer's two updates landed once");
    }

    // Each backend's migrations must produce every column `schema.rs` declares, with types the
    // row structs can load: selecting every column of every table proves it on both.
    storage_test!(schema_matches_migrations, |conn| {
        use crate::db::schema as s;
        use crate::db::{
            agent, api_token, audit_log, executor_group, job, job_run, job_script, user,
        };
        let zero = 0_i64;
        s::executor_group::table
            .select(executor_group::ExecutorGroup::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::agent::table
            .select(agent::Agent::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::job::table
            .select(job::Job::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::job_script::table
            .select(job_script::JobScript::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::job_run::table
            .select(job_run::JobRun::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::user::table
            .select(user::User::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::api_token::table
            .select(api_token::ApiToken::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::audit_log::table
            .select(audit_log::AuditLog::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        let _: Vec<(i64, i64)> = s::user_group_grant::table
            .select(s::user_group_grant::all_columns)
            .limit(zero)
            .load(conn)
            .unwrap();
        s::alert_channel::table
            .select(crate::db::alert_channel::AlertChannel::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::alert_event::table
            .select(crate::db::alert_event::AlertEvent::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        crate::db::executor_group::agent_states(conn).unwrap();
        s::workflow::table
            .select(crate::db::workflow::Workflow::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::workflow_run::table
            .select(crate::db::workflow_run::WorkflowRun::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        s::workflow_node::table
            .select(crate::db::workflow_node::WorkflowNode::as_select())
            .limit(zero)
            .load(conn)
            .unwrap();
        let locks: Vec<(String, String, i64)> = s::scheduler_lock::table
            .select(s::scheduler_lock::all_columns)
            .load(conn)
            .unwrap();
        assert_eq!(locks.len(), 1, "the migration seeds the scheduler lock row");
        assert!(
            crate::db::migrate::run_pending(conn).unwrap().is_empty(),
            "migrating again is a no-op"
        );
    });

    #[test]
    fn parses_database_urls() {
        assert_eq!(
            DbUrl::parse("sqlite://data/jobfleet.db"),
            Ok(DbUrl::Sqlite("data/jobfleet.db".into()))
        );
        assert_eq!(
            DbUrl::parse("sqlite:/tmp/x.db"),
            Ok(DbUrl::Sqlite("/tmp/x.db".into()))
        );
        assert!(DbUrl::parse("sqlite://").is_err());
        assert!(
            DbUrl::parse("postgres://x/y")
                .unwrap_err()
                .contains("unsupported")
        );
        assert!(
            DbUrl::parse("mysql://root@127.0.0.1:3306/")
                .unwrap_err()
                .contains("database name")
        );
    }

    /// Its own test, so that CI's MariaDB step (which runs only the mysql build's own tests)
    /// runs it.
    #[cfg(feature = "mysql")]
    #[test]
    fn a_mysql_build_parses_mysql_urls() {
        assert!(matches!(
            DbUrl::parse("mysql://root:pw@127.0.0.1:3306/jf"),
            Ok(DbUrl::Mysql(_))
        ));
    }

    #[cfg(not(feature = "mysql"))]
    #[test]
    fn a_build_without_mysql_refuses_mysql_urls_saying_how_to_build() {
        assert!(
            DbUrl::parse("mysql://root:pw@127.0.0.1:3306/jf")
                .unwrap_err()
                .contains("--features mysql")
        );
    }

    #[test]
    fn redacts_passwords_in_urls() {
        let shown = format!(
            "{:?}",
            DbUrl::Mysql("mysql://root:secret@db:3306/jf".into())
        );
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("root"), "{shown}");
    }

    #[test]
    fn page_bounds_are_enforced() {
        assert!(Page::new(Some(0), None).is_err());
        assert!(Page::new(Some(501), None).is_err());
        assert!(Page::new(None, Some(-1)).is_err());
        assert_eq!(Page::new(None, None).unwrap(), Page::default());
    }
}
