//! Durable results. Results are written here (temp file, fsync, rename, fsync the folder)
//! before anything tries to send them, and removed only after an admin acknowledged them: an
//! admin outage or an agent crash loses nothing on disk. Results share one file and one pair of
//! fsyncs (group commit): an fsync costs a millisecond or more, and a burst of short runs would
//! otherwise queue behind them one by one; a success that may linger first waits in memory for
//! company (the agent's `spool_gather_ms`, 50 ms), and a crash in that time loses it (its run is
//! then reported `lost`). While the files waiting here are
//! few (`REMEMBERED_BYTES`), the spool also keeps what they hold in memory, so that the drain
//! sends them without listing the folder and reading each file back.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::protocol::HandleCallbackParam;

/// Results written in one file at most.
const MAX_PER_FILE: usize = 1_000;
/// About the most bytes of results written in one file (a result carries its log when small):
/// a file is sent whole, and a request must stay within what an admin accepts.
const MAX_FILE_BYTES: usize = 384 * 1024;
/// Bytes of spool files whose results are also kept in memory at most: beyond it (an admin
/// outage), the drain reads the files, and memory stays bounded however long the outage.
const REMEMBERED_BYTES: usize = 1024 * 1024;

/// An upper bound of a result's size as JSON: its texts escaped at worst (`\u0000` for a byte)
/// and the fixed fields.
fn bound_bytes(result: &HandleCallbackParam) -> usize {
    let text = |t: &Option<String>| t.as_ref().map_or(0, String::len);
    384 + 6
        * (text(&result.log)
            + text(&result.handle_msg)
            + text(&result.output)
            + text(&result.limits_mode))
}

#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
    sequence: Arc<AtomicU64>,
    /// Run ids with a result here, for heartbeats (reading the folder each beat would cost
    /// as much as the spool is long).
    held: Arc<Mutex<HashSet<i64>>>,
    /// Run ids whose result was handed to the writer and is not on disk yet: their runs have
    /// left the runner's table, and heartbeats must still list them.
    writing: Arc<Mutex<HashSet<i64>>>,
    /// Every spool file and what it holds, while they total at most `REMEMBERED_BYTES`; `None`
    /// when that is not known (more waited). A file is put in place and removed under this
    /// lock, so the list and the folder never disagree.
    files: Arc<Mutex<Remembered>>,
    /// The folder, open for the fsync that makes each rename durable (an open and a close per
    /// spool file less).
    folder: Arc<std::fs::File>,
    /// Held by the drain that sends from here (`callback::drain_once`), one at a time.
    drain_turn: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug, Default)]
struct Remembered {
    files: Option<Vec<Spooled>>,
    /// Counts the files put in place and removed: a read of the folder, done without the lock
    /// (it may take long after an outage, and a kill waits on a put), is remembered only when
    /// nothing changed meanwhile.
    changes: u64,
}

