//! Alerting end to end: channels over the API, events written with the final status of a run,
//! delivered to a real SMTP conversation and real HTTP receivers (signatures checked here,
//! independently of the admin's code), retried with backoff, suppressed within the quiet
//! window, and raised when a group loses its last live agent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use jobfleet_admin::scheduler::monitors;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::both_backends;
use crate::support::receiver::{Hit, Receiver};
use crate::support::{AgentProc, Opts, TestApp, api_test, wait_for};

const WITHIN: Duration = Duration::from_secs(30);

async fn app_with(mysql: bool, env: &[(&str, &str)], opts: Opts) -> TestApp {
    TestApp::start_opts(crate::support::test_db(mysql).await, env, opts).await
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

// ---------------------------------------------------------------------------------------------
// An SMTP sink: enough of RFC 5321 for a client to hand over mail, which it keeps.

#[derive(Debug, Clone, Default)]
struct Mail {
    from: String,
    to: Vec<String>,
    data: String,
}

#[derive(Clone, Default)]
struct SmtpSink {
    mails: Arc<Mutex<Vec<Mail>>>,
    port: u16,
}

impl SmtpSink {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sink = SmtpSink {
            mails: Arc::default(),
            port: listener.local_addr().unwrap().port(),
        };
        let mails = sink.mails.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let mails = mails.clone();
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read);
                    write.write_all(b"220 sink ESMTP ready\r\n").await.unwrap();
                    let mut current = Mail::default();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let upper = line.to_ascii_uppercase();
                        let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO")
                        {
                            b"250 sink\r\n"
                        } else if upper.starts_with("MAIL FROM:") {
                            current = Mail {
                                from: line[10..].trim().to_owned(),
                                ..Mail::default()
                            };
                            b"250 OK\r\n"
                        } else if upper.starts_with("RCPT TO:") {
                            current.to.push(line[8..].trim().to_owned());
                            b"250 OK\r\n"
                        } else if upper.starts_with("DATA") {
                            write
                                .write_all(b"354 end with <CRLF>.<CRLF>\r\n")
                                .await
                                .unwrap();
                            let mut data = String::new();
                            loop {
                                line.clear();
                                if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                                    return;
                                }
                                if line == ".\r\n" {
                                    break;
                                }
                                data.push_str(&line);
                            }
                            current.data = data;
                            mails.lock().unwrap().push(std::mem::take(&mut current));
                            b"250 OK queued\r\n"
                        } else if upper.starts_with("QUIT") {
                            let _ = write.write_all(b"221 bye\r\n").await;
                            return;
                        } else if upper.starts_with("RSET") || upper.starts_with("NOOP") {
                            b"250 OK\r\n"
                        } else {
                            b"502 command not implemented\r\n"
                        };
                        if write.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        sink
    }

    fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }
}

/// Undoes quoted-printable soft breaks and `=XX` escapes enough to search a mail's text.
fn unfold(data: &str) -> String {
    let joined = data.replace("=\r\n", "");
    let bytes = joined.as_bytes();
    let mut i = 0;
    let mut raw = Vec::new();
    while i < bytes.len() {
        if bytes[i] == b'='
            && i + 2 < bytes.len()
            && let Some(b) = joined
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            raw.push(b);
            i += 3;
            continue;
        }
        raw.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&raw).into_owned()
}

// ---------------------------------------------------------------------------------------------

