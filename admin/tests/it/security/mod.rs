//! The security suite (issue 12): one test per hole found by probing jobfleet as an attacker
//! and as a careless operator would. Each test failed on the code before the fix.

mod agent_host;
mod agent_identity;
mod login;
mod references;
