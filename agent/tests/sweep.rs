//! Sweeps and looks for strays while a run's spawn answer is unread: a process of their own (a
//! test binary), so that a sweep, which ends every untagged child of the process that is no
//! leader, has no other test's children to end; its tests take turns for the same reason.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail by panicking"
)]

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use jobfleet_agent::runner::contain::{self, Containment};
use jobfleet_agent::runner::spawner::{self, Queued, Request, Strings};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// One test at a time: each one's sweep would end the other's processes.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A request to run `program` with `args`, its output to `/dev/null`, untagged.
fn request(program: &std::ffi::CStr, args: &[&str]) -> Queued {
    let devnull = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let argv: Strings = args.iter().copied().collect();
    let env = Strings::default();
    Queued::new(&Request {
        program,
        argv: &argv,
        env: &env,
        cwd: c"/",
        output: devnull.as_raw_fd(),
        start_mark: None,
        cgroup_procs: &[],
        rlimits: &[],
        user: None,
    })
    .unwrap()
}

/// A request to run `true` whose process first writes its start mark into `marks`, as a run's
/// does: on a frozen file system it hangs there, before its `exec`.
fn marking_request(marks: &jobfleet_agent::runner::start_marks::StartMarks, run_id: i64) -> Queued {
    let devnull = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let marks_file = marks.file();
    let argv: Strings = ["true"].into_iter().collect();
    let env = Strings::default();
    Queued::new(&Request {
        program: c"/bin/true",
        argv: &argv,
        env: &env,
        cwd: c"/",
        output: devnull.as_raw_fd(),
        start_mark: Some((marks_file.as_raw_fd(), marks.take(run_id))),
        cgroup_procs: &[],
        rlimits: &[],
        user: None,
    })
    .unwrap()
}

/// This test's turn, a file system of its own to freeze, the start marks on it and two
/// spawners; none when not root (a loop mount needs root).
async fn beside_a_freezable_mount() -> Option<(
    tokio::sync::MutexGuard<'static, ()>,
    FreezableMount,
    jobfleet_agent::runner::start_marks::StartMarks,
    Arc<Containment>,
)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let turn = ONE_AT_A_TIME.lock().await;
    let frozen = FreezableMount::new();
    let marks = jobfleet_agent::runner::start_marks::StartMarks::open(&frozen.path()).unwrap();
    Some((turn, frozen, marks, Arc::new(Containment::with_spawners(2))))
}

/// Kills and reaps a child of the agent's (a leader or not).
fn end(containment: &Containment, pid: i32) {
    nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let _guard = containment.reaping(pid);
    nix::sys::wait::waitpid(Pid::from_raw(pid), None).unwrap();
}

/// The spawners alive: children of the forking thread.
fn spawners() -> Vec<i32> {
    let Some(forks) = spawner::forking_thread() else {
        return Vec::new();
    };
    std::fs::read_to_string(format!("/proc/self/task/{forks}/children"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .filter(|p| spawner::is_spawner(*p))
        .collect()
}

fn is_zombie_or_gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
}

/// A lone run's answer is read later (with the next batch, or `COLLECT_AFTER` after the last
/// one, `COLLECT_SOON` after a first batch); a sweep in between, which would end an untagged child that is no leader, first reads
/// every answer owed and finds the process a leader, so the run survives it. (Should the answer
/// come in before its batch's own read, the sweep finds a leader already: the test then proves
/// less, never fails wrongly.)
#[tokio::test]
async fn a_run_whose_spawn_answer_is_unread_survives_a_sweep() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let containment = Arc::new(Containment::default());
    let request = request(c"/bin/sleep", &["sleep", "30"]);
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
    end(&containment, pid);
}

