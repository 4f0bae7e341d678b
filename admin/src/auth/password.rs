//! Password hashing with argon2id (the crate's recommended parameters), behind a gate that
//! bounds what hashing may cost: each hash needs ~19 MiB and ~50 ms of a core, so an
//! unauthenticated flood of logins could otherwise take all memory and CPU.
//!
//! Invariant: at most `concurrency` hashes run at once, each on the blocking pool with one of
//! at most `concurrency` reused memory buffers, so hashing never holds more than
//! `concurrency` × 19 MiB however many requests arrive (under a flood of logins the allocator
//! is not asked for fresh 19 MiB blocks that it might keep per thread arena). The buffers go
//! back to the system when the last hash in progress ends: an idle admin holds none (it held
//! 19 MiB, a third of its idle RSS, from its first login on). That needs the fixed mmap threshold
//! `main` sets: with glibc's sliding one, a freed buffer lands in a thread arena and stays
//! (three logins left 38 MiB there). A request that cannot start
//! hashing within the queue deadline gets `Overloaded` (503 with `Retry-After`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use argon2::password_hash::phc::{Output, ParamsString, Salt};
use argon2::{Algorithm, Argon2, Block, Params, PasswordHash, Version};
use tokio::sync::Semaphore;

use crate::error::Error;

/// The largest argon2 memory a stored hash may ask for (64 MiB); anything larger verifies
/// nothing rather than allocating whatever a hash string says.
const MAX_BLOCKS: usize = 64 * 1024;

/// How hashing is bounded (from the `password_hash_*` config keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLimits {
    pub concurrency: usize,
    pub queue: Duration,
}

/// Runs password hashing within [`GateLimits`]. Cloning shares the gate.
#[derive(Debug, Clone)]
pub struct HashGate {
    permits: Arc<Semaphore>,
    concurrency: usize,
    buffers: Arc<Mutex<Vec<Vec<Block>>>>,
    queue: Duration,
}

impl HashGate {
    pub fn new(limits: GateLimits) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limits.concurrency.max(1))),
            concurrency: limits.concurrency.max(1),
            buffers: Arc::new(Mutex::new(Vec::new())),
            queue: limits.queue,
        }
    }

    /// Runs `work` with a memory buffer on the blocking pool once a permit is free.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Vec<Block>) -> T + Send + 'static,
    ) -> Result<T, Error> {
        let permit = tokio::time::timeout(self.queue, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| Error::Overloaded {
                retry_after_s: self.queue.as_secs().max(1),
            })?
            .map_err(|e| Error::Internal(anyhow::anyhow!("hash gate closed: {e}")))?;
        let (buffers, permits, concurrency) =
            (self.buffers.clone(), self.permits.clone(), self.concurrency);
        tokio::task::spawn_blocking(move || {
            let mut buffer = buffers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop()
                .unwrap_or_default();
            let out = work(&mut buffer);
            let mut pool = buffers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Ours is the only permit out: no hash is running, so none is kept. (A buffer this
            // large is its own mapping, unmapped when freed, under `main`'s mmap threshold.)
            if permits.available_permits() + 1 >= concurrency {
                pool.clear();
            } else {
                pool.push(buffer);
            }
            drop(pool);
            drop(permit);
            out
        })
        .await
        .map_err(|e| Error::Internal(anyhow::anyhow!("password hashing task: {e}")))
    }

    /// Whether `password` matches `stored_hash` (constant time; a malformed hash matches nothing).
    ///
    /// # Errors
    /// `Overloaded` when no hashing slot frees up within the queue deadline.
    pub async fn verify(&self, stored_hash: String, password: String) -> Result<bool, Error> {
        self.run(move |buffer| verify_with(&stored_hash, &password, buffer))
            .await
    }

    /// A PHC string of `password` with a fresh salt.
    ///
    /// # Errors
    /// `Overloaded` as `verify`; `Internal` if hashing fails (it does not with valid parameters).
    pub async fn hash(&self, password: String) -> Result<String, Error> {
        self.run(move |buffer| hash_with(&password, buffer)).await?
    }
}

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

fn blocks(buffer: &mut Vec<Block>, count: usize) -> &mut [Block] {
    if buffer.len() < count {
        buffer.resize(count, Block::default());
    }
    &mut buffer[..count]
}

