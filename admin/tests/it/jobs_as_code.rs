//! Jobs as code through the open API, on both backends: a YAML document applied twice (the
//! second a no-op), updates that name what changed, dry runs that write nothing, prune, the
//! export that applies back unchanged, RBAC all or nothing, and bad documents.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestApp, api_test};

const DOCUMENT: &str = r#"
kind: jobfleet.jobs
version: 1
groups:
  - app_name: billing
    title: Billing jobs
    jobs:
      - name: nightly invoices
        schedule: {type: cron, expr: "0 0 2 * * ?", timezone: Europe/Paris}
        handler:
          type: script
          interpreter: bash
          source: |
            #!/bin/bash
            echo "invoicing $1"
        params: --all
        retry: {count: 2, backoff_s: 30}
        children: [send mails, {group: reports, job: daily summary}]
      - name: send mails
        schedule: {type: none}
        handler: {type: shell, command: "echo mails"}
        agent_labels: {zone: a}
  - app_name: reports
    jobs:
      - name: daily summary
        schedule: {type: fixed_rate, interval_s: 3600}
        handler: {type: shell, command: "echo summary"}
        enabled: false
"#;

async fn apply(app: &TestApp, token: &str, query: &str, yaml: &str) -> crate::support::Response {
    app.raw(
        "POST",
        &format!("/api/v1/apply{query}"),
        token,
        "application/yaml",
        yaml.to_owned(),
    )
    .await
}

fn actions(report: &Value) -> Vec<(String, String, String)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["action"].as_str().unwrap().to_owned(),
                c["group"].as_str().unwrap().to_owned(),
                c["job"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

fn change<'a>(report: &'a Value, job: &str) -> &'a Value {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["job"] == job)
        .unwrap_or_else(|| panic!("no change for {job}: {report}"))
}

async fn job_named(app: &TestApp, group: &str, name: &str) -> Option<Value> {
    let page = app.get("/api/v1/jobs?limit=500", &app.admin).await.body;
    let groups = app.get("/api/v1/groups?limit=500", &app.admin).await.body;
    let group_id = groups["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["app_name"] == group)?["id"]
        .clone();
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["group_id"] == group_id && j["name"] == name)
        .cloned()
}

