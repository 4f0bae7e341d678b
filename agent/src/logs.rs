//! Run output: one file per run under `<log_dir>/<YYYY-MM-DD>/<run_id>.log`, read back in pages
//! by line number, and removed after the retention period. A line longer than `SLICE_BYTES`
//! is paged in slices, each numbered as a line of its own (the slices of one line carry no
//! newline between them, so pages joined give the file back), and a page never holds more
//! than one slice of a line in memory at a time.
//! Writing a run's output (capped, watched for free space) is `runner::output`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::protocol::LogResult;

/// The most lines one `/log` page returns, so a huge log cannot make one huge answer.
pub const MAX_LINES_PER_PAGE: usize = 1000;
const MAX_BYTES_PER_PAGE: usize = 1024 * 1024;
/// Longest piece of a line a page counts as one line; smaller than a page, so every page
/// makes progress however long a line is.
pub const SLICE_BYTES: usize = 64 * 1024;

/// Reads the next slice into `buf`: up to and including a newline, or `SLICE_BYTES` bytes,
/// or up to the end of the file. A full slice ends on a UTF-8 character boundary when one is
/// near (the cut bytes start the next slice), so slices are the same on every read.
/// Returns whether the slice is complete: it ends a line or is as long as a slice gets.
fn next_slice(reader: &mut BufReader<std::fs::File>, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    while buf.len() < SLICE_BYTES {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        let room = SLICE_BYTES - buf.len();
        let window = &available[..available.len().min(room)];
        let (take, newline) = match window.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (window.len(), false),
        };
        buf.extend_from_slice(&window[..take]);
        reader.consume(take);
        if newline {
            return Ok(true);
        }
    }
    if buf.len() < SLICE_BYTES {
        return Ok(false);
    }
    let back = partial_char_tail(buf);
    if back > 0 {
        buf.truncate(buf.len() - back);
        reader.seek_relative(-(back as i64))?;
    }
    Ok(true)
}

