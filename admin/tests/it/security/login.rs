//! Items 3, 4 and 5 of issue 12, and the console's missing-CSRF answer: login cost is bounded
//! (input sizes, the limiter's memory, concurrent hashing), guesses are charged before they are
//! evaluated and limited per account and per client, the password-change form is no oracle,
//! and a password reset or disabling ends every credential of the user.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, RETRY_AFTER, SET_COOKIE};
use serde_json::{Value, json};

use crate::support::admin_proc::AdminProc;
use crate::support::console::Console;
use crate::support::{ADMIN_PASSWORD, Response, TestApp, api_test, proc_status_kb};

/// An admin whose hashing queue is long enough that a loaded test machine never answers 503.
const ENV: &[(&str, &str)] = &[("JOBFLEET_PASSWORD_HASH_QUEUE_MS", "60000")];

async fn oversized_credentials_are_refused_before_anything_is_kept(app: &TestApp) {
    let before = app.footprint().await;
    let long_name = "n".repeat(65);
    let long_password = "p".repeat(257);
    let Response { status, body } = app.try_login(&long_name, "some-password").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("username")),
        "{body}"
    );
    let Response { status, body } = app.try_login("admin", &long_password).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("password")),
        "{body}"
    );
    let Response { status, body } = app.try_login(&"n".repeat(20_000), "some-password").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");

    let mut console = Console::new(app);
    let csrf = console.get("/console/login").await.csrf();
    let page = console
        .post(
            "/console/login",
            &[
                ("csrf", &csrf),
                ("username", &long_name),
                ("password", "some-password"),
            ],
        )
        .await;
    assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(page.body.contains("at most 64 bytes"), "{}", page.body);
    assert!(
        !page.body.contains(&long_name),
        "an oversized name is not echoed"
    );
    let csrf = page.csrf();
    let page = console
        .post(
            "/console/login",
            &[
                ("csrf", &csrf),
                ("username", &"n".repeat(20_000)),
                ("password", "x"),
            ],
        )
        .await;
    assert_eq!(page.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(page.body.contains("too large"), "{}", page.body);

    assert_eq!(
        app.state.login_limiter.len(),
        (0, 0),
        "the limiter was never charged"
    );
    assert_eq!(app.footprint().await, before, "nothing was written");
    app.login("admin", ADMIN_PASSWORD).await;
}
api_test!(
    oversized_credentials_are_refused_before_anything_is_kept,
    super::ENV
);

async fn parallel_guesses_are_charged_before_they_are_evaluated(app: &TestApp) {
    let guesses = (0..40).map(|i| {
        app.try_login(
            "admin",
            if i % 2 == 0 {
                "nope-nope"
            } else {
                "wrong-guess"
            },
        )
    });
    let answers = futures_util::future::join_all(guesses).await;
    let count = |s: StatusCode| answers.iter().filter(|r| r.status == s).count();
    let (evaluated, limited) = (
        count(StatusCode::UNAUTHORIZED),
        count(StatusCode::TOO_MANY_REQUESTS),
    );
    assert_eq!(evaluated + limited, 40, "{answers:?}");
    assert!(
        evaluated <= 10,
        "{evaluated} guesses were evaluated against a limit of 10"
    );
    assert_eq!(limited, 40 - evaluated);
    // The same limit holds for the right password now: the account is locked for a while.
    let r = app.try_login("admin", ADMIN_PASSWORD).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    let client = reqwest::Client::new();
    let res = client
        .post(format!("{}/api/v1/auth/token", app.base))
        .json(&json!({"username": "admin", "password": "x-x-x-x-x"}))
        .send()
        .await
        .unwrap();
    let wait: u64 = res.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=300).contains(&wait), "Retry-After {wait}");
}
api_test!(
    parallel_guesses_are_charged_before_they_are_evaluated,
    super::ENV
);

