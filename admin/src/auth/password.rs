//! Password hashing with argon2id (the crate's recommended parameters).

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};

use crate::error::Error;

pub const MIN_LEN: usize = 8;
/// argon2 hashes any length, but an unbounded input is a cheap way to burn our CPU.
pub const MAX_LEN: usize = 256;

/// Checks the password policy; `field` names the input in the error.
///
/// # Errors
/// `invalid_field` when too short or too long.
pub fn check_policy(field: &str, password: &str) -> Result<(), Error> {
    let len = password.chars().count();
    if len < MIN_LEN {
        return Err(Error::invalid(
            field,
            format!("must be at least {MIN_LEN} characters"),
        ));
    }
    if password.len() > MAX_LEN {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_LEN} bytes"),
        ));
    }
    Ok(())
}

/// # Errors
/// `Internal` if hashing fails (it does not with valid parameters).
pub fn hash(password: &str) -> Result<String, Error> {
    let salt: [u8; 16] = rand::random();
    let hashed: PasswordHash = Argon2::default()
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map_err(|e| Error::Internal(anyhow::anyhow!("argon2: {e}")))?;
    Ok(hashed.to_string())
}

/// Constant-time verification; a malformed stored hash verifies nothing.
pub fn verify(stored_hash: &str, password: &str) -> bool {
    if password.len() > MAX_LEN {
        return false;
    }
    PasswordHash::new(stored_hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// A hash of a random password, verified against when the user does not exist, so a login
/// takes as long for an unknown name as for a wrong password.
pub fn dummy_hash() -> &'static str {
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$0nVJmUNxvH/dDPQCFLSZIdwuxz3+WV8LNFT0AS8QW5s"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_policy_holds() {
        let h = hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify(&h, "correct horse"));
        assert!(!verify(&h, "wrong horse"));
        assert!(!verify("not a hash", "x"));
        assert!(!verify(dummy_hash(), "anything"));
        assert!(check_policy("password", "short").is_err());
        assert!(check_policy("password", &"x".repeat(300)).is_err());
        assert!(check_policy("password", "long enough").is_ok());
    }
}
