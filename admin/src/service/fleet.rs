//! The fleet: the agents list (paged, sorted, filtered), and what the fleet looks like at a
//! glance (counts by group and status, versions, limits and connection modes, the agents that
//! died in the last hour). Both read only what the caller may see, with indexed queries and
//! grouped counts, so they stay cheap with ten thousand agents.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::auth::rbac::Actor;
use crate::db::agent::{AgentFilter, AgentSort};
use crate::db::{AnyConnection, agent, executor_group};
use crate::domain::agent::{AgentStatus, DEAD_AFTER_MS, live_since};
use crate::domain::ids::GroupId;
use crate::error::Error;
use crate::service::agents::{AgentView, view};
use crate::service::{Page, Paged};
use crate::state::AppState;

/// How far back the fleet view lists the agents that died.
pub const DIED_WITHIN_MS: i64 = 3_600_000;
/// How many of those it names (all are counted).
const DIED_LISTED: i64 = 50;

/// Filters and order of the agents list. Empty text filters nothing (a console form sends its
/// empty fields).
#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AgentQuery {
    /// Agents of this group.
    #[param(value_type = Option<i64>)]
    pub group_id: Option<GroupId>,
    /// `live` (heartbeating, in service), `drained` (heartbeating, no new runs) or `dead`.
    pub status: Option<String>,
    /// `approved`, `pending` or `revoked`.
    pub approval: Option<String>,
    /// How admins reach it: `push`, `connect` or `auto`.
    pub mode: Option<String>,
    /// How it limits its jobs, as it reports it (`cgroup2`, `rlimit` …).
    pub limits_mode: Option<String>,
    /// The agent version it reports, exactly.
    pub version: Option<String>,
    /// `key=value`, or `key` for any value.
    pub label: Option<String>,
    /// A part of the address or the hostname.
    pub q: Option<String>,
    /// `group` (the default: group, then address), `address`, `hostname`, `version`,
    /// `last_seen` or `registered`.
    pub sort: Option<String>,
    /// `asc` (the default) or `desc`.
    pub order: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

/// The query's text fields, trimmed; an empty one is no filter.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn bounded(field: &str, value: Option<&str>, max: usize) -> Result<Option<String>, Error> {
    match value {
        Some(v) if v.len() > max => Err(Error::invalid(field, format!("at most {max} characters"))),
        Some(v) => Ok(Some(v.to_owned())),
        None => Ok(None),
    }
}

fn one_of(field: &str, value: Option<&str>, allowed: &[&str]) -> Result<Option<String>, Error> {
    match value {
        Some(v) if !allowed.contains(&v) => Err(Error::invalid(
            field,
            format!("must be one of {}", allowed.join(", ")),
        )),
        other => Ok(other.map(str::to_owned)),
    }
}

/// `key=value` or `key`, by the agent's own label rules.
fn label_filter(text: &str) -> Result<(String, Option<String>), Error> {
    let (key, value) = match text.split_once('=') {
        Some((key, value)) => (key.trim(), Some(value.trim())),
        None => (text, None),
    };
    jobfleet_agent::protocol::labels::check_label(key, value.unwrap_or(""))
        .map_err(|e| Error::invalid("label", e))?;
    Ok((key.to_owned(), value.map(str::to_owned)))
}

fn sort_of(sort: Option<&str>) -> Result<AgentSort, Error> {
    Ok(match sort {
        None | Some("group") => AgentSort::Group,
        Some("address") => AgentSort::Address,
        Some("hostname") => AgentSort::Hostname,
        Some("version") => AgentSort::Version,
        Some("last_seen") => AgentSort::LastSeen,
        Some("registered") => AgentSort::Registered,
        Some(_) => {
            return Err(Error::invalid(
                "sort",
                "must be one of group, address, hostname, version, last_seen, registered",
            ));
        }
    })
}

/// Narrows `filter` to the agents in `status` at `now`.
fn with_status(mut filter: AgentFilter, status: AgentStatus, now: i64) -> AgentFilter {
    match status {
        AgentStatus::Live | AgentStatus::Drained => {
            filter.seen_since_ms = Some(live_since(now));
            filter.drained = Some(status == AgentStatus::Drained);
        }
        AgentStatus::Dead => filter.seen_before_ms = Some(live_since(now)),
    }
    filter
}

/// Groups by app name: their id and title.
type GroupsByApp = BTreeMap<String, (GroupId, String)>;

/// The app names of the groups the caller may see (`None`: all), and the groups by app name.
fn visible_groups(
    conn: &mut AnyConnection,
    actor_groups: Option<Vec<GroupId>>,
) -> Result<(Option<Vec<String>>, GroupsByApp), Error> {
    let groups = executor_group::list(
        conn,
        actor_groups.as_deref(),
        Page {
            limit: 100_000,
            offset: 0,
        },
    )?;
    let by_app: GroupsByApp = groups
        .into_iter()
        .map(|g| (g.app_name, (g.id, g.title)))
        .collect();
    let apps = actor_groups.map(|_| by_app.keys().cloned().collect());
    Ok((apps, by_app))
}

