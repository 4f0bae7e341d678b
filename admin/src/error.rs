//! The admin's one error type, the table of stable codes and HTTP statuses, and the open API
//! renderer. The status of every error is decided here and nowhere else; nothing defaults to 400.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// What went wrong, by meaning rather than by the library that noticed it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} not found")]
    NotFound(&'static str),
    /// Input that parsed but is not acceptable; `code` narrows down which rule it broke.
    #[error("{message}")]
    Invalid {
        code: Code,
        field: Option<String>,
        message: String,
    },
    #[error("{message}")]
    Conflict {
        field: Option<String>,
        message: String,
    },
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    /// Too many attempts from this client or at this account; `retry_after_s` says when to retry.
    #[error("too many attempts; try again in {retry_after_s} seconds")]
    RateLimited { retry_after_s: u64 },
    /// The caller used up an open API request limit (`auth::api_limit`); `limit` names it.
    #[error(
        "the {limit} request limit of this caller is used up; try again in {retry_after_s} seconds"
    )]
    RequestLimited {
        limit: &'static str,
        retry_after_s: u64,
    },
    /// A bounded resource (password hashing) is busy past its queue deadline; not the caller's fault.
    #[error("the server is busy; try again in {retry_after_s} seconds")]
    Overloaded { retry_after_s: u64 },
    /// The database gave this write up to let another one through (a MySQL deadlock victim), as
    /// often as `Db::transaction` retries it; nothing of it was kept.
    #[error("the database is busy with conflicting writes; try again in a second")]
    Contended(String),
    #[error("{0}")]
    AgentUnreachable(String),
    #[error("service unavailable: {0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// Stable, snake_case error codes: clients match on these, so they never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    NotFound,
    InvalidJson,
    InvalidField,
    InvalidCron,
    InvalidTimezone,
    UnknownGroup,
    ChildCycle,
    PayloadTooLarge,
    Conflict,
    Unauthenticated,
    Forbidden,
    RateLimited,
    Overloaded,
    AgentUnreachable,
    Unavailable,
    Internal,
}

impl Code {
    pub const ALL: [Code; 16] = [
        Code::NotFound,
        Code::InvalidJson,
        Code::InvalidField,
        Code::InvalidCron,
        Code::InvalidTimezone,
        Code::UnknownGroup,
        Code::ChildCycle,
        Code::PayloadTooLarge,
        Code::Conflict,
        Code::Unauthenticated,
        Code::Forbidden,
        Code::RateLimited,
        Code::Overloaded,
        Code::AgentUnreachable,
        Code::Unavailable,
        Code::Internal,
    ];

