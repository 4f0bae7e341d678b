//! `jobfleet-admin`: parses the command line and calls into the library.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use jobfleet_admin::clock::SystemClock;
use jobfleet_admin::config::{Config, Sources};
use jobfleet_admin::domain::role::Role;
use jobfleet_admin::{service, startup};

/// What `--version` prints: operators and packages check which databases a binary speaks.
#[cfg(feature = "mysql")]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (databases: sqlite, mysql; tls: rustls)"
);
#[cfg(not(feature = "mysql"))]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (databases: sqlite; tls: rustls)"
);

#[derive(Debug, Parser)]
#[command(
    name = "jobfleet-admin",
    version = VERSION,
    about = "jobfleet admin server: schedules jobs and dispatches them to agents"
)]
struct Cli {
    /// TOML config file (also JOBFLEET_CONFIG).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to bind, HOST:PORT (also JOBFLEET_LISTEN).
    #[arg(long, global = true, value_name = "ADDR")]
    listen: Option<String>,
    /// sqlite://PATH or mysql://USER:PASS@HOST:PORT/DB (also JOBFLEET_DATABASE_URL).
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,
    /// PEM certificate chain to serve HTTPS with (also JOBFLEET_TLS_CERT).
    #[arg(long, global = true, value_name = "PATH")]
    tls_cert: Option<String>,
    /// PEM private key of --tls-cert (also JOBFLEET_TLS_KEY).
    #[arg(long, global = true, value_name = "PATH")]
    tls_key: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the admin server (the default).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Manage users.
    #[command(subcommand)]
    User(UserCommand),
    /// Check the configuration (file, environment, flags) and exit: 0 when valid, 2 naming the
    /// key when not. Touches neither the network nor the database.
    CheckConfig,
    /// Exit 0 if the admin at the configured address is ready (for container health checks).
    /// Against HTTPS (`tls_cert` set) it accepts only the certificate in `tls_cert`.
    Healthcheck {
        /// Base URL to check; default http://<listen>, or https://<listen> with `tls_cert`.
        #[arg(long)]
        url: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Create a user.
    Add {
        username: String,
        #[arg(long, default_value = "viewer")]
        role: String,
        #[command(flatten)]
        password: PasswordArgs,
    },
    /// Set a user's password.
    Passwd {
        username: String,
        #[command(flatten)]
        password: PasswordArgs,
    },
}

#[derive(Debug, Args)]
struct PasswordArgs {
    /// The password (visible in the process list; prefer --password-stdin).
    #[arg(long, conflicts_with = "password_stdin")]
    password: Option<String>,
    /// Read the password from standard input.
    #[arg(long)]
    password_stdin: bool,
}

impl PasswordArgs {
    fn resolve(&self) -> Result<String, String> {
        if let Some(p) = &self.password {
            return Ok(p.clone());
        }
        if self.password_stdin {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("reading the password from stdin: {e}"))?;
            return Ok(text.trim_end_matches(['\r', '\n']).to_owned());
        }
        Err("give the password with --password or --password-stdin".into())
    }
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("jobfleet-admin: {message}");
    ExitCode::from(code)
}

/// Allocations at least this large get a mapping of their own, unmapped when freed.
#[cfg(target_env = "gnu")]
const OWN_MAPPING_FROM_BYTES: libc::c_int = 1 << 20;

/// Makes glibc give large blocks back to the system when they are freed, for the whole run.
///
/// glibc maps a block above its threshold (128 KiB at first) on its own, but on freeing one it
/// raises the threshold to that block's size: the password hasher's 19 MiB buffer, freed after a
/// login, made every later buffer come from a thread arena, which keeps it. An idle admin held
/// 19 to 38 MiB that way (BENCHMARKS.md, "Idle admin and agent"). A threshold set once stays.
#[cfg(target_env = "gnu")]
#[allow(
    unsafe_code,
    reason = "mallopt is glibc's only interface to its thresholds"
)]
fn return_large_blocks_to_the_system() {
    // SAFETY: mallopt only sets an allocator parameter under the allocator's own lock; it is
    // called here before any other thread exists and touches no memory of ours.
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM_BYTES) };
    if set != 1 {
        eprintln!("jobfleet-admin: glibc refused its mmap threshold; large blocks may stay mapped");
    }
}

#[cfg(not(target_env = "gnu"))]
fn return_large_blocks_to_the_system() {}

