//! Workflows in the console over plain HTTP (the editor's check, save with errors kept, the
//! drawn graph, a run's page and its live state and operations, rights) and workflow documents
//! as YAML through the open API. The browser flow is in `tests/browser`.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::console::Console;
use crate::support::{ADMIN_PASSWORD, AgentProc, TestApp, api_test, both_backends};

fn text(definition: &str) -> String {
    definition.to_owned()
}

async fn check(v: &mut Console<'_>, csrf: &str, group: i64, name: &str, definition: &str) -> Value {
    let g = group.to_string();
    let page = v
        .post(
            "/console/workflows/check",
            &[
                ("csrf", csrf),
                ("group_id", &g),
                ("name", name),
                ("concurrency", "allow"),
                ("timeout_s", "0"),
                ("enabled", "true"),
                ("definition", definition),
            ],
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    serde_json::from_str(&page.body).unwrap()
}

async fn the_editor_checks_saves_and_draws(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let app = &app;
    let group = app.group("wf-console").await;
    let other = app.group("wf-elsewhere").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "wf-console", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    // Long enough to be running while the run's page is read, cancelled and checked.
    let extract = app
        .job_from(
            group,
            json!({"name": "extract rows", "handler": {"type": "shell", "command": "sleep 30"}}),
        )
        .await;
    let load = app.job(&app.admin, group, "load rows").await;
    let secret = app.job(&app.admin, other, "secret-job-name").await;
    app.user("olga", "operator", &[group]).await;
    let mut v = Console::new(app);
    let page = v.login("olga", "olga-password").await;
    let csrf = page.csrf();
    assert!(
        page.body.contains("href=\"/console/workflows\""),
        "nav link"
    );
    for path in ["/console/workflows", "/console/workflows/new"] {
        let p = v.get(path).await;
        assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
    }

    let good = text(&format!(
        "nodes:\n  - key: extract\n    job_id: {extract}\n  - key: load\n    job_id: {load}\nedges:\n  - from: extract\n    to: load\n"
    ));
    let ok = check(&mut v, &csrf, group, "nightly", &good).await;
    assert_eq!(ok["ok"], json!(true), "{ok}");
    let svg = ok["graph"].as_str().unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("data-key=\"load\""),
        "{svg}"
    );
    assert!(svg.contains("extract rows"), "labels are job names: {svg}");

    // A cycle is named; the graph is not drawn (it has no layers).
    let cycle = format!("{good}  - from: load\n    to: extract\n");
    let bad = check(&mut v, &csrf, group, "nightly", &cycle).await;
    assert_eq!(bad["ok"], json!(false));
    let message = bad["errors"]["definition"].as_str().unwrap();
    assert!(
        message.contains("edges") && message.contains("cycle"),
        "{message}"
    );
    // A job of a group the operator cannot see is "missing", and its name does not leak.
    let foreign = format!(
        "nodes:\n  - key: a\n    job_id: {secret}\n  - key: b\n    job_id: {load}\nedges:\n  - from: a\n    to: b\n"
    );
    let bad = check(&mut v, &csrf, group, "nightly", &foreign).await;
    let message = bad["errors"]["definition"].as_str().unwrap();
    assert!(
        message.contains("nodes[0].job_id") && message.contains("does not exist"),
        "{message}"
    );
    assert!(!bad.to_string().contains("secret-job-name"), "{bad}");
    assert!(
        bad["graph"]
            .as_str()
            .unwrap()
            .contains(&format!("#{secret}"))
    );
    // Not YAML at all, and a key the form owns.
    let bad = check(&mut v, &csrf, group, "nightly", "nodes: [").await;
    assert!(
        bad["errors"]["definition"]
            .as_str()
            .unwrap()
            .contains("YAML"),
        "{bad}"
    );
    let bad = check(&mut v, &csrf, group, "nightly", &format!("name: x\n{good}")).await;
    assert!(
        bad["errors"]["definition"]
            .as_str()
            .unwrap()
            .contains("`name`"),
        "{bad}"
    );
    let bad = check(&mut v, &csrf, group, "", &good).await;
    assert!(bad["errors"]["name"].is_string(), "{bad}");

    // Saving a bad definition keeps what was typed, says why, and writes nothing.
    let before = app.footprint().await;
    let g = group.to_string();
    let shown = v
        .post(
            "/console/workflows",
            &[
                ("csrf", &csrf),
                ("group_id", &g),
                ("name", "nightly <etl>"),
                ("concurrency", "forbid"),
                ("timeout_s", "0"),
                ("definition", &cycle),
            ],
        )
        .await;
    assert_eq!(
        shown.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("data-field-error=\"name\""),
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("nightly &#60;etl&#62;") && !shown.body.contains("<etl>"),
        "input kept, escaped"
    );
    let shown = v
        .post(
            "/console/workflows",
            &[
                ("csrf", &csrf),
                ("group_id", &g),
                ("name", "nightly"),
                ("concurrency", "forbid"),
                ("timeout_s", "0"),
                ("definition", &cycle),
            ],
        )
        .await;
    assert_eq!(shown.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(shown.body.contains("data-field-error=\"definition\""));
    assert!(shown.body.contains("cycle"));
    assert_eq!(app.footprint().await, before, "nothing written");

    let saved = v
        .post(
            "/console/workflows",
            &[
                ("csrf", &csrf),
                ("group_id", &g),
                ("name", "nightly"),
                ("concurrency", "forbid"),
                ("timeout_s", "600"),
                ("enabled", "true"),
                ("definition", &good),
            ],
        )
        .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    let id: i64 = saved
        .location
        .strip_prefix("/console/workflows/")
        .unwrap()
        .parse()
        .unwrap();
    let api = app
        .get(&format!("/api/v1/workflows/{id}"), &app.admin)
        .await;
    assert_eq!(api.body["concurrency"], json!("forbid"));
    assert_eq!(api.body["timeout_s"], json!(600));
    assert_eq!(api.body["nodes"].as_array().unwrap().len(), 2);
    let shown = v.get(&saved.location).await;
    assert!(
        shown.body.contains("<svg class=\"dag\"") && shown.body.contains("data-key=\"extract\"")
    );

    // The edit form holds the text; a changed text is saved (a third node).
    let edit = v.get(&format!("/console/workflows/{id}/edit")).await;
    assert_eq!(edit.status, StatusCode::OK);
    assert!(
        edit.body.contains(&format!("job_id: {load}")),
        "{}",
        edit.body
    );
    let three = format!(
        "{good}  - from: load\n    to: report\nparams: --full\nschedule:\n  type: fixed_rate\n  interval_s: 3600\n"
    ).replace(
        "edges:",
        &format!("  - key: report\n    job_id: {extract}\nedges:"),
    );
    let updated = v
        .post(
            &format!("/console/workflows/{id}"),
            &[
                ("csrf", &csrf),
                ("id", &id.to_string()),
                ("group_id", &g),
                ("name", "nightly"),
                ("concurrency", "forbid"),
                ("timeout_s", "600"),
                ("enabled", "true"),
                ("definition", &three),
            ],
        )
        .await;
    assert_eq!(updated.status, StatusCode::SEE_OTHER, "{}", updated.body);
    let api = app
        .get(&format!("/api/v1/workflows/{id}"), &app.admin)
        .await;
    assert_eq!(api.body["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(api.body["params"], json!("--full"));
    assert_eq!(api.body["schedule"]["type"], json!("fixed_rate"));
    assert!(api.body["next_fire_ms"].as_i64().is_some(), "{}", api.body);
    let shown = v.get(&format!("/console/workflows/{id}")).await;
    assert!(shown.body.contains("every 3600 s"), "{}", shown.body);
    let edit = v.get(&format!("/console/workflows/{id}/edit")).await;
    assert!(
        edit.body.contains("interval_s: 3600"),
        "the text keeps the schedule"
    );

    // The export is a file.
    let export = v
        .get(&format!("/console/workflows/{id}/export?format=yaml"))
        .await;
    assert_eq!(export.status, StatusCode::OK);
    assert!(
        export.body.contains("kind: jobfleet.workflow"),
        "{}",
        export.body
    );
    assert!(export.body.contains("job: load rows"), "{}", export.body);
    // ...and comes back through the import form (matched by name: an update, no new workflow).
    let form = v.get("/console/workflows/import").await;
    assert_eq!(form.status, StatusCode::OK);
    let back = v
        .post(
            "/console/workflows/import",
            &[
                ("csrf", &csrf),
                ("group_id", &g),
                ("document", &export.body),
            ],
        )
        .await;
    assert_eq!(back.status, StatusCode::SEE_OTHER, "{}", back.body);
    assert_eq!(back.location, format!("/console/workflows/{id}"));
    let broken = export.body.replace("job: load rows", "job: no such job");
    let before = app.footprint().await;
    let refused = v
        .post(
            "/console/workflows/import",
            &[("csrf", &csrf), ("group_id", &g), ("document", &broken)],
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("data-field-error=\"document\""),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("no job `no such job`"),
        "{}",
        refused.body
    );
    let garbage = v
        .post(
            "/console/workflows/import",
            &[("csrf", &csrf), ("group_id", &g), ("document", "kind: [")],
        )
        .await;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST, "{}", garbage.body);
    assert_eq!(app.footprint().await, before, "nothing written");

    // A run: its page draws the graph with statuses; its state answers for the live colouring.
    let trigger = v
        .post(
            &format!("/console/workflows/{id}/trigger"),
            &[("csrf", &csrf), ("params", "")],
        )
        .await;
    assert_eq!(trigger.status, StatusCode::SEE_OTHER, "{}", trigger.body);
    assert!(trigger.location.starts_with("/console/workflow-runs/"));
    let run_page = v.get(&trigger.location).await;
    assert_eq!(run_page.status, StatusCode::OK, "{}", run_page.body);
    assert!(
        run_page.body.contains("class=\"dag-node status-"),
        "{}",
        run_page.body
    );
    assert!(run_page.body.contains("id=\"wfrun-cancel\""));
    let state = v.get(&format!("{}/state", trigger.location)).await;
    let state: Value = serde_json::from_str(&state.body).unwrap();
    assert_eq!(state["nodes"].as_array().unwrap().len(), 3, "{state}");
    assert_eq!(state["done"], json!(false));
    // forbid: a second trigger while this one runs is refused.
    let again = v
        .post(
            &format!("/console/workflows/{id}/trigger"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    let cancel = v
        .post(&format!("{}/cancel", trigger.location), &[("csrf", &csrf)])
        .await;
    assert_eq!(cancel.status, StatusCode::SEE_OTHER, "{}", cancel.body);
    let state = v.get(&format!("{}/state", trigger.location)).await;
    let state: Value = serde_json::from_str(&state.body).unwrap();
    assert_eq!(state["status"], json!("cancelled"), "{state}");
    assert_eq!(state["done"], json!(true));
    let bad_op = v
        .post(&format!("{}/explode", trigger.location), &[("csrf", &csrf)])
        .await;
    assert_eq!(bad_op.status, StatusCode::NOT_FOUND);
    let bad_mark = v
        .post(
            &format!("{}/mark", trigger.location),
            &[("csrf", &csrf), ("node", "load"), ("status", "failed")],
        )
        .await;
    assert_eq!(
        bad_mark.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad_mark.body
    );

    // A viewer of the group sees the pages and no buttons, and cannot post.
    app.user("vivian", "viewer", &[group]).await;
    let mut viewer = Console::new(app);
    let vcsrf = viewer.login("vivian", "vivian-password").await.csrf();
    let page = viewer.get(&format!("/console/workflows/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("id=\"workflow-trigger\"")
            && !page.body.contains("id=\"workflow-edit\"")
    );
    let before = app.footprint().await;
    for path in [
        format!("/console/workflows/{id}/trigger"),
        format!("/console/workflows/{id}/delete"),
        "/console/workflows/check".to_owned(),
        format!("{}/rerun", trigger.location),
    ] {
        let res = viewer
            .post(
                &path,
                &[
                    ("csrf", &vcsrf),
                    ("group_id", &g),
                    ("name", "x"),
                    ("definition", &good),
                ],
            )
            .await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{path}: {}", res.body);
    }
    assert_eq!(app.footprint().await, before);
    // Someone else's run is not found.
    app.user("otto", "operator", &[other]).await;
    let mut outsider = Console::new(app);
    outsider.login("otto", "otto-password").await;
    let hidden = outsider.get(&trigger.location).await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND);
    let hidden = outsider.get(&format!("{}/state", trigger.location)).await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND);

    // The admin deletes it through the console.
    let mut admin = Console::new(app);
    let acsrf = admin.login("admin", ADMIN_PASSWORD).await.csrf();
    let gone = admin
        .post(
            &format!("/console/workflows/{id}/delete"),
            &[("csrf", &acsrf)],
        )
        .await;
    assert_eq!(gone.status, StatusCode::SEE_OTHER, "{}", gone.body);
    assert_eq!(
        app.get(&format!("/api/v1/workflows/{id}"), &app.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}
both_backends!(the_editor_checks_saves_and_draws);

async fn documents_travel_as_yaml(app: &TestApp) {
    let group = app.group("wf-yaml").await;
    let target = app.group("wf-yaml-copy").await;
    let a = app.job(&app.admin, group, "first").await;
    let b = app.job(&app.admin, group, "second").await;
    let created = app
        .post(
            "/api/v1/workflows",
            &app.admin,
            json!({"group_id": group, "name": "yaml flow", "schedule": {"type": "none"},
                   "nodes": [{"key": "a", "job_id": a}, {"key": "b", "job_id": b, "join": "all_done"}],
                   "edges": [{"from": "a", "to": "b", "on": "failure"}]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();

    let yaml = app
        .client
        .get(format!(
            "{}/api/v1/workflows/{id}/export?format=yaml",
            app.base
        ))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(yaml.headers()["content-type"], "application/yaml");
    let yaml = yaml.text().await.unwrap();
    assert!(
        yaml.contains("on: failure") && yaml.contains("job: second"),
        "{yaml}"
    );
    // The Accept header chooses too; JSON stays the default.
    let by_accept = app
        .client
        .get(format!("{}/api/v1/workflows/{id}/export", app.base))
        .bearer_auth(&app.admin)
        .header("accept", "application/yaml")
        .send()
        .await
        .unwrap();
    assert_eq!(by_accept.text().await.unwrap(), yaml);
    let json_doc = app
        .get(&format!("/api/v1/workflows/{id}/export"), &app.admin)
        .await;
    assert_eq!(json_doc.body["kind"], json!("jobfleet.workflow"));
    let bad_format = app
        .get(
            &format!("/api/v1/workflows/{id}/export?format=xml"),
            &app.admin,
        )
        .await;
    assert_eq!(bad_format.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad_format.field(), Some("format"));

    // Import the YAML into another group: created there with its jobs, then a no-op update.
    let indented: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
    let request = format!("group_id: {target}\ndocument:\n{indented}");
    let imported = app
        .raw(
            "POST",
            "/api/v1/workflows/import",
            &app.admin,
            "application/yaml",
            request.clone(),
        )
        .await;
    assert_eq!(imported.status, StatusCode::CREATED, "{}", imported.body);
    assert_eq!(imported.body["group_id"], json!(target));
    assert_eq!(imported.body["edges"][0]["on"], json!("failure"));
    assert_eq!(imported.body["nodes"][1]["join"], json!("all_done"));
    let again = app
        .raw(
            "POST",
            "/api/v1/workflows/import",
            &app.admin,
            "application/yaml",
            request,
        )
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);

    // Bad YAML is 400, the wrong shape 422 naming the field; nothing is written.
    let before = app.footprint().await;
    let broken = app
        .raw(
            "POST",
            "/api/v1/workflows/import",
            &app.admin,
            "application/yaml",
            "group_id: [",
        )
        .await;
    assert_eq!(broken.status, StatusCode::BAD_REQUEST, "{}", broken.body);
    assert_eq!(broken.code(), "invalid_json");
    let shape = app
        .raw(
            "POST",
            "/api/v1/workflows/import",
            &app.admin,
            "application/yaml",
            format!("group_id: {target}\ndocuments: {{}}\n"),
        )
        .await;
    assert_eq!(
        shape.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        shape.body
    );
    assert_eq!(shape.field(), Some("documents"));
    let not_utf8 = app
        .raw(
            "POST",
            "/api/v1/workflows/import",
            &app.admin,
            "application/yaml",
            vec![0xff, 0xfe, 0x00],
        )
        .await;
    assert_eq!(
        not_utf8.status,
        StatusCode::BAD_REQUEST,
        "{}",
        not_utf8.body
    );
    let bad_json = app
        .raw(
            "POST",
            "/api/v1/workflows/import",
            &app.admin,
            "application/json",
            "{",
        )
        .await;
    assert_eq!(bad_json.status, StatusCode::BAD_REQUEST);
    assert_eq!(app.footprint().await, before);
}
api_test!(documents_travel_as_yaml);
