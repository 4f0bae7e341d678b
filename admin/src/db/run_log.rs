//! `run_log`: a finished run's log as the admins keep it, so it stays readable after its agent
//! is gone or has rotated it (`scheduler::log_keeper` fills it, `service::runs::log` reads it).

use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as Diesel};

use super::schema::{job_run, run_log};
use super::{AnyConnection, Prepare};
use crate::domain::ids::RunId;
use crate::error::Error;

/// An admin is reading the log from the agent.
pub const FETCHING: &str = "fetching";
/// The log (or its head and tail) is in `content`.
pub const KEPT: &str = "kept";
/// The agent could not give it.
pub const MISSING: &str = "missing";

#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = run_log)]
pub struct RunLog {
    pub run_id: RunId,
    pub state: String,
    pub content: String,
    pub bytes: i64,
    pub truncated: bool,
    pub updated_ms: i64,
}

/// Claims the logs of `ids` for this admin: a row per run, in state `fetching`. Returns the ids
/// claimed; a run another admin (or an earlier pass) claimed already is left to it.
///
/// # Errors
/// Database errors.
pub fn claim(conn: &mut AnyConnection, ids: &[RunId], now_ms: i64) -> Result<Vec<RunId>, Error> {
    let mut claimed = Vec::with_capacity(ids.len());
    for id in ids {
        if insert_if_absent(conn, *id, FETCHING, "", 0, false, now_ms)? {
            claimed.push(*id);
        }
    }
    Ok(claimed)
}

/// Keeps the log of run `id` that came with its result: stored at once, no claim and no read
/// from the agent. Returns whether it was stored; a run that has a row already keeps it.
///
/// # Errors
/// Database errors.
pub fn insert_kept(
    conn: &mut AnyConnection,
    id: RunId,
    content: &str,
    bytes: i64,
    truncated: bool,
    now_ms: i64,
) -> Result<bool, Error> {
    insert_if_absent(conn, id, KEPT, content, bytes, truncated, now_ms)
}

/// A log kept with its run's result, as [`insert_kept_all`] stores it.
#[derive(Debug, Insertable)]
#[diesel(table_name = run_log)]
pub struct KeptLog<'a> {
    pub run_id: RunId,
    pub state: &'static str,
    pub content: &'a str,
    pub bytes: i64,
    pub truncated: bool,
    pub updated_ms: i64,
}

impl<'a> KeptLog<'a> {
    #[must_use]
    pub fn new(run_id: RunId, content: &'a str, bytes: i64, truncated: bool, now_ms: i64) -> Self {
        Self {
            run_id,
            state: KEPT,
            content,
            bytes,
            truncated,
            updated_ms: now_ms,
        }
    }
}