/// A checked agents query: the filter (without the caller's groups yet), the order and page.
#[derive(Debug)]
struct Checked {
    filter: AgentFilter,
    status: Option<AgentStatus>,
    sort: AgentSort,
    descending: bool,
    page: Page,
}

fn check(query: &AgentQuery) -> Result<Checked, Error> {
    let page = Page::new(query.limit, query.offset)?;
    let status = given(&query.status)
        .map(|s| {
            s.parse::<AgentStatus>()
                .map_err(|e| Error::invalid("status", e))
        })
        .transpose()?;
    let descending = match given(&query.order) {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => return Err(Error::invalid("order", "must be asc or desc")),
    };
    let filter = AgentFilter {
        approval: one_of(
            "approval",
            given(&query.approval),
            &[agent::APPROVED, agent::PENDING, agent::REVOKED],
        )?,
        mode: one_of("mode", given(&query.mode), &["push", "connect", "auto"])?,
        limits_mode: bounded("limits_mode", given(&query.limits_mode), 32)?,
        version: bounded("version", given(&query.version), 64)?,
        label: given(&query.label).map(label_filter).transpose()?,
        search: bounded("q", given(&query.q), 200)?,
        ..AgentFilter::default()
    };
    Ok(Checked {
        filter,
        status,
        sort: sort_of(given(&query.sort))?,
        descending,
        page,
    })
}

/// The agents the caller may see that match `query`, one page of them, with their total.
///
/// # Errors
/// `invalid_field` naming the bad parameter.
pub async fn list(
    state: &AppState,
    actor: &Actor,
    query: AgentQuery,
) -> Result<Paged<AgentView>, Error> {
    let checked = check(&query)?;
    let now = state.clock.now_ms();
    let actor_groups = actor.visible_groups();
    state
        .db
        .run(move |conn| {
            let Checked {
                mut filter,
                status,
                sort,
                descending,
                page,
            } = checked;
            let (apps, _) = visible_groups(conn, actor_groups)?;
            filter.visible_apps = apps;
            if let Some(group_id) = query.group_id {
                // A group the caller may not see matches nothing, like one that does not exist.
                let app_name = executor_group::find(conn, group_id)?
                    .map(|g| g.app_name)
                    .unwrap_or_default();
                filter.app_name = Some(app_name);
            }
            if let Some(status) = status {
                filter = with_status(filter, status, now);
            }
            Ok(Paged {
                items: agent::list_page(conn, &filter, sort, descending, page)?
                    .into_iter()
                    .map(|a| view(a, now))
                    .collect(),
                total: agent::count(conn, &filter)?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}

/// A group's agents by status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct StatusCounts {
    pub live: i64,
    pub drained: i64,
    pub dead: i64,
    pub total: i64,
}

impl StatusCounts {
    fn add(&mut self, status: AgentStatus, agents: i64) {
        match status {
            AgentStatus::Live => self.live += agents,
            AgentStatus::Drained => self.drained += agents,
            AgentStatus::Dead => self.dead += agents,
        }
        self.total += agents;
    }
}

/// The agents of one group by status; `group_id` is absent for agents registered under an app
/// name no group has (yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct GroupFleet {
    pub group_id: Option<GroupId>,
    pub app_name: String,
    pub title: String,
    #[serde(flatten)]
    pub agents: StatusCounts,
}

/// How many agents share a value (a version, a mode), by status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Tally {
    pub value: String,
    #[serde(flatten)]
    pub agents: StatusCounts,
}

/// An agent that stopped heartbeating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DeadAgent {
    pub id: i64,
    pub app_name: String,
    pub address: String,
    pub hostname: String,
    pub last_seen_ms: i64,
    /// When it counted as dead: its last heartbeat plus the dead-after interval.
    pub dead_since_ms: i64,
}

/// The fleet at a glance, limited to the groups the caller may see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FleetView {
    pub at_ms: i64,
    #[serde(flatten)]
    pub agents: StatusCounts,
    /// Agents waiting for an admin's approval (of any status).
    pub pending: i64,
    pub revoked: i64,
    /// By app name.
    pub groups: Vec<GroupFleet>,
    /// Versions in use, most agents first.
    pub versions: Vec<Tally>,
    /// How agents limit their jobs, most agents first; empty when an agent does not say.
    pub limits_modes: Vec<Tally>,
    /// How admins reach them (`push`, `connect`, `auto`), most agents first; empty for XXL-Job
    /// executors and older agents.
    pub modes: Vec<Tally>,
    /// How many agents died in the last hour (their last heartbeat between an hour and the
    /// dead-after interval ago).
    pub died_last_hour: i64,
    /// The most recent of those, newest first, at most 50.
    pub died: Vec<DeadAgent>,
}

/// Adds one census row of agents in `status` to the tallies.
fn tally(into: &mut BTreeMap<String, StatusCounts>, value: &str, status: AgentStatus, n: i64) {
    into.entry(value.to_owned()).or_default().add(status, n);
}

