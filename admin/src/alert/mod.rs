//! Alerts: the outbox writers (called inside the transaction that makes a run final, or that
//! records a group losing its last agent) and the delivery worker that sends what they wrote.
//!
//! Invariant: an alert event exists iff the final status (or the group's transition) committed:
//! both are written in one transaction. Delivery happens afterwards, at least once per event
//! and by one admin at a time: a worker claims an event with a compare-and-set on its status
//! (`pending` → `sending`) and ends the claim with another (`sending` → `sent`/`pending`/`failed`).

pub mod email;
pub mod outbox;
pub mod webhook;

use std::time::Duration;

use actix_web::web;

use crate::db::alert_channel;
use crate::db::alert_channel::AlertChannel;
use crate::db::alert_event::{self, AlertEvent};
use crate::domain::alert::{ChannelKind, WebhookFormat, retry_at, run_link};
use crate::error::Error;
use crate::state::AppState;
use crate::worker::Worker;

pub use outbox::{Alerts, Outbox};

pub use webhook::Outgoing;

/// Without a wake-up, the worker looks for due events this often (retries come due by time).
const POLL_EVERY: Duration = Duration::from_secs(3);
/// Events claimed per pass.
const BATCH: i64 = 50;
/// A claim older than this lost its admin (a send takes at most ~30 s): the event goes back.
pub const STUCK_AFTER_MS: i64 = 120_000;

/// Why a send did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Worth another attempt later (network, receiver error).
    Retry(String),
    /// Will not get better by waiting (no SMTP configured, channel gone or disabled).
    Permanent(String),
}

impl SendError {
    pub fn message(&self) -> &str {
        match self {
            SendError::Retry(m) | SendError::Permanent(m) => m,
        }
    }
}

/// The run status an event is about, for the generic webhook's `status`.
fn status_of(kind: &str) -> String {
    match kind {
        "run_failed" => "failed".into(),
        "run_timed_out" => "timed_out".into(),
        "run_lost" => "lost".into(),
        other => other.into(),
    }
}

/// The message of a stored event as the channels send it.
pub fn outgoing(alerts: &Alerts, event: &AlertEvent) -> Outgoing {
    Outgoing {
        kind: event.kind.to_string(),
        title: event.title.clone(),
        text: event.body.clone(),
        job_id: event.job_id,
        run_id: event.run_id,
        group_id: event.group_id,
        status: status_of(event.kind.as_str()),
        url: event
            .run_id
            .and_then(|id| run_link(alerts.public_url.as_deref(), id)),
    }
}

/// Sends `message` through `channel` now.
///
/// # Errors
/// [`SendError`] saying why, fit for `last_error`.
pub async fn send(
    alerts: &Alerts,
    channel: &AlertChannel,
    message: &Outgoing,
    now_ms: i64,
) -> Result<(), SendError> {
    match channel.kind {
        ChannelKind::Email => {
            let Some(mailer) = &alerts.mailer else {
                return Err(SendError::Permanent(
                    "no SMTP server configured (config key `smtp_host`); email channels cannot send"
                        .into(),
                ));
            };
            mailer
                .send(&channel.target, &message.title, &message.text)
                .await
                .map_err(SendError::Retry)
        }
        ChannelKind::Webhook => {
            let format = channel.format.unwrap_or(WebhookFormat::Generic);
            webhook::send(
                &alerts.http,
                format,
                &channel.target,
                channel.secret.as_deref(),
                message,
                now_ms,
            )
            .await
            .map_err(SendError::Retry)
        }
    }
}

/// What one delivery pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub sent: usize,
    pub retrying: usize,
    pub failed: usize,
    pub requeued: usize,
}

async fn send_claimed(
    state: &AppState,
    event: &AlertEvent,
    channel: Option<&AlertChannel>,
) -> Result<(), SendError> {
    let Some(channel) = channel else {
        return Err(SendError::Permanent(format!(
            "alert channel {} no longer exists",
            event.channel_id
        )));
    };
    if !channel.enabled {
        return Err(SendError::Permanent(format!(
            "alert channel `{}` is disabled",
            channel.name
        )));
    }
    let message = outgoing(&state.alerts, event);
    send(&state.alerts, channel, &message, state.clock.now_ms()).await
}

/// One pass: returns stuck claims to pending, claims the due events, sends them, stores the
/// outcomes. Every admin may run it at once; each event is claimed by one of them.
///
/// # Errors
/// Database errors (claimed events whose outcome could not be stored are requeued later).
pub async fn deliver_due(state: &AppState) -> Result<Delivered, Error> {
    let now = state.clock.now_ms();
    let (requeued, claimed) = state
        .db
        .run(move |conn| {
            let requeued = alert_event::requeue_stuck(conn, now - STUCK_AFTER_MS)?;
            let mut claimed = Vec::new();
            for id in alert_event::due_ids(conn, now, BATCH)? {
                if alert_event::claim(conn, id, now)? {
                    let event = alert_event::get(conn, id)?;
                    let channel = alert_channel::find(conn, event.channel_id)?;
                    claimed.push((event, channel));
                }
            }
            Ok((requeued, claimed))
        })
        .await?;
    let mut done = Delivered {
        requeued,
        ..Delivered::default()
    };
    if claimed.is_empty() {
        return Ok(done);
    }
    let sends = claimed.iter().map(|(event, channel)| async move {
        (
            event.id,
            event.attempts,
            send_claimed(state, event, channel.as_ref()).await,
        )
    });
    let outcomes = futures_util::future::join_all(sends).await;
    let finished = state.clock.now_ms();
    for (id, _, outcome) in &outcomes {
        match outcome {
            Ok(()) => {
                done.sent += 1;
                state.metrics.alert_deliveries.inc("sent");
            }
            Err(e) => {
                tracing::warn!(event_id = *id, error = e.message(), "Alert not delivered");
            }
        }
    }
    let stored = state
        .db
        .transaction(move |conn| {
            let mut ends = Vec::new();
            for (id, attempts, outcome) in &outcomes {
                let (id, attempts) = (*id, *attempts);
                match outcome {
                    Ok(()) => {
                        alert_event::mark_sent(conn, id, attempts, finished)?;
                    }
                    Err(e) => {
                        let retry = match e {
                            SendError::Retry(_) => retry_at(attempts, finished),
                            SendError::Permanent(_) => None,
                        };
                        alert_event::mark_unsent(conn, id, attempts, retry, e.message())?;
                        ends.push(retry.is_some());
                    }
                }
            }
            Ok(ends)
        })
        .await?;
    for retrying in stored {
        if retrying {
            done.retrying += 1;
            state.metrics.alert_deliveries.inc("retry");
        } else {
            done.failed += 1;
            state.metrics.alert_deliveries.inc("failed");
        }
    }
    Ok(done)
}

/// The delivery worker: a pass when woken (an event was written) and every few seconds.
pub async fn run(state: web::Data<AppState>, mut worker: Worker) {
    loop {
        let wait = match deliver_due(&state).await {
            Ok(done) => {
                worker.succeeded();
                if done != Delivered::default() {
                    tracing::debug!(?done, "Alert delivery pass");
                }
                if done.sent + done.retrying + done.failed > 0 {
                    // A full batch may have left more due events: look again at once.
                    Duration::ZERO
                } else {
                    POLL_EVERY
                }
            }
            Err(e) => worker.failed(&e).max(POLL_EVERY),
        };
        if !worker.idle(wait, Some(&state.alerts.wake)).await {
            return;
        }
    }
}
