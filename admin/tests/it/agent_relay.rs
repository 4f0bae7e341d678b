//! The cluster relay (issue 14): agents connected to one admin of a MariaDB cluster get the
//! calls of every admin, and survive the death of the admin holding their connection.
#![cfg(feature = "mysql")]

use std::collections::BTreeMap;
use std::time::Duration;

use jobfleet_admin::dispatch::relay::{RELAY_PATH, RelayKeys, system_now_ms};
use serde_json::{Value, json};

use crate::support::admin_proc::{AdminProc, call, http_client};
use crate::support::{AgentProc, wait_for};

/// The secret `AdminProc` gives every admin.
const CLUSTER_SECRET: &str = "cluster-secret-cluster-secret-cluster-0";

/// The live `connect` agents of `app_name`, as `admin` lists them, once there are `n`.
async fn connected_agents(
    admin: &AdminProc,
    client: &reqwest::Client,
    token: &str,
    app_name: &str,
    n: usize,
) -> Vec<Value> {
    wait_for(
        Duration::from_secs(30),
        &format!("{n} connect agents of {app_name}"),
        || async {
            let agents = call(
                client,
                "GET",
                format!("{}/api/v1/agents?limit=500", admin.base),
                token,
                Value::Null,
            )
            .await;
            let found: Vec<Value> = agents["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| {
                    a["app_name"] == app_name
                        && a["mode"] == "connect"
                        && a["live"] == true
                        && a["connection"].is_object()
                })
                .cloned()
                .collect();
            (found.len() == n).then_some(found)
        },
    )
    .await
}

async fn run_of(admin: &AdminProc, client: &reqwest::Client, token: &str, id: i64) -> Value {
    call(
        client,
        "GET",
        format!("{}/api/v1/runs/{id}", admin.base),
        token,
        Value::Null,
    )
    .await
}

async fn finished(admin: &AdminProc, client: &reqwest::Client, token: &str, id: i64) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("run {id} to end"),
        || async {
            let run = run_of(admin, client, token, id).await;
            (!matches!(run["status"].as_str(), Some("pending" | "running"))).then_some(run)
        },
    )
    .await
}

