//! `job_script`: every saved version of a script job's source, for history and roll back.

use diesel::prelude::*;

use super::AnyConnection;
use super::schema::job_script;
use crate::domain::ids::JobId;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = job_script)]
pub struct JobScript {
    pub id: i64,
    pub job_id: JobId,
    pub version: i32,
    pub source: String,
    pub interpreter: String,
    pub note: String,
    pub created_by: String,
    pub created_ms: i64,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = job_script)]
pub struct NewJobScript<'a> {
    pub job_id: JobId,
    pub version: i32,
    pub source: &'a str,
    pub interpreter: &'a str,
    pub note: &'a str,
    pub created_by: &'a str,
    pub created_ms: i64,
}

/// The versions of a job's script, newest first, without their sources' bodies trimmed.
pub fn list_for_job(conn: &mut AnyConnection, job_id: JobId) -> Result<Vec<JobScript>, Error> {
    Ok(job_script::table
        .filter(job_script::job_id.eq(job_id))
        .order(job_script::version.desc())
        .select(JobScript::as_select())
        .load(conn)?)
}

/// # Errors
/// `NotFound` when the job has no such version.
pub fn get_version(
    conn: &mut AnyConnection,
    job_id: JobId,
    version: i32,
) -> Result<JobScript, Error> {
    job_script::table
        .filter(job_script::job_id.eq(job_id))
        .filter(job_script::version.eq(version))
        .select(JobScript::as_select())
        .first(conn)
        .optional()?
        .ok_or(Error::NotFound("script version"))
}

pub fn latest_version(conn: &mut AnyConnection, job_id: JobId) -> Result<i32, Error> {
    let max: Option<i32> = job_script::table
        .filter(job_script::job_id.eq(job_id))
        .select(diesel::dsl::max(job_script::version))
        .first(conn)?;
    Ok(max.unwrap_or(0))
}

/// Stores a new version; the `(job_id, version)` key makes two concurrent saves of the same
/// version a `Conflict` instead of a lost update.
pub fn insert(conn: &mut AnyConnection, new: &NewJobScript<'_>) -> Result<(), Error> {
    diesel::insert_into(job_script::table)
        .values(new)
        .execute(conn)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::job::{self, tests::fields, tests::insert_group, tests::write};
    use crate::testing::storage_test;

    storage_test!(versions_are_kept_in_order_and_unique, |conn| {
        let g = insert_group(conn, "g");
        let job_id = job::insert(
            conn,
            &write(g),
            &job::NewJob {
                fields: fields(g, "j"),
                created_ms: 1,
            },
        )
        .unwrap();
        assert_eq!(latest_version(conn, job_id).unwrap(), 0);
        for (v, src) in [(1, "echo one"), (2, "echo two")] {
            insert(
                conn,
                &NewJobScript {
                    job_id,
                    version: v,
                    source: src,
                    interpreter: "bash",
                    note: "",
                    created_by: "t",
                    created_ms: 1,
                },
            )
            .unwrap();
        }
        assert_eq!(latest_version(conn, job_id).unwrap(), 2);
        let versions: Vec<i32> = list_for_job(conn, job_id)
            .unwrap()
            .iter()
            .map(|s| s.version)
            .collect();
        assert_eq!(versions, vec![2, 1]);
        assert_eq!(get_version(conn, job_id, 1).unwrap().source, "echo one");
        assert!(matches!(
            get_version(conn, job_id, 9),
            Err(Error::NotFound(_))
        ));
        let again = NewJobScript {
            job_id,
            version: 2,
            source: "x",
            interpreter: "sh",
            note: "",
            created_by: "t",
            created_ms: 1,
        };
        assert!(matches!(insert(conn, &again), Err(Error::Conflict { .. })));
        job::delete(conn, &write(g), job_id).unwrap();
        assert!(
            list_for_job(conn, job_id).unwrap().is_empty(),
            "versions go with their job"
        );
    });
}
