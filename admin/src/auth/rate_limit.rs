//! Login rate limit: failed attempts per key (client IP and username) in a sliding window.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug)]
pub struct RateLimiter {
    max_failures: usize,
    window_ms: i64,
    failures: Mutex<HashMap<String, Vec<i64>>>,
}

impl RateLimiter {
    pub fn new(max_failures: usize, window_ms: i64) -> Self {
        Self {
            max_failures,
            window_ms,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Whether another attempt is allowed for `key` at `now_ms`.
    pub fn allowed(&self, key: &str, now_ms: i64) -> bool {
        let mut map = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(times) = map.get_mut(key) else {
            return true;
        };
        times.retain(|t| now_ms - t < self.window_ms);
        times.len() < self.max_failures
    }

    pub fn record_failure(&self, key: &str, now_ms: i64) {
        let mut map = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bound memory under a spray of distinct keys: forget keys whose window has passed.
        if map.len() > 10_000 {
            map.retain(|_, times| times.last().is_some_and(|t| now_ms - t < self.window_ms));
        }
        map.entry(key.to_owned()).or_default().push(now_ms);
    }

    pub fn clear(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_max_failures_until_the_window_passes() {
        let limiter = RateLimiter::new(3, 1000);
        for t in 0..3 {
            assert!(limiter.allowed("k", t));
            limiter.record_failure("k", t);
        }
        assert!(!limiter.allowed("k", 10));
        assert!(limiter.allowed("other", 10));
        assert!(limiter.allowed("k", 1003));
        limiter.record_failure("k", 1003);
        limiter.clear("k");
        assert!(limiter.allowed("k", 1004));
    }
}
