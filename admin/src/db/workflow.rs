//! `workflow`: a DAG of jobs in a group, stored with its definition as JSON.

use diesel::prelude::*;

use super::schema::workflow;
use super::{AnyConnection, Page, last_insert_id};
use crate::domain::id_list::ChannelIds;
use crate::domain::ids::{GroupId, WorkflowId};
use crate::domain::policy::Concurrency;
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
}

/// The columns a create or an update writes.
#[derive(Debug, Clone, Insertable, AsChangeset)]
#[diesel(table_name = workflow)]
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
