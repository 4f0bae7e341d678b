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
    /// SHA-256 (hex) of the agent's own key; empty for an XXL-Job executor (shared token only).
    pub key_hash: String,
    /// `approved`, `pending` or `revoked`.
    pub approval: String,
    /// The agent process that sent the last heartbeat.
    pub instance_id: String,
    /// The user its jobs run as by default (`root` is a warning), empty when not told.
    pub run_as: String,
    /// `push`, `connect` or `auto` as the agent said; empty when it did not.
    pub mode: String,
    /// The admin process holding the agent's connection, empty when none.
    pub link_admin: String,
    pub link_since_ms: Option<i64>,
    /// Round-trip time of the connection's last ping.
    pub link_rtt_us: Option<i64>,
    /// Where the other admins reach `link_admin` to relay calls to the agent, empty when none.
    pub link_url: String,
    /// When an admin drained it (no new runs); `None` while in service.
    pub drained_ms: Option<i64>,
    /// Its labels as of its last heartbeat, `key=value,…` in key order.
    pub labels: String,
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
    pub key_hash: &'a str,
    pub instance_id: &'a str,
    pub run_as: &'a str,
    pub mode: &'a str,
    /// `key=value,…` in key order.
    pub labels: &'a str,
    pub now_ms: i64,
}

pub const APPROVED: &str = "approved";
pub const PENDING: &str = "pending";
pub const REVOKED: &str = "revoked";

/// The registry row of `(app_name, address)`, if any.
pub fn find(
    conn: &mut AnyConnection,
    app_name: &str,
    address: &str,
) -> Result<Option<Agent>, Error> {
    Ok(agent::table
        .filter(agent::app_name.eq(app_name))
        .filter(agent::address.eq(address))
        .select(Agent::as_select())
        .first(conn)
        .optional()?)
}

/// # Errors
/// `NotFound` when no agent has this id.
pub fn get(conn: &mut AnyConnection, id: i64) -> Result<Agent, Error> {
    agent::table
        .find(id)
        .select(Agent::as_select())
        .first(conn)
        .optional()?
        .ok_or(Error::NotFound("agent"))
}

/// Inserts a first registration with its approval state. Two admins may receive the first
/// beat at once: the unique key lets one in, the other gets `Conflict` and reads the row.
pub fn insert(conn: &mut AnyConnection, beat: &Heartbeat<'_>, approval: &str) -> Result<(), Error> {
    diesel::insert_into(agent::table)
        .values((
            agent::app_name.eq(beat.app_name),
            agent::address.eq(beat.address),
            agent::version.eq(beat.version),
            agent::hostname.eq(beat.hostname),
            agent::registered_ms.eq(beat.now_ms),
            agent::last_seen_ms.eq(beat.now_ms),
            agent::metrics.eq(beat.metrics),
            agent::limits_mode.eq(beat.limits_mode),
            agent::key_hash.eq(beat.key_hash),
            agent::approval.eq(approval),
            agent::instance_id.eq(beat.instance_id),
            agent::run_as.eq(beat.run_as),
            agent::mode.eq(beat.mode),
            agent::labels.eq(beat.labels),
        ))
        .execute(conn)?;
    Ok(())
}

/// Refreshes a known agent from a heartbeat. The key is set only where none was stored (an
/// agent registered before keys existed adopts its first key); a stored key never changes here.
pub fn refresh(conn: &mut AnyConnection, id: i64, beat: &Heartbeat<'_>) -> Result<(), Error> {
    diesel::update(agent::table.find(id))
        .set((
            agent::version.eq(beat.version),
            agent::hostname.eq(beat.hostname),
            agent::last_seen_ms.eq(beat.now_ms),
            agent::metrics.eq(beat.metrics),
            agent::limits_mode.eq(beat.limits_mode),
            agent::instance_id.eq(beat.instance_id),
            agent::run_as.eq(beat.run_as),
            agent::mode.eq(beat.mode),
            agent::labels.eq(beat.labels),
        ))
        .execute(conn)?;
    diesel::update(agent::table.find(id).filter(agent::key_hash.eq("")))
        .set(agent::key_hash.eq(beat.key_hash))
        .execute(conn)?;
    Ok(())
}

