//! `agent`: the registry of agents that registered themselves, with their latest metrics.

use diesel::prelude::*;

use super::schema::agent;
use super::{AnyConnection, Page};
use crate::domain::agent::AgentStatus;
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
/// A heartbeat that changes nothing but the time and the metrics is cheaper as [`touch`].
pub fn refresh(conn: &mut AnyConnection, id: i64, beat: &Heartbeat<'_>) -> Result<(), Error> {
    super::prepared::update(
        agent::table,
        (
            agent::version.eq(beat.version),
            agent::hostname.eq(beat.hostname),
            agent::last_seen_ms.eq(beat.now_ms),
            agent::metrics.eq(beat.metrics),
            agent::limits_mode.eq(beat.limits_mode),
            agent::instance_id.eq(beat.instance_id),
            agent::run_as.eq(beat.run_as),
            agent::mode.eq(beat.mode),
            agent::labels.eq(beat.labels),
        ),
        agent::id.eq(id),
    )
    .execute(conn)?;
    // An executor has no key to adopt: writing `''` over `''` would change nothing.
    if !beat.key_hash.is_empty() {
        super::prepared::update(
            agent::table,
            agent::key_hash.eq(beat.key_hash),
            agent::id.eq(id).and(agent::key_hash.eq("")),
        )
        .execute(conn)?;
    }
    Ok(())
}

/// The registry rows at `addresses` (a batch of heartbeats), in one query by the address index;
/// the caller matches its `(app_name, address)` pairs (an address registered in another group
/// comes too). By address only: `app_name IN (…) AND address IN (…)` probes the unique key
/// once per pair of the two lists.
pub fn find_many(conn: &mut AnyConnection, addresses: &[&str]) -> Result<Vec<Agent>, Error> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    Ok(agent::table
        .filter(agent::address.eq_any(addresses))
        .select(Agent::as_select())
        .load(conn)?)
}

/// A heartbeat that changed nothing about its agent but the time and the metrics.
#[derive(Debug, Clone, Copy)]
pub struct Touch<'a> {
    pub id: i64,
    pub now_ms: i64,
    pub metrics: &'a str,
}

