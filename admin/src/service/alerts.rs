//! Alert channels (admin: create, change, delete, test; everyone: read) and the alert event
//! history. The console calls these same functions.

use serde::{Deserialize, Serialize};

use crate::alert;
use crate::audit::{self, Entry};
use crate::auth::rbac::{Actor, AdminProof};
use crate::db::{Page, alert_channel, alert_event, job};
use crate::domain::alert::{
    AlertKind, ChannelKind, ChannelSpec, EventStatus, SecretChange, WebhookFormat,
};
use crate::domain::id_list::JobIds;
use crate::domain::ids::{ChannelId, GroupId, JobId, RunId};
use crate::error::Error;
use crate::service::Paged;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ChannelView {
    pub id: ChannelId,
    pub name: String,
    /// `email` or `webhook`.
    pub kind: String,
    /// Webhooks: `generic`, `dingtalk`, `feishu`, `slack` or `wecom`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Recipients or URL. Non-admins see a webhook URL cut to its origin: robot URLs carry
    /// their access token.
    pub target: String,
    /// Whether a secret is stored; the secret itself is never shown.
    pub has_secret: bool,
    pub enabled: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct EventView {
    pub id: i64,
    /// `run_failed`, `run_timed_out`, `run_lost`, `group_no_agent` or `test`.
    pub kind: String,
    pub job_id: Option<JobId>,
    pub group_id: Option<GroupId>,
    pub run_id: Option<RunId>,
    pub channel_id: ChannelId,
    pub title: String,
    pub body: String,
    /// `pending`, `sending`, `sent`, `failed` or `suppressed`.
    pub status: String,
    pub attempts: i32,
    pub next_attempt_ms: i64,
    pub last_error: Option<String>,
    pub created_ms: i64,
    pub sent_ms: Option<i64>,
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    pub job_id: Option<JobId>,
    pub status: Option<String>,
    pub kind: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

/// The answer of a channel test.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TestOutcome {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The `test` event recording it.
    pub event_id: i64,
}

fn origin_only(target: &str) -> String {
    match url::Url::parse(target) {
        Ok(url) => format!("{}/…", url.origin().ascii_serialization()),
        Err(_) => "…".into(),
    }
}

fn channel_view(row: alert_channel::AlertChannel, full: bool) -> ChannelView {
    let target = if full || row.kind != ChannelKind::Webhook {
        row.target
    } else {
        origin_only(&row.target)
    };
    ChannelView {
        id: row.id,
        name: row.name,
        kind: row.kind.to_string(),
        format: row.format.map(|f| f.to_string()),
        target,
        has_secret: row.secret.is_some(),
        enabled: row.enabled,
        created_ms: row.created_ms,
        updated_ms: row.updated_ms,
    }
}

pub fn event_view(row: alert_event::AlertEvent) -> EventView {
    EventView {
        id: row.id,
        kind: row.kind.to_string(),
        job_id: row.job_id,
        group_id: row.group_id,
        run_id: row.run_id,
        channel_id: row.channel_id,
        title: row.title,
        body: row.body,
        status: row.status.to_string(),
        attempts: row.attempts,
        next_attempt_ms: row.next_attempt_ms,
        last_error: row.last_error,
        created_ms: row.created_ms,
        sent_ms: row.sent_ms,
    }
}

/// The stored columns of `spec`; `old_secret` is what `SecretChange::Keep` keeps.
fn fields(
    spec: &ChannelSpec,
    old_secret: Option<String>,
    now: i64,
) -> alert_channel::ChannelFields {
    let takes_secret = spec.format.is_some_and(WebhookFormat::takes_secret);
    let secret = match &spec.secret {
        SecretChange::Keep if takes_secret => old_secret,
        SecretChange::Set(s) => Some(s.clone()),
        SecretChange::Keep | SecretChange::Clear => None,
    };
    alert_channel::ChannelFields {
        name: spec.name.clone(),
        kind: spec.kind,
        format: spec.format,
        target: spec.target.clone(),
        secret,
        enabled: spec.enabled,
        updated_ms: now,
    }
}

fn name_taken(
    conn: &mut crate::db::AnyConnection,
    name: &str,
    id: Option<ChannelId>,
) -> Result<(), Error> {
    if let Some(other) = alert_channel::find_by_name(conn, name)?
        && Some(other.id) != id
    {
        return Err(Error::conflict(
            "name",
            format!("an alert channel named `{name}` already exists"),
        ));
    }
    Ok(())
}

/// Every channel. Any signed-in role may read them (operators pick channels for their jobs);
/// only admins see webhook URLs in full.
pub async fn list_channels(state: &AppState, actor: &Actor) -> Result<Vec<ChannelView>, Error> {
    let full = actor.is_admin();
    let rows = state.db.run(alert_channel::list).await?;
    Ok(rows.into_iter().map(|r| channel_view(r, full)).collect())
}

pub async fn get_channel(
    state: &AppState,
    actor: &Actor,
    id: ChannelId,
) -> Result<ChannelView, Error> {
    let full = actor.is_admin();
    let row = state
        .db
        .run(move |conn| alert_channel::get(conn, id))
        .await?;
    Ok(channel_view(row, full))
}

pub async fn create_channel(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    spec: ChannelSpec,
) -> Result<ChannelView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            name_taken(conn, &spec.name, None)?;
            let id = alert_channel::insert(
                conn,
                &alert_channel::NewChannel {
                    fields: fields(&spec, None, now),
                    created_ms: now,
                },
            )?;
            let created = channel_view(alert_channel::get(conn, id)?, true);
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("alert_channel.create", "alert_channel", id).after(&created)?,
            )?;
            Ok(created)
        })
        .await
}

