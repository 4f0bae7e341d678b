//! jobfleet agent. The `protocol` module is the admin ↔ agent wire protocol (serde only, used by
//! both sides); `settings` is the layered-config machinery both configs use (feature
//! `settings`); everything else is the daemon, behind the default `daemon` feature.

#[cfg(feature = "idle-memory")]
pub mod idle_memory;
pub mod protocol;
#[cfg(feature = "settings")]
pub mod settings;

#[cfg(feature = "daemon")]
pub mod admin_client;
#[cfg(feature = "daemon")]
pub mod callback;
#[cfg(feature = "daemon")]
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod error;
#[cfg(feature = "daemon")]
pub mod handlers;
#[cfg(feature = "daemon")]
pub mod host;
#[cfg(feature = "daemon")]
pub mod identity;
#[cfg(feature = "daemon")]
pub mod journal;
#[cfg(feature = "daemon")]
pub mod link;
#[cfg(feature = "daemon")]
pub mod logs;
#[cfg(feature = "daemon")]
pub mod registry;
#[cfg(feature = "daemon")]
pub mod runner;
#[cfg(feature = "daemon")]
pub mod server;
#[cfg(feature = "daemon")]
pub mod spool;
#[cfg(feature = "daemon")]
pub mod tls;

/// Milliseconds since the Unix epoch.
#[cfg(feature = "daemon")]
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
