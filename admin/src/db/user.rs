//! `user`: console and API accounts with a role and an argon2 password hash.

use diesel::prelude::*;

use super::schema::user;
use super::{AnyConnection, Page, last_insert_id};
use crate::domain::role::Role;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = user)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub password_hash: String,
    pub role: Role,
    pub disabled: bool,
    /// The credentials epoch: sessions and JWTs issued before this instant are refused. A
    /// password change moves it, and so does disabling the user (see `set_credentials_epoch`).
    pub password_changed_ms: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = user)]
pub struct NewUser<'a> {
    pub username: &'a str,
    pub password_hash: &'a str,
    pub role: Role,
    pub disabled: bool,
    pub password_changed_ms: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// # Errors
/// `NotFound` when no user has this id.
pub fn get(conn: &mut AnyConnection, id: i64) -> Result<User, Error> {
    find(conn, id)?.ok_or(Error::NotFound("user"))
}

pub fn find(conn: &mut AnyConnection, id: i64) -> Result<Option<User>, Error> {
    Ok(user::table
        .find(id)
        .select(User::as_select())
        .first(conn)
        .optional()?)
}

pub fn find_by_username(conn: &mut AnyConnection, username: &str) -> Result<Option<User>, Error> {
    Ok(user::table
        .filter(user::username.eq(username))
        .select(User::as_select())
        .first(conn)
        .optional()?)
}

pub fn list(conn: &mut AnyConnection, page: Page) -> Result<Vec<User>, Error> {
    Ok(user::table
        .select(User::as_select())
        .order(user::id.asc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?)
}

pub fn count(conn: &mut AnyConnection) -> Result<i64, Error> {
    Ok(user::table.count().get_result(conn)?)
}

pub fn count_active_admins(conn: &mut AnyConnection) -> Result<i64, Error> {
    Ok(user::table
        .filter(user::role.eq("admin"))
        .filter(user::disabled.eq(false))
        .count()
        .get_result(conn)?)
}

/// # Errors
/// `Conflict` on `username` when the name is taken.
pub fn insert(conn: &mut AnyConnection, new: &NewUser<'_>) -> Result<i64, Error> {
    diesel::insert_into(user::table)
        .values(new)
        .execute(conn)
        .map_err(|e| match Error::from(e) {
            Error::Conflict { .. } => Error::conflict(
                "username",
                format!("user `{}` already exists", new.username),
            ),
            other => other,
        })?;
    Ok(last_insert_id(conn)?)
}

fn touched(n: usize) -> Result<(), Error> {
    if n == 0 {
        Err(Error::NotFound("user"))
    } else {
        Ok(())
    }
}

pub fn set_role(conn: &mut AnyConnection, id: i64, role: &str, now_ms: i64) -> Result<(), Error> {
    touched(
        diesel::update(user::table.find(id))
            .set((user::role.eq(role), user::updated_ms.eq(now_ms)))
            .execute(conn)?,
    )
}

pub fn set_disabled(
    conn: &mut AnyConnection,
    id: i64,
    disabled: bool,
    now_ms: i64,
) -> Result<(), Error> {
    touched(
        diesel::update(user::table.find(id))
            .set((user::disabled.eq(disabled), user::updated_ms.eq(now_ms)))
            .execute(conn)?,
    )
}

pub fn set_password_hash(
    conn: &mut AnyConnection,
    id: i64,
    hash: &str,
    now_ms: i64,
) -> Result<(), Error> {
    touched(
        diesel::update(user::table.find(id))
            .set((
                user::password_hash.eq(hash),
                user::password_changed_ms.eq(now_ms),
                user::updated_ms.eq(now_ms),
            ))
            .execute(conn)?,
    )
}

/// Refuses every session and JWT of the user issued before `now_ms` (the column is named for
/// its first use, the password change).
pub fn set_credentials_epoch(conn: &mut AnyConnection, id: i64, now_ms: i64) -> Result<(), Error> {
    touched(
        diesel::update(user::table.find(id))
            .set(user::password_changed_ms.eq(now_ms))
            .execute(conn)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    storage_test!(users_are_unique_and_updatable, |conn| {
        let new = NewUser {
            username: "alice",
            password_hash: "h",
            role: Role::Viewer,
            disabled: false,
            password_changed_ms: 1,
            created_ms: 1,
            updated_ms: 1,
        };
        let id = insert(conn, &new).unwrap();
        assert_eq!(insert(conn, &new).unwrap_err().field(), Some("username"));
        let upper = NewUser {
            username: "Alice",
            ..new
        };
        insert(conn, &upper).unwrap();
        set_role(conn, id, "admin", 2).unwrap();
        set_disabled(conn, id, true, 3).unwrap();
        set_password_hash(conn, id, "h2", 4).unwrap();
        set_credentials_epoch(conn, id, 5).unwrap();
        let u = find_by_username(conn, "alice").unwrap().unwrap();
        assert_eq!(
            (
                u.role.as_str(),
                u.disabled,
                u.password_hash.as_str(),
                u.password_changed_ms
            ),
            ("admin", true, "h2", 5)
        );
        assert_eq!(count_active_admins(conn).unwrap(), 0);
        assert!(matches!(
            set_role(conn, 999, "admin", 1),
            Err(Error::NotFound(_))
        ));
        assert_eq!(list(conn, Page::default()).unwrap().len(), 2);
    });
}
