//! `job_run`: one row per trigger of a job (per shard, per attempt). The unique key on
//! `(job_id, fire_slot_ms, shard_index)` is what makes a double fire impossible.

use diesel::dsl::case_when;
use diesel::prelude::*;
use diesel::sql_types::Text;

use super::schema::job_run;
use super::{AnyConnection, Page, last_insert_id};
use crate::db::rows_update::{RowsUpdate, Set, Value};
use crate::db::{Prepare, prepared};
use crate::db_run;
use crate::domain::ids::{GroupId, JobId, RunId};
use crate::domain::policy::{RunStatus, TriggerKind};
use crate::domain::routing::Routing;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = job_run)]
pub struct JobRun {
    pub id: RunId,
    pub job_id: JobId,
    pub group_id: GroupId,
    pub first_run_id: Option<RunId>,
    pub attempt: i32,
    pub trigger_kind: TriggerKind,
    pub fire_slot_ms: Option<i64>,
    pub scheduled_ms: i64,
    pub status: RunStatus,
    pub agent_address: Option<String>,
    pub params: String,
    pub shard_index: i32,
    pub shard_total: i32,
    pub trigger_msg: Option<String>,
    pub triggered_ms: Option<i64>,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub handle_code: Option<i32>,
    pub handle_msg: Option<String>,
    pub exit_code: Option<i32>,
    pub term_signal: Option<i32>,
    pub cpu_ms: Option<i64>,
    pub max_rss_kb: Option<i64>,
    pub oom_killed: Option<bool>,
    pub limits_mode: Option<String>,
    pub created_ms: i64,
    /// The agent process that accepted the run and its accept sequence number there.
    pub agent_instance: Option<String>,
    pub agent_seq: Option<i64>,
    /// The workflow node (`workflow_node.id`) and its attempt this run belongs to, if any.
    pub workflow_node_id: Option<i64>,
    pub node_attempt: Option<i32>,
    /// Overrides of the job's timeout and extra environment (a workflow node's), sent with the
    /// trigger.
    pub timeout_s: Option<i64>,
    /// A JSON object of strings.
    pub env: Option<String>,
    /// What the run published on its output channel (`KEY=value` lines), as the agent sent it.
    pub outputs: Option<String>,
}

/// What watching a running run needs: its job, where it runs and since when, and which agent
/// process accepted it. The monitor's pass every two seconds and each batch of heartbeats read
/// every running run (of those agents): read as whole rows, with their texts, these reads and
/// the monitor's read of their jobs (whole, for the timeout) were about a sixth of the admin's
/// CPU while a burst ran (BENCHMARKS.md, issue 17).
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = job_run)]
pub struct RunningRun {
    pub id: RunId,
    pub job_id: JobId,
    pub agent_address: Option<String>,
    pub agent_instance: Option<String>,
    pub agent_seq: Option<i64>,
    /// The run's own timeout (a workflow node's), over its job's.
    pub timeout_s: Option<i64>,
    pub started_ms: Option<i64>,
    pub triggered_ms: Option<i64>,
    pub created_ms: i64,
}

/// `None` is inserted as `NULL`, which is every one of these columns' default: as a default,
/// diesel's SQLite backend inserts a batch as a statement per row (SQLite has no `DEFAULT`
/// among `VALUES`), each found in the statement cache by its SQL text built anew; as `NULL`, a
/// pass's planned fires go in one statement of up to `IN_LIST_MAX` rows.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = job_run, treat_none_as_default_value = false)]
pub struct NewJobRun {
    pub job_id: JobId,
    pub group_id: GroupId,
    pub first_run_id: Option<RunId>,
    pub attempt: i32,
    pub trigger_kind: TriggerKind,
    /// Set only for scheduled fires: the slot the unique key guards.
    pub fire_slot_ms: Option<i64>,
    pub scheduled_ms: i64,
    pub status: RunStatus,
    pub params: String,
    pub shard_index: i32,
    pub shard_total: i32,
    pub created_ms: i64,
    pub workflow_node_id: Option<i64>,
    pub node_attempt: Option<i32>,
    pub timeout_s: Option<i64>,
    pub env: Option<String>,
}

#[derive(Debug, Default, Clone)]
pub struct RunFilter {
    pub visible_groups: Option<Vec<GroupId>>,
    pub job_id: Option<JobId>,
    pub group_id: Option<GroupId>,
    pub status: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

/// # Errors
/// `NotFound` when no run has this id.
pub fn get(conn: &mut AnyConnection, id: RunId) -> Result<JobRun, Error> {
    db_run!(conn: {
        job_run::table
            .find(id)
            .select(JobRun::as_select())
            .first(conn)
            .optional()?
    })
    .ok_or(Error::NotFound("run"))
}

fn filtered(filter: &RunFilter) -> job_run::BoxedQuery<'static, super::MultiBackend> {
    let mut query = job_run::table.into_boxed();
    if let Some(ids) = &filter.visible_groups {
        query = query.filter(job_run::group_id.eq_any(ids.clone()));
    }
    if let Some(job_id) = filter.job_id {
        query = query.filter(job_run::job_id.eq(job_id));
    }
    if let Some(group_id) = filter.group_id {
        query = query.filter(job_run::group_id.eq(group_id));
    }
    if let Some(status) = &filter.status {
        query = query.filter(job_run::status.eq(status.clone()));
    }
    if let Some(from) = filter.from_ms {
        query = query.filter(job_run::scheduled_ms.ge(from));
    }
    if let Some(to) = filter.to_ms {
        query = query.filter(job_run::scheduled_ms.lt(to));
    }
    query
}

/// Newest first.
pub fn list(
    conn: &mut AnyConnection,
    filter: &RunFilter,
    page: Page,
) -> Result<Vec<JobRun>, Error> {
    Ok(filtered(filter)
        .select(JobRun::as_select())
        .order(job_run::id.desc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?)
}

pub fn count(conn: &mut AnyConnection, filter: &RunFilter) -> Result<i64, Error> {
    Ok(filtered(filter).count().get_result(conn)?)
}

/// A workflow node attempt's runs still pending or running (retries included).
pub fn of_node_in_flight(
    conn: &mut AnyConnection,
    node_id: i64,
    node_attempt: i32,
) -> Result<Vec<JobRun>, Error> {
    Ok(job_run::table
        .filter(job_run::workflow_node_id.eq(node_id))
        .filter(job_run::node_attempt.eq(node_attempt))
        .filter(job_run::status.eq_any([RunStatus::Pending, RunStatus::Running]))
        .select(JobRun::as_select())
        .load(conn)?)
}

/// Every attempt of the chain that starts with run `first`, the first attempt included, in
/// attempt order; a locking read on MySQL, so that two retries of one chain take turns and the
/// second sees the attempt the first added (SQLite's write transactions already take turns).
pub fn chain(conn: &mut AnyConnection, first: RunId) -> Result<Vec<JobRun>, Error> {
    // The select's backend is part of its type: one query per arm.
    macro_rules! attempts {
        ($filter:expr) => {
            job_run::table.filter($filter).select(JobRun::as_select())
        };
    }
    let (mut head, rest): (Vec<JobRun>, Vec<JobRun>) = match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => (
            attempts!(job_run::id.eq(first)).for_update().load(c)?,
            attempts!(job_run::first_run_id.eq(first))
                .for_update()
                .load(c)?,
        ),
        AnyConnection::Sqlite(c) => (
            attempts!(job_run::id.eq(first)).load(c)?,
            attempts!(job_run::first_run_id.eq(first)).load(c)?,
        ),
    };
    head.extend(rest);
    head.sort_by_key(|r| (r.attempt, r.id));
    Ok(head)
}

/// Every run of a workflow node, newest first (the run page lists them per node).
pub fn of_node(conn: &mut AnyConnection, node_id: i64) -> Result<Vec<JobRun>, Error> {
    Ok(job_run::table
        .filter(job_run::workflow_node_id.eq(node_id))
        .select(JobRun::as_select())
        .order(job_run::id.asc())
        .load(conn)?)
}

/// # Errors
/// `Conflict` when the `(job, slot, shard)` was already fired (by this or another admin).
pub fn insert(conn: &mut AnyConnection, new: &NewJobRun) -> Result<RunId, Error> {
    diesel::insert_into(job_run::table)
        .values(new)
        .execute(conn)?;
    Ok(RunId(last_insert_id(conn)?))
}

/// Inserts many runs in one statement and returns their ids in the order given. All or none:
/// a slot that already has its run fails the whole statement with `Conflict`.
///
/// The rows must share `created_ms` and each have a `fire_slot_ms` (scheduled fires).
pub fn insert_fires(conn: &mut AnyConnection, rows: &[NewJobRun]) -> Result<Vec<RunId>, Error> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids = match conn {
        #[cfg(feature = "mysql")]
        AnyConnection::Mysql(c) => {
            diesel::insert_into(job_run::table)
                .values(rows)
                .execute(c)?;
            // Diesel has no `RETURNING` on MySQL (MySQL itself has none). Reading the ids back
            // by the unique key cost InnoDB about 7 pages a run in a burst (BENCHMARKS.md);
            // where the server hands one statement's values out consecutively, the first id
            // gives them all. A server that cannot say so (no such variable) reads them back.
            consecutive_ids(c, rows.len()).unwrap_or(None)
        }
        AnyConnection::Sqlite(c) => {
            // `RETURNING`'s order is SQLite's own, not the rows': matched by the unique key.
            let stored: Vec<Stored> = diesel::insert_into(job_run::table)
                .values(rows)
                .returning((
                    job_run::id,
                    job_run::job_id,
                    job_run::fire_slot_ms,
                    job_run::shard_index,
                ))
                .get_results(c)?;
            Some(in_row_order(rows, stored)?)
        }
    };
    match ids {
        Some(ids) => Ok(ids),
        None => read_back_fires(conn, rows),
    }
}

