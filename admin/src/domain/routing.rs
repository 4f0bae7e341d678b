//! Routing strategies: how a trigger picks among a group's live agents.

use super::string_enum;

string_enum! {
    pub enum Routing {
        First => "first",
        Last => "last",
        RoundRobin => "round_robin",
        Random => "random",
        ConsistentHash => "consistent_hash",
        LeastFrequentlyUsed => "least_frequently_used",
        LeastRecentlyUsed => "least_recently_used",
        Failover => "failover",
        Busyover => "busyover",
        LeastLoaded => "least_loaded",
        ShardingBroadcast => "sharding_broadcast",
    }
}
