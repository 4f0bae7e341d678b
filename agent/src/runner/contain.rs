//! Containment of every run, limits or not: a timeout, a kill or the run's end stops all of its
//! descendants, including those that left its process group (`setsid`, double forks, daemons).
//!
//! The agent is a child subreaper, so a run's orphans are re-parented to the agent instead of
//! init and stay in its process tree. Each run's environment carries `JOBFLEET_RUN_ID`, which
//! its descendants inherit. A sweep for a run signals the run leader's whole tree, and every
//! child of the agent that is not a run leader and whose tag names that run, names a run that
//! is no longer going, or is missing (a job that scrubbed its environment), with their trees.
//! Nothing of this is on the start path: a run starts exactly as before, and the cost is a few
//! reads of `/proc` when a run ends. A cgroup, where a run has one, is swept as well (see
//! `limits`). A job running as root can still escape on purpose (it can do anything); this
//! stops careless escapes and everything a `run_as` user can do.
//!
//! Invariant: a pid in the leader table is never reaped here (its own waiter reaps it), and a
//! sweep never mistakes a just-spawned leader for an orphan: spawns go to the spawners in batches
//! (see `spawner`; consecutive runs take turns between them) under the table's lock, and a sweep
//! first reads, under the same hold of the lock, every answer each spawner still owes for a
//! process it started and enters those leaders (a spawner that holds runs for later is paused
//! meanwhile: none starts until the look is done). The look for strays at a
//! run's end reads only the main thread's children, where no run is, unless it cannot rely on
//! that (`has_strays`).

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::spawner::{Spawner, Started};

/// The tag every run's environment carries.
pub const RUN_TAG: &str = "JOBFLEET_RUN_ID";
/// Rounds of a sweep: killing an orphan re-parents its children to the agent, which the next
/// round finds.
const ROUNDS: usize = 8;
/// Most of a process's environment read to find the tag.
const MAX_ENVIRON: u64 = 1024 * 1024;

/// Makes this process the subreaper of its descendants.
///
/// # Errors
/// When the kernel refuses (Linux before 3.4).
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// How long after the last batch the answers still owed are read when nothing else woke the
/// agent meanwhile (again as long if an answer was not in yet). About this long after its start
/// (or until the next batch, at a steadier rate; later on a busy agent) a run's pid is unknown:
/// its timeout starts then, a kill acts then, and its exit is seen then at the earliest (a pidfd
/// of an exited child is ready at once), so a shorter run's `finished_ms` is about that late
/// while runs come closer together than `QUIET`.
/// Each batch pushes the read back, so runs closer together than this cost no timer's wake-up;
/// runs further apart cost one each, as the wait for each answer did before. A run sent ahead of
/// its time answers once it started: the read waits this long after the time of the first owed. Near the spawner's
/// pace it holds its answers while requests keep coming (up to `spawner::MAX_BATCH` of them), so
/// a pid can then stay unread for that many starts.
const COLLECT_AFTER: Duration = Duration::from_millis(5);
/// How soon the answers owed are read instead, after a batch that came `QUIET` or longer after
/// the one before: at such a rate each run costs the agent a wake-up for its answer anyway, and
/// reading it early has the run's exit seen when it happens, so that a short run's `finished_ms`
/// is not `COLLECT_AFTER` late where nobody gains from the wait.
const COLLECT_SOON: Duration = Duration::from_millis(1);
const QUIET: Duration = Duration::from_millis(20);

/// How long after it was asked a spawner's pause is asked again before a look at the agent's
/// children (`enter_every_leader`): half the spawner's own limit, so that the look, milliseconds
/// long, comes at least that long before any pause runs out.
const RENEW_PAUSE_AFTER_NS: u64 = super::spawner::PAUSE_AT_MOST_NS / 2;

/// The fewest runs in a batch whose answers the agent waits for (a burst's batches). Fewer come
/// due together now and then at a steady rate, and each wait was a blocking read of the agent's.
const WAIT_FROM: usize = 8;

/// How long a burst's batch waits for its answers at most (`WAIT_FROM`), on the agent's runtime
/// thread: a spawner starts a batch of hundreds within a fraction of this, and one hung in a
/// start (an `exec` on a frozen file system) is stuck by then (`Spawner::stuck`): it is not
/// waited for again, nor given runs while another spawner is not stuck, until its overdue
/// answers are read; they come to `collect_soon` meanwhile, as a smaller batch's do.
const BURST_WAIT_AT_MOST: Duration = Duration::from_nanos(super::spawner::OVERDUE_AFTER_NS);

/// Most spawners added beside those the agent keeps while every one is stuck in a start
/// (`Spawner::stuck`): each takes the runs while the others' starts hang (a job's program, cwd
/// or start mark on a frozen or unanswering file system), one stuck start each. Past them,
/// runs queue behind the hung starts until one ends.
const MOST_SPARES: usize = 4;

/// How soon runs no spawner had room for (`spawner::NoRoom`) are sent again when no new run
/// comes first: by then the spawner that took none is stuck, and passed over or spared.
const RETRY_NO_ROOM_AFTER: Duration = Duration::from_millis(100);

/// Which answers a read of the spawners takes.
#[derive(Clone, Copy)]
enum Answers {
    /// Those in, waiting for none.
    In,
    /// Every one owed for a request due by now, waiting as long as that takes.
    Due,
    /// As `Due`, but waiting no later than the instant (`Spawner::collect_by`).
    DueBy(std::time::Instant),
}

impl Answers {
    /// `In` for a spawner that is paused (every answer of what it started is in), else `Due`.
    fn due_unless(paused: bool) -> Self {
        if paused { Self::In } else { Self::Due }
    }
}

/// A spawn waiting for the next batch.
struct Waiting {
    run_id: i64,
    request: super::spawner::Queued,
    started: oneshot::Sender<std::io::Result<Started>>,
}

/// A spawn whose request a spawner has and whose answer is not read yet.
struct Owed {
    run_id: i64,
    started: oneshot::Sender<std::io::Result<Started>>,
}

/// The spawners, and the spawns they owe answers for, by spawner (its place in `spawners`) and
/// request number.
struct Spawning {
    /// Requests go round them in turn (`next`): consecutive runs start side by side. The first
    /// `kept` are the agent's own; any after them are spares (`MOST_SPARES`).
    spawners: Vec<Spawner>,
    kept: usize,
    /// `Spawner::unsure` of the spares gone: their processes of unknown pid may be there still.
    retired_unsure: u64,
    /// The runs of a batch found no spawner with room, and it was said.
    warned_no_room: bool,
    next: usize,
    owed: HashMap<(usize, u64), Owed>,
    /// A task will read the answers owed (`collect_soon`).
    collecting: bool,
    /// When the last batch went out.
    last_batch: Option<std::time::Instant>,
    /// How long after the last batch `collect_soon` reads: `COLLECT_AFTER` or `COLLECT_SOON`.
    collect_after: Duration,
}