/// One spool file and the results it holds.
#[derive(Debug, Clone)]
pub struct Spooled {
    path: PathBuf,
    pub results: Arc<Vec<HandleCallbackParam>>,
    /// The file's size.
    pub bytes: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Spool {
    /// Opens (creating) the spool folder and drops temp files a crash left half-written.
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        for entry in std::fs::read_dir(&dir)?.flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                std::fs::remove_file(entry.path())?;
            }
        }
        let spool = Self {
            folder: Arc::new(std::fs::File::open(&dir)?),
            dir,
            sequence: Arc::new(AtomicU64::new(0)),
            held: Arc::default(),
            writing: Arc::default(),
            files: Arc::default(),
            drain_turn: Arc::default(),
        };
        let ids: HashSet<i64> = spool
            .pending()?
            .iter()
            .flat_map(|s| s.results.iter().map(|r| r.log_id))
            .collect();
        *spool.held_ids() = ids;
        Ok(spool)
    }

    fn held_ids(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        lock(&self.held)
    }

    /// Run ids whose results wait here for an admin's acknowledgement, or are on their way to
    /// disk. The ones on their way are read first: a result is counted as held (`put_shared`)
    /// before it stops counting as on its way, so a result moving between the two is not missed.
    pub fn held(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = lock(&self.writing).iter().copied().collect();
        ids.extend(self.held_ids().iter().copied());
        ids
    }

    /// Whether `run_id`'s result was handed to the writer and is not on disk yet.
    pub fn on_its_way(&self, run_id: i64) -> bool {
        lock(&self.writing).contains(&run_id)
    }

    /// Writes results durably, all in one file.
    pub fn put_all(&self, results: &[HandleCallbackParam]) -> std::io::Result<()> {
        self.put_shared(&Arc::new(results.to_vec()))
    }

    /// `put_all` for results the caller shares.
    pub fn put_shared(&self, results: &Arc<Vec<HandleCallbackParam>>) -> std::io::Result<()> {
        let Some(first) = results.first() else {
            return Ok(());
        };
        // Unique across restarts (the clock) and within one (the sequence).
        let target = self.dir.join(format!(
            "{}-{}-{}.json",
            first.log_id,
            crate::now_ms(),
            self.sequence.fetch_add(1, Ordering::Relaxed)
        ));
        let temp = target.with_extension("json.tmp");
        let body = serde_json::to_vec(&**results).map_err(std::io::Error::other)?;
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        {
            let mut remembered = lock(&self.files);
            std::fs::rename(&temp, &target)?;
            remembered.changes += 1;
            let files = &mut remembered.files;
            if let Some(list) = files.as_mut() {
                if list.iter().map(|f| f.bytes).sum::<usize>() + body.len() <= REMEMBERED_BYTES {
                    list.push(Spooled {
                        path: target,
                        results: results.clone(),
                        bytes: body.len(),
                    });
                } else {
                    *files = None;
                }
            }
            // Under the files' lock: an acknowledgement of these (which takes it) comes after.
            self.held_ids().extend(results.iter().map(|r| r.log_id));
        }
        self.folder.sync_all()?;
        Ok(())
    }

    pub fn put(&self, result: &HandleCallbackParam) -> std::io::Result<()> {
        self.put_all(std::slice::from_ref(result))
    }

    /// Every spool file, oldest run first.
    pub fn pending(&self) -> std::io::Result<Vec<Spooled>> {
        let (known, changes) = {
            let remembered = lock(&self.files);
            (remembered.files.clone(), remembered.changes)
        };
        let mut out = match known {
            Some(list) => list,
            None => {
                let read = self.read_all()?;
                let mut remembered = lock(&self.files);
                if remembered.changes == changes
                    && read.iter().map(|f| f.bytes).sum::<usize>() <= REMEMBERED_BYTES
                {
                    remembered.files = Some(read.clone());
                }
                read
            }
        };
        out.sort_by_key(|s| s.results.iter().map(|r| r.log_id).min());
        Ok(out)
    }

    /// Every spool file as the folder has it; an unreadable one is set aside.
    fn read_all(&self) -> std::io::Result<Vec<Spooled>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)?.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let parsed = std::fs::read(&path).map(|bytes| {
                (
                    serde_json::from_slice::<Vec<HandleCallbackParam>>(&bytes)
                        // Agents before group commit wrote one result per file.
                        .or_else(|_| {
                            serde_json::from_slice::<HandleCallbackParam>(&bytes).map(|r| vec![r])
                        }),
                    bytes.len(),
                )
            });
            match parsed {
                Ok((Ok(results), bytes)) if !results.is_empty() => out.push(Spooled {
                    path,
                    results: Arc::new(results),
                    bytes,
                }),
                // A file we cannot read is set aside, not deleted: someone may want it.
                _ => {
                    let _ = std::fs::rename(&path, path.with_extension("bad"));
                }
            }
        }
        Ok(out)
    }

    /// Removes files whose results an admin acknowledged.
    pub fn ack(&self, files: &[Spooled]) -> std::io::Result<()> {
        let mut remembered = lock(&self.files);
        for file in files {
            match std::fs::remove_file(&file.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            remembered.changes += 1;
            if let Some(list) = remembered.files.as_mut() {
                list.retain(|kept| kept.path != file.path);
            }
            let mut held = self.held_ids();
            for result in file.results.iter() {
                held.remove(&result.log_id);
            }
        }
        Ok(())
    }

    /// The drain's turn: one drain sends from the spool at a time.
    pub fn drain_turn(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.drain_turn.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// How long spooled results wait for others to travel with them when nothing asked for
/// longer: results of runs ending together go in one request and one admin transaction.
pub const COLLECT_FOR: Duration = Duration::from_millis(5);

/// When the spooled results are due at an admin: the earliest moment any result that landed
/// since the last send asked for. A success whose run nothing waits for may linger (the
/// trigger's `resultLingerMs`) so that one request and one admin transaction carry several;
/// any result due sooner takes the waiting ones along.
#[derive(Default)]
pub struct Due {
    wake: Notify,
    send_by: Mutex<Option<Instant>>,
}

impl Due {
    /// Results landed in the spool that may wait `linger` for company.
    pub fn landed(&self, linger: Duration) {
        self.landed_by(Instant::now() + linger);
    }

    /// When the results landed so far will be sent, if any wait.
    fn send_by(&self) -> Option<Instant> {
        *lock(&self.send_by)
    }

    /// Results landed in the spool that may wait until `at` for company.
    pub fn landed_by(&self, at: Instant) {
        {
            let mut send_by = lock(&self.send_by);
            *send_by = Some(send_by.map_or(at, |earlier| earlier.min(at)));
        }
        self.wake.notify_one();
    }

    /// Waits until the results that landed are due, or `idle` passed without any landing, and
    /// takes the due time: a result landing from here on is due again in its own time.
    pub async fn wait(&self, idle: Duration) {
        let idle_until = Instant::now() + idle;
        loop {
            // Made before the time is read: a landing in between leaves a permit, not a loss.
            let woken = self.wake.notified();
            let send_by = {
                let mut send_by = lock(&self.send_by);
                if send_by.is_some_and(|at| at <= Instant::now()) {
                    *send_by = None;
                    return;
                }
                *send_by
            };
            match send_by {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = woken => {}
                    }
                }
                None => {
                    tokio::select! {
                        () = tokio::time::sleep_until(idle_until) => return,
                        () = woken => {}
                    }
                }
            }
        }
    }
}

