//! Workflows (issue 16) end to end: a real admin (scheduling, real clock) and a real agent
//! process run DAGs of shell jobs; the assertions read the API, the run logs and the tables.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use jobfleet_admin::domain::ids::WorkflowId;
use jobfleet_admin::scheduler::WorkflowDue;
use jobfleet_admin::scheduler::tick;
use jobfleet_admin::scheduler::workflow_fire::{self, Fired};

use crate::support::{AgentProc, Opts, TestApp, both_backends, wait_for};

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

    /// The workflow's runs, newest first (list form: no nodes).
    async fn runs_of(&self, workflow: i64) -> Vec<Value> {
        workflow_runs(&self.app, workflow).await
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
    // The runs a result starts are taken for sending in the transaction that stores it, dated
    // once (a node's run is scheduled for the moment it is made), not by the timer after it.
    for key in ["b", "c", "d"] {
        let started = f
            .app
            .run(node(&run, key)["run_ids"][0].as_i64().unwrap())
            .await;
        assert!(started["scheduled_ms"].is_i64(), "{started}");
        assert_eq!(
            started["triggered_ms"], started["scheduled_ms"],
            "{key}: {started}"
        );
    }
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
            json!({"name": "sched", "nodes": [{"key": "a", "job_id": ok}], "schedule": {"type": "cron", "expr": "* * *"}}),
            "schedule.expr",
            "",
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
            "schedule": {"type": "cron", "expr": "0 0 3 * * ?", "timezone": "Europe/Berlin"},
            "misfire": "fire_once_now",
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
    assert_eq!(
        doc["workflow"]["schedule"],
        json!({"type": "cron", "expr": "0 0 3 * * ?", "timezone": "Europe/Berlin"})
    );
    assert_eq!(doc["workflow"]["misfire"], "fire_once_now");

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
    assert_eq!(imported["schedule"], doc["workflow"]["schedule"]);
    assert_eq!(imported["misfire"], "fire_once_now");
    assert!(imported["next_fire_ms"].as_i64().is_some(), "{imported}");
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

    // A document written before workflows had schedules imports as unscheduled.
    let mut old = doc.clone();
    old["workflow"]["name"] = json!("older");
    let fields = old["workflow"].as_object_mut().unwrap();
    fields.remove("schedule");
    fields.remove("misfire");
    let r = import(old).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["schedule"]["type"], "none", "{}", r.body);
    assert!(r.body["next_fire_ms"].is_null(), "{}", r.body);

    // A bad document changes nothing: a node naming an unknown job, a bad job, a wrong kind,
    // a bad schedule.
    let before = f.app.footprint().await;
    let mut bad_schedule = doc.clone();
    bad_schedule["workflow"]["name"] = json!("other");
    bad_schedule["workflow"]["schedule"]["timezone"] = json!("Mars/Olympus");
    let r = import(bad_schedule).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(
        r.field(),
        Some("document.workflow.schedule.timezone"),
        "{}",
        r.body
    );
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