/// The ids of the `n` rows the connection's last `INSERT` added, when the server guarantees
/// they are consecutive: InnoDB's `innodb_autoinc_lock_mode` 0 or 1 (1 is MariaDB's default)
/// gives a multi-row `INSERT … VALUES`, whose row count is known, one block of values in row
/// order, `auto_increment_increment` apart, the first being `LAST_INSERT_ID()`. Mode 2
/// (interleaved: MySQL 8's default, and what Galera requires) gives no such promise: `None` then.
#[cfg(feature = "mysql")]
fn consecutive_ids(c: &mut diesel::MysqlConnection, n: usize) -> Result<Option<Vec<RunId>>, Error> {
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;
    let (first, increment, lock_mode): (i64, i64, i64) =
        diesel::select(sql::<(BigInt, BigInt, BigInt)>(
            "CAST(LAST_INSERT_ID() AS SIGNED), \
         CAST(@@SESSION.auto_increment_increment AS SIGNED), \
         CAST(@@GLOBAL.innodb_autoinc_lock_mode AS SIGNED)",
        ))
        .prepared()
        .get_result(c)?;
    Ok(ids_in_one_block(first, increment, lock_mode, n))
}

/// See [`consecutive_ids`].
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn ids_in_one_block(first: i64, increment: i64, lock_mode: i64, n: usize) -> Option<Vec<RunId>> {
    if !(0..=1).contains(&lock_mode) || increment < 1 || first < 1 {
        return None;
    }
    (0..n)
        .map(|i| {
            let step = i64::try_from(i).ok()?.checked_mul(increment)?;
            first.checked_add(step).map(RunId)
        })
        .collect()
}

/// The new runs' ids, read back by their unique key: auto-increment values of one statement
/// need not be consecutive (InnoDB's interleaved mode).
fn read_back_fires(conn: &mut AnyConnection, rows: &[NewJobRun]) -> Result<Vec<RunId>, Error> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let job_ids: Vec<JobId> = rows.iter().map(|r| r.job_id).collect();
    let mut shards: Vec<i32> = rows.iter().map(|r| r.shard_index).collect();
    shards.sort_unstable();
    shards.dedup();
    let stored: Vec<Stored> = job_run::table
        .filter(job_run::job_id.eq_any(&job_ids))
        .filter(job_run::created_ms.eq(first.created_ms))
        .filter(job_run::fire_slot_ms.is_not_null())
        .filter(job_run::shard_index.eq_any(&shards))
        .select((
            job_run::id,
            job_run::job_id,
            job_run::fire_slot_ms,
            job_run::shard_index,
        ))
        .load(conn)?;
    in_row_order(rows, stored)
}

/// A new run as read back: id, job, slot and shard, the unique key's columns.
type Stored = (RunId, JobId, Option<i64>, i32);

/// The ids of `stored` in the order of `rows`, matched by the unique key.
fn in_row_order(rows: &[NewJobRun], stored: Vec<Stored>) -> Result<Vec<RunId>, Error> {
    let by_slot: std::collections::HashMap<(JobId, Option<i64>, i32), RunId> = stored
        .into_iter()
        .map(|(id, job_id, slot, shard)| ((job_id, slot, shard), id))
        .collect();
    rows.iter()
        .map(|r| {
            by_slot
                .get(&(r.job_id, r.fire_slot_ms, r.shard_index))
                .copied()
                .ok_or_else(|| {
                    Error::Internal(anyhow::anyhow!(
                        "run of job {} slot {:?} vanished right after its insert",
                        r.job_id,
                        r.fire_slot_ms
                    ))
                })
        })
        .collect()
}

/// The trigger's outcome: sent to `agent` (running) or not (failed, with why). Returns whether
/// this call ended the run (a trigger nobody accepted), so its retry is created once.
pub fn record_trigger(
    conn: &mut AnyConnection,
    id: RunId,
    answer: &TriggerAnswer<'_>,
    now_ms: i64,
) -> Result<bool, Error> {
    if answer.accepted {
        // A fast job's result can arrive before the agent's answer to the trigger is stored:
        // the agent and message are recorded either way, the final status is kept.
        // One statement: the agent and message always, `running` only from `pending`.
        db_run!(conn: {
            prepared::update(
                job_run::table,
                (
                    job_run::agent_address.eq(answer.agent),
                    job_run::trigger_msg.eq(answer.message),
                    job_run::agent_instance.eq(answer.instance),
                    job_run::agent_seq.eq(answer.seq),
                    job_run::status.eq(case_when(
                        job_run::status.eq(RunStatus::Pending),
                        RunStatus::Running.into_sql::<Text>(),
                    )
                    .otherwise(job_run::status)),
                ),
                job_run::id
                    .eq(id)
                    .and(job_run::triggered_ms.eq(answer.claimed_ms)),
            )
            .execute(conn)?
        });
        return Ok(false);
    }
    let failed = db_run!(conn: {
        prepared::update(
            job_run::table,
            (
                job_run::status.eq(RunStatus::Failed),
                job_run::agent_address.eq(answer.agent),
                job_run::trigger_msg.eq(answer.message),
                job_run::finished_ms.eq(now_ms),
            ),
            job_run::id
                .eq(id)
                .and(job_run::status.eq(RunStatus::Pending))
                .and(job_run::triggered_ms.eq(answer.claimed_ms)),
        )
        .execute(conn)?
    });
    Ok(failed > 0)
}

/// Agents' acceptances of triggers, stored as [`record_trigger`] stores an accepted answer, with
/// a statement per hundred answers instead of one per answer.
pub fn record_accepted_all<'a>(
    conn: &mut AnyConnection,
    answers: &[(RunId, TriggerAnswer<'a>)],
) -> Result<(), Error> {
    for chunk in answers.chunks(100) {
        let values = |of: &dyn Fn(&TriggerAnswer<'a>) -> Value<'a>| -> Vec<Value<'a>> {
            chunk.iter().map(|(_, answer)| of(answer)).collect()
        };
        RowsUpdate::new("job_run", chunk.iter().map(|(id, _)| id.0).collect())
            .column(
                "agent_address",
                Set::Always,
                values(&|a| Value::Text(a.agent)),
            )
            .column(
                "trigger_msg",
                Set::Always,
                values(&|a| Value::Text(Some(a.message))),
            )
            .column(
                "agent_instance",
                Set::Always,
                values(&|a| Value::Text(a.instance)),
            )
            .column("agent_seq", Set::Always, values(&|a| Value::BigInt(a.seq)))
            .text_from_to(
                "status",
                RunStatus::Pending.as_str(),
                RunStatus::Running.as_str(),
            )
            .where_each_equals("triggered_ms", values(&|a| Value::BigInt(a.claimed_ms)))
            .execute(conn)?;
    }
    Ok(())
}

/// An agent's answer to a trigger, as `record_trigger` stores it.
#[derive(Debug, Clone, Copy)]
pub struct TriggerAnswer<'a> {
    pub agent: Option<&'a str>,
    pub accepted: bool,
    pub message: &'a str,
    /// The accepting agent process and its accept sequence number (jobfleet agents only).
    pub instance: Option<&'a str>,
    pub seq: Option<i64>,
    /// The claim the trigger went out under (the run's `triggered_ms` then). An answer stores
    /// nothing once the run was handed back and claimed anew, or is unclaimed: a late answer
    /// must not mark a requeued run running on an agent that gave it back, nor fail its new
    /// trigger.
    pub claimed_ms: Option<i64>,
}

/// The runs of `ids` that exist, as they are, in no particular order: the callback checks who
/// may report each result, and a batch of claims reads its runs, with one read per batch.
pub fn get_all(conn: &mut AnyConnection, ids: &[RunId]) -> Result<Vec<JobRun>, Error> {
    if let [id] = ids {
        // The usual callback at low rates, one result: a list of one would be prepared afresh.
        return Ok(db_run!(conn: {
            job_run::table
                .find(*id)
                .select(JobRun::as_select())
                .load(conn)?
        }));
    }
    super::read_in_lists(conn, ids, |conn, list| {
        Ok(db_run!(conn: {
            job_run::table
                .filter(job_run::id.eq_any(list))
                .select(JobRun::as_select())
                .prepared()
                .load(conn)?
        }))
    })
}

/// Takes over a run in doubt that an agent turned out to hold: running there, recorded as taken
/// by its process `instance` before it last said what it holds (sequence 0). Only if the claim
/// is still the one `claimed_ms` names, so one admin adopts it.
pub fn adopt(
    conn: &mut AnyConnection,
    id: RunId,
    claimed_ms: i64,
    address: &str,
    instance: &str,
    message: &str,
) -> Result<bool, Error> {
    Ok(prepared::update(
        job_run::table,
        (
            job_run::status.eq(RunStatus::Running),
            job_run::agent_address.eq(address),
            job_run::trigger_msg.eq(message),
            job_run::agent_instance.eq(instance),
            job_run::agent_seq.eq(0_i64),
        ),
        job_run::id
            .eq(id)
            .and(job_run::status.eq(RunStatus::Pending))
            .and(job_run::triggered_ms.eq(claimed_ms)),
    )
    .execute(conn)?
        > 0)
}

