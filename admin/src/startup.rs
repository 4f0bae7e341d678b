//! Start-up: builds the pool, runs migrations, loads or creates secrets, bootstraps the first
//! admin, binds the listener and serves until SIGTERM/Ctrl-C. Builds the `AppState`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix_web::{App, HttpServer, web};
use anyhow::Context;

use crate::auth::api_limit::ApiLimiter;
use crate::auth::jwt::JwtKeys;
use crate::auth::password::HashGate;
use crate::auth::random_token;
use crate::auth::rate_limit::RateLimiter;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::{Db, DbUrl, migrate};
use crate::dispatch::client::AgentClient;
use crate::error::Error;
use crate::scheduler::handle::SchedulerHandle;
use crate::service::users::{Bootstrap, bootstrap_admin};
use crate::state::AppState;

/// Reads a secret kept beside the SQLite file, creating it (mode 0600) on first start, so a
/// single-node admin keeps its tokens valid across restarts without any configuration.
fn persisted_secret(db_file: &Path, name: &str) -> anyhow::Result<String> {
    let dir = db_file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let path: PathBuf = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().len() >= 32 => return Ok(text.trim().to_owned()),
        Ok(_) => anyhow::bail!(
            "{} is shorter than 32 bytes; delete it to have a new one generated",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let secret = random_token(48);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut file, secret.as_bytes())?;
    file.sync_all()?;
    Ok(secret)
}

/// Connects, migrates and loads secrets; returns the state ready to serve.
///
/// # Errors
/// Database unreachable, a failed migration, or an unreadable secret file.
pub async fn prepare(
    config: Config,
    clock: SharedClock,
    create_default_data_dir: bool,
) -> anyhow::Result<web::Data<AppState>> {
    if let DbUrl::Sqlite(path) = &config.database_url
        && create_default_data_dir
        && let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the data folder {}", dir.display()))?;
    }
    let db = Db::new(
        config.database_url.clone(),
        config.db_pool_size,
        config.db_connect_timeout,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let applied = migrate_when_reachable(&db).await?;
    if !applied.is_empty() {
        tracing::info!(migrations = ?applied, "Applied database migrations");
    }
    let jwt_secret = match (&config.jwt_secret, &config.database_url) {
        (Some(secret), _) => secret.clone(),
        (None, DbUrl::Sqlite(path)) => persisted_secret(path, "jwt.secret")?,
        (None, DbUrl::Mysql(_)) => anyhow::bail!("config key `jwt_secret` is required with MySQL"),
    };
    let access_token = match (&config.access_token, &config.database_url) {
        (Some(token), _) => token.clone(),
        (None, DbUrl::Sqlite(path)) => persisted_secret(path, "access.token")?,
        (None, DbUrl::Mysql(_)) => {
            anyhow::bail!("config key `access_token` is required with MySQL")
        }
    };
    // reqwest panics without a process-wide rustls provider; installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let relay = crate::dispatch::relay::Relay::new(
        db.clone(),
        crate::dispatch::relay::RelayKeys::new(jwt_secret.as_bytes()),
        config.cluster_url.clone(),
    );
    let agents = AgentClient::new(
        access_token.clone(),
        config.trigger_timeout,
        Some(Arc::new(relay)),
    )
    .context("HTTP client for agents")?;
    let jwt_ttl_ms = i64::try_from(config.jwt_ttl.as_millis()).context("jwt_ttl")?;
    let alerts = crate::alert::Alerts::new(&config)?;
    Ok(web::Data::new(AppState {
        db,
        clock,
        jwt: JwtKeys::new(jwt_secret.as_bytes()),
        jwt_ttl_ms,
        login_limiter: RateLimiter::new(config.login_limits),
        api_limiter: ApiLimiter::new(config.api_limits),
        password_gate: HashGate::new(config.password_hash),
        config: Arc::new(config),
        access_token,
        agents,
        scheduler: SchedulerHandle::default(),
        router: Arc::default(),
        metrics: Arc::default(),
        alerts,
        workflow_graphs: Arc::default(),
        registry: Arc::new(crate::registry_batch::batcher()),
        results: Arc::new(crate::callback::batcher()),
    }))
}

