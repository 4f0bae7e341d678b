//! `job`: what to run, where, when, and under which policies.

use diesel::prelude::*;

use super::schema::job;
use super::{AnyConnection, Page, last_insert_id};
use crate::auth::rbac::GroupWrite;
use crate::db::{Prepare, prepared};
use crate::db_run;
use crate::domain::id_list::{ChannelIds, JobIds};
use crate::domain::ids::{GroupId, JobId};
use crate::domain::policy::{BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire};
use crate::domain::routing::Routing;
use crate::domain::schedule::{self, Schedule, ScheduleType};
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, serde::Serialize)]
#[diesel(table_name = job)]
pub struct Job {
    pub id: JobId,
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    pub schedule_type: ScheduleType,
    pub schedule_expr: Option<String>,
    pub interval_s: Option<i64>,
    pub once_at_ms: Option<i64>,
    pub timezone: String,
    pub handler_type: HandlerType,
    pub command: Option<String>,
    pub script_source: Option<String>,
    pub script_version: i32,
    pub interpreter: Option<Interpreter>,
    pub bean_name: Option<String>,
    pub params: String,
    pub routing: Routing,
    pub enabled: bool,
    pub timeout_s: i64,
    pub retry_count: i32,
    pub retry_backoff_s: i64,
    pub limit_cpu: Option<f64>,
    pub limit_memory_mb: Option<i64>,
    pub limit_pids: Option<i64>,
    pub misfire: Misfire,
    pub concurrency: Concurrency,
    pub block_strategy: BlockStrategy,
    /// Comma-separated child job ids, fired in order when a run succeeds.
    pub children: JobIds,
    pub alert_on_failure: bool,
    pub alert_on_timeout: bool,
    pub alert_on_lost: bool,
    /// Comma-separated alert channel ids.
    pub alert_channels: ChannelIds,
    pub alert_on_no_agent: bool,
    pub next_fire_ms: Option<i64>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// An http job's request, as JSON (`jobfleet_agent::protocol::HttpRequest`).
    pub http_request: Option<String>,
    /// Labels the agent that runs it must carry, `key=value,…` in key order; '' for none.
    pub agent_labels: String,
    /// `,a,b,` sorted, or '' (`domain::job::format_tags`).
    pub tags: String,
    pub start_deadline_s: Option<i64>,
    pub keep_succeeded: Option<i32>,
    pub keep_failed: Option<i32>,
}

impl Job {
    pub fn tags(&self) -> Vec<String> {
        crate::domain::job::parse_tags(&self.tags)
    }

    /// The labels its agent must carry (stored rows were checked when written; an unreadable
    /// one requires a label no agent has, so the job runs nowhere rather than anywhere).
    pub fn agent_labels(&self) -> jobfleet_agent::protocol::labels::Labels {
        jobfleet_agent::protocol::labels::parse_labels(&self.agent_labels).unwrap_or_else(|_| {
            [(
                "unreadable-stored-labels".to_owned(),
                self.agent_labels.replace(['=', ','], "_"),
            )]
            .into_iter()
            .collect()
        })
    }

    /// A stored http job's request.
    ///
    /// # Errors
    /// `Internal` when the job has none or it does not parse (written by something other than
    /// this code).
    pub fn request(&self) -> Result<jobfleet_agent::protocol::HttpRequest, Error> {
        self.http_request
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .ok_or_else(|| {
                Error::Internal(anyhow::anyhow!(
                    "http job {} has no valid stored request",
                    self.id
                ))
            })
    }

    /// A stored job's schedule and time zone, as the scheduler plans them.
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
                "job {} has an invalid stored {what}",
                self.id
            ))
        })
    }
}

