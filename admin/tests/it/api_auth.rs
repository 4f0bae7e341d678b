//! Authentication: tokens, expiry, tampering, revocation, disabled users, rate limits, RBAC.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::{ADMIN_PASSWORD, TestApp, api_test};

async fn tokens_are_checked_on_every_request(app: &TestApp) {
    let me = app.get("/api/v1/me", &app.admin).await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(me.body["role"], "admin");

    let missing = app.call("GET", "/api/v1/jobs", None, None).await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::UNAUTHORIZED, "unauthenticated")
    );

    for bad in [
        "garbage",
        "a.b.c",
        "jft_doesnotexist0000000000000000000000000000",
    ] {
        let r = app.get("/api/v1/jobs", bad).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bad}");
    }
    // A token signed with another secret.
    let foreign = jobfleet_admin::auth::jwt::JwtKeys::new(b"another-secret-another-secret-another")
        .issue(1, "admin", app.now_ms(), 60_000)
        .unwrap()
        .0;
    assert_eq!(
        app.get("/api/v1/jobs", &foreign).await.status,
        StatusCode::UNAUTHORIZED
    );
    // A tampered payload (role/user swapped) fails the signature.
    let mut parts: Vec<String> = app.admin.split('.').map(str::to_owned).collect();
    parts[1] = parts[1].chars().rev().collect();
    assert_eq!(
        app.get("/api/v1/jobs", &parts.join(".")).await.status,
        StatusCode::UNAUTHORIZED
    );

    // Expiry follows the admin's clock.
    app.clock.advance(3601 * 1000);
    let expired = app.get("/api/v1/jobs", &app.admin).await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED);
    assert!(
        expired.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
}
api_test!(tokens_are_checked_on_every_request);

async fn wrong_passwords_fail_alike_and_get_rate_limited(app: &TestApp) {
    let wrong = app.try_login("admin", "nope-nope").await;
    let unknown = app.try_login("ghost", "nope-nope").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        wrong.body, unknown.body,
        "the answer does not reveal which names exist"
    );
    for _ in 0..9 {
        app.try_login("admin", "nope-nope").await;
    }
    let limited = app.try_login("admin", ADMIN_PASSWORD).await;
    assert_eq!(
        (limited.status, limited.code()),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    app.clock.advance(5 * 60 * 1000 + 1);
    app.login("admin", ADMIN_PASSWORD).await;
}
api_test!(wrong_passwords_fail_alike_and_get_rate_limited);

