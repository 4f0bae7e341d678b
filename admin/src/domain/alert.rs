//! Alerting rules with no I/O: the names of alert kinds, channel kinds, webhook formats and
//! event statuses; a channel as submitted (`ChannelInput`) and as accepted (`ChannelSpec`);
//! which run outcome pages; the delivery backoff; the dedupe keys; the texts.

use serde::Deserialize;

use super::job::check_name;
use super::string_enum;
use crate::domain::ids::{ChannelId, GroupId, JobId, RunId, WorkflowId, WorkflowRunId};
use crate::domain::policy::RunStatus;
use crate::error::Error;

string_enum! {
    /// Why an alert exists. `test` is a message sent from `POST /alert-channels/{id}/test`.
    pub enum AlertKind {
        RunFailed => "run_failed",
        RunTimedOut => "run_timed_out",
        RunLost => "run_lost",
        GroupNoAgent => "group_no_agent",
        WorkflowFailed => "workflow_failed",
        Test => "test",
    }
}

string_enum! {
    pub enum ChannelKind {
        Email => "email",
        Webhook => "webhook",
    }
}

string_enum! {
    /// The body shape a webhook receiver expects.
    pub enum WebhookFormat {
        Generic => "generic",
        Dingtalk => "dingtalk",
        Feishu => "feishu",
        Slack => "slack",
        Wecom => "wecom",
    }
}

impl WebhookFormat {
    /// Whether a channel of this format uses a secret: the robots that sign (DingTalk,
    /// Feishu) and the generic webhook's HMAC. Slack and WeCom carry their key in the URL.
    pub fn takes_secret(self) -> bool {
        matches!(self, Self::Generic | Self::Dingtalk | Self::Feishu)
    }
}

string_enum! {
    /// `suppressed`: recorded but not sent, because the same alert went out within the quiet
    /// window. `sending`: claimed by one admin's delivery worker.
    pub enum EventStatus {
        Pending => "pending",
        Sending => "sending",
        Sent => "sent",
        Failed => "failed",
        Suppressed => "suppressed",
    }
}

string_enum! {
    /// How the SMTP connection is secured (config key `smtp_tls`).
    pub enum SmtpTls {
        None => "none",
        Starttls => "starttls",
        Tls => "tls",
    }
}

/// Delivery attempts before an event is given up as `failed`.
pub const MAX_ATTEMPTS: i32 = 5;
/// The wait after the first failed attempt; each further one waits three times longer.
pub const FIRST_RETRY_MS: i64 = 10_000;
pub const MAX_RECIPIENTS: usize = 50;
pub const MAX_URL_CHARS: usize = 2000;
pub const MAX_SECRET_CHARS: usize = 200;

/// When to try again after failed attempt number `attempts` (1-based), or `None` to give up.
pub fn retry_at(attempts: i32, now_ms: i64) -> Option<i64> {
    if attempts >= MAX_ATTEMPTS {
        return None;
    }
    let exponent = u32::try_from(attempts.max(1) - 1).unwrap_or(0);
    Some(now_ms + FIRST_RETRY_MS * 3_i64.pow(exponent))
}

/// The alert a final run status raises, if the job asked for it.
pub fn kind_for_status(status: RunStatus) -> Option<AlertKind> {
    match status {
        RunStatus::Failed => Some(AlertKind::RunFailed),
        RunStatus::TimedOut => Some(AlertKind::RunTimedOut),
        RunStatus::Lost => Some(AlertKind::RunLost),
        _ => None,
    }
}

/// Alerts with the same key within the quiet window are recorded as `suppressed`.
pub fn run_dedupe_key(kind: AlertKind, job_id: JobId, channel_id: ChannelId) -> String {
    format!("{kind}:job:{job_id}:channel:{channel_id}")
}

pub fn workflow_dedupe_key(workflow_id: WorkflowId, channel_id: ChannelId) -> String {
    format!(
        "{}:workflow:{workflow_id}:channel:{channel_id}",
        AlertKind::WorkflowFailed
    )
}

/// What a `workflow_failed` alert says.
pub struct WorkflowFacts<'a> {
    pub workflow_id: WorkflowId,
    pub name: &'a str,
    pub group: &'a str,
    pub run_id: WorkflowRunId,
    pub status: &'a str,
    pub message: &'a str,
    /// Keys of the nodes that failed.
    pub failed_nodes: &'a [String],
    pub finished_ms: Option<i64>,
}

