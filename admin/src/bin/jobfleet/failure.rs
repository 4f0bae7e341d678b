//! What went wrong, and the exit code scripts see for it (README, "The CLI").

use std::fmt;
use std::process::ExitCode;

#[derive(Debug)]
pub enum Failure {
    /// Anything not below: a server error, a broken answer, a local file.
    Other(String),
    /// Bad arguments that clap could not catch (e.g. a job name that is not unique).
    Usage(String),
    /// Not logged in, the token was refused (401), or the role may not do this (403).
    Auth(String),
    /// 404: no such job, run, group or agent (or not visible to this login).
    NotFound(String),
    /// The admin refused the request as it stands: 400, 409, 422, 429.
    Refused(String),
    /// No answer from the admin: connection refused, DNS, TLS, timeout.
    Unreachable(String),
    /// `--wait` saw the run end other than succeeded.
    RunFailed(String),
}

impl Failure {
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Other(_) => 1,
            Self::Usage(_) => 2,
            Self::Auth(_) => 3,
            Self::NotFound(_) => 4,
            Self::Refused(_) => 5,
            Self::Unreachable(_) => 6,
            Self::RunFailed(_) => 7,
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(m)
            | Self::Usage(m)
            | Self::Auth(m)
            | Self::NotFound(m)
            | Self::Refused(m)
            | Self::Unreachable(m)
            | Self::RunFailed(m) => f.write_str(m),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::Other(e.to_string())
    }
}