impl Spawning {
    fn with_spawners(count: usize) -> Self {
        Self {
            spawners: (0..count.max(1)).map(|_| Spawner::new()).collect(),
            kept: count.max(1),
            retired_unsure: 0,
            warned_no_room: false,
            next: 0,
            owed: HashMap::new(),
            collecting: false,
            last_batch: None,
            collect_after: COLLECT_AFTER,
        }
    }

    /// Starts that may have happened with no pid known, over every spawner (`Spawner::unsure`).
    fn unsure(&self) -> u64 {
        self.retired_unsure + self.spawners.iter().map(Spawner::unsure).sum::<u64>()
    }

    /// Whether each spawner is stuck in a start, after a read of the answers in of those that
    /// look so (a spawner whose answers came, unread, is not).
    fn stuck(
        &mut self,
        now_ns: u64,
        leaders: &mut HashMap<i32, i64>,
        answered: &mut Vec<Answered>,
    ) -> Vec<bool> {
        (0..self.spawners.len())
            .map(|i| {
                if !self.spawners[i].stuck(now_ns) {
                    return false;
                }
                Containment::read_answers_of(self, i, leaders, Answers::In, answered);
                self.spawners[i].stuck(now_ns)
            })
            .collect()
    }

    /// Adds a spare spawner when every one is stuck in a start (`MOST_SPARES` at most): a
    /// spawner reads no request until its hung start ends, so on a host with one spawner (one
    /// core) a single run whose `exec` waits on a frozen file system held every other run of the
    /// agent behind it. Once one of the agent's own is not stuck, the spares get no new run
    /// (marked stuck here) and go again, from the last, when they owe nothing.
    fn spare_for(&mut self, stuck: &mut Vec<bool>) {
        let own_free = stuck[..self.kept].iter().any(|&stuck| !stuck);
        while self.spawners.len() > self.kept
            && own_free
            && self.spawners.last().is_some_and(|spare| !spare.owes())
        {
            // Its process ends with it, idle: it owes nothing.
            if let Some(spare) = self.spawners.pop() {
                self.retired_unsure += spare.unsure();
            }
            stuck.pop();
            self.next %= self.spawners.len();
        }
        if own_free {
            for spare in &mut stuck[self.kept..] {
                *spare = true;
            }
        }
        if stuck.iter().all(|&stuck| stuck) && self.spawners.len() < self.kept + MOST_SPARES {
            tracing::warn!(
                spawners = self.spawners.len(),
                "Every spawner is stuck in a start (a job's program, folder or start mark on a hung file system?); a spare one starts the runs meanwhile"
            );
            self.next = self.spawners.len();
            self.spawners.push(Spawner::new());
            stuck.push(false);
        }
    }
}

/// An answer read and the spawn it is for, handed over once the locks are released.
type Answered = (
    oneshot::Sender<std::io::Result<Started>>,
    std::io::Result<Started>,
);

/// The run leaders this agent has spawned and not yet reaped, by pid.
pub struct Containment {
    leaders: Mutex<HashMap<i32, i64>>,
    /// Spawns asked for since the last batch went out.
    waiting: Mutex<Vec<Waiting>>,
    /// Taken after `leaders`, never before it.
    spawning: Mutex<Spawning>,
    /// A batch went out: `collect_soon` waits `COLLECT_AFTER` (or `COLLECT_SOON`) from now.
    batch_sent: tokio::sync::Notify,
    /// Leaders reaped so far.
    reaps: AtomicU64,
    /// A look for strays found none after this many reaps (`has_strays`).
    clean_through: AtomicU64,
    /// A look for strays through every run parent's children found none after the spawner had
    /// failed this many starts as "may have started" (`Spawner::unsure`).
    unsure_clean_through: AtomicU64,
}

/// A pause of the spawners for a look at the agent's children (`enter_every_leader`): those
/// paused resume when this is dropped, however the look ended.
struct Pause<'a> {
    containment: &'a Containment,
    paused: Vec<usize>,
}

impl Drop for Pause<'_> {
    fn drop(&mut self) {
        if self.paused.is_empty() {
            return;
        }
        let mut spawning = self.containment.spawning();
        for &i in &self.paused {
            spawning.spawners[i].resume();
        }
    }
}

impl Default for Containment {
    /// With as many spawners as the agent keeps (`spawner::count`).
    fn default() -> Self {
        Self::with_spawners(super::spawner::count())
    }
}

/// A run id no run has: `orphans` for it finds the orphans of every ended run and the untagged.
const NO_RUN: i64 = i64::MIN;

/// The direct children of `pid` (all its threads'), from `/proc`.
fn children(pid: &str) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        read_children(&task.path().join("children"), &mut out);
    }
    out
}

fn read_children(path: &std::path::Path, out: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(path) {
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
}

/// The agent's children a sweep looks at, read from a few threads instead of all of them (the
/// agent's blocking pool can hold dozens of threads, and reading every thread's list at every run's
/// end cost more than the run's start): the kernel re-parents an orphan to its subreaper's first
/// live thread, the main one, and a run is the child of the thread that forked its spawner.
/// Nothing else of the agent starts processes.
fn agent_children() -> Vec<i32> {
    let mut files = CHILDREN_FILES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let files = files.get_or_insert_with(ChildrenFiles::of_this_process);
    let mut threads = super::spawner::run_parent_threads();
    threads.retain(|t| *t != files.main);
    threads.insert(0, files.main);
    files.open.retain(|thread, _| threads.contains(thread));
    let mut out = Vec::new();
    for thread in threads {
        files.read(thread, &mut out);
    }
    out
}

/// Whether the main thread's children are the agent's orphans only: no spawner was forked from
/// it, so no run is its child (see `spawner::fork_spawner`), and the kernel re-parents orphans
/// to a subreaper's first live thread (Linux 3.19 and later, seen once by
/// `spawner::an_orphan_lands_on_the_main_thread`; before, to the thread that was the subreaper
/// ancestor, here the forking thread).
fn main_holds_no_run() -> bool {
    orphans_go_to_the_main_thread()
        && !super::spawner::run_parent_threads().contains(&main_thread())
}

/// Linux 3.19 or later, and an orphan seen landing there once: an emulated kernel (gVisor,
/// WSL 1) reports a version it may not behave as, and there the quick look would miss strays.
fn orphans_go_to_the_main_thread() -> bool {
    static LANDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if let Some(&lands) = LANDS.get() {
        return lands;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    let seen = if version >= (3, 19) {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .spawn_scoped(scope, super::spawner::an_orphan_lands_on_the_main_thread)
                .ok()
                .and_then(|probe| probe.join().ok().flatten())
        })
    } else {
        Some(false)
    };
    // A probe that failed (no thread, pipe or fork to be had) is tried again at the next look;
    // until then the look reads every run parent's list.
    seen.inspect(|&lands| {
        let _ = LANDS.set(lands);
    })
    .unwrap_or(false)
}

