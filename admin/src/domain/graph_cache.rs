//! The validated graphs of workflow runs in progress, kept between their steps. A run's
//! definition is frozen when it starts, so its graph can be built once per admin instead of
//! being parsed and validated again at every node end (which made a run's engine work grow with
//! the square of its nodes: BENCHMARKS.md, "Workflows").
//!
//! Bounded by the nodes it holds, not by runs: one 2,000-node run weighs as much as 200 small
//! ones. The least recently used graphs go first; a graph dropped is only parsed again.
//!
//! An entry also holds its run's workflow and creation time, checked on every read: an id that
//! came back for another run (SQLite gives a rolled-back insert's id out again) misses instead
//! of answering with a stranger's graph.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::ids::{WorkflowId, WorkflowRunId};
use super::workflow::Graph;

/// Nodes held at most, over all graphs (a node costs a few hundred bytes with its edges).
const MAX_NODES_HELD: usize = 200_000;

#[derive(Debug)]
pub struct GraphCache {
    inner: Mutex<Inner>,
    max_nodes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    graphs: HashMap<WorkflowRunId, Entry>,
    nodes: usize,
    uses: u64,
}

/// Which run an entry was made for: its workflow and creation time.
pub type Stamp = (WorkflowId, i64);

#[derive(Debug)]
struct Entry {
    stamp: Stamp,
    graph: Arc<Graph>,
    last_used: u64,
}

impl Default for GraphCache {
    fn default() -> Self {
        Self::with_capacity(MAX_NODES_HELD)
    }
}

impl GraphCache {
    pub fn with_capacity(max_nodes: usize) -> Self {
        Self {
            inner: Mutex::default(),
            max_nodes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, run: WorkflowRunId, stamp: Stamp) -> Option<Arc<Graph>> {
        let mut inner = self.lock();
        inner.uses += 1;
        let now = inner.uses;
        let entry = inner.graphs.get_mut(&run).filter(|e| e.stamp == stamp)?;
        entry.last_used = now;
        Some(entry.graph.clone())
    }

    /// Keeps `graph` for `run`, dropping the least recently used graphs while over the bound.
    /// A graph larger than the whole bound is not kept.
    pub fn insert(&self, run: WorkflowRunId, stamp: Stamp, graph: Arc<Graph>) {
        let size = graph.len();
        if size > self.max_nodes {
            return;
        }
        let mut inner = self.lock();
        inner.uses += 1;
        let now = inner.uses;
        let replaced = inner.graphs.insert(
            run,
            Entry {
                stamp,
                graph,
                last_used: now,
            },
        );
        inner.nodes = inner.nodes + size - replaced.map_or(0, |e| e.graph.len());
        while inner.nodes > self.max_nodes {
            let Some(oldest) = inner
                .graphs
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(id, _)| *id)
            else {
                break;
            };
            if let Some(gone) = inner.graphs.remove(&oldest) {
                inner.nodes -= gone.graph.len();
            }
        }
    }

    /// A run that ended needs its graph only if it is re-run, which parses it again.
    pub fn forget(&self, run: WorkflowRunId) {
        let mut inner = self.lock();
        if let Some(gone) = inner.graphs.remove(&run) {
            inner.nodes -= gone.graph.len();
        }
    }

    pub fn len(&self) -> usize {
        self.lock().graphs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::workflow::Definition;

    fn graph(nodes: usize) -> Arc<Graph> {
        let definition: Definition = serde_json::from_value(serde_json::json!({
            "nodes": (0..nodes).map(|i| serde_json::json!({"key": format!("n{i}"), "job_id": 1})).collect::<Vec<_>>(),
            "edges": [],
        }))
        .unwrap();
        Arc::new(definition.validate().unwrap())
    }

    const STAMP: Stamp = (WorkflowId(7), 1_000);

    #[test]
    fn an_entry_answers_only_for_the_run_it_was_made_for() {
        let cache = GraphCache::default();
        cache.insert(WorkflowRunId(1), STAMP, graph(2));
        assert!(cache.get(WorkflowRunId(1), STAMP).is_some());
        assert!(
            cache
                .get(WorkflowRunId(1), (WorkflowId(8), 1_000))
                .is_none()
        );
        assert!(
            cache
                .get(WorkflowRunId(1), (WorkflowId(7), 1_001))
                .is_none()
        );
    }

    #[test]
    fn the_least_recently_used_graphs_go_first_when_over_the_node_bound() {
        let cache = GraphCache::with_capacity(10);
        cache.insert(WorkflowRunId(1), STAMP, graph(4));
        cache.insert(WorkflowRunId(2), STAMP, graph(4));
        assert!(cache.get(WorkflowRunId(1), STAMP).is_some());
        cache.insert(WorkflowRunId(3), STAMP, graph(4));
        assert!(
            cache.get(WorkflowRunId(2), STAMP).is_none(),
            "2 was used least recently"
        );
        assert!(cache.get(WorkflowRunId(1), STAMP).is_some());
        assert!(cache.get(WorkflowRunId(3), STAMP).is_some());
        cache.insert(WorkflowRunId(4), STAMP, graph(11));
        assert!(
            cache.get(WorkflowRunId(4), STAMP).is_none(),
            "larger than the bound"
        );
        cache.forget(WorkflowRunId(1));
        assert_eq!(cache.len(), 1);
        cache.insert(WorkflowRunId(5), STAMP, graph(6));
        assert_eq!(cache.len(), 2, "4 + 6 nodes fit in 10");
    }
}