/// Puts a run an agent handed back unstarted back to pending and unclaimed, forgetting where it
/// went, so the next dispatch sends it anew; only a run still pending or running.
pub fn requeue(conn: &mut AnyConnection, id: RunId, message: &str) -> Result<bool, Error> {
    Ok(prepared::update(
        job_run::table,
        (
            job_run::status.eq(RunStatus::Pending),
            job_run::triggered_ms.eq(None::<i64>),
            job_run::agent_address.eq(None::<String>),
            job_run::agent_instance.eq(None::<String>),
            job_run::agent_seq.eq(None::<i64>),
            job_run::trigger_msg.eq(message),
        ),
        job_run::id.eq(id).and(
            job_run::status
                .eq(RunStatus::Pending)
                .or(job_run::status.eq(RunStatus::Running)),
        ),
    )
    .execute(conn)?
        > 0)
}

/// Gives up a claim nobody acted on (no agent holds the run), so the run can be sent again
/// under a new claim; only if the claim is still the one `claimed_ms` names.
pub fn release_claim(conn: &mut AnyConnection, id: RunId, claimed_ms: i64) -> Result<bool, Error> {
    Ok(prepared::update(
        job_run::table,
        job_run::triggered_ms.eq(None::<i64>),
        job_run::id
            .eq(id)
            .and(job_run::status.eq(RunStatus::Pending))
            .and(job_run::triggered_ms.eq(claimed_ms)),
    )
    .execute(conn)?
        > 0)
}

/// The runs running on any of `addresses` (a batch of heartbeats), by id: one query by the
/// `(agent_address, status)` index instead of one per agent.
pub fn running_at(conn: &mut AnyConnection, addresses: &[&str]) -> Result<Vec<RunningRun>, Error> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    Ok(db_run!(conn: {
        job_run::table
            .filter(job_run::agent_address.eq_any(addresses))
            .filter(job_run::status.eq(RunStatus::Running))
            .order(job_run::id.asc())
            .select(RunningRun::as_select())
            .load(conn)?
    }))
}

/// Runs stored as running on any of `addresses` in the groups `visible` (all when `None`), at
/// most `limit` of them, oldest first: what an agents page shows beside its agents.
pub fn running_on_addresses(
    conn: &mut AnyConnection,
    addresses: &[String],
    visible: Option<&[GroupId]>,
    limit: i64,
) -> Result<Vec<JobRun>, Error> {
    let mut runs = Vec::new();
    for chunk in addresses.chunks(super::IN_LIST_MAX) {
        let mut query = job_run::table
            .filter(job_run::agent_address.eq_any(chunk))
            .filter(job_run::status.eq(RunStatus::Running))
            .into_boxed();
        if let Some(groups) = visible {
            query = query.filter(job_run::group_id.eq_any(groups.to_vec()));
        }
        runs.extend(
            query
                .order(job_run::id.asc())
                .limit(limit)
                .select(JobRun::as_select())
                .load(conn)?,
        );
    }
    runs.truncate(usize::try_from(limit).unwrap_or(0));
    Ok(runs)
}

/// Names the agent of a run whose agent was never stored; a run whose agent is known keeps it.
pub fn set_agent_if_unknown(
    conn: &mut AnyConnection,
    id: RunId,
    address: &str,
) -> Result<(), Error> {
    prepared::update(
        job_run::table,
        job_run::agent_address.eq(address),
        job_run::id.eq(id).and(job_run::agent_address.is_null()),
    )
    .execute(conn)?;
    Ok(())
}

/// Takes a pending run for dispatch: only one admin (and one task) wins, so a run is sent once
/// even when the recovery monitor of another admin finds it at the same moment.
pub fn claim(conn: &mut AnyConnection, id: RunId, now_ms: i64) -> Result<bool, Error> {
    let taken = db_run!(conn: {
        prepared::update(
            job_run::table,
            job_run::triggered_ms.eq(now_ms),
            job_run::id
                .eq(id)
                .and(job_run::status.eq(RunStatus::Pending))
                .and(job_run::triggered_ms.is_null()),
        )
        .execute(conn)?
    });
    Ok(taken > 0)
}

/// Takes every run of `ids` for dispatch as [`claim`] does, or none of them: in a savepoint
/// that is rolled back unless each was pending and unclaimed. Returns whether they were taken;
/// when not, the caller claims them one by one to learn which are still free.
pub fn claim_all(conn: &mut AnyConnection, ids: &[RunId], now_ms: i64) -> Result<bool, Error> {
    super::all_or_none(conn, ids.len(), |conn| {
        let mut taken = 0;
        for chunk in ids.chunks(super::IN_LIST_MAX) {
            taken += db_run!(conn: {
                diesel::update(
                    job_run::table
                        .filter(job_run::id.eq_any(chunk))
                        .filter(job_run::status.eq(RunStatus::Pending))
                        .filter(job_run::triggered_ms.is_null()),
                )
                .set(job_run::triggered_ms.eq(now_ms))
                .execute(conn)?
            });
        }
        Ok(taken)
    })
}

/// Ends a run that is not final yet with a status the admin decided (skipped, lost, timed out,
/// killed); returns whether this call ended it, so follow-ups (retries) happen once.
pub fn finish(
    conn: &mut AnyConnection,
    id: RunId,
    status: &str,
    message: &str,
    now_ms: i64,
) -> Result<bool, Error> {
    Ok(prepared::update(
        job_run::table,
        (
            job_run::status.eq(status),
            job_run::handle_msg.eq(message),
            job_run::finished_ms.eq(now_ms),
        ),
        job_run::id.eq(id).and(
            job_run::status
                .eq(RunStatus::Pending)
                .or(job_run::status.eq(RunStatus::Running)),
        ),
    )
    .execute(conn)?
        > 0)
}

/// Marks a skipped run with why; like [`finish`] but the reason is the trigger's.
pub fn skip(conn: &mut AnyConnection, id: RunId, reason: &str, now_ms: i64) -> Result<bool, Error> {
    Ok(prepared::update(
        job_run::table,
        (
            job_run::status.eq(RunStatus::Skipped),
            job_run::trigger_msg.eq(reason),
            job_run::finished_ms.eq(now_ms),
        ),
        job_run::id
            .eq(id)
            .and(job_run::status.eq(RunStatus::Pending)),
    )
    .execute(conn)?
        > 0)
}

/// Runs of `job_id` that stand before run `run_id`: running on an agent, or taken for dispatch
/// earlier (a lower id). Counting only earlier claims lets the first of two simultaneous fires
/// win under `forbid` instead of both skipping.
pub fn in_flight_before(
    conn: &mut AnyConnection,
    job_id: JobId,
    run_id: RunId,
) -> Result<Vec<JobRun>, Error> {
    Ok(job_run::table
        .filter(job_run::job_id.eq(job_id))
        .filter(job_run::id.ne(run_id))
        .filter(
            job_run::status.eq(RunStatus::Running).or(job_run::status
                .eq(RunStatus::Pending)
                .and(job_run::triggered_ms.is_not_null())
                .and(job_run::id.lt(run_id))),
        )
        .select(JobRun::as_select())
        .load(conn)?)
}

/// Runs an agent has accepted and not reported on, oldest first.
pub fn running(conn: &mut AnyConnection, limit: i64) -> Result<Vec<RunningRun>, Error> {
    Ok(job_run::table
        .filter(job_run::status.eq(RunStatus::Running))
        .order(job_run::id.asc())
        .limit(limit)
        .select(RunningRun::as_select())
        .load(conn)?)
}

/// Runs taken for dispatch before `before_ms` whose trigger outcome was never stored.
pub fn stale_claims(
    conn: &mut AnyConnection,
    before_ms: i64,
    limit: i64,
) -> Result<Vec<JobRun>, Error> {
    Ok(job_run::table
        .filter(job_run::status.eq(RunStatus::Pending))
        .filter(job_run::triggered_ms.lt(before_ms))
        .order(job_run::triggered_ms.asc())
        .limit(limit)
        .select(JobRun::as_select())
        .load(conn)?)
}

pub fn count_in_flight(conn: &mut AnyConnection) -> Result<i64, Error> {
    Ok(job_run::table
        .filter(job_run::status.eq_any([RunStatus::Pending, RunStatus::Running]))
        .filter(job_run::triggered_ms.is_not_null())
        .count()
        .get_result(conn)?)
}

/// Pending runs nobody claimed that were due at or before `due_before_ms` (their admin died, or
/// a retry's time came), oldest first.
pub fn unclaimed_due(
    conn: &mut AnyConnection,
    due_before_ms: i64,
    limit: i64,
) -> Result<Vec<JobRun>, Error> {
    Ok(job_run::table
        .filter(job_run::status.eq(RunStatus::Pending))
        .filter(job_run::triggered_ms.is_null())
        .filter(job_run::scheduled_ms.le(due_before_ms))
        .order(job_run::scheduled_ms.asc())
        .limit(limit)
        .select(JobRun::as_select())
        .load(conn)?)
}