/// Every column a user sets; shared by insert and update so the two cannot drift apart.
#[derive(Debug, Clone, PartialEq, Insertable, AsChangeset)]
#[diesel(table_name = job, treat_none_as_null = true)]
pub struct JobFields {
    pub group_id: GroupId,
    pub name: String,
    pub description: String,
    pub schedule_type: ScheduleType,
    pub schedule_expr: Option<String>,
    pub interval_s: Option<i64>,
    pub once_at_ms: Option<i64>,
    pub timezone: String,
    pub handler_type: HandlerType,
    pub command: Option<String>,
    pub script_source: Option<String>,
    pub script_version: i32,
    pub interpreter: Option<Interpreter>,
    pub bean_name: Option<String>,
    pub params: String,
    pub routing: Routing,
    pub enabled: bool,
    pub timeout_s: i64,
    pub retry_count: i32,
    pub retry_backoff_s: i64,
    pub limit_cpu: Option<f64>,
    pub limit_memory_mb: Option<i64>,
    pub limit_pids: Option<i64>,
    pub misfire: Misfire,
    pub concurrency: Concurrency,
    pub block_strategy: BlockStrategy,
    pub children: JobIds,
    pub alert_on_failure: bool,
    pub alert_on_timeout: bool,
    pub alert_on_lost: bool,
    pub alert_channels: ChannelIds,
    pub alert_on_no_agent: bool,
    pub next_fire_ms: Option<i64>,
    pub updated_ms: i64,
    pub http_request: Option<String>,
    pub agent_labels: String,
    pub tags: String,
    pub start_deadline_s: Option<i64>,
    pub keep_succeeded: Option<i32>,
    pub keep_failed: Option<i32>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = job)]
pub struct NewJob {
    #[diesel(embed)]
    pub fields: JobFields,
    pub created_ms: i64,
}

/// Filters of the job list; `visible_groups = None` means every group.
#[derive(Debug, Default, Clone)]
pub struct JobFilter {
    pub visible_groups: Option<Vec<GroupId>>,
    pub group_id: Option<GroupId>,
    pub enabled: Option<bool>,
    pub schedule_type: Option<String>,
    pub name_contains: Option<String>,
    /// Jobs carrying this tag (checked by `domain::job::check_tag`).
    pub tag: Option<String>,
    /// Only these jobs.
    pub ids: Option<Vec<JobId>>,
}

/// # Errors
/// `NotFound` when no job has this id.
pub fn get(conn: &mut AnyConnection, id: JobId) -> Result<Job, Error> {
    find(conn, id)?.ok_or(Error::NotFound("job"))
}

pub fn find(conn: &mut AnyConnection, id: JobId) -> Result<Option<Job>, Error> {
    Ok(db_run!(conn: {
        job::table
            .find(id)
            .select(Job::as_select())
            .first(conn)
            .optional()?
    }))
}

/// What a run's end needs of its job: whether and when it retries, and the jobs that follow a
/// success. A result reads this, not the whole job: in a burst of results a job read per run
/// was the callback's largest read, most of it columns (script, http request, texts) the end
/// never looks at.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = job)]
pub struct EndRules {
    pub id: JobId,
    pub group_id: GroupId,
    pub retry_count: i32,
    pub retry_backoff_s: i64,
    pub children: JobIds,
}

impl EndRules {
    pub fn of(job: &Job) -> Self {
        Self {
            id: job.id,
            group_id: job.group_id,
            retry_count: job.retry_count,
            retry_backoff_s: job.retry_backoff_s,
            children: job.children.clone(),
        }
    }
}

/// The end rules of job `id`, `None` when it is gone.
///
/// # Errors
/// Database errors.
pub fn end_rules(conn: &mut AnyConnection, id: JobId) -> Result<Option<EndRules>, Error> {
    Ok(db_run!(conn: {
        job::table
            .find(id)
            .select(EndRules::as_select())
            .first(conn)
            .optional()?
    }))
}

/// The end rules of the jobs of `ids` that exist, each once, by id.
///
/// # Errors
/// Database errors.
pub fn end_rules_all(conn: &mut AnyConnection, ids: &[JobId]) -> Result<Vec<EndRules>, Error> {
    each_once(conn, ids, |conn, list| {
        Ok(db_run!(conn: {
            job::table
                .filter(job::id.eq_any(list))
                .select(EndRules::as_select())
                .prepared()
                .load(conn)?
        }))
    })
}

/// A job's own timeout, what the monitor checks a running run against.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = job)]
pub struct Timeout {
    pub id: JobId,
    pub timeout_s: i64,
}

/// The timeouts of the jobs of `ids` that exist, each once, by id.
///
/// # Errors
/// Database errors.
pub fn timeouts_all(conn: &mut AnyConnection, ids: &[JobId]) -> Result<Vec<Timeout>, Error> {
    each_once(conn, ids, |conn, list| {
        Ok(db_run!(conn: {
            job::table
                .filter(job::id.eq_any(list))
                .select(Timeout::as_select())
                .prepared()
                .load(conn)?
        }))
    })
}

