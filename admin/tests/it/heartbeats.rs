//! Heartbeats written in batches (issue 19): agents beating at once are written together in
//! one transaction, and each is still judged on its own — every beat recorded, a revoked or
//! foreign-key agent refused at its very next beat while the others of its batch pass, a run
//! the agent no longer holds ended `lost`, a deregistration after a beat leaving the agent dead.

use diesel::connection::SimpleConnection;
use jobfleet_admin::db::agent;
use jobfleet_agent::protocol::{ACCESS_TOKEN_HEADER, AGENT_KEY_HEADER};
use serde_json::{Value, json};

use crate::support::{TestApp, api_test};

const TOKEN: &str = "test-agent-token";

fn key(i: usize) -> String {
    format!("heartbeat-test-agent-key-{i:08}-0123456789")
}

fn address(i: usize) -> String {
    format!("http://127.0.0.1:{}/", 30_000 + i)
}

/// A jobfleet agent's heartbeat body, as `jobfleet_agent::registry` sends it.
fn beat_body(group: &str, i: usize, instance: &str, cpu: f64, held: &[i64], through: u64) -> Value {
    json!({
        "registryGroup": "EXECUTOR",
        "registryKey": group,
        "registryValue": address(i),
        "agentVersion": "0.1.0",
        "hostname": format!("host-{i}"),
        "metrics": {"cpuPct": cpu, "load1": 0.5, "memUsedMb": 100, "memTotalMb": 1000,
                    "diskFreeMb": 5000, "running": 0},
        "labels": {"zone": "a"},
        "limitsMode": "rlimit",
        "instanceId": instance,
        "heldRuns": held,
        "acceptedThrough": through,
        "runAs": "nobody",
        "mode": "push"
    })
}

