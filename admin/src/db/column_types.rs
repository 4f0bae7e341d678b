//! How the domain's named-value enums are stored: as their names in text columns, on both
//! backends. A stored name no enum knows (a row written by a newer admin, a hand edit) is one
//! clear deserialization error here, naming the type and the value, instead of a fallback
//! that would guess.

use diesel::backend::Backend;
use diesel::deserialize::{self, FromSql};
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::{BigInt, Text};
use diesel::sqlite::Sqlite;

use super::MultiBackend;

use crate::domain::alert::{AlertKind, ChannelKind, EventStatus, WebhookFormat};
use crate::domain::id_list::CommaList;
use crate::domain::ids::{ChannelId, GroupId, JobId, RunId, WorkflowId, WorkflowRunId};
use crate::domain::policy::{
    AddressMode, BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire, RunStatus,
    TriggerKind,
};
use crate::domain::role::Role;
use crate::domain::routing::Routing;
use crate::domain::schedule::ScheduleType;
use crate::domain::workflow::{NodeStatus, WorkflowStatus};

macro_rules! text_columns {
    ($($ty:ident),+ $(,)?) => {$(
        impl<DB> FromSql<Text, DB> for $ty
        where
            DB: Backend,
            String: FromSql<Text, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> deserialize::Result<Self> {
                let stored = String::from_sql(bytes)?;
                stored
                    .parse()
                    .map_err(|e: String| format!("stored {}: {e}", stringify!($ty)).into())
            }
        }

        impl ToSql<Text, Sqlite> for $ty {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
                out.set_value(self.as_str());
                Ok(IsNull::No)
            }
        }

        impl ToSql<Text, MultiBackend> for $ty {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, MultiBackend>) -> serialize::Result {
                // The connection enum's backend hands the value to the active backend's impl.
                out.set_value((Text, self));
                Ok(IsNull::No)
            }
        }

        #[cfg(feature = "mysql")]
        impl ToSql<Text, diesel::mysql::Mysql> for $ty {
            fn to_sql<'b>(
                &'b self,
                out: &mut Output<'b, '_, diesel::mysql::Mysql>,
            ) -> serialize::Result {
                <str as ToSql<Text, diesel::mysql::Mysql>>::to_sql(self.as_str(), out)
            }
        }
    )+};
}

text_columns!(
    AddressMode,
    AlertKind,
    BlockStrategy,
    ChannelKind,
    Concurrency,
    EventStatus,
    HandlerType,
    Interpreter,
    Misfire,
    Role,
    Routing,
    RunStatus,
    ScheduleType,
    TriggerKind,
    WebhookFormat,
    NodeStatus,
    WorkflowStatus,
);

/// Ids are the integers they wrap: each backend's own `i64` conversion does the work.
macro_rules! id_columns {
    ($($ty:ident),+ $(,)?) => {$(
        impl<DB> FromSql<BigInt, DB> for $ty
        where
            DB: Backend,
            i64: FromSql<BigInt, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> deserialize::Result<Self> {
                i64::from_sql(bytes).map($ty)
            }
        }

        impl<DB> ToSql<BigInt, DB> for $ty
        where
            DB: Backend,
            i64: ToSql<BigInt, DB>,
        {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, DB>) -> serialize::Result {
                self.0.to_sql(out)
            }
        }
    )+};
}

id_columns!(ChannelId, GroupId, JobId, RunId, WorkflowId, WorkflowRunId);

impl<DB, T> FromSql<Text, DB> for CommaList<T>
where
    DB: Backend,
    String: FromSql<Text, DB>,
    T: std::str::FromStr,
{
    fn from_sql(bytes: DB::RawValue<'_>) -> deserialize::Result<Self> {
        let stored = String::from_sql(bytes)?;
        CommaList::parse(&stored).map_err(|part| {
            format!(
                "stored list of {}: not an item: {part}",
                std::any::type_name::<T>()
            )
            .into()
        })
    }
}

/// Each list is written as its comma-joined text; one impl per item type, since the
/// multi-connection backend hands the value on to the active backend's impl by its type.
macro_rules! list_columns {
    ($($item:ty),+ $(,)?) => {$(
        impl ToSql<Text, Sqlite> for CommaList<$item> {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
                out.set_value(self.to_text());
                Ok(IsNull::No)
            }
        }

        impl ToSql<Text, MultiBackend> for CommaList<$item> {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, MultiBackend>) -> serialize::Result {
                out.set_value((Text, self));
                Ok(IsNull::No)
            }
        }

        #[cfg(feature = "mysql")]
        impl ToSql<Text, diesel::mysql::Mysql> for CommaList<$item> {
            fn to_sql<'b>(
                &'b self,
                out: &mut Output<'b, '_, diesel::mysql::Mysql>,
            ) -> serialize::Result {
                use std::io::Write;
                out.write_all(self.to_text().as_bytes())?;
                Ok(IsNull::No)
            }
        }
    )+};
}

list_columns!(ChannelId, JobId, String);

#[cfg(test)]
mod tests {
    use diesel::prelude::*;

    use crate::db::job::tests::{fields, insert_group, write};
    use crate::db::job::{self, NewJob};
    use crate::testing::storage_test;

    storage_test!(a_stored_value_no_type_knows_is_one_clear_error, |conn| {
        let g = insert_group(conn, "g");
        let id = job::insert(
            conn,
            &write(g),
            &NewJob {
                fields: fields(g, "j"),
                created_ms: 1,
            },
        )
        .unwrap();
        for (column, junk, named) in [
            ("children", "3,x", "`x` in `3,x`"),
            ("routing", "sideways", "`sideways`"),
        ] {
            diesel::sql_query(format!(
                "UPDATE job SET {column} = '{junk}' WHERE id = {id}"
            ))
            .execute(conn)
            .unwrap();
            let err = format!("{:?}", job::get(conn, id).unwrap_err());
            assert!(err.contains(named), "{column}: {err}");
            diesel::sql_query(format!(
                "UPDATE job SET children = '', routing = 'first' WHERE id = {id}"
            ))
            .execute(conn)
            .unwrap();
        }
        assert!(job::get(conn, id).is_ok());
    });
}
