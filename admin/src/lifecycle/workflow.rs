//! The workflow engine: starting a workflow run, and advancing it when one of its nodes' job
//! runs becomes final, in the transaction that makes it final (so a step is taken exactly when
//! the run's end is stored, by whichever admin stores it). Operations (pause, resume, cancel,
//! re-run from failure, mark) also live here, each in the caller's transaction.
//!
//! Every entry point first locks the workflow run's row, then reads the node rows it touches
//! with locking reads: two admins ending two upstream nodes of one join at once take turns, and
//! the second sees the first's counts. The run's graph is parsed once per admin and kept
//! (`domain::graph_cache`): its definition is frozen when the run starts. A node starts only through the conditional `waiting → running` update, and
//! its job run has a unique `(node, node attempt, attempt)`, so no node starts twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::db::AnyConnection;
use crate::db::job;
use crate::db::job_run::{self, JobRun, NewJobRun};
use crate::db::workflow::Workflow;
use crate::db::workflow_node::{self, NewWorkflowNode, WorkflowNode};
use crate::db::workflow_run::{self, NewWorkflowRun, WorkflowRun};
use crate::domain::ids::{RunId, WorkflowRunId};
use crate::domain::policy::{Concurrency, RunStatus, TriggerKind};
use crate::domain::workflow::{
    Definition, Graph, NodeStatus, Readiness, WorkflowStatus, edge_met, parse_outputs, readiness,
};
use crate::error::Error;
use crate::scheduler::handle::Due;

use super::Changes;

/// A workflow run being changed in this transaction: its row (locked, without the
/// definition), its graph (kept between steps), and the node rows read so far. A step reads
/// only the rows it touches (the ended node, its downstream nodes, a starting node's upstream
/// outputs), so a node's end costs the same in a 2,000-node run as in a 3-node one; the run
/// row's lock is what serialises the steps of one run, not the node reads.
struct Ctx {
    run: WorkflowRun,
    graph: Arc<Graph>,
    /// By graph index.
    nodes: HashMap<usize, WorkflowNode>,
}

enum Step {
    Start(usize),
    Finish(usize, NodeStatus, String),
}

impl Ctx {
    fn load(conn: &mut AnyConnection, changes: &Changes, id: WorkflowRunId) -> Result<Self, Error> {
        let run = workflow_run::lock_head(conn, id)?;
        let stamp = (run.workflow_id, run.created_ms);
        let graph = match changes.graphs.get(id, stamp) {
            Some(graph) => graph,
            None => {
                let graph = Arc::new(graph_of(id, &workflow_run::definition_of(conn, id)?)?);
                // An ended run's graph serves a late result or a refused operation once; only
                // a run in progress will need it again.
                if !run.status.is_final() {
                    changes.graphs.insert(id, stamp, graph.clone());
                }
                graph
            }
        };
        Ok(Self {
            run,
            graph,
            nodes: HashMap::new(),
        })
    }

    /// With every node row (the operations that look at all of them: resume, cancel, re-run).
    fn load_all(
        conn: &mut AnyConnection,
        changes: &Changes,
        id: WorkflowRunId,
    ) -> Result<Self, Error> {
        let mut ctx = Self::load(conn, changes, id)?;
        let rows = workflow_node::of_run_now(conn, id)?;
        if rows.len() != ctx.graph.len() {
            return Err(Error::Internal(anyhow::anyhow!(
                "workflow run {id} has {} node rows for {} nodes",
                rows.len(),
                ctx.graph.len()
            )));
        }
        for row in rows {
            ctx.keep(row)?;
        }
        Ok(ctx)
    }

    fn keep(&mut self, row: WorkflowNode) -> Result<usize, Error> {
        let i = self.graph.position(&row.node_key).ok_or_else(|| {
            Error::Internal(anyhow::anyhow!(
                "workflow run {} has a node row `{}` its definition lacks",
                self.run.id,
                row.node_key
            ))
        })?;
        self.nodes.insert(i, row);
        Ok(i)
    }

