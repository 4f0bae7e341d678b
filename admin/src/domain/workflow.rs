//! Workflows as data: the definition (nodes that run jobs, edges with conditions, joins), its
//! validation into a [`Graph`], and the rules that decide when a node starts or is skipped. Pure:
//! the engine (`lifecycle::workflow`) applies these rules inside the transactions that end runs.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::job::{MAX_PARAMS_BYTES, MAX_TIMEOUT_S, check_text};
use super::string_enum;
use crate::error::Error;

pub const MAX_NODES: usize = 2_000;
pub const MAX_EDGES: usize = 10_000;
pub const MAX_KEY_CHARS: usize = 64;
/// Bytes of outputs one node may publish (after parsing); more is cut, and the node's log says so.
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;

string_enum! {
    /// When an edge lets its downstream node run, by the upstream node's outcome.
    pub enum Condition {
        Success => "success",
        Failure => "failure",
        Always => "always",
    }
}

#[allow(
    clippy::derivable_impls,
    reason = "string_enum! takes no attributes on variants"
)]
impl Default for Condition {
    fn default() -> Self {
        Self::Success
    }
}

string_enum! {
    /// How a node with several upstream edges waits for them.
    pub enum Join {
        AllSuccess => "all_success",
        AllDone => "all_done",
        OneSuccess => "one_success",
    }
}

#[allow(
    clippy::derivable_impls,
    reason = "string_enum! takes no attributes on variants"
)]
impl Default for Join {
    fn default() -> Self {
        Self::AllSuccess
    }
}

string_enum! {
    /// A node of a workflow run. `ready`: it would start, but the run is paused.
    pub enum NodeStatus {
        Waiting => "waiting",
        Ready => "ready",
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        Skipped => "skipped",
        Cancelled => "cancelled",
    }
}

impl NodeStatus {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Skipped | Self::Cancelled
        )
    }
}

string_enum! {
    pub enum WorkflowStatus {
        Running => "running",
        Paused => "paused",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
        TimedOut => "timed_out",
    }
}

impl WorkflowStatus {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Cancelled | Self::TimedOut
        )
    }
}

/// A node: the job it runs, with optional per-node params and timeout that override the job's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeDef {
    pub key: String,
    pub job_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<i64>,
    #[serde(default)]
    pub join: Join,
}

/// `from → to`, taken when `from` ends as `on` says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeDef {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub on: Condition,
}

/// What a workflow runs; stored as JSON with the workflow and copied into each of its runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    pub nodes: Vec<NodeDef>,
    #[serde(default)]
    pub edges: Vec<EdgeDef>,
}

/// A validated definition with its adjacency: node indexes in definition order.
#[derive(Debug, Clone)]
pub struct Graph {
    pub definition: Definition,
    index: HashMap<String, usize>,
    /// Per node, the indexes of its incoming edges.
    incoming: Vec<Vec<usize>>,
    /// Per node, the indexes of its outgoing edges.
    outgoing: Vec<Vec<usize>>,
}

