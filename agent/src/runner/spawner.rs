//! The spawner: a small helper process, forked from the agent before it grows, that starts
//! every run's process on the agent's behalf.
//!
//! Why a helper: a fork of the agent copies the page tables of a many-threaded process and then
//! takes copy-on-write faults in it, 1.5–5 ms of agent CPU per run, more than a small job costs
//! itself. A vfork (`posix_spawn`) from the agent copies nothing, but the kernel carries the peak
//! RSS of the memory a process execs away from into the process's own peak, so every run would
//! report the agent's peak as its `max_rss_kb`. The spawner's memory is small, and it starts each
//! run with `clone(CLONE_VM | CLONE_VFORK | CLONE_PARENT)`: nothing is copied, the reported peak
//! is the run's own (at least the spawner's peak, about 2 MB), and the run is the agent's child, not
//! the spawner's, so the agent waits for it with rusage, gets its SIGCHLD, and sweeps it exactly
//! as if it had forked it. Every spawner is forked by one thread of the agent that does nothing
//! else (`fork_spawner`), so that runs are never children of the main thread, where orphans go.
//!
//! The agent talks to the spawner over a socket pair, a batch at a time: the agent writes the
//! requests of every run ready to start, back to back, and reads their answers, each carrying
//! its request's number, then or later (below). A request carries the program, arguments,
//! environment, folder, rlimits and run-as user, with the run's output, the start marks file and
//! the cgroup files as descriptors (`SCM_RIGHTS`), and the time to start it: a run sent ahead
//! (`startInMs`) is handed over up to a quarter of a second before its time (once its acceptance
//! is in the journal, as before its start), and the spawner holds it and starts it at its time,
//! so that the agent's runtime does not wake at each run's time (BENCHMARKS.md, issue 17). A
//! request held can be withdrawn (a kill, cover or shutdown before its time): its answer then says
//! it never started, unless it had. A sweep pauses the spawner while it reads the agent's
//! children: every process started before is answered first, and none starts until the sweep
//! resumes it, so that no run just started is taken for an orphan. The answer is the pid, or the
//! error that kept the process from starting (its pid too when it got as far as a process, which
//! the agent then reaps), with the `CLOCK_MONOTONIC` time the process started at, so that a run's
//! start latency is the same however late its answer is read. The spawner holds its answers while another request is
//! already waiting and writes them together, so a batch costs the agent one wait and one
//! wake-up, not one per run (a burst's starts used to be a fifth of the agent's CPU in those).
//! The agent waits for the answers of a batch of several runs (`contain::WAIT_FROM`): it gathers the next batch
//! meanwhile (an agent that carried on while a burst's runs started wrote its journal and spool
//! in smaller groups, and spent more, see BENCHMARKS). A smaller batch's answers it reads later, when
//! it is awake anyway or must know (`Spawner::collect`, `contain`): at a steady rate, the wait
//! for each run's answer was a wake-up of the agent's own per run. The spawner ends when the
//! agent's end of the pair closes (the requests it holds never start), or once the agent is gone
//! (its requests still in the socket, or held, do not start then). It writes its answers without
//! waiting for room, reading on meanwhile, so the agent need not read between requests.
//! Should it die between batches, the next forks a new one (from the grown agent then:
//! still correct, less small); should it die holding requests, those runs fail rather than risk
//! being started twice, and the batch's requests it never got go to a new one.
//!
//! An agent keeps one spawner per core, up to four (`count`), and consecutive runs take turns
//! between them (`contain`): a spawner starts one run at a time and waits for its `exec`, so one
//! alone had no headroom at 1,000 fires/s on a slow 2-vCPU host, and fell seconds behind when
//! anything else took a core (BENCHMARKS.md, issue 17). Each is a `Spawner` of its own, with its
//! own requests' numbers; one that dies fails only the runs it held.
#![allow(
    unsafe_code,
    reason = "fork, clone and the child's work before exec need libc, on data prepared beforehand"
)]

use std::ffi::CStr;
use std::fs::File;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use super::start_marks::Mark;

/// Largest request (arguments and environment): beyond what `execve` itself accepts.
const MAX_REQUEST: usize = 16 * 1024 * 1024;
/// Most cgroup files a request passes (a run joins one cgroup).
const MAX_CGROUP_FILES: usize = 4;
/// Most answers the spawner holds back while requests keep coming, and most read at once.
pub const MAX_BATCH: usize = 64;
/// How long the spawner holds answers at most while requests keep coming: the agent takes a
/// spawner that answers nothing for `OVERDUE_AFTER_NS` for stuck, and at a slow start's pace
/// (a loaded host in a burst) `MAX_BATCH` starts could take that long.
const ANSWERS_HELD_AT_MOST_NS: u64 = 100_000_000;
/// How long past its request's time an answer is when its spawner counts as stuck in a start
/// (`Spawner::stuck`).
pub const OVERDUE_AFTER_NS: u64 = 500_000_000;
/// How long a request waits for room in a spawner's socket at most while the spawner takes
/// nothing of it: one hung in a start reads none until the start ends, and the wait is the
/// agent's runtime thread. A healthy spawner takes requests between its starts, a millisecond
/// apart.
const ROOM_WAIT_AT_MOST: std::time::Duration = std::time::Duration::from_millis(500);
/// How often a write waiting for room tries again: the socket counts as writable only once its
/// queue fell to a quarter of its buffer, a write goes through as soon as a request's room is
/// free.
const ROOM_TRY_EVERY_MS: u8 = 20;
/// Bytes of one answer: the pid, the errno, the `CLOCK_MONOTONIC` nanoseconds of the start, and
/// the number of the request it answers.
const ANSWER: usize = 24;
/// Bytes of a request's header after its length: when to start it (`CLOCK_MONOTONIC`
/// nanoseconds, 0 for at once) and the agent's number for it, which its answer carries.
const HEADER: usize = 16;
/// Control messages: a length no request has (a request is at most `MAX_REQUEST` bytes), then a
/// request's number (ignored but for `WITHDRAW`).
/// Withdraw a request not started yet: it is answered `WITHDRAWN` then, else it started.
const WITHDRAW: u32 = u32::MAX;
/// Start nothing until `RESUME` (or `PAUSE_AT_MOST_NS`), and answer `PAUSED` once every answer
/// of a process started before is written.
const PAUSE: u32 = u32::MAX - 1;
const RESUME: u32 = u32::MAX - 2;
/// The number the answer to a `PAUSE` carries; no request has it.
const PAUSED: u64 = u64::MAX;
/// The errno of a withdrawn request's answer (its pid is 0).
const WITHDRAWN: i32 = libc::ECANCELED;
/// The longest a pause holds starts back, should the agent never resume (a look at its children
/// takes milliseconds, and the agent resumes even when the look fails).
pub(super) const PAUSE_AT_MOST_NS: u64 = 10_000_000_000;
/// The child's stack while it prepares the exec; it runs only a few libc calls.
const CHILD_STACK: usize = 256 * 1024;

/// Strings as a request carries them: each one's bytes and a NUL, back to back. A run's
/// arguments and environment are written straight into one buffer (an entry's `KEY=value` by
/// `push_fmt`), where a `CString` apiece, and a `format!` for each variable, made about seventy
/// allocations of every run's start (BENCHMARKS.md, issue 17).
#[derive(Debug, Default)]
pub struct Strings {
    bytes: Vec<u8>,
    count: usize,
    /// A string held a NUL byte, which would end it early in the child: such strings are
    /// refused when the request is encoded.
    has_nul: bool,
}

impl Strings {
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bytes),
            ..Self::default()
        }
    }

    pub fn push(&mut self, s: impl AsRef<[u8]>) {
        let s = s.as_ref();
        self.has_nul |= s.contains(&0);
        self.bytes.extend_from_slice(s);
        self.end_string();
    }

    /// Appends the formatted string, written in place.
    pub fn push_fmt(&mut self, args: std::fmt::Arguments<'_>) {
        let start = self.bytes.len();
        // Writing into a `Vec` fails only when a `Display` does, which ours do not; a failed
        // write leaves whatever it wrote, still one string.
        let _ = self.bytes.write_fmt(args);
        self.has_nul |= self.bytes[start..].contains(&0);
        self.end_string();
    }

    fn end_string(&mut self) {
        self.bytes.push(0);
        self.count += 1;
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether a string holds a NUL byte of its own.
    pub fn has_nul(&self) -> bool {
        self.has_nul
    }

    /// Each string, without its NUL.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes
            .split(|&b| b == 0)
            .take(if self.has_nul { 0 } else { self.count })
    }
}

impl<S: AsRef<[u8]>> FromIterator<S> for Strings {
    fn from_iter<I: IntoIterator<Item = S>>(strings: I) -> Self {
        let mut out = Self::default();
        for s in strings {
            out.push(s);
        }
        out
    }
}

/// What the child needs to become the run.
pub struct Request<'a> {
    pub program: &'a CStr,
    /// `argv`, the program's name first.
    pub argv: &'a Strings,
    /// `KEY=value` entries.
    pub env: &'a Strings,
    pub cwd: &'a CStr,
    /// stdout and stderr.
    pub output: RawFd,
    /// The start marks file, and the run's mark the child writes into it before anything else
    /// (`start_marks`).
    pub start_mark: Option<(RawFd, Mark)>,
    /// `cgroup.procs` files to write the child's pid into.
    pub cgroup_procs: &'a [RawFd],
    /// (resource, limit) pairs for setrlimit.
    pub rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    /// uid/gid to switch to.
    pub user: Option<(u32, u32)>,
}

#[cfg(test)]
impl<'a> Request<'a> {
    /// `program` with `argv` in `/`, output to `output`, nothing else set: tests' plain run.
    pub(super) fn plain(program: &'a CStr, argv: &'a Strings, output: RawFd) -> Self {
        static NO_ENV: Strings = Strings {
            bytes: Vec::new(),
            count: 0,
            has_nul: false,
        };
        Self {
            program,
            argv,
            env: &NO_ENV,
            cwd: c"/",
            output,
            start_mark: None,
            cgroup_procs: &[],
            rlimits: &[],
            user: None,
        }
    }
}

struct Connection {
    stream: UnixStream,
    pid: i32,
}

/// The spawners `start` forked while the process was small, for the first `Spawner`s to take.
static STARTED: Mutex<Vec<Connection>> = Mutex::new(Vec::new());
/// The pids of the spawners alive: the agent's children that are no run and must survive a sweep.
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// The threads that forked a spawner: the runs a spawner starts are their children
/// (`CLONE_PARENT` gives a run its spawner's parent, which is a thread, not the process). One
/// entry per thread, so it stays as small as the number of spawners ever forked.
static FORKING_THREADS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// The thread that forks every spawner (`fork_spawner`), once started: a way to ask it for one.
static FORKER: Mutex<Option<Forker>> = Mutex::new(None);

/// The forking thread's id and the way to ask it for a spawner.
struct Forker {
    thread: i32,
    asks: std::sync::mpsc::Sender<std::sync::mpsc::SyncSender<std::io::Result<Connection>>>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Most spawners an agent keeps (`count`).
const MOST_SPAWNERS: usize = 4;

/// How many spawners an agent keeps: one per core it may use, up to `MOST_SPAWNERS`. One
/// spawner starts runs one after another, each start a wait for the run's `exec` (`launch`), which
/// on a slow 2-vCPU host is about 1,000 starts a second, no headroom for one agent at 1,000
/// fires/s (BENCHMARKS.md, issue 17): with one per core, starts go on side by side. More than
/// the cores would only queue for them; each costs about 2 MB of resident memory, idle.
pub fn count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, MOST_SPAWNERS)
}

/// Starts `count` spawners now, while this process is small; `main` calls it before any other
/// thread starts. Without it, each `Spawner` forks its own at its first spawn.
///
/// # Errors
/// When a socket pair or a fork fails.
pub fn start(count: usize) -> std::io::Result<()> {
    let mut started = locked(&STARTED);
    while started.len() < count {
        started.push(fork_spawner()?);
    }
    Ok(())
}

