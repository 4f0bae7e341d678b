//! Embedded migrations, one set per backend, run at start-up and by `jobfleet-admin migrate`.

use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::db::AnyConnection;
use crate::error::Error;

const SQLITE: EmbeddedMigrations = embed_migrations!("../migrations/sqlite");
#[cfg(feature = "mysql")]
const MYSQL: EmbeddedMigrations = embed_migrations!("../migrations/mysql");

/// Applies every pending migration and returns the versions applied.
///
/// # Errors
/// `Unavailable` when the database cannot be reached, `Internal` when a migration fails.
pub fn run_pending(conn: &mut AnyConnection) -> Result<Vec<String>, Error> {
    let applied = match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => {
            return with_cluster_lock(c, |c| {
                c.run_pending_migrations(MYSQL)
                    .map(|v| v.iter().map(ToString::to_string).collect())
                    .map_err(|e| Error::Internal(anyhow::anyhow!("migration failed: {e}")))
            });
        }
        AnyConnection::Sqlite(c) => c
            .run_pending_migrations(SQLITE)
            .map(|v| v.iter().map(ToString::to_string).collect()),
    };
    applied.map_err(|e| Error::Internal(anyhow::anyhow!("migration failed: {e}")))
}

/// Admins of a cluster start together (a Deployment's replicas, a compose file): without a lock
/// two of them would create the same tables at once and one would fail. A named MySQL lock lets
/// one migrate while the others wait, then find nothing pending. It belongs to the connection, so
/// an admin killed while migrating releases it with its connection.
#[cfg(feature = "mysql")]
fn with_cluster_lock<T>(
    conn: &mut diesel::MysqlConnection,
    migrate: impl FnOnce(&mut diesel::MysqlConnection) -> Result<T, Error>,
) -> Result<T, Error> {
    use diesel::RunQueryDsl;
    use diesel::dsl::sql;
    use diesel::sql_types::{BigInt, Nullable};
    const WAIT_S: u32 = 300;
    // Per database: clusters sharing a server do not wait for each other (names ≤ 64 chars).
    let lock = format!("GET_LOCK(CONCAT('jobfleet.migrate.', LEFT(DATABASE(), 40)), {WAIT_S})");
    let got: Option<i64> = diesel::select(sql::<Nullable<BigInt>>(&lock))
        .get_result(conn)
        .map_err(|e| Error::Unavailable(format!("taking the migration lock: {e}")))?;
    if got != Some(1) {
        return Err(Error::Unavailable(format!(
            "another admin held the migration lock for {WAIT_S} s"
        )));
    }
    let outcome = migrate(conn);
    // Released on the connection's end anyway; a failed release must not hide the outcome.
    let _ = diesel::select(sql::<Nullable<BigInt>>(
        "RELEASE_LOCK(CONCAT('jobfleet.migrate.', LEFT(DATABASE(), 40)))",
    ))
    .get_result::<Option<i64>>(conn);
    outcome
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use super::*;
    use crate::testing::TestDb;

    #[test]
    fn admins_starting_together_on_an_empty_database_migrate_it_once() {
        let db = TestDb::mysql_unmigrated();
        let applied: Vec<Vec<String>> = std::thread::scope(|scope| {
            let admins: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| run_pending(&mut db.conn())))
                .collect();
            admins
                .into_iter()
                .map(|admin| admin.join().expect("no panic").expect("every admin starts"))
                .collect()
        });
        let migrating: Vec<_> = applied.iter().filter(|v| !v.is_empty()).collect();
        assert_eq!(
            migrating.len(),
            1,
            "exactly one admin migrates: {applied:?}"
        );
        assert!(run_pending(&mut db.conn()).unwrap().is_empty());
    }
}