    /// Reads the rows of `wanted` not read yet, in one query.
    fn read(&mut self, conn: &mut AnyConnection, wanted: &[usize]) -> Result<(), Error> {
        let keys: Vec<&str> = wanted
            .iter()
            .filter(|i| !self.nodes.contains_key(i))
            .map(|&i| self.graph.node(i).key.as_str())
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let rows = workflow_node::by_keys_now(conn, self.run.id, &keys)?;
        for row in rows {
            self.keep(row)?;
        }
        match wanted.iter().find(|i| !self.nodes.contains_key(i)) {
            Some(&i) => Err(Error::Internal(anyhow::anyhow!(
                "workflow run {} has no row for node `{}`",
                self.run.id,
                self.graph.node(i).key
            ))),
            None => Ok(()),
        }
    }

    fn node(&mut self, conn: &mut AnyConnection, i: usize) -> Result<&mut WorkflowNode, Error> {
        self.read(conn, &[i])?;
        self.nodes
            .get_mut(&i)
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("node {i} not read")))
    }

    /// A row `load_all` read.
    fn loaded(&self, i: usize) -> Result<&WorkflowNode, Error> {
        self.nodes
            .get(&i)
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("node {i} not read")))
    }

    /// A row read earlier that a nested change (ending a node's run) may have moved on.
    fn forget(&mut self, i: usize) {
        self.nodes.remove(&i);
    }

    /// Every node row, for the operations that read them all; they were all read by
    /// `load_all`.
    fn all(&self) -> impl Iterator<Item = (usize, &WorkflowNode)> {
        (0..self.graph.len()).filter_map(|i| self.nodes.get(&i).map(|n| (i, n)))
    }
}

fn graph_of(id: WorkflowRunId, definition: &str) -> Result<Graph, Error> {
    serde_json::from_str::<Definition>(definition)
        .map_err(|e| anyhow::anyhow!("workflow run {id}: stored definition: {e}"))
        .and_then(|d| {
            d.validate()
                .map_err(|e| anyhow::anyhow!("workflow run {id}: stored definition: {e}"))
        })
        .map_err(Error::Internal)
}

/// What a workflow's concurrency policy makes of a new run.
#[derive(Debug)]
pub enum Room {
    /// Start it. Under `replace`, the runs in progress were cancelled in this transaction, and
    /// these job runs must be killed on their agents after the commit.
    Free(Vec<JobRun>),
    /// Under `forbid`, this run is still in progress: the new one must not start.
    Busy(WorkflowRun),
}

/// Applies `workflow`'s concurrency policy (across its runs) before a new run, for a trigger
/// and a scheduled fire alike.
///
/// # Errors
/// Database errors.
pub fn make_room(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    workflow: &Workflow,
) -> Result<Room, Error> {
    let in_flight = workflow_run::in_flight(conn, workflow.id)?;
    let mut killed = Vec::new();
    match workflow.concurrency {
        Concurrency::Allow => {}
        Concurrency::Forbid => {
            if let Some(other) = in_flight.into_iter().next() {
                return Ok(Room::Busy(other));
            }
        }
        Concurrency::Replace => {
            for other in in_flight {
                killed.extend(cancel(
                    conn,
                    changes,
                    other.id,
                    WorkflowStatus::Cancelled,
                    "replaced by a new run (concurrency policy replace)",
                )?);
            }
        }
    }
    Ok(Room::Free(killed))
}