/// Title and plain-text body of a `workflow_failed` alert.
pub fn workflow_texts(facts: &WorkflowFacts<'_>, public_url: Option<&str>) -> (String, String) {
    let title = clip(
        &format!(
            "[jobfleet] workflow {}: {} (workflow run {})",
            facts.status, facts.name, facts.run_id
        ),
        300,
    );
    let mut body = format!(
        "Workflow: {} (id {}, group {})\nWorkflow run: {}\nStatus: {}\n",
        facts.name, facts.workflow_id, facts.group, facts.run_id, facts.status
    );
    if !facts.failed_nodes.is_empty() {
        body.push_str(&format!(
            "Failed nodes: {}\n",
            clip(&facts.failed_nodes.join(", "), 1000)
        ));
    }
    if !facts.message.trim().is_empty() {
        body.push_str(&format!("Reason: {}\n", clip(facts.message.trim(), 1000)));
    }
    if let Some(at) = facts.finished_ms {
        body.push_str(&format!("Finished: {}\n", utc(at)));
    }
    if let Some(base) = public_url {
        body.push_str(&format!(
            "Link: {}/api/v1/workflow-runs/{}\n",
            base.trim_end_matches('/'),
            facts.run_id
        ));
    }
    (title, body)
}

pub fn group_dedupe_key(group_id: GroupId, channel_id: ChannelId) -> String {
    format!(
        "{}:group:{group_id}:channel:{channel_id}",
        AlertKind::GroupNoAgent
    )
}

/// A channel as submitted. On update a missing `secret` keeps the stored one and `""` clears it:
/// secrets are never read back, so a client cannot send them again.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelInput {
    pub name: String,
    /// `email` or `webhook`.
    #[schema(example = "webhook")]
    pub kind: String,
    /// Webhooks: `generic` (default), `dingtalk`, `feishu`, `slack` or `wecom`.
    pub format: Option<String>,
    /// Email: comma-separated recipient addresses. Webhook: the http(s) URL.
    pub target: String,
    /// DingTalk/Feishu: the robot's signing secret. Generic: the HMAC-SHA256 key of the
    /// `X-Jobfleet-Signature` header.
    pub secret: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// What to do with the stored secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretChange {
    Keep,
    Clear,
    Set(String),
}

/// A channel that passed every rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    pub name: String,
    pub kind: ChannelKind,
    pub format: Option<WebhookFormat>,
    /// Normalised: recipients joined by `,`, or the parsed URL.
    pub target: String,
    pub secret: SecretChange,
    pub enabled: bool,
}

/// Checks and normalises a comma-separated recipient list.
///
/// # Errors
/// `Invalid` on `target` for an empty list, a malformed address or too many.
pub fn check_recipients(text: &str) -> Result<String, Error> {
    let list: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if list.is_empty() {
        return Err(Error::invalid(
            "target",
            "an email channel needs at least one recipient address",
        ));
    }
    if list.len() > MAX_RECIPIENTS {
        return Err(Error::invalid(
            "target",
            format!("at most {MAX_RECIPIENTS} recipients"),
        ));
    }
    for address in &list {
        address.parse::<lettre::Address>().map_err(|e| {
            Error::invalid(
                "target",
                format!(
                    "`{}` is not an email address: {e}",
                    address.chars().take(100).collect::<String>()
                ),
            )
        })?;
    }
    Ok(list.join(","))
}

/// Checks a webhook URL: http(s), with a host, no credentials in it.
///
/// # Errors
/// `Invalid` on `field`.
pub fn check_http_url(field: &str, text: &str) -> Result<String, Error> {
    let text = text.trim();
    if text.chars().count() > MAX_URL_CHARS {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_URL_CHARS} characters"),
        ));
    }
    let parsed = url::Url::parse(text).map_err(|e| {
        Error::invalid(
            field,
            format!(
                "`{}` is not a URL: {e}",
                text.chars().take(100).collect::<String>()
            ),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(
            field,
            "must be an http:// or https:// URL with a host",
        ));
    }
    Ok(parsed.to_string())
}