/// Whether `pid` is a spawner of this process: an agent's child that is no run.
pub fn is_spawner(pid: i32) -> bool {
    locked(&LIVE).contains(&pid)
}

/// A run's process as the spawner started it.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub pid: i32,
    /// When its clone returned (the process had exec'd, or failed to).
    pub at: std::time::Instant,
}

/// A spawner as its owner holds it: the connection (forked on the first need), the answers its
/// process owes, and the outcomes already read ahead of those.
///
/// Requests go out with `send`, each under a number of its own, and their answers come back with
/// `collect`, later, each with its number: the agent need not wait for a batch's answers, so a
/// run's start costs it no wake-up of its own; it reads them when it is awake anyway, or when it
/// must know (BENCHMARKS.md, issue 17). A request may be sent ahead of its time: the spawner
/// holds it and starts it then (its answer comes then), unless it is withdrawn first.
#[derive(Default)]
pub struct Spawner {
    connection: Option<Connection>,
    /// Requests the connection's process got whole and owes answers for, by number, with when
    /// each is due (`CLOCK_MONOTONIC` ns; when it was sent, for at once).
    owed: std::collections::BTreeMap<u64, u64>,
    /// The number of the next request; never reused, so that no answer is taken for another's.
    next_seq: u64,
    /// Outcomes read (or failed) and not collected yet, with their requests' numbers.
    settled: std::collections::VecDeque<(u64, std::io::Result<Started>)>,
    /// The first bytes of an answer read in part.
    partial: Vec<u8>,
    /// The answer to a `PAUSE` came.
    paused: bool,
    /// When an answer was last read (`CLOCK_MONOTONIC` ns): a spawner working through a
    /// backlog answers on, one hung in a start answers nothing.
    answered_ns: u64,
    /// Withdrawals its socket had no room for, in the order asked: sent before anything else
    /// once there is room (a spawner hung in a start reads nothing, and a blocking write held the
    /// agent's runtime thread until the hang ended).
    withdrawals_unsent: Vec<u64>,
    /// When a request last found no room (`CLOCK_MONOTONIC` ns), until one goes through or an
    /// answer is read: the spawner counts as stuck, and a request tries it without waiting.
    no_room_ns: Option<u64>,
    /// A request went out in part and its rest found no room: the stream was shut for writing
    /// (the spawner drops the part at the end of the stream and answers what it holds), and it
    /// takes nothing more until it is replaced.
    cut_off: bool,
    /// Requests failed as "may have started" so far (`fail_owed`): each may have left a process
    /// whose pid the agent never learns, a child of the forking thread.
    unsure: u64,
    /// Every fork of a replacement fails (`refuse_forks`).
    #[cfg(test)]
    refusing_forks: bool,
}

impl Spawner {
    /// A spawner holding one of those `start` forked, if one is left.
    pub fn new() -> Self {
        let mut spawner = Self::default();
        spawner.connection = locked(&STARTED).pop();
        spawner
    }

    /// Whether requests sent are unanswered, or outcomes wait to be collected.
    pub fn owes(&self) -> bool {
        !self.owed.is_empty() || !self.settled.is_empty()
    }

    /// How many requests reached it whole so far (its processes', replaced ones' included).
    pub fn sent(&self) -> u64 {
        self.next_seq
    }

    /// The pid of its process, if it has one.
    pub fn pid(&self) -> Option<i32> {
        self.connection.as_ref().map(|c| c.pid)
    }

