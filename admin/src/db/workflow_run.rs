//! `workflow_run`: one run of a workflow, with the definition it started with and the counters
//! that decide when it is over.

use diesel::prelude::*;

use super::schema::workflow_run;
use super::{AnyConnection, Page, last_insert_id};
use crate::domain::ids::{GroupId, WorkflowId, WorkflowRunId};
use crate::domain::policy::TriggerKind;
use crate::domain::workflow::WorkflowStatus;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = workflow_run)]
pub struct WorkflowRun {
    pub id: WorkflowRunId,
    pub workflow_id: WorkflowId,
    pub group_id: GroupId,
    pub status: WorkflowStatus,
    pub definition: String,
    pub params: String,
    pub trigger_kind: TriggerKind,
    pub open_nodes: i32,
    pub unhandled_failures: i32,
    pub deadline_ms: Option<i64>,
    pub message: String,
    pub created_ms: i64,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    /// The scheduled slot this run stands for; `None` for a manual or API trigger.
    pub fire_slot_ms: Option<i64>,
}

/// A run's row without its definition, which can be large (see [`lock_head`]).
#[derive(Queryable, Selectable)]
#[diesel(table_name = workflow_run)]
struct WorkflowRunHead {
    id: WorkflowRunId,
    workflow_id: WorkflowId,
    group_id: GroupId,
    status: WorkflowStatus,
    params: String,
    trigger_kind: TriggerKind,
    open_nodes: i32,
    unhandled_failures: i32,
    deadline_ms: Option<i64>,
    message: String,
    created_ms: i64,
    started_ms: i64,
    finished_ms: Option<i64>,
    fire_slot_ms: Option<i64>,
}

impl From<WorkflowRunHead> for WorkflowRun {
    fn from(head: WorkflowRunHead) -> Self {
        Self {
            id: head.id,
            workflow_id: head.workflow_id,
            group_id: head.group_id,
            status: head.status,
            definition: String::new(),
            params: head.params,
            trigger_kind: head.trigger_kind,
            open_nodes: head.open_nodes,
            unhandled_failures: head.unhandled_failures,
            deadline_ms: head.deadline_ms,
            message: head.message,
            created_ms: head.created_ms,
            started_ms: head.started_ms,
            finished_ms: head.finished_ms,
            fire_slot_ms: head.fire_slot_ms,
        }
    }
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = workflow_run)]
pub struct NewWorkflowRun {
    pub workflow_id: WorkflowId,
    pub group_id: GroupId,
    pub status: WorkflowStatus,
    pub definition: String,
    pub params: String,
    pub trigger_kind: TriggerKind,
    pub open_nodes: i32,
    pub deadline_ms: Option<i64>,
    pub message: String,
    pub created_ms: i64,
    pub started_ms: i64,
    /// Unique per workflow: a second run for one slot is refused with `Conflict`.
    pub fire_slot_ms: Option<i64>,
}

/// # Errors
/// `Conflict` when the workflow already has a run for this `fire_slot_ms`.
pub fn insert(conn: &mut AnyConnection, new: &NewWorkflowRun) -> Result<WorkflowRunId, Error> {
    diesel::insert_into(workflow_run::table)
        .values(new)
        .execute(conn)?;
    Ok(WorkflowRunId(last_insert_id(conn)?))
}

/// # Errors
/// `NotFound` when no workflow run has this id.
pub fn get(conn: &mut AnyConnection, id: WorkflowRunId) -> Result<WorkflowRun, Error> {
    workflow_run::table
        .find(id)
        .select(WorkflowRun::as_select())
        .first(conn)
        .optional()?
        .ok_or(Error::NotFound("workflow run"))
}