async fn a_document_applies_once_and_then_changes_nothing(app: &TestApp) {
    // A dry run reports the creates and writes nothing.
    let before = app.footprint().await;
    let r = apply(app, &app.admin, "?dry_run=true", DOCUMENT).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["dry_run"], true);
    assert_eq!(r.body["created"], 3);
    assert!(
        r.body["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["id"].is_null()),
        "a dry run's creates have no ids: {}",
        r.body
    );
    assert_eq!(app.footprint().await, before, "a dry run writes nothing");
    assert!(job_named(app, "billing", "send mails").await.is_none());

    // The real apply creates both groups and the three jobs, children before their parents,
    // so the parent names its new children in its one create.
    let r = apply(app, &app.admin, "", DOCUMENT).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        actions(&r.body),
        [
            ("create".into(), "billing".into(), "-".into()),
            ("create".into(), "reports".into(), "-".into()),
            ("create".into(), "billing".into(), "send mails".into()),
            ("create".into(), "reports".into(), "daily summary".into()),
            ("create".into(), "billing".into(), "nightly invoices".into()),
        ]
    );
    assert_eq!(
        (&r.body["created"], &r.body["updated"], &r.body["unchanged"]),
        (&json!(3), &json!(0), &json!(0))
    );
    let invoices = job_named(app, "billing", "nightly invoices").await.unwrap();
    let mails = job_named(app, "billing", "send mails").await.unwrap();
    let summary = job_named(app, "reports", "daily summary").await.unwrap();
    assert_eq!(invoices["children"], json!([mails["id"], summary["id"]]));
    assert_eq!(invoices["schedule"]["timezone"], "Europe/Paris");
    assert_eq!(invoices["handler"]["script_version"], 1);
    assert_eq!(mails["agent_labels"], json!({"zone": "a"}));
    assert_eq!(summary["enabled"], false);
    let groups = app.get("/api/v1/groups?limit=500", &app.admin).await.body;
    assert!(
        groups["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["app_name"] == "billing" && g["title"] == "Billing jobs"),
        "{groups}"
    );

    // The same document again: everything unchanged, not one row or audit entry written.
    let before = app.footprint().await;
    let r = apply(app, &app.admin, "", DOCUMENT).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (&r.body["created"], &r.body["updated"], &r.body["unchanged"]),
        (&json!(0), &json!(0), &json!(3))
    );
    assert_eq!(app.footprint().await, before, "a second apply is a no-op");
    let again = job_named(app, "billing", "nightly invoices").await.unwrap();
    assert_eq!(again["updated_ms"], invoices["updated_ms"]);
    assert_eq!(again["handler"]["script_version"], 1);

    // One change: the update names it, the script gets a new version, the audit one row.
    let changed = DOCUMENT.replace("echo \"invoicing $1\"", "echo \"invoicing v2 $1\"");
    let changed = changed.replace("interval_s: 3600", "interval_s: 1800");
    let r = apply(app, &app.admin, "", &changed).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (&r.body["updated"], &r.body["unchanged"]),
        (&json!(2), &json!(1))
    );
    assert_eq!(
        change(&r.body, "nightly invoices")["fields"],
        json!(["handler"])
    );
    assert_eq!(
        change(&r.body, "daily summary")["fields"],
        json!(["schedule"])
    );
    let invoices = job_named(app, "billing", "nightly invoices").await.unwrap();
    assert_eq!(invoices["handler"]["script_version"], 2);
    let audit = app
        .get("/api/v1/audit?action=job.update&limit=10", &app.admin)
        .await
        .body;
    assert_eq!(audit["total"], 2, "{audit}");

    // Prune: a dry run names the job the document leaves out and deletes nothing; the real
    // one deletes it and takes it out of its parent's children.
    let without_mails = changed.replace(
        "children: [send mails, {group: reports, job: daily summary}]",
        "children: [{group: reports, job: daily summary}]",
    );
    let cut = without_mails.find("      - name: send mails").unwrap();
    let end = without_mails.find("  - app_name: reports").unwrap();
    let without_mails = format!("{}{}", &without_mails[..cut], &without_mails[end..]);
    let r = apply(app, &app.admin, "?prune=true&dry_run=true", &without_mails).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["deleted"], 1);
    assert_eq!(change(&r.body, "send mails")["action"], "delete");
    assert!(job_named(app, "billing", "send mails").await.is_some());
    let r = apply(app, &app.admin, "", &without_mails).await;
    assert_eq!(r.body["deleted"], 0, "no prune, no delete: {}", r.body);
    assert!(job_named(app, "billing", "send mails").await.is_some());
    let r = apply(app, &app.admin, "?prune=true", &without_mails).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (&r.body["deleted"], &r.body["unchanged"]),
        (&json!(1), &json!(2))
    );
    assert!(job_named(app, "billing", "send mails").await.is_none());
    let deleted = app
        .get("/api/v1/audit?action=job.delete&limit=10", &app.admin)
        .await
        .body;
    assert_eq!(deleted["total"], 1, "{deleted}");

    // The export applies back as it is, as YAML and as JSON.
    let exported = app
        .client
        .get(format!(
            "{}/api/v1/export?groups=billing,reports&format=yaml",
            app.base
        ))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(exported.status(), StatusCode::OK);
    assert_eq!(
        exported.headers()["content-type"].to_str().unwrap(),
        "application/yaml"
    );
    let yaml = exported.text().await.unwrap();
    assert!(yaml.contains("kind: jobfleet.jobs"), "{yaml}");
    assert!(yaml.contains("invoicing v2"), "scripts travel: {yaml}");
    assert!(yaml.contains("group: reports"), "children by name: {yaml}");
    let before = app.footprint().await;
    let r = apply(app, &app.admin, "?prune=true", &yaml).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (&r.body["unchanged"], &r.body["created"]),
        (&json!(2), &json!(0))
    );
    assert_eq!(app.footprint().await, before);
    let as_json = app.get("/api/v1/export", &app.admin).await;
    assert_eq!(as_json.status, StatusCode::OK);
    assert_eq!(as_json.body["groups"].as_array().unwrap().len(), 2);
    let r = app.post("/api/v1/apply", &app.admin, as_json.body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["unchanged"], 2);
}
api_test!(a_document_applies_once_and_then_changes_nothing);

