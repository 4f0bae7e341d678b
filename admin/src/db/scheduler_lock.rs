//! `scheduler_lock`: the one row whose row lock makes a single admin of a cluster plan fires at
//! a time. Taking it is an UPDATE as the transaction's first statement: MySQL holds the row lock
//! (as `SELECT … FOR UPDATE` would) and SQLite the database write lock, both until commit, and
//! a crashed holder's lock dies with its connection.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::scheduler_lock;
use crate::error::Error;

pub const SCHEDULE: &str = "schedule";

/// Blocks until this transaction holds the lock `name`; records who holds it, for operators.
///
/// # Errors
/// Database errors, or `Internal` when the lock row is missing (a broken migration).
pub fn take(conn: &mut AnyConnection, name: &str, holder: &str, now_ms: i64) -> Result<(), Error> {
    let n = diesel::update(scheduler_lock::table.find(name))
        .set((
            scheduler_lock::holder.eq(holder),
            scheduler_lock::until_ms.eq(now_ms),
        ))
        .execute(conn)?;
    if n == 0 {
        return Err(Error::Internal(anyhow::anyhow!(
            "the scheduler_lock row `{name}` is missing; run `jobfleet-admin migrate`"
        )));
    }
    Ok(())
}

/// The last holder and when it took the lock.
pub fn holder(conn: &mut AnyConnection, name: &str) -> Result<(String, i64), Error> {
    Ok(scheduler_lock::table
        .find(name)
        .select((scheduler_lock::holder, scheduler_lock::until_ms))
        .first(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    storage_test!(taking_the_lock_records_the_holder, |conn| {
        take(conn, SCHEDULE, "admin-a", 42).unwrap();
        assert_eq!(holder(conn, SCHEDULE).unwrap(), ("admin-a".to_owned(), 42));
        assert!(matches!(
            take(conn, "nope", "admin-a", 1),
            Err(Error::Internal(_))
        ));
    });
}
