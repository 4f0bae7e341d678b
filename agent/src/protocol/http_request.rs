//! The request an `http` job sends (glue type `GLUE_HTTP`, the request as JSON in `glueSource`):
//! checked by the admin when the job is saved and by the agent when the trigger arrives, with
//! the same rules, so neither trusts the other's copy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Methods an http job may use.
pub const HTTP_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
/// Success statuses when the job names none.
pub const DEFAULT_HTTP_STATUSES: &str = "200-299";
/// Largest request body.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Largest request as it travels (the JSON in `glueSource`): an agent refuses a larger
/// `glueSource` (`runner::MAX_SOURCE_BYTES`), and escaping can make a body twice as long.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
const MAX_URL_BYTES: usize = 8 * 1024;
/// Longest wait for an answer a request may set: a week, as a job's own timeout.
pub const MAX_HTTP_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;
const MAX_HEADERS: usize = 64;
const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;

/// An http job's request. Field names are single words, so the wire (camelCase) and the open
/// API (snake_case) spell them alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// GET when absent.
    #[serde(default = "default_method")]
    pub method: String,
    /// An absolute http:// or https:// URL without credentials in it.
    pub url: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// How long to wait for the answer; the job's own timeout bounds it too. Left out on the
    /// wire when unset, so that agents older than the field still take such requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Response statuses that count as success: codes and ranges, `200-299,304`.
    #[serde(default = "default_statuses")]
    pub statuses: String,
}

fn default_method() -> String {
    "GET".to_owned()
}

fn default_statuses() -> String {
    DEFAULT_HTTP_STATUSES.to_owned()
}

/// A rule the request breaks: the field (`method`, `url`, `headers`, `body`, `timeout_ms`,
/// `statuses`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for BadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` {}", self.field, self.message)
    }
}

fn bad(field: &'static str, message: impl Into<String>) -> BadRequest {
    BadRequest {
        field,
        message: message.into(),
    }
}

/// Success statuses, parsed: inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statuses(Vec<(u16, u16)>);

impl Statuses {
    pub fn contains(&self, status: u16) -> bool {
        self.0
            .iter()
            .any(|(low, high)| (*low..=*high).contains(&status))
    }
}

impl std::str::FromStr for Statuses {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let code = |part: &str| -> Result<u16, String> {
            part.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| format!("`{}` is not a status code (100 to 599)", part.trim()))
        };
        let mut ranges = Vec::new();
        for part in text.split(',') {
            let range = match part.split_once('-') {
                Some((low, high)) => (code(low)?, code(high)?),
                None => {
                    let c = code(part)?;
                    (c, c)
                }
            };
            if range.0 > range.1 {
                return Err(format!("the range `{}` runs backwards", part.trim()));
            }
            ranges.push(range);
        }
        Ok(Statuses(ranges))
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

impl HttpRequest {
    /// Parses `glueSource` and checks it.
    ///
    /// # Errors
    /// What is wrong, naming the field.
    pub fn from_source(source: &str) -> Result<(HttpRequest, Statuses), BadRequest> {
        let request: HttpRequest = serde_json::from_str(source)
            .map_err(|e| bad("glueSource", format!("is not a valid http request: {e}")))?;
        request.normalized()
    }

    /// The request with its method in capitals, once it passed every rule; its success statuses.
    ///
    /// # Errors
    /// The first rule broken, naming the field.
    pub fn normalized(mut self) -> Result<(HttpRequest, Statuses), BadRequest> {
        self.method = self.method.trim().to_ascii_uppercase();
        self.url = self.url.trim().to_owned();
        self.statuses = self.statuses.trim().to_owned();
        if self.statuses.is_empty() {
            self.statuses = default_statuses();
        }
        let statuses = self.check()?;
        Ok((self, statuses))
    }

