//! `audit_log`: who changed what, from where, with the before and after JSON. Rows are
//! written in the same transaction as the change they describe.

use diesel::prelude::*;

use super::schema::audit_log;
use super::{AnyConnection, Page};
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = audit_log)]
pub struct AuditLog {
    pub id: i64,
    pub at_ms: i64,
    pub actor_kind: String,
    pub actor_id: Option<i64>,
    pub actor_name: String,
    pub ip: String,
    pub action: String,
    pub object_type: String,
    pub object_id: String,
    pub before_json: Option<String>,
    pub after_json: Option<String>,
    pub request_id: String,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = audit_log)]
pub struct NewAuditLog<'a> {
    pub at_ms: i64,
    pub actor_kind: &'a str,
    pub actor_id: Option<i64>,
    pub actor_name: &'a str,
    pub ip: &'a str,
    pub action: &'a str,
    pub object_type: &'a str,
    pub object_id: &'a str,
    pub before_json: Option<&'a str>,
    pub after_json: Option<&'a str>,
    pub request_id: &'a str,
}

#[derive(Debug, Default, Clone)]
pub struct AuditFilter {
    pub actor_name: Option<String>,
    pub action: Option<String>,
    pub object_type: Option<String>,
    pub object_id: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

pub fn insert(conn: &mut AnyConnection, new: &NewAuditLog<'_>) -> Result<(), Error> {
    diesel::insert_into(audit_log::table)
        .values(new)
        .execute(conn)?;
    Ok(())
}

fn filtered(filter: &AuditFilter) -> audit_log::BoxedQuery<'static, super::MultiBackend> {
    let mut query = audit_log::table.into_boxed();
    if let Some(v) = &filter.actor_name {
        query = query.filter(audit_log::actor_name.eq(v.clone()));
    }
    if let Some(v) = &filter.action {
        query = query.filter(audit_log::action.eq(v.clone()));
    }
    if let Some(v) = &filter.object_type {
        query = query.filter(audit_log::object_type.eq(v.clone()));
    }
    if let Some(v) = &filter.object_id {
        query = query.filter(audit_log::object_id.eq(v.clone()));
    }
    if let Some(v) = filter.from_ms {
        query = query.filter(audit_log::at_ms.ge(v));
    }
    if let Some(v) = filter.to_ms {
        query = query.filter(audit_log::at_ms.lt(v));
    }
    query
}

/// Newest first.
pub fn list(
    conn: &mut AnyConnection,
    filter: &AuditFilter,
    page: Page,
) -> Result<Vec<AuditLog>, Error> {
    Ok(filtered(filter)
        .select(AuditLog::as_select())
        .order(audit_log::id.desc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?)
}

pub fn count(conn: &mut AnyConnection, filter: &AuditFilter) -> Result<i64, Error> {
    Ok(filtered(filter).count().get_result(conn)?)
}

/// Deletes up to `limit` entries written before `before_ms`; returns how many.
pub fn delete_before(conn: &mut AnyConnection, before_ms: i64, limit: i64) -> Result<usize, Error> {
    let ids: Vec<i64> = audit_log::table
        .filter(audit_log::at_ms.lt(before_ms))
        .select(audit_log::id)
        .order(audit_log::id)
        .limit(limit)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(audit_log::table.filter(audit_log::id.eq_any(ids))).execute(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    storage_test!(audit_rows_filter_newest_first, |conn| {
        for (i, action) in ["job.create", "job.update", "user.create"]
            .iter()
            .enumerate()
        {
            insert(
                conn,
                &NewAuditLog {
                    at_ms: i as i64,
                    actor_kind: "user",
                    actor_id: Some(1),
                    actor_name: "admin",
                    ip: "127.0.0.1",
                    action,
                    object_type: action.split('.').next().unwrap(),
                    object_id: "1",
                    before_json: None,
                    after_json: Some("{}"),
                    request_id: "r",
                },
            )
            .unwrap();
        }
        let jobs = AuditFilter {
            object_type: Some("job".into()),
            ..Default::default()
        };
        let rows = list(conn, &jobs, Page::default()).unwrap();
        assert_eq!(
            rows.iter().map(|r| r.action.as_str()).collect::<Vec<_>>(),
            vec!["job.update", "job.create"]
        );
        assert_eq!(count(conn, &AuditFilter::default()).unwrap(), 3);
    });

    storage_test!(
        retention_removes_entries_before_the_cut_in_batches,
        |conn| {
            for at_ms in [1, 2, 3, 10, 11] {
                insert(
                    conn,
                    &NewAuditLog {
                        at_ms,
                        actor_kind: "user",
                        actor_id: Some(1),
                        actor_name: "admin",
                        ip: "127.0.0.1",
                        action: "job.update",
                        object_type: "job",
                        object_id: "1",
                        before_json: None,
                        after_json: None,
                        request_id: "r",
                    },
                )
                .unwrap();
            }
            assert_eq!(delete_before(conn, 10, 2).unwrap(), 2);
            assert_eq!(delete_before(conn, 10, 2).unwrap(), 1);
            assert_eq!(delete_before(conn, 10, 2).unwrap(), 0);
            let left: Vec<i64> = list(conn, &AuditFilter::default(), Page::default())
                .unwrap()
                .iter()
                .map(|r| r.at_ms)
                .collect();
            assert_eq!(left, vec![11, 10]);
        }
    );
}
