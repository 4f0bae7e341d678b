//! The open API's request limits: 429 with `Retry-After`, the `RateLimit` fields and the error
//! body; buckets per user, per token and per client address; limits per role; recovery once
//! the window drained (driven by the admin's manual clock, so nothing waits on real time).

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::support::{TestApp, api_test};

/// A response with its headers (the shared helper keeps only status and body).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name} header: {:?}", self.headers))
    }
}

async fn send_from(
    client: &reqwest::Client,
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut request = client.request(method.parse().unwrap(), format!("{}{path}", app.base));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        headers,
        body,
    }
}

async fn send(app: &TestApp, method: &str, path: &str, token: Option<&str>) -> Answer {
    send_from(&app.client, app, method, path, token, None).await
}

async fn trigger(app: &TestApp, job: i64, token: &str) -> Answer {
    send(
        app,
        "POST",
        &format!("/api/v1/jobs/{job}/trigger"),
        Some(token),
    )
    .await
}

/// The refusal every limited request gets: 429, the error body, `Retry-After` in whole
/// seconds and the `RateLimit` fields with nothing remaining of `policy`.
fn assert_refused(r: &Answer, policy: &str, retry_after_s: u64) {
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "rate_limited", "{}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(policy), "{message}");
    assert_eq!(r.header("retry-after"), retry_after_s.to_string());
    assert!(
        r.header("ratelimit")
            .contains(&format!("\"{policy}\";r=0;t=")),
        "{}",
        r.header("ratelimit")
    );
    assert!(
        r.header("ratelimit-policy")
            .contains(&format!("\"{policy}\";q="))
    );
}

async fn operators_triggers_hit_their_limit_and_recover(app: &TestApp) {
    let g = app.group("limited").await;
    let (_, olive) = app.user("olive", "operator", &[g]).await;
    let (_, oscar) = app.user("oscar", "operator", &[g]).await;
    let job = app.job(&app.admin, g, "limited job").await;

    // Each trigger takes 20 s to drain, so the whole quota is back 20 s per trigger later.
    for (remaining, reset_s) in [(2, 20), (1, 40), (0, 60)] {
        let r = trigger(app, job, &olive).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(
            r.header("ratelimit-policy"),
            "\"general\";q=600;w=60, \"trigger\";q=3;w=60"
        );
        assert!(
            r.header("ratelimit")
                .ends_with(&format!(", \"trigger\";r={remaining};t={reset_s}")),
            "{}",
            r.header("ratelimit")
        );
    }
    // Three per minute: one more fits every 20 s.
    let refused = trigger(app, job, &olive).await;
    assert_refused(&refused, "trigger", 20);
    assert_eq!(
        app.runs_of(job).await.len(),
        3,
        "the refused trigger made no run"
    );
    let create = send_from(
        &app.client,
        app,
        "POST",
        "/api/v1/jobs",
        Some(&olive),
        Some(TestApp::job_body(g, "refused too")),
    )
    .await;
    assert_refused(&create, "trigger", 20);
    assert_eq!(
        send(app, "GET", "/api/v1/jobs", Some(&olive)).await.status,
        StatusCode::OK,
        "other requests still pass"
    );

    // Another user, and the same user's API token, have buckets of their own.
    assert_eq!(trigger(app, job, &oscar).await.status, StatusCode::CREATED);
    let token = app
        .post("/api/v1/tokens", &olive, json!({"name": "ci"}))
        .await;
    assert_eq!(token.status, StatusCode::CREATED, "{}", token.body);
    let token = token.body["token"].as_str().unwrap();
    assert_eq!(trigger(app, job, token).await.status, StatusCode::CREATED);

    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("jobfleet_api_rate_limited_total{class=\"trigger\",role=\"operator\"} 2"),
        "{metrics}"
    );

    // Recovery: not a moment before the bucket has room again, then at once.
    app.clock.advance(19_500);
    assert_refused(&trigger(app, job, &olive).await, "trigger", 1);
    app.clock.advance(500);
    let again = trigger(app, job, &olive).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert!(again.header("ratelimit").ends_with("\"trigger\";r=0;t=60"));
    app.clock.advance(60_000);
    let full = trigger(app, job, &olive).await;
    assert!(full.header("ratelimit").ends_with("\"trigger\";r=2;t=20"));
}
api_test!(
    operators_triggers_hit_their_limit_and_recover,
    &[("JOBFLEET_API_TRIGGERS_PER_MINUTE_OPERATOR", "3")]
);