/// Takes the run's row lock (MySQL) or the write lock (SQLite) before anything else in the
/// transaction, and reads the row as it is now: operations on one run (pause, cancel, re-run,
/// a node's end) then happen one after the other.
///
/// # Errors
/// `NotFound` when no workflow run has this id.
pub fn lock(conn: &mut AnyConnection, id: WorkflowRunId) -> Result<WorkflowRun, Error> {
    // A locking read: under MySQL's repeatable read a plain one could return the row as the
    // transaction's snapshot had it, before another admin's committed step. The select's
    // backend is part of its type: one query per arm.
    macro_rules! row {
        () => {
            workflow_run::table
                .find(id)
                .select(WorkflowRun::as_select())
        };
    }
    let row = match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => row!().for_update().first(c).optional()?,
        AnyConnection::Sqlite(c) => row!().first(c).optional()?,
    };
    row.ok_or(Error::NotFound("workflow run"))
}

/// `lock` without the definition, which can be large and never changes once the run has
/// started: the engine keeps each run's graph (`domain::graph_cache`) and reads it with
/// [`definition_of`] only when it has none. The returned row's `definition` is empty.
///
/// # Errors
/// `NotFound` when no workflow run has this id.
pub fn lock_head(conn: &mut AnyConnection, id: WorkflowRunId) -> Result<WorkflowRun, Error> {
    macro_rules! row {
        () => {
            workflow_run::table
                .find(id)
                .select(WorkflowRunHead::as_select())
        };
    }
    let row: Option<WorkflowRunHead> = match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => row!().for_update().first(c).optional()?,
        AnyConnection::Sqlite(c) => row!().first(c).optional()?,
    };
    Ok(row.ok_or(Error::NotFound("workflow run"))?.into())
}

/// The definition a run started with. It never changes, but a locking read on MySQL all the
/// same: a plain one reads the transaction's snapshot, which may predate the run.
///
/// # Errors
/// `NotFound` when no workflow run has this id.
pub fn definition_of(conn: &mut AnyConnection, id: WorkflowRunId) -> Result<String, Error> {
    macro_rules! definition {
        () => {
            workflow_run::table
                .find(id)
                .select(workflow_run::definition)
        };
    }
    let definition: Option<String> = match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => definition!().for_update().first(c).optional()?,
        AnyConnection::Sqlite(c) => definition!().first(c).optional()?,
    };
    definition.ok_or(Error::NotFound("workflow run"))
}

/// One node became final: `open_nodes` down by one (and `unhandled_failures` up when its
/// failure had no edge to handle it), in the database and in `run`. Returns the nodes still
/// open. `run` must have been read by [`lock_head`] in this transaction: the lock makes it the
/// newest row until the commit, so the count is known without reading it back, and of two
/// admins ending the last two nodes at once exactly one sees 0.
pub fn node_closed(
    conn: &mut AnyConnection,
    run: &mut WorkflowRun,
    unhandled_failure: bool,
) -> Result<i32, Error> {
    diesel::update(workflow_run::table.find(run.id))
        .set((
            workflow_run::open_nodes.eq(workflow_run::open_nodes - 1),
            workflow_run::unhandled_failures
                .eq(workflow_run::unhandled_failures + i32::from(unhandled_failure)),
        ))
        .execute(conn)?;
    run.open_nodes -= 1;
    run.unhandled_failures += i32::from(unhandled_failure);
    Ok(run.open_nodes)
}

/// Nodes re-opened by a re-run: counters set again from the nodes as they are now.
pub fn reopen(
    conn: &mut AnyConnection,
    id: WorkflowRunId,
    open_nodes: i32,
    unhandled_failures: i32,
    deadline_ms: Option<i64>,
) -> Result<(), Error> {
    diesel::update(workflow_run::table.find(id))
        .set((
            workflow_run::status.eq(WorkflowStatus::Running),
            workflow_run::open_nodes.eq(open_nodes),
            workflow_run::unhandled_failures.eq(unhandled_failures),
            workflow_run::deadline_ms.eq(deadline_ms),
            workflow_run::finished_ms.eq(None::<i64>),
            workflow_run::message.eq(""),
        ))
        .execute(conn)?;
    Ok(())
}