/// Records that `admin`, reached by the other admins at `url`, holds the agent's connection
/// since `since_ms`.
pub fn set_link(
    conn: &mut AnyConnection,
    id: i64,
    admin: &str,
    url: &str,
    since_ms: i64,
) -> Result<(), Error> {
    diesel::update(agent::table.find(id))
        .set((
            agent::link_admin.eq(admin),
            agent::link_url.eq(url),
            agent::link_since_ms.eq(since_ms),
            agent::link_rtt_us.eq(None::<i64>),
        ))
        .execute(conn)?;
    Ok(())
}

/// The round-trip time of the connection `admin` opened at `since_ms`, if it is still the one
/// recorded.
pub fn set_link_rtt(
    conn: &mut AnyConnection,
    id: i64,
    admin: &str,
    since_ms: i64,
    rtt_us: i64,
) -> Result<(), Error> {
    diesel::update(
        agent::table
            .find(id)
            .filter(agent::link_admin.eq(admin))
            .filter(agent::link_since_ms.eq(since_ms)),
    )
    .set(agent::link_rtt_us.eq(rtt_us))
    .execute(conn)?;
    Ok(())
}

/// Clears the connection `admin` opened at `since_ms`, unless a newer one was recorded since
/// (the agent reconnected before the old socket ended).
pub fn clear_link(
    conn: &mut AnyConnection,
    id: i64,
    admin: &str,
    since_ms: i64,
) -> Result<(), Error> {
    diesel::update(
        agent::table
            .find(id)
            .filter(agent::link_admin.eq(admin))
            .filter(agent::link_since_ms.eq(since_ms)),
    )
    .set((
        agent::link_admin.eq(""),
        agent::link_url.eq(""),
        agent::link_since_ms.eq(None::<i64>),
        agent::link_rtt_us.eq(None::<i64>),
    ))
    .execute(conn)?;
    Ok(())
}

/// The URL of the admin holding the connection of the agent at `address`, if one does.
pub fn link_url(conn: &mut AnyConnection, address: &str) -> Result<Option<String>, Error> {
    Ok(agent::table
        .filter(agent::address.eq(address))
        .filter(agent::link_url.ne(""))
        .select(agent::link_url)
        .first(conn)
        .optional()?)
}

/// Sets `approved`, `pending` or `revoked`; false when the agent is gone.
pub fn set_approval(conn: &mut AnyConnection, id: i64, approval: &str) -> Result<bool, Error> {
    Ok(diesel::update(agent::table.find(id))
        .set(agent::approval.eq(approval))
        .execute(conn)?
        > 0)
}

/// Forgets up to `limit` agents last heard from before `before_ms`; how many went. A revoked
/// agent is kept however long ago it was seen (its heartbeats are refused, so it is never
/// seen again): forgetting it would let it enroll afresh.
pub fn delete_unseen_since(
    conn: &mut AnyConnection,
    before_ms: i64,
    limit: i64,
) -> Result<usize, Error> {
    let ids: Vec<i64> = agent::table
        .filter(agent::last_seen_ms.lt(before_ms))
        .filter(agent::approval.ne(REVOKED))
        .select(agent::id)
        .order(agent::id)
        .limit(limit)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(agent::table.filter(agent::id.eq_any(ids))).execute(conn)?)
}

/// Drains agent `id` (`Some(when)`) or puts it back in service (`None`); false when unknown.
pub fn set_drained(
    conn: &mut AnyConnection,
    id: i64,
    drained_ms: Option<i64>,
) -> Result<bool, Error> {
    Ok(diesel::update(agent::table.filter(agent::id.eq(id)))
        .set(agent::drained_ms.eq(drained_ms))
        .execute(conn)?
        == 1)
}

