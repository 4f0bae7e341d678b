//! Executor groups: create, change, delete, read.

use serde::{Deserialize, Serialize};

use crate::audit::{self, Entry};
use crate::auth::rbac::{Actor, AdminProof};
use crate::db::{AnyConnection, Page, executor_group, job};
use crate::domain::id_list::Addresses;
use crate::domain::ids::GroupId;
use crate::domain::policy::AddressMode;
use crate::error::Error;
use crate::service::Paged;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct GroupView {
    pub id: GroupId,
    pub app_name: String,
    pub title: String,
    #[schema(value_type = String)]
    pub address_mode: AddressMode,
    pub addresses: Vec<String>,
    /// XXL-Job executors (which cannot present an agent key) may register in this group and
    /// report results with the shared access token alone.
    pub allow_executors: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupInput {
    /// The executor's app name (XXL-Job `appname`); letters, digits, `-`, `_`, `.`.
    pub app_name: String,
    pub title: String,
    #[schema(value_type = Option<String>, example = "auto")]
    pub address_mode: Option<AddressMode>,
    /// Agent base URLs for `manual` mode.
    pub addresses: Option<Vec<String>>,
    /// Let XXL-Job executors in with the shared token alone (default false).
    pub allow_executors: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupUpdate {
    pub title: String,
    #[schema(value_type = Option<String>, example = "manual")]
    pub address_mode: Option<AddressMode>,
    pub addresses: Option<Vec<String>>,
    /// Unchanged when absent.
    pub allow_executors: Option<bool>,
}

pub(crate) fn view_of(row: executor_group::ExecutorGroup) -> Result<GroupView, Error> {
    Ok(GroupView {
        id: row.id,
        address_mode: row.address_mode,
        addresses: row.addresses.0,
        app_name: row.app_name,
        title: row.title,
        allow_executors: row.allow_executors,
        created_ms: row.created_ms,
        updated_ms: row.updated_ms,
    })
}

pub fn check_app_name(value: &str) -> Result<String, Error> {
    let value = value.trim();
    if value.is_empty() || value.len() > 64 {
        return Err(Error::invalid("app_name", "must be 1 to 64 characters"));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(Error::invalid(
            "app_name",
            "may contain only letters, digits, `-`, `_` and `.`",
        ));
    }
    Ok(value.to_owned())
}

fn check_addresses(mode: AddressMode, addresses: Option<Vec<String>>) -> Result<Addresses, Error> {
    let addresses = addresses.unwrap_or_default();
    match mode {
        AddressMode::Auto if !addresses.is_empty() => {
            return Err(Error::invalid(
                "addresses",
                "are only used with address_mode `manual`; agents register themselves in `auto`",
            ));
        }
        AddressMode::Manual if addresses.is_empty() => {
            return Err(Error::invalid(
                "addresses",
                "address_mode `manual` needs at least one agent address",
            ));
        }
        _ => {}
    }
    if addresses.len() > 100 {
        return Err(Error::invalid("addresses", "at most 100 addresses"));
    }
    let mut normalized = Vec::with_capacity(addresses.len());
    for raw in &addresses {
        let parsed = url::Url::parse(raw.trim()).map_err(|e| {
            Error::invalid(
                "addresses",
                format!(
                    "`{}` is not a URL: {e}",
                    raw.chars().take(100).collect::<String>()
                ),
            )
        })?;
        if !matches!(parsed.scheme(), "http" | "https")
            || parsed.host_str().is_none()
            || parsed.query().is_some()
        {
            return Err(Error::invalid(
                "addresses",
                format!("`{raw}` must be an http(s) base URL such as http://10.0.0.5:9999/"),
            ));
        }
        let address = parsed.to_string();
        if address.contains(',') {
            // The list is stored comma-separated.
            return Err(Error::invalid(
                "addresses",
                format!("`{address}` must not contain a comma"),
            ));
        }
        normalized.push(address);
    }
    Ok(Addresses::from(normalized))
}

pub async fn create(
    state: &AppState,
    actor: &Actor,
    proof: &AdminProof,
    input: GroupInput,
) -> Result<GroupView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    let proof = proof.clone();
    state
        .db
        .transaction(move |conn| create_in(conn, &actor, &proof, input.clone(), now))
        .await
}

/// [`create`] inside the caller's transaction (an apply of a jobs document creates the groups
/// it names with their jobs, all or nothing).
pub(crate) fn create_in(
    conn: &mut AnyConnection,
    actor: &Actor,
    _: &AdminProof,
    input: GroupInput,
    now: i64,
) -> Result<GroupView, Error> {
    let app_name = check_app_name(&input.app_name)?;
    let title = crate::domain::job::check_name("title", &input.title, 200)?;
    let mode = input.address_mode.unwrap_or(AddressMode::Auto);
    let addresses = check_addresses(mode, input.addresses)?;
    if executor_group::find_by_app_name(conn, &app_name)?.is_some() {
        return Err(Error::conflict(
            "app_name",
            format!("a group named `{app_name}` already exists"),
        ));
    }
    let id = executor_group::insert(
        conn,
        &executor_group::NewExecutorGroup {
            app_name: &app_name,
            title: &title,
            address_mode: mode,
            addresses,
            created_ms: now,
            updated_ms: now,
            allow_executors: input.allow_executors.unwrap_or(false),
        },
    )?;
    let created = view_of(executor_group::get(conn, id)?)?;
    audit::record(
        conn,
        actor,
        now,
        Entry::new("group.create", "group", id).after(&created)?,
    )?;
    Ok(created)
}

pub async fn update(
    state: &AppState,
    actor: &Actor,
    proof: &AdminProof,
    id: GroupId,
    input: GroupUpdate,
) -> Result<GroupView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    let proof = proof.clone();
    state
        .db
        .transaction(move |conn| update_in(conn, &actor, &proof, id, input.clone(), now))
        .await
}