async fn workflow_runs(app: &TestApp, workflow: i64) -> Vec<Value> {
    let r = app
        .get(
            &format!("/api/v1/workflow-runs?workflow_id={workflow}&limit=500"),
            &app.admin,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["items"].as_array().unwrap().clone()
}

/// Waits until two plan passes have ended and `settle_ms` has gone by since `since_ms`: what a
/// pass begun before a change could still plan has had its time to start.
async fn settled(app: &TestApp, since_ms: i64, settle_ms: i64) {
    let plan_passes = || app.state.metrics.workers.snapshot()["plan"].passes;
    let passes = plan_passes();
    wait_for(
        FINISH_WITHIN,
        "two plan passes and the settle time",
        || async {
            (plan_passes() >= passes + 2 && app.now_ms() > since_ms + settle_ms).then_some(())
        },
    )
    .await;
}

/// A workflow scheduled at a fixed rate of one second: the scheduler starts a run per slot, each
/// runs both nodes on the real agent; disabling the workflow stops new runs.
async fn a_fixed_rate_workflow_fires_until_disabled(mysql: bool) {
    let f = fleet(mysql).await;
    let ok = f.shell("ok", "true").await;
    let mut body = json!({
        "name": "every-second",
        "nodes": [{"key": "a", "job_id": ok}, {"key": "b", "job_id": ok}],
        "edges": [{"from": "a", "to": "b"}],
        "schedule": {"type": "fixed_rate", "interval_s": 1},
    });
    let wf = f.workflow(body.clone()).await;
    let view = f
        .app
        .get(&format!("/api/v1/workflows/{wf}"), &f.app.admin)
        .await
        .body;
    assert_eq!(
        view["schedule"],
        json!({"type": "fixed_rate", "interval_s": 1, "timezone": "UTC"})
    );
    assert_eq!(view["misfire"], "do_nothing");
    assert!(view["next_fire_ms"].as_i64().is_some(), "{view}");

    let done = wait_for(FINISH_WITHIN, "three scheduled runs to succeed", || async {
        let done: Vec<Value> = f
            .runs_of(wf)
            .await
            .into_iter()
            .filter(|r| r["status"] == "succeeded")
            .collect();
        (done.len() >= 3).then_some(done)
    })
    .await;
    let mut slots = Vec::new();
    for summary in &done {
        assert_eq!(summary["trigger_kind"], "schedule", "{summary}");
        let slot = summary["fire_slot_ms"].as_i64().unwrap();
        assert!(summary["started_ms"].as_i64().unwrap() >= slot, "{summary}");
        let run = f.run(summary["id"].as_i64().unwrap()).await;
        assert_eq!(
            statuses(&run),
            pairs(&[("a", "succeeded"), ("b", "succeeded")]),
            "{run}"
        );
        slots.push(slot);
    }
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), done.len(), "one run per slot: {done:?}");
    assert!(
        slots.windows(2).all(|w| (w[1] - w[0]) % 1000 == 0),
        "slots keep the fixed-rate phase: {slots:?}"
    );

    body["group_id"] = json!(f.group);
    body["enabled"] = json!(false);
    let r = f
        .app
        .call(
            "PUT",
            &format!("/api/v1/workflows/{wf}"),
            Some(&f.app.admin),
            Some(body),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    assert!(r.body["next_fire_ms"].is_null(), "{}", r.body);
    let disabled_at = f.app.now_ms();
    settled(&f.app, disabled_at, 2_000).await;
    let runs = f.runs_of(wf).await;
    assert!(
        runs.iter()
            .all(|r| r["fire_slot_ms"].as_i64().unwrap() <= disabled_at),
        "no slot after the disable started: {runs:?}"
    );
}
both_backends!(a_fixed_rate_workflow_fires_until_disabled);

