//! `jobfleet groups …` and `jobfleet agents …`.

use serde_json::Value;

use crate::Output;
use crate::api::Api;
use crate::failure::Failure;
use crate::table::{self, Column};

const GROUP_COLUMNS: &[Column] = &[
    Column {
        heading: "ID",
        cell: |g| table::text(&g["id"]),
    },
    Column {
        heading: "NAME",
        cell: |g| table::text(&g["app_name"]),
    },
    Column {
        heading: "TITLE",
        cell: |g| table::text(&g["title"]),
    },
    Column {
        heading: "ADDRESSES",
        cell: |g| table::text(&g["address_mode"]),
    },
];

const AGENT_COLUMNS: &[Column] = &[
    Column {
        heading: "ID",
        cell: |a| table::text(&a["id"]),
    },
    Column {
        heading: "GROUP",
        cell: |a| table::text(&a["app_name"]),
    },
    Column {
        heading: "ADDRESS",
        cell: |a| table::text(&a["address"]),
    },
    Column {
        heading: "HOST",
        cell: |a| table::text(&a["hostname"]),
    },
    Column {
        heading: "STATUS",
        cell: |a| table::text(&a["status"]),
    },
    Column {
        heading: "LABELS",
        cell: |a| {
            let labels: Vec<String> = a["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            if labels.is_empty() {
                "-".into()
            } else {
                labels.join(",")
            }
        },
    },
    Column {
        heading: "DRAINED",
        cell: |a| {
            if a["drained_ms"].is_i64() {
                "yes".into()
            } else {
                "-".into()
            }
        },
    },
    Column {
        heading: "APPROVAL",
        cell: |a| table::text(&a["approval"]),
    },
    Column {
        heading: "MODE",
        cell: |a| table::text(&a["mode"]),
    },
    Column {
        heading: "VERSION",
        cell: |a| table::text(&a["version"]),
    },
    Column {
        heading: "LAST SEEN (UTC)",
        cell: |a| table::time(&a["last_seen_ms"]),
    },
];

/// A group's id from an id or its name (`app_name`).
pub async fn group_id(api: &Api, group: &str) -> Result<i64, Failure> {
    if let Ok(id) = group.parse::<i64>() {
        return Ok(id);
    }
    let mut offset = 0;
    loop {
        let page = api
            .get(
                "/groups",
                &[("limit", "500".into()), ("offset", offset.to_string())],
            )
            .await?;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if let Some(found) = items.iter().find(|g| g["app_name"].as_str() == Some(group)) {
            return found["id"]
                .as_i64()
                .ok_or_else(|| Failure::Other("the admin's group has no id".into()));
        }
        offset += items.len();
        if items.is_empty() || page["total"].as_i64().is_some_and(|t| offset as i64 >= t) {
            return Err(Failure::NotFound(format!("no group named `{group}`")));
        }
    }
}

pub async fn groups(api: &Api, out: Output, limit: i64, offset: i64) -> Result<(), Failure> {
    let page = api
        .get(
            "/groups",
            &[("limit", limit.to_string()), ("offset", offset.to_string())],
        )
        .await?;
    out.page(&page, GROUP_COLUMNS);
    Ok(())
}

