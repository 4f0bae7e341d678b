//! The only place that reads the system time, so tests can drive time by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch, UTC.
pub type UnixMillis = i64;

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> UnixMillis;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMillis {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that moves only when told to; shared by clones.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_ms: UnixMillis) -> Self {
        Self(Arc::new(AtomicI64::new(start_ms)))
    }

    pub fn set(&self, ms: UnixMillis) {
        self.0.store(ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by_ms: i64) {
        self.0.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMillis {
        self.0.load(Ordering::SeqCst)
    }
}

pub type SharedClock = Arc<dyn Clock>;