/// A graceful deregistration: the agent stops being live at once (its last heartbeat is moved
/// back to `dead_ms` at the latest), and keeps its key and approval for its next start
/// (until `dead_agent_retention_days` forgets it).
pub fn mark_gone(conn: &mut AnyConnection, id: i64, dead_ms: i64) -> Result<(), Error> {
    diesel::update(
        agent::table
            .find(id)
            .filter(agent::last_seen_ms.gt(dead_ms)),
    )
    .set((
        agent::last_seen_ms.eq(dead_ms),
        // A leaving agent holds no connection any more; no relay should look for one.
        agent::link_admin.eq(""),
        agent::link_url.eq(""),
        agent::link_since_ms.eq(None::<i64>),
        agent::link_rtt_us.eq(None::<i64>),
    ))
    .execute(conn)?;
    Ok(())
}

/// Forgets an agent (its key with it: it may enroll again); false when it was not there.
pub fn delete(conn: &mut AnyConnection, id: i64) -> Result<bool, Error> {
    Ok(diesel::delete(agent::table.find(id)).execute(conn)? > 0)
}

/// The registrations made with this key that are not revoked: the addresses its owner may
/// report results for.
pub fn list_by_key(conn: &mut AnyConnection, key_hash: &str) -> Result<Vec<Agent>, Error> {
    Ok(agent::table
        .filter(agent::key_hash.eq(key_hash))
        .filter(agent::approval.ne(REVOKED))
        .select(Agent::as_select())
        .load(conn)?)
}

