//! Who this agent is to the admins: its key, made once and kept in the data folder, and the id
//! of this process, new at every start.
//!
//! The key is the agent's credential after enrollment: the admin stores its hash at the first
//! registration (made with the shared access token) and from then on takes heartbeats and
//! results for this agent's address only with it. The instance id lets the admin tell a
//! restarted agent from the one that took its runs.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Bytes of randomness in a key (hex-encoded: twice as many characters).
const KEY_BYTES: usize = 32;
const INSTANCE_BYTES: usize = 12;
pub const KEY_FILE: &str = "agent.key";
const ID_BYTES: usize = 8;
pub const ID_FILE: &str = "agent.id";

fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads the agent's key from `<data_dir>/agent.key`, creating it (0600) on the first start.
///
/// # Errors
/// When the file cannot be read or written, or holds something that is not a key.
pub fn load_or_create_key(data_dir: &Path) -> std::io::Result<String> {
    load_or_create(
        data_dir,
        KEY_FILE,
        KEY_BYTES,
        "an agent key; remove it to make a new one (an admin must then forget the old agent)",
    )
}

/// Reads the agent's id from `<data_dir>/agent.id`, creating it on the first start. Not a
/// secret: it names a `connect`-mode agent's address (`conn://<hostname>/<id>`), which must stay
/// the same across restarts (runs, approval and liveness are keyed by address) and differ
/// between agents on one host.
///
/// # Errors
/// When the file cannot be read or written, or holds something that is not an id.
pub fn load_or_create_id(data_dir: &Path) -> std::io::Result<String> {
    load_or_create(
        data_dir,
        ID_FILE,
        ID_BYTES,
        "an agent id; remove it to make a new one (the agent then registers as a new address)",
    )
}

/// `bytes` of randomness, hex-encoded, kept in `<data_dir>/<file>` (0600, written durably).
fn load_or_create(
    data_dir: &Path,
    file: &str,
    bytes: usize,
    what: &str,
) -> std::io::Result<String> {
    let path = data_dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let value = text.trim().to_owned();
            if value.len() < 2 * bytes || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(std::io::Error::other(format!(
                    "{} does not hold {what}",
                    path.display()
                )));
            }
            Ok(value)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let value = random_hex(bytes)?;
            let temp = path.with_extension("tmp");
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)?;
            f.write_all(value.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&temp, &path)?;
            std::fs::File::open(data_dir)?.sync_all()?;
            Ok(value)
        }
        Err(e) => Err(e),
    }
}

/// A fresh id for this agent process.
///
/// # Errors
/// When the system's randomness cannot be read.
pub fn new_instance_id() -> std::io::Result<String> {
    random_hex(INSTANCE_BYTES)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_key_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let key = load_or_create_key(dir.path()).unwrap();
        assert_eq!(key.len(), 64);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create_key(dir.path()).unwrap(), key);
        std::fs::write(dir.path().join(KEY_FILE), "garbage").unwrap();
        assert!(load_or_create_key(dir.path()).is_err());
        assert_ne!(new_instance_id().unwrap(), new_instance_id().unwrap());
        let id = load_or_create_id(dir.path()).unwrap();
        assert_eq!(id.len(), 16);
        assert_eq!(load_or_create_id(dir.path()).unwrap(), id);
        assert_eq!(
            load_or_create_key(dir.path()).unwrap_err().kind(),
            std::io::ErrorKind::Other
        );
    }
}
