//! Several admins on one MariaDB, and the scheduler through a database outage. MariaDB only:
//! a SQLite admin is a single process by design.
#![cfg(feature = "mysql")]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{ADMIN_PASSWORD, AgentProc, Opts, TestApp, free_port, wait_for};

struct AdminProc {
    child: Child,
    base: String,
}

impl AdminProc {
    fn start(database_url: &str) -> Self {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_jobfleet-admin"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("JOBFLEET_LISTEN", format!("127.0.0.1:{port}"))
            .env("JOBFLEET_DATABASE_URL", database_url)
            .env(
                "JOBFLEET_JWT_SECRET",
                "cluster-secret-cluster-secret-cluster-0",
            )
            .env("JOBFLEET_ACCESS_TOKEN", "test-agent-token")
            .env("JOBFLEET_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("JOBFLEET_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn ready(&self, client: &reqwest::Client) {
        wait_for(
            Duration::from_secs(30),
            &format!("{} to be ready", self.base),
            || async {
                let r = client
                    .get(format!("{}/readyz", self.base))
                    .send()
                    .await
                    .ok()?;
                r.status().is_success().then_some(())
            },
        )
        .await;
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AdminProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

async fn call(
    client: &reqwest::Client,
    method: &str,
    url: String,
    token: &str,
    body: Value,
) -> Value {
    let r = client
        .request(method.parse().unwrap(), url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {body}");
    body
}

/// Two admin processes fire ten every-second jobs; one is killed -9 mid-stream. Every slot
/// from the first fire to the stop exists exactly once in the run table and was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_one_killed_no_duplicate_and_no_missing_slots() {
    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    crate::support::install_crypto();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut first = AdminProc::start(&url);
    first.ready(&client).await;
    let second = AdminProc::start(&url);
    second.ready(&client).await;
    let login = call(
        &client,
        "POST",
        format!("{}/api/v1/auth/token", second.base),
        "",
        json!({"username": "admin", "password": ADMIN_PASSWORD}),
    )
    .await;
    let token = login["token"].as_str().unwrap().to_owned();
    let group = call(
        &client,
        "POST",
        format!("{}/api/v1/groups", first.base),
        &token,
        json!({"app_name": "cluster", "title": "cluster"}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let admins = format!("{}/,{}/", first.base, second.base);
    let _agents: Vec<AgentProc> = (0..2)
        .map(|i| AgentProc::start(&admins, "cluster", &dir.path().join(format!("a{i}"))))
        .collect();
    wait_for(Duration::from_secs(20), "two live agents", || async {
        let agents = call(
            &client,
            "GET",
            format!("{}/api/v1/agents", second.base),
            &token,
            Value::Null,
        )
        .await;
        (agents
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["live"] == true)
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let mut jobs = Vec::new();
    for i in 0..10 {
        let job = call(
            &client,
            "POST",
            format!("{}/api/v1/jobs", first.base),
            &token,
            json!({
            "group_id": group, "name": format!("tick-{i}"), "routing": "round_robin",
            "schedule": {"type": "fixed_rate", "interval_s": 1},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
        jobs.push(job["id"].as_i64().unwrap());
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    first.kill9();
    // Long enough for the survivor to send what the dead admin had stored (up to 5 s ahead,
    // then the 10 s orphan limit and a 2 s pass) before the jobs are disabled, which would
    // skip them.
    tokio::time::sleep(Duration::from_secs(24)).await;
    let stop_ms = chrono::Utc::now().timestamp_millis();
    for job in &jobs {
        call(
            &client,
            "POST",
            format!("{}/api/v1/jobs/{job}/disable", second.base),
            &token,
            json!({}),
        )
        .await;
    }
    // Fires the dead admin stored but never sent are recovered by the survivor.
    let check_before = stop_ms - 1_000;
    let outcome = wait_for(Duration::from_secs(45), "every slot sent", || async {
        let mut per_job: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
        for job in &jobs {
            let mut runs = Vec::new();
            let mut offset = 0;
            loop {
                let page = call(
                    &client,
                    "GET",
                    format!(
                        "{}/api/v1/runs?job_id={job}&limit=500&offset={offset}",
                        second.base
                    ),
                    &token,
                    Value::Null,
                )
                .await;
                let items = page["items"].as_array().unwrap().clone();
                offset += items.len();
                let done = items.len() < 500;
                runs.extend(items);
                if done {
                    break;
                }
            }
            per_job.insert(*job, runs);
        }
        let unsent: Vec<&Value> = per_job
            .values()
            .flatten()
            .filter(|r| {
                r["scheduled_ms"].as_i64().unwrap() < check_before
                    && (r["status"] == "pending" && r["triggered_ms"].is_null()
                        || r["status"] == "skipped")
            })
            .collect();
        if !unsent.is_empty() {
            eprintln!("not sent yet: {unsent:?}");
        }
        unsent.is_empty().then_some(per_job)
    })
    .await;
    for (job, runs) in &outcome {
        let mut slots: BTreeMap<i64, usize> = BTreeMap::new();
        for run in runs.iter().filter(|r| r["trigger_kind"] == "schedule") {
            *slots
                .entry(run["fire_slot_ms"].as_i64().unwrap())
                .or_insert(0) += 1;
        }
        assert!(
            slots.values().all(|n| *n == 1),
            "job {job}: a slot fired twice: {slots:?}"
        );
        let in_range: Vec<i64> = slots
            .keys()
            .copied()
            .filter(|s| *s < check_before)
            .collect();
        assert!(
            in_range.len() >= 12,
            "job {job} fired through the kill: {in_range:?}"
        );
        assert!(
            in_range.windows(2).all(|w| w[1] - w[0] == 1000),
            "job {job}: a slot is missing: {in_range:?}"
        );
        for run in runs
            .iter()
            .filter(|r| r["scheduled_ms"].as_i64().unwrap() < check_before)
        {
            let status = run["status"].as_str().unwrap();
            // A trigger in flight inside the killed admin is reported lost by the survivor.
            assert!(
                matches!(status, "succeeded" | "running" | "lost" | "pending"),
                "job {job}: {run}"
            );
        }
    }
}

/// The database goes away for 30 s: the scheduler logs and backs off, serves 503s, and when the
/// database returns it resumes on the job's phase, applying the misfire policy to what passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_survives_a_30_s_database_outage() {
    let (db, proxy, via_proxy) = crate::support::proxy::mariadb().await;
    let app = TestApp::start_opts(
        db,
        &[
            ("JOBFLEET_DATABASE_URL", via_proxy.as_str()),
            ("JOBFLEET_DB_CONNECT_TIMEOUT_MS", "1000"),
        ],
        Opts {
            system_clock: true,
            scheduler: true,
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("outage-sched").await;
    let agent = AgentProc::start(&app.base, "outage-sched", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "tick", "misfire": "fire_once_now",
            "schedule": {"type": "fixed_rate", "interval_s": 1},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.cut();
    let cut_at = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_secs(30)).await;
    proxy.restore();
    let back_at = chrono::Utc::now().timestamp_millis();
    let runs = wait_for(
        Duration::from_secs(30),
        "fires after the outage",
        || async {
            let r = app
                .get(&format!("/api/v1/runs?job_id={job}&limit=500"), &app.admin)
                .await;
            let items = r.body["items"].as_array()?.clone();
            let after = items
                .iter()
                .filter(|r| {
                    r["scheduled_ms"].as_i64().unwrap() > back_at + 2_000
                        && r["status"] == "succeeded"
                })
                .count();
            (after >= 3).then_some(items)
        },
    )
    .await;
    let mut slots: Vec<i64> = runs
        .iter()
        .filter_map(|r| r["fire_slot_ms"].as_i64())
        .collect();
    slots.sort_unstable();
    let n = slots.len();
    slots.dedup();
    assert_eq!(slots.len(), n, "no slot twice");
    // Fires stored before the cut and the ones after the return keep the 1 s phase.
    let phase = slots[0].rem_euclid(1000);
    assert!(
        slots.iter().all(|s| s.rem_euclid(1000) == phase),
        "{slots:?}"
    );
    // The outage's missed slots became one catch-up fire, as the policy says.
    let misfires = runs
        .iter()
        .filter(|r| r["trigger_kind"] == "misfire")
        .count();
    assert_eq!(misfires, 1, "{runs:?}");
    let gap: Vec<i64> = slots
        .iter()
        .copied()
        .filter(|s| *s > cut_at + 6_000 && *s < back_at - 6_000)
        .collect();
    assert!(
        gap.is_empty() || gap.len() == 1,
        "slots inside the outage are not replayed: {gap:?}"
    );
    assert!(app.state.metrics.misfired_slots.get("fire_once_now") >= 15);
}
