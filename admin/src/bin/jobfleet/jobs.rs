//! `jobfleet jobs …`: list, show, trigger, enable, disable, delete; jobs named by id or name.

use serde_json::{Value, json};

use crate::api::Api;
use crate::failure::Failure;
use crate::table::{self, Column};
use crate::{Output, fleet, runs};

const COLUMNS: &[Column] = &[
    Column {
        heading: "ID",
        cell: |j| table::text(&j["id"]),
    },
    Column {
        heading: "GROUP",
        cell: |j| table::text(&j["group_id"]),
    },
    Column {
        heading: "NAME",
        cell: |j| table::text(&j["name"]),
    },
    Column {
        heading: "ENABLED",
        cell: |j| table::text(&j["enabled"]),
    },
    Column {
        heading: "SCHEDULE",
        cell: schedule,
    },
    Column {
        heading: "HANDLER",
        cell: |j| table::text(&j["handler"]["type"]),
    },
    Column {
        heading: "NEXT FIRE (UTC)",
        cell: |j| table::time(&j["next_fire_ms"]),
    },
];

fn schedule(job: &Value) -> String {
    let s = &job["schedule"];
    match s["type"].as_str() {
        Some("cron") => format!("cron {}", table::text(&s["expr"])),
        Some("fixed_rate") => format!("every {}s", table::text(&s["interval_s"])),
        Some("once") => format!("once {}", table::time(&s["at_ms"])),
        Some(other) => other.to_owned(),
        None => "-".into(),
    }
}

