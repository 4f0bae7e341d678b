//! A job as the user describes it (`JobInput`, straight from JSON or a form) and as the
//! admin accepts it (`JobSpec`, every rule checked). Checks that need the database (the group
//! exists, children exist, no cycle) are the service's.

use std::collections::BTreeMap;

use chrono_tz::Tz;
use serde::Deserialize;

use super::ids::{ChannelId, JobId};
use super::policy::{BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire};
use super::routing::Routing;
use super::schedule::{MAX_INTERVAL_S, Schedule, ScheduleType, parse_cron, parse_timezone};
use crate::domain::ids::GroupId;
use crate::error::Error;
use jobfleet_agent::protocol::HttpRequest;

pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_DESCRIPTION_CHARS: usize = 2000;
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
pub const MAX_SOURCE_BYTES: usize = 512 * 1024;
pub const MAX_PARAMS_BYTES: usize = 64 * 1024;
pub const MAX_TIMEOUT_S: i64 = 7 * 24 * 3600;
pub const MAX_RETRIES: i32 = 10;
pub const MAX_BACKOFF_S: i64 = 24 * 3600;
pub const MAX_CHILDREN: usize = 50;

/// A schedule as submitted, for a job or a workflow (and in a workflow document).
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleInput {
    #[serde(rename = "type")]
    #[schema(value_type = String, example = "cron")]
    pub kind: ScheduleType,
    /// Cron expression (Quartz with seconds, 7-field with year, or 5-field crontab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<i64>,
    /// IANA time zone; default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandlerInput {
    #[serde(rename = "type")]
    #[schema(value_type = String, example = "shell")]
    pub kind: HandlerType,
    /// `shell`: the command line, run by `/bin/sh -c`.
    pub command: Option<String>,
    /// `script`: the script source.
    pub source: Option<String>,
    /// `script`: bash (default), sh, python3, node, php, perl, pwsh.
    pub interpreter: Option<String>,
    /// `bean`: the handler name inside an XXL-Job executor.
    pub name: Option<String>,
    /// `script`: a note stored with the new script version.
    pub note: Option<String>,
    /// `http`: GET (default), POST, PUT, PATCH, DELETE, HEAD or OPTIONS.
    #[schema(example = "POST")]
    pub method: Option<String>,
    /// `http`: an absolute http:// or https:// URL, with no credentials in it.
    #[schema(example = "https://example.com/hook")]
    pub url: Option<String>,
    /// `http`: request headers, name to value.
    pub headers: Option<BTreeMap<String, String>>,
    /// `http`: the request body, text up to 1 MiB.
    pub body: Option<String>,
    /// `http`: how long to wait for the answer, in milliseconds; the job's `timeout_s` bounds
    /// it too.
    pub timeout_ms: Option<i64>,
    /// `http`: the answers that count as success: a code (`204`), codes and ranges as text
    /// (`"200-299,304"`) or a list of either (`[200, "300-399"]`); default `200-299`.
    #[schema(value_type = Option<Object>, example = json!("200-299"))]
    pub expect_status: Option<serde_json::Value>,
}

/// The fields only an http handler uses (`refuse_unused`; the OpenAPI document's check).
pub const HTTP_FIELDS: &[&str] = &[
    "method",
    "url",
    "headers",
    "body",
    "timeout_ms",
    "expect_status",
];

#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryInput {
    pub count: Option<i32>,
    pub backoff_s: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU cores (0.5 = half a core).
    pub cpu: Option<f64>,
    pub memory_mb: Option<i64>,
    pub pids: Option<i64>,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertInput {
    pub on_failure: Option<bool>,
    pub on_timeout: Option<bool>,
    pub on_lost: Option<bool>,
    /// Alert when the job's group loses its last live agent; default false.
    pub on_no_agent: Option<bool>,
    pub channels: Option<Vec<ChannelId>>,
}