/// Creates a run of `workflow` (whose definition validated into `graph`) and starts its entry
/// nodes. The caller checked the caller's rights and applied `make_room`. A scheduled fire
/// passes its slot: a second run for the same slot is refused (`Conflict`) by the unique key.
///
/// # Errors
/// Database errors; `Conflict` when `fire_slot_ms` already has its run.
pub fn start(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    workflow: &Workflow,
    graph: &Graph,
    params: String,
    kind: TriggerKind,
    fire_slot_ms: Option<i64>,
) -> Result<WorkflowRunId, Error> {
    let now = changes.now_ms;
    let definition = serde_json::to_string(&graph.definition)
        .map_err(|e| Error::Internal(anyhow::anyhow!("encoding a definition: {e}")))?;
    let id = workflow_run::insert(
        conn,
        &NewWorkflowRun {
            workflow_id: workflow.id,
            group_id: workflow.group_id,
            status: WorkflowStatus::Running,
            definition,
            params,
            trigger_kind: kind,
            open_nodes: i32::try_from(graph.len()).unwrap_or(i32::MAX),
            deadline_ms: (workflow.timeout_s > 0).then(|| now + workflow.timeout_s * 1000),
            message: String::new(),
            created_ms: now,
            started_ms: now,
            fire_slot_ms,
        },
    )?;
    let rows: Vec<NewWorkflowNode> = (0..graph.len())
        .map(|i| NewWorkflowNode {
            workflow_run_id: id,
            node_key: graph.node(i).key.clone(),
            job_id: crate::domain::ids::JobId(graph.node(i).job_id),
            status: NodeStatus::Waiting,
            upstream_total: i32::try_from(graph.upstream_count(i)).unwrap_or(i32::MAX),
            outputs: String::new(),
            message: String::new(),
        })
        .collect();
    workflow_node::insert_all(conn, &rows)?;
    // Plain reads: these rows are this transaction's own and no one else sees them before the
    // commit. A locking read here (as `Ctx::load` does) would take MySQL's next-key locks on the
    // node index past the newest run, where every concurrent start inserts its nodes: a burst of
    // triggers then queued behind each other until the lock wait timeout (tested:
    // `workflows::many_workflows_triggered_at_once_all_run`).
    let mut ctx = Ctx {
        run: workflow_run::get(conn, id)?,
        graph: Arc::new(graph.clone()),
        nodes: HashMap::new(),
    };
    // Not cached here: this transaction may still roll back, and SQLite would then give the
    // id out again. The run's first step caches the graph it reads back, committed.
    for row in workflow_node::of_run(conn, id)? {
        ctx.keep(row)?;
    }
    let entries = (0..graph.len())
        .filter(|&i| graph.upstream_count(i) == 0)
        .map(Step::Start)
        .collect();
    advance(conn, changes, &mut ctx, entries)?;
    Ok(id)
}

/// A job run of a node became final, and no retry follows: the node ends as the run did, and
/// the workflow moves on. Runs of an older node attempt (before a re-run) and shards other
/// than 0 change nothing.
///
/// # Errors
/// Database errors.
pub(super) fn job_run_final(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    run: &JobRun,
) -> Result<(), Error> {
    let Some(node_id) = run.workflow_node_id else {
        return Ok(());
    };
    if run.shard_index != 0 {
        return Ok(());
    }
    let Some(node) = workflow_node::find(conn, node_id)? else {
        return Ok(());
    };
    let mut ctx = Ctx::load(conn, changes, node.workflow_run_id)?;
    let Some(i) = ctx.graph.position(&node.node_key) else {
        return Ok(());
    };
    let current = ctx.node(conn, i)?;
    if Some(current.attempt) != run.node_attempt || current.status != NodeStatus::Running {
        return Ok(());
    }
    if let Some(text) = &run.outputs {
        let outputs = parse_outputs(text);
        let json = serde_json::to_string(&outputs)
            .map_err(|e| Error::Internal(anyhow::anyhow!("encoding outputs: {e}")))?;
        workflow_node::set_outputs(conn, node_id, &json)?;
        ctx.node(conn, i)?.outputs = json;
    }
    let (status, message) = match run.status {
        RunStatus::Succeeded => (NodeStatus::Succeeded, String::new()),
        RunStatus::Killed if ctx.run.status == WorkflowStatus::Cancelled => (
            NodeStatus::Cancelled,
            format!("run {} killed: the workflow run was cancelled", run.id),
        ),
        RunStatus::Killed if ctx.run.status == WorkflowStatus::TimedOut => (
            NodeStatus::Cancelled,
            format!("run {} killed: the workflow run timed out", run.id),
        ),
        other => (NodeStatus::Failed, format!("run {} ended {other}", run.id)),
    };
    advance(
        conn,
        changes,
        &mut ctx,
        vec![Step::Finish(i, status, message)],
    )
}

/// A node's job run that ended unsent (the job's own concurrency policy, a deleted job): the
/// node fails with the reason, and the workflow moves on.
///
/// # Errors
/// Database errors.
pub(super) fn job_run_skipped(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    run_id: RunId,
) -> Result<(), Error> {
    let run = job_run::get(conn, run_id)?;
    if run.workflow_node_id.is_none() {
        return Ok(());
    }
    job_run_final(
        conn,
        changes,
        &JobRun {
            status: RunStatus::Failed,
            ..run
        },
    )
}