/// A `once` workflow starts one run, at its time, and never again.
async fn a_once_workflow_fires_once_at_its_time(mysql: bool) {
    let f = fleet(mysql).await;
    let ok = f.shell("ok", "true").await;
    let at = f.app.now_ms() + 1_500;
    let wf = f
        .workflow(json!({
            "name": "once",
            "nodes": [{"key": "a", "job_id": ok}],
            "schedule": {"type": "once", "at_ms": at},
        }))
        .await;
    let run = wait_for(FINISH_WITHIN, "the once run to succeed", || async {
        f.runs_of(wf)
            .await
            .into_iter()
            .find(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(run["trigger_kind"], "schedule", "{run}");
    assert_eq!(run["fire_slot_ms"].as_i64(), Some(at), "{run}");
    assert!(run["started_ms"].as_i64().unwrap() >= at, "{run}");
    let view = f
        .app
        .get(&format!("/api/v1/workflows/{wf}"), &f.app.admin)
        .await
        .body;
    assert!(view["next_fire_ms"].is_null(), "{view}");
    settled(&f.app, f.app.now_ms(), 1_000).await;
    assert_eq!(f.runs_of(wf).await.len(), 1);
}
both_backends!(a_once_workflow_fires_once_at_its_time);

/// With a manual clock and passes run by hand: a slot is planned in the pre-read window and
/// starts once; a slot whose admin stopped before starting it is started by the monitors; the
/// `forbid` policy skips a slot while a run is in progress; after an outage `do_nothing` drops
/// the missed slots and `fire_once_now` starts one catch-up (trigger kind `misfire`).
async fn misfire_recovery_and_forbid_with_a_manual_clock(mysql: bool) {
    let app = TestApp::start_opts(crate::support::test_db(mysql).await, &[], Opts::default()).await;
    let g = app.group("wf-manual").await;
    // No agent: node runs stay pending, so a started workflow run stays in progress.
    let step = app
        .job_from(
            g,
            json!({"name": "step", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let t0 = app.now_ms();
    let create = |name: &str, misfire: &str, concurrency: &str| {
        let body = json!({
            "group_id": g, "name": name, "misfire": misfire, "concurrency": concurrency,
            "nodes": [{"key": "a", "job_id": step}],
            "schedule": {"type": "fixed_rate", "interval_s": 10},
        });
        let app = &app;
        async move {
            let r = app.post("/api/v1/workflows", &app.admin, body).await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
            r.body["id"].as_i64().unwrap()
        }
    };
    let skip = create("skip", "do_nothing", "allow").await;
    let catch_up = create("catch-up", "fire_once_now", "allow").await;
    let forbid = create("forbid", "do_nothing", "forbid").await;
    let due_of = |dues: &[WorkflowDue], wf: i64| -> WorkflowDue {
        *dues
            .iter()
            .find(|d| d.workflow_id == WorkflowId(wf))
            .unwrap_or_else(|| panic!("no due for workflow {wf}: {dues:?}"))
    };

    // Nothing is due yet: the first slot is 10 s after creation, beyond the 5 s pre-read.
    assert!(
        tick::tick(&app.state)
            .await
            .unwrap()
            .workflow_dues
            .is_empty()
    );
    app.clock.advance(6_000);
    let planned = tick::tick(&app.state).await.unwrap().workflow_dues;
    assert_eq!(planned.len(), 3, "{planned:?}");
    assert!(
        planned
            .iter()
            .all(|d| d.slot_ms == t0 + 10_000 && d.at_ms == d.slot_ms)
    );
    // A second pass plans nothing twice.
    assert!(
        tick::tick(&app.state)
            .await
            .unwrap()
            .workflow_dues
            .is_empty()
    );

    // At its time the slot starts, once.
    app.clock.advance(4_000);
    let first = due_of(&planned, forbid);
    assert!(matches!(
        workflow_fire::fire(&app.state, first).await.unwrap(),
        Fired::Started(_)
    ));
    assert_eq!(
        workflow_fire::fire(&app.state, first).await.unwrap(),
        Fired::Gone
    );
    // The other two were planned by an admin that "stopped" before starting them: the
    // monitors start them once they are late by the orphan delay (within the threshold).
    app.clock.advance(3_500);
    assert_eq!(workflow_fire::recover(&app.state).await.unwrap(), 2);
    for wf in [skip, catch_up, forbid] {
        let runs = workflow_runs(&app, wf).await;
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0]["fire_slot_ms"].as_i64(), Some(t0 + 10_000));
        assert_eq!(runs[0]["trigger_kind"], "schedule");
    }

    // The next slot of `forbid` while its first run is in progress is skipped.
    app.clock.advance(2_500);
    let second = tick::tick(&app.state).await.unwrap().workflow_dues;
    assert_eq!(second.len(), 3, "{second:?}");
    app.clock.advance(4_000);
    assert!(matches!(
        workflow_fire::fire(&app.state, due_of(&second, forbid))
            .await
            .unwrap(),
        Fired::Skipped(_)
    ));
    assert_eq!(workflow_runs(&app, forbid).await.len(), 1);

    // The admin is down for half an hour with slots of `skip` and `catch-up` planned.
    app.clock.advance(1_800_000);
    let missed_before = app.state.metrics.misfired_slots.get("do_nothing");
    assert_eq!(workflow_fire::recover(&app.state).await.unwrap(), 0);
    let after = tick::tick(&app.state).await.unwrap().workflow_dues;
    let now = app.now_ms();
    let catch = due_of(&after, catch_up);
    assert_eq!(catch.at_ms, now, "the catch-up starts now: {after:?}");
    assert!(matches!(
        workflow_fire::fire(&app.state, catch).await.unwrap(),
        Fired::Started(_)
    ));
    for d in after
        .iter()
        .filter(|d| d.workflow_id != WorkflowId(catch_up))
    {
        assert_eq!(
            d.at_ms, d.slot_ms,
            "do_nothing plans no catch-up: {after:?}"
        );
        assert!(d.slot_ms >= now - 5_000, "{after:?}");
    }
    let catch_runs = workflow_runs(&app, catch_up).await;
    let misfires: Vec<&Value> = catch_runs
        .iter()
        .filter(|r| r["trigger_kind"] == "misfire")
        .collect();
    assert_eq!(misfires.len(), 1, "one catch-up: {catch_runs:?}");
    assert_eq!(misfires[0]["started_ms"].as_i64(), Some(now));
    assert_eq!(
        workflow_runs(&app, skip).await.len(),
        1,
        "do_nothing fired nothing"
    );
    assert!(
        app.state.metrics.misfired_slots.get("do_nothing") >= missed_before + 170,
        "missed slots are counted"
    );
    // The catch-up's next slot follows the fixed-rate phase.
    let view = app
        .get(&format!("/api/v1/workflows/{catch_up}"), &app.admin)
        .await
        .body;
    let next = view["next_fire_ms"].as_i64().unwrap();
    assert_eq!((next - t0) % 10_000, 0, "{view}");
    assert!(next >= now - 5_000, "{view}");
}
both_backends!(misfire_recovery_and_forbid_with_a_manual_clock);

/// A cron schedule with a time zone: `next_fire_ms` is the job computation's answer.
async fn a_cron_workflow_plans_in_its_time_zone(mysql: bool) {
    let app = TestApp::start_opts(crate::support::test_db(mysql).await, &[], Opts::default()).await;
    let g = app.group("wf-cron").await;
    let step = app
        .job_from(
            g,
            json!({"name": "step", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let schedule = json!({"type": "cron", "expr": "0 30 9 * * ?", "timezone": "America/New_York"});
    let now = app.now_ms();
    let r = app
        .post(
            "/api/v1/workflows",
            &app.admin,
            json!({"group_id": g, "name": "nine-thirty", "schedule": schedule,
                "nodes": [{"key": "a", "job_id": step}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let (expected, tz) =
        serde_json::from_value::<jobfleet_admin::domain::job::ScheduleInput>(schedule.clone())
            .unwrap()
            .validate()
            .unwrap();
    assert_eq!(
        r.body["next_fire_ms"].as_i64(),
        expected.next_after(now, now, tz),
        "{}",
        r.body
    );
    assert_eq!(r.body["schedule"], schedule);
}
both_backends!(a_cron_workflow_plans_in_its_time_zone);

/// Bad schedules are refused naming the field, on create and update, and write nothing.
async fn bad_schedules_are_refused_naming_the_field(mysql: bool) {
    let app = TestApp::start_opts(crate::support::test_db(mysql).await, &[], Opts::default()).await;
    let g = app.group("wf-bad").await;
    let step = app
        .job_from(
            g,
            json!({"name": "step", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let body = |schedule: Value, misfire: Value| {
        let mut b = json!({"group_id": g, "name": "wf", "schedule": schedule,
            "nodes": [{"key": "a", "job_id": step}]});
        if !misfire.is_null() {
            b["misfire"] = misfire;
        }
        b
    };
    let cases = [
        (
            json!({"type": "cron", "expr": "0 0 12 31 2 ?"}),
            Value::Null,
            "schedule.expr",
        ),
        (
            json!({"type": "cron", "expr": "every tuesday"}),
            Value::Null,
            "schedule.expr",
        ),
        (json!({"type": "cron"}), Value::Null, "schedule.expr"),
        (
            json!({"type": "cron", "expr": "0 0 9 * * ?", "timezone": "Mars/Olympus"}),
            Value::Null,
            "schedule.timezone",
        ),
        (
            json!({"type": "fixed_rate", "interval_s": 0}),
            Value::Null,
            "schedule.interval_s",
        ),
        (
            json!({"type": "fixed_rate"}),
            Value::Null,
            "schedule.interval_s",
        ),
        (json!({"type": "once"}), Value::Null, "schedule.at_ms"),
        (
            json!({"type": "once", "at_ms": 1, "interval_s": 5}),
            Value::Null,
            "schedule.interval_s",
        ),
        (
            json!({"type": "none", "colour": "red"}),
            Value::Null,
            "colour",
        ),
        (json!({"type": "none"}), json!("sometimes"), "misfire"),
    ];
    let before = app.footprint().await;
    for (schedule, misfire, field) in &cases {
        let r = app
            .post(
                "/api/v1/workflows",
                &app.admin,
                body(schedule.clone(), misfire.clone()),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{schedule}: {}",
            r.body
        );
        assert_eq!(r.field(), Some(*field), "{schedule}: {}", r.body);
    }
    assert_eq!(
        app.footprint().await,
        before,
        "refused creates wrote nothing"
    );
    let r = app.get("/api/v1/workflows", &app.admin).await;
    assert_eq!(r.body["total"], 0, "{}", r.body);

    // An update with a bad schedule leaves the workflow as it was.
    let good = body(json!({"type": "fixed_rate", "interval_s": 60}), Value::Null);
    let r = app.post("/api/v1/workflows", &app.admin, good).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let wf = r.body["id"].as_i64().unwrap();
    let stored = r.body;
    let before = app.footprint().await;
    for (schedule, misfire, field) in &cases {
        let r = app
            .call(
                "PUT",
                &format!("/api/v1/workflows/{wf}"),
                Some(&app.admin),
                Some(body(schedule.clone(), misfire.clone())),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{schedule}: {}",
            r.body
        );
        assert_eq!(r.field(), Some(*field), "{schedule}: {}", r.body);
    }
    assert_eq!(
        app.footprint().await,
        before,
        "refused updates wrote nothing"
    );
    let now = app
        .get(&format!("/api/v1/workflows/{wf}"), &app.admin)
        .await
        .body;
    assert_eq!(now, stored);
}
both_backends!(bad_schedules_are_refused_naming_the_field);

/// Many workflows triggered at the same moment (as a cron minute or a burst of API calls does)
/// all start and all finish: the trigger transactions must not deadlock each other on MariaDB,
/// nor hold pool connections while they wait.
async fn many_workflows_triggered_at_once_all_run(mysql: bool) {
    let f = fleet(mysql).await;
    let job = f.shell("burst step", "true").await;
    let mut workflows = Vec::new();
    for i in 0..100 {
        workflows.push(
            f.workflow(json!({"name": format!("burst {i}"),
                "nodes": [{"key": "a", "job_id": job}, {"key": "b", "job_id": job}, {"key": "c", "job_id": job}],
                "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]}))
                .await,
        );
    }
    let paths: Vec<String> = workflows
        .iter()
        .map(|w| format!("/api/v1/workflows/{w}/trigger"))
        .collect();
    let triggers = paths
        .iter()
        .map(|path| f.app.post(path, &f.app.admin, json!({})));
    let answers = futures_util::future::join_all(triggers).await;
    let mut runs = Vec::new();
    for r in answers {
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        runs.push(r.body["id"].as_i64().unwrap());
    }
    for id in runs {
        let run = f.finished(id).await;
        assert_eq!(run["status"], json!("succeeded"), "{run}");
        assert_eq!(
            statuses(&run),
            pairs(&[("a", "succeeded"), ("b", "succeeded"), ("c", "succeeded")])
        );
    }
}
both_backends!(many_workflows_triggered_at_once_all_run);
