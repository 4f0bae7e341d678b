//! Test fixtures shared by unit, storage and integration tests: a fresh database per test on
//! either backend, so tests run in parallel without sharing state.
//!
//! The MariaDB fixture fails loudly when the server is unreachable; it never skips.
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test fixtures fail the test by panicking"
)]

use crate::db::job_run::RunResult;
use crate::db::{self, AnyConnection, DbUrl};
use crate::domain::policy::RunStatus;

/// A result that says only how the run ended and when it started and finished, as a test
/// stores it; the other fields, left out, keep what the row has.
pub fn run_result(
    status: RunStatus,
    started_ms: Option<i64>,
    finished_ms: Option<i64>,
) -> RunResult {
    RunResult {
        status,
        started_ms,
        finished_ms,
        handle_code: None,
        handle_msg: None,
        exit_code: None,
        term_signal: None,
        cpu_ms: None,
        max_rss_kb: None,
        oom_killed: None,
        limits_mode: None,
        outputs: None,
        acceptance: None,
    }
}

/// Where MariaDB runs for tests; override with `JOBFLEET_TEST_MYSQL_URL` (no database part).
pub fn mysql_server_url() -> String {
    std::env::var("JOBFLEET_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// A freshly migrated database that disappears when dropped.
pub struct TestDb {
    url: DbUrl,
    _dir: Option<tempfile::TempDir>,
    mysql_name: Option<String>,
}

impl TestDb {
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir for the test database");
        let url = DbUrl::Sqlite(dir.path().join("test.db"));
        let db = Self {
            url,
            _dir: Some(dir),
            mysql_name: None,
        };
        db::migrate::run_pending(&mut db.conn()).expect("migrate the SQLite test database");
        db
    }

    #[cfg(feature = "mysql")]
    pub fn mysql() -> Self {
        let db = Self::mysql_unmigrated();
        db::migrate::run_pending(&mut db.conn()).expect("migrate the MariaDB test database");
        db
    }

    /// An empty MariaDB database, as a new cluster's admins first see it.
    #[cfg(feature = "mysql")]
    pub fn mysql_unmigrated() -> Self {
        use diesel::connection::SimpleConnection;
        let name = format!(
            "jf_test_{}",
            crate::auth::random_token(12).to_ascii_lowercase()
        );
        let server = mysql_server_url();
        let mut admin = db::establish(&DbUrl::Mysql(format!("{server}/mysql"))).unwrap_or_else(|e| {
            panic!("MariaDB is not reachable at {server} ({e}); start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`")
        });
        admin
            .batch_execute(&format!(
                "CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            ))
            .expect("create the MariaDB test database");
        Self {
            url: DbUrl::Mysql(format!("{server}/{name}")),
            _dir: None,
            mysql_name: Some(name),
        }
    }

    pub fn conn(&self) -> AnyConnection {
        db::establish(&self.url).expect("connect to the test database")
    }

    pub fn url(&self) -> &DbUrl {
        &self.url
    }

    /// The URL as `JOBFLEET_DATABASE_URL` would spell it.
    pub fn url_string(&self) -> String {
        match &self.url {
            DbUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
            DbUrl::Mysql(url) => url.clone(),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        #[cfg(feature = "mysql")]
        if let Some(name) = &self.mysql_name {
            use diesel::connection::SimpleConnection;
            if let Ok(mut admin) =
                db::establish(&DbUrl::Mysql(format!("{}/mysql", mysql_server_url())))
            {
                let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS `{name}`"));
            }
        }
        #[cfg(not(feature = "mysql"))]
        let _ = &self.mysql_name;
    }
}

/// Declares a storage test that runs the same body on SQLite and, with `--features mysql`, on
/// MariaDB. The body is a closure taking `&mut AnyConnection`.
#[macro_export]
macro_rules! storage_test {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn sqlite() {
                let db = $crate::testing::TestDb::sqlite();
                let mut conn = db.conn();
                let body: fn(&mut $crate::db::AnyConnection) = $body;
                body(&mut conn);
            }

            #[cfg(feature = "mysql")]
            #[test]
            fn mysql() {
                let db = $crate::testing::TestDb::mysql();
                let mut conn = db.conn();
                let body: fn(&mut $crate::db::AnyConnection) = $body;
                body(&mut conn);
            }
        }
    };
}
pub use crate::storage_test;
