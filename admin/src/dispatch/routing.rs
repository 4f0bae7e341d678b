//! Routing: the order in which a trigger tries a group's agents. The first address is the
//! strategy's pick; the rest are where an unreachable pick falls through to, so a dead agent
//! that still looks live never costs a fire. Per-job memory (round robin, LFU, LRU) lives in
//! this admin's process, as XXL-Job keeps it; after a restart it starts afresh.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::domain::ids::JobId;
use crate::domain::routing::Routing;

/// A live agent as routing sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub address: String,
    /// 0 = idle; from the last heartbeat; `None` for agents that send no metrics.
    pub load: Option<f64>,
    /// Its labels as of its last heartbeat (none for a manual group's addresses).
    pub labels: jobfleet_agent::protocol::labels::Labels,
    /// Free memory at its last heartbeat, MB; `None` without metrics.
    pub free_mem_mb: Option<i64>,
    /// When that heartbeat arrived (`last_seen_ms`); 0 for a manual group's addresses.
    pub beat_ms: i64,
}

/// What one more run adds to an agent's load, as one running job does in `load_of`.
const LOAD_PER_RUN: f64 = 0.05;

/// Load from heartbeat metrics: CPU share plus memory share plus a little per running job, so
/// equal hosts spread by how busy we made them.
pub fn load_of(metrics: &jobfleet_agent::protocol::HostMetrics) -> f64 {
    let mem = if metrics.mem_total_mb > 0 {
        metrics.mem_used_mb as f64 / metrics.mem_total_mb as f64
    } else {
        0.0
    };
    metrics.cpu_pct / 100.0 + mem + f64::from(metrics.running) * LOAD_PER_RUN
}

/// Free memory from heartbeat metrics, MB.
pub fn free_mem_of(metrics: &jobfleet_agent::protocol::HostMetrics) -> i64 {
    i64::try_from(metrics.mem_total_mb.saturating_sub(metrics.mem_used_mb)).unwrap_or(i64::MAX)
}

/// The candidates whose free memory (at their last heartbeat) holds a job's memory limit, as
/// `least_loaded` places runs (PowerJob's minimum memory); agents that sent no metrics stay.
pub fn with_memory_for(candidates: Vec<Candidate>, memory_mb: i64) -> Vec<Candidate> {
    candidates
        .into_iter()
        .filter(|c| c.free_mem_mb.is_none_or(|free| free >= memory_mb))
        .collect()
}

/// Entries of `Memory::sent_since_beat` kept at most; past it the oldest heartbeats' go.
const SENT_SINCE_BEAT_MAX: usize = 100_000;

/// Forgets LFU counts this often, as XXL-Job does, so a long-gone imbalance stops steering.
const LFU_RESET_MS: i64 = 24 * 3600 * 1000;
const VIRTUAL_NODES: u32 = 100;

#[derive(Debug, Default)]
struct Memory {
    round_robin: HashMap<JobId, u64>,
    frequency: HashMap<JobId, (i64, HashMap<String, u64>)>,
    recency: HashMap<JobId, HashMap<String, u64>>,
    tick: u64,
    /// `least_loaded`: runs placed on an agent since its heartbeat of `beat_ms`, by address.
    /// A heartbeat is up to 10 s old, and a burst placed by it alone would all go to the host
    /// that was idlest then; these count until the next heartbeat reports them as running.
    sent_since_beat: HashMap<String, (i64, u32)>,
}

/// Routing state shared by all dispatches of this admin.
#[derive(Debug, Default)]
pub struct Router {
    memory: Mutex<Memory>,
}

/// FNV-1a, then MurmurHash3's finalizer: FNV alone leaves keys that differ only in their last
/// characters (`job-1`, `job-2`) close together on the ring, piling them onto one agent.
fn ring_hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// Moves `first` to the front, the others keep their order.
fn with_first(mut addresses: Vec<String>, first: usize) -> Vec<String> {
    if first < addresses.len() {
        let pick = addresses.remove(first);
        addresses.insert(0, pick);
    }
    addresses
}

fn index_of_min<K: PartialOrd + Copy>(keys: impl Iterator<Item = K>) -> usize {
    let mut best: Option<(usize, K)> = None;
    for (i, k) in keys.enumerate() {
        if best.is_none_or(|(_, b)| k < b) {
            best = Some((i, k));
        }
    }
    best.map_or(0, |(i, _)| i)
}

