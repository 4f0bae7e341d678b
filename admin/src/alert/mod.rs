//! Alerts: the outbox writers (called inside the transaction that makes a run final, or that
//! records a group losing its last agent) and the delivery worker that sends what they wrote.
//!
//! Invariant: an alert event exists iff the final status (or the group's transition) committed:
//! both are written in one transaction. Delivery happens afterwards, at least once per event
//! and by one admin at a time: a worker claims an event with a compare-and-set on its status
//! (`pending` → `sending`) and ends the claim with another (`sending` → `sent`/`pending`/`failed`).

pub mod email;
pub mod webhook;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::web;
use tokio::sync::Notify;

use crate::config::Config;
use crate::db::alert_channel::AlertChannel;
use crate::db::alert_event::{self, AlertEvent, NewEvent};
use crate::db::job::Job;
use crate::db::job_run::JobRun;
use crate::db::{AnyConnection, alert_channel, executor_group, job};
use crate::domain::alert::{
    AlertKind, ChannelKind, EventStatus, RunFacts, WebhookFormat, group_dedupe_key, group_texts,
    kind_for_status, retry_at, run_dedupe_key, run_link, run_texts,
};
use crate::error::Error;
use crate::service::parse_id_list;
use crate::startup::AppState;

pub use webhook::Outgoing;

/// Without a wake-up, the worker looks for due events this often (retries come due by time).
const POLL_EVERY: Duration = Duration::from_secs(3);
/// Events claimed per pass.
const BATCH: i64 = 50;
/// A claim older than this lost its admin (a send takes at most ~30 s): the event goes back.
pub const STUCK_AFTER_MS: i64 = 120_000;
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The alerting parts of the app state: the worker's wake-up, the HTTP client, the mailer.
pub struct Alerts {
    wake: Arc<Notify>,
    http: reqwest::Client,
    mailer: Option<email::Mailer>,
    quiet_ms: i64,
    public_url: Option<String>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts")
            .field("mailer", &self.mailer)
            .field("quiet_ms", &self.quiet_ms)
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

impl Alerts {
    /// # Errors
    /// An HTTP client or SMTP transport that cannot be built (TLS set-up).
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(HTTP_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| anyhow::anyhow!("HTTP client for webhooks: {e}"))?;
        let mailer = config
            .smtp
            .as_ref()
            .map(email::Mailer::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("config key `smtp_host`: {e}"))?;
        Ok(Self {
            wake: Arc::new(Notify::new()),
            http,
            mailer,
            quiet_ms: config.alert_quiet_window_ms,
            public_url: config.public_url.clone(),
        })
    }

    /// A writer for one transaction; call [`Outbox::committed`] after the commit.
    pub fn outbox(&self) -> Outbox {
        Outbox {
            quiet_ms: self.quiet_ms,
            public_url: self.public_url.clone(),
            written: Arc::new(AtomicBool::new(false)),
            wake: self.wake.clone(),
        }
    }

    /// Makes the delivery worker look for due events now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn has_smtp(&self) -> bool {
        self.mailer.is_some()
    }
}