/// A job as submitted. Only `group_id`, `name`, `schedule` and `handler` are required.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobInput {
    pub group_id: GroupId,
    pub name: String,
    pub description: Option<String>,
    pub schedule: ScheduleInput,
    pub handler: HandlerInput,
    pub params: Option<String>,
    #[schema(value_type = Option<String>, example = "first")]
    pub routing: Option<Routing>,
    /// Default true.
    pub enabled: Option<bool>,
    /// Seconds; 0 = no timeout.
    pub timeout_s: Option<i64>,
    pub retry: Option<RetryInput>,
    pub limits: Option<Limits>,
    #[schema(value_type = Option<String>, example = "do_nothing")]
    pub misfire: Option<Misfire>,
    #[schema(value_type = Option<String>, example = "allow")]
    pub concurrency: Option<Concurrency>,
    #[schema(value_type = Option<String>, example = "serial")]
    pub block_strategy: Option<BlockStrategy>,
    pub children: Option<Vec<JobId>>,
    pub alert: Option<AlertInput>,
    /// Labels the agent that runs it must carry, e.g. `{"zone": "a", "gpu": "true"}`; routing
    /// considers only the group's agents that carry every one. Default none.
    #[schema(value_type = Option<Object>)]
    pub agent_labels: Option<jobfleet_agent::protocol::labels::Labels>,
    /// Free tags to find and select jobs by (`billing`, `team:data`): at most 20, each 1 to 63
    /// of letters, digits and `-_.:/`; kept lower-cased and sorted. Default none.
    pub tags: Option<Vec<String>>,
    /// A scheduled slot not started within this many seconds of its time has misfired and
    /// follows `misfire` (Kubernetes' `startingDeadlineSeconds`); default the admin's
    /// `misfire_threshold_ms`.
    pub start_deadline_s: Option<i64>,
    /// Succeeded runs kept (the newest); default all, until `retention_days`.
    pub keep_succeeded: Option<i32>,
    /// Finished runs that did not succeed kept (the newest); default all, until `retention_days`.
    pub keep_failed: Option<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Handler {
    Shell {
        command: String,
    },
    Script {
        source: String,
        interpreter: Interpreter,
        note: String,
    },
    Bean {
        name: String,
    },
    Http {
        request: HttpRequest,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertSettings {
    pub on_failure: bool,
    pub on_timeout: bool,
    pub on_lost: bool,
    pub on_no_agent: bool,
    pub channels: Vec<ChannelId>,
}

/// A job that passed every rule that needs no database.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    pub schedule: Schedule,
    pub timezone: Tz,
    pub handler: Handler,
    pub params: String,
    pub routing: Routing,
    pub enabled: bool,
    pub timeout_s: i64,
    pub retry_count: i32,
    pub retry_backoff_s: i64,
    pub limits: Limits,
    pub misfire: Misfire,
    pub concurrency: Concurrency,
    pub block_strategy: BlockStrategy,
    pub children: Vec<JobId>,
    pub alert: AlertSettings,
    pub agent_labels: jobfleet_agent::protocol::labels::Labels,
    /// Sorted, no duplicates.
    pub tags: Vec<String>,
    pub start_deadline_s: Option<i64>,
    pub keep_succeeded: Option<i32>,
    pub keep_failed: Option<i32>,
}

pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_CHARS: usize = 63;
pub const MAX_KEPT_RUNS: i32 = 1_000_000;

/// A tag's rules (ASCII, so a tag is the same in every collation and fits a stored list).
///
/// # Errors
/// `invalid_field` on `field` naming the rule broken.
pub fn check_tag(field: &str, tag: &str) -> Result<String, Error> {
    let tag = tag.trim();
    if tag.is_empty() || tag.len() > MAX_TAG_CHARS {
        return Err(Error::invalid(
            field,
            format!("a tag is 1 to {MAX_TAG_CHARS} characters"),
        ));
    }
    if let Some(bad) = tag
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:/".contains(*c)))
    {
        return Err(Error::invalid(
            field,
            format!(
                "tag `{tag}` must not contain `{}`; use letters, digits and - _ . : /",
                bad.escape_default()
            ),
        ));
    }
    // Both databases compare tags without case (`LIKE`): one spelling is kept.
    Ok(tag.to_ascii_lowercase())
}

/// Checks and sorts a job's tags.
///
/// # Errors
/// `invalid_field` on `tags`.
pub fn check_tags(tags: Vec<String>) -> Result<Vec<String>, Error> {
    if tags.len() > MAX_TAGS {
        return Err(Error::invalid("tags", format!("at most {MAX_TAGS} tags")));
    }
    let mut checked = tags
        .iter()
        .map(|t| check_tag("tags", t))
        .collect::<Result<Vec<_>, _>>()?;
    checked.sort();
    if let Some(pair) = checked.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid(
            "tags",
            format!("tag `{}` is listed twice", pair[0]),
        ));
    }
    Ok(checked)
}