fn hash_with(password: &str, buffer: &mut Vec<Block>) -> Result<String, Error> {
    let fail = |e: &dyn std::fmt::Display| Error::Internal(anyhow::anyhow!("argon2: {e}"));
    let salt: [u8; 16] = rand::random();
    let params = Params::default();
    let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
    Argon2::default()
        .hash_password_into_with_memory(
            password.as_bytes(),
            &salt,
            &mut out,
            blocks(buffer, params.block_count()),
        )
        .map_err(|e| fail(&e))?;
    let phc = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(|e| fail(&e))?,
        salt: Some(Salt::new(&salt).map_err(|e| fail(&e))?),
        hash: Some(Output::new(&out).map_err(|e| fail(&e))?),
    };
    Ok(phc.to_string())
}

/// argon2's own `verify_password`, but computing into our reused buffer.
fn verify_with(stored_hash: &str, password: &str, buffer: &mut Vec<Block>) -> bool {
    if password.len() > MAX_LEN {
        return false;
    }
    let Ok(parsed) = PasswordHash::new(stored_hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (&parsed.salt, &parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm.as_str()),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    if params.block_count() > MAX_BLOCKS {
        tracing::warn!(
            blocks = params.block_count(),
            "A stored password hash asks for more argon2 memory than allowed; it matches nothing"
        );
        return false;
    }
    let mut out = vec![0u8; expected.len()];
    let argon = Argon2::new(algorithm, version, params.clone());
    argon
        .hash_password_into_with_memory(
            password.as_bytes(),
            salt,
            &mut out,
            blocks(buffer, params.block_count()),
        )
        .is_ok()
        && Output::new(&out).is_ok_and(|computed| computed == *expected)
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
        use argon2::{PasswordHasher, PasswordVerifier};
        let mut buffer = Vec::new();
        let h = hash_with("correct horse", &mut buffer).unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(verify_with(&h, "correct horse", &mut buffer));
        assert!(!verify_with(&h, "wrong horse", &mut buffer));
        assert!(!verify_with("not a hash", "x", &mut buffer));
        assert!(!verify_with(dummy_hash(), "anything", &mut buffer));
        // Interoperable with the crate's own hasher and verifier, both ways.
        let theirs = Argon2::default()
            .hash_password_with_salt(b"correct horse", b"somesaltsomesalt")
            .unwrap()
            .to_string();
        assert!(verify_with(&theirs, "correct horse", &mut buffer));
        assert!(
            Argon2::default()
                .verify_password(b"correct horse", &PasswordHash::new(&h).unwrap())
                .is_ok()
        );
        assert_eq!(
            buffer.len(),
            Params::default().block_count(),
            "one buffer, reused"
        );
        assert!(check_policy("password", "short").is_err());
        assert!(check_policy("password", &"x".repeat(300)).is_err());
        assert!(check_policy("password", "long enough").is_ok());
    }

    #[tokio::test]
    async fn the_gate_answers_overloaded_after_its_queue_deadline() {
        let gate = HashGate::new(GateLimits {
            concurrency: 1,
            queue: Duration::from_millis(10),
        });
        let held = gate.permits.clone().acquire_owned().await.unwrap();
        let err = gate
            .verify(dummy_hash().into(), "x".into())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Overloaded { retry_after_s: 1 }),
            "{err}"
        );
        drop(held);
        assert!(!gate.verify(dummy_hash().into(), "x".into()).await.unwrap());
    }

    #[tokio::test]
    async fn buffers_are_kept_while_hashing_goes_on_and_released_when_it_stops() {
        let gate = HashGate::new(GateLimits {
            concurrency: 2,
            queue: Duration::from_secs(5),
        });
        let pooled = |gate: &HashGate| gate.buffers.lock().unwrap().len();
        // Another hash in progress (its permit out): the buffer goes back to the pool.
        let other = gate.permits.clone().acquire_owned().await.unwrap();
        assert!(!gate.verify(dummy_hash().into(), "x".into()).await.unwrap());
        assert_eq!(pooled(&gate), 1, "reused while logins keep coming");
        drop(other);
        // The last hash in progress ends: nothing is kept.
        assert!(!gate.verify(dummy_hash().into(), "x".into()).await.unwrap());
        assert_eq!(pooled(&gate), 0, "an idle admin holds no hashing memory");
    }
}
