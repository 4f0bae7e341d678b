//! The password-guessing limit shared by every surface that checks a password (API and console
//! login, changing one's own password): a leaky bucket per account name and one per client
//! address, checked and charged together under one lock, in tables of fixed capacity.
//!
//! Why not `governor`: its keyed limiters count every request and cannot refund one, while
//! here only failures should count (a successful login must not lock its user out), and its
//! keyed store grows until pruned, so its memory bound would still be ours to write. A small
//! fixed-capacity map with our own eviction rule is shorter than adapting it (`bucket`, which
//! the open API's limiter shares).
//!
//! Invariant: an attempt is charged *before* its password is hashed, under the same lock
//! that checked the limit, so N parallel guesses evaluate at most `limit` of them.
//! Invariant: the tables never hold more than `capacity` keys each; keys are 64-bit keyed
//! hashes, so an entry's size does not depend on what the client sent.

use super::bucket::{Keyed, Table, client_bucket};

/// The limiter's settings (from `login_*` config keys).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Failed attempts at one account name per window, from anywhere.
    pub per_user: u32,
    /// Failed attempts from one client address per window, over any names (password spraying).
    pub per_client: u32,
    pub window_ms: i64,
    /// Keys kept per table; the oldest-drained entries make room for new ones.
    pub capacity: usize,
}

#[derive(Debug)]
struct Tables {
    user: Table,
    client: Table,
}

/// The limiter. One lock guards both tables, so checking and charging both is one step.
#[derive(Debug)]
pub struct RateLimiter {
    limits: Limits,
    tables: Keyed<Tables>,
}

/// An attempt that was let through and charged; settle it with [`RateLimiter::succeeded`] or
/// [`RateLimiter::refund`], or leave it charged (a failure).
#[derive(Debug, Clone, Copy)]
#[must_use = "a charge is settled by success, refund, or left standing as a failure"]
pub struct Charge {
    user: u64,
    client: u64,
}

impl RateLimiter {
    pub fn new(limits: Limits) -> Self {
        Self {
            tables: Keyed::new(Tables {
                user: Table::new(limits.per_user, limits.window_ms),
                client: Table::new(limits.per_client, limits.window_ms),
            }),
            limits,
        }
    }

    fn user_key(&self, username: &str) -> u64 {
        self.tables.key(("user", username))
    }

    fn client_key(&self, client_ip: &str) -> u64 {
        self.tables.key(("client", client_bucket(client_ip)))
    }

    /// Checks both buckets and, when both have room, charges one unit to each.
    ///
    /// # Errors
    /// The milliseconds until the fuller bucket has room again.
    pub fn try_charge(&self, username: &str, client_ip: &str, now_ms: i64) -> Result<Charge, i64> {
        let charge = Charge {
            user: self.user_key(username),
            client: self.client_key(client_ip),
        };
        let capacity = self.limits.capacity.max(1);
        let mut tables = self.tables.lock();
        let wait = tables
            .user
            .wait_ms(charge.user, now_ms)
            .max(tables.client.wait_ms(charge.client, now_ms));
        if let Some(wait) = wait {
            return Err(wait.max(1));
        }
        tables.user.add(charge.user, 1.0, now_ms, capacity);
        tables.client.add(charge.client, 1.0, now_ms, capacity);
        Ok(charge)
    }

    /// The password was right: the account's failures are forgiven, and this attempt does
    /// not count against the client (whose earlier failures stay).
    pub fn succeeded(&self, charge: Charge, now_ms: i64) {
        let capacity = self.limits.capacity.max(1);
        let mut tables = self.tables.lock();
        tables.user.forget(charge.user);
        tables.client.add(charge.client, -1.0, now_ms, capacity);
    }

    /// The attempt was never evaluated (e.g. hashing was too busy): take the charge back.
    pub fn refund(&self, charge: Charge, now_ms: i64) {
        let capacity = self.limits.capacity.max(1);
        let mut tables = self.tables.lock();
        tables.user.add(charge.user, -1.0, now_ms, capacity);
        tables.client.add(charge.client, -1.0, now_ms, capacity);
    }

    /// Keys held per table (user, client), for tests and metrics.
    pub fn len(&self) -> (usize, usize) {
        let tables = self.tables.lock();
        (tables.user.keys_held(), tables.client.keys_held())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_user: u32, per_client: u32, capacity: usize) -> RateLimiter {
        RateLimiter::new(Limits {
            per_user,
            per_client,
            window_ms: 1000,
            capacity,
        })
    }

    #[test]
    fn blocks_after_the_limit_until_the_bucket_drains() {
        let l = limiter(3, 100, 100);
        for t in 0..3 {
            let _ = l.try_charge("alice", "10.0.0.1", t).unwrap();
        }
        let wait = l.try_charge("alice", "10.0.0.1", 3).unwrap_err();
        assert!(wait > 0 && wait <= 1000, "{wait}");
        assert!(l.try_charge("alice", "10.0.0.2", 3).is_err(), "per account");
        let _ = l.try_charge("bob", "10.0.0.1", 3).unwrap();
        // One unit drains every third of the window.
        let _ = l.try_charge("alice", "10.0.0.1", 3 + wait).unwrap();
        let _ = l.try_charge("alice", "10.0.0.1", 2000).unwrap();
    }

    #[test]
    fn one_client_is_limited_across_names() {
        let l = limiter(100, 5, 100);
        for n in 0..5 {
            let _ = l.try_charge(&format!("user{n}"), "10.0.0.1", 0).unwrap();
        }
        assert!(l.try_charge("user9", "10.0.0.1", 0).is_err());
        assert!(
            l.try_charge("user9", "2001:db8:1:2:aaaa::1", 0).is_ok()
                && l.try_charge("user9", "2001:db8:1:2:bbbb::1", 0).is_ok()
        );
    }

    #[test]
    fn success_forgives_the_account_and_refunds_the_attempt() {
        let l = limiter(2, 3, 100);
        let _ = l.try_charge("alice", "c", 0).unwrap();
        let ok = l.try_charge("alice", "c", 0).unwrap();
        l.succeeded(ok, 0);
        let busy = l.try_charge("alice", "c", 0).unwrap();
        l.refund(busy, 0);
        let _ = l.try_charge("alice", "c", 0).unwrap();
        // Client: 1 failure + 1 standing charge = 2 of 3.
        let _ = l.try_charge("bob", "c", 0).unwrap();
        assert!(l.try_charge("carol", "c", 0).is_err());
    }

    #[test]
    fn a_flood_of_new_names_neither_grows_the_table_nor_evicts_a_penalty() {
        let l = limiter(3, 1_000_000, 50);
        for t in 0..3 {
            let _ = l.try_charge("victim", "attacker", t).unwrap();
        }
        for n in 0..10_000 {
            let _ = l.try_charge(
                &format!("spray{n}"),
                &format!("10.{}.{}.1", n / 256, n % 256),
                5,
            );
        }
        let (users, clients) = l.len();
        assert!(users <= 50 && clients <= 50, "{users} {clients}");
        assert!(
            l.try_charge("victim", "elsewhere", 6).is_err(),
            "the penalised account kept its penalty"
        );
    }
}
