//! Authentication and authorisation: passwords, JWTs, API tokens, the login rate limit, and
//! the RBAC checks that turn a caller into an `Actor` and an `Actor` into proofs.

pub mod api_limit;
pub mod api_token;
pub mod bucket;
pub mod csrf;
pub mod extract;

pub mod jwt;
pub mod password;
pub mod rate_limit;
pub mod rbac;

use rand::Rng;
use sha2::{Digest, Sha256};

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A random string of `len` alphanumeric characters from the OS-seeded CSPRNG.
pub fn random_token(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

pub fn sha256_hex(data: &str) -> String {
    hex::encode(Sha256::digest(data.as_bytes()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_tokens_are_alphanumeric_and_distinct() {
        let a = super::random_token(32);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, super::random_token(32));
        assert_eq!(super::sha256_hex("abc").len(), 64);
    }
}