fn main_thread() -> i32 {
    CHILDREN_FILES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_with(ChildrenFiles::of_this_process)
        .main
}

/// The main thread's children: where the kernel re-parents the agent's orphans.
fn main_children() -> Vec<i32> {
    let mut files = CHILDREN_FILES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let files = files.get_or_insert_with(ChildrenFiles::of_this_process);
    let mut out = Vec::new();
    let main = files.main;
    files.read(main, &mut out);
    out
}

/// The agent's threads' `children` lists, kept open: a look at the end of a run reads them again
/// from the start (a `/proc` list is made afresh at each read from offset 0) instead of opening,
/// sizing and closing each, four system calls fewer per run.
static CHILDREN_FILES: Mutex<Option<ChildrenFiles>> = Mutex::new(None);

struct ChildrenFiles {
    /// The agent's own pid, its main thread's id (asked once: each ask is a system call).
    main: i32,
    open: HashMap<i32, std::fs::File>,
    buffer: Vec<u8>,
}

impl ChildrenFiles {
    fn of_this_process() -> Self {
        Self::with_buffer(4096)
    }

    fn with_buffer(bytes: usize) -> Self {
        Self {
            main: std::process::id().cast_signed(),
            open: HashMap::new(),
            buffer: vec![0; bytes.max(1)],
        }
    }

    /// Adds `thread`'s children to `out`; nothing when the thread is gone.
    fn read(&mut self, thread: i32, out: &mut Vec<i32>) {
        use std::os::unix::fs::FileExt;
        let file = match self.open.entry(thread) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                match std::fs::File::open(format!("/proc/self/task/{thread}/children")) {
                    Ok(file) => entry.insert(file),
                    Err(_) => return,
                }
            }
        };
        let mut length = 0;
        loop {
            if length == self.buffer.len() {
                self.buffer.resize(length * 2, 0);
            }
            match file.read_at(&mut self.buffer[length..], length as u64) {
                Ok(0) => break,
                Ok(n) => length += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if length == 0 && thread != self.main && Some(thread) != super::spawner::forking_thread() {
            // An ended thread's list reads empty, and the open file stays that thread's even
            // when a new thread gets its id: an empty list is opened afresh at the next look
            // (not the main or the forking thread's, which live as long as the agent).
            self.open.remove(&thread);
        }
        out.extend(
            self.buffer[..length]
                .split(u8::is_ascii_whitespace)
                .filter_map(|p| std::str::from_utf8(p).ok()?.parse::<i32>().ok()),
        );
    }
}