    /// Writes each request to the spawner (forking one where there is none) without waiting
    /// for its answer. `Ok(n)`: the request reached a spawner whole as number `n`, and its outcome
    /// comes out of `collect` under that number; `Err`: it did not start.
    ///
    /// Errors: the spawner being unreachable twice in a row.
    pub fn send(&mut self, batch: &[Encoded<'_>]) -> Vec<std::io::Result<u64>> {
        #[cfg(test)]
        if self.refusing_forks {
            return self.send_via(
                || Err(std::io::Error::from_raw_os_error(libc::EAGAIN)),
                batch,
            );
        }
        self.send_via(fork_spawner, batch)
    }

    /// Ends its process, and has every fork of a replacement fail from now on, as the host
    /// refuses one under strict overcommit or a pids limit.
    #[cfg(test)]
    pub(crate) fn refuse_forks(&mut self) {
        self.forget();
        self.refusing_forks = true;
    }

    /// The outcomes read so far, with their requests' numbers: when `wait`, after every answer
    /// owed for a request due by now came in; else those in.
    ///
    /// Errors: the spawner's account of the failed step (exec, setuid, …), the request withdrawn
    /// (`was_withdrawn`), or the spawner dying before it answered (the run may have started, so
    /// it is not asked again).
    pub fn collect(&mut self, wait: bool) -> Vec<(u64, std::io::Result<Started>)> {
        if wait {
            let now = monotonic_ns();
            self.read_until(|spawner| spawner.owed.values().all(|&due| due > now), None);
        } else {
            self.read_ready();
        }
        self.let_go_if_cut_off();
        self.settled.drain(..).collect()
    }

    /// `collect(true)` waiting no later than `deadline`, and not at all for a spawner `stuck`:
    /// one busy with a start hung before its `exec` (a frozen file system) answers only after
    /// it, and a burst's wait is the agent's runtime thread. Unbounded, it held every run of the
    /// agent until the hang ended; bounded alone, it would hold it again at each batch.
    pub fn collect_by(
        &mut self,
        deadline: std::time::Instant,
    ) -> Vec<(u64, std::io::Result<Started>)> {
        let now = monotonic_ns();
        // What is in first: a spawner whose answers came, unread, is not stuck.
        self.read_ready();
        if !self.stuck(now) {
            self.read_until(
                |spawner| spawner.owed.values().all(|&due| due > now),
                Some(deadline),
            );
        }
        self.let_go_if_cut_off();
        self.settled.drain(..).collect()
    }

    /// Whether an answer is `OVERDUE_AFTER_NS` or more past its request's time (its sending, for
    /// one at once) and none came for as long: the spawner is stuck in a start, as a start takes
    /// a millisecond, and gets no new request while another spawner is not (`contain`), nor is
    /// waited for by a burst. One behind a backlog of starts (a host starved of CPU) answers on
    /// meanwhile, and is not stuck.
    pub fn stuck(&self, now_ns: u64) -> bool {
        if self.cut_off {
            // Until every answer it owes is in: then a fresh one takes its place at its next
            // turn (`send_via`).
            return !self.owed.is_empty();
        }
        if self.no_room_ns.is_some() {
            return true;
        }
        self.answered_ns.saturating_add(OVERDUE_AFTER_NS) <= now_ns
            && self
                .owed
                .values()
                .any(|&due| due.saturating_add(OVERDUE_AFTER_NS) <= now_ns)
    }

    /// Ends a cut-off spawner once it owes nothing (it exits by itself at the end of its
    /// stream; reaped here), so that a fresh one takes its place.
    fn let_go_if_cut_off(&mut self) {
        if self.cut_off && self.owed.is_empty() {
            self.forget();
        }
    }

    /// Whether a request owed is held for a time after `now_ns`.
    pub fn holds_for_later(&self, now_ns: u64) -> bool {
        self.owed.values().any(|&due| due > now_ns)
    }

    /// When the request owed that is due first is due (`CLOCK_MONOTONIC` ns).
    pub fn first_due(&self) -> Option<u64> {
        self.owed.values().min().copied()
    }

    /// Withdraws request `seq` if the spawner holds it still, and reads answers until its own is
    /// in: `WITHDRAWN` when it never started, else its start (or failure). Nothing for a request
    /// answered already.
    pub fn withdraw(&mut self, seq: u64) {
        self.send_withdrawal(seq);
        self.read_until(|spawner| !spawner.owed.contains_key(&seq), None);
    }

    /// Withdraws request `seq` if the spawner holds it still, reading nothing: its answer comes
    /// with a later read, as one due now (a read that waits for the answers due waits for it too,
    /// and the spawner no longer counts as holding it for later).
    pub fn send_withdrawal(&mut self, seq: u64) {
        if !self.owed.contains_key(&seq) {
            return;
        }
        if self.connection.is_none() {
            return;
        }
        self.withdrawals_unsent.push(seq);
        self.owed.insert(seq, monotonic_ns());
        self.send_withdrawals_unsent();
    }

    /// Sends the withdrawals queued for want of room, as far as there is room now.
    fn send_withdrawals_unsent(&mut self) {
        if self.cut_off {
            // Shut for writing: at the end of the stream the spawner withdraws what it holds.
            return;
        }
        while let Some(&seq) = self.withdrawals_unsent.first() {
            if !self.owed.contains_key(&seq) {
                // Answered meanwhile: nothing left to withdraw.
                self.withdrawals_unsent.remove(0);
                continue;
            }
            let Some(connection) = self.connection.as_mut() else {
                self.withdrawals_unsent.clear();
                return;
            };
            match send_control(&mut connection.stream, WITHDRAW, seq, false) {
                Ok(()) => {
                    self.withdrawals_unsent.remove(0);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.fail_owed(&e);
                    return;
                }
            }
        }
    }

    /// Has the spawner start nothing until `resume`, after it answered for every process it
    /// started: then every run's process is one the agent knows the pid of, or one still to come
    /// (a look at the agent's children takes none for an orphan). False when the spawner is gone
    /// (every request it owed is settled then, as may have started).
    pub fn pause(&mut self) -> bool {
        if self.cut_off {
            // Shut for writing: it starts the whole requests it has due, none held for later
            // (withdrawn at the end of its stream), so the caller reads the answers due.
            return false;
        }
        let Some(connection) = self.connection.as_mut() else {
            return false;
        };
        self.paused = false;
        if let Err(e) = send_control(&mut connection.stream, PAUSE, PAUSED, true) {
            self.fail_owed(&e);
            return false;
        }
        self.read_until(
            |spawner| spawner.paused || spawner.connection.is_none(),
            None,
        );
        self.paused
    }

    /// Ends a `pause`.
    pub fn resume(&mut self) {
        if self.cut_off {
            return;
        }
        if let Some(connection) = self.connection.as_mut()
            && let Err(e) = send_control(&mut connection.stream, RESUME, PAUSED, true)
        {
            self.fail_owed(&e);
        }
        self.paused = false;
    }

    /// Withdraws every request held for later, reading nothing: the answers, `WITHDRAWN` for
    /// those it still held, come with `read_every_answer`.
    pub fn send_withdrawals(&mut self) {
        if self.cut_off {
            // The end of its stream withdraws them.
            return;
        }
        let now = monotonic_ns();
        let later: Vec<u64> = self
            .owed
            .iter()
            .filter(|&(_, &due)| due > now)
            .map(|(&seq, _)| seq)
            .collect();
        if let Some(connection) = self.connection.as_mut() {
            for seq in later {
                if let Err(e) = send_control(&mut connection.stream, WITHDRAW, seq, true) {
                    self.fail_owed(&e);
                    return;
                }
            }
        }
    }

    /// Reads until no answer is owed.
    pub fn read_every_answer(&mut self) {
        self.read_until(|spawner| spawner.owed.is_empty(), None);
    }

    fn send_via(
        &mut self,
        mut fork: impl FnMut() -> std::io::Result<Connection>,
        batch: &[Encoded<'_>],
    ) -> Vec<std::io::Result<u64>> {
        // Withdrawals asked before go first.
        self.send_withdrawals_unsent();
        if self.cut_off {
            if self.owed.is_empty() {
                // Nothing of it is still to come: a fresh one takes its place.
                self.forget();
            } else {
                return batch.iter().map(|_| Err(no_room())).collect();
            }
        }
        let mut results: Vec<std::io::Result<u64>> = Vec::with_capacity(batch.len());
        let mut unreachable = None;
        for attempt in 0..2 {
            if results.len() == batch.len() {
                break;
            }
            if self.connection.is_none() {
                match fork() {
                    Ok(connection) => self.connection = Some(connection),
                    Err(e) => {
                        unreachable = Some(e);
                        break;
                    }
                }
            }
            let mut failed = None;
            let mut full = None;
            let sent_ns = monotonic_ns();
            for request in &batch[results.len()..] {
                // The spawner writes its answers without waiting for room and reads on, so
                // requests go out without a read in between, however many answers are owed.
                let Some(connection) = self.connection.as_mut() else {
                    failed = Some(std::io::Error::other("the spawner died"));
                    break;
                };
                let seq = self.next_seq;
                // One that had no room a moment ago is tried, not waited for again.
                let wait = if self.no_room_ns.is_some() {
                    std::time::Duration::ZERO
                } else {
                    ROOM_WAIT_AT_MOST
                };
                match send_request(&mut connection.stream, request, seq, wait) {
                    Ok(()) => {
                        self.no_room_ns = None;
                        self.next_seq += 1;
                        self.owed.insert(seq, request.due_ns.max(sent_ns));
                        results.push(Ok(seq));
                    }
                    // It did not start, and the spawner may be alive and well but for a hung
                    // start: it is kept, and the rest goes elsewhere.
                    Err(e) if had_no_room(&e) => {
                        self.no_room_ns = Some(monotonic_ns());
                        if was_cut_off(&e) {
                            let _ = connection.stream.shutdown(std::net::Shutdown::Write);
                            self.cut_off = true;
                        }
                        full = Some(e);
                        break;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if full.is_some() {
                while results.len() < batch.len() {
                    results.push(Err(no_room()));
                }
                break;
            }
            let Some(e) = failed else {
                break;
            };
            // A request may have gone out in part, and a spawner still alive would wait for
            // its rest while holding the answers owed: the end of the stream tells it there is
            // no rest, and it writes what it holds before it exits (the requests it held for
            // later, withdrawn).
            if let Some(connection) = &self.connection {
                let _ = connection.stream.shutdown(std::net::Shutdown::Write);
            }
            self.read_until(|spawner| spawner.owed.is_empty(), None);
            self.forget();
            if attempt == 0 && results.len() < batch.len() {
                // Nothing whole of the rest reached it: those requests are safe to send again.
                tracing::warn!(error = %e, "The spawner is gone; starting another");
            }
            unreachable = Some(e);
        }
        while results.len() < batch.len() {
            results.push(Err(match &unreachable {
                Some(e) => {
                    std::io::Error::new(e.kind(), format!("the spawner is unreachable: {e}"))
                }
                None => std::io::Error::other("the spawner is unreachable"),
            }));
        }
        results
    }

    /// How many requests failed as "may have started" so far: processes with no known pid.
    pub fn unsure(&self) -> u64 {
        self.unsure
    }

    /// Reads the answers already in, without waiting.
    fn read_ready(&mut self) {
        self.send_withdrawals_unsent();
        let Some(socket) = self.connection.as_ref().map(|c| c.stream.as_raw_fd()) else {
            return;
        };
        let mut buffer = [0u8; MAX_BATCH * ANSWER];
        loop {
            match nix::sys::socket::recv(socket, &mut buffer, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => {
                    self.fail_owed(&std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                    return;
                }
                Ok(n) => {
                    self.partial.extend_from_slice(&buffer[..n]);
                    self.settle_answers();
                    if n < buffer.len() {
                        return;
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => return,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    self.fail_owed(&e.into());
                    return;
                }
            }
        }
    }

    /// Reads answers, waiting for them, until `done` (or the spawner is gone, or `deadline`).
    fn read_until(&mut self, done: impl Fn(&Self) -> bool, deadline: Option<std::time::Instant>) {
        let mut buffer = [0u8; MAX_BATCH * ANSWER];
        while !done(self) {
            self.send_withdrawals_unsent();
            let Some(connection) = &mut self.connection else {
                return;
            };
            let timeout = deadline.map_or(nix::poll::PollTimeout::NONE, |deadline| {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                // Rounded up, so that a poll that returns empty-handed ran out the deadline;
                // past it, what is in is still read.
                let ms = if left.is_zero() {
                    0
                } else {
                    left.as_millis().saturating_add(1)
                };
                nix::poll::PollTimeout::from(u16::try_from(ms).unwrap_or(u16::MAX))
            });
            // A poll for input first: a read asleep on the socket is woken also when the
            // spawner takes a request off it (room to write), a wake-up for nothing each time;
            // a poll for input is not.
            let mut poll = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&connection.stream),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(&mut poll, timeout) {
                // Nothing to read: the deadline passed, or the longest poll did.
                Ok(0) if deadline.is_some_and(|d| std::time::Instant::now() >= d) => return,
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    self.fail_owed(&e.into());
                    return;
                }
            }
            match connection.stream.read(&mut buffer) {
                Ok(0) => {
                    self.fail_owed(&std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                    return;
                }
                Ok(got) => {
                    self.partial.extend_from_slice(&buffer[..got]);
                    self.settle_answers();
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail_owed(&e);
                    return;
                }
            }
        }
    }

    /// Turns the whole answers in `partial` into outcomes.
    fn settle_answers(&mut self) {
        let whole = self.partial.len() / ANSWER;
        if whole > 0 {
            self.answered_ns = monotonic_ns();
            self.no_room_ns = None;
        }
        for answer in self.partial.chunks_exact(ANSWER).take(whole) {
            let (pid, errno, at_ns, seq) = parse_answer(answer);
            if seq == PAUSED {
                self.paused = true;
            } else if self.owed.remove(&seq).is_some() {
                self.settled.push_back((seq, outcome_of(pid, errno, at_ns)));
            } else {
                tracing::error!(seq, "The spawner answered a request nobody sent");
            }
        }
        self.partial.drain(..whole * ANSWER);
    }

    /// The spawner holds requests whole and may have started their processes before it died:
    /// asking another one would start those runs twice. They fail instead; a process that did
    /// start is an unknown child the next sweep ends (and the next look for strays, which reads
    /// every run parent's children while such a process may be there: `Spawner::unsure`).
    fn fail_owed(&mut self, e: &std::io::Error) {
        self.unsure += self.owed.len() as u64;
        for seq in std::mem::take(&mut self.owed).into_keys() {
            self.settled.push_back((
                seq,
                Err(std::io::Error::new(
                    e.kind(),
                    MayHaveStarted(format!(
                        "the spawner died before answering, so the run may not have started: {e}"
                    )),
                )),
            ));
        }
        self.partial.clear();
        self.forget();
    }

    /// Ends the spawner, so the next request forks a new one.
    fn forget(&mut self) {
        if let Some(gone) = self.connection.take() {
            let pid = nix::unistd::Pid::from_raw(gone.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
            locked(&LIVE).retain(|&live| live != gone.pid);
        }
        self.owed.clear();
        self.partial.clear();
        self.withdrawals_unsent.clear();
        self.no_room_ns = None;
        self.cut_off = false;
        self.paused = false;
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.forget();
    }
}

/// An answer's outcome; a process that failed to exec is reaped here.
fn outcome_of(pid: i32, errno: i32, at_ns: u64) -> std::io::Result<Started> {
    if pid == 0 && errno == WITHDRAWN {
        return Err(std::io::Error::other(Withdrawn));
    }
    if errno != 0 {
        if pid > 0 {
            // It got as far as a process, which exited; it is ours to reap.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        }
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    Ok(Started {
        pid,
        at: instant_of(at_ns),
    })
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock `Instant` reads, shared with the spawner.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the local we pass; it is async-signal-safe and
    // takes no lock, so the spawner may call it between clones.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// The `CLOCK_MONOTONIC` reading of `at` (the clock `Instant` reads).
pub fn ns_of(at: std::time::Instant) -> u64 {
    let now = std::time::Instant::now();
    let ns = monotonic_ns();
    if at >= now {
        ns.saturating_add(u64::try_from(at.duration_since(now).as_nanos()).unwrap_or(u64::MAX))
    } else {
        ns.saturating_sub(u64::try_from(now.duration_since(at).as_nanos()).unwrap_or(u64::MAX))
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    monotonic_ns()
}

/// The `Instant` of a `CLOCK_MONOTONIC` reading (one the spawner took, or a request's time).
pub fn instant_of(ns: u64) -> std::time::Instant {
    let now = std::time::Instant::now();
    let current = monotonic_ns();
    if ns >= current {
        return now + std::time::Duration::from_nanos(ns - current);
    }
    now.checked_sub(std::time::Duration::from_nanos(current - ns))
        .unwrap_or(now)
}

/// The threads of this process whose children runs can be: the ones that forked a spawner.
pub fn run_parent_threads() -> Vec<i32> {
    locked(&FORKING_THREADS).clone()
}

/// Called from a thread other than the main one (as a run's parent is), forks a child that
/// forks a grandchild and exits: whether the orphaned grandchild is then the main thread's
/// child. No when this process is neither a subreaper nor a namespace's init (the orphan goes
/// elsewhere); `None` when the probe itself failed (a pipe or a fork refused). Run under the
/// leaders' lock, so that no sweep takes the grandchild for a stray meanwhile.
pub fn an_orphan_lands_on_the_main_thread() -> Option<bool> {
    // Close-on-exec: no program another thread starts meanwhile keeps an end open.
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok();
    let (pid_read, pid_write) = pipe()?;
    // The grandchild waits for the end of this pipe: it ends when the probe lets go of it, or
    // when the agent dies meanwhile, so no grandchild outlives the probe.
    let (hold_read, hold_write) = pipe()?;
    // SAFETY: the child and the grandchild make raw system calls only (clone, close, write,
    // read, _exit), all async-signal-safe, as a child of a multithreaded process must: a second
    // `fork` would run the atfork handlers of a copy of a multithreaded process.
    let child = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            let grandchild = libc::syscall(
                libc::SYS_clone,
                libc::c_long::from(libc::SIGCHLD),
                0,
                0,
                0,
                0,
            );
            if grandchild == 0 {
                libc::close(pid_write.as_raw_fd());
                libc::close(hold_write.as_raw_fd());
                let mut byte = 0u8;
                while libc::read(hold_read.as_raw_fd(), (&raw mut byte).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                libc::_exit(0);
            }
            let pid = i32::try_from(grandchild).unwrap_or(-1).to_ne_bytes();
            libc::write(pid_write.as_raw_fd(), pid.as_ptr().cast(), pid.len());
            libc::_exit(0)
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(_) => return None,
    };
    drop((pid_write, hold_read));
    // Re-parenting happens as the child exits, so it is done once the child is reaped; and
    // whatever it wrote is in the pipe by then, so the read below cannot wait.
    let _ = nix::sys::wait::waitpid(child, None);
    let mut bytes = [0u8; 4];
    let read = std::fs::File::from(pid_read).read_exact(&mut bytes);
    let grandchild = i32::from_ne_bytes(bytes);
    if read.is_err() || grandchild <= 0 {
        return None;
    }
    let landed =
        std::fs::read_to_string(format!("/proc/self/task/{}/children", std::process::id()))
            .is_ok_and(|list| {
                list.split_whitespace()
                    .any(|pid| pid.parse() == Ok(grandchild))
            });
    drop(hold_write);
    if landed {
        // Ours to reap; elsewhere it ends by itself and its new parent reaps it.
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(grandchild), None);
    }
    Some(landed)
}

/// The thread that forks the spawners, once one was forked: it is meant to live as long as the
/// process (it would end only by a panic, and then the next fork starts another).
pub fn forking_thread() -> Option<i32> {
    locked(&FORKER).as_ref().map(|f| f.thread)
}

/// One request of a batch: its encoded bytes (`encode`) and the descriptors that travel with it.
pub struct Encoded<'a> {
    pub message: &'a [u8],
    pub fds: &'a [RawFd],
    /// When the spawner starts it (`CLOCK_MONOTONIC` ns; 0: at once).
    pub due_ns: u64,
}

/// A request encoded to be written with a later batch. It holds the request's descriptors (its
/// own copies, or the run's own output end and the shared start marks file), so that they are
/// still the run's files when the batch goes out, whatever became of the task that asked.
pub struct Queued {
    message: Vec<u8>,
    raw_fds: Vec<RawFd>,
    _fds: Vec<OwnedFd>,
    _start_mark: Option<Arc<File>>,
    /// When the spawner starts it (`CLOCK_MONOTONIC` ns; 0: at once).
    due_ns: u64,
}

impl Queued {
    /// # Errors
    /// When the request cannot be encoded (too large) or a descriptor cannot be copied.
    pub fn new(request: &Request<'_>) -> std::io::Result<Self> {
        Self::holding(request, None, None)
    }

    /// As `new`, but holding the run's own descriptors instead of copies: `output` (the one
    /// `request.output` names), which the caller has no more use for, and the shared start
    /// marks file `request.start_mark` names. A run's start then costs two dups and two closes
    /// fewer (BENCHMARKS.md, issue 17).
    ///
    /// # Errors
    /// As `new`.
    pub fn holding_own(
        request: &Request<'_>,
        output: OwnedFd,
        start_mark: Option<Arc<File>>,
    ) -> std::io::Result<Self> {
        // A mismatch would send the spawner one file in another's place (the marks file as a
        // cgroup file): refused, not only in debug builds.
        if request.output != output.as_raw_fd()
            || request.start_mark.map(|(fd, _)| fd) != start_mark.as_deref().map(AsRawFd::as_raw_fd)
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the descriptors held are not the request's",
            ));
        }
        Self::holding(request, Some(output), start_mark)
    }

    fn holding(
        request: &Request<'_>,
        output: Option<OwnedFd>,
        start_mark: Option<Arc<File>>,
    ) -> std::io::Result<Self> {
        let message = encode(request)?;
        let copy = |fd: RawFd| {
            // SAFETY: the request's descriptors are open while `request` is borrowed; the copy
            // is a new descriptor of our own.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
        };
        let mut fds = Vec::with_capacity(2 + request.cgroup_procs.len());
        fds.push(match output {
            Some(output) => output,
            None => copy(request.output)?,
        });
        if start_mark.is_none()
            && let Some((fd, _)) = request.start_mark
        {
            fds.push(copy(fd)?);
        }
        for fd in request.cgroup_procs {
            fds.push(copy(*fd)?);
        }
        // In the order the spawner reads them: output, start mark, cgroup files.
        let mut raw_fds: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        if let Some(file) = &start_mark {
            raw_fds.insert(1, file.as_raw_fd());
        }
        Ok(Self {
            message,
            raw_fds,
            _fds: fds,
            _start_mark: start_mark,
            due_ns: 0,
        })
    }

    /// Whether it is to start later than now (`start_at`).
    pub fn starts_later(&self) -> bool {
        self.due_ns > monotonic_ns()
    }

    /// Has the spawner start it at `due` rather than at once, should it get it earlier.
    pub fn start_at(&mut self, due: std::time::Instant) {
        self.due_ns = ns_of(due);
    }

    pub fn encoded(&self) -> Encoded<'_> {
        Encoded {
            message: &self.message,
            fds: &self.raw_fds,
            due_ns: self.due_ns,
        }
    }
}

/// A spawn that failed in a way that leaves its process possibly started, or still to start
/// (its request reached a spawner that died before answering).
#[derive(Debug)]
pub struct MayHaveStarted(pub String);

impl std::fmt::Display for MayHaveStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MayHaveStarted {}

/// A request withdrawn before its time: its process never started.
#[derive(Debug)]
pub struct Withdrawn;

impl std::fmt::Display for Withdrawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("withdrawn before it started")
    }
}

impl std::error::Error for Withdrawn {}

/// Whether a spawn failed because it was withdrawn (it never started).
pub fn was_withdrawn(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Withdrawn>())
}

/// A request not sent: its spawner's socket was full and took nothing for `ROOM_WAIT_AT_MOST`
/// (a spawner hung in a start), or had no room a moment before. It did not start; another
/// spawner may take it, or the same one later.
#[derive(Debug)]
pub struct NoRoom;

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the spawner takes no request (is it stuck in a start?)")
    }
}