/// Due pending runs nobody claimed, of `group_id`'s jobs routed by one of `routings`, oldest
/// first: what an agent of the group may take (pull). Jobs that only some agents may run
/// (required labels; `least_loaded` with a memory limit) are left to the timer's push, which
/// picks among the agents that qualify: a taker that does not would claim and fail them.
pub fn pullable(
    conn: &mut AnyConnection,
    group_id: GroupId,
    now_ms: i64,
    routings: &[Routing],
    limit: i64,
) -> Result<Vec<RunId>, Error> {
    use super::schema::job;
    let jobs = job::table
        .filter(job::group_id.eq(group_id))
        .filter(job::routing.eq_any(routings))
        .filter(job::agent_labels.eq(""))
        .filter(
            job::routing
                .ne(Routing::LeastLoaded)
                .or(job::limit_memory_mb.is_null()),
        )
        .select(job::id);
    Ok(job_run::table
        .filter(job_run::group_id.eq(group_id))
        .filter(job_run::status.eq(RunStatus::Pending))
        .filter(job_run::triggered_ms.is_null())
        .filter(job_run::scheduled_ms.le(now_ms))
        .filter(job_run::job_id.eq_any(jobs))
        .order((job_run::scheduled_ms.asc(), job_run::id.asc()))
        .limit(limit)
        .select(job_run::id)
        .load(conn)?)
}

/// A sharding broadcast learns its shard total when it is sent.
pub fn set_shard_total(conn: &mut AnyConnection, id: RunId, total: i32) -> Result<(), Error> {
    prepared::update(
        job_run::table,
        job_run::shard_total.eq(total),
        job_run::id.eq(id),
    )
    .execute(conn)?;
    Ok(())
}

/// `(job_id, status, count)` of runs created in `[from_ms, to_ms)`.
pub fn outcome_counts(
    conn: &mut AnyConnection,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<(JobId, RunStatus, i64)>, Error> {
    use diesel::dsl::count_star;
    Ok(job_run::table
        .filter(job_run::created_ms.ge(from_ms))
        .filter(job_run::created_ms.lt(to_ms))
        .group_by((job_run::job_id, job_run::status))
        .select((job_run::job_id, job_run::status, count_star()))
        .load(conn)?)
}

/// Deletes up to `limit` finished runs created before `before_ms`; returns how many.
pub fn delete_finished_before(
    conn: &mut AnyConnection,
    before_ms: i64,
    limit: i64,
) -> Result<usize, Error> {
    let ids: Vec<RunId> = job_run::table
        .filter(job_run::created_ms.lt(before_ms))
        .filter(job_run::status.ne_all([RunStatus::Pending, RunStatus::Running]))
        .select(job_run::id)
        .limit(limit)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(job_run::table.filter(job_run::id.eq_any(ids))).execute(conn)?)
}

/// What the log keeper needs of a run: whether it ended, where, and its log file's date.
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct RunEnd {
    pub id: RunId,
    pub status: RunStatus,
    pub agent_address: Option<String>,
    pub created_ms: i64,
}

/// Runs from id `from` on, oldest first, at most `limit`.
///
/// # Errors
/// Database errors.
pub fn ends_from(conn: &mut AnyConnection, from: RunId, limit: i64) -> Result<Vec<RunEnd>, Error> {
    Ok(job_run::table
        .filter(job_run::id.ge(from))
        .order(job_run::id.asc())
        .select((
            job_run::id,
            job_run::status,
            job_run::agent_address,
            job_run::created_ms,
        ))
        .limit(limit)
        .load(conn)?)
}

/// The runs of `ids` that still exist.
///
/// # Errors
/// Database errors.
pub fn ends_of(conn: &mut AnyConnection, ids: &[RunId]) -> Result<Vec<RunEnd>, Error> {
    super::read_in_lists(conn, ids, |conn, list| {
        Ok(db_run!(conn: {
            job_run::table
                .filter(job_run::id.eq_any(list))
                .select((
                    job_run::id,
                    job_run::status,
                    job_run::agent_address,
                    job_run::created_ms,
                ))
                .prepared()
                .load::<RunEnd>(conn)?
        }))
    })
}

/// The query of `first_since`. `MIN(id + 0)`, not `MIN(id)`: for the smallest rowid SQLite
/// walks the table in rowid order from its oldest run until a row matches (plan `SEARCH
/// job_run`), past every retained run, 0.2 to 0.8 s with two million of them; for an expression
/// it reads the window's entries of the created index (`SEARCH job_run USING COVERING INDEX
/// ix_job_run_created`), milliseconds.
/// (A macro: the query's type is long to spell and a test reads its plan.)
macro_rules! first_since_query {
    ($since_ms:expr) => {
        job_run::table
            .filter(job_run::created_ms.ge($since_ms))
            .select(diesel::dsl::min(job_run::id + 0_i64))
    };
}

/// The first run created at or after `since_ms` (by the created index), or the next id to come.
///
/// # Errors
/// Database errors.
pub fn first_since(conn: &mut AnyConnection, since_ms: i64) -> Result<RunId, Error> {
    let first: Option<RunId> = first_since_query!(since_ms).first(conn)?;
    if let Some(id) = first {
        return Ok(id);
    }
    let last: Option<RunId> = job_run::table
        .select(diesel::dsl::max(job_run::id))
        .first(conn)?;
    Ok(RunId(last.map_or(1, |id| id.0 + 1)))
}

/// Deletes finished runs of `job_id` beyond its newest `keep` succeeded ones (`succeeded`) or
/// its newest `keep` that did not succeed, at most `limit` at a time: a job's history limit.
/// Only runs created before `before_ms` go, so the days the daily report still counts (whole,
/// each hour) keep every run it counts.
///
/// # Errors
/// Database errors.
pub fn delete_beyond_newest(
    conn: &mut AnyConnection,
    job_id: JobId,
    succeeded: bool,
    keep: i64,
    before_ms: i64,
    limit: i64,
) -> Result<usize, Error> {
    const UNSUCCESSFUL: [RunStatus; 5] = [
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Killed,
        RunStatus::Lost,
        RunStatus::Skipped,
    ];
    let statuses: Vec<RunStatus> = if succeeded {
        vec![RunStatus::Succeeded]
    } else {
        UNSUCCESSFUL.to_vec()
    };
    // The newest run past the ones kept: it and everything older of its kind may go.
    let first_beyond: Option<RunId> = job_run::table
        .filter(job_run::job_id.eq(job_id))
        .filter(job_run::status.eq_any(statuses.clone()))
        .select(job_run::id)
        .order(job_run::id.desc())
        .offset(keep)
        .first(conn)
        .optional()?;
    let Some(first_beyond) = first_beyond else {
        return Ok(0);
    };
    let ids: Vec<RunId> = job_run::table
        .filter(job_run::job_id.eq(job_id))
        .filter(job_run::status.eq_any(statuses))
        .filter(job_run::id.le(first_beyond))
        .filter(job_run::created_ms.lt(before_ms))
        .select(job_run::id)
        .order(job_run::id.asc())
        .limit(limit)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(job_run::table.filter(job_run::id.eq_any(ids))).execute(conn)?)
}

/// Ended runs created since `since_ms` that reached an agent and whose log no admin has a row
/// for, oldest first: what the log keeper's cursor may have passed by.
///
/// # Errors
/// Database errors.
pub fn ended_without_kept_log(
    conn: &mut AnyConnection,
    since_ms: i64,
    limit: i64,
) -> Result<Vec<RunEnd>, Error> {
    use super::schema::run_log;
    // From the window's first id on: ordered by id and filtered on `created_ms` alone, SQLite
    // walks the table from its oldest run (every run retained) until it finds the window.
    let first = first_since(conn, since_ms)?;
    Ok(job_run::table
        .filter(job_run::id.ge(first))
        .filter(job_run::created_ms.ge(since_ms))
        .filter(job_run::status.ne_all([RunStatus::Pending, RunStatus::Running]))
        .filter(job_run::agent_address.is_not_null())
        .filter(diesel::dsl::not(diesel::dsl::exists(
            run_log::table.filter(run_log::run_id.eq(job_run::id)),
        )))
        .order(job_run::id.asc())
        .select((
            job_run::id,
            job_run::status,
            job_run::agent_address,
            job_run::created_ms,
        ))
        .limit(limit)
        .load(conn)?)
}

/// A run's result as reported by its agent.
#[derive(Debug, Clone, AsChangeset)]
#[diesel(table_name = job_run)]
pub struct RunResult {
    pub status: RunStatus,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub handle_code: Option<i32>,
    pub handle_msg: Option<String>,
    pub exit_code: Option<i32>,
    pub term_signal: Option<i32>,
    pub cpu_ms: Option<i64>,
    pub max_rss_kb: Option<i64>,
    pub oom_killed: Option<bool>,
    pub limits_mode: Option<String>,
    pub outputs: Option<String>,
    /// The agent's acceptance of the trigger when it was not stored yet (the recorder held it
    /// back, `dispatch::answer::HeldAcceptances`): stored with the result, in the same write.
    #[diesel(embed)]
    pub acceptance: Option<Acceptance>,
}