/// How long a starting admin waits for its database: containers and pods start the admins and
/// the database together, and the database is often the last to accept connections.
const DATABASE_START_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Applies the pending migrations once the database accepts connections, waiting for it up to
/// [`DATABASE_START_WAIT`] and saying so in the log.
async fn migrate_when_reachable(db: &Db) -> anyhow::Result<Vec<String>> {
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(500);
    loop {
        match db.run(migrate::run_pending).await {
            Ok(applied) => return Ok(applied),
            Err(Error::Unavailable(why)) if started.elapsed() < DATABASE_START_WAIT => {
                tracing::warn!(
                    database = ?db.url(),
                    "Database not reachable yet, trying again in {pause:?}: {why}"
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
            Err(Error::Internal(cause)) => {
                anyhow::bail!("database {:?}: {cause:#}", db.url())
            }
            Err(e) => anyhow::bail!("database {:?}: {e}", db.url()),
        }
    }
}

/// Creates the first admin if there are no users, printing a generated password once.
///
/// # Errors
/// A password from the environment that breaks the policy; database errors.
pub async fn bootstrap(
    state: &AppState,
    admin_password: Option<String>,
) -> anyhow::Result<Bootstrap> {
    let outcome = bootstrap_admin(state, admin_password)
        .await
        .map_err(|e| anyhow::anyhow!("creating the first admin: {e}"))?;
    match &outcome {
        Bootstrap::CreatedWithRandomPassword(password) => {
            // Printed, not logged: it must reach the person starting the admin and nowhere else.
            announce(&format!(
                "jobfleet: created user `admin` with password: {password}"
            ));
            announce("jobfleet: change it after logging in; it is not shown again");
        }
        Bootstrap::CreatedWithGivenPassword => announce(
            "jobfleet: created user `admin` with the password from JOBFLEET_ADMIN_PASSWORD",
        ),
        Bootstrap::Existing => {}
    }
    Ok(outcome)
}

/// Prints a line for the person who started the admin. A closed stdout (a daemon, a pipe whose
/// reader left) must not take the server down, so write errors are ignored, unlike `println!`.
pub fn announce(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A server running in the background (tests and `serve`).
pub struct RunningServer {
    pub addr: SocketAddr,
    pub handle: actix_web::dev::ServerHandle,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Binds `listener` and serves the app on it: HTTPS with `tls` (`crate::tls::server`), else
/// plain HTTP.
///
/// # Errors
/// When the server cannot be started on the listener.
pub fn start(
    state: web::Data<AppState>,
    listener: TcpListener,
    tls: Option<rustls::ServerConfig>,
) -> anyhow::Result<RunningServer> {
    let addr = listener.local_addr()?;
    if let Some(relay) = state.agents.relay() {
        relay.bound(addr, tls.is_some());
    }
    let workers = state.config.workers;
    let server = HttpServer::new(move || {
        App::new().configure(|cfg| crate::http::configure(cfg, state.clone()))
    })
    .workers(workers)
    .shutdown_timeout(10)
    // Frames to a connected agent are small writes that must not wait for the agent's delayed
    // ACK of the previous one (up to 40 ms): measured in BENCHMARKS.md (issue 14).
    .tcp_nodelay(true)
    .disable_signals();
    let server = match tls {
        Some(config) => server.listen_rustls_0_23(listener, config),
        None => server.listen(listener),
    }
    .with_context(|| format!("listening on {addr}"))?
    .run();
    let handle = server.handle();
    let task = tokio::spawn(server);
    Ok(RunningServer { addr, handle, task })
}

/// `jobfleet-admin serve`: prepare, bootstrap, serve until SIGTERM or Ctrl-C.
///
/// # Errors
/// Any start-up failure, with its cause.
pub async fn serve(
    config: Config,
    clock: SharedClock,
    admin_password: Option<String>,
    create_default_data_dir: bool,
) -> anyhow::Result<()> {
    let listen = config.listen;
    // Installed before anything can answer: a SIGTERM right after readiness must stop us cleanly.
    let stop = shutdown_signal()?;
    // Read before the database is touched: unusable certificate files stop the start at once.
    let tls = config.tls.as_ref().map(crate::tls::server).transpose()?;
    let reloader = match &tls {
        Some(tls) => Some(crate::tls::watch(tls.certs.clone()).context("watching SIGHUP")?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let state = prepare(config, clock, create_default_data_dir).await?;
    bootstrap(&state, admin_password).await?;
    let listener = TcpListener::bind(listen)
        .with_context(|| format!("binding {listen} (config key `listen`)"))?;
    let running = start(state.clone(), listener, tls.map(|tls| tls.config))?;
    let workers = if state.config.scheduler {
        Some(crate::scheduler::spawn_workers(&state)?)
    } else {
        tracing::info!("Scheduler off (config key `scheduler`): this admin fires no jobs");
        None
    };
    tracing::info!(addr = %running.addr, scheme, database = ?state.db.url(), "jobfleet admin listening");
    announce(&format!(
        "jobfleet: admin listening on {scheme}://{}",
        running.addr
    ));
    // What stays resident is then what the admin uses, not all that start-up or a burst touched.
    let idle_memory = tokio::spawn(jobfleet_agent::idle_memory::release_forever());
    stop.await;
    tracing::info!("Shutting down");
    idle_memory.abort();
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    // Stop firing first; what is stored and unsent is recovered by another admin or on restart.
    if let Some(workers) = workers {
        workers.shutdown(WORKER_SHUTDOWN).await;
    }
    // Agents' connections would hold the graceful stop open; closed, their agents reconnect to
    // another admin or fall back to HTTP.
    state.agents.links.close_all();
    running.handle.stop(true).await;
    running
        .task
        .await
        .context("server task")?
        .context("server")?;
    Ok(())
}

/// How long a stopping admin lets its workers finish their pass (and store the answers of the
/// triggers in flight) before it aborts them.
const WORKER_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(10);

/// Registers the SIGTERM and Ctrl-C handlers now and returns a future that completes on either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("watching SIGTERM")?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    })
}
