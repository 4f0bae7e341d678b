//! Issue 12, item 2: references across groups. Making a job refer to another (a child today)
//! needs write access to the referenced job's group; a job or run of a group the caller cannot
//! see answers exactly like one that does not exist; deleting a job takes it out of the child
//! lists of jobs its deleter may not see.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::console::{Console, without_request_id};
use crate::support::{Response, TestApp, api_test};

/// An id no job or run has.
const MISSING: i64 = 987_654;

/// Two groups, a job in each (made by the admin), and an operator granted only the first.
struct World {
    g1: i64,
    g2: i64,
    job1: i64,
    job2: i64,
    op1: String,
}

async fn world(app: &TestApp) -> World {
    let g1 = app.group("refs-one").await;
    let g2 = app.group("refs-two").await;
    let job1 = app.job(&app.admin, g1, "one").await;
    let job2 = app.job(&app.admin, g2, "two").await;
    let (_, op1) = app.user("op-one", "operator", &[g1]).await;
    World {
        g1,
        g2,
        job1,
        job2,
        op1,
    }
}

fn with_children(group_id: i64, name: &str, children: &[i64]) -> Value {
    let mut body = TestApp::job_body(group_id, name);
    body["children"] = json!(children);
    body
}

/// The answer to a child reference to a job that does not exist, for `id`.
fn no_such_child(id: i64) -> Value {
    json!({"error": {"code": "invalid_field", "message": format!("job {id} does not exist"), "field": "children"}})
}

async fn children_of(app: &TestApp, job: i64) -> Value {
    let r = app.get(&format!("/api/v1/jobs/{job}"), &app.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["children"].clone()
}

async fn cross_group_children_need_write_on_the_childs_group(app: &TestApp) {
    let w = world(app).await;
    let before = app.footprint().await;

    // Create: a job of group 2 as a child is refused exactly like a job that does not exist.
    let hidden = app
        .post(
            "/api/v1/jobs",
            &w.op1,
            with_children(w.g1, "new", &[w.job2]),
        )
        .await;
    let absent = app
        .post(
            "/api/v1/jobs",
            &w.op1,
            with_children(w.g1, "new", &[MISSING]),
        )
        .await;
    assert_eq!(
        (hidden.status, &hidden.body),
        (StatusCode::UNPROCESSABLE_ENTITY, &no_such_child(w.job2))
    );
    assert_eq!(
        (absent.status, &absent.body),
        (StatusCode::UNPROCESSABLE_ENTITY, &no_such_child(MISSING))
    );

    // Update: the same, and job 1 keeps its (empty) child list.
    let put = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{}", w.job1),
            Some(&w.op1),
            Some(with_children(w.g1, "one", &[w.job2])),
        )
        .await;
    assert_eq!(
        (put.status, &put.body),
        (StatusCode::UNPROCESSABLE_ENTITY, &no_such_child(w.job2))
    );
    assert_eq!(
        app.footprint().await,
        before,
        "nothing saved, nothing audited"
    );
    assert_eq!(children_of(app, w.job1).await, json!([]));

    // A viewer of both groups sees job 2 but writes nothing: 403, not a pretend 404.
    let (_, viewer) = app.user("view-both", "viewer", &[w.g1, w.g2]).await;
    let before = app.footprint().await;
    let r = app
        .post(
            "/api/v1/jobs",
            &viewer,
            with_children(w.g1, "by viewer", &[w.job2]),
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::FORBIDDEN, "forbidden"));
    assert_eq!(app.footprint().await, before);

    // An operator who may write both groups, and the admin, may link them.
    let (_, op_both) = app.user("op-both", "operator", &[w.g1, w.g2]).await;
    let r = app
        .post(
            "/api/v1/jobs",
            &op_both,
            with_children(w.g1, "linked", &[w.job2]),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["children"], json!([w.job2]));
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{}", w.job1),
            Some(&app.admin),
            Some(with_children(w.g1, "one", &[w.job2])),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    // The operator of group 1 may still edit job 1 keeping the child the admin set (it adds
    // no reference), but not add another hidden one next to it.
    let mut keep = with_children(w.g1, "one", &[w.job2]);
    keep["description"] = json!("edited by op-one");
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{}", w.job1),
            Some(&w.op1),
            Some(keep),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let other = app.job(&app.admin, w.g2, "three").await;
    let before = app.footprint().await;
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{}", w.job1),
            Some(&w.op1),
            Some(with_children(w.g1, "one", &[w.job2, other])),
        )
        .await;
    assert_eq!(
        (r.status, &r.body),
        (StatusCode::UNPROCESSABLE_ENTITY, &no_such_child(other))
    );
    assert_eq!(app.footprint().await, before);
    assert_eq!(children_of(app, w.job1).await, json!([w.job2]));
}
api_test!(cross_group_children_need_write_on_the_childs_group);

