//! `alert_event`: the alert outbox and its history. A row is written in the transaction that
//! makes its run final (or its group lose its last agent); the delivery worker claims it with a
//! compare-and-set on `status`, so each event is sent by one admin.

use diesel::prelude::*;

use super::schema::alert_event;
use super::{AnyConnection, Page, last_insert_id};
use crate::domain::alert::{AlertKind, EventStatus};
use crate::domain::ids::{ChannelId, GroupId, JobId, RunId};
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = alert_event)]
pub struct AlertEvent {
    pub id: i64,
    pub kind: AlertKind,
    pub job_id: Option<JobId>,
    /// `None` for channel test messages.
    pub group_id: Option<GroupId>,
    pub run_id: Option<RunId>,
    pub channel_id: ChannelId,
    pub dedupe_key: String,
    pub title: String,
    pub body: String,
    pub status: EventStatus,
    pub attempts: i32,
    pub next_attempt_ms: i64,
    /// When the current `sending` claim was taken.
    pub claimed_ms: Option<i64>,
    pub last_error: Option<String>,
    pub created_ms: i64,
    pub sent_ms: Option<i64>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = alert_event)]
pub struct NewEvent {
    pub kind: AlertKind,
    pub job_id: Option<JobId>,
    pub group_id: Option<GroupId>,
    pub run_id: Option<RunId>,
    pub channel_id: ChannelId,
    pub dedupe_key: String,
    pub title: String,
    pub body: String,
    pub status: EventStatus,
    pub attempts: i32,
    pub next_attempt_ms: i64,
    pub last_error: Option<String>,
    pub created_ms: i64,
    pub sent_ms: Option<i64>,
}

#[derive(Debug, Default, Clone)]
pub struct EventFilter {
    /// `None` = every group (and the test messages, which have none).
    pub visible_groups: Option<Vec<GroupId>>,
    pub job_id: Option<JobId>,
    pub status: Option<String>,
    pub kind: Option<String>,
}

/// # Errors
/// `NotFound` when no event has this id.
pub fn get(conn: &mut AnyConnection, id: i64) -> Result<AlertEvent, Error> {
    alert_event::table
        .find(id)
        .select(AlertEvent::as_select())
        .first(conn)
        .optional()?
        .ok_or(Error::NotFound("alert event"))
}

pub fn insert(conn: &mut AnyConnection, new: &NewEvent) -> Result<i64, Error> {
    diesel::insert_into(alert_event::table)
        .values(new)
        .execute(conn)?;
    Ok(last_insert_id(conn)?)
}

/// Whether an event with `key` was created at or after `since_ms` and not suppressed itself:
/// the quiet window counts from the last alert that went (or is going) out.
pub fn recently_raised(conn: &mut AnyConnection, key: &str, since_ms: i64) -> Result<bool, Error> {
    let n: i64 = alert_event::table
        .filter(alert_event::dedupe_key.eq(key))
        .filter(alert_event::created_ms.ge(since_ms))
        .filter(alert_event::status.ne(EventStatus::Suppressed))
        .count()
        .get_result(conn)?;
    Ok(n > 0)
}

fn filtered(filter: &EventFilter) -> alert_event::BoxedQuery<'static, super::MultiBackend> {
    let mut query = alert_event::table.into_boxed();
    if let Some(ids) = &filter.visible_groups {
        query = query.filter(alert_event::group_id.eq_any(ids.clone()));
    }
    if let Some(job_id) = filter.job_id {
        query = query.filter(alert_event::job_id.eq(job_id));
    }
    if let Some(status) = &filter.status {
        query = query.filter(alert_event::status.eq(status.clone()));
    }
    if let Some(kind) = &filter.kind {
        query = query.filter(alert_event::kind.eq(kind.clone()));
    }
    query
}

/// Newest first.
pub fn list(
    conn: &mut AnyConnection,
    filter: &EventFilter,
    page: Page,
) -> Result<Vec<AlertEvent>, Error> {
    Ok(filtered(filter)
        .select(AlertEvent::as_select())
        .order(alert_event::id.desc())
        .limit(page.limit)
        .offset(page.offset)
        .load(conn)?)
}

pub fn count(conn: &mut AnyConnection, filter: &EventFilter) -> Result<i64, Error> {
    Ok(filtered(filter).count().get_result(conn)?)
}