/// Runs the spawner holds for their time (200, a millisecond apart) start while sweeps go on back
/// to back: a sweep pauses
/// the spawner and reads the answer of every process it started, so no run starting meanwhile
/// (untagged here: a sweep ends any untagged child of the agent that is no leader) is taken for an
/// orphan and ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_the_spawners_hold_survive_sweeps_as_they_start() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Two, as on a machine of two cores or more: a sweep pauses each that holds runs.
    let containment = Arc::new(Containment::with_spawners(2));
    let first = std::time::Instant::now() + Duration::from_millis(150);
    let spawns: Vec<_> = (0..200_u64)
        .map(|run| {
            let mut request = request(c"/bin/sleep", &["sleep", "0.5"]);
            request.start_at(first + Duration::from_millis(run));
            let containment = containment.clone();
            tokio::spawn(async move { containment.spawn(run.cast_signed(), request).await })
        })
        .collect();
    let sweeps = tokio::task::spawn_blocking({
        let containment = containment.clone();
        move || {
            let until = first + Duration::from_millis(300);
            let mut sweeps = 0;
            while std::time::Instant::now() < until {
                // For a run that has no process: it ends only what it takes for orphans.
                containment.sweep(-7, None, Signal::SIGKILL);
                sweeps += 1;
            }
            sweeps
        }
    })
    .await
    .unwrap();
    assert!(sweeps > 10, "{sweeps} sweeps: the test shows little");
    for spawn in spawns {
        let started = spawn.await.unwrap().unwrap();
        assert!(started.at >= first, "a held run started before its time");
        let pid = Pid::from_raw(started.pid);
        let _guard = containment.reaping(started.pid);
        // A run taken for an orphan is killed and reaped by the sweep (ECHILD here).
        let status = nix::sys::wait::waitpid(pid, None);
        assert!(
            matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
            "a sweep ended a run as it started: {status:?}"
        );
    }
}