impl std::error::Error for NoRoom {}

/// Whether a spawn was not sent for want of room in its spawner's socket (`NoRoom`).
pub fn had_no_room(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<NoRoom>() || inner.is::<CutOff>())
}

fn no_room() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::WouldBlock, NoRoom)
}

/// A request that went out in part and whose rest found no room: the spawner drops the part
/// at the end of its stream, so it did not start.
#[derive(Debug)]
struct CutOff;

impl std::fmt::Display for CutOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the spawner took the start of the request and no more of it")
    }
}

impl std::error::Error for CutOff {}

fn was_cut_off(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<CutOff>())
}

/// Whether a failed spawn's process may have started anyway (`MayHaveStarted`).
pub fn may_have_started(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<MayHaveStarted>())
}

fn put_u32(out: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    let n = u32::try_from(n)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "too large to run"))?;
    out.extend_from_slice(&n.to_le_bytes());
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &CStr) {
    out.extend_from_slice(s.to_bytes_with_nul());
}

fn put_strings(out: &mut Vec<u8>, strings: &Strings, what: &str) -> std::io::Result<()> {
    // One NUL inside a string would split it in two, and every string after it would be read
    // as the one before.
    if strings.has_nul() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the {what} contain a NUL byte"),
        ));
    }
    put_u32(out, strings.len())?;
    out.extend_from_slice(&strings.bytes);
    Ok(())
}

/// The request as bytes, behind its length; the descriptors travel beside it.
fn encode(request: &Request<'_>) -> std::io::Result<Vec<u8>> {
    if request.cgroup_procs.len() > MAX_CGROUP_FILES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "too many cgroup files for one run",
        ));
    }
    let mut body = Vec::with_capacity(
        256 + request.program.count_bytes()
            + request.cwd.count_bytes()
            + request.argv.bytes.len()
            + request.env.bytes.len(),
    );
    // The body's length goes in front, once it is known.
    body.extend_from_slice(&[0; 4]);
    put_str(&mut body, request.program);
    put_str(&mut body, request.cwd);
    put_strings(&mut body, request.argv, "arguments")?;
    put_strings(&mut body, request.env, "environment")?;
    put_u32(&mut body, request.rlimits.len())?;
    for (resource, limit) in request.rlimits {
        body.extend_from_slice(&(*resource).to_le_bytes());
        body.extend_from_slice(&limit.to_le_bytes());
    }
    match request.user {
        Some((uid, gid)) => {
            body.push(1);
            body.extend_from_slice(&uid.to_le_bytes());
            body.extend_from_slice(&gid.to_le_bytes());
        }
        None => body.push(0),
    }
    match request.start_mark {
        Some((_, mark)) => {
            body.push(1);
            body.extend_from_slice(&mark.offset.to_le_bytes());
            body.extend_from_slice(&mark.bytes());
        }
        None => body.push(0),
    }
    let length = body.len() - 4;
    if length > MAX_REQUEST {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the arguments and environment are {length} bytes, more than {MAX_REQUEST}"),
        ));
    }
    let length = u32::try_from(length)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "too large to run"))?;
    body[..4].copy_from_slice(&length.to_le_bytes());
    Ok(body)
}

