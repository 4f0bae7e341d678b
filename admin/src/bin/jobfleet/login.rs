//! The stored login: the admin's URL and a token, in the user's config folder, readable by the
//! user alone. `JOBFLEET_URL` / `JOBFLEET_TOKEN` (or `--url` / `--token`) take precedence.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::failure::Failure;

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stored {
    pub url: String,
    pub token: String,
    /// When a password login's token expires (UTC ms); absent for an API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

/// `$JOBFLEET_CONFIG_DIR`, else `$XDG_CONFIG_HOME/jobfleet`, else `~/.config/jobfleet`.
fn dir() -> Result<PathBuf, Failure> {
    if let Some(dir) = std::env::var_os("JOBFLEET_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(config) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(config).join("jobfleet"));
    }
    let home = std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .ok_or_else(|| {
            Failure::Other(
                "no place for the login: set HOME, XDG_CONFIG_HOME or JOBFLEET_CONFIG_DIR".into(),
            )
        })?;
    Ok(PathBuf::from(home).join(".config").join("jobfleet"))
}

pub fn path() -> Result<PathBuf, Failure> {
    Ok(dir()?.join("login.toml"))
}

/// The stored login, if any.
pub fn load() -> Result<Option<Stored>, Failure> {
    let path = path()?;
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::Other(format!("{}: {e}", path.display()))),
    };
    toml::from_str(&text).map(Some).map_err(|e| {
        Failure::Other(format!(
            "{}: not a login file ({e}); run `jobfleet login` again",
            path.display()
        ))
    })
}

/// Writes the login, mode 0600 from its creation (a token never sits world-readable).
pub fn save(stored: &Stored) -> Result<PathBuf, Failure> {
    let path = path()?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::Other(format!("{}: {e}", parent.display())))?;
    }
    let text = toml::to_string(stored).map_err(|e| Failure::Other(e.to_string()))?;
    // A new file then a rename: an interrupted write leaves the old login whole.
    let tmp = path.with_extension("toml.new");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| Failure::Other(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// Removes the stored login; true when there was one.
pub fn forget() -> Result<bool, Failure> {
    let path = path()?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Failure::Other(format!("{}: {e}", path.display()))),
    }
}
