//! The accept journal: which runs this agent took, kept on disk so that a trigger repeated by
//! an admin (a run in doubt sent again, under the same run id) never runs twice, and so that an
//! agent restarted after a crash knows what it had.
//!
//! One line per fact, appended: `B boot-id` the host boot the file was written in (first line),
//! `A id ms` accepted and started at once, `Q id ms` accepted into
//! the queue, `S id` a queued run starts, `F id` its result is in the spool, `R id` released (it
//! never started and was handed back to the admins, so it may be accepted again). `A` and `S`
//! are on disk (fsync, shared by the runs of a burst) before the run's process is spawned: a run
//! whose start is not on disk never ran; a queued run starts only if its `Q` landed too. `F`
//! and `R` are written without waiting, and held back until the next line a run waits for
//! goes out (a trigger's `A` lines), a second at most, or the agent stops (`flush`): an agent
//! with runs ending steadily then costs its journal no write of their own. Losing one to a
//! crash makes a finished run look interrupted, which is reported and ignored by the admin
//! (the run is final there). A last line without its newline (a crash mid-write) is not read.
//!
//! Memory and disk are bounded: the newest `capacity` runs are remembered, older ones are
//! forgotten when the file is compacted (at start and whenever it has grown to twice that).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

pub const FILE: &str = "accepted.journal";

/// What the journal knows of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Waiting for a free slot; it has not started.
    Queued,
    /// Its process may have started.
    Started,
    /// Its result went to the spool.
    Finished,
}

#[derive(Debug, Clone, Copy)]
struct Known {
    fate: Fate,
    /// Order of acceptance, for forgetting the oldest first.
    order: u64,
    accepted_ms: i64,
}

/// What a restarted agent finds of its previous process's runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// Accepted into the queue and never started: safe to hand back for sending elsewhere.
    pub never_started: Vec<i64>,
    /// Journalled as started and never finished: its process may have started before the agent
    /// died.
    pub interrupted: Vec<i64>,
    /// The previous process ran since the host's last boot, so what it left in files without
    /// an fsync (a run's start mark) is still there; after a reboot it may not be.
    pub same_boot: bool,
}

struct Inner {
    runs: HashMap<i64, Known>,
    next_order: u64,
    /// Lines in the file, for deciding when to compact.
    lines: usize,
}

type Pending = (String, Option<watch::Sender<bool>>);

/// Resolves once a journal line is on disk; clones wait for the same line.
#[derive(Debug, Clone)]
pub struct Landed(watch::Receiver<bool>);

impl Landed {
    /// True once the line is on disk; false if it never will be (the writer failed or stopped).
    pub async fn wait(mut self) -> bool {
        self.0.wait_for(|written| *written).await.is_ok()
    }

    /// A line already on disk (`true`) or that never will be (`false`).
    #[cfg(test)]
    pub fn settled(on_disk: bool) -> Self {
        let (written, landed) = watch::channel(on_disk);
        if on_disk {
            // Kept: a receiver of a dropped sender that never said true reads as a failure.
            std::mem::forget(written);
        }
        Self(landed)
    }
}

#[derive(Clone)]
pub struct Journal {
    path: PathBuf,
    /// This host boot's id, written at the top of every rewrite.
    boot: Option<String>,
    capacity: usize,
    inner: Arc<Mutex<Inner>>,
    queue: mpsc::UnboundedSender<Pending>,
}

/// What a previous agent process left in the journal, read and not yet rewritten: until
/// `open` puts the new file in place, the file on disk goes on naming those runs unsettled, so
/// an agent that dies before their results are spooled finds them again at its next start.
pub struct Recovered {
    path: PathBuf,
    runs: HashMap<i64, Known>,
    next_order: u64,
    leftovers: Leftovers,
}

impl Recovered {
    /// The previous process's unfinished runs, for the caller to settle before `open`.
    pub fn leftovers(&self) -> &Leftovers {
        &self.leftovers
    }