impl Definition {
    /// Checks the definition and builds its graph. Errors name the field: `nodes[2].key`,
    /// `edges[0].to`, `edges` for a cycle (which the message spells out).
    ///
    /// # Errors
    /// `invalid_field` for the first problem found.
    pub fn validate(self) -> Result<Graph, Error> {
        if self.nodes.is_empty() {
            return Err(Error::invalid(
                "nodes",
                "a workflow needs at least one node",
            ));
        }
        if self.nodes.len() > MAX_NODES {
            return Err(Error::invalid(
                "nodes",
                format!("at most {MAX_NODES} nodes"),
            ));
        }
        if self.edges.len() > MAX_EDGES {
            return Err(Error::invalid(
                "edges",
                format!("at most {MAX_EDGES} edges"),
            ));
        }
        let mut index = HashMap::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            check_key(&format!("nodes[{i}].key"), &node.key)?;
            if index.insert(node.key.clone(), i).is_some() {
                return Err(Error::invalid(
                    format!("nodes[{i}].key"),
                    format!("duplicate node key `{}`", node.key),
                ));
            }
            if node.job_id <= 0 {
                return Err(Error::invalid(
                    format!("nodes[{i}].job_id"),
                    "must be a job id",
                ));
            }
            if let Some(params) = &node.params {
                check_text(&format!("nodes[{i}].params"), params, MAX_PARAMS_BYTES)?;
            }
            if let Some(timeout) = node.timeout_s
                && !(0..=MAX_TIMEOUT_S).contains(&timeout)
            {
                return Err(Error::invalid(
                    format!("nodes[{i}].timeout_s"),
                    format!("must be between 0 and {MAX_TIMEOUT_S} (got {timeout})"),
                ));
            }
        }
        let mut incoming = vec![Vec::new(); self.nodes.len()];
        let mut outgoing = vec![Vec::new(); self.nodes.len()];
        let mut seen = HashMap::with_capacity(self.edges.len());
        for (e, edge) in self.edges.iter().enumerate() {
            let from = *index.get(&edge.from).ok_or_else(|| {
                Error::invalid(
                    format!("edges[{e}].from"),
                    format!("no node has the key `{}`", edge.from),
                )
            })?;
            let to = *index.get(&edge.to).ok_or_else(|| {
                Error::invalid(
                    format!("edges[{e}].to"),
                    format!("no node has the key `{}`", edge.to),
                )
            })?;
            if from == to {
                return Err(Error::invalid(
                    format!("edges[{e}]"),
                    format!("cycle: {0} → {0}", edge.from),
                ));
            }
            if let Some(first) = seen.insert((from, to), e) {
                return Err(Error::invalid(
                    format!("edges[{e}]"),
                    format!(
                        "duplicate edge {} → {} (also edges[{first}])",
                        edge.from, edge.to
                    ),
                ));
            }
            outgoing[from].push(e);
            incoming[to].push(e);
        }
        let graph = Graph {
            definition: self,
            index,
            incoming,
            outgoing,
        };
        if let Some(cycle) = graph.find_cycle() {
            return Err(Error::invalid(
                "edges",
                format!("cycle: {}", cycle.join(" → ")),
            ));
        }
        Ok(graph)
    }
}

fn check_key(field: &str, key: &str) -> Result<(), Error> {
    if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
        return Err(Error::invalid(
            field,
            format!("must be 1 to {MAX_KEY_CHARS} characters"),
        ));
    }
    if let Some(bad) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_-.".contains(*c)))
    {
        return Err(Error::invalid(
            field,
            format!("`{bad}` is not allowed: use letters, digits, `_`, `-` and `.`"),
        ));
    }
    Ok(())
}

impl Graph {
    pub fn len(&self) -> usize {
        self.definition.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.definition.nodes.is_empty()
    }

    pub fn node(&self, i: usize) -> &NodeDef {
        &self.definition.nodes[i]
    }