fn main() -> ExitCode {
    return_large_blocks_to_the_system();
    let cli = Cli::parse();
    let mut flags = Vec::new();
    if let Some(v) = &cli.listen {
        flags.push(("listen".to_owned(), v.clone()));
    }
    if let Some(v) = &cli.database_url {
        flags.push(("database_url".to_owned(), v.clone()));
    }
    if let Some(v) = &cli.tls_cert {
        flags.push(("tls_cert".to_owned(), v.clone()));
    }
    if let Some(v) = &cli.tls_key {
        flags.push(("tls_key".to_owned(), v.clone()));
    }
    let config = match Config::load(&Sources::from_process(cli.config.clone(), flags)) {
        Ok(c) => c,
        Err(e) => return fail(2, e),
    };
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_target(false)
        .init();
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(1, format!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(run(cli.command.unwrap_or(Command::Serve), config));
    match result {
        Ok(code) => code,
        Err(e) => fail(1, format!("{e:#}")),
    }
}

async fn run(command: Command, config: Config) -> anyhow::Result<ExitCode> {
    let clock = Arc::new(SystemClock);
    let create_dir = config.database_url_is_default;
    match command {
        Command::Serve => {
            let admin_password = std::env::var("JOBFLEET_ADMIN_PASSWORD").ok();
            startup::serve(config, clock, admin_password, create_dir).await?;
        }
        Command::Migrate => {
            startup::prepare(config, clock, create_dir).await?;
            println!("jobfleet: database is up to date");
        }
        Command::User(user_command) => {
            let state = startup::prepare(config, clock, create_dir).await?;
            match user_command {
                UserCommand::Add {
                    username,
                    role,
                    password,
                } => {
                    let role: Role = match role.parse() {
                        Ok(r) => r,
                        Err(e) => return Ok(fail(2, format!("--role: {e}"))),
                    };
                    let password = match password.resolve() {
                        Ok(p) => p,
                        Err(e) => return Ok(fail(2, e)),
                    };
                    let created = service::users::add_from_cli(&state, &username, &password, role)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    println!(
                        "jobfleet: created user `{}` (id {}, role {})",
                        created.username, created.id, created.role
                    );
                }
                UserCommand::Passwd { username, password } => {
                    let password = match password.resolve() {
                        Ok(p) => p,
                        Err(e) => return Ok(fail(2, e)),
                    };
                    service::users::passwd_from_cli(&state, &username, &password)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    println!("jobfleet: password of `{username}` changed");
                }
            }
        }
        Command::CheckConfig => {
            let database = match &config.database_url {
                jobfleet_admin::db::DbUrl::Sqlite(path) => format!("sqlite {}", path.display()),
                jobfleet_admin::db::DbUrl::Mysql(_) => "mysql".to_owned(),
            };
            println!(
                "jobfleet: configuration is valid (listen {}, database {database})",
                config.listen
            );
        }
        Command::Healthcheck { url } => {
            let scheme = if config.tls.is_some() {
                "https"
            } else {
                "http"
            };
            let base = url.unwrap_or_else(|| format!("{scheme}://{}", config.listen));
            return Ok(match healthcheck(&base, config.tls.as_ref()) {
                Ok(()) => {
                    println!("jobfleet: ready");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(1, format!("not ready: {e}")),
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A plain HTTP/1.1 GET of `/readyz`, over TLS for an https:// URL: the admin has no HTTP
/// client of its own to pull in for this.
fn healthcheck(base: &str, tls: Option<&jobfleet_admin::config::TlsConfig>) -> Result<(), String> {
    let parsed = url::Url::parse(base).map_err(|e| format!("--url {base}: {e}"))?;
    let host = parsed.host_str().ok_or("the URL has no host")?;
    let tls = match (parsed.scheme(), tls) {
        ("http", _) => None,
        ("https", Some(tls)) => Some(
            jobfleet_admin::tls::healthcheck_client(tls)
                .map_err(|e| e.to_string())
                .map(Arc::new)?,
        ),
        ("https", None) => {
            return Err(
                "https:// needs tls_cert and tls_key in the config: the check accepts the admin's own certificate"
                    .into(),
            );
        }
        (other, _) => return Err(format!("{other}:// URLs cannot be checked")),
    };
    let port = parsed.port_or_known_default().unwrap_or(80);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or("no address")?;
    let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let status_line = match tls {
        None => exchange(stream, &request),
        Some(config) => {
            // The pinned certificate is the identity; the name only has to be well formed.
            let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']))
                .map_err(|e| format!("{host}: {e}"))?
                .to_owned();
            let connection =
                rustls::ClientConnection::new(config, name).map_err(|e| format!("TLS: {e}"))?;
            exchange(rustls::StreamOwned::new(connection, stream), &request)
        }
    }?;
    if status_line.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        Err(status_line)
    }
}

/// Sends `request` and returns the answer's status line.
fn exchange(mut stream: impl Read + Write, request: &str) -> Result<String, String> {
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stream), &mut line)
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(line.trim_end().to_owned())
}
