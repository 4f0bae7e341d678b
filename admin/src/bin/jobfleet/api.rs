//! The open API as the CLI calls it: JSON in, JSON out, an HTTP status turned into a
//! [`Failure`] carrying the admin's own message.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::failure::Failure;

/// A request taking longer than this is given up (a log page is read from the agent).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Api {
    http: reqwest::Client,
    base: url::Url,
    token: Option<String>,
}

impl Api {
    /// `ca_cert`: a PEM file to trust beside the system's roots (an admin with a private CA).
    pub fn new(base: &str, token: Option<String>, ca_cert: Option<&str>) -> Result<Self, Failure> {
        let base = parse_base(base)?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("jobfleet-cli/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path)
                .map_err(|e| Failure::Usage(format!("--ca-cert {path}: {e}")))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| Failure::Usage(format!("--ca-cert {path}: {e}")))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| Failure::Other(format!("the HTTP client: {e}")))?;
        Ok(Self { http, base, token })
    }

    pub fn base(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Failure> {
        self.call(Method::GET, path, query, None).await
    }

    /// A document the admin writes as text (YAML or JSON), printed as it came: its keys stay in
    /// the admin's order.
    pub async fn get_text(&self, path: &str, query: &[(&str, String)]) -> Result<String, Failure> {
        let answer = self.send(Method::GET, path, query, None).await?;
        if answer.status.is_success() {
            return String::from_utf8(answer.body).map_err(|_| {
                Failure::Other(format!("{} answered text that is not UTF-8", answer.url))
            });
        }
        let body = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        Err(self.failure(&answer, &body))
    }

    /// Sends one request with the token, and reads the whole answer.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<Answer, Failure> {
        let url = self.url(path, query)?;
        let mut request = self.http.request(method, url.clone());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(self.base(), &e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .bytes()
            .await
            .map_err(|e| unreachable(self.base(), &e))?
            .to_vec();
        Ok(Answer {
            url,
            status,
            retry_after,
            body,
        })
    }

    fn failure(&self, answer: &Answer, body: &Value) -> Failure {
        failure_of(
            answer.status,
            body,
            answer.retry_after.as_deref(),
            self.token.is_some(),
        )
    }

    fn url(&self, path: &str, query: &[(&str, String)]) -> Result<url::Url, Failure> {
        let mut url = url::Url::parse(&format!("{}/api/v1{path}", self.base()))
            .map_err(|e| Failure::Other(format!("{path}: {e}")))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    pub async fn post(&self, path: &str, body: Option<Value>) -> Result<Value, Failure> {
        self.call(Method::POST, path, &[], body).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, Failure> {
        self.call(Method::DELETE, path, &[], None).await
    }

    /// `path` is below `/api/v1`.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let answer = self.send(method, path, query, body).await?;
        let value: Value = if answer.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&answer.body).map_err(|_| {
                Failure::Other(format!(
                    "{} answered {} with a body that is not JSON: is {} a jobfleet admin?",
                    answer.url,
                    answer.status,
                    self.base()
                ))
            })?
        };
        if answer.status.is_success() {
            return Ok(value);
        }
        Err(self.failure(&answer, &value))
    }
}

/// An admin's whole answer to one request.
struct Answer {
    url: url::Url,
    status: StatusCode,
    retry_after: Option<String>,
    body: Vec<u8>,
}

fn parse_base(raw: &str) -> Result<url::Url, Failure> {
    let bad = |why: &str| Failure::Usage(format!("admin URL `{raw}`: {why}"));
    let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must start with http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not have a query or fragment"));
    }
    Ok(url)
}

fn unreachable(base: &str, e: &reqwest::Error) -> Failure {
    // The chain names the cause (refused, DNS, certificate); reqwest's top line alone does not.
    let mut cause = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        cause = format!("{cause}: {inner}");
        source = inner.source();
    }
    if e.is_timeout() {
        return Failure::Unreachable(format!("{base} did not answer in time ({cause})"));
    }
    Failure::Unreachable(format!("cannot reach {base}: {cause}"))
}

fn failure_of(
    status: StatusCode,
    body: &Value,
    retry_after: Option<&str>,
    had_token: bool,
) -> Failure {
    let error = &body["error"];
    let mut message = error["message"]
        .as_str()
        .map_or_else(|| format!("the admin answered {status}"), str::to_owned);
    if let Some(field) = error["field"].as_str() {
        message = format!("{field}: {message}");
    }
    match status {
        StatusCode::UNAUTHORIZED if !had_token => {
            Failure::Auth(format!("{message} (not logged in: run `jobfleet login`)"))
        }
        StatusCode::UNAUTHORIZED => Failure::Auth(format!(
            "{message} (the token was refused; run `jobfleet login` again)"
        )),
        StatusCode::FORBIDDEN => Failure::Auth(message),
        StatusCode::NOT_FOUND => Failure::NotFound(message),
        StatusCode::TOO_MANY_REQUESTS => Failure::Refused(match retry_after {
            Some(secs) => format!("{message} (retry after {secs} s)"),
            None => message,
        }),
        s if s.is_client_error() => Failure::Refused(message),
        _ => Failure::Other(message),
    }
}