async fn spraying_one_password_over_many_names_is_limited(app: &TestApp) {
    let names: Vec<String> = (0..40).map(|i| format!("sprayed{i}")).collect();
    let answers =
        futures_util::future::join_all(names.iter().map(|n| app.try_login(n, "Summer2026!"))).await;
    let evaluated = answers
        .iter()
        .filter(|r| r.status == StatusCode::UNAUTHORIZED)
        .count();
    let limited = answers
        .iter()
        .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(evaluated + limited, 40, "{answers:?}");
    assert!(
        evaluated <= 30,
        "{evaluated} names tried from one client; the limit is 30"
    );
    // The limit is this client's: another address still logs in.
    let elsewhere = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .build()
        .unwrap();
    let res = elsewhere
        .post(format!("{}/api/v1/auth/token", app.base))
        .json(&json!({"username": "admin", "password": ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}
api_test!(spraying_one_password_over_many_names_is_limited, super::ENV);

async fn the_password_change_oracle_is_limited(app: &TestApp) {
    let (_, bob) = app.user("bob", "operator", &[]).await;
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let r = app
            .post(
                "/api/v1/me/password",
                &bob,
                json!({"current_password": "not-bobs-password", "new_password": "new-password-9"}),
            )
            .await;
        statuses.push(r.status);
    }
    let wrong = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNPROCESSABLE_ENTITY)
        .count();
    assert_eq!(wrong, 10, "{statuses:?}");
    assert_eq!(
        statuses[10..],
        [StatusCode::TOO_MANY_REQUESTS; 2],
        "{statuses:?}"
    );

    app.user("carol", "viewer", &[]).await;
    let mut console = Console::new(app);
    console.login("carol", "carol-password").await;
    let mut last = None;
    for _ in 0..11 {
        let csrf = console.get("/console/account").await.csrf();
        let page = console
            .post(
                "/console/account/password",
                &[
                    ("csrf", &csrf),
                    ("current_password", "not-carols-password"),
                    ("new_password", "new-password-9"),
                ],
            )
            .await;
        last = Some(page);
    }
    let last = last.unwrap();
    assert_eq!(last.status, StatusCode::TOO_MANY_REQUESTS, "{}", last.body);
    assert!(last.retry_after.is_some());
    assert!(
        last.body.contains("Too many failed attempts"),
        "{}",
        last.body
    );
}
api_test!(the_password_change_oracle_is_limited, super::ENV);

/// A user's three kinds of credential: a console session, a JWT and an API token.
struct Credentials<'a> {
    console: Console<'a>,
    jwt: String,
    token: String,
}

