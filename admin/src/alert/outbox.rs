//! The alerting parts of the app state and the outbox writers. A writer records alert events
//! inside the caller's transaction; the delivery worker (`alert::run`) sends them afterwards.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::Config;
use crate::db::alert_channel::AlertChannel;
use crate::db::alert_event::{self, NewEvent};
use crate::db::job::Job;
use crate::db::job_run::JobRun;
use crate::db::{AnyConnection, alert_channel, executor_group, job};
use crate::domain::alert::{
    AlertKind, EventStatus, RunFacts, group_dedupe_key, group_texts, kind_for_status,
    run_dedupe_key, run_texts,
};
use crate::domain::ids::{ChannelId, GroupId, JobId, RunId};
use crate::error::Error;

const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The alerting parts of the app state: the worker's wake-up, the HTTP client, the mailer.
pub struct Alerts {
    pub(super) wake: Arc<Notify>,
    pub(super) http: reqwest::Client,
    pub(super) mailer: Option<super::email::Mailer>,
    quiet_ms: i64,
    pub(super) public_url: Option<String>,
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
            .map(super::email::Mailer::new)
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

/// What an event is about.
#[derive(Debug, Clone, Copy)]
struct Subject {
    job_id: Option<JobId>,
    group_id: GroupId,
    run_id: Option<RunId>,
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

    /// Writes one event for one channel, due now.
    #[allow(clippy::too_many_arguments)]
    fn raise(
        &self,
        conn: &mut AnyConnection,
        kind: AlertKind,
        subject: Subject,
        channel_id: ChannelId,
        dedupe_key: String,
        (title, body): (&str, &str),
        status: EventStatus,
        now_ms: i64,
    ) -> Result<(), Error> {
        self.insert(
            conn,
            &NewEvent {
                kind,
                job_id: subject.job_id,
                group_id: Some(subject.group_id),
                run_id: subject.run_id,
                channel_id,
                dedupe_key,
                title: title.to_owned(),
                body: body.to_owned(),
                status,
                attempts: 0,
                next_attempt_ms: now_ms,
                last_error: None,
                created_ms: now_ms,
                sent_ms: None,
            },
        )
    }

    fn insert(&self, conn: &mut AnyConnection, event: &NewEvent) -> Result<(), Error> {
        alert_event::insert(conn, event)?;
        if event.status == EventStatus::Pending {
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
        let Some(kind) = kind_for_status(run.status) else {
            return Ok(0);
        };
        let wanted = match kind {
            AlertKind::RunFailed => owner.alert_on_failure,
            AlertKind::RunTimedOut => owner.alert_on_timeout,
            AlertKind::RunLost => owner.alert_on_lost,
            AlertKind::GroupNoAgent | AlertKind::WorkflowFailed | AlertKind::Test => false,
        };
        let channel_ids = &owner.alert_channels;
        if !wanted || channel_ids.is_empty() {
            return Ok(0);
        }
        let channels: Vec<AlertChannel> = alert_channel::by_ids(conn, channel_ids)?
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
            status: run.status,
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
            let subject = Subject {
                job_id: Some(owner.id),
                group_id: owner.group_id,
                run_id: Some(run.id),
            };
            self.raise(
                conn,
                kind,
                subject,
                channel.id,
                key,
                (&title, &body),
                status,
                now_ms,
            )?;
        }
        Ok(channels.len())
    }

    /// Records `workflow_failed` for a workflow run that has just ended failed or timed out,
    /// one event per enabled channel of its workflow, in the transaction that ended it.
    ///
    /// # Errors
    /// Database errors.
    pub fn workflow_final(
        &self,
        conn: &mut AnyConnection,
        run: &crate::db::workflow_run::WorkflowRun,
        owner: &crate::db::workflow::Workflow,
        failed_nodes: &[String],
        now_ms: i64,
    ) -> Result<usize, Error> {
        if !owner.alert_on_failure || owner.alert_channels.is_empty() {
            return Ok(0);
        }
        let channels: Vec<AlertChannel> = alert_channel::by_ids(conn, &owner.alert_channels)?
            .into_iter()
            .filter(|c| c.enabled)
            .collect();
        let group = executor_group::find(conn, owner.group_id)?
            .map_or_else(|| owner.group_id.to_string(), |g| g.app_name);
        let facts = crate::domain::alert::WorkflowFacts {
            workflow_id: owner.id,
            name: &owner.name,
            group: &group,
            run_id: run.id,
            status: run.status.as_str(),
            message: &run.message,
            failed_nodes,
            finished_ms: run.finished_ms,
        };
        let (title, body) =
            crate::domain::alert::workflow_texts(&facts, self.public_url.as_deref());
        for channel in &channels {
            let key = crate::domain::alert::workflow_dedupe_key(owner.id, channel.id);
            let status = self.status_for(conn, &key, now_ms)?;
            self.raise(
                conn,
                AlertKind::WorkflowFailed,
                Subject {
                    job_id: None,
                    group_id: owner.group_id,
                    run_id: None,
                },
                channel.id,
                key,
                (&title, &body),
                status,
                now_ms,
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
        group_id: GroupId,
        app_name: &str,
        now_ms: i64,
    ) -> Result<usize, Error> {
        let jobs = job::no_agent_alerted(conn, group_id)?;
        if jobs.is_empty() {
            return Ok(0);
        }
        let names: Vec<(JobId, String)> = jobs.iter().map(|j| (j.id, j.name.clone())).collect();
        let (title, body) = group_texts(group_id, app_name, &names, now_ms);
        let mut raised: HashSet<String> = HashSet::new();
        let mut written = 0;
        for owner in &jobs {
            for channel in alert_channel::by_ids(conn, &owner.alert_channels)?
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
                let subject = Subject {
                    job_id: Some(owner.id),
                    group_id,
                    run_id: None,
                };
                self.raise(
                    conn,
                    AlertKind::GroupNoAgent,
                    subject,
                    channel.id,
                    key,
                    (&title, &body),
                    status,
                    now_ms,
                )?;
                written += 1;
            }
        }
        Ok(written)
    }
}