impl ChannelInput {
    /// # Errors
    /// The first rule broken, naming the field.
    pub fn validate(self) -> Result<ChannelSpec, Error> {
        let name = check_name("name", &self.name, 100)?;
        let kind: ChannelKind = self
            .kind
            .parse()
            .map_err(|e: String| Error::invalid("kind", e))?;
        let format = match (kind, self.format.as_deref()) {
            (ChannelKind::Email, None) => None,
            (ChannelKind::Email, Some(_)) => {
                return Err(Error::invalid(
                    "format",
                    "is only used by webhook channels; leave it out",
                ));
            }
            (ChannelKind::Webhook, None) => Some(WebhookFormat::Generic),
            (ChannelKind::Webhook, Some(text)) => Some(
                text.parse()
                    .map_err(|e: String| Error::invalid("format", e))?,
            ),
        };
        let target = match kind {
            ChannelKind::Email => check_recipients(&self.target)?,
            ChannelKind::Webhook => check_http_url("target", &self.target)?,
        };
        let secret = match self.secret {
            None => SecretChange::Keep,
            Some(s) if s.is_empty() => SecretChange::Clear,
            Some(s) => {
                if !format.is_some_and(WebhookFormat::takes_secret) {
                    return Err(Error::invalid(
                        "secret",
                        format!(
                            "is not used by {} channels; leave it out",
                            format.map_or(kind.as_str(), WebhookFormat::as_str)
                        ),
                    ));
                }
                if s.chars().count() > MAX_SECRET_CHARS
                    || s.chars().any(|c| c.is_control() || c.is_whitespace())
                {
                    return Err(Error::invalid(
                        "secret",
                        format!(
                            "must be at most {MAX_SECRET_CHARS} characters without spaces or control characters"
                        ),
                    ));
                }
                SecretChange::Set(s)
            }
        };
        Ok(ChannelSpec {
            name,
            kind,
            format,
            target,
            secret,
            enabled: self.enabled.unwrap_or(true),
        })
    }
}

/// What an alert about a run says; rendered once, when the event is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub kind: AlertKind,
    pub job_id: JobId,
    pub job_name: String,
    pub group: String,
    pub run_id: RunId,
    pub attempt: i32,
    pub attempts_allowed: i32,
    pub status: RunStatus,
    pub agent: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The agent's message or the admin's reason (trigger refused, agent dead, timeout).
    pub reason: Option<String>,
    pub finished_ms: Option<i64>,
}

/// The console link of a run, when `public_url` is configured.
pub fn run_link(public_url: Option<&str>, run_id: RunId) -> Option<String> {
    public_url.map(|base| format!("{}/console/runs/{run_id}", base.trim_end_matches('/')))
}

fn clip(text: &str, max_chars: usize) -> String {
    let mut out: String = text.chars().take(max_chars).collect();
    if text.chars().count() > max_chars {
        out.push('…');
    }
    out
}

fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

fn headline(kind: AlertKind) -> &'static str {
    match kind {
        AlertKind::RunFailed => "run failed",
        AlertKind::RunTimedOut => "run timed out",
        AlertKind::RunLost => "run lost",
        AlertKind::GroupNoAgent => "no live agent",
        AlertKind::WorkflowFailed => "workflow failed",
        AlertKind::Test => "test message",
    }
}

/// Title and plain-text body of a run alert.
pub fn run_texts(facts: &RunFacts, public_url: Option<&str>) -> (String, String) {
    let title = clip(
        &format!(
            "[jobfleet] {}: {} (run {})",
            headline(facts.kind),
            facts.job_name,
            facts.run_id
        ),
        300,
    );
    let mut body = format!(
        "Job: {} (id {}, group {})\nRun: {} (attempt {} of {})\nStatus: {}\n",
        facts.job_name,
        facts.job_id,
        facts.group,
        facts.run_id,
        facts.attempt,
        facts.attempts_allowed,
        facts.status
    );
    body.push_str(&format!(
        "Agent: {}\n",
        facts.agent.as_deref().unwrap_or("none")
    ));
    if let Some(code) = facts.exit_code {
        body.push_str(&format!("Exit code: {code}\n"));
    }
    if let Some(signal) = facts.signal {
        body.push_str(&format!("Signal: {signal}\n"));
    }
    if let Some(reason) = facts.reason.as_deref().filter(|r| !r.trim().is_empty()) {
        body.push_str(&format!("Reason: {}\n", clip(reason.trim(), 1000)));
    }
    if let Some(at) = facts.finished_ms {
        body.push_str(&format!("Finished: {}\n", utc(at)));
    }
    if let Some(link) = run_link(public_url, facts.run_id) {
        body.push_str(&format!("Link: {link}\n"));
    }
    (title, body)
}

/// Title and body of a `group_no_agent` alert naming the jobs that can no longer run.
pub fn group_texts(
    group_id: GroupId,
    app_name: &str,
    jobs: &[(JobId, String)],
    at_ms: i64,
) -> (String, String) {
    let title = clip(
        &format!("[jobfleet] no live agent in group {app_name}"),
        300,
    );
    let mut body = format!(
        "Group: {app_name} (id {group_id})\nThe last live agent of this group stopped sending heartbeats at about {}; its jobs cannot run until an agent registers again.\nJobs:\n",
        utc(at_ms)
    );
    for (id, name) in jobs.iter().take(50) {
        body.push_str(&format!("- {name} (id {id})\n"));
    }
    if jobs.len() > 50 {
        body.push_str(&format!("… and {} more\n", jobs.len() - 50));
    }
    (title, body)
}