/// Takes the steps and every step they lead to: a finished node counts toward each downstream
/// node, which then starts, is skipped, or waits; the last node to close ends the run.
fn advance(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    ctx: &mut Ctx,
    mut steps: Vec<Step>,
) -> Result<(), Error> {
    let now = changes.now_ms;
    while let Some(step) = steps.pop() {
        match step {
            Step::Start(i) => {
                if let Some(failure) = start_node(conn, changes, ctx, i)? {
                    steps.push(Step::Finish(i, NodeStatus::Failed, failure));
                }
            }
            Step::Finish(i, status, message) => {
                let node_id = ctx.node(conn, i)?.id;
                let from = [NodeStatus::Waiting, NodeStatus::Ready, NodeStatus::Running];
                if !workflow_node::transition(conn, node_id, &from, status, &message, now)? {
                    continue;
                }
                ctx.node(conn, i)?.status = status;
                let unhandled = status == NodeStatus::Failed && !ctx.graph.handles_failure(i);
                let open = workflow_run::node_closed(conn, &mut ctx.run, unhandled)?;
                let downstream: Vec<_> = ctx.graph.downstream(i).collect();
                for (d, on) in downstream {
                    let key = ctx.graph.node(d).key.clone();
                    let Some(node) = workflow_node::upstream_resolved(
                        conn,
                        ctx.run.id,
                        &key,
                        edge_met(on, status),
                    )?
                    else {
                        continue;
                    };
                    let waiting = node.status == NodeStatus::Waiting;
                    let next = readiness(
                        ctx.graph.node(d).join,
                        node.upstream_total,
                        node.upstream_resolved,
                        node.upstream_met,
                    );
                    ctx.nodes.insert(d, node);
                    if !waiting || ctx.run.status.is_final() {
                        continue;
                    }
                    match next {
                        Readiness::Start => steps.push(Step::Start(d)),
                        Readiness::Skip => steps.push(Step::Finish(
                            d,
                            NodeStatus::Skipped,
                            format!("skipped: the conditions of its upstream edges cannot be met ({} ended {status})", ctx.graph.node(i).key),
                        )),
                        Readiness::Wait => {}
                    }
                }
                if open == 0 {
                    complete(conn, changes, ctx)?;
                }
            }
        }
    }
    Ok(())
}

/// Starts node `i`: its job run is created and handed to the timer. Returns why it could not
/// start (the node then fails), or `None`.
fn start_node(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    ctx: &mut Ctx,
    i: usize,
) -> Result<Option<String>, Error> {
    let now = changes.now_ms;
    let node_id = ctx.node(conn, i)?.id;
    if ctx.run.status == WorkflowStatus::Paused {
        // Started on resume.
        if workflow_node::transition(
            conn,
            node_id,
            &[NodeStatus::Waiting],
            NodeStatus::Ready,
            "ready; the workflow run is paused",
            now,
        )? {
            ctx.node(conn, i)?.status = NodeStatus::Ready;
        }
        return Ok(None);
    }
    if ctx.run.status != WorkflowStatus::Running {
        return Ok(None);
    }
    if !workflow_node::transition(
        conn,
        node_id,
        &[NodeStatus::Waiting, NodeStatus::Ready],
        NodeStatus::Running,
        "",
        now,
    )? {
        return Ok(None);
    }
    ctx.node(conn, i)?.status = NodeStatus::Running;
    let def = ctx.graph.node(i).clone();
    let Some(owner) = job::find(conn, crate::domain::ids::JobId(def.job_id))? else {
        return Ok(Some(format!("job {} no longer exists", def.job_id)));
    };
    if owner.group_id != ctx.run.group_id {
        return Ok(Some(format!(
            "job {} is no longer in the workflow's group",
            def.job_id
        )));
    }
    let env = node_env(conn, ctx, i)?;
    let attempt = ctx.node(conn, i)?.attempt;
    let run_id = job_run::insert(
        conn,
        &NewJobRun {
            job_id: owner.id,
            group_id: owner.group_id,
            first_run_id: None,
            attempt: 1,
            trigger_kind: TriggerKind::Workflow,
            fire_slot_ms: None,
            scheduled_ms: now,
            status: RunStatus::Pending,
            params: def.params.unwrap_or_else(|| owner.params.clone()),
            shard_index: 0,
            shard_total: 1,
            created_ms: now,
            workflow_node_id: Some(node_id),
            node_attempt: Some(attempt),
            timeout_s: def.timeout_s,
            env: Some(
                serde_json::to_string(&env)
                    .map_err(|e| Error::Internal(anyhow::anyhow!("encoding env: {e}")))?,
            ),
        },
    )?;
    changes.dues.push(Due { at_ms: now, run_id });
    Ok(None)
}