/// An agent's acceptance of a trigger, as the result that follows it stores it.
#[derive(Debug, Clone, AsChangeset)]
#[diesel(table_name = job_run)]
pub struct Acceptance {
    pub agent_address: Option<String>,
    pub trigger_msg: Option<String>,
    pub agent_instance: Option<String>,
    pub agent_seq: Option<i64>,
}

impl RunResult {
    /// `run` as [`record_result`] leaves it: the fields the result has, replaced.
    pub fn applied_to(&self, run: &JobRun) -> JobRun {
        let mut run = run.clone();
        run.status = self.status;
        macro_rules! some {
            ($($field:ident),*) => {
                $(if self.$field.is_some() {
                    run.$field.clone_from(&self.$field);
                })*
            };
        }
        some!(
            started_ms,
            finished_ms,
            handle_code,
            handle_msg,
            exit_code,
            term_signal,
            cpu_ms,
            max_rss_kb,
            oom_killed,
            limits_mode,
            outputs
        );
        if let Some(acceptance) = &self.acceptance {
            let Acceptance {
                agent_address,
                trigger_msg,
                agent_instance,
                agent_seq,
            } = acceptance.clone();
            run.agent_address = agent_address.or(run.agent_address);
            run.trigger_msg = trigger_msg.or(run.trigger_msg);
            run.agent_instance = agent_instance.or(run.agent_instance);
            run.agent_seq = agent_seq.or(run.agent_seq);
        }
        run
    }
}

/// Stores a result unless the run already has a final one: a repeated or late report changes
/// nothing. Returns whether this call stored it.
pub fn record_result(
    conn: &mut AnyConnection,
    id: RunId,
    result: &RunResult,
) -> Result<bool, Error> {
    let n = db_run!(conn: {
        prepared::update(
            job_run::table,
            result,
            job_run::id.eq(id).and(
                job_run::status
                    .eq(RunStatus::Pending)
                    .or(job_run::status.eq(RunStatus::Running)),
            ),
        )
        .execute(conn)?
    });
    Ok(n > 0)
}

/// Stores every result of `results` as [`record_result`] does, or none of them: in a savepoint
/// rolled back unless each run was still pending or running. Returns whether they were stored;
/// when not, the caller stores them one by one to learn which runs already had a final result.
/// A few dozen results per statement instead of one.
pub fn record_results_all(
    conn: &mut AnyConnection,
    results: &[(RunId, &RunResult)],
) -> Result<bool, Error> {
    super::all_or_none(conn, results.len(), |conn| {
        let mut stored = 0;
        for chunk in results.chunks(40) {
            stored += results_update(chunk).execute(conn)?;
        }
        Ok(stored)
    })
}

fn accepted(result: &RunResult) -> Option<&Acceptance> {
    result.acceptance.as_ref()
}

fn results_update<'a>(chunk: &[(RunId, &'a RunResult)]) -> RowsUpdate<'a> {
    let values = |of: &dyn Fn(&'a RunResult) -> Value<'a>| -> Vec<Value<'a>> {
        chunk.iter().map(|(_, result)| of(result)).collect()
    };
    let kept = Set::UnlessNull;
    RowsUpdate::new("job_run", chunk.iter().map(|(id, _)| id.0).collect())
        .column(
            "status",
            Set::Always,
            values(&|r| Value::Text(Some(r.status.as_str()))),
        )
        .column("started_ms", kept, values(&|r| Value::BigInt(r.started_ms)))
        .column(
            "finished_ms",
            kept,
            values(&|r| Value::BigInt(r.finished_ms)),
        )
        .column("handle_code", kept, values(&|r| Value::Int(r.handle_code)))
        .column(
            "handle_msg",
            kept,
            values(&|r| Value::Text(r.handle_msg.as_deref())),
        )
        .column("exit_code", kept, values(&|r| Value::Int(r.exit_code)))
        .column("term_signal", kept, values(&|r| Value::Int(r.term_signal)))
        .column("cpu_ms", kept, values(&|r| Value::BigInt(r.cpu_ms)))
        .column("max_rss_kb", kept, values(&|r| Value::BigInt(r.max_rss_kb)))
        .column("oom_killed", kept, values(&|r| Value::Bool(r.oom_killed)))
        .column(
            "limits_mode",
            kept,
            values(&|r| Value::Text(r.limits_mode.as_deref())),
        )
        .column(
            "outputs",
            kept,
            values(&|r| Value::Text(r.outputs.as_deref())),
        )
        .column(
            "agent_address",
            kept,
            values(&|r| Value::Text(accepted(r).and_then(|a| a.agent_address.as_deref()))),
        )
        .column(
            "trigger_msg",
            kept,
            values(&|r| Value::Text(accepted(r).and_then(|a| a.trigger_msg.as_deref()))),
        )
        .column(
            "agent_instance",
            kept,
            values(&|r| Value::Text(accepted(r).and_then(|a| a.agent_instance.as_deref()))),
        )
        .column(
            "agent_seq",
            kept,
            values(&|r| Value::BigInt(accepted(r).and_then(|a| a.agent_seq))),
        )
        .where_text_in(
            "status",
            vec![RunStatus::Pending.as_str(), RunStatus::Running.as_str()],
        )
}

/// Runs of one job, group (the run's), status and duration bucket (`domain::duration_histogram`;
/// `-1` for runs that did not both start and finish), as [`report_counts`] returns them.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct ReportCount {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub job_id: JobId,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub group_id: GroupId,
    #[diesel(sql_type = Text)]
    pub status: RunStatus,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub bucket: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub runs: i64,
}

/// What the report monitor counts for a day: runs created in `[from_ms, to_ms)` per job, group,
/// status and duration bucket; with `settled_through`, only the final runs up to that id (what
/// `scheduler::report_tally` keeps as settled).
///
/// The bucket is computed by the database (a `CASE` tree over the fixed bucket bounds, seven
/// comparisons deep, plain SQL on both backends), so a day of millions of runs comes back as at
/// most jobs × statuses × buckets rows instead of a row per run.
///
/// # Errors
/// Database errors.
pub fn report_counts(
    conn: &mut AnyConnection,
    from_ms: i64,
    to_ms: i64,
    settled_through: Option<RunId>,
) -> Result<Vec<ReportCount>, Error> {
    use diesel::sql_types::BigInt;
    // Raw SQL: diesel's DSL cannot group by an SQL expression next to columns.
    let bucket = duration_bucket_sql();
    let settled = if settled_through.is_some() {
        "AND id <= ? AND status NOT IN ('pending', 'running') "
    } else {
        ""
    };
    let text = format!(
        "SELECT job_id, group_id, status, {bucket} AS bucket, COUNT(*) AS runs FROM job_run \
         WHERE created_ms >= ? AND created_ms < ? {settled}\
         GROUP BY job_id, group_id, status, {bucket}"
    );
    Ok(db_run!(conn: {
        let query = diesel::sql_query(&text)
            .bind::<BigInt, _>(from_ms)
            .bind::<BigInt, _>(to_ms);
        match settled_through {
            Some(through) => query.bind::<BigInt, _>(through).load(conn)?,
            None => query.load(conn)?,
        }
    }))
}