/// Title and body of a channel test message.
pub fn test_texts(channel_name: &str, at_ms: i64) -> (String, String) {
    (
        format!("[jobfleet] test message for channel {channel_name}"),
        format!(
            "This is a test message from jobfleet, sent at {} to check the alert channel `{channel_name}`.\n",
            utc(at_ms)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(kind: &str, format: Option<&str>, target: &str, secret: Option<&str>) -> ChannelInput {
        ChannelInput {
            name: "ops".into(),
            kind: kind.into(),
            format: format.map(str::to_owned),
            target: target.into(),
            secret: secret.map(str::to_owned),
            enabled: None,
        }
    }

    fn field_of(result: Result<ChannelSpec, Error>) -> String {
        result.unwrap_err().field().unwrap_or_default().to_owned()
    }

    #[test]
    fn channels_are_validated_and_normalised() {
        let email = input("email", None, " a@example.com , b@example.org,", None)
            .validate()
            .unwrap();
        assert_eq!(email.target, "a@example.com,b@example.org");
        assert_eq!(email.format, None);
        assert!(email.enabled);
        let hook = input("webhook", None, "https://hooks.example.com/x", Some("k"))
            .validate()
            .unwrap();
        assert_eq!(hook.format, Some(WebhookFormat::Generic));
        assert_eq!(hook.secret, SecretChange::Set("k".into()));
        for (bad, field) in [
            (input("sms", None, "x", None), "kind"),
            (input("webhook", Some("teams"), "http://x/", None), "format"),
            (input("email", Some("generic"), "a@b.c", None), "format"),
            (input("email", None, " , ", None), "target"),
            (input("email", None, "not-an-address", None), "target"),
            (input("webhook", None, "ftp://x/", None), "target"),
            (input("webhook", None, "nope", None), "target"),
            (
                input("webhook", Some("slack"), "http://x/", Some("s")),
                "secret",
            ),
            (
                input("webhook", Some("wecom"), "http://x/", Some("s")),
                "secret",
            ),
            (input("email", None, "a@b.c", Some("s")), "secret"),
            (input("webhook", None, "http://x/", Some("a b")), "secret"),
        ] {
            assert_eq!(field_of(bad.validate()), field);
        }
        let mut unnamed = input("email", None, "a@b.c", None);
        unnamed.name = " ".into();
        assert_eq!(field_of(unnamed.validate()), "name");
    }

    #[test]
    fn delivery_backs_off_then_gives_up() {
        assert_eq!(retry_at(1, 0), Some(10_000));
        assert_eq!(retry_at(2, 0), Some(30_000));
        assert_eq!(retry_at(3, 0), Some(90_000));
        assert_eq!(retry_at(4, 0), Some(270_000));
        assert_eq!(retry_at(5, 0), None);
    }

    #[test]
    fn texts_name_the_job_run_and_link() {
        let facts = RunFacts {
            kind: AlertKind::RunFailed,
            job_id: JobId(7),
            job_name: "nightly".into(),
            group: "billing".into(),
            run_id: RunId(42),
            attempt: 2,
            attempts_allowed: 2,
            status: RunStatus::Failed,
            agent: Some("http://10.0.0.5:9999/".into()),
            exit_code: Some(3),
            signal: None,
            reason: Some("exit status 3".into()),
            finished_ms: Some(0),
        };
        let (title, body) = run_texts(&facts, Some("https://jobs.example.com/"));
        assert_eq!(title, "[jobfleet] run failed: nightly (run 42)");
        for part in [
            "Job: nightly (id 7, group billing)",
            "Run: 42 (attempt 2 of 2)",
            "Status: failed",
            "Agent: http://10.0.0.5:9999/",
            "Exit code: 3",
            "Reason: exit status 3",
            "Link: https://jobs.example.com/console/runs/42",
        ] {
            assert!(body.contains(part), "{part} missing from {body}");
        }
        assert!(!run_texts(&facts, None).1.contains("Link"));
        assert_eq!(kind_for_status(RunStatus::Killed), None);
        assert_eq!(kind_for_status(RunStatus::Lost), Some(AlertKind::RunLost));
    }
}
