//! A workflow's graph drawn as SVG by the server: a layered layout (Sugiyama's scheme, kept
//! small) that stays readable at 50 nodes and still finishes at 2,000. Nodes flow left to right
//! in columns by their longest path from an entry node; an edge that skips columns bends through
//! placeholder points so it never crosses a node; the order inside a column follows the
//! neighbours' mean position (barycenter sweeps), which removes most crossings. The page colours
//! nodes by status with CSS classes, so a live update only changes classes and links.

use crate::domain::workflow::{Condition, Graph};

const NODE_W: i64 = 156;
const NODE_H: i64 = 42;
/// The height a placeholder point of a long edge takes in its column.
const BEND_H: i64 = 10;
const GAP_X: i64 = 64;
const GAP_Y: i64 = 16;
const MARGIN: i64 = 12;
const SWEEPS: usize = 8;
const KEY_CHARS: usize = 20;
const LABEL_CHARS: usize = 22;

/// What the page knows of one node beside the graph's shape.
#[derive(Debug, Clone, Default)]
pub struct NodeFace {
    /// The job's name (or `#id` when it is gone).
    pub label: String,
    /// A node status (`waiting`, `running`, …), or `none` in a definition without a run.
    pub status: String,
    pub status_label: String,
    /// Where a click goes (the node's latest job run); empty for none yet.
    pub href: String,
}

#[derive(Debug, Clone)]
pub struct DagNode {
    pub key: String,
    pub key_short: String,
    pub label_short: String,
    /// The tooltip: key, job and status in full.
    pub title: String,
    pub status: String,
    pub href: String,
    pub x: i64,
    pub y: i64,
    pub w: i64,
    pub h: i64,
    pub text_x: i64,
    pub key_y: i64,
    pub label_y: i64,
}

#[derive(Debug, Clone)]
pub struct DagEdge {
    /// SVG path data.
    pub d: String,
    /// `success`, `failure` or `always`: the class and the arrow head.
    pub on: &'static str,
    pub from: String,
    pub to: String,
}

