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

pub const ADMIN_PASSWORD: &str = "admin-password-1";

/// Generates a sqlite test and, with `--features mysql`, a MariaDB test running `$body(app)`.
macro_rules! api_test {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::support::TestApp::sqlite().await;
                super::$name(&app).await;
            }

            #[cfg(feature = "mysql")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                let app = $crate::support::TestApp::mysql().await;
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

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TestApp {
    pub async fn sqlite() -> Self {
        Self::start(TestDb::sqlite()).await
    }

    #[cfg(feature = "mysql")]
    pub async fn mysql() -> Self {
        Self::start(mysql_db().await).await
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
        let db = if mysql {
            mysql_db().await
        } else {
            TestDb::sqlite()
        };
        Self::start_opts(
            db,
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
        let server = startup::start(state.clone(), listener).unwrap();
        let base = format!("http://{}", server.addr);
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(20))
            .build()
            .unwrap();
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

    pub async fn login(&self, username: &str, password: &str) -> String {
        let r = self
            .call(
                "POST",
                "/api/v1/auth/token",
                None,
                Some(json!({"username": username, "password": password})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "login {username}: {}", r.body);
        r.body["token"].as_str().unwrap().to_owned()
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

    /// Serves again on the same address.
    pub async fn restart_server(&mut self) {
        let listener = TcpListener::bind(self.server.addr).unwrap();
        self.server = startup::start(self.state.clone(), listener).unwrap();
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
                agents
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["address"] == address && a["live"] == true)
                    .then_some(())
            },
        )
        .await
    }
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

/// A real `jobfleet-agent` process on loopback.
pub struct AgentProc {
    child: Option<std::process::Child>,
    pub port: u16,
    pub address: String,
    pub data_dir: std::path::PathBuf,
    admins: String,
    group: String,
    extra_env: Vec<(String, String)>,
}

/// The agent binary next to this test binary; `cargo build --workspace --bins` puts it there.
pub fn agent_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(std::path::Path::parent).unwrap();
    let bin = dir.join("jobfleet-agent");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests",
        bin.display()
    );
    bin
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl AgentProc {
    pub fn start(admins: &str, group: &str, data_dir: &std::path::Path) -> Self {
        Self::start_with(admins, group, data_dir, &[])
    }

    /// Starts with extra `JOBFLEET_AGENT_*` settings.
    pub fn start_with(
        admins: &str,
        group: &str,
        data_dir: &std::path::Path,
        extra: &[(&str, &str)],
    ) -> Self {
        let port = free_port();
        let mut agent = Self {
            child: None,
            port,
            address: format!("http://127.0.0.1:{port}/"),
            data_dir: data_dir.to_owned(),
            admins: admins.to_owned(),
            group: group.to_owned(),
            extra_env: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let child = std::process::Command::new(agent_binary())
            .arg("--allow-root")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("JOBFLEET_AGENT_ADMINS", &self.admins)
            .env("JOBFLEET_AGENT_GROUP", &self.group)
            .env("JOBFLEET_AGENT_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("JOBFLEET_AGENT_TOKEN", "test-agent-token")
            .env("JOBFLEET_AGENT_DATA_DIR", &self.data_dir)
            .env("JOBFLEET_AGENT_HEARTBEAT_INTERVAL_S", "1")
            .env("JOBFLEET_AGENT_KILL_GRACE_MS", "500")
            .env("JOBFLEET_AGENT_SHUTDOWN_GRACE_S", "10")
            .env("RUST_LOG", "warn")
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Starts the agent again with the same port and data folder.
    pub fn restart(&mut self) {
        self.spawn();
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM and wait for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = nix_pid(child.id());
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        child.wait().unwrap()
    }

    /// The agent process's pid (for reading its /proc figures).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Results durably spooled: whole `.json` files, not a `.tmp` still being written (which a
    /// kill -9 leaves half-done and the agent's restart rightly discards).
    pub fn spool_files(&self) -> usize {
        std::fs::read_dir(self.data_dir.join("spool")).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
    }
}

fn nix_pid(pid: u32) -> String {
    pid.to_string()
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        let handle = self.server.handle.clone();
        // Stopping is async; fire it and let the runtime wind the server down.
        drop(tokio::spawn(async move { handle.stop(false).await }));
    }
}

/// A TCP proxy that can cut every connection and refuse new ones, to simulate a database outage.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub mod proxy {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use std::sync::Mutex;

    use tokio::net::{TcpListener, TcpStream};
    use tokio::task::JoinHandle;

    pub struct Proxy {
        port: u16,
        down: Arc<AtomicBool>,
        connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
        accept: JoinHandle<()>,
    }

    /// A fresh MariaDB test database reached through a proxy; returns the database (keep it),
    /// the proxy and the `JOBFLEET_DATABASE_URL` that goes through it.
    pub async fn mariadb() -> (jobfleet_admin::testing::TestDb, Proxy, String) {
        let db = super::mysql_db().await;
        let parsed = url::Url::parse(&db.url_string()).unwrap();
        let target = format!(
            "{}:{}",
            parsed.host_str().unwrap(),
            parsed.port().unwrap_or(3306)
        );
        let proxy = Proxy::start(&target).await;
        let mut via_proxy = parsed;
        via_proxy.set_port(Some(proxy.port())).unwrap();
        (db, proxy, via_proxy.to_string())
    }

    impl Proxy {
        pub async fn start(target: &str) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let down = Arc::new(AtomicBool::new(false));
            let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
            let (down2, conns2, target) = (down.clone(), connections.clone(), target.to_owned());
            let accept = tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if down2.load(Ordering::SeqCst) {
                        continue; // dropping the socket refuses the client
                    }
                    let target = target.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(&target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    conns2.lock().unwrap().push(task);
                }
            });
            Self {
                port,
                down,
                connections,
                accept,
            }
        }

        pub fn port(&self) -> u16 {
            self.port
        }

        /// Severs every open connection and refuses new ones.
        pub fn cut(&self) {
            self.down.store(true, Ordering::SeqCst);
            for task in self.connections.lock().unwrap().drain(..) {
                task.abort();
            }
        }

        pub fn restore(&self) {
            self.down.store(false, Ordering::SeqCst);
        }
    }

    impl Drop for Proxy {
        fn drop(&mut self) {
            self.accept.abort();
        }
    }
}
