//! Jobs, script versions, cron previews, runs and the audit trail they leave.

use jobfleet_admin::db::job_run;
use jobfleet_admin::domain::policy::TriggerKind;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::{TestApp, api_test};

fn full_job(group_id: i64) -> serde_json::Value {
    json!({
        "group_id": group_id,
        "name": "nightly report",
        "description": "<b>bold</b> text is kept verbatim",
        "schedule": {"type": "cron", "expr": "0 15 10 ? * 6#3", "timezone": "Asia/Shanghai"},
        "handler": {"type": "script", "source": "#!/bin/bash\necho v1", "interpreter": "bash", "note": "first"},
        "params": "--full",
        "routing": "consistent_hash",
        "enabled": true,
        "timeout_s": 300,
        "retry": {"count": 3, "backoff_s": 20},
        "limits": {"cpu": 0.5, "memory_mb": 256, "pids": 64},
        "misfire": "fire_once_now",
        "concurrency": "forbid",
        "block_strategy": "discard_later",
        "children": [],
        "alert": {"on_failure": true, "on_timeout": false, "on_lost": true, "on_no_agent": true, "channels": []}
    })
}

async fn jobs_round_trip_every_field(app: &TestApp) {
    let g = app.group("reports").await;
    let child = app.job(&app.admin, g, "child").await;
    let mut body = full_job(g);
    body["children"] = json!([child]);
    let created = app.post("/api/v1/jobs", &app.admin, body.clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();
    let got = app
        .get(&format!("/api/v1/jobs/{id}"), &app.admin)
        .await
        .body;
    for key in [
        "name",
        "description",
        "params",
        "routing",
        "enabled",
        "timeout_s",
        "retry",
        "limits",
        "misfire",
        "concurrency",
        "block_strategy",
        "children",
        "alert",
    ] {
        assert_eq!(got[key], body[key], "{key}");
    }
    assert_eq!(got["schedule"]["expr"], "0 15 10 ? * 6#3");
    assert_eq!(got["schedule"]["timezone"], "Asia/Shanghai");
    assert_eq!(got["handler"]["source"], "#!/bin/bash\necho v1");
    assert_eq!(got["handler"]["script_version"], 1);
    assert!(got["next_fire_ms"].as_i64().unwrap() > app.now_ms());

    // Update: new schedule type, new script → version 2.
    let mut changed = body.clone();
    changed["schedule"] = json!({"type": "fixed_rate", "interval_s": 30});
    changed["handler"] =
        json!({"type": "script", "source": "print('v2')", "interpreter": "python3"});
    let updated = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{id}"),
            Some(&app.admin),
            Some(changed),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.body);
    assert_eq!(
        updated.body["schedule"],
        json!({"type": "fixed_rate", "interval_s": 30, "timezone": "UTC"})
    );
    assert_eq!(updated.body["handler"]["script_version"], 2);

    let versions = app
        .get(&format!("/api/v1/jobs/{id}/script/versions"), &app.admin)
        .await
        .body;
    let listed: Vec<(i64, bool)> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_i64().unwrap(),
                v["current"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, vec![(2, true), (1, false)]);
    let v1 = app
        .get(&format!("/api/v1/jobs/{id}/script/versions/1"), &app.admin)
        .await
        .body;
    assert_eq!(
        (
            v1["source"].as_str(),
            v1["interpreter"].as_str(),
            v1["note"].as_str()
        ),
        (Some("#!/bin/bash\necho v1"), Some("bash"), Some("first"))
    );
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{id}/script/versions/9"), &app.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    let rolled = app
        .call(
            "POST",
            &format!("/api/v1/jobs/{id}/script/versions/1/rollback"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(rolled.status, StatusCode::OK, "{}", rolled.body);
    assert_eq!(
        (
            rolled.body["handler"]["script_version"].as_i64(),
            rolled.body["handler"]["source"].as_str()
        ),
        (Some(3), Some("#!/bin/bash\necho v1"))
    );
    assert_eq!(rolled.body["handler"]["interpreter"], "bash");
    assert_eq!(
        rolled.body["schedule"]["type"], "fixed_rate",
        "roll back changes only the script"
    );

    // Enable/disable, filters, paging.
    let r = app
        .call(
            "POST",
            &format!("/api/v1/jobs/{id}/disable"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(
        (r.body["enabled"].as_bool(), r.body["next_fire_ms"].as_i64()),
        (Some(false), None)
    );
    let r = app
        .call(
            "POST",
            &format!("/api/v1/jobs/{id}/enable"),
            Some(&app.admin),
            None,
        )
        .await;
    assert!(r.body["next_fire_ms"].as_i64().is_some());
    for i in 0..5 {
        app.job(&app.admin, g, &format!("bulk {i}")).await;
    }
    let page = app
        .get(
            &format!("/api/v1/jobs?group_id={g}&limit=3&offset=3"),
            &app.admin,
        )
        .await
        .body;
    assert_eq!(
        (
            page["total"].as_i64(),
            page["items"].as_array().unwrap().len()
        ),
        (Some(7), 3)
    );
    let search = app
        .get("/api/v1/jobs?q=bulk&schedule_type=cron", &app.admin)
        .await
        .body;
    assert_eq!(search["total"], 5);
    let fixed = app
        .get("/api/v1/jobs?schedule_type=fixed_rate", &app.admin)
        .await
        .body;
    assert_eq!(fixed["total"], 1);

    // Deleting a child that is still referenced takes it out of its parent's children.
    assert_eq!(
        app.delete(&format!("/api/v1/jobs/{child}"), &app.admin)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{id}"), &app.admin)
            .await
            .body["children"],
        json!([])
    );
    assert_eq!(
        app.delete(&format!("/api/v1/jobs/{id}"), &app.admin)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{id}"), &app.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}
api_test!(jobs_round_trip_every_field);

async fn every_change_is_audited_with_before_and_after(app: &TestApp) {
    let g = app.group("audited").await;
    let (_, operator) = app.user("otto", "operator", &[g]).await;
    let id = app.job(&operator, g, "first name").await;
    let mut body = TestApp::job_body(g, "second name");
    body["timeout_s"] = json!(60);
    app.call(
        "PUT",
        &format!("/api/v1/jobs/{id}"),
        Some(&operator),
        Some(body),
    )
    .await;
    app.delete(&format!("/api/v1/jobs/{id}"), &operator).await;

    let rows = app
        .get(
            &format!("/api/v1/audit?object_type=job&object_id={id}"),
            &app.admin,
        )
        .await
        .body;
    let items = rows["items"].as_array().unwrap();
    let actions: Vec<&str> = items
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, vec!["job.delete", "job.update", "job.create"]);
    let update = &items[1];
    assert_eq!(update["actor_name"], "otto");
    assert_eq!(update["actor_kind"], "user");
    assert_eq!(update["ip"], "127.0.0.1");
    assert_eq!(update["before"]["name"], "first name");
    assert_eq!(
        (
            update["after"]["name"].as_str(),
            update["after"]["timeout_s"].as_i64()
        ),
        (Some("second name"), Some(60))
    );
    assert!(items[0]["after"].is_null() && items[0]["before"]["name"] == "second name");
    assert!(!update["request_id"].as_str().unwrap().is_empty());

    let groups = app
        .get("/api/v1/audit?action=group.create", &app.admin)
        .await
        .body;
    assert_eq!(groups["total"], 1);
    let users = app
        .get("/api/v1/audit?object_type=user&actor=admin", &app.admin)
        .await
        .body;
    assert!(
        users["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| !r.to_string().contains("password_hash"))
    );
}
api_test!(every_change_is_audited_with_before_and_after);

async fn cron_preview_lists_fire_times_or_says_what_is_wrong(app: &TestApp) {
    let ok = app
        .post(
            "/api/v1/cron/preview",
            &app.admin,
            json!({"expr": "0 0/5 * * * ?", "timezone": "Europe/Berlin", "count": 3}),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let times: Vec<i64> = ok.body["next_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(times.len(), 3);
    assert!(times.windows(2).all(|w| w[1] - w[0] == 300_000));
    assert!(times[0] > app.now_ms() && times[0] % 300_000 == 0);
    let crontab = app
        .post(
            "/api/v1/cron/preview",
            &app.admin,
            json!({"expr": "*/5 * * * *"}),
        )
        .await;
    assert_eq!(
        crontab.status,
        StatusCode::OK,
        "five-field crontab: {}",
        crontab.body
    );
    for (body, field) in [
        (json!({"expr": "0 0 25 * * ?"}), "expr"),
        (json!({"expr": "not cron"}), "expr"),
        (
            json!({"expr": "0 * * * * ?", "timezone": "Moon/Base"}),
            "timezone",
        ),
        (json!({"expr": "0 * * * * ?", "count": 0}), "count"),
        (json!({"expr": "0 * * * * ?", "count": 1000}), "count"),
    ] {
        let r = app
            .post("/api/v1/cron/preview", &app.admin, body.clone())
            .await;
        assert_eq!(
            (r.status, r.field()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{body}: {}",
            r.body
        );
    }
    let bad = app
        .post(
            "/api/v1/cron/preview",
            &app.admin,
            json!({"expr": "0 0 25 * * ?"}),
        )
        .await;
    assert_eq!(bad.code(), "invalid_cron");
    assert!(
        bad.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("25")
    );
}
api_test!(cron_preview_lists_fire_times_or_says_what_is_wrong);

async fn runs_are_listed_filtered_paged_and_scoped(app: &TestApp) {
    let (a, b) = (app.group("runs-a").await, app.group("runs-b").await);
    let (ja, jb) = (
        app.job(&app.admin, a, "ja").await,
        app.job(&app.admin, b, "jb").await,
    );
    let now = app.now_ms();
    let runs: Vec<(i64, i64, &str, i64)> = vec![
        (ja, a, "succeeded", now - 3000),
        (ja, a, "failed", now - 2000),
        (jb, b, "running", now - 1000),
        (ja, a, "pending", now),
    ];
    let ids = app
        .state
        .db
        .run(move |conn| {
            let mut ids = Vec::new();
            for (job_id, group_id, status, at) in runs {
                ids.push(job_run::insert(
                    conn,
                    &job_run::NewJobRun {
                        job_id: jobfleet_admin::domain::ids::JobId(job_id),
                        group_id: jobfleet_admin::domain::ids::GroupId(group_id),
                        first_run_id: None,
                        attempt: 1,
                        trigger_kind: TriggerKind::Schedule,
                        fire_slot_ms: Some(at),
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
                )?);
            }
            Ok(ids)
        })
        .await
        .unwrap();
    let all = app.get("/api/v1/runs", &app.admin).await.body;
    assert_eq!(all["total"], 4);
    assert_eq!(
        all["items"][0]["id"].as_i64(),
        Some(ids[3].0),
        "newest first"
    );
    let failed = app
        .get(
            &format!("/api/v1/runs?job_id={ja}&status=failed"),
            &app.admin,
        )
        .await
        .body;
    assert_eq!(
        (failed["total"].as_i64(), failed["items"][0]["id"].as_i64()),
        (Some(1), Some(ids[1].0))
    );
    let ranged = app
        .get(
            &format!("/api/v1/runs?from_ms={}&to_ms={}", now - 2500, now),
            &app.admin,
        )
        .await
        .body;
    assert_eq!(ranged["total"], 2);
    let paged = app
        .get("/api/v1/runs?limit=1&offset=1", &app.admin)
        .await
        .body;
    assert_eq!(paged["items"][0]["id"].as_i64(), Some(ids[2].0));
    let one = app
        .get(&format!("/api/v1/runs/{}", ids[0]), &app.admin)
        .await
        .body;
    assert_eq!(
        (
            one["status"].as_str(),
            one["job_id"].as_i64(),
            one["attempt"].as_i64()
        ),
        (Some("succeeded"), Some(ja), Some(1))
    );
    assert!(one.get("usage").is_some() && one.get("agent").is_some());

    let (_, viewer) = app.user("rita", "viewer", &[b]).await;
    assert_eq!(app.get("/api/v1/runs", &viewer).await.body["total"], 1);
    assert_eq!(
        app.get(&format!("/api/v1/runs/{}", ids[0]), &viewer)
            .await
            .status,
        StatusCode::NOT_FOUND,
        "a run of a group the caller cannot see answers like a missing one"
    );
    assert_eq!(
        app.get("/api/v1/runs/999999", &app.admin).await.status,
        StatusCode::NOT_FOUND
    );
    for query in [
        "status=exploded",
        "limit=0",
        "limit=100000",
        "offset=-1",
        "job_id=abc",
        "from_ms=10&to_ms=5",
        "colour=red",
    ] {
        let r = app.get(&format!("/api/v1/runs?{query}"), &app.admin).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            r.body
        );
    }
}
api_test!(runs_are_listed_filtered_paged_and_scoped);

async fn docs_health_and_readiness_are_served(app: &TestApp) {
    let doc = app.call("GET", "/api/v1/openapi.json", None, None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert!(doc.body["paths"]["/api/v1/jobs"]["post"].is_object());
    let page = app
        .client
        .get(format!("{}/api/docs/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    let css = app
        .client
        .get(format!("{}/api/docs/swagger-ui.css", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        css.status(),
        StatusCode::OK,
        "assets are vendored into the binary"
    );
    // The page loads the one served document; the former address still answers it.
    let initializer = app.text("/api/docs/swagger-initializer.js").await;
    assert!(
        initializer.contains("/api/v1/openapi.json"),
        "{initializer}"
    );
    let former = app.call("GET", "/api/docs/openapi.json", None, None).await;
    assert_eq!(former.status, StatusCode::OK);
    assert_eq!(former.body, doc.body);
    assert_eq!(
        app.call("GET", "/healthz", None, None).await.status,
        StatusCode::OK
    );
    let ready = app.call("GET", "/readyz", None, None).await;
    assert_eq!(ready.status, StatusCode::OK);
    assert!(ready.body["database"].is_string());
    assert!(ready.body["workers"].is_object(), "{}", ready.body);
    assert!(
        !ready.body.to_string().contains("last_error"),
        "readiness answers without a token and shows no error text: {}",
        ready.body
    );
    let unknown = app.get("/api/v1/does-not-exist", &app.admin).await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
}
api_test!(docs_health_and_readiness_are_served);

async fn a_finished_run_is_retried_as_the_next_attempt_of_its_chain(app: &TestApp) {
    let (g, other) = (app.group("retry-g").await, app.group("retry-o").await);
    let job = app.job(&app.admin, g, "retried").await;
    let now = app.now_ms();
    let insert = |first: Option<i64>, attempt: i32, status: &'static str| {
        app.state.db.run(move |conn| {
            job_run::insert(
                conn,
                &job_run::NewJobRun {
                    job_id: jobfleet_admin::domain::ids::JobId(job),
                    group_id: jobfleet_admin::domain::ids::GroupId(g),
                    first_run_id: first.map(jobfleet_admin::domain::ids::RunId),
                    attempt,
                    trigger_kind: TriggerKind::Schedule,
                    fire_slot_ms: None,
                    scheduled_ms: now,
                    status: status.parse().unwrap(),
                    params: "--orig".into(),
                    shard_index: 0,
                    shard_total: 1,
                    created_ms: now,
                    workflow_node_id: None,
                    node_attempt: None,
                    timeout_s: None,
                    env: None,
                },
            )
        })
    };
    let first = insert(None, 1, "failed").await.unwrap().0;
    let second = insert(Some(first), 2, "timed_out").await.unwrap().0;

    // Retrying the first attempt joins the chain after its last attempt, with its params.
    let r = app
        .post(
            &format!("/api/v1/runs/{first}/retry"),
            &app.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        (
            r.body["first_run_id"].as_i64(),
            r.body["attempt"].as_i64(),
            r.body["trigger_kind"].as_str(),
            r.body["params"].as_str()
        ),
        (Some(first), Some(3), Some("retry"), Some("--orig"))
    );
    let third = r.body["id"].as_i64().unwrap();
    // No agent is live, so the attempt has ended at once; the next one takes other params.
    let r = app
        .post(
            &format!("/api/v1/runs/{second}/retry"),
            &app.admin,
            json!({"params": "--again"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        (r.body["attempt"].as_i64(), r.body["params"].as_str()),
        (Some(4), Some("--again"))
    );
    let audit = app
        .get("/api/v1/audit?action=run.retry", &app.admin)
        .await
        .body;
    let retried: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "run.retry")
        .map(|e| e["object_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        retried,
        [second.to_string(), first.to_string()],
        "newest first: {audit}"
    );
    assert!(app.run(third).await["status"].as_str().is_some());

    // While an attempt of the chain is still open, nothing is retried.
    let open = insert(Some(first), 5, "pending").await.unwrap().0;
    let r = app
        .post(
            &format!("/api/v1/runs/{first}/retry"),
            &app.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("run {open}")),
        "{}",
        r.body
    );
    let runs_before = app.runs_of(job).await.len();

    // Bad input, other roles and other groups.
    let lone = insert(None, 1, "succeeded").await.unwrap().0;
    for (body, status) in [
        (json!({"params": 5}), StatusCode::UNPROCESSABLE_ENTITY),
        (json!({"bogus": 1}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"address": "not a url"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"address": "http://10.9.9.9:9999/"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let r = app
            .post(
                &format!("/api/v1/runs/{lone}/retry"),
                &app.admin,
                body.clone(),
            )
            .await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
    }
    let (_, viewer) = app.user("retry-viewer", "viewer", &[g]).await;
    let (_, stranger) = app.user("retry-stranger", "operator", &[other]).await;
    let r = app
        .post(&format!("/api/v1/runs/{lone}/retry"), &viewer, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = app
        .post(&format!("/api/v1/runs/{lone}/retry"), &stranger, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = app
        .post("/api/v1/runs/99999999/retry", &app.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(
        app.runs_of(job).await.len(),
        runs_before + 1,
        "refused retries create nothing (the one added is the lone run itself)"
    );
}
api_test!(a_finished_run_is_retried_as_the_next_attempt_of_its_chain);