/// A laid-out graph, ready for `partials/dag.html`.
#[derive(Debug, Clone)]
pub struct Dag {
    pub width: i64,
    pub height: i64,
    pub nodes: Vec<DagNode>,
    pub edges: Vec<DagEdge>,
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Each node's column: the longest path from an entry node (a validated graph has no cycle).
fn columns(graph: &Graph) -> Vec<usize> {
    let n = graph.len();
    let mut pending: Vec<usize> = (0..n).map(|i| graph.upstream_count(i)).collect();
    let mut column = vec![0usize; n];
    let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    while let Some(i) = ready.pop() {
        for (j, _) in graph.downstream(i) {
            column[j] = column[j].max(column[i] + 1);
            pending[j] -= 1;
            if pending[j] == 0 {
                ready.push(j);
            }
        }
    }
    column
}

/// One point of the layout: a node, or a bend of an edge that spans several columns.
struct Vertex {
    column: usize,
    height: i64,
    up: Vec<usize>,
    down: Vec<usize>,
}

/// Lays out `graph`; `faces[i]` describes node `i` (missing faces draw as plain nodes).
pub fn layout(graph: &Graph, faces: &[NodeFace]) -> Dag {
    let n = graph.len();
    let column = columns(graph);
    let mut vertices: Vec<Vertex> = column
        .iter()
        .map(|&c| Vertex {
            column: c,
            height: NODE_H,
            up: Vec::new(),
            down: Vec::new(),
        })
        .collect();
    // Each edge as the chain of vertices it passes, bends included.
    let mut chains: Vec<(usize, usize, Condition, Vec<usize>)> = Vec::new();
    for i in 0..n {
        for (j, on) in graph.downstream(i) {
            let mut chain = vec![i];
            for c in column[i] + 1..column[j] {
                vertices.push(Vertex {
                    column: c,
                    height: BEND_H,
                    up: Vec::new(),
                    down: Vec::new(),
                });
                chain.push(vertices.len() - 1);
            }
            chain.push(j);
            for pair in chain.windows(2) {
                vertices[pair[0]].down.push(pair[1]);
                vertices[pair[1]].up.push(pair[0]);
            }
            chains.push((i, j, on, chain));
        }
    }
    let width_in_columns = column.iter().max().map_or(1, |c| c + 1);
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); width_in_columns];
    for (v, vertex) in vertices.iter().enumerate() {
        order[vertex.column].push(v);
    }
    let mut position = vec![0usize; vertices.len()];
    let index = |order: &[Vec<usize>], position: &mut [usize]| {
        for col in order {
            for (p, &v) in col.iter().enumerate() {
                position[v] = p;
            }
        }
    };
    index(&order, &mut position);
    for sweep in 0..SWEEPS {
        let downward = sweep % 2 == 0;
        let cols: Vec<usize> = if downward {
            (1..order.len()).collect()
        } else {
            (0..order.len().saturating_sub(1)).rev().collect()
        };
        for c in cols {
            let mut keyed: Vec<(f64, usize)> = order[c]
                .iter()
                .map(|&v| {
                    let near = if downward {
                        &vertices[v].up
                    } else {
                        &vertices[v].down
                    };
                    let key = if near.is_empty() {
                        position[v] as f64
                    } else {
                        near.iter().map(|&u| position[u] as f64).sum::<f64>() / near.len() as f64
                    };
                    (key, v)
                })
                .collect();
            // Stable: equal keys keep their order, so the layout is deterministic.
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            order[c] = keyed.into_iter().map(|(_, v)| v).collect();
            for (p, &v) in order[c].iter().enumerate() {
                position[v] = p;
            }
        }
    }
    let column_height = |col: &Vec<usize>| -> i64 {
        let sum: i64 = col.iter().map(|&v| vertices[v].height).sum();
        sum + GAP_Y * i64::try_from(col.len().saturating_sub(1)).unwrap_or(0)
    };
    let tallest = order.iter().map(column_height).max().unwrap_or(NODE_H);
    // Top edge of each vertex; columns are centred on the tallest.
    let mut top = vec![0i64; vertices.len()];
    for col in &order {
        let mut y = MARGIN + (tallest - column_height(col)) / 2;
        for &v in col {
            top[v] = y;
            y += vertices[v].height + GAP_Y;
        }
    }
    let left = |c: usize| MARGIN + i64::try_from(c).unwrap_or(0) * (NODE_W + GAP_X);
    let middle = |v: usize| top[v] + vertices[v].height / 2;
    let nodes = (0..n)
        .map(|i| {
            let def = graph.node(i);
            let face = faces.get(i).cloned().unwrap_or_default();
            let status = if face.status.is_empty() {
                "none".to_owned()
            } else {
                face.status.clone()
            };
            let x = left(column[i]);
            let y = top[i];
            let mut title = format!("{} · {}", def.key, face.label);
            if !face.status_label.is_empty() {
                title.push_str(" · ");
                title.push_str(&face.status_label);
            }
            DagNode {
                key: def.key.clone(),
                key_short: shorten(&def.key, KEY_CHARS),
                label_short: shorten(&face.label, LABEL_CHARS),
                title,
                status,
                href: face.href,
                x,
                y,
                w: NODE_W,
                h: NODE_H,
                text_x: x + 10,
                key_y: y + 18,
                label_y: y + 34,
            }
        })
        .collect();
    let edges = chains
        .into_iter()
        .map(|(i, j, on, chain)| {
            let mut d = String::new();
            let mut from = (left(column[i]) + NODE_W, middle(i));
            d.push_str(&format!("M{} {}", from.0, from.1));
            for &v in &chain[1..] {
                let c = vertices[v].column;
                let to = (left(c), middle(v));
                let bend = (to.0 - from.0) / 2;
                d.push_str(&format!(
                    " C{} {} {} {} {} {}",
                    from.0 + bend,
                    from.1,
                    to.0 - bend,
                    to.1,
                    to.0,
                    to.1
                ));
                if v >= n {
                    // Through the column of a placeholder, straight across.
                    from = (to.0 + NODE_W, to.1);
                    d.push_str(&format!(" L{} {}", from.0, from.1));
                } else {
                    from = to;
                }
            }
            DagEdge {
                d,
                on: on.as_str(),
                from: graph.node(i).key.clone(),
                to: graph.node(j).key.clone(),
            }
        })
        .collect();
    Dag {
        width: left(width_in_columns.saturating_sub(1)) + NODE_W + MARGIN,
        height: tallest + 2 * MARGIN,
        nodes,
        edges,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::workflow::{Definition, EdgeDef, NodeDef};

    fn graph(keys: &[&str], edges: &[(&str, &str)]) -> Graph {
        Definition {
            nodes: keys
                .iter()
                .enumerate()
                .map(|(i, k)| NodeDef {
                    key: (*k).to_owned(),
                    job_id: i64::try_from(i).unwrap() + 1,
                    params: None,
                    timeout_s: None,
                    join: Default::default(),
                })
                .collect(),
            edges: edges
                .iter()
                .map(|(f, t)| EdgeDef {
                    from: (*f).to_owned(),
                    to: (*t).to_owned(),
                    on: Condition::Success,
                })
                .collect(),
        }
        .validate()
        .unwrap()
    }

    fn node<'a>(dag: &'a Dag, key: &str) -> &'a DagNode {
        dag.nodes.iter().find(|n| n.key == key).unwrap()
    }

    fn no_overlaps(dag: &Dag) {
        for (i, a) in dag.nodes.iter().enumerate() {
            assert!(a.x >= 0 && a.y >= 0, "{} is off the canvas", a.key);
            assert!(
                a.x + a.w <= dag.width && a.y + a.h <= dag.height,
                "{} is off the canvas",
                a.key
            );
            for b in &dag.nodes[i + 1..] {
                let apart =
                    a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y;
                assert!(apart, "{} overlaps {}", a.key, b.key);
            }
        }
    }

    #[test]
    fn a_diamond_has_three_columns_and_edges_from_port_to_port() {
        let g = graph(
            &["a", "b", "c", "d"],
            &[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
        );
        let dag = layout(&g, &[]);
        let (a, b, c, d) = (
            node(&dag, "a"),
            node(&dag, "b"),
            node(&dag, "c"),
            node(&dag, "d"),
        );
        assert!(a.x < b.x && b.x == c.x && c.x < d.x);
        assert_ne!(b.y, c.y);
        no_overlaps(&dag);
        assert_eq!(dag.edges.len(), 4);
        let ab = dag
            .edges
            .iter()
            .find(|e| e.from == "a" && e.to == "b")
            .unwrap();
        assert!(ab.d.starts_with(&format!("M{} {}", a.x + a.w, a.y + a.h / 2)));
        assert!(ab.d.ends_with(&format!("{} {}", b.x, b.y + b.h / 2)));
        assert_eq!(a.status, "none", "a definition without a run");
    }

    #[test]
    fn a_long_edge_bends_around_the_nodes_between() {
        // a → b → c → d and a → d: the long edge passes the columns of b and c beside them.
        let g = graph(
            &["a", "b", "c", "d"],
            &[("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")],
        );
        let dag = layout(&g, &[]);
        no_overlaps(&dag);
        let long = dag
            .edges
            .iter()
            .find(|e| e.from == "a" && e.to == "d")
            .unwrap();
        assert_eq!(long.d.matches(" L").count(), 2, "{}", long.d);
        let d = node(&dag, "d");
        assert_eq!(d.x, node(&dag, "a").x + 3 * (NODE_W + GAP_X));
    }

    #[test]
    fn barycenter_sweeps_untangle_crossed_pairs() {
        // Drawn in definition order, a1→b2 and a2→b1 would cross; the sweeps put b2 by a1.
        let g = graph(&["a1", "a2", "b1", "b2"], &[("a1", "b2"), ("a2", "b1")]);
        let dag = layout(&g, &[]);
        assert!(node(&dag, "b2").y < node(&dag, "b1").y);
    }

    #[test]
    fn fifty_nodes_stay_readable_and_two_thousand_finish() {
        // Ten stages of five, each node fed by two of the stage before.
        let keys: Vec<String> = (0..50).map(|i| format!("step-{i}")).collect();
        let mut edges = Vec::new();
        for i in 5..50 {
            edges.push((keys[i - 5].clone(), keys[i].clone()));
            edges.push((keys[(i / 5 - 1) * 5 + (i + 1) % 5].clone(), keys[i].clone()));
        }
        edges.sort();
        edges.dedup();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let pairs: Vec<(&str, &str)> = edges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let dag = layout(&graph(&refs, &pairs), &[]);
        no_overlaps(&dag);
        assert_eq!(dag.nodes.len(), 50);
        // Ten columns of five: about 2,200 × 330 pixels, not one long row or column.
        assert_eq!(dag.width, MARGIN + 10 * NODE_W + 9 * GAP_X + MARGIN);
        assert!(
            dag.height <= 5 * (NODE_H + GAP_Y) + 2 * MARGIN,
            "{}",
            dag.height
        );

        let keys: Vec<String> = (0..2000).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut pairs: Vec<(&str, &str)> = (1..1999).map(|i| (refs[0], refs[i])).collect();
        pairs.extend((1..1999).map(|i| (refs[i], refs[1999])));
        let wide = layout(&graph(&refs, &pairs), &[]);
        assert_eq!(wide.nodes.len(), 2000);
        assert_eq!(wide.edges.len(), 3996);
    }

    #[test]
    fn faces_give_status_links_and_shortened_labels() {
        let g = graph(
            &["a-very-long-node-key-indeed", "b"],
            &[("a-very-long-node-key-indeed", "b")],
        );
        let faces = vec![
            NodeFace {
                label: "a job with a name far too long to fit".into(),
                status: "succeeded".into(),
                status_label: "Succeeded".into(),
                href: "/console/runs/7".into(),
            },
            NodeFace::default(),
        ];
        let dag = layout(&g, &faces);
        let a = &dag.nodes[0];
        assert_eq!(a.status, "succeeded");
        assert_eq!(a.href, "/console/runs/7");
        assert_eq!(a.key_short.chars().count(), KEY_CHARS);
        assert!(a.key_short.ends_with('…'));
        assert!(a.title.contains("a job with a name far too long to fit"));
        assert_eq!(dag.nodes[1].status, "none");
    }
}
