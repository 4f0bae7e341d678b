//! Workflows (issue 16) end to end: a real admin (scheduling, real clock) and a real agent
//! process run DAGs of shell jobs; the assertions read the API, the run logs and the tables.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{AgentProc, TestApp, both_backends, wait_for};

const FINISH_WITHIN: Duration = Duration::from_secs(60);

struct Fleet {
    app: TestApp,
    group: i64,
    _dir: tempfile::TempDir,
    _agent: AgentProc,
}

async fn fleet(mysql: bool) -> Fleet {
    let app = TestApp::scheduling(mysql, &[]).await;
    let group = app.group("wf").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "wf", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    Fleet {
        app,
        group,
        _dir: dir,
        _agent: agent,
    }
}

impl Fleet {
    async fn shell(&self, name: &str, command: &str) -> i64 {
        self.app
            .job_from(
                self.group,
                json!({"name": name, "handler": {"type": "shell", "command": command}}),
            )
            .await
    }

    async fn workflow(&self, body: Value) -> i64 {
        let mut body = body;
        body["group_id"] = json!(self.group);
        let r = self
            .app
            .post("/api/v1/workflows", &self.app.admin, body)
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["id"].as_i64().unwrap()
    }

    async fn trigger(&self, workflow: i64, body: Value) -> i64 {
        let r = self
            .app
            .post(
                &format!("/api/v1/workflows/{workflow}/trigger"),
                &self.app.admin,
                body,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["id"].as_i64().unwrap()
    }

    async fn run(&self, id: i64) -> Value {
        let r = self
            .app
            .get(&format!("/api/v1/workflow-runs/{id}"), &self.app.admin)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        r.body
    }

    async fn finished(&self, id: i64) -> Value {
        wait_for(
            FINISH_WITHIN,
            &format!("workflow run {id} to end"),
            || async {
                let run = self.run(id).await;
                let status = run["status"].as_str().unwrap_or_default().to_owned();
                ["succeeded", "failed", "cancelled", "timed_out"]
                    .contains(&status.as_str())
                    .then_some(run)
            },
        )
        .await
    }

    async fn operate(&self, id: i64, operation: &str) -> crate::support::Response {
        self.app
            .post(
                &format!("/api/v1/workflow-runs/{id}/{operation}"),
                &self.app.admin,
                json!({}),
            )
            .await
    }
}

fn node<'a>(run: &'a Value, key: &str) -> &'a Value {
    run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["key"] == key)
        .unwrap_or_else(|| panic!("no node {key} in {run}"))
}

