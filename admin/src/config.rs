//! Configuration: built-in defaults, then a TOML file, then `JOBFLEET_*` environment variables,
//! then command-line flags. Phase one gathers raw strings with where each came from; phase two
//! validates them into typed [`Config`], with errors that name the key and its source.
//!
//! This module reads config sources and nothing else; the caller passes the environment in, so
//! tests never touch the process environment.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use jobfleet_agent::settings::Layers;
pub use jobfleet_agent::settings::{ConfigError, Source};

use crate::db::DbUrl;
use crate::domain::alert::SmtpTls;

/// Every key, with its default (`None` = no default) and what it is, for `--help`-like output.
const KEYS: &[(&str, Option<&str>, &str)] = &[
    (
        "listen",
        Some("127.0.0.1:8080"),
        "address the HTTP server binds, HOST:PORT",
    ),
    (
        "tls_cert",
        None,
        "PEM certificate chain, leaf first; with tls_key the admin serves HTTPS (reloaded when the file changes or on SIGHUP)",
    ),
    (
        "tls_key",
        None,
        "PEM private key of tls_cert (PKCS#8, PKCS#1 or SEC1)",
    ),
    (
        "tls_client_ca",
        None,
        "PEM CA certificates that sign client certificates (agents): mutual TLS; needs tls_cert",
    ),
    (
        "tls_client_auth",
        None,
        "with tls_client_ca: required (default; a client without a certificate is refused) or optional (browsers get in without one)",
    ),
    (
        "database_url",
        Some("sqlite://data/jobfleet.db"),
        "sqlite://PATH or mysql://USER:PASS@HOST:PORT/DB",
    ),
    (
        "jwt_secret",
        None,
        "HS256 secret for API tokens, at least 32 bytes; generated next to a SQLite file when unset",
    ),
    (
        "jwt_ttl_s",
        Some("3600"),
        "lifetime of tokens from /api/v1/auth/token, seconds",
    ),
    (
        "access_token",
        None,
        "token shared with agents (XXL-JOB-ACCESS-TOKEN)",
    ),
    ("db_pool_size", Some("10"), "maximum database connections"),
    (
        "db_connect_timeout_ms",
        Some("5000"),
        "how long a request waits for a database connection",
    ),
    (
        "max_body_bytes",
        Some("1048576"),
        "largest accepted request body",
    ),
    ("workers", Some("2"), "HTTP worker threads"),
    (
        "login_failures_per_user",
        Some("10"),
        "wrong passwords allowed per account name per login window, from any client",
    ),
    (
        "login_failures_per_client",
        Some("30"),
        "wrong passwords allowed per client address (an IPv6 /64) per login window, over any names",
    ),
    (
        "login_window_s",
        Some("300"),
        "the login limits' window, seconds: a full bucket drains in this long",
    ),
    (
        "login_limiter_capacity",
        Some("10000"),
        "account names and client addresses the login limiter remembers, each",
    ),
    (
        "api_requests_per_minute_admin",
        Some("3000"),
        "open API requests per minute of one admin user or admin API token; 0 = unlimited",
    ),
    (
        "api_requests_per_minute_operator",
        Some("600"),
        "open API requests per minute of one operator user or token; 0 = unlimited",
    ),
    (
        "api_requests_per_minute_viewer",
        Some("300"),
        "open API requests per minute of one viewer user or token; 0 = unlimited",
    ),
    (
        "api_requests_per_minute_anonymous",
        Some("120"),
        "open API requests per minute from one client address (an IPv6 /64) without a valid credential; 0 = unlimited",
    ),
    (
        "api_triggers_per_minute_admin",
        Some("1200"),
        "of those, requests that create jobs or workflows or start runs, per admin user or token; 0 = unlimited",
    ),
    (
        "api_triggers_per_minute_operator",
        Some("120"),
        "the same per operator user or token; 0 = unlimited",
    ),
    (
        "api_triggers_per_minute_viewer",
        Some("60"),
        "the same per viewer user or token; 0 = unlimited",
    ),
    (
        "api_limiter_capacity",
        Some("10000"),
        "callers the open API limiter remembers per role and class (and client addresses)",
    ),
    (
        "password_hash_concurrency",
        Some("2"),
        "password hashes computed at once (each takes ~19 MiB and a core for ~50 ms)",
    ),
    (
        "password_hash_queue_ms",
        Some("2000"),
        "how long a login waits for a hashing slot before answering 503 with Retry-After",
    ),
    (
        "scheduler",
        Some("true"),
        "true: this admin fires jobs and runs the monitors; false: it only serves the console and API",
    ),
    (
        "misfire_threshold_ms",
        Some("5000"),
        "a fire later than this (the admin was down) follows the job's misfire policy",
    ),
    (
        "trigger_timeout_ms",
        Some("3000"),
        "how long an agent may take to accept a trigger before the next one is tried",
    ),
    (
        "result_linger_ms",
        Some("150"),
        "how long an agent may hold a success that nothing waits for (no child jobs, no workflow, concurrency allow) so that one request and one transaction store several; 0: only the 5 ms in which results ending together are collected",
    ),
    (
        "retention_days",
        Some("30"),
        "finished runs and daily report rows older than this are removed",
    ),
    (
        "audit_retention_days",
        Some("365"),
        "audit log entries older than this are removed",
    ),
    (
        "alert_retention_days",
        Some("90"),
        "alert events sent, failed or suppressed longer ago than this are removed",
    ),
    (
        "dead_agent_retention_days",
        Some("7"),
        "agents not heard from for longer than this are forgotten (they enroll again if they return)",
    ),
    (
        "kept_log_bytes",
        Some("1048576"),
        "bytes of each finished run's log the admins keep (head and tail of a longer log), so it outlives its agent; 0 keeps none",
    ),
    (
        "approve_agents",
        Some("manual"),
        "manual: an agent enrolling with the shared token waits for an admin's approval before it gets runs; auto: it is approved at once",
    ),
    (
        "public_url",
        None,
        "the console's public base URL, e.g. https://jobs.example.com; alerts link to runs under it",
    ),
    (
        "cluster_url",
        None,
        "the base URL the other admins of a cluster reach this one at, to relay calls to the agents connected here; default: http(s)://<listen>, with this host's name when listen is 0.0.0.0 or ::",
    ),
    (
        "alert_quiet_window_s",
        Some("600"),
        "an alert with the same kind, job (or group) and channel within this many seconds is recorded as suppressed, not sent; 0 sends every one",
    ),
    (
        "smtp_host",
        None,
        "SMTP server for email alert channels; unset = email channels cannot send",
    ),
    (
        "smtp_port",
        None,
        "SMTP port; default 25 (smtp_tls none), 587 (starttls) or 465 (tls)",
    ),
    (
        "smtp_username",
        None,
        "SMTP login; unset = no authentication",
    ),
    ("smtp_password", None, "SMTP password"),
    (
        "smtp_from",
        None,
        "sender of alert emails, e.g. jobfleet <jobfleet@example.com>; required with smtp_host",
    ),
    (
        "smtp_tls",
        Some("starttls"),
        "none (plain, local relays only), starttls (required STARTTLS) or tls (TLS from the first byte)",
    ),
    (
        "log",
        Some("info"),
        "tracing filter, e.g. info,jobfleet_admin=debug",
    ),
];