/// Sends the same request to a hidden and a missing object; the answers must be equal.
async fn same_answer(
    app: &TestApp,
    token: &str,
    method: &str,
    hidden: &str,
    missing: &str,
    body: Option<Value>,
) -> Response {
    let h = app.call(method, hidden, Some(token), body.clone()).await;
    let m = app.call(method, missing, Some(token), body).await;
    assert_eq!(
        (h.status, &h.body),
        (m.status, &m.body),
        "{method} {hidden} must answer like {method} {missing}"
    );
    h
}

async fn a_hidden_job_answers_like_a_missing_one(app: &TestApp) {
    let w = world(app).await;
    // A run of job 2 (no agent is up, so it ends at once; the row is what matters).
    let run = app.trigger(w.job2, json!({})).await["id"].as_i64().unwrap();
    let before = app.footprint().await;
    let job = |id: i64, tail: &str| format!("/api/v1/jobs/{id}{tail}");
    let run_path = |id: i64, tail: &str| format!("/api/v1/runs/{id}{tail}");

    let cases: Vec<(&str, String, String, Option<Value>)> = vec![
        ("GET", job(w.job2, ""), job(MISSING, ""), None),
        (
            "PUT",
            job(w.job2, ""),
            job(MISSING, ""),
            Some(TestApp::job_body(w.g1, "taken over")),
        ),
        ("DELETE", job(w.job2, ""), job(MISSING, ""), None),
        (
            "POST",
            job(w.job2, "/trigger"),
            job(MISSING, "/trigger"),
            None,
        ),
        (
            "POST",
            job(w.job2, "/enable"),
            job(MISSING, "/enable"),
            None,
        ),
        (
            "POST",
            job(w.job2, "/disable"),
            job(MISSING, "/disable"),
            None,
        ),
        (
            "GET",
            job(w.job2, "/script/versions"),
            job(MISSING, "/script/versions"),
            None,
        ),
        (
            "GET",
            job(w.job2, "/script/versions/1"),
            job(MISSING, "/script/versions/1"),
            None,
        ),
        (
            "POST",
            job(w.job2, "/script/versions/1/rollback"),
            job(MISSING, "/script/versions/1/rollback"),
            None,
        ),
        ("GET", run_path(run, ""), run_path(MISSING, ""), None),
        (
            "GET",
            run_path(run, "/log"),
            run_path(MISSING, "/log"),
            None,
        ),
        (
            "POST",
            run_path(run, "/kill"),
            run_path(MISSING, "/kill"),
            None,
        ),
    ];
    for (method, hidden, missing, body) in cases {
        let r = same_answer(app, &w.op1, method, &hidden, &missing, body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {hidden}: {}",
            r.body
        );
    }
    // Lists filtered by the hidden job are as empty as for a missing one.
    let r = same_answer(
        app,
        &w.op1,
        "GET",
        &format!("/api/v1/runs?job_id={}", w.job2),
        &format!("/api/v1/runs?job_id={MISSING}"),
        None,
    )
    .await;
    assert_eq!(r.body["total"], 0);

    assert_eq!(
        app.footprint().await,
        before,
        "nothing changed, nothing audited"
    );
    let still = app.get(&job(w.job2, ""), &app.admin).await;
    assert_eq!(
        (still.status, &still.body["name"], &still.body["enabled"]),
        (StatusCode::OK, &json!("two"), &json!(true))
    );
    assert_eq!(app.run(run).await["job_id"], w.job2);

    // The console pages of jobs and runs: the same 404 page.
    let mut v = Console::new(app);
    v.login("op-one", "op-one-password").await;
    for (hidden, missing) in [
        (
            format!("/console/jobs/{}", w.job2),
            format!("/console/jobs/{MISSING}"),
        ),
        (
            format!("/console/jobs/{}/edit", w.job2),
            format!("/console/jobs/{MISSING}/edit"),
        ),
        (
            format!("/console/jobs/new?copy={}", w.job2),
            format!("/console/jobs/new?copy={MISSING}"),
        ),
        (
            format!("/console/jobs/{}/versions/1", w.job2),
            format!("/console/jobs/{MISSING}/versions/1"),
        ),
        (
            format!("/console/runs/{run}"),
            format!("/console/runs/{MISSING}"),
        ),
        (
            format!("/console/runs/{run}/log"),
            format!("/console/runs/{MISSING}/log"),
        ),
    ] {
        let h = v.get(&hidden).await;
        let m = v.get(&missing).await;
        assert_eq!(h.status, StatusCode::NOT_FOUND, "{hidden}: {}", h.body);
        assert_eq!(
            (h.status, without_request_id(&h.body)),
            (m.status, without_request_id(&m.body)),
            "{hidden} must answer like {missing}"
        );
    }
}
api_test!(a_hidden_job_answers_like_a_missing_one);