/// Moves the run from one of `from` to `to`; returns whether it moved (a conditional update:
/// one of two racing callers wins).
pub fn transition(
    conn: &mut AnyConnection,
    id: WorkflowRunId,
    from: &[WorkflowStatus],
    to: WorkflowStatus,
    message: &str,
    finished_ms: Option<i64>,
) -> Result<bool, Error> {
    let n = diesel::update(
        workflow_run::table
            .find(id)
            .filter(workflow_run::status.eq_any(from.to_vec())),
    )
    .set((
        workflow_run::status.eq(to),
        workflow_run::message.eq(message),
        workflow_run::finished_ms.eq(finished_ms),
    ))
    .execute(conn)?;
    Ok(n > 0)
}

#[derive(Debug, Default, Clone)]
pub struct RunFilter {
    pub visible_groups: Option<Vec<GroupId>>,
    pub workflow_id: Option<WorkflowId>,
    pub status: Option<WorkflowStatus>,
}

/// Newest first.
pub fn list(
    conn: &mut AnyConnection,
    filter: &RunFilter,
    page: Page,
) -> Result<(Vec<WorkflowRun>, i64), Error> {
    let filtered = || {
        let mut query = workflow_run::table.into_boxed();
        if let Some(ids) = &filter.visible_groups {
            query = query.filter(workflow_run::group_id.eq_any(ids.clone()));
        }
        if let Some(id) = filter.workflow_id {
            query = query.filter(workflow_run::workflow_id.eq(id));
        }
        if let Some(status) = filter.status {
            query = query.filter(workflow_run::status.eq(status));
        }
        query
    };
    let total = filtered().count().get_result(conn)?;
    let rows = filtered()
        .select(WorkflowRun::as_select())
        .order(workflow_run::id.desc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?;
    Ok((rows, total))
}

/// Whether `workflow_id` has a run for the scheduled slot `slot_ms`.
pub fn slot_taken(
    conn: &mut AnyConnection,
    workflow_id: WorkflowId,
    slot_ms: i64,
) -> Result<bool, Error> {
    let n: i64 = workflow_run::table
        .filter(workflow_run::workflow_id.eq(workflow_id))
        .filter(workflow_run::fire_slot_ms.eq(slot_ms))
        .count()
        .get_result(conn)?;
    Ok(n > 0)
}

/// Runs of `workflow_id` not final yet, oldest first (the concurrency policy).
pub fn in_flight(
    conn: &mut AnyConnection,
    workflow_id: WorkflowId,
) -> Result<Vec<WorkflowRun>, Error> {
    Ok(workflow_run::table
        .filter(workflow_run::workflow_id.eq(workflow_id))
        .filter(workflow_run::status.eq_any([WorkflowStatus::Running, WorkflowStatus::Paused]))
        .select(WorkflowRun::as_select())
        .order(workflow_run::id.asc())
        .load(conn)?)
}

/// Running or paused runs past their deadline, for the timeout monitor.
pub fn overdue(
    conn: &mut AnyConnection,
    now_ms: i64,
    limit: i64,
) -> Result<Vec<WorkflowRunId>, Error> {
    Ok(workflow_run::table
        .filter(workflow_run::status.eq_any([WorkflowStatus::Running, WorkflowStatus::Paused]))
        .filter(workflow_run::deadline_ms.le(now_ms))
        .select(workflow_run::id)
        .limit(limit)
        .load(conn)?)
}

/// Removes up to `limit` workflow runs that ended before `before_ms`, with their nodes (call in
/// a transaction). Returns how many runs went.
pub fn delete_finished_before(
    conn: &mut AnyConnection,
    before_ms: i64,
    limit: i64,
) -> Result<usize, Error> {
    let ids: Vec<WorkflowRunId> = workflow_run::table
        .filter(workflow_run::finished_ms.lt(before_ms))
        .filter(workflow_run::status.eq_any([
            WorkflowStatus::Succeeded,
            WorkflowStatus::Failed,
            WorkflowStatus::Cancelled,
            WorkflowStatus::TimedOut,
        ]))
        .select(workflow_run::id)
        .limit(limit)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    super::workflow_node::delete_of_runs(conn, &ids)?;
    Ok(diesel::delete(workflow_run::table.filter(workflow_run::id.eq_any(ids))).execute(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::workflow_node::{self, NewWorkflowNode};
    use crate::domain::ids::JobId;
    use crate::domain::workflow::NodeStatus;
    use crate::testing::storage_test;

    fn run(
        conn: &mut AnyConnection,
        status: WorkflowStatus,
        finished_ms: Option<i64>,
    ) -> WorkflowRunId {
        let id = insert(
            conn,
            &NewWorkflowRun {
                workflow_id: WorkflowId(1),
                group_id: GroupId(1),
                status,
                definition: "{}".into(),
                params: String::new(),
                trigger_kind: TriggerKind::Api,
                open_nodes: 1,
                deadline_ms: None,
                message: String::new(),
                created_ms: 1,
                started_ms: 1,
                fire_slot_ms: None,
            },
        )
        .unwrap();
        workflow_node::insert_all(
            conn,
            &[NewWorkflowNode {
                workflow_run_id: id,
                node_key: "a".into(),
                job_id: JobId(1),
                status: NodeStatus::Waiting,
                upstream_total: 0,
                outputs: String::new(),
                message: String::new(),
            }],
        )
        .unwrap();
        if let Some(at) = finished_ms {
            assert!(transition(conn, id, &[status], status, "", Some(at)).unwrap());
        }
        id
    }

    storage_test!(
        retention_removes_old_finished_runs_with_their_nodes,
        |conn| {
            let old = run(conn, WorkflowStatus::Succeeded, Some(10));
            let recent = run(conn, WorkflowStatus::Failed, Some(5_000));
            let running = run(conn, WorkflowStatus::Running, None);
            assert_eq!(delete_finished_before(conn, 1_000, 100).unwrap(), 1);
            assert!(get(conn, old).is_err());
            assert!(workflow_node::of_run(conn, old).unwrap().is_empty());
            for kept in [recent, running] {
                assert!(get(conn, kept).is_ok());
                assert_eq!(workflow_node::of_run(conn, kept).unwrap().len(), 1);
            }
            // A run is locked and read as it is now; an unknown one is not found.
            assert_eq!(lock(conn, running).unwrap().status, WorkflowStatus::Running);
            assert!(matches!(
                lock(conn, WorkflowRunId(999)),
                Err(Error::NotFound(_))
            ));
        }
    );

    storage_test!(a_scheduled_slot_has_one_run, |conn| {
        let new = |workflow: i64, slot: Option<i64>| NewWorkflowRun {
            workflow_id: WorkflowId(workflow),
            group_id: GroupId(1),
            status: WorkflowStatus::Running,
            definition: "{}".into(),
            params: String::new(),
            trigger_kind: TriggerKind::Schedule,
            open_nodes: 1,
            deadline_ms: None,
            message: String::new(),
            created_ms: 1,
            started_ms: 1,
            fire_slot_ms: slot,
        };
        insert(conn, &new(1, Some(1_000))).unwrap();
        assert!(slot_taken(conn, WorkflowId(1), 1_000).unwrap());
        assert!(!slot_taken(conn, WorkflowId(1), 2_000).unwrap());
        assert!(matches!(
            insert(conn, &new(1, Some(1_000))),
            Err(Error::Conflict { .. })
        ));
        // Another slot, another workflow's same slot, and manual triggers (no slot) are free.
        insert(conn, &new(1, Some(2_000))).unwrap();
        insert(conn, &new(2, Some(1_000))).unwrap();
        insert(conn, &new(1, None)).unwrap();
        insert(conn, &new(1, None)).unwrap();
    });
}