async fn a_viewer_has_the_viewer_limit(app: &TestApp) {
    let g = app.group("viewing").await;
    let (_, vera) = app.user("vera", "viewer", &[g]).await;
    let (_, olive) = app.user("olive", "operator", &[g]).await;
    let job = app.job(&app.admin, g, "watched").await;
    for remaining in (0..4).rev() {
        let r = send(app, "GET", "/api/v1/jobs", Some(&vera)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.header("ratelimit-policy"), "\"general\";q=4;w=60");
        assert!(
            r.header("ratelimit")
                .starts_with(&format!("\"general\";r={remaining};t=")),
            "{}",
            r.header("ratelimit")
        );
    }
    // Four per minute: one more every 15 s. Refused before the handler: not 403.
    assert_refused(&trigger(app, job, &vera).await, "general", 15);
    assert_refused(
        &send(app, "GET", "/api/v1/me", Some(&vera)).await,
        "general",
        15,
    );
    let operator = send(app, "GET", "/api/v1/jobs", Some(&olive)).await;
    assert_eq!(operator.status, StatusCode::OK);
    assert_eq!(
        operator.header("ratelimit-policy"),
        "\"general\";q=600;w=60",
        "the operator's default"
    );
    let admin = send(app, "GET", "/api/v1/jobs", Some(&app.admin)).await;
    assert_eq!(admin.header("ratelimit-policy"), "\"general\";q=3000;w=60");
    assert!(
        app.metrics_text()
            .await
            .contains("jobfleet_api_rate_limited_total{class=\"general\",role=\"viewer\"} 2")
    );
    app.clock.advance(15_000);
    assert_eq!(
        send(app, "GET", "/api/v1/me", Some(&vera)).await.status,
        StatusCode::OK
    );
    // The console is not limited by the API's limits.
    assert_eq!(get_status(app, "/console/login").await, StatusCode::OK);
}
api_test!(
    a_viewer_has_the_viewer_limit,
    &[
        ("JOBFLEET_API_REQUESTS_PER_MINUTE_VIEWER", "4"),
        ("JOBFLEET_API_TRIGGERS_PER_MINUTE_VIEWER", "2"),
    ]
);

async fn requests_without_a_valid_credential_count_per_address(app: &TestApp) {
    // The admin's login at start-up was one of the address's five.
    let mut passed = 1;
    let refused = loop {
        let r = send(app, "GET", "/api/v1/jobs", Some("not-a-token")).await;
        if r.status != StatusCode::UNAUTHORIZED {
            break r;
        }
        assert!(
            r.header("ratelimit").starts_with("\"general\";r="),
            "{:?}",
            r.headers
        );
        passed += 1;
        assert!(passed <= 5, "more than 5 requests passed");
    };
    assert_eq!(passed, 5);
    // Five per minute: one more every 12 s.
    assert_refused(&refused, "general", 12);
    assert_refused(&wrong_login(app).await, "general", 12);
    assert_refused(&send(app, "GET", "/api/v1/jobs", None).await, "general", 12);
    // A valid credential from the same address is its caller's, and another address has
    // its own bucket.
    assert_eq!(
        send(app, "GET", "/api/v1/jobs", Some(&app.admin))
            .await
            .status,
        StatusCode::OK
    );
    let elsewhere = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let other = send_from(&elsewhere, app, "GET", "/api/v1/jobs", None, None).await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED, "{}", other.body);
    assert!(
        app.metrics_text()
            .await
            .contains("jobfleet_api_rate_limited_total{class=\"general\",role=\"anonymous\"} 3")
    );
    app.clock.advance(12_000);
    assert_eq!(
        send(app, "GET", "/api/v1/jobs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Endpoints outside the open API are not limited by it.
    assert_eq!(get_status(app, "/healthz").await, StatusCode::OK);
}
api_test!(
    requests_without_a_valid_credential_count_per_address,
    &[("JOBFLEET_API_REQUESTS_PER_MINUTE_ANONYMOUS", "5")]
);

/// The status of `GET path` without a credential.
async fn get_status(app: &TestApp, path: &str) -> StatusCode {
    let response = app.client.get(format!("{}{path}", app.base)).send();
    response.await.unwrap().status()
}

/// A login attempt with a wrong password, with its headers.
async fn wrong_login(app: &TestApp) -> Answer {
    send_from(
        &app.client,
        app,
        "POST",
        "/api/v1/auth/token",
        None,
        Some(json!({"username": "admin", "password": "wrong-password"})),
    )
    .await
}