pub async fn group(api: &Api, out: Output, group: &str) -> Result<(), Failure> {
    let id = group_id(api, group).await?;
    let found = api.get(&format!("/groups/{id}"), &[]).await?;
    out.object(&found, || {
        table::fields(
            &found,
            &[
                ("id", |g| table::text(&g["id"])),
                ("name", |g| table::text(&g["app_name"])),
                ("title", |g| table::text(&g["title"])),
                ("addresses", |g| table::text(&g["address_mode"])),
                ("manual list", |g| {
                    g["addresses"]
                        .as_array()
                        .map(|a| a.iter().map(table::text).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default()
                }),
                ("XXL-Job executors", |g| table::text(&g["allow_executors"])),
            ],
        )
    });
    Ok(())
}

/// `jobfleet agents list`'s filters and order, as `GET /agents` takes them.
#[derive(Debug, clap::Args)]
pub struct AgentFilter {
    /// Only this group (id or name).
    #[arg(short, long)]
    pub group: Option<String>,
    /// Only agents that are live (heartbeating, in service), drained or dead.
    #[arg(short, long)]
    pub status: Option<String>,
    /// Only agents that are approved, pending or revoked.
    #[arg(long)]
    pub approval: Option<String>,
    /// Only agents reached by push, connect or auto.
    #[arg(long)]
    pub mode: Option<String>,
    /// Only agents limiting their jobs this way (cgroup2, rlimit …).
    #[arg(long)]
    pub limits_mode: Option<String>,
    /// Only agents of this version.
    #[arg(long)]
    pub version: Option<String>,
    /// Only agents with this label: key=value, or key for any value.
    #[arg(short, long)]
    pub label: Option<String>,
    /// Only agents whose address or hostname holds this.
    #[arg(short = 'q', long)]
    pub search: Option<String>,
    /// Order by group, address, hostname, version, last_seen or registered.
    #[arg(long)]
    pub sort: Option<String>,
    /// Largest first.
    #[arg(long)]
    pub desc: bool,
    #[command(flatten)]
    pub paging: crate::Paging,
}

pub async fn agents(api: &Api, out: Output, filter: AgentFilter) -> Result<(), Failure> {
    let mut query = vec![
        ("limit", filter.paging.limit.to_string()),
        ("offset", filter.paging.offset.to_string()),
    ];
    if let Some(group) = &filter.group {
        query.push(("group_id", group_id(api, group).await?.to_string()));
    }
    for (key, value) in [
        ("status", filter.status),
        ("approval", filter.approval),
        ("mode", filter.mode),
        ("limits_mode", filter.limits_mode),
        ("version", filter.version),
        ("label", filter.label),
        ("q", filter.search),
        ("sort", filter.sort),
    ] {
        if let Some(value) = value {
            query.push((key, value));
        }
    }
    if filter.desc {
        query.push(("order", "desc".into()));
    }
    let page = api.get("/agents", &query).await?;
    out.page(&page, AGENT_COLUMNS);
    Ok(())
}

/// The fleet at a glance: agents by status and group, versions and modes, recent deaths.
pub async fn summary(api: &Api, out: Output) -> Result<(), Failure> {
    let fleet = api.get("/fleet", &[]).await?;
    out.object(&fleet, || {
        let counts = |v: &Value| {
            format!(
                "{} live, {} drained, {} dead",
                table::text(&v["live"]),
                table::text(&v["drained"]),
                table::text(&v["dead"])
            )
        };
        let mut text = format!(
            "{} agents: {}; {} pending approval, {} revoked\n",
            table::text(&fleet["total"]),
            counts(&fleet),
            table::text(&fleet["pending"]),
            table::text(&fleet["revoked"])
        );
        for (title, key) in [
            ("Groups", "groups"),
            ("Versions", "versions"),
            ("Limits modes", "limits_modes"),
            ("Connection modes", "modes"),
        ] {
            text.push_str(&format!("\n{title}:\n"));
            for item in fleet[key].as_array().into_iter().flatten() {
                let name = if key == "groups" {
                    table::text(&item["app_name"])
                } else {
                    match item["value"].as_str() {
                        Some("") | None => "(not said)".to_owned(),
                        Some(value) => value.to_owned(),
                    }
                };
                text.push_str(&format!(
                    "  {name}: {} ({})\n",
                    table::text(&item["total"]),
                    counts(item)
                ));
            }
        }
        text.push_str(&format!(
            "\nDied in the last hour: {}\n",
            table::text(&fleet["died_last_hour"])
        ));
        for agent in fleet["died"].as_array().into_iter().flatten() {
            text.push_str(&format!(
                "  {} {} ({}), last seen {}\n",
                table::text(&agent["app_name"]),
                table::text(&agent["address"]),
                table::text(&agent["hostname"]),
                table::time(&agent["last_seen_ms"])
            ));
        }
        text
    });
    Ok(())
}

/// An agent's id from its id or its address (with or without the trailing `/`).
async fn agent_id(api: &Api, agent: &str) -> Result<i64, Failure> {
    if let Ok(id) = agent.parse::<i64>() {
        return Ok(id);
    }
    let wanted = agent.trim_end_matches('/');
    // The search narrows the page to the agents whose address holds it; the match is exact.
    let page = api
        .get(
            "/agents",
            &[("q", wanted.to_owned()), ("limit", "500".to_owned())],
        )
        .await?;
    let found: Vec<&Value> = page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["address"].as_str().map(|s| s.trim_end_matches('/')) == Some(wanted))
        .collect();
    match found.as_slice() {
        [one] => one["id"]
            .as_i64()
            .ok_or_else(|| Failure::Other("the admin's agent has no id".into())),
        [] => Err(Failure::NotFound(format!("no agent at `{agent}`"))),
        several => Err(Failure::Usage(format!(
            "{} agents are at `{agent}` (one per group; ids {}): give the id",
            several.len(),
            several
                .iter()
                .map(|a| table::text(&a["id"]))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// What an admin may do to an agent from the command line.
#[derive(Debug, Clone, Copy)]
pub enum AgentAction {
    Drain,
    Undrain,
    Forget,
}

pub async fn act_on_agent(
    api: &Api,
    out: Output,
    agent: &str,
    action: AgentAction,
) -> Result<(), Failure> {
    let id = agent_id(api, agent).await?;
    let (answer, done) = match action {
        AgentAction::Drain => (
            api.post(&format!("/agents/{id}/drain"), None).await?,
            "drained: no new runs; the runs it holds finish",
        ),
        AgentAction::Undrain => (
            api.post(&format!("/agents/{id}/undrain"), None).await?,
            "back in service",
        ),
        AgentAction::Forget => {
            api.delete(&format!("/agents/{id}")).await?;
            (
                serde_json::json!({"id": id, "forgotten": true}),
                "forgotten",
            )
        }
    };
    out.object(&answer, || format!("agent {id} {done}\n"));
    Ok(())
}
