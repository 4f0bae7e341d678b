//! `workflow_node`: one node of a workflow run, its status and the counts of its upstream
//! edges that decide when it starts.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::workflow_node;
use crate::domain::ids::{JobId, WorkflowRunId};
use crate::domain::workflow::NodeStatus;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = workflow_node)]
pub struct WorkflowNode {
    pub id: i64,
    pub workflow_run_id: WorkflowRunId,
    pub node_key: String,
    pub job_id: JobId,
    pub attempt: i32,
    pub status: NodeStatus,
    pub upstream_total: i32,
    pub upstream_resolved: i32,
    pub upstream_met: i32,
    /// The published outputs as a JSON object of strings ('' before any).
    pub outputs: String,
    pub message: String,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = workflow_node)]
pub struct NewWorkflowNode {
    pub workflow_run_id: WorkflowRunId,
    pub node_key: String,
    pub job_id: JobId,
    pub status: NodeStatus,
    pub upstream_total: i32,
    pub outputs: String,
    pub message: String,
}

/// The nodes of a new run, in one statement.
pub fn insert_all(conn: &mut AnyConnection, rows: &[NewWorkflowNode]) -> Result<(), Error> {
    crate::db_run!(conn: {
        diesel::insert_into(workflow_node::table).values(rows).execute(conn)?;
    });
    Ok(())
}

/// The nodes of a run, in id order (which is definition order).
pub fn of_run(conn: &mut AnyConnection, run: WorkflowRunId) -> Result<Vec<WorkflowNode>, Error> {
    Ok(workflow_node::table
        .filter(workflow_node::workflow_run_id.eq(run))
        .select(WorkflowNode::as_select())
        .order(workflow_node::id.asc())
        .load(conn)?)
}

/// The nodes of a run as they are now (a locking read on MySQL: see `workflow_run::lock`).
pub fn of_run_now(
    conn: &mut AnyConnection,
    run: WorkflowRunId,
) -> Result<Vec<WorkflowNode>, Error> {
    // The select's backend is part of its type: one query per arm.
    macro_rules! nodes {
        () => {
            workflow_node::table
                .filter(workflow_node::workflow_run_id.eq(run))
                .select(WorkflowNode::as_select())
                .order(workflow_node::id.asc())
        };
    }
    Ok(match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => nodes!().for_update().load(c)?,
        AnyConnection::Sqlite(c) => nodes!().load(c)?,
    })
}

/// The nodes of a run with these keys, as they are now (locking on MySQL, as `of_run_now`):
/// a step reads only the rows it touches.
pub fn by_keys_now(
    conn: &mut AnyConnection,
    run: WorkflowRunId,
    keys: &[&str],
) -> Result<Vec<WorkflowNode>, Error> {
    macro_rules! nodes {
        ($key:expr) => {
            workflow_node::table
                .filter(workflow_node::workflow_run_id.eq(run))
                .filter($key)
                .select(WorkflowNode::as_select())
        };
    }
    // One key, the common case (a chain's next node), as `=`: a statement diesel keeps
    // prepared, where an `IN` list is prepared afresh each time.
    if let [key] = keys {
        let key = workflow_node::node_key.eq(*key);
        return Ok(match conn {
            #[cfg(feature = "mysql")]
            AnyConnection::Mysql(c) => nodes!(key).for_update().load(c)?,
            AnyConnection::Sqlite(c) => nodes!(key).load(c)?,
        });
    }
    let keys =
        workflow_node::node_key.eq_any(keys.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>());
    Ok(match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => nodes!(keys).for_update().load(c)?,
        AnyConnection::Sqlite(c) => nodes!(keys).load(c)?,
    })
}

/// The keys of a run's failed nodes, as they are now (locking on MySQL, as `of_run_now`).
pub fn failed_keys_now(conn: &mut AnyConnection, run: WorkflowRunId) -> Result<Vec<String>, Error> {
    macro_rules! keys {
        () => {
            workflow_node::table
                .filter(workflow_node::workflow_run_id.eq(run))
                .filter(workflow_node::status.eq(NodeStatus::Failed))
                .select(workflow_node::node_key)
                .order(workflow_node::id.asc())
        };
    }
    Ok(match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => keys!().for_update().load(c)?,
        AnyConnection::Sqlite(c) => keys!().load(c)?,
    })
}

pub fn find(conn: &mut AnyConnection, id: i64) -> Result<Option<WorkflowNode>, Error> {
    Ok(workflow_node::table
        .find(id)
        .select(WorkflowNode::as_select())
        .first(conn)
        .optional()?)
}

