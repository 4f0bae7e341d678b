//! Prepared statements kept on their connection where diesel would prepare them afresh each
//! time, looked up by their SQL text.
//!
//! Diesel prepares raw SQL fragments, statements with an `IN (…)` list (each length is new
//! SQL) and every `UPDATE` (a changeset of `Option`s can change its SQL while its Rust type
//! stays the same) at each execution: on MySQL two round trips (prepare, execute) instead of
//! one, on SQLite a parse. At 100 fires/s that was 11 % of the admin's CPU (BENCHMARKS.md,
//! issue 17), since every run's claim, trigger answer and result is an `UPDATE`. Keyed by their
//! SQL text, statements that differ in text never share a prepared statement, so keeping any is
//! exact; keep only those whose SQL takes a few shapes (fixed-length lists, a few optional
//! columns): each shape is one prepared statement per connection for its life.

use diesel::backend::Backend;
use diesel::expression::{AppearsOnTable, Expression};
use diesel::query_builder::{AsChangeset, AstPass, QueryFragment, QueryId};
use diesel::sql_types::BoolOrNullableBool;
use diesel::{QueryResult, RunQueryDsl, Table};

/// A query kept prepared on its connection. It works for loads only: `execute` hands diesel the
/// statement by reference, where this wrapper's answer is not asked (an update: [`update`]).
#[derive(Debug, Clone, Copy)]
pub struct Prepared<Q>(Q);

/// `.prepared()` on a query: see [`Prepared`].
pub trait Prepare: Sized {
    fn prepared(self) -> Prepared<Self> {
        Prepared(self)
    }
}

impl<Q> Prepare for Q {}

impl<Q, B> QueryFragment<B> for Prepared<Q>
where
    B: Backend,
    Q: QueryFragment<B>,
{
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, B>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    // The cache key is the SQL text (no static query id below), so any statement is safe to
    // keep: two that differ in text never share a prepared statement.
    fn is_safe_to_cache_prepared(&self, _backend: &B) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q> QueryId for Prepared<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: diesel::query_builder::Query> diesel::query_builder::Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}

impl<Q, C> RunQueryDsl<C> for Prepared<Q> {}

/// `UPDATE table SET changes WHERE filter`, its prepared statement kept: diesel's own update
/// refuses keeping from inside, where a wrapper cannot answer for it. The filter must not hold
/// an `IN` list (`eq_any`), which refuses too; spell two values with `or`.
pub fn update<T, V, W>(
    table: T,
    changes: V,
    filter: W,
) -> PreparedUpdate<T::FromClause, V::Changeset, W>
where
    T: Table,
    V: AsChangeset<Target = T>,
    W: AppearsOnTable<T> + Expression,
    W::SqlType: BoolOrNullableBool,
{
    PreparedUpdate {
        table: table.from_clause(),
        changes: changes.as_changeset(),
        filter,
    }
}

#[derive(Debug, Clone)]
pub struct PreparedUpdate<F, V, W> {
    table: F,
    changes: V,
    filter: W,
}

impl<T, V, W> QueryId for PreparedUpdate<T, V, W> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<DB, F, V, W> QueryFragment<DB> for PreparedUpdate<F, V, W>
where
    DB: Backend,
    F: QueryFragment<DB>,
    V: QueryFragment<DB>,
    W: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.table.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        self.changes.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        self.filter.walk_ast(out.reborrow())
    }
}

impl<T, V, W, Conn> RunQueryDsl<Conn> for PreparedUpdate<T, V, W> {}

#[cfg(test)]
mod tests {
    use diesel::prelude::*;

    use super::Prepare;
    use crate::db::AnyConnection;
    use crate::db::schema::job_run;
    use crate::domain::ids::RunId;
    use crate::domain::policy::RunStatus;
    use crate::testing::storage_test;

    type Kept = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

    fn pending_run(conn: &mut AnyConnection, scheduled_ms: i64) -> RunId {
        use crate::db::job_run::{NewJobRun, insert};
        use crate::domain::ids::{GroupId, JobId};
        use crate::domain::policy::TriggerKind;
        insert(
            conn,
            &NewJobRun {
                job_id: JobId(1),
                group_id: GroupId(1),
                first_run_id: None,
                attempt: 1,
                trigger_kind: TriggerKind::Api,
                fire_slot_ms: None,
                scheduled_ms,
                status: RunStatus::Pending,
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

    /// The SQL of each statement the connection keeps from now on, as it keeps it.
    fn kept_statements(conn: &mut AnyConnection) -> Kept {
        let kept = Kept::default();
        let seen = kept.clone();
        diesel::connection::Connection::set_instrumentation(
            conn,
            move |event: diesel::connection::InstrumentationEvent<'_>| {
                if let diesel::connection::InstrumentationEvent::CacheQuery { sql, .. } = event {
                    seen.lock().unwrap().push(sql.to_owned());
                }
            },
        );
        kept
    }

    storage_test!(a_kept_update_changes_what_diesels_would, |conn| {
        let id = pending_run(conn, 5);
        let kept = kept_statements(conn);
        // The same statement twice: the second use runs the kept statement with new binds.
        for (from, to) in [
            (RunStatus::Pending, RunStatus::Running),
            (RunStatus::Running, RunStatus::Failed),
        ] {
            let changed = crate::db::prepared::update(
                job_run::table,
                job_run::status.eq(to),
                job_run::id.eq(id).and(job_run::status.eq(from)),
            )
            .execute(conn)
            .unwrap();
            assert_eq!(changed, 1);
        }
        let unchanged = crate::db::prepared::update(
            job_run::table,
            job_run::status.eq(RunStatus::Running),
            job_run::id
                .eq(id)
                .and(job_run::status.eq(RunStatus::Pending)),
        )
        .execute(conn)
        .unwrap();
        assert_eq!(unchanged, 0, "the filter holds");
        let statuses: Vec<RunStatus> = job_run::table
            .filter(job_run::status.eq_any([RunStatus::Failed, RunStatus::Lost]))
            .select(job_run::status)
            .prepared()
            .load(conn)
            .unwrap();
        assert_eq!(statuses, vec![RunStatus::Failed]);
        let kept = kept.lock().unwrap().clone();
        assert_eq!(
            (
                kept.iter().filter(|sql| sql.starts_with("UPDATE")).count(),
                kept.iter().filter(|sql| sql.starts_with("SELECT")).count()
            ),
            (1, 1),
            "the update prepared once and kept, the select with its list kept: {kept:?}"
        );
    });

    storage_test!(
        lists_padded_to_a_few_lengths_are_kept_and_match_each_row_once,
        |conn| {
            use crate::db::job_run::get_all;
            let ids: Vec<RunId> = (0..6).map(|i| pending_run(conn, 5 + i)).collect();
            let kept = kept_statements(conn);
            // Three ids go out as a list of four (the last repeated), six as a list of eight: each
            // row comes once all the same.
            for some in [&ids[..3], &ids[3..], &ids[..]] {
                let mut runs: Vec<RunId> =
                    get_all(conn, some).unwrap().iter().map(|r| r.id).collect();
                runs.sort_unstable();
                assert_eq!(runs, some);
            }
            let kept = kept.lock().unwrap().clone();
            assert_eq!(kept.len(), 2, "one kept select per length: {kept:#?}");
            assert!(kept[0].ends_with("IN (?, ?, ?, ?))"), "{}", kept[0]);
        }
    );
}