/// Most agents first, then by value.
fn ranked(tallies: BTreeMap<String, StatusCounts>) -> Vec<Tally> {
    let mut ranked: Vec<Tally> = tallies
        .into_iter()
        .map(|(value, agents)| Tally { value, agents })
        .collect();
    ranked.sort_by(|a, b| {
        b.agents
            .total
            .cmp(&a.agents.total)
            .then(a.value.cmp(&b.value))
    });
    ranked
}

/// The fleet as the caller may see it.
///
/// # Errors
/// Database errors.
pub async fn summary(state: &AppState, actor: &Actor) -> Result<FleetView, Error> {
    let now = state.clock.now_ms();
    let actor_groups = actor.visible_groups();
    state
        .db
        .run(move |conn| {
            let (apps, groups) = visible_groups(conn, actor_groups)?;
            let base = AgentFilter {
                visible_apps: apps,
                ..AgentFilter::default()
            };
            let census = agent::census(conn, &base, now)?;
            let mut fleet = FleetView {
                at_ms: now,
                agents: StatusCounts::default(),
                pending: 0,
                revoked: 0,
                groups: Vec::new(),
                versions: Vec::new(),
                limits_modes: Vec::new(),
                modes: Vec::new(),
                died_last_hour: 0,
                died: Vec::new(),
            };
            let mut by_group: BTreeMap<String, StatusCounts> = BTreeMap::new();
            let (mut versions, mut limits_modes, mut modes) =
                (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
            for row in &census {
                let status = &row.status;
                fleet.agents.add(*status, row.agents);
                match row.approval.as_str() {
                    agent::PENDING => fleet.pending += row.agents,
                    agent::REVOKED => fleet.revoked += row.agents,
                    _ => {}
                }
                tally(&mut by_group, &row.app_name, *status, row.agents);
                tally(&mut versions, &row.version, *status, row.agents);
                tally(&mut limits_modes, &row.limits_mode, *status, row.agents);
                tally(&mut modes, &row.mode, *status, row.agents);
            }
            fleet.groups = by_group
                .into_iter()
                .map(|(app_name, agents)| {
                    let group = groups.get(&app_name);
                    GroupFleet {
                        group_id: group.map(|(id, _)| *id),
                        title: group.map(|(_, title)| title.clone()).unwrap_or_default(),
                        app_name,
                        agents,
                    }
                })
                .collect();
            fleet.versions = ranked(versions);
            fleet.limits_modes = ranked(limits_modes);
            fleet.modes = ranked(modes);
            let died = AgentFilter {
                seen_since_ms: Some(live_since(now) - DIED_WITHIN_MS),
                seen_before_ms: Some(live_since(now)),
                ..base
            };
            fleet.died_last_hour = agent::count(conn, &died)?;
            fleet.died = agent::list_page(
                conn,
                &died,
                AgentSort::LastSeen,
                true,
                Page {
                    limit: DIED_LISTED,
                    offset: 0,
                },
            )?
            .into_iter()
            .map(|a| DeadAgent {
                id: a.id,
                dead_since_ms: a.last_seen_ms + DEAD_AFTER_MS,
                app_name: a.app_name,
                address: a.address,
                hostname: a.hostname,
                last_seen_ms: a.last_seen_ms,
            })
            .collect();
            Ok(fleet)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> AgentQuery {
        let fields: serde_json::Map<String, serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| {
                let value = match v.parse::<i64>() {
                    Ok(n) if matches!(*k, "limit" | "offset" | "group_id") => n.into(),
                    _ => (*v).into(),
                };
                ((*k).to_owned(), value)
            })
            .collect();
        serde_json::from_value(fields.into()).unwrap()
    }

    #[test]
    fn empty_fields_filter_nothing_and_bad_ones_name_their_field() {
        let checked = check(&query(&[("status", ""), ("q", " "), ("label", "")])).unwrap();
        assert!(checked.status.is_none() && checked.filter.search.is_none());
        assert_eq!(checked.sort, AgentSort::Group);
        for (field, value) in [
            ("status", "alive"),
            ("approval", "maybe"),
            ("mode", "pull"),
            ("label", "bad key=x"),
            ("label", "zone=a b"),
            ("sort", "cpu"),
            ("order", "up"),
            ("limit", "0"),
            ("offset", "-1"),
        ] {
            match check(&query(&[(field, value)])) {
                Err(Error::Invalid {
                    field: Some(named), ..
                }) => assert_eq!(named, field, "{value}"),
                other => panic!("{field}={value}: {other:?}"),
            }
        }
        let checked = check(&query(&[
            ("label", "zone=a"),
            ("sort", "last_seen"),
            ("order", "desc"),
        ]))
        .unwrap();
        assert_eq!(
            checked.filter.label,
            Some(("zone".to_owned(), Some("a".to_owned())))
        );
        assert!(checked.descending);
        assert_eq!(
            check(&query(&[("label", "gpu")])).unwrap().filter.label,
            Some(("gpu".to_owned(), None))
        );
    }
}