/// Keeps the logs that came with a batch of results, as [`insert_kept`] each: on MySQL with one
/// statement for the batch when none of the runs has a row yet (the usual case; a statement per
/// run was a round trip per run), run by run otherwise.
///
/// # Errors
/// Database errors.
pub fn insert_kept_all(conn: &mut AnyConnection, logs: &[KeptLog<'_>]) -> Result<(), Error> {
    if logs.len() > 1 && super::batch_writes_pay(conn) {
        let all = super::all_or_none(conn, logs.len(), |conn| {
            let inserted = crate::db_run!(conn: {
                diesel::insert_into(run_log::table).values(logs).execute(conn)
            });
            match inserted {
                // One of them has a row already: none is kept, and each goes alone below.
                Err(Diesel::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(0),
                other => other,
            }
        })?;
        if all {
            return Ok(());
        }
    }
    for log in logs {
        insert_kept(
            conn,
            log.run_id,
            log.content,
            log.bytes,
            log.truncated,
            log.updated_ms,
        )?;
    }
    Ok(())
}

/// A row for run `id` unless it has one (another admin's, an earlier pass's): whether inserted.
fn insert_if_absent(
    conn: &mut AnyConnection,
    id: RunId,
    state: &str,
    content: &str,
    bytes: i64,
    truncated: bool,
    now_ms: i64,
) -> Result<bool, Error> {
    let inserted = crate::db_run!(conn: {
        diesel::insert_into(run_log::table)
            .values((
                run_log::run_id.eq(id),
                run_log::state.eq(state),
                run_log::content.eq(content),
                run_log::bytes.eq(bytes),
                run_log::truncated.eq(truncated),
                run_log::updated_ms.eq(now_ms),
            ))
            .execute(conn)
    });
    match inserted {
        Ok(_) => Ok(true),
        // Neither SQLite nor MySQL aborts the transaction on a duplicate key.
        Err(Diesel::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The runs of `ids` that have a row (kept, missing or being read).
///
/// # Errors
/// Database errors.
pub fn having_row(conn: &mut AnyConnection, ids: &[RunId]) -> Result<Vec<RunId>, Error> {
    super::read_in_lists(conn, ids, |conn, list| {
        Ok(crate::db_run!(conn: {
            run_log::table
                .filter(run_log::run_id.eq_any(list))
                .select(run_log::run_id)
                .prepared()
                .load::<RunId>(conn)?
        }))
    })
}

/// Stores what was read for a claimed run.
///
/// # Errors
/// Database errors.
pub fn store(
    conn: &mut AnyConnection,
    id: RunId,
    state: &str,
    content: &str,
    bytes: i64,
    truncated: bool,
    now_ms: i64,
) -> Result<(), Error> {
    diesel::update(run_log::table.find(id))
        .set((
            run_log::state.eq(state),
            run_log::content.eq(content),
            run_log::bytes.eq(bytes),
            run_log::truncated.eq(truncated),
            run_log::updated_ms.eq(now_ms),
        ))
        .execute(conn)?;
    Ok(())
}

/// Releases the claims older than `before_ms` that were never stored (their admin died or
/// failed mid-read), so another pass claims them again. Returns how many.
///
/// # Errors
/// Database errors.
pub fn release_stale(conn: &mut AnyConnection, before_ms: i64) -> Result<usize, Error> {
    Ok(diesel::delete(
        run_log::table
            .filter(run_log::state.eq(FETCHING))
            .filter(run_log::updated_ms.lt(before_ms)),
    )
    .execute(conn)?)
}

/// The kept log of a run, if the admins have one.
///
/// # Errors
/// Database errors.
pub fn kept(conn: &mut AnyConnection, id: RunId) -> Result<Option<RunLog>, Error> {
    Ok(run_log::table
        .find(id)
        .filter(run_log::state.eq(KEPT))
        .select(RunLog::as_select())
        .first(conn)
        .optional()?)
}

/// Deletes up to `limit` kept logs whose run is gone (retention, history limits, deleted jobs).
///
/// # Errors
/// Database errors.
pub fn delete_orphans(conn: &mut AnyConnection, limit: i64) -> Result<usize, Error> {
    let orphans: Vec<RunId> = run_log::table
        .filter(diesel::dsl::not(diesel::dsl::exists(
            job_run::table.filter(job_run::id.eq(run_log::run_id)),
        )))
        .select(run_log::run_id)
        .limit(limit)
        .load(conn)?;
    if orphans.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(run_log::table.filter(run_log::run_id.eq_any(orphans))).execute(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::job_run::{NewJobRun, insert};
    use crate::domain::ids::{GroupId, JobId};
    use crate::domain::policy::{RunStatus, TriggerKind};
    use crate::testing::storage_test;

    fn a_run(conn: &mut AnyConnection, job_id: JobId, group_id: GroupId) -> RunId {
        insert(
            conn,
            &NewJobRun {
                job_id,
                group_id,
                first_run_id: None,
                attempt: 1,
                trigger_kind: TriggerKind::Manual,
                fire_slot_ms: None,
                scheduled_ms: 1,
                status: RunStatus::Succeeded,
                params: String::new(),
                shard_index: 0,
                shard_total: 1,
                created_ms: 1,
                workflow_node_id: None,
                node_attempt: None,
                timeout_s: None,
                env: None,
            },
        )
        .unwrap()
    }

    fn a_job(conn: &mut AnyConnection, group: &str) -> (GroupId, JobId) {
        use crate::db::job::tests::{fields, insert_group, write};
        let g = insert_group(conn, group);
        let job = crate::db::job::insert(
            conn,
            &write(g),
            &crate::db::job::NewJob {
                fields: fields(g, "j"),
                created_ms: 1,
            },
        )
        .unwrap();
        (g, job)
    }

    storage_test!(a_log_is_claimed_once_kept_and_goes_with_its_run, |conn| {
        let (g, job) = a_job(conn, "kept-logs");
        let (a, b) = (a_run(conn, job, g), a_run(conn, job, g));
        assert_eq!(claim(conn, &[a, b], 5).unwrap(), [a, b]);
        assert!(claim(conn, &[a, b], 6).unwrap().is_empty(), "claimed once");
        assert_eq!(kept(conn, a).unwrap(), None, "not kept while fetching");
        assert_eq!(release_stale(conn, 5).unwrap(), 0, "not stale yet");
        let text = "línea 1\nline 2\n".repeat(1000);
        store(conn, a, KEPT, &text, 99_999, true, 7).unwrap();
        store(conn, b, MISSING, "agent gone", 0, false, 7).unwrap();
        let log = kept(conn, a).unwrap().unwrap();
        assert_eq!(
            (log.content, log.bytes, log.truncated),
            (text, 99_999, true)
        );
        assert_eq!(kept(conn, b).unwrap(), None, "a missing log is not served");
        assert_eq!(delete_orphans(conn, 10).unwrap(), 0);
        crate::db::job_run::delete_finished_before(conn, 10, 10).unwrap();
        assert_eq!(delete_orphans(conn, 1).unwrap(), 1, "in batches");
        assert_eq!(delete_orphans(conn, 10).unwrap(), 1);
        assert_eq!(
            claim(conn, &[a], 8).unwrap(),
            [a],
            "a freed id may be claimed"
        );
    });
    storage_test!(
        logs_kept_with_a_batch_of_results_are_stored_once_each,
        |conn| {
            let (g, job) = a_job(conn, "kept-batch");
            let runs: Vec<RunId> = (0..4).map(|_| a_run(conn, job, g)).collect();
            let batch: Vec<KeptLog<'_>> = runs[..2]
                .iter()
                .map(|&id| KeptLog::new(id, "ok\n", 3, false, 5))
                .collect();
            insert_kept_all(conn, &batch).unwrap();
            // One of the next batch has a row already (claimed by a keeper): it keeps that row,
            // the others are kept.
            assert_eq!(claim(conn, &[runs[2]], 6).unwrap(), [runs[2]]);
            let next: Vec<KeptLog<'_>> = runs[1..]
                .iter()
                .map(|&id| KeptLog::new(id, "second\n", 7, true, 8))
                .collect();
            insert_kept_all(conn, &next).unwrap();
            let logs: Vec<Option<(String, i64, bool)>> = runs
                .iter()
                .map(|&id| {
                    kept(conn, id)
                        .unwrap()
                        .map(|log| (log.content, log.bytes, log.truncated))
                })
                .collect();
            assert_eq!(
                logs,
                [
                    Some(("ok\n".to_owned(), 3, false)),
                    Some(("ok\n".to_owned(), 3, false)),
                    None,
                    Some(("second\n".to_owned(), 7, true)),
                ]
            );
            insert_kept_all(conn, &[]).unwrap();
        }
    );
}
