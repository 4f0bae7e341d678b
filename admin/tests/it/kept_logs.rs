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

    let kept = |run: i64| {
        let state = app.state.clone();
        async move {
            state
                .db
                .run(move |conn| {
                    jobfleet_admin::db::run_log::kept(conn, jobfleet_admin::domain::ids::RunId(run))
                })
                .await
                .unwrap()
        }
    };
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