async fn channel(app: &TestApp, body: Value) -> i64 {
    let r = app.post("/api/v1/alert-channels", &app.admin, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert!(
        r.body.get("secret").is_none(),
        "secrets are never shown: {}",
        r.body
    );
    r.body["id"].as_i64().unwrap()
}

async fn events(app: &TestApp, query: &str) -> Vec<Value> {
    let r = app
        .get(
            &format!("/api/v1/alert-events?limit=500&{query}"),
            &app.admin,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut items = r.body["items"].as_array().unwrap().clone();
    items.sort_by_key(|e| e["id"].as_i64());
    items
}

/// A job in a group without agents: every trigger fails at once ("no live agent"), which is
/// a final failure when no retry is configured.
async fn failing_job(app: &TestApp, group: i64, name: &str, channels: &[i64]) -> i64 {
    app.job_from(
        group,
        json!({"name": name, "handler": {"type": "shell", "command": "true"},
               "alert": {"channels": channels}}),
    )
    .await
}

async fn fail_once(app: &TestApp, job: i64) -> i64 {
    let run = app.trigger(job, json!({})).await;
    assert_eq!(run["status"], "failed", "{run}");
    run["id"].as_i64().unwrap()
}

async fn webhook_formats_are_signed_and_a_failed_delivery_is_retried(app: &TestApp) {
    let hooks = Receiver::start().await;
    let generic = channel(app, json!({"name": "generic", "kind": "webhook", "target": hooks.url("/generic"), "secret": "gk-secret"})).await;
    let ding = channel(
        app,
        json!({"name": "ding", "kind": "webhook", "format": "dingtalk",
        "target": hooks.url("/ding?access_token=tok"), "secret": "SECding"}),
    )
    .await;
    let feishu = channel(
        app,
        json!({"name": "feishu", "kind": "webhook", "format": "feishu",
        "target": hooks.url("/feishu"), "secret": "fs-secret"}),
    )
    .await;
    let slack = channel(
        app,
        json!({"name": "slack", "kind": "webhook", "format": "slack",
        "target": hooks.url("/slack")}),
    )
    .await;
    let wecom = channel(
        app,
        json!({"name": "wecom", "kind": "webhook", "format": "wecom",
        "target": hooks.url("/wecom?key=wk-1")}),
    )
    .await;
    let g = app.group("alert-hooks").await;
    let job = failing_job(app, g, "hooked", &[generic, ding, feishu, slack, wecom]).await;
    let run = fail_once(app, job).await;

    let written = events(app, &format!("job_id={job}")).await;
    assert_eq!(written.len(), 5, "one event per channel: {written:?}");
    for e in &written {
        assert_eq!(
            (e["kind"].as_str(), e["status"].as_str()),
            (Some("run_failed"), Some("pending"))
        );
        assert_eq!(e["run_id"].as_i64(), Some(run));
    }
    let done = jobfleet_admin::alert::deliver_due(&app.state)
        .await
        .unwrap();
    assert_eq!(
        (done.sent, done.retrying, done.failed),
        (5, 0, 0),
        "{done:?}"
    );
    assert!(
        events(app, &format!("job_id={job}"))
            .await
            .iter()
            .all(|e| e["status"] == "sent" && e["attempts"] == 1)
    );

    let hit = &hooks.hits("/generic")[0];
    let body = hit.json();
    for key in [
        "kind", "title", "text", "job_id", "run_id", "group_id", "status", "url",
    ] {
        assert!(body.get(key).is_some(), "generic body lacks {key}: {body}");
    }
    assert_eq!(
        (body["kind"].as_str(), body["status"].as_str()),
        (Some("run_failed"), Some("failed"))
    );
    assert_eq!(
        (
            body["job_id"].as_i64(),
            body["run_id"].as_i64(),
            body["group_id"].as_i64()
        ),
        (Some(job), Some(run), Some(g))
    );
    assert!(body["text"].as_str().unwrap().contains("hooked"), "{body}");
    assert_eq!(
        hit.headers["x-jobfleet-signature"],
        format!(
            "sha256={}",
            hex::encode(hmac_sha256(b"gk-secret", &hit.body))
        )
    );

    let hit = &hooks.hits("/ding")[0];
    assert_eq!(hit.query["access_token"], "tok");
    let ts = &hit.query["timestamp"];
    assert_eq!(
        hit.query["sign"],
        BASE64.encode(hmac_sha256(b"SECding", format!("{ts}\nSECding").as_bytes()))
    );
    let body = hit.json();
    assert_eq!(body["msgtype"], "markdown");
    assert!(
        body["markdown"]["title"]
            .as_str()
            .unwrap()
            .contains("hooked")
    );
    assert!(
        body["markdown"]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("Run: {run}"))
    );

    let body = hooks.hits("/feishu")[0].json();
    assert_eq!(body["msg_type"], "text");
    let ts = body["timestamp"].as_str().unwrap();
    assert_eq!(
        body["sign"].as_str().unwrap(),
        BASE64.encode(hmac_sha256(format!("{ts}\nfs-secret").as_bytes(), b""))
    );
    assert!(body["content"]["text"].as_str().unwrap().contains("hooked"));

    let body = hooks.hits("/slack")[0].json();
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    assert!(
        body["text"]
            .as_str()
            .unwrap()
            .contains(&format!("run {run}"))
    );

    let hit = &hooks.hits("/wecom")[0];
    assert_eq!(hit.query["key"], "wk-1");
    let body = hit.json();
    assert_eq!(body["msgtype"], "markdown");
    let content = body["markdown"]["content"].as_str().unwrap();
    assert!(
        content.contains("hooked") && content.contains(&format!("Run: {run}")),
        "{content}"
    );

    // 500 first: the event waits 10 s, then goes out on its second attempt.
    let flaky = channel(
        app,
        json!({"name": "flaky", "kind": "webhook", "target": hooks.url("/flaky")}),
    )
    .await;
    let job2 = failing_job(app, g, "flaky-receiver", &[flaky]).await;
    fail_once(app, job2).await;
    let done = jobfleet_admin::alert::deliver_due(&app.state)
        .await
        .unwrap();
    assert_eq!((done.sent, done.retrying), (0, 1), "{done:?}");
    let e = &events(app, &format!("job_id={job2}")).await[0];
    assert_eq!(
        (e["status"].as_str(), e["attempts"].as_i64()),
        (Some("pending"), Some(1)),
        "{e}"
    );
    assert!(
        e["last_error"].as_str().unwrap().contains("HTTP 500"),
        "{e}"
    );
    assert!(
        e["last_error"]
            .as_str()
            .unwrap()
            .contains("receiver is down"),
        "{e}"
    );
    assert_eq!(
        jobfleet_admin::alert::deliver_due(&app.state)
            .await
            .unwrap()
            .sent,
        0,
        "not due yet"
    );
    app.clock.advance(10_000);
    assert_eq!(
        jobfleet_admin::alert::deliver_due(&app.state)
            .await
            .unwrap()
            .sent,
        1
    );
    let e = &events(app, &format!("job_id={job2}")).await[0];
    assert_eq!(
        (e["status"].as_str(), e["attempts"].as_i64()),
        (Some("sent"), Some(2)),
        "{e}"
    );
    assert_eq!(hooks.hits("/flaky").len(), 2);

    // Within the quiet window the same failure is recorded, not sent.
    fail_once(app, job).await;
    let all = events(app, &format!("job_id={job}")).await;
    assert_eq!(all.len(), 10);
    assert!(
        all[5..].iter().all(|e| e["status"] == "suppressed"),
        "{all:?}"
    );
    assert_eq!(
        jobfleet_admin::alert::deliver_due(&app.state)
            .await
            .unwrap()
            .sent,
        0
    );
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("jobfleet_alert_deliveries_total{outcome=\"sent\"} 6"),
        "{metrics}"
    );
    assert!(
        metrics.contains("jobfleet_alert_deliveries_total{outcome=\"retry\"} 1"),
        "{metrics}"
    );
}
api_test!(webhook_formats_are_signed_and_a_failed_delivery_is_retried);

