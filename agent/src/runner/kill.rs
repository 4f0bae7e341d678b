//! Signals to a run's process group. The whole tree, escapees included, is `contain`'s sweep;
//! TERM first, KILL after the grace period (see `Runner::stop_and_wait`).

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Signals the group; `Ok(false)` when the group no longer exists.
pub fn signal_group(pgid: i32, signal: Signal) -> bool {
    killpg(Pid::from_raw(pgid), signal).is_ok()
}
