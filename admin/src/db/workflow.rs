//! `workflow`: a DAG of jobs in a group, stored with its definition as JSON, and its
//! schedule (the job's columns and meaning) with the scheduler's state: the next slot to plan
//! and the slot planned but not started yet.

use diesel::prelude::*;

use super::schema::workflow;
use super::{AnyConnection, Page, last_insert_id};
use crate::domain::id_list::ChannelIds;
use crate::domain::ids::{GroupId, WorkflowId};
use crate::domain::policy::{Concurrency, Misfire};
use crate::domain::schedule::{self, Schedule, ScheduleType};
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = workflow)]
pub struct Workflow {
    pub id: WorkflowId,
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    /// `domain::workflow::Definition` as JSON, validated before it was written.
    pub definition: String,
    pub params: String,
    pub concurrency: Concurrency,
    pub timeout_s: i64,
    pub alert_on_failure: bool,
    /// Comma-separated alert channel ids.
    pub alert_channels: ChannelIds,
    pub enabled: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub schedule_type: ScheduleType,
    pub schedule_expr: Option<String>,
    pub interval_s: Option<i64>,
    pub once_at_ms: Option<i64>,
    pub timezone: String,
    pub misfire: Misfire,
    /// The next slot not planned yet; `None`: never fires again, or disabled.
    pub next_fire_ms: Option<i64>,
    /// A slot planned and not started yet, and when to start it.
    pub pending_slot_ms: Option<i64>,
    pub pending_at_ms: Option<i64>,
}

impl Workflow {
    /// The stored schedule and time zone, as the scheduler plans them.
    ///
    /// # Errors
    /// `Internal` when the stored row does not parse (written by something other than this code).
    pub fn schedule(&self) -> Result<(Schedule, chrono_tz::Tz), Error> {
        schedule::from_stored(
            self.schedule_type,
            self.schedule_expr.as_deref(),
            self.interval_s,
            self.once_at_ms,
            &self.timezone,
        )
        .map_err(|what| {
            Error::Internal(anyhow::anyhow!(
                "workflow {} has an invalid stored {what}",
                self.id
            ))
        })
    }
}

/// The columns a create or an update writes. An update plans the schedule again from now: the
/// next fire is recomputed and a slot planned under the old schedule is dropped.
#[derive(Debug, Clone, Insertable, AsChangeset)]
#[diesel(table_name = workflow, treat_none_as_null = true)]
pub struct WorkflowFields {
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    pub definition: String,
    pub params: String,
    pub concurrency: Concurrency,
    pub timeout_s: i64,
    pub alert_on_failure: bool,
    /// Comma-separated alert channel ids.
    pub alert_channels: ChannelIds,
    pub enabled: bool,
    pub updated_ms: i64,
    pub schedule_type: ScheduleType,
    pub schedule_expr: Option<String>,
    pub interval_s: Option<i64>,
    pub once_at_ms: Option<i64>,
    pub timezone: String,
    pub misfire: Misfire,
    pub next_fire_ms: Option<i64>,
    pub pending_slot_ms: Option<i64>,
    pub pending_at_ms: Option<i64>,
}

/// # Errors
/// `Conflict` on a name the group already has.
pub fn insert(conn: &mut AnyConnection, fields: &WorkflowFields) -> Result<WorkflowId, Error> {
    diesel::insert_into(workflow::table)
        .values((fields, workflow::created_ms.eq(fields.updated_ms)))
        .execute(conn)?;
    Ok(WorkflowId(last_insert_id(conn)?))
}

/// # Errors
/// `Conflict` on a name the group already has; `NotFound` when it is gone.
pub fn update(
    conn: &mut AnyConnection,
    id: WorkflowId,
    fields: &WorkflowFields,
) -> Result<(), Error> {
    let n = diesel::update(workflow::table.find(id))
        .set(fields)
        .execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("workflow"));
    }
    Ok(())
}

pub fn find(conn: &mut AnyConnection, id: WorkflowId) -> Result<Option<Workflow>, Error> {
    Ok(workflow::table
        .find(id)
        .select(Workflow::as_select())
        .first(conn)
        .optional()?)
}

/// # Errors
/// `NotFound` when no workflow has this id.
pub fn get(conn: &mut AnyConnection, id: WorkflowId) -> Result<Workflow, Error> {
    find(conn, id)?.ok_or(Error::NotFound("workflow"))
}

pub fn find_by_name(
    conn: &mut AnyConnection,
    group_id: GroupId,
    name: &str,
) -> Result<Option<Workflow>, Error> {
    Ok(workflow::table
        .filter(workflow::group_id.eq(group_id))
        .filter(workflow::name.eq(name))
        .select(Workflow::as_select())
        .first(conn)
        .optional()?)
}

pub fn delete(conn: &mut AnyConnection, id: WorkflowId) -> Result<bool, Error> {
    Ok(diesel::delete(workflow::table.find(id)).execute(conn)? > 0)
}