    /// The one table from code to name and status.
    pub fn describe(self) -> (&'static str, StatusCode) {
        match self {
            Code::NotFound => ("not_found", StatusCode::NOT_FOUND),
            Code::InvalidJson => ("invalid_json", StatusCode::BAD_REQUEST),
            Code::InvalidField => ("invalid_field", StatusCode::UNPROCESSABLE_ENTITY),
            Code::InvalidCron => ("invalid_cron", StatusCode::UNPROCESSABLE_ENTITY),
            Code::InvalidTimezone => ("invalid_timezone", StatusCode::UNPROCESSABLE_ENTITY),
            Code::UnknownGroup => ("unknown_group", StatusCode::UNPROCESSABLE_ENTITY),
            Code::ChildCycle => ("child_cycle", StatusCode::UNPROCESSABLE_ENTITY),
            Code::PayloadTooLarge => ("payload_too_large", StatusCode::PAYLOAD_TOO_LARGE),
            Code::Conflict => ("conflict", StatusCode::CONFLICT),
            Code::Unauthenticated => ("unauthenticated", StatusCode::UNAUTHORIZED),
            Code::Forbidden => ("forbidden", StatusCode::FORBIDDEN),
            Code::RateLimited => ("rate_limited", StatusCode::TOO_MANY_REQUESTS),
            Code::Overloaded => ("overloaded", StatusCode::SERVICE_UNAVAILABLE),
            Code::AgentUnreachable => ("agent_unreachable", StatusCode::BAD_GATEWAY),
            Code::Unavailable => ("unavailable", StatusCode::SERVICE_UNAVAILABLE),
            Code::Internal => ("internal", StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    pub fn as_str(self) -> &'static str {
        self.describe().0
    }

    pub fn status(self) -> StatusCode {
        self.describe().1
    }
}

impl Error {
    /// A field that broke a validation rule.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            code: Code::InvalidField,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// A validation failure with a narrower code than `invalid_field`.
    pub fn invalid_as(code: Code, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            code,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn conflict(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Conflict {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn code(&self) -> Code {
        match self {
            Error::NotFound(_) => Code::NotFound,
            Error::Invalid { code, .. } => *code,
            Error::Conflict { .. } => Code::Conflict,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::Forbidden(_) => Code::Forbidden,
            Error::RateLimited { .. } | Error::RequestLimited { .. } => Code::RateLimited,
            Error::Overloaded { .. } | Error::Contended(_) => Code::Overloaded,
            Error::AgentUnreachable(_) => Code::AgentUnreachable,
            Error::Unavailable(_) => Code::Unavailable,
            Error::Internal(_) => Code::Internal,
        }
    }

    /// Seconds a client should wait before retrying, for a `Retry-After` header.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            Error::RateLimited { retry_after_s }
            | Error::RequestLimited { retry_after_s, .. }
            | Error::Overloaded { retry_after_s } => Some(*retry_after_s),
            Error::Contended(_) => Some(1),
            Error::Unavailable(_) => Some(5),
            _ => None,
        }
    }

    pub fn field(&self) -> Option<&str> {
        match self {
            Error::Invalid { field, .. } | Error::Conflict { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// The same error about a field inside `outer` (`groups[0].jobs[2]` + `schedule.expr`): a
    /// part of a larger document names its place in the whole.
    #[must_use]
    pub fn within(self, outer: &str) -> Error {
        match self {
            Error::Invalid {
                code,
                field,
                message,
            } => Error::Invalid {
                code,
                field: Some(match field {
                    Some(inner) => format!("{outer}.{inner}"),
                    None => outer.to_owned(),
                }),
                message,
            },
            other => other,
        }
    }

    /// What the caller may see: internal causes (SQL text, paths) never leave the server.
    pub fn public_message(&self) -> String {
        match self {
            Error::Internal(_) => {
                "internal error; the server log has the details under this request's id".into()
            }
            Error::Unavailable(_) => {
                "the service is temporarily unavailable (database unreachable); retry shortly"
                    .into()
            }
            other => other.to_string(),
        }
    }
}

fn looks_like_lost_connection(message: &str) -> bool {
    const SIGNS: [&str; 6] = [
        "gone away",
        "lost connection",
        "can't connect",
        "connection refused",
        "database is locked",
        "server shutdown",
    ];
    let lower = message.to_ascii_lowercase();
    SIGNS.iter().any(|sign| lower.contains(sign))
}

impl From<diesel::result::Error> for Error {
    fn from(err: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind as Kind, Error as D};
        match err {
            D::NotFound => Error::NotFound("record"),
            D::DatabaseError(Kind::UniqueViolation, _) => {
                Error::Conflict { field: None, message: "an object with the same unique key already exists".into() }
            }
            D::DatabaseError(Kind::ForeignKeyViolation, _) => Error::Conflict {
                field: None,
                message: "the object is referenced by, or refers to, another object that does not allow this".into(),
            },
            D::DatabaseError(Kind::SerializationFailure, info) => Error::Contended(info.message().to_owned()),
            // Text statements (`batch_execute`) come without the server's error number.
            D::DatabaseError(_, ref info) if info.message().starts_with("Deadlock found") => {
                Error::Contended(info.message().to_owned())
            }
            D::DatabaseError(Kind::ClosedConnection, info) => Error::Unavailable(info.message().to_owned()),
            D::DatabaseError(_, ref info) if looks_like_lost_connection(info.message()) => {
                Error::Unavailable(info.message().to_owned())
            }
            D::BrokenTransactionManager => Error::Unavailable("the database connection broke mid-transaction".into()),
            other => Error::Internal(anyhow::Error::new(other)),
        }
    }
}

impl From<diesel::r2d2::Error> for Error {
    fn from(err: diesel::r2d2::Error) -> Self {
        Error::Unavailable(err.to_string())
    }
}

/// The JSON body every open API error has: `{"error": {"code", "message", "field"?}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The open API's rendering of [`Error`]. Handlers of `/api/v1` return [`ApiResult`], so they
/// cannot pick another surface's rendering by accident.
#[derive(Debug)]
pub struct ApiError(pub Error);

pub type ApiResult<T> = Result<T, ApiError>;

impl<E: Into<Error>> From<E> for ApiError {
    fn from(err: E) -> Self {
        ApiError(err.into())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The full cause chain goes to the log through the request middleware.
        write!(f, "{:#}", DisplayChain(&self.0))
    }
}

struct DisplayChain<'a>(&'a Error);

impl std::fmt::Display for DisplayChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Error::Internal(cause) => write!(f, "internal: {cause:#}"),
            Error::Unavailable(cause) => write!(f, "unavailable: {cause}"),
            Error::Contended(cause) => write!(f, "contended: {cause}"),
            other => write!(f, "{other}"),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.0.code().status()
    }

    fn error_response(&self) -> HttpResponse {
        let code = self.0.code();
        let mut builder = HttpResponse::build(code.status());
        if matches!(self.0, Error::Unauthenticated(_)) {
            builder.insert_header(("WWW-Authenticate", "Bearer"));
        }
        if let Some(seconds) = self.0.retry_after_s() {
            builder.insert_header(("Retry-After", seconds.to_string()));
        }
        builder.json(ErrorBody {
            error: ErrorDetail {
                code: code.as_str(),
                message: self.0.public_message(),
                field: self.0.field().map(str::to_owned),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_and_never_default_to_bad_request() {
        let names: HashSet<_> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), Code::ALL.len());
        for code in Code::ALL {
            let status = code.status();
            if status == StatusCode::BAD_REQUEST {
                assert_eq!(code, Code::InvalidJson, "only unparseable bodies are 400");
            }
        }
    }

    #[test]
    fn each_code_has_its_status() {
        let expected = [
            (Code::NotFound, 404),
            (Code::InvalidJson, 400),
            (Code::InvalidField, 422),
            (Code::InvalidCron, 422),
            (Code::InvalidTimezone, 422),
            (Code::UnknownGroup, 422),
            (Code::ChildCycle, 422),
            (Code::PayloadTooLarge, 413),
            (Code::Conflict, 409),
            (Code::Unauthenticated, 401),
            (Code::Forbidden, 403),
            (Code::RateLimited, 429),
            (Code::Overloaded, 503),
            (Code::AgentUnreachable, 502),
            (Code::Unavailable, 503),
            (Code::Internal, 500),
        ];
        assert_eq!(expected.len(), Code::ALL.len());
        for (code, status) in expected {
            assert_eq!(code.status().as_u16(), status, "{code:?}");
        }
    }

    #[test]
    fn lost_connections_are_unavailable_not_internal() {
        assert!(looks_like_lost_connection("MySQL server has gone away"));
        assert!(looks_like_lost_connection(
            "Lost connection to server during query"
        ));
        assert!(!looks_like_lost_connection("Unknown column 'x'"));
        let pool_timeout = Error::Unavailable("timed out waiting for connection".into());
        assert_eq!(pool_timeout.code(), Code::Unavailable);
        assert!(
            !pool_timeout.public_message().contains("timed out"),
            "causes stay in the log"
        );
    }

    #[test]
    fn internal_errors_hide_their_cause() {
        let err = Error::Internal(anyhow::anyhow!("SELECT * FROM user failed"));
        assert!(!err.public_message().contains("SELECT"));
    }
}
