//! Agents as the registry knows them, limited to the groups the caller may see.

use serde::Serialize;

use crate::auth::rbac::Actor;
use crate::db::{Page, agent, executor_group};
use crate::error::Error;
use crate::startup::AppState;

/// An agent is live while its last heartbeat is younger than this (three missed 10 s beats).
pub const DEAD_AFTER_MS: i64 = 30_000;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AgentView {
    pub id: i64,
    pub app_name: String,
    pub address: String,
    pub version: String,
    pub hostname: String,
    pub live: bool,
    pub registered_ms: i64,
    pub last_seen_ms: i64,
    pub limits_mode: String,
    #[schema(value_type = Object)]
    pub metrics: serde_json::Value,
}

pub async fn list(state: &AppState, actor: &Actor) -> Result<Vec<AgentView>, Error> {
    let now = state.clock.now_ms();
    let visible = actor.visible_groups();
    state
        .db
        .run(move |conn| {
            let app_names: Option<Vec<String>> = match visible {
                None => None,
                Some(ids) => Some(
                    executor_group::list(
                        conn,
                        Some(&ids),
                        Page {
                            limit: 10_000,
                            offset: 0,
                        },
                    )?
                    .into_iter()
                    .map(|g| g.app_name)
                    .collect(),
                ),
            };
            Ok(agent::list(conn, app_names.as_deref())?
                .into_iter()
                .map(|a| AgentView {
                    id: a.id,
                    live: now - a.last_seen_ms < DEAD_AFTER_MS,
                    metrics: serde_json::from_str(&a.metrics).unwrap_or(serde_json::Value::Null),
                    app_name: a.app_name,
                    address: a.address,
                    version: a.version,
                    hostname: a.hostname,
                    registered_ms: a.registered_ms,
                    last_seen_ms: a.last_seen_ms,
                    limits_mode: a.limits_mode,
                })
                .collect())
        })
        .await
}