/// Audit entries written before `to_ms`.
async fn audit_before(app: &TestApp, to_ms: i64) -> i64 {
    let r = app
        .get(&format!("/api/v1/audit?limit=1&to_ms={to_ms}"), &app.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["total"].as_i64().unwrap()
}

/// `alert_retention_days` and `audit_retention_days` (1 and 2 here) by the admin's clock:
/// settled events and old audit entries go, an event still waiting to be sent stays however old.
async fn old_audit_entries_and_settled_alert_events_are_removed(app: &TestApp) {
    const DAY_MS: i64 = 86_400_000;
    let t0 = app.state.clock.now_ms();
    let hooks = Receiver::start().await;
    let hook = channel(
        app,
        json!({"name": "kept-hook", "kind": "webhook", "target": hooks.url("/kept")}),
    )
    .await;
    let g = app.group("retention").await;
    let job = failing_job(app, g, "old-failure", &[hook]).await;
    fail_once(app, job).await;
    jobfleet_admin::alert::deliver_due(&app.state)
        .await
        .unwrap();
    let sent = events(app, &format!("job_id={job}")).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["status"], "sent");
    let early_audit = audit_before(app, t0 + 60_000).await;
    assert!(early_audit >= 3, "channel, group and job were audited");

    app.clock.advance(DAY_MS + 3_600_000);
    // Raised now and never delivered: still pending at every later pass.
    fail_once(app, job).await;
    let removed = jobfleet_admin::scheduler::monitors::retention(&app.state)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the sent event only");
    let left = events(app, &format!("job_id={job}")).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["status"], "pending");
    assert_ne!(left[0]["id"], sent[0]["id"]);
    assert_eq!(
        audit_before(app, t0 + 60_000).await,
        early_audit,
        "audit entries younger than two days stay"
    );

    app.clock.advance(DAY_MS);
    jobfleet_admin::scheduler::monitors::retention(&app.state)
        .await
        .unwrap();
    assert_eq!(audit_before(app, t0 + 60_000).await, 0);
    assert!(
        audit_before(app, t0 + 3 * DAY_MS).await > 0,
        "the later entries (the second trigger) stay"
    );
    let left = events(app, &format!("job_id={job}")).await;
    assert_eq!(
        (left.len(), left[0]["status"].as_str()),
        (1, Some("pending")),
        "{left:?}"
    );
}
api_test!(
    old_audit_entries_and_settled_alert_events_are_removed,
    &[
        ("JOBFLEET_ALERT_RETENTION_DAYS", "1"),
        ("JOBFLEET_AUDIT_RETENTION_DAYS", "2"),
        ("JOBFLEET_JWT_TTL_S", "2592000"),
    ]
);