/// Records heartbeats that changed only `last_seen_ms` and the metrics (one per agent: the
/// caller keeps the last of each). On MySQL one statement for the batch (a round trip per
/// row is what it would cost otherwise), on SQLite a kept statement per row
/// (`db::batch_writes_pay`).
pub fn touch(conn: &mut AnyConnection, beats: &[Touch<'_>]) -> Result<(), Error> {
    use super::rows_update::{RowsUpdate, Set, Value};
    if beats.len() > 1 && super::batch_writes_pay(conn) {
        RowsUpdate::new("agent", beats.iter().map(|b| b.id).collect())
            .column(
                "last_seen_ms",
                Set::Always,
                beats
                    .iter()
                    .map(|b| Value::BigInt(Some(b.now_ms)))
                    .collect(),
            )
            .column(
                "metrics",
                Set::Always,
                beats.iter().map(|b| Value::Text(Some(b.metrics))).collect(),
            )
            .execute(conn)?;
        return Ok(());
    }
    for beat in beats {
        super::prepared::update(
            agent::table,
            (
                agent::last_seen_ms.eq(beat.now_ms),
                agent::metrics.eq(beat.metrics),
            ),
            agent::id.eq(beat.id),
        )
        .execute(conn)?;
    }
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

/// What a callback needs of a registration made with its key; read for every batch of results,
/// so without the heartbeat's metrics and the rest of the row.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = agent)]
pub struct KeyHolder {
    pub app_name: String,
    pub address: String,
    /// `approved` or `pending` (revoked ones are not listed).
    pub approval: String,
}

/// The registrations made with this key that are not revoked: the addresses its owner may
/// report results for.
pub fn list_by_key(conn: &mut AnyConnection, key_hash: &str) -> Result<Vec<KeyHolder>, Error> {
    Ok(crate::db_run!(conn: {
        agent::table
            .filter(agent::key_hash.eq(key_hash))
            .filter(agent::approval.ne(REVOKED))
            .select(KeyHolder::as_select())
            .load(conn)?
    }))
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
    Ok(crate::db_run!(conn: {
        agent::table
            .filter(agent::app_name.eq(app_name))
            .filter(agent::last_seen_ms.ge(since_ms))
            .filter(agent::approval.eq(APPROVED))
            .filter(agent::drained_ms.is_null())
            .order(agent::address.asc())
            .select(Agent::as_select())
            .load(conn)?
    }))
}

/// Filters of the agents list and the fleet's counts; `None` filters nothing.
#[derive(Debug, Default, Clone)]
pub struct AgentFilter {
    /// The groups the caller may see, by app name (`None`: every group).
    pub visible_apps: Option<Vec<String>>,
    pub app_name: Option<String>,
    /// Last heard from at or after.
    pub seen_since_ms: Option<i64>,
    /// Last heard from before.
    pub seen_before_ms: Option<i64>,
    pub drained: Option<bool>,
    pub approval: Option<String>,
    /// `push`, `connect`, `auto`, or empty (an executor or an older agent).
    pub mode: Option<String>,
    pub limits_mode: Option<String>,
    pub version: Option<String>,
    /// `(key, Some(value))` matches the label `key=value`; `(key, None)` any value of `key`.
    pub label: Option<(String, Option<String>)>,
    /// A part of the address or of the hostname.
    pub search: Option<String>,
}

/// What the agents list is ordered by; the id breaks ties, so pages never overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgentSort {
    /// Group (app name), then address.
    #[default]
    Group,
    Address,
    Hostname,
    Version,
    LastSeen,
    Registered,
}

fn filtered(filter: &AgentFilter) -> agent::BoxedQuery<'static, super::MultiBackend> {
    let mut query = agent::table.into_boxed();
    if let Some(apps) = &filter.visible_apps {
        query = query.filter(agent::app_name.eq_any(apps.clone()));
    }
    if let Some(app_name) = &filter.app_name {
        query = query.filter(agent::app_name.eq(app_name.clone()));
    }
    if let Some(since) = filter.seen_since_ms {
        query = query.filter(agent::last_seen_ms.ge(since));
    }
    if let Some(before) = filter.seen_before_ms {
        query = query.filter(agent::last_seen_ms.lt(before));
    }
    match filter.drained {
        Some(true) => query = query.filter(agent::drained_ms.is_not_null()),
        Some(false) => query = query.filter(agent::drained_ms.is_null()),
        None => {}
    }
    if let Some(approval) = &filter.approval {
        query = query.filter(agent::approval.eq(approval.clone()));
    }
    if let Some(mode) = &filter.mode {
        query = query.filter(agent::mode.eq(mode.clone()));
    }
    if let Some(limits_mode) = &filter.limits_mode {
        query = query.filter(agent::limits_mode.eq(limits_mode.clone()));
    }
    if let Some(version) = &filter.version {
        query = query.filter(agent::version.eq(version.clone()));
    }
    if let Some((key, value)) = &filter.label {
        // Labels are stored `k=v,k=v` in key order, without a comma at either end.
        let key = super::like_literal(key);
        query = match value {
            Some(value) => {
                let item = format!("{key}={}", super::like_literal(value));
                query.filter(
                    agent::labels
                        .like(item.clone())
                        .escape('\\')
                        .or(agent::labels.like(format!("{item},%")).escape('\\'))
                        .or(agent::labels.like(format!("%,{item}")).escape('\\'))
                        .or(agent::labels.like(format!("%,{item},%")).escape('\\')),
                )
            }
            None => query.filter(
                agent::labels
                    .like(format!("{key}=%"))
                    .escape('\\')
                    .or(agent::labels.like(format!("%,{key}=%")).escape('\\')),
            ),
        };
    }
    if let Some(needle) = &filter.search {
        let pattern = format!("%{}%", super::like_literal(needle));
        query = query.filter(
            agent::address
                .like(pattern.clone())
                .escape('\\')
                .or(agent::hostname.like(pattern).escape('\\')),
        );
    }
    query
}

/// One page of the agents `filter` matches, in `sort` order.
pub fn list_page(
    conn: &mut AnyConnection,
    filter: &AgentFilter,
    sort: AgentSort,
    descending: bool,
    page: Page,
) -> Result<Vec<Agent>, Error> {
    let mut query = filtered(filter).select(Agent::as_select());
    macro_rules! then_by {
        ($column:expr) => {
            query = if descending {
                query.then_order_by($column.desc())
            } else {
                query.then_order_by($column.asc())
            }
        };
    }
    match sort {
        AgentSort::Group => {
            then_by!(agent::app_name);
            then_by!(agent::address);
        }
        AgentSort::Address => then_by!(agent::address),
        AgentSort::Hostname => then_by!(agent::hostname),
        AgentSort::Version => then_by!(agent::version),
        AgentSort::LastSeen => then_by!(agent::last_seen_ms),
        AgentSort::Registered => then_by!(agent::registered_ms),
    }
    then_by!(agent::id);
    Ok(query.limit(page.limit).offset(page.offset).load(conn)?)
}

