//! Logs that outlive their host: a finished run's log is kept by the admin and stays readable
//! after its agent is killed and its data directory deleted; a long log keeps its head and its
//! tail within `kept_log_bytes`; retention takes kept logs with their runs.

use std::time::Duration;

use jobfleet_admin::scheduler::log_keeper::Keeper;
use serde_json::json;

use crate::support::{AgentProc, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_is_readable_after_its_agent_and_its_files_are_gone() {
    let app = TestApp::start_with(
        jobfleet_admin::testing::TestDb::sqlite(),
        &[("JOBFLEET_KEPT_LOG_BYTES", "4096")],
    )
    .await;
    let g = app.group("kept-logs").await;
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("agent");
    let mut agent = AgentProc::start_with(&app.base, "kept-logs", &agent_dir, &[]);
    app.wait_for_agent(&agent.address).await;

    let short = app
        .job_from(g, json!({"name": "short", "handler": {"type": "shell", "command": "echo first; echo \"second: $1\"; echo 'ünïcode ✓'"}, "params": "p1"}))
        .await;
    let long = app
        .job_from(g, json!({"name": "long", "handler": {"type": "shell", "command": "i=0; while [ $i -lt 2000 ]; do echo \"line $i\"; i=$((i+1)); done"}}))
        .await;
    let pending = app
        .job_from(
            g,
            json!({"name": "pending", "handler": {"type": "shell", "command": "sleep 30"}}),
        )
        .await;
    let short_run = app.trigger(short, json!({})).await["id"].as_i64().unwrap();
    let long_run = app.trigger(long, json!({})).await["id"].as_i64().unwrap();
    let pending_run = app.trigger(pending, json!({})).await["id"]
        .as_i64()
        .unwrap();
    for run in [short_run, long_run] {
        let done = app.finished_run(run, Duration::from_secs(30)).await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    let from_agent = app.full_log(short_run).await;
    assert_eq!(from_agent, "first\nsecond: p1\nünïcode ✓\n");
    let long_from_agent = app.full_log(long_run).await;
    assert_eq!(long_from_agent.lines().count(), 2000);

    let kept = |run: i64| kept_log(&app, run);
    // A short log came whole with its result and was kept with it; a long one is read back.
    let came_with_result = kept(short_run).await.expect("kept with the result");
    assert_eq!(
        (
            came_with_result.content.as_str(),
            came_with_result.truncated
        ),
        (from_agent.as_str(), false)
    );
    assert!(kept(long_run).await.is_none(), "too long to come with it");
    // One pass keeps the other finished run's log and leaves the running one for later.
    let mut keeper = Keeper::default();
    keeper.pass(&app.state).await.unwrap();
    assert_eq!(kept(short_run).await, Some(came_with_result));
    assert!(
        kept(pending_run).await.is_none(),
        "a running run's log is not kept yet"
    );
    let long_kept = kept(long_run).await.unwrap();
    assert!(long_kept.truncated);
    assert_eq!(long_kept.bytes, long_from_agent.len() as i64);

    // The agent dies and its files go: the logs are still there, the short one whole, the long
    // one as its head and tail.
    agent.kill9();
    std::fs::remove_dir_all(&agent_dir).unwrap();
    assert_eq!(app.full_log(short_run).await, from_agent);
    let long_log = app.full_log(long_run).await;
    assert!(long_log.starts_with("line 0\nline 1\n"), "{long_log}");
    assert!(long_log.ends_with("line 1998\nline 1999\n"), "{long_log}");
    assert!(long_log.contains("bytes of this log were not kept by the admin"));
    assert!(long_log.len() <= 4096 + 200, "{}", long_log.len());
    // Paging a kept log: two lines at a time from line 2.
    let page = app
        .get(
            &format!("/api/v1/runs/{short_run}/log?from_line=2"),
            &app.admin,
        )
        .await
        .body;
    assert_eq!(
        (&page["from_line"], &page["to_line"], &page["is_end"]),
        (&json!(2), &json!(3), &json!(true))
    );
    assert_eq!(page["content"], "second: p1\nünïcode ✓\n");
    // A run whose agent is gone and whose log was never kept answers as before: unreachable.
    let r = app
        .get(&format!("/api/v1/runs/{pending_run}/log"), &app.admin)
        .await;
    assert!(!r.status.is_success(), "{}", r.body);

    // More passes, this admin's and a second one's, change nothing kept.
    keeper.pass(&app.state).await.unwrap();
    Keeper::default().pass(&app.state).await.unwrap();
    assert!(kept(short_run).await.is_some());

    // Retention (history limits here) takes the kept logs with their runs.
    let mut body = TestApp::job_body(g, "short");
    body["handler"] =
        json!({"type": "shell", "command": "echo first; echo \"second: $1\"; echo 'ünïcode ✓'"});
    body["schedule"] = json!({"type": "none"});
    body["params"] = json!("p1");
    body["keep_succeeded"] = json!(0);
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{short}"),
            Some(&app.admin),
            Some(body),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    // Three days on, the run is older than what the daily report recounts.
    app.clock.advance(3 * 86_400_000);
    jobfleet_admin::scheduler::monitors::retention(&app.state)
        .await
        .unwrap();
    assert!(kept(short_run).await.is_none(), "gone with its run");
    assert!(kept(long_run).await.is_some());
}

/// The log the admin keeps for `run`, if any.
async fn kept_log(app: &TestApp, run: i64) -> Option<jobfleet_admin::db::run_log::RunLog> {
    app.state
        .db
        .run(move |conn| {
            jobfleet_admin::db::run_log::kept(conn, jobfleet_admin::domain::ids::RunId(run))
        })
        .await
        .unwrap()
}

/// Posts to an agent endpoint (`registry`, `callback`) as an XXL-Job executor would: the shared
/// token, no key. Returns the XXL-Job envelope.
async fn as_executor(app: &TestApp, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(format!("{}/api/{path}", app.base))
        .header("XXL-JOB-ACCESS-TOKEN", "test-agent-token")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "XXL-Job peers read `code`");
    response.json().await.unwrap()
}

/// The `log` a result may carry is an agent's input like any other: a log of the wrong type
/// refuses the whole batch with a clear message and stores nothing (the agent resends it); one
/// above `kept_log_bytes` is kept as its head and tail; control characters and NUL are kept as
/// they came.
async fn a_log_sent_with_a_result_is_checked_and_bounded(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[("JOBFLEET_KEPT_LOG_BYTES", "4096")]).await;
    let group = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": "log-input", "title": "Logs", "allow_executors": true}),
        )
        .await;
    let g = group.body["id"].as_i64().unwrap();
    let executor =
        crate::support::agent::fake_executor(crate::support::agent::Executor::Accepting).await;
    let registered = as_executor(
        &app,
        "registry",
        &json!({"registryGroup": "EXECUTOR",
        "registryKey": "log-input", "registryValue": executor}),
    )
    .await;
    assert_eq!(registered["code"], 200, "{registered}");
    let job = app
        .job_from(
            g,
            json!({"name": "bean", "handler": {"type": "bean", "name": "demoJobHandler"}}),
        )
        .await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = app.trigger(job, json!({})).await;
        assert_eq!(run["status"], "running", "{run}");
        runs.push(run["id"].as_i64().unwrap());
    }
    let result = |id: i64, log: serde_json::Value| json!({"logId": id, "logDateTim": app.now_ms(), "handleCode": 200, "log": log});

    let wrong_type = as_executor(&app, "callback", &json!([result(runs[0], json!(42))])).await;
    assert_eq!(wrong_type["code"], 500, "{wrong_type}");
    assert!(
        wrong_type["msg"]
            .as_str()
            .unwrap()
            .contains("expected a string"),
        "the message says what is wrong: {wrong_type}"
    );
    assert_eq!(
        app.run(runs[0]).await["status"],
        "running",
        "nothing stored"
    );

    let controls = "\u{0}nul\u{1b}[31mred\u{1b}[0m\r\n\ttab\u{7f}\u{feff}end\n";
    let long: String = (0..2_000).map(|i| format!("line {i}\n")).collect();
    let stored = as_executor(
        &app,
        "callback",
        &json!([
            result(runs[0], json!(controls)),
            result(runs[1], json!(long))
        ]),
    )
    .await;
    assert_eq!(stored["code"], 200, "{stored}");
    for run in &runs[..2] {
        assert_eq!(app.run(*run).await["status"], "succeeded");
    }
    let app = &app;
    let kept = |run: i64| async move { kept_log(app, run).await.expect("kept with its result") };
    let exact = kept(runs[0]).await;
    assert_eq!((exact.content.as_str(), exact.truncated), (controls, false));
    let bounded = kept(runs[1]).await;
    assert!(bounded.truncated);
    assert_eq!(bounded.bytes, long.len() as i64);
    assert!(
        bounded.content.len() <= 4096 + 200,
        "{}",
        bounded.content.len()
    );
    assert!(bounded.content.starts_with("line 0\n"));
    assert!(bounded.content.ends_with("line 1999\n"));
    // Served as kept through the API, whatever the executor would say.
    let page = app
        .get(&format!("/api/v1/runs/{}/log", runs[0]), &app.admin)
        .await;
    assert_eq!(page.body["content"], controls, "{}", page.body);

    // A log that is not a valid JSON string at all (a lone surrogate) is refused as well.
    let body = format!(
        r#"[{{"logId": {}, "logDateTim": 1, "handleCode": 200, "log": "\ud800"}}]"#,
        runs[2]
    );
    let raw: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/api/callback", app.base))
        .header("XXL-JOB-ACCESS-TOKEN", "test-agent-token")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["code"], 500, "{raw}");
    assert_eq!(app.run(runs[2]).await["status"], "running");
}
crate::support::both_backends!(a_log_sent_with_a_result_is_checked_and_bounded);