/// Environment variables that are ours but not config keys.
const OTHER_ENV: &[&str] = &["JOBFLEET_CONFIG", "JOBFLEET_ADMIN_PASSWORD"];

/// What the process was given; `main` fills it from the real environment, tests by hand.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub file: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// `(key, value)` pairs from flags, keys as in the file.
    pub flags: Vec<(String, String)>,
}

impl Sources {
    /// Reads `JOBFLEET_*` from the process environment and the file it names.
    pub fn from_process(config_flag: Option<PathBuf>, flags: Vec<(String, String)>) -> Self {
        let env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("JOBFLEET_"))
            .collect();
        let file = config_flag.or_else(|| {
            env.iter()
                .find(|(k, _)| k == "JOBFLEET_CONFIG")
                .map(|(_, v)| PathBuf::from(v))
        });
        Self { file, env, flags }
    }
}

/// The validated configuration. Secrets are redacted in `Debug`.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    pub database_url: DbUrl,
    /// True when `database_url` is the built-in default, whose `data/` folder may be created.
    pub database_url_is_default: bool,
    pub jwt_secret: Option<String>,
    pub jwt_ttl: Duration,
    pub access_token: Option<String>,
    pub db_pool_size: u32,
    pub db_connect_timeout: Duration,
    pub max_body_bytes: usize,
    pub workers: usize,
    /// The password-guessing limits of every login and password-change surface.
    pub login_limits: crate::auth::rate_limit::Limits,
    /// The open API's request limits per token, user or client address.
    pub api_limits: crate::auth::api_limit::ApiLimits,
    /// How many password hashes run at once, and how long one may wait for a slot.
    pub password_hash: crate::auth::password::GateLimits,
    pub scheduler: bool,
    pub misfire_threshold_ms: i64,
    pub trigger_timeout: Duration,
    /// How long an agent may hold a success nothing waits for (`resultLingerMs`); 0: not at all.
    pub result_linger_ms: u32,
    pub retention_days: u32,
    pub audit_retention_days: u32,
    pub alert_retention_days: u32,
    pub dead_agent_retention_days: u32,
    /// Bytes of a finished run's log kept in `run_log`; 0: none (logs stay on agents only).
    pub kept_log_bytes: u64,
    /// New agents wait for an admin's approval (`approve_agents = "manual"`).
    pub agents_need_approval: bool,
    /// Without a trailing slash.
    pub public_url: Option<String>,
    /// Without a trailing slash; `None`: derived from the address the server is bound to.
    pub cluster_url: Option<String>,
    /// 0 = no quiet window.
    pub alert_quiet_window_ms: i64,
    /// `None` = email channels cannot send.
    pub smtp: Option<SmtpConfig>,
    pub log: String,
    /// Unknown `JOBFLEET_*` variables, reported as warnings once logging is up.
    pub warnings: Vec<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |s: &Option<String>| if s.is_some() { "<redacted>" } else { "<unset>" };
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("database_url", &self.database_url)
            .field("jwt_secret", &redact(&self.jwt_secret))
            .field("jwt_ttl", &self.jwt_ttl)
            .field("access_token", &redact(&self.access_token))
            .field("db_pool_size", &self.db_pool_size)
            .field("db_connect_timeout", &self.db_connect_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("workers", &self.workers)
            .field("login_limits", &self.login_limits)
            .field("api_limits", &self.api_limits)
            .field("password_hash", &self.password_hash)
            .field("scheduler", &self.scheduler)
            .field("misfire_threshold_ms", &self.misfire_threshold_ms)
            .field("trigger_timeout", &self.trigger_timeout)
            .field("result_linger_ms", &self.result_linger_ms)
            .field("retention_days", &self.retention_days)
            .field("audit_retention_days", &self.audit_retention_days)
            .field("alert_retention_days", &self.alert_retention_days)
            .field("dead_agent_retention_days", &self.dead_agent_retention_days)
            .field("kept_log_bytes", &self.kept_log_bytes)
            .field("public_url", &self.public_url)
            .field("cluster_url", &self.cluster_url)
            .field("alert_quiet_window_ms", &self.alert_quiet_window_ms)
            .field("smtp", &self.smtp)
            .field("log", &self.log)
            .finish()
    }
}