/// The look for strays at a run's end reads only the main thread's children, where the kernel
/// puts the orphans of a subreaper and where no run is (runs are children of the thread that
/// forks the spawners): a run whose answer is unread is not taken for a stray, and a process a
/// run left behind is found.
#[tokio::test]
async fn the_look_for_strays_finds_orphans_and_never_an_unread_run() {
    let _turn = ONE_AT_A_TIME.lock().await;
    contain::become_subreaper().unwrap();
    let containment = Arc::new(Containment::default());
    let unread = tokio::spawn({
        let containment = containment.clone();
        let request = request(c"/bin/sleep", &["sleep", "30"]);
        async move { containment.spawn(41, request).await }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    std::thread::sleep(Duration::from_millis(300));
    // A look that counts reaps from before any: it reads the children whatever it saw last.
    assert!(
        !containment.has_strays(containment.reaped_so_far() + 1),
        "a run whose spawn answer is unread was taken for a stray"
    );
    let running = unread.await.unwrap().unwrap().pid;

    // A run that leaves `sleep 30` behind: its leader exits, the sleep becomes the agent's.
    let leaver = containment
        .spawn(42, request(c"/bin/sh", &["sh", "-c", "sleep 30 & exit 0"]))
        .await
        .unwrap()
        .pid;
    {
        let _guard = containment.reaping(leaver);
        nix::sys::wait::waitpid(Pid::from_raw(leaver), None).unwrap();
    }
    // The kernel re-parented the sleep when the leader exited, before the leader could be reaped.
    assert!(
        containment.has_strays(containment.reaped_so_far()),
        "the process the run left was not found"
    );
    let main_children =
        std::fs::read_to_string(format!("/proc/self/task/{}/children", std::process::id()))
            .unwrap();
    let main_children: Vec<i32> = main_children
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(
        main_children.len(),
        1,
        "the main thread holds the leftover alone, no run: {main_children:?} (run {running})"
    );
    assert_ne!(main_children[0], running);
    let ended = containment.sweep(42, None, Signal::SIGKILL);
    assert_eq!(ended, 1, "the sweep ends the leftover and nothing else");
    assert!(!is_zombie_or_gone(running), "the sweep ended a going run");
    assert!(!containment.has_strays(containment.reaped_so_far() + 1));

    end(&containment, running);
}

/// A start failed as "may have started" (its spawner died holding the request) may have left a
/// process with no known pid, a child of the forking thread, where the quick look for strays does
/// not read: the look then reads every run parent's children until one finds nothing.
#[tokio::test]
async fn after_a_start_that_may_have_happened_the_look_reads_every_run_parent() {
    let _turn = ONE_AT_A_TIME.lock().await;
    contain::become_subreaper().unwrap();
    // One spawner, so that the next run goes to the one stopped below.
    let containment = Arc::new(Containment::with_spawners(1));
    let spawners_before = spawners();
    // A process of the forking thread's that is no leader: what a spawner that died after
    // starting it, before answering, leaves.
    let unknown = containment
        .spawn(43, request(c"/bin/sleep", &["sleep", "30"]))
        .await
        .unwrap()
        .pid;
    drop(containment.reaping(unknown));
    assert!(
        !containment.has_strays(containment.reaped_so_far() + 1),
        "the quick look reads the main thread's children only"
    );

    // This table's spawner dies holding a request: that start may have happened.
    let ours: Vec<i32> = spawners()
        .into_iter()
        .filter(|p| !spawners_before.contains(p))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    let held = Pid::from_raw(ours[0]);
    nix::sys::signal::kill(held, Signal::SIGSTOP).unwrap();
    let doubtful = tokio::spawn({
        let containment = containment.clone();
        async move {
            containment
                .spawn(44, request(c"/bin/true", &["true"]))
                .await
        }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    nix::sys::signal::kill(held, Signal::SIGKILL).unwrap();
    let failed = doubtful.await.unwrap().unwrap_err();
    assert!(spawner::may_have_started(&failed), "{failed}");

    assert!(
        containment.has_strays(containment.reaped_so_far() + 1),
        "after a start that may have happened, the look reads the forking thread's children"
    );
    end(&containment, unknown);
    // A look that finds nothing there puts the quick look back.
    assert!(!containment.has_strays(containment.reaped_so_far() + 1));
    let again = containment
        .spawn(45, request(c"/bin/sleep", &["sleep", "30"]))
        .await
        .unwrap()
        .pid;
    drop(containment.reaping(again));
    assert!(
        !containment.has_strays(containment.reaped_so_far() + 1),
        "the quick look is back"
    );
    end(&containment, again);
}

/// A small ext4 file system of its own, loop-mounted, that a test can freeze: a write to it then
/// blocks until it is thawed. Thawed and unmounted when dropped.
struct FreezableMount {
    dir: tempfile::TempDir,
}

impl FreezableMount {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        run(
            "mkfs.ext4",
            &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
        );
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mount.as_os_str(),
            ],
        );
        Self { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }

    fn freeze(&self) {
        run("fsfreeze", &["-f".as_ref(), self.path().as_os_str()]);
    }
}

impl Drop for FreezableMount {
    fn drop(&mut self) {
        let mount = self.path();
        // Thawed already, unless the test failed before its thaw.
        let _ = std::process::Command::new("fsfreeze")
            .arg("-u")
            .arg(&mount)
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::process::Command::new("umount").arg(&mount).status();
    }
}

/// Thaws `frozen` after `delay`, on a thread of its own; the flag is set just before the thaw.
fn thaw_after(
    frozen: &FreezableMount,
    delay: Duration,
) -> (Arc<std::sync::atomic::AtomicBool>, Thaw) {
    let thawed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (early, asked) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn({
        let mount = frozen.path();
        let thawed = thawed.clone();
        move || {
            let _ = asked.recv_timeout(delay);
            thawed.store(true, std::sync::atomic::Ordering::SeqCst);
            run("fsfreeze", &["-u".as_ref(), mount.as_os_str()]);
        }
    });
    (thawed, Thaw { early, thread })
}

/// A thaw to come, after its delay or at `now`, whichever is first.
struct Thaw {
    early: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Thaw {
    /// Thaws now: what needed the file system frozen is checked (the delay is then a watchdog,
    /// long enough for a slow machine).
    fn now(&self) {
        let _ = self.early.send(());
    }

    fn join(self) -> std::thread::Result<()> {
        self.thread.join()
    }
}

/// Fails the test unless `thawed`: a hung start's answer came while it was not.
fn thawed_by_now(thawed: &std::sync::atomic::AtomicBool) {
    assert!(
        thawed.load(std::sync::atomic::Ordering::SeqCst),
        "the spawner answered inside its hung start: the test shows nothing"
    );
}

/// Fails the test when `thawed`: `what` waited for the hung start.
fn still_frozen(thawed: &std::sync::atomic::AtomicBool, what: &str) {
    assert!(
        !thawed.load(std::sync::atomic::Ordering::SeqCst),
        "{what} waited for the hung start"
    );
}

/// Answers with their places in the order asked.
type Placed<T> = Vec<(usize, T)>;

/// The answers of runs asked in turn starting with the second spawner's, with their places:
/// the second spawner's (even places), then the first's (odd).
fn by_spawner<T>(answers: Vec<T>) -> (Placed<T>, Placed<T>) {
    answers
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 2 == 0)
}

/// Runs a tool the test needs, failing the test with what it said.
fn run(program: &str, args: &[&std::ffi::OsStr]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A sweep while one spawner's run hangs before its `exec` (its start mark's write waits on a
/// frozen file system) and another spawner holds a run for later: the sweep waits for the first
/// before it pauses the second, so the pause cannot run out (the spawner's 10 s limit) while it
/// waits, and the held run, started at its time, is not taken for an orphan. Paused first, the
/// second spawner resumed by itself at 10 s, started the run at 12 s unseen, and the sweep killed
/// it at the thaw. Needs root (a loop mount); about 15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_survives_a_sweep_that_waits_for_a_hung_exec() {
    sweep_beside_a_hung_exec(false).await;
}

/// As above, but the spawner whose run hangs holds a run for later as well, so both are paused,
/// the one holding the run due at 12 s first: once the hung one answered at the thaw, the first
/// pause, asked 14 s before, is asked again, its answer comes after the held run's start, and
/// the run is not taken for an orphan. Without the second ask the first spawner resumed by
/// itself at 10 s, started the run at 12 s unseen, and the sweep killed it. Needs root; about 15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_survives_a_sweep_whose_pauses_wait_for_a_hung_exec() {
    sweep_beside_a_hung_exec(true).await;
}

/// The two tests above: a run held until 12 s by the first spawner, a run hung before its `exec`
/// until 14 s by the second, and a sweep from 0.3 s; with `both_hold`, each spawner also holds a
/// run due in a minute (withdrawn at the end).
async fn sweep_beside_a_hung_exec(both_hold: bool) {
    let Some((_turn, frozen, marks, containment)) = beside_a_freezable_mount().await else {
        return; // a loop mount needs root
    };
    let t0 = std::time::Instant::now();
    let due = t0 + Duration::from_secs(12);
    let mut held = request(c"/bin/sleep", &["sleep", "3"]);
    held.start_at(due);
    let hung = marking_request(&marks, 101);
    frozen.freeze();
    // Runs take turns: the held run (and the first run for later) go to the first spawner, the
    // hung one (and the second) to the second.
    let held_answer = containment.ask(100, held);
    let hung_answer = containment.ask(101, hung);
    let later_answers: Vec<_> = if both_hold {
        [102, 103]
            .into_iter()
            .map(|run_id| {
                let mut later = request(c"/bin/true", &["true"]);
                later.start_at(t0 + Duration::from_secs(60));
                (run_id, containment.ask(run_id, later))
            })
            .collect()
    } else {
        Vec::new()
    };
    let (_, thaw) = thaw_after(&frozen, Duration::from_secs(14));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sweep_began = std::time::Instant::now();
    let signalled = tokio::task::spawn_blocking({
        let containment = containment.clone();
        move || containment.sweep(-7, None, Signal::SIGKILL)
    })
    .await
    .unwrap();
    let sweep_took = sweep_began.elapsed();
    thaw.join().unwrap();
    // From 0.3 s to the thaw at 14 s: it waited for the hung exec, past the pause limit.
    assert!(
        sweep_took >= Duration::from_secs(13),
        "the sweep took {sweep_took:?}, not waiting for the hung exec: the test shows nothing"
    );
    let started = Containment::started(held_answer).await.unwrap();
    assert!(started.at >= due, "the held run started before its time");
    let status = {
        let _guard = containment.reaping(started.pid);
        // A run taken for an orphan was killed and reaped by the sweep (ECHILD here).
        nix::sys::wait::waitpid(Pid::from_raw(started.pid), None)
    };
    assert_eq!(signalled, 0, "the sweep ended the held run: {status:?}");
    assert!(
        matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
        "{status:?}"
    );
    let hung_pid = Containment::started(hung_answer).await.unwrap().pid;
    {
        let _guard = containment.reaping(hung_pid);
        nix::sys::wait::waitpid(Pid::from_raw(hung_pid), None).unwrap();
    }
    for (run_id, answer) in later_answers {
        containment.withdraw(run_id);
        let withdrawn = Containment::started(answer).await.unwrap_err();
        assert!(spawner::was_withdrawn(&withdrawn), "{withdrawn}");
    }
}

/// A withdrawal (a run killed before its time) does not wait for the spawner holding the run
/// while that spawner is busy with a start hung before its `exec` (its start mark's write waits on
/// a frozen file system): the caller, the agent's runtime thread, goes on at once, and the run's
/// answer, withdrawn, comes once the spawner is free. Waited for, the withdrawal held the agent's
/// every run until the thaw. Needs root (a loop mount); about 6 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_does_not_wait_for_a_spawner_hung_in_a_start() {
    let Some((_turn, frozen, marks, containment)) = beside_a_freezable_mount().await else {
        return; // a loop mount needs root
    };
    let hung = marking_request(&marks, 201);
    let later_at = std::time::Instant::now() + Duration::from_secs(60);
    let mut later = [202, 203].map(|_| {
        let mut request = request(c"/bin/true", &["true"]);
        request.start_at(later_at);
        Some(request)
    });
    frozen.freeze();
    // Runs take turns: the hung run and the second run for later go to the first spawner.
    let hung_answer = containment.ask(201, hung);
    let other_answer = containment.ask(202, later[0].take().unwrap());
    let later_answer = containment.ask(203, later[1].take().unwrap());
    let (thawed, thaw) = thaw_after(&frozen, Duration::from_secs(5));
    // The batch is out and the first spawner inside the hung start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    containment.withdraw(203);
    still_frozen(&thawed, "the withdrawal");
    let withdrawn = Containment::started(later_answer).await.unwrap_err();
    assert!(spawner::was_withdrawn(&withdrawn), "{withdrawn}");
    thawed_by_now(&thawed);
    thaw.join().unwrap();
    let hung_pid = Containment::started(hung_answer).await.unwrap().pid;
    {
        let _guard = containment.reaping(hung_pid);
        nix::sys::wait::waitpid(Pid::from_raw(hung_pid), None).unwrap();
    }
    containment.withdraw(202);
    let withdrawn = Containment::started(other_answer).await.unwrap_err();
    assert!(spawner::was_withdrawn(&withdrawn), "{withdrawn}");
}