/// What a node's process gets besides the job's own environment: the workflow run, the node,
/// the workflow's params, and each upstream node's outputs as `JOBFLEET_IN_<KEY>` (upstream
/// nodes in definition order; a later one wins a shared key).
fn node_env(
    conn: &mut AnyConnection,
    ctx: &mut Ctx,
    i: usize,
) -> Result<BTreeMap<String, String>, Error> {
    let mut env = BTreeMap::new();
    env.insert(
        "JOBFLEET_WORKFLOW_RUN_ID".to_owned(),
        ctx.run.id.to_string(),
    );
    env.insert(
        "JOBFLEET_WORKFLOW_NODE".to_owned(),
        ctx.graph.node(i).key.clone(),
    );
    env.insert(
        "JOBFLEET_WORKFLOW_PARAMS".to_owned(),
        ctx.run.params.clone(),
    );
    let mut upstream: Vec<usize> = ctx.graph.upstream(i).map(|(u, _)| u).collect();
    upstream.sort_unstable();
    ctx.read(conn, &upstream)?;
    for u in upstream {
        let Some(Ok(outputs)) = ctx
            .nodes
            .get(&u)
            .filter(|n| !n.outputs.is_empty())
            .map(|n| serde_json::from_str::<BTreeMap<String, String>>(&n.outputs))
        else {
            continue;
        };
        for (key, value) in outputs {
            env.insert(format!("JOBFLEET_IN_{key}"), value);
        }
    }
    Ok(env)
}

/// Every node closed: the run ends succeeded, or failed when a failure had no edge to handle
/// it. A run cancelled or timed out keeps that status.
fn complete(conn: &mut AnyConnection, changes: &mut Changes, ctx: &mut Ctx) -> Result<(), Error> {
    let run = workflow_run::get(conn, ctx.run.id)?;
    if run.status.is_final() {
        ctx.run = run;
        return Ok(());
    }
    let (status, message) = if run.unhandled_failures > 0 {
        (
            WorkflowStatus::Failed,
            format!(
                "{} node(s) failed with no failure edge to handle it",
                run.unhandled_failures
            ),
        )
    } else {
        (WorkflowStatus::Succeeded, String::new())
    };
    let ended = workflow_run::transition(
        conn,
        run.id,
        &[WorkflowStatus::Running, WorkflowStatus::Paused],
        status,
        &message,
        Some(changes.now_ms),
    )?;
    ctx.run = workflow_run::get(conn, run.id)?;
    if ended {
        changes.graphs.forget(run.id);
    }
    if ended && status == WorkflowStatus::Failed {
        alert(conn, changes, ctx)?;
    }
    Ok(())
}

/// The workflow's `workflow_failed` alerts for a run that has just ended failed or timed out,
/// written in that transaction.
fn alert(conn: &mut AnyConnection, changes: &mut Changes, ctx: &Ctx) -> Result<(), Error> {
    let Some(owner) = crate::db::workflow::find(conn, ctx.run.workflow_id)? else {
        return Ok(());
    };
    let failed = workflow_node::failed_keys_now(conn, ctx.run.id)?;
    changes
        .alerts
        .workflow_final(conn, &ctx.run, &owner, &failed, changes.now_ms)?;
    Ok(())
}

/// Pause: no node starts until resumed; running nodes finish.
///
/// # Errors
/// `Conflict` unless the run is running.
pub fn pause(conn: &mut AnyConnection, id: WorkflowRunId, by: &str) -> Result<(), Error> {
    let run = workflow_run::lock(conn, id)?;
    if !workflow_run::transition(
        conn,
        id,
        &[WorkflowStatus::Running],
        WorkflowStatus::Paused,
        &format!("paused by {by}"),
        None,
    )? {
        return Err(Error::conflict(
            "status",
            format!(
                "only a running workflow run can be paused (this one is {})",
                run.status
            ),
        ));
    }
    Ok(())
}

