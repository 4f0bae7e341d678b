//! Stopping a run's whole process tree: TERM to its process group, KILL after a grace period.

use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Signals the group; `Ok(false)` when the group no longer exists.
pub fn signal_group(pgid: i32, signal: Signal) -> bool {
    killpg(Pid::from_raw(pgid), signal).is_ok()
}

/// TERM now, KILL after `grace` unless `exited` resolves first.
pub async fn terminate_group(
    pgid: i32,
    grace: Duration,
    exited: impl std::future::Future<Output = ()>,
) {
    if !signal_group(pgid, Signal::SIGTERM) {
        return;
    }
    tokio::select! {
        () = exited => {}
        () = tokio::time::sleep(grace) => {}
    }
    // Grandchildren may still be alive even when the leader exited: always finish the group.
    signal_group(pgid, Signal::SIGKILL);
}