pub async fn update_channel(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: ChannelId,
    spec: ChannelSpec,
) -> Result<ChannelView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let row = alert_channel::get(conn, id)?;
            name_taken(conn, &spec.name, Some(id))?;
            let changed = fields(&spec, row.secret.clone(), now);
            let before = channel_view(row, true);
            alert_channel::update(conn, id, &changed)?;
            let after = channel_view(alert_channel::get(conn, id)?, true);
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("alert_channel.update", "alert_channel", id)
                    .before(&before)?
                    .after(&after)?,
            )?;
            Ok(after)
        })
        .await
}

/// Deletes a channel no job names; its unsent events are given up.
pub async fn delete_channel(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: ChannelId,
) -> Result<(), Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let row = alert_channel::get(conn, id)?;
            let users: JobIds = job::alert_channel_lists(conn)?
                .into_iter()
                .filter(|(_, list)| list.contains(&id))
                .map(|(job_id, _)| job_id)
                .collect::<Vec<_>>()
                .into();
            if !users.is_empty() {
                return Err(Error::Conflict {
                    field: None,
                    message: format!(
                        "alert channel {id} is used by job(s) {}; remove it there first",
                        users.to_text()
                    ),
                });
            }
            alert_event::fail_unsent_of_channel(conn, id, "the alert channel was deleted")?;
            let before = channel_view(row, true);
            alert_channel::delete(conn, id)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("alert_channel.delete", "alert_channel", id).before(&before)?,
            )
        })
        .await
}

/// Sends a test message through the channel now (even a disabled one) and records it as a
/// `test` event with its outcome.
pub async fn test_channel(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: ChannelId,
) -> Result<TestOutcome, Error> {
    let channel = state
        .db
        .run(move |conn| alert_channel::get(conn, id))
        .await?;
    let started = state.clock.now_ms();
    let (title, body) = crate::domain::alert::test_texts(&channel.name, started);
    let message = alert::Outgoing {
        kind: AlertKind::Test.as_str().into(),
        title: title.clone(),
        text: body.clone(),
        job_id: None,
        run_id: None,
        group_id: None,
        status: AlertKind::Test.as_str().into(),
        url: None,
    };
    let outcome = alert::send(&state.alerts, &channel, &message, started).await;
    let error = outcome.err().map(|e| e.message().to_owned());
    state
        .metrics
        .alert_deliveries
        .inc(if error.is_none() { "sent" } else { "failed" });
    let now = state.clock.now_ms();
    let actor = actor.clone();
    let recorded_error = error.clone();
    let event_id = state
        .db
        .transaction(move |conn| {
            let status = if recorded_error.is_none() {
                EventStatus::Sent
            } else {
                EventStatus::Failed
            };
            let event_id = alert_event::insert(
                conn,
                &alert_event::NewEvent {
                    kind: AlertKind::Test,
                    job_id: None,
                    group_id: None,
                    run_id: None,
                    channel_id: id,
                    dedupe_key: format!("test:channel:{id}"),
                    title: title.clone(),
                    body: body.clone(),
                    status,
                    attempts: 1,
                    next_attempt_ms: started,
                    last_error: recorded_error.clone(),
                    created_ms: started,
                    sent_ms: recorded_error.is_none().then_some(now),
                },
            )?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("alert_channel.test", "alert_channel", id).after(
                    &serde_json::json!({"ok": recorded_error.is_none(), "error": recorded_error, "event_id": event_id}),
                )?,
            )?;
            Ok(event_id)
        })
        .await?;
    Ok(TestOutcome {
        ok: error.is_none(),
        error,
        event_id,
    })
}

/// Alert events, newest first; non-admins see those of their groups.
pub async fn list_events(
    state: &AppState,
    actor: &Actor,
    query: EventQuery,
) -> Result<Paged<EventView>, Error> {
    let page = Page::new(query.limit, query.offset)?;
    if let Some(status) = &query.status {
        status
            .parse::<EventStatus>()
            .map_err(|e| Error::invalid("status", e))?;
    }
    if let Some(kind) = &query.kind {
        kind.parse::<AlertKind>()
            .map_err(|e| Error::invalid("kind", e))?;
    }
    let filter = alert_event::EventFilter {
        visible_groups: actor.visible_groups(),
        job_id: query.job_id,
        status: query.status,
        kind: query.kind,
    };
    state
        .db
        .run(move |conn| {
            Ok(Paged {
                items: alert_event::list(conn, &filter, page)?
                    .into_iter()
                    .map(event_view)
                    .collect(),
                total: alert_event::count(conn, &filter)?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}