/// Tags as stored: `,a,b,` (delimited on both sides, so `LIKE '%,a,%'` finds exactly one tag),
/// or empty for none.
pub fn format_tags(tags: &[String]) -> String {
    if tags.is_empty() {
        String::new()
    } else {
        format!(",{},", tags.join(","))
    }
}

/// The stored form back as a list.
pub fn parse_tags(stored: &str) -> Vec<String> {
    stored
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Names identify things in logs, URLs and shell environments: letters (any script), digits,
/// spaces and a few separators. Markup and quoting characters are refused outright.
pub fn check_name(field: &str, value: &str, max_chars: usize) -> Result<String, Error> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if trimmed.chars().count() > max_chars {
        return Err(Error::invalid(
            field,
            format!("must be at most {max_chars} characters"),
        ));
    }
    if let Some(bad) = trimmed
        .chars()
        .find(|c| !(c.is_alphanumeric() || " -_.:/()#@+,".contains(*c)))
    {
        return Err(Error::invalid(
            field,
            format!(
                "must not contain `{}`; use letters, digits, spaces and - _ . : / ( ) # @ + ,",
                bad.escape_default()
            ),
        ));
    }
    Ok(trimmed.to_owned())
}

/// Free text: any characters except NUL, bounded.
pub fn check_text(field: &str, value: &str, max_bytes: usize) -> Result<String, Error> {
    if value.len() > max_bytes {
        return Err(Error::invalid(
            field,
            format!("must be at most {max_bytes} bytes"),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(field, "must not contain NUL characters"));
    }
    Ok(value.to_owned())
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T, Error> {
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("must be between {min} and {max} (got {value})"),
        ));
    }
    Ok(value)
}

impl ScheduleInput {
    /// # Errors
    /// The first rule broken, naming `schedule.*`.
    pub fn validate(&self) -> Result<(Schedule, Tz), Error> {
        let tz = parse_timezone(
            "schedule.timezone",
            self.timezone.as_deref().unwrap_or("UTC"),
        )?;
        let unexpected = |field: &str, what: &str| {
            Error::invalid(
                format!("schedule.{field}"),
                format!("is not used by schedule type `{what}`; leave it out"),
            )
        };
        let schedule = match self.kind {
            ScheduleType::None => Schedule::None,
            ScheduleType::Cron => {
                let expr = self
                    .expr
                    .as_deref()
                    .ok_or_else(|| Error::invalid("schedule.expr", "is required for cron"))?;
                if expr.len() > 255 {
                    return Err(Error::invalid(
                        "schedule.expr",
                        "must be at most 255 characters",
                    ));
                }
                Schedule::Cron(Box::new(parse_cron("schedule.expr", expr)?))
            }
            ScheduleType::FixedRate => {
                let interval = self.interval_s.ok_or_else(|| {
                    Error::invalid("schedule.interval_s", "is required for fixed_rate")
                })?;
                Schedule::FixedRate {
                    interval_s: in_range("schedule.interval_s", interval, 1, MAX_INTERVAL_S)?,
                }
            }
            ScheduleType::Once => {
                let at = self
                    .at_ms
                    .ok_or_else(|| Error::invalid("schedule.at_ms", "is required for once"))?;
                Schedule::Once {
                    at_ms: in_range("schedule.at_ms", at, 0, 7_258_118_400_000)?,
                }
            }
        };
        let kind = self.kind.as_str();
        if self.expr.is_some() && self.kind != ScheduleType::Cron {
            return Err(unexpected("expr", kind));
        }
        if self.interval_s.is_some() && self.kind != ScheduleType::FixedRate {
            return Err(unexpected("interval_s", kind));
        }
        if self.at_ms.is_some() && self.kind != ScheduleType::Once {
            return Err(unexpected("at_ms", kind));
        }
        Ok((schedule, tz))
    }
}