/// Pending events due at `now_ms`, oldest due first.
pub fn due_ids(conn: &mut AnyConnection, now_ms: i64, limit: i64) -> Result<Vec<i64>, Error> {
    Ok(alert_event::table
        .filter(alert_event::status.eq(EventStatus::Pending))
        .filter(alert_event::next_attempt_ms.le(now_ms))
        .order(alert_event::next_attempt_ms.asc())
        .limit(limit)
        .select(alert_event::id)
        .load(conn)?)
}

/// Takes a due pending event for sending (counting the attempt); returns whether this call took
/// it. Two admins may race for it: the conditional UPDATE lets exactly one win.
pub fn claim(conn: &mut AnyConnection, id: i64, now_ms: i64) -> Result<bool, Error> {
    Ok(diesel::update(
        alert_event::table
            .find(id)
            .filter(alert_event::status.eq(EventStatus::Pending))
            .filter(alert_event::next_attempt_ms.le(now_ms)),
    )
    .set((
        alert_event::status.eq(EventStatus::Sending),
        alert_event::attempts.eq(alert_event::attempts + 1),
        alert_event::claimed_ms.eq(Some(now_ms)),
    ))
    .execute(conn)?
        == 1)
}

/// Puts events whose sender vanished mid-send (claimed before `before_ms`) back to pending.
pub fn requeue_stuck(conn: &mut AnyConnection, before_ms: i64) -> Result<usize, Error> {
    Ok(diesel::update(
        alert_event::table
            .filter(alert_event::status.eq(EventStatus::Sending))
            .filter(alert_event::claimed_ms.lt(before_ms)),
    )
    .set((
        alert_event::status.eq(EventStatus::Pending),
        alert_event::claimed_ms.eq(None::<i64>),
        alert_event::last_error.eq(Some(
            "the admin sending this alert stopped before it finished; sending again",
        )),
    ))
    .execute(conn)?)
}

pub fn mark_sent(
    conn: &mut AnyConnection,
    id: i64,
    attempts: i32,
    now_ms: i64,
) -> Result<bool, Error> {
    let target = alert_event::table
        .find(id)
        .filter(alert_event::status.eq(EventStatus::Sending))
        .filter(alert_event::attempts.eq(attempts));
    Ok(diesel::update(target)
        .set((
            alert_event::status.eq(EventStatus::Sent),
            alert_event::sent_ms.eq(Some(now_ms)),
            alert_event::claimed_ms.eq(None::<i64>),
        ))
        .execute(conn)?
        == 1)
}

/// Ends a failed attempt: back to pending until `retry_at_ms`, or `failed` when it is `None`.
pub fn mark_unsent(
    conn: &mut AnyConnection,
    id: i64,
    attempts: i32,
    retry_at_ms: Option<i64>,
    error: &str,
) -> Result<bool, Error> {
    let target = alert_event::table
        .find(id)
        .filter(alert_event::status.eq(EventStatus::Sending))
        .filter(alert_event::attempts.eq(attempts));
    let error: String = error.chars().take(1_000).collect();
    let n = match retry_at_ms {
        Some(at) => diesel::update(target)
            .set((
                alert_event::status.eq(EventStatus::Pending),
                alert_event::next_attempt_ms.eq(at),
                alert_event::claimed_ms.eq(None::<i64>),
                alert_event::last_error.eq(Some(error)),
            ))
            .execute(conn)?,
        None => diesel::update(target)
            .set((
                alert_event::status.eq(EventStatus::Failed),
                alert_event::claimed_ms.eq(None::<i64>),
                alert_event::last_error.eq(Some(error)),
            ))
            .execute(conn)?,
    };
    Ok(n == 1)
}

/// Gives up the unsent events of a channel being deleted.
pub fn fail_unsent_of_channel(
    conn: &mut AnyConnection,
    channel_id: ChannelId,
    reason: &str,
) -> Result<usize, Error> {
    Ok(diesel::update(
        alert_event::table
            .filter(alert_event::channel_id.eq(channel_id))
            .filter(alert_event::status.eq_any([EventStatus::Pending, EventStatus::Sending])),
    )
    .set((
        alert_event::status.eq(EventStatus::Failed),
        alert_event::claimed_ms.eq(None::<i64>),
        alert_event::last_error.eq(Some(reason)),
    ))
    .execute(conn)?)
}