async fn deleting_a_child_takes_it_out_of_hidden_parents(app: &TestApp) {
    let w = world(app).await;
    let (_, op2) = app.user("op-two", "operator", &[w.g2]).await;
    let other = app.job(&app.admin, w.g1, "other child").await;
    // The admin links job 1 (group 1) → job 2 (group 2), which group 2's operator cannot see.
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{}", w.job1),
            Some(&app.admin),
            Some(with_children(w.g1, "one", &[other, w.job2])),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{}", w.job1), &op2)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let (audit_before, jobs_before) = app.footprint().await;

    let r = app.delete(&format!("/api/v1/jobs/{}", w.job2), &op2).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_eq!(children_of(app, w.job1).await, json!([other]));
    assert_eq!(
        app.footprint().await,
        (audit_before + 1, jobs_before - 1),
        "one audit row for the whole delete"
    );
    let audit = app
        .get(
            &format!("/api/v1/audit?action=job.delete&object_id={}", w.job2),
            &app.admin,
        )
        .await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.body);
    let row = &audit.body["items"][0];
    assert_eq!(row["actor_name"], "op-two");
    assert_eq!(row["after"], json!({"removed_from_children_of": [w.job1]}));
    assert_eq!(row["before"]["name"], "two");
}
api_test!(deleting_a_child_takes_it_out_of_hidden_parents);

async fn the_console_form_refuses_a_hidden_child(app: &TestApp) {
    let w = world(app).await;
    let mut v = Console::new(app);
    let page = v.login("op-one", "op-one-password").await;
    let csrf = page.csrf();
    let before = app.footprint().await;
    let g1 = w.g1.to_string();
    for child in [w.job2, MISSING] {
        let child = child.to_string();
        let form = [
            ("csrf", csrf.as_str()),
            ("group_id", g1.as_str()),
            ("name", "from the form"),
            ("schedule.type", "none"),
            ("handler.type", "shell"),
            ("handler.command", "true"),
            ("children", child.as_str()),
        ];
        let created = v.post("/console/jobs", &form).await;
        let updated = v.post(&format!("/console/jobs/{}", w.job1), &form).await;
        for answer in [created, updated] {
            assert_eq!(
                answer.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{}",
                answer.body
            );
            assert!(answer.body.contains("data-field-error=\"children\""));
            assert!(
                answer.body.contains(&format!("job {child} does not exist")),
                "{}",
                answer.body
            );
        }
    }
    assert_eq!(app.footprint().await, before, "nothing saved");
    assert_eq!(children_of(app, w.job1).await, json!([]));
}
api_test!(the_console_form_refuses_a_hidden_child);