/// A result on its way to disk: when it was handed over, how long it may wait for company,
/// when it is to be sent, and whom to tell once it is on disk.
struct Write_ {
    result: HandleCallbackParam,
    handed: Instant,
    linger: Duration,
    send_at: Instant,
    done: oneshot::Sender<()>,
    before: Option<Before>,
}

/// What is written before a result is spooled: its run's last log lines, by the writer's thread,
/// not the agent's runtime thread (`RunLog::deferred_write`). Written, not synced, as a log is:
/// a reader sees them before an admin can learn of the result, and a crash before the spool
/// write loses them with the result (the run is then reported `lost`).
pub type Before = Box<dyn FnOnce() + Send>;

impl Write_ {
    /// A result handed over `handed`, when the wall clock read `handed_ms`.
    fn new(
        result: HandleCallbackParam,
        (handed, handed_ms): (Instant, i64),
        linger: Duration,
        done: oneshot::Sender<()>,
        before: Option<Before>,
    ) -> Self {
        Self {
            result,
            handed,
            linger,
            send_at: send_at(handed, handed_ms, linger),
            done,
            before,
        }
    }

    /// When the result must be on its way to an admin.
    fn send_by(&self) -> Instant {
        self.send_at
    }

    /// Until when the writer may wait for others to share its file: not at all for a result
    /// that may only be collected with others ending together (a failure), else its linger less
    /// the time the write needs (`WRITE_ROOM` or a quarter of the linger, whichever is less), at
    /// most `most`, and no later than the write needs before its send.
    fn gather_until(&self, most: Duration) -> Instant {
        if self.linger <= COLLECT_FOR {
            return self.handed;
        }
        let gathered = self.handed + (self.linger - WRITE_ROOM.min(self.linger / 4)).min(most);
        gathered.min(self.send_at - WRITE_ROOM)
    }
}

