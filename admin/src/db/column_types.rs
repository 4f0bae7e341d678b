//! How the domain's named-value enums are stored: as their names in text columns, on both
//! backends. A stored name no enum knows (a row written by a newer admin, a hand edit) is one
//! clear deserialization error here, naming the type and the value, instead of a fallback
//! that would guess.

use diesel::backend::Backend;
use diesel::deserialize::{self, FromSql};
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::Text;
use diesel::sqlite::Sqlite;

use super::MultiBackend;

use crate::domain::alert::{AlertKind, ChannelKind, EventStatus, WebhookFormat};
use crate::domain::policy::{
    AddressMode, BlockStrategy, Concurrency, HandlerType, Interpreter, Misfire, RunStatus,
    TriggerKind,
};
use crate::domain::role::Role;
use crate::domain::routing::Routing;
use crate::domain::schedule::ScheduleType;

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
);
