//! `api_token`: long-lived API credentials. Only a SHA-256 of the secret is stored.

use diesel::prelude::*;

use super::schema::api_token;
use super::{AnyConnection, last_insert_id};
use crate::domain::role::Role;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = api_token)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    pub name: String,
    pub token_hash: String,
    /// The first characters of the secret, so people can tell their tokens apart.
    pub prefix: String,
    pub role: Role,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    pub revoked_ms: Option<i64>,
    pub last_used_ms: Option<i64>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = api_token)]
pub struct NewApiToken<'a> {
    pub user_id: i64,
    pub name: &'a str,
    pub token_hash: &'a str,
    pub prefix: &'a str,
    pub role: Role,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
}

pub fn get(conn: &mut AnyConnection, id: i64) -> Result<ApiToken, Error> {
    api_token::table
        .find(id)
        .select(ApiToken::as_select())
        .first(conn)
        .optional()?
        .ok_or(Error::NotFound("api token"))
}

pub fn find_by_hash(conn: &mut AnyConnection, hash: &str) -> Result<Option<ApiToken>, Error> {
    Ok(api_token::table
        .filter(api_token::token_hash.eq(hash))
        .select(ApiToken::as_select())
        .first(conn)
        .optional()?)
}

/// Tokens of one user, or of everyone when `user_id` is `None`; newest first.
pub fn list(conn: &mut AnyConnection, user_id: Option<i64>) -> Result<Vec<ApiToken>, Error> {
    let mut query = api_token::table
        .select(ApiToken::as_select())
        .order(api_token::id.desc())
        .into_boxed();
    if let Some(uid) = user_id {
        query = query.filter(api_token::user_id.eq(uid));
    }
    Ok(query.load(conn)?)
}

pub fn insert(conn: &mut AnyConnection, new: &NewApiToken<'_>) -> Result<i64, Error> {
    diesel::insert_into(api_token::table)
        .values(new)
        .execute(conn)?;
    Ok(last_insert_id(conn)?)
}

/// Marks the token revoked; revoking twice keeps the first instant.
pub fn revoke(conn: &mut AnyConnection, id: i64, now_ms: i64) -> Result<(), Error> {
    get(conn, id)?;
    diesel::update(
        api_token::table
            .find(id)
            .filter(api_token::revoked_ms.is_null()),
    )
    .set(api_token::revoked_ms.eq(now_ms))
    .execute(conn)?;
    Ok(())
}

/// Revokes every unrevoked token of a user at `now_ms`; returns how many.
pub fn revoke_all_for_user(
    conn: &mut AnyConnection,
    user_id: i64,
    now_ms: i64,
) -> Result<usize, Error> {
    Ok(diesel::update(
        api_token::table
            .filter(api_token::user_id.eq(user_id))
            .filter(api_token::revoked_ms.is_null()),
    )
    .set(api_token::revoked_ms.eq(now_ms))
    .execute(conn)?)
}

pub fn touch(conn: &mut AnyConnection, id: i64, now_ms: i64) -> Result<(), Error> {
    diesel::update(api_token::table.find(id))
        .set(api_token::last_used_ms.eq(now_ms))
        .execute(conn)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::user;
    use crate::testing::storage_test;

    storage_test!(tokens_are_found_by_hash_and_revoked_once, |conn| {
        let uid = user::insert(
            conn,
            &user::NewUser {
                username: "u",
                password_hash: "h",
                role: Role::Admin,
                disabled: false,
                password_changed_ms: 1,
                created_ms: 1,
                updated_ms: 1,
            },
        )
        .unwrap();
        let new = NewApiToken {
            user_id: uid,
            name: "ci",
            token_hash: "abc",
            prefix: "jft_ab",
            role: Role::Operator,
            created_ms: 1,
            expires_ms: None,
        };
        let id = insert(conn, &new).unwrap();
        assert!(matches!(insert(conn, &new), Err(Error::Conflict { .. })));
        assert_eq!(find_by_hash(conn, "abc").unwrap().unwrap().id, id);
        revoke(conn, id, 10).unwrap();
        revoke(conn, id, 20).unwrap();
        assert_eq!(get(conn, id).unwrap().revoked_ms, Some(10));
        touch(conn, id, 30).unwrap();
        let second = insert(
            conn,
            &NewApiToken {
                token_hash: "def",
                ..new
            },
        )
        .unwrap();
        assert_eq!(
            revoke_all_for_user(conn, uid, 40).unwrap(),
            1,
            "only the live one"
        );
        assert_eq!(get(conn, second).unwrap().revoked_ms, Some(40));
        assert_eq!(get(conn, id).unwrap().revoked_ms, Some(10));
        assert_eq!(list(conn, Some(uid)).unwrap().len(), 2);
        assert!(list(conn, Some(uid + 1)).unwrap().is_empty());
        assert!(matches!(revoke(conn, 999, 1), Err(Error::NotFound(_))));
    });
}