/// The jobs of `ids` that exist, each once (an id named twice, as by two workflow nodes, could
/// otherwise fall in two lists), by id.
pub fn find_all(conn: &mut AnyConnection, ids: &[JobId]) -> Result<Vec<Job>, Error> {
    each_once(conn, ids, |conn, list| {
        Ok(db_run!(conn: {
            job::table
                .filter(job::id.eq_any(list))
                .select(Job::as_select())
                .prepared()
                .load(conn)?
        }))
    })
}

/// What `read` gives for `ids` sorted and without repeats, a padded list (`super::in_lists`)
/// at a time, by id.
fn each_once<T: HasJobId>(
    conn: &mut AnyConnection,
    ids: &[JobId],
    mut read: impl FnMut(&mut AnyConnection, &[JobId]) -> Result<Vec<T>, Error>,
) -> Result<Vec<T>, Error> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = super::read_in_lists(conn, &ids, &mut read)?;
    out.sort_unstable_by_key(HasJobId::job_id);
    Ok(out)
}

trait HasJobId {
    fn job_id(&self) -> JobId;
}

impl HasJobId for Job {
    fn job_id(&self) -> JobId {
        self.id
    }
}

impl HasJobId for Timeout {
    fn job_id(&self) -> JobId {
        self.id
    }
}

impl HasJobId for EndRules {
    fn job_id(&self) -> JobId {
        self.id
    }
}

pub fn find_by_name(
    conn: &mut AnyConnection,
    group_id: GroupId,
    name: &str,
) -> Result<Option<Job>, Error> {
    Ok(job::table
        .filter(job::group_id.eq(group_id))
        .filter(job::name.eq(name))
        .select(Job::as_select())
        .first(conn)
        .optional()?)
}

fn filtered(filter: &JobFilter) -> job::BoxedQuery<'static, super::MultiBackend> {
    let mut query = job::table.into_boxed();
    if let Some(ids) = &filter.visible_groups {
        query = query.filter(job::group_id.eq_any(ids.clone()));
    }
    if let Some(group_id) = filter.group_id {
        query = query.filter(job::group_id.eq(group_id));
    }
    if let Some(enabled) = filter.enabled {
        query = query.filter(job::enabled.eq(enabled));
    }
    if let Some(kind) = &filter.schedule_type {
        query = query.filter(job::schedule_type.eq(kind.clone()));
    }
    if let Some(tag) = &filter.tag {
        // Tags are ASCII letters, digits and `-_.:/` (checked), so only `_` needs escaping.
        let pattern = format!("%,{},%", tag.replace('_', "\\_"));
        query = query.filter(job::tags.like(pattern).escape('\\'));
    }
    if let Some(ids) = &filter.ids {
        query = query.filter(job::id.eq_any(ids.clone()));
    }
    if let Some(needle) = &filter.name_contains {
        let escaped = super::like_literal(needle);
        query = query.filter(job::name.like(format!("%{escaped}%")).escape('\\'));
    }
    query
}

