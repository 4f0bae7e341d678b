//! `agent`: the registry of agents that registered themselves, with their latest metrics.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::agent;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = agent)]
pub struct Agent {
    pub id: i64,
    pub app_name: String,
    pub address: String,
    pub version: String,
    pub hostname: String,
    pub registered_ms: i64,
    pub last_seen_ms: i64,
    /// The latest heartbeat metrics as JSON.
    pub metrics: String,
    pub limits_mode: String,
}

/// Agents of the given app names (all when `None`), by app name then address.
pub fn list(conn: &mut AnyConnection, app_names: Option<&[String]>) -> Result<Vec<Agent>, Error> {
    let mut query = agent::table
        .select(Agent::as_select())
        .order((agent::app_name.asc(), agent::address.asc()))
        .into_boxed();
    if let Some(names) = app_names {
        query = query.filter(agent::app_name.eq_any(names.to_vec()));
    }
    Ok(query.load(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    storage_test!(empty_registry_lists_nothing, |conn| {
        assert!(list(conn, None).unwrap().is_empty());
        assert!(list(conn, Some(&["x".to_owned()])).unwrap().is_empty());
    });
}