/// When a result handed over at `handed` (`handed_ms` on the wall clock) that may wait `linger`
/// is sent. One that may only be collected with others ending together (a failure): `linger`
/// later. A success that may linger: at the first multiple of its linger on the wall clock that
/// leaves `WRITE_ROOM` for its write, so that all agents with the same linger send at the same
/// instants and an admin stores their requests in one transaction (`group_commit` there). An
/// agent still sends such results at most once a linger; one now waits from `WRITE_ROOM` to a
/// linger and `WRITE_ROOM` (at most 170 ms at the default 150: within the admin's 200 ms hold of
/// the run's acceptance, which it then still stores with the result).
fn send_at(handed: Instant, handed_ms: i64, linger: Duration) -> Instant {
    if linger <= COLLECT_FOR {
        return handed + linger;
    }
    let room = i64::try_from(WRITE_ROOM.as_millis()).unwrap_or(0);
    let period = i64::try_from(linger.as_millis()).unwrap_or(i64::MAX).max(1);
    let earliest = handed_ms.saturating_add(room);
    let to_grid = (period - earliest.rem_euclid(period)) % period;
    handed + WRITE_ROOM + Duration::from_millis(u64::try_from(to_grid).unwrap_or(0))
}

/// What a spool file's write is given of its results' linger: two fsyncs, with room to spare.
const WRITE_ROOM: Duration = Duration::from_millis(20);

/// Writes results from many runs with one file and one fsync pair per group.
#[derive(Clone)]
pub struct SpoolWriter {
    queue: mpsc::UnboundedSender<Write_>,
    spool: Spool,
    hurry: Arc<Hurry>,
    /// The wall clock (ms since the epoch) lingering results are sent by: `now_ms`, but for
    /// tests on tokio's paused clock.
    wall_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
}

/// How the writer gathers.
struct Gathering {
    /// The longest a result waits in memory for company before it is written (the agent's
    /// `spool_gather_ms`). A crash (`kill -9`, power) in that time loses the result, and the
    /// restarted agent reports its run `lost`, as it does a run that was running: the window is
    /// kept short (50 ms by default). At 250 results a second an agent then writes one file for
    /// about a dozen of them instead of one for two; a send carries the files of about three such
    /// windows.
    most: Duration,
    /// When the results on disk will be sent.
    due: Arc<Due>,
    hurry: Arc<Hurry>,
}

/// Set when the agent stops: from then on results are written as they come, none waits for
/// company, so a shutdown is not held up by a linger.
#[derive(Default)]
struct Hurry {
    on: AtomicBool,
    wake: Notify,
}

impl SpoolWriter {
    /// Starts the writing task; `written` learns of each group that lands; a success that may
    /// linger waits up to `gather` in memory for company.
    pub fn start(spool: Spool, written: Arc<Due>, gather: Duration) -> Self {
        Self::start_on(spool, written, gather, Arc::new(crate::now_ms))
    }