/// A burst's batch (`WAIT_FROM` runs due now or more) waits for its answers on the agent's
/// runtime thread, but not past `BURST_WAIT_AT_MOST` for a spawner busy with a start hung before
/// its `exec` (its start mark's write waits on a frozen file system): the other spawner's runs
/// are told their starts while the file system is still frozen, and the hung spawner's, answered
/// after the thaw, come as any late answer does. The next burst goes to the other spawner alone
/// and is told its starts at once too. Waited for, the first burst held the agent's every run
/// until the thaw; given half the next one, the stuck spawner held that half. One thread, as the
/// agent's runtime: a blocked batch blocks the test too. Needs root (a loop mount); about 6 s.
#[tokio::test(flavor = "current_thread")]
async fn a_burst_does_not_wait_for_a_spawner_hung_in_a_start() {
    let Some((_turn, frozen, marks, containment)) = beside_a_freezable_mount().await else {
        return; // a loop mount needs root
    };
    frozen.freeze();
    // Runs take turns: the hung run and every other one after it go to the first spawner, the
    // rest to the second. Asked with no await in between, they go out as one batch.
    let hung_answer = containment.ask(301, marking_request(&marks, 301));
    let burst = |first: i64| -> Vec<_> {
        (first..first + 16)
            .map(|run_id| containment.ask(run_id, request(c"/bin/true", &["true"])))
            .collect()
    };
    let answers = burst(302);
    let (thawed, thaw) = thaw_after(&frozen, Duration::from_secs(5));
    // Runs 302, 304, … went to the second spawner.
    let (second_spawners, first_spawners) = by_spawner(answers);
    let told_at_once = |what: &str| still_frozen(&thawed, what);
    for (_, answer) in second_spawners {
        let started = Containment::started(answer).await.unwrap();
        told_at_once("the burst");
        end(&containment, started.pid);
    }
    for answer in burst(400) {
        let started = Containment::started(answer).await.unwrap();
        told_at_once("the next burst");
        end(&containment, started.pid);
    }
    let hung_pid = Containment::started(hung_answer).await.unwrap().pid;
    thawed_by_now(&thawed);
    thaw.join().unwrap();
    end(&containment, hung_pid);
    for (_, answer) in first_spawners {
        let pid = Containment::started(answer).await.unwrap().pid;
        end(&containment, pid);
    }
}