pub fn list(conn: &mut AnyConnection, filter: &JobFilter, page: Page) -> Result<Vec<Job>, Error> {
    Ok(filtered(filter)
        .select(Job::as_select())
        .order(job::id.asc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?)
}

pub fn count(conn: &mut AnyConnection, filter: &JobFilter) -> Result<i64, Error> {
    Ok(filtered(filter).count().get_result(conn)?)
}

/// Every job of a group, oldest first (an export, an apply's prune).
pub fn in_group(conn: &mut AnyConnection, group_id: GroupId) -> Result<Vec<Job>, Error> {
    Ok(job::table
        .filter(job::group_id.eq(group_id))
        .select(Job::as_select())
        .order(job::id.asc())
        .load(conn)?)
}

/// A job's history limits: how many succeeded and unsuccessful finished runs it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Queryable)]
pub struct HistoryLimit {
    pub job_id: JobId,
    pub keep_succeeded: Option<i32>,
    pub keep_failed: Option<i32>,
}

/// The jobs with a history limit.
pub fn history_limits(conn: &mut AnyConnection) -> Result<Vec<HistoryLimit>, Error> {
    Ok(job::table
        .filter(
            job::keep_succeeded
                .is_not_null()
                .or(job::keep_failed.is_not_null()),
        )
        .select((job::id, job::keep_succeeded, job::keep_failed))
        .order(job::id.asc())
        .load(conn)?)
}

pub fn count_in_group(conn: &mut AnyConnection, group_id: GroupId) -> Result<i64, Error> {
    Ok(job::table
        .filter(job::group_id.eq(group_id))
        .count()
        .get_result(conn)?)
}

/// Which of `ids` exist.
pub fn existing_ids(conn: &mut AnyConnection, ids: &[JobId]) -> Result<Vec<JobId>, Error> {
    Ok(job::table
        .filter(job::id.eq_any(ids.to_vec()))
        .select(job::id)
        .load(conn)?)
}

/// `(id, group_id)` of those of `ids` that exist: what a reference check needs, without the rows.
pub fn groups_of(conn: &mut AnyConnection, ids: &[JobId]) -> Result<Vec<(JobId, GroupId)>, Error> {
    Ok(job::table
        .filter(job::id.eq_any(ids.to_vec()))
        .select((job::id, job::group_id))
        .load(conn)?)
}

/// Replaces only a job's child list (a deleted child is taken out of its parents' lists).
///
/// # Errors
/// `NotFound` when no job has this id.
pub fn set_children(
    conn: &mut AnyConnection,
    id: JobId,
    children: &JobIds,
    updated_ms: i64,
) -> Result<(), Error> {
    let n = diesel::update(job::table.find(id))
        .set((job::children.eq(children), job::updated_ms.eq(updated_ms)))
        .execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("job"));
    }
    Ok(())
}

/// Every job's alert channel list that is not empty, to find the users of a channel.
pub fn alert_channel_lists(conn: &mut AnyConnection) -> Result<Vec<(JobId, ChannelIds)>, Error> {
    Ok(job::table
        .filter(job::alert_channels.ne(""))
        .select((job::id, job::alert_channels))
        .load(conn)?)
}

/// The jobs of a group that want an alert when it loses its last live agent.
pub fn no_agent_alerted(conn: &mut AnyConnection, group_id: GroupId) -> Result<Vec<Job>, Error> {
    Ok(job::table
        .filter(job::group_id.eq(group_id))
        .filter(job::alert_on_no_agent.eq(true))
        .filter(job::alert_channels.ne(""))
        .order(job::id.asc())
        .select(Job::as_select())
        .load(conn)?)
}

/// Every job's child list, for cycle detection over the whole graph.
pub fn children_edges(conn: &mut AnyConnection) -> Result<Vec<(JobId, JobIds)>, Error> {
    Ok(job::table
        .filter(job::children.ne(""))
        .select((job::id, job::children))
        .load(conn)?)
}

/// # Errors
/// `Conflict` when the name is taken in the group (the unique key decides under races).
/// Writes to a group's jobs take the proof that the caller may write it
/// (`auth::rbac::Actor::write_group`), so no path can skip the check.
fn covered(proofs: &[&GroupWrite], group_id: GroupId) -> Result<(), Error> {
    if proofs.iter().any(|p| p.group_id() == group_id) {
        Ok(())
    } else {
        Err(Error::Forbidden(format!(
            "no write access to the jobs of group {group_id}"
        )))
    }
}

/// # Errors
/// `Forbidden` when `write` is for another group; `Conflict` on a name taken in the group.
pub fn insert(conn: &mut AnyConnection, write: &GroupWrite, new: &NewJob) -> Result<JobId, Error> {
    covered(&[write], new.fields.group_id)?;
    diesel::insert_into(job::table)
        .values(new)
        .execute(conn)
        .map_err(name_conflict)?;
    Ok(JobId(last_insert_id(conn)?))
}