pub fn count(conn: &mut AnyConnection, filter: &AgentFilter) -> Result<i64, Error> {
    Ok(filtered(filter).count().get_result(conn)?)
}

/// A number of agents sharing a group, version, limits mode, connection mode, approval and
/// status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CensusRow {
    pub app_name: String,
    pub version: String,
    pub limits_mode: String,
    pub mode: String,
    pub approval: String,
    pub status: AgentStatus,
    pub agents: i64,
}

/// The agents `filter` matches, counted by group, version, limits mode, connection mode,
/// approval and their status at `now_ms`: one row per combination, in that order. One read, so
/// every agent is counted once in one status; it reads seven short columns of each agent (a
/// `GROUP BY` over a boxed, filtered query is beyond diesel's DSL): ten thousand agents are a
/// few hundred kilobytes.
pub fn census(
    conn: &mut AnyConnection,
    filter: &AgentFilter,
    now_ms: i64,
) -> Result<Vec<CensusRow>, Error> {
    type Key = (String, String, String, String, String, AgentStatus);
    type Row = (String, String, String, String, String, i64, Option<i64>);
    let rows: Vec<Row> = filtered(filter)
        .select((
            agent::app_name,
            agent::version,
            agent::limits_mode,
            agent::mode,
            agent::approval,
            agent::last_seen_ms,
            agent::drained_ms,
        ))
        .load(conn)?;
    let mut counted: std::collections::BTreeMap<Key, i64> = std::collections::BTreeMap::new();
    for (app_name, version, limits_mode, mode, approval, last_seen_ms, drained_ms) in rows {
        let status = AgentStatus::of(last_seen_ms, drained_ms.is_some(), now_ms);
        *counted
            .entry((app_name, version, limits_mode, mode, approval, status))
            .or_default() += 1;
    }
    Ok(counted
        .into_iter()
        .map(
            |((app_name, version, limits_mode, mode, approval, status), agents)| CensusRow {
                app_name,
                version,
                limits_mode,
                mode,
                approval,
                status,
                agents,
            },
        )
        .collect())
}

/// Of `addresses`, those with a registration last heard from before `before_ms`.
pub fn unseen_among(
    conn: &mut AnyConnection,
    addresses: &[String],
    before_ms: i64,
) -> Result<std::collections::HashSet<String>, Error> {
    let mut unseen = std::collections::HashSet::new();
    for chunk in addresses.chunks(super::IN_LIST_MAX) {
        unseen.extend(
            agent::table
                .filter(agent::address.eq_any(chunk))
                .filter(agent::last_seen_ms.lt(before_ms))
                .select(agent::address)
                .load::<String>(conn)?,
        );
    }
    Ok(unseen)
}

/// `(app_name, address)` of up to `limit` agents last heard from in `[from_ms, before_ms)`.
pub fn seen_between(
    conn: &mut AnyConnection,
    from_ms: i64,
    before_ms: i64,
    limit: i64,
) -> Result<Vec<(String, String)>, Error> {
    Ok(agent::table
        .filter(agent::last_seen_ms.ge(from_ms))
        .filter(agent::last_seen_ms.lt(before_ms))
        .select((agent::app_name, agent::address))
        .order(agent::last_seen_ms.asc())
        .limit(limit)
        .load(conn)?)
}

/// Whether some agent of `app_name` was heard from at or after `since_ms` (of any approval).
pub fn any_seen_since(
    conn: &mut AnyConnection,
    app_name: &str,
    since_ms: i64,
) -> Result<bool, Error> {
    Ok(agent::table
        .filter(agent::app_name.eq(app_name))
        .filter(agent::last_seen_ms.ge(since_ms))
        .select(agent::id)
        .first::<i64>(conn)
        .optional()?
        .is_some())
}

