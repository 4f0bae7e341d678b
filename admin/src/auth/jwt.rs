//! JWTs for the open API: HS256, short-lived, issued by `POST /api/v1/auth/token`.
//!
//! A token names its user; role, grants and the disabled flag are read from the database on
//! every request, so changing them takes effect at once. Tokens issued before the user's last
//! password change are refused.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user id, as a string per RFC 7519.
    pub sub: String,
    pub name: String,
    /// Issued at, seconds.
    pub iat: i64,
    /// Issued at, milliseconds: compared with the user's last password change.
    pub iat_ms: i64,
    /// Expiry, seconds.
    pub exp: i64,
}

#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtKeys(<redacted>)")
    }
}

impl JwtKeys {
    pub fn new(secret: &[u8]) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    /// Signs a token for `user_id` valid for `ttl_ms` from `now_ms`; returns it with its expiry (ms).
    ///
    /// # Errors
    /// `Internal` if signing fails.
    pub fn issue(
        &self,
        user_id: i64,
        name: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<(String, i64), Error> {
        let expires_ms = now_ms + ttl_ms;
        let claims = Claims {
            sub: user_id.to_string(),
            name: name.to_owned(),
            iat: now_ms / 1000,
            iat_ms: now_ms,
            exp: expires_ms / 1000,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| Error::Internal(anyhow::anyhow!("jwt signing: {e}")))?;
        Ok((token, expires_ms))
    }

    /// Verifies signature, algorithm and expiry against `now_ms` (not the system clock, so tests
    /// with a manual clock see expiry when they move it).
    ///
    /// # Errors
    /// `Unauthenticated` saying whether the token expired or is invalid.
    pub fn verify(&self, token: &str, now_ms: i64) -> Result<Claims, Error> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|_| Error::Unauthenticated("invalid token".into()))?;
        if data.claims.exp * 1000 <= now_ms {
            return Err(Error::Unauthenticated("token expired".into()));
        }
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_verify_until_expiry() {
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let (token, exp) = keys.issue(7, "alice", 1_000_000, 60_000).unwrap();
        assert_eq!(exp, 1_060_000);
        let claims = keys.verify(&token, 1_000_001).unwrap();
        assert_eq!((claims.sub.as_str(), claims.name.as_str()), ("7", "alice"));
        assert!(
            keys.verify(&token, 1_060_000)
                .unwrap_err()
                .to_string()
                .contains("expired")
        );
    }

    #[test]
    fn tampered_or_foreign_tokens_fail() {
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let other = JwtKeys::new(b"another-secret-another-secret-xx");
        let (token, _) = other.issue(1, "x", 0, 60_000).unwrap();
        assert!(keys.verify(&token, 1).is_err(), "wrong key");
        let (token, _) = keys.issue(1, "x", 0, 60_000).unwrap();
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = parts[1].replace('A', "B");
        assert!(
            keys.verify(&parts.join("."), 1).is_err(),
            "tampered payload"
        );
        assert!(keys.verify("not.a.jwt", 1).is_err());
        // alg=none must never be accepted.
        let none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiIxIiwibmFtZSI6IngiLCJpYXQiOjAsImlhdF9tcyI6MCwiZXhwIjo5OTk5OTk5OTk5fQ.";
        assert!(keys.verify(none, 1).is_err());
    }
}
