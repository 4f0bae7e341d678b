//! `run_report_daily`: outcome counts per UTC day and job, rebuilt from `job_run` by the report
//! monitor so the dashboard never scans the run table.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::run_report_daily;
use crate::domain::ids::JobId;
use crate::error::Error;

#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Default,
    Queryable,
    Selectable,
    Insertable,
    AsChangeset,
    serde::Serialize,
    utoipa::ToSchema,
)]
#[diesel(table_name = run_report_daily)]
pub struct DailyRow {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub job_id: JobId,
    pub succeeded: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub killed: i64,
    pub lost: i64,
    pub skipped: i64,
    pub in_flight: i64,
    pub updated_ms: i64,
}

/// Replaces the rows of `day` with `rows` (the day's full recount).
pub fn replace_day(conn: &mut AnyConnection, day: &str, rows: &[DailyRow]) -> Result<(), Error> {
    diesel::delete(run_report_daily::table.filter(run_report_daily::day.eq(day))).execute(conn)?;
    // A day has a row per job that ran: with thousands of jobs, a statement per row was
    // thousands of round trips on MariaDB at every recount.
    for chunk in rows.chunks(super::IN_LIST_MAX / 10) {
        crate::db_run!(conn: {
            diesel::insert_into(run_report_daily::table)
                .values(chunk)
                .execute(conn)?;
        });
    }
    Ok(())
}

/// Rows with `from_day <= day <= to_day`, optionally of some jobs only, by day then job.
pub fn list(
    conn: &mut AnyConnection,
    from_day: &str,
    to_day: &str,
    job_ids: Option<&[JobId]>,
) -> Result<Vec<DailyRow>, Error> {
    let mut query = run_report_daily::table
        .filter(run_report_daily::day.ge(from_day.to_owned()))
        .filter(run_report_daily::day.le(to_day.to_owned()))
        .select(DailyRow::as_select())
        .order((run_report_daily::day.asc(), run_report_daily::job_id.asc()))
        .into_boxed();
    if let Some(ids) = job_ids {
        query = query.filter(run_report_daily::job_id.eq_any(ids.to_vec()));
    }
    Ok(query.load(conn)?)
}

/// Removes days before `before_day`.
pub fn delete_before(conn: &mut AnyConnection, before_day: &str) -> Result<usize, Error> {
    Ok(diesel::delete(
        run_report_daily::table.filter(run_report_daily::day.lt(before_day.to_owned())),
    )
    .execute(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    storage_test!(a_day_is_replaced_whole, |conn| {
        let row = |day: &str, job_id, succeeded| DailyRow {
            day: day.into(),
            job_id,
            succeeded,
            updated_ms: 1,
            ..Default::default()
        };
        replace_day(conn, "2026-11-21", &[row("2026-11-21", JobId(1), 3)]).unwrap();
        replace_day(
            conn,
            "2026-11-22",
            &[
                row("2026-11-22", JobId(1), 1),
                row("2026-11-22", JobId(2), 5),
            ],
        )
        .unwrap();
        replace_day(conn, "2026-11-22", &[row("2026-11-22", JobId(1), 2)]).unwrap();
        let all = list(conn, "2026-11-01", "2026-11-30", None).unwrap();
        assert_eq!(
            all.iter()
                .map(|r| (r.day.as_str(), r.job_id, r.succeeded))
                .collect::<Vec<_>>(),
            vec![("2026-11-21", JobId(1), 3), ("2026-11-22", JobId(1), 2)]
        );
        assert_eq!(
            list(conn, "2026-11-22", "2026-11-22", Some(&[JobId(2)]))
                .unwrap()
                .len(),
            0
        );
        assert_eq!(delete_before(conn, "2026-11-22").unwrap(), 1);
        // More rows than one statement carries: every one stored.
        let many: Vec<DailyRow> = (1..=120)
            .map(|job| row("2026-11-23", JobId(job), job))
            .collect();
        replace_day(conn, "2026-11-23", &many).unwrap();
        assert_eq!(list(conn, "2026-11-23", "2026-11-23", None).unwrap(), many);
    });
}
