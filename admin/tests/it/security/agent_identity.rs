//! Agents have their own identity (issue 12, items 9 and 10): a key each, enrolled with the
//! shared token; an admin approves, revokes and forgets them; a result counts only from the agent
//! its run was sent to; and a restarted agent's runs that it no longer holds end `lost` (and are
//! retried) at its next heartbeat.

use std::time::Duration;

use jobfleet_agent::protocol::{ACCESS_TOKEN_HEADER, AGENT_KEY_HEADER};
use serde_json::{Value, json};

use crate::support::agent::{Executor, fake_executor};
use crate::support::both_backends;
use crate::support::{AgentProc, TestApp, wait_for};

const WITHIN: Duration = Duration::from_secs(30);
const TOKEN: &str = "test-agent-token";

/// Posts to an agent endpoint of the admin (`/api/registry`, `/api/callback`) as an agent
/// would: the shared token, and `key` when given. Returns the envelope.
async fn rpc(app: &TestApp, path: &str, key: Option<&str>, body: &Value) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{}/api/{path}", app.base))
        .header(ACCESS_TOKEN_HEADER, TOKEN)
        .json(body);
    if let Some(key) = key {
        request = request.header(AGENT_KEY_HEADER, key);
    }
    let response = request.send().await.unwrap();
    assert_eq!(
        response.status(),
        200,
        "XXL-Job peers read `code`, not the status"
    );
    response.json().await.unwrap()
}

fn registration(group: &str, address: &str) -> Value {
    json!({"registryGroup": "EXECUTOR", "registryKey": group, "registryValue": address})
}

fn key_of(agent: &AgentProc) -> String {
    std::fs::read_to_string(agent.data_dir.join("agent.key"))
        .unwrap()
        .trim()
        .to_owned()
}

async fn agent_row(app: &TestApp, address: &str) -> Option<Value> {
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["address"] == address)
        .cloned()
}

async fn restarted_agents_orphaned_run_is_lost_and_retried_within_a_heartbeat(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let g = app.group("sec-orphan").await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = AgentProc::start(&app.base, "sec-orphan", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "long", "retry": {"count": 2, "backoff_s": 0},
                   "handler": {"type": "shell", "command": "sleep 20"}}),
        )
        .await;
    let first = app.trigger(job, json!({})).await;
    assert_eq!(first["status"], "running", "{first}");
    let running_attempt = |attempt: i64| {
        let app = &app;
        async move {
            wait_for(WITHIN, &format!("attempt {attempt} to run"), || async {
                app.runs_of(job)
                    .await
                    .into_iter()
                    .find(|r| r["attempt"] == attempt && r["status"] == "running")
            })
            .await
        }
    };
    // Heartbeats come every second; the dead-agent monitor would need 30 s. Well before that
    // the run is `lost`: here the restarted agent finds it in its accept journal and reports it.
    let lost_within = |run_id: i64| {
        let app = &app;
        async move {
            wait_for(
                Duration::from_secs(10),
                "the orphaned run to be lost",
                || async {
                    let run = app.run(run_id).await;
                    (run["status"] == "lost").then_some(run)
                },
            )
            .await
        }
    };
    agent.kill9();
    agent.restart();
    let lost = lost_within(first["id"].as_i64().unwrap()).await;
    assert!(
        lost["handle_msg"]
            .as_str()
            .unwrap()
            .contains("killed or crashed"),
        "{lost}"
    );
    // Retried per the job's policy, on the restarted agent, and it runs there.
    let second = running_attempt(2).await;
    assert_eq!(second["agent"].as_str(), Some(agent.address.as_str()));
    // Without its journal (a lost data folder, say) the agent cannot report the run; its
    // first heartbeat, from a new process that does not hold it, ends it instead.
    agent.kill9();
    std::fs::remove_file(agent.data_dir.join("accepted.journal")).unwrap();
    agent.restart();
    let lost = lost_within(second["id"].as_i64().unwrap()).await;
    assert!(
        lost["handle_msg"].as_str().unwrap().contains("restarted"),
        "{lost}"
    );
    let third = running_attempt(3).await;
    // The retry is held: later heartbeats leave it running. A beat is stored with what it
    // judged, in one transaction; the second after this moment was taken after the accept.
    let mut seen_from = app.now_ms();
    for beat in ["first", "second"] {
        seen_from = wait_for(WITHIN, &format!("the {beat} later heartbeat"), || async {
            let row = agent_row(&app, &agent.address).await?;
            let seen = row["last_seen_ms"].as_i64().unwrap();
            (seen > seen_from).then_some(seen)
        })
        .await;
    }
    let still = app.run(third["id"].as_i64().unwrap()).await;
    assert_eq!(still["status"], "running", "{still}");
}
both_backends!(restarted_agents_orphaned_run_is_lost_and_retried_within_a_heartbeat);