/// Resume: the nodes that became ready while paused start now.
///
/// # Errors
/// `Conflict` unless the run is paused.
pub fn resume(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    id: WorkflowRunId,
) -> Result<(), Error> {
    let mut ctx = Ctx::load_all(conn, changes, id)?;
    if !workflow_run::transition(
        conn,
        id,
        &[WorkflowStatus::Paused],
        WorkflowStatus::Running,
        "",
        None,
    )? {
        return Err(Error::conflict(
            "status",
            format!(
                "only a paused workflow run can be resumed (this one is {})",
                ctx.run.status
            ),
        ));
    }
    ctx.run.status = WorkflowStatus::Running;
    let ready = ctx
        .all()
        .filter(|(_, n)| n.status == NodeStatus::Ready)
        .map(|(i, _)| Step::Start(i))
        .collect();
    advance(conn, changes, &mut ctx, ready)
}

/// Cancel (or time out): nodes not started are cancelled, running nodes' job runs are ended
/// `killed` (their nodes cancelled); returns those runs, for the caller to kill on their agents
/// after the commit.
///
/// # Errors
/// `Conflict` when the run is already final.
pub fn cancel(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    id: WorkflowRunId,
    status: WorkflowStatus,
    message: &str,
) -> Result<Vec<JobRun>, Error> {
    debug_assert!(matches!(
        status,
        WorkflowStatus::Cancelled | WorkflowStatus::TimedOut
    ));
    let mut ctx = Ctx::load_all(conn, changes, id)?;
    if !workflow_run::transition(
        conn,
        id,
        &[WorkflowStatus::Running, WorkflowStatus::Paused],
        status,
        message,
        Some(changes.now_ms),
    )? {
        return Err(Error::conflict(
            "status",
            format!("the workflow run is already {}", ctx.run.status),
        ));
    }
    ctx.run = workflow_run::get(conn, id)?;
    if status == WorkflowStatus::TimedOut {
        alert(conn, changes, &ctx)?;
    }
    let mut steps = Vec::new();
    let mut running = Vec::new();
    for (i, node) in ctx.all() {
        match node.status {
            NodeStatus::Waiting | NodeStatus::Ready => {
                steps.push(Step::Finish(i, NodeStatus::Cancelled, message.to_owned()));
            }
            NodeStatus::Running => running.push((i, node.clone())),
            _ => {}
        }
    }
    advance(conn, changes, &mut ctx, steps)?;
    let mut killed = Vec::new();
    for (i, node) in running {
        for run in job_run::of_node_in_flight(conn, node.id, node.attempt)? {
            // Ending the run ends its node (cancelled) through `job_run_final`.
            if changes.ended_by_admin(conn, run.id, RunStatus::Killed, message)? {
                killed.push(run);
            }
        }
        // A node whose run had ended but not yet closed it (never: same transaction) or has no
        // run in flight (its job was deleted between) is closed here. Its row is read again:
        // ending its run moved it on.
        ctx.forget(i);
        if ctx.node(conn, i)?.status == NodeStatus::Running {
            ctx.run = workflow_run::get(conn, id)?;
            advance(
                conn,
                changes,
                &mut ctx,
                vec![Step::Finish(i, NodeStatus::Cancelled, message.to_owned())],
            )?;
        }
    }
    changes.graphs.forget(id);
    Ok(killed)
}

/// Re-run from failure (Airflow's "clear"): failed, skipped and cancelled nodes and every node
/// downstream of them run again as their next attempt; succeeded nodes keep their result and
/// outputs. Returns how many nodes were opened again.
///
/// # Errors
/// `Conflict` unless the run is failed, cancelled or timed out.
pub fn rerun(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    id: WorkflowRunId,
    timeout_s: i64,
) -> Result<usize, Error> {
    let ctx = Ctx::load_all(conn, changes, id)?;
    if !matches!(
        ctx.run.status,
        WorkflowStatus::Failed | WorkflowStatus::Cancelled | WorkflowStatus::TimedOut
    ) {
        return Err(Error::conflict(
            "status",
            format!(
                "only a failed, cancelled or timed-out workflow run can be re-run (this one is {})",
                ctx.run.status
            ),
        ));
    }
    reopen_from(conn, changes, ctx, timeout_s)
}