/// Every registration of `app_name` heard from at or after `since_ms`, of any approval.
pub fn seen_since(
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

    /// Every agent (or those of `app`), by group then address.
    fn agents_of(conn: &mut AnyConnection, app: Option<&str>) -> Vec<Agent> {
        let filter = AgentFilter {
            app_name: app.map(str::to_owned),
            ..AgentFilter::default()
        };
        list_page(conn, &filter, AgentSort::Group, false, Page::LARGEST).unwrap()
    }

    /// Inserts or refreshes, as the registry service does.
    fn upsert(conn: &mut AnyConnection, beat: &Heartbeat<'_>) -> Result<(), Error> {
        match find(conn, beat.app_name, beat.address)? {
            Some(row) => refresh(conn, row.id, beat),
            None => insert(conn, beat, APPROVED),
        }
    }

    storage_test!(heartbeats_upsert_and_liveness_is_by_last_seen, |conn| {
        assert!(agents_of(conn, None).is_empty());
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
        let all = agents_of(conn, Some("app"));
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
        assert!(agents_of(conn, Some("other")).is_empty());
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
        let left: Vec<String> = agents_of(conn, None)
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

    storage_test!(
        the_list_pages_sorts_and_filters_and_the_census_counts,
        |conn| {
            let apps = ["alpha", "beta"];
            for i in 0..30_i64 {
                let address = format!("http://10.0.0.{i}:9999/");
                let hostname = format!("host-{i:02}");
                let labels = if i % 3 == 0 {
                    "gpu=true,zone=a_1"
                } else {
                    "zone=b"
                };
                let version = if i < 10 { "1.0" } else { "1.1" };
                let mode = if i % 2 == 0 { "push" } else { "connect" };
                insert(
                    conn,
                    &Heartbeat {
                        app_name: apps[usize::try_from(i % 2).unwrap()],
                        address: &address,
                        hostname: &hostname,
                        labels,
                        version,
                        mode,
                        ..beat("", 1_000 + i * 100)
                    },
                    if i == 29 { PENDING } else { APPROVED },
                )
                .unwrap();
            }
            let page = |limit, offset| Page { limit, offset };
            let hostnames = |rows: Vec<Agent>| -> Vec<String> {
                rows.into_iter().map(|a| a.hostname).collect()
            };
            let everyone = AgentFilter::default();
            assert_eq!(count(conn, &everyone).unwrap(), 30);
            // Pages never overlap and cover everything, whatever the sort.
            for sort in [AgentSort::Group, AgentSort::Version, AgentSort::LastSeen] {
                let mut seen = Vec::new();
                for offset in (0..30).step_by(7) {
                    seen.extend(hostnames(
                        list_page(conn, &everyone, sort, true, page(7, offset)).unwrap(),
                    ));
                }
                seen.sort();
                seen.dedup();
                assert_eq!(seen.len(), 30, "{sort:?}");
            }
            let newest = list_page(conn, &everyone, AgentSort::LastSeen, true, page(2, 0)).unwrap();
            assert_eq!(hostnames(newest), ["host-29", "host-28"]);
            let by_host =
                list_page(conn, &everyone, AgentSort::Hostname, false, page(3, 0)).unwrap();
            assert_eq!(hostnames(by_host), ["host-00", "host-01", "host-02"]);
            let matching = |conn: &mut AnyConnection, filter: AgentFilter| -> i64 {
                count(conn, &filter).unwrap()
            };
            let label = |key: &str, value: Option<&str>| AgentFilter {
                label: Some((key.to_owned(), value.map(str::to_owned))),
                ..AgentFilter::default()
            };
            assert_eq!(matching(conn, label("gpu", None)), 10);
            assert_eq!(matching(conn, label("zone", Some("a_1"))), 10);
            assert_eq!(matching(conn, label("zone", Some("b"))), 20);
            // `_` is a character, not a wildcard; a prefix of a value is not the value.
            assert_eq!(matching(conn, label("zone", Some("a-1"))), 0);
            assert_eq!(matching(conn, label("zone", Some("a"))), 0);
            assert_eq!(matching(conn, label("zon", None)), 0);
            let search = |needle: &str| AgentFilter {
                search: Some(needle.to_owned()),
                ..AgentFilter::default()
            };
            assert_eq!(matching(conn, search("host-2")), 10);
            assert_eq!(matching(conn, search("10.0.0.1")), 11);
            assert_eq!(matching(conn, search("%")), 0);
            let narrow = AgentFilter {
                app_name: Some("beta".into()),
                version: Some("1.1".into()),
                mode: Some("connect".into()),
                approval: Some(APPROVED.into()),
                seen_since_ms: Some(2_000),
                seen_before_ms: Some(3_000),
                drained: Some(false),
                visible_apps: Some(vec!["beta".into()]),
                ..AgentFilter::default()
            };
            // beta holds the odd ones; seen 2,000..3,000 are 10..19; 1.1 and connect: 11..19 odd.
            assert_eq!(matching(conn, narrow.clone()), 5);
            let hidden = AgentFilter {
                visible_apps: Some(vec!["alpha".into()]),
                ..narrow
            };
            assert_eq!(matching(conn, hidden), 0);
            // At 32,599 ms the agents seen from 2,600 on are live (seen at 1,000 + 100 i: i ≥ 16).
            let census = census(conn, &everyone, 2_600 + 30_000 - 1).unwrap();
            let live: i64 = census
                .iter()
                .filter(|r| r.status == AgentStatus::Live)
                .map(|r| r.agents)
                .sum();
            assert_eq!(live, 14);
            assert_eq!(census.iter().map(|r| r.agents).sum::<i64>(), 30);
            let pending: i64 = census
                .iter()
                .filter(|r| r.approval == PENDING)
                .map(|r| r.agents)
                .sum();
            assert_eq!(pending, 1);
            let beta_new: i64 = census
                .iter()
                .filter(|r| r.app_name == "beta" && r.version == "1.1")
                .map(|r| r.agents)
                .sum();
            assert_eq!(beta_new, 10);
            // The monitors' probes.
            let probe: Vec<String> = vec![
                "http://10.0.0.0:9999/".into(),
                "http://10.0.0.29:9999/".into(),
                "http://nowhere:1/".into(),
            ];
            let unseen = unseen_among(conn, &probe, 2_000).unwrap();
            assert_eq!(
                unseen.into_iter().collect::<Vec<_>>(),
                ["http://10.0.0.0:9999/"]
            );
            let crossed = seen_between(conn, 1_000, 1_250, 10).unwrap();
            assert_eq!(crossed.len(), 3);
            assert!(any_seen_since(conn, "alpha", 3_800).unwrap());
            assert!(!any_seen_since(conn, "alpha", 3_900).unwrap());
            assert_eq!(seen_since(conn, "beta", 3_700).unwrap().len(), 2);
        }
    );

    // --- heartbeat storage tests ---
    storage_test!(
        steady_beats_are_touched_together_and_rows_are_found_together,
        |conn| {
            for address in ["http://a:1/", "http://b:1/", "http://c:1/"] {
                upsert(conn, &beat(address, 1_000)).unwrap();
            }
            let rows = find_many(conn, &["http://a:1/", "http://c:1/", "http://z:1/"]).unwrap();
            let mut found: Vec<&str> = rows.iter().map(|r| r.address.as_str()).collect();
            found.sort_unstable();
            assert_eq!(found, ["http://a:1/", "http://c:1/"]);
            assert!(find_many(conn, &[]).unwrap().is_empty());
            let id = |conn: &mut AnyConnection, address: &str| {
                find(conn, "app", address).unwrap().unwrap().id
            };
            let (a, b, c) = (
                id(conn, "http://a:1/"),
                id(conn, "http://b:1/"),
                id(conn, "http://c:1/"),
            );
            touch(
                conn,
                &[
                    Touch {
                        id: a,
                        now_ms: 5_000,
                        metrics: "{\"cpuPct\":1}",
                    },
                    Touch {
                        id: c,
                        now_ms: 6_000,
                        metrics: "{\"cpuPct\":2}",
                    },
                ],
            )
            .unwrap();
            touch(
                conn,
                &[Touch {
                    id: b,
                    now_ms: 7_000,
                    metrics: "{}",
                }],
            )
            .unwrap();
            touch(conn, &[]).unwrap();
            let seen = |conn: &mut AnyConnection, id: i64| {
                let row = get(conn, id).unwrap();
                (row.last_seen_ms, row.metrics, row.version, row.mode)
            };
            assert_eq!(
                seen(conn, a),
                (5_000, "{\"cpuPct\":1}".into(), "1".into(), "auto".into())
            );
            assert_eq!(
                seen(conn, c),
                (6_000, "{\"cpuPct\":2}".into(), "1".into(), "auto".into())
            );
            assert_eq!(seen(conn, b).0, 7_000);
            // A full refresh of an executor leaves its empty key as it is.
            refresh(conn, a, &beat("http://a:1/", 8_000)).unwrap();
            assert_eq!(get(conn, a).unwrap().key_hash, "");
        }
    );
}
