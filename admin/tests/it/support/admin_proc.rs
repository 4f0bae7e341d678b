//! The real `jobfleet-admin` binary as a child process: for what only a process shows (kill -9,
//! several admins on one database, resident memory, the command line).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{ADMIN_PASSWORD, free_port, install_crypto, is_live_agent, wait_for};

/// The admin binary with none of this environment's `JOBFLEET_*` settings, logging warnings.
pub fn admin_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobfleet-admin"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("JOBFLEET_")) {
        cmd.env_remove(key);
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// A client for admin processes (20 s per request), with the TLS provider installed.
#[cfg_attr(
    not(feature = "mysql"),
    allow(dead_code, reason = "the several-admin tests run on MariaDB only")
)]
pub fn http_client() -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// `jobfleet-admin serve` on a loopback port, killed on drop.
pub struct AdminProc {
    child: Child,
    pub base: String,
    /// The folder of its SQLite file, when it has one of its own.
    _dir: Option<tempfile::TempDir>,
}

#[cfg_attr(
    not(feature = "mysql"),
    allow(dead_code, reason = "the several-admin tests run on MariaDB only")
)]
impl AdminProc {
    pub fn start(database_url: &str) -> Self {
        Self::start_with(database_url, &[])
    }

    /// Starts with extra `JOBFLEET_*` settings; its warnings go to this test's stderr.
    pub fn start_with(database_url: &str, extra: &[(&str, &str)]) -> Self {
        Self::spawn(database_url, extra, Stdio::inherit(), None)
    }

    /// Over a fresh SQLite file of its own; silent (for floods that would log thousands of
    /// warnings).
    pub fn sqlite(extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("jobfleet.db").display());
        Self::spawn(&url, extra, Stdio::null(), Some(dir))
    }

    /// Starts an admin on a given base URL (`http://127.0.0.1:PORT`), e.g. the one a killed
    /// admin had, so agents configured with it find it again.
    pub fn start_on(database_url: &str, base: &str, extra: &[(&str, &str)]) -> Self {
        let listen = base.trim_start_matches("http://").to_owned();
        let mut vars: Vec<(&str, &str)> = extra.to_vec();
        vars.push(("JOBFLEET_LISTEN", &listen));
        let mut admin = Self::start_with(database_url, &vars);
        admin.base = base.to_owned();
        admin
    }

    fn spawn(
        database_url: &str,
        extra: &[(&str, &str)],
        stderr: Stdio,
        dir: Option<tempfile::TempDir>,
    ) -> Self {
        let port = free_port();
        // With a certificate it serves HTTPS, and `base` says so.
        let scheme = if extra.iter().any(|(k, _)| *k == "JOBFLEET_TLS_CERT") {
            "https"
        } else {
            "http"
        };
        let child = Command::new(env!("CARGO_BIN_EXE_jobfleet-admin"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("JOBFLEET_LISTEN", format!("127.0.0.1:{port}"))
            .env("JOBFLEET_DATABASE_URL", database_url)
            .env(
                "JOBFLEET_JWT_SECRET",
                "cluster-secret-cluster-secret-cluster-0",
            )
            .env("JOBFLEET_ACCESS_TOKEN", "test-agent-token")
            .env("JOBFLEET_APPROVE_AGENTS", "auto")
            .env("JOBFLEET_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("JOBFLEET_LOG", "warn")
            .envs(extra.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Self {
            child,
            base: format!("{scheme}://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// Waits until `/readyz` answers 2xx.
    pub async fn ready(&self, client: &reqwest::Client) {
        wait_for(
            Duration::from_secs(30),
            &format!("{} to be ready", self.base),
            || async {
                let r = client
                    .get(format!("{}/readyz", self.base))
                    .send()
                    .await
                    .ok()?;
                r.status().is_success().then_some(())
            },
        )
        .await;
    }

    /// The bootstrap admin's token.
    pub async fn login(&self, client: &reqwest::Client) -> String {
        let login = call(
            client,
            "POST",
            format!("{}/api/v1/auth/token", self.base),
            "",
            json!({"username": "admin", "password": ADMIN_PASSWORD}),
        )
        .await;
        login["token"].as_str().unwrap().to_owned()
    }

    /// Creates a group and returns its id.
    pub async fn group(&self, client: &reqwest::Client, token: &str, app_name: &str) -> i64 {
        call(
            client,
            "POST",
            format!("{}/api/v1/groups", self.base),
            token,
            json!({"app_name": app_name, "title": app_name}),
        )
        .await["id"]
            .as_i64()
            .unwrap()
    }

    /// Waits until `address` is a live agent of this admin.
    pub async fn wait_for_agent(&self, client: &reqwest::Client, token: &str, address: &str) {
        wait_for(
            Duration::from_secs(60),
            &format!("agent {address} to register"),
            || async {
                let agents = call(
                    client,
                    "GET",
                    format!("{}/api/v1/agents", self.base),
                    token,
                    Value::Null,
                )
                .await;
                is_live_agent(&agents, address).then_some(())
            },
        )
        .await;
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `HUP`) to the admin process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AdminProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends `body` as JSON with a bearer token; asserts a 2xx answer and returns its JSON body.
#[cfg_attr(
    not(feature = "mysql"),
    allow(dead_code, reason = "the several-admin tests run on MariaDB only")
)]
pub async fn call(
    client: &reqwest::Client,
    method: &str,
    url: String,
    token: &str,
    body: Value,
) -> Value {
    let r = client
        .request(method.parse().unwrap(), url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {body}");
    body
}
