//! Agent configuration: defaults < TOML file (`--config`, `JOBFLEET_AGENT_CONFIG`) <
//! `JOBFLEET_AGENT_*` environment < flags. Errors name the key and where its value came from.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub use crate::settings::ConfigError;
use crate::settings::{Layers, Source};

#[derive(Debug, Parser, Default)]
#[command(
    name = "jobfleet-agent",
    version = concat!(
        env!("CARGO_PKG_VERSION"),
        " (modes: push, connect, auto; limits: cgroup v1, cgroup v2, rlimit; tls: rustls)"
    ),
    about = "jobfleet agent: registers with the admin and runs shell and script jobs"
)]
pub struct Cli {
    /// TOML config file (also JOBFLEET_AGENT_CONFIG).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Admin base URLs, comma-separated, tried in order (JOBFLEET_AGENT_ADMINS).
    #[arg(long)]
    pub admins: Option<String>,
    /// PEM CA certificates to verify https:// admins with, instead of the host's trust store
    /// (JOBFLEET_AGENT_ADMIN_CA_FILE).
    #[arg(long, value_name = "PATH")]
    pub admin_ca_file: Option<String>,
    /// PEM client certificate presented to the admins: mutual TLS (JOBFLEET_AGENT_CLIENT_CERT).
    #[arg(long, value_name = "PATH")]
    pub client_cert: Option<String>,
    /// PEM private key of --client-cert (JOBFLEET_AGENT_CLIENT_KEY).
    #[arg(long, value_name = "PATH")]
    pub client_key: Option<String>,
    /// The group's app name (JOBFLEET_AGENT_GROUP).
    #[arg(long)]
    pub group: Option<String>,
    /// Address to listen on, HOST:PORT (JOBFLEET_AGENT_LISTEN).
    #[arg(long)]
    pub listen: Option<String>,
    /// Base URL the admin should use to reach this agent (JOBFLEET_AGENT_ADVERTISE).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Access token shared with the admin (JOBFLEET_AGENT_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// Folder for logs, spool and scripts (JOBFLEET_AGENT_DATA_DIR).
    #[arg(long)]
    pub data_dir: Option<String>,
    /// Run jobs as this user (needs root).
    #[arg(long)]
    pub run_as: Option<String>,
    /// Allow running as root.
    #[arg(long)]
    pub allow_root: bool,
    /// Check the configuration (exit 0, or 2 naming the bad key) and exit without starting.
    #[arg(long)]
    pub check_config: bool,
    /// How admins reach this agent: push, connect or auto (JOBFLEET_AGENT_MODE).
    #[arg(long)]
    pub mode: Option<String>,
    /// Labels of this host for jobs to require, e.g. `zone=a,gpu=true` (JOBFLEET_AGENT_LABELS).
    #[arg(long)]
    pub labels: Option<String>,
}

const KEYS: &[(&str, Option<&str>)] = &[
    ("admins", Some("http://127.0.0.1:8080/")),
    ("admin_ca_file", None),
    ("client_cert", None),
    ("client_key", None),
    ("mode", Some("auto")),
    ("group", None),
    ("listen", Some("0.0.0.0:9999")),
    ("advertise", None),
    ("token", None),
    ("data_dir", Some("agent-data")),
    ("log_dir", None),
    ("spool_dir", None),
    ("run_as", None),
    ("labels", Some("")),
    ("cgroup_parent", None),
    ("limits", Some("auto")),
    ("max_concurrent", Some("64")),
    ("max_queued", Some("10000")),
    ("pull", Some("0")),
    ("log_retention_days", Some("7")),
    ("log_max_bytes", Some("16777216")),
    ("log_min_free_mb", Some("256")),
    ("heartbeat_interval_s", Some("10")),
    ("kill_grace_ms", Some("3000")),
    ("spool_gather_ms", Some("50")),
    ("shutdown_grace_s", Some("30")),
    ("allow_root", Some("false")),
    ("log", Some("info")),
];