async fn credentials<'a>(app: &'a TestApp, name: &str) -> (i64, Credentials<'a>) {
    let (id, jwt) = app.user(name, "operator", &[]).await;
    let r = app
        .post(
            "/api/v1/tokens",
            &jwt,
            json!({"name": format!("{name}-ci")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let token = r.body["token"].as_str().unwrap().to_owned();
    let mut console = Console::new(app);
    console.login(name, &format!("{name}-password")).await;
    let mut creds = Credentials {
        console,
        jwt,
        token,
    };
    assert_eq!(alive(app, &mut creds).await, [true, true, true]);
    // Later credentials are issued at a later instant than these.
    app.clock.advance(5);
    (id, creds)
}

/// Whether the session, the JWT and the API token still work.
async fn alive(app: &TestApp, creds: &mut Credentials<'_>) -> [bool; 3] {
    let page = creds.console.get("/console/account").await;
    let session = match page.status {
        StatusCode::OK => true,
        StatusCode::SEE_OTHER if page.location.starts_with("/console/login") => false,
        other => panic!("console answered {other}"),
    };
    let bearer = |t: &str| {
        let t = t.to_owned();
        async move {
            let status = app.get("/api/v1/me", &t).await.status;
            assert!(
                matches!(status, StatusCode::OK | StatusCode::UNAUTHORIZED),
                "{status}"
            );
            status == StatusCode::OK
        }
    };
    [
        session,
        bearer(&creds.jwt).await,
        bearer(&creds.token).await,
    ]
}

/// The `after` of the newest `action` row on user `id` that has `key`.
async fn audit_after(app: &TestApp, id: i64, action: &str, key: &str) -> Value {
    let rows = app
        .get(
            &format!("/api/v1/audit?object_type=user&object_id={id}"),
            &app.admin,
        )
        .await
        .body;
    rows["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == action && r["after"].get(key).is_some())
        .unwrap_or_else(|| panic!("no {action} row: {rows}"))["after"]
        .clone()
}

async fn credentials_die_with_a_reset_or_disabling(app: &TestApp) {
    let (dave, mut creds) = credentials(app, "dave").await;
    let r = app
        .post(
            &format!("/api/v1/users/{dave}/password"),
            &app.admin,
            json!({"password": "new-password-2"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_eq!(alive(app, &mut creds).await, [false, false, false]);
    let after = audit_after(app, dave, "user.reset_password", "sessions_ended").await;
    assert_eq!(
        (
            after["sessions_ended"].as_i64(),
            after["api_tokens_revoked"].as_i64()
        ),
        (Some(1), Some(1)),
        "{after}"
    );
    assert!(after.get("password").is_none() && !after.to_string().contains("argon2"));
    app.login("dave", "new-password-2").await;

    let (erin, mut creds) = credentials(app, "erin").await;
    let r = app
        .call(
            "PATCH",
            &format!("/api/v1/users/{erin}"),
            Some(&app.admin),
            Some(json!({"disabled": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    app.clock.advance(5);
    let r = app
        .call(
            "PATCH",
            &format!("/api/v1/users/{erin}"),
            Some(&app.admin),
            Some(json!({"disabled": false})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        alive(app, &mut creds).await,
        [false, false, false],
        "enabling the user again revives nothing"
    );
    let after = audit_after(app, erin, "user.update", "credentials_ended").await;
    let ended = &after["credentials_ended"];
    assert_eq!(
        (
            ended["sessions_ended"].as_i64(),
            ended["api_tokens_revoked"].as_i64()
        ),
        (Some(1), Some(1)),
        "{after}"
    );
    app.login("erin", "erin-password").await;
}
api_test!(credentials_die_with_a_reset_or_disabling, super::ENV);

async fn a_console_post_without_a_csrf_token_is_forbidden(app: &TestApp) {
    let mut console = Console::new(app);
    console.login("admin", ADMIN_PASSWORD).await;
    let before = app.footprint().await;
    let group = app.group("csrf-less").await;
    let before = (before.0 + 1, before.1);
    let bare = console.post_raw("/console/jobs", None, String::new()).await;
    assert_eq!(bare.status, StatusCode::FORBIDDEN, "{}", bare.body);
    let form = console
        .post(
            "/console/jobs",
            &[("group_id", &group.to_string()), ("name", "forged")],
        )
        .await;
    assert_eq!(form.status, StatusCode::FORBIDDEN, "{}", form.body);
    assert_eq!(app.footprint().await, before, "nothing was written");
}
api_test!(a_console_post_without_a_csrf_token_is_forbidden, super::ENV);

/// Items 3's floods against the real binary: its resident memory must stay bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_memory_stays_bounded_under_login_floods() {
    const BOUND_KB: u64 = 150 * 1024;
    crate::support::install_crypto();
    let admin = AdminProc::sqlite(&[("JOBFLEET_SCHEDULER", "false")]);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    admin.ready(&client).await;
    let rss_kb = || proc_status_kb(admin.pid(), "VmRSS:");
    // One warm-up login, so start-up allocations are not counted as growth.
    let warm = client
        .post(format!("{}/api/v1/auth/token", admin.base))
        .json(&json!({"username": "admin", "password": ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), StatusCode::OK);
    let start = rss_kb();

    // (a) 400 console logins with ~1 MB user names, 8 at a time.
    let page = client
        .get(format!("{}/console/login", admin.base))
        .send()
        .await
        .unwrap();
    let cookie = page
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_owned())
        .find(|c| c.starts_with("jf_login="))
        .unwrap();
    let csrf = cookie.trim_start_matches("jf_login=").to_owned();
    let filler = "a".repeat(1_000_000);
    let mut answers = Vec::new();
    for batch in 0..50 {
        let posts = (0..8).map(|i| {
            let body = format!(
                "csrf={csrf}&password=wrong-password&username={}{filler}",
                batch * 8 + i
            );
            client
                .post(format!("{}/console/login", admin.base))
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(COOKIE, &cookie)
                .body(body)
                .send()
        });
        for res in futures_util::future::join_all(posts).await {
            answers.push(res.unwrap().status());
        }
    }
    assert!(
        answers.iter().all(|s| s.is_client_error()),
        "every oversized login is a 4xx: {:?}",
        answers.iter().find(|s| !s.is_client_error())
    );
    let after_console = rss_kb();
    assert!(
        after_console < start + BOUND_KB,
        "400 oversized console logins grew the admin from {start} kB to {after_console} kB"
    );

    // (b) 200 parallel wrong API logins, each from its own loopback address and for its own
    // name, so only the hashing cap (not the limiter) stands between them and 200 hashes.
    let logins = (0..200u32).map(|i| {
        let from = Ipv4Addr::new(127, 0, 1 + (i / 250) as u8, 2 + (i % 250) as u8);
        let client = reqwest::Client::builder()
            .local_address(IpAddr::V4(from))
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let url = format!("{}/api/v1/auth/token", admin.base);
        async move {
            let res = client
                .post(url)
                .json(&json!({"username": format!("nobody{i}"), "password": "wrong-password"}))
                .send()
                .await
                .unwrap();
            (res.status(), res.headers().get(RETRY_AFTER).is_some())
        }
    });
    let answers = futures_util::future::join_all(logins).await;
    let after_api = rss_kb();
    eprintln!(
        "admin RSS: {start} kB, after the console flood {after_console} kB, after the API flood {after_api} kB"
    );
    assert!(
        after_api < start + BOUND_KB,
        "200 parallel wrong logins grew the admin from {start} kB to {after_api} kB"
    );
    for (status, retry_after) in &answers {
        match *status {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::SERVICE_UNAVAILABLE => assert!(retry_after, "503 says when to retry"),
            other => panic!("a wrong login answered {other}"),
        }
    }
}