/// Writes one request whole, behind its header (its time and `seq`). Where the socket has no
/// room, it tries again as room comes, for as long as the spawner takes something within `wait`
/// (`ROOM_WAIT_AT_MOST`); else `NoRoom` when nothing of it went out (a small request, one
/// chunk of the socket's, goes whole or not at all; Linux cuts a larger one into chunks of a few
/// tens of KiB), `CutOff` when its start did. An error means the spawner cannot have acted on
/// it.
fn send_request(
    stream: &mut UnixStream,
    request: &Encoded<'_>,
    seq: u64,
    wait: std::time::Duration,
) -> std::io::Result<()> {
    // The message's own length covers its body; the header goes between the two.
    let (length, body) = request
        .message
        .split_first_chunk::<4>()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no request"))?;
    let length = u32::from_le_bytes(*length)
        .checked_add(HEADER as u32)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "too large to run"))?;
    let mut head = [0u8; 4 + HEADER];
    head[..4].copy_from_slice(&length.to_le_bytes());
    head[4..12].copy_from_slice(&request.due_ns.to_le_bytes());
    head[12..].copy_from_slice(&seq.to_le_bytes());
    let rights = [ControlMessage::ScmRights(request.fds)];
    let mut room = Room::new(wait);
    let sent = loop {
        match sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(&head), IoSlice::new(body)],
            &rights,
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        ) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                if !room.waited_for(stream)? {
                    return Err(no_room());
                }
            }
            Err(e) => return Err(e.into()),
        }
    };
    // Its start went out: the spawner is taking requests, and the rest is waited for in full.
    let mut room = Room::new(ROOM_WAIT_AT_MOST);
    let rest = |from: usize| -> Vec<IoSlice<'_>> {
        if from < head.len() {
            vec![IoSlice::new(&head[from..]), IoSlice::new(body)]
        } else {
            vec![IoSlice::new(&body[from - head.len()..])]
        }
    };
    let whole = head.len() + body.len();
    let mut sent = sent;
    while sent < whole {
        match nix::sys::socket::sendmsg::<()>(
            stream.as_raw_fd(),
            &rest(sent),
            &[],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        ) {
            Ok(n) => {
                sent += n;
                room = Room::new(ROOM_WAIT_AT_MOST);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                if !room.waited_for(stream)? {
                    return Err(std::io::Error::new(std::io::ErrorKind::WouldBlock, CutOff));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A write's wait for room in a spawner's socket: up to its limit since the spawner last took
/// something, in polls of `ROOM_TRY_EVERY_MS`.
struct Room {
    /// When the first wait began (a write that finds room at once reads no clock).
    since: Option<std::time::Instant>,
    wait: std::time::Duration,
}

impl Room {
    fn new(wait: std::time::Duration) -> Self {
        Self { since: None, wait }
    }

    /// Waits a while for room; false once the limit passed (the write is to give up).
    fn waited_for(&mut self, stream: &UnixStream) -> std::io::Result<bool> {
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        let left = self.wait.saturating_sub(since.elapsed());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = u8::try_from(left.as_millis().saturating_add(1))
            .unwrap_or(u8::MAX)
            .min(ROOM_TRY_EVERY_MS);
        let mut poll = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(stream),
            nix::poll::PollFlags::POLLOUT,
        )];
        match nix::poll::poll(&mut poll, nix::poll::PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }
}

/// Writes a control message (`WITHDRAW`, `PAUSE`, `RESUME`) naming `seq`; unless `wait`,
/// `WouldBlock` when the socket has no room for it (nothing sent: a message this small goes
/// whole or not at all).
fn send_control(stream: &mut UnixStream, kind: u32, seq: u64, wait: bool) -> std::io::Result<()> {
    let mut message = [0u8; 12];
    message[..4].copy_from_slice(&kind.to_le_bytes());
    message[4..].copy_from_slice(&seq.to_le_bytes());
    let flags = if wait {
        MsgFlags::MSG_NOSIGNAL
    } else {
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT
    };
    loop {
        match nix::sys::socket::send(stream.as_raw_fd(), &message, flags) {
            Ok(n) => return stream.write_all(&message[n..]),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// An answer's (pid, errno, `CLOCK_MONOTONIC` ns of the start, number of its request).
fn parse_answer(answer: &[u8]) -> (i32, i32, u64, u64) {
    let field = |at: usize, bytes: &mut [u8]| bytes.copy_from_slice(&answer[at..at + bytes.len()]);
    let (mut pid, mut errno, mut at, mut seq) = ([0u8; 4], [0u8; 4], [0u8; 8], [0u8; 8]);
    field(0, &mut pid);
    field(4, &mut errno);
    field(8, &mut at);
    field(16, &mut seq);
    (
        i32::from_le_bytes(pid),
        i32::from_le_bytes(errno),
        u64::from_le_bytes(at),
        u64::from_le_bytes(seq),
    )
}

/// Forks a spawner on the forking thread, started on the first call.
///
/// Why a thread of its own: a run is the child of the thread that forked its spawner, and the
/// kernel re-parents an orphan to the subreaper's first live thread, the main one. With the
/// spawners forked elsewhere, the main thread's children are orphans only, so the look for
/// strays at each run's end (`contain::Containment::has_strays`) reads that one list and need
/// not wait for the answers the spawner still owes: a run whose pid is not read yet is never
/// there. Waiting for them cost the agent a blocking read, and a spurious wake-up when the
/// spawner took the request, at most runs' ends (BENCHMARKS.md, issue 17). The thread does not
/// end (a thread's children would go to another thread if it did), short of a panic.
fn fork_spawner() -> std::io::Result<Connection> {
    let (reply, answer) = std::sync::mpsc::sync_channel(1);
    {
        let mut forker = locked(&FORKER);
        if forker.is_none() {
            *forker = Some(start_forker()?);
        }
        let asked = forker.as_ref().map(|f| f.asks.send(reply));
        if !matches!(asked, Some(Ok(()))) {
            // It cannot end short of a panic; should it have, the next ask starts another.
            *forker = None;
            return Err(std::io::Error::other(
                "the spawners' forking thread is gone",
            ));
        }
    }
    answer.recv().map_err(|_| {
        *locked(&FORKER) = None;
        std::io::Error::other("the spawners' forking thread is gone")
    })?
}

fn start_forker() -> std::io::Result<Forker> {
    let (asks, asked) =
        std::sync::mpsc::channel::<std::sync::mpsc::SyncSender<std::io::Result<Connection>>>();
    let (tid_tx, tid_rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("jobfleet-forks".into())
        // The spawner runs on a copy of this stack: its requests' buffers are on the heap.
        .stack_size(256 * 1024)
        .spawn(move || {
            let _ = tid_tx.send(nix::unistd::gettid().as_raw());
            // `FORKER` keeps the sender unless this thread is found gone, so this waits for
            // asks forever.
            for reply in asked {
                let _ = reply.send(fork_spawner_here());
            }
            loop {
                std::thread::park();
            }
        })?;
    let thread = tid_rx
        .recv()
        .map_err(|_| std::io::Error::other("the spawners' forking thread did not start"))?;
    Ok(Forker { thread, asks })
}

/// Forks a spawner from the calling thread, which becomes the parent of the runs it starts.
fn fork_spawner_here() -> std::io::Result<Connection> {
    let (ours, theirs) = UnixStream::pair()?;
    let agent = nix::unistd::getpid();
    // SAFETY: the child touches only its own copy of memory: it closes what it inherited, then
    // serves requests and exits; it never returns into the caller's code. Started from `main`
    // the process has this thread and main's, waiting for it; started later, glibc's fork keeps
    // malloc usable in the child, and the child takes no other lock.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            drop(ours);
            serve(theirs, agent)
        }
        nix::unistd::ForkResult::Parent { child } => {
            let thread = nix::unistd::gettid().as_raw();
            let mut threads = locked(&FORKING_THREADS);
            if !threads.contains(&thread) {
                threads.push(thread);
            }
            drop(threads);
            locked(&LIVE).push(child.as_raw());
            Ok(Connection {
                stream: ours,
                pid: child.as_raw(),
            })
        }
    }
}

/// The spawner's name in `ps` and `/proc/<pid>/comm` (at most 15 bytes).
pub const NAME: &CStr = c"jobfleet-spawn";

/// The spawners among the children of agent process `agent` (found by their name, zombies
/// not counted), for tools and tests that look at an agent from outside. A run's process, for
/// the microseconds between its clone and its `exec`, bears the spawner's name and is counted
/// too: callers look at an idle agent, or sum CPU, where such a process has used next to none.
pub fn of_agent(agent: u32) -> Vec<i32> {
    let Some(name) = NAME.to_str().ok() else {
        return Vec::new();
    };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{agent}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
                && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
        })
        .collect()
}

/// The spawner's life: answers requests until the agent's end closes or the agent is gone.
fn serve(stream: UnixStream, agent: nix::unistd::Pid) -> ! {
    close_inherited(stream.as_raw_fd());
    // Named, so an operator tells it from the agent; a nameless failure changes nothing.
    let _ = nix::sys::prctl::set_name(NAME);
    let batch = yield_to_the_agent();
    let code = match serve_requests(stream, agent, batch) {
        Ok(()) => 0,
        Err(_) => 1,
    };
    // SAFETY: _exit ends the process without running the agent's exit handlers or destructors,
    // which belong to the agent, not to this copy of it.
    unsafe { libc::_exit(code) }
}

/// Closes every descriptor but stdio and the socket: a copy of the agent's connections held
/// here would keep them open after the agent closes them.
fn close_inherited(keep: RawFd) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if fd > 2 && fd != keep {
            // SAFETY: closing a descriptor this process owns; nothing here uses it.
            unsafe { libc::close(fd) };
        }
    }
}

/// Makes the calling thread (the spawner's only one, or one of the agent's blocking threads)
/// `SCHED_BATCH` when it is an ordinary (`SCHED_OTHER`) one; says whether it did, and so, in the
/// spawner, whether each run goes back to `SCHED_OTHER` before its exec.
///
/// Why: the agent's main thread wakes the spawner with every request, and the scheduler let the
/// woken spawner take the agent's core at once (wake-up preemption), in the middle of the agent's
/// turn: about one involuntary switch of the agent's main thread per run at 1,000 fires/s, each
/// a switch away and one back (BENCHMARKS.md, issue 17). A batch thread does not preempt when
/// woken: it runs on an idle core at once, or when the running thread's turn ends, which is when
/// the agent would wait for it anyway. Its share of the CPU is unchanged (same nice). A thread
/// started under another policy (an operator's idle, batch or real-time agent) keeps it, and so do
/// the runs; under `SCHED_RESET_ON_FORK` (`chrt -R`) the kernel makes the agent's new threads and
/// the spawner ordinary, and they are then made batch like any ordinary agent's.
pub fn yield_to_the_agent() -> bool {
    let ordinary = libc::sched_param { sched_priority: 0 };
    // SAFETY: reads and sets the calling thread's own policy (Linux keeps one per thread); no
    // memory is passed but `ordinary`.
    unsafe {
        libc::sched_getscheduler(0) == libc::SCHED_OTHER
            && libc::sched_setscheduler(0, libc::SCHED_BATCH, &ordinary) == 0
    }
}

/// A message from the agent, as the spawner reads it.
enum Message {
    Request {
        /// When to start it (`CLOCK_MONOTONIC` ns; 0 or past: at once).
        due_ns: u64,
        seq: u64,
        body: Vec<u8>,
        fds: Vec<OwnedFd>,
    },
    Withdraw(u64),
    Pause,
    Resume,
}

/// A request held until its time.
struct Held {
    due_ns: u64,
    seq: u64,
    body: Vec<u8>,
    fds: Vec<OwnedFd>,
}

fn push_answer(answers: &mut Vec<u8>, pid: i32, errno: i32, seq: u64) {
    answers.extend_from_slice(&pid.to_le_bytes());
    answers.extend_from_slice(&errno.to_le_bytes());
    answers.extend_from_slice(&monotonic_ns().to_le_bytes());
    answers.extend_from_slice(&seq.to_le_bytes());
}

fn serve_requests(
    mut stream: UnixStream,
    agent: nix::unistd::Pid,
    batch: bool,
) -> std::io::Result<()> {
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let mut stack = vec![0u8; CHILD_STACK];
    let mut answers = Vec::with_capacity(MAX_BATCH * ANSWER);
    // When the answers held began to wait (`ANSWERS_HELD_AT_MOST_NS`).
    let mut answers_since: Option<u64> = None;
    // Requests sent ahead of their time: the spawner starts each at its time, so that the agent
    // need not wake for it (BENCHMARKS.md, issue 17). A handful at a time (the agent hands a run
    // over at most `HAND_OVER_AHEAD` before it is due): a scan finds the next.
    let mut held: Vec<Held> = Vec::new();
    let mut paused_until: Option<u64> = None;
    let mut launch_one = |body: &[u8], fds: &[OwnedFd]| match Decoded::parse(body, fds) {
        Some(decoded) => launch(&decoded, devnull.as_raw_fd(), &mut stack, batch),
        None => (-1, libc::EINVAL),
    };
    loop {
        if paused_until.is_some_and(|until| monotonic_ns() >= until) {
            paused_until = None;
        }
        // Messages already there go first: a withdrawal (or the end of the stream) written before
        // a held run's time must keep it from starting even if the spawner reads it late.
        if paused_until.is_none() && !readable_now(&stream) {
            while let Some(next) = next_due(&held, monotonic_ns()) {
                // An agent killed -9 leaves its runs here. None of them starts now: a restarted
                // agent may already have read the start marks and judged them never started.
                if nix::unistd::getppid() != agent {
                    return Ok(());
                }
                let run = held.swap_remove(next);
                let (pid, errno) = launch_one(&run.body, &run.fds);
                drop(run.fds);
                push_answer(&mut answers, pid, errno, run.seq);
            }
        }
        // Answers wait while the next message is already there: the agent reads a batch's
        // answers only after writing all of it, and one write wakes it once. They are written
        // without waiting for room, so that the spawner reads on while the agent writes.
        if answers.is_empty() {
            answers_since = None;
        } else {
            let since = *answers_since.get_or_insert_with(monotonic_ns);
            if answers.len() >= MAX_BATCH * ANSWER
                || !readable_now(&stream)
                || since.saturating_add(ANSWERS_HELD_AT_MOST_NS) <= monotonic_ns()
            {
                write_some(&stream, &mut answers)?;
                answers_since = None;
            }
        }
        let wake_at = if paused_until.is_some() {
            paused_until
        } else {
            held.iter().map(|h| h.due_ns).min()
        };

        if !wait_for_message(&stream, wake_at, !answers.is_empty())? {
            continue;
        }
        let message = match receive(&mut stream) {
            Ok(Some(message)) => message,
            // The agent's end closed, at a message's boundary or inside one (it gave up on a
            // request it could not write whole): the answers are still the agent's, and the
            // requests held never start.
            ended => {
                for run in held.drain(..) {
                    push_answer(&mut answers, 0, WITHDRAWN, run.seq);
                }
                if !answers.is_empty() {
                    let _ = stream.write_all(&answers);
                }
                return ended.map(|_| ());
            }
        };
        match message {
            Message::Request {
                due_ns,
                seq,
                body,
                fds,
            } => {
                if due_ns > monotonic_ns() || paused_until.is_some() {
                    held.push(Held {
                        due_ns,
                        seq,
                        body,
                        fds,
                    });
                    continue;
                }
                // As above: requests left in the socket by an agent killed -9 do not start.
                if nix::unistd::getppid() != agent {
                    return Ok(());
                }
                let (pid, errno) = launch_one(&body, &fds);
                drop(fds);
                push_answer(&mut answers, pid, errno, seq);
            }
            Message::Withdraw(seq) => {
                // One that started is answered already; a number not held is no request.
                if let Some(i) = held.iter().position(|h| h.seq == seq) {
                    held.swap_remove(i);
                    push_answer(&mut answers, 0, WITHDRAWN, seq);
                }
            }
            Message::Pause => {
                paused_until = Some(monotonic_ns().saturating_add(PAUSE_AT_MOST_NS));
                push_answer(&mut answers, 0, 0, PAUSED);
            }
            Message::Resume => paused_until = None,
        }
    }
}

/// The held request due first, if it is due at `now_ns`.
fn next_due(held: &[Held], now_ns: u64) -> Option<usize> {
    held.iter()
        .enumerate()
        .filter(|(_, h)| h.due_ns <= now_ns)
        .min_by_key(|(_, h)| h.due_ns)
        .map(|(i, _)| i)
}

/// Writes what the socket takes of `answers` now and keeps the rest.
fn write_some(stream: &UnixStream, answers: &mut Vec<u8>) -> std::io::Result<()> {
    while !answers.is_empty() {
        match nix::sys::socket::send(
            stream.as_raw_fd(),
            answers,
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        ) {
            Ok(n) => {
                answers.drain(..n);
            }
            Err(nix::errno::Errno::EAGAIN) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits until a message can be read (true), or until `wake_at_ns` or room for the answers held
/// (false).
fn wait_for_message(
    stream: &UnixStream,
    wake_at_ns: Option<u64>,
    answers_held: bool,
) -> std::io::Result<bool> {
    let mut flags = nix::poll::PollFlags::POLLIN;
    if answers_held {
        flags |= nix::poll::PollFlags::POLLOUT;
    }
    let mut poll = [nix::poll::PollFd::new(
        std::os::fd::AsFd::as_fd(stream),
        flags,
    )];
    let timeout = wake_at_ns.map(|at| {
        let ns = at.saturating_sub(monotonic_ns());
        nix::sys::time::TimeSpec::new(
            i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
            i64::try_from(ns % 1_000_000_000).unwrap_or(0),
        )
    });
    match nix::poll::ppoll(&mut poll, timeout, None) {
        Ok(0) | Err(nix::errno::Errno::EINTR) => Ok(false),
        Ok(_) => Ok(poll[0].revents().is_some_and(|r| {
            r.intersects(
                nix::poll::PollFlags::POLLIN
                    | nix::poll::PollFlags::POLLHUP
                    | nix::poll::PollFlags::POLLERR,
            )
        })),
        Err(e) => Err(e.into()),
    }
}

/// Whether a request (or the end of the stream) is waiting to be read.
fn readable_now(stream: &UnixStream) -> bool {
    let mut poll = [nix::poll::PollFd::new(
        std::os::fd::AsFd::as_fd(stream),
        nix::poll::PollFlags::POLLIN,
    )];
    // On an error, flush: holding answers is only ever an optimisation.
    nix::poll::poll(&mut poll, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// One message, with a request's descriptors; `None` at the end of the stream.
fn receive(stream: &mut UnixStream) -> std::io::Result<Option<Message>> {
    let mut head = [0u8; 4];
    let mut cmsg = nix::cmsg_space!([RawFd; 2 + MAX_CGROUP_FILES]);
    let (got, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut head)];
        match recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs()? {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: the kernel just installed these descriptors for us.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                break (msg.bytes, fds);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    if got == 0 {
        return Ok(None);
    }
    stream.read_exact(&mut head[got..])?;
    let len = u32::from_le_bytes(head);
    let mut number = [0u8; 8];
    match len {
        WITHDRAW | PAUSE | RESUME => {
            stream.read_exact(&mut number)?;
            return Ok(Some(match len {
                WITHDRAW => Message::Withdraw(u64::from_le_bytes(number)),
                PAUSE => Message::Pause,
                _ => Message::Resume,
            }));
        }
        _ => {}
    }
    let len = len as usize;
    if !(HEADER..=MAX_REQUEST + HEADER).contains(&len) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "request too large, or shorter than its header",
        ));
    }
    let mut header = [0u8; HEADER];
    stream.read_exact(&mut header)?;
    let mut body = vec![0u8; len - HEADER];
    stream.read_exact(&mut body)?;
    let (due, seq) = header.split_at(8);
    Ok(Some(Message::Request {
        due_ns: u64::from_le_bytes(due.try_into().unwrap_or_default()),
        seq: u64::from_le_bytes(seq.try_into().unwrap_or_default()),
        body,
        fds,
    }))
}

/// A request decoded in the spawner, with the pointer arrays `execve` takes.
struct Decoded<'a> {
    program: &'a CStr,
    cwd: &'a CStr,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    user: Option<(u32, u32)>,
    output: RawFd,
    /// The marks file, the offset of the run's slot, and the mark's bytes.
    start_mark: Option<(RawFd, libc::off_t, [u8; 8])>,
    cgroup_procs: Vec<RawFd>,
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn str(&mut self) -> Option<&'a CStr> {
        let s = CStr::from_bytes_until_nul(self.rest).ok()?;
        self.rest = &self.rest[s.to_bytes_with_nul().len()..];
        Some(s)
    }

    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes().map(u32::from_le_bytes)
    }

    fn strs(&mut self) -> Option<Vec<*const libc::c_char>> {
        let n = self.u32()? as usize;
        let mut out = Vec::with_capacity(n.min(self.rest.len()) + 1);
        for _ in 0..n {
            out.push(self.str()?.as_ptr());
        }
        out.push(std::ptr::null());
        Some(out)
    }
}

