//! Wiring and lifecycle: folders, limits detection, the HTTP server, registration, the result
//! drain, log retention, and graceful shutdown on SIGTERM.

use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer, web};

use crate::admin_client::AdminClient;
use crate::callback;
use crate::config::Config;
use crate::error::Error;
use crate::handlers::Handlers;
use crate::journal::{Journal, Leftovers};
use crate::link::{LinkConfig, Uplink};
use crate::logs::Logs;
use crate::protocol::{HandleCallbackParam, RunOutcome};
use crate::registry::Registration;
use crate::runner::start_marks::StartMarks;
use crate::runner::{Runner, RunnerConfig, contain, limits, output};
use crate::server;
use crate::spool::Spool;

/// Resolves the run-as user to uid/gid.
fn resolve_user(name: &str) -> Result<(u32, u32), Error> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok((user.uid.as_raw(), user.gid.as_raw())),
        Ok(None) => Err(Error::Refused(format!(
            "config key `run_as`: no user named `{name}`"
        ))),
        Err(e) => Err(Error::Refused(format!(
            "config key `run_as`: cannot look up `{name}`: {e}"
        ))),
    }
}

/// The user jobs run as when `run_as` is not set: the agent's own (`root` when it is root).
fn own_user() -> String {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// The address admins should use: the listen IP if specific, else the IP this host uses to
/// reach the first admin (no packet is sent: connecting a UDP socket only picks a route).
fn advertised(config: &Config, bound: SocketAddr) -> String {
    if let Some(a) = &config.advertise {
        return a.clone();
    }
    let ip = if bound.ip().is_unspecified() {
        let admin_host = config.admins[0]
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .map(|hostport| {
                if hostport.contains(':') {
                    hostport.to_owned()
                } else {
                    format!("{hostport}:80")
                }
            })
            .unwrap_or_default();
        UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect(admin_host.as_str()).map(|()| s))
            .and_then(|s| s.local_addr())
            .map_or(IpAddr::from([127, 0, 0, 1]), |a| a.ip())
    } else {
        bound.ip()
    };
    format!("http://{}/", SocketAddr::new(ip, bound.port()))
}

/// The address a connect-mode agent registers: `conn://<hostname>/<agent id>`. It cannot be
/// dialled (admins send to it only over the agent's connection), stays the same across
/// restarts (runs, approval and liveness are keyed by address), and differs between agents of
/// one host (the id).
fn connect_address(agent_id: &str) -> String {
    let host: String = crate::host::hostname()
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        .collect();
    let host = if host.is_empty() {
        "agent".into()
    } else {
        host
    };
    format!("{}://{host}/{agent_id}/", crate::protocol::CONNECT_SCHEME)
}

/// Runs remembered for answering a repeated trigger (about 60 bytes of memory each).
const JOURNAL_CAPACITY: usize = 100_000;

