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
        AnyConnection::Mysql(c) => c
            .run_pending_migrations(MYSQL)
            .map(|v| v.iter().map(ToString::to_string).collect()),
        AnyConnection::Sqlite(c) => c
            .run_pending_migrations(SQLITE)
            .map(|v| v.iter().map(ToString::to_string).collect()),
    };
    applied.map_err(|e| Error::Internal(anyhow::anyhow!("migration failed: {e}")))
}