async fn a_forged_result_from_another_agent_changes_nothing(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let g = app.group("sec-forge").await;
    let dir = tempfile::tempdir().unwrap();
    let honest = AgentProc::start(&app.base, "sec-forge", &dir.path().join("honest"));
    app.wait_for_agent(&honest.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "slow", "routing": "first",
                   "handler": {"type": "shell", "command": "sleep 3; exit 3"}}),
        )
        .await;
    let run = app.trigger(job, json!({})).await;
    let run_id = run["id"].as_i64().unwrap();
    assert_eq!(run["agent"].as_str(), Some(honest.address.as_str()));
    // A second agent of the same group, enrolled with its own key, claims the run succeeded.
    let other = AgentProc::start(&app.base, "sec-forge", &dir.path().join("other"));
    app.wait_for_agent(&other.address).await;
    let forged = json!([{"logId": run_id, "logDateTim": app.now_ms(), "handleCode": 200,
                         "status": "succeeded", "handleMsg": "forged"}]);
    let answer = rpc(&app, "callback", Some(&key_of(&other)), &forged).await;
    assert_eq!(
        answer["code"], 200,
        "acknowledged, so nobody resends: {answer}"
    );
    // The shared token alone (an XXL-Job executor) is no better in a group without executors.
    rpc(&app, "callback", None, &forged).await;
    // A key nobody enrolled is refused outright.
    let unknown = rpc(&app, "callback", Some(&"f".repeat(64)), &forged).await;
    assert_eq!(unknown["code"], 500, "{unknown}");
    let after = app.run(run_id).await;
    assert_eq!(after["status"], "running", "{after}");
    // The honest agent's own result still lands.
    let done = app.finished_run(run_id, WITHIN).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["exit_code"], 3, "{done}");
}
both_backends!(a_forged_result_from_another_agent_changes_nothing);