fn statuses(run: &Value) -> Vec<(String, String)> {
    run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["key"].as_str().unwrap().to_owned(),
                n["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, s)| ((*k).to_owned(), (*s).to_owned()))
        .collect()
}

/// A diamond a → (b, c) → d: b and c run after a, d after both; a's outputs and the workflow's
/// params reach b's process.
async fn a_diamond_passes_outputs_and_joins(mysql: bool) {
    let f = fleet(mysql).await;
    let emit = f
        .shell(
            "emit",
            "echo \"greeting=hello from $JOBFLEET_WORKFLOW_NODE\" >> \"$JOBFLEET_OUTPUT\"; echo 'not a pair' >> \"$JOBFLEET_OUTPUT\"",
        )
        .await;
    let show = f
        .shell(
            "show",
            "echo \"got $JOBFLEET_IN_greeting with $JOBFLEET_WORKFLOW_PARAMS\"",
        )
        .await;
    let ok = f.shell("ok", "true").await;
    let wf = f
        .workflow(json!({
            "name": "diamond",
            "params": "default-params",
            "nodes": [
                {"key": "a", "job_id": emit},
                {"key": "b", "job_id": show},
                {"key": "c", "job_id": ok},
                {"key": "d", "job_id": ok},
            ],
            "edges": [
                {"from": "a", "to": "b"}, {"from": "a", "to": "c"},
                {"from": "b", "to": "d"}, {"from": "c", "to": "d"},
            ],
        }))
        .await;
    let id = f.trigger(wf, json!({"params": "p=42"})).await;
    let run = f.finished(id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        statuses(&run),
        pairs(&[
            ("a", "succeeded"),
            ("b", "succeeded"),
            ("c", "succeeded"),
            ("d", "succeeded")
        ])
    );
    assert_eq!(
        node(&run, "a")["outputs"],
        json!({"greeting": "hello from a"})
    );
    let b_run = node(&run, "b")["run_ids"][0].as_i64().unwrap();
    assert_eq!(f.app.full_log(b_run).await, "got hello from a with p=42\n");
    let d = node(&run, "d");
    for upstream in ["b", "c"] {
        assert!(
            d["started_ms"].as_i64() >= node(&run, upstream)["finished_ms"].as_i64(),
            "d started before {upstream} ended: {run}"
        );
    }
    // The node's job runs are ordinary runs, linked back to the workflow.
    let job_run = f.app.run(b_run).await;
    assert_eq!(job_run["trigger_kind"], "workflow", "{job_run}");
}
both_backends!(a_diamond_passes_outputs_and_joins);

/// A failure taken by a failure edge: the success branch is skipped (and the skip propagates),
/// the failure branch runs, each join mode decides as documented, and the run succeeds because
/// the failure was handled.
async fn branches_on_failure_and_each_join_mode(mysql: bool) {
    let f = fleet(mysql).await;
    let fail = f.shell("fail", "exit 3").await;
    let ok = f.shell("ok", "true").await;
    let wf = f
        .workflow(json!({
            "name": "branches",
            "nodes": [
                {"key": "x", "job_id": fail},
                {"key": "on_ok", "job_id": ok},
                {"key": "on_fail", "job_id": ok},
                {"key": "after_ok", "job_id": ok},
                {"key": "after_after_ok", "job_id": ok},
                {"key": "either", "job_id": ok, "join": "one_success"},
                {"key": "both", "job_id": ok, "join": "all_success"},
                {"key": "whatever", "job_id": ok, "join": "all_done"},
                {"key": "always", "job_id": ok},
            ],
            "edges": [
                {"from": "x", "to": "on_ok", "on": "success"},
                {"from": "x", "to": "on_fail", "on": "failure"},
                {"from": "on_ok", "to": "after_ok"},
                {"from": "after_ok", "to": "after_after_ok"},
                {"from": "on_ok", "to": "either"}, {"from": "on_fail", "to": "either"},
                {"from": "on_ok", "to": "both"}, {"from": "on_fail", "to": "both"},
                {"from": "on_ok", "to": "whatever"}, {"from": "on_fail", "to": "whatever"},
                {"from": "x", "to": "always", "on": "always"},
            ],
        }))
        .await;
    let run = f.finished(f.trigger(wf, json!({})).await).await;
    assert_eq!(
        statuses(&run),
        pairs(&[
            ("x", "failed"),
            ("on_ok", "skipped"),
            ("on_fail", "succeeded"),
            ("after_ok", "skipped"),
            ("after_after_ok", "skipped"),
            ("either", "succeeded"),
            ("both", "skipped"),
            ("whatever", "succeeded"),
            ("always", "succeeded"),
        ]),
        "{run}"
    );
    assert_eq!(
        run["status"], "succeeded",
        "x's failure had a failure edge: {run}"
    );
    assert!(
        node(&run, "after_after_ok")["run_ids"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Without a failure edge the same failure fails the run, and what follows is skipped; the
    // workflow's alert goes to its channel.
    let channel = f
        .app
        .post(
            "/api/v1/alert-channels",
            &f.app.admin,
            json!({"name": "hook", "kind": "webhook", "target": "http://127.0.0.1:9/hook"}),
        )
        .await;
    assert_eq!(channel.status, StatusCode::CREATED, "{}", channel.body);
    let wf = f
        .workflow(json!({
            "name": "unhandled",
            "nodes": [{"key": "x", "job_id": fail}, {"key": "y", "job_id": ok}],
            "edges": [{"from": "x", "to": "y"}],
            "alert": {"on_failure": true, "channels": [channel.body["id"]]},
        }))
        .await;
    let id = f.trigger(wf, json!({})).await;
    let run = f.finished(id).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(statuses(&run), pairs(&[("x", "failed"), ("y", "skipped")]));
    let events = f
        .app
        .get("/api/v1/alert-events?kind=workflow_failed", &f.app.admin)
        .await
        .body;
    let items = events["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{events}");
    let title = items[0]["title"].as_str().unwrap();
    assert!(
        title.contains("unhandled") && title.contains(&format!("workflow run {id}")),
        "{title}"
    );
}
both_backends!(branches_on_failure_and_each_join_mode);

/// Re-run from failure keeps what succeeded; node retries join the node; marking a failed node
/// succeeded continues the run from it.
async fn rerun_retries_and_mark(mysql: bool) {
    let f = fleet(mysql).await;
    let flag = tempfile::tempdir().unwrap();
    let flaky_path = flag.path().join("flaky");
    let retried_path = flag.path().join("retried");
    let ok = f.shell("ok", "true").await;
    // Fails until its flag file exists; the test creates it between the runs.
    let gate = f
        .shell("gate", &format!("test -f {}", flaky_path.display()))
        .await;
    // Fails its first attempt, succeeds on the job's own retry.
    let retried = f
        .app
        .job_from(
            f.group,
            json!({"name": "retried", "retry": {"count": 1, "backoff_s": 0},
                   "handler": {"type": "shell", "command": format!(
                       "test -f {0} || {{ touch {0}; exit 1; }}", retried_path.display())}}),
        )
        .await;
    let wf = f
        .workflow(json!({
            "name": "rerun",
            "nodes": [
                {"key": "first", "job_id": ok},
                {"key": "gate", "job_id": gate},
                {"key": "retried", "job_id": retried},
                {"key": "last", "job_id": ok},
            ],
            "edges": [
                {"from": "first", "to": "gate"},
                {"from": "first", "to": "retried"},
                {"from": "gate", "to": "last"},
                {"from": "retried", "to": "last"},
            ],
        }))
        .await;
    let id = f.trigger(wf, json!({})).await;
    let run = f.finished(id).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        statuses(&run),
        pairs(&[
            ("first", "succeeded"),
            ("gate", "failed"),
            ("retried", "succeeded"),
            ("last", "skipped")
        ])
    );
    assert_eq!(
        node(&run, "retried")["run_ids"].as_array().unwrap().len(),
        2,
        "the job's retry belongs to the node: {run}"
    );
    // Re-running before the cause is fixed fails again; then fixed, it succeeds, and the
    // succeeded nodes did not run again.
    let first_runs = node(&run, "first")["run_ids"].clone();
    let r = f.operate(id, "rerun").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let run = f.finished(id).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(node(&run, "gate")["attempt"], 2);
    std::fs::write(&flaky_path, "").unwrap();
    assert_eq!(f.operate(id, "rerun").await.status, StatusCode::OK);
    let run = f.finished(id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        node(&run, "first")["run_ids"],
        first_runs,
        "kept, not re-run"
    );
    assert_eq!(
        node(&run, "retried")["run_ids"].as_array().unwrap().len(),
        2
    );
    assert_eq!(node(&run, "gate")["run_ids"].as_array().unwrap().len(), 3);
    // A succeeded run cannot be re-run.
    assert_eq!(f.operate(id, "rerun").await.status, StatusCode::CONFLICT);

    // Mark: the gate fails again (flag removed); marking it succeeded runs `last`.
    std::fs::remove_file(&flaky_path).unwrap();
    let id = f.trigger(wf, json!({})).await;
    let run = f.finished(id).await;
    assert_eq!(run["status"], "failed");
    let r = f
        .app
        .post(
            &format!("/api/v1/workflow-runs/{id}/nodes/gate/mark"),
            &f.app.admin,
            json!({"status": "succeeded"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let run = f.finished(id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(node(&run, "last")["status"], "succeeded");
    assert!(
        node(&run, "gate")["message"]
            .as_str()
            .unwrap()
            .contains("marked succeeded"),
        "{run}"
    );
    // Bad marks: an unknown status, an unknown node, a succeeded node.
    for (path, body, status) in [
        (
            "nodes/gate/mark",
            json!({"status": "failed"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "nodes/nope/mark",
            json!({"status": "succeeded"}),
            StatusCode::NOT_FOUND,
        ),
        (
            "nodes/first/mark",
            json!({"status": "skipped"}),
            StatusCode::CONFLICT,
        ),
    ] {
        let r = f
            .app
            .post(
                &format!("/api/v1/workflow-runs/{id}/{path}"),
                &f.app.admin,
                body,
            )
            .await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
    }
    // The operations are audited.
    let audit = f
        .app
        .get("/api/v1/audit?limit=100", &f.app.admin)
        .await
        .body;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "workflow.create",
        "workflow.trigger",
        "workflow_run.rerun",
        "workflow_run.mark",
    ] {
        assert!(
            actions.contains(&action),
            "{action} not audited: {actions:?}"
        );
    }
}
both_backends!(rerun_retries_and_mark);

/// Pause lets the running node finish and starts nothing new until resumed; cancel kills the
/// running node's process and cancels what had not started.
async fn pause_resume_and_cancel(mysql: bool) {
    let f = fleet(mysql).await;
    let slow = f.shell("slow", "sleep 2").await;
    let ok = f.shell("ok", "true").await;
    let endless = f.shell("endless", "echo started; sleep 300").await;
    let wf = f
        .workflow(json!({
            "name": "pausable",
            "nodes": [{"key": "slow", "job_id": slow}, {"key": "next", "job_id": ok}],
            "edges": [{"from": "slow", "to": "next"}],
        }))
        .await;
    let id = f.trigger(wf, json!({})).await;
    let r = f.operate(id, "pause").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["status"], "paused");
    let run = wait_for(
        FINISH_WITHIN,
        "the slow node to end while paused",
        || async {
            let run = f.run(id).await;
            (node(&run, "slow")["status"] == "succeeded").then_some(run)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let run_after = f.run(id).await;
    assert_eq!(run_after["status"], "paused", "{run}");
    assert_eq!(node(&run_after, "next")["status"], "ready", "{run_after}");
    assert!(
        node(&run_after, "next")["run_ids"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(f.operate(id, "pause").await.status, StatusCode::CONFLICT);
    assert_eq!(f.operate(id, "resume").await.status, StatusCode::OK);
    assert_eq!(f.finished(id).await["status"], "succeeded");

    let wf = f
        .workflow(json!({
            "name": "cancellable",
            "nodes": [{"key": "long", "job_id": endless}, {"key": "after", "job_id": ok}],
            "edges": [{"from": "long", "to": "after"}],
        }))
        .await;
    let id = f.trigger(wf, json!({})).await;
    let long_run = wait_for(FINISH_WITHIN, "the long node's process", || async {
        let run = f.run(id).await;
        let run_id = node(&run, "long")["run_ids"][0].as_i64()?;
        (f.app.full_log(run_id).await == "started\n").then_some(run_id)
    })
    .await;
    let r = f.operate(id, "cancel").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let run = f.finished(id).await;
    assert_eq!(run["status"], "cancelled");
    assert_eq!(
        statuses(&run),
        pairs(&[("long", "cancelled"), ("after", "cancelled")])
    );
    let killed = f.app.finished_run(long_run, FINISH_WITHIN).await;
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(f.operate(id, "cancel").await.status, StatusCode::CONFLICT);
    assert_eq!(f.operate(id, "explode").await.status, StatusCode::NOT_FOUND);

    // The workflow's timeout ends a run the same way, as `timed_out`.
    let wf = f
        .workflow(json!({
            "name": "bounded", "timeout_s": 1,
            "nodes": [{"key": "long", "job_id": endless}, {"key": "after", "job_id": ok}],
            "edges": [{"from": "long", "to": "after"}],
        }))
        .await;
    let id = f.trigger(wf, json!({})).await;
    let run = f.finished(id).await;
    assert_eq!(run["status"], "timed_out", "{run}");
    assert_eq!(
        statuses(&run),
        pairs(&[("long", "cancelled"), ("after", "cancelled")])
    );
    let long_run = node(&run, "long")["run_ids"][0].as_i64().unwrap();
    assert_eq!(
        f.app.finished_run(long_run, FINISH_WITHIN).await["status"],
        "killed"
    );
}
both_backends!(pause_resume_and_cancel);

/// Bad definitions are refused naming the field, and nothing is written; concurrency between
/// runs of one workflow follows its policy.
async fn bad_definitions_and_concurrency(mysql: bool) {
    let f = fleet(mysql).await;
    let ok = f.shell("ok", "true").await;
    let endless = f.shell("endless", "sleep 300").await;
    let other_group = f.app.group("other").await;
    let foreign = f
        .app
        .job_from(
            other_group,
            json!({"name": "foreign", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let cases = [
        (
            json!({"name": "cyclic", "nodes": [{"key": "a", "job_id": ok}, {"key": "b", "job_id": ok}],
                   "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]}),
            "edges",
            "cycle",
        ),
        (
            json!({"name": "dup", "nodes": [{"key": "a", "job_id": ok}, {"key": "a", "job_id": ok}]}),
            "nodes[1].key",
            "duplicate",
        ),
        (
            json!({"name": "dangling", "nodes": [{"key": "a", "job_id": ok}], "edges": [{"from": "a", "to": "zz"}]}),
            "edges[0].to",
            "zz",
        ),
        (
            json!({"name": "missing", "nodes": [{"key": "a", "job_id": 999_999}]}),
            "nodes[0].job_id",
            "does not exist",
        ),
        (
            json!({"name": "foreign", "nodes": [{"key": "a", "job_id": foreign}]}),
            "nodes[0].job_id",
            "executor group",
        ),
        (
            json!({"name": "empty", "nodes": []}),
            "nodes",
            "at least one",
        ),
        (
            json!({"name": "badjoin", "nodes": [{"key": "a", "job_id": ok, "join": "some"}]}),
            "",
            "",
        ),
        (
            json!({"name": "sched", "nodes": [{"key": "a", "job_id": ok}], "schedule": {"type": "cron", "expr": "* * * * * *"}}),
            "schedule",
            "none",
        ),
        (
            json!({"name": "alerted", "nodes": [{"key": "a", "job_id": ok}],
                   "alert": {"on_failure": true, "channels": [4242]}}),
            "alert.channels",
            "4242",
        ),
    ];
    for (mut body, field, text) in cases {
        body["group_id"] = json!(f.group);
        let r = f
            .app
            .post("/api/v1/workflows", &f.app.admin, body.clone())
            .await;
        assert!(
            r.status == StatusCode::UNPROCESSABLE_ENTITY || r.status == StatusCode::BAD_REQUEST,
            "{body}: {} {}",
            r.status,
            r.body
        );
        if !field.is_empty() {
            assert_eq!(r.field(), Some(field), "{body}: {}", r.body);
            assert!(r.body.to_string().contains(text), "{body}: {}", r.body);
        }
    }
    // Bodies that are not a workflow: broken JSON, an unknown field (named), a wrong type, a
    // bad join or condition name.
    let r = f
        .app
        .raw(
            "POST",
            "/api/v1/workflows",
            &f.app.admin,
            "application/json",
            "{\"nodes\": [",
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    for (body, field) in [
        (
            json!({"group_id": f.group, "name": "x", "nodes": [], "colour": "red"}),
            Some("colour"),
        ),
        (
            json!({"group_id": f.group, "name": "x", "nodes": [{"key": "a", "job_id": "one"}]}),
            None,
        ),
        (
            json!({"group_id": f.group, "name": "x", "nodes": [{"key": "a", "job_id": ok, "extra": 1}]}),
            Some("extra"),
        ),
        (
            json!({"group_id": f.group, "name": "x", "nodes": [{"key": "a", "job_id": ok}],
                "edges": [{"from": "a", "to": "a", "on": "sometimes"}]}),
            None,
        ),
    ] {
        let r = f
            .app
            .post("/api/v1/workflows", &f.app.admin, body.clone())
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            r.body
        );
        if field.is_some() {
            assert_eq!(r.field(), field, "{body}: {}", r.body);
        }
    }
    let listed = f.app.get("/api/v1/workflows", &f.app.admin).await.body;
    assert_eq!(listed["total"], 0, "nothing written: {listed}");
    let audit = f
        .app
        .get("/api/v1/audit?limit=500", &f.app.admin)
        .await
        .body;
    assert!(
        !audit.to_string().contains("workflow."),
        "a refused workflow left an audit row: {audit}"
    );
    for (method, path) in [
        ("GET", "/api/v1/workflows/not-a-number"),
        ("GET", "/api/v1/workflows/424242"),
        ("GET", "/api/v1/workflow-runs/424242"),
        ("POST", "/api/v1/workflow-runs/424242/cancel"),
        ("POST", "/api/v1/workflows/424242/trigger"),
    ] {
        let r = f.app.call(method, path, Some(&f.app.admin), None).await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            r.body
        );
    }

    let forbid = f
        .workflow(json!({"name": "forbid", "concurrency": "forbid",
                          "nodes": [{"key": "a", "job_id": endless}]}))
        .await;
    // A trigger body that is not one.
    for body in [
        "[1, 2]",
        "{\"params\": 5}",
        "{\"params\": \"x\", \"later\": true}",
    ] {
        let r = f
            .app
            .raw(
                "POST",
                &format!("/api/v1/workflows/{forbid}/trigger"),
                &f.app.admin,
                "application/json",
                body,
            )
            .await;
        assert!(
            r.status == StatusCode::BAD_REQUEST || r.status == StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {} {}",
            r.status,
            r.body
        );
    }
    let runs = f.app.get("/api/v1/workflow-runs", &f.app.admin).await.body;
    assert_eq!(
        runs["total"], 0,
        "a refused trigger started nothing: {runs}"
    );
    let first = f.trigger(forbid, json!({})).await;
    let r = f
        .app
        .post(
            &format!("/api/v1/workflows/{forbid}/trigger"),
            &f.app.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    // A workflow with a run in progress cannot be deleted.
    assert_eq!(
        f.app
            .delete(&format!("/api/v1/workflows/{forbid}"), &f.app.admin)
            .await
            .status,
        StatusCode::CONFLICT
    );
    assert_eq!(f.operate(first, "cancel").await.status, StatusCode::OK);

    let replace = f
        .workflow(json!({"name": "replace", "concurrency": "replace",
                          "nodes": [{"key": "a", "job_id": endless}]}))
        .await;
    let old = f.trigger(replace, json!({})).await;
    let new = f.trigger(replace, json!({})).await;
    assert_eq!(f.finished(old).await["status"], "cancelled");
    assert_eq!(f.run(new).await["status"], "running");
    assert_eq!(f.operate(new, "cancel").await.status, StatusCode::OK);
    let runs = f
        .app
        .get(
            &format!("/api/v1/workflow-runs?workflow_id={replace}&status=cancelled"),
            &f.app.admin,
        )
        .await
        .body;
    assert_eq!(runs["total"], 2, "{runs}");
    let r = f
        .app
        .get("/api/v1/workflow-runs?status=sideways", &f.app.admin)
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
}
both_backends!(bad_definitions_and_concurrency);

/// A node whose job is a sharding broadcast runs once per live agent (each shard its own run
/// of the node); the node ends with shard 0, and the workflow goes on once.
async fn a_broadcast_node_runs_a_shard_per_agent(mysql: bool) {
    let f = fleet(mysql).await;
    let dir = tempfile::tempdir().unwrap();
    let second = AgentProc::start(&f.app.base, "wf", &dir.path().join("agent2"));
    f.app.wait_for_agent(&second.address).await;
    let shards = f
        .app
        .job_from(
            f.group,
            json!({"name": "shards", "routing": "sharding_broadcast",
                   "handler": {"type": "shell", "command": "echo shard $JOBFLEET_SHARD_INDEX of $JOBFLEET_SHARD_TOTAL"}}),
        )
        .await;
    let ok = f.shell("ok", "true").await;
    let wf = f
        .workflow(json!({
            "name": "broadcast",
            "nodes": [{"key": "all", "job_id": shards}, {"key": "then", "job_id": ok}],
            "edges": [{"from": "all", "to": "then"}],
        }))
        .await;
    let run = f.finished(f.trigger(wf, json!({})).await).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        node(&run, "all")["run_ids"].as_array().unwrap().len(),
        2,
        "{run}"
    );
    assert_eq!(
        node(&run, "then")["run_ids"].as_array().unwrap().len(),
        1,
        "{run}"
    );
}
both_backends!(a_broadcast_node_runs_a_shard_per_agent);

/// A workflow exported with its jobs imports into another group as jobs and a workflow of that
/// group; importing again changes nothing new; a bad document is refused whole.
async fn export_and_import(mysql: bool) {
    let f = fleet(mysql).await;
    let emit = f
        .shell("emit", "echo \"greeting=hi\" >> \"$JOBFLEET_OUTPUT\"")
        .await;
    let show = f.shell("show", "echo \"got $JOBFLEET_IN_greeting\"").await;
    let wf = f
        .workflow(json!({
            "name": "portable", "params": "p", "concurrency": "forbid",
            "nodes": [{"key": "a", "job_id": emit}, {"key": "b", "job_id": show, "timeout_s": 30}],
            "edges": [{"from": "a", "to": "b", "on": "always"}],
        }))
        .await;
    let doc = f
        .app
        .get(&format!("/api/v1/workflows/{wf}/export"), &f.app.admin)
        .await;
    assert_eq!(doc.status, StatusCode::OK, "{}", doc.body);
    let doc = doc.body;
    assert_eq!(doc["kind"], "jobfleet.workflow");
    assert_eq!(doc["workflow"]["nodes"][1]["job"], "show", "{doc}");
    assert_eq!(doc["jobs"].as_array().unwrap().len(), 2, "{doc}");

    let target = f.app.group("elsewhere").await;
    let import = |doc: Value| {
        let app = &f.app;
        async move {
            app.post(
                "/api/v1/workflows/import",
                &app.admin,
                json!({"group_id": target, "document": doc}),
            )
            .await
        }
    };
    let r = import(doc.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let imported = r.body;
    assert_eq!(imported["group_id"], target);
    assert_eq!(imported["concurrency"], "forbid");
    assert_eq!(imported["edges"][0]["on"], "always");
    let jobs = f
        .app
        .get(&format!("/api/v1/jobs?group_id={target}"), &f.app.admin)
        .await
        .body;
    assert_eq!(jobs["total"], 2, "{jobs}");
    let show_there = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "show")
        .unwrap()["id"]
        .clone();
    assert_eq!(imported["nodes"][1]["job_id"], show_there);
    assert_eq!(imported["nodes"][1]["timeout_s"], 30);
    // Again: the same jobs and workflow, updated in place.
    let r = import(doc.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["id"], imported["id"]);
    let jobs = f
        .app
        .get(&format!("/api/v1/jobs?group_id={target}"), &f.app.admin)
        .await
        .body;
    assert_eq!(jobs["total"], 2, "no job twice: {jobs}");

    // A bad document changes nothing: a node naming an unknown job, a bad job, a wrong kind.
    let before = f.app.footprint().await;
    let mut unknown = doc.clone();
    unknown["workflow"]["name"] = json!("other");
    unknown["workflow"]["nodes"][0]["job"] = json!("nope");
    let r = import(unknown).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(
        r.field(),
        Some("document.workflow.nodes[0].job"),
        "{}",
        r.body
    );
    let mut bad_job = doc.clone();
    bad_job["workflow"]["name"] = json!("other");
    bad_job["jobs"][0]["timeout_s"] = json!(-1);
    let r = import(bad_job).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.field(), Some("document.jobs[0].timeout_s"), "{}", r.body);
    let mut wrong = doc.clone();
    wrong["kind"] = json!("something.else");
    assert_eq!(import(wrong).await.status, StatusCode::UNPROCESSABLE_ENTITY);
    let mut cyclic = doc;
    cyclic["workflow"]["name"] = json!("other");
    cyclic["workflow"]["edges"] = json!([{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]);
    let r = import(cyclic).await;
    assert_eq!(r.field(), Some("document.workflow.edges"), "{}", r.body);
    assert_eq!(
        f.app.footprint().await,
        before,
        "refused imports wrote nothing"
    );
}
both_backends!(export_and_import);