async fn email_goes_through_smtp_and_the_worker_wakes_for_it(mysql: bool) {
    let sink = SmtpSink::start().await;
    let port = sink.port.to_string();
    let app = app_with(
        mysql,
        &[
            ("JOBFLEET_SMTP_HOST", "127.0.0.1"),
            ("JOBFLEET_SMTP_PORT", &port),
            ("JOBFLEET_SMTP_TLS", "none"),
            ("JOBFLEET_SMTP_FROM", "jobfleet <jobfleet@example.com>"),
            ("JOBFLEET_PUBLIC_URL", "https://jobs.example.com/"),
        ],
        Opts {
            system_clock: false,
            scheduler: true,
        },
    )
    .await;
    let mail = channel(&app, json!({"name": "oncall", "kind": "email", "target": "oncall@example.com, lead@example.org"})).await;
    let r = app
        .post(
            &format!("/api/v1/alert-channels/{mail}/test"),
            &app.admin,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.body["ok"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{}",
        r.body
    );
    let test_mail = &sink.mails()[0];
    assert!(
        unfold(&test_mail.data).contains("test message for channel oncall"),
        "{test_mail:?}"
    );
    let test_event = events(&app, "kind=test").await;
    assert_eq!(
        (test_event.len(), test_event[0]["status"].as_str()),
        (1, Some("sent"))
    );

    let g = app.group("alert-mail").await;
    let job = failing_job(&app, g, "mailed-job", &[mail]).await;
    let run = fail_once(&app, job).await;
    // No call into the worker here: the event's insert wakes the running one.
    wait_for(WITHIN, "the alert email", || async {
        (sink.mails().len() == 2).then_some(())
    })
    .await;
    let m = &sink.mails()[1];
    assert_eq!(m.from, "<jobfleet@example.com>");
    assert_eq!(
        m.to,
        vec![
            "<oncall@example.com>".to_owned(),
            "<lead@example.org>".to_owned()
        ]
    );
    let text = unfold(&m.data);
    assert!(
        text.contains(&format!(
            "Subject: [jobfleet] run failed: mailed-job (run {run})"
        )),
        "{text}"
    );
    assert!(text.contains("Job: mailed-job"), "{text}");
    assert!(
        text.contains(&format!("https://jobs.example.com/console/runs/{run}")),
        "{text}"
    );
    wait_for(WITHIN, "the event to be marked sent", || async {
        let e = events(&app, &format!("job_id={job}")).await;
        (e.len() == 1 && e[0]["status"] == "sent").then_some(())
    })
    .await;
}
both_backends!(email_goes_through_smtp_and_the_worker_wakes_for_it);

async fn a_shell_failure_pages_once_after_its_last_attempt(mysql: bool) {
    let hooks = Receiver::start().await;
    let app = TestApp::scheduling(mysql, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("alert-shell").await;
    let agent = AgentProc::start(&app.base, "alert-shell", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    let ch = channel(
        &app,
        json!({"name": "hook", "kind": "webhook", "target": hooks.url("/hook")}),
    )
    .await;
    let job = app
        .job_from(
            g,
            json!({"name": "exits-3", "retry": {"count": 1, "backoff_s": 1},
                   "handler": {"type": "shell", "command": "echo failing; exit 3"},
                   "alert": {"on_failure": true, "channels": [ch]}}),
        )
        .await;
    let first = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(first, WITHIN).await;
    assert_eq!(
        (done["status"].as_str(), done["exit_code"].as_i64()),
        (Some("failed"), Some(3))
    );
    // The final status and its alert commit together: none for a run that is retried.
    let early = events(&app, &format!("job_id={job}")).await;
    assert!(
        early.iter().all(|e| e["run_id"].as_i64() != Some(first)),
        "{early:?}"
    );
    let retry = wait_for(WITHIN, "the failed retry", || async {
        let runs = app
            .get(&format!("/api/v1/runs?job_id={job}"), &app.admin)
            .await
            .body;
        runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["attempt"] == 2 && r["status"] == "failed")
            .cloned()
    })
    .await;
    let retry_id = retry["id"].as_i64().unwrap();
    let page = wait_for(WITHIN, "the alert", || async {
        hooks.hits("/hook").first().map(Hit::json)
    })
    .await;
    let all = events(&app, &format!("job_id={job}")).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["run_id"].as_i64(), Some(retry_id));
    let text = page["text"].as_str().unwrap();
    for part in [
        "exits-3",
        &format!("Run: {retry_id} (attempt 2 of 2)"),
        "Exit code: 3",
        &agent.address,
    ] {
        assert!(text.contains(part), "{part} missing: {text}");
    }

    // The next failure within the quiet window is recorded as suppressed and not sent.
    let again = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    app.finished_run(again, WITHIN).await;
    let all = wait_for(WITHIN, "the second alert", || async {
        let all = events(&app, &format!("job_id={job}")).await;
        (all.len() == 2).then_some(all)
    })
    .await;
    assert_eq!(all[1]["status"], "suppressed", "{all:?}");
    assert_ne!(all[1]["run_id"], all[0]["run_id"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(hooks.hits("/hook").len(), 1);
}
both_backends!(a_shell_failure_pages_once_after_its_last_attempt);

async fn a_group_losing_its_last_agent_raises_group_no_agent(mysql: bool) {
    let hooks = Receiver::start().await;
    // Manual clock, no workers: heartbeats carry the manual time, passes run by hand.
    let app = app_with(mysql, &[], Opts::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("alert-dying").await;
    let ch = channel(&app, json!({"name": "hook", "kind": "webhook", "format": "slack", "target": hooks.url("/slack")})).await;
    let watched = app
        .job_from(
            g,
            json!({"name": "watched", "handler": {"type": "shell", "command": "true"},
            "alert": {"on_no_agent": true, "channels": [ch]}}),
        )
        .await;
    let also = app
        .job_from(
            g,
            json!({"name": "also-watched", "handler": {"type": "shell", "command": "true"},
            "alert": {"on_no_agent": true, "channels": [ch]}}),
        )
        .await;
    app.job_from(
        g,
        json!({"name": "unwatched", "handler": {"type": "shell", "command": "true"},
        "alert": {"channels": [ch]}}),
    )
    .await;
    let view = app
        .get(&format!("/api/v1/jobs/{watched}"), &app.admin)
        .await
        .body;
    assert_eq!(view["alert"]["on_no_agent"], true, "{view}");

    // A group that never had an agent is not news.
    assert_eq!(monitors::watch_groups(&app.state).await.unwrap(), 0);
    let mut agent = AgentProc::start(&app.base, "alert-dying", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    assert_eq!(monitors::watch_groups(&app.state).await.unwrap(), 0);
    agent.kill9();
    app.clock.advance(31_000);
    assert_eq!(monitors::watch_groups(&app.state).await.unwrap(), 1);
    assert_eq!(
        monitors::watch_groups(&app.state).await.unwrap(),
        0,
        "raised once"
    );

    let raised = events(&app, "kind=group_no_agent").await;
    assert_eq!(raised.len(), 2, "one per watching job: {raised:?}");
    let by_job: HashMap<i64, &str> = raised
        .iter()
        .map(|e| (e["job_id"].as_i64().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(by_job[&watched], "pending");
    assert_eq!(
        by_job[&also], "suppressed",
        "one message per group and channel"
    );
    assert!(raised.iter().all(|e| e["group_id"].as_i64() == Some(g)));
    let done = jobfleet_admin::alert::deliver_due(&app.state)
        .await
        .unwrap();
    assert_eq!(done.sent, 1);
    let text = hooks.hits("/slack")[0].json()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("no live agent in group alert-dying"),
        "{text}"
    );
    assert!(
        text.contains("watched") && text.contains("also-watched"),
        "{text}"
    );
}
both_backends!(a_group_losing_its_last_agent_raises_group_no_agent);

async fn bad_input_and_roles_are_refused(app: &TestApp) {
    let g = app.group("alert-bad").await;
    let (_, viewer) = app.user("alert-viewer", "viewer", &[g]).await;
    let (_, operator) = app.user("alert-operator", "operator", &[g]).await;
    let ok = json!({"name": "ops", "kind": "webhook", "target": "https://hooks.example.com/T/B/secret-path", "secret": "abc"});
    let before = app.footprint().await;
    let cases: Vec<(&str, Value, StatusCode, &str, Option<&str>)> = vec![
        (
            "unknown kind",
            json!({"name": "x", "kind": "sms", "target": "x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("kind"),
        ),
        (
            "unknown format",
            json!({"name": "x", "kind": "webhook", "format": "teams", "target": "http://h/"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("format"),
        ),
        (
            "bad URL",
            json!({"name": "x", "kind": "webhook", "target": "not a url"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("target"),
        ),
        (
            "non-http URL",
            json!({"name": "x", "kind": "webhook", "target": "file:///etc/passwd"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("target"),
        ),
        (
            "empty recipients",
            json!({"name": "x", "kind": "email", "target": " , "}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("target"),
        ),
        (
            "malformed address",
            json!({"name": "x", "kind": "email", "target": "ops@example.com, nobody"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("target"),
        ),
        (
            "format on email",
            json!({"name": "x", "kind": "email", "format": "slack", "target": "a@b.example"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("format"),
        ),
        (
            "secret on slack",
            json!({"name": "x", "kind": "webhook", "format": "slack", "target": "http://h/", "secret": "s"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("secret"),
        ),
        (
            "secret on wecom (its key is in the URL)",
            json!({"name": "x", "kind": "webhook", "format": "wecom", "target": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k", "secret": "s"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("secret"),
        ),
        (
            "bad name",
            json!({"name": "<b>", "kind": "email", "target": "a@b.example"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            "unknown field",
            json!({"name": "x", "kind": "email", "target": "a@b.example", "colour": "red"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("colour"),
        ),
        (
            "missing field",
            json!({"name": "x", "kind": "email"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("target"),
        ),
    ];
    for (what, body, status, code, field) in &cases {
        let r = app
            .post("/api/v1/alert-channels", &app.admin, body.clone())
            .await;
        assert_eq!((r.status, r.code()), (*status, *code), "{what}: {}", r.body);
        assert_eq!(r.field(), *field, "{what}: {}", r.body);
    }
    let r = app
        .raw(
            "POST",
            "/api/v1/alert-channels",
            &app.admin,
            "application/json",
            "{\"name\":",
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    for token in [&viewer, &operator] {
        let r = app.post("/api/v1/alert-channels", token, ok.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::FORBIDDEN, "forbidden"),
            "{}",
            r.body
        );
    }
    assert_eq!(
        app.footprint().await,
        before,
        "refused requests write nothing"
    );

    let id = channel(app, ok.clone()).await;
    let dup = app
        .post("/api/v1/alert-channels", &app.admin, ok.clone())
        .await;
    assert_eq!(
        (dup.status, dup.field()),
        (StatusCode::CONFLICT, Some("name"))
    );
    let path = format!("/api/v1/alert-channels/{id}");
    for (token, role) in [(&viewer, "viewer"), (&operator, "operator")] {
        for (method, suffix) in [("PUT", ""), ("DELETE", ""), ("POST", "/test")] {
            let r = app
                .call(
                    method,
                    &format!("{path}{suffix}"),
                    Some(token),
                    Some(ok.clone()),
                )
                .await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{role} {method} {suffix}: {}",
                r.body
            );
        }
        let seen = app.get(&path, token).await;
        assert_eq!(seen.status, StatusCode::OK);
        assert_eq!(
            seen.body["target"], "https://hooks.example.com/…",
            "{role} sees the origin only"
        );
    }
    let full = app.get(&path, &app.admin).await.body;
    assert_eq!(
        (full["target"].as_str(), full["has_secret"].as_bool()),
        (
            Some("https://hooks.example.com/T/B/secret-path"),
            Some(true)
        )
    );
    for (what, body, field) in [
        (
            "bad URL",
            json!({"name": "ops", "kind": "webhook", "target": "ftp://x"}),
            "target",
        ),
        (
            "unknown field",
            json!({"name": "ops", "kind": "webhook", "target": "http://h/", "colour": 1}),
            "colour",
        ),
    ] {
        let r = app.call("PUT", &path, Some(&app.admin), Some(body)).await;
        assert_eq!(
            (r.status, r.field()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{what}: {}",
            r.body
        );
    }
    for (method, p) in [
        ("PUT", "/api/v1/alert-channels/9999"),
        ("DELETE", "/api/v1/alert-channels/9999"),
        ("POST", "/api/v1/alert-channels/9999/test"),
        ("GET", "/api/v1/alert-channels/9999"),
    ] {
        let r = app
            .call(method, p, Some(&app.admin), Some(ok.clone()))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {p}: {}",
            r.body
        );
    }
    // Leaving the secret out keeps it; "" clears it.
    let kept = app.call("PUT", &path, Some(&app.admin), Some(json!({"name": "ops", "kind": "webhook", "target": "https://hooks.example.com/new"}))).await;
    assert_eq!(
        (kept.status, kept.body["has_secret"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{}",
        kept.body
    );
    let cleared = app.call("PUT", &path, Some(&app.admin), Some(json!({"name": "ops", "kind": "webhook", "target": "https://hooks.example.com/new", "secret": ""}))).await;
    assert_eq!(cleared.body["has_secret"], false);

    for (query, field) in [
        ("status=bogus", "status"),
        ("kind=bogus", "kind"),
        ("limit=0", "limit"),
        ("colour=red", "colour"),
    ] {
        let r = app
            .get(&format!("/api/v1/alert-events?{query}"), &app.admin)
            .await;
        assert_eq!(
            (r.status, r.field()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(field)),
            "{query}: {}",
            r.body
        );
    }
    assert_eq!(
        app.get("/api/v1/alert-events", &viewer).await.status,
        StatusCode::OK
    );

    // Jobs name channels that exist, once each.
    let mut body = TestApp::job_body(g, "alerting");
    body["alert"] = json!({"channels": [id, 424242]});
    let r = app.post("/api/v1/jobs", &app.admin, body.clone()).await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("alert.channels")),
        "{}",
        r.body
    );
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("424242")
    );
    body["alert"] = json!({"channels": [id, id]});
    let r = app.post("/api/v1/jobs", &app.admin, body.clone()).await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("alert.channels"))
    );
    body["alert"] = json!({"channels": [id], "on_no_agent": true});
    let r = app.post("/api/v1/jobs", &app.admin, body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["alert"]["on_no_agent"], true);
    let job = r.body["id"].as_i64().unwrap();

    // A channel in use cannot go; once unused it can, and the change is audited.
    let r = app.call("DELETE", &path, Some(&app.admin), None).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "conflict"),
        "{}",
        r.body
    );
    body["alert"] = json!({"channels": []});
    assert_eq!(
        app.call(
            "PUT",
            &format!("/api/v1/jobs/{job}"),
            Some(&app.admin),
            Some(body)
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        app.call("DELETE", &path, Some(&app.admin), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );

    // Without SMTP an email channel can exist; its test says why it cannot send.
    let mail = channel(
        app,
        json!({"name": "mail", "kind": "email", "target": "a@b.example"}),
    )
    .await;
    let r = app
        .post(
            &format!("/api/v1/alert-channels/{mail}/test"),
            &app.admin,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.body["ok"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{}",
        r.body
    );
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("no SMTP server configured"),
        "{}",
        r.body
    );
    let recorded = events(app, "kind=test").await;
    assert_eq!(
        (recorded[0]["status"].as_str(), recorded[0]["id"].as_i64()),
        (Some("failed"), r.body["event_id"].as_i64())
    );
    let actions: Vec<String> = app
        .get(
            "/api/v1/audit?object_type=alert_channel&limit=50",
            &app.admin,
        )
        .await
        .body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap().to_owned())
        .collect();
    for action in [
        "alert_channel.create",
        "alert_channel.update",
        "alert_channel.delete",
        "alert_channel.test",
    ] {
        assert!(
            actions.iter().any(|a| a == action),
            "{action} not audited: {actions:?}"
        );
    }
    let audit = app
        .get(
            "/api/v1/audit?object_type=alert_channel&limit=50",
            &app.admin,
        )
        .await
        .body
        .to_string();
    assert!(
        !audit.contains("\"abc\""),
        "secrets stay out of the audit log"
    );
}
api_test!(bad_input_and_roles_are_refused);
