//! `TestApp`: a real admin on 127.0.0.1:0 over a fresh database, with ready-made actors.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::web;
use jobfleet_admin::clock::{Clock, ManualClock};
use jobfleet_admin::config::{Config, Sources};
use jobfleet_admin::startup::{self, AppState, RunningServer};
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

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub clock: ManualClock,
    pub state: web::Data<AppState>,
    pub admin: String,
    /// Kept so the database outlives the server.
    _db: TestDb,
    server: RunningServer,
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

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TestApp {
    pub async fn sqlite() -> Self {
        Self::start(TestDb::sqlite()).await
    }

    #[cfg(feature = "mysql")]
    pub async fn mysql() -> Self {
        Self::start(tokio::task::spawn_blocking(TestDb::mysql).await.unwrap()).await
    }

    pub async fn start(db: TestDb) -> Self {
        Self::start_with(db, &[]).await
    }

    /// Starts with extra `JOBFLEET_*` settings (e.g. a short DB connect timeout).
    pub async fn start_with(db: TestDb, env: &[(&str, &str)]) -> Self {
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
        ];
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let config = Config::load(&Sources {
            env: vars,
            ..Default::default()
        })
        .unwrap();
        let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
        let state = startup::prepare(config, Arc::new(clock.clone()), false)
            .await
            .unwrap();
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
        let mut app = Self {
            base,
            client,
            clock,
            state,
            admin: String::new(),
            _db: db,
            server,
        };
        app.admin = app.login("admin", ADMIN_PASSWORD).await;
        app
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
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

    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Mutex;
    use tokio::task::JoinHandle;

    pub struct Proxy {
        port: u16,
        down: Arc<AtomicBool>,
        connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
        accept: JoinHandle<()>,
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
                    conns2.lock().await.push(task);
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
            let connections = self.connections.clone();
            futures_util::FutureExt::now_or_never(async move {
                for task in connections.lock().await.drain(..) {
                    task.abort();
                }
            });
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
