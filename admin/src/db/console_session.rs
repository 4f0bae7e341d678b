//! `console_session`: logged-in browsers. Looked up by the SHA-256 of the cookie's token.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::console_session;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = console_session)]
pub struct ConsoleSession {
    pub id_hash: String,
    pub user_id: i64,
    pub csrf_token: String,
    pub ip: String,
    pub created_ms: i64,
    pub last_seen_ms: i64,
    pub expires_ms: i64,
}

pub fn insert(conn: &mut AnyConnection, session: &ConsoleSession) -> Result<(), Error> {
    diesel::insert_into(console_session::table)
        .values(session)
        .execute(conn)?;
    Ok(())
}

pub fn find(conn: &mut AnyConnection, id_hash: &str) -> Result<Option<ConsoleSession>, Error> {
    Ok(console_session::table
        .find(id_hash)
        .select(ConsoleSession::as_select())
        .first(conn)
        .optional()?)
}

/// Slides the idle expiry forward.
pub fn touch(
    conn: &mut AnyConnection,
    id_hash: &str,
    now_ms: i64,
    expires_ms: i64,
) -> Result<(), Error> {
    diesel::update(console_session::table.find(id_hash))
        .set((
            console_session::last_seen_ms.eq(now_ms),
            console_session::expires_ms.eq(expires_ms),
        ))
        .execute(conn)?;
    Ok(())
}

pub fn delete(conn: &mut AnyConnection, id_hash: &str) -> Result<(), Error> {
    diesel::delete(console_session::table.find(id_hash)).execute(conn)?;
    Ok(())
}

/// Removes sessions past their expiry; returns how many.
pub fn delete_expired(conn: &mut AnyConnection, now_ms: i64) -> Result<usize, Error> {
    Ok(
        diesel::delete(console_session::table.filter(console_session::expires_ms.le(now_ms)))
            .execute(conn)?,
    )
}

/// Ends every session of a user; returns how many.
pub fn delete_for_user(conn: &mut AnyConnection, user_id: i64) -> Result<usize, Error> {
    Ok(
        diesel::delete(console_session::table.filter(console_session::user_id.eq(user_id)))
            .execute(conn)?,
    )
}
