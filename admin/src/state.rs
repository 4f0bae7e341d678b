//! The state request handlers and workers share, passed explicitly (there is no global).
//! A leaf: it names the parts' types and imports nothing that takes an `AppState`, so every
//! layer may depend on it without closing a circle.

use std::sync::Arc;
use std::time::Instant;

use jobfleet_agent::protocol::HandleCallbackParam;

use crate::alert::outbox::Alerts;
use crate::auth::api_limit::ApiLimiter;
use crate::auth::jwt::JwtKeys;
use crate::auth::password::HashGate;
use crate::auth::rate_limit::RateLimiter;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;
use crate::dispatch::client::AgentClient;
use crate::dispatch::routing::Router;
use crate::domain::graph_cache::GraphCache;
use crate::error::Error;
use crate::group_commit::Batcher;
use crate::metrics::Metrics;
use crate::registry_batch::RegistryBatch;
use crate::scheduler::handle::SchedulerHandle;

/// Everything request handlers and workers share. Passed explicitly; there is no global.
#[derive(Debug)]
pub struct AppState {
    pub db: Db,
    pub clock: SharedClock,
    pub jwt: JwtKeys,
    pub jwt_ttl_ms: i64,
    /// The password-guessing limit of every surface that checks a password.
    pub login_limiter: RateLimiter,
    /// The open API's request limits per token, user or client address.
    pub api_limiter: ApiLimiter,
    /// Bounds concurrent password hashing (memory and CPU).
    pub password_gate: HashGate,
    pub config: Arc<Config>,
    /// The token agents must present, and that we present to them.
    pub access_token: String,
    pub agents: AgentClient,
    pub scheduler: SchedulerHandle,
    pub router: Arc<Router>,
    pub metrics: Arc<Metrics>,
    /// Alert delivery: the worker's wake-up, the webhook client, the SMTP mailer.
    pub alerts: Alerts,
    /// The graphs of workflow runs in progress, so a step does not parse its run's definition.
    pub workflow_graphs: Arc<GraphCache>,
    /// The agents' heartbeats and deregistrations waiting to be written, a batch per transaction.
    pub registry: Arc<RegistryBatch>,
    /// The agents' results waiting to be stored, the requests that came together in one
    /// transaction (`callback`).
    pub results: Arc<ResultsBatch>,
}

/// One request's results as an agent sent them, waiting for its group's transaction.
#[derive(Debug)]
pub struct Reported {
    pub results: Vec<HandleCallbackParam>,
    /// The agent key it came with; `None` from an XXL-Job executor.
    pub key: Option<String>,
    /// When it arrived: by the admin's clock, the time its transitions are dated (so a wait for
    /// the transaction counts in a workflow's step), and for the dispatch latency of the runs it
    /// starts.
    pub arrived_ms: i64,
    pub arrived: Instant,
}

/// The results' group commit: no pause (a result's dependent runs wait for it), so requests
/// share a transaction when they came while the one before was being stored.
pub type ResultsBatch = Batcher<Reported, Result<(), Error>>;