/// What the report monitor needs of one run to count it one by one.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = job_run)]
pub struct ReportRun {
    pub id: RunId,
    pub job_id: JobId,
    pub group_id: GroupId,
    pub status: RunStatus,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

/// The highest run id this connection sees (committed, or its own), if any.
///
/// # Errors
/// Database errors.
pub fn max_id(conn: &mut AnyConnection) -> Result<Option<RunId>, Error> {
    use diesel::dsl::max;
    Ok(db_run!(conn: {
        job_run::table.select(max(job_run::id)).first(conn)?
    }))
}

/// Every run with an id above `after`: the ones the report has not settled. By the primary key
/// only; a filter on `created_ms` could lead SQLite to the created index and two days of runs.
///
/// # Errors
/// Database errors.
pub fn report_runs_after(conn: &mut AnyConnection, after: RunId) -> Result<Vec<ReportRun>, Error> {
    Ok(db_run!(conn: {
        job_run::table
            .filter(job_run::id.gt(after))
            .select(ReportRun::as_select())
            .load(conn)?
    }))
}

/// The runs of `ids` that exist, as the report counts them.
///
/// # Errors
/// Database errors.
pub fn report_runs_of(conn: &mut AnyConnection, ids: &[RunId]) -> Result<Vec<ReportRun>, Error> {
    super::read_in_lists(conn, ids, |conn, list| {
        Ok(db_run!(conn: {
            job_run::table
                .filter(job_run::id.eq_any(list))
                .select(ReportRun::as_select())
                .prepared()
                .load(conn)?
        }))
    })
}

/// Ids up to `through` of runs created in `[from_ms, to_ms)` and still pending or running: the
/// report re-reads them until they end (by the status index).
///
/// # Errors
/// Database errors.
pub fn in_flight_through(
    conn: &mut AnyConnection,
    from_ms: i64,
    to_ms: i64,
    through: RunId,
) -> Result<Vec<RunId>, Error> {
    Ok(job_run::table
        .filter(job_run::status.eq_any([RunStatus::Pending, RunStatus::Running]))
        .filter(job_run::id.le(through))
        .filter(job_run::created_ms.ge(from_ms))
        .filter(job_run::created_ms.lt(to_ms))
        .select(job_run::id)
        .load(conn)?)
}

/// The SQL of a run's duration bucket (see [`report_counts`]).
fn duration_bucket_sql() -> String {
    use crate::domain::duration_histogram::{BUCKETS, lower_bound};
    use std::fmt::Write as _;
    /// The bucket in `[low, high)` of a duration known to be below `lower_bound(high)`.
    fn tree(low: usize, high: usize, out: &mut String) {
        if high - low == 1 {
            let _ = write!(out, "{low}");
            return;
        }
        let mid = low + (high - low) / 2;
        let _ = write!(
            out,
            "CASE WHEN finished_ms - started_ms < {} THEN ",
            lower_bound(mid)
        );
        tree(low, mid, out);
        out.push_str(" ELSE ");
        tree(mid, high, out);
        out.push_str(" END");
    }
    let mut text =
        String::from("CAST(CASE WHEN started_ms IS NULL OR finished_ms IS NULL THEN -1 ELSE ");
    tree(0, BUCKETS, &mut text);
    text.push_str(" END AS SIGNED)");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    fn run(job_id: JobId, slot: Option<i64>, shard: i32) -> NewJobRun {
        NewJobRun {
            job_id,
            group_id: GroupId(1),
            first_run_id: None,
            attempt: 1,
            trigger_kind: TriggerKind::Schedule,
            fire_slot_ms: slot,
            scheduled_ms: slot.unwrap_or(5),
            status: RunStatus::Pending,
            params: String::new(),
            shard_index: shard,
            shard_total: 2,
            created_ms: 1,
            workflow_node_id: None,
            node_attempt: None,
            timeout_s: None,
            env: None,
        }
    }

    storage_test!(runs_only_some_agents_may_run_are_left_to_the_push, |conn| {
        use crate::db::job::tests::{fields, insert_group, write};
        let g = insert_group(conn, "pull-g");
        let mut job = |name: &str, change: &dyn Fn(&mut crate::db::job::JobFields)| {
            let mut f = fields(g, name);
            f.routing = Routing::LeastLoaded;
            f.limit_memory_mb = None;
            change(&mut f);
            crate::db::job::insert(
                conn,
                &write(g),
                &crate::db::job::NewJob {
                    fields: f,
                    created_ms: 1,
                },
            )
            .unwrap()
        };
        let plain = job("plain", &|_| {});
        let labelled = job("labelled", &|f| f.agent_labels = "zone=a".into());
        let sized = job("sized", &|f| f.limit_memory_mb = Some(256));
        let sized_rr = job("sized-rr", &|f| {
            f.limit_memory_mb = Some(256);
            f.routing = Routing::RoundRobin;
        });
        let mut runs = Vec::new();
        for id in [plain, labelled, sized, sized_rr] {
            runs.push(
                insert(
                    conn,
                    &NewJobRun {
                        group_id: g,
                        ..run(id, Some(1_000), 0)
                    },
                )
                .unwrap(),
            );
        }
        let taken = pullable(
            conn,
            g,
            10_000,
            &[Routing::LeastLoaded, Routing::RoundRobin],
            10,
        )
        .unwrap();
        assert_eq!(taken, [runs[0], runs[3]]);
    });

    storage_test!(second_insert_of_same_slot_conflicts, |conn| {
        let first = insert(conn, &run(JobId(7), Some(60_000), 0)).unwrap();
        assert!(matches!(
            insert(conn, &run(JobId(7), Some(60_000), 0)),
            Err(Error::Conflict { .. })
        ));
        // Other shards of the slot, other slots and manual runs (no slot) are all distinct.
        insert(conn, &run(JobId(7), Some(60_000), 1)).unwrap();
        insert(conn, &run(JobId(7), Some(120_000), 0)).unwrap();
        insert(conn, &run(JobId(7), None, 0)).unwrap();
        insert(conn, &run(JobId(7), None, 0)).unwrap();
        assert_eq!(get(conn, first).unwrap().fire_slot_ms, Some(60_000));
        let all = RunFilter {
            job_id: Some(JobId(7)),
            ..Default::default()
        };
        assert_eq!(count(conn, &all).unwrap(), 5);
        let page = list(conn, &all, Page::new(Some(2), Some(0)).unwrap()).unwrap();
        assert_eq!(page.len(), 2);
        assert!(page[0].id > page[1].id, "newest first");
        let ranged = RunFilter {
            job_id: Some(JobId(7)),
            from_ms: Some(100_000),
            ..Default::default()
        };
        assert_eq!(count(conn, &ranged).unwrap(), 1);
        assert!(matches!(get(conn, RunId(9999)), Err(Error::NotFound(_))));
    });

    storage_test!(a_pass_s_fires_get_their_own_ids_in_row_order, |conn| {
        // Runs already there, so that the new ids start past 1.
        insert(conn, &run(JobId(3), None, 0)).unwrap();
        insert(conn, &run(JobId(3), Some(1_000), 1)).unwrap();
        let fires = |slot: i64| {
            [JobId(9), JobId(2), JobId(5), JobId(3)]
                .map(|job| run(job, Some(slot), 0))
                .to_vec()
        };
        // On MariaDB (lock mode 1 by default) the ids came from `LAST_INSERT_ID()`, not from
        // the read-back that `check` compares them with.
        #[cfg_attr(not(feature = "mysql"), allow(unused_variables))]
        let assert_derived = |conn: &mut AnyConnection, ids: &[RunId]| match conn {
            #[cfg(feature = "mysql")]
            AnyConnection::Mysql(c) => {
                assert_eq!(consecutive_ids(c, ids.len()).unwrap().as_deref(), Some(ids));
            }
            AnyConnection::Sqlite(_) => {}
        };
        let check = |conn: &mut AnyConnection, rows: &[NewJobRun], ids: &[RunId]| {
            assert_eq!(ids.len(), rows.len());
            for (row, id) in rows.iter().zip(ids) {
                let stored = get(conn, *id).unwrap();
                assert_eq!(
                    (stored.job_id, stored.fire_slot_ms),
                    (row.job_id, row.fire_slot_ms)
                );
            }
            // The path that reads the ids back by the unique key agrees.
            assert_eq!(read_back_fires(conn, rows).unwrap(), ids);
        };
        // The second pass on a server whose session hands values out 3 apart (as a
        // multi-primary setup does).
        #[cfg_attr(not(feature = "mysql"), allow(unused_variables))]
        let set_increment = |conn: &mut AnyConnection, increment: u32| {
            #[cfg(feature = "mysql")]
            if let AnyConnection::Mysql(c) = conn {
                diesel::connection::SimpleConnection::batch_execute(
                    c,
                    &format!("SET SESSION auto_increment_increment = {increment}"),
                )
                .unwrap();
            }
        };
        for (slot, increment) in [(1_000, 1), (2_000, 3)] {
            set_increment(conn, increment);
            let rows = fires(slot);
            let ids = insert_fires(conn, &rows).unwrap();
            assert_derived(conn, &ids);
            check(conn, &rows, &ids);
        }
        set_increment(conn, 1);

        // All or none: one slot already fired fails the pass and adds no run.
        let mut rows = fires(3_000);
        rows.push(run(JobId(9), Some(1_000), 0));
        let before = count(conn, &RunFilter::default()).unwrap();
        assert!(matches!(
            insert_fires(conn, &rows),
            Err(Error::Conflict { .. })
        ));
        assert_eq!(count(conn, &RunFilter::default()).unwrap(), before);
    });

    #[test]
    fn one_statement_s_ids_are_derived_only_where_the_server_promises_one_block() {
        let ids = |first, increment, mode, n| {
            ids_in_one_block(first, increment, mode, n)
                .map(|v| v.into_iter().map(|id| id.0).collect::<Vec<_>>())
        };
        assert_eq!(ids(41, 1, 1, 3), Some(vec![41, 42, 43]));
        assert_eq!(ids(41, 1, 0, 2), Some(vec![41, 42]));
        assert_eq!(ids(10, 3, 1, 3), Some(vec![10, 13, 16]));
        // Interleaved: values of concurrent statements may mix.
        assert_eq!(ids(41, 1, 2, 3), None);
        // No id generated, a nonsense increment, or ids past i64.
        assert_eq!(ids(0, 1, 1, 3), None);
        assert_eq!(ids(41, 0, 1, 3), None);
        assert_eq!(ids(i64::MAX - 1, 1, 1, 3), None);
    }

    storage_test!(
        batch_writes_are_all_or_nothing_and_store_what_single_ones_do,
        |conn| {
            let ids: Vec<RunId> = (0..3)
                .map(|_| insert(conn, &run(JobId(4), None, 0)).unwrap())
                .collect();
            // One of them taken by someone else: the batch takes none, so the caller can tell.
            assert!(claim(conn, ids[1], 50).unwrap());
            assert!(!claim_all(conn, &ids, 60).unwrap());
            let untouched = get_all(conn, &ids).unwrap();
            assert_eq!(
                untouched
                    .iter()
                    .filter(|r| r.triggered_ms == Some(60))
                    .count(),
                0,
                "the refused batch left no claim behind"
            );
            let free = [ids[0], ids[2]];
            assert!(claim_all(conn, &free, 70).unwrap());
            assert!(
                get_all(conn, &free)
                    .unwrap()
                    .iter()
                    .all(|r| r.triggered_ms == Some(70))
            );

            let answers: Vec<(RunId, TriggerAnswer<'_>)> = ids
                .iter()
                .enumerate()
                .map(|(i, &id)| {
                    (
                        id,
                        TriggerAnswer {
                            agent: Some(if i == 0 { "http://a:1/" } else { "http://b:2/" }),
                            accepted: true,
                            message: if i == 0 {
                                "accepted by a"
                            } else {
                                "accepted by b"
                            },
                            instance: (i != 2).then_some("inst"),
                            seq: Some(i64::try_from(i).unwrap() + 100),
                            claimed_ms: Some(if i == 1 { 50 } else { 70 }),
                        },
                    )
                })
                .collect();
            record_accepted_all(conn, &answers).unwrap();
            let sent = get_all(conn, &ids).unwrap();
            for (id, answer) in &answers {
                let row = sent.iter().find(|r| r.id == *id).unwrap();
                assert_eq!(row.status, RunStatus::Running);
                assert_eq!(row.agent_address.as_deref(), answer.agent);
                assert_eq!(row.trigger_msg.as_deref(), Some(answer.message));
                assert_eq!(row.agent_instance.as_deref(), answer.instance);
                assert_eq!(row.agent_seq, answer.seq);
            }

            let base = RunResult {
                status: RunStatus::Succeeded,
                started_ms: Some(80),
                finished_ms: Some(90),
                handle_code: Some(200),
                handle_msg: Some("exit code 0".into()),
                exit_code: Some(0),
                term_signal: None,
                cpu_ms: Some(3),
                max_rss_kb: Some(2048),
                oom_killed: Some(false),
                limits_mode: Some("none".into()),
                outputs: Some("K=v".into()),
                acceptance: None,
            };
            // A field the result leaves out keeps what the row has.
            let sparse = RunResult {
                status: RunStatus::Failed,
                started_ms: None,
                handle_msg: None,
                outputs: None,
                exit_code: Some(3),
                term_signal: Some(9),
                ..base.clone()
            };
            // The first run already has its final result: the batch stores none.
            assert!(record_result(conn, ids[0], &base).unwrap());
            let all: Vec<(RunId, &RunResult)> = vec![(ids[0], &base), (ids[1], &sparse)];
            assert!(!record_results_all(conn, &all).unwrap());
            assert_eq!(get(conn, ids[1]).unwrap().status, RunStatus::Running);
            record_trigger(
                conn,
                ids[1],
                &TriggerAnswer {
                    agent: Some("http://b:2/"),
                    accepted: true,
                    message: "m",
                    instance: None,
                    seq: None,
                    claimed_ms: Some(50),
                },
                95,
            )
            .unwrap();
            crate::db::prepared::update(
                job_run::table,
                (job_run::started_ms.eq(77), job_run::handle_msg.eq("kept")),
                job_run::id.eq(ids[1]),
            )
            .execute(conn)
            .unwrap();
            let rest: Vec<(RunId, &RunResult)> = vec![(ids[1], &sparse), (ids[2], &base)];
            assert!(record_results_all(conn, &rest).unwrap());
            let one = get(conn, ids[1]).unwrap();
            assert_eq!(
                (
                    one.status,
                    one.started_ms,
                    one.handle_msg.as_deref(),
                    one.exit_code,
                    one.term_signal,
                    one.finished_ms,
                    one.oom_killed
                ),
                (
                    RunStatus::Failed,
                    Some(77),
                    Some("kept"),
                    Some(3),
                    Some(9),
                    Some(90),
                    Some(false)
                )
            );
            let two = get(conn, ids[2]).unwrap();
            assert_eq!(
                two,
                base.applied_to(&sent.iter().find(|r| r.id == ids[2]).unwrap().clone())
            );
        }
    );

    storage_test!(a_result_stores_the_acceptance_held_back_with_it, |conn| {
        let ids: Vec<RunId> = (0..3)
            .map(|i| insert(conn, &run(JobId(5), Some(i), 0)).unwrap())
            .collect();
        assert!(claim_all(conn, &ids, 60).unwrap());
        let result = |i: i64| RunResult {
            handle_code: Some(200),
            exit_code: Some(0),
            acceptance: Some(Acceptance {
                agent_address: Some(format!("http://a{i}:1/")),
                trigger_msg: Some(format!("accepted by a{i}")),
                agent_instance: (i != 2).then(|| format!("inst-{i}")),
                agent_seq: Some(100 + i),
            }),
            ..crate::testing::run_result(RunStatus::Succeeded, Some(70 + i), Some(80 + i))
        };
        let results: Vec<RunResult> = (0..3).map(result).collect();
        let before = get_all(conn, &ids).unwrap();
        // One alone, two with the statement a batch of results takes on MySQL.
        assert!(record_result(conn, ids[0], &results[0]).unwrap());
        let rest: Vec<(RunId, &RunResult)> = vec![(ids[1], &results[1]), (ids[2], &results[2])];
        assert!(record_results_all(conn, &rest).unwrap());
        for (i, id) in ids.iter().enumerate() {
            let row = get(conn, *id).unwrap();
            let acceptance = results[i].acceptance.as_ref().unwrap();
            assert_eq!(
                (
                    row.status,
                    row.agent_address.as_deref(),
                    row.trigger_msg.as_deref(),
                    row.agent_instance.as_deref(),
                    row.agent_seq,
                ),
                (
                    RunStatus::Succeeded,
                    acceptance.agent_address.as_deref(),
                    acceptance.trigger_msg.as_deref(),
                    acceptance.agent_instance.as_deref(),
                    acceptance.agent_seq,
                ),
                "run {i}"
            );
            let was = before.iter().find(|r| r.id == *id).unwrap();
            assert_eq!(row, results[i].applied_to(was), "run {i}");
        }
    });

    /// A run created at `created_ms`, sent to an agent and `status` there (`None`: still running).
    fn on_agent(conn: &mut AnyConnection, created_ms: i64, status: Option<RunStatus>) -> RunId {
        let id = insert(
            conn,
            &NewJobRun {
                created_ms,
                ..run(JobId(3), None, 0)
            },
        )
        .unwrap();
        assert!(claim(conn, id, 5).unwrap());
        let answer = TriggerAnswer {
            agent: Some("http://a:1/"),
            accepted: true,
            message: "ok",
            instance: None,
            seq: None,
            claimed_ms: Some(5),
        };
        record_trigger(conn, id, &answer, 10).unwrap();
        if let Some(status) = status {
            let result = crate::testing::run_result(status, Some(11), Some(12));
            assert!(record_result(conn, id, &result).unwrap());
        }
        id
    }

    #[test]
    fn the_window_start_is_read_from_the_created_index() {
        #[derive(QueryableByName)]
        struct Step {
            #[diesel(sql_type = Text)]
            detail: String,
        }
        let db = crate::testing::TestDb::sqlite();
        let mut conn = db.conn();
        let text = diesel::debug_query::<diesel::sqlite::Sqlite, _>(&first_since_query!(5_i64))
            .to_string();
        let sql = text.split(" -- binds").next().unwrap().replace('?', "5");
        let plan: Vec<Step> = diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
            .load(&mut conn)
            .unwrap();
        assert!(
            plan.iter().any(|s| s.detail.starts_with(
                "SEARCH job_run USING COVERING INDEX ix_job_run_created (created_ms>"
            )),
            "{sql}: {:?}",
            plan.iter().map(|s| &s.detail).collect::<Vec<_>>()
        );
    }

    storage_test!(
        the_sweep_finds_the_windows_ended_runs_without_a_log,
        |conn| {
            // Ids do not follow creation times: the window's first id is not the oldest run's.
            let in_window = on_agent(conn, 5_000, Some(RunStatus::Succeeded));
            let before_window = on_agent(conn, 100, Some(RunStatus::Failed));
            let running = on_agent(conn, 6_000, None);
            let with_log = on_agent(conn, 6_500, Some(RunStatus::Succeeded));
            let never_sent = insert(
                conn,
                &NewJobRun {
                    created_ms: 6_600,
                    ..run(JobId(4), None, 0)
                },
            )
            .unwrap();
            finish(conn, never_sent, "failed", "no agent", 20).unwrap();
            let late = on_agent(conn, 7_000, Some(RunStatus::TimedOut));
            crate::db::run_log::insert_kept(conn, with_log, "hi", 2, false, 30).unwrap();
            assert_eq!(first_since(conn, 1_000).unwrap(), in_window);
            let found: Vec<RunId> = ended_without_kept_log(conn, 1_000, 10)
                .unwrap()
                .iter()
                .map(|end| end.id)
                .collect();
            assert_eq!(found, vec![in_window, late]);
            assert!(before_window < running);
            let limited: Vec<RunId> = ended_without_kept_log(conn, 1_000, 1)
                .unwrap()
                .iter()
                .map(|end| end.id)
                .collect();
            assert_eq!(limited, vec![in_window], "oldest first");
            // No run in the window: the next id to come, and nothing found.
            assert_eq!(first_since(conn, 8_000).unwrap(), RunId(late.0 + 1));
            assert!(ended_without_kept_log(conn, 8_000, 10).unwrap().is_empty());
        }
    );

    storage_test!(results_are_stored_once, |conn| {
        let id = insert(conn, &run(JobId(3), None, 0)).unwrap();
        assert!(claim(conn, id, 5).unwrap());
        record_trigger(
            conn,
            id,
            &TriggerAnswer {
                agent: Some("http://a:1/"),
                accepted: true,
                message: "ok",
                instance: Some("i1"),
                seq: Some(7),
                claimed_ms: Some(5),
            },
            10,
        )
        .unwrap();
        let stored = get(conn, id).unwrap();
        assert_eq!(
            (stored.agent_instance.as_deref(), stored.agent_seq),
            (Some("i1"), Some(7))
        );
        assert_eq!(running_at(conn, &["http://a:1/"]).unwrap().len(), 1);
        let running = get(conn, id).unwrap();
        assert_eq!(
            (running.status.as_str(), running.agent_address.as_deref()),
            ("running", Some("http://a:1/"))
        );
        let result = RunResult {
            status: RunStatus::Succeeded,
            started_ms: Some(11),
            finished_ms: Some(20),
            handle_code: Some(200),
            handle_msg: Some("exit code 0".into()),
            exit_code: Some(0),
            term_signal: None,
            cpu_ms: Some(5),
            max_rss_kb: Some(1024),
            oom_killed: Some(false),
            limits_mode: Some("cgroup_v1".into()),
            outputs: None,
            acceptance: None,
        };
        assert!(record_result(conn, id, &result).unwrap());
        let late = RunResult {
            status: RunStatus::Failed,
            ..result.clone()
        };
        assert!(
            !record_result(conn, id, &late).unwrap(),
            "a final run keeps its result"
        );
        assert_eq!(get(conn, id).unwrap().status, RunStatus::Succeeded);
        assert!(!record_result(conn, RunId(424242), &result).unwrap());
        let failed = insert(conn, &run(JobId(3), None, 0)).unwrap();
        assert!(claim(conn, failed, 25).unwrap());
        record_trigger(
            conn,
            failed,
            &TriggerAnswer {
                agent: None,
                accepted: false,
                message: "no live agent",
                instance: None,
                seq: None,
                claimed_ms: Some(25),
            },
            30,
        )
        .unwrap();
        assert_eq!(
            (
                get(conn, failed).unwrap().status.as_str(),
                get(conn, failed).unwrap().finished_ms
            ),
            ("failed", Some(30))
        );
    });
    storage_test!(a_late_answer_to_an_earlier_claim_stores_nothing, |conn| {
        let accepted_by = |agent: &'static str, claimed_ms: i64| TriggerAnswer {
            agent: Some(agent),
            accepted: true,
            message: "accepted",
            instance: Some("i"),
            seq: Some(1),
            claimed_ms: Some(claimed_ms),
        };
        let handed_back = insert(conn, &run(JobId(5), None, 0)).unwrap();
        let other = insert(conn, &run(JobId(5), None, 0)).unwrap();
        assert!(claim_all(conn, &[handed_back, other], 10).unwrap());
        // The agent gave the run back before its acceptance was stored (another admin took the
        // hand-back, or this one stored it first): the late acceptance must not mark it running.
        assert!(requeue(conn, handed_back, "handed back").unwrap());
        record_trigger(conn, handed_back, &accepted_by("http://a:1/", 10), 11).unwrap();
        let row = get(conn, handed_back).unwrap();
        assert_eq!(
            (row.status, row.agent_address, row.triggered_ms),
            (RunStatus::Pending, None, None)
        );
        // Claimed anew: answers to the old claim, alone or in a batch, leave the new one alone.
        assert!(claim(conn, handed_back, 20).unwrap());
        let refused = TriggerAnswer {
            accepted: false,
            message: "refused",
            ..accepted_by("http://a:1/", 10)
        };
        assert!(!record_trigger(conn, handed_back, &refused, 21).unwrap());
        record_accepted_all(
            conn,
            &[
                (handed_back, accepted_by("http://a:1/", 10)),
                (other, accepted_by("http://b:2/", 10)),
            ],
        )
        .unwrap();
        let row = get(conn, handed_back).unwrap();
        assert_eq!(
            (row.status, row.agent_address, row.triggered_ms),
            (RunStatus::Pending, None, Some(20))
        );
        let row = get(conn, other).unwrap();
        assert_eq!(
            (row.status, row.agent_address.as_deref()),
            (RunStatus::Running, Some("http://b:2/"))
        );
        // The answer to the claim it went out under is stored.
        record_trigger(conn, handed_back, &accepted_by("http://c:3/", 20), 22).unwrap();
        let row = get(conn, handed_back).unwrap();
        assert_eq!(
            (row.status, row.agent_address.as_deref()),
            (RunStatus::Running, Some("http://c:3/"))
        );
    });

    storage_test!(
        a_batch_update_names_only_the_rows_that_differ_and_stores_each_rows_value,
        |conn| {
            let ids: Vec<RunId> = (0..7)
                .map(|i| insert(conn, &run(JobId(9), Some(i), 0)).unwrap())
                .collect();
            assert!(claim_all(conn, &ids, 70).unwrap());
            crate::db::prepared::update(
                job_run::table,
                (
                    job_run::handle_msg.eq("old"),
                    job_run::exit_code.eq(5),
                    job_run::term_signal.eq(9),
                ),
                job_run::job_id.eq(JobId(9)),
            )
            .execute(conn)
            .unwrap();
            let big = |v: &[Option<i64>]| v.iter().map(|&v| Value::BigInt(v)).collect();
            let int = |v: &[Option<i32>]| v.iter().map(|&v| Value::Int(v)).collect();
            let text = |v: &[Option<&'static str>]| v.iter().map(|&v| Value::Text(v)).collect();
            let n = RowsUpdate::new("job_run", ids.iter().map(|id| id.0).collect())
                .column(
                    "started_ms",
                    Set::Always,
                    big(&[
                        Some(10),
                        Some(10),
                        Some(10),
                        Some(20),
                        Some(10),
                        None,
                        Some(10),
                    ]),
                )
                .column(
                    "handle_msg",
                    Set::UnlessNull,
                    text(&[None, Some("a"), None, None, Some("b"), None, None]),
                )
                .column(
                    "exit_code",
                    Set::UnlessNull,
                    int(&[Some(1), Some(1), None, Some(1), Some(1), Some(2), Some(1)]),
                )
                .column("cpu_ms", Set::UnlessNull, big(&[Some(7); 7]))
                .column(
                    "limits_mode",
                    Set::Always,
                    text(&[None, None, Some("x"), None, None, None, None]),
                )
                .column("term_signal", Set::UnlessNull, int(&[None; 7]))
                .column("oom_killed", Set::Always, vec![Value::Bool(Some(true)); 7])
                .where_each_equals(
                    "triggered_ms",
                    big(&[
                        Some(70),
                        Some(70),
                        Some(70),
                        Some(70),
                        Some(70),
                        Some(70),
                        Some(60),
                    ]),
                )
                .execute(conn)
                .unwrap();
            assert_eq!(n, 6, "the row claimed at another time is left out");
            let row = |conn: &mut AnyConnection, i: usize| {
                let r = get(conn, ids[i]).unwrap();
                (
                    r.started_ms,
                    r.handle_msg,
                    r.exit_code,
                    r.term_signal,
                    r.oom_killed,
                )
            };
            let old = || Some("old".to_owned());
            assert_eq!(
                row(conn, 0),
                (Some(10), old(), Some(1), Some(9), Some(true))
            );
            assert_eq!(
                row(conn, 1),
                (Some(10), Some("a".into()), Some(1), Some(9), Some(true))
            );
            assert_eq!(
                row(conn, 2),
                (Some(10), old(), Some(5), Some(9), Some(true))
            );
            assert_eq!(
                row(conn, 3),
                (Some(20), old(), Some(1), Some(9), Some(true))
            );
            assert_eq!(
                row(conn, 4),
                (Some(10), Some("b".into()), Some(1), Some(9), Some(true))
            );
            assert_eq!(row(conn, 5), (None, old(), Some(2), Some(9), Some(true)));
            assert_eq!(row(conn, 6), (None, old(), Some(5), Some(9), None));

            let more = |conn: &mut AnyConnection, i: usize| {
                let r = get(conn, ids[i]).unwrap();
                (r.cpu_ms, r.limits_mode)
            };
            assert_eq!(more(conn, 0), (Some(7), None));
            assert_eq!(more(conn, 2), (Some(7), Some("x".into())));
            assert_eq!(more(conn, 6), (None, None));

            // A NULL claim matches nothing, as the most common value too.
            let n = RowsUpdate::new("job_run", ids.iter().map(|id| id.0).collect())
                .column("exit_code", Set::Always, int(&[Some(42); 7]))
                .where_each_equals(
                    "triggered_ms",
                    big(&[None, None, None, Some(70), None, None, None]),
                )
                .execute(conn)
                .unwrap();
            assert_eq!(n, 1);
            assert_eq!(row(conn, 3).2, Some(42));
            assert_eq!(row(conn, 0).2, Some(1));

            // Nothing to write: the statement still matches (and counts) its rows.
            let n = RowsUpdate::new("job_run", ids.iter().map(|id| id.0).collect())
                .column("exit_code", Set::UnlessNull, int(&[None; 7]))
                .where_each_equals("triggered_ms", big(&[Some(70); 7]))
                .execute(conn)
                .unwrap();
            assert_eq!(n, 7);
            assert_eq!(
                row(conn, 2),
                (Some(10), old(), Some(5), Some(9), Some(true))
            );
        }
    );
}
