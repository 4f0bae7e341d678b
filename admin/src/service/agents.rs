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

/// A registration or heartbeat from an agent (or an XXL-Job executor).
///
/// # Errors
/// `invalid_field` for a malformed registration.
pub async fn register(
    state: &AppState,
    param: jobfleet_agent::protocol::RegistryParam,
) -> Result<(), Error> {
    let (app_name, address) = check_registration(&param)?;
    let now = state.clock.now_ms();
    let metrics = param
        .metrics
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| Error::Internal(e.into()))?;
    state
        .db
        .run(move |conn| {
            agent::upsert(
                conn,
                &agent::Heartbeat {
                    app_name: &app_name,
                    address: &address,
                    version: param.agent_version.as_deref().unwrap_or("xxl-job"),
                    hostname: param.hostname.as_deref().unwrap_or(""),
                    metrics: metrics.as_deref().unwrap_or("{}"),
                    limits_mode: param.limits_mode.as_deref().unwrap_or(""),
                    now_ms: now,
                },
            )
        })
        .await
}

/// Graceful deregistration.
pub async fn deregister(
    state: &AppState,
    param: jobfleet_agent::protocol::RegistryParam,
) -> Result<(), Error> {
    let (app_name, address) = check_registration(&param)?;
    state
        .db
        .run(move |conn| agent::remove(conn, &app_name, &address).map(|_| ()))
        .await
}

fn check_registration(
    param: &jobfleet_agent::protocol::RegistryParam,
) -> Result<(String, String), Error> {
    if param.registry_group != jobfleet_agent::protocol::REGISTRY_GROUP_EXECUTOR {
        return Err(Error::invalid("registryGroup", "must be EXECUTOR"));
    }
    let app_name = crate::service::groups::check_app_name(&param.registry_key).map_err(|_| {
        Error::invalid(
            "registryKey",
            "must be an app name of letters, digits, `-`, `_`, `.` (at most 64)",
        )
    })?;
    let value = param.registry_value.trim();
    let parsed = url::Url::parse(value)
        .map_err(|e| Error::invalid("registryValue", format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host_str().is_none()
        || value.len() > 255
    {
        return Err(Error::invalid(
            "registryValue",
            "must be the agent's http(s) base URL",
        ));
    }
    let address = if value.ends_with('/') {
        value.to_owned()
    } else {
        format!("{value}/")
    };
    Ok((app_name, address))
}