/// How many bytes at the end of `buf` begin a UTF-8 character that does not end there.
fn partial_char_tail(buf: &[u8]) -> usize {
    for back in 1..=buf.len().min(3) {
        let b = buf[buf.len() - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let needed = match b {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

#[derive(Debug, Clone)]
pub struct Logs {
    dir: PathBuf,
    /// Days a log is kept (`log_retention_days`).
    retention_days: u32,
}

fn day_folder(ms: i64) -> String {
    Day::of(ms).to_string()
}

/// A day's folder name, `YYYY-MM-DD` in UTC: written field by field, as chrono's `format` parses
/// its pattern again at each call, about 2 % of the agent's main thread (BENCHMARKS.md).
struct Day(chrono::NaiveDate);

impl Day {
    fn of(ms: i64) -> Self {
        Self(
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap_or_default()
                .date_naive(),
        )
    }
}

impl std::fmt::Display for Day {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use chrono::Datelike;
        write!(
            f,
            "{:04}-{:02}-{:02}",
            self.0.year(),
            self.0.month(),
            self.0.day()
        )
    }
}

impl Logs {
    pub fn new(dir: PathBuf, retention_days: u32) -> Self {
        Self {
            dir,
            retention_days,
        }
    }

    /// The agent's logs in `dir`, which is made if missing.
    ///
    /// # Errors
    /// When the folder cannot be made.
    pub fn open(dir: PathBuf, retention_days: u32) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(Self::new(dir, retention_days))
    }

    /// The oldest day folder retention keeps at `now_ms`.
    fn oldest_kept(&self, now_ms: i64) -> String {
        day_folder(now_ms - i64::from(self.retention_days) * 86_400_000)
    }

    /// The file for a run triggered at `trigger_ms`. Run ids are numbers, so no path can escape.
    pub fn path(&self, run_id: i64, trigger_ms: i64) -> PathBuf {
        crate::path_in(
            &self.dir,
            format_args!("{}/{run_id}.log", Day::of(trigger_ms)),
        )
    }

    /// Finds a run's file when the caller's date is missing or wrong (looks at recent folders).
    fn locate(&self, run_id: i64, trigger_ms: i64) -> Option<PathBuf> {
        let direct = self.path(run_id, trigger_ms);
        if direct.exists() {
            return Some(direct);
        }
        let mut days: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        days.sort();
        days.into_iter()
            .rev()
            .map(|d| d.join(format!("{run_id}.log")))
            .find(|p| p.exists())
    }

    /// Lines `from_line..` (1-based) of a run's log; `finished` says whether more can come.
    /// A run this agent accepted at `accepted_ms` (as its journal remembers) that has no file
    /// wrote nothing, since a log is made by its first write: its log is empty, unless retention
    /// would have removed it by now.
    pub fn read(
        &self,
        run_id: i64,
        trigger_ms: i64,
        from_line: i64,
        finished: bool,
        accepted_ms: Option<i64>,
    ) -> Result<LogResult, String> {
        if run_id <= 0 {
            return Err(format!("invalid log id {run_id}"));
        }
        if from_line < 1 {
            return Err(format!("fromLineNum must be at least 1 (got {from_line})"));
        }
        let Some(path) = self.locate(run_id, trigger_ms) else {
            if accepted_ms.is_some_and(|ms| day_folder(ms) >= self.oldest_kept(crate::now_ms())) {
                return Ok(LogResult {
                    from_line_num: from_line,
                    to_line_num: from_line - 1,
                    log_content: String::new(),
                    is_end: finished,
                });
            }
            return Err(format!("no log for run {run_id} on this agent"));
        };
        let file = std::fs::File::open(&path).map_err(|e| format!("cannot open the log: {e}"))?;
        let mut content = String::new();
        let mut line_no: i64 = 0;
        let mut last = from_line - 1;
        let mut reader = BufReader::with_capacity(SLICE_BYTES, file);
        let mut buf = Vec::with_capacity(SLICE_BYTES);
        let mut complete = true;
        loop {
            let whole = next_slice(&mut reader, &mut buf)
                .map_err(|e| format!("cannot read the log: {e}"))?;
            if buf.is_empty() {
                break;
            }
            // A slice still being written: leave it for the next page.
            if !whole && !finished {
                break;
            }
            line_no += 1;
            if line_no < from_line {
                continue;
            }
            if (line_no - from_line) as usize >= MAX_LINES_PER_PAGE
                || content.len() + buf.len() > MAX_BYTES_PER_PAGE
            {
                complete = false;
                break;
            }
            content.push_str(&String::from_utf8_lossy(&buf));
            last = line_no;
        }
        Ok(LogResult {
            from_line_num: from_line,
            to_line_num: last,
            log_content: content,
            is_end: finished && complete,
        })
    }

    /// Removes the day folders retention no longer keeps at `now_ms`; returns how many went.
    pub fn remove_expired(&self, now_ms: i64) -> usize {
        let cutoff = self.oldest_kept(now_ms);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_day = name.len() == 10 && name.chars().all(|c| c.is_ascii_digit() || c == '-');
            if is_day && name < cutoff && std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_day_s_folder_is_named_as_chrono_would() {
        for ms in [
            0,
            -1,
            1_764_979_199_999,
            1_764_979_200_000,
            1_709_164_800_000,
            253_402_300_799_999,
        ] {
            let chrono = chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .format("%Y-%m-%d")
                .to_string();
            assert_eq!(day_folder(ms), chrono, "{ms}");
        }
        let logs = Logs::new(PathBuf::from("/logs"), 7);
        assert_eq!(
            logs.path(42, 1_764_979_200_000),
            PathBuf::from("/logs/2025-12-06/42.log")
        );
    }

    #[test]
    fn opening_makes_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("a/b");
        Logs::open(folder.clone(), 7).unwrap();
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
    }

    /// A log is made by its first write: a run the agent knows that has no file has an empty
    /// log, complete once the run is over; a run it does not know, or one retention would have
    /// removed by now, has none.
    #[test]
    fn a_known_run_without_a_file_has_an_empty_log() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned(), 7);
        let live = logs.read(5, 0, 1, false, Some(crate::now_ms())).unwrap();
        assert_eq!(
            (live.to_line_num, live.log_content.as_str(), live.is_end),
            (0, "", false)
        );
        let done = logs.read(5, 0, 3, true, Some(crate::now_ms())).unwrap();
        assert_eq!((done.to_line_num, done.is_end), (2, true));
        let unknown = logs.read(5, 0, 1, true, None).unwrap_err();
        assert!(unknown.contains("no log for run 5"), "{unknown}");
        let month_ago = crate::now_ms() - 30 * 86_400_000;
        let expired = logs.read(5, 0, 1, true, Some(month_ago)).unwrap_err();
        assert!(
            expired.contains("no log for run 5"),
            "retention would have removed it: {expired}"
        );
    }

    #[test]
    fn pages_by_line_and_reports_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned(), 7);
        let path = logs.path(7, 1_732_270_000_000);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "one\ntwo\nthree\npartial").unwrap();
        let page = logs.read(7, 1_732_270_000_000, 2, false, None).unwrap();
        assert_eq!(
            (page.to_line_num, page.log_content.as_str(), page.is_end),
            (3, "two\nthree\n", false)
        );
        let done = logs.read(7, 1_732_270_000_000, 4, true, None).unwrap();
        assert_eq!(
            (done.to_line_num, done.log_content.as_str(), done.is_end),
            (4, "partial", true)
        );
        let past_end = logs.read(7, 1_732_270_000_000, 50, true, None).unwrap();
        assert_eq!(
            (past_end.to_line_num, past_end.log_content.as_str()),
            (49, "")
        );
        assert!(
            logs.read(7, 0, 1, true, None).is_ok(),
            "found without the right date"
        );
        assert!(logs.read(8, 0, 1, true, None).is_err());
        assert!(logs.read(-1, 0, 1, true, None).is_err());
        assert!(logs.read(7, 0, 0, true, None).is_err());
    }

    #[test]
    fn a_long_line_is_paged_in_slices_that_join_back() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned(), 7);
        let path = logs.path(9, 0);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // 3.5 MB on one line, with multi-byte characters across the slice edges, then a short one.
        let long: String = "é€x".repeat(3_500_000 / 6);
        std::fs::write(&path, format!("{long}\nafter\n")).unwrap();
        let (mut from, mut joined, mut pages) = (1, String::new(), 0);
        loop {
            let page = logs.read(9, 0, from, true, None).unwrap();
            assert!(page.log_content.len() <= MAX_BYTES_PER_PAGE);
            assert!(page.to_line_num >= from, "every page makes progress");
            assert!(
                !page.log_content.contains('\u{fffd}'),
                "slices cut on characters"
            );
            joined.push_str(&page.log_content);
            pages += 1;
            if page.is_end {
                break;
            }
            from = page.to_line_num + 1;
        }
        assert_eq!(joined, format!("{long}\nafter\n"));
        assert!(pages >= 4, "{pages} pages");
        // A slice is a line: line 2 starts where the first slice ended.
        let second = logs.read(9, 0, 2, true, None).unwrap();
        // 65,536 = 10,922 × 6 + 4 cuts inside a `€`: the first slice ends before it.
        assert!(
            second.log_content.starts_with("€x"),
            "{}",
            &second.log_content[..8]
        );
    }

    #[test]
    fn a_growing_line_shows_only_its_complete_slices() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned(), 7);
        let path = logs.path(10, 0);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "y".repeat(SLICE_BYTES + 10)).unwrap();
        let live = logs.read(10, 0, 1, false, None).unwrap();
        assert_eq!((live.to_line_num, live.log_content.len()), (1, SLICE_BYTES));
        let done = logs.read(10, 0, 2, true, None).unwrap();
        assert_eq!(
            (done.to_line_num, done.log_content.len(), done.is_end),
            (2, 10, true)
        );
    }

    #[test]
    fn retention_removes_old_day_folders_only() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned(), 7);
        for day in ["2026-01-01", "2026-11-20", "notes"] {
            std::fs::create_dir_all(dir.path().join(day)).unwrap();
        }
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-22T00:00:00Z")
            .unwrap()
            .timestamp_millis();
        assert_eq!(logs.remove_expired(now), 1);
        assert!(dir.path().join("2026-11-20").exists() && dir.path().join("notes").exists());
    }
}
