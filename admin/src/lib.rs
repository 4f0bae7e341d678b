//! jobfleet admin: the schedule, the registry of agents, dispatch, callbacks, the console and
//! the open API. `main.rs` only parses the command line and calls into here.

pub mod agent_link;
pub mod alert;
pub mod api;
pub mod assets;
pub mod audit;
pub mod auth;
pub mod callback;
pub mod clock;
pub mod cluster_relay;
pub mod config;
pub mod db;
pub mod dispatch;
pub mod domain;
pub mod error;
pub mod group_commit;
pub mod http;
pub mod lifecycle;
pub mod metrics;
pub mod registry_batch;
pub mod rpc;
pub mod scheduler;
pub mod service;
pub mod startup;
pub mod state;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod testing;
pub mod tls;
pub mod web;
pub mod worker;