/// Writes alert events inside a caller's transaction and wakes the worker once it committed.
#[derive(Debug, Clone)]
pub struct Outbox {
    quiet_ms: i64,
    public_url: Option<String>,
    written: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl Outbox {
    /// After the transaction committed: wakes the worker if something is waiting to be sent.
    pub fn committed(&self) {
        if self.written.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// `pending`, or `suppressed` when the same key went out within the quiet window.
    fn status_for(
        &self,
        conn: &mut AnyConnection,
        key: &str,
        now_ms: i64,
    ) -> Result<EventStatus, Error> {
        if self.quiet_ms > 0 && alert_event::recently_raised(conn, key, now_ms - self.quiet_ms)? {
            Ok(EventStatus::Suppressed)
        } else {
            Ok(EventStatus::Pending)
        }
    }

    fn insert(&self, conn: &mut AnyConnection, event: &NewEvent) -> Result<(), Error> {
        alert_event::insert(conn, event)?;
        if event.status == EventStatus::Pending.as_str() {
            self.written.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Records the alerts of a run that has just become final, one per enabled channel of its
    /// job, if the job asked for this outcome. The caller has decided that no retry follows.
    ///
    /// # Errors
    /// Database errors (the caller's transaction rolls back with the final status).
    pub fn run_final(
        &self,
        conn: &mut AnyConnection,
        run: &JobRun,
        owner: &Job,
        now_ms: i64,
    ) -> Result<usize, Error> {
        let Some(kind) = kind_for_status(&run.status) else {
            return Ok(0);
        };
        let wanted = match kind {
            AlertKind::RunFailed => owner.alert_on_failure,
            AlertKind::RunTimedOut => owner.alert_on_timeout,
            AlertKind::RunLost => owner.alert_on_lost,
            AlertKind::GroupNoAgent | AlertKind::Test => false,
        };
        let channel_ids = parse_id_list(&owner.alert_channels);
        if !wanted || channel_ids.is_empty() {
            return Ok(0);
        }
        let channels: Vec<AlertChannel> = alert_channel::by_ids(conn, &channel_ids)?
            .into_iter()
            .filter(|c| c.enabled)
            .collect();
        if channels.is_empty() {
            return Ok(0);
        }
        let group = executor_group::find(conn, owner.group_id)?
            .map_or_else(|| owner.group_id.to_string(), |g| g.app_name);
        let facts = RunFacts {
            kind,
            job_id: owner.id,
            job_name: owner.name.clone(),
            group,
            run_id: run.id,
            attempt: run.attempt,
            attempts_allowed: owner.retry_count + 1,
            status: run.status.clone(),
            agent: run.agent_address.clone(),
            exit_code: run.exit_code,
            signal: run.term_signal,
            reason: run.handle_msg.clone().or_else(|| run.trigger_msg.clone()),
            finished_ms: run.finished_ms,
        };
        let (title, body) = run_texts(&facts, self.public_url.as_deref());
        for channel in &channels {
            let key = run_dedupe_key(kind, owner.id, channel.id);
            let status = self.status_for(conn, &key, now_ms)?;
            self.insert(
                conn,
                &NewEvent {
                    kind: kind.as_str().into(),
                    job_id: Some(owner.id),
                    group_id: Some(owner.group_id),
                    run_id: Some(run.id),
                    channel_id: channel.id,
                    dedupe_key: key,
                    title: title.clone(),
                    body: body.clone(),
                    status: status.as_str().into(),
                    attempts: 0,
                    next_attempt_ms: now_ms,
                    last_error: None,
                    created_ms: now_ms,
                    sent_ms: None,
                },
            )?;
        }
        Ok(channels.len())
    }

    /// Records `group_no_agent` for every job of the group that asked for it: one event per
    /// job and channel, of which one per channel is sent (the rest are `suppressed`); the text
    /// names every affected job. Called by the admin whose conditional update moved the group
    /// to `none`, in that transaction.
    ///
    /// # Errors
    /// Database errors.
    pub fn group_lost_agents(
        &self,
        conn: &mut AnyConnection,
        group_id: i64,
        app_name: &str,
        now_ms: i64,
    ) -> Result<usize, Error> {
        let jobs = job::no_agent_alerted(conn, group_id)?;
        if jobs.is_empty() {
            return Ok(0);
        }
        let names: Vec<(i64, String)> = jobs.iter().map(|j| (j.id, j.name.clone())).collect();
        let (title, body) = group_texts(group_id, app_name, &names, now_ms);
        let mut raised: HashSet<String> = HashSet::new();
        let mut written = 0;
        for owner in &jobs {
            let ids = parse_id_list(&owner.alert_channels);
            for channel in alert_channel::by_ids(conn, &ids)?
                .into_iter()
                .filter(|c| c.enabled)
            {
                let key = group_dedupe_key(group_id, channel.id);
                let status = if raised.contains(&key) {
                    EventStatus::Suppressed
                } else {
                    self.status_for(conn, &key, now_ms)?
                };
                raised.insert(key.clone());
                self.insert(
                    conn,
                    &NewEvent {
                        kind: AlertKind::GroupNoAgent.as_str().into(),
                        job_id: Some(owner.id),
                        group_id: Some(group_id),
                        run_id: None,
                        channel_id: channel.id,
                        dedupe_key: key,
                        title: title.clone(),
                        body: body.clone(),
                        status: status.as_str().into(),
                        attempts: 0,
                        next_attempt_ms: now_ms,
                        last_error: None,
                        created_ms: now_ms,
                        sent_ms: None,
                    },
                )?;
                written += 1;
            }
        }
        Ok(written)
    }
}

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
        kind: event.kind.clone(),
        title: event.title.clone(),
        text: event.body.clone(),
        job_id: event.job_id,
        run_id: event.run_id,
        group_id: event.group_id,
        status: status_of(&event.kind),
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
    let kind: ChannelKind = channel
        .kind
        .parse()
        .map_err(|e: String| SendError::Permanent(format!("stored channel kind: {e}")))?;
    match kind {
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
            let format: WebhookFormat = channel
                .format
                .as_deref()
                .unwrap_or("generic")
                .parse()
                .map_err(|e: String| SendError::Permanent(format!("stored format: {e}")))?;
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
            for (id, attempts, outcome) in outcomes {
                match outcome {
                    Ok(()) => {
                        alert_event::mark_sent(conn, id, attempts, finished)?;
                    }
                    Err(e) => {
                        let retry = match &e {
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
pub async fn run(state: web::Data<AppState>) {
    loop {
        match deliver_due(&state).await {
            Ok(done) if done == Delivered::default() => {}
            Ok(done) => {
                tracing::debug!(?done, "Alert delivery pass");
                if done.sent + done.retrying + done.failed > 0 {
                    // A full batch may have left more due events: look again at once.
                    continue;
                }
            }
            Err(e) => tracing::warn!(error = %e, "Alert delivery pass failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(POLL_EVERY) => {}
            () = state.alerts.wake.notified() => {}
        }
    }
}