/// The files of the admin's own HTTPS (`tls_*` keys). Only paths: the `tls` module reads them, at
/// start and on every reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `None`: clients present no certificate.
    pub client_auth: Option<ClientAuth>,
}

/// Mutual TLS: the CAs client certificates must chain to, and whether one is required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    pub ca: PathBuf,
    /// `false` (`optional`): a client without a certificate gets in; one with a certificate
    /// not signed by `ca` is still refused.
    pub required: bool,
}

/// The SMTP server alert emails go through. The password is redacted in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
    /// A mailbox, `Name <address>` or a bare address.
    pub from: String,
    pub tls: SmtpTls,
}

impl fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field(
                "password",
                &if self.password.is_some() {
                    "<redacted>"
                } else {
                    "<unset>"
                },
            )
            .field("from", &self.from)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Config {
    /// Layers the sources and validates the result.
    ///
    /// # Errors
    /// The first invalid or unknown key, named with its source.
    pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
        let mut layers = Layers::new(KEYS.iter().map(|(key, default, _)| (*key, *default)));
        if let Some(path) = &sources.file {
            let unknown = format!(
                "unknown key; known keys are: {}",
                KEYS.iter()
                    .map(|(k, _, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            layers.read_file(path, &unknown, |_, other| {
                Err(format!(
                    "expected a string or a number, found {}",
                    other.type_str()
                ))
            })?;
        }
        let mut warnings = Vec::new();
        for (var, value) in &sources.env {
            let Some(suffix) = var.strip_prefix("JOBFLEET_") else {
                continue;
            };
            if OTHER_ENV.contains(&var.as_str())
                || var.starts_with("JOBFLEET_AGENT_")
                || var.starts_with("JOBFLEET_TEST_")
            {
                continue;
            }
            if !layers.set_env(var, suffix, value) {
                warnings.push(format!("ignoring unknown environment variable {var}"));
            }
        }
        for (flag, value) in &sources.flags {
            layers.set_flag(flag, value.clone())?;
        }
        Self::validate(&layers, warnings)
    }

    fn validate(raw: &Layers, warnings: Vec<String>) -> Result<Config, ConfigError> {
        let fail = |key: &str, message: String| raw.error(key, message);
        let get = |key: &str| raw.get(key);
        let number = |key: &str, min: u64, max: u64| raw.number(key, min, max);

        let listen_text = get("listen").unwrap_or_default();
        let listen: SocketAddr = listen_text.parse().map_err(|_| {
            fail(
                "listen",
                format!("`{listen_text}` is not HOST:PORT with an IP host (e.g. 127.0.0.1:8080)"),
            )
        })?;
        let tls = Self::tls(raw)?;
        let database_url = DbUrl::parse(&get("database_url").unwrap_or_default())
            .map_err(|m| fail("database_url", m))?;
        let jwt_secret = get("jwt_secret").filter(|s| !s.is_empty());
        if let Some(secret) = &jwt_secret
            && secret.len() < 32
        {
            return Err(fail(
                "jwt_secret",
                format!("must be at least 32 bytes long (got {})", secret.len()),
            ));
        }
        if jwt_secret.is_none() && matches!(database_url, DbUrl::Mysql(_)) {
            return Err(fail(
                "jwt_secret",
                "required with MySQL: every admin of a cluster must sign tokens with the same secret (set JOBFLEET_JWT_SECRET)"
                    .into(),
            ));
        }
        let access_token = get("access_token").filter(|s| !s.is_empty());
        if access_token.is_none() && matches!(database_url, DbUrl::Mysql(_)) {
            return Err(fail(
                "access_token",
                "required with MySQL: agents and every admin of a cluster must share it (set JOBFLEET_ACCESS_TOKEN)".into(),
            ));
        }
        if let Some(token) = &access_token
            && (!(16..=512).contains(&token.len())
                || token.chars().any(|c| c.is_control() || c.is_whitespace()))
        {
            // The same rule as the agent's `token`: a token an agent would refuse is no use.
            return Err(fail(
                "access_token",
                "must be 16 to 512 characters without spaces or control characters".into(),
            ));
        }
        let public_url = match get("public_url").filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => {
                let url = crate::domain::alert::check_http_url("public_url", &text)
                    .map_err(|e| fail("public_url", e.to_string()))?;
                Some(url.trim_end_matches('/').to_owned())
            }
        };
        let cluster_url = match get("cluster_url").filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => {
                let url = crate::domain::alert::check_http_url("cluster_url", &text)
                    .map_err(|e| fail("cluster_url", e.to_string()))?;
                Some(url.trim_end_matches('/').to_owned())
            }
        };
        let smtp = Self::smtp(raw)?;
        let log = get("log").unwrap_or_default();
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|e| fail("log", format!("not a valid tracing filter: {e}")))?;

        Ok(Config {
            listen,
            tls,
            database_url,
            database_url_is_default: raw
                .source("database_url")
                .is_none_or(|s| *s == Source::Default),
            jwt_secret,
            jwt_ttl: Duration::from_secs(number("jwt_ttl_s", 60, 30 * 24 * 3600)?),
            access_token,
            db_pool_size: u32::try_from(number("db_pool_size", 1, 200)?)
                .map_err(|e| fail("db_pool_size", e.to_string()))?,
            db_connect_timeout: Duration::from_millis(number(
                "db_connect_timeout_ms",
                100,
                120_000,
            )?),
            max_body_bytes: usize::try_from(number("max_body_bytes", 1024, 64 * 1024 * 1024)?)
                .map_err(|e| fail("max_body_bytes", e.to_string()))?,
            workers: usize::try_from(number("workers", 1, 64)?)
                .map_err(|e| fail("workers", e.to_string()))?,
            login_limits: crate::auth::rate_limit::Limits {
                per_user: u32::try_from(number("login_failures_per_user", 1, 100_000)?)
                    .map_err(|e| fail("login_failures_per_user", e.to_string()))?,
                per_client: u32::try_from(number("login_failures_per_client", 1, 1_000_000)?)
                    .map_err(|e| fail("login_failures_per_client", e.to_string()))?,
                window_ms: i64::try_from(number("login_window_s", 1, 7 * 86_400)?)
                    .map_err(|e| fail("login_window_s", e.to_string()))?
                    * 1000,
                capacity: usize::try_from(number("login_limiter_capacity", 100, 10_000_000)?)
                    .map_err(|e| fail("login_limiter_capacity", e.to_string()))?,
            },
            api_limits: Self::api_limits(raw)?,
            password_hash: crate::auth::password::GateLimits {
                concurrency: usize::try_from(number("password_hash_concurrency", 1, 256)?)
                    .map_err(|e| fail("password_hash_concurrency", e.to_string()))?,
                queue: Duration::from_millis(number("password_hash_queue_ms", 10, 600_000)?),
            },
            scheduler: match get("scheduler").unwrap_or_default().as_str() {
                "true" => true,
                "false" => false,
                other => {
                    return Err(fail("scheduler", format!("`{other}` is not true or false")));
                }
            },
            misfire_threshold_ms: i64::try_from(number("misfire_threshold_ms", 1000, 3_600_000)?)
                .map_err(|e| fail("misfire_threshold_ms", e.to_string()))?,
            trigger_timeout: Duration::from_millis(number("trigger_timeout_ms", 100, 60_000)?),
            result_linger_ms: u32::try_from(number("result_linger_ms", 0, 1000)?)
                .map_err(|e| fail("result_linger_ms", e.to_string()))?,
            retention_days: u32::try_from(number("retention_days", 1, 3650)?)
                .map_err(|e| fail("retention_days", e.to_string()))?,
            audit_retention_days: u32::try_from(number("audit_retention_days", 1, 36_500)?)
                .map_err(|e| fail("audit_retention_days", e.to_string()))?,
            alert_retention_days: u32::try_from(number("alert_retention_days", 1, 3650)?)
                .map_err(|e| fail("alert_retention_days", e.to_string()))?,
            dead_agent_retention_days: u32::try_from(number("dead_agent_retention_days", 1, 3650)?)
                .map_err(|e| fail("dead_agent_retention_days", e.to_string()))?,
            kept_log_bytes: {
                let bytes = number("kept_log_bytes", 0, 8 * 1024 * 1024)?;
                if bytes != 0 && bytes < 4096 {
                    return Err(fail(
                        "kept_log_bytes",
                        "must be 0 (keep none) or at least 4096".into(),
                    ));
                }
                bytes
            },
            agents_need_approval: match get("approve_agents").unwrap_or_default().as_str() {
                "manual" => true,
                "auto" => false,
                other => {
                    return Err(fail(
                        "approve_agents",
                        format!("`{other}` is not manual or auto"),
                    ));
                }
            },
            public_url,
            cluster_url,
            alert_quiet_window_ms: i64::try_from(number("alert_quiet_window_s", 0, 7 * 86_400)?)
                .map_err(|e| fail("alert_quiet_window_s", e.to_string()))?
                * 1000,
            smtp,
            log,
            warnings,
        })
    }

    /// The `tls_*` keys: the certificate and key go together; client authentication needs
    /// both and a CA. Whether the files are usable is checked by the `tls` module at start.
    fn tls(raw: &Layers) -> Result<Option<TlsConfig>, ConfigError> {
        let fail = |key: &str, message: String| raw.error(key, message);
        let get = |key: &str| raw.text(key);
        let client_ca = get("tls_client_ca");
        let required = match get("tls_client_auth").as_deref() {
            None | Some("required") => true,
            Some("optional") => false,
            Some(other) => {
                return Err(fail(
                    "tls_client_auth",
                    format!("`{other}` is not optional or required"),
                ));
            }
        };
        if client_ca.is_none() && get("tls_client_auth").is_some() {
            return Err(fail(
                "tls_client_auth",
                "is set but tls_client_ca is not: client certificates need a CA to check them against".into(),
            ));
        }
        let (cert, key) = match (get("tls_cert"), get("tls_key")) {
            (None, None) => {
                if client_ca.is_some() {
                    return Err(fail(
                        "tls_client_ca",
                        "is set but tls_cert and tls_key are not: client certificates need HTTPS"
                            .into(),
                    ));
                }
                return Ok(None);
            }
            (Some(_), None) => {
                return Err(fail(
                    "tls_key",
                    "is required with tls_cert: the private key of the certificate".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(fail(
                    "tls_cert",
                    "is required with tls_key: the certificate chain of the key".into(),
                ));
            }
            (Some(cert), Some(key)) => (PathBuf::from(cert), PathBuf::from(key)),
        };
        Ok(Some(TlsConfig {
            cert,
            key,
            client_auth: client_ca.map(|ca| ClientAuth {
                ca: PathBuf::from(ca),
                required,
            }),
        }))
    }

    /// The `api_*_per_minute_*` keys: 0 is unlimited; a role's trigger limit may not exceed
    /// its (limited) request limit, since every trigger is also a request.
    fn api_limits(raw: &Layers) -> Result<crate::auth::api_limit::ApiLimits, ConfigError> {
        use crate::auth::api_limit::{ApiLimits, PerRole};
        use crate::domain::role::Role;
        let per_minute = |key: &str| {
            u32::try_from(raw.number(key, 0, 1_000_000)?).map_err(|e| raw.error(key, e.to_string()))
        };
        let per_role = |what: &str| -> Result<PerRole, ConfigError> {
            Ok(PerRole {
                admin: per_minute(&format!("api_{what}_per_minute_admin"))?,
                operator: per_minute(&format!("api_{what}_per_minute_operator"))?,
                viewer: per_minute(&format!("api_{what}_per_minute_viewer"))?,
            })
        };
        let limits = ApiLimits {
            requests: per_role("requests")?,
            triggers: per_role("triggers")?,
            anonymous: per_minute("api_requests_per_minute_anonymous")?,
            capacity: usize::try_from(raw.number("api_limiter_capacity", 100, 10_000_000)?)
                .map_err(|e| raw.error("api_limiter_capacity", e.to_string()))?,
        };
        for role in [Role::Admin, Role::Operator, Role::Viewer] {
            let (requests, triggers) = (limits.requests.of(role), limits.triggers.of(role));
            if requests > 0 && triggers > requests {
                return Err(raw.error(
                    &format!("api_triggers_per_minute_{role}"),
                    format!(
                        "is {triggers}, more than api_requests_per_minute_{role} ({requests}): every trigger is also a request, so it could never apply"
                    ),
                ));
            }
        }
        Ok(limits)
    }

    /// The `smtp_*` keys: all or nothing around `smtp_host`.
    fn smtp(raw: &Layers) -> Result<Option<SmtpConfig>, ConfigError> {
        let fail = |key: &str, message: String| raw.error(key, message);
        let get = |key: &str| raw.text(key);
        let tls: SmtpTls = get("smtp_tls")
            .unwrap_or_else(|| "starttls".into())
            .parse()
            .map_err(|e: String| fail("smtp_tls", e))?;
        let Some(host) = get("smtp_host") else {
            for key in ["smtp_port", "smtp_username", "smtp_password", "smtp_from"] {
                if get(key).is_some() {
                    return Err(fail(key, "is set but smtp_host is not".into()));
                }
            }
            return Ok(None);
        };
        if host.contains(['/', ' ', ':']) {
            return Err(fail(
                "smtp_host",
                format!("`{host}` is not a host name (no scheme, port or path)"),
            ));
        }
        let port =
            match get("smtp_port") {
                None => match tls {
                    SmtpTls::None => 25,
                    SmtpTls::Starttls => 587,
                    SmtpTls::Tls => 465,
                },
                Some(text) => text.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    fail("smtp_port", format!("`{text}` is not a port (1..=65535)"))
                })?,
            };
        let from = get("smtp_from").ok_or_else(|| {
            fail(
                "smtp_from",
                "is required with smtp_host: the sender of alert emails".into(),
            )
        })?;
        from.parse::<lettre::message::Mailbox>()
            .map_err(|e| fail("smtp_from", format!("`{from}` is not a mailbox: {e}")))?;
        let username = get("smtp_username");
        let password = raw.raw("smtp_password").map(str::to_owned);
        if password.is_some() != username.is_some() {
            return Err(fail(
                "smtp_password",
                "smtp_username and smtp_password go together".into(),
            ));
        }
        Ok(Some(SmtpConfig {
            host,
            port,
            username,
            password,
            from,
            tls,
        }))
    }

    /// The keys and their defaults, for documentation and the example file test.
    pub fn keys() -> impl Iterator<Item = (&'static str, Option<&'static str>, &'static str)> {
        KEYS.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Sources {
        Sources {
            env: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_valid() {
        let config = Config::load(&Sources::default()).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(
            config.database_url,
            DbUrl::Sqlite("data/jobfleet.db".into())
        );
        assert_eq!(config.jwt_ttl, Duration::from_secs(3600));
    }

    #[test]
    fn layers_override_in_order_and_errors_name_key_and_source() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin.toml");
        std::fs::write(&file, "listen = \"0.0.0.0:9000\"\njwt_ttl_s = 120\n").unwrap();
        let mut sources = env(&[("JOBFLEET_JWT_TTL_S", "300")]);
        sources.file = Some(file.clone());
        let config = Config::load(&sources).unwrap();
        assert_eq!(config.listen.port(), 9000, "file beats default");
        assert_eq!(config.jwt_ttl.as_secs(), 300, "env beats file");
        sources.flags.push(("listen".into(), "127.0.0.1:1".into()));
        assert_eq!(
            Config::load(&sources).unwrap().listen.port(),
            1,
            "flag beats env"
        );

        let err = Config::load(&env(&[("JOBFLEET_LISTEN", "localhost")])).unwrap_err();
        assert_eq!(err.key, "listen");
        assert!(err.to_string().contains("JOBFLEET_LISTEN"), "{err}");
        let err = Config::load(&env(&[("JOBFLEET_JWT_TTL_S", "-5")])).unwrap_err();
        assert_eq!(err.key, "jwt_ttl_s");
    }

    #[test]
    fn unknown_file_keys_fail_and_unknown_env_warns() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin.toml");
        std::fs::write(&file, "lisen = \"x\"\n").unwrap();
        let err = Config::load(&Sources {
            file: Some(file),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.key, "lisen");
        assert!(err.message.contains("unknown key"));
        let config = Config::load(&env(&[
            ("JOBFLEET_LISEN", "x"),
            ("JOBFLEET_ADMIN_PASSWORD", "pw"),
        ]))
        .unwrap();
        assert_eq!(
            config.warnings,
            vec!["ignoring unknown environment variable JOBFLEET_LISEN".to_owned()]
        );
    }

    #[test]
    fn bad_values_are_refused() {
        for (var, value, key) in [
            ("JOBFLEET_DATABASE_URL", "postgres://x/y", "database_url"),
            ("JOBFLEET_JWT_SECRET", "short", "jwt_secret"),
            ("JOBFLEET_ACCESS_TOKEN", "a b", "access_token"),
            ("JOBFLEET_ACCESS_TOKEN", "fifteen-chars-x", "access_token"),
            ("JOBFLEET_DB_POOL_SIZE", "0", "db_pool_size"),
            ("JOBFLEET_LOG", "info,=[", "log"),
            ("JOBFLEET_MAX_BODY_BYTES", "12abc", "max_body_bytes"),
            ("JOBFLEET_RESULT_LINGER_MS", "1001", "result_linger_ms"),
            ("JOBFLEET_RESULT_LINGER_MS", "-1", "result_linger_ms"),
        ] {
            let err = Config::load(&env(&[(var, value)])).unwrap_err();
            assert_eq!(err.key, key, "{var}={value}: {err}");
        }
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let config = Config::load(&env(&[
            (
                "JOBFLEET_JWT_SECRET",
                "0123456789abcdef0123456789abcdef-secret",
            ),
            ("JOBFLEET_ACCESS_TOKEN", "agent-token-secret"),
        ]))
        .unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("abcdef-secret") && !shown.contains("agent-token-secret"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn the_example_file_in_deploy_parses() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/admin.example.toml");
        let config = Config::load(&Sources {
            file: Some(path),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(config.listen.port(), 8080);
        assert!(config.scheduler);
        assert_eq!(config.misfire_threshold_ms, 5000);
        assert_eq!(config.result_linger_ms, 150);
        assert_eq!(config.retention_days, 30);
        assert_eq!(config.audit_retention_days, 365);
        assert_eq!(config.alert_retention_days, 90);
        assert_eq!(config.dead_agent_retention_days, 7);
        assert_eq!(
            config.login_limits,
            crate::auth::rate_limit::Limits {
                per_user: 10,
                per_client: 30,
                window_ms: 300_000,
                capacity: 10_000
            }
        );
        assert_eq!(config.password_hash.concurrency, 2);
        assert_eq!(
            config.api_limits,
            Config::load(&Sources::default()).unwrap().api_limits,
            "the example file shows the defaults"
        );
    }

    #[test]
    fn login_keys_are_checked() {
        for (var, value) in [
            ("JOBFLEET_LOGIN_FAILURES_PER_USER", "0"),
            ("JOBFLEET_LOGIN_FAILURES_PER_CLIENT", "many"),
            ("JOBFLEET_LOGIN_WINDOW_S", "0"),
            ("JOBFLEET_LOGIN_LIMITER_CAPACITY", "5"),
            ("JOBFLEET_PASSWORD_HASH_CONCURRENCY", "0"),
            ("JOBFLEET_PASSWORD_HASH_QUEUE_MS", "1"),
        ] {
            let err = Config::load(&env(&[(var, value)])).unwrap_err();
            assert_eq!(
                err.key,
                var.trim_start_matches("JOBFLEET_").to_ascii_lowercase()
            );
        }
    }

    #[test]
    fn api_limit_keys_are_checked() {
        use crate::auth::api_limit::{ApiLimits, PerRole};
        assert_eq!(
            Config::load(&Sources::default()).unwrap().api_limits,
            ApiLimits {
                requests: PerRole {
                    admin: 3000,
                    operator: 600,
                    viewer: 300
                },
                triggers: PerRole {
                    admin: 1200,
                    operator: 120,
                    viewer: 60
                },
                anonymous: 120,
                capacity: 10_000,
            }
        );
        let unlimited = Config::load(&env(&[
            ("JOBFLEET_API_REQUESTS_PER_MINUTE_VIEWER", "0"),
            ("JOBFLEET_API_TRIGGERS_PER_MINUTE_VIEWER", "500"),
            ("JOBFLEET_API_TRIGGERS_PER_MINUTE_OPERATOR", "0"),
        ]))
        .unwrap()
        .api_limits;
        assert_eq!(
            (unlimited.requests.viewer, unlimited.triggers.viewer),
            (0, 500)
        );
        assert_eq!(unlimited.triggers.operator, 0);
        for (pairs, key, message) in [
            (
                vec![("JOBFLEET_API_REQUESTS_PER_MINUTE_ADMIN", "-1")],
                "api_requests_per_minute_admin",
                "",
            ),
            (
                vec![("JOBFLEET_API_REQUESTS_PER_MINUTE_ANONYMOUS", "lots")],
                "api_requests_per_minute_anonymous",
                "not a whole number",
            ),
            (
                vec![("JOBFLEET_API_TRIGGERS_PER_MINUTE_OPERATOR", "1000001")],
                "api_triggers_per_minute_operator",
                "out of range",
            ),
            (
                vec![("JOBFLEET_API_LIMITER_CAPACITY", "10")],
                "api_limiter_capacity",
                "out of range",
            ),
            (
                vec![
                    ("JOBFLEET_API_REQUESTS_PER_MINUTE_VIEWER", "30"),
                    ("JOBFLEET_API_TRIGGERS_PER_MINUTE_VIEWER", "31"),
                ],
                "api_triggers_per_minute_viewer",
                "more than api_requests_per_minute_viewer (30)",
            ),
        ] {
            let err = Config::load(&env(&pairs)).unwrap_err();
            assert_eq!(err.key, key, "{pairs:?}: {err}");
            assert!(err.message.contains(message), "{pairs:?}: {}", err.message);
        }
    }

    #[test]
    fn scheduler_keys_are_checked() {
        for (var, value, message) in [
            ("JOBFLEET_SCHEDULER", "yes", "not true or false"),
            ("JOBFLEET_MISFIRE_THRESHOLD_MS", "10", "out of range"),
            ("JOBFLEET_KEPT_LOG_BYTES", "100", "at least 4096"),
            ("JOBFLEET_KEPT_LOG_BYTES", "999999999", "out of range"),
            ("JOBFLEET_KEPT_LOG_BYTES", "lots", "not a whole number"),
            ("JOBFLEET_RETENTION_DAYS", "0", "out of range"),
            ("JOBFLEET_AUDIT_RETENTION_DAYS", "0", "out of range"),
            ("JOBFLEET_AUDIT_RETENTION_DAYS", "36501", "out of range"),
            (
                "JOBFLEET_ALERT_RETENTION_DAYS",
                "a week",
                "not a whole number",
            ),
            ("JOBFLEET_DEAD_AGENT_RETENTION_DAYS", "0", "out of range"),
            (
                "JOBFLEET_DEAD_AGENT_RETENTION_DAYS",
                "never",
                "not a whole number",
            ),
            ("JOBFLEET_TRIGGER_TIMEOUT_MS", "soon", "not a whole number"),
        ] {
            let err = Config::load(&env(&[(var, value)])).unwrap_err();
            assert_eq!(
                err.key,
                var.trim_start_matches("JOBFLEET_").to_ascii_lowercase()
            );
            assert!(err.message.contains(message), "{var}: {}", err.message);
        }
        let off = Config::load(&env(&[("JOBFLEET_SCHEDULER", "false")])).unwrap();
        assert!(!off.scheduler);
    }

    #[test]
    fn tls_keys_go_together() {
        assert!(Config::load(&Sources::default()).unwrap().tls.is_none());
        let tls = Config::load(&env(&[
            ("JOBFLEET_TLS_CERT", "/etc/jf/cert.pem"),
            ("JOBFLEET_TLS_KEY", "/etc/jf/key.pem"),
            ("JOBFLEET_TLS_CLIENT_CA", "/etc/jf/ca.pem"),
        ]))
        .unwrap()
        .tls
        .unwrap();
        assert_eq!(tls.cert, PathBuf::from("/etc/jf/cert.pem"));
        assert_eq!(
            tls.client_auth,
            Some(ClientAuth {
                ca: "/etc/jf/ca.pem".into(),
                required: true
            }),
            "a CA without a mode requires client certificates"
        );
        for (pairs, key) in [
            (vec![("JOBFLEET_TLS_CERT", "c.pem")], "tls_key"),
            (vec![("JOBFLEET_TLS_KEY", "k.pem")], "tls_cert"),
            (vec![("JOBFLEET_TLS_CLIENT_CA", "ca.pem")], "tls_client_ca"),
            (
                vec![
                    ("JOBFLEET_TLS_CERT", "c.pem"),
                    ("JOBFLEET_TLS_KEY", "k.pem"),
                    ("JOBFLEET_TLS_CLIENT_AUTH", "optional"),
                ],
                "tls_client_auth",
            ),
            (
                vec![
                    ("JOBFLEET_TLS_CERT", "c.pem"),
                    ("JOBFLEET_TLS_KEY", "k.pem"),
                    ("JOBFLEET_TLS_CLIENT_CA", "ca.pem"),
                    ("JOBFLEET_TLS_CLIENT_AUTH", "sometimes"),
                ],
                "tls_client_auth",
            ),
        ] {
            let err = Config::load(&env(&pairs)).unwrap_err();
            assert_eq!(err.key, key, "{pairs:?}: {err}");
        }
    }

    #[test]
    fn alert_keys_are_checked_and_the_smtp_password_redacted() {
        let config = Config::load(&env(&[
            ("JOBFLEET_PUBLIC_URL", "https://jobs.example.com/"),
            ("JOBFLEET_SMTP_HOST", "mail.example.com"),
            ("JOBFLEET_SMTP_USERNAME", "jobfleet"),
            ("JOBFLEET_SMTP_PASSWORD", "smtp-secret-pw"),
            ("JOBFLEET_SMTP_FROM", "jobfleet <jobfleet@example.com>"),
        ]))
        .unwrap();
        assert_eq!(
            config.public_url.as_deref(),
            Some("https://jobs.example.com")
        );
        assert_eq!(config.alert_quiet_window_ms, 600_000);
        assert_eq!(config.cluster_url, None);
        let clustered = Config::load(&env(&[("JOBFLEET_CLUSTER_URL", "https://admin-1:8443/")]));
        assert_eq!(
            clustered.unwrap().cluster_url.as_deref(),
            Some("https://admin-1:8443")
        );
        let smtp = config.smtp.clone().unwrap();
        assert_eq!((smtp.port, smtp.tls), (587, SmtpTls::Starttls));
        assert!(!format!("{config:?}").contains("smtp-secret-pw"));
        assert!(Config::load(&Sources::default()).unwrap().smtp.is_none());
        for (pairs, key) in [
            (
                vec![("JOBFLEET_PUBLIC_URL", "jobs.example.com")],
                "public_url",
            ),
            (
                vec![("JOBFLEET_ALERT_QUIET_WINDOW_S", "-1")],
                "alert_quiet_window_s",
            ),
            (
                vec![("JOBFLEET_CLUSTER_URL", "admin-1:8080")],
                "cluster_url",
            ),
            (vec![("JOBFLEET_SMTP_FROM", "a@b.c")], "smtp_from"),
            (vec![("JOBFLEET_SMTP_HOST", "mail")], "smtp_from"),
            (
                vec![
                    ("JOBFLEET_SMTP_HOST", "mail"),
                    ("JOBFLEET_SMTP_FROM", "nope"),
                ],
                "smtp_from",
            ),
            (
                vec![
                    ("JOBFLEET_SMTP_HOST", "mail"),
                    ("JOBFLEET_SMTP_FROM", "a@b.c"),
                    ("JOBFLEET_SMTP_PORT", "0"),
                ],
                "smtp_port",
            ),
            (vec![("JOBFLEET_SMTP_TLS", "ssl")], "smtp_tls"),
        ] {
            let err = Config::load(&env(&pairs)).unwrap_err();
            assert_eq!(err.key, key, "{pairs:?}: {err}");
        }
    }
}