async fn an_operator_applies_to_its_groups_only_all_or_nothing(app: &TestApp) {
    let mine = app.group("mine").await;
    let theirs = app.group("theirs").await;
    app.job(&app.admin, theirs, "their job").await;
    let (_, operator) = app.user("op", "operator", &[mine]).await;
    let (_, viewer) = app.user("viewer", "viewer", &[mine]).await;
    let doc = |groups: &str| format!("kind: jobfleet.jobs\nversion: 1\ngroups:\n{groups}");
    let mine_doc = "  - app_name: mine\n    jobs:\n      - {name: a, schedule: {type: none}, handler: {type: shell, command: 'true'}}\n";

    // Its own group: fine.
    let r = apply(app, &operator, "", &doc(mine_doc)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["created"], 1);

    // A group it cannot see reads as missing, and nothing of the document is written.
    let before = app.footprint().await;
    let both = format!(
        "{}  - app_name: theirs\n    jobs: []\n",
        mine_doc.replace("command: 'true'", "command: 'echo changed'")
    );
    let r = apply(app, &operator, "", &doc(&both)).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "groups[1].app_name");
    assert_eq!(app.footprint().await, before, "all or nothing");
    // Creating a group needs an admin.
    let r = apply(
        app,
        &operator,
        "",
        &doc("  - app_name: brand-new\n    jobs: []\n"),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("an admin can create it"),
        "{}",
        r.body
    );
    // Retitling its group needs an admin too.
    let retitled = mine_doc.replace("app_name: mine\n", "app_name: mine\n    title: Other\n");
    let r = apply(app, &operator, "", &doc(&retitled)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    // Pruning deletes in its own groups only: `theirs` keeps its job.
    let r = apply(
        app,
        &operator,
        "?prune=true",
        &doc("  - app_name: mine\n    jobs: []\n"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["deleted"], 1);
    assert!(job_named(app, "theirs", "their job").await.is_some());

    // A viewer's dry run is refused where its apply would be.
    let r = apply(app, &viewer, "?dry_run=true", &doc(mine_doc)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    // The operator's export holds its groups only.
    let exported = app.get("/api/v1/export", &operator).await.body;
    let names: Vec<&str> = exported["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["app_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mine"]);
    let r = app.get("/api/v1/export?groups=theirs", &operator).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
}
api_test!(an_operator_applies_to_its_groups_only_all_or_nothing);

async fn bad_documents_are_refused_by_field_and_write_nothing(app: &TestApp) {
    app.group("g").await;
    let before = app.footprint().await;
    let head = "kind: jobfleet.jobs\nversion: 1\ngroups:\n  - app_name: g\n    jobs:\n";
    let cases: &[(&str, StatusCode, &str)] = &[
        ("groups: [", StatusCode::BAD_REQUEST, ""),
        (
            "kind: jobfleet.workflow\nversion: 1\ngroups: []\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "kind",
        ),
        (
            "kind: jobfleet.jobs\nversion: 1\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups",
        ),
        (
            "kind: jobfleet.jobs\nversion: 1\ngroups: []\nextra: 1\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "extra",
        ),
        (
            "      - {name: a, schedule: {type: cron, expr: 'every day'}, handler: {type: shell, command: x}}\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups[0].jobs[0].schedule.expr",
        ),
        (
            "      - {name: a, schedule: {type: none}, handler: {type: shell, command: x}, children: [nobody]}\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups[0].jobs[0].children",
        ),
        (
            "      - {name: a, schedule: {type: none}, handler: {type: shell, command: x}, children: [b]}\n      - {name: b, schedule: {type: none}, handler: {type: shell, command: x}, children: [a]}\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups[0].jobs[1].children",
        ),
        (
            "      - {name: a, schedule: {type: none}, handler: {type: shell, command: x}, alert: {channels: [999]}}\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups[0].jobs[0].alert.channels",
        ),
        (
            "      - {name: a, group_id: 1, schedule: {type: none}, handler: {type: shell, command: x}}\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups[0].jobs[0].group_id",
        ),
    ];
    for (body, status, field) in cases {
        let text = if body.starts_with("      -") {
            format!("{head}{body}")
        } else {
            (*body).to_owned()
        };
        let r = apply(app, &app.admin, "", &text).await;
        assert_eq!(r.status, *status, "{text}\n{}", r.body);
        if !field.is_empty() {
            assert_eq!(r.body["error"]["field"], *field, "{text}\n{}", r.body);
        }
    }
    let r = app.get("/api/v1/export?format=xml", &app.admin).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let r = app.get("/api/v1/export?groups=nope", &app.admin).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let r = app.get("/api/v1/apply?surprise=1", &app.admin).await;
    assert!(
        [StatusCode::NOT_FOUND, StatusCode::METHOD_NOT_ALLOWED].contains(&r.status),
        "{}",
        r.status
    );
    let r = apply(app, &app.admin, "?dry_run=maybe", head).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    let r = app
        .call("POST", "/api/v1/apply", None, Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        app.footprint().await,
        before,
        "no refused document wrote anything"
    );
}
api_test!(bad_documents_are_refused_by_field_and_write_nothing);
