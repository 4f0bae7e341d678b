//! Groups and users through their whole life.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::{TestApp, api_test};

async fn groups_crud(app: &TestApp) {
    let created = app
        .post("/api/v1/groups", &app.admin, json!({"app_name": "xxl-job-executor-sample", "title": "Sample", "address_mode": "manual", "addresses": ["http://10.0.0.5:9999"]}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["addresses"], json!(["http://10.0.0.5:9999/"]));
    let id = created.body["id"].as_i64().unwrap();
    let dup = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": "xxl-job-executor-sample", "title": "Again"}),
        )
        .await;
    assert_eq!(
        (dup.status, dup.field()),
        (StatusCode::CONFLICT, Some("app_name"))
    );
    let updated = app
        .call(
            "PUT",
            &format!("/api/v1/groups/{id}"),
            Some(&app.admin),
            Some(json!({"title": "Renamed", "address_mode": "auto"})),
        )
        .await;
    assert_eq!(
        (
            updated.body["title"].as_str(),
            updated.body["addresses"].as_array().map(Vec::len)
        ),
        (Some("Renamed"), Some(0))
    );
    let job = app.job(&app.admin, id, "keeps group alive").await;
    let refused = app
        .delete(&format!("/api/v1/groups/{id}"), &app.admin)
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    app.delete(&format!("/api/v1/jobs/{job}"), &app.admin).await;
    assert_eq!(
        app.delete(&format!("/api/v1/groups/{id}"), &app.admin)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/groups/{id}"), &app.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert!(
        app.get("/api/v1/agents", &app.admin).await.body["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
api_test!(groups_crud);

async fn users_crud_and_the_last_admin_is_kept(app: &TestApp) {
    let g = app.group("people").await;
    let (id, token) = app.user("uma", "viewer", &[g]).await;
    let dup = app
        .post(
            "/api/v1/users",
            &app.admin,
            json!({"username": "uma", "password": "long-password", "role": "viewer"}),
        )
        .await;
    assert_eq!(
        (dup.status, dup.field()),
        (StatusCode::CONFLICT, Some("username"))
    );
    let changed = app
        .call(
            "PATCH",
            &format!("/api/v1/users/{id}"),
            Some(&app.admin),
            Some(json!({"role": "operator", "groups": []})),
        )
        .await;
    assert_eq!(
        (
            changed.body["role"].as_str(),
            changed.body["groups"].as_array().map(Vec::len)
        ),
        (Some("operator"), Some(0))
    );
    assert_eq!(
        app.get("/api/v1/me", &token).await.body["role"],
        "operator",
        "role changes apply at once"
    );
    assert_eq!(
        app.get(&format!("/api/v1/users/{id}"), &token).await.status,
        StatusCode::OK,
        "users may read themselves"
    );
    assert_eq!(
        app.get("/api/v1/users/1", &token).await.status,
        StatusCode::FORBIDDEN
    );
    let listed = app.get("/api/v1/users", &app.admin).await.body;
    assert_eq!(listed["total"], 2);
    assert!(
        !listed.to_string().contains("argon2"),
        "hashes never leave the server"
    );

    let admin_id = app.get("/api/v1/me", &app.admin).await.body["user_id"]
        .as_i64()
        .unwrap();
    for change in [json!({"role": "viewer"}), json!({"disabled": true})] {
        let r = app
            .call(
                "PATCH",
                &format!("/api/v1/users/{admin_id}"),
                Some(&app.admin),
                Some(change.clone()),
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{change}: {}", r.body);
    }
    assert_eq!(
        app.get("/api/v1/me", &app.admin).await.body["role"],
        "admin",
        "the refused change was rolled back"
    );
    // With a second admin, the first may step down.
    app.call(
        "PATCH",
        &format!("/api/v1/users/{id}"),
        Some(&app.admin),
        Some(json!({"role": "admin"})),
    )
    .await;
    let r = app
        .call(
            "PATCH",
            &format!("/api/v1/users/{admin_id}"),
            Some(&app.admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}
api_test!(users_crud_and_the_last_admin_is_kept);
