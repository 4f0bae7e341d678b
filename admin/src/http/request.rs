//! What handlers read off a request: its id, its peer, and the API error for a body or query
//! that does not parse. A leaf: the console and the API import it without importing the routes.

use actix_web::error::{JsonPayloadError, QueryPayloadError};
use actix_web::http::header;
use actix_web::http::header::HeaderValue;
use actix_web::{HttpMessage, HttpRequest};
use serde::de::DeserializeOwned;

use crate::domain::document::{self, Format};
use crate::error::{Code, Error};

/// The id of the current request, echoed in `X-Request-Id` and written into audit rows.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub fn request_id(req: &HttpRequest) -> String {
    req.extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default()
}

/// The peer address; proxies' forwarding headers are not trusted.
pub fn client_ip(req: &HttpRequest) -> String {
    req.peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub(super) fn accept_request_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    (!text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
    .then(|| text.to_owned())
}

/// Pulls the field out of serde's "unknown field `x`" / "missing field `x`" messages.
fn serde_field(message: &str) -> Option<String> {
    for marker in ["unknown field `", "missing field `"] {
        if let Some(rest) = message.split(marker).nth(1) {
            return rest.split('`').next().map(str::to_owned);
        }
    }
    None
}

pub(super) fn json_error(err: JsonPayloadError) -> Error {
    match err {
        JsonPayloadError::OverflowKnownLength { limit, .. }
        | JsonPayloadError::Overflow { limit } => Error::Invalid {
            code: Code::PayloadTooLarge,
            field: None,
            message: format!("the request body is larger than {limit} bytes"),
        },
        JsonPayloadError::ContentType => Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: "expected a JSON body with Content-Type: application/json".into(),
        },
        JsonPayloadError::Deserialize(e) if e.is_data() => {
            let message = e.to_string();
            Error::Invalid {
                code: Code::InvalidField,
                field: serde_field(&message),
                message,
            }
        }
        JsonPayloadError::Deserialize(e) => Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: format!("malformed JSON: {e}"),
        },
        other => Error::Invalid {
            code: Code::InvalidJson,
            field: None,
            message: format!("unreadable body: {other}"),
        },
    }
}

/// The error for a JSON body parsed by hand (where an empty body is allowed).
pub fn body_error(e: serde_json::Error) -> Error {
    json_error(JsonPayloadError::Deserialize(e))
}

/// The format a document is answered in: `?format=` when given, else what `Accept` asks for.
///
/// # Errors
/// `invalid_field` on `format` for a name other than `json` or `yaml`.
pub fn answer_format(req: &HttpRequest, named: Option<&str>) -> Result<Format, Error> {
    match named {
        Some(name) => Format::from_name(name),
        None => Ok(Format::of_media_type(
            req.headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )),
    }
}

/// A document sent as the body: YAML with a YAML `Content-Type`, else JSON.
///
/// # Errors
/// 400 for a body that does not parse, 422 naming the field for one of the wrong shape.
pub fn document_body<T: DeserializeOwned>(req: &HttpRequest, body: &[u8]) -> Result<T, Error> {
    match Format::of_media_type(req.content_type()) {
        Format::Yaml => {
            let text = std::str::from_utf8(body)
                .map_err(|_| Error::invalid_as(Code::InvalidJson, "body", "YAML must be UTF-8"))?;
            document::parse(text, None)
        }
        Format::Json => serde_json::from_slice(body).map_err(body_error),
    }
}

pub(super) fn query_error(err: QueryPayloadError) -> Error {
    let message = match &err {
        QueryPayloadError::Deserialize(e) => e.to_string(),
        other => other.to_string(),
    };
    Error::Invalid {
        code: Code::InvalidField,
        field: serde_field(&message),
        message: format!("bad query string: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_name_their_field() {
        assert_eq!(
            serde_field("unknown field `colour`, expected one of `a`"),
            Some("colour".into())
        );
        assert_eq!(
            serde_field("missing field `name` at line 1 column 2"),
            Some("name".into())
        );
        assert_eq!(serde_field("invalid type: string"), None);
    }

    #[test]
    fn only_sane_request_ids_are_echoed() {
        assert!(accept_request_id(&HeaderValue::from_static("abc-123")).is_some());
        assert!(accept_request_id(&HeaderValue::from_static("a b")).is_none());
    }
}