/// `proofs` cover the job's group and the group `fields` puts it in (the same one unless the
/// job moves).
///
/// # Errors
/// `Forbidden` when they do not; `NotFound` when no job `id` is in a group they cover.
pub fn update(
    conn: &mut AnyConnection,
    proofs: &[&GroupWrite],
    id: JobId,
    fields: &JobFields,
) -> Result<(), Error> {
    covered(proofs, fields.group_id)?;
    let groups: Vec<GroupId> = proofs.iter().map(|p| p.group_id()).collect();
    let n = diesel::update(job::table.find(id).filter(job::group_id.eq_any(groups)))
        .set(fields)
        .execute(conn)
        .map_err(name_conflict)?;
    if n == 0 {
        return Err(Error::NotFound("job"));
    }
    Ok(())
}

fn name_conflict(err: diesel::result::Error) -> Error {
    match Error::from(err) {
        Error::Conflict { .. } => {
            Error::conflict("name", "a job with this name already exists in the group")
        }
        other => other,
    }
}

/// Enabled jobs whose next fire is at or before `horizon_ms`, soonest first.
pub fn due(conn: &mut AnyConnection, horizon_ms: i64, limit: i64) -> Result<Vec<Job>, Error> {
    Ok(job::table
        .filter(job::enabled.eq(true))
        .filter(job::next_fire_ms.le(horizon_ms))
        .order(job::next_fire_ms.asc())
        .limit(limit)
        .select(Job::as_select())
        .load(conn)?)
}

/// Moves a job's next fire from `expected` to `next`, unless someone changed it meanwhile (a user
/// edit recomputed it): returns whether this call moved it.
pub fn advance(
    conn: &mut AnyConnection,
    id: JobId,
    expected: i64,
    next: Option<i64>,
) -> Result<bool, Error> {
    Ok(prepared::update(
        job::table,
        job::next_fire_ms.eq(next),
        job::id
            .eq(id)
            .and(job::next_fire_ms.eq(expected))
            .and(job::enabled.eq(true)),
    )
    .execute(conn)?
        > 0)
}

/// `advance` for many jobs that move between the same two values; returns how many moved.
pub fn advance_many(
    conn: &mut AnyConnection,
    ids: &[JobId],
    expected: i64,
    next: Option<i64>,
) -> Result<usize, Error> {
    if let [id] = ids {
        // A list of one would be prepared afresh; `advance`'s statement is kept.
        return Ok(usize::from(advance(conn, *id, expected, next)?));
    }
    Ok(db_run!(conn: {
        diesel::update(
            job::table
                .filter(job::id.eq_any(ids))
                .filter(job::next_fire_ms.eq(expected))
                .filter(job::enabled.eq(true)),
        )
        .set(job::next_fire_ms.eq(next))
        .execute(conn)?
    }))
}

/// One job's move in a plan pass: from the next fire time the pass read to the one after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    pub id: JobId,
    pub expected: i64,
    pub next: Option<i64>,
}

/// Rows per statement of [`advance_each`]: each row's `CASE` branch is looked through for every
/// row the statement matches, so its cost grows with the square of this.
const ADVANCE_EACH_ROWS: usize = 50;

/// `advance` for jobs that each move between values of their own; returns how many moved.
///
/// Fixed-rate jobs spread over the second each have a next fire time of their own, so a plan
/// pass had a statement per job: on MariaDB at 1,000 fires a second the most frequent statement
/// and the largest share of the server's statement time (BENCHMARKS.md, "An Intel Xeon (family 6
/// model 167) VM"). There a statement moves up to [`ADVANCE_EACH_ROWS`] jobs (a chunk's lone
/// leftover by `advance`'s kept statement); SQLite runs that kept statement per job, an
/// in-process call cheaper than preparing a statement of a new shape (measured so).
pub fn advance_each(conn: &mut AnyConnection, moves: &[Advance]) -> Result<usize, Error> {
    use super::rows_update::{RowsUpdate, Set, Value};
    if moves.len() < 2 || !super::batch_writes_pay(conn) {
        let mut moved = 0;
        for one in moves {
            moved += usize::from(advance(conn, one.id, one.expected, one.next)?);
        }
        return Ok(moved);
    }
    let mut moved = 0;
    for chunk in moves.chunks(ADVANCE_EACH_ROWS) {
        if let [one] = chunk {
            // A list of one would be prepared afresh; `advance`'s statement is kept.
            moved += usize::from(advance(conn, one.id, one.expected, one.next)?);
            continue;
        }
        moved += RowsUpdate::new("job", chunk.iter().map(|one| one.id.0).collect())
            .column(
                "next_fire_ms",
                Set::Always,
                chunk.iter().map(|one| Value::BigInt(one.next)).collect(),
            )
            .where_each_equals(
                "next_fire_ms",
                chunk
                    .iter()
                    .map(|one| Value::BigInt(Some(one.expected)))
                    .collect(),
            )
            .where_each_equals("enabled", vec![Value::Bool(Some(true)); chunk.len()])
            .execute(conn)?;
    }
    Ok(moved)
}

