//! Every type that crosses the wire between admin and agent, defined once and used by both.
//!
//! This is XXL-Job 2.4's executor protocol: camelCase JSON, a `{code, msg, content}` envelope
//! answered with HTTP 200 even on failure, and the `XXL-JOB-ACCESS-TOKEN` header. jobfleet's
//! additions are optional fields, skipped when absent, so XXL-Job peers ignore them and we accept
//! messages without them. Depends on serde (and url, to check an http job's address) only.

mod block;
mod envelope;
#[cfg(test)]
mod fixtures;
mod glue;
mod http_request;
mod link;
mod messages;
mod outcome;
mod wire_enum;

pub mod labels;

pub use block::BlockStrategy;
pub use envelope::{CODE_FAIL, CODE_OK, Envelope, RawEnvelope};
pub use glue::GlueType;
pub use http_request::{
    BadRequest, DEFAULT_HTTP_STATUSES, HTTP_METHODS, HttpRequest, MAX_REQUEST_BYTES, Statuses,
};
pub use link::{
    AGENT_ADDRESS_HEADER, AGENT_GROUP_HEADER, BadFrame, CONNECT_PATH, CONNECT_SCHEME, Call, Frame,
    MAX_FRAME_BYTES, MAX_TAKE, RawFrame, TakeParam, TakeResult,
};
pub use messages::*;
pub use outcome::{RunOutcome, handle_code};

/// Header carrying the shared access token, both directions.
pub const ACCESS_TOKEN_HEADER: &str = "XXL-JOB-ACCESS-TOKEN";
/// jobfleet: header carrying the agent's own key (created at its first start, enrolled at its
/// first registration under the shared token) on every agent→admin call.
pub const AGENT_KEY_HEADER: &str = "X-Jobfleet-Agent-Key";
/// What XXL-Job answers for a missing or wrong token.
pub const WRONG_TOKEN_MSG: &str = "The access token is wrong.";

/// Paths on the admin, relative to its base URL (XXL-Job clients append `api/…`).
pub mod admin_path {
    pub const REGISTRY: &str = "api/registry";
    pub const REGISTRY_REMOVE: &str = "api/registryRemove";
    pub const CALLBACK: &str = "api/callback";
}

/// Paths on the agent, relative to its registered address.
pub mod agent_path {
    pub const BEAT: &str = "beat";
    pub const IDLE_BEAT: &str = "idleBeat";
    pub const RUN: &str = "run";
    pub const KILL: &str = "kill";
    pub const LOG: &str = "log";
    /// jobfleet: the runs this agent holds now (`HeldRuns`), for an admin recovering runs
    /// whose sending admin died before it stored the agent's answer.
    pub const HELD: &str = "held";
    /// jobfleet: several `run`s in one call, each with its `startInMs`: the runs one take found
    /// for the agent, sent ahead of their time (over its connection, or by HTTP to an agent the
    /// admin dials: `push`, or `auto` connected to another admin).
    pub const RUN_BATCH: &str = "runBatch";
}

/// `registryGroup` of an executor registration.
pub const REGISTRY_GROUP_EXECUTOR: &str = "EXECUTOR";
