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

/// What a heartbeat says about an agent.
#[derive(Debug, Clone)]
pub struct Heartbeat<'a> {
    pub app_name: &'a str,
    pub address: &'a str,
    pub version: &'a str,
    pub hostname: &'a str,
    pub metrics: &'a str,
    pub limits_mode: &'a str,
    pub now_ms: i64,
}

/// Records a registration or heartbeat: inserts the agent or refreshes it. Two admins may
/// receive the first beat at once; the unique key decides and the loser updates instead.
pub fn upsert(conn: &mut AnyConnection, beat: &Heartbeat<'_>) -> Result<(), Error> {
    let refresh = |conn: &mut AnyConnection| -> Result<usize, Error> {
        Ok(diesel::update(
            agent::table
                .filter(agent::app_name.eq(beat.app_name))
                .filter(agent::address.eq(beat.address)),
        )
        .set((
            agent::version.eq(beat.version),
            agent::hostname.eq(beat.hostname),
            agent::last_seen_ms.eq(beat.now_ms),
            agent::metrics.eq(beat.metrics),
            agent::limits_mode.eq(beat.limits_mode),
        ))
        .execute(conn)?)
    };
    if refresh(conn)? > 0 {
        return Ok(());
    }
    let inserted = diesel::insert_into(agent::table)
        .values((
            agent::app_name.eq(beat.app_name),
            agent::address.eq(beat.address),
            agent::version.eq(beat.version),
            agent::hostname.eq(beat.hostname),
            agent::registered_ms.eq(beat.now_ms),
            agent::last_seen_ms.eq(beat.now_ms),
            agent::metrics.eq(beat.metrics),
            agent::limits_mode.eq(beat.limits_mode),
        ))
        .execute(conn);
    match inserted.map_err(Error::from) {
        Ok(_) => Ok(()),
        Err(Error::Conflict { .. }) => refresh(conn).map(|_| ()),
        Err(other) => Err(other),
    }
}

/// Removes an agent (graceful deregistration); removing an unknown agent is not an error.
pub fn remove(conn: &mut AnyConnection, app_name: &str, address: &str) -> Result<bool, Error> {
    Ok(diesel::delete(
        agent::table
            .filter(agent::app_name.eq(app_name))
            .filter(agent::address.eq(address)),
    )
    .execute(conn)?
        > 0)
}

/// Agents of `app_name` seen at or after `since_ms`, by address: the live set routing picks from.
pub fn list_live(
    conn: &mut AnyConnection,
    app_name: &str,
    since_ms: i64,
) -> Result<Vec<Agent>, Error> {
    Ok(agent::table
        .filter(agent::app_name.eq(app_name))
        .filter(agent::last_seen_ms.ge(since_ms))
        .order(agent::address.asc())
        .select(Agent::as_select())
        .load(conn)?)
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

    fn beat<'a>(address: &'a str, now_ms: i64) -> Heartbeat<'a> {
        Heartbeat {
            app_name: "app",
            address,
            version: "1",
            hostname: "h",
            metrics: "{}",
            limits_mode: "rlimit",
            now_ms,
        }
    }

    storage_test!(heartbeats_upsert_and_liveness_is_by_last_seen, |conn| {
        assert!(list(conn, None).unwrap().is_empty());
        upsert(conn, &beat("http://a:1/", 1_000)).unwrap();
        upsert(conn, &beat("http://b:1/", 1_000)).unwrap();
        upsert(
            conn,
            &Heartbeat {
                metrics: "{\"cpuPct\":5}",
                ..beat("http://a:1/", 50_000)
            },
        )
        .unwrap();
        let all = list(conn, Some(&["app".to_owned()])).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(
            (
                all[0].registered_ms,
                all[0].last_seen_ms,
                all[0].metrics.as_str()
            ),
            (1_000, 50_000, "{\"cpuPct\":5}")
        );
        let live: Vec<String> = list_live(conn, "app", 30_000)
            .unwrap()
            .into_iter()
            .map(|a| a.address)
            .collect();
        assert_eq!(live, vec!["http://a:1/".to_owned()]);
        assert!(remove(conn, "app", "http://a:1/").unwrap());
        assert!(!remove(conn, "app", "http://a:1/").unwrap());
        assert!(list(conn, Some(&["other".to_owned()])).unwrap().is_empty());
    });
}