    fn check(&self) -> Result<Statuses, BadRequest> {
        if !HTTP_METHODS.contains(&self.method.as_str()) {
            return Err(bad(
                "method",
                format!(
                    "`{}` is not one of {}",
                    self.method,
                    HTTP_METHODS.join(", ")
                ),
            ));
        }
        self.check_url()?;
        if self.headers.len() > MAX_HEADERS {
            return Err(bad("headers", format!("at most {MAX_HEADERS} headers")));
        }
        for (name, value) in &self.headers {
            if name.is_empty() || !name.chars().all(is_token_char) {
                return Err(bad("headers", format!("`{name}` is not a header name")));
            }
            // Control characters would let a value end the header and start another.
            if value.len() > MAX_HEADER_VALUE_BYTES
                || value.chars().any(|c| c.is_control() && c != '\t')
            {
                return Err(bad(
                    "headers",
                    format!(
                        "the value of `{name}` has a control character or is longer than {MAX_HEADER_VALUE_BYTES} bytes"
                    ),
                ));
            }
        }
        if self.body.as_ref().is_some_and(|b| b.len() > MAX_BODY_BYTES) {
            return Err(bad(
                "body",
                format!("is longer than {MAX_BODY_BYTES} bytes"),
            ));
        }
        if self
            .timeout_ms
            .is_some_and(|ms| !(1..=MAX_HTTP_TIMEOUT_MS).contains(&ms))
        {
            return Err(bad(
                "timeout_ms",
                format!("must be between 1 and {MAX_HTTP_TIMEOUT_MS} (a week)"),
            ));
        }
        let statuses = self.statuses.parse().map_err(|e| bad("statuses", e))?;
        // Strings and a map of strings: encoding cannot fail.
        let encoded = serde_json::to_string(self).map_or(usize::MAX, |json| json.len());
        if encoded > MAX_REQUEST_BYTES {
            return Err(bad(
                "body",
                format!(
                    "makes the request {encoded} bytes once encoded, more than {MAX_REQUEST_BYTES}; send less"
                ),
            ));
        }
        Ok(statuses)
    }

    fn check_url(&self) -> Result<(), BadRequest> {
        if self.url.len() > MAX_URL_BYTES {
            return Err(bad("url", format!("is longer than {MAX_URL_BYTES} bytes")));
        }
        let url = url::Url::parse(&self.url).map_err(|e| bad("url", format!("{e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("url", "must start with http:// or https://"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("url", "has no host"));
        }
        // The URL is written in the run's log and shown with the job: a password in it would be
        // shown to everyone who may read either.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "url",
                "must not hold credentials; send them in an Authorization header",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> Result<(HttpRequest, Statuses), BadRequest> {
        serde_json::from_value::<HttpRequest>(json)
            .unwrap()
            .normalized()
    }

    #[test]
    fn defaults_are_get_and_2xx() {
        let (req, statuses) = request(serde_json::json!({"url": "http://127.0.0.1:9/x"})).unwrap();
        assert_eq!(req.method, "GET");
        assert!(statuses.contains(200) && statuses.contains(299));
        assert!(!statuses.contains(300) && !statuses.contains(404));
        let source = serde_json::to_string(&req).unwrap();
        assert_eq!(HttpRequest::from_source(&source).unwrap().0, req);
    }

    #[test]
    fn statuses_are_codes_and_ranges() {
        let s: Statuses = "200-204, 304 ,418".parse().unwrap();
        assert!(s.contains(204) && s.contains(304) && s.contains(418));
        assert!(!s.contains(205) && !s.contains(500));
        for wrong in ["", "2xx", "99", "600", "300-200", "200-", "200,,204"] {
            assert!(wrong.parse::<Statuses>().is_err(), "{wrong}");
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (
                serde_json::json!({"url": "http://h/", "method": "FETCH"}),
                "method",
            ),
            (serde_json::json!({"url": "ftp://h/"}), "url"),
            (serde_json::json!({"url": "not a url"}), "url"),
            (serde_json::json!({"url": "http://user:pw@h/"}), "url"),
            (
                serde_json::json!({"url": "http://h/", "headers": {"X-A": "1\r\nX-B: 2"}}),
                "headers",
            ),
            (
                serde_json::json!({"url": "http://h/", "headers": {"bad name": "1"}}),
                "headers",
            ),
            (
                serde_json::json!({"url": "http://h/", "statuses": "ok"}),
                "statuses",
            ),
            (
                serde_json::json!({"url": "http://h/", "timeout_ms": 0}),
                "timeout_ms",
            ),
            (
                serde_json::json!({"url": "http://h/", "body": "x".repeat(MAX_BODY_BYTES + 1)}),
                "body",
            ),
        ];
        for (json, field) in cases {
            assert_eq!(request(json.clone()).unwrap_err().field, field, "{json}");
        }
        // Quotes are escaped on the wire: a body within its own limit can still make the
        // request too large for an agent to take.
        let quoted =
            serde_json::json!({"url": "http://h/", "body": "\"".repeat(MAX_BODY_BYTES - 10)});
        let err = request(quoted).unwrap_err();
        assert!(
            err.field == "body" && err.message.contains("once encoded"),
            "{err}"
        );
        let err = HttpRequest::from_source(r#"{"url": "http://h/", "verb": "GET"}"#).unwrap_err();
        assert!(err.message.contains("verb"), "{err}");
    }
}
