//! Tags, bulk actions and the per-job policies (starting deadline, history limits) through the
//! open API, on both backends: an operator's bulk action never touches another group's jobs.

use jobfleet_admin::db::job_run;
use jobfleet_admin::domain::ids::{GroupId, JobId};
use jobfleet_admin::domain::policy::TriggerKind;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestApp, api_test};

async fn tagged(app: &TestApp, token: &str, group: i64, name: &str, tags: Value) -> i64 {
    let mut body = TestApp::job_body(group, name);
    body["tags"] = tags;
    let r = app.post("/api/v1/jobs", token, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["id"].as_i64().unwrap()
}

fn names(page: &Value) -> Vec<String> {
    let mut names: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

async fn enabled(app: &TestApp, id: i64) -> bool {
    app.get(&format!("/api/v1/jobs/{id}"), &app.admin)
        .await
        .body["enabled"]
        == true
}

async fn tags_are_kept_sorted_and_filter_exactly(app: &TestApp) {
    let g = app.group("tags").await;
    let id = tagged(
        app,
        &app.admin,
        g,
        "one",
        json!(["nightly", "billing", "Team:Data"]),
    )
    .await;
    tagged(app, &app.admin, g, "two", json!(["x_y"])).await;
    tagged(app, &app.admin, g, "three", json!(["xay", "nightly-2"])).await;
    tagged(app, &app.admin, g, "untagged", json!([])).await;
    let job = app
        .get(&format!("/api/v1/jobs/{id}"), &app.admin)
        .await
        .body;
    assert_eq!(job["tags"], json!(["billing", "nightly", "team:data"]));
    let by = |tag: &'static str| async move {
        let r = app
            .get(&format!("/api/v1/jobs?tag={tag}"), &app.admin)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        names(&r.body)
    };
    assert_eq!(by("nightly").await, ["one"], "a whole tag, not a prefix");
    assert_eq!(by("x_y").await, ["two"], "`_` is no wildcard");
    assert_eq!(by("team:data").await, ["one"]);
    assert_eq!(by("").await.len(), 4, "an empty tag filters nothing");

    // Bad tags name the field; nothing is written.
    let before = app.footprint().await;
    for (tags, why) in [
        (json!(["a b"]), "must not contain"),
        (json!(["é"]), "must not contain"),
        (json!([""]), "1 to 63"),
        (json!(["a".repeat(64)]), "1 to 63"),
        (json!(["a", "a"]), "twice"),
        (json!(["Prod", "prod"]), "twice"),
        (
            json!((0..21).map(|i| format!("t{i}")).collect::<Vec<_>>()),
            "at most 20",
        ),
        (json!("a,b"), "invalid type"),
    ] {
        let mut body = TestApp::job_body(g, "bad");
        body["tags"] = tags.clone();
        let r = app.post("/api/v1/jobs", &app.admin, body).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{tags}: {}",
            r.body
        );
        assert!(r.body.to_string().contains(why), "{tags}: {}", r.body);
    }
    let r = app.get("/api/v1/jobs?tag=a%20b", &app.admin).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.field(), Some("tag"));
    assert_eq!(app.footprint().await, before);
}
api_test!(tags_are_kept_sorted_and_filter_exactly);

