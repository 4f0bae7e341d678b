//! `TestApp`: a real admin on 127.0.0.1:0 over a fresh database, with ready-made actors.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::web;
use jobfleet_admin::clock::ManualClock;
use jobfleet_admin::config::{Config, Sources};
use jobfleet_admin::startup::{self, RunningServer};
use jobfleet_admin::state::AppState;
use jobfleet_admin::testing::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub mod admin_proc;
pub mod agent;
pub mod console;
pub mod proxy;
pub mod receiver;

pub use agent::{AgentProc, agent_binary, pid_alive};

pub const ADMIN_PASSWORD: &str = "admin-password-1";

/// Generates a sqlite test and, with `--features mysql`, a MariaDB test running `$name(app)`;
/// `api_test!(name, ENV)` starts the admin with the extra settings `ENV`.
macro_rules! api_test {
    ($name:ident) => {
        $crate::support::api_test!($name, &[]);
    };
    ($name:ident, $env:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::support::TestApp::start_with(
                    jobfleet_admin::testing::TestDb::sqlite(),
                    $env,
                )
                .await;
                super::$name(&app).await;
            }

            #[cfg(feature = "mysql")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                let app =
                    $crate::support::TestApp::start_with($crate::support::mysql_db().await, $env)
                        .await;
                super::$name(&app).await;
            }
        }
    };
}
pub(crate) use api_test;

/// `both_backends!(name)` runs `async fn name(mysql: bool)` as a SQLite test and, with
/// `--features mysql`, as a MariaDB test.
macro_rules! both_backends {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(false).await;
            }

            #[cfg(feature = "mysql")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                super::$name(true).await;
            }
        }
    };
}
pub(crate) use both_backends;

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub clock: ManualClock,
    pub state: web::Data<AppState>,
    pub admin: String,
    /// The scheduler's tasks, when started; dropping them stops firing.
    #[allow(dead_code, reason = "held for its Drop")]
    pub workers: Option<jobfleet_admin::worker::Workers>,
    /// Kept so the database outlives the server.
    _db: TestDb,
    server: RunningServer,
}

/// How a test admin runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opts {
    /// The real clock instead of the manual one (for real agents and the scheduler's timer).
    pub system_clock: bool,
    /// Start the scheduler loop, timer and monitors.
    pub scheduler: bool,
}

#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub body: Value,
}

impl Response {
    /// The error code of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error body: {} {}", self.status, self.body))
    }

    pub fn field(&self) -> Option<&str> {
        self.body["error"]["field"].as_str()
    }
}

#[cfg(feature = "mysql")]
pub async fn mysql_db() -> TestDb {
    tokio::task::spawn_blocking(TestDb::mysql).await.unwrap()
}

#[cfg(not(feature = "mysql"))]
pub async fn mysql_db() -> TestDb {
    unreachable!("MariaDB tests need --features mysql")
}

