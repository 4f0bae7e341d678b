//! Agent liveness, one rule for routing, the monitors, the console and the API.

/// An agent is live while its last heartbeat is younger than this (three missed 10 s beats).
pub const DEAD_AFTER_MS: i64 = 30_000;

pub fn is_live(last_seen_ms: i64, now_ms: i64) -> bool {
    now_ms - last_seen_ms < DEAD_AFTER_MS
}

/// The oldest `last_seen_ms` of a live agent at `now_ms`: `last_seen_ms >= live_since(now)` is
/// `is_live` as a range a query can use an index for.
pub fn live_since(now_ms: i64) -> i64 {
    now_ms - DEAD_AFTER_MS + 1
}

/// Where an agent stands in the fleet; every agent is in exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentStatus {
    /// Heartbeating and in service.
    Live,
    /// Heartbeating, but an admin drained it: no new runs.
    Drained,
    /// No heartbeat for `DEAD_AFTER_MS`.
    Dead,
}

impl AgentStatus {
    pub const ALL: [AgentStatus; 3] = [Self::Live, Self::Drained, Self::Dead];

    pub fn of(last_seen_ms: i64, drained: bool, now_ms: i64) -> Self {
        match (is_live(last_seen_ms, now_ms), drained) {
            (false, _) => Self::Dead,
            (true, true) => Self::Drained,
            (true, false) => Self::Live,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Drained => "drained",
            Self::Dead => "dead",
        }
    }
}

impl std::str::FromStr for AgentStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not live, drained or dead"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_missed_beats_make_an_agent_dead() {
        assert!(is_live(1_000, 1_000 + DEAD_AFTER_MS - 1));
        assert!(!is_live(1_000, 1_000 + DEAD_AFTER_MS));
    }

    #[test]
    fn live_since_is_the_same_rule_as_a_range() {
        let now = 100_000;
        for seen in [
            now - DEAD_AFTER_MS - 1,
            now - DEAD_AFTER_MS,
            now - DEAD_AFTER_MS + 1,
            now,
        ] {
            assert_eq!(seen >= live_since(now), is_live(seen, now), "{seen}");
        }
    }

    #[test]
    fn every_agent_has_one_status() {
        let now = 100_000;
        assert_eq!(AgentStatus::of(now, false, now), AgentStatus::Live);
        assert_eq!(AgentStatus::of(now, true, now), AgentStatus::Drained);
        assert_eq!(AgentStatus::of(0, true, now), AgentStatus::Dead);
        for status in AgentStatus::ALL {
            assert_eq!(status.as_str().parse::<AgentStatus>(), Ok(status));
        }
        assert!("alive".parse::<AgentStatus>().is_err());
    }
}
