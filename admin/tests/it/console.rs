//! The console over plain HTTP (no browser): login and CSRF, forms that keep input and show
//! field errors, role checks on forged POSTs, escaping, headers. The browser flows are in
//! `tests/browser`.

use reqwest::StatusCode;

use crate::support::console::Console;
use crate::support::{ADMIN_PASSWORD, TestApp, api_test};

async fn login_and_csrf(app: &TestApp) {
    let mut v = Console::new(app);
    let first = v.get("/console/jobs?q=a").await;
    assert_eq!(first.status, StatusCode::SEE_OTHER);
    assert_eq!(
        first.location,
        "/console/login?next=%2Fconsole%2Fjobs%3Fq%3Da"
    );

    // The login form's token must come back: a cross-site login POST carries none.
    let form = v.get("/console/login").await;
    assert_eq!(form.status, StatusCode::OK);
    let refused = v
        .post(
            "/console/login",
            &[
                ("csrf", "forged"),
                ("username", "admin"),
                ("password", ADMIN_PASSWORD),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // Each form drawn carries a fresh token.
    let wrong = v
        .post(
            "/console/login",
            &[
                ("csrf", &refused.csrf()),
                ("username", "admin"),
                ("password", "nope"),
            ],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.body.contains("Wrong user name or password"));
    assert!(wrong.body.contains("value=\"admin\""), "the name is kept");

    let jobs = v.login("admin", ADMIN_PASSWORD).await;
    assert_eq!(jobs.status, StatusCode::OK);
    let csp = v
        .client
        .get(format!("{}/console", app.base))
        .send()
        .await
        .unwrap();
    assert!(csp.headers().contains_key("content-security-policy"));

    // A POST without the session's CSRF token changes nothing.
    let before = app.footprint().await;
    let group = app.group("console-app").await;
    let before_group = app.footprint().await;
    assert_ne!(before, before_group);
    let group_text = group.to_string();
    let form = [
        ("group_id", group_text.as_str()),
        ("name", "no-token"),
        ("schedule.type", "none"),
        ("handler.type", "shell"),
        ("handler.command", "true"),
    ];
    let forged = v.post("/console/jobs", &form).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
    let stale = v
        .post(
            "/console/jobs",
            &[&form[..], &[("csrf", "0123456789")]].concat(),
        )
        .await;
    assert_eq!(stale.status, StatusCode::FORBIDDEN);
    assert_eq!(app.footprint().await, before_group);

    // Logout ends the session for good.
    let csrf = jobs.csrf();
    let out = v.post("/console/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.location, "/console/login");
    assert_eq!(v.get("/console/jobs").await.status, StatusCode::SEE_OTHER);
}
api_test!(login_and_csrf);

async fn forms_keep_input_and_escape_it(app: &TestApp) {
    let group = app.group("form-app").await.to_string();
    let mut v = Console::new(app);
    let page = v.login("admin", ADMIN_PASSWORD).await;
    let csrf = page.csrf();
    let before = app.footprint().await;
    let every = |interval_s: &'static str| {
        vec![
            ("csrf", csrf.as_str()),
            ("group_id", group.as_str()),
            ("name", "every ten"),
            ("description", "<script>alert(1)</script>"),
            ("schedule.type", "fixed_rate"),
            ("schedule.interval_s", interval_s),
            ("handler.type", "shell"),
            ("handler.command", "echo '<b>'"),
        ]
    };
    let bad = v.post("/console/jobs", &every("ten")).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.body
            .contains("data-field-error=\"schedule.interval_s\""),
        "the error sits by its field"
    );
    assert!(bad.body.contains("`ten` is not a number"));
    assert!(
        bad.body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "kept, escaped"
    );
    assert!(!bad.body.contains("<script>alert(1)"));
    assert_eq!(app.footprint().await, before, "nothing saved");

    let mut form = every("10");
    form.extend([("routing", "round_robin"), ("retry.count", "2")]);
    let good = v.post("/console/jobs", &form).await;
    assert_eq!(good.status, StatusCode::SEE_OTHER, "{}", good.body);
    let job_page = v.get(&good.location).await;
    assert_eq!(job_page.status, StatusCode::OK);
    assert!(
        job_page
            .body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;")
    );
    assert!(
        job_page.body.contains("Saved."),
        "the flash message shows once"
    );
    let again = v.get(&good.location).await;
    assert!(!again.body.contains("Saved."));
    let id: i64 = good.location.rsplit('/').next().unwrap().parse().unwrap();
    let job = app.get(&format!("/api/v1/jobs/{id}"), &app.admin).await;
    assert_eq!(job.body["schedule"]["interval_s"], 10);
    assert_eq!(job.body["routing"], "round_robin");
    assert_eq!(job.body["retry"]["count"], 2);

    // A name taken in the group is a field error, not an error page.
    let dup = v
        .post(
            "/console/jobs",
            &[
                ("csrf", &csrf),
                ("group_id", &group),
                ("name", "every ten"),
                ("schedule.type", "none"),
                ("handler.type", "shell"),
                ("handler.command", "true"),
            ],
        )
        .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert!(dup.body.contains("data-field-error=\"name\""));

    // Unknown pages and ids are HTML 404s inside the console.
    let missing = v.get("/console/jobs/999999").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("<html"));
    assert_eq!(
        v.get("/console/jobs/abc").await.status,
        StatusCode::NOT_FOUND
    );
    let bad_filter = v.get("/console/runs?status=exploded").await;
    assert_eq!(bad_filter.status, StatusCode::OK);
    assert!(bad_filter.body.contains("unknown value `exploded`"));
}
api_test!(forms_keep_input_and_escape_it);