/// With one spawner (a one-core host's), a run whose start hangs before its `exec` (its start
/// mark's write waits on a frozen file system) leaves no spawner to start the next runs: once it
/// is stuck (`spawner::OVERDUE_AFTER_NS`), a spare one starts them while the file system is
/// still frozen, and goes again once the first answers. Without the spare every run of the
/// agent waited for the thaw. Needs root (a loop mount); about 2 s.
#[tokio::test(flavor = "current_thread")]
async fn a_lone_spawner_stuck_in_a_start_gets_a_spare() {
    let Some((_turn, frozen, marks, _)) = beside_a_freezable_mount().await else {
        return; // a loop mount needs root
    };
    let containment = Arc::new(Containment::with_spawners(1));
    frozen.freeze();
    let hung_answer = containment.ask(501, marking_request(&marks, 501));
    let (thawed, thaw) = thaw_after(&frozen, Duration::from_secs(30));
    // Past the point where the spawner counts as stuck.
    tokio::time::sleep(
        Duration::from_nanos(spawner::OVERDUE_AFTER_NS) + Duration::from_millis(200),
    )
    .await;
    for run_id in 502..505 {
        let started =
            Containment::started(containment.ask(run_id, request(c"/bin/true", &["true"])))
                .await
                .unwrap();
        still_frozen(&thawed, &format!("run {run_id}"));
        end(&containment, started.pid);
    }
    assert_eq!(spawners().len(), 2, "one spare beside the stuck spawner");
    thaw.now();
    let hung_pid = Containment::started(hung_answer).await.unwrap().pid;
    thawed_by_now(&thawed);
    thaw.join().unwrap();
    end(&containment, hung_pid);
    // The first spawner answers again: the spare, idle, goes with the next batch.
    let started = Containment::started(containment.ask(505, request(c"/bin/true", &["true"])))
        .await
        .unwrap();
    end(&containment, started.pid);
    assert_eq!(spawners().len(), 1, "the spare went once it was not needed");
}

