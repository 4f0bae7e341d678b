//! Leaky buckets in a table of fixed capacity, keyed by 64-bit keyed hashes: the storage of
//! both limiters, the password-guessing one (`rate_limit`) and the open API's (`api_limit`).
//! A bucket holds up to `limit` units and drains linearly, `limit` units per window.
//!
//! Invariant: a table never holds more than `capacity` keys; keys are hashes, so an entry's
//! size does not depend on what the client sent.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A limiter's tables behind one lock (so checking and charging several buckets is one step),
/// with the per-process random hasher that turns what a client sent into table keys.
#[derive(Debug)]
pub struct Keyed<T> {
    hasher: RandomState,
    tables: Mutex<T>,
}

impl<T> Keyed<T> {
    pub fn new(tables: T) -> Self {
        Self {
            hasher: RandomState::new(),
            tables: Mutex::new(tables),
        }
    }

    /// The 64-bit key of `what` (tag it, e.g. `("user", name)`, so kinds never collide).
    pub fn key(&self, what: impl Hash) -> u64 {
        self.hasher.hash_one(what)
    }

    /// The tables. A panic while they were held left them consistent (every change is one
    /// insert or remove), so a poisoned lock is taken over.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A bucket's fill at an instant.
#[derive(Debug, Clone, Copy)]
struct Level {
    units: f64,
    at_ms: i64,
}

/// The buckets of one limit: every key in a table has the same size and drain rate.
#[derive(Debug)]
pub struct Table {
    limit: f64,
    /// Units drained per millisecond.
    rate: f64,
    slots: HashMap<u64, Level>,
}

impl Table {
    /// Buckets of `limit` units (at least 1) that drain in `window_ms`.
    pub fn new(limit: u32, window_ms: i64) -> Self {
        let limit = f64::from(limit.max(1));
        Self {
            limit,
            rate: limit / window_ms.max(1) as f64,
            slots: HashMap::new(),
        }
    }

    fn level(&self, key: u64, now_ms: i64) -> f64 {
        self.slots
            .get(&key)
            .map_or(0.0, |l| drained(l, self.rate, now_ms))
    }

    /// Milliseconds until one more unit fits, or `None` when it fits now.
    pub fn wait_ms(&self, key: u64, now_ms: i64) -> Option<i64> {
        let over = self.level(key, now_ms) + 1.0 - self.limit;
        (over > 1e-9).then(|| ceil_ms(over / self.rate))
    }

    /// Whole units that still fit now.
    pub fn remaining(&self, key: u64, now_ms: i64) -> u64 {
        // Within 1e-9 of a whole unit counts as that unit (float drift of the drain).
        (self.limit - self.level(key, now_ms) + 1e-9)
            .floor()
            .max(0.0) as u64
    }

    /// Milliseconds until the bucket is empty again (its whole `limit` fits).
    pub fn empty_in_ms(&self, key: u64, now_ms: i64) -> i64 {
        ceil_ms(self.level(key, now_ms) / self.rate)
    }

    /// Adds `units` (negative: takes them back) to the bucket of `key`, making room first
    /// when the key is new and the table full.
    pub fn add(&mut self, key: u64, units: f64, now_ms: i64, capacity: usize) {
        let level = self.level(key, now_ms) + units;
        if level <= 1e-9 {
            self.slots.remove(&key);
            return;
        }
        if !self.slots.contains_key(&key) && self.slots.len() >= capacity {
            self.make_room(now_ms, capacity);
        }
        self.slots.insert(
            key,
            Level {
                units: level,
                at_ms: now_ms,
            },
        );
    }

    /// Forgets the bucket of `key` (it is empty from now on).
    pub fn forget(&mut self, key: u64) {
        self.slots.remove(&key);
    }

    /// Keys held.
    pub fn keys_held(&self) -> usize {
        self.slots.len()
    }

    /// Frees at least one slot: drained entries first; else the one with the least penalty.
    /// An attacker flooding new keys creates entries of one unit each, so they evict one
    /// another and never an entry that holds a real penalty.
    fn make_room(&mut self, now_ms: i64, capacity: usize) {
        let rate = self.rate;
        self.slots.retain(|_, l| drained(l, rate, now_ms) > 1e-9);
        if self.slots.len() < capacity {
            return;
        }
        let lightest = self
            .slots
            .iter()
            .map(|(k, l)| (*k, drained(l, rate, now_ms)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((key, _)) = lightest {
            self.slots.remove(&key);
        }
    }
}

/// Rounds up to whole milliseconds, ignoring the float drift of a division that should be
/// whole (1 unit at 3 per minute is 20,000 ms, not 20,001).
fn ceil_ms(ms: f64) -> i64 {
    (ms - 1e-6).ceil().max(0.0) as i64
}

fn drained(level: &Level, rate: f64, now_ms: i64) -> f64 {
    let elapsed = (now_ms - level.at_ms).max(0) as f64;
    (level.units - elapsed * rate).max(0.0)
}

/// The bucket of a client address: an IPv6 client usually holds a whole /64, so it counts as
/// one client; anything unparsable is its own bucket.
pub fn client_bucket(ip: &str) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Ok(IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or_else(String::new, |v4| v4.to_string()),
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Err(_) => ip.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_reports_what_fits_and_when_it_is_empty() {
        let mut t = Table::new(4, 1000);
        assert_eq!((t.remaining(1, 0), t.empty_in_ms(1, 0)), (4, 0));
        for _ in 0..3 {
            t.add(1, 1.0, 0, 10);
        }
        assert_eq!(t.remaining(1, 0), 1);
        assert_eq!(t.empty_in_ms(1, 0), 750);
        assert_eq!(t.wait_ms(1, 0), None);
        t.add(1, 1.0, 0, 10);
        assert_eq!(t.remaining(1, 0), 0);
        assert_eq!(t.wait_ms(1, 0), Some(250));
        assert_eq!(t.remaining(1, 250), 1);
        assert_eq!(t.remaining(1, 1000), 4);
        t.forget(1);
        assert_eq!(t.keys_held(), 0);
    }

    #[test]
    fn client_addresses_group_by_v6_prefix() {
        assert_eq!(
            client_bucket("2001:db8:1:2:aaaa::1"),
            client_bucket("2001:db8:1:2::9")
        );
        assert_ne!(
            client_bucket("2001:db8:1:2::1"),
            client_bucket("2001:db8:1:3::1")
        );
        assert_eq!(client_bucket("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(client_bucket("unknown"), "unknown");
    }
}