impl HandlerInput {
    /// Refuses a field the handler's type does not use: it would be dropped without a word.
    fn refuse_unused(&self) -> Result<(), Error> {
        let used: &[&str] = match self.kind {
            HandlerType::Shell => &["command"],
            HandlerType::Script => &["source", "interpreter", "note"],
            HandlerType::Bean => &["name"],
            HandlerType::Http => HTTP_FIELDS,
        };
        let given = [
            ("command", self.command.is_some()),
            ("source", self.source.is_some()),
            ("interpreter", self.interpreter.is_some()),
            ("name", self.name.is_some()),
            ("note", self.note.is_some()),
            ("method", self.method.is_some()),
            ("url", self.url.is_some()),
            ("headers", self.headers.is_some()),
            ("body", self.body.is_some()),
            ("timeout_ms", self.timeout_ms.is_some()),
            ("expect_status", self.expect_status.is_some()),
        ];
        match given
            .iter()
            .find(|(field, set)| *set && !used.contains(field))
        {
            Some((field, _)) => Err(Error::invalid(
                format!("handler.{field}"),
                format!("is not used by handler type `{}`; leave it out", self.kind),
            )),
            None => Ok(()),
        }
    }

    /// # Errors
    /// The first rule broken, naming `handler.*`.
    pub fn validate(&self) -> Result<Handler, Error> {
        self.refuse_unused()?;
        match self.kind {
            HandlerType::Shell => {
                let command = self
                    .command
                    .as_deref()
                    .ok_or_else(|| Error::invalid("handler.command", "is required for shell"))?;
                if command.trim().is_empty() {
                    return Err(Error::invalid("handler.command", "must not be empty"));
                }
                Ok(Handler::Shell {
                    command: check_text("handler.command", command, MAX_COMMAND_BYTES)?,
                })
            }
            HandlerType::Script => {
                let source = self
                    .source
                    .as_deref()
                    .ok_or_else(|| Error::invalid("handler.source", "is required for script"))?;
                if source.trim().is_empty() {
                    return Err(Error::invalid("handler.source", "must not be empty"));
                }
                let interpreter = match self.interpreter.as_deref() {
                    None => Interpreter::Bash,
                    Some(name) => name
                        .parse()
                        .map_err(|e: String| Error::invalid("handler.interpreter", e))?,
                };
                Ok(Handler::Script {
                    source: check_text("handler.source", source, MAX_SOURCE_BYTES)?,
                    interpreter,
                    note: check_text("handler.note", self.note.as_deref().unwrap_or(""), 500)?,
                })
            }
            HandlerType::Bean => {
                let name = self
                    .name
                    .as_deref()
                    .ok_or_else(|| Error::invalid("handler.name", "is required for bean"))?;
                Ok(Handler::Bean {
                    name: check_name("handler.name", name, 200)?,
                })
            }
            HandlerType::Http => Ok(Handler::Http {
                request: self.http_request()?,
            }),
        }
    }
}

impl HandlerInput {
    /// An http handler's request, checked by the rules the agent applies too.
    fn http_request(&self) -> Result<HttpRequest, Error> {
        let url = self
            .url
            .clone()
            .ok_or_else(|| Error::invalid("handler.url", "is required for http"))?;
        let timeout_ms = match self.timeout_ms {
            None => None,
            Some(ms) => Some(u64::try_from(ms).map_err(|_| {
                Error::invalid(
                    "handler.timeout_ms",
                    "must be a positive number of milliseconds",
                )
            })?),
        };
        let statuses = match &self.expect_status {
            None => String::new(),
            Some(expect) => expect_status_text(expect)?,
        };
        let request = HttpRequest {
            method: self.method.clone().unwrap_or_else(|| "GET".to_owned()),
            url,
            headers: self.headers.clone().unwrap_or_default(),
            body: self.body.clone(),
            timeout_ms,
            statuses,
        };
        let (request, _) = request.normalized().map_err(|e| {
            // The wire calls the success statuses `statuses`; the API, `expect_status`.
            let field = match e.field {
                "statuses" => "expect_status",
                field => field,
            };
            Error::invalid(format!("handler.{field}"), e.message)
        })?;
        Ok(request)
    }
}

