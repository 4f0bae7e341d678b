//! Integration tests: the admin built in-process on a loopback port, driven over real HTTP,
//! on SQLite and (with `--features mysql`) on MariaDB.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail by panicking"
)]

mod support;

mod agent_connect;
mod agent_e2e;
mod agent_relay;
mod alerts;
mod api_auth;
mod api_bad_input;
mod api_groups_users_tokens;
mod api_jobs;
mod api_rate_limit;
mod cli;
mod cluster;
mod console;
mod fleet;
mod heartbeats;
mod http_jobs;
mod job_bulk;
mod jobfleet_cli;
mod jobs_as_code;
mod kept_logs;
mod netns;
mod reports;
mod scheduler;
mod security;
mod tls;
mod workflow_console;
mod workflows;