/// The registrations at `address` (in any group).
pub fn list_at(conn: &mut AnyConnection, address: &str) -> Result<Vec<Agent>, Error> {
    Ok(agent::table
        .filter(agent::address.eq(address))
        .select(Agent::as_select())
        .load(conn)?)
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

/// Approved agents of `app_name` seen at or after `since_ms`, by address: the live set routing
/// picks from.
pub fn list_live(
    conn: &mut AnyConnection,
    app_name: &str,
    since_ms: i64,
) -> Result<Vec<Agent>, Error> {
    Ok(agent::table
        .filter(agent::app_name.eq(app_name))
        .filter(agent::last_seen_ms.ge(since_ms))
        .filter(agent::approval.eq(APPROVED))
        .filter(agent::drained_ms.is_null())
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
            key_hash: "",
            instance_id: "i1",
            run_as: "",
            mode: "auto",
            labels: "",
            now_ms,
        }
    }

    /// Inserts or refreshes, as the registry service does.
    fn upsert(conn: &mut AnyConnection, beat: &Heartbeat<'_>) -> Result<(), Error> {
        match find(conn, beat.app_name, beat.address)? {
            Some(row) => refresh(conn, row.id, beat),
            None => insert(conn, beat, APPROVED),
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

    storage_test!(
        drained_agents_are_not_routed_to_and_keep_the_drain_across_heartbeats,
        |conn| {
            upsert(conn, &beat("http://a:1/", 1_000)).unwrap();
            upsert(conn, &beat("http://b:1/", 1_000)).unwrap();
            let a = find(conn, "app", "http://a:1/").unwrap().unwrap();
            assert!(set_drained(conn, a.id, Some(1_500)).unwrap());
            // A heartbeat refreshes the row and keeps the drain.
            upsert(conn, &beat("http://a:1/", 2_000)).unwrap();
            let addresses = |conn: &mut AnyConnection| -> Vec<String> {
                list_live(conn, "app", 0)
                    .unwrap()
                    .into_iter()
                    .map(|a| a.address)
                    .collect()
            };
            assert_eq!(addresses(conn), ["http://b:1/"]);
            assert_eq!(get(conn, a.id).unwrap().drained_ms, Some(1_500));
            assert!(set_drained(conn, a.id, None).unwrap());
            assert_eq!(addresses(conn), ["http://a:1/", "http://b:1/"]);
            assert!(!set_drained(conn, 999_999, None).unwrap());
        }
    );

    storage_test!(agents_unseen_for_long_are_forgotten_in_batches, |conn| {
        for (address, seen) in [
            ("http://a:1/", 1_000),
            ("http://b:1/", 2_000),
            ("http://c:1/", 9_000),
        ] {
            upsert(conn, &beat(address, seen)).unwrap();
        }
        upsert(conn, &beat("http://revoked:1/", 500)).unwrap();
        let revoked = find(conn, "app", "http://revoked:1/").unwrap().unwrap();
        assert!(set_approval(conn, revoked.id, REVOKED).unwrap());
        assert_eq!(delete_unseen_since(conn, 5_000, 1).unwrap(), 1);
        assert_eq!(delete_unseen_since(conn, 5_000, 10).unwrap(), 1);
        assert_eq!(delete_unseen_since(conn, 5_000, 10).unwrap(), 0);
        let left: Vec<String> = list(conn, None)
            .unwrap()
            .into_iter()
            .map(|a| a.address)
            .collect();
        // A revoked agent stays, or it could enroll afresh.
        assert_eq!(left, ["http://c:1/", "http://revoked:1/"]);
    });

    storage_test!(
        only_approved_agents_are_live_and_a_stored_key_is_kept,
        |conn| {
            insert(
                conn,
                &Heartbeat {
                    key_hash: "k1",
                    ..beat("http://p:1/", 1_000)
                },
                PENDING,
            )
            .unwrap();
            upsert(
                conn,
                &Heartbeat {
                    key_hash: "k2",
                    ..beat("http://q:1/", 1_000)
                },
            )
            .unwrap();
            let live: Vec<String> = list_live(conn, "app", 0)
                .unwrap()
                .into_iter()
                .map(|a| a.address)
                .collect();
            assert_eq!(live, vec!["http://q:1/".to_owned()]);
            let pending = find(conn, "app", "http://p:1/").unwrap().unwrap();
            assert!(set_approval(conn, pending.id, APPROVED).unwrap());
            assert_eq!(list_live(conn, "app", 0).unwrap().len(), 2);
            refresh(
                conn,
                pending.id,
                &Heartbeat {
                    key_hash: "other",
                    ..beat("http://p:1/", 2_000)
                },
            )
            .unwrap();
            assert_eq!(get(conn, pending.id).unwrap().key_hash, "k1");
            assert!(set_approval(conn, pending.id, REVOKED).unwrap());
            assert!(list_by_key(conn, "k1").unwrap().is_empty());
            assert_eq!(list_by_key(conn, "k2").unwrap().len(), 1);
            assert_eq!(list_at(conn, "http://q:1/").unwrap().len(), 1);
            assert!(delete(conn, pending.id).unwrap());
            assert!(matches!(get(conn, pending.id), Err(Error::NotFound(_))));
        }
    );

    storage_test!(
        a_connection_is_recorded_and_cleared_only_by_its_holder,
        |conn| {
            upsert(conn, &beat("conn://h/1/", 1_000)).unwrap();
            let id = find(conn, "app", "conn://h/1/").unwrap().unwrap().id;
            assert_eq!(get(conn, id).unwrap().mode, "auto");
            set_link(conn, id, "admin-a:1", "http://a:1", 2_000).unwrap();
            set_link_rtt(conn, id, "admin-a:1", 2_000, 350).unwrap();
            // The agent reconnected to another admin before the first socket ended.
            set_link(conn, id, "admin-b:2", "http://b:2", 3_000).unwrap();
            set_link_rtt(conn, id, "admin-a:1", 2_000, 999).unwrap();
            clear_link(conn, id, "admin-a:1", 2_000).unwrap();
            let row = get(conn, id).unwrap();
            assert_eq!(
                (row.link_admin.as_str(), row.link_since_ms, row.link_rtt_us),
                ("admin-b:2", Some(3_000), None)
            );
            assert_eq!(
                link_url(conn, "conn://h/1/").unwrap().as_deref(),
                Some("http://b:2")
            );
            set_link_rtt(conn, id, "admin-b:2", 3_000, 420).unwrap();
            assert_eq!(get(conn, id).unwrap().link_rtt_us, Some(420));
            clear_link(conn, id, "admin-b:2", 3_000).unwrap();
            let row = get(conn, id).unwrap();
            assert_eq!(
                (row.link_admin.as_str(), row.link_since_ms, row.link_rtt_us),
                ("", None, None)
            );
            assert_eq!(link_url(conn, "conn://h/1/").unwrap(), None);
        }
    );
}