impl Router {
    /// The addresses to try for a run of `job_id`, best first. `candidates` are in address
    /// order. Sharding broadcast is not ordered here: every candidate gets its own shard.
    pub fn order(
        &self,
        routing: Routing,
        job_id: JobId,
        candidates: &[Candidate],
        now_ms: i64,
    ) -> Vec<String> {
        let addresses: Vec<String> = candidates.iter().map(|c| c.address.clone()).collect();
        if addresses.len() <= 1 {
            return addresses;
        }
        let n = addresses.len();
        let mut memory = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match routing {
            Routing::First | Routing::Failover | Routing::Busyover | Routing::ShardingBroadcast => {
                addresses
            }
            Routing::Last => addresses.into_iter().rev().collect(),
            Routing::RoundRobin => {
                let counter = memory.round_robin.entry(job_id).or_insert_with(|| {
                    // Start at a random place so that many jobs do not all begin on agent 0.
                    rand::random::<u64>() % 1024
                });
                let pick = (*counter % n as u64) as usize;
                *counter = counter.wrapping_add(1);
                let mut rotated = addresses;
                rotated.rotate_left(pick);
                rotated
            }
            Routing::Random => with_first(addresses, rand::random_range(0..n)),
            Routing::ConsistentHash => consistent_order(&addresses, job_id),
            Routing::LeastFrequentlyUsed => {
                let (since, counts) = memory
                    .frequency
                    .entry(job_id)
                    .or_insert_with(|| (now_ms, HashMap::new()));
                if now_ms - *since > LFU_RESET_MS {
                    *since = now_ms;
                    counts.clear();
                }
                counts.retain(|a, _| addresses.contains(a));
                let pick = index_of_min(
                    addresses
                        .iter()
                        .map(|a| counts.get(a).copied().unwrap_or(0)),
                );
                *counts.entry(addresses[pick].clone()).or_insert(0) += 1;
                with_first(addresses, pick)
            }
            Routing::LeastRecentlyUsed => {
                memory.tick += 1;
                let tick = memory.tick;
                let used = memory.recency.entry(job_id).or_default();
                used.retain(|a, _| addresses.contains(a));
                let pick =
                    index_of_min(addresses.iter().map(|a| used.get(a).copied().unwrap_or(0)));
                used.insert(addresses[pick].clone(), tick);
                with_first(addresses, pick)
            }
            Routing::LeastLoaded => {
                let sent = &mut memory.sent_since_beat;
                let placed = |c: &Candidate| match sent.get(&c.address) {
                    Some((beat_ms, n)) if *beat_ms == c.beat_ms => *n,
                    _ => 0,
                };
                // Agents without metrics go last: we cannot tell they are idle.
                let mut ranked: Vec<(f64, &Candidate)> = candidates
                    .iter()
                    .map(|c| {
                        let load = c
                            .load
                            .map_or(f64::MAX, |l| l + f64::from(placed(c)) * LOAD_PER_RUN);
                        (load, c)
                    })
                    .collect();
                ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
                let pick = ranked[0].1;
                if sent.len() >= SENT_SINCE_BEAT_MAX {
                    let newest = sent.values().map(|(beat, _)| *beat).max().unwrap_or(0);
                    sent.retain(|_, (beat, _)| *beat >= newest - 60_000);
                }
                let entry = sent
                    .entry(pick.address.clone())
                    .or_insert((pick.beat_ms, 0));
                if entry.0 != pick.beat_ms {
                    *entry = (pick.beat_ms, 0);
                }
                entry.1 += 1;
                ranked.into_iter().map(|(_, c)| c.address.clone()).collect()
            }
        }
    }
}