async fn a_viewer_cannot_change_anything(app: &TestApp) {
    let group = app.group("viewer-app").await;
    let job = app.job(&app.admin, group, "guarded").await;
    app.user("vic", "viewer", &[group]).await;
    let mut v = Console::new(app);
    let page = v.login("vic", "vic-password").await;
    assert!(
        !page.body.contains("id=\"new-job\""),
        "no create button for a viewer"
    );
    let csrf = page.csrf();
    let before = app.footprint().await;
    let g = group.to_string();
    for (path, form) in [
        (
            format!("/console/jobs/{job}"),
            vec![
                ("csrf", csrf.as_str()),
                ("group_id", g.as_str()),
                ("name", "hijacked"),
                ("schedule.type", "none"),
                ("handler.type", "shell"),
                ("handler.command", "curl evil"),
            ],
        ),
        (
            format!("/console/jobs/{job}/delete"),
            vec![("csrf", csrf.as_str())],
        ),
        (
            format!("/console/jobs/{job}/trigger"),
            vec![("csrf", csrf.as_str())],
        ),
        (
            format!("/console/jobs/{job}/disable"),
            vec![("csrf", csrf.as_str())],
        ),
        (
            "/console/groups".to_owned(),
            vec![("csrf", csrf.as_str()), ("app_name", "x"), ("title", "x")],
        ),
        (
            "/console/users".to_owned(),
            vec![
                ("csrf", csrf.as_str()),
                ("username", "mallory"),
                ("password", "mallory-password"),
                ("role", "admin"),
            ],
        ),
    ] {
        let res = v.post(&path, &form).await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{path}: {}", res.body);
    }
    assert_eq!(app.footprint().await, before, "nothing changed");
    let edit = v.get(&format!("/console/jobs/{job}/edit")).await;
    assert_eq!(edit.status, StatusCode::FORBIDDEN);
    assert_eq!(v.get("/console/audit").await.status, StatusCode::FORBIDDEN);
    assert_eq!(v.get("/console/users").await.status, StatusCode::FORBIDDEN);
}
api_test!(a_viewer_cannot_change_anything);

