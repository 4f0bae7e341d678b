//! Browser tests: Debian's headless Chromium, driven over WebDriver (chromedriver), against a
//! real admin (SQLite, real clock, scheduler running) and a real agent process on loopback.
//! One flow per test; each starts its own admin, agent, chromedriver and browser.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail by panicking"
)]

#[path = "../it/support/mod.rs"]
#[allow(
    dead_code,
    unused_macros,
    unused_imports,
    reason = "shared with the integration tests; each binary uses a part"
)]
mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::receiver::Receiver;
use support::{ADMIN_PASSWORD, AgentProc, TestApp, free_port, wait_for};
use thirtyfour::prelude::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver process, stopped on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start() -> Self {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: the browser tests need `apt-get install -y chromium chromium-driver` (.ci/run does it)"
            );
        }
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let status = format!("{url}/status");
        wait_for(Duration::from_secs(20), "chromedriver to listen", || {
            let status = status.clone();
            async move {
                reqwest::get(&status)
                    .await
                    .ok()
                    .filter(|r| r.status().is_success())
            }
        })
        .await;
        Driver { child, url }
    }

    async fn browser(&self, lang: &str) -> WebDriver {
        let mut caps = DesiredCapabilities::chrome();
        caps.set_binary(CHROMIUM).unwrap();
        for arg in [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
            "--window-size=1280,900",
        ] {
            caps.add_arg(arg).unwrap();
        }
        caps.add_arg(&format!("--lang={lang}")).unwrap();
        caps.add_experimental_option("prefs", json!({"intl.accept_languages": lang}))
            .unwrap();
        WebDriver::new(&self.url, caps)
            .await
            .expect("start a browser")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn login(browser: &WebDriver, base: &str, user: &str, password: &str) {
    browser.goto(format!("{base}/console")).await.unwrap();
    // Not logged in: the console sends us to the login form.
    browser.find(By::Id("login-form")).await.unwrap();
    browser
        .find(By::Id("username"))
        .await
        .unwrap()
        .send_keys(user)
        .await
        .unwrap();
    browser
        .find(By::Id("password"))
        .await
        .unwrap()
        .send_keys(password)
        .await
        .unwrap();
    browser
        .find(By::Id("login-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let who = browser.query(By::Id("whoami")).first().await.unwrap();
    assert!(who.text().await.unwrap().contains(user));
}

/// Waits until `script` (a JS expression) is truthy in the page.
async fn until(browser: &WebDriver, what: &str, script: &str, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let ok = browser
            .execute(format!("return !!({script});"), Vec::new())
            .await
            .map(|r| r.json().as_bool() == Some(true))
            .unwrap_or(false);
        if ok {
            return;
        }
        if std::time::Instant::now() > deadline {
            let body = browser.source().await.unwrap_or_default();
            panic!(
                "timed out waiting for {what}; page: {}",
                &body[..body.len().min(3000)]
            );
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Opens the new job form as `browser`'s user.
async fn new_job_form(browser: &WebDriver, base: &str) -> WebElement {
    browser
        .goto(format!("{base}/console/jobs/new"))
        .await
        .unwrap();
    browser.find(By::Id("job-form")).await.unwrap()
}

/// Types `text` into the input `id` of `form`.
async fn type_into(form: &WebElement, id: &str, text: &str) {
    form.find(By::Id(id))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
}

/// Picks `value` in the select `id` of `form`.
async fn choose(form: &WebElement, id: &str, value: &str) {
    form.find(By::Css(format!("#{id} option[value='{value}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Clicks `click` and returns the text of `read` once the page has it.
async fn click_then_text(browser: &WebDriver, click: &str, read: By) -> String {
    browser
        .find(By::Id(click))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .query(read)
        .first()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Saves the job form and returns the error shown beside `field`.
async fn save_refused(browser: &WebDriver, field: &str) -> String {
    let error = By::Css(format!("[data-field-error='{field}']"));
    click_then_text(browser, "job-save", error).await
}

/// On a job's page: triggers it and waits on the run's page until the run ends as `status`.
async fn trigger_and_wait(browser: &WebDriver, status: &str) {
    browser
        .find(By::Id("job-trigger"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.query(By::Id("run-status")).first().await.unwrap();
    until(
        browser,
        &format!("the run to end {status}"),
        &format!(
            "document.getElementById('run-status').getAttribute('data-status') === '{status}'"
        ),
        Duration::from_secs(30),
    )
    .await;
}

struct Setup {
    app: TestApp,
    group: i64,
    _agent: AgentProc,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let app = TestApp::scheduling(false, &[]).await;
    let group = app.group("browser-app").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "browser-app", dir.path());
    app.wait_for_agent(&agent.address).await;
    Setup {
        app,
        group,
        _agent: agent,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_creates_a_cron_job_triggers_it_and_watches_its_log() {
    let s = setup().await;
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &s.app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;

    let form = new_job_form(&browser, base).await;
    type_into(&form, "f-name", "nightly <b>report</b>").await;
    let cron = form.find(By::Id("f-cron")).await.unwrap();
    cron.clear().await.unwrap();
    cron.send_keys("0 0/5 * * * ?").await.unwrap();
    until(
        &browser,
        "five fire times",
        "document.querySelectorAll('#cron-next li').length === 5",
        Duration::from_secs(10),
    )
    .await;
    // A wrong expression shows why, as you type.
    cron.clear().await.unwrap();
    cron.send_keys("0 61 * * * ?").await.unwrap();
    until(
        &browser,
        "the cron error",
        "document.getElementById('cron-error').textContent.length > 0",
        Duration::from_secs(10),
    )
    .await;
    cron.clear().await.unwrap();
    cron.send_keys("0 0 3 * * ?").await.unwrap();
    until(
        &browser,
        "the preview again",
        "document.querySelectorAll('#cron-next li').length === 5",
        Duration::from_secs(10),
    )
    .await;
    let command = form.find(By::Id("f-command")).await.unwrap();
    command
        .send_keys("echo hello-from-the-browser; echo second line")
        .await
        .unwrap();
    // Names with markup are refused, and the form keeps what was typed.
    let error = save_refused(&browser, "name").await;
    assert!(error.contains("must not contain"), "{error}");
    let name = browser.find(By::Id("f-name")).await.unwrap();
    assert_eq!(
        name.value().await.unwrap().as_deref(),
        Some("nightly <b>report</b>")
    );
    name.clear().await.unwrap();
    name.send_keys("nightly report").await.unwrap();
    browser
        .find(By::Id("job-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    let title = browser.query(By::Id("job-name")).first().await.unwrap();
    assert!(title.text().await.unwrap().contains("nightly report"));
    assert!(browser.find(By::Id("flash")).await.is_ok());

    trigger_and_wait(&browser, "succeeded").await;
    until(
        &browser,
        "the log",
        "document.getElementById('run-log').textContent.includes('hello-from-the-browser')",
        Duration::from_secs(30),
    )
    .await;
    let log = browser
        .find(By::Id("run-log"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(log.contains("second line"), "{log}");

    // On a phone-sized window the navigation folds into a menu and nothing overflows sideways.
    browser.set_window_rect(0, 0, 390, 844).await.unwrap();
    for path in [
        "/console",
        "/console/jobs",
        "/console/jobs/new",
        "/console/runs",
    ] {
        browser.goto(format!("{base}{path}")).await.unwrap();
        until(
            &browser,
            "a page that fits a phone",
            "document.documentElement.scrollWidth <= window.innerWidth \
             && getComputedStyle(document.querySelector('.nav-burger')).display !== 'none' \
             && getComputedStyle(document.querySelector('nav.nav')).display === 'none'",
            Duration::from_secs(5),
        )
        .await;
    }
    browser.set_window_rect(0, 0, 1280, 900).await.unwrap();

    // The audit page shows what we did.
    browser.goto(format!("{base}/console/audit")).await.unwrap();
    let table = browser
        .find(By::Id("audit-table"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        table.contains("job.create") && table.contains("job.trigger"),
        "{table}"
    );
    browser.quit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_makes_an_http_job_and_reads_its_answer() {
    let s = setup().await;
    let receiver = Receiver::start().await;
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &s.app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;

    let form = new_job_form(&browser, base).await;
    type_into(&form, "f-name", "ping the hook").await;
    // No schedule: the form's default cron (every 5 minutes) would send a second request when
    // the test crosses such a minute, and the receiver counts one.
    choose(&form, "f-schedule-type", "none").await;
    choose(&form, "f-handler-type", "http").await;
    // Only the request's fields show for an http job.
    until(
        &browser,
        "the request's fields",
        "!document.getElementById('f-http-url').closest('label').hidden \
         && document.getElementById('f-command').closest('label').hidden",
        Duration::from_secs(5),
    )
    .await;
    choose(&form, "f-http-method", "POST").await;
    type_into(&form, "f-http-url", &receiver.url("/created")).await;
    type_into(&form, "f-http-headers", "X-From: the browser").await;
    type_into(&form, "f-http-body", "hello hook").await;
    let statuses = form.find(By::Id("f-http-statuses")).await.unwrap();
    statuses.clear().await.unwrap();
    statuses.send_keys("2xx").await.unwrap();
    // A wrong status list is shown beside its field, with everything else kept.
    let error = save_refused(&browser, "handler.expect_status").await;
    assert!(error.contains("not a status code"), "{error}");
    assert_eq!(
        browser
            .find(By::Id("f-http-headers"))
            .await
            .unwrap()
            .value()
            .await
            .unwrap()
            .as_deref(),
        Some("X-From: the browser")
    );
    let statuses = browser.find(By::Id("f-http-statuses")).await.unwrap();
    statuses.clear().await.unwrap();
    statuses.send_keys("200-299").await.unwrap();
    browser
        .find(By::Id("f-http-timeout-ms"))
        .await
        .unwrap()
        .send_keys("5000")
        .await
        .unwrap();
    let request = click_then_text(&browser, "job-save", By::Id("job-http")).await;
    assert!(
        request.contains(&format!("POST {}", receiver.url("/created")))
            && request.contains("X-From: the browser"),
        "{request}"
    );
    let timeout = browser.find(By::Id("job-http-timeout")).await.unwrap();
    assert_eq!(timeout.text().await.unwrap(), "5000");
    trigger_and_wait(&browser, "succeeded").await;
    until(
        &browser,
        "the answer in the log",
        "document.getElementById('run-log').textContent.includes('HTTP 201 Created')",
        Duration::from_secs(30),
    )
    .await;
    let hits = receiver.hits("/created");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].body, b"hello hook");
    assert_eq!(hits[0].headers["x-from"], "the browser");
    browser.quit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_edit_actions_and_a_forged_post_is_refused() {
    let s = setup().await;
    let job_id = s.app.job(&s.app.admin, s.group, "read-only job").await;
    let (_, _) = s.app.user("vera", "viewer", &[s.group]).await;
    let driver = Driver::start().await;
    let browser = driver.browser("zh-CN").await;
    let base = &s.app.base;
    login(&browser, base, "vera", "vera-password").await;

    // The browser asked for Chinese.
    let nav = browser
        .find(By::Css("nav.nav"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(nav.contains("任务管理"), "{nav}");

    browser
        .goto(format!("{base}/console/jobs/{job_id}"))
        .await
        .unwrap();
    browser.find(By::Id("job-name")).await.unwrap();
    for hidden in ["job-edit", "job-trigger", "job-delete", "job-disable"] {
        assert!(
            browser.find(By::Id(hidden)).await.is_err(),
            "{hidden} is shown to a viewer"
        );
    }
    browser.goto(format!("{base}/console/jobs")).await.unwrap();
    assert!(browser.find(By::Id("new-job")).await.is_err());

    // Forge the delete with the viewer's own valid session and CSRF token: still refused.
    let status = browser
        .execute_async(
            format!(
                "const done = arguments[arguments.length - 1];
                 const csrf = document.querySelector('input[name=csrf]').value;
                 fetch('/console/jobs/{job_id}/delete', {{method: 'POST', body: new URLSearchParams({{csrf}})}})
                   .then(r => done(r.status)).catch(e => done(String(e)));"
            ),
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(status.json(), &json!(403));
    let still = s
        .app
        .get(&format!("/api/v1/jobs/{job_id}"), &s.app.admin)
        .await;
    assert_eq!(
        still.status,
        reqwest::StatusCode::OK,
        "the job must survive"
    );
    browser.quit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_produces_an_alert_event() {
    let s = setup().await;
    let receiver = Receiver::start().await;
    let hook = receiver.url("/hook");
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &s.app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;

    // An admin adds a webhook channel through the console.
    browser
        .goto(format!("{base}/console/alerts/new"))
        .await
        .unwrap();
    browser
        .find(By::Id("f-channel-name"))
        .await
        .unwrap()
        .send_keys("on-call hook")
        .await
        .unwrap();
    browser
        .find(By::Id("f-target"))
        .await
        .unwrap()
        .send_keys(hook.as_str())
        .await
        .unwrap();
    let channels = click_then_text(&browser, "channel-save", By::Id("channels-table")).await;
    assert!(channels.contains("on-call hook"), "{channels}");
    let listed = s.app.get("/api/v1/alert-channels", &s.app.admin).await;
    let channel_id = listed.body.as_array().unwrap()[0]["id"].as_i64().unwrap();

    let job = s
        .app
        .job_from(
            s.group,
            json!({"name": "always fails", "schedule": {"type": "none"},
                   "handler": {"type": "shell", "command": "echo about to fail; exit 3"},
                   "alert": {"on_failure": true, "channels": [channel_id]}}),
        )
        .await;
    browser
        .goto(format!("{base}/console/jobs/{job}"))
        .await
        .unwrap();
    trigger_and_wait(&browser, "failed").await;

    // The failed run is retried from its page: the next attempt of its chain, failing again.
    let first_page = browser.current_url().await.unwrap().path().to_owned();
    browser
        .find(By::Id("run-retry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &browser,
        "the retry's page",
        &format!(
            "location.pathname !== '{first_page}' && document.getElementById('run-status') !== null"
        ),
        Duration::from_secs(30),
    )
    .await;
    until(
        &browser,
        "the retry to end failed",
        "document.getElementById('run-status').getAttribute('data-status') === 'failed'",
        Duration::from_secs(30),
    )
    .await;
    let runs = s.app.runs_of(job).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        (
            runs[1]["attempt"].as_i64(),
            runs[1]["first_run_id"].as_i64()
        ),
        (Some(2), runs[0]["id"].as_i64())
    );

    // The alert event shows on the alerts page with its delivery result.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        browser
            .goto(format!("{base}/console/alerts?kind=run_failed"))
            .await
            .unwrap();
        let rows = browser
            .find_all(By::Css("tr.event-row[data-status='sent']"))
            .await
            .unwrap();
        if !rows.is_empty() {
            let text = rows[0].text().await.unwrap();
            assert!(text.contains("always fails"), "{text}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no sent run_failed event"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!receiver.hits("/hook").is_empty(), "the webhook was called");
    browser.quit().await.unwrap();
}

/// Whether the only agent is drained, as the API says.
async fn agent_drained(app: &TestApp) -> bool {
    app.get("/api/v1/agents", &app.admin).await.body["items"][0]["drained_ms"].is_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_drains_an_agent_and_a_job_requires_labels() {
    let s = setup().await;
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &s.app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;

    // Drain from the Agents page: the badge shows and routing's view agrees; Undrain undoes it.
    browser
        .goto(format!("{base}/console/agents"))
        .await
        .unwrap();
    browser
        .find(By::Css("button.agent-drain"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let badge = browser
        .query(By::Css(".agent-drained"))
        .first()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(badge.contains("drained since"), "{badge}");
    assert!(agent_drained(&s.app).await);
    browser
        .find(By::Css("button.agent-undrain"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .query(By::Css("button.agent-drain"))
        .first()
        .await
        .unwrap();
    assert!(!agent_drained(&s.app).await);

    // A job's required labels: a bad one is refused beside its field, a good one is kept.
    let form = new_job_form(&browser, base).await;
    type_into(&form, "f-name", "labelled").await;
    choose(&form, "f-schedule-type", "none").await;
    type_into(&form, "f-command", "true").await;
    type_into(&form, "f-agent-labels", "zone=a b").await;
    let error = save_refused(&browser, "agent_labels").await;
    assert!(error.contains("the value `a b`"), "{error}");
    let labels = browser.find(By::Id("f-agent-labels")).await.unwrap();
    labels.clear().await.unwrap();
    labels.send_keys("zone=a, gpu=true").await.unwrap();
    browser
        .find(By::Id("job-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.query(By::Id("job-name")).first().await.unwrap();
    let shown = browser
        .find(By::Id("job-agent-labels"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(shown, "gpu=true,zone=a");
    let jobs = s
        .app
        .get("/api/v1/jobs?q=labelled", &s.app.admin)
        .await
        .body;
    assert_eq!(
        jobs["items"][0]["agent_labels"],
        json!({"gpu": "true", "zone": "a"}),
        "{jobs}"
    );
    browser.quit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_draws_a_workflow_runs_it_and_opens_a_nodes_log() {
    let s = setup().await;
    let first = s
        .app
        .job_from(
            s.group,
            json!({"name": "wf first", "handler": {"type": "shell", "command": "echo first-node-log"}}),
        )
        .await;
    let second = s
        .app
        .job_from(
            s.group,
            json!({"name": "wf second", "handler": {"type": "shell", "command": "sleep 1; echo second-node-log"}}),
        )
        .await;
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &s.app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;

    browser
        .goto(format!("{base}/console/workflows"))
        .await
        .unwrap();
    browser
        .find(By::Id("new-workflow"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let form = browser.find(By::Id("workflow-form")).await.unwrap();
    form.find(By::Id("f-name"))
        .await
        .unwrap()
        .send_keys("browser flow")
        .await
        .unwrap();
    let text = form.find(By::Id("f-definition")).await.unwrap();
    text.clear().await.unwrap();
    // A cycle first: the check names it as you type.
    text.send_keys(format!(
        "nodes:\n- key: first\n  job_id: {first}\n- key: second\n  job_id: {second}\nedges:\n- from: first\n  to: second\n- from: second\n  to: first\n"
    ))
    .await
    .unwrap();
    until(
        &browser,
        "the cycle to be named",
        "[...document.querySelectorAll('[data-live-error]')].some(e => e.textContent.includes('cycle'))",
        Duration::from_secs(10),
    )
    .await;
    text.clear().await.unwrap();
    text.send_keys(format!(
        "nodes:\n- key: first\n  job_id: {first}\n- key: second\n  job_id: {second}\nedges:\n- from: first\n  to: second\n"
    ))
    .await
    .unwrap();
    until(
        &browser,
        "the definition to check out and its graph to be drawn",
        "document.getElementById('definition-state').classList.contains('ok') \
         && document.querySelectorAll('#dag-preview svg .dag-node').length === 2 \
         && document.querySelectorAll('[data-live-error]').length === 0",
        Duration::from_secs(10),
    )
    .await;
    form.find(By::Id("workflow-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let title = browser
        .query(By::Id("workflow-name"))
        .first()
        .await
        .unwrap();
    assert!(title.text().await.unwrap().contains("browser flow"));

    browser
        .find(By::Id("workflow-trigger"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.query(By::Id("wfrun-graph")).first().await.unwrap();
    // The page was drawn while the run was in flight: the graph colours in without a click.
    until(
        &browser,
        "both nodes to succeed",
        "document.querySelectorAll('#wfrun-graph .dag-node[data-status=succeeded]').length === 2 \
         && document.getElementById('wfrun-status').getAttribute('data-status') === 'succeeded'",
        Duration::from_secs(60),
    )
    .await;
    let fill = browser
        .execute(
            "return getComputedStyle(document.querySelector('#wfrun-graph .dag-node[data-key=second] rect')).fill;",
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        fill.json(),
        &json!("rgb(230, 244, 234)"),
        "succeeded nodes are green"
    );

    browser
        .query(By::Css("#wfrun-graph a.dag-node[data-key='second']"))
        .first()
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &browser,
        "the node's log",
        "document.getElementById('run-log') \
         && document.getElementById('run-log').textContent.includes('second-node-log')",
        Duration::from_secs(30),
    )
    .await;
    browser.quit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_filter_the_job_list_and_ticked_jobs_are_disabled_at_once() {
    let s = setup().await;
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &s.app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;
    let tagged = |name: &str, tags: Value| {
        let mut body = TestApp::job_body(s.group, name);
        body["tags"] = tags;
        body
    };
    for (name, tags) in [
        ("tagged-1", json!(["nightly"])),
        ("tagged-2", json!(["nightly", "etl"])),
        ("plain", json!([])),
    ] {
        let r = s
            .app
            .post("/api/v1/jobs", &s.app.admin, tagged(name, tags))
            .await;
        assert_eq!(r.status, reqwest::StatusCode::CREATED, "{}", r.body);
    }

    // The form: a bad tag is refused beside its field; tags, a starting deadline and a history
    // limit are kept and shown.
    let form = new_job_form(&browser, base).await;
    type_into(&form, "f-name", "from-form").await;
    choose(&form, "f-schedule-type", "none").await;
    type_into(&form, "f-command", "true").await;
    type_into(&form, "f-tags", "nightly, bad tag!").await;
    let error = save_refused(&browser, "tags").await;
    assert!(error.contains("must not contain"), "{error}");
    let tags = browser.find(By::Id("f-tags")).await.unwrap();
    tags.clear().await.unwrap();
    tags.send_keys("nightly billing").await.unwrap();
    type_into(
        &browser.find(By::Id("job-form")).await.unwrap(),
        "f-start-deadline",
        "90",
    )
    .await;
    type_into(
        &browser.find(By::Id("job-form")).await.unwrap(),
        "f-keep-succeeded",
        "5",
    )
    .await;
    browser
        .find(By::Id("job-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let shown = browser
        .query(By::Id("job-tags"))
        .first()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        shown.split_whitespace().collect::<Vec<_>>(),
        ["billing", "nightly"]
    );
    let deadline = browser.find(By::Id("job-start-deadline")).await.unwrap();
    assert_eq!(deadline.text().await.unwrap(), "90");
    let kept = browser.find(By::Id("job-keep-succeeded")).await.unwrap();
    assert_eq!(kept.text().await.unwrap(), "5");

    // A tag on the job page leads to the list of the jobs carrying it.
    browser
        .find(By::Css("#job-tags a[href='/console/jobs?tag=nightly']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.query(By::Css("tr.job-row")).first().await.unwrap();
    let rows = browser.find_all(By::Css("tr.job-row")).await.unwrap();
    let mut names = Vec::new();
    for row in &rows {
        names.push(
            row.find(By::Css("td a"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    names.sort();
    assert_eq!(names, ["from-form", "tagged-1", "tagged-2"]);

    // Tick them all with the page's box, disable: one flash, three jobs disabled, the untagged
    // one untouched, and the list keeps its filter.
    browser
        .find(By::Id("bulk-all"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    choose(
        &browser.find(By::Id("bulk-form")).await.unwrap(),
        "bulk-action",
        "disable",
    )
    .await;
    let flash = click_then_text(&browser, "bulk-submit", By::Id("flash")).await;
    assert!(flash.contains("Jobs done: 3/3"), "{flash}");
    assert!(
        browser
            .current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("/console/jobs?tag=nightly")
    );
    let jobs = s.app.get("/api/v1/jobs", &s.app.admin).await.body;
    for job in jobs["items"].as_array().unwrap() {
        let tagged = job["tags"].as_array().unwrap().contains(&json!("nightly"));
        assert_eq!(job["enabled"], !tagged, "{job}");
    }
    browser.quit().await.unwrap();
}

/// Reports: the default week, then a chosen day and group; the stacked chart, the per-job table
/// and the CSV link follow the filters, and a backwards range is refused on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_narrows_the_report_and_downloads_its_csv() {
    use jobfleet_admin::db::job_run::{self, NewJobRun};
    use jobfleet_admin::domain::ids::{GroupId, JobId};
    use jobfleet_admin::domain::policy::{RunStatus, TriggerKind};
    const DAY_MS: i64 = 86_400_000;
    // A manual clock (at the real time): the report monitor is run by hand below.
    let app = TestApp::sqlite().await;
    let (mine, other) = (
        app.group("report-web").await,
        app.group("report-other").await,
    );
    let (loader, elsewhere) = (
        app.job(&app.admin, mine, "nightly-load").await,
        app.job(&app.admin, other, "other-job").await,
    );
    let now = app.now_ms();
    let today = now - now.rem_euclid(DAY_MS);
    let day = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%d")
            .to_string()
    };
    let (yesterday, today_text) = (day(today - DAY_MS), day(today));
    // Yesterday: the loader succeeded twice and failed once; today: once each job.
    let runs = [
        (loader, mine, today - DAY_MS, RunStatus::Succeeded, 100),
        (loader, mine, today - DAY_MS, RunStatus::Succeeded, 200),
        (loader, mine, today - DAY_MS, RunStatus::Failed, 50),
        (loader, mine, today, RunStatus::Succeeded, 300),
        (elsewhere, other, today, RunStatus::Failed, 10),
    ];
    app.state
        .db
        .run(move |conn| {
            for (job, group, created, status, took) in runs {
                let id = job_run::insert(
                    conn,
                    &NewJobRun {
                        job_id: JobId(job),
                        group_id: GroupId(group),
                        first_run_id: None,
                        attempt: 1,
                        trigger_kind: TriggerKind::Manual,
                        fire_slot_ms: None,
                        scheduled_ms: created,
                        status: RunStatus::Running,
                        params: String::new(),
                        shard_index: 0,
                        shard_total: 1,
                        created_ms: created,
                        workflow_node_id: None,
                        node_attempt: None,
                        timeout_s: None,
                        env: None,
                    },
                )?;
                job_run::record_result(
                    conn,
                    id,
                    &jobfleet_admin::testing::run_result(
                        status,
                        Some(created + 10),
                        Some(created + 10 + took),
                    ),
                )?;
            }
            Ok(())
        })
        .await
        .unwrap();
    jobfleet_admin::scheduler::monitors::report(&app.state)
        .await
        .unwrap();

    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;
    browser
        .find(By::Id("nav-reports"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.query(By::Id("report-chart")).first().await.unwrap();
    // The default: seven days ending today, one bar each; today's bar holds both jobs' runs.
    let bars = browser
        .find_all(By::Css("#report-chart g.day"))
        .await
        .unwrap();
    assert_eq!(bars.len(), 7);
    let today_bar = browser
        .find(By::Css(format!(
            "#report-chart g.day[data-day='{today_text}']"
        )))
        .await
        .unwrap();
    assert_eq!(
        today_bar.attr("data-runs").await.unwrap().as_deref(),
        Some("2")
    );
    assert_eq!(
        browser
            .find_all(By::Css("tr.job-report-row"))
            .await
            .unwrap()
            .len(),
        2
    );

    // Narrow it to yesterday and the loader's group.
    async fn set_day(browser: &WebDriver, id: &str, value: &str) {
        browser
            .execute(
                format!("document.getElementById('{id}').value = '{value}';"),
                Vec::new(),
            )
            .await
            .unwrap();
    }
    set_day(&browser, "report-from", &yesterday).await;
    set_day(&browser, "report-to", &yesterday).await;
    let form = browser.find(By::Id("report-filters")).await.unwrap();
    choose(&form, "report-group", &mine.to_string()).await;
    browser
        .find(By::Id("report-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &browser,
        "the narrowed report",
        "document.querySelectorAll('#report-chart g.day').length === 1",
        Duration::from_secs(10),
    )
    .await;
    // One stacked bar of three runs: two succeeded under one failed.
    let bar = browser.find(By::Css("#report-chart g.day")).await.unwrap();
    assert_eq!(bar.attr("data-day").await.unwrap(), Some(yesterday.clone()));
    assert_eq!(bar.attr("data-runs").await.unwrap().as_deref(), Some("3"));
    let ok = bar.find(By::Css("rect.seg-succeeded")).await.unwrap();
    assert_eq!(ok.attr("data-count").await.unwrap().as_deref(), Some("2"));
    let bad = bar.find(By::Css("rect.seg-failed")).await.unwrap();
    assert_eq!(bad.attr("data-count").await.unwrap().as_deref(), Some("1"));
    let rows = browser
        .find_all(By::Css("tr.job-report-row"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let row = rows[0].text().await.unwrap();
    assert!(
        row.contains("nightly-load") && row.contains("66.7%"),
        "{row}"
    );
    let failing = browser.find(By::Css("tr.failing-row")).await.unwrap();
    assert!(failing.text().await.unwrap().contains("nightly-load"));

    // The CSV link keeps the range and the group, and answers the same table.
    let link = browser.find(By::Id("report-csv")).await.unwrap();
    let href = link.attr("href").await.unwrap().unwrap();
    assert_eq!(
        href,
        format!("/console/reports/csv?from={yesterday}&to={yesterday}&group_id={mine}")
    );
    let csv = browser
        .execute(
            "var x = new XMLHttpRequest(); x.open('GET', arguments[0], false); x.send(); \
             return x.status + '\\n' + x.responseText;",
            vec![json!(href)],
        )
        .await
        .unwrap();
    let csv = csv.json().as_str().unwrap().to_owned();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "200");
    assert!(lines[1].starts_with("job_id,job_name,"), "{csv}");
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(
        lines[2].starts_with(&format!("{loader},nightly-load,{mine},report-web,3,2,1,")),
        "{csv}"
    );

    // A range that ends before it starts is refused on the page, the input kept.
    set_day(&browser, "report-from", &today_text).await;
    browser
        .find(By::Id("report-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let error = browser.query(By::Id("filter-error")).first().await.unwrap();
    assert!(error.text().await.unwrap().contains("is after `to`"));
    let from = browser.find(By::Id("report-from")).await.unwrap();
    assert_eq!(from.prop("value").await.unwrap(), Some(today_text.clone()));
    assert!(
        browser
            .find_all(By::Id("report-chart"))
            .await
            .unwrap()
            .is_empty()
    );
    browser.quit().await.unwrap();
}

/// Two thousand agents: the Agents page shows fifty and a pager, its filters narrow the list in
/// the browser and keep themselves across pages, and the Fleet page names the one that went
/// silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_agents_page_by_fifty_and_the_filters_find_the_silent_one() {
    use support::{simulated_address, simulated_heartbeats};
    // A manual clock at the real time: the agents are made silent by moving it.
    let app = TestApp::sqlite().await;
    app.group("fleet-web").await;
    simulated_heartbeats(&app, 0..2_000, |_| "fleet-web").await;
    app.clock.advance(20_000);
    simulated_heartbeats(&app, (0..2_000).filter(|i| *i != 5), |_| "fleet-web").await;
    app.clock.advance(15_000);
    let driver = Driver::start().await;
    let browser = driver.browser("en-US").await;
    let base = &app.base;
    login(&browser, base, "admin", ADMIN_PASSWORD).await;

    browser
        .goto(format!("{base}/console/agents"))
        .await
        .unwrap();
    let rows = browser.find_all(By::Css("tr.agent-row")).await.unwrap();
    assert_eq!(rows.len(), 50);
    let source = browser.source().await.unwrap();
    assert!(source.len() < 150_000, "{} bytes", source.len());
    let pager = browser
        .find(By::Css("nav.pager"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(pager.contains("1–50 / 2000"), "{pager}");

    // Status: dead finds the silent one among two thousand.
    let form = browser.find(By::Id("agent-filters")).await.unwrap();
    choose(&form, "agents-status", "dead").await;
    form.find(By::Id("agents-filter"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &browser,
        "the dead agent alone",
        "document.querySelectorAll('tr.agent-row').length === 1",
        Duration::from_secs(10),
    )
    .await;
    let row = browser
        .find(By::Css("tr.agent-row"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(row.contains(&simulated_address(5)), "{row}");

    // A search and a label: a hundred hosts node-19xx, a third of them in zone z1; the second
    // page keeps both filters.
    browser
        .goto(format!("{base}/console/agents"))
        .await
        .unwrap();
    let form = browser.find(By::Id("agent-filters")).await.unwrap();
    type_into(&form, "agents-q", "node-19").await;
    form.find(By::Id("agents-filter"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &browser,
        "the hosts named node-19…",
        "document.querySelector('nav.pager') && document.querySelector('nav.pager').textContent.includes('/ 100')",
        Duration::from_secs(10),
    )
    .await;
    browser
        .find(By::Id("page-next"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &browser,
        "the second page of node-19…",
        "document.querySelector('nav.pager').textContent.includes('51–100 / 100')",
        Duration::from_secs(10),
    )
    .await;
    let url = browser.current_url().await.unwrap();
    assert!(url.as_str().contains("q=node-19"), "{url}");
    let form = browser.find(By::Id("agent-filters")).await.unwrap();
    let label = form.find(By::Id("agents-label")).await.unwrap();
    label.send_keys("zone=z1").await.unwrap();
    form.find(By::Id("agents-filter"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let in_z1 = (1900..2000).filter(|i| i % 3 == 1).count();
    until(
        &browser,
        "node-19… in zone z1",
        &format!("document.querySelector('nav.pager') && document.querySelector('nav.pager').textContent.includes('/ {in_z1}')"),
        Duration::from_secs(10),
    )
    .await;
    let hosts: Vec<String> = {
        let mut hosts = Vec::new();
        for row in browser.find_all(By::Css("tr.agent-row")).await.unwrap() {
            hosts.push(row.text().await.unwrap());
        }
        hosts
    };
    assert!(
        hosts
            .iter()
            .all(|h| h.contains("node-19") && h.contains("zone=z1")),
        "{hosts:?}"
    );

    // The fleet page: the counts, and the agent that died.
    browser.goto(format!("{base}/console/fleet")).await.unwrap();
    let dead = browser
        .find(By::Id("fleet-dead"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(dead, "1");
    let live = browser
        .find(By::Id("fleet-live"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(live, "1999");
    let died = browser
        .find(By::Css("tr.fleet-died-row"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(died.contains(&simulated_address(5)), "{died}");
    browser.quit().await.unwrap();
}
