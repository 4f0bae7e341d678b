//! Bad input at every entry point: a 4xx JSON error with a stable code, and nothing written.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestApp, api_test};

fn with(mut body: Value, pointer: &str, value: Value) -> Value {
    let mut target = &mut body;
    for part in pointer.trim_start_matches('/').split('/') {
        target = &mut target[part];
    }
    *target = value;
    body
}

async fn bad_job_bodies_are_refused_and_write_nothing(app: &TestApp) {
    let g = app.group("bad-input").await;
    let existing = app.job(&app.admin, g, "taken").await;
    let parent = app.job(&app.admin, g, "parent").await;
    // parent -> existing, so existing -> parent would close a cycle.
    let mut chain = TestApp::job_body(g, "parent");
    chain["children"] = json!([existing]);
    assert_eq!(
        app.call(
            "PUT",
            &format!("/api/v1/jobs/{parent}"),
            Some(&app.admin),
            Some(chain)
        )
        .await
        .status,
        StatusCode::OK
    );
    let base = TestApp::job_body(g, "fresh");
    let before = app.footprint().await;

    let cases: Vec<(&str, Value, StatusCode, &str, Option<&str>)> = vec![
        (
            "unknown field",
            with(base.clone(), "/colour", json!("red")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("colour"),
        ),
        (
            "missing field",
            json!({"group_id": g, "name": "x", "handler": {"type": "shell", "command": "x"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("schedule"),
        ),
        (
            "wrong type",
            with(base.clone(), "/timeout_s", json!("soon")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            None,
        ),
        (
            "wrong enum",
            with(base.clone(), "/routing", json!("sideways")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            None,
        ),
        (
            "negative timeout",
            with(base.clone(), "/timeout_s", json!(-5)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("timeout_s"),
        ),
        (
            "absurd timeout",
            with(base.clone(), "/timeout_s", json!(10_000_000_000_i64)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("timeout_s"),
        ),
        (
            "over-long name",
            with(base.clone(), "/name", json!("x".repeat(500))),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            "html name",
            with(base.clone(), "/name", json!("<img src=x onerror=alert(1)>")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            "sql name",
            with(base.clone(), "/name", json!("x'); DROP TABLE job; --")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            "invalid cron",
            with(base.clone(), "/schedule/expr", json!("0 0 12 31 2 ?")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_cron",
            Some("schedule.expr"),
        ),
        (
            "cron garbage",
            with(base.clone(), "/schedule/expr", json!("every tuesday")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_cron",
            Some("schedule.expr"),
        ),
        (
            "invalid zone",
            with(
                base.clone(),
                "/schedule/timezone",
                json!("Atlantis/Capital"),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_timezone",
            Some("schedule.timezone"),
        ),
        (
            "unknown group",
            with(base.clone(), "/group_id", json!(99_999)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_group",
            Some("group_id"),
        ),
        (
            "duplicate name",
            with(base.clone(), "/name", json!("taken")),
            StatusCode::CONFLICT,
            "conflict",
            Some("name"),
        ),
        (
            "unknown child",
            with(base.clone(), "/children", json!([424_242])),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("children"),
        ),
        (
            "negative limits",
            with(base.clone(), "/limits", json!({"memory_mb": -1})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("limits.memory_mb"),
        ),
        (
            "nan-ish cpu",
            with(base.clone(), "/limits", json!({"cpu": 0.0})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("limits.cpu"),
        ),
        (
            "bad interpreter",
            with(
                base.clone(),
                "/handler",
                json!({"type": "script", "source": "x", "interpreter": "cobol"}),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("handler.interpreter"),
        ),
        (
            "nul in command",
            with(base.clone(), "/handler/command", json!("echo \u{0}")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("handler.command"),
        ),
    ];
    for (what, body, status, code, field) in cases {
        let r = app.post("/api/v1/jobs", &app.admin, body).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (status, code, field),
            "{what}: {}",
            r.body
        );
        assert!(
            !r.body["error"]["message"].as_str().unwrap().is_empty(),
            "{what}"
        );
    }
    // A child cycle can only appear on update.
    let cyclic = with(TestApp::job_body(g, "taken"), "/children", json!([parent]));
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{existing}"),
            Some(&app.admin),
            Some(cyclic),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "child_cycle"),
        "{}",
        r.body
    );
    let selfish = with(
        TestApp::job_body(g, "taken"),
        "/children",
        json!([existing]),
    );
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{existing}"),
            Some(&app.admin),
            Some(selfish),
        )
        .await;
    assert_eq!(r.code(), "child_cycle");

    // Bodies that are not JSON at all.
    let r = app
        .raw(
            "POST",
            "/api/v1/jobs",
            &app.admin,
            "application/json",
            "{\"group_id\": ",
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let r = app
        .raw("POST", "/api/v1/jobs", &app.admin, "text/plain", "hello")
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let huge =
        serde_json::to_string(&with(base.clone(), "/params", json!("x".repeat(100_000)))).unwrap();
    let r = app
        .raw("POST", "/api/v1/jobs", &app.admin, "application/json", huge)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );

    assert_eq!(
        app.footprint().await,
        before,
        "rejected requests wrote nothing"
    );
    // HTML in free text is data, stored and returned as is.
    let ok = app
        .post(
            "/api/v1/jobs",
            &app.admin,
            with(base, "/description", json!("<script>alert('x')</script>")),
        )
        .await;
    assert_eq!(ok.status, StatusCode::CREATED);
    assert_eq!(ok.body["description"], "<script>alert('x')</script>");
}
api_test!(bad_job_bodies_are_refused_and_write_nothing);

async fn bad_group_user_and_token_bodies_are_refused(app: &TestApp) {
    let before = app.footprint().await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/api/v1/groups",
            json!({"app_name": "<b>x</b>", "title": "t"}),
            "app_name",
        ),
        (
            "/api/v1/groups",
            json!({"app_name": "", "title": "t"}),
            "app_name",
        ),
        (
            "/api/v1/groups",
            json!({"app_name": "ok", "title": "t", "address_mode": "manual"}),
            "addresses",
        ),
        (
            "/api/v1/groups",
            json!({"app_name": "ok", "title": "t", "address_mode": "manual", "addresses": ["javascript:alert(1)"]}),
            "addresses",
        ),
        (
            "/api/v1/groups",
            json!({"app_name": "ok", "title": "t", "addresses": ["http://a:1/"]}),
            "addresses",
        ),
        (
            "/api/v1/groups",
            json!({"app_name": "ok", "title": "t", "extra": 1}),
            "extra",
        ),
        (
            "/api/v1/users",
            json!({"username": "a b", "password": "long-password", "role": "viewer"}),
            "username",
        ),
        (
            "/api/v1/users",
            json!({"username": "eve", "password": "short", "role": "viewer"}),
            "password",
        ),
        (
            "/api/v1/users",
            json!({"username": "eve", "password": "long-password", "role": "viewer", "groups": [777]}),
            "groups",
        ),
        ("/api/v1/tokens", json!({"name": "<x>"}), "name"),
    ];
    for (path, body, field) in cases {
        let r = app.post(path, &app.admin, body.clone()).await;
        assert!(r.status.is_client_error(), "{path} {body}: {}", r.body);
        assert_eq!(r.field(), Some(field), "{path} {body}: {}", r.body);
    }
    let r = app
        .post(
            "/api/v1/users",
            &app.admin,
            json!({"username": "eve", "password": "long-password", "role": "root"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.footprint().await, before);
    let r = app
        .call("GET", "/api/v1/jobs/not-a-number", Some(&app.admin), None)
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = app
        .call(
            "POST",
            "/api/v1/auth/token",
            None,
            Some(json!({"username": "admin"})),
        )
        .await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("password"))
    );
}
api_test!(bad_group_user_and_token_bodies_are_refused);

/// A database outage is a 503 with a clear code, never a 400 or a hang, and the admin recovers.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_is_503_and_recovers() {
    let (db, proxy, via_proxy) = crate::support::proxy::mariadb().await;
    let app = TestApp::start_with(
        db,
        &[
            ("JOBFLEET_DATABASE_URL", via_proxy.as_str()),
            ("JOBFLEET_DB_CONNECT_TIMEOUT_MS", "1000"),
        ],
    )
    .await;
    let g = app.group("outage").await;

    proxy.cut();
    for path in ["/api/v1/jobs", "/readyz"] {
        let r = app.call("GET", path, Some(&app.admin), None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            "{path}: {}",
            r.body
        );
    }
    let r = app
        .post(
            "/api/v1/jobs",
            &app.admin,
            TestApp::job_body(g, "during outage"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);

    proxy.restore();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if app.call("GET", "/readyz", None, None).await.status == StatusCode::OK {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the admin did not recover after the database came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        app.get("/api/v1/jobs", &app.admin).await.body["total"],
        0,
        "the write during the outage did not land"
    );
}