async fn pages_render_for_an_admin(app: &TestApp) {
    let group = app.group("pages-app").await;
    let job = app.job(&app.admin, group, "shown").await;
    let mut v = Console::new(app);
    v.login("admin", ADMIN_PASSWORD).await;
    for path in [
        "/console".to_owned(),
        "/console/jobs".into(),
        "/console/jobs/new".into(),
        format!("/console/jobs/new?copy={job}"),
        format!("/console/jobs/{job}"),
        format!("/console/jobs/{job}/edit"),
        "/console/runs".into(),
        "/console/groups".into(),
        "/console/groups/new".into(),
        format!("/console/groups/{group}/edit"),
        "/console/agents".into(),
        "/console/users".into(),
        "/console/users/new".into(),
        "/console/tokens".into(),
        "/console/account".into(),
        "/console/audit?action=job.create".into(),
        "/console/alerts".into(),
        "/console/alerts/new".into(),
    ] {
        let page = v.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert!(page.body.contains("</html>"), "{path}");
    }
    let css = v.get("/static/app.css?v=1").await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(css.body.contains(".card"));
    let preview = v
        .get("/console/cron-preview?expr=0+0+12+*+*+%3F&timezone=Asia%2FShanghai")
        .await;
    let body: serde_json::Value = serde_json::from_str(&preview.body).unwrap();
    assert_eq!(body["next"].as_array().unwrap().len(), 5);
    assert!(body["next"][0].as_str().unwrap().ends_with("+08:00"));
    // A channel form with a bad URL keeps what was typed and says what is wrong.
    let csrf = v.get("/console/alerts/new").await.csrf();
    let bad = v
        .post(
            "/console/alerts",
            &[
                ("csrf", &csrf),
                ("name", "hook"),
                ("kind", "webhook"),
                ("format", "slack"),
                ("target", "ftp://x"),
                ("secret", "s3cret"),
                ("enabled", "true"),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(bad.body.contains("data-field-error=\"target\""));
    assert!(
        bad.body.contains("value=\"ftp://x\"") && !bad.body.contains("s3cret"),
        "input kept, secret not echoed"
    );
    let wrong = v.get("/console/cron-preview?expr=0+61+*+*+*+%3F").await;
    let body: serde_json::Value = serde_json::from_str(&wrong.body).unwrap();
    assert!(body["error"].as_str().is_some());
}
api_test!(pages_render_for_an_admin);

async fn script_versions_diff_and_roll_back(app: &TestApp) {
    let group = app.group("script-app").await;
    let body = |source: &str| {
        serde_json::json!({"group_id": group, "name": "scripted",
            "schedule": {"type": "none"},
            "handler": {"type": "script", "interpreter": "bash", "source": source}})
    };
    let created = app
        .post("/api/v1/jobs", &app.admin, body("echo one\necho two\n"))
        .await;
    let id = created.body["id"].as_i64().unwrap();
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{id}"),
            Some(&app.admin),
            Some(body("echo one\necho three\n")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut v = Console::new(app);
    v.login("admin", ADMIN_PASSWORD).await;
    let job = v.get(&format!("/console/jobs/{id}")).await;
    assert!(job.body.contains("id=\"versions-table\""));
    // Version 1 against the current version 2.
    let diff = v.get(&format!("/console/jobs/{id}/versions/1")).await;
    assert_eq!(diff.status, StatusCode::OK, "{}", diff.body);
    assert!(
        diff.body.contains("<span class=\"d-del\">-echo two</span>"),
        "{}",
        diff.body
    );
    assert!(
        diff.body
            .contains("<span class=\"d-add\">+echo three</span>")
    );
    // Any two versions compare; a version that does not exist is a 404.
    let same = v
        .get(&format!("/console/jobs/{id}/versions/1?against=1"))
        .await;
    assert!(!same.body.contains("class=\"d-add\""));
    assert_eq!(
        v.get(&format!("/console/jobs/{id}/versions/1?against=9"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        v.get(&format!("/console/jobs/{id}/versions/1?against=x"))
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // Roll back: version 1's source becomes current again as version 3.
    let csrf = diff.csrf();
    let done = v
        .post(
            &format!("/console/jobs/{id}/versions/1/rollback"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER);
    let now = app.get(&format!("/api/v1/jobs/{id}"), &app.admin).await;
    assert_eq!(now.body["handler"]["source"], "echo one\necho two\n");
    assert_eq!(now.body["handler"]["script_version"], 3);
}
api_test!(script_versions_diff_and_roll_back);