/// Opens again every node that did not succeed and everything downstream of them, then starts
/// what can start.
fn reopen_from(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    mut ctx: Ctx,
    timeout_s: i64,
) -> Result<usize, Error> {
    let roots: Vec<usize> = ctx
        .all()
        .filter(|(_, n)| {
            matches!(
                n.status,
                NodeStatus::Failed | NodeStatus::Skipped | NodeStatus::Cancelled
            )
        })
        .map(|(i, _)| i)
        .collect();
    let reset = ctx.graph.descendants(&roots);
    let mut reopened = vec![false; ctx.graph.len()];
    for &i in &reset {
        reopened[i] = true;
    }
    for &i in &reset {
        let (mut resolved, mut met) = (0, 0);
        for (u, on) in ctx.graph.upstream(i) {
            if !reopened[u] {
                resolved += 1;
                met += i32::from(edge_met(on, ctx.loaded(u)?.status));
            }
        }
        let node_id = ctx.node(conn, i)?.id;
        workflow_node::reopen(conn, node_id, resolved, met)?;
    }
    let now = changes.now_ms;
    workflow_run::reopen(
        conn,
        ctx.run.id,
        i32::try_from(reset.len()).unwrap_or(i32::MAX),
        0,
        (timeout_s > 0).then(|| now + timeout_s * 1000),
    )?;
    let count = reset.len();
    ctx = Ctx::load_all(conn, changes, ctx.run.id)?;
    if count == 0 {
        complete(conn, changes, &mut ctx)?;
        return Ok(0);
    }
    let mut steps = Vec::new();
    for i in reset {
        let node = ctx.loaded(i)?;
        match readiness(
            ctx.graph.node(i).join,
            node.upstream_total,
            node.upstream_resolved,
            node.upstream_met,
        ) {
            Readiness::Start => steps.push(Step::Start(i)),
            Readiness::Skip => steps.push(Step::Finish(
                i,
                NodeStatus::Skipped,
                "skipped: the conditions of its upstream edges cannot be met".to_owned(),
            )),
            Readiness::Wait => {}
        }
    }
    advance(conn, changes, &mut ctx, steps)?;
    Ok(count)
}

/// Marks a node by hand. A node not started yet (`waiting`, `ready`) ends as `status` and the
/// run moves on. A failed, skipped or cancelled node of a finished run can be marked
/// `succeeded`: the run then goes on from it as a re-run would (what depends on it runs).
///
/// # Errors
/// `NotFound` for an unknown key; `Conflict` when the node cannot be marked so.
pub fn mark(
    conn: &mut AnyConnection,
    changes: &mut Changes,
    id: WorkflowRunId,
    key: &str,
    status: NodeStatus,
    by: &str,
    timeout_s: i64,
) -> Result<(), Error> {
    debug_assert!(matches!(
        status,
        NodeStatus::Succeeded | NodeStatus::Skipped
    ));
    let mut ctx = Ctx::load_all(conn, changes, id)?;
    let i = ctx
        .graph
        .position(key)
        .ok_or(Error::NotFound("workflow node"))?;
    let current = ctx.node(conn, i)?.status;
    let message = format!("marked {status} by {by}");
    match current {
        NodeStatus::Waiting | NodeStatus::Ready if !ctx.run.status.is_final() => advance(
            conn,
            changes,
            &mut ctx,
            vec![Step::Finish(i, status, message)],
        ),
        NodeStatus::Failed | NodeStatus::Skipped | NodeStatus::Cancelled
            if ctx.run.status.is_final() && status == NodeStatus::Succeeded =>
        {
            let node = ctx.node(conn, i)?;
            node.status = status;
            let node_id = node.id;
            workflow_node::mark_final(conn, node_id, status, &message, changes.now_ms)?;
            reopen_from(conn, changes, ctx, timeout_s).map(|_| ())
        }
        _ => Err(Error::conflict(
            "status",
            format!(
                "a {current} node of a {} workflow run cannot be marked {status}: mark nodes \
                 not started yet, or mark a failed, skipped or cancelled node succeeded once \
                 the run has ended",
                ctx.run.status
            ),
        )),
    }
}