    /// As [`SpoolWriter::start`], on the wall clock `wall_ms`.
    fn start_on(
        spool: Spool,
        written: Arc<Due>,
        gather: Duration,
        wall_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Self {
        let (queue, inbox) = mpsc::unbounded_channel();
        let hurry = Arc::new(Hurry::default());
        let gathering = Gathering {
            most: gather,
            due: written,
            hurry: hurry.clone(),
        };
        tokio::spawn(write_forever(spool.clone(), inbox, gathering));
        Self {
            queue,
            spool,
            hurry,
            wall_ms,
        }
    }

    /// From now on, writes every result at once (the agent is stopping).
    pub fn hurry(&self) {
        self.hurry.on.store(true, Ordering::SeqCst);
        self.hurry.wake.notify_waiters();
    }

    /// Takes a result to write; what it returns completes once the result is on disk. From
    /// here on the spool counts the run as held (`Spool::held`). A result may wait `linger` for
    /// company in all: up to the writer's `gather` of it before it is written, so that the results of
    /// runs ending apart share one file and one pair of fsyncs, and the rest on disk.
    /// `before` is done first, on the writer's thread.
    pub fn hand(
        &self,
        result: HandleCallbackParam,
        linger: Duration,
        before: Option<Before>,
    ) -> Result<oneshot::Receiver<()>, String> {
        let (done, on_disk) = oneshot::channel();
        let run_id = result.log_id;
        lock(&self.spool.writing).insert(run_id);
        let handed = Write_::new(
            result,
            (Instant::now(), (self.wall_ms)()),
            linger,
            done,
            before,
        );
        if let Err(mpsc::error::SendError(unsent)) = self.queue.send(handed) {
            lock(&self.spool.writing).remove(&run_id);
            // Its log is written even so: only the result is in doubt.
            if let Some(before) = unsent.before {
                before();
            }
            return Err("the spool writer stopped".to_owned());
        }
        Ok(on_disk)
    }

    /// Returns once the result is on disk (`hand`).
    pub async fn write(&self, result: HandleCallbackParam, linger: Duration) -> Result<(), String> {
        self.hand(result, linger, None)?
            .await
            .map_err(|_| "the spool writer stopped".to_owned())
    }
}

/// The results for one file: what `inbox` holds now, then what comes until the earliest
/// `gather_until` among them, within the file's bounds; and if results on disk are to be sent
/// later than the write needs, no longer than until then, so that the file goes with them
/// (each send carries about a linger's results, not a gathering's). `None` when the inbox is
/// closed and empty.
async fn gather(
    inbox: &mut mpsc::UnboundedReceiver<Write_>,
    next: &mut Option<Write_>,
    how: &Gathering,
) -> Option<Vec<Write_>> {
    let hurry = &how.hurry;
    let catching_the_send = |until: Instant| match how.due.send_by() {
        Some(send) if send > Instant::now() + WRITE_ROOM => until.min(send - WRITE_ROOM),
        _ => until,
    };
    let first = match next.take() {
        Some(first) => first,
        None => inbox.recv().await?,
    };
    let mut bytes = bound_bytes(&first.result);
    let mut until = first.gather_until(how.most);
    let mut group = vec![first];
    while group.len() < MAX_PER_FILE {
        let more = match inbox.try_recv() {
            Ok(more) => more,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => {
                // Made before the flag is read: a hurry in between leaves a wake-up, not a wait.
                let hurried = hurry.wake.notified();
                let until = catching_the_send(until);
                if Instant::now() >= until || hurry.on.load(Ordering::SeqCst) {
                    break;
                }
                tokio::select! {
                    more = inbox.recv() => match more {
                        Some(more) => more,
                        None => break,
                    },
                    () = tokio::time::sleep_until(until) => break,
                    () = hurried => break,
                }
            }
        };
        bytes += bound_bytes(&more.result);
        if bytes > MAX_FILE_BYTES {
            // The first of the next file.
            *next = Some(more);
            break;
        }
        until = until.min(more.gather_until(how.most));
        group.push(more);
    }
    Some(group)
}

async fn write_forever(spool: Spool, mut inbox: mpsc::UnboundedReceiver<Write_>, how: Gathering) {
    let mut next = None;
    while let Some(group) = gather(&mut inbox, &mut next, &how).await {
        // The group is due when its most urgent result is.
        let send_by = group.iter().map(Write_::send_by).min();
        let mut befores = Vec::new();
        let (results, waiters): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|w| {
                befores.extend(w.before);
                (w.result, w.done)
            })
            .unzip();
        let results = Arc::new(results);
        let mut delay = Duration::from_millis(100);
        loop {
            let (spool, group) = (spool.clone(), results.clone());
            let befores = std::mem::take(&mut befores);
            let outcome = tokio::task::spawn_blocking(move || {
                for before in befores {
                    before();
                }
                spool.put_shared(&group)
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|written| written.map_err(|e| e.to_string()));
            match outcome {
                Ok(()) => break,
                Err(error) => {
                    // The results exist only in memory now; say so loudly and keep trying.
                    tracing::error!(results = results.len(), error = %error, "Cannot spool results; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
        {
            // Held by the spool now (`put_shared`), so no longer on their way.
            let mut writing = lock(&spool.writing);
            for result in results.iter() {
                writing.remove(&result.log_id);
            }
        }
        for waiter in waiters {
            let _ = waiter.send(());
        }
        how.due.landed_by(send_by.unwrap_or_else(Instant::now));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn result(id: i64) -> HandleCallbackParam {
        serde_json::from_value(serde_json::json!({"logId": id, "logDateTim": 1, "handleCode": 200}))
            .unwrap()
    }

    #[test]
    fn results_survive_reopen_until_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        spool.put(&result(2)).unwrap();
        spool.put(&result(1)).unwrap();
        std::fs::write(dir.path().join("spool/9-1.json.tmp"), b"{half").unwrap();
        let reopened = Spool::open(dir.path().join("spool")).unwrap();
        let pending = reopened.pending().unwrap();
        assert_eq!(
            pending
                .iter()
                .flat_map(|f| f.results.iter().map(|r| r.log_id))
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        let mut held = reopened.held();
        held.sort_unstable();
        assert_eq!(held, vec![1, 2], "what a restarted agent still holds");
        reopened.ack(&pending[..1]).unwrap();
        assert_eq!(reopened.pending().unwrap().len(), 1);
        assert_eq!(reopened.held(), vec![2]);
        reopened.ack(&pending[..1]).unwrap();
    }

    #[test]
    fn a_group_shares_one_file_and_old_single_files_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        spool.put_all(&[result(5), result(3), result(4)]).unwrap();
        std::fs::write(
            dir.path().join("spool/1-1.json"),
            serde_json::to_vec(&result(1)).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.path().join("spool/2-1.json"), b"[]").unwrap();
        // Files an older agent left are found when the spool opens.
        let pending = Spool::open(dir.path().join("spool"))
            .unwrap()
            .pending()
            .unwrap();
        assert_eq!(pending.len(), 2, "the empty file is set aside");
        assert_eq!(pending[0].results[0].log_id, 1);
        assert_eq!(pending[1].results.len(), 3);
        assert!(dir.path().join("spool/2-1.bad").exists());
    }

    /// The agent's default `spool_gather_ms`.
    const GATHER: Duration = Duration::from_millis(50);

    /// A wall clock on tokio's (paused) clock that reads `at_start` ms now.
    fn wall_from(at_start: i64) -> Arc<dyn Fn() -> i64 + Send + Sync> {
        let start = Instant::now();
        Arc::new(move || at_start + i64::try_from(start.elapsed().as_millis()).unwrap())
    }

    fn ids(files: &[Spooled]) -> Vec<i64> {
        let mut ids: Vec<i64> = files
            .iter()
            .flat_map(|f| f.results.iter().map(|r| r.log_id))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// What the drain is given comes from memory while little waits, from the folder once more
    /// than `REMEMBERED_BYTES` waits (an outage), and from memory again once that was sent;
    /// either way it is exactly what the folder holds.
    #[test]
    fn what_waits_is_remembered_while_small_and_read_back_once_large() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let remembered = |spool: &Spool| spool.files.lock().unwrap().files.is_some();
        let on_disk = || {
            ids(&Spool::open(dir.path().join("spool"))
                .unwrap()
                .pending()
                .unwrap())
        };
        assert!(remembered(&spool), "an empty spool is known");
        spool.put(&result(1)).unwrap();
        spool.put_all(&[result(2), result(3)]).unwrap();
        assert!(remembered(&spool));
        assert_eq!(ids(&spool.pending().unwrap()), vec![1, 2, 3]);
        assert_eq!(on_disk(), vec![1, 2, 3]);
        spool.ack(&spool.pending().unwrap()[..1]).unwrap();
        assert_eq!(ids(&spool.pending().unwrap()), vec![2, 3]);
        assert_eq!(on_disk(), vec![2, 3]);

        let large = |id: i64| HandleCallbackParam {
            handle_msg: Some("m".repeat(REMEMBERED_BYTES / 4)),
            ..result(id)
        };
        for id in 10..16 {
            spool.put(&large(id)).unwrap();
        }
        assert!(!remembered(&spool), "more than it keeps in memory");
        let pending = spool.pending().unwrap();
        assert_eq!(ids(&pending), vec![2, 3, 10, 11, 12, 13, 14, 15]);
        assert!(!remembered(&spool));
        spool.ack(&pending[..5]).unwrap();
        assert_eq!(ids(&spool.pending().unwrap()), vec![14, 15]);
        assert!(remembered(&spool), "small again: read once, then kept");
        spool.put(&result(20)).unwrap();
        assert_eq!(ids(&spool.pending().unwrap()), vec![14, 15, 20]);
        assert_eq!(on_disk(), vec![14, 15, 20]);
        let mut held = spool.held();
        held.sort_unstable();
        assert_eq!(held, vec![14, 15, 20]);
    }

    #[tokio::test]
    async fn the_writer_answers_after_the_result_is_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let writer = SpoolWriter::start(spool.clone(), Arc::new(Due::default()), GATHER);
        let writes: Vec<_> = (1..=50)
            .map(|id| {
                let writer = writer.clone();
                tokio::spawn(async move { writer.write(result(id), COLLECT_FOR).await })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        let ids: Vec<i64> = spool
            .pending()
            .unwrap()
            .iter()
            .flat_map(|f| f.results.iter().map(|r| r.log_id))
            .collect();
        assert_eq!(ids.len(), 50);
    }

    /// Lingering results handed apart share one file, written when the first one's gathering
    /// ends; from the moment they are handed over the spool lists their runs as held, though
    /// nothing is on disk yet; a failure is written at once and takes the gathering ones along;
    /// once hurried, nothing waits.
    #[tokio::test(start_paused = true)]
    async fn results_handed_apart_share_a_file_and_are_held_on_their_way() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let due = Arc::new(Due::default());
        // On a multiple of the linger: the first result's send is one linger away.
        let writer = SpoolWriter::start_on(spool.clone(), due.clone(), GATHER, wall_from(4_000));
        let linger = Duration::from_millis(400);

        let handed = Instant::now();
        let first = writer.hand(result(1), linger, None).unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        // The second's log lines, to be on disk before its result is, not when it is handed.
        let log = dir.path().join("2.log");
        let before: Before = Box::new({
            let log = log.clone();
            move || std::fs::write(log, "its last lines").unwrap()
        });
        let second = writer.hand(result(2), linger, Some(before)).unwrap();
        let mut held = spool.held();
        held.sort_unstable();
        assert_eq!(held, vec![1, 2], "on their way, still held");
        assert!(spool.pending().unwrap().is_empty(), "nothing on disk yet");
        assert!(!log.exists(), "written with the result, not when handed");
        assert!(spool.on_its_way(2) && !spool.on_its_way(3));
        first.await.unwrap();
        second.await.unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "its last lines");
        assert!(!spool.on_its_way(2), "on disk now");
        assert_eq!(
            handed.elapsed(),
            GATHER,
            "written as the first one's gathering ended"
        );
        let files = spool.pending().unwrap();
        assert_eq!(files.len(), 1, "one file for both");
        assert_eq!(ids(&files), vec![1, 2]);
        due.wait(Duration::from_secs(5)).await;
        assert_eq!(handed.elapsed(), linger, "due at the first one's linger");
        spool.ack(&files).unwrap();
        assert!(spool.held().is_empty());

        let handed = Instant::now();
        let lingering = writer.hand(result(3), linger, None).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let failure = writer.hand(result(4), COLLECT_FOR, None).unwrap();
        failure.await.unwrap();
        lingering.await.unwrap();
        assert_eq!(
            handed.elapsed(),
            Duration::from_millis(10),
            "the failure waited"
        );
        let files = spool.pending().unwrap();
        assert_eq!(files.len(), 1, "the failure took the lingering one along");
        assert_eq!(ids(&files), vec![3, 4]);
        spool.ack(&files).unwrap();

        let handed = Instant::now();
        let lingering = writer.hand(result(5), linger, None).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        writer.hurry();
        lingering.await.unwrap();
        writer.hand(result(6), linger, None).unwrap().await.unwrap();
        assert_eq!(
            handed.elapsed(),
            Duration::from_millis(10),
            "a hurry writes at once, and nothing waits after it"
        );
        assert_eq!(ids(&spool.pending().unwrap()), vec![5, 6]);
    }

    /// A lingering success is sent at the first multiple of its linger on the wall clock that
    /// leaves the write its room, whenever it was handed over, so that agents send together; its
    /// gathering ends in time for that.
    #[tokio::test(start_paused = true)]
    async fn lingering_results_are_sent_on_the_lingers_multiples() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let due = Arc::new(Due::default());
        let linger = Duration::from_millis(150);
        // 100 ms past a multiple of 150: the next, 50 ms away, leaves the write its 20 ms, so the
        // send is then, and the gathering ends 30 ms from now.
        let writer = SpoolWriter::start_on(spool.clone(), due.clone(), GATHER, wall_from(3_100));
        let handed = Instant::now();
        writer.hand(result(1), linger, None).unwrap().await.unwrap();
        assert_eq!(
            handed.elapsed(),
            Duration::from_millis(30),
            "written in time for its send"
        );
        due.wait(Duration::from_secs(5)).await;
        assert_eq!(
            handed.elapsed(),
            Duration::from_millis(50),
            "sent at the multiple"
        );
        spool.ack(&spool.pending().unwrap()).unwrap();

        // 10 ms before a multiple (3,290 of 3,300): less than the write's room, so the next one.
        tokio::time::sleep(Duration::from_millis(140)).await;
        let handed = Instant::now();
        writer.hand(result(2), linger, None).unwrap().await.unwrap();
        assert_eq!(
            handed.elapsed(),
            GATHER,
            "a whole gathering: the send is far"
        );
        due.wait(Duration::from_secs(5)).await;
        assert_eq!(
            handed.elapsed(),
            Duration::from_millis(160),
            "a linger and 10 ms"
        );
        assert_eq!(ids(&spool.pending().unwrap()), vec![2]);

        // Pure: a failure is not aligned, and the grid is the wall clock's, not the handing's.
        let now = Instant::now();
        assert_eq!(send_at(now, 3_333, COLLECT_FOR), now + COLLECT_FOR);
        assert_eq!(
            send_at(now, 3_000, linger),
            now + Duration::from_millis(150)
        );
        assert_eq!(send_at(now, 3_130, linger), now + Duration::from_millis(20));
        assert_eq!(
            send_at(now, 3_131, linger),
            now + Duration::from_millis(169)
        );
    }

    /// A result that may linger waits its time unless one due sooner lands; then both are due.
    #[tokio::test(start_paused = true)]
    async fn results_are_due_when_the_most_urgent_one_is() {
        let due = Due::default();
        let started = tokio::time::Instant::now();
        due.landed(Duration::from_millis(50));
        due.wait(Duration::from_secs(5)).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(50),
            "a lingering success waits"
        );

        let started = tokio::time::Instant::now();
        due.landed(Duration::from_millis(50));
        let urgent = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            due.landed(COLLECT_FOR);
        };
        tokio::join!(due.wait(Duration::from_secs(5)), urgent);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(10) + COLLECT_FOR,
            "a result due sooner takes the lingering one along"
        );

        let started = tokio::time::Instant::now();
        due.wait(Duration::from_secs(5)).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(5),
            "what was sent is not due again: nothing landed, so the drain looks again after the idle time"
        );
    }

    /// Results carrying logs are split so that a file, sent whole, stays within what an admin
    /// takes in one request.
    #[tokio::test]
    async fn a_group_of_results_with_logs_is_split_into_files_of_bounded_size() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        let writer = SpoolWriter::start(spool.clone(), Arc::new(Due::default()), GATHER);
        let with_log = |id: i64| HandleCallbackParam {
            log: Some("x".repeat(crate::protocol::INLINE_LOG_MAX_BYTES)),
            ..result(id)
        };
        assert!(bound_bytes(&with_log(1)) > 6 * crate::protocol::INLINE_LOG_MAX_BYTES);
        let writes: Vec<_> = (1..=100)
            .map(|id| {
                let writer = writer.clone();
                tokio::spawn(async move { writer.write(with_log(id), COLLECT_FOR).await })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        let files = spool.pending().unwrap();
        assert_eq!(files.iter().map(|f| f.results.len()).sum::<usize>(), 100);
        for file in &files {
            let bound: usize = file.results.iter().map(bound_bytes).sum();
            assert!(
                file.results.len() == 1 || bound <= MAX_FILE_BYTES,
                "{} results, {bound} bytes at most",
                file.results.len()
            );
            assert_eq!(
                file.bytes,
                std::fs::metadata(&file.path).unwrap().len() as usize
            );
        }
    }
}
