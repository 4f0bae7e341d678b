//! A sweep while a run's spawn answer is unread: its own process (a test binary of one test), so
//! that the sweep, which ends every untagged child of the process that is no leader, has no other
//! test's children to end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail by panicking"
)]

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use jobfleet_agent::runner::contain::Containment;
use jobfleet_agent::runner::spawner::{Queued, Request, Strings};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// A lone run's answer is read later (with the next batch, or `COLLECT_AFTER` after the last
/// one); a sweep in between, which would end an untagged child that is no leader, first reads
/// every answer owed and finds the process a leader, so the run survives it. (Should the answer
/// come in before its batch's own read, the sweep finds a leader already: the test then proves
/// less, never fails wrongly.)
#[tokio::test]
async fn a_run_whose_spawn_answer_is_unread_survives_a_sweep() {
    let containment = Arc::new(Containment::default());
    let devnull = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let argv: Strings = ["sleep", "30"].into_iter().collect();
    let env = Strings::default();
    let request = Queued::new(&Request {
        program: c"/bin/sleep",
        argv: &argv,
        env: &env,
        cwd: c"/",
        output: devnull.as_raw_fd(),
        start_mark: None,
        cgroup_procs: &[],
        rlimits: &[],
        user: None,
    })
    .unwrap();
    let spawn = tokio::spawn({
        let containment = containment.clone();
        async move { containment.spawn(99, request).await }
    });
    // The spawn and its batch run (a batch of one is not waited for)...
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    // ...and the process starts, while the runtime, held here, reads no answer.
    std::thread::sleep(Duration::from_millis(300));
    containment.sweep(7, None, Signal::SIGKILL);
    let pid = spawn.await.unwrap().unwrap().pid;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    assert!(!stat.contains(") Z "), "the sweep killed the run: {stat}");
    nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let _guard = containment.reaping(pid);
    nix::sys::wait::waitpid(Pid::from_raw(pid), None).unwrap();
}