/// Shortest access token accepted: a guessable token is no better than none.
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest access token accepted (it travels in a header on every call).
pub const MAX_TOKEN_LEN: usize = 512;
/// Smallest and largest per-run log cap (`log_max_bytes`): 64 KiB and 64 GiB.
pub const MIN_LOG_BYTES: u64 = 64 * 1024;
pub const MAX_LOG_BYTES: u64 = 64 * 1024 * 1024 * 1024;

/// How the admins reach this agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The admins dial the advertised address (XXL-Job's way); no connection is kept.
    Push,
    /// Only over the agent's own connection to an admin; nothing listens.
    Connect,
    /// Listens and registers its address, and keeps the connection too: the admin holding it
    /// uses it, any other admin dials the address.
    Auto,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Push => "push",
            Mode::Connect => "connect",
            Mode::Auto => "auto",
        }
    }

    /// Whether the agent listens for admin calls.
    pub fn listens(self) -> bool {
        self != Mode::Connect
    }

    /// Whether the agent keeps a connection to an admin.
    pub fn connects(self) -> bool {
        self != Mode::Push
    }
}

#[derive(Clone)]
pub struct Config {
    pub admins: Vec<String>,
    /// How https:// admins are verified, and the client certificate shown to them.
    pub tls: crate::tls::TlsSettings,
    pub mode: Mode,
    pub group: String,
    /// Told to the admins at every heartbeat; jobs may require them (`agent_labels`).
    pub labels: crate::protocol::labels::Labels,
    pub listen: SocketAddr,
    pub advertise: Option<String>,
    /// Shared with the admin; required (see `MIN_TOKEN_LEN`).
    pub token: String,
    pub data_dir: PathBuf,
    pub log_dir: PathBuf,
    pub spool_dir: PathBuf,
    pub run_as: Option<String>,
    pub cgroup_parent: Option<String>,
    /// `false` forces setrlimit even where cgroups are writable.
    pub use_cgroups: bool,
    pub max_concurrent: usize,
    /// Triggers that wait for a free slot once `max_concurrent` runs are going; beyond it the
    /// agent refuses.
    pub max_queued: usize,
    /// Over its connection, take up to this many due runs of the group at once whenever slots
    /// are free (`take`); 0: never, the admins push every run.
    pub pull: u32,
    pub log_retention_days: u32,
    /// Most bytes kept of one run's output: its head and its tail, with a line saying how
    /// much was cut between them.
    pub log_max_bytes: u64,
    /// Below this much free space on the log folder's disk, runs stop writing logs.
    pub log_min_free_bytes: u64,
    pub heartbeat_interval: Duration,
    pub kill_grace: Duration,
    /// How long a success that may linger waits in memory for others to share its spool file.
    pub spool_gather: Duration,
    pub shutdown_grace: Duration,
    pub allow_root: bool,
    pub log: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("admins", &self.admins)
            .field("tls", &self.tls)
            .field("mode", &self.mode)
            .field("group", &self.group)
            .field("listen", &self.listen)
            .field("advertise", &self.advertise)
            .field("token", &"<redacted>")
            .field("data_dir", &self.data_dir)
            .field("max_concurrent", &self.max_concurrent)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Layers the sources; `env` is the process environment (passed in so tests need not touch it).
    ///
    /// # Errors
    /// The first invalid or unknown key, named with its source.
    pub fn load(cli: &Cli, env: Vec<(String, String)>) -> Result<Config, ConfigError> {
        let mut layers = Layers::new(KEYS.iter().copied());
        let file = cli.config.clone().or_else(|| {
            env.iter()
                .find(|(k, _)| k == "JOBFLEET_AGENT_CONFIG")
                .map(|(_, v)| PathBuf::from(v))
        });
        if let Some(path) = &file {
            layers.read_file(path, "unknown key", |key, value| match value {
                toml::Value::Array(items) if key == "admins" => Ok(items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| "expected a list of URLs".to_owned())
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(",")),
                other => Err(format!("unexpected {}", other.type_str())),
            })?;
        }
        for (var, value) in &env {
            let Some(suffix) = var.strip_prefix("JOBFLEET_AGENT_") else {
                continue;
            };
            // A typo here would silently leave a setting at its default on every host.
            if suffix != "CONFIG" && !layers.set_env(var, suffix, value) {
                return Err(ConfigError {
                    key: suffix.to_ascii_lowercase(),
                    origin: Source::Env(var.clone()).to_string(),
                    message: "unknown setting".into(),
                });
            }
        }
        let flags = [
            ("admins", cli.admins.clone()),
            ("admin_ca_file", cli.admin_ca_file.clone()),
            ("client_cert", cli.client_cert.clone()),
            ("client_key", cli.client_key.clone()),
            ("group", cli.group.clone()),
            ("listen", cli.listen.clone()),
            ("advertise", cli.advertise.clone()),
            ("token", cli.token.clone()),
            ("data_dir", cli.data_dir.clone()),
            ("run_as", cli.run_as.clone()),
            ("allow_root", cli.allow_root.then(|| "true".to_owned())),
            ("mode", cli.mode.clone()),
            ("labels", cli.labels.clone()),
        ];
        for (key, value) in flags {
            if let Some(v) = value {
                layers.set_flag(key, v)?;
            }
        }
        validate(&layers)
    }
}

