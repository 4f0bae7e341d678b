//! Talking to the admins: each call goes to the preferred admin and fails over to the next;
//! the first admin is preferred again as soon as it answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::protocol::{ACCESS_TOKEN_HEADER, AGENT_KEY_HEADER, Envelope};

#[derive(Debug)]
pub struct AdminClient {
    admins: Vec<String>,
    token: Option<String>,
    /// This agent's own key, sent on every call (`None` only in tests of the client).
    key: Option<String>,
    http: reqwest::Client,
    /// Index of the admin that answered last.
    current: AtomicUsize,
}

impl AdminClient {
    /// `tls` (from `crate::tls::client_config`) verifies https:// admins and holds the client
    /// certificate, if any.
    pub fn new(
        admins: Vec<String>,
        token: Option<String>,
        key: Option<String>,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(rustls::ClientConfig::clone(tls))
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        Ok(Self {
            admins,
            token,
            key,
            http,
            current: AtomicUsize::new(0),
        })
    }

    /// POSTs `body` to `path` on the first admin that answers with code 200, trying the first
    /// configured admin first so traffic returns to it once it is back.
    pub async fn post<T: Serialize>(&self, path: &str, body: &T) -> Result<String, String> {
        let mut errors = Vec::new();
        for (i, base) in self.admins.iter().enumerate() {
            let mut request = self.http.post(format!("{base}{path}")).json(body);
            if let Some(token) = &self.token {
                request = request.header(ACCESS_TOKEN_HEADER, token);
            }
            if let Some(key) = &self.key {
                request = request.header(AGENT_KEY_HEADER, key);
            }
            match request.send().await {
                Ok(response) => {
                    let text = response.text().await.unwrap_or_default();
                    match serde_json::from_str::<Envelope<serde_json::Value>>(&text) {
                        Ok(envelope) if envelope.is_ok() => {
                            if self.current.swap(i, Ordering::Relaxed) != i {
                                tracing::info!(admin = %base, "Using admin");
                            }
                            return Ok(base.clone());
                        }
                        Ok(envelope) => {
                            errors.push(format!("{base}: {}", envelope.msg.unwrap_or_default()))
                        }
                        Err(_) => errors.push(format!("{base}: not an XXL-Job envelope")),
                    }
                }
                Err(e) => errors.push(format!("{base}: {}", with_causes(&e))),
            }
        }
        Err(errors.join("; "))
    }
}

/// An error with its causes: reqwest's own text ("error sending request") hides the reason a
/// TLS handshake failed (an unknown CA, a refused client certificate).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}
