//! The operations, shared by the console and the open API. Each takes the app state, an
//! authorised actor (or a proof from `auth::rbac`) and validated input; it opens one
//! transaction, calls `db::*`, and writes the audit row in that same transaction.

pub mod agents;
pub mod alerts;
pub mod audit;
pub mod auth;
pub mod dashboard;
pub mod fleet;
pub mod groups;
pub mod job_bulk;
pub mod jobs;
pub mod jobs_as_code;
pub mod reports;
pub mod runs;
pub mod sessions;
pub mod tokens;
pub mod users;
pub mod workflows;

use serde::Serialize;

/// The page request every `list` takes; handlers build it here, never from `db`.
pub use crate::db::Page;

/// A page of results with the total the filter matches.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Paged<T> {
    pub items: Vec<T>,
    pub total: i64,
    pub limit: i64,
    pub offset: i64,
}
