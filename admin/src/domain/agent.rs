//! Agent liveness, one rule for routing, the monitors, the console and the API.

/// An agent is live while its last heartbeat is younger than this (three missed 10 s beats).
pub const DEAD_AFTER_MS: i64 = 30_000;

pub fn is_live(last_seen_ms: i64, now_ms: i64) -> bool {
    now_ms - last_seen_ms < DEAD_AFTER_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_missed_beats_make_an_agent_dead() {
        assert!(is_live(1_000, 1_000 + DEAD_AFTER_MS - 1));
        assert!(!is_live(1_000, 1_000 + DEAD_AFTER_MS));
    }
}
