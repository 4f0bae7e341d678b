//! `alert_channel`: where alerts go — an email recipient list or a webhook URL.

use diesel::prelude::*;

use super::schema::alert_channel;
use super::{AnyConnection, last_insert_id};
use crate::domain::alert::{ChannelKind, WebhookFormat};
use crate::domain::ids::ChannelId;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = alert_channel)]
pub struct AlertChannel {
    pub id: ChannelId,
    pub name: String,
    /// `email` or `webhook`.
    pub kind: ChannelKind,
    /// Webhooks: `generic`, `dingtalk`, `feishu`, `slack` or `wecom`.
    pub format: Option<WebhookFormat>,
    /// Comma-separated recipients, or the webhook URL.
    pub target: String,
    /// Signing secret (DingTalk/Feishu) or HMAC key (generic webhooks). Never shown.
    pub secret: Option<String>,
    pub enabled: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// Every column a user sets; shared by insert and update.
#[derive(Debug, Clone, PartialEq, Insertable, AsChangeset)]
#[diesel(table_name = alert_channel, treat_none_as_null = true)]
pub struct ChannelFields {
    pub name: String,
    pub kind: ChannelKind,
    pub format: Option<WebhookFormat>,
    pub target: String,
    pub secret: Option<String>,
    pub enabled: bool,
    pub updated_ms: i64,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = alert_channel)]
pub struct NewChannel {
    #[diesel(embed)]
    pub fields: ChannelFields,
    pub created_ms: i64,
}

/// # Errors
/// `NotFound` when no channel has this id.
pub fn get(conn: &mut AnyConnection, id: ChannelId) -> Result<AlertChannel, Error> {
    find(conn, id)?.ok_or(Error::NotFound("alert channel"))
}

pub fn find(conn: &mut AnyConnection, id: ChannelId) -> Result<Option<AlertChannel>, Error> {
    Ok(alert_channel::table
        .find(id)
        .select(AlertChannel::as_select())
        .first(conn)
        .optional()?)
}

pub fn find_by_name(conn: &mut AnyConnection, name: &str) -> Result<Option<AlertChannel>, Error> {
    Ok(alert_channel::table
        .filter(alert_channel::name.eq(name))
        .select(AlertChannel::as_select())
        .first(conn)
        .optional()?)
}

/// Every channel, by id (a deployment has a handful).
pub fn list(conn: &mut AnyConnection) -> Result<Vec<AlertChannel>, Error> {
    Ok(alert_channel::table
        .select(AlertChannel::as_select())
        .order(alert_channel::id.asc())
        .limit(1_000)
        .load(conn)?)
}

/// The channels among `ids` (missing ones are left out).
pub fn by_ids(conn: &mut AnyConnection, ids: &[ChannelId]) -> Result<Vec<AlertChannel>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(alert_channel::table
        .filter(alert_channel::id.eq_any(ids.to_vec()))
        .select(AlertChannel::as_select())
        .order(alert_channel::id.asc())
        .load(conn)?)
}

fn name_conflict(err: diesel::result::Error) -> Error {
    match Error::from(err) {
        Error::Conflict { .. } => {
            Error::conflict("name", "an alert channel with this name already exists")
        }
        other => other,
    }
}

/// # Errors
/// `Conflict` on `name` when the name is taken.
pub fn insert(conn: &mut AnyConnection, new: &NewChannel) -> Result<ChannelId, Error> {
    diesel::insert_into(alert_channel::table)
        .values(new)
        .execute(conn)
        .map_err(name_conflict)?;
    Ok(ChannelId(last_insert_id(conn)?))
}

/// # Errors
/// `NotFound`, or `Conflict` on `name`.
pub fn update(
    conn: &mut AnyConnection,
    id: ChannelId,
    fields: &ChannelFields,
) -> Result<(), Error> {
    let n = diesel::update(alert_channel::table.find(id))
        .set(fields)
        .execute(conn)
        .map_err(name_conflict)?;
    if n == 0 {
        return Err(Error::NotFound("alert channel"));
    }
    Ok(())
}

pub fn delete(conn: &mut AnyConnection, id: ChannelId) -> Result<(), Error> {
    let n = diesel::delete(alert_channel::table.find(id)).execute(conn)?;
    if n == 0 {
        return Err(Error::NotFound("alert channel"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::storage_test;

    pub(crate) fn sample(name: &str) -> NewChannel {
        NewChannel {
            fields: ChannelFields {
                name: name.into(),
                kind: ChannelKind::Webhook,
                format: Some(WebhookFormat::Generic),
                target: "http://127.0.0.1:1/hook".into(),
                secret: None,
                enabled: true,
                updated_ms: 1,
            },
            created_ms: 1,
        }
    }

    storage_test!(channel_crud_and_unique_name, |conn| {
        let id = insert(conn, &sample("ops")).unwrap();
        let dup = insert(conn, &sample("ops")).unwrap_err();
        assert_eq!(dup.field(), Some("name"), "{dup:?}");
        let mut fields = sample("ops2").fields;
        fields.secret = Some("s".into());
        update(conn, id, &fields).unwrap();
        let row = get(conn, id).unwrap();
        assert_eq!(
            (row.name.as_str(), row.secret.as_deref()),
            ("ops2", Some("s"))
        );
        assert_eq!(by_ids(conn, &[id, ChannelId(999)]).unwrap().len(), 1);
        assert_eq!(list(conn).unwrap().len(), 1);
        delete(conn, id).unwrap();
        assert!(matches!(get(conn, id), Err(Error::NotFound(_))));
    });
}