/// A hash ring with virtual nodes: a job keeps its agent while the group does not change, and
/// when an agent leaves only its jobs move. Fallbacks walk on around the ring.
fn consistent_order(addresses: &[String], job_id: JobId) -> Vec<String> {
    let mut ring: Vec<(u64, usize)> = Vec::with_capacity(addresses.len() * VIRTUAL_NODES as usize);
    for (i, address) in addresses.iter().enumerate() {
        for v in 0..VIRTUAL_NODES {
            ring.push((ring_hash(format!("{address}#{v}").as_bytes()), i));
        }
    }
    ring.sort_unstable();
    let key = ring_hash(format!("job-{job_id}").as_bytes());
    let start = ring.partition_point(|(h, _)| *h < key);
    let mut order = Vec::with_capacity(addresses.len());
    for k in 0..ring.len() {
        let (_, i) = ring[(start + k) % ring.len()];
        if !order.contains(&i) {
            order.push(i);
            if order.len() == addresses.len() {
                break;
            }
        }
    }
    order.into_iter().map(|i| addresses[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(n: usize) -> Vec<Candidate> {
        (0..n)
            .map(|i| Candidate {
                address: format!("http://10.0.0.{i}:9999/"),
                load: None,
                labels: Default::default(),
                free_mem_mb: None,
                beat_ms: 0,
            })
            .collect()
    }

    fn firsts(
        router: &Router,
        routing: Routing,
        job: JobId,
        c: &[Candidate],
        times: usize,
    ) -> Vec<String> {
        (0..times)
            .map(|t| router.order(routing, job, c, t as i64)[0].clone())
            .collect()
    }

    #[test]
    fn every_order_is_a_permutation_of_the_candidates() {
        let c = agents(4);
        let router = Router::default();
        for routing in Routing::ALL {
            let mut order = router.order(*routing, JobId(7), &c, 0);
            order.sort();
            let mut all: Vec<String> = c.iter().map(|c| c.address.clone()).collect();
            all.sort();
            assert_eq!(order, all, "{routing:?}");
        }
        assert!(router.order(Routing::Random, JobId(1), &[], 0).is_empty());
    }

    #[test]
    fn first_and_last() {
        let c = agents(3);
        let r = Router::default();
        assert_eq!(r.order(Routing::First, JobId(1), &c, 0)[0], c[0].address);
        assert_eq!(r.order(Routing::Last, JobId(1), &c, 0)[0], c[2].address);
        assert_eq!(
            r.order(Routing::Failover, JobId(1), &c, 0),
            r.order(Routing::First, JobId(1), &c, 0)
        );
    }

    #[test]
    fn round_robin_visits_each_agent_in_turn() {
        let c = agents(3);
        let r = Router::default();
        let picks = firsts(&r, Routing::RoundRobin, JobId(5), &c, 6);
        assert_eq!(picks[0..3], picks[3..6]);
        let mut distinct = picks[0..3].to_vec();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
    }

    #[test]
    fn random_reaches_every_agent() {
        let c = agents(3);
        let r = Router::default();
        let mut picks = firsts(&r, Routing::Random, JobId(5), &c, 300);
        picks.sort();
        picks.dedup();
        assert_eq!(picks.len(), 3);
    }

    #[test]
    fn consistent_hash_is_stable_and_moves_only_the_leaving_agents_jobs() {
        let c = agents(4);
        let r = Router::default();
        let before: Vec<String> = (0..400)
            .map(|j| r.order(Routing::ConsistentHash, JobId(j), &c, 0)[0].clone())
            .collect();
        let again: Vec<String> = (0..400)
            .map(|j| r.order(Routing::ConsistentHash, JobId(j), &c, 0)[0].clone())
            .collect();
        assert_eq!(before, again);
        let gone = c[1].address.clone();
        let fewer: Vec<Candidate> = c.iter().filter(|a| a.address != gone).cloned().collect();
        let mut moved = 0;
        for j in 0..400 {
            let now = r.order(Routing::ConsistentHash, JobId(j), &fewer, 0)[0].clone();
            if before[j as usize] == gone {
                assert_ne!(now, gone);
            } else {
                assert_eq!(now, before[j as usize], "job {j} moved without cause");
            }
            moved += usize::from(before[j as usize] == gone);
        }
        // Each of 4 agents holds a fair share of jobs (virtual nodes spread them).
        assert!(
            (50..=150).contains(&moved),
            "agent held {moved} of 400 jobs"
        );
    }

    #[test]
    fn least_frequently_used_evens_out() {
        let c = agents(3);
        let r = Router::default();
        let picks = firsts(&r, Routing::LeastFrequentlyUsed, JobId(9), &c, 9);
        for a in &c {
            assert_eq!(picks.iter().filter(|p| **p == a.address).count(), 3);
        }
        // Counts are per job.
        assert_eq!(
            r.order(Routing::LeastFrequentlyUsed, JobId(10), &c, 0)[0],
            c[0].address
        );
    }

    #[test]
    fn least_recently_used_picks_the_longest_idle() {
        let c = agents(3);
        let r = Router::default();
        let picks = firsts(&r, Routing::LeastRecentlyUsed, JobId(9), &c, 4);
        assert_eq!(
            picks,
            vec![
                c[0].address.clone(),
                c[1].address.clone(),
                c[2].address.clone(),
                c[0].address.clone()
            ]
        );
        // A new agent has never been used: it goes first.
        let mut more = c.clone();
        more.push(Candidate {
            address: "http://10.0.0.9:9999/".into(),
            load: None,
            labels: Default::default(),
            free_mem_mb: None,
            beat_ms: 0,
        });
        assert_eq!(
            r.order(Routing::LeastRecentlyUsed, JobId(9), &more, 0)[0],
            "http://10.0.0.9:9999/"
        );
    }

    #[test]
    fn least_loaded_counts_the_runs_it_placed_until_the_next_heartbeat() {
        let mut c = agents(2);
        c[0].load = Some(0.0);
        c[1].load = Some(0.12);
        let r = Router::default();
        let mut picks = Vec::new();
        for _ in 0..6 {
            picks.push(r.order(Routing::LeastLoaded, JobId(1), &c, 0)[0].clone());
        }
        // 0, 0.05 and 0.10 beat 0.12, then they take turns: a burst spreads.
        let on_first = picks.iter().filter(|a| **a == c[0].address).count();
        assert_eq!(on_first, 4, "{picks:?}");
        assert_eq!(picks[..2], [c[0].address.clone(), c[0].address.clone()]);
        // A new heartbeat reports the runs itself: the count starts again.
        c[0].beat_ms = 10_000;
        c[1].beat_ms = 10_000;
        assert_eq!(
            r.order(Routing::LeastLoaded, JobId(1), &c, 0)[0],
            c[0].address
        );
        // Another job's runs count too: the load is the host's.
        assert_eq!(
            r.order(Routing::LeastLoaded, JobId(2), &c, 0)[0],
            c[0].address
        );
        assert_eq!(
            r.order(Routing::LeastLoaded, JobId(3), &c, 0)[0],
            c[0].address
        );
        assert_eq!(
            r.order(Routing::LeastLoaded, JobId(4), &c, 0)[0],
            c[1].address
        );
    }

    #[test]
    fn a_memory_limit_keeps_only_agents_with_that_much_free() {
        let mut c = agents(3);
        c[0].free_mem_mb = Some(512);
        c[1].free_mem_mb = Some(4096);
        c[2].free_mem_mb = None;
        let fits: Vec<String> = with_memory_for(c.clone(), 1024)
            .into_iter()
            .map(|c| c.address)
            .collect();
        assert_eq!(fits, [c[1].address.clone(), c[2].address.clone()]);
        assert_eq!(with_memory_for(c.clone(), 512).len(), 3);
        let idle = jobfleet_agent::protocol::HostMetrics {
            mem_used_mb: 100,
            mem_total_mb: 1000,
            ..Default::default()
        };
        assert_eq!(free_mem_of(&idle), 900);
    }

    #[test]
    fn least_loaded_prefers_idle_hosts_and_puts_unknown_last() {
        let mut c = agents(3);
        c[0].load = Some(1.5);
        c[1].load = None;
        c[2].load = Some(0.2);
        let r = Router::default();
        assert_eq!(
            r.order(Routing::LeastLoaded, JobId(1), &c, 0),
            vec![
                c[2].address.clone(),
                c[0].address.clone(),
                c[1].address.clone()
            ]
        );
        let busy = jobfleet_agent::protocol::HostMetrics {
            cpu_pct: 90.0,
            mem_used_mb: 900,
            mem_total_mb: 1000,
            running: 4,
            ..Default::default()
        };
        let idle = jobfleet_agent::protocol::HostMetrics {
            cpu_pct: 5.0,
            mem_used_mb: 100,
            mem_total_mb: 1000,
            ..Default::default()
        };
        assert!(load_of(&idle) < load_of(&busy));
    }
}