impl<'a> Decoded<'a> {
    fn parse(body: &'a [u8], fds: &[OwnedFd]) -> Option<Self> {
        let mut r = Reader { rest: body };
        let program = r.str()?;
        let cwd = r.str()?;
        let argv = r.strs()?;
        let envp = r.strs()?;
        let n = r.u32()? as usize;
        let mut rlimits = Vec::with_capacity(n.min(16));
        for _ in 0..n {
            rlimits.push((r.u32()?, u64::from_le_bytes(r.bytes()?)));
        }
        let user = match r.bytes::<1>()? {
            [0] => None,
            _ => Some((r.u32()?, r.u32()?)),
        };
        let marked = match r.bytes::<1>()? {
            [0] => None,
            _ => Some((
                libc::off_t::try_from(u64::from_le_bytes(r.bytes()?)).ok()?,
                r.bytes::<8>()?,
            )),
        };
        let [output, rest @ ..] = fds else {
            return None;
        };
        let (start_mark, cgroup_procs) = match marked {
            Some((offset, bytes)) => {
                let [marks, cgroup_procs @ ..] = rest else {
                    return None;
                };
                (Some((marks.as_raw_fd(), offset, bytes)), cgroup_procs)
            }
            None => (None, rest),
        };
        Some(Self {
            program,
            cwd,
            argv,
            envp,
            rlimits,
            user,
            output: output.as_raw_fd(),
            start_mark,
            cgroup_procs: cgroup_procs.iter().map(AsRawFd::as_raw_fd).collect(),
        })
    }
}

/// What the child reads, and where it leaves the error of a failed step.
struct ChildArgs<'a> {
    request: &'a Decoded<'a>,
    devnull: RawFd,
    /// The spawner is `SCHED_BATCH` for its own sake (`yield_to_the_agent`), not the run's.
    ordinary_policy: bool,
    errno: AtomicI32,
}

/// Starts the request's process: (pid, 0), or (pid or -1, errno) when it did not get to exec.
fn launch(
    request: &Decoded<'_>,
    devnull: RawFd,
    stack: &mut [u8],
    ordinary_policy: bool,
) -> (i32, i32) {
    let args = ChildArgs {
        request,
        devnull,
        ordinary_policy,
        errno: AtomicI32::new(0),
    };
    let top = stack.as_mut_ptr_range().end;
    // The stack grows down from a 16-byte aligned top.
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: the child shares our memory (CLONE_VM) while we are suspended until it execs or
    // exits (CLONE_VFORK), so `args` and the stack outlive its use of them; it runs only libc's
    // thin system-call wrappers (no lock, no allocation) on data decoded beforehand, in a
    // process of one thread. CLONE_PARENT makes it the agent's
    // child; SIGCHLD goes to the agent when it ends, as for a forked child.
    let pid = unsafe {
        libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PARENT | libc::SIGCHLD,
            std::ptr::from_ref(&args).cast_mut().cast(),
        )
    };
    if pid < 0 {
        return (
            -1,
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        );
    }
    (pid, args.errno.load(Ordering::SeqCst))
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the ChildArgs `launch` passed, alive while the spawner is suspended.
    let args = unsafe { &*arg.cast::<ChildArgs<'_>>() };
    // SAFETY: we are the child, about to exec; become_run only calls libc on prepared data.
    let errno = unsafe { become_run(args) };
    args.errno.store(errno, Ordering::SeqCst);
    // SAFETY: ends the child without touching the memory it shares with the spawner.
    unsafe { libc::_exit(127) }
}