/// Newest first, within `groups` when given.
pub fn list(
    conn: &mut AnyConnection,
    groups: Option<&[GroupId]>,
    group_id: Option<GroupId>,
    page: Page,
) -> Result<(Vec<Workflow>, i64), Error> {
    let filtered = || {
        let mut query = workflow::table.into_boxed();
        if let Some(ids) = groups {
            query = query.filter(workflow::group_id.eq_any(ids.to_vec()));
        }
        if let Some(id) = group_id {
            query = query.filter(workflow::group_id.eq(id));
        }
        query
    };
    let total = filtered().count().get_result(conn)?;
    let rows = filtered()
        .select(Workflow::as_select())
        .order(workflow::id.desc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?;
    Ok((rows, total))
}

/// Enabled workflows whose next slot is at or before `horizon_ms` and that have no planned slot
/// waiting to start, soonest first.
pub fn due(conn: &mut AnyConnection, horizon_ms: i64, limit: i64) -> Result<Vec<Workflow>, Error> {
    Ok(workflow::table
        .filter(workflow::enabled.eq(true))
        .filter(workflow::pending_slot_ms.is_null())
        .filter(workflow::next_fire_ms.le(horizon_ms))
        .order(workflow::next_fire_ms.asc())
        .limit(limit)
        .select(Workflow::as_select())
        .load(conn)?)
}

/// A pass planned a workflow: its next slot moves from `expected` to `next`, and `pending`
/// (slot, start time) is the slot to start, if any. Conditional on the row being as the pass
/// read it (enabled, same next slot, nothing pending): returns whether this call moved it.
pub fn plan(
    conn: &mut AnyConnection,
    id: WorkflowId,
    expected: i64,
    next: Option<i64>,
    pending: Option<(i64, i64)>,
) -> Result<bool, Error> {
    Ok(diesel::update(
        workflow::table
            .find(id)
            .filter(workflow::enabled.eq(true))
            .filter(workflow::pending_slot_ms.is_null())
            .filter(workflow::next_fire_ms.eq(expected)),
    )
    .set((
        workflow::next_fire_ms.eq(next),
        workflow::pending_slot_ms.eq(pending.map(|(slot, _)| slot)),
        workflow::pending_at_ms.eq(pending.map(|(_, at)| at)),
    ))
    .execute(conn)?
        > 0)
}

/// Takes the planned slot `slot_ms` for starting (or dropping): clears it if it is still the
/// pending one of an enabled workflow. Of two admins taking it, one gets `true`.
pub fn take_pending(conn: &mut AnyConnection, id: WorkflowId, slot_ms: i64) -> Result<bool, Error> {
    Ok(diesel::update(
        workflow::table
            .find(id)
            .filter(workflow::enabled.eq(true))
            .filter(workflow::pending_slot_ms.eq(slot_ms)),
    )
    .set((
        workflow::pending_slot_ms.eq(None::<i64>),
        workflow::pending_at_ms.eq(None::<i64>),
    ))
    .execute(conn)?
        > 0)
}

/// A planned slot waiting to start: which workflow, its slot, when to start it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingFire {
    pub workflow_id: WorkflowId,
    pub slot_ms: i64,
    pub at_ms: i64,
}

/// Enabled workflows' planned slots that should have started before `before_ms` (their admin
/// stopped, or is behind), oldest first.
pub fn stale_pending(
    conn: &mut AnyConnection,
    before_ms: i64,
    limit: i64,
) -> Result<Vec<PendingFire>, Error> {
    let rows: Vec<(WorkflowId, Option<i64>, Option<i64>)> = workflow::table
        .filter(workflow::enabled.eq(true))
        .filter(workflow::pending_at_ms.lt(before_ms))
        .order(workflow::pending_at_ms.asc())
        .limit(limit)
        .select((
            workflow::id,
            workflow::pending_slot_ms,
            workflow::pending_at_ms,
        ))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .filter_map(|(workflow_id, slot, at)| {
            Some(PendingFire {
                workflow_id,
                slot_ms: slot?,
                at_ms: at?,
            })
        })
        .collect())
}

/// The soonest next slot of an enabled workflow with nothing pending, for the scheduler's sleep.
pub fn soonest_fire(conn: &mut AnyConnection) -> Result<Option<i64>, Error> {
    use diesel::dsl::min;
    Ok(workflow::table
        .filter(workflow::enabled.eq(true))
        .filter(workflow::pending_slot_ms.is_null())
        .select(min(workflow::next_fire_ms))
        .first(conn)?)
}

/// Sets the next slot directly (tests and tools: e.g. an outage simulated by a slot long past).
pub fn set_next_fire(
    conn: &mut AnyConnection,
    id: WorkflowId,
    next: Option<i64>,
) -> Result<(), Error> {
    let n = diesel::update(workflow::table.find(id))
        .set(workflow::next_fire_ms.eq(next))
        .execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("workflow"));
    }
    Ok(())
}