async fn bulk_actions_stay_within_the_callers_groups(app: &TestApp) {
    let (mine, theirs) = (app.group("bulk-mine").await, app.group("bulk-theirs").await);
    let (_, operator) = app.user("bulk-op", "operator", &[mine]).await;
    let (_, viewer) = app.user("bulk-viewer", "viewer", &[mine]).await;
    let a1 = tagged(app, &app.admin, mine, "a1", json!(["nightly"])).await;
    let a2 = tagged(app, &app.admin, mine, "a2", json!(["nightly"])).await;
    let a3 = tagged(app, &app.admin, mine, "a3", json!(["hourly"])).await;
    let b1 = tagged(app, &app.admin, theirs, "b1", json!(["nightly"])).await;

    // By tag: the operator's two nightly jobs, not the other group's.
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &operator,
            json!({"action": "disable", "filter": {"tag": "nightly"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (&r.body["matched"], &r.body["done"]),
        (&json!(2), &json!(2))
    );
    assert!(!enabled(app, a1).await && !enabled(app, a2).await);
    assert!(enabled(app, a3).await && enabled(app, b1).await);
    let audit = app
        .get("/api/v1/audit?action=job.disable&limit=10", &app.admin)
        .await
        .body;
    assert_eq!(audit["total"], 2, "one audit row per job: {audit}");

    // By ids: another group's job reads as missing and stays as it was.
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &operator,
            json!({"action": "disable", "ids": [a3, b1]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!((&r.body["done"], &r.body["failed"]), (&json!(1), &json!(1)));
    let refused = &r.body["items"][1];
    assert_eq!(
        (&refused["id"], &refused["ok"]),
        (&json!(b1), &json!(false))
    );
    assert_eq!(refused["error"]["code"], "not_found");
    assert!(
        refused.get("name").is_none(),
        "nothing about a hidden job: {refused}"
    );
    assert!(enabled(app, b1).await);

    // Pause a whole group and bring it back: the group filter.
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &operator,
            json!({"action": "enable", "filter": {"group_id": mine}}),
        )
        .await;
    assert_eq!(r.body["done"], 3, "{}", r.body);
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &operator,
            json!({"action": "enable", "filter": {"group_id": theirs}}),
        )
        .await;
    assert_eq!(
        r.body["matched"], 0,
        "a group it cannot see matches nothing: {}",
        r.body
    );

    // Trigger with params: a run per job (no agent is up, so each ends without one).
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &operator,
            json!({"action": "trigger", "ids": [a1, a2], "params": "--bulk"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    for item in r.body["items"].as_array().unwrap() {
        let run = app
            .get(&format!("/api/v1/runs/{}", item["run_id"]), &app.admin)
            .await
            .body;
        assert_eq!(run["params"], "--bulk", "{run}");
        assert_eq!(run["job_id"], item["id"]);
    }

    // A viewer's bulk action is refused job by job, and changes nothing.
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &viewer,
            json!({"action": "delete", "filter": {"group_id": mine}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (&r.body["matched"], &r.body["done"]),
        (&json!(3), &json!(0))
    );
    assert_eq!(r.body["items"][0]["error"]["code"], "forbidden");

    // Delete by ids.
    let r = app
        .post(
            "/api/v1/jobs/bulk",
            &operator,
            json!({"action": "delete", "ids": [a3]}),
        )
        .await;
    assert_eq!(r.body["done"], 1, "{}", r.body);
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{a3}"), &app.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // Bad requests are refused whole, naming the field.
    let before = app.footprint().await;
    for (body, field) in [
        (json!({"action": "enable"}), Some("ids")),
        (json!({"action": "enable", "ids": []}), Some("ids")),
        (json!({"action": "enable", "ids": [a1, a1]}), Some("ids")),
        (
            json!({"action": "enable", "ids": [a1], "filter": {}}),
            Some("filter"),
        ),
        (
            json!({"action": "enable", "ids": [a1], "params": "x"}),
            Some("params"),
        ),
        (
            json!({"action": "enable", "filter": {"tag": "a b"}}),
            Some("filter.tag"),
        ),
        (
            json!({"action": "enable", "filter": {"colour": "red"}}),
            None,
        ),
        (json!({"action": "explode", "ids": [a1]}), None),
        (
            json!({"action": "enable", "ids": (0..1001).collect::<Vec<_>>()}),
            Some("ids"),
        ),
    ] {
        let r = app.post("/api/v1/jobs/bulk", &operator, body.clone()).await;
        assert!(
            r.status == StatusCode::UNPROCESSABLE_ENTITY || r.status == StatusCode::BAD_REQUEST,
            "{body}: {} {}",
            r.status,
            r.body
        );
        if let Some(field) = field {
            assert_eq!(r.field(), Some(field), "{body}: {}", r.body);
        }
    }
    assert_eq!(app.footprint().await, before);
}
api_test!(bulk_actions_stay_within_the_callers_groups);

async fn history_limits_keep_the_newest_runs_of_each_kind(app: &TestApp) {
    let g = app.group("history").await;
    let mut body = TestApp::job_body(g, "limited");
    body["keep_succeeded"] = json!(2);
    body["keep_failed"] = json!(1);
    body["start_deadline_s"] = json!(120);
    let r = app.post("/api/v1/jobs", &app.admin, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        (
            &r.body["keep_succeeded"],
            &r.body["keep_failed"],
            &r.body["start_deadline_s"]
        ),
        (&json!(2), &json!(1), &json!(120))
    );
    let limited = r.body["id"].as_i64().unwrap();
    let unlimited = app.job(&app.admin, g, "unlimited").await;
    let now = app.now_ms();
    let statuses = [
        "succeeded",
        "failed",
        "succeeded",
        "timed_out",
        "succeeded",
        "killed",
        "succeeded",
        "running",
        "lost",
    ];
    let inserted = app
        .state
        .db
        .run(move |conn| {
            let mut ids = Vec::new();
            for job_id in [limited, unlimited] {
                for (i, status) in statuses.iter().enumerate() {
                    // Older than the two days the daily report recounts.
                    let at = now - 3 * 86_400_000 + i as i64;
                    ids.push((
                        job_id,
                        *status,
                        job_run::insert(
                            conn,
                            &job_run::NewJobRun {
                                job_id: JobId(job_id),
                                group_id: GroupId(g),
                                first_run_id: None,
                                attempt: 1,
                                trigger_kind: TriggerKind::Manual,
                                fire_slot_ms: None,
                                scheduled_ms: at,
                                status: status.parse().unwrap(),
                                params: String::new(),
                                shard_index: 0,
                                shard_total: 1,
                                created_ms: at,
                                workflow_node_id: None,
                                node_attempt: None,
                                timeout_s: None,
                                env: None,
                            },
                        )?,
                    ));
                }
            }
            Ok(ids)
        })
        .await
        .unwrap();
    // Runs of today are kept whatever the limit: the daily report still counts them.
    let today: Vec<i64> = app
        .state
        .db
        .run(move |conn| {
            let mut ids = Vec::new();
            for i in 0..3 {
                ids.push(
                    job_run::insert(
                        conn,
                        &job_run::NewJobRun {
                            job_id: JobId(limited),
                            group_id: GroupId(g),
                            first_run_id: None,
                            attempt: 1,
                            trigger_kind: TriggerKind::Manual,
                            fire_slot_ms: None,
                            scheduled_ms: now + i,
                            status: jobfleet_admin::domain::policy::RunStatus::Succeeded,
                            params: String::new(),
                            shard_index: 0,
                            shard_total: 1,
                            created_ms: now + i,
                            workflow_node_id: None,
                            node_attempt: None,
                            timeout_s: None,
                            env: None,
                        },
                    )?
                    .0,
                );
            }
            Ok(ids)
        })
        .await
        .unwrap();
    jobfleet_admin::scheduler::monitors::retention(&app.state)
        .await
        .unwrap();
    let kept = |job: i64| async move {
        let page = app
            .get(&format!("/api/v1/runs?job_id={job}&limit=100"), &app.admin)
            .await
            .body;
        let mut ids: Vec<i64> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        ids.sort_unstable();
        ids
    };
    let of = |job: i64, wanted: &[&str]| -> Vec<i64> {
        inserted
            .iter()
            .filter(|(j, s, _)| *j == job && wanted.contains(s))
            .map(|(_, _, id)| id.0)
            .collect()
    };
    // Limited: today's three succeeded (the newest two, and one beyond the limit that the
    // report still counts), no older succeeded one, the newest unsuccessful (lost), and the
    // running one.
    let mut expected = today.clone();
    expected.extend(of(limited, &["running", "lost"]));
    expected.sort_unstable();
    assert_eq!(kept(limited).await, expected);
    // Unlimited: every run, until retention_days.
    assert_eq!(kept(unlimited).await.len(), statuses.len());

    // Bad values name the field.
    for (field, value) in [
        ("start_deadline_s", json!(0)),
        ("start_deadline_s", json!(8 * 86_400)),
        ("keep_succeeded", json!(-1)),
        ("keep_failed", json!(1_000_001)),
        ("keep_failed", json!("ten")),
    ] {
        let mut body = TestApp::job_body(g, "bad-policy");
        body[field] = value.clone();
        let r = app.post("/api/v1/jobs", &app.admin, body).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}={value}: {}",
            r.body
        );
    }
}
api_test!(history_limits_keep_the_newest_runs_of_each_kind);
