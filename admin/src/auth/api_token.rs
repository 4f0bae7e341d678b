//! Long-lived API tokens: `jft_` plus 40 random characters, shown once, stored as SHA-256.

pub const PREFIX: &str = "jft_";

/// A fresh token: the secret to show once, its hash to store, and a display prefix.
pub struct Minted {
    pub secret: String,
    pub hash: String,
    pub display_prefix: String,
}

pub fn mint() -> Minted {
    let secret = format!("{PREFIX}{}", super::random_token(40));
    let hash = super::sha256_hex(&secret);
    let display_prefix = secret.chars().take(PREFIX.len() + 4).collect();
    Minted {
        secret,
        hash,
        display_prefix,
    }
}

/// Whether a bearer credential is an API token rather than a JWT.
pub fn looks_like_api_token(bearer: &str) -> bool {
    bearer.starts_with(PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_hash_to_their_stored_hash() {
        let m = mint();
        assert!(looks_like_api_token(&m.secret));
        assert_eq!(super::super::sha256_hex(&m.secret), m.hash);
        assert_eq!(m.display_prefix.len(), 8);
        assert!(!looks_like_api_token("eyJhbGci"));
    }
}
