//! The audit record: who did what to which object, from where, with before/after JSON.
//! Services call [`record`] inside the transaction of the change, so the row and the change
//! land together or not at all. Storage is `db::audit_log`.

use serde::Serialize;

use crate::auth::rbac::Actor;
use crate::db::{AnyConnection, audit_log};
use crate::error::Error;

/// One change to record.
#[derive(Debug)]
pub struct Entry<'a> {
    /// `object_type.verb`, e.g. `job.update`.
    pub action: &'a str,
    pub object_type: &'a str,
    pub object_id: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

fn to_json<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::Internal(anyhow::anyhow!("audit json: {e}")))
}

impl<'a> Entry<'a> {
    pub fn new(action: &'a str, object_type: &'a str, object_id: impl ToString) -> Self {
        Self {
            action,
            object_type,
            object_id: object_id.to_string(),
            before: None,
            after: None,
        }
    }

    /// # Errors
    /// `Internal` if the value cannot be serialised.
    pub fn before<T: Serialize>(mut self, value: &T) -> Result<Self, Error> {
        self.before = Some(to_json(value)?);
        Ok(self)
    }

    /// # Errors
    /// `Internal` if the value cannot be serialised.
    pub fn after<T: Serialize>(mut self, value: &T) -> Result<Self, Error> {
        self.after = Some(to_json(value)?);
        Ok(self)
    }
}

/// Writes the audit row for `entry`, attributed to `actor`.
///
/// # Errors
/// Database errors; the caller's transaction then rolls back the change too.
pub fn record(
    conn: &mut AnyConnection,
    actor: &Actor,
    now_ms: i64,
    entry: Entry<'_>,
) -> Result<(), Error> {
    audit_log::insert(
        conn,
        &audit_log::NewAuditLog {
            at_ms: now_ms,
            actor_kind: actor.kind.as_str(),
            actor_id: actor.user_id,
            actor_name: &actor.name,
            ip: &actor.ip,
            action: entry.action,
            object_type: entry.object_type,
            object_id: &entry.object_id,
            before_json: entry.before.as_deref(),
            after_json: entry.after.as_deref(),
            request_id: &actor.request_id,
        },
    )
}
