//! http jobs end to end: the admin stores the request, a real agent sends it to a receiver on
//! loopback and judges the answer; timeouts, kills, cut bodies, refused connections and bad
//! requests at the API.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::receiver::Receiver;
use crate::support::{AgentProc, TestApp, both_backends, free_port, test_db};

const RUN_WITHIN: Duration = Duration::from_secs(30);

async fn http_job(app: &TestApp, group: i64, name: &str, extra: Value, http: Value) -> i64 {
    let mut handler = http;
    handler["type"] = json!("http");
    let mut body = json!({"name": name, "handler": handler});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    app.job_from(group, body).await
}

/// Triggers `job` and waits for its run; the finished run and its log.
async fn run(app: &TestApp, job: i64) -> (Value, String) {
    let run = app.trigger(job, json!({})).await;
    let id = run["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    (done, app.full_log(id).await)
}

async fn http_jobs_send_their_request_and_judge_the_answer(mysql: bool) {
    let app = TestApp::start(test_db(mysql).await).await;
    let g = app.group("http-jobs").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "http-jobs", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    let receiver = Receiver::start().await;

    let hook = http_job(
        &app,
        g,
        "hook",
        json!({}),
        json!({"method": "post", "url": receiver.url("/created"),
               "headers": {"X-Token": "abc", "Content-Type": "application/json"},
               "body": "{\"a\":1}"}),
    )
    .await;
    let view = app
        .get(&format!("/api/v1/jobs/{hook}"), &app.admin)
        .await
        .body;
    assert_eq!(
        (
            view["handler"]["method"].as_str(),
            view["handler"]["expect_status"].as_str()
        ),
        (Some("POST"), Some("200-299")),
        "stored normalized, with the default statuses: {view}"
    );
    let (done, log) = run(&app, hook).await;
    assert_eq!(
        (done["status"].as_str(), done["handle_msg"].as_str()),
        (Some("succeeded"), Some("HTTP 201 Created")),
        "{done}"
    );
    assert!(
        log.starts_with(&format!(
            "[jobfleet-agent] POST {}\n[jobfleet-agent] HTTP 201 Created in",
            receiver.url("/created")
        )) && log.contains("\ncreated\n"),
        "the log has the request once, then the status and the body: {log}"
    );
    assert_eq!(log.matches("POST ").count(), 1, "{log}");
    let hits = receiver.hits("/created");
    assert_eq!(hits.len(), 1, "sent once");
    assert_eq!(hits[0].headers["x-token"], "abc");
    assert_eq!(hits[0].json(), json!({"a": 1}));

    // A status outside the success list fails the run, and saying why; listing it succeeds.
    let down = http_job(
        &app,
        g,
        "down",
        json!({}),
        json!({"url": receiver.url("/unavailable")}),
    )
    .await;
    let (done, log) = run(&app, down).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(
        done["handle_msg"],
        "failed: HTTP 503 Service Unavailable, expected 200-299"
    );
    assert!(log.contains("down for maintenance"), "{log}");
    let tolerated = http_job(
        &app,
        g,
        "tolerated",
        json!({}),
        json!({"url": receiver.url("/unavailable"), "expect_status": [200, "201-299", 503]}),
    )
    .await;
    assert_eq!(run(&app, tolerated).await.0["status"], "succeeded");

    // A long answer is cut in the log, not read whole.
    let big = http_job(
        &app,
        g,
        "big",
        json!({}),
        json!({"url": receiver.url("/big")}),
    )
    .await;
    let (done, log) = run(&app, big).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(
        log.contains("the body was cut after 65536 bytes (134464 more not read)"),
        "{log}"
    );
    assert!(
        log.len() < 70_000,
        "the excerpt is bounded: {} bytes",
        log.len()
    );

    // Nothing listening: a failed run that says what happened.
    let refused = http_job(
        &app,
        g,
        "refused",
        json!({}),
        json!({"url": format!("http://127.0.0.1:{}/", free_port())}),
    )
    .await;
    let (done, _) = run(&app, refused).await;
    assert_eq!(done["status"], "failed", "{done}");
    let msg = done["handle_msg"].as_str().unwrap();
    assert!(
        msg.starts_with("the request failed") && msg.contains("onnection refused"),
        "{msg}"
    );

    // The job's timeout ends a request whose answer does not come.
    let slow = http_job(
        &app,
        g,
        "slow",
        json!({"timeout_s": 1}),
        json!({"url": receiver.url("/slow")}),
    )
    .await;
    let (done, log) = run(&app, slow).await;
    assert_eq!(done["status"], "timed_out", "{done}");
    assert!(log.contains("timed out after 1s"), "{log}");
    assert_eq!(
        log.matches("GET ").count(),
        1,
        "the request's line once: {log}"
    );

    // So does the request's own, shorter one; the job shows it and takes its own view back.
    let impatient = http_job(
        &app,
        g,
        "impatient",
        json!({"timeout_s": 60}),
        json!({"url": receiver.url("/slow"), "timeout_ms": 300, "expect_status": 204}),
    )
    .await;
    let shown = app
        .get(&format!("/api/v1/jobs/{impatient}"), &app.admin)
        .await
        .body;
    assert_eq!(
        (
            &shown["handler"]["timeout_ms"],
            &shown["handler"]["expect_status"]
        ),
        (&json!(300), &json!("204")),
        "{shown}"
    );
    let mut handler = shown["handler"].clone();
    handler.as_object_mut().unwrap().remove("script_version");
    let copy = app
        .job_from(g, json!({"name": "impatient copy", "handler": handler}))
        .await;
    let copied = app
        .get(&format!("/api/v1/jobs/{copy}"), &app.admin)
        .await
        .body;
    assert_eq!(
        copied["handler"], shown["handler"],
        "the request's fields are taken back as shown"
    );
    let (done, log) = run(&app, impatient).await;
    assert_eq!(done["status"], "timed_out", "{done}");
    assert!(log.contains("timed out after 300 ms"), "{log}");

    // And a kill ends one without a timeout.
    let endless = http_job(
        &app,
        g,
        "endless",
        json!({}),
        json!({"url": receiver.url("/slow")}),
    )
    .await;
    let id = app.trigger(endless, json!({})).await["id"]
        .as_i64()
        .unwrap();
    crate::support::wait_for(Duration::from_secs(10), "the request to arrive", || async {
        (receiver.hits("/slow").len() == 3).then_some(())
    })
    .await;
    // While the answer is slow to come, the live log says what the run waits for.
    let request_line = format!("[jobfleet-agent] GET {}\n", receiver.url("/slow"));
    crate::support::wait_for(Duration::from_secs(10), "the request's line", || async {
        (app.full_log(id).await == request_line).then_some(())
    })
    .await;
    let killed = app.kill_run(id).await;
    assert_eq!(killed.status, StatusCode::ACCEPTED, "{}", killed.body);
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "killed", "{done}");
    let log = app.full_log(id).await;
    assert!(
        log.starts_with(&request_line)
            && log.matches("GET ").count() == 1
            && log.contains("killed on request: the request was abandoned"),
        "{log}"
    );
}
both_backends!(http_jobs_send_their_request_and_judge_the_answer);