/// [`update`] inside the caller's transaction.
pub(crate) fn update_in(
    conn: &mut AnyConnection,
    actor: &Actor,
    _: &AdminProof,
    id: GroupId,
    input: GroupUpdate,
    now: i64,
) -> Result<GroupView, Error> {
    let title = crate::domain::job::check_name("title", &input.title, 200)?;
    let mode = input.address_mode.unwrap_or(AddressMode::Auto);
    let addresses = check_addresses(mode, input.addresses)?;
    let before = view_of(executor_group::get(conn, id)?)?;
    let allow_executors = input.allow_executors.unwrap_or(before.allow_executors);
    executor_group::update(
        conn,
        id,
        &executor_group::ExecutorGroupChanges {
            title: &title,
            address_mode: mode,
            addresses,
            updated_ms: now,
            allow_executors,
        },
    )?;
    let after = view_of(executor_group::get(conn, id)?)?;
    audit::record(
        conn,
        actor,
        now,
        Entry::new("group.update", "group", id)
            .before(&before)?
            .after(&after)?,
    )?;
    Ok(after)
}

pub async fn delete(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: GroupId,
) -> Result<(), Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let before = view_of(executor_group::get(conn, id)?)?;
            let jobs = job::count_in_group(conn, id)?;
            if jobs > 0 {
                return Err(Error::Conflict {
                    field: None,
                    message: format!(
                        "the group still has {jobs} job(s); move or delete them first"
                    ),
                });
            }
            executor_group::delete(conn, id)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("group.delete", "group", id).before(&before)?,
            )
        })
        .await
}

pub async fn get(state: &AppState, actor: &Actor, id: GroupId) -> Result<GroupView, Error> {
    actor.read_group(id)?;
    state
        .db
        .run(move |conn| view_of(executor_group::get(conn, id)?))
        .await
}

pub async fn list(state: &AppState, actor: &Actor, page: Page) -> Result<Paged<GroupView>, Error> {
    let visible = actor.visible_groups();
    state
        .db
        .run(move |conn| {
            let rows = executor_group::list(conn, visible.as_deref(), page)?;
            Ok(Paged {
                items: rows.into_iter().map(view_of).collect::<Result<_, _>>()?,
                total: executor_group::count(conn, visible.as_deref())?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}

/// Every group the caller sees, up to the largest page (for pickers and name lookups).
///
/// # Errors
/// Database errors.
pub async fn all(state: &AppState, actor: &Actor) -> Result<Vec<GroupView>, Error> {
    Ok(list(state, actor, Page::LARGEST).await?.items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_the_mode() {
        assert!(check_addresses(AddressMode::Auto, None).is_ok());
        assert!(check_addresses(AddressMode::Auto, Some(vec!["http://a:1".into()])).is_err());
        assert!(check_addresses(AddressMode::Manual, None).is_err());
        assert!(check_addresses(AddressMode::Manual, Some(vec!["ftp://a".into()])).is_err());
        assert!(check_addresses(AddressMode::Manual, Some(vec!["not a url".into()])).is_err());
        assert_eq!(
            check_addresses(
                AddressMode::Manual,
                Some(vec!["http://10.0.0.5:9999".into(), "https://b/".into()])
            )
            .unwrap(),
            Addresses::parse("http://10.0.0.5:9999/,https://b/").unwrap()
        );
        assert!(check_app_name("billing-svc.v2").is_ok());
        assert!(check_app_name("<b>").is_err());
        assert!(check_app_name("").is_err());
    }
}
