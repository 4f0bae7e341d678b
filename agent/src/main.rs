//! `jobfleet-agent`: parses the command line and runs the daemon.

use std::process::ExitCode;

use clap::Parser;
use jobfleet_agent::config::{Cli, Config};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli, std::env::vars().collect()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jobfleet-agent: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        println!("jobfleet-agent: the configuration is valid");
        return ExitCode::SUCCESS;
    }
    // Before any other thread or allocation of the daemon: the spawner (forked by a thread this
    // starts for the purpose) is a copy of this process as it is now, and the smaller it is, the
    // smaller the peak each run reports.
    if let Err(e) = jobfleet_agent::runner::spawner::start(jobfleet_agent::runner::spawner::count())
    {
        eprintln!("jobfleet-agent: cannot start the spawner: {e}");
        return ExitCode::from(1);
    }
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_target(false)
        .init();
    // One thread is plenty: the HTTP server has its own, and runs are waited for here, through
    // their output's end or a pidfd, without a thread of their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // The blocking threads (journal and spool writes, sweeps) yield to this one as the
        // spawner does: woken by it, they no longer take its core in the middle of its turn.
        // Named so that an operator, and a test, tells them from the HTTP server's runtime's.
        .thread_name("jobfleet-block")
        .on_thread_start(|| {
            jobfleet_agent::runner::spawner::yield_to_the_agent();
        })
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("jobfleet-agent: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(jobfleet_agent::daemon::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ jobfleet_agent::error::Error::Refused(_)) => {
            eprintln!("jobfleet-agent: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("jobfleet-agent: {e:#}");
            ExitCode::from(1)
        }
    }
}