/// An admin that plans and sends everything, and an admin that only holds the agent's
/// connection: triggers, log reads and kills from the first reach the agent through the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_from_an_admin_without_the_connection_are_relayed_by_its_holder() {
    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    let client = http_client();
    let holder = AdminProc::start_with(&url, &[("JOBFLEET_SCHEDULER", "false")]);
    holder.ready(&client).await;
    let planner = AdminProc::start(&url);
    planner.ready(&client).await;
    let token = planner.login(&client).await;
    let group = planner.group(&client, &token, "relayed").await;
    let dir = tempfile::tempdir().unwrap();
    // The agent knows only the holder.
    let _agent = AgentProc::start_with(
        &format!("{}/", holder.base),
        "relayed",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_MODE", "connect")],
    );
    let row = connected_agents(&planner, &client, &token, "relayed", 1)
        .await
        .remove(0);
    assert_eq!(row["connection"]["url"], holder.base.as_str(), "{row}");
    let job = |name: &str, command: &str| json!({"group_id": group, "name": name, "schedule": {"type": "none"}, "handler": {"type": "shell", "command": command}});
    let jobs_url = format!("{}/api/v1/jobs", planner.base);

    // A manual trigger, sent by the planner at once.
    let quick = call(
        &client,
        "POST",
        jobs_url.clone(),
        &token,
        job("quick", "echo relayed $JOBFLEET_RUN_ID"),
    )
    .await;
    let run = call(
        &client,
        "POST",
        format!("{}/api/v1/jobs/{}/trigger", planner.base, quick["id"]),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(run["status"], "running", "{run}");
    let id = run["id"].as_i64().unwrap();
    assert_eq!(
        finished(&planner, &client, &token, id).await["status"],
        "succeeded"
    );
    let log = call(
        &client,
        "GET",
        format!("{}/api/v1/runs/{id}/log?from_line=1", planner.base),
        &token,
        Value::Null,
    )
    .await;
    assert_eq!(log["content"], format!("relayed {id}\n"), "{log}");

    // A scheduled fire: planned and sent by the planner (the holder plans nothing).
    let mut every_second = job("scheduled", "echo tick");
    every_second["schedule"] = json!({"type": "fixed_rate", "interval_s": 1});
    every_second["enabled"] = json!(true);
    let scheduled = call(&client, "POST", jobs_url.clone(), &token, every_second).await;
    let fired = wait_for(
        Duration::from_secs(20),
        "a scheduled fire to succeed",
        || async {
            let runs = call(
                &client,
                "GET",
                format!("{}/api/v1/runs?job_id={}", planner.base, scheduled["id"]),
                &token,
                Value::Null,
            )
            .await;
            runs["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["status"] == "succeeded")
                .cloned()
        },
    )
    .await;
    assert_eq!(fired["agent"], row["address"], "{fired}");

    // A running job's live log and its kill, both asked of the planner.
    let endless = call(
        &client,
        "POST",
        jobs_url,
        &token,
        job("endless", "echo started; sleep 300"),
    )
    .await;
    let run = call(
        &client,
        "POST",
        format!("{}/api/v1/jobs/{}/trigger", planner.base, endless["id"]),
        &token,
        json!({}),
    )
    .await;
    let id = run["id"].as_i64().unwrap();
    wait_for(Duration::from_secs(10), "the live log", || async {
        let log = call(
            &client,
            "GET",
            format!("{}/api/v1/runs/{id}/log?from_line=1", planner.base),
            &token,
            Value::Null,
        )
        .await;
        (log["content"] == "started\n").then_some(())
    })
    .await;
    let killed = client
        .post(format!("{}/api/v1/runs/{id}/kill", planner.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status(), reqwest::StatusCode::ACCEPTED);
    assert_eq!(
        finished(&planner, &client, &token, id).await["status"],
        "killed"
    );
}

/// The relay endpoint runs code on agents: only a relay token of this cluster opens it, and
/// bad calls get clear refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_endpoint_refuses_strangers_and_bad_calls() {
    let db = crate::support::mysql_db().await;
    let admin = AdminProc::start(&db.url_string());
    let client = http_client();
    admin.ready(&client).await;
    let token = admin.login(&client).await;
    let relay = |bearer: String, body: Vec<u8>| {
        let client = client.clone();
        let url = format!("{}{RELAY_PATH}", admin.base);
        async move {
            let r = client
                .post(url)
                .bearer_auth(bearer)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let call_body = |call: &str| {
        serde_json::to_vec(&json!({
            "address": "conn://nowhere/1/",
            "call": call,
            "body": {"jobId": 1},
            "timeout_ms": 200
        }))
        .unwrap()
    };
    let good = RelayKeys::new(CLUSTER_SECRET.as_bytes()).issue(system_now_ms());
    let stranger = RelayKeys::new(b"another cluster's secret, 32 bytes+").issue(system_now_ms());
    let expired = RelayKeys::new(CLUSTER_SECRET.as_bytes()).issue(system_now_ms() - 3_600_000);
    // Neither the agents' shared token, nor an open-API token, nor another cluster's.
    for bearer in ["test-agent-token".to_owned(), token, stranger, expired] {
        let (status, body) = relay(bearer, call_body("idleBeat")).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["code"], 500, "{body}");
    }
    let (status, body) = relay(good.clone(), b"{not json".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["msg"].as_str().unwrap().contains("not a relay call"),
        "{body}"
    );
    let (status, body) = relay(good.clone(), call_body("launchMissiles")).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = relay(good.clone(), call_body("registry")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["msg"].as_str().unwrap().contains("registry"), "{body}");
    let (status, body) = relay(good.clone(), vec![b' '; 9 * 1024 * 1024]).await;
    assert_eq!(status, 413, "{body}");
    let (status, body) = relay(good, call_body("idleBeat")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["msg"].as_str().unwrap().contains("not connected"),
        "{body}"
    );
}

/// Two scheduling admins, three `connect` agents connected to the first; jobs fire every
/// second on both admins (the second's go through the relay). The first is killed -9 mid-run:
/// the agents reconnect to the second within seconds, and from the jobs' own records every
/// run ran exactly once and every run ended `succeeded`: none lost, none run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_admin_holding_the_connections_loses_and_repeats_nothing() {
    const JOBS: usize = 12;
    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    let client = http_client();
    // A short trigger timeout keeps the wait for the dead admin's hand-overs short.
    let fast = [("JOBFLEET_TRIGGER_TIMEOUT_MS", "1000")];
    let mut holder = AdminProc::start_with(&url, &fast);
    holder.ready(&client).await;
    let other = AdminProc::start_with(&url, &fast);
    other.ready(&client).await;
    let token = other.login(&client).await;
    let group = other.group(&client, &token, "failover").await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let admins = format!("{}/,{}/", holder.base, other.base);
    let _agents: Vec<AgentProc> = (0..3)
        .map(|i| {
            AgentProc::start_with(
                &admins,
                "failover",
                &dir.path().join(format!("agent-{i}")),
                &[("JOBFLEET_AGENT_MODE", "connect")],
            )
        })
        .collect();
    // They take the first admin that answers, the holder (unless its answer was slow).
    let on_holder = connected_agents(&other, &client, &token, "failover", 3)
        .await
        .iter()
        .filter(|row| row["connection"]["url"] == holder.base.as_str())
        .count();
    assert!(on_holder >= 1, "no agent connected to the first admin");
    let command = format!("echo \"$JOBFLEET_RUN_ID\" >> {}; sleep 0.5", ran.display());
    let mut jobs = Vec::new();
    for i in 0..JOBS {
        let job = call(
            &client,
            "POST",
            format!("{}/api/v1/jobs", other.base),
            &token,
            json!({
                "group_id": group,
                "name": format!("tick-{i}"),
                "schedule": {"type": "fixed_rate", "interval_s": 1},
                "routing": "round_robin",
                "handler": {"type": "shell", "command": command},
                "enabled": true
            }),
        )
        .await;
        jobs.push(job["id"].as_i64().unwrap());
    }
    let count = |sql: &str| {
        use diesel::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        diesel::sql_query(sql)
            .get_result::<N>(&mut db.conn())
            .unwrap()
            .n
    };
    wait_for(
        Duration::from_secs(30),
        "runs going on the agents",
        || async {
            (count("SELECT COUNT(*) AS n FROM job_run WHERE status = 'running'") >= 6).then_some(())
        },
    )
    .await;
    holder.kill9();
    let killed_at = std::time::Instant::now();
    // Every agent connects to the survivor.
    let reconnected = wait_for(
        Duration::from_secs(30),
        "the agents on the survivor",
        || async {
            let agents = call(
                &client,
                "GET",
                format!("{}/api/v1/agents?limit=500", other.base),
                &token,
                Value::Null,
            )
            .await;
            let moved = agents["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["connection"]["url"] == other.base.as_str())
                .count();
            (moved == 3).then_some(killed_at.elapsed())
        },
    )
    .await;
    eprintln!("the agents reconnected {reconnected:?} after the kill");
    assert!(reconnected < Duration::from_secs(15), "{reconnected:?}");
    // Load goes on for a while on the survivor alone, then stops.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for job in &jobs {
        call(
            &client,
            "POST",
            format!("{}/api/v1/jobs/{job}/disable", other.base),
            &token,
            Value::Null,
        )
        .await;
    }
    wait_for(Duration::from_secs(120), "every run to end", || async {
        (count("SELECT COUNT(*) AS n FROM job_run WHERE status IN ('pending', 'running')") == 0)
            .then_some(())
    })
    .await;
    let executed = std::fs::read_to_string(&ran).unwrap();
    let mut times_run: BTreeMap<i64, usize> = BTreeMap::new();
    for line in executed.lines() {
        *times_run.entry(line.trim().parse().unwrap()).or_default() += 1;
    }
    let twice: Vec<_> = times_run.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "runs executed twice: {twice:?}");
    let rows: Vec<(i64, String)> = {
        use diesel::prelude::*;
        use jobfleet_admin::db::schema::job_run;
        job_run::table
            .select((job_run::id, job_run::status))
            .load(&mut db.conn())
            .unwrap()
    };
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, status) in &rows {
        *statuses.entry(status.as_str()).or_default() += 1;
    }
    eprintln!("outcome: {statuses:?}, {} runs executed", times_run.len());
    let not_succeeded: Vec<_> = rows
        .iter()
        .filter(|(_, status)| status != "succeeded")
        .filter(|(id, status)| status != "skipped" || times_run.contains_key(id))
        .collect();
    assert!(
        not_succeeded.is_empty(),
        "runs not succeeded: {not_succeeded:?}"
    );
    let unexecuted: Vec<_> = rows
        .iter()
        .filter(|(id, status)| status == "succeeded" && !times_run.contains_key(id))
        .collect();
    assert!(
        unexecuted.is_empty(),
        "succeeded without running: {unexecuted:?}"
    );
    let phantom: Vec<_> = times_run
        .keys()
        .filter(|id| !rows.iter().any(|(row, _)| row == *id))
        .collect();
    assert!(
        phantom.is_empty(),
        "executed runs the admins do not know: {phantom:?}"
    );
    // Both before and after the kill: about JOBS a second for 8 s or more.
    assert!(
        statuses.get("succeeded").copied().unwrap_or(0) > JOBS * 6,
        "{statuses:?}"
    );
}