    /// Once the leftovers are settled (their results spooled): remembers the previous
    /// process's runs as finished, except those never started and those in `released` (handed
    /// back, so they may be accepted again), compacts the file and starts the writer (so it
    /// needs a tokio runtime).
    ///
    /// # Errors
    /// When the file cannot be rewritten.
    pub fn open(self, capacity: usize, released: &[i64]) -> std::io::Result<Journal> {
        let Self {
            path,
            mut runs,
            next_order,
            ..
        } = self;
        runs.retain(|_, k| k.fate != Fate::Queued);
        for run_id in released {
            runs.remove(run_id);
        }
        for known in runs.values_mut() {
            known.fate = Fate::Finished;
        }
        forget_oldest(&mut runs, capacity);
        let boot = boot_id();
        let lines = rewrite(&path, boot.as_deref(), &runs)?;
        let (queue, inbox) = mpsc::unbounded_channel();
        let journal = Journal {
            path,
            boot,
            capacity,
            inner: Arc::new(Mutex::new(Inner {
                runs,
                next_order,
                lines,
            })),
            queue,
        };
        tokio::spawn(write_forever(journal.clone(), inbox));
        Ok(journal)
    }
}

impl Journal {
    /// Reads (without changing) what the previous process left in `dir`; `Recovered::open`
    /// then starts this process's journal.
    ///
    /// # Errors
    /// When the file exists and cannot be read.
    pub fn recover(dir: &Path) -> std::io::Result<Recovered> {
        let path = dir.join(FILE);
        let mut runs: HashMap<i64, Known> = HashMap::new();
        let mut next_order = 0;
        let mut written_in = None;
        match std::fs::File::open(&path) {
            Ok(file) => {
                let mut reader = std::io::BufReader::new(file);
                let mut bytes = Vec::new();
                loop {
                    bytes.clear();
                    // A torn last line (a crash mid-write: no newline yet) is skipped, and so is
                    // anything unreadable: `A 12` torn from `A 1234 …` must not name run 12.
                    match reader.read_until(b'\n', &mut bytes) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if bytes.last() != Some(&b'\n') => break,
                        Ok(_) => {}
                    }
                    let Ok(line) = std::str::from_utf8(&bytes[..bytes.len() - 1]) else {
                        continue;
                    };
                    if let Some(boot) = line.strip_prefix("B ") {
                        written_in = Some(boot.to_owned());
                    } else {
                        apply(&mut runs, &mut next_order, line);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let boot = boot_id();
        let mut leftovers = Leftovers {
            same_boot: boot.is_some() && written_in == boot,
            ..Leftovers::default()
        };
        for (&id, known) in &runs {
            match known.fate {
                Fate::Queued => leftovers.never_started.push(id),
                Fate::Started => leftovers.interrupted.push(id),
                Fate::Finished => {}
            }
        }
        leftovers.never_started.sort_unstable();
        leftovers.interrupted.sort_unstable();
        Ok(Recovered {
            path,
            runs,
            next_order,
            leftovers,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What is known of `run_id`, if it was accepted here (by this process or, within the
    /// journal's memory, a previous one).
    pub fn fate(&self, run_id: i64) -> Option<Fate> {
        self.lock().runs.get(&run_id).map(|k| k.fate)
    }

    /// When `run_id` was accepted, if the journal remembers it.
    pub fn accepted_ms(&self, run_id: i64) -> Option<i64> {
        self.lock().runs.get(&run_id).map(|k| k.accepted_ms)
    }

    /// Notes an accepted run; returns a receiver that fires once the note is on disk (for a
    /// run that starts now) — the process must not be spawned before.
    pub fn accepted(&self, run_id: i64, queued: bool, now_ms: i64) -> Landed {
        {
            let mut inner = self.lock();
            let order = inner.next_order;
            inner.next_order += 1;
            inner.runs.insert(
                run_id,
                Known {
                    fate: if queued { Fate::Queued } else { Fate::Started },
                    order,
                    accepted_ms: now_ms,
                },
            );
        }
        let tag = if queued { 'Q' } else { 'A' };
        self.append(format!("{tag} {run_id} {now_ms}\n"), true)
    }

    /// Notes that a queued run starts; the receiver fires once that is on disk.
    pub fn started(&self, run_id: i64) -> Landed {
        self.set(run_id, Fate::Started);
        self.append(format!("S {run_id}\n"), true)
    }

    /// Notes that a run's result is in the spool.
    pub fn finished(&self, run_id: i64) {
        self.set(run_id, Fate::Finished);
        let _ = self.append(format!("F {run_id}\n"), false);
    }

    /// Forgets a run that never started and was handed back: it may be accepted again.
    pub fn released(&self, run_id: i64) {
        self.lock().runs.remove(&run_id);
        let _ = self.append(format!("R {run_id}\n"), false);
    }

    /// Writes the lines held back (`F`, `R`) at once, with an fsync: before the agent stops,
    /// so that its next start finds the runs that finished finished.
    pub fn flush(&self) -> Landed {
        self.append(String::new(), true)
    }

    fn set(&self, run_id: i64, fate: Fate) {
        if let Some(known) = self.lock().runs.get_mut(&run_id) {
            known.fate = fate;
        }
    }

    fn append(&self, line: String, durable: bool) -> Landed {
        let (done, landed) = watch::channel(false);
        let waiter = durable.then_some(done);
        // A stopped writer means the agent is stopping; the dropped sender tells the waiter.
        let _ = self.queue.send((line, waiter));
        Landed(landed)
    }
}

fn apply(runs: &mut HashMap<i64, Known>, next_order: &mut u64, line: &str) {
    let mut parts = line.split_ascii_whitespace();
    let (Some(tag), Some(Ok(id))) = (parts.next(), parts.next().map(str::parse::<i64>)) else {
        return;
    };
    let ms = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    match tag {
        "A" | "Q" => {
            runs.insert(
                id,
                Known {
                    fate: if tag == "Q" {
                        Fate::Queued
                    } else {
                        Fate::Started
                    },
                    order: *next_order,
                    accepted_ms: ms,
                },
            );
            *next_order += 1;
        }
        "S" | "F" => {
            if let Some(known) = runs.get_mut(&id) {
                known.fate = if tag == "S" {
                    Fate::Started
                } else {
                    Fate::Finished
                };
            }
        }
        "R" => {
            runs.remove(&id);
        }
        _ => {}
    }
}

fn forget_oldest(runs: &mut HashMap<i64, Known>, capacity: usize) {
    if runs.len() <= capacity {
        return;
    }
    let mut orders: Vec<u64> = runs.values().map(|k| k.order).collect();
    orders.sort_unstable();
    let cutoff = orders[orders.len() - capacity];
    // Only finished runs are forgotten: a live one must keep answering repeats.
    runs.retain(|_, k| k.order >= cutoff || k.fate != Fate::Finished);
}

/// The kernel's id of this boot of the host.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// Writes the remembered runs to a new file and puts it in place; returns its line count.
fn rewrite(path: &Path, boot: Option<&str>, runs: &HashMap<i64, Known>) -> std::io::Result<usize> {
    let temp = path.with_extension("journal.tmp");
    let mut ordered: Vec<(&i64, &Known)> = runs.iter().collect();
    ordered.sort_by_key(|(_, k)| k.order);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&temp)?);
    if let Some(boot) = boot {
        writeln!(out, "B {boot}")?;
    }
    for (id, known) in &ordered {
        let tag = match known.fate {
            Fate::Queued => 'Q',
            Fate::Started => 'A',
            Fate::Finished => 'A',
        };
        writeln!(out, "{tag} {id} {}", known.accepted_ms)?;
        if known.fate == Fate::Finished {
            writeln!(out, "F {id}")?;
        }
    }
    let file = out
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(ordered.len() * 2)
}

/// How long a line no run waits for (`F`, `R`) is held back at most, for a line that one does to
/// take it along.
const HOLD_BACK_FOR: Duration = Duration::from_secs(1);
/// The most lines held back.
const HOLD_BACK_MOST: usize = 4096;

/// What the writer goes on with.
enum Next {
    Lines(Pending),
    /// The lines held back are due.
    HeldDue,
    /// Every sender is gone.
    Closed,
}

/// Appends lines as they come, a burst per write and fsync, and answers the waiters once their
/// line is on disk; lines no run waits for wait for one that does (`HOLD_BACK_FOR`). Compacts
/// when the file has grown to twice what is remembered.
async fn write_forever(journal: Journal, mut inbox: mpsc::UnboundedReceiver<Pending>) {
    // Kept open between writes (an open and a close per burst less); opened again after a
    // compaction put a new file in its place, or after a failed write.
    let mut open: Option<std::fs::File> = None;
    // The file's length up to its last whole line, once a write went through: a write that
    // failed part way is cut off before the next, so that a later line, maybe one whose run
    // then starts, is never glued to a torn one and lost when the file is read back.
    let mut whole: Option<u64> = None;
    // Lines no run waits for, in the order they came, and when the first of them came.
    let mut held_back: Vec<String> = Vec::new();
    let mut held_since: Option<Instant> = None;
    loop {
        let next = match held_since {
            None => inbox.recv().await.map_or(Next::Closed, Next::Lines),
            Some(since) => tokio::select! {
                more = inbox.recv() => more.map_or(Next::Closed, Next::Lines),
                () = tokio::time::sleep_until(since + HOLD_BACK_FOR) => Next::HeldDue,
            },
        };
        let mut batch = Vec::new();
        let closed = match next {
            Next::Lines(first) => {
                batch.push(first);
                false
            }
            Next::HeldDue => false,
            Next::Closed if held_back.is_empty() => break,
            Next::Closed => true,
        };
        while batch.len() < 4096
            && let Ok(more) = inbox.try_recv()
        {
            batch.push(more);
        }
        let (new_lines, waiters): (Vec<String>, Vec<Option<watch::Sender<bool>>>) =
            batch.into_iter().unzip();
        let durable = waiters.iter().any(Option::is_some);
        let due = durable
            || closed
            || held_since.is_some_and(|since| since + HOLD_BACK_FOR <= Instant::now());
        if !due && held_back.len() + new_lines.len() < HOLD_BACK_MOST {
            held_back.extend(new_lines);
            held_since.get_or_insert_with(Instant::now);
            continue;
        }
        held_since = None;
        let mut lines = std::mem::take(&mut held_back);
        lines.extend(new_lines);
        let path = journal.path.clone();
        let file = open.take();
        let written =
            tokio::task::spawn_blocking(move || append_lines(&path, file, whole, &lines, durable))
                .await
                .unwrap_or_else(|e| (whole, Err(std::io::Error::other(e.to_string()))));
        let (before, written) = written;
        match written {
            Ok((n, file, length)) => {
                open = Some(file);
                whole = Some(length);
                for waiter in waiters.into_iter().flatten() {
                    let _ = waiter.send(true);
                }
                let compact = {
                    let mut inner = journal.lock();
                    inner.lines += n;
                    inner.lines > 2 * journal.capacity.max(1000) * 2
                };
                if compact {
                    compact_now(&journal);
                    open = None;
                    whole = None;
                }
            }
            Err(e) => {
                whole = before;
                // Waiters are dropped: their runs are not started (a run whose acceptance is
                // not on disk must not run), and say why.
                tracing::error!(error = %e, "Cannot write the accept journal");
            }
        }
        if closed {
            break;
        }
    }
}

/// Opens the journal to append, cut back to `whole` bytes when a failed write left more.
fn open_whole(path: &Path, whole: Option<u64>) -> std::io::Result<(std::fs::File, u64)> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let on_disk = file.metadata()?.len();
    match whole {
        Some(length) if on_disk > length => {
            file.set_len(length)?;
            Ok((file, length))
        }
        _ => Ok((file, on_disk)),
    }
}

/// What `append_lines` gives back: the file's length up to its last whole line before the
/// write (when known), and how many lines, the open file and its length after.
type Appended = (Option<u64>, std::io::Result<(usize, std::fs::File, u64)>);

/// Appends `lines` to the journal (`file` when it is open already; opened, and cut back to
/// `whole` bytes when a failed write left more, when not).
fn append_lines(
    path: &Path,
    file: Option<std::fs::File>,
    whole: Option<u64>,
    lines: &[String],
    durable: bool,
) -> Appended {
    let ready = match (file, whole) {
        (Some(file), Some(length)) => Ok((file, length)),
        // A file is kept open only after a write went through, which gives its length.
        (_, whole) => open_whole(path, whole),
    };
    let (mut file, length) = match ready {
        Ok(ready) => ready,
        Err(e) => return (whole, Err(e)),
    };
    let mut buf = String::with_capacity(lines.iter().map(String::len).sum());
    for line in lines {
        buf.push_str(line);
    }
    let written = file.write_all(buf.as_bytes()).and_then(|()| {
        if durable {
            file.sync_data()?;
        }
        Ok(())
    });
    // A flush's empty line is no line of the file.
    let counted = lines.iter().filter(|line| !line.is_empty()).count();
    match written {
        Ok(()) => (Some(length), Ok((counted, file, length + buf.len() as u64))),
        Err(e) => {
            // Cut now too where the disk lets us (the next write cuts again if not): a crash
            // before it then finds no line of a batch whose runs were refused.
            let _ = file.set_len(length);
            (Some(length), Err(e))
        }
    }
}

fn compact_now(journal: &Journal) {
    let mut inner = journal.lock();
    let capacity = journal.capacity;
    forget_oldest(&mut inner.runs, capacity);
    // Rewritten under the lock: no line is appended (the writer is this task) and no run
    // changes meanwhile.
    match rewrite(&journal.path, journal.boot.as_deref(), &inner.runs) {
        Ok(lines) => inner.lines = lines,
        Err(e) => tracing::warn!(error = %e, "Cannot compact the accept journal"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The journal as a restart with nothing to hand back opens it.
    fn open(dir: &Path, capacity: usize) -> (Journal, Leftovers) {
        let recovered = Journal::recover(dir).unwrap();
        let leftovers = recovered.leftovers().clone();
        (recovered.open(capacity, &[]).unwrap(), leftovers)
    }

    #[tokio::test]
    async fn a_journal_from_another_boot_or_without_one_is_not_of_this_boot() {
        let dir = tempfile::tempdir().unwrap();
        for head in ["B 00000000-0000-0000-0000-000000000000\n", ""] {
            std::fs::write(dir.path().join(FILE), format!("{head}A 7 70\n")).unwrap();
            let (_, leftovers) = open(dir.path(), 100);
            assert!(!leftovers.same_boot, "{head:?}");
            assert_eq!(leftovers.interrupted.len(), 1);
        }
        // The rewrite at open names this boot, so the next start trusts it.
        let (_, leftovers) = open(dir.path(), 100);
        assert!(leftovers.same_boot);
    }

    #[tokio::test]
    async fn a_restart_knows_what_was_accepted_and_what_never_started() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (journal, leftovers) = open(dir.path(), 100);
            assert_eq!(leftovers, Leftovers::default());
            assert!(journal.accepted(1, false, 10).wait().await);
            assert!(journal.accepted(2, true, 11).wait().await);
            assert!(journal.accepted(3, true, 12).wait().await);
            assert!(journal.started(3).wait().await);
            assert!(journal.accepted(4, false, 13).wait().await);
            journal.finished(4);
            assert!(journal.accepted(5, true, 14).wait().await);
            journal.released(5);
            // Durable lines land after the lazy ones before them.
            assert!(journal.accepted(6, false, 15).wait().await);
            assert_eq!(journal.fate(1), Some(Fate::Started));
            assert_eq!(journal.fate(2), Some(Fate::Queued));
            assert_eq!(journal.fate(5), None);
        }
        let (journal, leftovers) = open(dir.path(), 100);
        assert_eq!(
            leftovers,
            Leftovers {
                never_started: vec![2],
                interrupted: vec![1, 3, 6],
                // Written in this boot of this host (the file's first line says so).
                same_boot: true,
            }
        );
        // Remembered across the restart: a repeat of 1, 3, 4 or 6 is known; 2 and 5 were
        // handed back and may come again.
        for id in [1, 3, 4, 6] {
            assert_eq!(journal.fate(id), Some(Fate::Finished), "run {id}");
        }
        assert_eq!(journal.fate(2), None);
        assert_eq!(journal.fate(5), None);
    }

    /// Until their results are spooled and `open` rewrites the file, a second crash finds the
    /// same leftovers; once open, a run handed back is forgotten, so it may be accepted again.
    #[tokio::test]
    async fn leftovers_stay_in_the_file_until_settled() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "A 1 5\nQ 2 6\nA 3 7\nF 3\nA 4 8\n").unwrap();
        let first = Journal::recover(dir.path()).unwrap();
        let expected = Leftovers {
            never_started: vec![2],
            interrupted: vec![1, 4],
            same_boot: false,
        };
        assert_eq!(first.leftovers(), &expected);
        drop(first);
        let second = Journal::recover(dir.path()).unwrap();
        assert_eq!(
            second.leftovers(),
            &expected,
            "a crash before open changes nothing"
        );
        let journal = second.open(100, &[4]).unwrap();
        assert_eq!(journal.fate(1), Some(Fate::Finished));
        assert_eq!(journal.fate(2), None);
        assert_eq!(journal.fate(3), Some(Fate::Finished));
        assert_eq!(journal.fate(4), None, "handed back: it may come again");
        let third = Journal::recover(dir.path()).unwrap();
        assert_eq!(third.leftovers().never_started, Vec::<i64>::new());
        assert_eq!(third.leftovers().interrupted, Vec::<i64>::new());
    }

    #[tokio::test]
    async fn memory_is_bounded_to_the_newest_runs() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (journal, _) = open(dir.path(), 1000);
            for id in 1..=5000 {
                let landed = journal.accepted(id, false, id);
                journal.finished(id);
                if id % 1000 == 0 {
                    assert!(landed.wait().await);
                }
            }
            assert!(journal.accepted(9999, false, 1).wait().await);
        }
        let (journal, _) = open(dir.path(), 1000);
        assert_eq!(journal.fate(1), None, "the oldest are forgotten");
        assert_eq!(journal.fate(5000), Some(Fate::Finished));
        assert_eq!(journal.fate(9999), Some(Fate::Finished));
        let lines = std::fs::read_to_string(dir.path().join(FILE))
            .unwrap()
            .lines()
            .count();
        assert!(lines <= 2 * 1000 + 2, "{lines} lines");
    }