/// Posts to `/api/{path}` as agent `key` would (or as an executor without one); the envelope.
async fn rpc(app: &TestApp, path: &str, key: Option<&str>, body: &Value) -> Value {
    let mut request = app
        .client
        .post(format!("{}/api/{path}", app.base))
        .header(ACCESS_TOKEN_HEADER, TOKEN)
        .json(body);
    if let Some(key) = key {
        request = request.header(AGENT_KEY_HEADER, key);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn row(app: &TestApp, group: &str, i: usize) -> Option<agent::Agent> {
    let (group, address) = (group.to_owned(), address(i));
    app.state
        .db
        .run(move |conn| agent::find(conn, &group, &address))
        .await
        .unwrap()
}

/// `n` agents beating at once, each with its own key; their envelopes in order.
async fn beat_all(app: &TestApp, group: &str, n: usize, cpu: f64) -> Vec<Value> {
    let beats = (0..n).map(|i| {
        let body = beat_body(group, i, &format!("instance-{i}"), cpu, &[], 0);
        async move { rpc(app, "registry", Some(&key(i)), &body).await }
    });
    futures_util::future::join_all(beats).await
}

async fn many_agents_beating_at_once_are_all_recorded(app: &TestApp) {
    app.group("hb-many").await;
    let n = 300;
    let first = beat_all(app, "hb-many", n, 1.0).await;
    assert!(first.iter().all(|e| e["code"] == 200), "{first:?}");
    let enrolled_ms = app.now_ms();
    for i in 0..n {
        let row = row(app, "hb-many", i).await.expect("every agent enrolled");
        assert_eq!(row.last_seen_ms, enrolled_ms);
        assert_eq!(row.labels, "zone=a");
        assert_eq!(row.key_hash.len(), 64);
    }
    // The steady beats: only the time and the metrics change, for every one of them.
    app.clock.advance(10_000);
    let second = beat_all(app, "hb-many", n, 42.0).await;
    assert!(second.iter().all(|e| e["code"] == 200), "{second:?}");
    for i in 0..n {
        let row = row(app, "hb-many", i).await.unwrap();
        assert_eq!(row.last_seen_ms, enrolled_ms + 10_000, "agent {i}");
        assert!(row.metrics.contains("42"), "agent {i}: {}", row.metrics);
        assert_eq!(row.hostname, format!("host-{i}"));
    }
}
api_test!(many_agents_beating_at_once_are_all_recorded);

async fn a_beat_that_changes_the_agent_is_written_whole(app: &TestApp) {
    app.group("hb-change").await;
    let body = beat_body("hb-change", 1, "one", 1.0, &[], 0);
    assert_eq!(
        rpc(app, "registry", Some(&key(1)), &body).await["code"],
        200
    );
    let mut changed = beat_body("hb-change", 1, "two", 3.0, &[], 0);
    changed["labels"] = json!({"zone": "b", "rack": "r7"});
    changed["agentVersion"] = json!("0.2.0");
    app.clock.advance(1_000);
    assert_eq!(
        rpc(app, "registry", Some(&key(1)), &changed).await["code"],
        200
    );
    let row = row(app, "hb-change", 1).await.unwrap();
    assert_eq!(
        (
            row.labels.as_str(),
            row.version.as_str(),
            row.instance_id.as_str(),
            row.last_seen_ms
        ),
        ("rack=r7,zone=b", "0.2.0", "two", app.now_ms())
    );
}
api_test!(a_beat_that_changes_the_agent_is_written_whole);

async fn a_revoked_agent_is_refused_at_its_next_beat_and_its_batch_passes(app: &TestApp) {
    app.group("hb-revoke").await;
    let n = 50;
    assert!(
        beat_all(app, "hb-revoke", n, 1.0)
            .await
            .iter()
            .all(|e| e["code"] == 200)
    );
    let victim = row(app, "hb-revoke", 7).await.unwrap();
    let revoked = app
        .post(
            &format!("/api/v1/agents/{}/revoke", victim.id),
            &app.admin,
            json!({}),
        )
        .await;
    assert_eq!(revoked.status, 200, "{:?}", revoked.body);
    app.clock.advance(5_000);
    let beats = beat_all(app, "hb-revoke", n, 2.0).await;
    for (i, envelope) in beats.iter().enumerate() {
        if i == 7 {
            assert_eq!(envelope["code"], 500, "{envelope}");
            assert!(
                envelope["msg"].as_str().unwrap().contains("revoked"),
                "{envelope}"
            );
        } else {
            assert_eq!(envelope["code"], 200, "agent {i}: {envelope}");
        }
    }
    // Refused beats write nothing; the others were written.
    assert_eq!(
        row(app, "hb-revoke", 7).await.unwrap().last_seen_ms,
        victim.last_seen_ms
    );
    assert_eq!(
        row(app, "hb-revoke", 8).await.unwrap().last_seen_ms,
        app.now_ms()
    );
}
api_test!(a_revoked_agent_is_refused_at_its_next_beat_and_its_batch_passes);

async fn another_key_and_a_keyless_executor_are_refused_beside_good_beats(app: &TestApp) {
    app.group("hb-keys").await;
    let body = beat_body("hb-keys", 1, "one", 1.0, &[], 0);
    assert_eq!(
        rpc(app, "registry", Some(&key(1)), &body).await["code"],
        200
    );
    let stolen = beat_body("hb-keys", 1, "thief", 1.0, &[], 0);
    let executor = beat_body("hb-keys", 2, "exec", 1.0, &[], 0);
    let third = beat_body("hb-keys", 3, "three", 1.0, &[], 0);
    let (key1, key3, key99) = (key(1), key(3), key(99));
    let (owner, thief, keyless, other) = tokio::join!(
        rpc(app, "registry", Some(&key1), &body),
        rpc(app, "registry", Some(&key99), &stolen),
        rpc(app, "registry", None, &executor),
        rpc(app, "registry", Some(&key3), &third),
    );
    assert_eq!(owner["code"], 200, "{owner}");
    assert_eq!(other["code"], 200, "{other}");
    assert_eq!(thief["code"], 500, "{thief}");
    assert!(
        thief["msg"].as_str().unwrap().contains("another agent key"),
        "{thief}"
    );
    assert_eq!(keyless["code"], 500, "{keyless}");
    assert!(
        keyless["msg"]
            .as_str()
            .unwrap()
            .contains("XXL-Job executors"),
        "{keyless}"
    );
    assert_eq!(row(app, "hb-keys", 1).await.unwrap().instance_id, "one");
    assert!(row(app, "hb-keys", 2).await.is_none());
}
api_test!(another_key_and_a_keyless_executor_are_refused_beside_good_beats);

async fn a_pending_agent_beats_as_before_and_stays_pending(app: &TestApp) {
    app.group("hb-pending").await;
    let body = beat_body("hb-pending", 1, "one", 1.0, &[], 0);
    for _ in 0..2 {
        assert_eq!(
            rpc(app, "registry", Some(&key(1)), &body).await["code"],
            200
        );
        app.clock.advance(1_000);
    }
    let row = row(app, "hb-pending", 1).await.unwrap();
    assert_eq!(row.approval, agent::PENDING);
    assert_eq!(row.last_seen_ms, app.now_ms() - 1_000);
}
api_test!(
    a_pending_agent_beats_as_before_and_stays_pending,
    &[("JOBFLEET_APPROVE_AGENTS", "manual")]
);

async fn a_deregistration_leaves_the_agent_dead_until_it_beats_again(app: &TestApp) {
    app.group("hb-gone").await;
    let body = beat_body("hb-gone", 1, "one", 1.0, &[], 0);
    assert_eq!(
        rpc(app, "registry", Some(&key(1)), &body).await["code"],
        200
    );
    assert_eq!(
        rpc(app, "registryRemove", Some(&key(1)), &body).await["code"],
        200
    );
    let gone = row(app, "hb-gone", 1).await.unwrap();
    assert!(
        gone.last_seen_ms <= app.now_ms() - jobfleet_admin::domain::agent::DEAD_AFTER_MS,
        "dead at once"
    );
    // Someone else's key may not take it out.
    assert_eq!(
        rpc(app, "registryRemove", Some(&key(2)), &body).await["code"],
        500
    );
    // Back: its next beat makes it live again (and says so in the log).
    app.clock.advance(1_000);
    assert_eq!(
        rpc(app, "registry", Some(&key(1)), &body).await["code"],
        200
    );
    assert_eq!(
        row(app, "hb-gone", 1).await.unwrap().last_seen_ms,
        app.now_ms()
    );
}
api_test!(a_deregistration_leaves_the_agent_dead_until_it_beats_again);

/// A run stored as running on an agent, taken by `instance` as its accept number `seq`.
async fn running_run(
    app: &TestApp,
    group_id: i64,
    job_id: i64,
    i: usize,
    instance: &str,
    seq: i64,
) -> i64 {
    let now = app.now_ms();
    let sql = format!(
        "INSERT INTO job_run (job_id, group_id, attempt, trigger_kind, scheduled_ms, status, params, agent_address, created_ms, agent_instance, agent_seq) \
         VALUES ({job_id}, {group_id}, 1, 'api', {now}, 'running', '', '{}', {now}, '{instance}', {seq})",
        address(i)
    );
    app.state
        .db
        .run(move |conn| {
            conn.batch_execute(&sql)?;
            Ok(jobfleet_admin::db::last_insert_id(conn)?)
        })
        .await
        .unwrap()
}

async fn runs_agents_no_longer_hold_are_lost_each_by_its_own_beat(app: &TestApp) {
    let g = app.group("hb-held").await;
    let job = app.job(&app.admin, g, "held").await;
    for i in 0..4 {
        let body = beat_body("hb-held", i, "old", 1.0, &[], 0);
        assert_eq!(
            rpc(app, "registry", Some(&key(i)), &body).await["code"],
            200
        );
    }
    // Agent 0 restarted (a new instance): its run is gone. Agent 1 lists its run: held.
    // Agent 2 handed out number 5 and does not list its run 5: gone. Agent 3's run was
    // accepted after its beat was taken (number 9 > 5): still there.
    let runs = [
        running_run(app, g, job, 0, "old", 1).await,
        running_run(app, g, job, 1, "old", 2).await,
        running_run(app, g, job, 2, "old", 5).await,
        running_run(app, g, job, 3, "old", 9).await,
    ];
    let bodies = [
        beat_body("hb-held", 0, "new", 1.0, &[], 0),
        beat_body("hb-held", 1, "old", 1.0, &[runs[1]], 5),
        beat_body("hb-held", 2, "old", 1.0, &[], 5),
        beat_body("hb-held", 3, "old", 1.0, &[], 5),
    ];
    let beats = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| async move { rpc(app, "registry", Some(&key(i)), body).await });
    let envelopes = futures_util::future::join_all(beats).await;
    assert!(envelopes.iter().all(|e| e["code"] == 200), "{envelopes:?}");
    let status = |id: i64| async move { app.run(id).await["status"].clone() };
    assert_eq!(status(runs[0]).await, "lost");
    assert_eq!(status(runs[1]).await, "running");
    assert_eq!(status(runs[2]).await, "lost");
    assert_eq!(status(runs[3]).await, "running");
    let lost = app.run(runs[0]).await;
    assert!(
        lost["handle_msg"].as_str().unwrap().contains("restarted"),
        "{lost}"
    );
}
api_test!(runs_agents_no_longer_hold_are_lost_each_by_its_own_beat);

/// A field longer than its column is refused at the door, named in the answer, and the beat
/// beside it in the same moment is written: on MariaDB such a value would otherwise fail the
/// whole batch it was written in.
async fn an_oversized_field_is_refused_alone_and_named(app: &TestApp) {
    app.group("hb-long").await;
    let mut bodies: Vec<Value> = (0..5)
        .map(|i| beat_body("hb-long", i, &format!("instance-{i}"), 1.0, &[], 0))
        .collect();
    bodies[0]["agentVersion"] = json!("v".repeat(65));
    bodies[1]["hostname"] = json!("h".repeat(256));
    bodies[2]["limitsMode"] = json!("cgroup-v2-and-more");
    // 255 characters, 256 with the `/` the admin adds.
    bodies[3]["registryValue"] = json!(format!("http://127.0.0.1:1/{}", "a".repeat(236)));
    let answers = futures_util::future::join_all(
        bodies
            .iter()
            .enumerate()
            .map(|(i, body)| async move { rpc(app, "registry", Some(&key(i)), body).await }),
    )
    .await;
    for (answer, field) in
        answers
            .iter()
            .zip(["agentVersion", "hostname", "limitsMode", "registryValue"])
    {
        assert_ne!(answer["code"], 200, "{field}: {answer}");
        assert!(
            answer["msg"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{field}: ")),
            "{answer}"
        );
    }
    assert_eq!(answers[4]["code"], 200, "{}", answers[4]);
    assert!(row(app, "hb-long", 4).await.is_some());
    for i in 0..3 {
        assert!(
            row(app, "hb-long", i).await.is_none(),
            "agent {i} was stored"
        );
    }
}
api_test!(an_oversized_field_is_refused_alone_and_named);
