//! `jobfleet runs …`: list, show, logs (`-f` follows a live run), kill, wait.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api::Api;
use crate::failure::Failure;
use crate::table::{self, Column};
use crate::{Output, fleet, jobs};

/// How often a followed log or a waited-for run is read again.
const POLL: Duration = Duration::from_millis(500);

const COLUMNS: &[Column] = &[
    Column {
        heading: "ID",
        cell: |r| table::text(&r["id"]),
    },
    Column {
        heading: "JOB",
        cell: |r| table::text(&r["job_id"]),
    },
    Column {
        heading: "ATTEMPT",
        cell: |r| table::text(&r["attempt"]),
    },
    Column {
        heading: "KIND",
        cell: |r| table::text(&r["trigger_kind"]),
    },
    Column {
        heading: "STATUS",
        cell: |r| table::text(&r["status"]),
    },
    Column {
        heading: "SCHEDULED (UTC)",
        cell: |r| table::time(&r["scheduled_ms"]),
    },
    Column {
        heading: "DURATION",
        cell: |r| table::duration(&r["started_ms"], &r["finished_ms"]),
    },
    Column {
        heading: "EXIT",
        cell: |r| table::text(&r["exit_code"]),
    },
    Column {
        heading: "AGENT",
        cell: |r| table::text(&r["agent"]),
    },
];

/// A run in one of these has ended and will not change again.
fn is_final(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("succeeded" | "failed" | "timed_out" | "killed" | "lost" | "skipped")
    )
}

pub struct ListFilter {
    pub job: Option<String>,
    pub group: Option<String>,
    pub status: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

pub async fn list(api: &Api, out: Output, filter: ListFilter) -> Result<(), Failure> {
    let mut query = vec![
        ("limit", filter.limit.to_string()),
        ("offset", filter.offset.to_string()),
    ];
    if let Some(job) = &filter.job {
        let id = jobs::job_id(api, job, filter.group.as_deref()).await?;
        query.push(("job_id", id.to_string()));
    } else if let Some(group) = &filter.group {
        query.push(("group_id", fleet::group_id(api, group).await?.to_string()));
    }
    if let Some(status) = filter.status {
        query.push(("status", status));
    }
    let page = api.get("/runs", &query).await?;
    out.page(&page, COLUMNS);
    Ok(())
}

fn describe(run: &Value) -> String {
    table::fields(
        run,
        &[
            ("id", |r| table::text(&r["id"])),
            ("job", |r| table::text(&r["job_id"])),
            ("attempt", |r| table::text(&r["attempt"])),
            ("first run", |r| table::text(&r["first_run_id"])),
            ("kind", |r| table::text(&r["trigger_kind"])),
            ("status", |r| table::text(&r["status"])),
            ("agent", |r| table::text(&r["agent"])),
            ("params", |r| table::text(&r["params"])),
            ("scheduled (UTC)", |r| table::time(&r["scheduled_ms"])),
            ("started (UTC)", |r| table::time(&r["started_ms"])),
            ("finished (UTC)", |r| table::time(&r["finished_ms"])),
            ("duration", |r| {
                table::duration(&r["started_ms"], &r["finished_ms"])
            }),
            ("exit code", |r| table::text(&r["exit_code"])),
            ("signal", |r| table::text(&r["signal"])),
            ("trigger message", |r| table::text(&r["trigger_msg"])),
            ("result message", |r| table::text(&r["handle_msg"])),
        ],
    )
}

pub async fn get(api: &Api, out: Output, id: i64) -> Result<(), Failure> {
    let run = api.get(&format!("/runs/{id}"), &[]).await?;
    out.object(&run, || describe(&run));
    Ok(())
}

pub async fn kill(api: &Api, out: Output, id: i64) -> Result<(), Failure> {
    let run = api.post(&format!("/runs/{id}/kill"), None).await?;
    out.object(&run, || {
        format!("run {id}: kill sent to {}\n", table::text(&run["agent"]))
    });
    Ok(())
}

/// Runs a finished run again as the next attempt of its chain.
pub async fn retry(api: &Api, out: Output, id: i64, how: jobs::Trigger) -> Result<(), Failure> {
    let run = api
        .post(&format!("/runs/{id}/retry"), Some(how.body()))
        .await?;
    jobs::started(api, out, &run, how.wait_s).await
}

/// Prints the run's log; with `follow`, keeps printing what the run writes until it ends.
pub async fn logs(api: &Api, id: i64, follow: bool) -> Result<(), Failure> {
    let mut from_line = 1_i64;
    let mut stdout = std::io::stdout().lock();
    loop {
        let page = api
            .get(
                &format!("/runs/{id}/log"),
                &[("from_line", from_line.to_string())],
            )
            .await?;
        if let Some(content) = page["content"].as_str()
            && !content.is_empty()
        {
            stdout.write_all(content.as_bytes())?;
            if !content.ends_with('\n') {
                stdout.write_all(b"\n")?;
            }
            stdout.flush()?;
        }
        if let Some(to_line) = page["to_line"].as_i64() {
            from_line = from_line.max(to_line + 1);
        }
        let at_end = page["is_end"].as_bool().unwrap_or(true);
        if !follow {
            return Ok(());
        }
        // A run not yet sent has no log and reads as ended: only its status says it is over.
        if at_end && is_final(&api.get(&format!("/runs/{id}"), &[]).await?) {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits for the run to end, at most `secs`; fails with [`Failure::RunFailed`] unless it
/// succeeded.
pub async fn wait(api: &Api, out: Output, id: i64, secs: u64) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let run = api.get(&format!("/runs/{id}"), &[]).await?;
        if is_final(&run) {
            out.object(&run, || describe(&run));
            return match run["status"].as_str() {
                Some("succeeded") => Ok(()),
                status => Err(Failure::RunFailed(format!(
                    "run {id} ended {}",
                    status.unwrap_or("without a status")
                ))),
            };
        }
        if Instant::now() >= deadline {
            return Err(Failure::Other(format!(
                "run {id} is still {} after {secs} s",
                table::text(&run["status"])
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}
