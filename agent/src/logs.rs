//! Run output: one file per run under `<log_dir>/<YYYY-MM-DD>/<run_id>.log`, read back in pages
//! by line number, and removed after the retention period.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::protocol::LogResult;

/// The most lines one `/log` page returns, so a huge log cannot make one huge answer.
pub const MAX_LINES_PER_PAGE: usize = 1000;
const MAX_BYTES_PER_PAGE: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Logs {
    dir: PathBuf,
}

fn day_folder(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

impl Logs {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The file for a run triggered at `trigger_ms`. Run ids are numbers, so no path can escape.
    pub fn path(&self, run_id: i64, trigger_ms: i64) -> PathBuf {
        self.dir
            .join(day_folder(trigger_ms))
            .join(format!("{run_id}.log"))
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
    pub fn read(
        &self,
        run_id: i64,
        trigger_ms: i64,
        from_line: i64,
        finished: bool,
    ) -> Result<LogResult, String> {
        if run_id <= 0 {
            return Err(format!("invalid log id {run_id}"));
        }
        if from_line < 1 {
            return Err(format!("fromLineNum must be at least 1 (got {from_line})"));
        }
        let Some(path) = self.locate(run_id, trigger_ms) else {
            return Err(format!("no log for run {run_id} on this agent"));
        };
        let file = std::fs::File::open(&path).map_err(|e| format!("cannot open the log: {e}"))?;
        let mut content = String::new();
        let mut line_no: i64 = 0;
        let mut last = from_line - 1;
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut complete = true;
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| format!("cannot read the log: {e}"))?;
            if n == 0 {
                break;
            }
            // A line still being written has no newline yet: leave it for the next page.
            if !buf.ends_with(b"\n") && !finished {
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

    /// Removes date folders older than `days` days before `now_ms`; returns how many went.
    pub fn remove_older_than(&self, days: u32, now_ms: i64) -> usize {
        let cutoff = day_folder(now_ms - i64::from(days) * 86_400_000);
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
    fn pages_by_line_and_reports_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned());
        let path = logs.path(7, 1_732_270_000_000);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "one\ntwo\nthree\npartial").unwrap();
        let page = logs.read(7, 1_732_270_000_000, 2, false).unwrap();
        assert_eq!(
            (page.to_line_num, page.log_content.as_str(), page.is_end),
            (3, "two\nthree\n", false)
        );
        let done = logs.read(7, 1_732_270_000_000, 4, true).unwrap();
        assert_eq!(
            (done.to_line_num, done.log_content.as_str(), done.is_end),
            (4, "partial", true)
        );
        let past_end = logs.read(7, 1_732_270_000_000, 50, true).unwrap();
        assert_eq!(
            (past_end.to_line_num, past_end.log_content.as_str()),
            (49, "")
        );
        assert!(
            logs.read(7, 0, 1, true).is_ok(),
            "found without the right date"
        );
        assert!(logs.read(8, 0, 1, true).is_err());
        assert!(logs.read(-1, 0, 1, true).is_err());
        assert!(logs.read(7, 0, 0, true).is_err());
    }

    #[test]
    fn retention_removes_old_day_folders_only() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Logs::new(dir.path().to_owned());
        for day in ["2026-01-01", "2026-11-20", "notes"] {
            std::fs::create_dir_all(dir.path().join(day)).unwrap();
        }
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-22T00:00:00Z")
            .unwrap()
            .timestamp_millis();
        assert_eq!(logs.remove_older_than(7, now), 1);
        assert!(dir.path().join("2026-11-20").exists() && dir.path().join("notes").exists());
    }
}
