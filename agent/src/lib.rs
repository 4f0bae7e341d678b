//! jobfleet agent. The `protocol` module is the admin ↔ agent wire protocol (serde only, used by
//! both sides); `settings` is the layered-config machinery both configs use (feature
//! `settings`); everything else is the daemon, behind the default `daemon` feature.

#[cfg(feature = "idle-memory")]
pub mod idle_memory;
pub mod protocol;
#[cfg(feature = "settings")]
pub mod settings;

#[cfg(feature = "daemon")]
pub mod admin_client;
#[cfg(feature = "daemon")]
pub mod callback;
#[cfg(feature = "daemon")]
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod error;
#[cfg(feature = "daemon")]
pub mod handlers;
#[cfg(feature = "daemon")]
pub mod host;
#[cfg(feature = "daemon")]
pub mod identity;
#[cfg(feature = "daemon")]
pub mod journal;
#[cfg(feature = "daemon")]
pub mod link;
#[cfg(feature = "daemon")]
pub mod logs;
#[cfg(feature = "daemon")]
pub mod registry;
#[cfg(feature = "daemon")]
pub mod runner;
#[cfg(feature = "daemon")]
pub mod server;
#[cfg(feature = "daemon")]
pub mod spool;
#[cfg(feature = "daemon")]
pub mod tls;

/// Milliseconds since the Unix epoch.
#[cfg(feature = "daemon")]
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `dir` joined with the formatted name, as `Path::join` would, written into one buffer: the
/// paths every run's start asks for cost one allocation each, not a join and a `format!` apiece
/// (BENCHMARKS.md, issue 17).
#[cfg(feature = "daemon")]
pub fn path_in(dir: &std::path::Path, name: std::fmt::Arguments<'_>) -> std::path::PathBuf {
    use std::fmt::Write;
    let dir = dir.as_os_str();
    let mut path = std::ffi::OsString::with_capacity(dir.len() + 48);
    path.push(dir);
    if !dir.is_empty() && !dir.as_encoded_bytes().ends_with(b"/") {
        path.push("/");
    }
    // Writing into an `OsString` fails only when a `Display` does.
    let _ = path.write_fmt(name);
    path.into()
}

#[cfg(all(test, feature = "daemon"))]
mod tests {
    use std::path::Path;

    #[test]
    fn a_path_in_a_folder_is_what_a_join_makes() {
        for dir in [
            "/var/lib/jobfleet",
            "/var/lib/jobfleet/",
            "relative",
            "",
            "/",
        ] {
            // As text: paths compare by components, which ignore a doubled separator.
            assert_eq!(
                super::path_in(Path::new(dir), format_args!("{}/{}.log", "2026-11-30", 7))
                    .as_os_str(),
                Path::new(dir).join("2026-11-30").join("7.log").as_os_str(),
                "in {dir:?}"
            );
        }
    }
}