    pub fn position(&self, key: &str) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// Upstream edges of node `i`: (upstream node, condition).
    pub fn upstream(&self, i: usize) -> impl Iterator<Item = (usize, Condition)> + '_ {
        self.incoming[i].iter().map(|&e| {
            let edge = &self.definition.edges[e];
            (self.index[&edge.from], edge.on)
        })
    }

    /// Downstream edges of node `i`: (downstream node, condition).
    pub fn downstream(&self, i: usize) -> impl Iterator<Item = (usize, Condition)> + '_ {
        self.outgoing[i].iter().map(|&e| {
            let edge = &self.definition.edges[e];
            (self.index[&edge.to], edge.on)
        })
    }

    pub fn upstream_count(&self, i: usize) -> usize {
        self.incoming[i].len()
    }

    /// A failure of node `i` is handled when an edge leaves it on failure (or always): the
    /// workflow planned for it, and it does not fail the run by itself.
    pub fn handles_failure(&self, i: usize) -> bool {
        self.downstream(i)
            .any(|(_, on)| matches!(on, Condition::Failure | Condition::Always))
    }

    /// Node `i` and everything downstream of it, in definition order.
    pub fn descendants(&self, roots: &[usize]) -> Vec<usize> {
        let mut marked = vec![false; self.len()];
        let mut stack: Vec<usize> = roots.to_vec();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut marked[i], true) {
                continue;
            }
            stack.extend(self.downstream(i).map(|(d, _)| d));
        }
        (0..self.len()).filter(|&i| marked[i]).collect()
    }

    /// A cycle as node keys, first repeated at the end, if there is one.
    fn find_cycle(&self) -> Option<Vec<String>> {
        // Iterative depth-first search with colours: 0 new, 1 on the path, 2 done.
        let mut colour = vec![0u8; self.len()];
        let mut parent = vec![usize::MAX; self.len()];
        for start in 0..self.len() {
            if colour[start] != 0 {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            colour[start] = 1;
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                if let Some(&e) = self.outgoing[node].get(*next) {
                    *next += 1;
                    let to = self.index[&self.definition.edges[e].to];
                    match colour[to] {
                        0 => {
                            colour[to] = 1;
                            parent[to] = node;
                            stack.push((to, 0));
                        }
                        1 => {
                            let mut path = vec![to];
                            let mut at = node;
                            while at != to {
                                path.push(at);
                                at = parent[at];
                            }
                            path.push(to);
                            path.reverse();
                            return Some(
                                path.into_iter().map(|i| self.node(i).key.clone()).collect(),
                            );
                        }
                        _ => {}
                    }
                } else {
                    colour[node] = 2;
                    stack.pop();
                }
            }
        }
        None
    }
}

/// Whether an edge lets its downstream node run, given how its upstream node ended.
pub fn edge_met(on: Condition, upstream: NodeStatus) -> bool {
    match on {
        Condition::Success => upstream == NodeStatus::Succeeded,
        Condition::Failure => upstream == NodeStatus::Failed,
        Condition::Always => matches!(upstream, NodeStatus::Succeeded | NodeStatus::Failed),
    }
}

/// What a node does next, from its join and the counts of its upstream edges: `resolved` (the
/// upstream node ended) and `met` (ended as the edge asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Wait,
    Start,
    /// Its condition can no longer be met.
    Skip,
}

pub fn readiness(join: Join, total: i32, resolved: i32, met: i32) -> Readiness {
    if total == 0 {
        return Readiness::Start;
    }
    match join {
        Join::AllSuccess if met == total => Readiness::Start,
        Join::AllSuccess if resolved > met => Readiness::Skip,
        Join::OneSuccess if met > 0 => Readiness::Start,
        Join::OneSuccess if resolved == total => Readiness::Skip,
        // Airflow's all_done: every upstream ended, whatever the outcome or the edge.
        Join::AllDone if resolved == total => Readiness::Start,
        _ => Readiness::Wait,
    }
}