async fn disabling_and_password_resets_cut_access_at_once(app: &TestApp) {
    let (id, token) = app.user("carol", "operator", &[]).await;
    assert_eq!(app.get("/api/v1/me", &token).await.status, StatusCode::OK);
    app.clock.advance(5);
    let r = app
        .call(
            "POST",
            &format!("/api/v1/users/{id}/password"),
            Some(&app.admin),
            Some(json!({"password": "new-password-2"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_eq!(
        app.get("/api/v1/me", &token).await.status,
        StatusCode::UNAUTHORIZED,
        "old JWT dies with the old password"
    );
    app.clock.advance(5);
    let token = app.login("carol", "new-password-2").await;
    let r = app
        .call(
            "PATCH",
            &format!("/api/v1/users/{id}"),
            Some(&app.admin),
            Some(json!({"disabled": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        app.get("/api/v1/me", &token).await.status,
        StatusCode::UNAUTHORIZED
    );
    let login = app.try_login("carol", "new-password-2").await;
    assert_eq!(login.status, StatusCode::UNAUTHORIZED);
}
api_test!(disabling_and_password_resets_cut_access_at_once);

async fn own_password_change_needs_the_current_one(app: &TestApp) {
    let (_, token) = app.user("dave", "viewer", &[]).await;
    let wrong = app
        .post(
            "/api/v1/me/password",
            &token,
            json!({"current_password": "x", "new_password": "brand-new-pass"}),
        )
        .await;
    assert_eq!(
        (wrong.status, wrong.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("current_password"))
    );
    let weak = app
        .post(
            "/api/v1/me/password",
            &token,
            json!({"current_password": "dave-password", "new_password": "short"}),
        )
        .await;
    assert_eq!(weak.field(), Some("new_password"));
    app.clock.advance(5);
    let ok = app
        .post(
            "/api/v1/me/password",
            &token,
            json!({"current_password": "dave-password", "new_password": "brand-new-pass"}),
        )
        .await;
    assert_eq!(ok.status, StatusCode::NO_CONTENT, "{}", ok.body);
    app.clock.advance(5);
    app.login("dave", "brand-new-pass").await;
}
api_test!(own_password_change_needs_the_current_one);

async fn api_tokens_act_with_at_most_their_owners_role_and_die_when_revoked(app: &TestApp) {
    let g = app.group("tok").await;
    let (_, operator) = app.user("olive", "operator", &[g]).await;
    let too_strong = app
        .post(
            "/api/v1/tokens",
            &operator,
            json!({"name": "ci", "role": "admin"}),
        )
        .await;
    assert_eq!(
        (too_strong.status, too_strong.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("role"))
    );
    let created = app
        .post(
            "/api/v1/tokens",
            &operator,
            json!({"name": "ci pipeline", "role": "viewer"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let secret = created.body["token"].as_str().unwrap().to_owned();
    let token_id = created.body["id"].as_i64().unwrap();
    assert!(secret.starts_with("jft_"));

    let me = app.get("/api/v1/me", &secret).await;
    assert_eq!(
        (me.body["role"].as_str(), me.body["via"].as_str()),
        (Some("viewer"), Some("token"))
    );
    let write = app
        .post("/api/v1/jobs", &secret, TestApp::job_body(g, "via token"))
        .await;
    assert_eq!(
        write.status,
        StatusCode::FORBIDDEN,
        "a viewer token cannot write even for an operator"
    );
    let mint = app
        .post("/api/v1/tokens", &secret, json!({"name": "nested"}))
        .await;
    assert_eq!(mint.status, StatusCode::FORBIDDEN);

    let listed = app.get("/api/v1/tokens", &operator).await;
    assert_eq!(listed.body.as_array().unwrap().len(), 1);
    assert!(
        !listed.body.to_string().contains(&secret),
        "the secret is shown once only"
    );

    let (_, stranger) = app.user("sam", "operator", &[]).await;
    let r = app
        .delete(&format!("/api/v1/tokens/{token_id}"), &stranger)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = app
        .delete(&format!("/api/v1/tokens/{token_id}"), &operator)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let after = app.get("/api/v1/me", &secret).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    assert!(
        after.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revoked")
    );

    let expiring = app
        .post(
            "/api/v1/tokens",
            &app.admin,
            json!({"name": "short", "expires_in_s": 60}),
        )
        .await;
    let secret = expiring.body["token"].as_str().unwrap().to_owned();
    assert_eq!(app.get("/api/v1/me", &secret).await.status, StatusCode::OK);
    app.clock.advance(61_000);
    assert_eq!(
        app.get("/api/v1/me", &secret).await.status,
        StatusCode::UNAUTHORIZED
    );
    let bad = app
        .post(
            "/api/v1/tokens",
            &app.admin,
            json!({"name": "x", "expires_in_s": -5}),
        )
        .await;
    assert_eq!(bad.field(), Some("expires_in_s"));
}
api_test!(api_tokens_act_with_at_most_their_owners_role_and_die_when_revoked);

async fn roles_and_grants_are_enforced_on_every_endpoint(app: &TestApp) {
    let (a, b) = (app.group("alpha").await, app.group("beta").await);
    let job_b = app.job(&app.admin, b, "in beta").await;
    let (_, operator) = app.user("opal", "operator", &[a]).await;
    let (_, viewer) = app.user("vic", "viewer", &[a]).await;
    let job_a = app.job(&operator, a, "in alpha").await;

    let forbidden = [
        (
            "POST",
            "/api/v1/groups".to_owned(),
            Some(json!({"app_name": "x", "title": "x"})),
        ),
        (
            "PUT",
            format!("/api/v1/groups/{a}"),
            Some(json!({"title": "x"})),
        ),
        ("DELETE", format!("/api/v1/groups/{b}"), None),
        ("GET", "/api/v1/users".to_owned(), None),
        (
            "POST",
            "/api/v1/users".to_owned(),
            Some(json!({"username": "x", "password": "long-password", "role": "viewer"})),
        ),
        (
            "PATCH",
            "/api/v1/users/1".to_owned(),
            Some(json!({"role": "viewer"})),
        ),
        (
            "POST",
            "/api/v1/users/1/password".to_owned(),
            Some(json!({"password": "long-password"})),
        ),
        ("GET", "/api/v1/audit".to_owned(), None),
        ("GET", format!("/api/v1/groups/{b}"), None),
        (
            "POST",
            "/api/v1/jobs".to_owned(),
            Some(TestApp::job_body(b, "elsewhere")),
        ),
        (
            "PUT",
            format!("/api/v1/jobs/{job_a}"),
            Some(TestApp::job_body(b, "move to beta")),
        ),
    ];
    for (method, path, body) in &forbidden {
        let r = app.call(method, path, Some(&operator), body.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::FORBIDDEN, "forbidden"),
            "operator {method} {path}"
        );
    }
    let viewer_writes = [
        (
            "POST",
            "/api/v1/jobs".to_owned(),
            Some(TestApp::job_body(a, "viewer job")),
        ),
        (
            "PUT",
            format!("/api/v1/jobs/{job_a}"),
            Some(TestApp::job_body(a, "renamed")),
        ),
        ("DELETE", format!("/api/v1/jobs/{job_a}"), None),
        ("POST", format!("/api/v1/jobs/{job_a}/disable"), None),
    ];
    for (method, path, body) in forbidden.iter().chain(viewer_writes.iter()) {
        let r = app.call(method, path, Some(&viewer), body.clone()).await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "viewer {method} {path}: {}",
            r.body
        );
    }
    // A job of a group the caller cannot see answers like a missing one (issue 12).
    let hidden = [
        ("GET", format!("/api/v1/jobs/{job_b}"), None),
        (
            "PUT",
            format!("/api/v1/jobs/{job_b}"),
            Some(TestApp::job_body(a, "hijack")),
        ),
        ("DELETE", format!("/api/v1/jobs/{job_b}"), None),
        ("POST", format!("/api/v1/jobs/{job_b}/disable"), None),
    ];
    for (method, path, body) in &hidden {
        for (who, token) in [("operator", &operator), ("viewer", &viewer)] {
            let r = app.call(method, path, Some(token), body.clone()).await;
            assert_eq!(
                (r.status, r.code()),
                (StatusCode::NOT_FOUND, "not_found"),
                "{who} {method} {path}"
            );
        }
    }
    // What each may read: only granted groups.
    let listed = app.get("/api/v1/jobs", &viewer).await;
    assert_eq!(listed.body["total"], 1);
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{job_a}"), &viewer)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(app.get("/api/v1/groups", &viewer).await.body["total"], 1);
    assert_eq!(app.get("/api/v1/jobs", &app.admin).await.body["total"], 2);
    // The operator's own writes in its group work.
    let r = app
        .call(
            "POST",
            &format!("/api/v1/jobs/{job_a}/disable"),
            Some(&operator),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.body["enabled"].as_bool()),
        (StatusCode::OK, Some(false))
    );
    // Grants change at once.
    let viewer_id = app.get("/api/v1/me", &viewer).await.body["user_id"]
        .as_i64()
        .unwrap();
    app.call(
        "PATCH",
        &format!("/api/v1/users/{viewer_id}"),
        Some(&app.admin),
        Some(json!({"groups": [b]})),
    )
    .await;
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{job_a}"), &viewer)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{job_b}"), &viewer)
            .await
            .status,
        StatusCode::OK
    );
}
api_test!(roles_and_grants_are_enforced_on_every_endpoint);