    /// The writer keeps the file open between writes: a line written after a compaction put
    /// a new file in place must land in that file, not in the one it replaced.
    #[tokio::test]
    async fn lines_after_a_compaction_land_in_the_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = open(dir.path(), 1000);
        let mut last = None;
        for id in 1..=2100 {
            last = Some(journal.accepted(id, false, id));
            journal.finished(id);
        }
        assert!(last.unwrap().wait().await);
        // 4,200 lines: the writer compacted after writing them.
        assert!(journal.lock().lines < 4000, "compacted");
        assert!(journal.accepted(7777, false, 1).wait().await);
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(text.lines().any(|line| line == "A 7777 1"), "{text}");
    }

    /// Lines no run waits for go out with the next line one does, in the order they came; a
    /// second later when none comes; at once on a flush.
    #[tokio::test]
    async fn lines_no_run_waits_for_are_held_back_for_one_that_does() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = open(dir.path(), 100);
        let text = || std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(journal.accepted(1, false, 10).wait().await);
        let held = Instant::now();
        journal.finished(1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Unless this machine held the test up past the hold itself.
        assert!(
            !text().contains("F 1") || held.elapsed() >= HOLD_BACK_FOR,
            "held back: {}",
            text()
        );
        assert!(journal.accepted(2, false, 11).wait().await);
        assert!(text().ends_with("A 1 10\nF 1\nA 2 11\n"), "{}", text());

        let held = Instant::now();
        journal.finished(2);
        while !text().contains("F 2") {
            assert!(held.elapsed() < Duration::from_secs(10), "never written");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(held.elapsed() >= HOLD_BACK_FOR, "{:?}", held.elapsed());

        assert!(journal.accepted(3, true, 12).wait().await);
        journal.released(3);
        assert!(journal.flush().wait().await);
        assert!(text().ends_with("Q 3 12\nR 3\n"), "{}", text());
        drop(journal);
        let (journal, leftovers) = open(dir.path(), 100);
        assert_eq!(
            leftovers,
            Leftovers {
                same_boot: leftovers.same_boot,
                ..Leftovers::default()
            }
        );
        assert_eq!(journal.fate(2), Some(Fate::Finished));
        assert_eq!(journal.fate(3), None, "released");
    }

    /// A write that failed part way left a torn line: the next write cuts it off first, so the
    /// line it appends reads back whole.
    #[test]
    fn a_torn_write_is_cut_off_before_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::write(&path, "A 1 10\nA 2 2").unwrap();
        let (before, written) = append_lines(&path, None, Some(7), &["S 3\n".to_owned()], true);
        let (n, _, length) = written.unwrap();
        assert_eq!((before, n, length), (Some(7), 1, 11));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "A 1 10\nS 3\n");
        // Without a failure behind it, the file is taken as it is.
        let (before, written) = append_lines(&path, None, None, &["F 3\n".to_owned()], false);
        let (_, file, length) = written.unwrap();
        assert_eq!((before, length), (Some(11), 15));
        let (_, written) = append_lines(
            &path,
            Some(file),
            Some(length),
            &["R 4\n".to_owned()],
            false,
        );
        assert_eq!(written.unwrap().2, 19);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "A 1 10\nS 3\nF 3\nR 4\n"
        );
    }

    /// A crash mid-write leaves the last line without its newline: it is not read, so `A 12`
    /// torn from `A 1234 …` names no run 12, and `R 12` forgets nothing.
    #[tokio::test]
    async fn a_last_line_without_its_newline_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE),
            b"A 1 5\nA 2 6\nR 2\nA 3 7\n\xff\nA 4 8\nA 12",
        )
        .unwrap();
        let (journal, leftovers) = open(dir.path(), 100);
        assert_eq!(
            leftovers.interrupted,
            vec![1, 3, 4],
            "a line that is not text is skipped, not the rest"
        );
        assert_eq!(journal.fate(12), None);
        std::fs::write(dir.path().join(FILE), "A 1 5\nR 1").unwrap();
        let (journal, _) = open(dir.path(), 100);
        assert_eq!(
            journal.fate(1),
            Some(Fate::Finished),
            "R 1 torn: run 1 is still known"
        );
    }

    #[test]
    fn torn_and_foreign_lines_are_skipped() {
        let mut runs = HashMap::new();
        let mut order = 0;
        for line in ["A 1 5", "garbage", "S x", "Q 2", "F 1", "A"] {
            apply(&mut runs, &mut order, line);
        }
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[&1].fate, Fate::Finished);
        assert_eq!(runs[&2].fate, Fate::Queued);
    }
}