/// Deletes up to `limit` events created before `before_ms` that are settled (sent, failed or
/// suppressed); one still waiting to be sent stays whatever its age. Returns how many.
pub fn delete_settled_before(
    conn: &mut AnyConnection,
    before_ms: i64,
    limit: i64,
) -> Result<usize, Error> {
    let ids: Vec<i64> = alert_event::table
        .filter(alert_event::created_ms.lt(before_ms))
        .filter(alert_event::status.eq_any([
            EventStatus::Sent,
            EventStatus::Failed,
            EventStatus::Suppressed,
        ]))
        .select(alert_event::id)
        .order(alert_event::id)
        .limit(limit)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(alert_event::table.filter(alert_event::id.eq_any(ids))).execute(conn)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    fn event(key: &str, status: &str, created_ms: i64) -> NewEvent {
        let status = status.parse().unwrap();
        NewEvent {
            kind: AlertKind::RunFailed,
            job_id: Some(JobId(1)),
            group_id: Some(GroupId(1)),
            run_id: Some(RunId(1)),
            channel_id: ChannelId(1),
            dedupe_key: key.into(),
            title: "t".into(),
            body: "b".into(),
            status,
            attempts: 0,
            next_attempt_ms: created_ms,
            last_error: None,
            created_ms,
            sent_ms: None,
        }
    }

    storage_test!(claims_are_taken_once_and_end_once, |conn| {
        let id = insert(conn, &event("k", "pending", 1_000)).unwrap();
        assert!(due_ids(conn, 999, 10).unwrap().is_empty(), "not due yet");
        assert_eq!(due_ids(conn, 1_000, 10).unwrap(), vec![id]);
        assert!(claim(conn, id, 1_000).unwrap());
        assert!(!claim(conn, id, 1_000).unwrap(), "a second claim loses");
        assert!(mark_unsent(conn, id, 1, Some(5_000), "HTTP 500").unwrap());
        assert!(
            !mark_unsent(conn, id, 1, Some(5_000), "again").unwrap(),
            "ended once"
        );
        let row = get(conn, id).unwrap();
        assert_eq!(
            (row.status.as_str(), row.attempts, row.next_attempt_ms),
            ("pending", 1, 5_000)
        );
        assert!(claim(conn, id, 5_000).unwrap());
        assert_eq!(requeue_stuck(conn, 5_000).unwrap(), 0, "claimed just now");
        assert_eq!(requeue_stuck(conn, 5_001).unwrap(), 1);
        assert!(
            !mark_sent(conn, id, 2, 6_000).unwrap(),
            "requeued: the old claim is void"
        );
        assert!(claim(conn, id, 6_000).unwrap());
        assert!(mark_sent(conn, id, 3, 6_000).unwrap());
        let row = get(conn, id).unwrap();
        assert_eq!((row.status.as_str(), row.sent_ms), ("sent", Some(6_000)));
    });

    storage_test!(quiet_window_ignores_suppressed_events, |conn| {
        insert(conn, &event("k", "sent", 1_000)).unwrap();
        insert(conn, &event("k", "suppressed", 5_000)).unwrap();
        assert!(recently_raised(conn, "k", 1_000).unwrap());
        assert!(!recently_raised(conn, "k", 1_001).unwrap());
        assert!(!recently_raised(conn, "other", 0).unwrap());
        let filter = EventFilter {
            status: Some("suppressed".into()),
            ..Default::default()
        };
        assert_eq!(count(conn, &filter).unwrap(), 1);
        assert_eq!(
            list(conn, &EventFilter::default(), Page::default()).unwrap()[0].status,
            EventStatus::Suppressed
        );
        assert_eq!(
            fail_unsent_of_channel(conn, ChannelId(1), "gone").unwrap(),
            0
        );
    });

    storage_test!(retention_removes_old_settled_events_only, |conn| {
        let mut kept = Vec::new();
        for status in ["sent", "failed", "suppressed"] {
            insert(conn, &event("old", status, 1_000)).unwrap();
            kept.push(insert(conn, &event("new", status, 5_000)).unwrap());
        }
        // Waiting to be sent, however old: never removed.
        kept.push(insert(conn, &event("old", "pending", 1_000)).unwrap());
        kept.push(insert(conn, &event("old", "sending", 1_000)).unwrap());
        assert_eq!(delete_settled_before(conn, 5_000, 2).unwrap(), 2, "a batch");
        assert_eq!(delete_settled_before(conn, 5_000, 2).unwrap(), 1);
        assert_eq!(delete_settled_before(conn, 5_000, 2).unwrap(), 0);
        let mut left: Vec<i64> = list(conn, &EventFilter::default(), Page::default())
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        left.sort_unstable();
        kept.sort_unstable();
        assert_eq!(left, kept);
    });
}