async fn registrations_are_bound_to_their_key_and_checked(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    app.group("sec-reg").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "sec-reg", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    let before = agent_row(&app, &agent.address).await.unwrap();
    assert_eq!(before["identity"], "agent", "{before}");
    let thief = "0123456789abcdef".repeat(4);
    let cases: Vec<(Option<&str>, Value, &str)> = vec![
        // Someone with the shared token takes over the agent's address with another key.
        (
            Some(&thief),
            registration("sec-reg", &agent.address),
            "another agent key",
        ),
        // Or without a key, as an XXL-Job executor, where the group takes none.
        (
            None,
            registration("sec-reg", "http://127.0.0.1:1/"),
            "XXL-Job executors",
        ),
        // Or points the admin at a cloud metadata service.
        (
            Some(&thief),
            registration("sec-reg", "http://169.254.169.254/latest/"),
            "metadata",
        ),
        (
            Some("short"),
            registration("sec-reg", "http://127.0.0.1:2/"),
            "agent key",
        ),
    ];
    for (key, body, expected) in cases {
        let answer = rpc(&app, "registry", key, &body).await;
        assert_eq!(answer["code"], 500, "{body}: {answer}");
        assert!(
            answer["msg"].as_str().unwrap().contains(expected),
            "{body}: {answer}"
        );
    }
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    assert_eq!(
        agents.as_array().unwrap().len(),
        1,
        "nothing registered: {agents}"
    );
    // A body over the limit gets the envelope too, not a plain-text 413.
    let huge = json!({"registryGroup": "EXECUTOR", "registryKey": "x".repeat(200_000),
                      "registryValue": "http://127.0.0.1:3/"});
    for path in ["registry", "callback"] {
        let answer = rpc(&app, path, None, &huge).await;
        assert_eq!(answer["code"], 500, "{answer}");
        assert!(
            answer["msg"].as_str().unwrap().contains("larger"),
            "{answer}"
        );
    }
    // Wrong shared token: the XXL-Job answer.
    let wrong = reqwest::Client::new()
        .post(format!("{}/api/registry", app.base))
        .header(ACCESS_TOKEN_HEADER, "test-agent-tokem")
        .json(&registration("sec-reg", "http://127.0.0.1:4/"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(wrong["msg"], "The access token is wrong.");
}
both_backends!(registrations_are_bound_to_their_key_and_checked);

async fn new_agents_wait_for_approval_and_revoked_ones_are_shut_out(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[("JOBFLEET_APPROVE_AGENTS", "manual")]).await;
    let g = app.group("sec-approve").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "sec-approve", &dir.path().join("a"));
    let pending = wait_for(WITHIN, "the agent to enroll", || async {
        agent_row(&app, &agent.address).await
    })
    .await;
    assert_eq!(pending["approval"], "pending", "{pending}");
    let job = app
        .job_from(
            g,
            json!({"name": "hi", "handler": {"type": "shell", "command": "echo hi"}}),
        )
        .await;
    let refused = app.trigger(job, json!({})).await;
    assert_eq!(
        refused["status"], "failed",
        "a pending agent gets no run: {refused}"
    );
    // An operator may not approve; an admin may.
    let (_, operator) = app.user("op-approve", "operator", &[g]).await;
    let id = pending["id"].as_i64().unwrap();
    let path = format!("/api/v1/agents/{id}/approve");
    assert_eq!(app.post(&path, &operator, json!({})).await.status, 403);
    let approved = app.post(&path, &app.admin, json!({})).await;
    assert_eq!(approved.body["approval"], "approved", "{:?}", approved.body);
    let run = app.trigger(job, json!({})).await;
    let done = app.finished_run(run["id"].as_i64().unwrap(), WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // Revoked: heartbeats are refused, so it stops being live, and it gets no runs.
    let revoked = app
        .post(
            &format!("/api/v1/agents/{id}/revoke"),
            &app.admin,
            json!({}),
        )
        .await;
    assert_eq!(revoked.body["approval"], "revoked");
    let beat = rpc(
        &app,
        "registry",
        Some(&key_of(&agent)),
        &registration("sec-approve", &agent.address),
    )
    .await;
    assert!(beat["msg"].as_str().unwrap().contains("revoked"), "{beat}");
    let after = app.trigger(job, json!({})).await;
    assert_eq!(after["status"], "failed", "{after}");
    let audit = app
        .get("/api/v1/audit?object_type=agent", &app.admin)
        .await
        .body;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"agent.approve") && actions.contains(&"agent.revoke"),
        "{audit}"
    );
    // Forgotten: the row and its key go, and the agent enrolls again (pending).
    let forgot = app
        .delete(&format!("/api/v1/agents/{id}"), &app.admin)
        .await;
    assert_eq!(forgot.status, 204);
    let again = wait_for(WITHIN, "the agent to enroll again", || async {
        agent_row(&app, &agent.address).await
    })
    .await;
    assert_eq!(again["approval"], "pending", "{again}");
    assert_ne!(again["id"], pending["id"]);
}
both_backends!(new_agents_wait_for_approval_and_revoked_ones_are_shut_out);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xxl_job_executors_work_on_the_shared_token_only_where_allowed() {
    let app = TestApp::scheduling(false, &[]).await;
    let group = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": "sec-xxl", "title": "XXL", "allow_executors": true}),
        )
        .await;
    assert_eq!(group.body["allow_executors"], true, "{:?}", group.body);
    let g = group.body["id"].as_i64().unwrap();
    let executor = fake_executor(Executor::Accepting).await;
    let answer = rpc(&app, "registry", None, &registration("sec-xxl", &executor)).await;
    assert_eq!(answer["code"], 200, "{answer}");
    let row = agent_row(&app, &executor).await.unwrap();
    assert_eq!(
        (row["identity"].as_str(), row["live"].as_bool()),
        (Some("executor"), Some(true))
    );
    let job = app
        .job_from(
            g,
            json!({"name": "bean", "handler": {"type": "bean", "name": "demoJobHandler"}}),
        )
        .await;
    let run = app.trigger(job, json!({})).await;
    let run_id = run["id"].as_i64().unwrap();
    assert_eq!(run["agent"].as_str(), Some(executor.as_str()), "{run}");
    let result = json!([{"logId": run_id, "logDateTim": app.now_ms(), "handleCode": 200}]);
    assert_eq!(rpc(&app, "callback", None, &result).await["code"], 200);
    let done = app.finished_run(run_id, WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // The group is switched off: a further executor is refused.
    let other = fake_executor(Executor::Accepting).await;
    app.call(
        "PUT",
        &format!("/api/v1/groups/{g}"),
        Some(&app.admin),
        Some(json!({"title": "XXL", "allow_executors": false})),
    )
    .await;
    let refused = rpc(&app, "registry", None, &registration("sec-xxl", &other)).await;
    assert_eq!(refused["code"], 500, "{refused}");
}

/// A group `app_name` that takes results from XXL-Job executors, a fake executor that accepts
/// every trigger registered in it, and a job of `body` there; returns the job's id.
async fn executor_job(app: &TestApp, app_name: &str, body: Value) -> i64 {
    let group = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": app_name, "title": app_name, "allow_executors": true}),
        )
        .await;
    let g = group.body["id"].as_i64().unwrap();
    let executor = fake_executor(Executor::Accepting).await;
    let answer = rpc(app, "registry", None, &registration(app_name, &executor)).await;
    assert_eq!(answer["code"], 200, "{answer}");
    app.job_from(g, body).await
}

