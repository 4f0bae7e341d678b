//! `user_group_grant`: which executor groups a non-admin user may see or manage.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::user_group_grant;
use crate::domain::ids::GroupId;
use crate::error::Error;

pub fn group_ids_for_user(conn: &mut AnyConnection, user_id: i64) -> Result<Vec<GroupId>, Error> {
    Ok(user_group_grant::table
        .filter(user_group_grant::user_id.eq(user_id))
        .select(user_group_grant::group_id)
        .order(user_group_grant::group_id.asc())
        .load(conn)?)
}

/// Replaces the user's grants with `group_ids`.
pub fn replace_for_user(
    conn: &mut AnyConnection,
    user_id: i64,
    group_ids: &[GroupId],
) -> Result<(), Error> {
    diesel::delete(user_group_grant::table.filter(user_group_grant::user_id.eq(user_id)))
        .execute(conn)?;
    // One row at a time: batch insert is not in the shared MultiConnection DSL, and grant lists are short.
    for group_id in group_ids {
        diesel::insert_into(user_group_grant::table)
            .values((
                user_group_grant::user_id.eq(user_id),
                user_group_grant::group_id.eq(group_id),
            ))
            .execute(conn)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::job::tests::insert_group;
    use crate::db::user;
    use crate::testing::storage_test;

    storage_test!(grants_are_replaced_and_follow_their_group, |conn| {
        let uid = user::insert(
            conn,
            &user::NewUser {
                username: "op",
                password_hash: "h",
                role: crate::domain::role::Role::Operator,
                disabled: false,
                password_changed_ms: 1,
                created_ms: 1,
                updated_ms: 1,
            },
        )
        .unwrap();
        let (a, b) = (insert_group(conn, "a"), insert_group(conn, "b"));
        replace_for_user(conn, uid, &[a, b]).unwrap();
        assert_eq!(group_ids_for_user(conn, uid).unwrap(), vec![a, b]);
        replace_for_user(conn, uid, &[b]).unwrap();
        assert_eq!(group_ids_for_user(conn, uid).unwrap(), vec![b]);
        assert!(
            replace_for_user(conn, uid, &[GroupId(9999)]).is_err(),
            "a grant needs an existing group"
        );
        crate::db::executor_group::delete(conn, b).unwrap();
        assert!(group_ids_for_user(conn, uid).unwrap().is_empty());
    });
}