pub struct ListFilter {
    pub group: Option<String>,
    pub enabled: Option<bool>,
    pub query: Option<String>,
    pub tag: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

pub async fn list(api: &Api, out: Output, filter: ListFilter) -> Result<(), Failure> {
    let mut query = vec![
        ("limit", filter.limit.to_string()),
        ("offset", filter.offset.to_string()),
    ];
    if let Some(group) = &filter.group {
        query.push(("group_id", fleet::group_id(api, group).await?.to_string()));
    }
    if let Some(enabled) = filter.enabled {
        query.push(("enabled", enabled.to_string()));
    }
    if let Some(q) = filter.query {
        query.push(("q", q));
    }
    if let Some(tag) = filter.tag {
        query.push(("tag", tag));
    }
    let page = api.get("/jobs", &query).await?;
    out.page(&page, COLUMNS);
    Ok(())
}

/// A job's id from an id or a name; a name must be unique among the jobs this login sees
/// (`group` narrows it).
pub async fn job_id(api: &Api, job: &str, group: Option<&str>) -> Result<i64, Failure> {
    if let Ok(id) = job.parse::<i64>() {
        return Ok(id);
    }
    let mut query = vec![("q", job.to_owned()), ("limit", "500".to_owned())];
    if let Some(group) = group {
        query.push(("group_id", fleet::group_id(api, group).await?.to_string()));
    }
    let page = api.get("/jobs", &query).await?;
    let found: Vec<&Value> = page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|j| j["name"].as_str() == Some(job))
        .collect();
    match found.as_slice() {
        [one] => one["id"]
            .as_i64()
            .ok_or_else(|| Failure::Other("the admin's job has no id".into())),
        [] => Err(Failure::NotFound(format!("no job named `{job}`"))),
        several => Err(Failure::Usage(format!(
            "{} jobs are named `{job}` (ids {}): give the id, or the group with --group",
            several.len(),
            several
                .iter()
                .map(|j| table::text(&j["id"]))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub async fn get(api: &Api, out: Output, id: i64) -> Result<(), Failure> {
    let job = api.get(&format!("/jobs/{id}"), &[]).await?;
    out.object(&job, || {
        table::fields(
            &job,
            &[
                ("id", |j| table::text(&j["id"])),
                ("name", |j| table::text(&j["name"])),
                ("group", |j| table::text(&j["group_id"])),
                ("description", |j| table::text(&j["description"])),
                ("tags", |j| {
                    j["tags"]
                        .as_array()
                        .map(|t| t.iter().map(table::text).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default()
                }),
                ("enabled", |j| table::text(&j["enabled"])),
                ("schedule", schedule),
                ("timezone", |j| table::text(&j["schedule"]["timezone"])),
                ("handler", |j| table::text(&j["handler"]["type"])),
                ("command", |j| table::text(&j["handler"]["command"])),
                ("params", |j| table::text(&j["params"])),
                ("routing", |j| table::text(&j["routing"])),
                ("timeout", |j| format!("{}s", table::text(&j["timeout_s"]))),
                ("retries", |j| table::text(&j["retry"]["count"])),
                ("concurrency", |j| table::text(&j["concurrency"])),
                ("misfire", |j| table::text(&j["misfire"])),
                ("next fire (UTC)", |j| table::time(&j["next_fire_ms"])),
                ("updated (UTC)", |j| table::time(&j["updated_ms"])),
            ],
        )
    });
    Ok(())
}

pub async fn set_enabled(api: &Api, out: Output, id: i64, enabled: bool) -> Result<(), Failure> {
    let verb = if enabled { "enable" } else { "disable" };
    let job = api.post(&format!("/jobs/{id}/{verb}"), None).await?;
    out.object(&job, || {
        format!("job {id} ({}) {verb}d\n", table::text(&job["name"]))
    });
    Ok(())
}

pub async fn delete(api: &Api, out: Output, id: i64) -> Result<(), Failure> {
    api.delete(&format!("/jobs/{id}")).await?;
    out.object(&json!({"id": id, "deleted": true}), || {
        format!("job {id} deleted\n")
    });
    Ok(())
}

pub struct Trigger {
    pub params: Option<String>,
    pub agent: Option<String>,
    /// Wait for the run to end, at most this many seconds.
    pub wait_s: Option<u64>,
}

impl Trigger {
    /// The API's `TriggerRequest`.
    pub fn body(&self) -> Value {
        let mut body = serde_json::Map::new();
        if let Some(params) = &self.params {
            body.insert("params".into(), Value::String(params.clone()));
        }
        if let Some(agent) = &self.agent {
            body.insert("address".into(), Value::String(agent.clone()));
        }
        Value::Object(body)
    }
}

pub async fn trigger(api: &Api, out: Output, id: i64, how: Trigger) -> Result<(), Failure> {
    let run = api
        .post(&format!("/jobs/{id}/trigger"), Some(how.body()))
        .await?;
    started(api, out, &run, how.wait_s).await
}

/// Shows a run just started, or waits for it to end.
pub async fn started(
    api: &Api,
    out: Output,
    run: &Value,
    wait_s: Option<u64>,
) -> Result<(), Failure> {
    let run_id = run["id"]
        .as_i64()
        .ok_or_else(|| Failure::Other("the admin's answer has no run id".into()))?;
    match wait_s {
        None => {
            out.object(run, || {
                format!(
                    "run {run_id} (job {}, attempt {}): {} on {}\n",
                    table::text(&run["job_id"]),
                    table::text(&run["attempt"]),
                    table::text(&run["status"]),
                    table::text(&run["agent"])
                )
            });
            Ok(())
        }
        Some(secs) => runs::wait(api, out, run_id, secs).await,
    }
}

/// Which jobs a bulk action takes: ids, or the job list's filters.
pub struct BulkChoice {
    pub ids: Vec<i64>,
    pub group: Option<String>,
    pub tag: Option<String>,
    pub query: Option<String>,
    pub enabled: Option<bool>,
}

const BULK_COLUMNS: &[Column] = &[
    Column {
        heading: "ID",
        cell: |i| table::text(&i["id"]),
    },
    Column {
        heading: "NAME",
        cell: |i| table::text(&i["name"]),
    },
    Column {
        heading: "OK",
        cell: |i| table::text(&i["ok"]),
    },
    Column {
        heading: "RUN",
        cell: |i| table::text(&i["run_id"]),
    },
    Column {
        heading: "ERROR",
        cell: |i| table::text(&i["error"]["message"]),
    },
];

/// `jobs bulk ACTION`: exit 0 when every chosen job was done, 5 when any was refused.
pub async fn bulk(
    api: &Api,
    out: Output,
    action: &str,
    choice: BulkChoice,
    params: Option<String>,
) -> Result<(), Failure> {
    let mut body = json!({"action": action});
    if choice.ids.is_empty() {
        let mut filter = serde_json::Map::new();
        if let Some(group) = &choice.group {
            filter.insert("group_id".into(), json!(fleet::group_id(api, group).await?));
        }
        if let Some(tag) = choice.tag {
            filter.insert("tag".into(), json!(tag));
        }
        if let Some(q) = choice.query {
            filter.insert("q".into(), json!(q));
        }
        if let Some(enabled) = choice.enabled {
            filter.insert("enabled".into(), json!(enabled));
        }
        if filter.is_empty() {
            return Err(Failure::Usage(
                "which jobs? give ids, or --group, --tag, --name-contains or --enabled".into(),
            ));
        }
        body["filter"] = Value::Object(filter);
    } else {
        body["ids"] = json!(choice.ids);
    }
    if let Some(params) = params {
        body["params"] = json!(params);
    }
    let outcome = api.post("/jobs/bulk", Some(body)).await?;
    let items = outcome["items"].as_array().map_or(&[][..], Vec::as_slice);
    out.list(&outcome, items, BULK_COLUMNS);
    if out == Output::Table {
        eprintln!(
            "{action}: {} of {} done",
            table::text(&outcome["done"]),
            table::text(&outcome["matched"])
        );
    }
    match outcome["failed"].as_i64() {
        Some(0) => Ok(()),
        Some(n) => Err(Failure::Refused(format!("refused for {n} job(s)"))),
        None => Err(Failure::Other("the admin's answer has no counts".into())),
    }
}