/// Parses what a run published on its output channel: `KEY=value` lines, keys of letters,
/// digits and `_` (not starting with a digit), at most [`MAX_OUTPUT_BYTES`] in all; other
/// lines are ignored. Later lines win.
pub fn parse_outputs(text: &str) -> BTreeMap<String, String> {
    let mut outputs = BTreeMap::new();
    let mut size = 0;
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let valid = !key.is_empty()
            && key.len() <= MAX_KEY_CHARS
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid || value.contains('\0') {
            continue;
        }
        size += key.len() + value.len();
        if size > MAX_OUTPUT_BYTES {
            break;
        }
        outputs.insert(key.to_owned(), value.to_owned());
    }
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(nodes: &[&str], edges: &[(&str, &str, Condition)]) -> Definition {
        Definition {
            nodes: nodes
                .iter()
                .map(|k| NodeDef {
                    key: (*k).into(),
                    job_id: 1,
                    params: None,
                    timeout_s: None,
                    join: Join::AllSuccess,
                })
                .collect(),
            edges: edges
                .iter()
                .map(|(f, t, on)| EdgeDef {
                    from: (*f).into(),
                    to: (*t).into(),
                    on: *on,
                })
                .collect(),
        }
    }

    fn field(e: Error) -> (String, String) {
        match e {
            Error::Invalid { field, message, .. } => (field.unwrap_or_default(), message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_diamond_is_valid() {
        use Condition::Success as S;
        let g = def(
            &["a", "b", "c", "d"],
            &[("a", "b", S), ("a", "c", S), ("b", "d", S), ("c", "d", S)],
        )
        .validate()
        .unwrap();
        assert_eq!(g.upstream_count(3), 2);
        assert_eq!(g.descendants(&[1]), vec![1, 3]);
        assert!(!g.handles_failure(0));
    }

    #[test]
    fn bad_definitions_name_the_field() {
        use Condition::Success as S;
        let cases = [
            (def(&[], &[]), "nodes", "at least one"),
            (def(&["a", "a"], &[]), "nodes[1].key", "duplicate"),
            (def(&["a b"], &[]), "nodes[0].key", "not allowed"),
            (def(&["a"], &[("a", "x", S)]), "edges[0].to", "`x`"),
            (def(&["a"], &[("y", "a", S)]), "edges[0].from", "`y`"),
            (def(&["a"], &[("a", "a", S)]), "edges[0]", "cycle: a → a"),
            (
                def(&["a", "b"], &[("a", "b", S), ("a", "b", S)]),
                "edges[1]",
                "duplicate edge",
            ),
            (
                def(
                    &["a", "b", "c", "d"],
                    &[("a", "b", S), ("b", "c", S), ("c", "d", S), ("d", "b", S)],
                ),
                "edges",
                "cycle: b → c → d → b",
            ),
        ];
        for (definition, want_field, want_message) in cases {
            let (got_field, message) = field(definition.validate().unwrap_err());
            assert_eq!(got_field, want_field, "{message}");
            assert!(message.contains(want_message), "{message}");
        }
        let mut d = def(&["a"], &[]);
        d.nodes[0].timeout_s = Some(-1);
        assert_eq!(field(d.validate().unwrap_err()).0, "nodes[0].timeout_s");
        let mut d = def(&["a"], &[]);
        d.nodes[0].job_id = 0;
        assert_eq!(field(d.validate().unwrap_err()).0, "nodes[0].job_id");
    }

    #[test]
    fn joins_start_wait_and_skip() {
        use Readiness::*;
        assert_eq!(
            readiness(Join::OneSuccess, 0, 0, 0),
            Start,
            "entry nodes start"
        );
        assert_eq!(readiness(Join::AllSuccess, 2, 1, 1), Wait);
        assert_eq!(readiness(Join::AllSuccess, 2, 2, 2), Start);
        assert_eq!(
            readiness(Join::AllSuccess, 2, 1, 0),
            Skip,
            "one unmet is enough"
        );
        assert_eq!(
            readiness(Join::OneSuccess, 3, 1, 1),
            Start,
            "the first met starts it"
        );
        assert_eq!(readiness(Join::OneSuccess, 3, 2, 0), Wait);
        assert_eq!(readiness(Join::OneSuccess, 3, 3, 0), Skip);
        assert_eq!(readiness(Join::AllDone, 2, 1, 0), Wait);
        assert_eq!(
            readiness(Join::AllDone, 2, 2, 0),
            Start,
            "whatever the outcome"
        );
        assert!(edge_met(Condition::Always, NodeStatus::Failed));
        assert!(!edge_met(Condition::Always, NodeStatus::Skipped));
        assert!(edge_met(Condition::Failure, NodeStatus::Failed));
        assert!(!edge_met(Condition::Success, NodeStatus::Failed));
    }

    #[test]
    fn outputs_are_key_value_lines_bounded() {
        let parsed = parse_outputs("a=1\nnot a pair\n9x=no\nb = two=2\n_c=\nbad key=x\na=3\n");
        assert_eq!(
            parsed,
            BTreeMap::from([
                ("_c".to_owned(), String::new()),
                ("a".to_owned(), "3".to_owned()),
                ("b".to_owned(), " two=2".to_owned()),
            ])
        );
        let big = "k=".to_owned() + &"x".repeat(MAX_OUTPUT_BYTES) + "\nsmall=1\n";
        assert!(
            parse_outputs(&big).is_empty(),
            "past the cap nothing more is taken"
        );
    }
}