pub fn by_key(
    conn: &mut AnyConnection,
    run: WorkflowRunId,
    key: &str,
) -> Result<Option<WorkflowNode>, Error> {
    Ok(workflow_node::table
        .filter(workflow_node::workflow_run_id.eq(run))
        .filter(workflow_node::node_key.eq(key))
        .select(WorkflowNode::as_select())
        .first(conn)
        .optional()?)
}

/// One upstream edge resolved (and met or not). Returns the node as it is after the update:
/// the UPDATE applies to the newest row and waits for concurrent writers, so the counts read
/// back are exact even when two upstream nodes end at once on two admins.
pub fn upstream_resolved(
    conn: &mut AnyConnection,
    run: WorkflowRunId,
    key: &str,
    met: bool,
) -> Result<Option<WorkflowNode>, Error> {
    diesel::update(
        workflow_node::table
            .filter(workflow_node::workflow_run_id.eq(run))
            .filter(workflow_node::node_key.eq(key)),
    )
    .set((
        workflow_node::upstream_resolved.eq(workflow_node::upstream_resolved + 1),
        workflow_node::upstream_met.eq(workflow_node::upstream_met + i32::from(met)),
    ))
    .execute(conn)?;
    by_key(conn, run, key)
}

/// Moves a node from one of `from` to `to`; returns whether it moved. The one caller whose
/// update moved it acts on the move (starts the job, counts the end).
pub fn transition(
    conn: &mut AnyConnection,
    id: i64,
    from: &[NodeStatus],
    to: NodeStatus,
    message: &str,
    now_ms: i64,
) -> Result<bool, Error> {
    let query = workflow_node::table
        .find(id)
        .filter(workflow_node::status.eq_any(from.to_vec()));
    let n = if to == NodeStatus::Running {
        diesel::update(query)
            .set((
                workflow_node::status.eq(to),
                workflow_node::message.eq(message),
                workflow_node::started_ms.eq(Some(now_ms)),
                workflow_node::finished_ms.eq(None::<i64>),
            ))
            .execute(conn)?
    } else if to.is_final() {
        diesel::update(query)
            .set((
                workflow_node::status.eq(to),
                workflow_node::message.eq(message),
                workflow_node::finished_ms.eq(Some(now_ms)),
            ))
            .execute(conn)?
    } else {
        diesel::update(query)
            .set((
                workflow_node::status.eq(to),
                workflow_node::message.eq(message),
            ))
            .execute(conn)?
    };
    Ok(n > 0)
}

pub fn set_outputs(conn: &mut AnyConnection, id: i64, outputs: &str) -> Result<(), Error> {
    diesel::update(workflow_node::table.find(id))
        .set(workflow_node::outputs.eq(outputs))
        .execute(conn)?;
    Ok(())
}

/// A node opened again by a re-run: its next attempt, waiting, with counts from its upstream
/// nodes as they are now.
pub fn reopen(conn: &mut AnyConnection, id: i64, resolved: i32, met: i32) -> Result<(), Error> {
    diesel::update(workflow_node::table.find(id))
        .set((
            workflow_node::attempt.eq(workflow_node::attempt + 1),
            workflow_node::status.eq(NodeStatus::Waiting),
            workflow_node::upstream_resolved.eq(resolved),
            workflow_node::upstream_met.eq(met),
            workflow_node::outputs.eq(""),
            workflow_node::message.eq(""),
            workflow_node::started_ms.eq(None::<i64>),
            workflow_node::finished_ms.eq(None::<i64>),
        ))
        .execute(conn)?;
    Ok(())
}

/// A final node set by hand to another final status (marked succeeded).
pub fn mark_final(
    conn: &mut AnyConnection,
    id: i64,
    status: NodeStatus,
    message: &str,
    now_ms: i64,
) -> Result<(), Error> {
    diesel::update(workflow_node::table.find(id))
        .set((
            workflow_node::status.eq(status),
            workflow_node::message.eq(message),
            workflow_node::finished_ms.eq(Some(now_ms)),
        ))
        .execute(conn)?;
    Ok(())
}

/// The nodes of these runs (their runs are being removed).
pub fn delete_of_runs(conn: &mut AnyConnection, runs: &[WorkflowRunId]) -> Result<usize, Error> {
    Ok(diesel::delete(
        workflow_node::table.filter(workflow_node::workflow_run_id.eq_any(runs.to_vec())),
    )
    .execute(conn)?)
}