/// The soonest next fire of any enabled job, for the scheduler's sleep.
pub fn soonest_fire(conn: &mut AnyConnection) -> Result<Option<i64>, Error> {
    use diesel::dsl::min;
    Ok(job::table
        .filter(job::enabled.eq(true))
        .select(min(job::next_fire_ms))
        .first(conn)?)
}

/// `(enabled, total)` job counts.
pub fn counts(conn: &mut AnyConnection) -> Result<(i64, i64), Error> {
    let total: i64 = job::table.count().get_result(conn)?;
    let enabled: i64 = job::table
        .filter(job::enabled.eq(true))
        .count()
        .get_result(conn)?;
    Ok((enabled, total))
}

/// # Errors
/// `NotFound` when no job `id` is in the group `write` is for.
pub fn delete(conn: &mut AnyConnection, write: &GroupWrite, id: JobId) -> Result<(), Error> {
    let n = diesel::delete(
        job::table
            .find(id)
            .filter(job::group_id.eq(write.group_id())),
    )
    .execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("job"));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::db::executor_group;
    use crate::testing::storage_test;

    /// The proof a system actor (an admin) gets for `group_id`.
    pub(crate) fn write(group_id: GroupId) -> GroupWrite {
        crate::auth::rbac::Actor::system("test")
            .write_group(group_id)
            .unwrap()
    }

    pub(crate) fn fields(group_id: GroupId, name: &str) -> JobFields {
        JobFields {
            group_id,
            name: name.into(),
            description: String::new(),
            schedule_type: ScheduleType::Cron,
            schedule_expr: Some("0 * * * * ?".into()),
            interval_s: None,
            once_at_ms: None,
            timezone: "UTC".into(),
            handler_type: HandlerType::Shell,
            command: Some("echo hi".into()),
            script_source: None,
            script_version: 0,
            interpreter: None,
            bean_name: None,
            params: String::new(),
            routing: Routing::First,
            enabled: true,
            timeout_s: 0,
            retry_count: 0,
            retry_backoff_s: 10,
            limit_cpu: Some(0.5),
            limit_memory_mb: None,
            limit_pids: None,
            misfire: Misfire::DoNothing,
            concurrency: Concurrency::Allow,
            block_strategy: BlockStrategy::Serial,
            children: JobIds::default(),
            alert_on_failure: true,
            alert_on_timeout: true,
            alert_on_lost: true,
            alert_channels: ChannelIds::default(),
            alert_on_no_agent: false,
            next_fire_ms: None,
            updated_ms: 1,
            http_request: None,
            agent_labels: String::new(),
            tags: String::new(),
            start_deadline_s: None,
            keep_succeeded: None,
            keep_failed: None,
        }
    }

    pub(crate) fn insert_group(conn: &mut AnyConnection, app: &str) -> GroupId {
        executor_group::insert(
            conn,
            &executor_group::NewExecutorGroup {
                app_name: app,
                title: app,
                address_mode: crate::domain::policy::AddressMode::Auto,
                addresses: Default::default(),
                created_ms: 1,
                updated_ms: 1,
                allow_executors: false,
            },
        )
        .unwrap()
    }

    fn insert_job(conn: &mut AnyConnection, fields: JobFields) -> JobId {
        let group = fields.group_id;
        insert(
            conn,
            &write(group),
            &NewJob {
                fields,
                created_ms: 1,
            },
        )
        .unwrap()
    }

    /// `ids` padded past one `IN` list, `first` and `second` at either end of it.
    fn across_lists(first: JobId, second: JobId) -> Vec<JobId> {
        let mut ids = vec![first, second];
        let one_list = i64::try_from(crate::db::IN_LIST_MAX).unwrap();
        ids.extend((0..one_list).map(|n| JobId(1_000_000 + n)));
        ids.extend([second, first]);
        ids
    }

    storage_test!(jobs_named_twice_across_lists_come_once, |conn| {
        let g = insert_group(conn, "g1");
        let first = insert_job(conn, fields(g, "first"));
        let second = insert_job(conn, fields(g, "second"));
        // More ids than one list holds, both jobs at either end: without the dedup the first
        // list and the last each found them.
        let ids = across_lists(first, second);
        let found: Vec<JobId> = find_all(conn, &ids).unwrap().iter().map(|j| j.id).collect();
        assert_eq!(found, vec![first, second]);
    });

    storage_test!(
        jobs_each_move_from_their_own_time_unless_it_changed,
        |conn| {
            let g = insert_group(conn, "g1");
            // More than two statements' worth on MariaDB. Jobs go in pairs at one time (the
            // statement names only the rows that differ from a column's most common value), and
            // every seventeenth has its last fire (NULL).
            let expected = |i: usize| 1_000 + (i / 2) as i64;
            let next = |i: usize| (i % 17 != 3).then_some(5_000 + i as i64);
            let jobs: Vec<JobId> = (0..120)
                .map(|i| {
                    insert_job(
                        conn,
                        JobFields {
                            next_fire_ms: Some(expected(i)),
                            enabled: i != 70,
                            ..fields(g, &format!("job{i}"))
                        },
                    )
                })
                .collect();
            // Not in the pass, at the most common time of its first statement: it must stay.
            let outsider = insert_job(
                conn,
                JobFields {
                    next_fire_ms: Some(expected(0)),
                    ..fields(g, "outsider")
                },
            );
            // Edited since the pass read it: its time is another.
            prepared::update(job::table, job::next_fire_ms.eq(7), job::id.eq(jobs[5]))
                .execute(conn)
                .unwrap();
            let moves: Vec<Advance> = (0..120)
                .map(|i| Advance {
                    id: jobs[i],
                    expected: expected(i),
                    next: next(i),
                })
                .collect();
            assert_eq!(advance_each(conn, &moves).unwrap(), 118);
            let next_of = |conn: &mut AnyConnection, id: JobId| get(conn, id).unwrap().next_fire_ms;
            assert_eq!(next_of(conn, jobs[5]), Some(7), "edited: left alone");
            assert_eq!(
                next_of(conn, jobs[70]),
                Some(expected(70)),
                "disabled: left alone"
            );
            assert_eq!(
                next_of(conn, outsider),
                Some(expected(0)),
                "not named: left alone"
            );
            for i in (0..120).filter(|i| ![5, 70].contains(i)) {
                assert_eq!(next_of(conn, jobs[i]), next(i), "job {i}");
            }
            // Moved already: nothing matches a second time.
            assert_eq!(advance_each(conn, &moves[..60]).unwrap(), 0);
            assert_eq!(advance_each(conn, &[]).unwrap(), 0);
            // A statement's worth and one left over.
            let again: Vec<Advance> = (0..54)
                .filter(|i| ![3, 5, 20, 37].contains(i))
                .map(|i| Advance {
                    id: jobs[i],
                    expected: 5_000 + i as i64,
                    next: Some(9_000 + i as i64),
                })
                .chain([Advance {
                    id: outsider,
                    expected: expected(0),
                    next: Some(9_999),
                }])
                .collect();
            assert_eq!(again.len(), 51);
            assert_eq!(advance_each(conn, &again).unwrap(), 51);
            assert_eq!(next_of(conn, outsider), Some(9_999));
            assert_eq!(next_of(conn, jobs[53]), Some(9_053));
        }
    );

    storage_test!(end_rules_are_the_jobs_own_each_once, |conn| {
        let g = insert_group(conn, "g1");
        let child = insert_job(conn, fields(g, "child"));
        let parent = insert_job(
            conn,
            JobFields {
                retry_count: 3,
                retry_backoff_s: 7,
                children: JobIds::from(vec![child]),
                ..fields(g, "parent")
            },
        );
        let whole = |conn: &mut AnyConnection, id| EndRules::of(&find(conn, id).unwrap().unwrap());
        let expected = vec![whole(conn, child), whole(conn, parent)];
        assert_eq!(expected[1].retry_count, 3);
        assert_eq!(expected[1].retry_backoff_s, 7);
        assert_eq!(expected[1].children, JobIds::from(vec![child]));
        assert_eq!(
            end_rules_all(conn, &across_lists(parent, child)).unwrap(),
            expected
        );
        assert_eq!(
            end_rules(conn, parent).unwrap().as_ref(),
            Some(&expected[1])
        );
        assert_eq!(end_rules(conn, JobId(999_999)).unwrap(), None);
        assert!(
            end_rules_all(conn, &[JobId(999_998), JobId(999_999)])
                .unwrap()
                .is_empty()
        );
    });

    storage_test!(timeouts_are_the_jobs_own_each_once, |conn| {
        let g = insert_group(conn, "g1");
        let none = insert_job(conn, fields(g, "no timeout"));
        let timed = insert_job(
            conn,
            JobFields {
                timeout_s: 90,
                ..fields(g, "timed")
            },
        );
        let expected = vec![
            Timeout {
                id: none,
                timeout_s: 0,
            },
            Timeout {
                id: timed,
                timeout_s: 90,
            },
        ];
        assert_eq!(
            timeouts_all(conn, &across_lists(timed, none)).unwrap(),
            expected
        );
        assert!(timeouts_all(conn, &[JobId(999_999)]).unwrap().is_empty());
    });

    storage_test!(job_round_trip_filters_and_unique_name, |conn| {
        let g = insert_group(conn, "g1");
        let id = insert(
            conn,
            &write(g),
            &NewJob {
                fields: fields(g, "nightly 100%_done"),
                created_ms: 1,
            },
        )
        .unwrap();
        let job = get(conn, id).unwrap();
        assert_eq!(job.limit_cpu, Some(0.5));
        assert!(job.enabled);
        let dup = insert(
            conn,
            &write(g),
            &NewJob {
                fields: fields(g, "nightly 100%_done"),
                created_ms: 1,
            },
        )
        .unwrap_err();
        assert_eq!(dup.field(), Some("name"));
        let other = insert(
            conn,
            &write(g),
            &NewJob {
                fields: fields(g, "nightlyX100abdone"),
                created_ms: 1,
            },
        )
        .unwrap();

        let like = JobFilter {
            name_contains: Some("100%_".into()),
            ..Default::default()
        };
        let found: Vec<JobId> = list(conn, &like, Page::default())
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(found, vec![id], "LIKE wildcards in the search are literal");

        let mut changed = fields(g, "renamed");
        changed.limit_cpu = None;
        changed.enabled = false;
        assert!(matches!(
            update(conn, &[&write(GroupId(g.0 + 1))], id, &changed),
            Err(Error::Forbidden(_))
        ));
        update(conn, &[&write(g)], id, &changed).unwrap();
        let job = get(conn, id).unwrap();
        assert_eq!(
            (job.name.as_str(), job.limit_cpu, job.enabled),
            ("renamed", None, false)
        );
        let enabled_only = JobFilter {
            enabled: Some(true),
            ..Default::default()
        };
        assert_eq!(count(conn, &enabled_only).unwrap(), 1);
        assert_eq!(
            existing_ids(conn, &[id, other, JobId(999)]).unwrap().len(),
            2
        );
        let mut groups = groups_of(conn, &[other, id, JobId(999)]).unwrap();
        groups.sort_unstable();
        assert_eq!(
            groups,
            vec![(id, g), (other, g)],
            "missing ids are left out"
        );
        set_children(conn, other, &JobIds::from(vec![id]), 7).unwrap();
        let with_child = get(conn, other).unwrap();
        assert_eq!(
            (with_child.children, with_child.updated_ms, with_child.name),
            (JobIds::from(vec![id]), 7, "nightlyX100abdone".to_owned()),
            "only the child list (and the change time) moves"
        );
        assert!(matches!(
            set_children(conn, JobId(999), &JobIds::default(), 7),
            Err(Error::NotFound(_))
        ));
        assert!(
            matches!(
                delete(conn, &write(GroupId(g.0 + 1)), id),
                Err(Error::NotFound(_))
            ),
            "a proof for another group deletes nothing"
        );
        delete(conn, &write(g), id).unwrap();
        assert!(matches!(get(conn, id), Err(Error::NotFound(_))));
    });
}