/// Writes `n` in decimal into `buf` without allocating; returns the used tail.
fn itoa(mut n: u32, buf: &mut [u8; 12]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The child's steps up to exec, in the order a fork-based spawn took them; returns the errno
/// of the step that failed (exec only returns on failure).
///
/// # Safety
/// Only in the child of `launch`: it changes this process's signal state, descriptors,
/// folder, limits and user. It allocates nothing.
unsafe fn become_run(args: &ChildArgs<'_>) -> i32 {
    let request = args.request;
    // SAFETY: plain libc calls on locals and on the request's prepared data.
    unsafe {
        // First, so that a run marked in the journal as started and whose mark is missing
        // certainly never ran anything (see `start_marks`).
        if let Some((marks, offset, bytes)) = &request.start_mark {
            let written = libc::pwrite(*marks, bytes.as_ptr().cast(), bytes.len(), *offset);
            if written < 0 {
                return errno();
            }
            if written as usize != bytes.len() {
                return libc::ENOSPC;
            }
        }
        // A run starts with no signal blocked and SIGPIPE at its default: the agent ignores it,
        // and an ignored signal stays ignored across exec.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0
            || libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR
            || libc::setpgid(0, 0) != 0
            || libc::dup2(args.devnull, 0) < 0
            || libc::dup2(request.output, 1) < 0
            || libc::dup2(request.output, 2) < 0
            || libc::chdir(request.cwd.as_ptr()) != 0
        {
            return errno();
        }
        // Back to an ordinary process's policy, nice kept. Linux lets a process leave
        // SCHED_BATCH for SCHED_OTHER unprivileged; only a security module or seccomp filter could
        // refuse it, and that would have refused the spawner's own change, which then never
        // happened. Best effort all the same: a run left a batch process loses only wake-up
        // preemption, a run failed for it would lose its start.
        if args.ordinary_policy {
            let ordinary = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &ordinary);
        }
        let mut buf = [0u8; 12];
        let pid = itoa(libc::getpid() as u32, &mut buf);
        for fd in &request.cgroup_procs {
            if libc::write(*fd, pid.as_ptr().cast(), pid.len()) < 0 {
                return errno();
            }
        }
        for (resource, limit) in &request.rlimits {
            let value = libc::rlimit {
                rlim_cur: *limit,
                rlim_max: *limit,
            };
            if libc::setrlimit(*resource, &value) != 0 {
                return errno();
            }
        }
        if let Some((uid, gid)) = request.user {
            let groups = [gid];
            if libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return errno();
            }
        }
        libc::execve(
            request.program.as_ptr(),
            request.argv.as_ptr(),
            request.envp.as_ptr(),
        );
        errno()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The probe sees where an orphan really goes: this test process is no subreaper (no test of
    /// this binary makes it one) nor a namespace's init, so the orphan goes to an ancestor and
    /// the probe says no. That it
    /// says yes in a subreaper is `tests/sweep.rs`' quick look, which needs it.
    #[test]
    fn an_orphan_of_a_process_that_is_no_subreaper_does_not_land_on_its_main_thread() {
        assert!(
            std::thread::spawn(an_orphan_lands_on_the_main_thread)
                .join()
                .unwrap()
                == Some(false)
        );
    }

    #[test]
    fn itoa_writes_decimal() {
        let mut buf = [0u8; 12];
        assert_eq!(itoa(0, &mut buf), b"0");
        let mut buf = [0u8; 12];
        assert_eq!(itoa(4_194_304, &mut buf), b"4194304");
    }

    #[test]
    fn a_request_holding_the_runs_own_files_sends_them_in_the_spawners_order() {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| File::create(dir.path().join(name)).unwrap();
        let (output, marks, cgroup) = (open("out"), Arc::new(open("marks")), open("procs"));
        let (out_fd, marks_fd, cgroup_fd) =
            (output.as_raw_fd(), marks.as_raw_fd(), cgroup.as_raw_fd());
        let argv: Strings = ["true"].into_iter().collect();
        let mut request = Request::plain(c"/bin/true", &argv, out_fd);
        let mark = Mark {
            offset: 8,
            run_id: 5,
        };
        request.start_mark = Some((marks_fd, mark));
        let cgroups = [cgroup_fd];
        request.cgroup_procs = &cgroups;
        let queued = Queued::holding_own(&request, output.into(), Some(marks.clone())).unwrap();
        let fds = queued.encoded().fds.to_vec();
        assert_eq!(
            &fds[..2],
            &[out_fd, marks_fd],
            "the run's own output and the shared marks file, not copies"
        );
        assert_ne!(fds[2], cgroup_fd, "the cgroup file is a copy");
        assert_eq!(fds.len(), 3);

        // Files that are not the request's are refused rather than sent in another's place.
        let other = open("other");
        request.output = other.as_raw_fd();
        let refused = Queued::holding_own(&request, other.into(), None)
            .err()
            .unwrap();
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn strings_holding_a_nul_are_refused_not_split() {
        let argv: Strings = ["true", "two words"].into_iter().collect();
        assert_eq!(
            argv.iter().collect::<Vec<_>>(),
            [b"true".as_slice(), b"two words".as_slice()]
        );
        let mut env = Strings::default();
        env.push_fmt(format_args!("A={}", "x\0y"));
        assert!(env.has_nul());
        let refused = encode(&Request {
            env: &env,
            ..Request::plain(c"/bin/true", &argv, 1)
        })
        .unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
        assert!(refused.to_string().contains("environment"), "{refused}");
    }

    #[test]
    fn a_request_decodes_to_what_was_encoded() {
        let argv: Strings = ["sh", "-c", "echo hi"].into_iter().collect();
        let mut env = Strings::default();
        env.push_fmt(format_args!("{}={}", "A", 1));
        let request = Request {
            program: c"/bin/sh",
            argv: &argv,
            env: &env,
            cwd: c"/tmp",
            output: 1,
            start_mark: Some((
                2,
                Mark {
                    offset: 24,
                    run_id: 77,
                },
            )),
            cgroup_procs: &[],
            rlimits: &[(libc::RLIMIT_NPROC, 7)],
            user: Some((1000, 1001)),
        };
        let message = encode(&request).unwrap();
        let body = &message[4..];
        assert_eq!(
            u32::from_le_bytes(message[..4].try_into().unwrap()) as usize,
            body.len()
        );
        let fds: Vec<OwnedFd> = (0..2)
            .map(|_| std::fs::File::open("/dev/null").unwrap().into())
            .collect();
        let decoded = Decoded::parse(body, &fds).unwrap();
        assert_eq!(decoded.program, c"/bin/sh");
        assert_eq!(decoded.cwd, c"/tmp");
        assert_eq!(decoded.argv.len(), 4);
        assert!(decoded.argv[3].is_null());
        // SAFETY: the pointers point into `body`, alive here.
        assert_eq!(unsafe { CStr::from_ptr(decoded.argv[2]) }, c"echo hi");
        assert_eq!(decoded.envp.len(), 2);
        assert_eq!(decoded.rlimits, vec![(libc::RLIMIT_NPROC, 7)]);
        assert_eq!(decoded.user, Some((1000, 1001)));
        assert_eq!(
            decoded.start_mark,
            Some((fds[1].as_raw_fd(), 24, 77i64.to_le_bytes()))
        );
        // A truncated body is refused, not read past.
        for cut in 0..body.len() {
            assert!(Decoded::parse(&body[..cut], &fds).is_none(), "cut at {cut}");
        }
        assert!(Decoded::parse(body, &fds[..1]).is_none(), "no start mark");

        // Without a mark (tests' plain runs), the descriptors after the output are the cgroup
        // files.
        let unmarked = encode(&Request {
            start_mark: None,
            cgroup_procs: &[3],
            ..request
        })
        .unwrap();
        let decoded = Decoded::parse(&unmarked[4..], &fds).unwrap();
        assert_eq!(decoded.start_mark, None);
        assert_eq!(decoded.cgroup_procs, vec![fds[1].as_raw_fd()]);
    }

    #[allow(
        clippy::zombie_processes,
        reason = "`Spawner::forget` kills and reaps it by its pid, as it does a spawner"
    )]
    fn stand_in_pid() -> i32 {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        i32::try_from(child.id()).unwrap()
    }

    /// A stand-in spawner: a real process to kill (the connection's pid) and a thread on the
    /// other end of the pair that reads `requests` requests, all of them before it answers any,
    /// then answers the first `answers` of them, each with the number its program's name ends
    /// with (`/bin/p7`: pid 7), and hangs up.
    fn fake_spawner(requests: usize, answers: usize) -> Connection {
        gated_fake_spawner(requests, answers, None)
    }

    /// `fake_spawner`, but once it has answered the first `answers` requests it answers the rest
    /// too when `gate` lets it (and holds the connection open until then).
    fn gated_fake_spawner(
        requests: usize,
        answers: usize,
        gate: Option<std::sync::mpsc::Receiver<()>>,
    ) -> Connection {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stand_in = stand_in_pid();
        std::thread::spawn(move || {
            let mut pids = Vec::new();
            for _ in 0..requests {
                let mut length = [0u8; 4];
                theirs.read_exact(&mut length).unwrap();
                let mut body = vec![0u8; u32::from_le_bytes(length) as usize];
                theirs.read_exact(&mut body).unwrap();
                let seq = u64::from_le_bytes(body[8..HEADER].try_into().unwrap());
                let program = CStr::from_bytes_until_nul(&body[HEADER..])
                    .unwrap()
                    .to_str()
                    .unwrap();
                let pid = program.trim_start_matches("/bin/p").parse::<i32>().unwrap();
                pids.push((pid, seq));
            }
            let answered = match gate {
                Some(_) => pids.len(),
                None => answers,
            };
            for (i, (pid, seq)) in pids.into_iter().take(answered).enumerate() {
                if i == answers
                    && let Some(gate) = &gate
                {
                    gate.recv().unwrap();
                }
                let mut bytes = Vec::new();
                push_answer(&mut bytes, pid, 0, seq);
                theirs.write_all(&bytes).unwrap();
            }
        });
        Connection {
            stream: ours,
            pid: stand_in,
        }
    }

    /// `send_via` and `collect`: each request's pid, or why it did not start.
    fn spawn_via(
        spawner: &mut Spawner,
        fork: impl FnMut() -> std::io::Result<Connection>,
        batch: &[Encoded<'_>],
    ) -> Vec<std::io::Result<i32>> {
        let sent = spawner.send_via(fork, batch);
        let mut outcomes: std::collections::HashMap<u64, _> =
            spawner.collect(true).into_iter().collect();
        sent.into_iter()
            .map(|sent| {
                sent.and_then(|seq| {
                    outcomes
                        .remove(&seq)
                        .expect("an outcome for each request sent")
                        .map(|started| started.pid)
                })
            })
            .collect()
    }

    fn holding(connection: Connection) -> Spawner {
        let mut spawner = Spawner::default();
        spawner.connection = Some(connection);
        spawner
    }

    /// A request to run `program` with `argv` in `/`, output to `output`, nothing else set.
    fn plain_request(program: &CStr, argv: &Strings, output: RawFd) -> Vec<u8> {
        encode(&Request::plain(program, argv, output)).unwrap()
    }

    fn devnull() -> std::fs::File {
        std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap()
    }

    fn request_bytes(n: usize) -> Vec<u8> {
        let argv: Strings = ["true"].into_iter().collect();
        let program = std::ffi::CString::new(format!("/bin/p{n}")).unwrap();
        encode(&Request {
            program: &program,
            argv: &argv,
            env: &Strings::default(),
            cwd: c"/",
            output: 1,
            start_mark: Some((2, Mark::default())),
            cgroup_procs: &[],
            rlimits: &[],
            user: None,
        })
        .unwrap()
    }

    fn batch_of(messages: &[Vec<u8>]) -> Vec<Encoded<'_>> {
        messages
            .iter()
            .map(|message| Encoded {
                message,
                fds: &[0, 1],
                due_ns: 0,
            })
            .collect()
    }

    /// A wait with a deadline (a burst's) returns at it with what came in; with an answer then
    /// overdue, the spawner is stuck, and the next such wait takes only what is in (a spawner
    /// hung in a start holds the agent's runtime thread once, not at each batch); once the answer
    /// came, it is not.
    #[test]
    fn a_bounded_wait_is_not_repeated_for_a_spawner_stuck_in_a_start() {
        let messages: Vec<Vec<u8>> = (1..=2).map(request_bytes).collect();
        let (go_on, gate) = std::sync::mpsc::channel();
        let mut slot = holding(gated_fake_spawner(2, 1, Some(gate)));
        let sent: Vec<u64> = slot
            .send_via(|| panic!("no second spawner"), &batch_of(&messages))
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let overdue = std::time::Duration::from_nanos(OVERDUE_AFTER_NS);
        let first = slot.collect_by(std::time::Instant::now() + overdue * 2);
        assert_eq!(first.len(), 1, "the answer that came, and only it");
        assert_eq!(first[0].0, sent[0]);
        assert!(slot.stuck(monotonic_ns()), "the second answer is overdue");
        let asked = std::time::Instant::now();
        assert!(
            slot.collect_by(asked + std::time::Duration::from_secs(60))
                .is_empty(),
            "nothing more came"
        );
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(30),
            "a spawner stuck was waited for again"
        );
        go_on.send(()).unwrap();
        let second = slot.collect(true);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].0, sent[1]);
        assert_eq!(second[0].1.as_ref().unwrap().pid, 2);
        assert!(!slot.stuck(monotonic_ns()), "caught up");
    }

    #[test]
    fn a_spawner_that_died_with_the_requests_is_not_asked_again() {
        let messages: Vec<Vec<u8>> = (1..=3).map(request_bytes).collect();
        let mut forks = 0;
        let mut slot = Spawner::default();
        // It takes all three and answers the first only.
        let outcome = spawn_via(
            &mut slot,
            || {
                forks += 1;
                Ok(fake_spawner(3, 1))
            },
            &batch_of(&messages),
        );
        assert_eq!(*outcome[0].as_ref().unwrap(), 1);
        for error in outcome[1..].iter().map(|o| o.as_ref().unwrap_err()) {
            assert!(
                error.to_string().contains("died before answering"),
                "{error}"
            );
        }
        assert_eq!(forks, 1, "a second spawner could start the runs twice");
        assert!(slot.connection.is_none(), "the dead spawner is forgotten");
        assert_eq!(
            slot.unsure(),
            2,
            "the look for strays must learn of two processes it may not know"
        );
    }

    #[test]
    fn a_request_that_never_reached_a_spawner_goes_to_a_new_one() {
        let messages = vec![request_bytes(4242)];
        let mut forks = 0;
        let mut slot = Spawner::default();
        let outcome = spawn_via(
            &mut slot,
            || {
                forks += 1;
                // The first one is gone before the request: the pair's far end is closed.
                Ok(if forks == 1 {
                    let (ours, theirs) = UnixStream::pair().unwrap();
                    drop(theirs);
                    let stand_in = stand_in_pid();
                    Connection {
                        stream: ours,
                        pid: stand_in,
                    }
                } else {
                    fake_spawner(1, 1)
                })
            },
            &batch_of(&messages),
        );
        assert_eq!(*outcome[0].as_ref().unwrap(), 4242);
        assert_eq!(forks, 2);
    }

    /// A batch's requests go out before any answer is read (the stand-in answers only once it
    /// has all of them), and each request gets its own answer back.
    #[test]
    fn a_batch_goes_out_back_to_back_and_each_request_gets_its_own_answer() {
        let messages: Vec<Vec<u8>> = (1..=MAX_BATCH).map(request_bytes).collect();
        let mut slot = holding(fake_spawner(MAX_BATCH, MAX_BATCH));
        let outcome = spawn_via(
            &mut slot,
            || panic!("no second spawner"),
            &batch_of(&messages),
        );
        let pids: Vec<i32> = outcome.into_iter().map(Result::unwrap).collect();
        assert_eq!(pids, (1..=MAX_BATCH as i32).collect::<Vec<_>>());
    }

    /// The real spawner, a batch larger than `MAX_BATCH`: each request starts its own process,
    /// a child of this process, and a failed exec is reported for its own request only.
    #[test]
    fn a_batch_through_a_real_spawner_starts_each_process() {
        let devnull = devnull();
        let output = [devnull.as_raw_fd()];
        let bad = 17;
        let messages: Vec<Vec<u8>> = (0..MAX_BATCH + 10)
            .map(|i| {
                if i == bad {
                    plain_request(
                        c"/nonexistent/program",
                        &["x"].into_iter().collect(),
                        output[0],
                    )
                } else {
                    let mut argv: Strings = ["sh", "-c"].into_iter().collect();
                    argv.push_fmt(format_args!("exit {}", i % 7));
                    plain_request(c"/bin/sh", &argv, output[0])
                }
            })
            .collect();
        let batch: Vec<Encoded<'_>> = messages
            .iter()
            .map(|message| Encoded {
                message,
                fds: &output,
                due_ns: 0,
            })
            .collect();
        let mut slot = Spawner::default();
        let outcomes: Vec<_> = batch
            .chunks(MAX_BATCH)
            .flat_map(|chunk| spawn_via(&mut slot, fork_spawner, chunk))
            .collect();
        assert_eq!(outcomes.len(), MAX_BATCH + 10);
        for (i, outcome) in outcomes.into_iter().enumerate() {
            if i == bad {
                let error = outcome.unwrap_err();
                assert_eq!(error.raw_os_error(), Some(libc::ENOENT), "{error}");
                continue;
            }
            let pid = nix::unistd::Pid::from_raw(outcome.unwrap());
            let status = nix::sys::wait::waitpid(pid, None).unwrap();
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(pid, (i % 7) as i32),
                "run {i}"
            );
        }
    }

    /// Each run's process writes its own mark into its slot before anything else, so even one
    /// whose exec then fails is marked; a run without a mark writes none.
    #[test]
    fn a_run_s_process_writes_its_start_mark_into_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let marks = crate::runner::start_marks::StartMarks::open(dir.path()).unwrap();
        let file = marks.file();
        let devnull = devnull();
        let fds = [devnull.as_raw_fd(), file.as_raw_fd()];
        let argv: Strings = ["sh", "-c", "exit 0"].into_iter().collect();
        let messages: Vec<Vec<u8>> = [(41, c"/bin/sh"), (42, c"/nonexistent/program")]
            .into_iter()
            .map(|(run_id, program)| {
                let mut request = Request::plain(program, &argv, fds[0]);
                request.start_mark = Some((fds[1], marks.take(run_id)));
                encode(&request).unwrap()
            })
            .chain([plain_request(c"/bin/sh", &argv, fds[0])])
            .collect();
        let batch: Vec<Encoded<'_>> = messages
            .iter()
            .enumerate()
            .map(|(i, message)| Encoded {
                message,
                fds: if i < 2 { &fds } else { &fds[..1] },
                due_ns: 0,
            })
            .collect();
        let mut slot = Spawner::default();
        let outcomes = spawn_via(&mut slot, fork_spawner, &batch);
        drop(slot);
        for outcome in [&outcomes[0], &outcomes[2]] {
            let pid = nix::unistd::Pid::from_raw(*outcome.as_ref().unwrap());
            nix::sys::wait::waitpid(pid, None).unwrap();
        }
        assert_eq!(
            outcomes[1].as_ref().unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        assert_eq!(
            crate::runner::start_marks::StartMarks::left_in(dir.path()).unwrap(),
            std::collections::HashSet::from([41, 42])
        );
    }

    /// The policy field (41st) of `/proc/<pid>/stat`, read after the name's closing bracket.
    fn policy_of(pid: i32) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(38).unwrap().parse().unwrap()
    }

    /// The spawner of an ordinary agent is a batch process, so waking it never takes the agent's
    /// core; the runs it starts are ordinary processes all the same, from their first
    /// instruction of the program on.
    #[test]
    fn the_spawner_yields_to_the_agent_and_its_runs_are_ordinary() {
        // SAFETY: reads this thread's own policy.
        let ours = unsafe { libc::sched_getscheduler(0) };
        assert_eq!(
            ours,
            libc::SCHED_OTHER,
            "the test needs an ordinary process"
        );
        let (read, write) = nix::unistd::pipe().unwrap();
        let output = [write.as_raw_fd()];
        // The shell's own policy, and that of a program it starts.
        let argv: Strings = [
            "sh",
            "-c",
            "cut -d ' ' -f 41 /proc/$$/stat; cut -d ' ' -f 41 /proc/self/stat",
        ]
        .into_iter()
        .collect();
        let message = plain_request(c"/bin/sh", &argv, output[0]);
        let mut slot = Spawner::default();
        let outcome = spawn_via(
            &mut slot,
            fork_spawner,
            &[Encoded {
                message: &message,
                fds: &output,
                due_ns: 0,
            }],
        );
        let spawner = slot.connection.as_ref().unwrap().pid;
        assert_eq!(policy_of(spawner), libc::SCHED_BATCH);
        let pid = nix::unistd::Pid::from_raw(*outcome[0].as_ref().unwrap());
        nix::sys::wait::waitpid(pid, None).unwrap();
        drop(write);
        let mut printed = String::new();
        File::from(read).read_to_string(&mut printed).unwrap();
        assert_eq!(printed, "0\n0\n", "SCHED_OTHER is 0");
    }

    /// A request sent ahead of its time starts then, not before, and `collect(true)` waits only for
    /// those due; one withdrawn never starts; a pause holds one that comes due until the resume.
    #[test]
    fn requests_sent_ahead_start_at_their_time_unless_withdrawn_or_paused() {
        let devnull = devnull();
        let output = [devnull.as_raw_fd()];
        let argv: Strings = ["sh", "-c", "exit 0"].into_iter().collect();
        let message = plain_request(c"/bin/sh", &argv, output[0]);
        let request = |due_ns| Encoded {
            message: &message,
            fds: &output,
            due_ns,
        };
        let in_ms = |ms: u64| monotonic_ns() + ms * 1_000_000;
        let reap = |outcome: &std::io::Result<Started>| {
            let pid = nix::unistd::Pid::from_raw(outcome.as_ref().unwrap().pid);
            nix::sys::wait::waitpid(pid, None).unwrap();
        };
        let mut slot = Spawner::default();
        let (soon, later) = (in_ms(1_000), in_ms(60_000));
        let seqs: Vec<u64> = slot
            .send_via(fork_spawner, &[request(soon), request(0), request(later)])
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let now = slot.collect(true);
        assert_eq!(now.len(), 1, "only the one due now is waited for");
        assert_eq!(now[0].0, seqs[1]);
        reap(&now[0].1);
        assert!(slot.holds_for_later(monotonic_ns()));
        assert_eq!(slot.first_due(), Some(soon));

        slot.withdraw(seqs[2]);
        let withdrawn = slot.collect(false);
        assert_eq!(withdrawn.len(), 1);
        assert_eq!(withdrawn[0].0, seqs[2]);
        assert!(was_withdrawn(withdrawn[0].1.as_ref().unwrap_err()));

        std::thread::sleep(std::time::Duration::from_millis(1_050));
        let due = slot.collect(true);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, seqs[0]);
        let started = due[0].1.as_ref().unwrap();
        assert!(started.at >= instant_of(soon), "started before its time");
        reap(&due[0].1);

        // Paused, the spawner starts nothing, due or not, until it resumes.
        let held = slot.send_via(fork_spawner, &[request(in_ms(300))]);
        let held = *held[0].as_ref().unwrap();
        assert!(slot.pause());
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(slot.collect(false).is_empty(), "it started while paused");
        slot.resume();
        let resumed = slot.collect(true);
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].0, held);
        reap(&resumed[0].1);
        assert!(!slot.holds_for_later(monotonic_ns()));
    }

    /// Ten thousand requests written without a read in between: their answers are more than the
    /// agent's socket holds, and the spawner writes them without waiting for room and reads on,
    /// so neither end waits for the other.
    #[test]
    fn a_batch_far_larger_than_the_socket_goes_out_without_reads_in_between() {
        let devnull = devnull();
        let output = [devnull.as_raw_fd()];
        let message = plain_request(
            c"/nonexistent/program",
            &["x"].into_iter().collect(),
            output[0],
        );
        let batch: Vec<Encoded<'_>> = (0..10_000)
            .map(|_| Encoded {
                message: &message,
                fds: &output,
                due_ns: 0,
            })
            .collect();
        let mut slot = Spawner::default();
        let outcomes = spawn_via(&mut slot, fork_spawner, &batch);
        assert_eq!(outcomes.len(), 10_000);
        for outcome in outcomes {
            assert_eq!(outcome.unwrap_err().raw_os_error(), Some(libc::ENOENT));
        }
    }

    /// The agent gave up on a request it could not write whole (the stream ends inside it):
    /// the spawner still hands over the answers it held for the requests before it, so that
    /// those runs are known started, and exits.
    #[test]
    fn a_spawner_left_with_half_a_request_answers_what_it_held() {
        let devnull = devnull();
        let output = [devnull.as_raw_fd()];
        let argv: Strings = ["sh", "-c", "exit 3"].into_iter().collect();
        let message = plain_request(c"/bin/sh", &argv, output[0]);
        let whole = Encoded {
            message: &message,
            fds: &output,
            due_ns: 0,
        };
        let mut connection = fork_spawner().unwrap();
        send_request(&mut connection.stream, &whole, 0, ROOM_WAIT_AT_MOST).unwrap();
        send_request(&mut connection.stream, &whole, 1, ROOM_WAIT_AT_MOST).unwrap();
        // One held for later, which never starts now.
        send_request(
            &mut connection.stream,
            &Encoded {
                due_ns: monotonic_ns() + 60_000_000_000,
                ..whole
            },
            2,
            ROOM_WAIT_AT_MOST,
        )
        .unwrap();
        send_request(
            &mut connection.stream,
            &Encoded {
                message: &message[..message.len() / 2],
                fds: &output,
                due_ns: 0,
            },
            3,
            ROOM_WAIT_AT_MOST,
        )
        .unwrap();
        connection
            .stream
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
        let mut answer = [0u8; ANSWER];
        for expected in 0..2 {
            connection.stream.read_exact(&mut answer).unwrap();
            let (pid, errno, _, seq) = parse_answer(&answer);
            assert_eq!((errno, seq), (0, expected));
            let pid = nix::unistd::Pid::from_raw(pid);
            assert_eq!(
                nix::sys::wait::waitpid(pid, None).unwrap(),
                nix::sys::wait::WaitStatus::Exited(pid, 3)
            );
        }
        connection.stream.read_exact(&mut answer).unwrap();
        let (pid, errno, _, seq) = parse_answer(&answer);
        assert_eq!(
            (pid, errno, seq),
            (0, WITHDRAWN, 2),
            "the one held for later is withdrawn, never started"
        );
        assert!(
            connection.stream.read_exact(&mut answer).is_err(),
            "nothing more"
        );
        let spawner = nix::unistd::Pid::from_raw(connection.pid);
        assert!(matches!(
            nix::sys::wait::waitpid(spawner, None).unwrap(),
            nix::sys::wait::WaitStatus::Exited(_, _)
        ));
    }
}
