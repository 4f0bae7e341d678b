//! `executor_group`: a named pool of agents (XXL-Job's executor, by app name).

use diesel::prelude::*;

use super::schema::executor_group;
use super::{AnyConnection, Page, last_insert_id};
use crate::domain::id_list::Addresses;
use crate::domain::ids::GroupId;
use crate::domain::policy::AddressMode;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = executor_group)]
pub struct ExecutorGroup {
    pub id: GroupId,
    pub app_name: String,
    pub title: String,
    pub address_mode: AddressMode,
    /// Comma-separated agent base URLs, used when `address_mode` is `manual`.
    pub addresses: Addresses,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// XXL-Job executors (no agent key) may register and report results with the shared token.
    pub allow_executors: bool,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = executor_group)]
pub struct NewExecutorGroup<'a> {
    pub app_name: &'a str,
    pub title: &'a str,
    pub address_mode: AddressMode,
    pub addresses: Addresses,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub allow_executors: bool,
}

#[derive(Debug, AsChangeset)]
#[diesel(table_name = executor_group)]
pub struct ExecutorGroupChanges<'a> {
    pub title: &'a str,
    pub address_mode: AddressMode,
    pub addresses: Addresses,
    pub updated_ms: i64,
    pub allow_executors: bool,
}

/// # Errors
/// `NotFound` when no group has this id.
pub fn get(conn: &mut AnyConnection, id: GroupId) -> Result<ExecutorGroup, Error> {
    crate::db_run!(conn: {
        executor_group::table
            .find(id)
            .select(ExecutorGroup::as_select())
            .first(conn)
            .optional()?
    })
    .ok_or(Error::NotFound("executor group"))
}

pub fn find(conn: &mut AnyConnection, id: GroupId) -> Result<Option<ExecutorGroup>, Error> {
    Ok(executor_group::table
        .find(id)
        .select(ExecutorGroup::as_select())
        .first(conn)
        .optional()?)
}

pub fn find_by_app_name(
    conn: &mut AnyConnection,
    app_name: &str,
) -> Result<Option<ExecutorGroup>, Error> {
    Ok(executor_group::table
        .filter(executor_group::app_name.eq(app_name))
        .select(ExecutorGroup::as_select())
        .first(conn)
        .optional()?)
}

/// Groups visible to the caller: all of them (`None`) or only those ids.
pub fn list(
    conn: &mut AnyConnection,
    only: Option<&[GroupId]>,
    page: Page,
) -> Result<Vec<ExecutorGroup>, Error> {
    let mut query = executor_group::table
        .select(ExecutorGroup::as_select())
        .order(executor_group::id.asc())
        .into_boxed();
    if let Some(ids) = only {
        query = query.filter(executor_group::id.eq_any(ids.to_vec()));
    }
    Ok(query.limit(page.limit).offset(page.offset).load(conn)?)
}

pub fn count(conn: &mut AnyConnection, only: Option<&[GroupId]>) -> Result<i64, Error> {
    let mut query = executor_group::table.count().into_boxed();
    if let Some(ids) = only {
        query = query.filter(executor_group::id.eq_any(ids.to_vec()));
    }
    Ok(query.get_result(conn)?)
}

/// # Errors
/// `Conflict` when the app name is taken.
pub fn insert(conn: &mut AnyConnection, new: &NewExecutorGroup<'_>) -> Result<GroupId, Error> {
    if find_by_app_name(conn, new.app_name)?.is_some() {
        return Err(Error::conflict(
            "app_name",
            format!("a group with app_name `{}` already exists", new.app_name),
        ));
    }
    diesel::insert_into(executor_group::table)
        .values(new)
        .execute(conn)?;
    Ok(GroupId(last_insert_id(conn)?))
}

pub fn update(
    conn: &mut AnyConnection,
    id: GroupId,
    changes: &ExecutorGroupChanges<'_>,
) -> Result<(), Error> {
    let n = diesel::update(executor_group::table.find(id))
        .set(changes)
        .execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("executor group"));
    }
    Ok(())
}

pub fn delete(conn: &mut AnyConnection, id: GroupId) -> Result<(), Error> {
    let n = diesel::delete(executor_group::table.find(id)).execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("executor group"));
    }
    Ok(())
}

/// A group as the agent watch sees it: id, app name, address mode and `agents_state` (`''` never
/// had a live agent, `live`, `none` had one and lost the last).
pub fn agent_states(
    conn: &mut AnyConnection,
) -> Result<Vec<(GroupId, String, String, String)>, Error> {
    Ok(executor_group::table
        .select((
            executor_group::id,
            executor_group::app_name,
            executor_group::address_mode,
            executor_group::agents_state,
        ))
        .order(executor_group::id.asc())
        .load(conn)?)
}

/// Moves a group's `agents_state` from `from` to `to`; returns whether this call moved it. Every
/// admin watches agents; the conditional UPDATE makes one of them act on each change.
pub fn move_agents_state(
    conn: &mut AnyConnection,
    id: GroupId,
    from: &str,
    to: &str,
) -> Result<bool, Error> {
    Ok(diesel::update(
        executor_group::table
            .find(id)
            .filter(executor_group::agents_state.eq(from)),
    )
    .set(executor_group::agents_state.eq(to))
    .execute(conn)?
        == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    pub(crate) fn sample(app: &str) -> NewExecutorGroup<'_> {
        NewExecutorGroup {
            app_name: app,
            title: "Title",
            address_mode: AddressMode::Auto,
            addresses: Addresses::default(),
            created_ms: 1,
            updated_ms: 1,
            allow_executors: false,
        }
    }

    storage_test!(group_crud_and_unique_app_name, |conn| {
        let id = insert(conn, &sample("billing")).unwrap();
        assert_eq!(get(conn, id).unwrap().app_name, "billing");
        let dup = insert(conn, &sample("billing")).unwrap_err();
        assert!(matches!(dup, Error::Conflict { .. }), "{dup:?}");
        update(
            conn,
            id,
            &ExecutorGroupChanges {
                title: "New",
                address_mode: AddressMode::Manual,
                addresses: Addresses::from(vec!["http://a:1".to_owned()]),
                updated_ms: 2,
                allow_executors: true,
            },
        )
        .unwrap();
        let g = get(conn, id).unwrap();
        assert_eq!(
            (g.title.as_str(), g.address_mode.as_str()),
            ("New", "manual")
        );
        assert_eq!(list(conn, Some(&[id]), Page::default()).unwrap().len(), 1);
        assert_eq!(list(conn, Some(&[]), Page::default()).unwrap().len(), 0);
        assert_eq!(count(conn, None).unwrap(), 1);
        assert_eq!(agent_states(conn).unwrap()[0].3, "");
        assert!(move_agents_state(conn, id, "", "live").unwrap());
        assert!(
            !move_agents_state(conn, id, "", "live").unwrap(),
            "moved once"
        );
        assert_eq!(agent_states(conn).unwrap()[0].3, "live");
        delete(conn, id).unwrap();
        assert!(matches!(get(conn, id), Err(Error::NotFound(_))));
    });
}