/// `expect_status` as the text of codes and ranges the agent parses (`200-299,304`).
fn expect_status_text(expect: &serde_json::Value) -> Result<String, Error> {
    use serde_json::Value;
    let wrong = || {
        Error::invalid(
            "handler.expect_status",
            "must be a status code, text of codes and ranges (\"200-299,304\") or a list of either",
        )
    };
    let one = |item: &Value| match item {
        Value::Number(code) => Ok(code.to_string()),
        // Empty text would silently mean the default: say so instead (leave the field out).
        Value::String(text) if text.trim().is_empty() => Err(Error::invalid(
            "handler.expect_status",
            "is empty; leave it out for the default 200-299",
        )),
        Value::String(text) => Ok(text.clone()),
        _ => Err(wrong()),
    };
    match expect {
        Value::Array(items) if !items.is_empty() => Ok(items
            .iter()
            .map(one)
            .collect::<Result<Vec<_>, _>>()?
            .join(",")),
        Value::Array(_) => Err(wrong()),
        item => one(item),
    }
}

impl Limits {
    /// # Errors
    /// A limit out of its range, naming `limits.*`.
    pub fn validate(self) -> Result<Limits, Error> {
        if let Some(cpu) = self.cpu
            && (!cpu.is_finite() || !(0.01..=1024.0).contains(&cpu))
        {
            return Err(Error::invalid(
                "limits.cpu",
                format!("must be between 0.01 and 1024 cores (got {cpu})"),
            ));
        }
        if let Some(mb) = self.memory_mb {
            in_range("limits.memory_mb", mb, 4, 4 * 1024 * 1024)?;
        }
        if let Some(pids) = self.pids {
            in_range("limits.pids", pids, 1, 4_194_304)?;
        }
        Ok(self)
    }
}