/// Reports what the previous agent process left unfinished, before anything is sent: a run it
/// accepted into its queue and never started goes back to the admins to be sent again
/// (`not_started`, no retry used: it cannot have run), and so does a run marked started whose
/// process never started (no start mark among `marked`; trusted only in the same boot of the
/// host, as marks are not fsynced); any other started run is reported `lost` (it may have run
/// partly; its job's retry policy decides). Spooled first, so the first heartbeat lists them
/// as held and the admin waits for these results instead of judging on its own.
///
/// A run whose result is already in the spool gets none added, and that result decides: it was
/// handed back if it says `not_started` (an earlier start spooled it and died before rewriting
/// the journal, maybe across a reboot), and it ran if it says anything else (its `F` line was
/// lost and its slot reused, so it looks unmarked). Returns the runs handed back, which the
/// journal must forget so that they may come again; a run that ran must stay known, or a
/// repeated trigger would run it twice.
fn settle_leftovers(
    spool: &Spool,
    marked: &std::collections::HashSet<i64>,
    leftovers: &Leftovers,
) -> std::io::Result<Vec<i64>> {
    let held: std::collections::HashMap<i64, bool> = spool
        .pending()?
        .iter()
        .flat_map(|file| file.results.iter())
        .map(|result| (result.log_id, result.status == Some(RunOutcome::NotStarted)))
        .collect();
    let now = crate::now_ms();
    let result = |run_id: i64, status: RunOutcome, msg: &str| HandleCallbackParam {
        log_id: run_id,
        log_date_tim: now,
        handle_code: status.handle_code(),
        handle_msg: Some(msg.to_owned()),
        status: Some(status),
        exit_code: None,
        signal: None,
        started_ms: None,
        finished_ms: Some(now),
        usage: None,
        limits_mode: None,
        start_latency_us: None,
        attempt: None,
        output: None,
        log: None,
    };
    let (unspawned, interrupted): (Vec<i64>, Vec<i64>) = leftovers
        .interrupted
        .iter()
        .partition(|run_id| leftovers.same_boot && !marked.contains(run_id));
    let mut results = Vec::new();
    for &run_id in &leftovers.never_started {
        results.push(result(
            run_id,
            RunOutcome::NotStarted,
            "the agent restarted before this queued run started; it is sent again",
        ));
    }
    for &run_id in &unspawned {
        results.push(result(
            run_id,
            RunOutcome::NotStarted,
            "the agent stopped (killed or crashed) before this run's process started; it is sent again",
        ));
    }
    for &run_id in &interrupted {
        results.push(result(
            run_id,
            RunOutcome::Lost,
            "the agent stopped (killed or crashed) while this run was in progress; it may have run partly",
        ));
    }
    results.retain(|result| !held.contains_key(&result.log_id));
    if !results.is_empty() {
        tracing::warn!(
            never_started = leftovers.never_started.len() + unspawned.len(),
            interrupted = interrupted.len(),
            "Reporting the runs a previous agent process left"
        );
        spool.put_all(&results)?;
    }
    let handed_back = |run_id: &i64| held.get(run_id).is_none_or(|not_started| *not_started);
    Ok(leftovers
        .never_started
        .iter()
        .chain(&unspawned)
        .copied()
        .filter(handed_back)
        .chain(
            interrupted
                .iter()
                .copied()
                .filter(|run_id| held.get(run_id) == Some(&true)),
        )
        .collect())
}

fn private_dir(path: &std::path::Path) -> Result<(), Error> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(Error::io(format!("creating {}", path.display())))
}

/// The lock file in the data folder that one agent process holds for its life.
const LOCK_FILE: &str = "agent.lock";

/// Holds the data folder for this process until the returned lock drops: two agents on one
/// folder would replay, rewrite and spool each other's journal and marks, and one would
/// truncate the marks file the other has mapped (a SIGBUS for it).
fn hold_data_folder(dir: &std::path::Path) -> Result<nix::fcntl::Flock<std::fs::File>, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(Error::io(format!("opening {}", path.display())))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| match errno {
            nix::errno::Errno::EWOULDBLOCK => Error::Refused(format!(
                "another agent process uses the data folder {} (it holds {LOCK_FILE}): give each agent a data_dir of its own",
                dir.display()
            )),
            other => Error::Io {
                what: format!("locking {}", path.display()),
                source: other.into(),
            },
        },
    )
}

