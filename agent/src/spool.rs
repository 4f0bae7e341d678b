//! Durable results. A result is written here (temp file, fsync, rename, fsync the folder)
//! before anything tries to send it, and removed only after an admin acknowledged it: an admin
//! outage or an agent crash loses nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::protocol::HandleCallbackParam;

#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
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
        Ok(Self { dir })
    }

    fn file(&self, result: &HandleCallbackParam) -> PathBuf {
        self.dir.join(format!(
            "{}-{}.json",
            result.log_id,
            result.attempt.unwrap_or(1)
        ))
    }

    /// Writes a result durably.
    pub fn put(&self, result: &HandleCallbackParam) -> std::io::Result<()> {
        let target = self.file(result);
        let temp = target.with_extension("json.tmp");
        let body = serde_json::to_vec(result).map_err(std::io::Error::other)?;
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        std::fs::rename(&temp, &target)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Every spooled result, oldest run first.
    pub fn pending(&self) -> std::io::Result<Vec<HandleCallbackParam>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)?.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            match std::fs::read(&path).map(|b| serde_json::from_slice::<HandleCallbackParam>(&b)) {
                Ok(Ok(result)) => out.push(result),
                // A file we cannot read is set aside, not deleted: someone may want it.
                _ => {
                    let _ = std::fs::rename(&path, path.with_extension("bad"));
                }
            }
        }
        out.sort_by_key(|r| (r.log_id, r.attempt));
        Ok(out)
    }

    /// Removes results the admin acknowledged.
    pub fn ack(&self, results: &[HandleCallbackParam]) -> std::io::Result<()> {
        for r in results {
            match std::fs::remove_file(self.file(r)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
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
            pending.iter().map(|r| r.log_id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        reopened.ack(&pending[..1]).unwrap();
        assert_eq!(reopened.pending().unwrap().len(), 1);
        reopened.ack(&pending[..1]).unwrap();
    }
}
