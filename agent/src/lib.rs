//! jobfleet agent library: the admin ↔ agent wire protocol and the agent daemon.
pub mod protocol {}