/// A batch of results is stored with a few statements when every run is still open, and run
/// by run when one already has its result: each result counts once, and so do its follow-ups.
async fn a_batch_of_results_stores_each_once(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let job = executor_job(
        &app,
        "sec-batch",
        json!({"name": "batched", "retry": {"count": 1, "backoff_s": 0},
            "handler": {"type": "bean", "name": "demoJobHandler"}}),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let run = app.trigger(job, json!({})).await;
        assert_eq!(run["status"], "running", "{run}");
        ids.push(run["id"].as_i64().unwrap());
    }
    let result =
        |id: i64, code: i32| json!({"logId": id, "logDateTim": app.now_ms(), "handleCode": code});
    // Over the bound: refused whole with a clear message, and nothing of it stored.
    let too_many = Value::Array((0..1_001).map(|_| result(ids[0], 500)).collect());
    let refused = rpc(&app, "callback", None, &too_many).await;
    assert_ne!(refused["code"], 200, "{refused}");
    assert!(
        refused["msg"]
            .as_str()
            .is_some_and(|msg| msg.contains("at most 1000 results")),
        "{refused}"
    );
    assert_eq!(app.run(ids[0]).await["status"], "running");
    // All open: stored together, and the two retries (due at once) taken together.
    let first = json!([
        result(ids[0], 200),
        result(ids[1], 500),
        result(ids[3], 500)
    ]);
    assert_eq!(rpc(&app, "callback", None, &first).await["code"], 200);
    // One already final, one named twice, the others open: stored one by one.
    let second = json!([
        result(ids[0], 500),
        result(ids[2], 200),
        result(ids[4], 200),
        result(ids[4], 500)
    ]);
    assert_eq!(rpc(&app, "callback", None, &second).await["code"], 200);
    let statuses: Vec<String> = {
        let mut out = Vec::new();
        for id in &ids {
            out.push(app.run(*id).await["status"].as_str().unwrap().to_owned());
        }
        out
    };
    assert_eq!(
        statuses,
        ["succeeded", "failed", "succeeded", "failed", "succeeded"],
        "the first result of each run is the one kept"
    );
    // A retry for each failure, once, sent to the executor: runs 2 and 4 failed.
    let retries = wait_for(WITHIN, "the two retries", || async {
        let runs = app.runs_of(job).await;
        let retries: Vec<i64> = runs
            .iter()
            .filter(|r| r["attempt"] == 2 && r["status"] == "running")
            .map(|r| r["first_run_id"].as_i64().unwrap())
            .collect();
        (retries.len() >= 2).then_some(retries)
    })
    .await;
    let mut retried = retries.clone();
    retried.sort_unstable();
    assert_eq!(retried, vec![ids[1], ids[3]], "{retries:?}");
}
both_backends!(a_batch_of_results_stores_each_once);

/// Requests of results that arrive together share a transaction (group commit), yet each is
/// answered for itself: one with a key nobody enrolled is refused alone, the others' results are
/// stored, each once.
async fn results_arriving_together_are_answered_each_for_itself(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let job = executor_job(
        &app,
        "sec-together",
        json!({"name": "together", "handler": {"type": "bean", "name": "demoJobHandler"}}),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..24 {
        let run = app.trigger(job, json!({})).await;
        assert_eq!(run["status"], "running", "{run}");
        ids.push(run["id"].as_i64().unwrap());
    }
    let unknown_key = "f".repeat(64);
    // Every fourth request (the third of each four) comes with a key nobody enrolled and names a
    // run of its own; each of the others names its run and, again, the run before it, as a
    // failure (stored once, by whichever is first).
    let requests = ids.iter().enumerate().map(|(i, id)| {
        let app = &app;
        let refused = i % 4 == 2;
        let mut results = vec![json!({"logId": id, "logDateTim": app.now_ms(), "handleCode": 200})];
        if i > 0 && !refused {
            results
                .push(json!({"logId": ids[i - 1], "logDateTim": app.now_ms(), "handleCode": 500}));
        }
        let key = refused.then_some(unknown_key.as_str());
        async move { (refused, rpc(app, "callback", key, &json!(results)).await) }
    });
    for (refused, answer) in futures_util::future::join_all(requests).await {
        let expected = if refused { 500 } else { 200 };
        assert_eq!(answer["code"], expected, "{answer}");
    }
    for (i, id) in ids.iter().enumerate() {
        let run = app.run(*id).await;
        if i % 4 == 2 {
            // Its own request was refused; the next one named it too, as a failure.
            assert_eq!(run["status"], "failed", "run {i}: {run}");
        } else {
            assert!(
                matches!(run["status"].as_str(), Some("succeeded" | "failed")),
                "run {i}: {run}"
            );
        }
    }
    let stored = app.runs_of(job).await;
    assert_eq!(stored.len(), 24, "no run added or lost: {stored:?}");
}
both_backends!(results_arriving_together_are_answered_each_for_itself);