/// A fresh database: MariaDB when `mysql`, else SQLite.
pub async fn test_db(mysql: bool) -> TestDb {
    if mysql {
        mysql_db().await
    } else {
        TestDb::sqlite()
    }
}

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TestApp {
    pub async fn sqlite() -> Self {
        Self::start(TestDb::sqlite()).await
    }

    pub async fn start(db: TestDb) -> Self {
        Self::start_with(db, &[]).await
    }

    /// Starts with extra `JOBFLEET_*` settings (e.g. a short DB connect timeout).
    pub async fn start_with(db: TestDb, env: &[(&str, &str)]) -> Self {
        Self::start_opts(db, env, Opts::default()).await
    }

    /// A scheduling admin on the real clock, over SQLite or MariaDB by `mysql`.
    pub async fn scheduling(mysql: bool, env: &[(&str, &str)]) -> Self {
        Self::start_opts(
            test_db(mysql).await,
            env,
            Opts {
                system_clock: true,
                scheduler: true,
            },
        )
        .await
    }

    pub async fn start_opts(db: TestDb, env: &[(&str, &str)], opts: Opts) -> Self {
        install_crypto();
        let mut vars = vec![
            ("JOBFLEET_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
            ("JOBFLEET_DATABASE_URL".to_owned(), db.url_string()),
            (
                "JOBFLEET_JWT_SECRET".to_owned(),
                "test-secret-test-secret-test-secret-000".to_owned(),
            ),
            (
                "JOBFLEET_DB_CONNECT_TIMEOUT_MS".to_owned(),
                "2000".to_owned(),
            ),
            ("JOBFLEET_MAX_BODY_BYTES".to_owned(), "65536".to_owned()),
            (
                "JOBFLEET_ACCESS_TOKEN".to_owned(),
                "test-agent-token".to_owned(),
            ),
            // Agents of tests are approved as they enroll; the security suite turns it off.
            ("JOBFLEET_APPROVE_AGENTS".to_owned(), "auto".to_owned()),
        ];
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let config = Config::load(&Sources {
            env: vars,
            ..Default::default()
        })
        .unwrap();
        let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
        let shared: jobfleet_admin::clock::SharedClock = if opts.system_clock {
            Arc::new(jobfleet_admin::clock::SystemClock)
        } else {
            Arc::new(clock.clone())
        };
        let state = startup::prepare(config, shared, false).await.unwrap();
        startup::bootstrap(&state, Some(ADMIN_PASSWORD.into()))
            .await
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // With `JOBFLEET_TLS_*` in `env` the admin serves HTTPS, and the test client trusts
        // exactly its certificate (the healthcheck's client, which also presents it when
        // client certificates are required).
        let tls = state.config.tls.clone();
        let server_tls = tls
            .as_ref()
            .map(|tls| jobfleet_admin::tls::server(tls).unwrap().config);
        let server = startup::start(state.clone(), listener, server_tls).unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{}", server.addr);
        let mut client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(20));
        if let Some(tls) = &tls {
            client = client
                .tls_backend_preconfigured(jobfleet_admin::tls::healthcheck_client(tls).unwrap());
        }
        let client = client.build().unwrap();
        let workers = opts
            .scheduler
            .then(|| jobfleet_admin::scheduler::spawn_workers(&state).unwrap());
        let mut app = Self {
            base,
            client,
            clock,
            workers,
            state,
            admin: String::new(),
            _db: db,
            server,
        };
        app.admin = app.login("admin", ADMIN_PASSWORD).await;
        app
    }

    pub fn now_ms(&self) -> i64 {
        self.state.clock.now_ms()
    }

    /// Logs in over the API; panics unless it succeeds.
    pub async fn login(&self, username: &str, password: &str) -> String {
        let r = self.try_login(username, password).await;
        assert_eq!(r.status, StatusCode::OK, "login {username}: {}", r.body);
        r.body["token"].as_str().unwrap().to_owned()
    }

    /// A login attempt over the API, whatever it answers.
    pub async fn try_login(&self, username: &str, password: &str) -> Response {
        self.call(
            "POST",
            "/api/v1/auth/token",
            None,
            Some(json!({"username": username, "password": password})),
        )
        .await
    }

    /// Sends a request with an optional bearer and JSON body; returns status and JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Response {
        let mut request = self
            .client
            .request(method.parse().unwrap(), format!("{}{}", self.base, path));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        if let Some(b) = body {
            request = request.json(&b);
        }
        self.send(request).await
    }

    /// Sends a raw body with a content type.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        token: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        let request = self
            .client
            .request(method.parse().unwrap(), format!("{}{}", self.base, path))
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body);
        self.send(request).await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Response {
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Response { status, body }
    }

    pub async fn get(&self, path: &str, token: &str) -> Response {
        self.call("GET", path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Response {
        self.call("POST", path, Some(token), Some(body)).await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Response {
        self.call("DELETE", path, Some(token), None).await
    }

    /// The `/metrics` page (it needs no token).
    pub async fn metrics_text(&self) -> String {
        self.text("/metrics").await
    }

    /// The body of `GET path`, without a token, as text.
    pub async fn text(&self, path: &str) -> String {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Creates a group as admin and returns its id.
    pub async fn group(&self, app_name: &str) -> i64 {
        let r = self
            .post(
                "/api/v1/groups",
                &self.admin,
                json!({"app_name": app_name, "title": app_name}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["id"].as_i64().unwrap()
    }

    /// Creates a user with `role` and grants, logs in, returns (id, token).
    pub async fn user(&self, name: &str, role: &str, groups: &[i64]) -> (i64, String) {
        let password = format!("{name}-password");
        let r = self
            .post(
                "/api/v1/users",
                &self.admin,
                json!({"username": name, "password": password, "role": role, "groups": groups}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        (
            r.body["id"].as_i64().unwrap(),
            self.login(name, &password).await,
        )
    }

    /// A minimal valid shell job in `group_id`.
    pub fn job_body(group_id: i64, name: &str) -> Value {
        json!({
            "group_id": group_id, "name": name,
            "schedule": {"type": "cron", "expr": "0 0/5 * * * ?", "timezone": "UTC"},
            "handler": {"type": "shell", "command": "echo hello"}
        })
    }

    pub async fn job(&self, token: &str, group_id: i64, name: &str) -> i64 {
        let r = self
            .post("/api/v1/jobs", token, Self::job_body(group_id, name))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["id"].as_i64().unwrap()
    }

    /// How many audit rows and jobs exist: a rejected request must change neither.
    pub async fn footprint(&self) -> (i64, i64) {
        let audit = self.get("/api/v1/audit?limit=1", &self.admin).await.body["total"]
            .as_i64()
            .unwrap();
        let jobs = self.get("/api/v1/jobs?limit=1", &self.admin).await.body["total"]
            .as_i64()
            .unwrap();
        (audit, jobs)
    }
}

impl TestApp {
    /// Stops the HTTP server (the admin "goes down"); the database stays.
    pub async fn stop_server(&mut self) {
        // As `startup::serve` does: agents' connections close with the server.
        self.state.agents.links.close_all();
        self.server.handle.stop(true).await;
    }

    /// Serves again on the same address (plain HTTP).
    pub async fn restart_server(&mut self) {
        let listener = TcpListener::bind(self.server.addr).unwrap();
        self.server = startup::start(self.state.clone(), listener, None).unwrap();
    }

    /// Creates a job from `body` (group filled in) and returns its id.
    pub async fn job_from(&self, group_id: i64, mut body: Value) -> i64 {
        body["group_id"] = json!(group_id);
        if body.get("schedule").is_none() {
            body["schedule"] = json!({"type": "none"});
        }
        let r = self.post("/api/v1/jobs", &self.admin, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["id"].as_i64().unwrap()
    }

    /// Triggers a job; returns the run as the trigger left it.
    pub async fn trigger(&self, job_id: i64, body: Value) -> Value {
        let r = self
            .post(&format!("/api/v1/jobs/{job_id}/trigger"), &self.admin, body)
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body
    }

    /// Asks the admin to kill a run (as the admin user).
    pub async fn kill_run(&self, run_id: i64) -> Response {
        self.call(
            "POST",
            &format!("/api/v1/runs/{run_id}/kill"),
            Some(&self.admin),
            None,
        )
        .await
    }

    /// Every run of `job` (up to 200), oldest first.
    pub async fn runs_of(&self, job: i64) -> Vec<Value> {
        let r = self
            .get(&format!("/api/v1/runs?job_id={job}&limit=200"), &self.admin)
            .await;
        let mut items = r.body["items"].as_array().unwrap().clone();
        items.sort_by_key(|r| r["id"].as_i64());
        items
    }

    /// Waits (30 s at most) until `job` has `n` or more runs in `status`; returns them.
    pub async fn runs_reaching(&self, job: i64, status: &str, n: usize) -> Vec<Value> {
        wait_for(
            std::time::Duration::from_secs(30),
            &format!("{n} {status} runs of job {job}"),
            || async {
                let runs: Vec<Value> = self
                    .runs_of(job)
                    .await
                    .into_iter()
                    .filter(|r| r["status"] == status)
                    .collect();
                (runs.len() >= n).then_some(runs)
            },
        )
        .await
    }

    pub async fn run(&self, run_id: i64) -> Value {
        self.get(&format!("/api/v1/runs/{run_id}"), &self.admin)
            .await
            .body
    }

    /// Waits until the run has a final status and returns it.
    pub async fn finished_run(&self, run_id: i64, within: std::time::Duration) -> Value {
        wait_for(within, &format!("run {run_id} to finish"), || async {
            let run = self.run(run_id).await;
            let status = run["status"].as_str().unwrap_or_default().to_owned();
            (status != "pending" && status != "running").then_some(run)
        })
        .await
    }

    /// The whole log of a run, as the API pages it.
    pub async fn full_log(&self, run_id: i64) -> String {
        let mut content = String::new();
        let mut from = 1;
        loop {
            let page = self
                .get(
                    &format!("/api/v1/runs/{run_id}/log?from_line={from}"),
                    &self.admin,
                )
                .await;
            assert_eq!(page.status, StatusCode::OK, "{}", page.body);
            content.push_str(page.body["content"].as_str().unwrap());
            let to = page.body["to_line"].as_i64().unwrap();
            if page.body["is_end"].as_bool().unwrap() || to < from {
                return content;
            }
            from = to + 1;
        }
    }

    /// Waits until `address` is a live agent of the admin.
    pub async fn wait_for_agent(&self, address: &str) {
        wait_for(
            std::time::Duration::from_secs(20),
            &format!("agent {address} to register"),
            || async {
                let agents = self.get("/api/v1/agents", &self.admin).await.body;
                is_live_agent(&agents, address).then_some(())
            },
        )
        .await
    }
}

/// A SQLite admin (manual clock) with one live agent of a fresh group `app_name`; returns the
/// app, the agent's folder, the agent and the group id.
pub async fn with_agent(
    app_name: &str,
    agent_env: &[(&str, &str)],
) -> (TestApp, tempfile::TempDir, AgentProc, i64) {
    let app = TestApp::sqlite().await;
    let group = app.group(app_name).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start_with(&app.base, app_name, &dir.path().join("agent"), agent_env);
    app.wait_for_agent(&agent.address).await;
    (app, dir, agent, group)
}

/// A port free now, for a server a test starts later. Taken below the kernel's ephemeral range
/// (32768 and up here): a port the kernel handed out as free is also what it hands the next
/// outgoing connection, which took it from a test that binds it seconds later. Ports are tried
/// in turn from a random start, so tests of this process never get the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        1 + (std::process::id() % u32::from(SPAN)) as u16,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let port = FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A `kB` figure of `/proc/<pid>/status`, e.g. `VmRSS:`.
pub fn proc_status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
}

/// The address of simulated agent `i`: loopback, a port no one listens on.
pub fn simulated_address(i: usize) -> String {
    format!("http://127.0.0.1:{}/", 20_000 + i)
}

/// Heartbeats of simulated agents `which`, as a jobfleet agent sends them (its own key, host
/// `node-NNNN`, version `2.(i % 4)`, label `zone=z(i % 3)`), into the group `group_of(i)`,
/// sixteen at a time over the real registry endpoint.
pub async fn simulated_heartbeats(
    app: &TestApp,
    which: impl Iterator<Item = usize>,
    group_of: impl Fn(usize) -> &'static str,
) {
    let which: Vec<usize> = which.collect();
    for chunk in which.chunks(16) {
        futures_util::future::join_all(chunk.iter().map(|&i| {
            let group = group_of(i);
            async move {
                let answer = app
                    .client
                    .post(format!("{}/api/registry", app.base))
                    .header("XXL-JOB-ACCESS-TOKEN", "test-agent-token")
                    .header(
                        "X-Jobfleet-Agent-Key",
                        format!("simulated-agent-key-{i:08}-{}", "k".repeat(24)),
                    )
                    .json(&json!({
                        "registryGroup": "EXECUTOR",
                        "registryKey": group,
                        "registryValue": simulated_address(i),
                        "hostname": format!("node-{i:04}"),
                        "agentVersion": format!("2.{}", i % 4),
                        "limitsMode": "rlimit",
                        "mode": "push",
                        "labels": {"zone": format!("z{}", i % 3)},
                    }))
                    .send()
                    .await
                    .unwrap();
                let status = answer.status();
                let body: Value = answer.json().await.unwrap();
                assert!(
                    status.is_success() && body["code"] == 200,
                    "agent {i}: {status} {body}"
                );
            }
        }))
        .await;
    }
}

/// Whether the agents page `agents` (of `GET /api/v1/agents`) shows `address` live.
pub fn is_live_agent(agents: &Value, address: &str) -> bool {
    agents["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["address"] == address && a["live"] == true)
}

/// Polls `check` until it yields a value or `within` passes (then fails, naming `what`).
pub async fn wait_for<T, F, Fut>(within: std::time::Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        let handle = self.server.handle.clone();
        // Stopping is async; fire it and let the runtime wind the server down.
        drop(tokio::spawn(async move { handle.stop(false).await }));
    }
}

/// A pending run of `job` as an API trigger stores it, due at `scheduled_ms`, for tests that put
/// runs in the table directly (the timer's or a pull's input, without going through a trigger).
pub fn pending_api_run(
    job: i64,
    group: i64,
    scheduled_ms: i64,
    created_ms: i64,
) -> jobfleet_admin::db::job_run::NewJobRun {
    use jobfleet_admin::domain::ids::{GroupId, JobId};
    use jobfleet_admin::domain::policy::{RunStatus, TriggerKind};
    jobfleet_admin::db::job_run::NewJobRun {
        job_id: JobId(job),
        group_id: GroupId(group),
        first_run_id: None,
        attempt: 1,
        trigger_kind: TriggerKind::Api,
        fire_slot_ms: None,
        scheduled_ms,
        status: RunStatus::Pending,
        params: String::new(),
        shard_index: 0,
        shard_total: 1,
        created_ms,
        workflow_node_id: None,
        node_attempt: None,
        timeout_s: None,
        env: None,
    }
}
