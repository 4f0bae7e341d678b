//! Talking to the admins: each call goes to the preferred admin and fails over to the next;
//! the first admin is preferred again as soon as it answers. Heartbeats and results go over
//! the agent's own connection instead while one is up (`link::Uplink`), and by HTTP otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::link::Uplink;
use crate::protocol::{ACCESS_TOKEN_HEADER, AGENT_KEY_HEADER, Call, Envelope, admin_path};

pub struct AdminClient {
    admins: Vec<String>,
    token: Option<String>,
    /// This agent's own key, sent on every call (`None` only in tests of the client).
    key: Option<String>,
    http: reqwest::Client,
    /// Index of the admin that answered last.
    current: AtomicUsize,
    /// The agent's connection, in modes `connect` and `auto`.
    uplink: Option<Arc<Uplink>>,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("admins", &self.admins)
            .finish_non_exhaustive()
    }
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
            uplink: None,
        })
    }

    /// Sends heartbeats and results over `uplink` whenever it is connected.
    #[must_use]
    pub fn with_uplink(mut self, uplink: Arc<Uplink>) -> Self {
        self.uplink = Some(uplink);
        self
    }

    /// Posts `body` to `path`: over the agent's connection when it is up and carries that call
    /// (a refusal or a drop there falls through to HTTP, which is harmless: the admin stores a
    /// heartbeat or a result twice as once), else by HTTP to the first admin that answers with
    /// code 200, trying the first configured admin first so traffic returns to it once it is
    /// back. Returns the admin that took it.
    pub async fn post<T: Serialize>(&self, path: &str, body: &T) -> Result<String, String> {
        let mut errors = Vec::new();
        let call = match path {
            admin_path::REGISTRY => Some(Call::Registry),
            admin_path::CALLBACK => Some(Call::Callback),
            _ => None,
        };
        if let (Some(uplink), Some(call)) = (&self.uplink, call)
            && uplink.connected().is_some()
        {
            match uplink.call(call, body).await {
                Ok((admin, reply)) if reply.is_ok() => return Ok(admin),
                Ok((admin, reply)) => errors.push(format!(
                    "{admin} (connection): {}",
                    reply.msg.unwrap_or_default()
                )),
                Err(e) => errors.push(format!("connection: {e}")),
            }
        }
        for (i, base) in self.admins.iter().enumerate() {
            match self.post_to(base, path, body).await {
                Ok(()) => {
                    if self.current.swap(i, Ordering::Relaxed) != i {
                        tracing::info!(admin = %base, "Using admin");
                    }
                    return Ok(base.clone());
                }
                Err(e) => errors.push(e),
            }
        }
        Err(errors.join("; "))
    }

    /// POSTs `body` to `path` on the admin `base` by HTTP; `Ok` when it answered code 200.
    pub async fn post_to<T: Serialize>(
        &self,
        base: &str,
        path: &str,
        body: &T,
    ) -> Result<(), String> {
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
                match serde_json::from_str::<Envelope<serde::de::IgnoredAny>>(&text) {
                    Ok(envelope) if envelope.is_ok() => Ok(()),
                    Ok(envelope) => Err(format!("{base}: {}", envelope.msg.unwrap_or_default())),
                    Err(_) => Err(format!("{base}: not an XXL-Job envelope")),
                }
            }
            Err(e) => Err(format!("{base}: {}", with_causes(&e))),
        }
    }
}

/// An error with its causes: reqwest's own text ("error sending request") hides the reason a
/// TLS handshake failed (an unknown CA, a refused client certificate).
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
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