/// Runs the agent until SIGTERM or Ctrl-C.
///
/// # Errors
/// Start-up failures: folders, the listener, the run-as user, root without `allow_root`.
pub async fn run(config: Config) -> Result<(), Error> {
    if nix::unistd::geteuid().is_root() && !config.allow_root {
        return Err(Error::Refused(
            "refusing to run as root: jobs would run as root too; set run_as, or pass --allow-root"
                .into(),
        ));
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Unusable certificate files stop the start, before anything is bound or written.
    let tls = crate::tls::client_config(&config.tls)?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::io("watching SIGTERM"))?;
    let run_as = config.run_as.as_deref().map(resolve_user).transpose()?;
    let jobs_user = config.run_as.clone().unwrap_or_else(own_user);
    if run_as.is_none() && nix::unistd::geteuid().is_root() {
        tracing::warn!(
            "Jobs run as root: --allow-root without run_as gives every operator's job full control \
             of this host; set run_as (JOBFLEET_AGENT_RUN_AS) to a user of its own"
        );
    }
    // Orphans of runs are re-parented to the agent, so a sweep can find and end them.
    if let Err(e) = contain::become_subreaper() {
        tracing::warn!(error = %e, "Cannot become a subreaper: a run's escaped processes may outlive it");
    }
    let scripts_dir = config.data_dir.join("scripts");
    for dir in [
        &config.data_dir,
        &config.log_dir,
        &config.spool_dir,
        &scripts_dir,
    ] {
        private_dir(dir)?;
    }
    let _data_folder = hold_data_folder(&config.data_dir)?;
    if let Some((uid, gid)) = run_as {
        // The run-as user must traverse the data folder to reach its own scripts folder
        // (0700, its own); it can list nothing here, and logs and spool stay 0700 root's.
        std::fs::set_permissions(
            &config.data_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .map_err(Error::io("opening the data folder to run_as"))?;
        std::os::unix::fs::chown(&scripts_dir, Some(uid), Some(gid))
            .map_err(Error::io("handing the scripts folder to run_as"))?;
    }
    // In connect mode nothing listens: admins reach the agent only over its connection.
    let listener = if config.mode.listens() {
        let listener = TcpListener::bind(config.listen).map_err(Error::io(format!(
            "binding {} (config key `listen`)",
            config.listen
        )))?;
        let bound = listener
            .local_addr()
            .map_err(Error::io("reading the bound address"))?;
        Some((listener, bound))
    } else {
        None
    };
    let agent_id = crate::identity::load_or_create_id(&config.data_dir)
        .map_err(Error::io("reading or creating the agent id"))?;
    // Run ids are unique per admin cluster, not per host: two agents on one host (or one per
    // test) each get their own folder, named by the port only one of them can hold (or, when
    // nothing listens, by the agent's id).
    let parent = format!(
        "{}/agent-{}",
        config.cgroup_parent.as_deref().unwrap_or("jobfleet"),
        listener
            .as_ref()
            .map_or_else(|| agent_id.clone(), |(_, bound)| bound.port().to_string())
    );
    let limits_mode = if config.use_cgroups {
        limits::detect(&parent)
    } else {
        limits::Mode::Rlimit
    };
    let stale = limits_mode.remove_stale_runs();
    if stale > 0 {
        tracing::warn!(
            cgroups = stale,
            "Removed run cgroups a previous agent left behind"
        );
    }
    let key = crate::identity::load_or_create_key(&config.data_dir)
        .map_err(Error::io("reading or creating the agent key"))?;
    let instance_id =
        crate::identity::new_instance_id().map_err(Error::io("making the instance id"))?;
    let logs = Logs::open(config.log_dir.clone(), config.log_retention_days)
        .map_err(Error::io("opening the log folder"))?;
    let spool = Spool::open(config.spool_dir.clone()).map_err(Error::io("opening the spool"))?;
    // The journal file keeps naming the previous process's runs unsettled until their results
    // are in the spool: a crash before that finds them again.
    let recovered =
        Journal::recover(&config.data_dir).map_err(Error::io("reading the accept journal"))?;
    let marked = StartMarks::left_in(&config.data_dir).map_err(Error::io(
        "reading the start marks a previous agent process left",
    ))?;
    let handed_back = settle_leftovers(&spool, &marked, recovered.leftovers()).map_err(
        Error::io("spooling the results of runs a previous agent process left"),
    )?;
    let journal = recovered
        .open(JOURNAL_CAPACITY, &handed_back)
        .map_err(Error::io("rewriting the accept journal"))?;
    // Emptied only once those results are in the spool, so that no run goes on being judged
    // started by a mark from another of its attempts.
    let marks =
        StartMarks::open(&config.data_dir).map_err(Error::io("opening the start marks file"))?;
    let runner = Runner::new(
        RunnerConfig {
            scripts_dir,
            max_concurrent: config.max_concurrent,
            max_queued: config.max_queued,
            kill_grace: config.kill_grace,
            spool_gather: config.spool_gather,
            run_as,
            jobs_user,
            limits_mode: limits_mode.clone(),
            output: output::OutputLimits {
                max_bytes: config.log_max_bytes,
                min_free_bytes: config.log_min_free_bytes,
            },
            http: crate::runner::http::client().map_err(Error::Refused)?,
        },
        logs.clone(),
        spool.clone(),
        journal,
        marks,
    );
    let advertise = match &listener {
        Some((_, bound)) => advertised(&config, *bound),
        None => connect_address(&agent_id),
    };
    let handlers = Arc::new(Handlers {
        runner: runner.clone(),
        logs: logs.clone(),
        token: config.token.clone(),
        instance_id: instance_id.clone(),
    });
    let server = match listener {
        Some((listener, bound)) => {
            let data = web::Data::from(handlers.clone());
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(data.clone())
                    .configure(server::configure)
            })
            .workers(1)
            // Answers to triggers are small writes on kept-alive connections: no Nagle delay.
            .tcp_nodelay(true)
            .disable_signals()
            .listen(listener)
            .map_err(Error::io("starting the HTTP server"))?
            .run();
            let handle = server.handle();
            Some((handle, tokio::spawn(server), bound))
        }
        None => None,
    };
    let listening = server.as_ref().map_or_else(
        || "nothing (connect mode)".to_owned(),
        |(_, _, bound)| bound.to_string(),
    );
    tracing::info!(listen = %listening, %advertise, mode = config.mode.as_str(), limits = runner.limits_mode(), jobs_user = runner.jobs_user(), "jobfleet agent started");
    println!(
        "jobfleet-agent: listening on {listening}, advertised as {advertise}, mode {}, limits via {}",
        config.mode.as_str(),
        runner.limits_mode()
    );

    let uplink = Arc::new(Uplink::default());
    let mut client = AdminClient::new(
        config.admins.clone(),
        Some(config.token.clone()),
        Some(key.clone()),
        &tls,
    )
    .map_err(Error::Refused)?;
    if config.mode.connects() {
        client = client.with_uplink(uplink.clone());
    }
    let client = Arc::new(client);
    let registration = Arc::new(Registration {
        client: client.clone(),
        group: config.group.clone(),
        advertise: advertise.clone(),
        data_dir: config.data_dir.clone(),
        runner: runner.clone(),
        instance_id,
        mode: config.mode.as_str(),
        labels: config.labels.clone(),
    });
    let link = if config.mode.connects() {
        Some(tokio::spawn(crate::link::keep_connected(
            uplink,
            LinkConfig {
                admins: config.admins.clone(),
                token: config.token.clone(),
                key,
                group: config.group.clone(),
                address: advertise,
                tls: tls.clone(),
                pull: config.pull,
            },
            handlers,
            registration.clone(),
            runner.results.clone(),
        )))
    } else {
        None
    };
    let beats = tokio::spawn(registration.clone().beat_forever(config.heartbeat_interval));
    let drain = tokio::spawn(callback::drain_forever(
        client.clone(),
        spool.clone(),
        runner.results.clone(),
    ));
    let retention_logs = logs.clone();
    let retention = tokio::spawn(async move {
        loop {
            let removed = retention_logs.remove_expired(crate::now_ms());
            if removed > 0 {
                tracing::info!(folders = removed, "Removed old run logs");
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });

    let idle_memory = tokio::spawn(crate::idle_memory::release_forever());

    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("Shutting down: no new runs; waiting for running ones");
    beats.abort();
    registration.deregister().await;
    runner.shutdown(config.shutdown_grace).await;
    limits_mode.remove_agent_dirs();
    drain.abort();
    // One last attempt to deliver; whatever is left stays spooled for the next start.
    if let Err(e) = tokio::time::timeout(
        Duration::from_secs(5),
        callback::drain_once(&client, &spool),
    )
    .await
    .unwrap_or(Err("timed out".into()))
    {
        tracing::warn!(error = %e, "Results stay spooled until the next start");
    }
    retention.abort();
    idle_memory.abort();
    if let Some(link) = link {
        link.abort();
    }
    if let Some((handle, task, _)) = server {
        handle.stop(true).await;
        let _ = task.await;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// An earlier start that died after spooling the leftovers' results but before rewriting
    /// its journal leaves the same leftovers: their results are not spooled twice, and the runs
    /// handed back are still named, so the journal forgets them and a resend runs.
    #[test]
    fn leftovers_settled_twice_are_spooled_once() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let leftovers = Leftovers {
            never_started: vec![2],
            interrupted: vec![1, 3],
            same_boot: true,
        };
        let marked = std::collections::HashSet::from([1]);
        let spooled = |spool: &Spool| {
            let mut runs: Vec<(i64, Option<RunOutcome>)> = spool
                .pending()
                .unwrap()
                .iter()
                .flat_map(|file| file.results.iter().map(|r| (r.log_id, r.status.clone())))
                .collect();
            runs.sort_unstable_by_key(|(id, _)| *id);
            runs
        };
        let handed_back = settle_leftovers(&spool, &marked, &leftovers).unwrap();
        assert_eq!(handed_back, vec![2, 3]);
        let expected = vec![
            (1, Some(RunOutcome::Lost)),
            (2, Some(RunOutcome::NotStarted)),
            (3, Some(RunOutcome::NotStarted)),
        ];
        assert_eq!(spooled(&spool), expected);
        let reopened = Spool::open(dir.path().join("spool")).unwrap();
        let handed_back = settle_leftovers(&reopened, &marked, &leftovers).unwrap();
        assert_eq!(handed_back, vec![2, 3], "still forgotten by the journal");
        assert_eq!(spooled(&reopened), expected, "nothing spooled twice");
        // After a reboot between the two starts, run 3's mark is no longer trusted: it reads as
        // interrupted, yet the `not_started` already spooled decides, so it is still handed back.
        let rebooted = Leftovers {
            same_boot: false,
            ..leftovers
        };
        let handed_back = settle_leftovers(&reopened, &marked, &rebooted).unwrap();
        assert_eq!(handed_back, vec![2, 3]);
        assert_eq!(spooled(&reopened), expected);
    }

    /// A run that finished, whose result is in the spool but whose `F` journal line the kill
    /// beat, and whose mark slot another run took since: it looks unmarked, yet it ran. Its
    /// result stands and the journal keeps it, so a repeated trigger does not run it again.
    #[test]
    fn a_finished_run_that_lost_its_mark_is_not_handed_back() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let mut finished: HandleCallbackParam =
            serde_json::from_str(r#"{"logId":5,"logDateTim":1,"handleCode":200}"#).unwrap();
        finished.status = Some(RunOutcome::Succeeded);
        spool.put(&finished).unwrap();
        let leftovers = Leftovers {
            never_started: vec![],
            interrupted: vec![5],
            same_boot: true,
        };
        let handed_back =
            settle_leftovers(&spool, &std::collections::HashSet::new(), &leftovers).unwrap();
        assert!(handed_back.is_empty(), "{handed_back:?}");
        let statuses: Vec<Option<RunOutcome>> = spool
            .pending()
            .unwrap()
            .iter()
            .flat_map(|file| file.results.iter().map(|r| r.status.clone()))
            .collect();
        assert_eq!(
            statuses,
            vec![Some(RunOutcome::Succeeded)],
            "its own result only"
        );
    }
}