/// What a [`closing_on_reuse`] server did: requests answered, connections closed unanswered.
#[derive(Default)]
struct Closings {
    answered: std::sync::atomic::AtomicUsize,
    closed: std::sync::atomic::AtomicUsize,
}

impl Closings {
    fn answered(&self) -> usize {
        self.answered.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A server that answers the first request on each connection and keeps it alive, then closes
/// it when a second request comes on it, unanswered: what a server does whose idle time for
/// the connection ran out as the request came. Returns its URL and what it did.
async fn closing_on_reuse() -> (String, std::sync::Arc<Closings>) {
    use crate::support::agent::read_request;
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/once", listener.local_addr().unwrap());
    let closings = std::sync::Arc::new(Closings::default());
    let closings_here = closings.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let closings = closings_here.clone();
            tokio::spawn(async move {
                // Whole requests, bodies included: a body read apart from its head must not
                // count as a second request.
                if read_request(&mut socket).await.is_none() {
                    return;
                }
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                if socket.write_all(answer).await.is_err() {
                    return;
                }
                closings.answered.fetch_add(1, Ordering::SeqCst);
                if read_request(&mut socket).await.is_some() {
                    closings.closed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (url, closings)
}

/// A run a few seconds after another to the same server goes on a new connection, not on the
/// kept-alive one the server may be closing just then (a request lost so fails the run, and
/// cannot be sent again: whether the server acted on it is unknown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_job_does_not_reuse_a_connection_idle_for_seconds() {
    let app = TestApp::sqlite().await;
    let g = app.group("http-idle").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "http-idle", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    let (url, closed) = closing_on_reuse().await;
    let job = http_job(&app, g, "idle", json!({}), json!({"url": url})).await;
    let (first, _) = run(&app, job).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    // Longer than the agent keeps an idle connection, shorter than servers commonly do.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (second, log) = run(&app, job).await;
    assert_eq!(second["status"], "succeeded", "{second}: {log}");
    assert_eq!(closed.closed(), 0, "no request went on the idle connection");
}

/// The agent keeps each http job's checked request while its source stays the same: a job
/// edited between two runs sends its new request (address, method, header, body, statuses) in
/// the second, and the edit back returns to the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_job_edited_between_runs_sends_its_new_request() {
    let app = TestApp::sqlite().await;
    let g = app.group("http-edit").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "http-edit", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    let receiver = Receiver::start().await;
    let first = json!({"url": receiver.url("/first")});
    let job = http_job(&app, g, "edited", json!({}), first.clone()).await;
    let edit = |handler: Value| {
        let mut handler = handler;
        handler["type"] = json!("http");
        let body = json!({"group_id": g, "name": "edited", "schedule": {"type": "none"},
                          "handler": handler});
        let app = &app;
        async move {
            let r = app
                .call(
                    "PUT",
                    &format!("/api/v1/jobs/{job}"),
                    Some(&app.admin),
                    Some(body),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        }
    };

    assert_eq!(run(&app, job).await.0["status"], "succeeded");
    edit(json!({"method": "put", "url": receiver.url("/second"),
                "headers": {"X-Edit": "2"}, "body": "two", "expect_status": [201]}))
    .await;
    let (done, log) = run(&app, job).await;
    assert_eq!(
        (done["status"].as_str(), done["handle_msg"].as_str()),
        (Some("failed"), Some("failed: HTTP 200 OK, expected 201")),
        "judged by the edited statuses: {done}"
    );
    assert!(
        log.starts_with(&format!("[jobfleet-agent] PUT {}", receiver.url("/second"))),
        "{log}"
    );
    let second = receiver.hits("/second");
    assert_eq!(second.len(), 1, "the edited request went out");
    assert_eq!(
        (
            second[0].headers["x-edit"].as_str(),
            second[0].body.as_slice()
        ),
        ("2", &b"two"[..])
    );

    edit(first).await;
    assert_eq!(run(&app, job).await.0["status"], "succeeded");
    assert_eq!(
        receiver.hits("/first").len(),
        2,
        "back to the first request"
    );
    assert_eq!(receiver.hits("/second").len(), 1);
}

/// A request sent on a kept-alive connection just as its server closes it gets no answer: a
/// GET is sent again on another connection and its run succeeds, saying so in its log; a POST,
/// which the server may have acted on, is not, and its run fails saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_request_closed_unanswered_is_sent_again_and_a_post_is_not() {
    let app = TestApp::sqlite().await;
    let g = app.group("http-again").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "http-again", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;

    let (url, server) = closing_on_reuse().await;
    let get = http_job(&app, g, "get", json!({}), json!({"url": url})).await;
    let (first, _) = run(&app, get).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    // Well within the agent's idle limit: the second run's request goes on the first's
    // connection, which the server closes unanswered.
    let (second, log) = run(&app, get).await;
    assert_eq!(second["status"], "succeeded", "{second}: {log}");
    assert_eq!(
        (server.closed(), server.answered()),
        (1, 2),
        "one request closed unanswered, sent again and answered: {log}"
    );
    assert!(
        log.contains("sent again: its first connection closed unanswered")
            && log.contains("HTTP 200 OK"),
        "{log}"
    );

    let (url, server) = closing_on_reuse().await;
    let post = http_job(
        &app,
        g,
        "post",
        json!({}),
        json!({"method": "POST", "url": url, "body": "x"}),
    )
    .await;
    let (first, _) = run(&app, post).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    let (second, log) = run(&app, post).await;
    assert_eq!(second["status"], "failed", "{second}: {log}");
    assert_eq!(
        (server.closed(), server.answered()),
        (1, 1),
        "the POST went out once: {log}"
    );
    let message = second["handle_msg"].as_str().unwrap_or_default();
    assert!(
        message.contains("not sent again: POST is not idempotent"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_requests_are_refused_naming_the_field() {
    let app = TestApp::sqlite().await;
    let g = app.group("http-bad").await;
    let job = |handler: Value| json!({"group_id": g, "name": "bad", "schedule": {"type": "none"}, "handler": handler});
    for (handler, field, says) in [
        (
            json!({"type": "http"}),
            "handler.url",
            "is required for http",
        ),
        (
            json!({"type": "http", "url": "ftp://example.com/"}),
            "handler.url",
            "http:// or https://",
        ),
        (
            json!({"type": "http", "url": "http://user:secret@example.com/"}),
            "handler.url",
            "credentials",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "method": "BREW"}),
            "handler.method",
            "not one of",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "headers": {"X-A": "1\r\nX-B: 2"}}),
            "handler.headers",
            "control character",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "expect_status": "2xx"}),
            "handler.expect_status",
            "not a status code",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "expect_status": [200, true]}),
            "handler.expect_status",
            "a list of either",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "expect_status": []}),
            "handler.expect_status",
            "a list of either",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "expect_status": " "}),
            "handler.expect_status",
            "leave it out",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "expect_status": [200, ""]}),
            "handler.expect_status",
            "leave it out",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "timeout_ms": 0}),
            "handler.timeout_ms",
            "between 1 and",
        ),
        (
            json!({"type": "http", "url": "http://example.com/", "timeout_ms": -5}),
            "handler.timeout_ms",
            "positive",
        ),
        (
            json!({"type": "http", "command": "echo", "url": "http://example.com/"}),
            "handler.command",
            "is not used by handler type `http`",
        ),
        (
            json!({"type": "shell", "command": "echo", "url": "http://example.com/"}),
            "handler.url",
            "is not used by handler type `shell`",
        ),
    ] {
        let r = app
            .post("/api/v1/jobs", &app.admin, job(handler.clone()))
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{handler}: {}",
            r.body
        );
        assert_eq!(r.field(), Some(field), "{handler}: {}", r.body);
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{handler}: {message}");
    }
    let mut limited = job(json!({"type": "http", "url": "http://example.com/"}));
    limited["limits"] = json!({"memory_mb": 64});
    let r = app.post("/api/v1/jobs", &app.admin, limited).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.field(), Some("limits"), "{}", r.body);
    let r = app
        .post(
            "/api/v1/jobs",
            &app.admin,
            job(json!({"type": "http", "url": "http://example.com/", "verb": "GET"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `verb`"),
        "{}",
        r.body
    );
    let listed = app.get("/api/v1/jobs", &app.admin).await.body;
    assert_eq!(listed["total"], 0, "nothing was stored: {listed}");
}
