//! The cluster relay: how an admin reaches an agent whose connection another admin holds.
//!
//! An agent in `connect` mode (or an `auto` one whose address cannot be dialled) holds one
//! connection, to one admin; the agent row records that admin's `cluster_url`. Another admin
//! with a call for it posts the call to `POST /api/cluster/relay` on the holder, which sends it
//! over the connection and answers with the agent's reply: one loopback-or-LAN HTTP exchange on
//! a kept-alive connection, a few milliseconds, not a polling interval.
//!
//! The relay endpoint runs code on agents, so it is not open to the shared agent token (every
//! agent has that one): a relay call carries a short-lived token signed with a key derived from
//! the cluster's `jwt_secret`, which only admins know. The derived key differs from the open
//! API's, so neither token opens the other's door.

use std::sync::OnceLock;
use std::time::Duration;

use jobfleet_agent::protocol::Call;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::db::{self, Db};

/// Path of the relay endpoint on every admin.
pub const RELAY_PATH: &str = "/api/cluster/relay";
/// How long a relay token is good for: one call, with room for clock skew between admins.
const TOKEN_TTL_S: i64 = 60;
const SUBJECT: &str = "cluster-relay";

/// A call for an agent connected to the admin that receives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayCall {
    /// The agent's registered address (`conn://…` or an `auto` agent's URL).
    pub address: String,
    pub call: Call,
    /// The call's body, as the agent endpoint of the same name takes it (passed on as it came).
    pub body: Box<RawValue>,
    /// How long the caller still waits for the agent's reply.
    pub timeout_ms: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct RelayClaims {
    sub: String,
    exp: i64,
}

/// Signs and checks relay tokens.
#[derive(Clone)]
pub struct RelayKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for RelayKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayKeys(<redacted>)")
    }
}

impl RelayKeys {
    pub fn new(jwt_secret: &[u8]) -> Self {
        let mut secret = jwt_secret.to_vec();
        secret.extend_from_slice(b"\0jobfleet cluster relay");
        Self {
            encoding: EncodingKey::from_secret(&secret),
            decoding: DecodingKey::from_secret(&secret),
        }
    }

    /// A token for one relay call sent at `now_ms`.
    pub fn issue(&self, now_ms: i64) -> String {
        let claims = RelayClaims {
            sub: SUBJECT.into(),
            exp: now_ms / 1000 + TOKEN_TTL_S,
        };
        // HS256 over a two-field struct cannot fail; an empty token is refused by the peer.
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .unwrap_or_default()
    }

    /// Whether `token` is a relay token of this cluster that has not expired at `now_ms`.
    pub fn verify(&self, token: &str, now_ms: i64) -> bool {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        jsonwebtoken::decode::<RelayClaims>(token, &self.decoding, &validation)
            .is_ok_and(|data| data.claims.sub == SUBJECT && data.claims.exp * 1000 > now_ms)
    }
}

/// What an admin needs to relay: where the holders are, and its own relay URL and keys.
#[derive(Debug)]
pub struct Relay {
    db: Db,
    pub keys: RelayKeys,
    /// This admin's `cluster_url`, set once the server is bound.
    own_url: OnceLock<String>,
}

impl Relay {
    pub fn new(db: Db, keys: RelayKeys, configured_url: Option<String>) -> Self {
        let own_url = OnceLock::new();
        if let Some(url) = configured_url {
            let _ = own_url.set(url);
        }
        Self { db, keys, own_url }
    }

    /// Sets this admin's URL from the address it serves on, unless `cluster_url` was given.
    pub fn bound(&self, addr: std::net::SocketAddr, https: bool) {
        let scheme = if https { "https" } else { "http" };
        let host = if addr.ip().is_unspecified() {
            host_name()
        } else if addr.is_ipv6() {
            format!("[{}]", addr.ip())
        } else {
            addr.ip().to_string()
        };
        let _ = self
            .own_url
            .set(format!("{scheme}://{host}:{}", addr.port()));
    }

    /// This admin's relay URL ("" before the server is bound).
    pub fn own_url(&self) -> &str {
        self.own_url.get().map_or("", String::as_str)
    }

    /// `holder`, given up at `deadline` (a busy pool must not stretch a hand-over beyond the
    /// trigger timeout, which the in-doubt recovery counts on).
    pub async fn holder_by(&self, address: &str, deadline: tokio::time::Instant) -> Option<String> {
        tokio::time::timeout_at(deadline, self.holder(address))
            .await
            .ok()
            .flatten()
    }

    /// The URL of the other admin holding the connection of the agent at `address`; `None`
    /// when no admin does, this one does, or the database cannot say.
    pub async fn holder(&self, address: &str) -> Option<String> {
        let owned = address.to_owned();
        match self
            .db
            .run(move |conn| db::agent::link_url(conn, &owned))
            .await
        {
            Ok(url) => url.filter(|url| url != self.own_url()),
            Err(e) => {
                tracing::debug!(error = %e, agent = address, "Could not look up the agent's connection");
                None
            }
        }
    }
}

/// Relay tokens cross processes, so they go by the system clock, as the peer's check does.
pub fn system_now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// This host's name, for the names and URLs an admin gives itself.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// How long to wait before looking for the agent's connection again (it is reconnecting).
pub const LOOK_AGAIN: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_tokens_are_their_own_and_expire() {
        let keys = RelayKeys::new(b"0123456789abcdef0123456789abcdef");
        let token = keys.issue(1_000_000);
        assert!(keys.verify(&token, 1_000_000));
        assert!(!keys.verify(&token, 1_000_000 + TOKEN_TTL_S * 1000));
        assert!(!RelayKeys::new(b"another secret, another cluster!!").verify(&token, 1_000_000));
        // An open-API token signed with the plain secret is not a relay token.
        let api = crate::auth::jwt::JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let (api_token, _) = api.issue(1, "admin", 1_000_000, 60_000).unwrap();
        assert!(!keys.verify(&api_token, 1_000_000));
        assert!(api.verify(&token, 1_000_000).is_err());
        assert!(!keys.verify("garbage", 1_000_000));
    }
}