fn validate(raw: &Layers) -> Result<Config, ConfigError> {
    let fail = |key: &str, message: String| raw.error(key, message);
    let get = |key: &str| raw.text(key);
    let number = |key: &str, min: u64, max: u64| raw.number(key, min, max);
    let url = |key: &str, text: &str| -> Result<String, ConfigError> {
        let ok = (text.starts_with("http://") || text.starts_with("https://"))
            && text.len() > 8
            && !text.contains(char::is_whitespace);
        if !ok {
            return Err(fail(key, format!("`{text}` is not an http(s) URL")));
        }
        Ok(if text.ends_with('/') {
            text.to_owned()
        } else {
            format!("{text}/")
        })
    };
    let admins = get("admins")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| url("admins", s.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if admins.is_empty() {
        return Err(fail("admins", "at least one admin URL is required".into()));
    }
    let group = get("group").ok_or_else(|| {
        fail(
            "group",
            "is required: the app name of this agent's executor group".into(),
        )
    })?;
    if group.len() > 64
        || !group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(fail(
            "group",
            "may contain only letters, digits, `-`, `_` and `.` (at most 64)".into(),
        ));
    }
    let listen_text = get("listen").unwrap_or_default();
    let listen: SocketAddr = listen_text
        .parse()
        .map_err(|_| fail("listen", format!("`{listen_text}` is not IP:PORT")))?;
    let mode = match get("mode").as_deref() {
        Some("auto") | None => Mode::Auto,
        Some("push") => Mode::Push,
        Some("connect") => Mode::Connect,
        Some(other) => {
            return Err(fail(
                "mode",
                format!("`{other}` is not push, connect or auto"),
            ));
        }
    };
    let advertise = get("advertise").map(|a| url("advertise", &a)).transpose()?;
    if mode == Mode::Connect && advertise.is_some() {
        return Err(fail(
            "advertise",
            "has no use in connect mode: admins reach the agent only over its connection".into(),
        ));
    }
    let pull = u32::try_from(number("pull", 0, u64::from(crate::protocol::MAX_TAKE))?)
        .unwrap_or(crate::protocol::MAX_TAKE);
    if mode == Mode::Push && pull > 0 {
        return Err(fail(
            "pull",
            "needs the agent's connection: set mode to connect or auto".into(),
        ));
    }
    // Without a token anyone who reaches the port runs commands on this host.
    let token = get("token").ok_or_else(|| {
        fail(
            "token",
            format!(
                "is required (JOBFLEET_AGENT_TOKEN, --token or `token` in the config file): \
                 the access token shared with the admin, {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} characters"
            ),
        )
    })?;
    if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(fail(
            "token",
            "must not contain spaces or control characters".into(),
        ));
    }
    let token_len = token.chars().count();
    if !(MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&token_len) {
        return Err(fail(
            "token",
            format!(
                "has {token_len} characters; it needs {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} \
                 (JOBFLEET_AGENT_TOKEN, --token or `token` in the config file)"
            ),
        ));
    }
    // Jobs run in the scripts folder, so a relative path (the default one included) would
    // point elsewhere from there: every folder is made absolute against the start directory.
    let absolute = |key: &str, path: PathBuf| {
        std::path::absolute(&path)
            .map_err(|e| fail(key, format!("cannot make {} absolute: {e}", path.display())))
    };
    let data_dir = absolute(
        "data_dir",
        PathBuf::from(get("data_dir").unwrap_or_else(|| "agent-data".into())),
    )?;
    let log_dir = match get("log_dir") {
        Some(dir) => absolute("log_dir", PathBuf::from(dir))?,
        None => data_dir.join("logs"),
    };
    let spool_dir = match get("spool_dir") {
        Some(dir) => absolute("spool_dir", PathBuf::from(dir))?,
        None => data_dir.join("spool"),
    };
    let allow_root = match get("allow_root").as_deref() {
        Some("true") => true,
        Some("false") | None => false,
        Some(other) => {
            return Err(fail(
                "allow_root",
                format!("`{other}` is not true or false"),
            ));
        }
    };
    let use_cgroups = match get("limits").as_deref() {
        Some("auto") | None => true,
        Some("rlimit") => false,
        Some(other) => return Err(fail("limits", format!("`{other}` is not auto or rlimit"))),
    };
    let client_cert = get("client_cert").map(PathBuf::from);
    let client_key = get("client_key").map(PathBuf::from);
    match (&client_cert, &client_key) {
        (Some(_), None) => {
            return Err(fail(
                "client_key",
                "is required with client_cert: the private key of the client certificate".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(fail(
                "client_cert",
                "is required with client_key: the certificate of the key".into(),
            ));
        }
        _ => {}
    }
    let tls = crate::tls::TlsSettings {
        admin_ca_file: get("admin_ca_file").map(PathBuf::from),
        client_cert: client_cert.zip(client_key),
    };
    let log = get("log").unwrap_or_else(|| "info".into());
    tracing_subscriber::EnvFilter::try_new(&log)
        .map_err(|e| fail("log", format!("not a valid filter: {e}")))?;
    let labels = crate::protocol::labels::parse_labels(&get("labels").unwrap_or_default())
        .map_err(|e| fail("labels", e))?;
    Ok(Config {
        admins,
        tls,
        mode,
        group,
        labels,
        listen,
        advertise,
        token,
        data_dir,
        log_dir,
        spool_dir,
        run_as: get("run_as"),
        cgroup_parent: get("cgroup_parent"),
        use_cgroups,
        max_concurrent: number("max_concurrent", 1, 10_000)? as usize,
        max_queued: number("max_queued", 0, 1_000_000)? as usize,
        pull,
        log_retention_days: number("log_retention_days", 1, 3650)? as u32,
        log_max_bytes: number("log_max_bytes", MIN_LOG_BYTES, MAX_LOG_BYTES)?,
        log_min_free_bytes: number("log_min_free_mb", 0, 100_000_000)? * 1024 * 1024,
        heartbeat_interval: Duration::from_secs(number("heartbeat_interval_s", 1, 3600)?),
        kill_grace: Duration::from_millis(number("kill_grace_ms", 0, 600_000)?),
        spool_gather: Duration::from_millis(number("spool_gather_ms", 0, 1_000)?),
        shutdown_grace: Duration::from_secs(number("shutdown_grace_s", 0, 86_400)?),
        allow_root,
        log,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TOKEN: &str = "a-token-of-24-characters";

    /// The pairs, after a valid token (a pair may override it).
    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        std::iter::once(&("JOBFLEET_AGENT_TOKEN", TOKEN))
            .chain(pairs)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn layers_and_defaults() {
        let c = Config::load(
            &Cli::default(),
            env(&[
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_ADMINS", "http://a:1,http://b:2/"),
            ]),
        )
        .unwrap();
        assert_eq!(
            c.admins,
            vec!["http://a:1/".to_owned(), "http://b:2/".to_owned()]
        );
        let here = std::env::current_dir().unwrap();
        assert_eq!(c.log_dir, here.join("agent-data/logs"));
        assert_eq!(c.spool_gather, Duration::from_millis(50));
        assert!(c.data_dir.is_absolute() && c.spool_dir.is_absolute());
        let cli = Cli {
            group: Some("flag-group".into()),
            ..Cli::default()
        };
        assert_eq!(
            Config::load(&cli, env(&[("JOBFLEET_AGENT_GROUP", "g")]))
                .unwrap()
                .group,
            "flag-group"
        );
        assert!(
            !format!(
                "{:?}",
                Config::load(
                    &Cli::default(),
                    env(&[
                        ("JOBFLEET_AGENT_GROUP", "g"),
                        ("JOBFLEET_AGENT_TOKEN", "s3cret-s3cret-s3cret")
                    ])
                )
                .unwrap()
            )
            .contains("s3cret")
        );
    }

    #[test]
    fn the_example_file_in_deploy_parses() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/agent.example.toml");
        let c = Config::load(
            &Cli {
                config: Some(path),
                ..Cli::default()
            },
            env(&[]),
        )
        .unwrap();
        assert_eq!(
            (c.group.as_str(), c.admins.len(), c.use_cgroups),
            ("default", 1, true)
        );
        assert_eq!(
            (c.log_max_bytes, c.log_min_free_bytes),
            (16 << 20, 256 << 20)
        );
        assert_eq!(c.mode, Mode::Auto);
    }

    #[test]
    fn bad_values_name_their_key() {
        let long_token = "x".repeat(MAX_TOKEN_LEN + 1);
        for (pairs, key) in [
            (vec![("JOBFLEET_AGENT_ADMINS", "http://a:1")], "group"),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_ADMINS", "ftp://x"),
                ],
                "admins",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LISTEN", "nowhere"),
                ],
                "listen",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_MAX_CONCURRENT", "0"),
                ],
                "max_concurrent",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_SPOOL_GATHER_MS", "1001"),
                ],
                "spool_gather_ms",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_MODE", "pull"),
                ],
                "mode",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LABELS", "zone=a,zone=b"),
                ],
                "labels",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LABELS", "gpu"),
                ],
                "labels",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_PULL", "257"),
                ],
                "pull",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_PULL", "lots"),
                ],
                "pull",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_MODE", "push"),
                    ("JOBFLEET_AGENT_PULL", "8"),
                ],
                "pull",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_MODE", "connect"),
                    ("JOBFLEET_AGENT_ADVERTISE", "http://a:1/"),
                ],
                "advertise",
            ),
            (vec![("JOBFLEET_AGENT_GROUP", "<g>")], "group"),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_CLIENT_CERT", "/etc/agent.crt"),
                ],
                "client_key",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_CLIENT_KEY", "/etc/agent.key"),
                ],
                "client_cert",
            ),
            (
                vec![("JOBFLEET_AGENT_GROUP", "g"), ("JOBFLEET_AGENT_TOKEN", "")],
                "token",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_TOKEN", "short"),
                ],
                "token",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_TOKEN", &long_token),
                ],
                "token",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LOG_MAX_BYTES", "-1"),
                ],
                "log_max_bytes",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LOG_MAX_BYTES", "100"),
                ],
                "log_max_bytes",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LOG_MAX_BYTES", "99999999999999999"),
                ],
                "log_max_bytes",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_LOG_MIN_FREE_MB", "-5"),
                ],
                "log_min_free_mb",
            ),
            (
                vec![
                    ("JOBFLEET_AGENT_GROUP", "g"),
                    ("JOBFLEET_AGENT_COLOUR", "red"),
                ],
                "colour",
            ),
        ] {
            let err = Config::load(&Cli::default(), env(&pairs)).unwrap_err();
            assert_eq!(err.key, key, "{pairs:?}: {err}");
        }
        let missing = Config::load(
            &Cli::default(),
            vec![("JOBFLEET_AGENT_GROUP".into(), "g".into())],
        )
        .unwrap_err();
        assert_eq!(missing.key, "token");
        assert!(
            missing.to_string().contains("JOBFLEET_AGENT_TOKEN"),
            "{missing}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.toml");
        std::fs::write(
            &file,
            "group = \"g\"\nadmins = [\"http://a:1\"]\nmax_concurent = 3\n",
        )
        .unwrap();
        let err = Config::load(
            &Cli {
                config: Some(file),
                ..Cli::default()
            },
            env(&[]),
        )
        .unwrap_err();
        assert_eq!(err.key, "max_concurent");
    }
}