/// `root` and all its descendants, found breadth first.
fn tree(root: i32) -> Vec<i32> {
    let mut seen = HashSet::from([root]);
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() && out.len() < 100_000 {
        for child in children(&out[i].to_string()) {
            if seen.insert(child) {
                out.push(child);
            }
        }
        i += 1;
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
enum Tag {
    Run(i64),
    /// No tag: scrubbed, or the process is a zombie (no environment left).
    Missing,
}

fn tag_of(environ: &[u8]) -> Tag {
    let prefix = format!("{RUN_TAG}=");
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .map_or(Tag::Missing, Tag::Run)
}

fn tag(pid: i32) -> Tag {
    let mut environ = Vec::new();
    match std::fs::File::open(format!("/proc/{pid}/environ")) {
        Ok(f) => {
            let _ = f.take(MAX_ENVIRON).read_to_end(&mut environ);
            tag_of(&environ)
        }
        Err(_) => Tag::Missing,
    }
}

/// The agent's children a sweep for `run_id` ends: no run's leader (nor the spawner), and
/// tagged with this run, with a run no longer going, or not tagged.
fn orphans(leaders: &HashMap<i32, i64>, run_id: i64, children: Vec<i32>) -> Vec<i32> {
    let going: HashSet<i64> = leaders.values().copied().collect();
    children
        .into_iter()
        .filter(|child| !leaders.contains_key(child) && !super::spawner::is_spawner(*child))
        .filter(|child| match tag(*child) {
            Tag::Run(id) => id == run_id || !going.contains(&id),
            Tag::Missing => true,
        })
        .collect()
}

impl Containment {
    /// A table whose runs `count` spawners start (at least one).
    pub fn with_spawners(count: usize) -> Self {
        Self {
            leaders: Mutex::default(),
            waiting: Mutex::default(),
            spawning: Mutex::new(Spawning::with_spawners(count)),
            batch_sent: tokio::sync::Notify::new(),
            reaps: AtomicU64::new(0),
            clean_through: AtomicU64::new(0),
            unsure_clean_through: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i32, i64>> {
        self.leaders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn waiting(&self) -> MutexGuard<'_, Vec<Waiting>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spawning(&self) -> MutexGuard<'_, Spawning> {
        self.spawning
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Has the spawner start a run's leader and enters it. The request waits for the batch of
    /// every spawn asked for before the runtime gets to the batch: the runs a trigger message
    /// or a journal write made ready together start in one exchange.
    ///
    /// # Errors
    /// Why the spawner did not start it.
    pub async fn spawn(
        self: &Arc<Self>,
        run_id: i64,
        request: super::spawner::Queued,
    ) -> std::io::Result<Started> {
        Self::started(self.ask(run_id, request)).await
    }

    /// `spawn` in two steps: the ask, at once, and the wait for its answer (`started`).
    pub fn ask(
        self: &Arc<Self>,
        run_id: i64,
        request: super::spawner::Queued,
    ) -> oneshot::Receiver<std::io::Result<Started>> {
        let (started, answer) = oneshot::channel();
        let first = {
            let mut waiting = self.waiting();
            waiting.push(Waiting {
                run_id,
                request,
                started,
            });
            waiting.len() == 1
        };
        if first {
            let containment = self.clone();
            tokio::spawn(async move { containment.spawn_waiting() });
        }
        answer
    }

    /// The answer to an `ask`.
    ///
    /// # Errors
    /// Why the spawner did not start it.
    pub async fn started(
        answer: oneshot::Receiver<std::io::Result<Started>>,
    ) -> std::io::Result<Started> {
        answer
            .await
            // The batch may have gone out before it was dropped.
            .unwrap_or_else(|_| {
                Err(std::io::Error::other(super::spawner::MayHaveStarted(
                    "the spawn's batch was dropped".into(),
                )))
            })
    }

    /// Sends every waiting spawn to the spawner in one exchange, under the table's lock, with
    /// the answers already in. A batch of `WAIT_FROM` runs or more (a burst) waits for its
    /// answers (`BURST_WAIT_AT_MOST` at most), as the agent gathers the next batch meanwhile (an
    /// agent that carried on wrote its journal and spool in smaller groups, and spent more,
    /// BENCHMARKS.md); a smaller batch's answers are read when the agent is awake anyway (the
    /// next batch), or by `collect_soon`: at a rate with runs closer than `COLLECT_AFTER`, a
    /// start costs the agent no wake-up of its own.
    fn spawn_waiting(self: &Arc<Self>) {
        let mut answered = Vec::new();
        let mut retry = false;
        let (collector_was_there, collector_needed) = {
            let mut leaders = self.lock();
            let mut spawning = self.spawning();
            // Taken under the table's and the spawner's locks, so that a withdrawal finds each
            // spawn either still waiting or owed (`withdraw`).
            let batch = std::mem::take(&mut *self.waiting());
            if batch.is_empty() {
                return;
            }
            let now_ns = super::spawner::now_ns();
            // A burst's: runs due now, not runs sent ahead of their time.
            let wait = batch
                .iter()
                .filter(|w| w.request.encoded().due_ns <= now_ns)
                .count()
                >= WAIT_FROM;
            let now = std::time::Instant::now();
            let quiet = spawning
                .last_batch
                .is_none_or(|last| now.duration_since(last) >= QUIET);
            spawning.collect_after = if quiet { COLLECT_SOON } else { COLLECT_AFTER };
            spawning.last_batch = Some(now);
            // A spawner stuck in a start reads no request until it ends, and its socket, once
            // full, would hold the agent's write: its turns go to the others while one is not,
            // or to a spare when none is.
            let mut stuck = spawning.stuck(now_ns, &mut leaders, &mut answered);
            spawning.spare_for(&mut stuck);
            let count = spawning.spawners.len();
            let mut shares: Vec<Vec<Waiting>> = (0..count).map(|_| Vec::new()).collect();
            let every_one_stuck = stuck.iter().all(|&stuck| stuck);
            // Run by run, a burst's too: a batch given whole to one spawner left the other idle
            // while the agent waited for its answers, and a lone agent that had fallen behind
            // stayed behind as with one spawner (BENCHMARKS.md).
            for waiting in batch {
                while stuck[spawning.next] && !every_one_stuck {
                    spawning.next = (spawning.next + 1) % count;
                }
                shares[spawning.next].push(waiting);
                spawning.next = (spawning.next + 1) % count;
            }
            let mut no_room = Vec::new();
            for (i, share) in shares.into_iter().enumerate() {
                no_room.extend(Self::send_share(
                    &mut spawning,
                    i,
                    &stuck,
                    share,
                    &mut answered,
                ));
            }
            if no_room.is_empty() {
                spawning.warned_no_room = false;
            } else {
                // Once a spell, not at each retry.
                if !std::mem::replace(&mut spawning.warned_no_room, true) {
                    tracing::warn!(
                        runs = no_room.len(),
                        "No spawner takes requests (stuck in starts?); the runs wait until one does"
                    );
                }
                // Before those asked meanwhile: they came first.
                self.waiting().splice(0..0, no_room);
                retry = true;
            }
            let answers = if wait {
                Answers::DueBy(std::time::Instant::now() + BURST_WAIT_AT_MOST)
            } else {
                Answers::In
            };
            Self::read_answers(&mut spawning, &mut leaders, answers, &mut answered);
            let collecting = spawning.collecting;
            spawning.collecting |= !spawning.owed.is_empty();
            (collecting, spawning.collecting)
        };
        self.hand_over(answered);
        if retry {
            let containment = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY_NO_ROOM_AFTER).await;
                containment.spawn_waiting();
            });
        }
        match (collector_was_there, collector_needed) {
            (false, true) => {
                let containment = self.clone();
                tokio::spawn(async move { containment.collect_soon().await });
            }
            (true, _) => self.batch_sent.notify_one(),
            (false, false) => {}
        }
    }

    /// Sends `share` to spawner `first`. The requests that reached it not whole (it was gone and
    /// could not be forked again: the host refused the copy of the agent, under strict overcommit
    /// or a pids limit, where a run's own clone, sharing its spawner's memory, may still be made)
    /// never started, and go to the next spawners in turn (those `stuck` last); they fail only
    /// when none takes them.
    /// Else a spawner that cannot be replaced would fail every run of its turn while the others
    /// start theirs.
    fn send_share(
        spawning: &mut Spawning,
        first: usize,
        stuck: &[bool],
        mut share: Vec<Waiting>,
        answered: &mut Vec<Answered>,
    ) -> Vec<Waiting> {
        let count = spawning.spawners.len();
        let mut turns: Vec<usize> = (0..count).map(|turn| (first + turn) % count).collect();
        // The next spawners that are not stuck (`Spawner::stuck`) before those that are.
        turns.sort_by_key(|&i| stuck[i]);
        let mut refused = None;
        let mut no_room = false;
        for i in turns {
            if share.is_empty() {
                return share;
            }
            let encoded: Vec<_> = share.iter().map(|w| w.request.encoded()).collect();
            let sent = spawning.spawners[i].send(&encoded);
            drop(encoded);
            let mut unsent = Vec::new();
            for (waiting, sent) in share.into_iter().zip(sent) {
                match sent {
                    Ok(seq) => {
                        spawning.owed.insert(
                            (i, seq),
                            Owed {
                                run_id: waiting.run_id,
                                started: waiting.started,
                            },
                        );
                    }
                    Err(e) if super::spawner::had_no_room(&e) => {
                        no_room = true;
                        unsent.push(waiting);
                    }
                    Err(e) => {
                        refused = Some(e);
                        unsent.push(waiting);
                    }
                }
            }
            if let Some(e) = refused.as_ref().filter(|_| !unsent.is_empty()) {
                tracing::warn!(spawner = i, runs = unsent.len(), error = %e, "A spawner cannot be reached; its runs go to another");
            }
            share = unsent;
        }
        if no_room {
            // A spawner that took none of them for a while is alive (stuck in a start, or far
            // behind); they wait for the next batch instead of failing.
            return share;
        }
        for waiting in share {
            let e = refused.as_ref().map_or_else(
                || std::io::Error::other("no spawner can be reached"),
                |e| std::io::Error::new(e.kind(), e.to_string()),
            );
            answered.push((waiting.started, Err(e)));
        }
        Vec::new()
    }

    /// Reads the answers owed once no batch went out for `COLLECT_AFTER` (`COLLECT_SOON` after a
    /// batch that ended a quiet spell), again until none is
    /// owed: the pids of runs started when nothing else woke the agent. A batch's own wake-up
    /// reads what came meanwhile, so the wait starts again from it (a poll of this task on the
    /// same thread, where a timer that fired would be a wake-up of the agent's).
    async fn collect_soon(self: Arc<Self>) {
        loop {
            let wake_at = {
                let spawning = self.spawning();
                // A run sent ahead of its time answers once it started: its read waits for that.
                let first_due = spawning
                    .spawners
                    .iter()
                    .filter_map(Spawner::first_due)
                    .min()
                    .map_or_else(std::time::Instant::now, super::spawner::instant_of);
                first_due.max(std::time::Instant::now()) + spawning.collect_after
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake_at.into()) => {}
                () = self.batch_sent.notified() => continue,
            }
            let mut answered = Vec::new();
            let done = {
                let mut leaders = self.lock();
                let mut spawning = self.spawning();
                Self::read_answers(&mut spawning, &mut leaders, Answers::In, &mut answered);
                let done = spawning.owed.is_empty();
                spawning.collecting = !done;
                // The early read is one per quiet batch: an answer late beyond it (a slow exec,
                // a spawner held up) is waited for at the usual pace, not polled every 1 ms.
                spawning.collect_after = COLLECT_AFTER;
                done
            };
            self.hand_over(answered);
            if done {
                return;
            }
        }
    }

    /// Reads the spawners' answers (those `answers` says) and enters the leaders they name; what each
    /// spawn is told goes into `answered`.
    fn read_answers(
        spawning: &mut Spawning,
        leaders: &mut HashMap<i32, i64>,
        answers: Answers,
        answered: &mut Vec<Answered>,
    ) {
        for i in 0..spawning.spawners.len() {
            Self::read_answers_of(spawning, i, leaders, answers, answered);
        }
    }

    /// `read_answers` of spawner `i` alone.
    fn read_answers_of(
        spawning: &mut Spawning,
        i: usize,
        leaders: &mut HashMap<i32, i64>,
        answers: Answers,
        answered: &mut Vec<Answered>,
    ) {
        if !spawning.spawners[i].owes() {
            return;
        }
        let spawner = &mut spawning.spawners[i];
        let outcomes = match answers {
            Answers::In => spawner.collect(false),
            Answers::Due => spawner.collect(true),
            Answers::DueBy(deadline) => spawner.collect_by(deadline),
        };
        for (seq, outcome) in outcomes {
            // One table owns its spawners, so every answer is for a spawn it sent.
            let Some(owed) = spawning.owed.remove(&(i, seq)) else {
                tracing::error!(seq, "The spawner answered a request nobody sent");
                continue;
            };
            if let Ok(started) = &outcome {
                leaders.insert(started.pid, owed.run_id);
            }
            answered.push((owed.started, outcome));
        }
    }

    /// Every answer the spawner owes, read and entered: before a sweep's look at the agent's
    /// children (or a look for strays through every run parent's), under the same hold of the
    /// table's lock, so that no leader just started is taken for an
    /// orphan. The spawns are told once the caller has released the locks (`hand_over`).
    /// With runs sent ahead of their time, the spawner is paused meanwhile instead (it starts
    /// none until the `Pause` returned is dropped): their processes are still to come, and the
    /// answers of every process it started are read.
    ///
    /// A pause runs out by itself (the spawner's own limit, `spawner::PAUSE_AT_MOST_NS`), and a
    /// spawner answers its pause only once its current start is done: while one's run hangs
    /// before its `exec` (a frozen or unanswering file system), a pause taken before could run
    /// out, and a run its spawner then started would be taken for an orphan. So the spawners
    /// that hold nothing for later are waited for first, the others paused only after, and a
    /// pause asked `RENEW_PAUSE_AFTER_NS` ago or longer once the last is in (one spawner holding
    /// runs for later hung in a start while an earlier one was paused) is asked again: its
    /// answer comes after those of the runs its spawner started meanwhile, and its limit starts
    /// afresh, so the look comes well inside every pause. None of them gets a request meanwhile:
    /// requests go out under the table's lock, held here.
    fn enter_every_leader(&self, leaders: &mut HashMap<i32, i64>) -> (Vec<Answered>, Pause<'_>) {
        let mut answered = Vec::new();
        // Before the spawners' lock, so that it is dropped after it, resuming those it holds
        // even if a read below panicked.
        let mut pause = Pause {
            containment: self,
            paused: Vec::new(),
        };
        let mut spawning = self.spawning();
        let now_ns = super::spawner::now_ns();
        let holding: Vec<bool> = spawning
            .spawners
            .iter()
            .map(|spawner| spawner.holds_for_later(now_ns))
            .collect();
        for i in (0..holding.len()).filter(|&i| !holding[i]) {
            Self::read_answers_of(&mut spawning, i, leaders, Answers::Due, &mut answered);
        }
        // Each paused spawner, with when its pause was last asked.
        let mut asked: Vec<(usize, u64)> = Vec::new();
        for i in (0..holding.len()).filter(|&i| holding[i]) {
            let at = super::spawner::now_ns();
            let paused = spawning.spawners[i].pause();
            if paused {
                pause.paused.push(i);
                asked.push((i, at));
            }
            Self::read_answers_of(
                &mut spawning,
                i,
                leaders,
                Answers::due_unless(paused),
                &mut answered,
            );
        }
        loop {
            let now_ns = super::spawner::now_ns();
            let Some(stale) = asked
                .iter()
                .position(|&(_, at)| now_ns.saturating_sub(at) >= RENEW_PAUSE_AFTER_NS)
            else {
                break;
            };
            let i = asked[stale].0;
            let paused = spawning.spawners[i].pause();
            if paused {
                asked[stale].1 = now_ns;
            } else {
                // Gone: every request it owed is settled (as may have started), none to come.
                asked.swap_remove(stale);
            }
            Self::read_answers_of(
                &mut spawning,
                i,
                leaders,
                Answers::due_unless(paused),
                &mut answered,
            );
        }
        drop(spawning);
        (answered, pause)
    }

    /// Withdraws every spawn asked for a later time (`withdraw`).
    pub fn withdraw_later(&self) {
        let mut answered = Vec::new();
        {
            let mut leaders = self.lock();
            let mut spawning = self.spawning();
            let now_ns = super::spawner::now_ns();
            let mut waiting = self.waiting();
            let (later, now): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut *waiting)
                .into_iter()
                .partition(|w| w.request.encoded().due_ns > now_ns);
            *waiting = now;
            drop(waiting);
            for withdrawn in later {
                answered.push((
                    withdrawn.started,
                    Err(std::io::Error::other(super::spawner::Withdrawn)),
                ));
            }
            Self::withdraw_from_all(&mut spawning.spawners);
            Self::read_answers(&mut spawning, &mut leaders, Answers::In, &mut answered);
        }
        self.hand_over(answered);
    }

    /// Withdraws every request held for later from every spawner, and reads every answer owed.
    /// Every spawner is told before any is read: a run held by the last that came due while the
    /// first ones' answers were read would start, where it was withdrawn in time.
    fn withdraw_from_all(spawners: &mut [Spawner]) {
        for spawner in spawners.iter_mut() {
            spawner.send_withdrawals();
        }
        for spawner in spawners.iter_mut() {
            spawner.read_every_answer();
        }
    }

    /// Withdraws the spawn of `run_id` if its process has not started: its spawn then fails
    /// with `spawner::Withdrawn`; else the spawn gets its start as usual.
    ///
    /// The answer is not waited for here, on the runtime's thread: a spawner answers after the
    /// start it is busy with, which may hang before its `exec` as long as a frozen file system
    /// does, and every run of the agent would wait with it. What is not in yet is read as it
    /// comes, as any other answer (`collect_soon`), and the spawn awaiting it learns it then.
    pub fn withdraw(self: &Arc<Self>, run_id: i64) {
        let mut answered = Vec::new();
        let collector_needed = {
            let mut leaders = self.lock();
            let mut spawning = self.spawning();
            let mut waiting = self.waiting();
            if let Some(i) = waiting.iter().position(|w| w.run_id == run_id) {
                let withdrawn = waiting.remove(i);
                answered.push((
                    withdrawn.started,
                    Err(std::io::Error::other(super::spawner::Withdrawn)),
                ));
            }
            drop(waiting);
            let owed = spawning
                .owed
                .iter()
                .find(|(_, owed)| owed.run_id == run_id)
                .map(|(&held_by, _)| held_by);
            if let Some((i, seq)) = owed {
                spawning.spawners[i].send_withdrawal(seq);
                Self::read_answers(&mut spawning, &mut leaders, Answers::In, &mut answered);
            }
            if spawning.owed.is_empty() {
                None
            } else {
                // Read soon: the withdrawn run's answer is due now, not at its time.
                spawning.collect_after = COLLECT_SOON;
                let was_collecting = spawning.collecting;
                spawning.collecting = true;
                Some(was_collecting)
            }
        };
        self.hand_over(answered);
        match collector_needed {
            Some(false) => {
                let containment = self.clone();
                tokio::spawn(async move { containment.collect_soon().await });
            }
            Some(true) => self.batch_sent.notify_one(),
            None => {}
        }
    }

    /// Tells each spawn its answer. Whoever asked is gone (the runtime is shutting down):
    /// nobody would wait for that process, so it ends here.
    fn hand_over(&self, answered: Vec<Answered>) {
        for (started, outcome) in answered {
            if let Err(Ok(started)) = started.send(outcome) {
                let _ = kill(Pid::from_raw(started.pid), Signal::SIGKILL);
                let _guard = self.reaping(started.pid);
                let _ = waitpid(Pid::from_raw(started.pid), None);
            }
        }
    }

    /// Forgets a leader that has exited and is about to be reaped. The returned guard holds
    /// the table until its waiter has reaped it: a sweep in between would take the zombie for an
    /// orphan (it is no longer a leader) and reap it first, and the waiter would lose the exit
    /// status to it (ECHILD).
    pub fn reaping(&self, pid: i32) -> MutexGuard<'_, HashMap<i32, i64>> {
        let mut leaders = self.lock();
        leaders.remove(&pid);
        self.reaps.fetch_add(1, Ordering::AcqRel);
        leaders
    }

    /// Whether a sweep for `run_id` after its leader was reaped would find anything: a read of
    /// the main thread's children, where orphans go and runs never are, so that a run that left
    /// nothing needs no blocking thread to sweep it. A stray that may be an owed run's orphan,
    /// still going, counts too: the sweep reads every answer first and spares it. Should a
    /// spawner have been forked from the main thread (or on a kernel before 3.19, or one where an
    /// orphan was not seen landing on the main thread, see `orphans_go_to_the_main_thread`), or a start
    /// have failed as "may have started" since the last clean look through them (its process, if
    /// any, is a child of the forking thread with no known pid), the look reads every run's
    /// parent too, after every answer still owed for a run due by now, which it may wait for
    /// (with the spawner paused meanwhile where it holds runs for later: `enter_every_leader`).
    /// `reaped` is `reaped_so_far` read after the run's leader was reaped. Everything a run
    /// left is an orphan of the agent from the moment its leader exited, so one look that finds
    /// no orphan of an ended run answers for every run reaped before it: runs that end together
    /// share it (their waiters yield before asking), and a burst does not read the agent's
    /// children, each going run among them, once per run.
    pub fn has_strays(&self, reaped: u64) -> bool {
        if self.clean_through.load(Ordering::Acquire) >= reaped {
            return false;
        }
        let mut leaders = self.lock();
        // A start that failed as "may have started" may have left a process the agent knows no
        // pid of, a child of the forking thread: then every run parent's children are read.
        let unsure = self.spawning().unsure();
        let orphans_apart =
            main_holds_no_run() && unsure <= self.unsure_clean_through.load(Ordering::Acquire);
        let (answered, pause) = if orphans_apart {
            (
                Vec::new(),
                Pause {
                    containment: self,
                    paused: Vec::new(),
                },
            )
        } else {
            self.enter_every_leader(&mut leaders)
        };
        // Reaps are counted under this lock, so this look starts after every one counted here.
        let through = self.reaps.load(Ordering::Acquire);
        let children = if orphans_apart {
            main_children()
        } else {
            agent_children()
        };
        let found = !orphans(&leaders, NO_RUN, children).is_empty();
        drop(pause);
        drop(leaders);
        self.hand_over(answered);
        if !found {
            self.clean_through.fetch_max(through, Ordering::AcqRel);
            if !orphans_apart {
                self.unsure_clean_through
                    .fetch_max(unsure, Ordering::AcqRel);
            }
        }
        found
    }

    /// How many leaders were reaped so far (see `has_strays`).
    pub fn reaped_so_far(&self) -> u64 {
        self.reaps.load(Ordering::Acquire)
    }

    /// Sends `signal` to everything of `run_id`: the tree of `leader` (while it lives) and the
    /// agent's orphaned children that belong to it or to no going run, with their trees. With
    /// SIGKILL it repeats until nothing is left and reaps the orphans. Returns how many
    /// processes it signalled, the leader's tree included.
    pub fn sweep(&self, run_id: i64, leader: Option<i32>, signal: Signal) -> usize {
        let mut signalled = 0;
        let mut orphans_killed = Vec::new();
        for round in 0..ROUNDS {
            let mut victims = Vec::new();
            let answered = {
                let mut leaders = self.lock();
                let (answered, pause) = self.enter_every_leader(&mut leaders);
                // The leader only while the table holds it: then it is not reaped yet, so its
                // pid cannot have been reused.
                if round == 0
                    && let Some(pid) = leader
                    && leaders.contains_key(&pid)
                {
                    victims.extend(tree(pid));
                }
                for child in orphans(&leaders, run_id, agent_children()) {
                    victims.extend(tree(child));
                    orphans_killed.push(child);
                }
                for pid in &victims {
                    if kill(Pid::from_raw(*pid), signal).is_ok() {
                        signalled += 1;
                    }
                }
                drop(pause);
                answered
            };
            self.hand_over(answered);
            if signal != Signal::SIGKILL || victims.is_empty() {
                break;
            }
            // Reap the orphans (they are our children now); a SIGKILLed process dies at once
            // unless it is inside an uninterruptible call, which ends soon.
            for pid in orphans_killed.drain(..) {
                let _ = waitpid(Pid::from_raw(pid), None);
            }
        }
        // Orphans that exited by themselves wait as zombies: reap whatever has ended.
        for pid in orphans_killed {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
        signalled
    }
}

impl Drop for Containment {
    /// The runs whose answers are unread have nobody to wait for them any more: their
    /// processes end here, as `hand_over` ends one whose asker is gone.
    fn drop(&mut self) {
        let mut leaders = std::mem::take(
            self.leaders
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut answered = Vec::new();
        let spawning = self
            .spawning
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Runs sent ahead of their time do not start now.
        Self::withdraw_from_all(&mut spawning.spawners);
        Self::read_answers(spawning, &mut leaders, Answers::Due, &mut answered);
        *self
            .leaders
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = leaders;
        self.hand_over(answered);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_is_read_from_the_environment() {
        assert_eq!(
            tag_of(b"PATH=/bin\0JOBFLEET_RUN_ID=42\0HOME=/"),
            Tag::Run(42)
        );
        assert_eq!(tag_of(b"PATH=/bin\0XJOBFLEET_RUN_ID=42\0"), Tag::Missing);
        assert_eq!(tag_of(b""), Tag::Missing);
        assert_eq!(tag_of(b"JOBFLEET_RUN_ID=abc\0"), Tag::Missing);
    }

    /// A request to run `sh -c <script>`, its output to `/dev/null`.
    fn shell(script: &str) -> super::super::spawner::Queued {
        use std::os::fd::AsRawFd;
        let devnull = std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let argv: super::super::spawner::Strings = ["sh", "-c", script].into_iter().collect();
        super::super::spawner::Queued::new(&super::super::spawner::Request::plain(
            c"/bin/sh",
            &argv,
            devnull.as_raw_fd(),
        ))
        .unwrap()
    }

    /// Asks for `runs`, each held by its spawner until `due`.
    fn ask_held(
        containment: &Arc<Containment>,
        runs: std::ops::Range<i64>,
        due: std::time::Instant,
    ) -> Vec<oneshot::Receiver<std::io::Result<Started>>> {
        runs.map(|run| {
            let mut request = shell("exit 0");
            request.start_at(due);
            containment.ask(run, request)
        })
        .collect()
    }

    /// Waits until the spawners owe `n` answers: the batch went out.
    async fn owing(containment: &Containment, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while containment.spawning().owed.len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the batch never went out"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn reap(containment: &Containment, started: Started) {
        let _guard = containment.reaping(started.pid);
        assert_eq!(
            waitpid(Pid::from_raw(started.pid), None).unwrap(),
            nix::sys::wait::WaitStatus::Exited(Pid::from_raw(started.pid), 0)
        );
    }

    /// Consecutive runs take turns between the spawners; a spawner killed holding runs fails
    /// those alone, as may have started (it might have started them), and the other's start at
    /// their time; the dead one is replaced at its next turn.
    #[tokio::test]
    async fn a_spawner_that_dies_fails_its_own_runs_and_the_other_goes_on() {
        let containment = Arc::new(Containment::with_spawners(2));
        // Room for forking both spawners and the kill on a loaded machine: a kill after this
        // would find the runs started.
        let due = std::time::Instant::now() + Duration::from_secs(2);
        let answers = ask_held(&containment, 0..4, due);
        owing(&containment, 4).await;
        let (doomed, other) = {
            let spawning = containment.spawning();
            let mut held: Vec<_> = spawning.owed.keys().copied().collect();
            held.sort_unstable();
            assert_eq!(held, [(0, 0), (0, 1), (1, 0), (1, 1)], "turns");
            (
                spawning.spawners[0].pid().unwrap(),
                spawning.spawners[1].pid().unwrap(),
            )
        };
        assert_ne!(doomed, other);
        kill(Pid::from_raw(doomed), Signal::SIGKILL).unwrap();
        for (run, answer) in answers.into_iter().enumerate() {
            let outcome = Containment::started(answer).await;
            if run % 2 == 0 {
                let e = outcome.unwrap_err();
                assert!(
                    super::super::spawner::may_have_started(&e),
                    "run {run}: {e}"
                );
            } else {
                let started = outcome.unwrap();
                assert!(started.at >= due, "run {run} started before its time");
                reap(&containment, started);
            }
        }
        assert_eq!(containment.spawning().unsure(), 2);
        let next: Vec<_> = (4..6_i64)
            .map(|run| containment.ask(run, shell("exit 0")))
            .collect();
        for answer in next {
            reap(&containment, Containment::started(answer).await.unwrap());
        }
        let spawning = containment.spawning();
        let replaced = spawning.spawners[0].pid().unwrap();
        assert!(replaced != doomed && replaced != other);
        assert_eq!(spawning.spawners[1].pid(), Some(other));
    }

    /// A spawner that cannot be forked again fails none of its turn's runs: they go to the
    /// other spawner; with no spawner left to take them, they fail as unreachable.
    #[tokio::test]
    async fn runs_a_spawner_cannot_take_go_to_another() {
        let containment = Arc::new(Containment::with_spawners(2));
        containment.spawning().spawners[1].refuse_forks();
        let answers: Vec<_> = (0..4_i64)
            .map(|run| containment.ask(run, shell("exit 0")))
            .collect();
        for answer in answers {
            reap(&containment, Containment::started(answer).await.unwrap());
        }
        {
            let spawning = containment.spawning();
            assert_eq!(spawning.spawners[0].sent(), 4);
            assert_eq!(spawning.spawners[1].sent(), 0);
            assert_eq!(spawning.spawners[1].pid(), None);
        }
        containment.spawning().spawners[0].refuse_forks();
        let e = Containment::started(containment.ask(4, shell("exit 0")))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("unreachable"), "{e}");
        assert_eq!(containment.spawning().unsure(), 0);
    }

    /// The runs of a batch take turns between the spawners one by one, a burst's batch
    /// (`WAIT_FROM` runs due or more, whose answers the agent waits for) as a small one's.
    #[tokio::test]
    async fn a_batch_s_runs_take_turns_between_the_spawners() {
        let containment = Arc::new(Containment::with_spawners(2));
        let sent = |containment: &Containment| {
            let spawning = containment.spawning();
            (spawning.spawners[0].sent(), spawning.spawners[1].sent())
        };
        let mut run = 0_i64;
        let mut expected = (0, 0);
        for size in [WAIT_FROM, 3, 1, WAIT_FROM + 1] {
            // Asked without a yield in between: one batch.
            let answers: Vec<_> = (0..size)
                .map(|_| {
                    run += 1;
                    containment.ask(run, shell("exit 0"))
                })
                .collect();
            for answer in answers {
                reap(&containment, Containment::started(answer).await.unwrap());
            }
            for _ in 0..size {
                if expected.0 == expected.1 {
                    expected.0 += 1;
                } else {
                    expected.1 += 1;
                }
            }
            assert_eq!(sent(&containment), expected, "after a batch of {size}");
        }
    }

    /// A withdrawal reaches whichever spawner holds the run; the other runs start at their time.
    #[tokio::test]
    async fn a_run_held_by_either_spawner_is_withdrawn() {
        let containment = Arc::new(Containment::with_spawners(2));
        // Room for forking both spawners and the withdrawals on a loaded machine.
        let due = std::time::Instant::now() + Duration::from_secs(2);
        let answers = ask_held(&containment, 0..4, due);
        owing(&containment, 4).await;
        containment.withdraw(1);
        containment.withdraw(2);
        for (run, answer) in answers.into_iter().enumerate() {
            let outcome = Containment::started(answer).await;
            if run == 1 || run == 2 {
                let e = outcome.unwrap_err();
                assert!(super::super::spawner::was_withdrawn(&e), "run {run}: {e}");
            } else {
                let started = outcome.unwrap();
                assert!(started.at >= due, "run {run} started before its time");
                reap(&containment, started);
            }
        }
        // And every later run at once, from both.
        let due = std::time::Instant::now() + Duration::from_secs(30);
        let later = ask_held(&containment, 10..13, due);
        owing(&containment, 3).await;
        containment.withdraw_later();
        for answer in later {
            let e = Containment::started(answer).await.unwrap_err();
            assert!(super::super::spawner::was_withdrawn(&e), "{e}");
        }
        assert!(containment.spawning().owed.is_empty());
    }

    /// Spawns asked for together each start their own process, a child of this process, and
    /// are leaders of their runs until reaped; a failed exec fails its own run only.
    #[tokio::test]
    async fn spawns_asked_together_start_their_own_processes() {
        use std::os::fd::AsRawFd;
        let containment = Arc::new(Containment::with_spawners(2));
        let devnull = std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let spawns = (0..20_i64).map(|run| {
            let containment = containment.clone();
            let output = devnull.as_raw_fd();
            async move {
                let mut argv: super::super::spawner::Strings = ["sh", "-c"].into_iter().collect();
                argv.push_fmt(format_args!("exit {}", run % 5));
                let program = if run == 13 {
                    c"/nonexistent"
                } else {
                    c"/bin/sh"
                };
                let request = super::super::spawner::Queued::new(
                    &super::super::spawner::Request::plain(program, &argv, output),
                )
                .unwrap();
                (run, containment.spawn(run, request).await)
            }
        });
        for (run, outcome) in futures_util::future::join_all(spawns).await {
            if run == 13 {
                assert_eq!(outcome.unwrap_err().raw_os_error(), Some(libc::ENOENT));
                continue;
            }
            let pid = outcome.unwrap().pid;
            assert_eq!(containment.lock().get(&pid), Some(&run));
            let _guard = containment.reaping(pid);
            assert_eq!(
                waitpid(Pid::from_raw(pid), None).unwrap(),
                nix::sys::wait::WaitStatus::Exited(Pid::from_raw(pid), (run % 5) as i32)
            );
        }
        assert!(containment.lock().is_empty());
    }

    /// A kept-open list read again shows the children of now, not of when it was opened.
    #[test]
    fn a_kept_open_children_list_reads_afresh() {
        let thread = nix::unistd::gettid().as_raw();
        // A buffer shorter than one pid: the list is read in several parts.
        let mut files = ChildrenFiles::with_buffer(2);
        // As for any thread but the agent's main one (this test runs on a thread of its own).
        assert_ne!(files.main, thread);
        let read = |files: &mut ChildrenFiles| {
            let mut out = Vec::new();
            files.read(thread, &mut out);
            out
        };
        let mut first = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let first_pid = first.id().cast_signed();
        assert!(read(&mut files).contains(&first_pid));
        let mut second = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let second_pid = second.id().cast_signed();
        let both = read(&mut files);
        assert!(
            both.contains(&first_pid) && both.contains(&second_pid),
            "{both:?}"
        );
        first.kill().unwrap();
        first.wait().unwrap();
        let after = read(&mut files);
        assert!(
            !after.contains(&first_pid) && after.contains(&second_pid),
            "{after:?}"
        );
        assert_eq!(files.open.len(), 1, "kept open");
        second.kill().unwrap();
        second.wait().unwrap();
        assert!(read(&mut files).is_empty());
        assert!(files.open.is_empty(), "an empty list is not kept");
        files.read(i32::MAX, &mut Vec::new());
        assert!(
            files.open.is_empty(),
            "a thread that is not there is not kept"
        );
    }

    #[test]
    fn a_tree_holds_grandchildren() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while tree(pid).len() < 3 {
            assert!(std::time::Instant::now() < deadline, "{:?}", tree(pid));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for p in tree(pid).into_iter().rev() {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        child.wait().unwrap();
    }
}