/// The host's default socket buffer: about what a spawner's socket holds before a write waits.
fn socket_buffer() -> usize {
    std::fs::read_to_string("/proc/sys/net/core/wmem_default")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(212_992)
}

/// `beside_a_freezable_mount`, frozen, with run `run_id` hung in the first spawner's start (its
/// start mark's write waits on the frozen file system), and the answer it will get.
async fn with_the_first_spawner_hung(
    run_id: i64,
) -> Option<(
    tokio::sync::MutexGuard<'static, ()>,
    FreezableMount,
    jobfleet_agent::runner::start_marks::StartMarks,
    Arc<Containment>,
    tokio::sync::oneshot::Receiver<std::io::Result<spawner::Started>>,
)> {
    let (turn, frozen, marks, containment) = beside_a_freezable_mount().await?;
    frozen.freeze();
    let hung_answer = containment.ask(run_id, marking_request(&marks, run_id));
    // Out before what follows, so that the first spawner is inside the hung start.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Some((turn, frozen, marks, containment, hung_answer))
}

/// A burst's share for a spawner that has just hung in a start (its start mark's write waits on
/// a frozen file system) is more than its socket holds: the spawner reads none of it until the
/// thaw, and a blocking write held the agent's runtime thread, every run of the agent, that
/// long. Now the write waits for room half a second at most, and the rest of the share goes to
/// the other spawner, told its starts while the file system is still frozen. A withdrawal of a
/// run in the full socket does not wait for room either. One thread, as the agent's runtime.
/// Needs root (a loop mount); about 3 s.
#[tokio::test(flavor = "current_thread")]
async fn a_share_a_hung_spawner_has_no_room_for_goes_to_another() {
    let Some((_turn, frozen, _marks, containment, hung_answer)) =
        with_the_first_spawner_hung(601).await
    else {
        return; // a loop mount needs root
    };
    // Far more than a socket holds (a request takes a kilobyte or more of its buffer, with its
    // overhead): half of them are the first spawner's turns.
    // Each request holds a descriptor until it is sent.
    let (_, most_files) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        most_files,
        most_files,
    )
    .unwrap();
    let count = (socket_buffer() / 256).max(1600) & !1;
    let answers: Vec<_> = (602..602 + count as i64)
        .map(|run_id| containment.ask(run_id, request(c"/bin/true", &["true"])))
        .collect();
    let (thawed, thaw) = thaw_after(&frozen, Duration::from_secs(30));
    // Runs 602, 604, … went to the second spawner.
    let (other_spawners, mut hung_spawners) = by_spawner(answers);
    let told_at_once = |what: &str| still_frozen(&thawed, what);
    for (_, answer) in other_spawners {
        let started = Containment::started(answer).await.unwrap();
        told_at_once("the other spawner's share");
        end(&containment, started.pid);
    }
    // The last of the hung spawner's turns found no room there.
    let (_, last) = hung_spawners.pop().unwrap();
    let started = Containment::started(last).await.unwrap();
    told_at_once("a run the hung spawner had no room for");
    end(&containment, started.pid);
    // Its first turn, run 603, is in its full socket: the withdrawal has no room either, and
    // goes out once there is.
    containment.withdraw(603);
    told_at_once("the withdrawal from the hung spawner's full socket");
    thaw.now();
    for (i, answer) in hung_spawners {
        match Containment::started(answer).await {
            Ok(started) => end(&containment, started.pid),
            // The spawner may read it before it starts the run, or after.
            Err(e) if i == 1 => assert!(spawner::was_withdrawn(&e), "{e}"),
            Err(e) => panic!("run {}: {e}", 602 + i),
        }
    }
    let hung_pid = Containment::started(hung_answer).await.unwrap().pid;
    thawed_by_now(&thawed);
    thaw.join().unwrap();
    end(&containment, hung_pid);
}