impl JobInput {
    /// Applies defaults and every rule that needs no database.
    ///
    /// # Errors
    /// The first rule broken, with the field it concerns.
    pub fn validate(self) -> Result<JobSpec, Error> {
        let name = check_name("name", &self.name, MAX_NAME_CHARS)?;
        let description = check_text(
            "description",
            self.description.as_deref().unwrap_or(""),
            MAX_DESCRIPTION_CHARS,
        )?;
        if description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(Error::invalid(
                "description",
                format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
            ));
        }
        let (schedule, timezone) = self.schedule.validate()?;
        let handler = self.handler.validate()?;
        let params = check_text(
            "params",
            self.params.as_deref().unwrap_or(""),
            MAX_PARAMS_BYTES,
        )?;
        let timeout_s = in_range("timeout_s", self.timeout_s.unwrap_or(0), 0, MAX_TIMEOUT_S)?;
        let retry = self.retry.unwrap_or_default();
        let retry_count = in_range("retry.count", retry.count.unwrap_or(0), 0, MAX_RETRIES)?;
        let retry_backoff_s = in_range(
            "retry.backoff_s",
            retry.backoff_s.unwrap_or(10),
            0,
            MAX_BACKOFF_S,
        )?;
        let limits = self.limits.unwrap_or_default().validate()?;
        if matches!(handler, Handler::Http { .. }) && limits != Limits::default() {
            // The request runs inside the agent: there is no process to hold to them.
            return Err(Error::invalid(
                "limits",
                "do not apply to an http job (it runs no process); leave them out",
            ));
        }
        let children = self.children.unwrap_or_default();
        if children.len() > MAX_CHILDREN {
            return Err(Error::invalid(
                "children",
                format!("at most {MAX_CHILDREN} child jobs"),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = children.iter().find(|id| !seen.insert(**id)) {
            return Err(Error::invalid(
                "children",
                format!("job {dup} is listed twice"),
            ));
        }
        let alert = self.alert.map_or(
            AlertSettings {
                on_failure: true,
                on_timeout: true,
                on_lost: true,
                on_no_agent: false,
                channels: Vec::new(),
            },
            |a| AlertSettings {
                on_failure: a.on_failure.unwrap_or(true),
                on_timeout: a.on_timeout.unwrap_or(true),
                on_lost: a.on_lost.unwrap_or(true),
                on_no_agent: a.on_no_agent.unwrap_or(false),
                channels: a.channels.unwrap_or_default(),
            },
        );
        if alert.channels.len() > 20 {
            return Err(Error::invalid("alert.channels", "at most 20 channels"));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = alert.channels.iter().find(|id| !seen.insert(**id)) {
            return Err(Error::invalid(
                "alert.channels",
                format!("channel {dup} is listed twice"),
            ));
        }
        let agent_labels = self.agent_labels.unwrap_or_default();
        jobfleet_agent::protocol::labels::check_labels(&agent_labels)
            .map_err(|e| Error::invalid("agent_labels", e))?;
        Ok(JobSpec {
            group_id: self.group_id,
            name,
            description,
            schedule,
            timezone,
            handler,
            params,
            routing: self.routing.unwrap_or(Routing::First),
            enabled: self.enabled.unwrap_or(true),
            timeout_s,
            retry_count,
            retry_backoff_s,
            limits,
            misfire: self.misfire.unwrap_or(Misfire::DoNothing),
            concurrency: self.concurrency.unwrap_or(Concurrency::Allow),
            block_strategy: self.block_strategy.unwrap_or(BlockStrategy::Serial),
            children,
            alert,
            agent_labels,
            tags: check_tags(self.tags.unwrap_or_default())?,
            start_deadline_s: self
                .start_deadline_s
                .map(|s| in_range("start_deadline_s", s, 1, MAX_TIMEOUT_S))
                .transpose()?,
            keep_succeeded: self
                .keep_succeeded
                .map(|n| in_range("keep_succeeded", n, 0, MAX_KEPT_RUNS))
                .transpose()?,
            keep_failed: self
                .keep_failed
                .map(|n| in_range("keep_failed", n, 0, MAX_KEPT_RUNS))
                .transpose()?,
        })
    }
}

/// Whether adding the edges `job_id -> children` to `edges` (every other job's children) makes
/// a cycle; returns the cycle's path for the error message.
pub fn find_child_cycle(
    job_id: JobId,
    children: &[JobId],
    edges: &[(JobId, Vec<JobId>)],
) -> Option<Vec<JobId>> {
    use std::collections::HashMap;
    let mut graph: HashMap<JobId, Vec<JobId>> = edges
        .iter()
        .filter(|(id, _)| *id != job_id)
        .cloned()
        .collect();
    graph.insert(job_id, children.to_vec());
    // Depth-first from the job: a path back to it is a cycle.
    let mut stack: Vec<(JobId, Vec<JobId>)> = vec![(job_id, vec![job_id])];
    let mut visited = std::collections::HashSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).map(Vec::as_slice).unwrap_or_default() {
            if *next == job_id {
                let mut cycle = path.clone();
                cycle.push(job_id);
                return Some(cycle);
            }
            if visited.insert(*next) {
                let mut longer = path.clone();
                longer.push(*next);
                stack.push((*next, longer));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(json: serde_json::Value) -> Result<JobSpec, Error> {
        serde_json::from_value::<JobInput>(json).unwrap().validate()
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "group_id": 1, "name": "nightly backup",
            "schedule": {"type": "cron", "expr": "0 0 2 * * ?", "timezone": "Europe/Berlin"},
            "handler": {"type": "shell", "command": "echo hi"}
        })
    }

    #[test]
    fn defaults_apply() {
        let spec = input(base()).unwrap();
        assert_eq!(spec.routing, Routing::First);
        assert!(spec.enabled);
        assert_eq!(
            (spec.retry_count, spec.retry_backoff_s, spec.timeout_s),
            (0, 10, 0)
        );
        assert_eq!(spec.timezone, chrono_tz::Europe::Berlin);
        assert!(spec.alert.on_failure);
    }

    #[test]
    fn each_rule_names_its_field() {
        let cases = [
            (
                "/name",
                serde_json::json!("<script>alert(1)</script>"),
                "name",
            ),
            ("/name", serde_json::json!("x'; DROP TABLE job;--"), "name"),
            ("/name", serde_json::json!("   "), "name"),
            ("/name", serde_json::json!("n".repeat(201)), "name"),
            ("/timeout_s", serde_json::json!(-1), "timeout_s"),
            ("/timeout_s", serde_json::json!(100_000_000), "timeout_s"),
            (
                "/schedule/timezone",
                serde_json::json!("Nowhere/City"),
                "schedule.timezone",
            ),
            (
                "/schedule/expr",
                serde_json::json!("0 0 25 * * ?"),
                "schedule.expr",
            ),
            ("/limits", serde_json::json!({"cpu": -1.0}), "limits.cpu"),
            (
                "/limits",
                serde_json::json!({"memory_mb": 0}),
                "limits.memory_mb",
            ),
            ("/limits", serde_json::json!({"pids": -3}), "limits.pids"),
            ("/retry", serde_json::json!({"count": 99}), "retry.count"),
            ("/children", serde_json::json!([2, 2]), "children"),
            (
                "/handler",
                serde_json::json!({"type": "shell", "command": ""}),
                "handler.command",
            ),
            (
                "/handler",
                serde_json::json!({"type": "shell", "command": "x", "source": "y"}),
                "handler.source",
            ),
            (
                "/handler",
                serde_json::json!({"type": "script", "source": "x", "interpreter": "cobol"}),
                "handler.interpreter",
            ),
            (
                "/handler",
                serde_json::json!({"type": "script"}),
                "handler.source",
            ),
            (
                "/handler",
                serde_json::json!({"type": "bean"}),
                "handler.name",
            ),
        ];
        for (pointer, value, field) in cases {
            let mut json = base();
            let mut target = &mut json;
            for part in pointer.trim_start_matches('/').split('/') {
                target = &mut target[part];
            }
            *target = value.clone();
            let err = input(json).unwrap_err();
            assert_eq!(err.field(), Some(field), "{pointer} = {value}: {err}");
        }
    }

    #[test]
    fn schedule_fields_must_match_the_type() {
        let mut json = base();
        json["schedule"] =
            serde_json::json!({"type": "fixed_rate", "interval_s": 30, "expr": "* * * * * ?"});
        assert_eq!(input(json).unwrap_err().field(), Some("schedule.expr"));
        let mut json = base();
        json["schedule"] = serde_json::json!({"type": "fixed_rate", "interval_s": 0});
        assert_eq!(
            input(json).unwrap_err().field(),
            Some("schedule.interval_s")
        );
        let mut json = base();
        json["schedule"] = serde_json::json!({"type": "once"});
        assert_eq!(input(json).unwrap_err().field(), Some("schedule.at_ms"));
    }

    #[test]
    fn unknown_fields_and_wrong_types_do_not_deserialize() {
        let mut json = base();
        json["colour"] = serde_json::json!("red");
        assert!(
            serde_json::from_value::<JobInput>(json)
                .unwrap_err()
                .to_string()
                .contains("unknown field `colour`")
        );
        let mut json = base();
        json["group_id"] = serde_json::json!("one");
        assert!(serde_json::from_value::<JobInput>(json).is_err());
    }

    #[test]
    fn child_cycles_are_found() {
        let edges = vec![(JobId(2), vec![JobId(3)]), (JobId(3), vec![JobId(4)])];
        assert_eq!(
            find_child_cycle(JobId(4), &[JobId(2)], &edges),
            Some([4, 2, 3, 4].map(JobId).to_vec())
        );
        assert_eq!(
            find_child_cycle(JobId(1), &[JobId(1)], &edges),
            Some(vec![JobId(1), JobId(1)])
        );
        assert_eq!(find_child_cycle(JobId(1), &[JobId(2)], &edges), None);
        // An edit replaces the job's old edges rather than adding to them.
        let edges = vec![(JobId(1), vec![JobId(2)]), (JobId(2), vec![JobId(3)])];
        assert_eq!(find_child_cycle(JobId(1), &[JobId(3)], &edges), None);
    }
}