/// A request larger than a spawner's socket holds, for a spawner that has just hung in a start,
/// goes out in part: its rest waits for room half a second at most, then the spawner's stream is
/// shut for writing (at its end the spawner drops the part, answers what it held, and exits) and
/// the run goes to the other spawner, started while the file system is still frozen. After the
/// thaw, once the first one answered, a fresh spawner takes its place. One thread, as the
/// agent's runtime. Needs root (a loop mount); about 2 s.
#[tokio::test(flavor = "current_thread")]
async fn a_large_request_cut_off_by_a_hung_spawner_goes_to_another() {
    let Some((_turn, frozen, _marks, containment, hung_answer)) =
        with_the_first_spawner_hung(701).await
    else {
        return; // a loop mount needs root
    };
    // Arguments of 100 KiB each (`execve` takes up to 128 KiB an argument) to well past the
    // socket's buffer.
    let buffer = socket_buffer();
    let argument = "x".repeat(100 << 10);
    let mut args = vec!["true"];
    // At most 1.2 MiB in all, under `execve`'s limit (a quarter of an 8 MiB stack).
    args.extend(std::iter::repeat_n(
        argument.as_str(),
        (buffer / (100 << 10) + 2).min(12),
    ));
    // The small one is the second spawner's turn, the large one the hung spawner's.
    let small = containment.ask(702, request(c"/bin/true", &["true"]));
    let large = containment.ask(703, request(c"/bin/true", &args));
    let (thawed, thaw) = thaw_after(&frozen, Duration::from_secs(30));
    for answer in [small, large] {
        let started = Containment::started(answer).await.unwrap();
        still_frozen(&thawed, "a run");
        end(&containment, started.pid);
    }
    // The cut-off one and the other.
    let mut before = spawners();
    thaw.now();
    let hung_pid = Containment::started(hung_answer).await.unwrap().pid;
    thawed_by_now(&thawed);
    thaw.join().unwrap();
    end(&containment, hung_pid);
    for run_id in 704..708 {
        let started =
            Containment::started(containment.ask(run_id, request(c"/bin/true", &["true"])))
                .await
                .unwrap();
        end(&containment, started.pid);
    }
    let mut after = spawners();
    before.sort_unstable();
    after.sort_unstable();
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        after.iter().filter(|pid| before.contains(pid)).count(),
        1,
        "a fresh spawner took the cut-off one's place: {before:?} then {after:?}"
    );
}
